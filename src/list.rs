//! Iteration over Slurm's `List` (the iterator holds the list's own mutex while it lives).

use std::marker::PhantomData;

use crate::api::{Api, call};
use crate::sys;

pub(crate) struct ListIter<'a> {
    api: &'static Api,
    it: sys::energy_list_itr_t,
    _lock: PhantomData<&'a ()>,
}

impl<'a> ListIter<'a> {
    /// # Safety
    /// `list` must be NULL or a valid List whose items stay valid for `'a`.
    pub(crate) unsafe fn new(api: &'static Api, list: sys::energy_list_t) -> Option<ListIter<'a>> {
        if list.is_null() {
            return None;
        }
        // SAFETY: valid list (contract); the iterator is destroyed in Drop.
        let it = unsafe { call!(api, list_iterator_create(list)) };
        Some(ListIter { api, it, _lock: PhantomData })
    }
}

impl Iterator for ListIter<'_> {
    type Item = *mut std::ffi::c_void;
    fn next(&mut self) -> Option<Self::Item> {
        // SAFETY: the iterator is valid until Drop.
        let item = unsafe { call!(self.api, list_next(self.it)) };
        if item.is_null() { None } else { Some(item) }
    }
}

impl Drop for ListIter<'_> {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        unsafe { call!(self.api, list_iterator_destroy(self.it)) }
    }
}
