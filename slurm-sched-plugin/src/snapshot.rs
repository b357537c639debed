//! slurmctld's records -> the planner's [`Snapshot`]: nodes, running jobs with what they hold
//! and when they end at the latest, pending jobs in slurmctld's priority order with their
//! requests and hints. Only translation: no decision is made here.
//!
//! GPU sharing exists in Slurm only through `gres/shard` (a GPU handed out as `gpu` is never
//! shared, and the reverse), so: a job holding or asking for `gpu` is exclusive whatever its
//! hints; a job asking for `shard:K` is a one-GPU-per-node job that shares unless it said
//! `--energy-share=deny`; a running shard job is a tenant of the GPU(s) its shards are on.
//! The snapshot also lists the shard jobs ([`ShardJobs`]); the node rules that keep `deny` shard
//! jobs alone and `gpu` jobs off nodes with shard jobs are the planner's, in
//! `model::shard_placement` (22.05.8's cons_tres may hand a GPU that holds shards to a `gpu` job:
//! it only counts, not excludes, the GPUs the other GRES holds when it picks a `gpu` job's bits).

use std::collections::{BTreeMap, HashSet};

use model::shard_placement::ShardJobs;

use model::eligibility::{AdvanceReservation, Eligibility, NodeSet, NodeSetInterner};
use model::types::{GpuType, JobId, Node, NodeAllocation, NodeIdx, PendingJob, PowerState, Request, RunningJob, Snapshot};
use slurm_bindings::routes::{RouteApply, RouteStatus};
use slurm_bindings::conf::ConfView;
use slurm_bindings::gres;
use slurm_bindings::job::{JobRef, MemoryRequest, TimeLimit};
use slurm_bindings::locks::{NotLocked, SlurmctldLock};

use crate::config::Config;
use crate::hints;

/// "Unlimited" as the planner sees it.
const UNLIMITED_S: f64 = model::types::UNLIMITED_TIME_S;
/// A job without any limit the planner can use.
const FALLBACK_LIMIT_S: f64 = 3600.0;

/// A snapshot and how to map its node indices back to slurmctld's node table.
pub struct Built {
    /// The queue records the planner's eligibility routes stand for (route = index).
    pub routes: Vec<RouteApply>,
    /// Pending jobs Slurm says cannot start this cycle (held, dependency, limits...).
    pub not_runnable: usize,
    pub snapshot: Snapshot,
    /// Snapshot node index -> node table index.
    pub table_index: Vec<usize>,
    pub node_names: Vec<String>,
    /// Pending jobs left out (heterogeneous, or nothing usable), for the statistics.
    pub skipped: usize,
    /// Pending heterogeneous jobs (sched/energy never starts them: slurmctld refuses new ones
    /// at submission, but a site that switches schedulers may have some queued).
    pub hetjobs: Vec<u32>,
    pub shards: ShardJobs,
    /// `--time-min` jobs planned with their minimum (job id -> the limit they asked for, s):
    /// started, each gets the room its nodes have before the next held window, up to that.
    pub time_min_jobs: BTreeMap<u32, f64>,
    /// Under a power cap: each running job whose limit Slurm caps, the latest end its limit may
    /// be extended to (Unix s): MaxTime, MaxWall, the deadline, or its own limit when an admin
    /// set it (model::power_directive). Empty without a cap.
    pub limit_cap_end_s: BTreeMap<JobId, f64>,
    /// How far ahead reservations are planned (s): `SchedulerParameters` `bf_window`, as
    /// sched/backfill reads it (model's `PlannerConfig::reservation_window_s`).
    pub reservation_window_s: f64,
}

/// Placements `select_nodes` refused, per job: nodes kept out of the job's routes for a while
/// (see [`crate::cycle`]).
pub type Refused = std::collections::HashMap<u32, HashSet<String>>;

