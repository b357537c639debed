//! [`FakeGpus`]: an in-memory [`GpuControl`] for pure unit tests of code above the trait
//! (no library, no files). Behaviour worth testing end to end — NVML semantics, state shared
//! between processes, error injection — lives in the `fake-nvml` library and is exercised
//! through [`crate::NvmlGpu`] instead.

use std::sync::{Mutex, MutexGuard};

use crate::control::{AppClocksMhz, GpuControl, GpuProcess, MemoryBytes, PowerLimitRangeMw, ProcessSmUtilPct, ProcessUtilization, UtilizationPct};
use crate::error::{GpuError, GpuErrorKind};

/// One simulated GPU; fields are public so tests can set up any situation.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeGpu {
    pub name: String,
    pub uuid: String,
    pub pci_bus_id: String,
    /// N of `/dev/nvidiaN`; the NVML index unless a test permutes it.
    pub minor: u32,
    /// `Some(kind)`: reading the minor number fails with it (a GPU without a device file).
    pub refuse_minor: Option<GpuErrorKind>,
    pub memory_clocks_mhz: Vec<u32>,
    pub graphics_clocks_mhz: Vec<u32>,
    pub default_clocks_mhz: AppClocksMhz,
    pub app_clocks_mhz: AppClocksMhz,
    pub locked_clocks_mhz: Option<(u32, u32)>,
    pub power_mw: u32,
    pub energy_mj: u64,
    pub power_limit_mw: u32,
    pub power_limit_range_mw: PowerLimitRangeMw,
    pub default_power_limit_mw: u32,
    /// The support matrix: `Some(kind)` makes the control's set and reset calls fail with it
    /// (`NotSupported` on a generation without it, `NoPermission` for a restricted one).
    pub refuse_application: Option<GpuErrorKind>,
    pub refuse_locked: Option<GpuErrorKind>,
    pub refuse_power_limit: Option<GpuErrorKind>,
    pub utilization: UtilizationPct,
    pub memory: MemoryBytes,
    /// Processes with a compute context.
    pub processes: Vec<GpuProcess>,
    /// Per-process SM samples; `None`: the driver has none (`NotSupported`).
    pub process_sm_pct: Option<Vec<ProcessSmUtilPct>>,
}

impl FakeGpu {
    /// A V100-SXM2-32GB at rest.
    pub fn v100(index: u32) -> FakeGpu {
        let graphics: Vec<u32> = (0..187).map(|k| (1530.0 - 7.5 * f64::from(k)).floor() as u32).collect();
        let defaults = AppClocksMhz { memory_mhz: 877, graphics_mhz: 1312 };
        FakeGpu {
            name: "Tesla V100-SXM2-32GB".into(),
            uuid: format!("GPU-fa4e0000-0000-4000-8000-{index:012x}"),
            pci_bus_id: format!("00000000:{:02X}:00.0", 0x10 + index),
            minor: index,
            refuse_minor: None,
            memory_clocks_mhz: vec![877],
            graphics_clocks_mhz: graphics,
            default_clocks_mhz: defaults,
            app_clocks_mhz: defaults,
            locked_clocks_mhz: None,
            power_mw: 41_000,
            energy_mj: 0,
            power_limit_mw: 300_000,
            power_limit_range_mw: PowerLimitRangeMw { min_mw: 150_000, max_mw: 300_000 },
            default_power_limit_mw: 300_000,
            refuse_application: None,
            refuse_locked: None,
            refuse_power_limit: None,
            utilization: UtilizationPct { gpu_pct: 0, memory_pct: 0 },
            memory: MemoryBytes { used_bytes: 0, total_bytes: 32 << 30 },
            processes: Vec::new(),
            process_sm_pct: None,
        }
    }
}

