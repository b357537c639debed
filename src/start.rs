//! Starting a pending job through slurmctld's own path, confined to nodes a planner chose.
//!
//! The same sequence as sched/backfill's `_start_job` and the main scheduler: accounting policy
//! pre-check, the federation lock, `select_nodes()` (which applies partitions, reservations, QOS
//! and association limits, licenses, GRES binding and writes the start to accounting), then
//! `launch_job()` for batch jobs or `srun_allocate()` for allocations (at once, or once the job
//! state file holds the start: [`crate::launch`]). The job is confined by
//! ORing every other node into `details->exc_node_bitmap` for the call and restoring the user's
//! own exclusions afterwards.

use std::ffi::CString;

use crate::api::call;
use crate::bitmap::Bitmap;
use crate::job::strerror;
use crate::locks::{LockLevel, NotLocked, SlurmctldLock};
use crate::node::table_len;
use crate::sys;

/// Why a job was not started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartError {
    NotLocked(NotLocked),
    /// Gone, or no longer pending.
    NotPending,
    /// Heterogeneous job: only sched/backfill may start those.
    Heterogeneous,
    /// A QOS or association limit holds it.
    AccountingPolicy,
    /// Its licenses are in use (an earlier start of the same plan may have taken them).
    Licenses,
    /// Another cluster of the federation holds its lock.
    Federation,
    /// The planner named no node, or a node outside the table.
    BadNodes,
    /// Slurm's own pre-start checks say no (held, dependency, `--begin`, array throttle, ...).
    NotRunnable(&'static str),
    /// The queue record it was planned through no longer applies (partition or reservation
    /// gone or changed).
    Route(&'static str),
    /// `select_nodes` refused.
    Slurm { code: i32, reason: String },
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::NotLocked(e) => write!(f, "{e}"),
            StartError::NotPending => write!(f, "job is no longer pending"),
            StartError::Heterogeneous => write!(f, "heterogeneous jobs are started only by sched/backfill"),
            StartError::AccountingPolicy => write!(f, "held by an accounting policy (QOS/association limit)"),
            StartError::Licenses => write!(f, "its licenses are in use"),
            StartError::Federation => write!(f, "federation job lock not granted"),
            StartError::BadNodes => write!(f, "no valid node given"),
            StartError::NotRunnable(why) => write!(f, "not runnable: {why}"),
            StartError::Route(why) => write!(f, "planned partition/reservation no longer applies: {why}"),
            StartError::Slurm { code, reason } => write!(f, "select_nodes: {reason} ({code})"),
        }
    }
}

impl std::error::Error for StartError {}

impl From<NotLocked> for StartError {
    fn from(e: NotLocked) -> Self {
        StartError::NotLocked(e)
    }
}

/// Turns a job's current admin comment into the one to set.
pub type CommentFn<'a> = &'a dyn Fn(Option<&str>) -> String;

/// A started job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub job_id: u32,
    /// Slurm's node list (`n[1-2]`).
    pub nodes: String,
}

impl SlurmctldLock {
    /// Starts pending job `job_id` on (a subset of) `only_nodes` (node table indices) through
    /// the queue record `route` (its partition and reservation applied as sched/backfill applies
    /// them) and, once it is started, sets its admin comment to `admin_comment`. Before that it
    /// re-checks the job as sched/backfill does after yielding its locks. Needs the job and
    /// node write locks.
    ///
    /// `admin_comment` turns the job's current admin comment into the one to set (so that a
    /// caller can keep what the site wrote there).
    ///
    /// `spank_env` entries (name, value) are set in the job's SPANK environment before the
    /// start, so that the prolog and the batch launch carry them to the job's nodes; entries of
    /// the same name (also ones the user set) are replaced, `None` only removes them. A job that
    /// does not start keeps none of them.
    pub fn start_job(&mut self, job_id: u32, only_nodes: &[usize], route: Option<&crate::routes::RouteApply>, admin_comment: Option<CommentFn<'_>>, spank_env: &[(&str, Option<&str>)]) -> Result<Started, StartError> {
        self.start_job_within(job_id, only_nodes, route, admin_comment, spank_env, None)
    }

