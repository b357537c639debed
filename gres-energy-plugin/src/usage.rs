//! A process's GPU memory and utilisation, as Slurm 24.11's `gpu_p_usage_read` reports them into
//! a step's TRES usage (`gres/gpumem` in bytes, `gres/gpuutil` in percent summed over GPUs) when
//! `AccountingStorageTRES` tracks them. Slurm 22.05 has no such call.
//!
//! Reads NVML only; never fails a step: a GPU whose NVML calls fail is skipped (the caller logs).

use gpu_control::{GpuControl, GpuError};

/// What one read found for one process, over every GPU of the node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessUsage {
    /// GPU memory the process holds, bytes.
    pub memory_bytes: u64,
    /// SM utilisation of its newest samples, percent, summed over GPUs.
    pub sm_util_pct: u64,
    /// Timestamp of the newest utilisation sample read (microseconds), or the `since_us` given.
    pub newest_sample_us: u64,
}

/// Memory (when `memory`) and utilisation samples newer than `since_us` (when `utilisation`) of
/// process `pid` on each of the node's `gpu_count` GPUs. Errors of single GPUs are returned
/// beside the sums.
pub fn read(ctrl: &dyn GpuControl, gpu_count: u32, pid: u32, memory: bool, utilisation: bool, since_us: u64) -> (ProcessUsage, Vec<GpuError>) {
    let mut usage = ProcessUsage { newest_sample_us: since_us, ..ProcessUsage::default() };
    let mut errors = Vec::new();
    for gpu in 0..gpu_count {
        if memory {
            match ctrl.compute_processes(gpu) {
                Ok(procs) => {
                    usage.memory_bytes += procs.iter().filter(|p| p.pid == pid).filter_map(|p| p.used_memory_bytes).sum::<u64>();
                }
                Err(e) => errors.push(e),
            }
        }
        if utilisation {
            match ctrl.process_utilization(gpu, since_us) {
                Ok(samples) => {
                    // The newest sample of this process on this GPU.
                    if let Some(s) = samples.iter().filter(|s| s.pid == pid && s.timestamp_us > since_us).max_by_key(|s| s.timestamp_us) {
                        usage.sm_util_pct += u64::from(s.sm_util_pct);
                        usage.newest_sample_us = usage.newest_sample_us.max(s.timestamp_us);
                    }
                }
                Err(e) => errors.push(e),
            }
        }
    }
    (usage, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_control::{GpuProcess, ProcessUtilization};

    /// FakeGpus reports no processes; this wraps it with fixed ones.
    struct WithProcs {
        inner: gpu_control::FakeGpus,
        procs: Vec<(u32, GpuProcess)>,
        util: Vec<(u32, ProcessUtilization)>,
        broken_gpu: Option<u32>,
    }

    macro_rules! fwd {
        ($($name:ident($($a:ident: $t:ty),*) -> $r:ty;)*) => {
            $(fn $name(&self, $($a: $t),*) -> Result<$r, GpuError> { self.inner.$name($($a),*) })*
        };
    }

    impl GpuControl for WithProcs {
        fwd! {
            device_count() -> u32; name(g: u32) -> String; uuid(g: u32) -> String; pci_bus_id(g: u32) -> String;
            minor_number(g: u32) -> u32; cpu_affinity(g: u32) -> Vec<u32>; nvlink_peers(g: u32) -> Vec<String>;
            supported_memory_clocks_mhz(g: u32) -> Vec<u32>; supported_graphics_clocks_mhz(g: u32, m: u32) -> Vec<u32>;
            default_application_clocks_mhz(g: u32) -> gpu_control::AppClocksMhz; application_clocks_mhz(g: u32) -> gpu_control::AppClocksMhz;
            set_application_clocks_mhz(g: u32, c: gpu_control::AppClocksMhz) -> (); reset_application_clocks(g: u32) -> ();
            set_locked_clocks_mhz(g: u32, a: u32, b: u32) -> (); reset_locked_clocks(g: u32) -> ();
            current_graphics_clock_mhz(g: u32) -> u32; power_usage_mw(g: u32) -> u32; total_energy_mj(g: u32) -> u64;
            power_limit_mw(g: u32) -> u32; power_limit_range_mw(g: u32) -> gpu_control::PowerLimitRangeMw;
            default_power_limit_mw(g: u32) -> u32; set_power_limit_mw(g: u32, l: u32) -> ();
            utilization_pct(g: u32) -> gpu_control::UtilizationPct; memory_used_total_bytes(g: u32) -> gpu_control::MemoryBytes;
            process_sm_utilization_pct(g: u32, s: u64) -> Vec<gpu_control::ProcessSmUtilPct>;
        }
        fn compute_processes(&self, gpu: u32) -> Result<Vec<GpuProcess>, GpuError> {
            if self.broken_gpu == Some(gpu) {
                return Err(GpuError::new(Some(gpu), "nvmlDeviceGetComputeRunningProcesses_v3", gpu_control::GpuErrorKind::GpuLost, "lost"));
            }
            Ok(self.procs.iter().filter(|(g, _)| *g == gpu).map(|(_, p)| *p).collect())
        }
        fn process_utilization(&self, gpu: u32, since_us: u64) -> Result<Vec<ProcessUtilization>, GpuError> {
            Ok(self.util.iter().filter(|(g, u)| *g == gpu && u.timestamp_us > since_us).map(|(_, u)| *u).collect())
        }
    }

    fn node() -> WithProcs {
        let p = |pid, mb: u64| GpuProcess { pid, used_memory_bytes: Some(mb << 20) };
        let u = |pid, pct, t| ProcessUtilization { pid, sm_util_pct: pct, timestamp_us: t };
        WithProcs {
            inner: gpu_control::FakeGpus::v100s(2),
            procs: vec![(0, p(10, 512)), (0, p(11, 64)), (1, p(10, 256))],
            util: vec![(0, u(10, 40, 100)), (0, u(10, 70, 200)), (1, u(10, 20, 150)), (1, u(11, 99, 300))],
            broken_gpu: None,
        }
    }

    #[test]
    fn sums_one_process_over_gpus() {
        let (usage, errors) = read(&node(), 2, 10, true, true, 0);
        assert!(errors.is_empty());
        assert_eq!(usage.memory_bytes, 768 << 20);
        // Newest sample per GPU: 70 % on GPU 0, 20 % on GPU 1.
        assert_eq!(usage.sm_util_pct, 90);
        assert_eq!(usage.newest_sample_us, 200);
    }

    #[test]
    fn only_samples_after_the_last_read_count() {
        let (usage, _) = read(&node(), 2, 10, false, true, 180);
        assert_eq!(usage.sm_util_pct, 70);
        assert_eq!(usage.memory_bytes, 0, "memory not asked for");
        let (usage, _) = read(&node(), 2, 10, false, true, 200);
        assert_eq!(usage, ProcessUsage { newest_sample_us: 200, ..ProcessUsage::default() });
    }

    #[test]
    fn a_failing_gpu_is_skipped_and_reported() {
        let mut n = node();
        n.broken_gpu = Some(0);
        let (usage, errors) = read(&n, 2, 10, true, false, 0);
        assert_eq!(usage.memory_bytes, 256 << 20);
        assert_eq!(errors.len(), 1);
    }
}
