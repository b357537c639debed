//! Launching started jobs only once their start is on disk.
//!
//! slurmctld writes its job state file from a thread of its own, at most every
//! `SAVE_MAX_WAIT` (5) seconds after something asked for it. A slurmctld killed in between
//! (`kill -9`, OOM killer, power loss) recovers every job it started since the last write as
//! pending and starts it again, while the first copy is still running on its nodes; the nodes'
//! registrations then kill that copy, and a relaunch that meets it drains the node
//! (`Duplicate jobid`). Stock Slurm's schedulers send the launch RPC right after the start.
//!
//! With save-before-launch on, [`SlurmctldLock::start_job`] starts a job in slurmctld's
//! records (nodes, GRES, accounting) but keeps the launch RPC (batch) or the allocation answer
//! (salloc/srun) back. Whenever the guard lets go of the locks (a yield, the end of the apply
//! phase, or its drop), it writes the job state file first, with slurmctld's own
//! `dump_all_job_state()`, and only then launches what it kept back, re-checking each job. A
//! job whose start reached nobody is in the file as running: a crash now recovers it as running
//! (and its node, which never got it, reports it missing), never as pending.

use std::time::{Duration, Instant};

use crate::api::call;
use crate::locks::SlurmctldLock;
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

impl SlurmctldLock {
    /// Keep launches back until the job state file holds the start (see the module docs).
    pub fn set_save_before_launch(&mut self, on: bool) {
        self.save_before_launch = on;
    }

    pub fn save_before_launch(&self) -> bool {
        self.save_before_launch
    }

    /// Starts kept back so far.
    pub fn unlaunched(&self) -> usize {
        self.unlaunched.len()
    }

    /// Writes the job state file (releasing the locks for it) and launches the starts kept
    /// back. Nothing to do when none are.
    pub fn launch_started(&mut self) -> LaunchReport {
        if self.unlaunched.is_empty() {
            return LaunchReport::default();
        }
        self.unlock_raw();
        let (save_error, save_time) = save_job_state_unlocked();
        self.lock_raw();
        let mut report = self.launch_kept_back();
        report.save_error = save_error;
        report.save_time = save_time;
        report
    }

    /// Launches the starts kept back; the job state file must already hold them. Needs the
    /// locks a start needs (held by the guard).
    pub(crate) fn launch_kept_back(&mut self) -> LaunchReport {
        let api = self.api();
        let mut report = LaunchReport::default();
        for u in std::mem::take(&mut self.unlaunched) {
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
                // launched yet (a configuring job is launched by slurmctld once its nodes are).
                unsafe { call!(api, launch_job(job)) };
            } else {
                report.dropped += 1;
                continue;
            }
            report.launched += 1;
        }
        if report.launched > 0 {
            // launch_job() added the batch steps: have slurmctld save those too.
            crate::routes::schedule_state_save();
        }
        report
    }

    pub(crate) fn keep_back(&mut self, job_id: u32, start_time: sys::time_t) {
        self.unlaunched.push(Unlaunched { job_id, start_time });
    }
}