    /// [`Self::start_job`] with a time limit of at most `limit_min` minutes (a `--time-min` job
    /// started with the room it has before a later job's reservation, as sched/backfill starts
    /// one); the limit is put back if the job does not start.
    pub fn start_job_within(
        &mut self,
        job_id: u32,
        only_nodes: &[usize],
        route: Option<&crate::routes::RouteApply>,
        admin_comment: Option<CommentFn<'_>>,
        spank_env: &[(&str, Option<&str>)],
        limit_min: Option<u32>,
    ) -> Result<Started, StartError> {
        self.require("starting a job", |l| l.job, LockLevel::Write)?;
        self.require("starting a job", |l| l.node, LockLevel::Write)?;
        let api = self.api();
        let table = table_len(api);
        if only_nodes.is_empty() || only_nodes.iter().any(|&n| n >= table) {
            return Err(StartError::BadNodes);
        }
        // SAFETY: lookup under the job write lock.
        let job = unsafe { call!(api, find_job_record(job_id)) };
        // SAFETY: NULL or a record we may modify under the job write lock, until we return.
        let Some(job_rec) = (unsafe { job.as_mut() }) else { return Err(StartError::NotPending) };
        // SAFETY: the shim reads state fields only.
        if !unsafe { sys::energy_job_is_pending(job_rec) } || unsafe { sys::energy_job_is_completing(job_rec) } {
            return Err(StartError::NotPending);
        }
        if job_rec.het_job_id != 0 {
            return Err(StartError::Heterogeneous);
        }
        // SAFETY: a job record under the job write lock (the checks sched/backfill repeats
        // after yielding: held, revoked, cleaning, dependencies, --begin, array throttle).
        let why = unsafe { sys::energy_job_not_runnable(job) };
        if !why.is_null() {
            return Err(StartError::NotRunnable(crate::routes_text(why)));
        }
        // SAFETY: a record under the job write lock.
        let saved = unsafe { apply_route(job, route) }?;
        // SAFETY: the job is modifiable under the job write lock; `saved` came from the apply.
        let undo = |saved: &sys::energy_route_saved_t| unsafe { sys::energy_route_undo(job, saved) };
        // SAFETY: owned by the record.
        let Some(details) = (unsafe { job_rec.details.as_mut() }) else {
            undo(&saved);
            return Err(StartError::NotPending);
        };
        // SAFETY: the same pre-check the main scheduler makes, under the same locks.
        let runnable = unsafe { sys::energy_job_acct_policy_runnable(job) };
        if !runnable {
            undo(&saved);
            return Err(StartError::AccountingPolicy);
        }
        // select_nodes does not test licenses (Slurm's schedulers do before calling it), and
        // an earlier start of this plan may have taken them.
        // SAFETY: a job record with its route applied, under the job write lock.
        if unsafe { call!(api, license_job_test(job, now(), true)) } != sys::SLURM_SUCCESS as i32 {
            undo(&saved);
            return Err(StartError::Licenses);
        }

        let Ok(env) = spank_env.iter().map(|&(k, v)| Ok((CString::new(k)?, v.map(CString::new).transpose()?))).collect::<Result<Vec<_>, std::ffi::NulError>>() else {
            undo(&saved);
            return Err(StartError::Route("SPANK environment entry"));
        };
        let set_env = |with_values: bool| {
            for (k, v) in &env {
                let v = if with_values { v.as_ref().map_or(std::ptr::null(), |v| v.as_ptr()) } else { std::ptr::null() };
                // SAFETY: the job is modifiable under the job write lock; the strings outlive
                // the call, which copies them with Slurm's allocator.
                unsafe { sys::energy_job_set_spank_env(job, k.as_ptr(), v) };
            }
        };
        set_env(true);

        // Exclusions for the call: every node but ours, plus the user's own.
        let mut excluded = Bitmap::new(api, table);
        for &n in only_nodes {
            excluded.set(n);
        }
        excluded.not();
        // SAFETY: the user's exclusion bitmap is NULL or owned by the details; we take it over
        // and put it (or a copy, see below) back before returning.
        let user_exc = unsafe { Bitmap::from_raw(api, details.exc_node_bitmap) };
        details.exc_node_bitmap = std::ptr::null_mut();
        if let Some(user) = &user_exc {
            excluded.or(&user.as_ref());
        }
        details.exc_node_bitmap = excluded.into_raw();
        let is_array_head = !job_rec.array_recs.is_null();

        // --deadline: at most the time left, as slurmctld's schedulers set it before
        // select_nodes; and a --time-min job's room (`limit_min`). Put back if the job does not
        // start.
        let limit_before = job_rec.time_limit;
        // SAFETY: a job record under the job write lock.
        unsafe { sys::energy_job_limit_to_deadline(job, now()) };
        if let Some(cap) = limit_min
            && (job_rec.time_limit == crate::NO_VAL || job_rec.time_limit == crate::INFINITE || job_rec.time_limit > cap)
        {
            job_rec.time_limit = cap;
        }
        // SAFETY: as the main scheduler does before select_nodes; unlocked below on failure.
        let fed_rc = unsafe { call!(api, fed_mgr_job_lock(job)) };
        let rc = if fed_rc != 0 {
            None
        } else {
            // --prefer: the preferred features first, then the required ones, as Slurm's
            // schedulers queue a preferring job twice.
            // SAFETY: a job record under the job write lock; only the *_use pointers change.
            let prefers = unsafe { sys::energy_job_features_use(job, true) };
            // SAFETY: select_nodes with the job and node write locks held, test_only=false, no
            // returned bitmap or message, not at submission: sched/backfill's exact call.
            let mut rc = unsafe { select_nodes(api, job) };
            if prefers {
                // SAFETY: as above.
                unsafe { sys::energy_job_features_use(job, false) };
                if rc != sys::SLURM_SUCCESS as i32 {
                    // SAFETY: as the first call.
                    rc = unsafe { select_nodes(api, job) };
                }
            }
            Some(rc)
        };

        // Put the user's exclusions back (select_nodes may have replaced the bitmap), also on
        // a new array meta record split off by select_nodes.
        if is_array_head {
            // SAFETY: lookup under the job write lock; the base record may differ from `job`.
            let base = unsafe { call!(api, find_job_record(job_rec.array_job_id)) };
            if !base.is_null() && base != job {
                // SAFETY: a distinct record, modifiable under the job write lock.
                let base = unsafe { &mut *base };
                // SAFETY: as above.
                if let (false, Some(bd)) = (base.array_recs.is_null(), unsafe { base.details.as_mut() }) {
                    // SAFETY: we replace (and free) the bitmap select_nodes copied there.
                    drop(unsafe { Bitmap::from_raw(api, bd.exc_node_bitmap) });
                    bd.exc_node_bitmap = user_exc.as_ref().map_or(std::ptr::null_mut(), |u| Bitmap::copy_of(&u.as_ref()).into_raw());
                }
                // A task started through a magnetic reservation: the split-off meta record
                // copied the reservation, which would bind the array's other tasks to it (and
                // hold them, ResvDeleted, once it is gone). Slurm's schedulers clear it after
                // each test; so do we. Acts only on a pending record with JOB_MAGNETIC.
                // SAFETY: a pending job record under the job write lock.
                unsafe { call!(api, job_resv_clear_magnetic_flag(base)) };
            }
        }
        // SAFETY: details stays owned by the (still valid) record.
        if let Some(details) = unsafe { job_rec.details.as_mut() } {
            // SAFETY: ours to free: the bitmap we installed or whatever replaced it.
            drop(unsafe { Bitmap::from_raw(api, details.exc_node_bitmap) });
            details.exc_node_bitmap = user_exc.map_or(std::ptr::null_mut(), Bitmap::into_raw);
        }

        let put_back_limit = |job_rec: &mut sys::job_record_t| {
            job_rec.time_limit = limit_before;
        };
        let Some(rc) = rc else {
            put_back_limit(job_rec);
            set_env(false);
            undo(&saved);
            return Err(StartError::Federation);
        };
        if rc != sys::SLURM_SUCCESS as i32 {
            put_back_limit(job_rec);
            // SAFETY: releases the federation lock taken above.
            unsafe { call!(api, fed_mgr_job_unlock(job)) };
            set_env(false);
            undo(&saved);
            return Err(StartError::Slurm { code: rc, reason: strerror(api, rc) });
        }
        // SAFETY: the job started: record it with the federation, as the main scheduler does.
        unsafe { call!(api, fed_mgr_job_start(job, job_rec.start_time)) };
        if let Some(make) = admin_comment {
            // SAFETY: admin_comment is NULL or a string owned by the record.
            let text = make(unsafe { crate::node::opt_str(job_rec.admin_comment) });
            set_admin_comment(api, job_rec, &text);
        }
        // SAFETY: slurmctld's last_job_update, written under the job write lock.
        unsafe { *api.raw().last_job_update = now() };
        // SAFETY: the shim reads state fields only.
        let launches = job_rec.batch_flag == 0 || !unsafe { sys::energy_job_is_configuring(job_rec) };
        // SAFETY: a batch job we just started, under the job write lock; the shim records its
        // batch host and batch step as launch_job() would.
        let prepared = |job| job_rec.batch_flag == 0 || unsafe { sys::energy_prepare_batch_launch(job) } == 0;
        if self.save_before_launch() && launches && prepared(job) {
            // Launched once the job state file holds this start (crate::launch).
            self.keep_back(job_rec.job_id, job_rec.start_time);
        } else if job_rec.batch_flag == 0 {
            // SAFETY: an allocation: answer the waiting salloc/srun, as sched/backfill does.
            unsafe { call!(api, srun_allocate(job)) };
        } else if !unsafe { sys::energy_job_is_configuring(job_rec) } {
            // SAFETY: a batch job whose nodes are ready: send the launch RPC.
            unsafe { call!(api, launch_job(job)) };
        }
        // SAFETY: node list string owned by the record.
        let nodes = unsafe { crate::node::opt_str(job_rec.nodes) }.unwrap_or("").to_string();
        Ok(Started { job_id: job_rec.job_id, nodes })
    }

