//! Where slurmctld lets a pending job run, read the way sched/backfill reads it: per queue
//! record (one per partition, and per reservation for jobs with several or a magnetic one), the
//! record's partition and reservation are applied to the job, then Slurm's own tests run
//! (accounting policy, licenses, `job_test_resv`, `--nodelist`/`--exclude`, and the node filter
//! for features and node sizes), and the job is put back as it was. Also Slurm's advanced
//! reservations (their windows) and the update stamps a scheduler compares after yielding.

use crate::bitmap::Bitmap;
use crate::locks::{LockLevel, NotLocked, SlurmctldLock};
use crate::node::opt_str;
use crate::sys;

// slurmctld's own state, used by the lock guard too: it lives below the guard.
pub use crate::slurmctld::{schedule_state_save, server_thread_count, shutting_down};

/// Whether, and from when, a job may start through one queue record.
#[derive(Debug, Clone, PartialEq)]
pub enum RouteStatus {
    Now,
    /// From this time on (its reservation starts then, a maintenance window ends then, ...).
    Later(i64),
    /// Not this cycle, and why (Slurm's checks, in words).
    Never(&'static str),
}

/// One queue record of a pending job, judged by Slurm.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub status: RouteStatus,
    /// Node table indices the record allows (empty unless `Now` or `Later`).
    pub nodes: Vec<usize>,
    pub partition: String,
    pub reservation: Option<String>,
    /// The reservation attracts the job without its asking (`MAGNETIC`).
    pub magnetic: bool,
    /// Slurm's node filter could not judge the job's features exactly (XOR, counts): the
    /// planner should leave the choice of nodes to Slurm.
    pub filter_inexact: bool,
    /// The record's partition's DefaultTime, else MaxTime (a job without `--time` gets it
    /// there): `Unset` without either.
    pub partition_time_limit: crate::job::TimeLimit,
}

/// One of Slurm's advanced reservations that hold whole nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct AdvanceReservation {
    pub name: String,
    pub nodes: Vec<usize>,
    pub start: i64,
    pub end: i64,
}

/// slurmctld's update stamps: when any differs from what a cycle saw, its plan is stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamps {
    pub job: i64,
    pub node: i64,
    pub part: i64,
    pub resv: i64,
    pub conf: i64,
}

/// What a route needs to be applied again when the job starts (by name: records may have been
/// replaced since the plan was made).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteApply {
    pub partition: String,
    pub reservation: Option<String>,
    pub magnetic: bool,
}

impl Route {
    pub fn apply(&self) -> RouteApply {
        RouteApply { partition: self.partition.clone(), reservation: self.reservation.clone(), magnetic: self.magnetic }
    }
}

/// # Safety
/// `p` is NULL or a NUL-terminated string valid for the call.
unsafe fn owned(p: *const std::ffi::c_char) -> String {
    // SAFETY: forwarded contract.
    unsafe { opt_str(p) }.unwrap_or("").to_string()
}

fn static_text(p: *const std::ffi::c_char) -> &'static str {
    crate::routes_text(p)
}

