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

use model::types::{GpuType, JobId, Node, NodeAllocation, NodeIdx, PendingJob, PowerState, Request, RunningJob, Snapshot};
use slurm_bindings::conf::ConfView;
use slurm_bindings::gres;
use slurm_bindings::job::{JobRef, MemoryRequest, TimeLimit};
use slurm_bindings::locks::{NotLocked, SlurmctldLock};

use crate::config::Config;
use crate::hints;

/// "Unlimited" as the planner sees it.
const UNLIMITED_S: f64 = 365.0 * 86400.0;
/// A job without any limit the planner can use.
const FALLBACK_LIMIT_S: f64 = 3600.0;

/// A snapshot and how to map its node indices back to slurmctld's node table.
pub struct Built {
    pub snapshot: Snapshot,
    /// Snapshot node index -> node table index.
    pub table_index: Vec<usize>,
    pub node_names: Vec<String>,
    /// Pending jobs left out (heterogeneous, or nothing usable), for the statistics.
    pub skipped: usize,
    pub shards: ShardJobs,
}

pub fn build(lock: &SlurmctldLock, conf: &ConfView, cfg: &Config, now_s: f64) -> Result<Built, NotLocked> {
    let mem_consumable = conf.memory_consumable();
    let nodes = lock.nodes()?;

    let mut gpu_types: Vec<GpuType> = Vec::new();
    let mut type_index: BTreeMap<String, usize> = BTreeMap::new();
    let mut table_to_snap: BTreeMap<usize, u32> = BTreeMap::new();
    let mut snap_nodes = Vec::with_capacity(nodes.len());
    let mut table_index = Vec::with_capacity(nodes.len());
    let mut node_names = Vec::with_capacity(nodes.len());
    for node in &nodes {
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

    let mut running = Vec::new();
    let mut shards = ShardJobs::default();
    for job in lock.jobs()? {
        let completing = job.is_completing();
        if !(job.is_running() || job.is_suspended() || completing) {
            continue;
        }
        let holdings = job.holdings();
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
                    cpus: h.cpus,
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

    let mut pending = Vec::new();
    let mut seen = HashSet::new();
    let mut skipped = 0;
    for queued in lock.job_queue()? {
        let job = queued.job;
        // A job queued for several partitions comes once per partition: keep the first (best).
        if !seen.insert(job.id()) {
            continue;
        }
        if job.is_het() || !job.is_pending() {
            skipped += 1;
            continue;
        }
        let (request, is_shard) = request_of(&job, mem_consumable, max_cpus, max_gpus);
        let mut hints = hints::from_spank_env(job.spank_env(), &cfg.planner.hints);
        hints.share_allowed = is_shard && hints::explicit_share(job.spank_env()).unwrap_or(true);
        if is_shard {
            shards.add(job.id(), hints.share_allowed);
        }
        pending.push(PendingJob {
            id: JobId(job.id()),
            user: job.user_id(),
            priority: queued.priority,
            submit_time_s: job.submit_time() as f64,
            request,
            time_limit_s: time_limit_s(&job),
            hints,
            cpus_range: None,
        });
    }

    Ok(Built { snapshot: Snapshot { now_s, gpu_types, nodes: snap_nodes, running, pending }, table_index, node_names, skipped, shards })
}

fn time_limit_s(job: &JobRef<'_>) -> f64 {
    let limit = match job.time_limit() {
        TimeLimit::Unset => job.partition_time_limit(),
        other => other,
    };
    match limit {
        TimeLimit::Minutes(m) => m as f64 * 60.0,
        TimeLimit::Unlimited => UNLIMITED_S,
        TimeLimit::Unset => FALLBACK_LIMIT_S,
    }
}

/// Per-node request: `--gres=gpu:N` / `--gpus-per-node` (tres_per_node), `--gpus` (tres_per_job,
/// spread over the nodes), `--gpus-per-task`; CPUs and memory as slurmctld stored them. A job
/// asking for `--gres=shard:K` and no `gpu` needs one (shared) GPU per node: `(request, true)`.
fn request_of(job: &JobRef<'_>, mem_consumable: bool, max_cpus: u32, max_gpus: u32) -> (Request, bool) {
    let nodes = job.min_nodes();
    let per_node = job.tres_per_node().map_or(0, |s| gres::count(s, "gpu"));
    let shards_per_node = job.tres_per_node().map_or(0, |s| gres::count(s, "shard"));
    let per_job = job.tres_per_job().map_or(0, |s| gres::count(s, "gpu"));
    let per_task = job.tres_per_task().map_or(0, |s| gres::count(s, "gpu"));
    let gpus = if per_node > 0 {
        per_node
    } else if per_job > 0 {
        per_job.div_ceil(nodes as u64)
    } else {
        (per_task * job.num_tasks() as u64).div_ceil(nodes as u64)
    };
    let is_shard = gpus == 0 && shards_per_node > 0;
    let gpus = if is_shard { 1 } else { gpus };
    let mut gpus_per_node = gpus.min(u32::MAX as u64) as u32;
    let mut cpus_per_node = job.pn_min_cpus().max(job.min_cpus().div_ceil(nodes));
    if job.whole_node() {
        cpus_per_node = max_cpus;
        gpus_per_node = gpus_per_node.max(max_gpus);
    }
    let mem_mb_per_node = match (mem_consumable, job.memory_request()) {
        (false, _) => 0,
        (true, MemoryRequest::PerNode(mb)) => mb,
        (true, MemoryRequest::PerCpu(mb)) => mb * cpus_per_node as u64,
    };
    (Request { nodes, gpus_per_node, cpus_per_node, mem_mb_per_node }, is_shard)
}
