//! Starts kept back until slurmctld's job state file holds them: what the lock guard carries
//! for each, writing the state file, and launching them once it is written. Why starts are kept
//! back, and the switch that turns it on, are in the `launch` module; the guard (`locks`) runs
//! these whenever it lets go of its locks.
//!
//! Below the guard on purpose: it needs nothing of it, so the guard can carry and launch the
//! starts without depending on the modules that use the guard. Never decides which job starts.

use std::time::{Duration, Instant};

use crate::api::{Api, call};
use crate::slurmctld;
use crate::sys;

/// A job started in slurmctld's records whose launch waits for the state file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unlaunched {
    pub job_id: u32,
    /// The job's `start_time` when it was started: a job requeued and started again since is
    /// another start, not this one.
    pub start_time: sys::time_t,
}

/// What writing the state file and launching the kept-back starts did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaunchReport {
    /// Batch launches sent and allocations answered.
    pub launched: usize,
    /// Kept-back starts that were no longer to launch (cancelled, requeued or ended meanwhile).
    pub dropped: usize,
    /// `dump_all_job_state()`'s error code when the file could not be written (the jobs were
    /// launched anyway, as stock Slurm launches them without a saved state).
    pub save_error: Option<i32>,
    /// Time spent writing the state file (without any slurmctld lock held).
    pub save_time: Duration,
}

impl LaunchReport {
    pub fn merged(self, o: LaunchReport) -> LaunchReport {
        LaunchReport {
            launched: self.launched + o.launched,
            dropped: self.dropped + o.dropped,
            save_error: self.save_error.or(o.save_error),
            save_time: self.save_time + o.save_time,
        }
    }
}

/// Writes slurmctld's job state file now. Must be called holding no slurmctld lock
/// (`dump_all_job_state()` takes the job read lock itself).
pub(crate) fn save_job_state_unlocked() -> (Option<i32>, Duration) {
    let began = Instant::now();
    // SAFETY: no slurmctld lock is held by this thread (callers release theirs first); the
    // function serialises its file writes with slurmctld's state-file mutex.
    let rc = unsafe { sys::energy_save_job_state() };
    ((rc != 0).then_some(rc), began.elapsed())
}

/// Launches `starts`, re-checking each job; the job state file must already hold them.
///
/// # Safety
/// The calling thread holds slurmctld's job write and node write locks (the locks a start
/// needs), from the call until it returns.
pub(crate) unsafe fn launch(api: &Api, starts: Vec<Unlaunched>) -> LaunchReport {
    let mut report = LaunchReport::default();
    for u in starts {
        // SAFETY: lookup under the job write lock.
        let job = unsafe { call!(api, find_job_record(u.job_id)) };
        // SAFETY: NULL or a record under the job write lock, until we return.
        let Some(rec) = (unsafe { job.as_ref() }) else {
            report.dropped += 1;
            continue;
        };
        // SAFETY: the shim reads state fields only.
        let running = unsafe { sys::energy_job_is_running(rec) } && !unsafe { sys::energy_job_is_completing(rec) };
        if !running || rec.start_time != u.start_time {
            report.dropped += 1;
            continue;
        }
        if rec.batch_flag == 0 {
            // SAFETY: an allocation started by us and not answered yet, under the job
            // write lock, as sched/backfill answers it.
            unsafe { call!(api, srun_allocate(job)) };
        } else if !unsafe { sys::energy_job_is_configuring(rec) } {
            // SAFETY: a batch job started by us whose nodes are ready and that nothing
            // launched yet (a configuring job is launched by slurmctld once its nodes are);
            // the batch step recorded for the state file gives way to launch_job()'s own.
            unsafe {
                sys::energy_drop_batch_step(job);
                call!(api, launch_job(job));
            }
        } else {
            report.dropped += 1;
            continue;
        }
        report.launched += 1;
    }
    if report.launched > 0 {
        // launch_job() added the batch steps: have slurmctld save those too.
        slurmctld::schedule_state_save();
    }
    report
}
