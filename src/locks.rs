//! slurmctld's five-part lock (configuration, jobs, nodes, partitions, federation) as an RAII
//! guard. Every view of slurmctld's records borrows the guard, so the borrow checker keeps
//! record pointers from outliving the lock; [`SlurmctldLock::yield_for`] needs `&mut self` for
//! the same reason.
//!
//! Never take these locks from a function slurmctld calls while it already holds them
//! (`sched_p_reconfig`): only from the plugin's own thread.

use std::time::Duration;

use crate::api::{Api, ApiError, api, call};
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
        }
    }
}

/// Held slurmctld locks; released on drop.
pub struct SlurmctldLock {
    api: &'static Api,
    levels: LockLevels,
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
        Ok(SlurmctldLock { api, levels })
    }

    pub fn levels(&self) -> LockLevels {
        self.levels
    }

    /// Lets slurmctld's RPCs through: releases the locks, sleeps, takes them again. Every view
    /// of a record is gone by then (they borrow `self`); look jobs up again by id afterwards.
    pub fn yield_for(&mut self, pause: Duration) {
        // SAFETY: we hold exactly `self.levels` (taken in acquire or below).
        unsafe { call!(self.api, unlock_slurmctld(self.levels.raw())) };
        std::thread::sleep(pause);
        // SAFETY: as in acquire.
        unsafe { call!(self.api, lock_slurmctld(self.levels.raw())) };
    }

    /// sched/backfill's yield: releases the locks, sleeps `pause`, and keeps sleeping while
    /// more than `max(max_rpc_cnt / 10, 20)` RPCs are being served (when `max_rpc_cnt` > 0), at
    /// most `longest` in all, or until `stop()` says so; then takes the locks again.
    pub fn yield_until_quiet(&mut self, pause: Duration, max_rpc_cnt: u32, longest: Duration, stop: impl Fn() -> bool) {
        // SAFETY: we hold exactly `self.levels` (taken in acquire or below).
        unsafe { call!(self.api, unlock_slurmctld(self.levels.raw())) };
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
            if max_rpc_cnt == 0 || crate::routes::server_thread_count() <= quiet || stop() || began.elapsed() >= longest {
                break;
            }
        }
        // SAFETY: as in acquire.
        unsafe { call!(self.api, lock_slurmctld(self.levels.raw())) };
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
        // SAFETY: we hold exactly `self.levels`; released once.
        unsafe { call!(self.api, unlock_slurmctld(self.levels.raw())) };
    }
}
