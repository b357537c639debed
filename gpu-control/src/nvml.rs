//! [`NvmlGpu`]: [`GpuControl`] over NVIDIA's NVML through the `nvml-wrapper` crate.
//!
//! Safe by construction: `nvml-wrapper` loads `libnvidia-ml.so` at run time, checks every
//! return code and owns the init/shutdown pairing (NVML is shut down when `NvmlGpu` drops), so
//! this module has no `unsafe`. The one exception lives in [`crate::nvml_clocks`]: the
//! supported-graphics-clocks query, which nvml-wrapper 0.13 truncates at 128 entries.
//!
//! Device handles are looked up per call (`nvmlDeviceGetHandleByIndex_v2` is a table lookup in
//! the driver), so an `NvmlGpu` holds no borrowed state and can be shared between threads.

use std::ffi::OsStr;
use std::path::Path;

use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::enums::device::{GpuLockedClocksSetting, UsedGpuMemory};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use crate::control::{AppClocksMhz, GpuControl, GpuProcess, MemoryBytes, PowerLimitRangeMw, ProcessSmUtilPct, ProcessUtilization, UtilizationPct};
use crate::error::{GpuError, GpuErrorKind};
use crate::nvml_clocks;

/// CPU mask words asked of `nvmlDeviceGetCpuAffinity`: 16 x 64 bits, Linux's CPU_SETSIZE.
const CPU_MASK_WORDS: usize = 16;
/// NVML_NVLINK_MAX_LINKS
const NVLINK_MAX_LINKS: u32 = 18;

/// NVML's view of this node's GPUs.
pub struct NvmlGpu {
    nvml: Nvml,
}

pub(crate) fn kind_of(e: &NvmlError) -> GpuErrorKind {
    match e {
        NvmlError::NotSupported => GpuErrorKind::NotSupported,
        NvmlError::NoPermission => GpuErrorKind::NoPermission,
        NvmlError::InvalidArg => GpuErrorKind::InvalidArgument,
        NvmlError::NotFound => GpuErrorKind::NotFound,
        NvmlError::GpuLost | NvmlError::ResetRequired => GpuErrorKind::GpuLost,
        NvmlError::LibloadingError(_)
        | NvmlError::LibraryNotFound
        | NvmlError::DriverNotLoaded
        | NvmlError::Uninitialized
        | NvmlError::LibRmVersionMismatch => GpuErrorKind::Library,
        NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound => GpuErrorKind::MissingFunction,
        _ => GpuErrorKind::Other,
    }
}

fn err(gpu: Option<u32>, call: &'static str) -> impl FnOnce(NvmlError) -> GpuError {
    move |e| GpuError::new(gpu, call, kind_of(&e), e.to_string())
}

impl NvmlGpu {
    /// Loads `libnvidia-ml.so` from the loader's search path and initialises NVML.
    pub fn open_default() -> Result<NvmlGpu, GpuError> {
        Nvml::init().map(|nvml| NvmlGpu { nvml }).map_err(err(None, "nvmlInit_v2"))
    }

    /// Loads NVML from `lib_path` (e.g. a fake `libnvidia-ml.so.1` in tests) and initialises it.
    pub fn open(lib_path: &Path) -> Result<NvmlGpu, GpuError> {
        Nvml::builder()
            .lib_path(OsStr::new(lib_path.as_os_str()))
            .init()
            .map(|nvml| NvmlGpu { nvml })
            .map_err(err(None, "nvmlInit_v2"))
    }

    /// `None`: the default search path; `Some(path)`: that file.
    pub fn open_from(lib_path: Option<&Path>) -> Result<NvmlGpu, GpuError> {
        match lib_path {
            Some(path) => NvmlGpu::open(path),
            None => NvmlGpu::open_default(),
        }
    }

    /// Driver version string, for logs.
    pub fn driver_version(&self) -> Result<String, GpuError> {
        self.nvml.sys_driver_version().map_err(err(None, "nvmlSystemGetDriverVersion"))
    }

    fn device(&self, gpu: u32) -> Result<Device<'_>, GpuError> {
        self.nvml
            .device_by_index(gpu)
            .map_err(err(Some(gpu), "nvmlDeviceGetHandleByIndex_v2"))
    }
}

/// Several samples of one process (pid, SM %): their mean is its use over the period; first
/// appearance order.
fn mean_sm_by_pid(samples: &[(u32, u32)]) -> Vec<ProcessSmUtilPct> {
    let mut sums: Vec<(u32, u64, u64)> = Vec::new();
    for &(pid, sm) in samples {
        let sm = u64::from(sm.min(100));
        match sums.iter_mut().find(|(p, _, _)| *p == pid) {
            Some(entry) => {
                entry.1 += sm;
                entry.2 += 1;
            }
            None => sums.push((pid, sm, 1)),
        }
    }
    sums.into_iter().map(|(pid, sum, n)| ProcessSmUtilPct { pid, sm_pct: u32::try_from(sum / n.max(1)).unwrap_or(100) }).collect()
}

impl GpuControl for NvmlGpu {
    fn device_count(&self) -> Result<u32, GpuError> {
        self.nvml.device_count().map_err(err(None, "nvmlDeviceGetCount_v2"))
    }