    /// Slurm's will-run test for pending job `job_id` over `candidates` (node table indices)
    /// through the queue record `route`, as sched/backfill asks it for a job it cannot start
    /// now: when (Unix time) and on which node table indices Slurm's node selection expects
    /// to start it as running jobs end. Nothing of the job changes but its `start_time`. Needs
    /// the job write and node read locks.
    pub fn will_run(&self, job_id: u32, candidates: &[usize], route: Option<&crate::routes::RouteApply>) -> Result<(i64, Vec<usize>), StartError> {
        self.require("Slurm's will-run test", |l| l.job, LockLevel::Write)?;
        self.require("Slurm's will-run test", |l| l.node, LockLevel::Read)?;
        let api = self.api();
        let table = table_len(api);
        if candidates.is_empty() || candidates.iter().any(|&n| n >= table) {
            return Err(StartError::BadNodes);
        }
        // SAFETY: lookup under the job write lock.
        let job = unsafe { call!(api, find_job_record(job_id)) };
        // SAFETY: NULL or a record under the job write lock.
        let Some(job_rec) = (unsafe { job.as_mut() }) else { return Err(StartError::NotPending) };
        // SAFETY: the shim reads state fields only.
        if !unsafe { sys::energy_job_is_pending(job_rec) } {
            return Err(StartError::NotPending);
        }
        // SAFETY: a record under the job write lock.
        let saved = unsafe { apply_route(job, route) }?;
        let mut avail = Bitmap::new(api, table);
        for &n in candidates {
            avail.set(n);
        }
        let mut start: sys::time_t = 0;
        let mut nodes: *mut sys::bitstr_t = std::ptr::null_mut();
        // SAFETY: job and node locks held (checked above); `avail` stays ours; on success the
        // shim hands us a new bitmap in `nodes`.
        let rc = unsafe { sys::energy_will_run(job, avail.as_ref().as_ptr(), &mut start, &mut nodes) };
        // SAFETY: what the shim returned is ours to free.
        let nodes = unsafe { Bitmap::from_raw(api, nodes) };
        // SAFETY: undoes the route applied above.
        unsafe { sys::energy_route_undo(job, &saved) };
        if rc != sys::SLURM_SUCCESS as i32 {
            return Err(StartError::Slurm { code: rc, reason: strerror(api, rc) });
        }
        Ok((start as i64, nodes.map(|b| b.as_ref().ones()).unwrap_or_default()))
    }