pub fn build(lock: &SlurmctldLock, conf: &ConfView, cfg: &Config, now_s: f64, refused: &Refused) -> Result<Built, NotLocked> {
    let mem_consumable = conf.memory_consumable();
    let whole_cores = conf.allocates_whole_cores();
    let (min_prio_reserve, min_age_reserve_s) = slurm_bindings::conf::reservation_thresholds(conf.sched_params.as_deref());
    let reservation_window_s = slurm_bindings::conf::backfill_window_s(conf.sched_params.as_deref());
    // In the order Slurm's node selection prefers them: lowest `Weight` first, then the node
    // table's order. The planner breaks every tie towards the lower snapshot index, so the
    // admin's weights decide among nodes its energy model cannot tell apart, as they decide
    // in cons_tres.
    let mut nodes = lock.nodes()?;
    nodes.sort_by_key(|n| (n.weight(), n.index()));

    let mut gpu_types: Vec<GpuType> = Vec::new();
    let mut type_index: BTreeMap<String, usize> = BTreeMap::new();
    let mut table_to_snap: BTreeMap<usize, u32> = BTreeMap::new();
    let mut snap_nodes = Vec::with_capacity(nodes.len());
    let mut table_index = Vec::with_capacity(nodes.len());
    let mut node_names = Vec::with_capacity(nodes.len());
    // Threads per core by snapshot index: a job's CPUs round up to whole cores under CR_Core.
    let mut threads_per_core: Vec<u32> = Vec::with_capacity(nodes.len());
    for node in &nodes {
        threads_per_core.push(if whole_cores { node.threads_per_core() } else { 1 });
        let type_name = node.gpu_type().unwrap_or_else(|| "gpu".to_string());
        let gpu_type = *type_index.entry(type_name.clone()).or_insert_with(|| {
            gpu_types.push(cfg.gpu_spec(&type_name).gpu_type(&type_name));
            gpu_types.len() - 1
        });
        let power = if node.powered_down() {
            PowerState::Suspended
        } else if node.powering_up() {
            PowerState::Resuming { ready_at_s: now_s + model::predictor::NodePower::default().resume_s }
        } else {
            PowerState::On
        };
        table_to_snap.insert(node.index(), snap_nodes.len() as u32);
        table_index.push(node.index());
        node_names.push(node.name().to_string());
        snap_nodes.push(Node {
            name: node.name().to_string(),
            gpu_type,
            gpus: node.gpus(),
            cpus: node.cpus(),
            mem_mb: if mem_consumable { node.memory_mb() } else { 0 },
            power,
            available: !node.unusable(),
        });
    }
    let max_cpus = snap_nodes.iter().map(|n| n.cpus).max().unwrap_or(1);
    let max_gpus = snap_nodes.iter().map(|n| n.gpus).max().unwrap_or(0);
    // Every GPU type of each node (snapshot order): a node may have several.
    let node_types: Vec<Vec<String>> = nodes.iter().map(|n| n.gpu_types()).collect();

    let mut running = Vec::new();
    let mut limit_cap_end_s = BTreeMap::new();
    let mut shards = ShardJobs::default();
    let mut time_min_jobs: BTreeMap<u32, f64> = BTreeMap::new();
    for job in lock.jobs()? {
        let completing = job.is_completing();
        if !(job.is_running() || job.is_suspended() || completing) {
            continue;
        }
        let holdings = job.holdings();
        // A suspended job (`scontrol suspend`) keeps its memory and GRES but gives its cores
        // back (cons_tres's JOB_RES_ACTION_RESUME on suspend): other jobs may use them.
        let suspended = job.is_suspended();
        // Holds shards and no whole GPU: a tenant of the GPUs its shards are on.
        let is_shard = holdings.iter().all(|h| h.gpu_indices.is_empty()) && holdings.iter().any(|h| !h.shard_gpu_indices.is_empty());
        let allocations: Vec<NodeAllocation> = holdings
            .into_iter()
            .filter_map(|h| {
                let node = *table_to_snap.get(&h.node)?;
                let gpus = if is_shard { &h.shard_gpu_indices } else { &h.gpu_indices };
                Some(NodeAllocation {
                    node: NodeIdx(node),
                    gpu_indices: gpus.iter().filter_map(|&g| u8::try_from(g).ok()).collect(),
                    cpus: if suspended { 0 } else { h.cpus },
                    mem_mb: if mem_consumable { h.memory_mb } else { 0 },
                })
            })
            .collect();
        if allocations.is_empty() {
            continue;
        }
        let end = if completing { now_s } else { (job.end_time() as f64).max(now_s + 1.0) };
        let mut hints = hints::from_spank_env(job.spank_env(), &cfg.planner.hints);
        // Only shard jobs share (and do unless they said deny); `gpu` jobs are exclusive.
        let shared = is_shard && hints::explicit_share(job.spank_env()).unwrap_or(true);
        hints.share_allowed = shared;
        if is_shard {
            shards.add(job.id(), shared);
            shards.running += 1;
        }
        // The clock this plugin chose when it started the job (its decision record), else the
        // GPU type's default.
        let clock_mhz = job.admin_comment().and_then(model::decision::recorded_clock_mhz).unwrap_or_else(|| {
            allocations
                .first()
                .and_then(|a| snap_nodes.get(a.node.0 as usize))
                .and_then(|n| gpu_types.get(n.gpu_type))
                .map_or(0, |g| g.default_clock_mhz)
        });
        if cfg.planner.power_cap_w > 0.0 && !completing
            && let Some(cap_min) = job.limit_cap_min(now_s as i64)
        {
            limit_cap_end_s.insert(JobId(job.id()), job.start_time() as f64 + f64::from(cap_min) * 60.0);
        }
        running.push(RunningJob {
            id: JobId(job.id()),
            user: job.user_id(),
            start_time_s: job.start_time() as f64,
            end_time_s: end,
            allocations,
            clock_mhz,
            hints,
            shared,
        });
    }

    // Slurm's advanced reservations (node sets interned with the jobs' routes).
    let mut sets = NodeSetInterner::default();
    let to_snap_set = |nodes: &[usize]| -> NodeSet { nodes.iter().filter_map(|t| table_to_snap.get(t)).map(|&i| i as usize).collect() };
    let mut reservations = Vec::new();
    for r in lock.advance_reservations()? {
        if (r.end as f64) <= now_s {
            continue;
        }
        let node_set = sets.intern(to_snap_set(&r.nodes));
        reservations.push(AdvanceReservation { name: r.name, node_set, start_s: r.start as f64, end_s: r.end as f64, held_for: None });
    }

    // Free GPUs and idle nodes now: no more tasks of an array can start in one cycle.
    let mut busy_gpus: BTreeMap<u32, u32> = BTreeMap::new();
    for r in &running {
        for a in &r.allocations {
            *busy_gpus.entry(a.node.0).or_default() += a.gpu_indices.len() as u32;
        }
    }
    let free_gpus: u32 = snap_nodes.iter().enumerate().filter(|(_, n)| n.available).map(|(i, n)| n.gpus.saturating_sub(busy_gpus.get(&(i as u32)).copied().unwrap_or(0))).sum();
    let free_nodes = snap_nodes.iter().enumerate().filter(|(i, n)| n.available && !running.iter().any(|r| r.allocations.iter().any(|a| a.node.0 as usize == *i))).count() as u32;
    let mut array_heads: Vec<(usize, u32)> = Vec::new();
    let mut pending: Vec<PendingJob> = Vec::new();
    let mut index_of: BTreeMap<u32, usize> = BTreeMap::new();
    let mut routes: Vec<RouteApply> = Vec::new();
    let mut route_index: BTreeMap<RouteApply, u32> = BTreeMap::new();
    let mut skipped = 0;
    let mut hetjobs = Vec::new();
    let mut not_runnable = HashSet::new();
    // Jobs Slurm places -> their will-run window in `reservations`.
    let mut will_run: BTreeMap<u32, u32> = BTreeMap::new();
    for queued in lock.job_queue(now_s as i64, cfg.planner.max_jobs_tested)? {
        let job = queued.job;
        if job.is_het() || !job.is_pending() {
            if job.is_het() && job.is_pending() {
                hetjobs.push(job.id());
            }
            skipped += 1;
            continue;
        }
        let Some(route) = queued.route.as_ref() else {
            not_runnable.insert(job.id());
            continue;
        };
        let not_before_s = match route.status {
            RouteStatus::Now => now_s,
            RouteStatus::Later(t) => t as f64,
            RouteStatus::Never(_) => continue,
        };
        let (mut request, is_shard, expressible) = request_of(&job, mem_consumable, max_cpus, max_gpus);
        // Whole nodes (`--exclusive`, `=user`, `=mcs`, OverSubscribe=EXCLUSIVE, ExclusiveUser):
        // what a whole node is differs from node to node, and who may share it is Slurm's rule.
        let whole_node = job.whole_node();
        // GPU type asked for (`--gres=gpu:a100:2`, `--gpus=a100:2`): only nodes of that type.
        let want_type = [job.tres_per_node(), job.tres_per_job(), job.tres_per_task()].into_iter().flatten().find_map(|s| gres::first_type(s, "gpu"));
        let refused_here = refused.get(&job.id());
        let mut nodes = to_snap_set(&route.nodes);
        // A typed request on a node with several GPU types (or MIG profiles): the planner
        // counts a node's GPUs as one type, so Slurm's selection places the job.
        let mut typed_on_mixed_node = false;
        for i in nodes.iter().collect::<Vec<_>>() {
            let types = node_types.get(i).map_or(&[][..], Vec::as_slice);
            let wrong_type = want_type.as_deref().is_some_and(|t| !types.iter().any(|have| have.eq_ignore_ascii_case(t)));
            let was_refused = refused_here.is_some_and(|r| node_names.get(i).is_some_and(|n| r.contains(n)));
            if wrong_type || was_refused {
                nodes.remove(i);
            } else if want_type.is_some() && types.len() > 1 {
                typed_on_mixed_node = true;
            }
        }
        // CR_Core on nodes with several threads per core: Slurm allocates whole cores, so the
        // job holds its CPUs rounded up to the threads of a core (the most any node of its
        // route has: never fewer than Slurm will take there).
        let tpc = nodes.iter().filter_map(|i| threads_per_core.get(i).copied()).max().unwrap_or(1);
        round_up_to_whole_cores(&mut request, tpc, mem_per_cpu_mb(&job, mem_consumable));
        let apply = route.apply();
        let route_id = *route_index.entry(apply.clone()).or_insert_with(|| {
            routes.push(apply);
            (routes.len() - 1) as u32
        });
        let reservation = route.reservation.as_deref().and_then(|name| reservations.iter().position(|r| r.name == name)).map(|i| i as u32);
        // No node of this route holds the per-node request (`--gpus=2 --cpus-per-gpu=4` in a
        // partition of 4-CPU nodes, while another partition has 8-CPU nodes): Slurm may use
        // more nodes than the minimum, or refuses; either way its selection decides.
        let no_node_holds_it = !nodes.iter().any(|i| snap_nodes.get(i).is_some_and(|n| n.cpus >= request.cpus_per_node && n.gpus >= request.gpus_per_node));
        let eligibility = Eligibility { node_set: sets.intern(nodes), reservation, not_before_s, route: route_id };
        if let Some(&i) = index_of.get(&job.id()) {
            // Another queue record of the same job (another partition or reservation): tried
            // at its own place in Slurm's order (a lower PriorityTier's record after the
            // higher-priority jobs of that tier), as sched/backfill tests each record, unless
            // the job started through an earlier one. An array keeps its records together
            // (its tasks are planned as copies of one entry).
            if job.array_tasks_startable().is_some() {
                pending[i].eligible.push(eligibility);
            } else {
                let mut alternative = pending[i].clone();
                alternative.eligible = vec![eligibility];
                // Its own partition's default limit when the job gave none.
                let limit_s = time_limit_s(&job, route.partition_time_limit);
                alternative.time_limit_s = job.deadline().map_or(limit_s, |d| limit_s.min((d as f64 - now_s).max(60.0)));
                alternative.priority = queued.priority;
                alternative.alternative = true;
                pending.push(alternative);
            }
            continue;
        }
        let mut hints = hints::from_spank_env(job.spank_env(), &cfg.planner.hints);
        hints.share_allowed = is_shard && hints::explicit_share(job.spank_env()).unwrap_or(true);
        if is_shard {
            shards.add(job.id(), hints.share_allowed);
        }
        // `--deadline`: Slurm gives it at most the time left (see slurm_bindings::start).
        let own_limit_s = time_limit_s(&job, route.partition_time_limit);
        let limit_s = job.deadline().map_or(own_limit_s, |d| own_limit_s.min((d as f64 - now_s).max(60.0)));
        // The clock may slow the job only as far as Slurm lets its limit grow to make up for
        // it (partition MaxTime, QOS and association MaxWall, deadline, an admin's limit): a
        // job already at its cap keeps its full clock instead of being killed at its limit.
        if let Some(cap_min) = job.limit_cap_min(now_s as i64) {
            hints.max_slowdown = hints.max_slowdown.min((f64::from(cap_min) * 60.0 / limit_s.max(1.0)).max(1.0));
        }
        // `--time-min`: planned with its minimum, so that it fits the holes sched/backfill
        // would fit it in; started with the room it has (cycle.rs). Never slowed: its limit is
        // cut to fit, not extended.
        let limit_s = match job.time_min().map(|m| f64::from(m) * 60.0) {
            Some(min_s) if min_s < limit_s => {
                time_min_jobs.insert(job.id(), limit_s);
                hints.max_slowdown = 1.0;
                min_s
            }
            _ => limit_s,
        };
        let placed_by_slurm = !expressible || route.filter_inexact || typed_on_mixed_node || whole_node || no_node_holds_it || job.layout_by_slurm();
        if placed_by_slurm && let Some(window) = will_run_window(lock, &job, route, now_s, reservation_window_s, &table_to_snap, &mut sets) {
            will_run.insert(job.id(), reservations.len() as u32);
            reservations.push(window);
        }
        index_of.insert(job.id(), pending.len());
        let copies = array_copies(&job, &request, free_gpus, free_nodes);
        let first = pending.len();
        pending.push(PendingJob {
            id: JobId(job.id()),
            user: job.user_id(),
            priority: queued.priority,
            submit_time_s: job.submit_time() as f64,
            request,
            time_limit_s: limit_s,
            hints,
            cpus_range: None,
            eligible: vec![eligibility],
            placed_by_slurm,
            alternative: false,
            no_reservation: !job.reserves(min_prio_reserve, min_age_reserve_s, now_s as i64),
            slurm_may_spread: !placed_by_slurm && !is_shard && job.num_tasks() > 1 && job.ntasks_per_node() == 0 && job.min_nodes() == 1 && job.max_nodes() != 1,
        });
        array_heads.push((first, copies));
    }
    // A job's own will-run window does not keep the job itself out, through any of its routes.
    for job in &mut pending {
        if let Some(&w) = will_run.get(&job.id.0) {
            for e in job.eligible.iter_mut().filter(|e| e.reservation.is_none()) {
                e.reservation = Some(w);
            }
        }
    }
    // An array's pending record stands for all its pending tasks: `select_nodes` splits one
    // task off per start, so the planner gets one entry per task that could start this cycle
    // (within the throttle), each with every route of the array, right after the first.
    let mut with_tasks = Vec::with_capacity(pending.len());
    let mut heads = array_heads.into_iter().peekable();
    for (i, job) in pending.into_iter().enumerate() {
        let copies = match heads.peek() {
            Some(&(at, n)) if at == i => {
                heads.next();
                n
            }
            _ => 1,
        };
        for _ in 1..copies {
            with_tasks.push(job.clone());
        }
        with_tasks.push(job);
    }
    let pending = with_tasks;
    let not_runnable = not_runnable.iter().filter(|id| !index_of.contains_key(id)).count();

    Ok(Built {
        snapshot: Snapshot { now_s, gpu_types, nodes: snap_nodes, running, pending, node_sets: sets.into_sets(), reservations },
        table_index,
        node_names,
        skipped,
        hetjobs,
        shards,
        routes,
        not_runnable,
        time_min_jobs,
        limit_cap_end_s,
        reservation_window_s,
    })
}