    fn name(&self, gpu: u32) -> Result<String, GpuError> {
        self.device(gpu)?.name().map_err(err(Some(gpu), "nvmlDeviceGetName"))
    }

    fn uuid(&self, gpu: u32) -> Result<String, GpuError> {
        self.device(gpu)?.uuid().map_err(err(Some(gpu), "nvmlDeviceGetUUID"))
    }

    fn pci_bus_id(&self, gpu: u32) -> Result<String, GpuError> {
        self.device(gpu)?
            .pci_info()
            .map(|p| p.bus_id)
            .map_err(err(Some(gpu), "nvmlDeviceGetPciInfo_v3"))
    }

    fn minor_number(&self, gpu: u32) -> Result<u32, GpuError> {
        self.device(gpu)?.minor_number().map_err(err(Some(gpu), "nvmlDeviceGetMinorNumber"))
    }

    fn cpu_affinity(&self, gpu: u32) -> Result<Vec<u32>, GpuError> {
        let words = self
            .device(gpu)?
            .cpu_affinity(CPU_MASK_WORDS)
            .map_err(err(Some(gpu), "nvmlDeviceGetCpuAffinity"))?;
        let bits = std::ffi::c_ulong::BITS;
        Ok(words
            .iter()
            .enumerate()
            .flat_map(|(w, word)| {
                (0..bits).filter(move |b| word & (1 << b) != 0).map(move |b| w as u32 * bits + b)
            })
            .collect())
    }

    fn nvlink_peers(&self, gpu: u32) -> Result<Vec<String>, GpuError> {
        let device = self.device(gpu)?;
        let mut peers = Vec::new();
        for link in 0..NVLINK_MAX_LINKS {
            let nvlink = device.link_wrapper_for(link);
            match nvlink.is_active() {
                Ok(true) => {}
                // A link that does not exist on this GPU, as stock Slurm treats it.
                Ok(false) | Err(NvmlError::NotSupported | NvmlError::InvalidArg) => continue,
                Err(e) => return Err(err(Some(gpu), "nvmlDeviceGetNvLinkState")(e)),
            }
            let remote = nvlink
                .remote_pci_info()
                .map_err(err(Some(gpu), "nvmlDeviceGetNvLinkRemotePciInfo_v2"))?;
            peers.push(remote.bus_id);
        }
        Ok(peers)
    }

    fn supported_memory_clocks_mhz(&self, gpu: u32) -> Result<Vec<u32>, GpuError> {
        let mut clocks = self
            .device(gpu)?
            .supported_memory_clocks()
            .map_err(err(Some(gpu), "nvmlDeviceGetSupportedMemoryClocks"))?;
        clocks.sort_unstable_by(|a, b| b.cmp(a));
        Ok(clocks)
    }

    fn supported_graphics_clocks_mhz(&self, gpu: u32, memory_clock_mhz: u32) -> Result<Vec<u32>, GpuError> {
        let device = self.device(gpu)?;
        let mut clocks = nvml_clocks::supported_graphics_clocks_mhz(&self.nvml, &device, memory_clock_mhz)
            .map_err(err(Some(gpu), "nvmlDeviceGetSupportedGraphicsClocks"))?;
        clocks.sort_unstable_by(|a, b| b.cmp(a));
        Ok(clocks)
    }

    fn default_application_clocks_mhz(&self, gpu: u32) -> Result<AppClocksMhz, GpuError> {
        let device = self.device(gpu)?;
        let call = "nvmlDeviceGetDefaultApplicationsClock";
        Ok(AppClocksMhz {
            memory_mhz: device.default_applications_clock(Clock::Memory).map_err(err(Some(gpu), call))?,
            graphics_mhz: device.default_applications_clock(Clock::Graphics).map_err(err(Some(gpu), call))?,
        })
    }

    fn application_clocks_mhz(&self, gpu: u32) -> Result<AppClocksMhz, GpuError> {
        let device = self.device(gpu)?;
        let call = "nvmlDeviceGetApplicationsClock";
        Ok(AppClocksMhz {
            memory_mhz: device.applications_clock(Clock::Memory).map_err(err(Some(gpu), call))?,
            graphics_mhz: device.applications_clock(Clock::Graphics).map_err(err(Some(gpu), call))?,
        })
    }

    fn set_application_clocks_mhz(&self, gpu: u32, clocks: AppClocksMhz) -> Result<(), GpuError> {
        self.device(gpu)?
            .set_applications_clocks(clocks.memory_mhz, clocks.graphics_mhz)
            .map_err(err(Some(gpu), "nvmlDeviceSetApplicationsClocks"))
    }

    fn reset_application_clocks(&self, gpu: u32) -> Result<(), GpuError> {
        self.device(gpu)?
            .reset_applications_clocks()
            .map_err(err(Some(gpu), "nvmlDeviceResetApplicationsClocks"))
    }