    /// Sets the reason a pending job shows (`squeue` %R, `scontrol show job` Reason=: the
    /// job's `state_desc`, which both print instead of the reason code when set). Does nothing
    /// when the job is not pending or already shows `text`. Slurm clears it when the job
    /// starts. Needs the job write lock. Returns whether the text was set.
    pub fn set_pending_reason(&mut self, job_id: u32, text: &str) -> Result<bool, NotLocked> {
        self.require("a job's pending reason", |l| l.job, LockLevel::Write)?;
        let api = self.api();
        // SAFETY: find_job_record reads the job hash under the job lock we hold.
        let job = unsafe { call!(api, find_job_record(job_id)) };
        // SAFETY: NULL or a record we may modify under the job write lock.
        let Some(rec) = (unsafe { job.as_mut() }) else { return Ok(false) };
        // SAFETY: the shim only reads state fields of a valid record.
        if !unsafe { sys::energy_job_is_pending(rec) } {
            return Ok(false);
        }
        // SAFETY: state_desc is NULL or a string owned by the record.
        if unsafe { crate::node::opt_str(rec.state_desc) } == Some(text) {
            return Ok(false);
        }
        let Ok(c_text) = CString::new(text.replace('\0', " ")) else { return Ok(false) };
        // SAFETY: state_desc is an xmalloc'd string owned by the record (or NULL): freed with
        // slurm_xfree (which NULLs it) and replaced by Slurm's own copy, under the job write lock.
        unsafe {
            let mut old = rec.state_desc as *mut std::ffi::c_void;
            call!(api, slurm_xfree(&mut old));
            rec.state_desc = call!(api, xstrdup(c_text.as_ptr()));
            *api.raw().last_job_update = now();
        }
        Ok(true)
    }

