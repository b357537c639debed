//! The planner's vocabulary: what slurmctld can tell it (nodes, running jobs, pending jobs in
//! priority order, energy hints) and nothing more.
//!
//! Every field is something a sched plugin can read from `node_record_t` / `job_record_t` or from
//! the job's SPANK environment. Nothing here is ground truth: a job's *true* duration, speed or
//! power never appears, only its time limit and what the user hinted.

use serde::{Deserialize, Serialize};
use std::fmt;

pub use crate::eligibility::{AdvanceReservation, Eligibility, NodeSet};

/// Slurm job id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct JobId(pub u32);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Index of a node in the snapshot's node table (the same order as slurmctld's
/// `node_record_table_ptr`, so a plugin can map it back without a lookup).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeIdx(pub u32);

/// What the user asked for with `--energy-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum EnergyPolicy {
    /// Run at the default clock, never share, never defer.
    Performance,
    /// Save energy only where the predicted slowdown stays within the job's bound.
    #[default]
    Balanced,
    /// Save as much energy as the job's slowdown bound allows.
    Efficiency,
}

impl EnergyPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            EnergyPolicy::Performance => "performance",
            EnergyPolicy::Balanced => "balanced",
            EnergyPolicy::Efficiency => "efficiency",
        }
    }
}

impl std::str::FromStr for EnergyPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "performance" => Ok(EnergyPolicy::Performance),
            "balanced" => Ok(EnergyPolicy::Balanced),
            "efficiency" => Ok(EnergyPolicy::Efficiency),
            other => Err(format!(
                "invalid energy policy '{other}': allowed are performance, balanced, efficiency"
            )),
        }
    }
}

/// Energy hints of one job (`--energy-*` options), already validated. A job without hints
/// carries the site's defaults (see [`crate::config::HintDefaults`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hints {
    pub policy: EnergyPolicy,
    /// Largest accepted ratio of runtime at the chosen clock to the runtime at the default
    /// clock (>= 1.0).
    pub max_slowdown: f64,
    /// May the job's GPUs be time-shared with another job? Allowing it accepts the site's
    /// interference bound (`sharing_max_slowdown`); the planner shares a job that could run
    /// alone only when its policy is `efficiency`, otherwise sharing replaces waiting.
    pub share_allowed: bool,
    /// How long the start may be deferred past the moment it could start (seconds, 0 = never).
    pub defer_max_s: f64,
    /// Workload tag: jobs with the same tag are expected to behave alike.
    pub tag: Option<String>,
}

impl Default for Hints {
    fn default() -> Self {
        Hints {
            policy: EnergyPolicy::Balanced,
            max_slowdown: 1.0,
            share_allowed: false,
            defer_max_s: 0.0,
            tag: None,
        }
    }
}

/// Power state of a node as slurmctld's power saving sees it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum PowerState {
    On,
    /// Powered down by Slurm's power saving; starting a job here means a resume.
    Suspended,
    /// Being resumed; usable from `ready_at_s`.
    Resuming { ready_at_s: f64 },
}

/// One node: its resources and power state. Allocations come from the running jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    /// Index into [`Snapshot::gpu_types`].
    pub gpu_type: usize,
    pub gpus: u32,
    pub cpus: u32,
    pub mem_mb: u64,
    pub power: PowerState,
    /// Node is drained/down/reserved for maintenance: never place anything here.
    pub available: bool,
}

/// A GPU model as the planner knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuType {
    /// Slurm GRES type name (e.g. `v100`).
    pub name: String,
    pub default_clock_mhz: u32,
    pub min_clock_mhz: u32,
    pub max_clock_mhz: u32,
    pub idle_power_w: f64,
    pub max_power_w: f64,
}

/// Resources a job wants on each of its nodes, as Slurm expresses them (`-N`, `--gres=gpu:N`,
/// `--cpus-per-task`, `--mem`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub cpus_per_node: u32,
    pub mem_mb_per_node: u64,
}

impl Request {
    pub fn total_gpus(&self) -> u32 {
        self.nodes * self.gpus_per_node
    }
}

/// The time limit a job without one (`--time=UNLIMITED`, or a partition whose `MaxTime` and
/// `DefaultTime` are INFINITE) is planned with: one year (s). A limit at least this long is
/// "unlimited" wherever the planner reports on it.
pub const UNLIMITED_TIME_S: f64 = 365.0 * 86_400.0;

/// A job waiting in the queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingJob {
    pub id: JobId,
    pub user: u32,
    pub priority: u32,
    pub submit_time_s: f64,
    pub request: Request,
    pub time_limit_s: f64,
    pub hints: Hints,
    /// CPU count may be chosen by the planner between these bounds (Synergy); `None` = fixed.
    pub cpus_range: Option<(u32, u32)>,
    /// The ways Slurm lets it start (one per queue record: partition, reservation), in Slurm's
    /// order; empty = on any node (see [`crate::eligibility`]).
    #[serde(default)]
    pub eligible: Vec<Eligibility>,
    /// The request has a shape the planner cannot express (a task count Slurm spreads over as
    /// many nodes as it likes, `--gpus` that do not divide over the nodes, ...): Slurm's own
    /// selection places it, on nodes the planner does not hold for others.
    #[serde(default)]
    pub placed_by_slurm: bool,
    /// Another of Slurm's queue records of a job listed earlier (the job's lower-tier or
    /// lower-priority partition, `-p a,b`), at its own place in the queue: tried only if the
    /// job has not started (or been deferred) through an earlier record this cycle, and never
    /// reserved (the job's first record holds its reservation).
    #[serde(default)]
    pub alternative: bool,
    /// Started if it can, never reserved for when it cannot (a QOS flagged NoReserve, below
    /// `bf_min_prio_reserve` or the QOS's MinPrioThreshold, younger than `bf_min_age_reserve`):
    /// neither a planner reservation nor a will-run window holds nodes for it.
    #[serde(default)]
    pub no_reservation: bool,
    /// Several tasks and no node count (`-n 4 --gres=gpu:2`): the planner places it on one node
    /// when one has room; else Slurm's selection may spread the tasks over several nodes, as
    /// under stock Slurm, so the job is handed to it rather than waiting for one node.
    #[serde(default)]
    pub slurm_may_spread: bool,
}

/// Where a running job sits on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeAllocation {
    pub node: NodeIdx,
    /// GPU indices on the node (0-based), each used by this job.
    pub gpu_indices: Vec<u8>,
    pub cpus: u32,
    pub mem_mb: u64,
}

/// A job that holds resources.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunningJob {
    pub id: JobId,
    pub user: u32,
    pub start_time_s: f64,
    /// When slurmctld will end it at the latest: start + (possibly extended) time limit.
    pub end_time_s: f64,
    pub allocations: Vec<NodeAllocation>,
    pub clock_mhz: u32,
    pub hints: Hints,
    /// GPUs may be time-shared with another job.
    pub shared: bool,
}

/// Everything the planner sees in one cycle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub now_s: f64,
    pub gpu_types: Vec<GpuType>,
    pub nodes: Vec<Node>,
    pub running: Vec<RunningJob>,
    /// Pending jobs in Slurm's priority order (highest first).
    pub pending: Vec<PendingJob>,
    /// Node sets the pending jobs' [`Eligibility`] entries and the reservations refer to.
    #[serde(default)]
    pub node_sets: Vec<NodeSet>,
    /// Slurm's advanced reservations that keep other jobs off their nodes.
    #[serde(default)]
    pub reservations: Vec<AdvanceReservation>,
}
