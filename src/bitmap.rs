//! Slurm's `bitstr_t`, borrowed ([`BitmapRef`]) or owned ([`Bitmap`], freed with Slurm's own
//! allocator on drop).

use std::marker::PhantomData;

use crate::api::{Api, call};
use crate::sys;

/// A bitmap inside a record; valid while the record's lock guard lives (`'a`).
#[derive(Clone, Copy)]
pub struct BitmapRef<'a> {
    api: &'static Api,
    ptr: *mut sys::bitstr_t,
    _lock: PhantomData<&'a ()>,
}

impl<'a> BitmapRef<'a> {
    /// # Safety
    /// `ptr` must be NULL or a valid bitmap that stays unchanged for `'a`.
    pub(crate) unsafe fn new(api: &'static Api, ptr: *mut sys::bitstr_t) -> Option<BitmapRef<'a>> {
        if ptr.is_null() { None } else { Some(BitmapRef { api, ptr, _lock: PhantomData }) }
    }

    pub fn len(&self) -> usize {
        // SAFETY: `ptr` is a valid bitmap for 'a (constructor contract).
        let n = unsafe { call!(self.api, bit_size(self.ptr)) };
        usize::try_from(n).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn test(&self, bit: usize) -> bool {
        if bit >= self.len() {
            return false;
        }
        // SAFETY: valid bitmap (constructor contract) and `bit` is in range.
        #[cfg(not(slurm_ge_24_11))]
        // SAFETY: see above.
        let set = unsafe { call!(self.api, bit_test(self.ptr, bit as sys::bitoff_t)) };
        #[cfg(slurm_ge_24_11)]
        // SAFETY: see above (24.11 exports bit_test as slurm_bit_test).
        let set = unsafe { call!(self.api, slurm_bit_test(self.ptr, bit as sys::bitoff_t)) };
        set != 0
    }

    /// Indices of the set bits, ascending.
    pub fn ones(&self) -> Vec<usize> {
        (0..self.len()).filter(|&i| self.test(i)).collect()
    }

    pub fn count(&self) -> usize {
        // SAFETY: valid bitmap (constructor contract).
        let n = unsafe { call!(self.api, bit_set_count(self.ptr)) };
        usize::try_from(n).unwrap_or(0)
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::bitstr_t {
        self.ptr
    }
}

/// A bitmap we allocated with Slurm's allocator (so Slurm may take ownership of it).
pub struct Bitmap {
    api: &'static Api,
    ptr: *mut sys::bitstr_t,
}

impl Bitmap {
    /// All bits clear.
    pub fn new(api: &'static Api, len: usize) -> Bitmap {
        // SAFETY: bit_alloc returns a fresh bitmap (it aborts the daemon on allocation failure,
        // like every Slurm allocation).
        let ptr = unsafe { call!(api, bit_alloc(len as sys::bitoff_t)) };
        Bitmap { api, ptr }
    }

    pub fn copy_of(src: &BitmapRef<'_>) -> Bitmap {
        // SAFETY: `src` is valid (its own contract); bit_copy allocates a new bitmap.
        let ptr = unsafe { call!(src.api, bit_copy(src.as_ptr())) };
        Bitmap { api: src.api, ptr }
    }

    pub fn set(&mut self, bit: usize) {
        if bit < self.as_ref().len() {
            // SAFETY: we own the bitmap and `bit` is in range.
            unsafe { call!(self.api, bit_set(self.ptr, bit as sys::bitoff_t)) }
        }
    }

    pub fn not(&mut self) {
        // SAFETY: we own the bitmap.
        unsafe { call!(self.api, bit_not(self.ptr)) }
    }

    /// `self |= other`; both must have the same length (Slurm asserts it).
    pub fn or(&mut self, other: &BitmapRef<'_>) -> bool {
        if other.len() != self.as_ref().len() {
            return false;
        }
        // SAFETY: both valid, same length.
        unsafe { call!(self.api, bit_or(self.ptr, other.as_ptr())) };
        true
    }

    pub fn as_ref(&self) -> BitmapRef<'_> {
        BitmapRef { api: self.api, ptr: self.ptr, _lock: PhantomData }
    }

    /// Hands the bitmap to Slurm (which frees it with `bit_free`).
    pub(crate) fn into_raw(self) -> *mut sys::bitstr_t {
        let ptr = self.ptr;
        std::mem::forget(self);
        ptr
    }

    /// Takes ownership of a bitmap Slurm allocated (NULL gives `None`).
    ///
    /// # Safety
    /// Nobody else may use or free `ptr` afterwards.
    pub(crate) unsafe fn from_raw(api: &'static Api, ptr: *mut sys::bitstr_t) -> Option<Bitmap> {
        if ptr.is_null() { None } else { Some(Bitmap { api, ptr }) }
    }
}

impl Drop for Bitmap {
    fn drop(&mut self) {
        // SAFETY: we own the bitmap; slurm_bit_free frees it and NULLs our copy of the pointer.
        unsafe { call!(self.api, slurm_bit_free(&mut self.ptr)) }
    }
}
