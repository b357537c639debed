//! GPU control for the energy-aware Slurm bundle, shared by its GPU plugin (`gpu_nvml.so`) and
//! its SPANK plugin.
//!
//! - [`GpuControl`] (in `control`): the operations the plugins need — identity, clocks,
//!   power, energy, utilisation — with units in the names (`_mhz`, `_mw`, `_mj`).
//! - [`NvmlGpu`] (in `nvml`): the implementation over NVIDIA's NVML via `nvml-wrapper`.
//! - [`FakeGpus`] (in `fake`): an in-memory implementation for unit tests.
//! - [`gpu_freq`]: Slurm's `--gpu-freq` grammar and its resolution to clocks.
//! - [`gres_type`]: the GRES type name Slurm gives a GPU found through NVML.
//! - [`devmap`]: Slurm's GPU index to NVML index, from Slurm's own device files.
//! - [`clock_control`]: the three ways to slow a GPU (locked clocks, application clocks, power
//!   limit), which one a GPU accepts (probed), and how each is applied and undone.
//! - [`arbiter`]: clocks of GPUs shared between steps, with a crash-safe node-local ledger.
//!
//! Nothing here panics on data from NVML, files or users: every failure is a [`GpuError`]
//! naming the GPU, the NVML call and the reason.

pub mod arbiter;
pub mod clock_control;
mod control;
pub mod devmap;
mod error;
mod fake;
pub mod gpu_freq;
pub mod gres_type;
mod nvml;
mod nvml_clocks;

pub use control::{AppClocksMhz, GpuControl, GpuProcess, MemoryBytes, PowerLimitRangeMw, ProcessSmUtilPct, ProcessUtilization, UtilizationPct};
pub use error::{GpuError, GpuErrorKind};
pub use fake::{FakeGpu, FakeGpus};
pub use nvml::NvmlGpu;