    /// Raises a running job's time limit to `limit_min` minutes the way `scontrol update
    /// TimeLimit=` does for an operator (see `energy_extend_time_limit` in the shim): never
    /// lowers it, never above the partition's MaxTime or the QOS's or association's MaxWall,
    /// never for a job whose limit an admin set, with the accounting policy told, the end time
    /// moved and slurmdbd's record updated. Jobs without a limit are left alone. Needs the job
    /// write and partition read locks. Returns `(old, new)` minutes when the limit changed.
    pub fn extend_time_limit(&mut self, job_id: u32, limit_min: u32) -> Result<Option<(u32, u32)>, NotLocked> {
        self.require("a job's time limit", |l| l.job, LockLevel::Write)?;
        self.require("a job's time limit", |l| l.part, LockLevel::Read)?;
        let api = self.api();
        // SAFETY: lookup under the job write lock.
        let job = unsafe { call!(api, find_job_record(job_id)) };
        if job.is_null() {
            return Ok(None);
        }
        let (mut old, mut new) = (0u32, 0u32);
        // SAFETY: a job record under the job write and partition read locks; the shim takes the
        // association manager's read locks itself.
        let changed = unsafe { sys::energy_extend_time_limit(job, limit_min, &mut old, &mut new) };
        Ok(changed.then_some((old, new)))
    }

    /// Marks the nodes at these table indices PLANNED (sinfo's `planned`: held for waiting
    /// jobs) and unmarks every other node, as sched/backfill does after each cycle; allocated
    /// nodes are never marked. Needs the node write lock. Returns how many nodes changed.
    pub fn set_planned_nodes(&mut self, planned: &std::collections::HashSet<usize>) -> Result<usize, NotLocked> {
        self.require("planned nodes", |l| l.node, LockLevel::Write)?;
        let table = crate::node::table_len(self.api());
        // SAFETY: the shim checks the index and changes only the node's state flag, under the
        // node write lock we hold.
        Ok((0..table).filter(|i| unsafe { sys::energy_node_set_planned(*i as i32, planned.contains(i)) }).count())
    }

    /// Clears every pending job's expected start and scheduled nodes (`squeue --start`), as
    /// sched/backfill clears them at the start of each apply phase: a job that lost its place in
    /// the plan shows no stale estimate. Needs the job write lock. Returns how many were set.
    pub fn clear_expected_starts(&mut self) -> Result<usize, NotLocked> {
        self.require("clearing expected starts", |l| l.job, LockLevel::Write)?;
        let api = self.api();
        // SAFETY: job_list is slurmctld's list of job records, valid under the job lock.
        let list = unsafe { *api.raw().job_list };
        // SAFETY: as above; items are job_record_t.
        let Some(items) = (unsafe { crate::list::ListIter::new(api, list) }) else { return Ok(0) };
        let mut cleared = 0;
        for p in items {
            // SAFETY: an item of job_list, a job record we may modify under the job write lock.
            let Some(rec) = (unsafe { (p as *mut sys::job_record_t).as_mut() }) else { continue };
            // SAFETY: the shim only reads state fields of a valid record.
            if !unsafe { sys::energy_job_is_pending(rec) } || (rec.start_time == 0 && rec.sched_nodes.is_null()) {
                continue;
            }
            rec.start_time = 0;
            // SAFETY: sched_nodes is NULL or an xmalloc'd string owned by the record.
            unsafe {
                let mut old = rec.sched_nodes as *mut std::ffi::c_void;
                call!(api, slurm_xfree(&mut old));
            }
            rec.sched_nodes = std::ptr::null_mut();
            cleared += 1;
        }
        Ok(cleared)
    }