impl FakeGpu {
    /// An A100-SXM4-40GB at rest (clocks 1410 down to 210 MHz in 15 MHz steps).
    pub fn a100(index: u32) -> FakeGpu {
        let defaults = AppClocksMhz { memory_mhz: 1215, graphics_mhz: 1410 };
        FakeGpu {
            name: "NVIDIA A100-SXM4-40GB".into(),
            memory_clocks_mhz: vec![1215],
            graphics_clocks_mhz: (0..81).map(|k| 1410 - 15 * k).collect(),
            default_clocks_mhz: defaults,
            app_clocks_mhz: defaults,
            power_limit_mw: 400_000,
            power_limit_range_mw: PowerLimitRangeMw { min_mw: 100_000, max_mw: 400_000 },
            default_power_limit_mw: 400_000,
            memory: MemoryBytes { used_bytes: 0, total_bytes: 40 << 30 },
            ..FakeGpu::v100(index)
        }
    }

    /// An H100-SXM5-80GB at rest: no application clocks (`NotSupported`).
    pub fn h100(index: u32) -> FakeGpu {
        let defaults = AppClocksMhz { memory_mhz: 2619, graphics_mhz: 1980 };
        FakeGpu {
            name: "NVIDIA H100 80GB HBM3".into(),
            memory_clocks_mhz: vec![2619],
            graphics_clocks_mhz: (0..110).map(|k| 1980 - 15 * k).collect(),
            default_clocks_mhz: defaults,
            app_clocks_mhz: defaults,
            power_limit_mw: 700_000,
            power_limit_range_mw: PowerLimitRangeMw { min_mw: 200_000, max_mw: 700_000 },
            default_power_limit_mw: 700_000,
            refuse_application: Some(GpuErrorKind::NotSupported),
            memory: MemoryBytes { used_bytes: 0, total_bytes: 80 << 30 },
            ..FakeGpu::v100(index)
        }
    }

    /// The graphics clock a busy GPU targets: the top of a locked range, else the application
    /// clock.
    pub fn target_graphics_clock_mhz(&self) -> u32 {
        self.locked_clocks_mhz.map_or(self.app_clocks_mhz.graphics_mhz, |(_, max)| max)
    }
}

fn refused(gpu: u32, call: &'static str, kind: Option<GpuErrorKind>) -> Result<(), GpuError> {
    match kind {
        None => Ok(()),
        Some(kind) => Err(GpuError::new(Some(gpu), call, kind, format!("{kind:?} (simulated support matrix)"))),
    }
}

/// In-memory GPUs.
#[derive(Debug, Default)]
pub struct FakeGpus {
    gpus: Mutex<Vec<FakeGpu>>,
}

impl FakeGpus {
    pub fn new(gpus: Vec<FakeGpu>) -> FakeGpus {
        FakeGpus { gpus: Mutex::new(gpus) }
    }

    /// `count` V100s.
    pub fn v100s(count: u32) -> FakeGpus {
        FakeGpus::new((0..count).map(FakeGpu::v100).collect())
    }

    fn lock(&self) -> MutexGuard<'_, Vec<FakeGpu>> {
        self.gpus.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads or changes one GPU (for test setup and assertions).
    pub fn with_gpu<T>(&self, gpu: u32, f: impl FnOnce(&mut FakeGpu) -> T) -> Result<T, GpuError> {
        let mut gpus = self.lock();
        let g = gpus
            .get_mut(gpu as usize)
            .ok_or_else(|| GpuError::new(Some(gpu), "nvmlDeviceGetHandleByIndex_v2", GpuErrorKind::InvalidArgument, "no such GPU"))?;
        Ok(f(g))
    }

    fn invalid(gpu: u32, call: &'static str, reason: String) -> GpuError {
        GpuError::new(Some(gpu), call, GpuErrorKind::InvalidArgument, reason)
    }
}

