//! A fake `libnvidia-ml.so` for tests and the demo cluster on machines without a GPU.
//!
//! **A test double: never installed by the bundle's real install path.**
//!
//! Built as a cdylib, it exports NVML's C functions by name (`nvmlInit_v2`,
//! `nvmlDeviceGetHandleByIndex_v2`, ...), so `nvml-wrapper` and Slurm's `gpu/nvml` load it
//! unchanged. It simulates N GPUs (V100-SXM2-32GB by default) whose clocks, utilisation and
//! energy live in a state file shared by every process that loads the library, so a clock set
//! by slurmstepd is what the test reads back.
//!
//! Built as an rlib, it is the Rust API tests and `fake-nvml-ctl` use to read and change that
//! state ([`FakeNvml`]), and to put the library where a loader finds it
//! ([`install_library`]).
//!
//! Modules: [`config`] (the static machine), [`state`] (the shared mutable state and its
//! lock), [`model`] (clock and power physics), [`session`] (where a process finds config and
//! state), [`codes`] (NVML return codes), [`generations`] (the V100, A100 and H100 it can play,
//! with their support matrices), and `ffi` (the exported C functions).

pub mod codes;
pub mod config;
mod ffi;
pub mod generations;
pub mod model;
pub mod session;
pub mod state;
pub mod workload_profile;

use std::io;
use std::path::{Path, PathBuf};

pub use config::{Config, ConfigError, GpuSpec};
pub use generations::{Answer, Control, GpuModel, SupportMatrix};
pub use session::Session;
pub use state::{FailRule, GpuProcess, GpuState, State, StateError, StateStore};

/// File name of the cdylib cargo builds.
pub const BUILT_LIBRARY_NAME: &str = "libfake_nvml.so";
/// Names the loaders look for: Slurm dlopens `libnvidia-ml.so`, nvml-wrapper
/// `libnvidia-ml.so` (the `.so.1` is what a driver install provides).
pub const NVML_SONAME: &str = "libnvidia-ml.so.1";
pub const NVML_LINK_NAME: &str = "libnvidia-ml.so";

/// Copies the built fake into `dir` as `libnvidia-ml.so.1`, with `libnvidia-ml.so` a symlink
/// to it, replacing what was there. Returns the path of `libnvidia-ml.so.1`.
///
/// A copy, not a link: the dynamic loader treats links to one file as one library, and each
/// copy resolves its own `fake-nvml.conf` and state directory (see [`session`]).
pub fn install_library(built: &Path, dir: &Path) -> io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let target = dir.join(NVML_SONAME);
    let tmp = dir.join(format!(".{NVML_SONAME}.tmp"));
    std::fs::copy(built, &tmp)?;
    std::fs::rename(&tmp, &target)?;
    let link = dir.join(NVML_LINK_NAME);
    match std::fs::remove_file(&link) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::os::unix::fs::symlink(NVML_SONAME, &link)?;
    Ok(target)
}

/// Finds the cdylib cargo built in the same target directory as the running executable
/// (`target/<profile>/` for binaries and examples' parents, `target/<profile>/deps/` for
/// tests), or at `$FAKE_NVML_LIB`.
pub fn find_built_library() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("FAKE_NVML_LIB").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .take(3)
        .flat_map(|dir| [dir.join(BUILT_LIBRARY_NAME), dir.join("deps").join(BUILT_LIBRARY_NAME)])
        .find(|p| p.is_file())
}

/// Reads and changes the shared state from Rust, as the library would.
#[derive(Debug, Clone)]
pub struct FakeNvml {
    pub config: Config,
    pub store: StateStore,
}

impl FakeNvml {
    pub fn new(config: Config, state_dir: impl Into<PathBuf>) -> FakeNvml {
        FakeNvml { config, store: StateStore::new(state_dir) }
    }

    /// The config and state a library copy in `lib_dir` would use (environment included).
    pub fn for_library_dir(lib_dir: &Path) -> Result<FakeNvml, String> {
        let s = Session::resolve(Some(lib_dir))?;
        Ok(FakeNvml { config: s.config, store: s.store })
    }

    pub fn state(&self) -> Result<State, StateError> {
        self.store.load(&self.config)
    }

    pub fn update<T>(&self, change: impl FnOnce(&mut State) -> T) -> Result<T, StateError> {
        self.store.update(&self.config, change)
    }

    fn update_gpu(&self, gpu: usize, change: impl FnOnce(&mut GpuState)) -> Result<(), StateError> {
        let path = self.store.state_path();
        self.update(|s| s.gpus.get_mut(gpu).map(change))?
            .ok_or_else(|| StateError { path, message: format!("no GPU {gpu}") })
    }

    /// Sets GPU and memory utilisation of one GPU, in percent (clamped to 100).
    pub fn set_utilization(&self, gpu: usize, gpu_pct: u32, memory_pct: u32) -> Result<(), StateError> {
        self.update_gpu(gpu, |g| {
            g.util_gpu_pct = gpu_pct.min(100);
            g.util_memory_pct = memory_pct.min(100);
        })
    }

    /// Restarts one GPU's energy counter from 0 mJ, as a driver reload or GPU reset does (the
    /// counter goes backwards; power draw is unchanged).
    pub fn reset_energy_counter(&self, gpu: usize) -> Result<(), StateError> {
        self.update_gpu(gpu, |g| g.energy_mj = 0.0)
    }

    pub fn set_processes(&self, gpu: usize, processes: Vec<GpuProcess>) -> Result<(), StateError> {
        self.update_gpu(gpu, |g| g.processes = processes)
    }

    /// Adds a fail rule (see [`FailRule`]).
    pub fn inject_failure(&self, rule: FailRule) -> Result<(), StateError> {
        self.update(|s| s.fail.push(rule))
    }

    pub fn clear_failures(&self) -> Result<(), StateError> {
        self.update(|s| s.fail.clear())
    }
}