/// How many planner entries the pending record of a job array gets: its pending tasks, within
/// the throttle (`%N`), and no more than could start now (free GPUs, or idle nodes for jobs
/// without GPUs), plus one that may be reserved. Other jobs: 1.
fn array_copies(job: &JobRef<'_>, request: &Request, free_gpus: u32, free_nodes: u32) -> u32 {
    let Some((tasks, room)) = job.array_tasks_startable() else { return 1 };
    let fit = if request.gpus_per_node > 0 { free_gpus / request.total_gpus().max(1) } else { free_nodes.saturating_mul(4) };
    let mut n = tasks.min(fit.saturating_add(1));
    if let Some(room) = room {
        n = n.min(room);
    }
    n.clamp(1, MAX_ARRAY_TASKS_PER_CYCLE)
}

/// At most this many tasks of one array are planned per cycle.
const MAX_ARRAY_TASKS_PER_CYCLE: u32 = 256;

/// The job's time limit (s) through a queue record whose partition gives `partition_default`
/// to a job without `--time` (a multi-partition job's default differs by partition).
fn time_limit_s(job: &JobRef<'_>, partition_default: TimeLimit) -> f64 {
    let limit = match (job.time_limit(), partition_default) {
        (TimeLimit::Unset, TimeLimit::Unset) => job.partition_time_limit(),
        (TimeLimit::Unset, route) => route,
        (own, _) => own,
    };
    match limit {
        TimeLimit::Minutes(m) => m as f64 * 60.0,
        TimeLimit::Unlimited => UNLIMITED_S,
        TimeLimit::Unset => FALLBACK_LIMIT_S,
    }
}