impl GpuControl for FakeGpus {
    fn device_count(&self) -> Result<u32, GpuError> {
        Ok(self.lock().len() as u32)
    }
    fn name(&self, gpu: u32) -> Result<String, GpuError> {
        self.with_gpu(gpu, |g| g.name.clone())
    }
    fn uuid(&self, gpu: u32) -> Result<String, GpuError> {
        self.with_gpu(gpu, |g| g.uuid.clone())
    }
    fn pci_bus_id(&self, gpu: u32) -> Result<String, GpuError> {
        self.with_gpu(gpu, |g| g.pci_bus_id.clone())
    }
    fn minor_number(&self, gpu: u32) -> Result<u32, GpuError> {
        self.with_gpu(gpu, |g| match g.refuse_minor {
            Some(kind) => Err(GpuError::new(Some(gpu), "nvmlDeviceGetMinorNumber", kind, "refused by the test")),
            None => Ok(g.minor),
        })?
    }
    fn cpu_affinity(&self, gpu: u32) -> Result<Vec<u32>, GpuError> {
        self.with_gpu(gpu, |_| Vec::new())
    }
    fn nvlink_peers(&self, gpu: u32) -> Result<Vec<String>, GpuError> {
        self.with_gpu(gpu, |_| Vec::new())
    }
    fn supported_memory_clocks_mhz(&self, gpu: u32) -> Result<Vec<u32>, GpuError> {
        self.with_gpu(gpu, |g| g.memory_clocks_mhz.clone())
    }
    fn supported_graphics_clocks_mhz(&self, gpu: u32, memory_clock_mhz: u32) -> Result<Vec<u32>, GpuError> {
        self.with_gpu(gpu, |g| g.memory_clocks_mhz.contains(&memory_clock_mhz).then(|| g.graphics_clocks_mhz.clone()))?
            .ok_or_else(|| GpuError::new(Some(gpu), "nvmlDeviceGetSupportedGraphicsClocks", GpuErrorKind::NotFound, format!("memory clock {memory_clock_mhz} MHz is not supported")))
    }
    fn default_application_clocks_mhz(&self, gpu: u32) -> Result<AppClocksMhz, GpuError> {
        self.with_gpu(gpu, |g| g.default_clocks_mhz)
    }
    fn application_clocks_mhz(&self, gpu: u32) -> Result<AppClocksMhz, GpuError> {
        self.with_gpu(gpu, |g| g.app_clocks_mhz)
    }
    fn set_application_clocks_mhz(&self, gpu: u32, clocks: AppClocksMhz) -> Result<(), GpuError> {
        refused(gpu, "nvmlDeviceSetApplicationsClocks", self.with_gpu(gpu, |g| g.refuse_application)?)?;
        self.with_gpu(gpu, |g| {
            let ok = g.memory_clocks_mhz.contains(&clocks.memory_mhz) && g.graphics_clocks_mhz.contains(&clocks.graphics_mhz);
            ok.then(|| g.app_clocks_mhz = clocks)
        })?
        .ok_or_else(|| Self::invalid(gpu, "nvmlDeviceSetApplicationsClocks", format!("unsupported clocks {clocks:?}")))
    }
    fn reset_application_clocks(&self, gpu: u32) -> Result<(), GpuError> {
        refused(gpu, "nvmlDeviceResetApplicationsClocks", self.with_gpu(gpu, |g| g.refuse_application)?)?;
        self.with_gpu(gpu, |g| g.app_clocks_mhz = g.default_clocks_mhz)
    }
    fn set_locked_clocks_mhz(&self, gpu: u32, min_mhz: u32, max_mhz: u32) -> Result<(), GpuError> {
        refused(gpu, "nvmlDeviceSetGpuLockedClocks", self.with_gpu(gpu, |g| g.refuse_locked)?)?;
        if min_mhz > max_mhz {
            return Err(Self::invalid(gpu, "nvmlDeviceSetGpuLockedClocks", format!("min {min_mhz} > max {max_mhz}")));
        }
        self.with_gpu(gpu, |g| g.locked_clocks_mhz = Some((min_mhz, max_mhz)))
    }
    fn reset_locked_clocks(&self, gpu: u32) -> Result<(), GpuError> {
        refused(gpu, "nvmlDeviceResetGpuLockedClocks", self.with_gpu(gpu, |g| g.refuse_locked)?)?;
        self.with_gpu(gpu, |g| g.locked_clocks_mhz = None)
    }
    fn current_graphics_clock_mhz(&self, gpu: u32) -> Result<u32, GpuError> {
        self.with_gpu(gpu, |g| g.locked_clocks_mhz.map_or(g.app_clocks_mhz.graphics_mhz, |(_, max)| max))
    }
    fn power_usage_mw(&self, gpu: u32) -> Result<u32, GpuError> {
        self.with_gpu(gpu, |g| g.power_mw)
    }
    fn total_energy_mj(&self, gpu: u32) -> Result<u64, GpuError> {
        self.with_gpu(gpu, |g| g.energy_mj)
    }
    fn power_limit_mw(&self, gpu: u32) -> Result<u32, GpuError> {
        self.with_gpu(gpu, |g| g.power_limit_mw)
    }
    fn power_limit_range_mw(&self, gpu: u32) -> Result<PowerLimitRangeMw, GpuError> {
        self.with_gpu(gpu, |g| g.power_limit_range_mw)
    }
    fn default_power_limit_mw(&self, gpu: u32) -> Result<u32, GpuError> {
        self.with_gpu(gpu, |g| g.default_power_limit_mw)
    }
    fn set_power_limit_mw(&self, gpu: u32, limit_mw: u32) -> Result<(), GpuError> {
        refused(gpu, "nvmlDeviceSetPowerManagementLimit", self.with_gpu(gpu, |g| g.refuse_power_limit)?)?;
        let range = self.with_gpu(gpu, |g| g.power_limit_range_mw)?;
        if !(range.min_mw..=range.max_mw).contains(&limit_mw) {
            return Err(Self::invalid(gpu, "nvmlDeviceSetPowerManagementLimit", format!("{limit_mw} mW out of range")));
        }
        self.with_gpu(gpu, |g| g.power_limit_mw = limit_mw)
    }
    fn utilization_pct(&self, gpu: u32) -> Result<UtilizationPct, GpuError> {
        self.with_gpu(gpu, |g| g.utilization)
    }
    fn memory_used_total_bytes(&self, gpu: u32) -> Result<MemoryBytes, GpuError> {
        self.with_gpu(gpu, |g| g.memory)
    }
    fn compute_processes(&self, gpu: u32) -> Result<Vec<GpuProcess>, GpuError> {
        self.with_gpu(gpu, |g| g.processes.clone())
    }
    fn process_sm_utilization_pct(&self, gpu: u32, _since_unix_us: u64) -> Result<Vec<ProcessSmUtilPct>, GpuError> {
        self.with_gpu(gpu, |g| g.process_sm_pct.clone())?.ok_or_else(|| {
            GpuError::new(Some(gpu), "nvmlDeviceGetProcessUtilization", GpuErrorKind::NotSupported, "no per-process samples")
        })
    }

