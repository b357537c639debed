//! slurmctld's five-part lock (configuration, jobs, nodes, partitions, federation) as an RAII
//! guard. Every view of slurmctld's records borrows the guard, so the borrow checker keeps
//! record pointers from outliving the lock; [`SlurmctldLock::yield_for`] needs `&mut self` for
//! the same reason.
//!
//! Never take these locks from a function slurmctld calls while it already holds them
//! (`sched_p_reconfig`): only from the plugin's own thread.

use std::time::Duration;

use crate::api::{Api, ApiError, api, call};
use crate::kept_back::{self, LaunchReport, Unlaunched};
use crate::slurmctld;
use crate::sys;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LockLevel {
    None,
    Read,
    Write,
}

impl LockLevel {
    fn raw(self) -> sys::lock_level_t {
        match self {
            LockLevel::None => sys::NO_LOCK,
            LockLevel::Read => sys::READ_LOCK,
            LockLevel::Write => sys::WRITE_LOCK,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockLevels {
    pub conf: LockLevel,
    pub job: LockLevel,
    pub node: LockLevel,
    pub part: LockLevel,
    pub fed: LockLevel,
}

impl LockLevels {
    /// What sched/backfill holds while it plans and starts jobs: conf read, job write, node
    /// write, partition read, federation read.
    pub const SCHEDULER: LockLevels = LockLevels {
        conf: LockLevel::Read,
        job: LockLevel::Write,
        node: LockLevel::Write,
        part: LockLevel::Read,
        fed: LockLevel::Read,
    };

    fn raw(self) -> sys::slurmctld_lock_t {
        sys::slurmctld_lock_t {
            conf: self.conf.raw(),
            job: self.job.raw(),
            node: self.node.raw(),
            part: self.part.raw(),
            fed: self.fed.raw(),
            // 26.05 adds a sixth lock for the select plugin's node statistics
            // (node_select_stats_array, read by `scontrol show node` packing and backfill's
            // own accounting). Nothing here reads them, and slurmctld's main scheduler
            // (`_schedule()` in job_scheduler.c) calls select_nodes() without it: not taken.
            #[cfg(slurm_ge_26_05)]
            select_node: sys::NO_LOCK,
        }
    }
}

/// Held slurmctld locks; released on drop.
pub struct SlurmctldLock {
    api: &'static Api,
    levels: LockLevels,
    /// Keep launches back until the job state file holds the start: see the `launch` module.
    pub(crate) save_before_launch: bool,
    pub(crate) unlaunched: Vec<Unlaunched>,
}

/// A view needed a lock level the guard does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotLocked {
    pub what: &'static str,
    pub needed: LockLevel,
}

impl std::fmt::Display for NotLocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} needs the {:?} lock", self.what, self.needed)
    }
}

impl std::error::Error for NotLocked {}

impl SlurmctldLock {
    /// Blocks until slurmctld grants the locks. Only in slurmctld (else the error names the
    /// missing symbol).
    pub fn acquire(levels: LockLevels) -> Result<SlurmctldLock, ApiError> {
        let api = api()?;
        // SAFETY: lock_slurmctld takes its level struct by value and blocks until granted; the
        // matching unlock happens exactly once, in Drop (or around the sleep in yield_for).
        unsafe { call!(api, lock_slurmctld(levels.raw())) };
        Ok(SlurmctldLock { api, levels, save_before_launch: false, unlaunched: Vec::new() })
    }

    pub fn levels(&self) -> LockLevels {
        self.levels
    }

    /// Lets slurmctld's RPCs through: releases the locks, sleeps, takes them again. Every view
    /// of a record is gone by then (they borrow `self`); look jobs up again by id afterwards.
    /// Starts kept back until their state is saved (see the `launch` module) are saved while
    /// the locks are released and launched once they are taken again.
    pub fn yield_for(&mut self, pause: Duration) {
        self.unlock_raw();
        let kept_back = self.save_kept_back();
        std::thread::sleep(pause);
        self.lock_raw();
        self.launch_after_yield(kept_back);
    }