/// Per-node request as Slurm reads it: `-N` (its minimum; the planner confines the job to
/// that many nodes), `--ntasks-per-node`, `-n` with `--cpus-per-task`, `--gres=gpu:N` /
/// `--gpus-per-node` (tres_per_node), `--gpus` (tres_per_job, spread evenly over the nodes),
/// `--gpus-per-task`, `--cpus-per-gpu`, `--mem`, `--mem-per-cpu`, `--mem-per-gpu` (whole-node
/// jobs are placed by Slurm, see [`build`]).
/// A job asking for `--gres=shard:K` and no `gpu` needs one (shared) GPU per node. Returns the
/// request, whether it is a shard job, and whether the planner can express it at all (a task
/// count Slurm may spread over any number of nodes, or `--gpus` that do not divide evenly over
/// the nodes, cannot: Slurm's own selection places those).
fn request_of(job: &JobRef<'_>, mem_consumable: bool, max_cpus: u32, max_gpus: u32) -> (Request, bool, bool) {
    let tasks = job.num_tasks();
    let ntpn = job.ntasks_per_node();
    // At least 1 (slurm_bindings::job), as every division below needs.
    let mut nodes = job.min_nodes();
    let mut expressible = true;
    if ntpn > 0 {
        nodes = nodes.max(tasks.div_ceil(ntpn));
    } else if tasks > 1 && nodes == 1 && job.max_nodes() != 1 && job.min_cpus() > max_cpus {
        // `-n` bigger than any node, no node count: Slurm chooses how many nodes.
        expressible = false;
    }
    let per_node = job.tres_per_node().map_or(0, |s| gres::count(s, "gpu"));
    let shards_per_node = job.tres_per_node().map_or(0, |s| gres::count(s, "shard"));
    let per_job = job.tres_per_job().map_or(0, |s| gres::count(s, "gpu"));
    let per_task = job.tres_per_task().map_or(0, |s| gres::count(s, "gpu"));
    let gpus = if per_node > 0 {
        per_node
    } else if per_job > 0 {
        if per_job % u64::from(nodes) != 0 {
            expressible = false;
        }
        per_job.div_ceil(nodes as u64)
    } else {
        per_task.saturating_mul(u64::from(job.num_tasks())).div_ceil(u64::from(nodes))
    };
    // GRES other than GPUs and shards (`nvme`, `mps`, ...): counted and bound by Slurm only.
    let other_gres = [job.tres_per_node(), job.tres_per_job(), job.tres_per_task()]
        .into_iter()
        .flatten()
        .flat_map(gres::parse)
        .any(|e| !matches!(e.name.as_str(), "gpu" | "shard" | "cpu" | "mem" | "node" | "billing"));
    if other_gres {
        expressible = false;
    }
    // CPU tasks without a node count: Slurm may spread them over several partly free nodes.
    if tasks > 1 && ntpn == 0 && per_node == 0 && per_job == 0 && per_task == 0 && shards_per_node == 0 && job.max_nodes() != 1 && job.min_nodes() == 1 {
        expressible = false;
    }
    let is_shard = gpus == 0 && shards_per_node > 0;
    let gpus = if is_shard { 1 } else { gpus };
    let gpus_per_node = gpus.min(u32::MAX as u64) as u32;
    // Slurm's min_cpus already counts tasks x --cpus-per-task (and not with --overcommit).
    let mut cpus_per_node = job.pn_min_cpus().max(job.min_cpus().div_ceil(nodes));
    let cpus_per_gpu = job.cpus_per_tres().map_or(0, |s| gres::count(s, "gpu")).min(u64::from(u32::MAX)) as u32;
    cpus_per_node = cpus_per_node.max(cpus_per_gpu.saturating_mul(gpus_per_node));
    // More than any node has (`--gpus=2 --cpus-per-gpu=4` on 4-CPU nodes, `-n 2
    // --gpus-per-task=3` on 4-GPU nodes): only Slurm knows whether more nodes than the minimum
    // may be used (24.11 sets a maximum node count where 22.05 leaves none), so Slurm chooses
    // the layout, or refuses it.
    if cpus_per_node > max_cpus || gpus_per_node > max_gpus {
        expressible = false;
    }
    let mem_per_gpu_mb = job.mem_per_tres().map_or(0, |s| gres::count(s, "gpu"));
    let mem_mb_per_node = match (mem_consumable, job.memory_request()) {
        (false, _) => 0,
        (true, _) if mem_per_gpu_mb > 0 => mem_per_gpu_mb * u64::from(gpus_per_node),
        (true, MemoryRequest::PerNode(mb)) => mb,
        (true, MemoryRequest::PerCpu(mb)) => mb * cpus_per_node as u64,
    };
    (Request { nodes, gpus_per_node, cpus_per_node, mem_mb_per_node }, is_shard, expressible)
}

