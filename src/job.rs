//! Read-only views of slurmctld's job records (`job_list`) and of the pending queue as
//! slurmctld orders it (`build_job_queue` + `sort_job_queue`).

use std::ffi::CStr;

use crate::api::{Api, call};
use crate::bitmap::BitmapRef;
use crate::list::ListIter;
use crate::locks::{LockLevel, NotLocked, SlurmctldLock};
use crate::node::opt_str;
use crate::sys;
use crate::{INFINITE, NO_VAL};

/// One job record, valid while the guard that produced it lives.
#[derive(Clone, Copy)]
pub struct JobRef<'a> {
    api: &'static Api,
    rec: &'a sys::job_record_t,
}

/// A job's time limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeLimit {
    Minutes(u32),
    Unlimited,
    /// Not set: the partition's default applies.
    Unset,
}

/// Memory a job asked for on each node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryRequest {
    PerNode(u64),
    PerCpu(u64),
}

/// What a running job holds on one of its nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeHolding {
    /// Index in the node table.
    pub node: usize,
    pub cpus: u32,
    pub memory_mb: u64,
    /// Indices of the GPUs (bits of the node's `gpu` GRES) the job holds there.
    pub gpu_indices: Vec<u32>,
    /// Indices of the GPUs whose `gres/shard`s the job holds there (shared GPUs). In 22.05 a
    /// job's shard `gres_bit_alloc` has one bit per GPU of the node (the shard GRES's
    /// topology is the GPUs'), so its bits are GPU indices, as for `gpu`.
    pub shard_gpu_indices: Vec<u32>,
}

impl<'a> JobRef<'a> {
    /// # Safety
    /// `rec` must be a valid job record for `'a` (the job lock is held for `'a`).
    pub(crate) unsafe fn new(api: &'static Api, rec: *const sys::job_record_t) -> Option<JobRef<'a>> {
        // SAFETY: forwarded contract (NULL-checked).
        unsafe { rec.as_ref() }.map(|rec| JobRef { api, rec })
    }

    /// The record itself, for the crate's own FFI calls.
    pub(crate) fn raw(&self) -> &'a sys::job_record_t {
        self.rec
    }