    fn set_locked_clocks_mhz(&self, gpu: u32, min_mhz: u32, max_mhz: u32) -> Result<(), GpuError> {
        self.device(gpu)?
            .set_gpu_locked_clocks(GpuLockedClocksSetting::Numeric { min_clock_mhz: min_mhz, max_clock_mhz: max_mhz })
            .map_err(err(Some(gpu), "nvmlDeviceSetGpuLockedClocks"))
    }

    fn reset_locked_clocks(&self, gpu: u32) -> Result<(), GpuError> {
        self.device(gpu)?
            .reset_gpu_locked_clocks()
            .map_err(err(Some(gpu), "nvmlDeviceResetGpuLockedClocks"))
    }

    fn current_graphics_clock_mhz(&self, gpu: u32) -> Result<u32, GpuError> {
        self.device(gpu)?
            .clock_info(Clock::Graphics)
            .map_err(err(Some(gpu), "nvmlDeviceGetClockInfo"))
    }

    fn power_usage_mw(&self, gpu: u32) -> Result<u32, GpuError> {
        self.device(gpu)?.power_usage().map_err(err(Some(gpu), "nvmlDeviceGetPowerUsage"))
    }

    fn total_energy_mj(&self, gpu: u32) -> Result<u64, GpuError> {
        self.device(gpu)?
            .total_energy_consumption()
            .map_err(err(Some(gpu), "nvmlDeviceGetTotalEnergyConsumption"))
    }

    fn power_limit_mw(&self, gpu: u32) -> Result<u32, GpuError> {
        self.device(gpu)?
            .enforced_power_limit()
            .map_err(err(Some(gpu), "nvmlDeviceGetEnforcedPowerLimit"))
    }

    fn power_limit_range_mw(&self, gpu: u32) -> Result<PowerLimitRangeMw, GpuError> {
        self.device(gpu)?
            .power_management_limit_constraints()
            .map(|c| PowerLimitRangeMw { min_mw: c.min_limit, max_mw: c.max_limit })
            .map_err(err(Some(gpu), "nvmlDeviceGetPowerManagementLimitConstraints"))
    }

    fn default_power_limit_mw(&self, gpu: u32) -> Result<u32, GpuError> {
        self.device(gpu)?
            .power_management_limit_default()
            .map_err(err(Some(gpu), "nvmlDeviceGetPowerManagementDefaultLimit"))
    }

    fn set_power_limit_mw(&self, gpu: u32, limit_mw: u32) -> Result<(), GpuError> {
        self.device(gpu)?
            .set_power_management_limit(limit_mw)
            .map_err(err(Some(gpu), "nvmlDeviceSetPowerManagementLimit"))
    }

    fn utilization_pct(&self, gpu: u32) -> Result<UtilizationPct, GpuError> {
        self.device(gpu)?
            .utilization_rates()
            .map(|u| UtilizationPct { gpu_pct: u.gpu, memory_pct: u.memory })
            .map_err(err(Some(gpu), "nvmlDeviceGetUtilizationRates"))
    }

    fn memory_used_total_bytes(&self, gpu: u32) -> Result<MemoryBytes, GpuError> {
        self.device(gpu)?
            .memory_info()
            .map(|m| MemoryBytes { used_bytes: m.used, total_bytes: m.total })
            .map_err(err(Some(gpu), "nvmlDeviceGetMemoryInfo_v2"))
    }

    fn process_sm_utilization_pct(&self, gpu: u32, since_unix_us: u64) -> Result<Vec<ProcessSmUtilPct>, GpuError> {
        let samples = self
            .device(gpu)?
            .process_utilization_stats(since_unix_us)
            .map_err(err(Some(gpu), "nvmlDeviceGetProcessUtilization"))?;
        let pairs: Vec<(u32, u32)> = samples.iter().map(|s| (s.pid, s.sm_util)).collect();
        Ok(mean_sm_by_pid(&pairs))
    }

    fn compute_processes(&self, gpu: u32) -> Result<Vec<GpuProcess>, GpuError> {
        let processes = self
            .device(gpu)?
            .running_compute_processes()
            .map_err(err(Some(gpu), "nvmlDeviceGetComputeRunningProcesses_v3"))?;
        Ok(processes
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect())
    }

    fn process_utilization(&self, gpu: u32, since_us: u64) -> Result<Vec<ProcessUtilization>, GpuError> {
        match self.device(gpu)?.process_utilization_stats(since_us) {
            Ok(samples) => Ok(samples
                .into_iter()
                .map(|s| ProcessUtilization { pid: s.pid, sm_util_pct: s.sm_util, timestamp_us: s.timestamp })
                .collect()),
            // NVML's answer when it holds no sample newer than `since_us`.
            Err(NvmlError::NotFound) => Ok(Vec::new()),
            Err(e) => Err(err(Some(gpu), "nvmlDeviceGetProcessUtilization")(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_process_samples_average_over_the_period() {
        let got = mean_sm_by_pid(&[(7, 80), (9, 10), (7, 40), (7, 60), (9, 250)]);
        assert_eq!(got, vec![ProcessSmUtilPct { pid: 7, sm_pct: 60 }, ProcessSmUtilPct { pid: 9, sm_pct: 55 }]);
        assert!(mean_sm_by_pid(&[]).is_empty());
    }
}
