//! The `GpuControl` trait: exactly the GPU operations the bundle's GPU and SPANK plugins need,
//! each with its unit in its name. NVML is one implementation ([`crate::NvmlGpu`]); tests may
//! use another ([`crate::FakeGpus`]). GPUs are addressed by NVML index.

use crate::error::GpuError;

/// Application clocks: the memory and graphics clocks a GPU targets under load, unless locked
/// clocks say otherwise. A struct, not two bare numbers, so they cannot be swapped silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AppClocksMhz {
    pub memory_mhz: u32,
    pub graphics_mhz: u32,
}

/// Utilisation over the driver's last sample period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtilizationPct {
    pub gpu_pct: u32,
    pub memory_pct: u32,
}

/// Device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBytes {
    pub used_bytes: u64,
    pub total_bytes: u64,
}

/// A process with a compute context on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuProcess {
    pub pid: u32,
    /// `None` where the driver cannot tell (Windows WDDM).
    pub used_memory_bytes: Option<u64>,
}

/// One process's share of a GPU's SM time over the driver's recent samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessSmUtilPct {
    pub pid: u32,
    pub sm_pct: u32,
}

/// One process's share of a GPU's streaming multiprocessors over NVML's last sampling window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessUtilization {
    pub pid: u32,
    /// SM (compute and 3D) utilisation, percent.
    pub sm_util_pct: u32,
    /// When the sample was taken (CPU clock, microseconds since the epoch).
    pub timestamp_us: u64,
}

/// Power limit range the driver accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerLimitRangeMw {
    pub min_mw: u32,
    pub max_mw: u32,
}

/// GPU operations of the bundle. Every call returns an error naming the GPU and the NVML call
/// instead of panicking. Implementations are shared between threads of a plugin.
pub trait GpuControl: Send + Sync {
    /// Number of GPUs the driver sees.
    fn device_count(&self) -> Result<u32, GpuError>;
    /// Product name, e.g. `Tesla V100-SXM2-32GB`.
    fn name(&self, gpu: u32) -> Result<String, GpuError>;
    /// `GPU-xxxxxxxx-...`.
    fn uuid(&self, gpu: u32) -> Result<String, GpuError>;
    /// `00000000:06:00.0`.
    fn pci_bus_id(&self, gpu: u32) -> Result<String, GpuError>;
    /// N of `/dev/nvidiaN`.
    fn minor_number(&self, gpu: u32) -> Result<u32, GpuError>;
    /// Ids of the CPUs near the GPU, ascending.
    fn cpu_affinity(&self, gpu: u32) -> Result<Vec<u32>, GpuError>;
    /// PCI bus ids of the devices at the far end of each active NVLink, one entry per link.
    fn nvlink_peers(&self, gpu: u32) -> Result<Vec<String>, GpuError>;

    /// Memory clocks the GPU supports, descending.
    fn supported_memory_clocks_mhz(&self, gpu: u32) -> Result<Vec<u32>, GpuError>;
    /// Graphics clocks supported with memory clock `memory_clock_mhz`, descending. Complete,
    /// also beyond 128 entries (a V100 has 187).
    fn supported_graphics_clocks_mhz(&self, gpu: u32, memory_clock_mhz: u32) -> Result<Vec<u32>, GpuError>;
    /// Default application graphics clock.
    fn default_graphics_clock_mhz(&self, gpu: u32) -> Result<u32, GpuError> {
        self.default_application_clocks_mhz(gpu).map(|c| c.graphics_mhz)
    }
    /// Application clocks after a reset.
    fn default_application_clocks_mhz(&self, gpu: u32) -> Result<AppClocksMhz, GpuError>;
    /// Application clocks now.
    fn application_clocks_mhz(&self, gpu: u32) -> Result<AppClocksMhz, GpuError>;
    /// Sets application clocks (root only on real GPUs). Both must be supported values.
    fn set_application_clocks_mhz(&self, gpu: u32, clocks: AppClocksMhz) -> Result<(), GpuError>;
    fn reset_application_clocks(&self, gpu: u32) -> Result<(), GpuError>;
    /// Locks the graphics clock into `[min_mhz, max_mhz]` (root only, Volta and newer).
    fn set_locked_clocks_mhz(&self, gpu: u32, min_mhz: u32, max_mhz: u32) -> Result<(), GpuError>;
    fn reset_locked_clocks(&self, gpu: u32) -> Result<(), GpuError>;
    /// Graphics clock now.
    fn current_graphics_clock_mhz(&self, gpu: u32) -> Result<u32, GpuError>;

    /// Power draw now, in mW.
    fn power_usage_mw(&self, gpu: u32) -> Result<u32, GpuError>;
    /// Energy since the driver loaded, in mJ; monotonic (Volta and newer).
    fn total_energy_mj(&self, gpu: u32) -> Result<u64, GpuError>;
    /// Power limit in force, in mW.
    fn power_limit_mw(&self, gpu: u32) -> Result<u32, GpuError>;
    fn power_limit_range_mw(&self, gpu: u32) -> Result<PowerLimitRangeMw, GpuError>;
    fn default_power_limit_mw(&self, gpu: u32) -> Result<u32, GpuError>;
    /// Sets the power limit (root only); must lie in [`Self::power_limit_range_mw`].
    fn set_power_limit_mw(&self, gpu: u32, limit_mw: u32) -> Result<(), GpuError>;

    fn utilization_pct(&self, gpu: u32) -> Result<UtilizationPct, GpuError>;
    fn memory_used_total_bytes(&self, gpu: u32) -> Result<MemoryBytes, GpuError>;
    fn compute_processes(&self, gpu: u32) -> Result<Vec<GpuProcess>, GpuError>;
    /// Per-process SM utilisation (`nvmlDeviceGetProcessUtilization`) over the driver's samples
    /// taken after `since_unix_us` (0: all it keeps): each process's mean. Drivers without
    /// per-process samples fail with `NotSupported` or `NotFound`.
    fn process_sm_utilization_pct(&self, gpu: u32, since_unix_us: u64) -> Result<Vec<ProcessSmUtilPct>, GpuError>;
    /// Per-process utilisation samples newer than `since_us` (0: all NVML keeps); none when no
    /// process used the GPU since.
    fn process_utilization(&self, gpu: u32, since_us: u64) -> Result<Vec<ProcessUtilization>, GpuError>;
}