/// A request's CPUs per node rounded up to whole cores of `threads_per_core` threads, and its
/// memory per CPU with them (cons_tres gives `--mem-per-cpu` for every CPU it allocates).
fn round_up_to_whole_cores(request: &mut Request, threads_per_core: u32, mem_per_cpu_mb: Option<u64>) {
    let cpus = request.cpus_per_node;
    if threads_per_core <= 1 || cpus == 0 || cpus % threads_per_core == 0 {
        return;
    }
    let rounded = cpus.div_ceil(threads_per_core).saturating_mul(threads_per_core);
    if let Some(mb) = mem_per_cpu_mb {
        request.mem_mb_per_node = mb.saturating_mul(u64::from(rounded));
    }
    request.cpus_per_node = rounded;
}

/// `--mem-per-cpu` (or DefMemPerCPU) where memory is consumable and no `--mem-per-gpu` wins.
fn mem_per_cpu_mb(job: &JobRef<'_>, mem_consumable: bool) -> Option<u64> {
    let per_gpu = job.mem_per_tres().map_or(0, |s| gres::count(s, "gpu"));
    match (mem_consumable && per_gpu == 0, job.memory_request()) {
        (true, MemoryRequest::PerCpu(mb)) => Some(mb),
        _ => None,
    }
}