    fn process_utilization(&self, gpu: u32, _since_us: u64) -> Result<Vec<ProcessUtilization>, GpuError> {
        self.with_gpu(gpu, |_| Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu_freq::{SLURM_DEFAULT_GPU_FREQ_DEF, parse_gpu_freq, resolve_application_clocks};

    #[test]
    fn gpu_freq_resolves_against_a_v100() {
        let gpus = FakeGpus::v100s(2);
        let req = parse_gpu_freq("low").unwrap().or_defaults(&SLURM_DEFAULT_GPU_FREQ_DEF);
        let clocks = resolve_application_clocks(&req, &gpus, 1).unwrap();
        assert_eq!(clocks, AppClocksMhz { memory_mhz: 877, graphics_mhz: 135 });
        let req = parse_gpu_freq("medium,memory=low").unwrap();
        // 187 clocks: element 93 of 1530 - floor(7.5 k) is 1530 - 697.5 -> 832
        assert_eq!(resolve_application_clocks(&req, &gpus, 0).unwrap().graphics_mhz, 832);
        let req = parse_gpu_freq("1300").unwrap();
        assert_eq!(resolve_application_clocks(&req, &gpus, 0).unwrap().graphics_mhz, 1305);
        let e = resolve_application_clocks(&req, &gpus, 5).unwrap_err();
        assert_eq!(e.gpu, Some(5));
    }
}
