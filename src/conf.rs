//! The parts of slurmctld's configuration (`slurm_conf`) the plugins read.

use std::ffi::CStr;
use std::path::PathBuf;

use crate::api::{ApiError, api};
use crate::locks::{LockLevel, NotLocked, SlurmctldLock};
use crate::sys;

/// A copy of what the plugins need from `slurm_conf`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConfView {
    /// Path of the slurm.conf the daemon read.
    pub slurm_conf_path: Option<PathBuf>,
    /// `SchedulerParameters`.
    pub sched_params: Option<String>,
    /// `DebugFlags` bits.
    pub debug_flags: u64,
    /// `SelectTypeParameters` bits.
    pub select_type_param: u16,
}

impl ConfView {
    /// Read under the guard's configuration lock.
    pub fn read(lock: &SlurmctldLock) -> Result<ConfView, NotLocked> {
        lock.require("slurm_conf", |l| l.conf, LockLevel::Read)?;
        // SAFETY: the guard holds at least the configuration read lock.
        Ok(unsafe { Self::read_raw(lock.api()) })
    }

    /// Read while the *caller* holds slurmctld's configuration lock (plugin `init`, which
    /// slurmctld calls from `read_slurm_conf` with the configuration write lock held).
    ///
    /// # Safety
    /// The configuration lock must be held by this thread's caller for the whole call.
    pub unsafe fn read_held_by_caller() -> Result<ConfView, ApiError> {
        let api = api()?;
        // SAFETY: forwarded contract.
        Ok(unsafe { Self::read_raw(api) })
    }

    /// Does `DebugFlags` include `Backfill` (the flag sched plugins log their details under)?
    pub fn debug_backfill(&self) -> bool {
        // SAFETY: the shim returns a constant.
        self.debug_flags & unsafe { sys::energy_debug_flag_backfill() } != 0
    }

    /// Is memory a consumable resource (`CR_*_Memory`)?
    pub fn memory_consumable(&self) -> bool {
        // SAFETY: the shim returns a constant.
        self.select_type_param & unsafe { sys::energy_cr_memory_flag() } != 0
    }

    /// # Safety
    /// The configuration lock must be held.
    unsafe fn read_raw(api: &'static crate::Api) -> ConfView {
        let conf = api.raw().slurm_conf;
        // SAFETY: `conf` is the address of slurmctld's `slurm_conf` (non-NULL after resolve);
        // the lock keeps it from changing while we copy.
        let c = unsafe { &*conf };
        // SAFETY: string members are NULL or NUL-terminated strings owned by slurm_conf.
        let text = |p: *mut std::ffi::c_char| unsafe { (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned()) };
        ConfView {
            slurm_conf_path: text(c.slurm_conf).map(PathBuf::from),
            sched_params: text(c.sched_params),
            debug_flags: c.debug_flags,
            select_type_param: c.select_type_param,
        }
    }
}

/// `SchedulerParameters` holds `sched_interval=-1` (slurmctld's main scheduler is off).
pub fn main_scheduler_disabled(sched_params: Option<&str>) -> bool {
    sched_params.is_some_and(|p| p.split(',').any(|kv| kv.trim() == "sched_interval=-1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sched_interval_is_found_among_other_parameters() {
        assert!(main_scheduler_disabled(Some("sched_interval=-1,defer")));
        assert!(main_scheduler_disabled(Some("defer,sched_interval=-1")));
        assert!(!main_scheduler_disabled(Some("sched_interval=60")));
        assert!(!main_scheduler_disabled(Some("sched_interval=-10")));
        assert!(!main_scheduler_disabled(None));
    }
}