/// Where and when Slurm's will-run test expects a job Slurm places to start, through queue
/// record `route`, asked under the snapshot's locks as sched/backfill asks it for each job it
/// tests: a window over those nodes from that start for the job's time limit, which keeps the
/// planner's other jobs off them (backfill's promise to a job it cannot start now). `None` when
/// the job can start now (Slurm's selection places it), when it starts beyond the planning
/// window `window_s` (bf_window) or Slurm has no answer.
fn will_run_window(lock: &SlurmctldLock, job: &JobRef<'_>, route: &slurm_bindings::routes::Route, now_s: f64, window_s: f64, table_to_snap: &BTreeMap<usize, u32>, sets: &mut NodeSetInterner) -> Option<AdvanceReservation> {
    let (start, nodes) = lock.will_run(job.id(), &route.nodes, Some(&route.apply())).ok()?;
    let start_s = start as f64;
    // A start beyond bf_window gets no reservation, as under sched/backfill.
    if start_s <= now_s + 1.0 || start_s > now_s + window_s {
        return None;
    }
    let nodes: NodeSet = nodes.iter().filter_map(|t| table_to_snap.get(t)).map(|&i| i as usize).collect();
    if nodes.is_empty() {
        return None;
    }
    Some(AdvanceReservation { name: format!("will-run JobId={}", job.id()), node_set: sets.intern(nodes), start_s, end_s: start_s + time_limit_s(job, route.partition_time_limit), held_for: Some(JobId(job.id())) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(cpus: u32, mem_mb: u64) -> Request {
        Request { nodes: 1, gpus_per_node: 1, cpus_per_node: cpus, mem_mb_per_node: mem_mb }
    }

    #[test]
    fn cpus_round_up_to_whole_cores_with_their_memory_per_cpu() {
        // Three CPUs on two-thread cores: two cores, four CPUs, and --mem-per-cpu for each.
        let mut r = request(3, 3 * 512);
        round_up_to_whole_cores(&mut r, 2, Some(512));
        assert_eq!((r.cpus_per_node, r.mem_mb_per_node), (4, 4 * 512));
        // Memory per node stays what was asked.
        let mut r = request(1, 4096);
        round_up_to_whole_cores(&mut r, 2, None);
        assert_eq!((r.cpus_per_node, r.mem_mb_per_node), (2, 4096));
        // Already whole cores, or one thread per core: unchanged.
        for (cpus, tpc) in [(4, 2), (3, 1), (6, 3)] {
            let mut r = request(cpus, 100);
            round_up_to_whole_cores(&mut r, tpc, Some(1));
            assert_eq!((r.cpus_per_node, r.mem_mb_per_node), (cpus, 100));
        }
    }
}
