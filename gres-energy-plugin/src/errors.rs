//! NVML failures are logged once per step (or per daemon), GPU and call: a failing counter read
//! every poll must not flood the log, and the first one must say which GPU and which call.

use std::collections::BTreeSet;

use gpu_control::GpuError;
use slurm_bindings::Logger;

/// Which (GPU, call) pairs were already reported.
#[derive(Debug, Default)]
pub struct ErrorOnce {
    seen: BTreeSet<(Option<u32>, &'static str)>,
}

impl ErrorOnce {
    pub const fn new() -> ErrorOnce {
        ErrorOnce { seen: BTreeSet::new() }
    }

    /// Logs `e` at error level the first time its GPU and call fail; `true` if it was logged.
    /// `context` says where (`step 12.0`, `slurmd`).
    pub fn report(&mut self, log: &Logger, context: &str, e: &GpuError) -> bool {
        if !self.seen.insert((e.gpu, e.call)) {
            return false;
        }
        let gpu = e.gpu.map_or_else(|| "NVML".to_string(), |g| format!("GPU {g}"));
        log.error(&format!(
            "{context}: {gpu}: {} failed: {} (the step goes on; further failures of this call on this GPU are not logged)",
            e.call, e.reason
        ));
        true
    }

    pub fn reported(&self) -> usize {
        self.seen.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_control::GpuErrorKind;

    #[test]
    fn once_per_gpu_and_call() {
        static LOG: Logger = Logger::new("test");
        let mut once = ErrorOnce::new();
        let e = |gpu, call| GpuError::new(gpu, call, GpuErrorKind::Other, "boom");
        assert!(once.report(&LOG, "step 1.0", &e(Some(1), "nvmlDeviceGetTotalEnergyConsumption")));
        assert!(!once.report(&LOG, "step 1.0", &e(Some(1), "nvmlDeviceGetTotalEnergyConsumption")));
        assert!(once.report(&LOG, "step 1.0", &e(Some(2), "nvmlDeviceGetTotalEnergyConsumption")));
        assert!(once.report(&LOG, "step 1.0", &e(Some(1), "nvmlDeviceGetPowerUsage")));
        assert_eq!(once.reported(), 3);
    }
}