    /// Burst buffers: starts stage-in for pending jobs expected to start within ten hours (the
    /// StartTime this cycle set), as sched/backfill does after each of its cycles, so that a
    /// job's data is in place when its nodes free up. Needs the job write lock.
    pub fn try_stage_in_burst_buffers(&mut self) -> Result<(), NotLocked> {
        self.require("burst buffer stage-in", |l| l.job, LockLevel::Write)?;
        // SAFETY: slurmctld's own call, made with the job lock held as backfill makes it.
        unsafe { sys::energy_bb_try_stage_in() };
        Ok(())
    }

    /// Stamps `LastSchedEval` (scontrol show job) on each pending job of `job_ids` with `now`, as
    /// sched/backfill does for every job it evaluates. Needs the job write lock. Returns how
    /// many it stamped.
    pub fn note_evaluated(&mut self, job_ids: impl Iterator<Item = u32>, now: i64) -> Result<usize, NotLocked> {
        self.require("a job's last evaluation", |l| l.job, LockLevel::Write)?;
        let api = self.api();
        let mut stamped = 0;
        for job_id in job_ids {
            // SAFETY: lookup under the job write lock.
            let job = unsafe { call!(api, find_job_record(job_id)) };
            // SAFETY: NULL or a record we may modify under the job write lock.
            let Some(rec) = (unsafe { job.as_mut() }) else { continue };
            // SAFETY: the shim only reads state fields of a valid record.
            if unsafe { sys::energy_job_is_pending(rec) } {
                rec.last_sched_eval = now as sys::time_t;
                stamped += 1;
            }
        }
        Ok(stamped)
    }

    /// Sets what `squeue --start` shows for a pending job the scheduler holds nodes for: its
    /// expected start and those nodes (`start_time`, `sched_nodes`, as sched/backfill sets
    /// them), and its reason: `Resources` for the first job that waits in its partition (or
    /// reservation), `Priority` for the ones behind it (`behind_higher_priority`), as
    /// slurmctld's main scheduler gives them. Needs the job write lock. Returns whether the
    /// job was found pending.
    pub fn set_expected_start(&mut self, job_id: u32, start: i64, nodes: &str, behind_higher_priority: bool) -> Result<bool, NotLocked> {
        self.require("a job's expected start", |l| l.job, LockLevel::Write)?;
        let api = self.api();
        // SAFETY: lookup under the job write lock.
        let job = unsafe { call!(api, find_job_record(job_id)) };
        // SAFETY: NULL or a record we may modify under the job write lock.
        let Some(rec) = (unsafe { job.as_mut() }) else { return Ok(false) };
        // SAFETY: the shim only reads state fields of a valid record.
        if !unsafe { sys::energy_job_is_pending(rec) } {
            return Ok(false);
        }
        rec.start_time = start as sys::time_t;
        // SAFETY: a pending record under the job write lock.
        unsafe {
            if behind_higher_priority {
                sys::energy_job_wait_priority(rec);
            } else {
                sys::energy_job_wait_resources(rec);
            }
        }
        let Ok(c_nodes) = CString::new(nodes.replace('\0', " ")) else { return Ok(false) };
        // SAFETY: sched_nodes is NULL or an xmalloc'd string owned by the record: freed with
        // slurm_xfree and replaced by Slurm's own copy, under the job write lock.
        unsafe {
            let mut old = rec.sched_nodes as *mut std::ffi::c_void;
            call!(api, slurm_xfree(&mut old));
            rec.sched_nodes = call!(api, xstrdup(c_nodes.as_ptr()));
        }
        Ok(true)
    }

