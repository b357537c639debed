//! slurmctld's own state that no record lock guards: its state-save thread, the RPCs it is
//! serving, whether it is shutting down. Each call goes through a shim function that takes
//! slurmctld's own mutex (or reads one flag), so it is safe with or without the slurmctld locks
//! held; that is why the lock guard itself can use them (a yield waits for the RPCs, a launch
//! asks for a state save).
//!
//! Kept apart from the modules that need the locks so that the guard does not depend on them;
//! the old paths (`routes::schedule_state_save`, ...) re-export these.

use crate::sys;

/// Asks slurmctld to write its job and node state soon (its state-save thread, at most every
/// few seconds), as its main scheduler does after starting jobs: a slurmctld that crashes later
/// then recovers these jobs as running instead of pending.
pub fn schedule_state_save() {
    // SAFETY: the shim calls slurmctld's own functions, which take their own mutex.
    unsafe { sys::energy_schedule_state_save() }
}

/// RPCs slurmctld is serving now (what `max_rpc_cnt` is compared with).
pub fn server_thread_count() -> i32 {
    // SAFETY: the shim reads the counter under slurmctld's own mutex.
    unsafe { sys::energy_server_thread_count() }
}

/// slurmctld is shutting down: start nothing more.
pub fn shutting_down() -> bool {
    // SAFETY: reads one field of slurmctld_config.
    unsafe { sys::energy_shutting_down() }
}