    fn details(&self) -> Option<&'a sys::energy_job_details_t> {
        // SAFETY: details is NULL or owned by the record.
        unsafe { self.rec.details.as_ref() }
    }

    pub fn id(&self) -> u32 {
        self.rec.job_id
    }
    pub fn user_id(&self) -> u32 {
        self.rec.user_id
    }
    pub fn priority(&self) -> u32 {
        self.rec.priority
    }
    pub fn is_pending(&self) -> bool {
        // SAFETY: the shim only reads state fields of a valid record.
        unsafe { sys::energy_job_is_pending(self.rec) }
    }
    pub fn is_running(&self) -> bool {
        // SAFETY: as above.
        unsafe { sys::energy_job_is_running(self.rec) }
    }
    pub fn is_suspended(&self) -> bool {
        // SAFETY: as above.
        unsafe { sys::energy_job_is_suspended(self.rec) }
    }
    /// Ended (completed, failed, timed out, cancelled, ...), possibly still completing.
    pub fn is_finished(&self) -> bool {
        // SAFETY: as above.
        unsafe { sys::energy_job_is_finished(self.rec) }
    }
    pub fn is_completing(&self) -> bool {
        // SAFETY: as above.
        unsafe { sys::energy_job_is_completing(self.rec) }
    }
    /// Batch job (`sbatch`) rather than an allocation (`salloc`, `srun` without a batch script).
    pub fn is_batch(&self) -> bool {
        self.rec.batch_flag != 0
    }
    /// Component of a heterogeneous job (only sched/backfill may start those).
    pub fn is_het(&self) -> bool {
        self.rec.het_job_id != 0
    }
    pub fn submit_time(&self) -> i64 {
        self.details().map_or(0, |d| d.submit_time)
    }
    pub fn start_time(&self) -> i64 {
        self.rec.start_time
    }
    pub fn end_time(&self) -> i64 {
        self.rec.end_time
    }
    pub fn time_limit(&self) -> TimeLimit {
        match self.rec.time_limit {
            NO_VAL => TimeLimit::Unset,
            INFINITE => TimeLimit::Unlimited,
            m => TimeLimit::Minutes(m),
        }
    }
    /// The partition's default (else maximum) time limit.
    pub fn partition_time_limit(&self) -> TimeLimit {
        // SAFETY: part_ptr is NULL or a partition record, stable under the partition lock the
        // scheduler lock set includes.
        let Some(part) = (unsafe { self.rec.part_ptr.as_ref() }) else { return TimeLimit::Unset };
        for m in [part.default_time, part.max_time] {
            match m {
                NO_VAL => continue,
                INFINITE => return TimeLimit::Unlimited,
                m => return TimeLimit::Minutes(m),
            }
        }
        TimeLimit::Unset
    }
    pub fn partition(&self) -> &'a str {
        // SAFETY: job's partition name string, NULL or owned by the record.
        unsafe { opt_str(self.rec.partition) }.unwrap_or("")
    }
    pub fn min_nodes(&self) -> u32 {
        self.details().map_or(1, |d| d.min_nodes.max(1))
    }
    pub fn min_cpus(&self) -> u32 {
        self.details().map_or(1, |d| d.min_cpus.max(1))
    }
    pub fn pn_min_cpus(&self) -> u32 {
        self.details().map_or(1, |d| d.pn_min_cpus.max(1))
    }
    pub fn memory_request(&self) -> MemoryRequest {
        let raw = self.details().map_or(0, |d| d.pn_min_memory);
        // SAFETY: the shim returns a constant.
        let flag = unsafe { sys::energy_mem_per_cpu_flag() };
        if raw & flag != 0 { MemoryRequest::PerCpu(raw & !flag) } else { MemoryRequest::PerNode(raw) }
    }
    /// Asked for whole nodes (`--exclusive`), or its partition gives only whole nodes
    /// (`OverSubscribe=EXCLUSIVE`).
    pub fn whole_node(&self) -> bool {
        // SAFETY: part_ptr is NULL or a partition record, stable under the partition lock.
        let part_exclusive = unsafe { self.rec.part_ptr.as_ref() }.is_some_and(|p| p.max_share == 0);
        part_exclusive || self.details().is_some_and(|d| d.whole_node != 0)
    }
    /// How far Slurm lets the slowdown extension raise this job's time limit (minutes):
    /// partition MaxTime, QOS / partition QOS / association MaxWall, the deadline, or its own
    /// limit when an admin set it. `None` when nothing caps it. Needs the job and partition read
    /// locks.
    pub fn limit_cap_min(&self, now: i64) -> Option<u32> {
        // SAFETY: the shim only reads the record (and the QOS and association records under the
        // association manager's read locks, which it takes).
        let cap = unsafe { sys::energy_job_limit_cap(self.rec, now as sys::time_t) };
        (cap != crate::INFINITE && cap != crate::NO_VAL).then_some(cap)
    }
    /// Whether sched/backfill would reserve for this job when it cannot start (not with a
    /// NoReserve QOS, below the QOS's MinPrioThreshold or `bf_min_prio_reserve`, or eligible for
    /// less than `bf_min_age_reserve` seconds). Needs the job read lock.
    pub fn reserves(&self, min_prio_reserve: u32, min_age_reserve_s: u32, now: i64) -> bool {
        // SAFETY: the shim reads the record and, under the QOS read lock it takes, its QOS.
        unsafe { sys::energy_job_reserves(self.rec as *const sys::job_record_t as *mut sys::job_record_t, min_prio_reserve, min_age_reserve_s, now as sys::time_t) }
    }
    /// `--time-min` (minutes), if given: Slurm may start the job with any limit from it up to
    /// its `--time` to fit it before a reservation.
    pub fn time_min(&self) -> Option<u32> {
        let m = self.rec.time_min;
        (m != 0 && m != NO_VAL && m != INFINITE).then_some(m)
    }
    /// `--deadline` (Unix time), if given.
    pub fn deadline(&self) -> Option<i64> {
        // time_t: i64 here, narrower on some platforms.
        #[allow(clippy::unnecessary_cast)]
        let d = self.rec.deadline as i64;
        (d > 0 && d != i64::from(crate::NO_VAL)).then_some(d)
    }
    /// Asks for a layout Slurm's node selection makes itself: `--spread-job`, `--contiguous`,
    /// `--switches`, `-N min-max` (as many nodes as it can within the range), `--prefer`,
    /// changeable features, several nodes under a topology plugin, a partition with
    /// MaxCPUsPerNode; or the site uses what only the select plugin counts (MCS labels with
    /// `MCSParameters=select`, reservations of part of a node's cores). Call it where the
    /// snapshot is taken: with the job and node read locks held (reservations change under the
    /// node lock).
    pub fn layout_by_slurm(&self) -> bool {
        // SAFETY: the shim reads the record's flags and details, slurm_conf, and resv_list under
        // the node read lock the snapshot holds.
        unsafe { sys::energy_job_layout_by_slurm(self.rec) }
    }
    pub fn tres_per_node(&self) -> Option<&'a str> {
        // SAFETY: strings owned by the record.
        unsafe { opt_str(self.rec.tres_per_node) }
    }
    pub fn tres_per_job(&self) -> Option<&'a str> {
        // SAFETY: as above.
        unsafe { opt_str(self.rec.tres_per_job) }
    }
    pub fn tres_per_task(&self) -> Option<&'a str> {
        // SAFETY: as above.
        unsafe { opt_str(self.rec.tres_per_task) }
    }
    /// For the pending record of a job array (its meta record): tasks still to start, and how
    /// many more may run now under `--array=...%N` (`None` = no throttle). `None` for other jobs.
    pub fn array_tasks_startable(&self) -> Option<(u32, Option<u32>)> {
        // SAFETY: array_recs is NULL or owned by the record.
        let recs = unsafe { self.rec.array_recs.as_ref() }?;
        let room = (recs.max_run_tasks > 0).then(|| recs.max_run_tasks.saturating_sub(recs.tot_run_tasks.saturating_add(recs.pend_run_tasks)));
        Some((recs.task_cnt, room))
    }
    /// `--ntasks-per-node` (0 when not given).
    pub fn ntasks_per_node(&self) -> u32 {
        self.details().map_or(0, |d| u32::from(d.ntasks_per_node).min(u32::from(u16::MAX - 1)))
    }
    /// `-N min-max`'s maximum (0 or `INFINITE` when not given).
    pub fn max_nodes(&self) -> u32 {
        self.details().map_or(0, |d| d.max_nodes)
    }
    pub fn cpus_per_task(&self) -> u32 {
        self.details().map_or(1, |d| u32::from(d.cpus_per_task).max(1))
    }
    /// `--cpus-per-gpu` as stored (`gres:gpu:N`, semicolon separated).
    pub fn cpus_per_tres(&self) -> Option<&'a str> {
        // SAFETY: string owned by the record.
        unsafe { opt_str(self.rec.cpus_per_tres) }
    }
    /// `--mem-per-gpu` as stored (`gres:gpu:MB`, semicolon separated).
    pub fn mem_per_tres(&self) -> Option<&'a str> {
        // SAFETY: string owned by the record.
        unsafe { opt_str(self.rec.mem_per_tres) }
    }
    pub fn num_tasks(&self) -> u32 {
        self.details().map_or(1, |d| d.num_tasks.max(1))
    }
    pub fn admin_comment(&self) -> Option<&'a str> {
        // SAFETY: as above.
        unsafe { opt_str(self.rec.admin_comment) }
    }
    /// Nodes a scheduler expects a pending job to start on (`squeue --start`'s SCHEDNODES).
    pub fn sched_nodes(&self) -> Option<&'a str> {
        // SAFETY: as above.
        unsafe { opt_str(self.rec.sched_nodes) }
    }
    /// Node list as Slurm prints it (`n[1-2]`), for running jobs.
    pub fn nodes(&self) -> Option<&'a str> {
        // SAFETY: as above.
        unsafe { opt_str(self.rec.nodes) }
    }

    /// `KEY=VALUE` entries of the job's SPANK environment (where SPANK options arrive as
    /// `_SLURM_SPANK_OPTION_<plugin>_<option>=<value>`).
    pub fn spank_env(&self) -> Vec<(&'a str, &'a str)> {
        let env = self.rec.spank_job_env;
        if env.is_null() {
            return Vec::new();
        }
        (0..self.rec.spank_job_env_size as usize)
            // SAFETY: `spank_job_env` holds `spank_job_env_size` entries, each NULL or a string.
            .filter_map(|i| unsafe { opt_str(*env.add(i)) })
            .filter_map(|kv| kv.split_once('='))
            .collect()
    }

    /// The nodes it holds, with CPUs, memory and GPUs on each (running and suspended jobs).
    pub fn holdings(&self) -> Vec<NodeHolding> {
        // SAFETY: node_bitmap is NULL or owned by the record, stable under the job lock.
        let Some(bitmap) = (unsafe { BitmapRef::new(self.api, self.rec.node_bitmap) }) else { return Vec::new() };
        let nodes = bitmap.ones();
        // SAFETY: job_resrcs is NULL or owned by the record.
        let res = unsafe { self.rec.job_resrcs.as_ref() };
        let gpu_bits = self.gres_bitmaps("gpu", nodes.len());
        let shard_bits = self.gres_bitmaps("shard", nodes.len());
        nodes
            .iter()
            .enumerate()
            .map(|(offset, &node)| {
                let (cpus, memory_mb) = match res {
                    Some(r) if (offset as u32) < r.nhosts => {
                        // SAFETY: cpus/memory_allocated hold `nhosts` entries when non-NULL.
                        let cpus = if r.cpus.is_null() { 0 } else { (unsafe { *r.cpus.add(offset) }) as u32 };
                        // SAFETY: as above.
                        let mem = if r.memory_allocated.is_null() { 0 } else { unsafe { *r.memory_allocated.add(offset) } };
                        (cpus, mem)
                    }
                    _ => (0, 0),
                };
                let gpu_indices = gpu_bits.get(offset).cloned().unwrap_or_default();
                let shard_gpu_indices = shard_bits.get(offset).cloned().unwrap_or_default();
                NodeHolding { node, cpus, memory_mb, gpu_indices, shard_gpu_indices }
            })
            .collect()
    }

    /// Per node offset of the job, the bits of GRES `name` allocated (from `gres_list_alloc`):
    /// GPU indices for `gpu` and for `shard`.
    fn gres_bitmaps(&self, name: &str, node_count: usize) -> Vec<Vec<u32>> {
        let mut out = vec![Vec::new(); node_count];
        // SAFETY: gres_list_alloc is NULL or a List owned by the record; items are
        // gres_state_t whose gres_data is a gres_job_state_t (job context).
        let Some(items) = (unsafe { ListIter::new(self.api, self.rec.gres_list_alloc) }) else { return out };
        for item in items {
            // SAFETY: see above.
            let state = unsafe { &*(item as *const sys::gres_state_t) };
            // SAFETY: gres_name is NULL or a string owned by the state.
            if unsafe { opt_str(state.gres_name) } != Some(name) || state.gres_data.is_null() {
                continue;
            }
            // SAFETY: job-context GRES data (see above).
            let data = unsafe { &*(state.gres_data as *const sys::gres_job_state_t) };
            if data.gres_bit_alloc.is_null() {
                continue;
            }
            for (offset, slot) in out.iter_mut().enumerate().take(data.node_cnt as usize) {
                // SAFETY: gres_bit_alloc holds node_cnt entries, each NULL or a bitmap.
                let bits = unsafe { BitmapRef::new(self.api, *data.gres_bit_alloc.add(offset)) };
                if let Some(bits) = bits {
                    slot.extend(bits.ones().into_iter().map(|b| b as u32));
                }
            }
        }
        out
    }
}

