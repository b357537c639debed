//! The one error type of GPU control: which GPU, which NVML call, and why. Implementations
//! map their library's errors into it; callers (Slurm plugins) log it and carry on — it is
//! never a reason to panic.

use std::fmt;

/// What kind of failure, for callers that react differently (skip an unsupported feature,
/// report a permission problem, give up on a lost GPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuErrorKind {
    /// The GPU or driver does not have this feature.
    NotSupported,
    /// The call needs root (or the admin disabled it for users).
    NoPermission,
    /// A value was out of range, e.g. a clock the GPU does not support.
    InvalidArgument,
    /// No such GPU, clock or entry.
    NotFound,
    /// The GPU fell off the bus or needs a reset.
    GpuLost,
    /// The library could not be loaded or initialised.
    Library,
    /// The library lacks the function.
    MissingFunction,
    /// Anything else.
    Other,
}

/// A failed GPU operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuError {
    /// Index of the GPU, `None` for calls about no particular GPU.
    pub gpu: Option<u32>,
    /// The NVML function that failed, e.g. `nvmlDeviceSetGpuLockedClocks`.
    pub call: &'static str,
    pub kind: GpuErrorKind,
    /// Human-readable reason, from the library.
    pub reason: String,
}

impl GpuError {
    pub fn new(gpu: Option<u32>, call: &'static str, kind: GpuErrorKind, reason: impl Into<String>) -> GpuError {
        GpuError { gpu, call, kind, reason: reason.into() }
    }
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.gpu {
            Some(gpu) => write!(f, "GPU {gpu}: {}: {}", self.call, self.reason),
            None => write!(f, "{}: {}", self.call, self.reason),
        }
    }
}

impl std::error::Error for GpuError {}