impl SlurmctldLock {
    /// Judges one queue record (an item of `build_job_queue`'s list) at `now`. Needs the job
    /// write, node read and partition read locks.
    ///
    /// # Safety
    /// `item` must be a live `job_queue_rec_t` of a queue built under the locks held.
    pub(crate) unsafe fn route_of(&self, item: *mut std::ffi::c_void, now: i64) -> Route {
        let api = self.api();
        // SAFETY: zeroed is a valid bit pattern for the plain-data out struct.
        let mut out: sys::energy_route_t = unsafe { std::mem::zeroed() };
        // SAFETY: forwarded contract; the shim restores the job's partition and reservation.
        unsafe { sys::energy_route_test(item, now as sys::time_t, &mut out) };
        // SAFETY: the shim hands over ownership of `nodes` (or NULL).
        let nodes = unsafe { Bitmap::from_raw(api, out.nodes) }.map(|b| b.as_ref().ones()).unwrap_or_default();
        let status = match out.status as u32 {
            sys::ENERGY_ROUTE_NOW => RouteStatus::Now,
            sys::ENERGY_ROUTE_LATER => RouteStatus::Later(out.not_before),
            _ => RouteStatus::Never(static_text(out.why)),
        };
        // SAFETY: names borrowed from partition/reservation records, valid under the locks.
        let (partition, reservation) = unsafe { (owned(out.part_name), opt_str(out.resv_name).map(str::to_string)) };
        let partition_time_limit = match out.part_time_min {
            crate::NO_VAL => crate::job::TimeLimit::Unset,
            crate::INFINITE => crate::job::TimeLimit::Unlimited,
            m => crate::job::TimeLimit::Minutes(m),
        };
        Route { status, nodes, partition, reservation, magnetic: out.magnetic, filter_inexact: out.filter_inexact, partition_time_limit }
    }

    /// Slurm's advanced reservations that hold whole nodes (not FLEX, not core-only). Needs the
    /// node read lock (reservations change under it and the configuration lock).
    pub fn advance_reservations(&self) -> Result<Vec<AdvanceReservation>, NotLocked> {
        self.require("reservations", |l| l.node, LockLevel::Read)?;
        let api = self.api();
        let mut out = Vec::new();
        for i in 0.. {
            let mut name: *const std::ffi::c_char = std::ptr::null();
            let mut nodes: *mut sys::bitstr_t = std::ptr::null_mut();
            let (mut start, mut end): (sys::time_t, sys::time_t) = (0, 0);
            // SAFETY: reads resv_list under the lock; `nodes` is a copy we own.
            if !unsafe { sys::energy_resv_at(i, &mut name, &mut nodes, &mut start, &mut end) } {
                break;
            }
            // SAFETY: ours to free.
            let nodes = unsafe { Bitmap::from_raw(api, nodes) }.map(|b| b.as_ref().ones()).unwrap_or_default();
            // SAFETY: the reservation's name, valid under the lock.
            out.push(AdvanceReservation { name: unsafe { owned(name) }, nodes, start, end });
        }
        Ok(out)
    }

    /// The update stamps of jobs, nodes, partitions, reservations and configuration.
    pub fn stamps(&self) -> Stamps {
        let api = self.api();
        let raw = api.raw();
        // SAFETY: slurmctld's globals, written under the locks we hold (read here).
        unsafe {
            Stamps {
                job: *raw.last_job_update,
                node: *raw.last_node_update,
                part: *raw.last_part_update,
                resv: *raw.last_resv_update,
                conf: (*raw.slurm_conf).last_update,
            }
        }
    }
}

/// Whether `select_nodes`' error code is about the nodes it was given (busy, unusable, too
/// small for the job), not about the job itself (a QOS/association limit reached once the
/// plan's earlier starts count): only the former is worth planning around.
pub fn refusal_is_about_nodes(code: i32) -> bool {
    // SAFETY: compares constants.
    unsafe { sys::energy_refusal_is_about_nodes(code) }
}

/// Counts a finished cycle in slurmctld's backfill statistics (`sdiag`): its duration, jobs
/// tested, jobs with nodes to try, queue length, jobs started. Needs the job write lock.
pub fn record_cycle(lock: &SlurmctldLock, duration: std::time::Duration, tested: usize, tried: usize, queue_len: usize, started: usize) {
    if lock.require("backfill statistics", |l| l.job, LockLevel::Write).is_err() {
        return;
    }
    let c = |n: usize| n.min(u32::MAX as usize) as u32;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as sys::time_t);
    // SAFETY: slurmctld_diag_stats is written under the job write lock we hold, as backfill does.
    unsafe { sys::energy_diag_cycle_end(duration.as_micros().min(u128::from(u32::MAX)) as u64, c(tested), c(tried), c(queue_len), c(started), now) };
}
