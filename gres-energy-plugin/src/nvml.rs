//! The process's one NVML handle, opened on first use and closed by the plugin's `fini`.
//!
//! Slurm's own loader dlopens `libnvidia-ml.so` before it picks `gpu/nvml`; nvml-wrapper opens
//! `libnvidia-ml.so.1` (what a driver install provides), and we fall back to
//! `libnvidia-ml.so` for installs that have only that name.

use std::path::Path;
use std::sync::{Arc, Mutex};

use gpu_control::{GpuError, NvmlGpu};

static NVML: Mutex<Option<Arc<NvmlGpu>>> = Mutex::new(None);

/// The shared handle, initialising NVML if needed.
pub fn shared() -> Result<Arc<NvmlGpu>, GpuError> {
    let mut slot = NVML.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(nvml) = slot.as_ref() {
        return Ok(Arc::clone(nvml));
    }
    let nvml = match NvmlGpu::open_default() {
        Ok(n) => n,
        Err(first) => NvmlGpu::open(Path::new("libnvidia-ml.so")).map_err(|_| first)?,
    };
    let nvml = Arc::new(nvml);
    *slot = Some(Arc::clone(&nvml));
    Ok(nvml)
}

/// Drops the shared handle (NVML shuts down when the last user lets go).
pub fn close() {
    let mut slot = NVML.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    *slot = None;
}