    /// sched/backfill's yield: releases the locks, sleeps `pause`, and keeps sleeping while
    /// more than `max(max_rpc_cnt / 10, 20)` RPCs are being served (when `max_rpc_cnt` > 0), at
    /// most `longest` in all, or until `stop()` says so; then takes the locks again.
    pub fn yield_until_quiet(&mut self, pause: Duration, max_rpc_cnt: u32, longest: Duration, stop: impl Fn() -> bool) -> LaunchReport {
        self.unlock_raw();
        let kept_back = self.save_kept_back();
        let began = std::time::Instant::now();
        let quiet = (max_rpc_cnt / 10).max(20) as i32;
        // Sleeps in slices of at most 100 ms, so that a shutdown does not wait out a long pause.
        let nap = |d: Duration| {
            let until = std::time::Instant::now() + d;
            while !stop() {
                let left = until.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break;
                }
                std::thread::sleep(left.min(Duration::from_millis(100)));
            }
        };
        loop {
            nap(pause);
            if max_rpc_cnt == 0 || slurmctld::server_thread_count() <= quiet || stop() || began.elapsed() >= longest {
                break;
            }
        }
        self.lock_raw();
        self.launch_after_yield(kept_back)
    }

    /// Releases the locks the guard holds; [`Self::lock_raw`] must follow before the guard is
    /// used or dropped.
    pub(crate) fn unlock_raw(&mut self) {
        // SAFETY: we hold exactly `self.levels` (taken in acquire or lock_raw).
        unsafe { call!(self.api, unlock_slurmctld(self.levels.raw())) };
    }

    /// Takes the guard's locks again after [`Self::unlock_raw`].
    pub(crate) fn lock_raw(&mut self) {
        // SAFETY: as in acquire; the guard holds nothing since unlock_raw.
        unsafe { call!(self.api, lock_slurmctld(self.levels.raw())) };
    }

    /// With the locks released: writes the job state file when starts are kept back.
    fn save_kept_back(&self) -> Option<(Option<i32>, Duration)> {
        (!self.unlaunched.is_empty()).then(kept_back::save_job_state_unlocked)
    }

    fn launch_after_yield(&mut self, saved: Option<(Option<i32>, Duration)>) -> LaunchReport {
        let Some((save_error, save_time)) = saved else { return LaunchReport::default() };
        let mut report = self.launch_kept_back();
        report.save_error = save_error;
        report.save_time = save_time;
        report
    }

    /// Writes the job state file (releasing the locks for it) and launches the starts kept
    /// back (see the `launch` module). Nothing to do when none are.
    pub fn launch_started(&mut self) -> LaunchReport {
        if self.unlaunched.is_empty() {
            return LaunchReport::default();
        }
        self.unlock_raw();
        let saved = self.save_kept_back();
        self.lock_raw();
        self.launch_after_yield(saved)
    }

    /// Launches the starts kept back; the job state file must already hold them.
    fn launch_kept_back(&mut self) -> LaunchReport {
        let starts = std::mem::take(&mut self.unlaunched);
        // SAFETY: every caller runs with the guard's locks held (taken again after the state
        // file was written), and starts are kept back only by start_job, which needs the job
        // and node write locks: the guard holds those.
        unsafe { kept_back::launch(self.api, starts) }
    }

    pub(crate) fn api(&self) -> &'static Api {
        self.api
    }

    pub(crate) fn require(&self, what: &'static str, pick: fn(&LockLevels) -> LockLevel, needed: LockLevel) -> Result<(), NotLocked> {
        if pick(&self.levels) >= needed { Ok(()) } else { Err(NotLocked { what, needed }) }
    }
}

impl Drop for SlurmctldLock {
    fn drop(&mut self) {
        // Starts kept back are launched whatever ended the guard's use (an early return, a
        // panic): a started job that is never launched would wait for its node to time out.
        if !self.unlaunched.is_empty() {
            let _ = self.launch_started();
        }
        // SAFETY: we hold exactly `self.levels`; released once.
        unsafe { call!(self.api, unlock_slurmctld(self.levels.raw())) };
    }
}