    /// Sets a job's admin comment (shown by `scontrol show job` and stored in accounting when
    /// the job ends). Needs the job write lock.
    pub fn set_admin_comment(&mut self, job_id: u32, text: &str) -> Result<bool, NotLocked> {
        self.require("a job's admin comment", |l| l.job, LockLevel::Write)?;
        let api = self.api();
        // SAFETY: lookup under the job write lock.
        let job = unsafe { call!(api, find_job_record(job_id)) };
        // SAFETY: NULL or a record we may modify under the job write lock.
        match unsafe { job.as_mut() } {
            Some(rec) => {
                set_admin_comment(api, rec, text);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// 22.05's `select_nodes(job, test_only, select_node_bitmap, err_msg, submission, scheduler)`.
///
/// # Safety
/// Job and node write locks held; `job` a valid pending record.
#[cfg(not(slurm_ge_24_11))]
unsafe fn select_nodes(api: &crate::Api, job: *mut sys::job_record_t) -> i32 {
    // SAFETY: forwarded contract.
    unsafe {
        call!(api, select_nodes(job, false, std::ptr::null_mut(), std::ptr::null_mut(), false, sys::energy_job_flag_backfill()))
    }
}

/// 24.11's `select_nodes(job_node_select, test_only, submission, scheduler)`: the job travels in
/// a `job_node_select_t` (whose other fields are outputs).
///
/// # Safety
/// Job and node write locks held; `job` a valid pending record.
#[cfg(slurm_ge_24_11)]
unsafe fn select_nodes(api: &crate::Api, job: *mut sys::job_record_t) -> i32 {
    // SAFETY: plain C data (pointers and integers) for which all-zero is "nothing set", as
    // sched/backfill's designated initialiser leaves it.
    let mut select: sys::job_node_select_t = unsafe { std::mem::zeroed() };
    select.job_ptr = job;
    // SAFETY: forwarded contract; `select` outlives the call, which keeps no pointer to it.
    unsafe { call!(api, select_nodes(&mut select, false, false, sys::energy_job_flag_backfill())) }
}

fn set_admin_comment(api: &crate::Api, rec: &mut sys::job_record_t, text: &str) {
    let Ok(text) = CString::new(text.replace('\0', " ")) else { return };
    // SAFETY: admin_comment is NULL or xmalloc'ed by Slurm: free it with Slurm's allocator and
    // replace it with an xstrdup copy that Slurm will free in turn.
    unsafe {
        let mut old = rec.admin_comment as *mut std::ffi::c_void;
        call!(api, slurm_xfree(&mut old));
        rec.admin_comment = call!(api, xstrdup(text.as_ptr()));
    }
}

fn now() -> sys::time_t {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as sys::time_t)
}


/// Applies queue record `route` (partition, reservation) to a job as sched/backfill does for
/// the moment of a test or start; returns what to undo with `energy_route_undo`.
///
/// # Safety
/// `job` is a valid record under the job write lock.
unsafe fn apply_route(job: *mut sys::job_record_t, route: Option<&crate::routes::RouteApply>) -> Result<sys::energy_route_saved_t, StartError> {
    // SAFETY: valid per the contract.
    let job_rec = unsafe { &*job };
    // SAFETY: zeroed is a valid "nothing applied" record for the plain-data struct.
    let mut saved: sys::energy_route_saved_t = unsafe { std::mem::zeroed() };
    saved.part_ptr = job_rec.part_ptr;
    saved.resv_ptr = job_rec.resv_ptr as *mut std::ffi::c_void;
    saved.resv_id = job_rec.resv_id;
    if let Some(r) = route {
        let Ok(part) = CString::new(r.partition.as_str()) else { return Err(StartError::Route("partition name")) };
        let resv = match r.reservation.as_deref().map(CString::new) {
            None => None,
            Some(Ok(c)) => Some(c),
            Some(Err(_)) => return Err(StartError::Route("reservation name")),
        };
        let resv_ptr = resv.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        // SAFETY: names outlive the call; the job is modifiable under the job write lock.
        let why = unsafe { sys::energy_route_apply(job, part.as_ptr(), resv_ptr, r.magnetic, &mut saved) };
        if !why.is_null() {
            // SAFETY: undoes whatever the apply changed before refusing.
            unsafe { sys::energy_route_undo(job, &saved) };
            return Err(StartError::Route(crate::routes_text(why)));
        }
    }
    Ok(saved)
}