/// One entry of slurmctld's pending queue, judged by Slurm's own tests.
#[derive(Clone)]
pub struct QueuedJob<'a> {
    pub job: JobRef<'a>,
    /// Priority in the partition this entry is for.
    pub priority: u32,
    /// Why the job cannot start at all this cycle (held, dependency, `--begin`, array
    /// throttle, ...), as sched/backfill checks before testing it; `None` when it may.
    pub not_runnable: Option<&'static str>,
    /// Where and from when it may start through this entry (empty when `not_runnable`).
    pub route: Option<crate::routes::Route>,
}

impl SlurmctldLock {
    /// Every job record. Needs the job read lock.
    pub fn jobs(&self) -> Result<Vec<JobRef<'_>>, NotLocked> {
        self.require("job records", |l| l.job, LockLevel::Read)?;
        let api = self.api();
        // SAFETY: job_list is slurmctld's list of job records, valid under the job lock.
        let list = unsafe { *api.raw().job_list };
        // SAFETY: as above; items are job_record_t.
        let Some(items) = (unsafe { ListIter::new(api, list) }) else { return Ok(Vec::new()) };
        // SAFETY: items of job_list are job records, valid under the job lock (`'_`).
        Ok(items.filter_map(|p| unsafe { JobRef::new(api, p as *const sys::job_record_t) }).collect())
    }

    /// Pending jobs slurmctld considers runnable (partition up, ...), highest priority first,
    /// as `build_job_queue` + `sort_job_queue` give them to sched/backfill: one entry per
    /// (job, partition) and per (job, reservation) where a job has several. Each entry is
    /// judged at `now` (see [`QueuedJob`]); judging stops after entries of `max_jobs` distinct
    /// runnable jobs, which bounds the time under the locks (entries after that are not
    /// returned). Needs the job write, node read and partition read locks (building the queue
    /// updates pending reasons, judging applies a record's partition to its job for a moment).
    pub fn job_queue(&self, now: i64, max_jobs: usize) -> Result<Vec<QueuedJob<'_>>, NotLocked> {
        self.require("the job queue", |l| l.job, LockLevel::Write)?;
        self.require("the job queue", |l| l.part, LockLevel::Read)?;
        self.require("the job queue", |l| l.node, LockLevel::Read)?;
        let api = self.api();
        // SAFETY: we hold the job write and partition read locks, as sched/backfill does
        // around the same calls; we own the returned list and destroy it below.
        let queue = unsafe { call!(api, build_job_queue(false, true)) };
        if queue.is_null() {
            return Ok(Vec::new());
        }
        // SAFETY: as above.
        unsafe { call!(api, sort_job_queue(queue)) };
        let mut out = Vec::new();
        let mut runnable_jobs = std::collections::HashSet::new();
        // SAFETY: a valid list whose items are job_queue_rec_t.
        if let Some(items) = unsafe { ListIter::new(api, queue) } {
            for item in items {
                // SAFETY: see above.
                let rec = unsafe { &*(item as *const sys::job_queue_rec_t) };
                if rec.job_ptr.is_null() {
                    continue;
                }
                let job_id = rec.job_id;
                if !runnable_jobs.contains(&job_id) && runnable_jobs.len() >= max_jobs {
                    break;
                }
                // SAFETY: a job record under the job write lock (job_independent may update
                // its dependency state, as it does for sched/backfill).
                let not_runnable = unsafe { sys::energy_job_not_runnable(rec.job_ptr) };
                let not_runnable = (!not_runnable.is_null()).then(|| crate::routes_text(not_runnable));
                let route = if not_runnable.is_none() {
                    runnable_jobs.insert(job_id);
                    // SAFETY: a live record of the queue built under our locks.
                    Some(unsafe { self.route_of(item, now) })
                } else {
                    None
                };
                // SAFETY: the record's job pointer is a job record valid under the job lock.
                if let Some(job) = unsafe { JobRef::new(api, rec.job_ptr) } {
                    out.push(QueuedJob { job, priority: rec.priority, not_runnable, route });
                }
            }
        }
        // SAFETY: we own the list; its destructor frees the queue records (not the jobs).
        unsafe { call!(api, list_destroy(queue)) };
        Ok(out)
    }

    /// Looks a job up by id. Needs the job read lock.
    pub fn find_job(&self, job_id: u32) -> Result<Option<JobRef<'_>>, NotLocked> {
        self.require("job records", |l| l.job, LockLevel::Read)?;
        let api = self.api();
        // SAFETY: find_job_record only reads the job hash under the job lock we hold.
        let rec = unsafe { call!(api, find_job_record(job_id)) };
        // SAFETY: NULL or a record valid under the lock.
        Ok(unsafe { JobRef::new(api, rec) })
    }
}

/// Slurm's text for an error code.
pub fn strerror(api: &Api, code: i32) -> String {
    // SAFETY: slurm_strerror returns a static string for any code.
    let p = unsafe { call!(api, slurm_strerror(code)) };
    if p.is_null() {
        return format!("error {code}");
    }
    // SAFETY: static NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}
