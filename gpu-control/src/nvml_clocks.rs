//! The complete list of supported graphics clocks, which `nvml-wrapper` 0.13 cannot give.
//!
//! `Device::supported_graphics_clocks` asks for 128 entries and treats
//! `NVML_ERROR_INSUFFICIENT_SIZE` as success, so on a GPU with more clocks (a V100 has 187) it
//! returns 128 entries — the highest ones, or zeros if the driver wrote nothing. `low` and
//! `medium` of `--gpu-freq` would then resolve wrongly. This module calls the same NVML
//! function through the library nvml-wrapper loaded, with a buffer NVML says is large enough.
//!
//! This is the crate's only `unsafe` code: a raw C call at the FFI boundary.

use std::ffi::c_uint;

use nvml_wrapper::error::{NvmlError, nvml_try};
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE as INSUFFICIENT_SIZE;

/// First buffer size; NVML reports the real size if this is short.
const INITIAL_CAPACITY: usize = 256;

pub(crate) fn supported_graphics_clocks_mhz(
    nvml: &Nvml,
    device: &Device<'_>,
    memory_clock_mhz: u32,
) -> Result<Vec<u32>, NvmlError> {
    let function = nvml
        .lib()
        .nvmlDeviceGetSupportedGraphicsClocks
        .as_ref()
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    // SAFETY: `handle` only returns the raw handle; it stays valid while `device` borrows the
    // initialised `nvml`, which outlives this function, and it is passed only back to the
    // library it came from.
    let handle = unsafe { device.handle() };
    let mut capacity = INITIAL_CAPACITY;
    // Twice is enough (the list does not change); a third round guards against a driver that
    // reports a size and then wants more.
    for _ in 0..3 {
        let mut clocks: Vec<c_uint> = vec![0; capacity];
        let mut count = capacity as c_uint;
        // SAFETY: `function` is nvmlDeviceGetSupportedGraphicsClocks from the loaded NVML with
        // the C signature nvml-wrapper-sys declares; `clocks` has room for `count` c_uints and
        // NVML writes at most that many; `count` is a valid in/out c_uint.
        let ret = unsafe { function(handle, memory_clock_mhz, &mut count, clocks.as_mut_ptr()) };
        if ret == INSUFFICIENT_SIZE {
            capacity = (count as usize).max(capacity * 2);
            continue;
        }
        nvml_try(ret)?;
        clocks.truncate((count as usize).min(capacity));
        return Ok(clocks);
    }
    Err(NvmlError::InsufficientSize(Some(capacity)))
}
