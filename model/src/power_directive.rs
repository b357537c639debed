//! Power directives: when the cluster's power cap drops below what the running jobs draw,
//! which running jobs get a GPU clock ceiling, and how low (docs/power-cap.md).
//!
//! The rule, [`decide`]: starting from every running job at the clock it started at (its
//! start decision's), while the predicted GPU power of the cluster (idle GPUs plus the running
//! jobs) exceeds the cap, lower by one clock step the job whose next step down costs least,
//! in GPU-time slowed per watt saved; jobs of the `performance` policy only once no other job
//! can go lower. A job is never lowered beyond its slowdown bound (`--energy-max-slowdown`,
//! relative to the default clock, as predicted), nor beyond what its time limit may be
//! extended to (its remaining limit, slowed by the step's worst case, must still fit in the
//! limit as Slurm lets it be extended: MaxTime, the QOS' and association's MaxWall, the
//! deadline; an admin's limit is not extended). A job given a ceiling, or a lower one, has its
//! time limit extended by the **worst-case** slowdown of its remaining time
//! ([`Decided::limit_bounds`], [`extension_factor`]): the most any measured workload of its GPU
//! type slowed at the ceiling's step ([`crate::perf_power::ClockStep::worst_slowdown`]), not
//! its class's prediction, so that a job the truth slows more than predicted still ends within
//! its limit (no job is killed for the cap). The rule is
//! recomputed from scratch every cycle, so when the cap rises the last steps taken are the
//! first given back (the reverse order), and a job whose ceiling is no longer needed loses it.
//! A cap that cannot be met this way stays unmet: no job is killed or suspended for it.
//!
//! [`DirectiveTable`] keeps, per running job, its directive and a sequence number that grows
//! on every change. A job is numbered when it is first seen, and every number is at least
//! the Unix time in milliseconds at the change, so a restarted slurmctld (whose table starts
//! empty) numbers its first directives above anything it sent before: the nodes apply only
//! newer numbers, and a node that kept a ceiling from before the restart gets the "none" that
//! lifts it. (This assumes slurmctld's clock does not step back by more than the time since
//! its previous change.)
//!
//! [`DirectiveReply`] is the datagram's text, signed by slurmctld's munge as SlurmUser:
//! `slurm-energy-directive/1 job=1234 node=gpu07 seq=1764280000123 ceiling_mhz=1087
//! power_limit_w=170` (or `ceiling_mhz=none`).

use std::collections::BTreeMap;
use std::fmt;

use crate::predictor::Predictor;
use crate::types::{EnergyPolicy, JobId, PowerState, Snapshot};

/// The magic word of a directive datagram.
pub const WIRE_MAGIC: &str = "slurm-energy-directive/1";

/// A GPU clock ceiling for a running job: the GPU may run at this clock or lower, and (where
/// the GPU is controlled by its power limit) at this limit or lower.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ceiling {
    pub clock_mhz: u32,
    /// The power limit the ladder step was measured at (W of the job's GPU type); 0: none.
    pub power_limit_w: f64,
}

/// One clock step a running job may run at, as the planner predicts it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepPower {
    pub clock_mhz: u32,
    pub power_limit_w: f64,
    /// Predicted GPU power of the whole job at this step (all its GPUs), W.
    pub power_w: f64,
    /// Run time at this step over run time at the default clock (predicted for the job's class).
    pub time_ratio: f64,
    /// The most any measured workload slowed at this step, relative to the default clock
    /// ([`crate::perf_power::ClockStep::worst_slowdown`]; at least `time_ratio`).
    pub worst_slowdown: f64,
}

/// A running job as the rule sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningPower {
    pub job: JobId,
    pub policy: EnergyPolicy,
    pub gpus: u32,
    /// Ascending clocks (the GPU type's ladder).
    pub steps: Vec<StepPower>,
    /// The step it runs at without a directive.
    pub start_step: usize,
    /// Its slowdown bound (relative to the default clock, >= 1).
    pub max_slowdown: f64,
    /// By how much (a worst-case slowdown relative to its start step, [`RunningPower::limit_bound`])
    /// its time limit may still grow as far as Slurm lets it ([`limit_headroom`]; >= 1; 1 when
    /// nothing is left to spare or unknown; infinite when Slurm caps nothing).
    pub limit_headroom: f64,
}

/// By how much a job's remaining time limit grows when the slowdown it is extended for
/// (relative to its start step, [`Decided::limit_bounds`]) goes from `before` to `after` (1 when
/// it does not grow: a raised or lifted ceiling never shortens a limit).
pub fn extension_factor(before: f64, after: f64) -> f64 {
    if before > 0.0 && after > before + 1e-9 { after / before } else { 1.0 }
}

impl RunningPower {
    /// Can the job go one step below `step`? Its slowdown bound holds for the predicted slowdown
    /// (as for a planned one); its limit must allow the worst case.
    fn may_lower_to(&self, step: usize) -> bool {
        let Some(s) = self.steps.get(step) else { return false };
        s.time_ratio <= self.max_slowdown + 1e-9 && self.limit_bound(step) <= self.limit_headroom + 1e-9
    }

    /// The slowdown its time limit is extended for at `step`, relative to its start step (1 at or
    /// above it): the step's worst case relative to the default clock ([`StepPower::worst_slowdown`];
    /// a job that started lower was already at least as slow as at the default clock, so this
    /// bounds its slowdown relative to its start too), never less than the predicted one.
    pub fn limit_bound(&self, step: usize) -> f64 {
        let (Some(s), Some(start)) = (self.steps.get(step), self.steps.get(self.start_step)) else { return 1.0 };
        if step >= self.start_step {
            return 1.0;
        }
        let predicted = if start.time_ratio > 0.0 { s.time_ratio / start.time_ratio } else { f64::INFINITY };
        s.worst_slowdown.max(predicted).max(1.0)
    }

    /// GPU-seconds slowed per second of run, per watt saved, by going from `step` to `step - 1`.
    fn cost_down(&self, step: usize) -> f64 {
        let (Some(lo), Some(hi)) = (step.checked_sub(1).and_then(|s| self.steps.get(s)), self.steps.get(step)) else { return f64::INFINITY };
        let saved_w = hi.power_w - lo.power_w;
        if saved_w <= 0.0 {
            return f64::INFINITY;
        }
        (lo.time_ratio - hi.time_ratio).max(0.0) * f64::from(self.gpus.max(1)) / saved_w
    }
}

/// What [`decide`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    /// Each running job's ceiling (`None`: runs at its own clock).
    pub ceilings: BTreeMap<JobId, Option<Ceiling>>,
    /// Predicted cluster GPU power with the ceilings, W.
    pub predicted_w: f64,
    /// The cap could not be met within the jobs' bounds.
    pub unmet: bool,
    /// Each job's predicted slowdown under its ceiling, relative to its start step (1: none).
    pub slowdowns: BTreeMap<JobId, f64>,
    /// Each job's worst-case slowdown under its ceiling, relative to its start step (1: none,
    /// [`RunningPower::limit_bound`]): what its time limit is extended for ([`extension_factor`]).
    pub limit_bounds: BTreeMap<JobId, f64>,
}

/// The rule (module docs). `base_w`: the GPU power of everything the jobs do not account for
/// (idle GPUs, jobs not directed); `cap_w`: the cap in force (`None`: no cap).
pub fn decide(cap_w: Option<f64>, base_w: f64, jobs: &[RunningPower]) -> Decided {
    decide_corrected(cap_w, base_w, jobs, 1.0)
}

/// How far the cluster's measured GPU power is from the rule's prediction for the same state
/// (the directives in force, applied): measured / predicted, bounded to [0.5, 2] so that one
/// bad reading cannot swing the cluster; 1 when either is unknown.
pub fn measured_correction(measured_w: Option<f64>, predicted_w: f64) -> f64 {
    match measured_w {
        Some(m) if m.is_finite() && m > 0.0 && predicted_w.is_finite() && predicted_w > 1.0 => (m / predicted_w).clamp(0.5, 2.0),
        _ => 1.0,
    }
}

/// [`decide`], with every predicted power scaled by `correction` ([`measured_correction`]): the
/// measured power corrects the prediction. [`Decided::predicted_w`] is the corrected figure.
/// One factor for the whole cluster: the plugin uses [`decide_by_node`] instead (one job's
/// excess must not move the slowing onto others).
pub fn decide_corrected(cap_w: Option<f64>, base_w: f64, jobs: &[RunningPower], correction: f64) -> Decided {
    let correction = if correction.is_finite() && correction > 0.0 { correction } else { 1.0 };
    let mut at = start_steps(jobs);
    let power = |at: &[usize]| correction * (base_w + jobs.iter().zip(at).map(|(j, &s)| j.steps.get(s).map_or(0.0, |p| p.power_w)).sum::<f64>());
    let unmet = cap_w.is_some_and(|cap| !lower_while_above(cap, jobs, &mut at, &power, |_| 1.0, |_| true));
    finish(jobs, &at, power(&at), unmet)
}

fn start_steps(jobs: &[RunningPower]) -> Vec<usize> {
    jobs.iter().map(|j| j.start_step.min(j.steps.len().saturating_sub(1))).collect()
}

/// Lowers, one step at a time, the eligible job whose next step down costs least (in GPU-time
/// per watt saved, the watts scaled by the job's `factor`; performance jobs only when no other
/// eligible job can move) while `power` exceeds `cap`. False when no eligible job could move.
fn lower_while_above(cap: f64, jobs: &[RunningPower], at: &mut [usize], power: &dyn Fn(&[usize]) -> f64, factor: impl Fn(usize) -> f64, eligible: impl Fn(usize) -> bool) -> bool {
    while power(at) > cap + 1e-9 {
        let next = jobs
            .iter()
            .enumerate()
            .filter(|(i, j)| eligible(*i) && at[*i] > 0 && j.may_lower_to(at[*i] - 1))
            .map(|(i, j)| {
                let f = factor(i);
                let cost = if f > 0.0 { j.cost_down(at[i]) / f } else { f64::INFINITY };
                (i, (j.policy == EnergyPolicy::Performance, cost, j.job))
            })
            .min_by(|a, b| a.1.0.cmp(&b.1.0).then(a.1.1.total_cmp(&b.1.1)).then(a.1.2.cmp(&b.1.2)));
        let Some((i, _)) = next else { return false };
        at[i] -= 1;
    }
    true
}

/// The ceilings and slowdowns of the jobs at steps `at`.
fn finish(jobs: &[RunningPower], at: &[usize], predicted_w: f64, unmet: bool) -> Decided {
    let ceilings = jobs
        .iter()
        .zip(at)
        .map(|(j, &s)| {
            let c = (s < j.start_step).then(|| j.steps.get(s).map(|p| Ceiling { clock_mhz: p.clock_mhz, power_limit_w: p.power_limit_w })).flatten();
            (j.job, c)
        })
        .collect();
    let slowdowns = jobs
        .iter()
        .zip(at)
        .map(|(j, &s)| {
            let ratio = |i: usize| j.steps.get(i).map_or(1.0, |p| p.time_ratio);
            let vs_start = if s < j.start_step && ratio(j.start_step) > 0.0 { ratio(s) / ratio(j.start_step) } else { 1.0 };
            (j.job, vs_start.max(1.0))
        })
        .collect();
    let limit_bounds = jobs.iter().zip(at).map(|(j, &s)| (j.job, j.limit_bound(s))).collect();
    Decided { ceilings, predicted_w, unmet, slowdowns, limit_bounds }
}

/// Each node's correction: its measured GPU power against the rule's prediction for that node
/// in the state measured ([`measured_correction`] per node, so bounded to [0.5, 2]). Nodes
/// without a reading or a prediction are left out (they count at 1).
pub fn node_corrections(measured_w_by_node: &BTreeMap<u32, f64>, predicted_w_by_node: &BTreeMap<u32, f64>) -> BTreeMap<u32, f64> {
    measured_w_by_node
        .iter()
        .filter_map(|(n, &m)| {
            let p = *predicted_w_by_node.get(n)?;
            (m.is_finite() && m > 0.0 && p.is_finite() && p > 1.0).then(|| (*n, measured_correction(Some(m), p)))
        })
        .collect()
}

/// The corrections the measurements make ([`corrections`]): per job measured by its own GPUs,
/// and per node for the rest of the node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Corrections {
    /// Per node (snapshot index): what its reading leaves once the jobs that measured their own
    /// GPUs are taken out, over the rest of its prediction (idle GPUs, jobs not directed, jobs
    /// without a reading of their own). Absent: 1.
    pub by_node: BTreeMap<u32, f64>,
    /// Per job: its own GPUs' readings over its prediction on those nodes. Absent: the job is
    /// judged by its nodes' corrections.
    pub by_job: BTreeMap<JobId, f64>,
}

/// What the nodes measured, against the rule's prediction for the state they measured (the
/// ceilings in force applied; [`DecidedByNode::raw_w_by_node`] and
/// [`DecidedByNode::raw_w_by_job_node`] of the cycle that set them). `node_w`: each GPU node's
/// reading; `job_node_w`: a job's own GPUs' reading on a node (its GPU-use report, sent only
/// where no other job's process runs on those GPUs). Every ratio is [`measured_correction`]'s
/// (bounded to [0.5, 2]); a pair with no prediction is left out.
pub fn corrections(node_w: &BTreeMap<u32, f64>, job_node_w: &BTreeMap<(JobId, u32), f64>, predicted_node_w: &BTreeMap<u32, f64>, predicted_job_node_w: &BTreeMap<(JobId, u32), f64>) -> Corrections {
    let mut per_job: BTreeMap<JobId, (f64, f64)> = BTreeMap::new();
    let mut covered: BTreeMap<u32, (f64, f64)> = BTreeMap::new();
    for (&(job, node), &m) in job_node_w {
        let Some(&p) = predicted_job_node_w.get(&(job, node)) else { continue };
        if !(m.is_finite() && m >= 0.0 && p.is_finite() && p > 0.0) {
            continue;
        }
        let j = per_job.entry(job).or_default();
        j.0 += m;
        j.1 += p;
        let n = covered.entry(node).or_default();
        n.0 += m;
        n.1 += p;
    }
    let by_job = per_job.into_iter().filter(|(_, (_, p))| *p > 1.0).map(|(job, (m, p))| (job, measured_correction(Some(m), p))).collect();
    // The rest of each node: its reading and prediction without the jobs measured apart.
    let rest = |w: &BTreeMap<u32, f64>, pick: fn(&(f64, f64)) -> f64| -> BTreeMap<u32, f64> { w.iter().map(|(n, v)| (*n, v - covered.get(n).map_or(0.0, pick))).collect() };
    let by_node = node_corrections(&rest(node_w, |c| c.0), &rest(predicted_node_w, |c| c.1));
    Corrections { by_node, by_job }
}

/// What [`decide_by_node`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct DecidedByNode {
    /// The ceilings; `predicted_w` is the corrected cluster figure (what counts against the cap).
    pub decided: Decided,
    /// Each node's uncorrected prediction with those ceilings: what its next reading is set
    /// against ([`corrections`]).
    pub raw_w_by_node: BTreeMap<u32, f64>,
    /// Each directed job's uncorrected prediction on each of its nodes with those ceilings: what
    /// its next own reading there is set against.
    pub raw_w_by_job_node: BTreeMap<(JobId, u32), f64>,
}

/// The rule with measured power (docs/power-cap.md): a job that measured its own GPUs is
/// scaled by its own correction; any other job by its nodes' (weighted by its GPUs on each),
/// and each node's remaining power (idle GPUs, jobs not directed) by its node's. The corrected
/// total counts against the cap, but one job's excess over its prediction does not move the
/// slowing onto others:
/// 1. the rule ([`decide`]) runs first as if nothing drew more than predicted (corrections
///    above 1 taken as 1): what every job would be asked anyway;
/// 2. then, while the corrected total exceeds the cap, only jobs reading above their
///    prediction (their own reading, or their nodes' where they have none) are lowered
///    (cheapest first; performance jobs last among them);
/// 3. only when none of them can go lower are the other jobs lowered for the rest (the cap is
///    the facility's: the excess still counts against it).
///
/// A reading below its prediction gives its room to everyone (it moves nothing onto anyone).
/// Jobs without a reading of their own (a GPU shared with another job, a node that sends no
/// reports) cannot be told apart from the other such jobs of their node.
pub fn decide_by_node(cap_w: Option<f64>, powers: &NodePowers, corrections: &Corrections) -> DecidedByNode {
    let c = |n: &u32| corrections.by_node.get(n).copied().filter(|c| c.is_finite() && *c > 0.0).unwrap_or(1.0);
    let own = |j: &RunningPower| corrections.by_job.get(&j.job).copied().filter(|c| c.is_finite() && *c > 0.0);
    let jobs = &powers.jobs;
    let shares = |j: &RunningPower| powers.job_nodes.get(&j.job).map_or(&[][..], Vec::as_slice);
    let weighted = |j: &RunningPower, f: &dyn Fn(f64) -> f64| {
        if let Some(mine) = own(j) {
            return f(mine);
        }
        let s = shares(j);
        if s.is_empty() { f(1.0) } else { s.iter().map(|(n, share)| share * f(c(n))).sum() }
    };
    let full: Vec<f64> = jobs.iter().map(|j| weighted(j, &|c| c)).collect();
    let clipped: Vec<f64> = jobs.iter().map(|j| weighted(j, &|c| c.min(1.0))).collect();
    let heavy: Vec<bool> = jobs.iter().map(|j| weighted(j, &|c| (c - 1.0).max(0.0)) > 1e-9).collect();
    let base_full: f64 = powers.base_w_by_node.iter().map(|(n, w)| c(n) * w).sum();
    let base_clipped: f64 = powers.base_w_by_node.iter().map(|(n, w)| c(n).min(1.0) * w).sum();
    let job_w = |at: &[usize], i: usize| jobs[i].steps.get(at[i]).map_or(0.0, |p| p.power_w);
    let power_full = |at: &[usize]| base_full + (0..jobs.len()).map(|i| full[i] * job_w(at, i)).sum::<f64>();
    let power_clipped = |at: &[usize]| base_clipped + (0..jobs.len()).map(|i| clipped[i] * job_w(at, i)).sum::<f64>();
    let mut at = start_steps(jobs);
    let mut unmet = false;
    if let Some(cap) = cap_w {
        // 1. as if everything drew its prediction (or less);
        lower_while_above(cap, jobs, &mut at, &power_clipped, |i| clipped[i], |_| true);
        // 2. the excess: the jobs reading high first; 3. then everyone.
        if !lower_while_above(cap, jobs, &mut at, &power_full, |i| full[i], |i| heavy[i]) {
            unmet = !lower_while_above(cap, jobs, &mut at, &power_full, |i| full[i], |_| true);
        }
    }
    let mut raw_w_by_node = powers.base_w_by_node.clone();
    let mut raw_w_by_job_node = BTreeMap::new();
    for (i, j) in jobs.iter().enumerate() {
        for (n, share) in shares(j) {
            *raw_w_by_node.entry(*n).or_default() += share * job_w(&at, i);
            *raw_w_by_job_node.entry((j.job, *n)).or_default() += share * job_w(&at, i);
        }
    }
    DecidedByNode { decided: finish(jobs, &at, power_full(&at), unmet), raw_w_by_node, raw_w_by_job_node }
}

/// A job's directive in force and its number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Directive {
    pub seq: u64,
    pub ceiling: Option<Ceiling>,
}

/// One change made by [`DirectiveTable::update`], for the log.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Change {
    pub job: JobId,
    pub before: Option<Ceiling>,
    pub after: Option<Ceiling>,
    pub seq: u64,
}

/// Every running job's directive (module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DirectiveTable {
    jobs: BTreeMap<JobId, Directive>,
    last_seq: u64,
}

impl DirectiveTable {
    /// Takes this cycle's ceilings: a job first seen, or whose ceiling changed, gets a new
    /// number; jobs no longer listed are forgotten. Returns the changes of ceiling (a job first
    /// seen without a ceiling is numbered but is no change).
    pub fn update(&mut self, ceilings: &BTreeMap<JobId, Option<Ceiling>>, now_unix_ms: u64) -> Vec<Change> {
        self.jobs.retain(|j, _| ceilings.contains_key(j));
        let mut changes = Vec::new();
        for (&job, &ceiling) in ceilings {
            let before = self.jobs.get(&job).copied();
            if before.is_some_and(|d| d.ceiling == ceiling) {
                continue;
            }
            self.last_seq = (self.last_seq + 1).max(now_unix_ms);
            self.jobs.insert(job, Directive { seq: self.last_seq, ceiling });
            let was = before.and_then(|d| d.ceiling);
            if before.is_some() || ceiling.is_some() {
                changes.push(Change { job, before: was, after: ceiling, seq: self.last_seq });
            }
        }
        changes
    }

    /// The directive of `job` (`None`: not a running job this table knows).
    pub fn get(&self, job: JobId) -> Option<Directive> {
        self.jobs.get(&job).copied()
    }

    /// How many jobs have a ceiling now.
    pub fn capped(&self) -> usize {
        self.jobs.values().filter(|d| d.ceiling.is_some()).count()
    }
}

/// The reply to one GPU-use report: the directive in force for that job on that node.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectiveReply {
    pub job_id: u32,
    pub node: String,
    pub seq: u64,
    pub ceiling: Option<Ceiling>,
}

impl DirectiveReply {
    pub fn to_wire(&self) -> String {
        let ceiling = match self.ceiling {
            Some(c) => format!("ceiling_mhz={} power_limit_w={:.0}", c.clock_mhz, c.power_limit_w),
            None => "ceiling_mhz=none".to_string(),
        };
        format!("{WIRE_MAGIC} job={} node={} seq={} {ceiling}", self.job_id, self.node, self.seq)
    }

    /// Parses [`DirectiveReply::to_wire`]; every field must be there and well formed.
    pub fn parse(text: &str) -> Result<DirectiveReply, String> {
        let mut words = text.split_whitespace();
        if words.next() != Some(WIRE_MAGIC) {
            return Err(format!("not a directive (no {WIRE_MAGIC})"));
        }
        let fields: BTreeMap<&str, &str> = words.filter_map(|w| w.split_once('=')).collect();
        let get = |k: &str| fields.get(k).copied().ok_or_else(|| format!("directive without {k}="));
        let num = |k: &str| -> Result<u64, String> { get(k)?.parse::<u64>().map_err(|_| format!("directive: bad {k}=")) };
        let node = get("node")?;
        if node.is_empty() || node.len() > 256 {
            return Err("directive: bad node=".into());
        }
        let ceiling = match get("ceiling_mhz")? {
            "none" => None,
            mhz => {
                let clock_mhz = mhz.parse::<u32>().ok().filter(|m| *m > 0).ok_or("directive: bad ceiling_mhz=")?;
                let power_limit_w = match fields.get("power_limit_w") {
                    Some(w) => w.parse::<f64>().ok().filter(|w| w.is_finite() && *w >= 0.0).ok_or("directive: bad power_limit_w=")?,
                    None => 0.0,
                };
                Some(Ceiling { clock_mhz, power_limit_w })
            }
        };
        Ok(DirectiveReply {
            job_id: u32::try_from(num("job")?).map_err(|_| "directive: bad job=")?,
            node: node.to_string(),
            seq: num("seq")?,
            ceiling,
        })
    }
}

impl fmt::Display for Ceiling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.power_limit_w > 0.0 {
            write!(f, "{} MHz ({:.0} W limit)", self.clock_mhz, self.power_limit_w)
        } else {
            write!(f, "{} MHz", self.clock_mhz)
        }
    }
}

/// By how much a running job's time limit may still grow, as a slowdown relative to its start
/// step: its remaining limit (`end_s - now_s`, already extended for the slowdown `bound_now` its
/// ceiling in force may cost, so `(end_s - now_s) / bound_now` at its start clock) against the
/// latest end Slurm lets it be extended to (`cap_end_s`, or its `end_s` when Slurm allows no
/// more; None: uncapped, only the slowdown bound counts). The remaining limit, not the
/// predicted remaining run: a job that runs longer than predicted but within its limit must
/// not be pushed past it either. At least 1.
pub fn limit_headroom(now_s: f64, end_s: f64, cap_end_s: Option<f64>, bound_now: f64) -> f64 {
    let left_s = end_s - now_s;
    if left_s <= 0.0 {
        return 1.0;
    }
    let bound_now = if bound_now.is_finite() && bound_now >= 1.0 { bound_now } else { 1.0 };
    let extendable_end_s = cap_end_s.map_or(f64::INFINITY, |cap| cap.max(end_s));
    (bound_now * (extendable_end_s - now_s) / left_s).max(1.0)
}

/// The rule's input from a snapshot: idle GPUs' power, and each running job that runs alone on
/// its GPUs with its ladder as [`Predictor`] predicts it (as for new jobs). Jobs sharing a GPU,
/// and jobs on GPU types without curves, are counted at their clock's power and never
/// directed. `limit_cap_end_s`: for each running job whose limit Slurm caps, the latest end
/// its limit may be extended to (Unix s; absent: uncapped); `limit_bounds`: the slowdown each
/// job's limit was last extended for ([`Decided::limit_bounds`]; absent: 1). Returns
/// (`base_w`, the jobs).
pub fn running_powers(snap: &Snapshot, pred: &Predictor, limit_cap_end_s: &BTreeMap<JobId, f64>, limit_bounds: &BTreeMap<JobId, f64>) -> (f64, Vec<RunningPower>) {
    let by_node = running_powers_by_node(snap, pred, limit_cap_end_s, limit_bounds);
    (by_node.base_w_by_node.values().sum(), by_node.jobs)
}

/// [`running_powers`], per node: what the per-node rule ([`decide_by_node`]) needs to set each
/// node's reading against that node's predicted draw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodePowers {
    /// Per node (snapshot index): the GPU power of what the jobs do not account for there (idle
    /// GPUs, the part of undirected jobs on it), W.
    pub base_w_by_node: BTreeMap<u32, f64>,
    /// The running jobs the rule may direct ([`running_powers`]).
    pub jobs: Vec<RunningPower>,
    /// Each of those jobs' nodes and the part of its GPUs on each (the parts sum to 1).
    pub job_nodes: BTreeMap<JobId, Vec<(u32, f64)>>,
}

/// [`running_powers`]' input, kept per node ([`NodePowers`]).
pub fn running_powers_by_node(snap: &Snapshot, pred: &Predictor, limit_cap_end_s: &BTreeMap<JobId, f64>, limit_bounds: &BTreeMap<JobId, f64>) -> NodePowers {
    let mut base_w_by_node: BTreeMap<u32, f64> = BTreeMap::new();
    let mut job_nodes: BTreeMap<JobId, Vec<(u32, f64)>> = BTreeMap::new();
    let mut busy: BTreeMap<u32, u32> = BTreeMap::new();
    let mut jobs = Vec::new();
    for r in &snap.running {
        let gpus: u32 = r.allocations.iter().map(|a| a.gpu_indices.len() as u32).sum();
        for a in &r.allocations {
            *busy.entry(a.node.0).or_default() += a.gpu_indices.len() as u32;
        }
        if gpus == 0 {
            continue;
        }
        let Some(gt) = r.allocations.first().and_then(|a| snap.nodes.get(a.node.0 as usize)).and_then(|n| snap.gpu_types.get(n.gpu_type)) else { continue };
        let family = Predictor::family(r.hints.tag.as_deref());
        let shares: Vec<(u32, f64)> = r.allocations.iter().filter(|a| !a.gpu_indices.is_empty()).map(|a| (a.node.0, a.gpu_indices.len() as f64 / f64::from(gpus))).collect();
        let Some(curves) = pred.curves(&gt.name).filter(|_| !r.shared) else {
            let step = pred.curves(&gt.name).map_or(0, |c| c.default_step());
            let job_w = pred.predict_clock(&gt.name, gt.max_power_w, family.as_deref(), step).power_w * f64::from(gpus);
            for (node, share) in &shares {
                *base_w_by_node.entry(*node).or_default() += job_w * share;
            }
            continue;
        };
        job_nodes.insert(r.id, shares);
        let steps: Vec<StepPower> = curves
            .ladder
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let p = pred.predict_clock(&gt.name, gt.max_power_w, family.as_deref(), i);
                let clock_mhz = ((s.clock_frac * f64::from(gt.default_clock_mhz)).round() as u32).clamp(gt.min_clock_mhz, gt.max_clock_mhz);
                StepPower { clock_mhz, power_limit_w: s.power_limit_w, power_w: p.power_w * f64::from(gpus), time_ratio: p.time_ratio, worst_slowdown: s.worst_slowdown().max(p.time_ratio) }
            })
            .collect();
        // The step it started at: the one whose clock is nearest its recorded clock.
        let start_step = steps.iter().enumerate().min_by_key(|(_, s)| s.clock_mhz.abs_diff(r.clock_mhz)).map_or(0, |(i, _)| i);
        let bound_now = limit_bounds.get(&r.id).copied().unwrap_or(1.0);
        let limit_headroom = limit_headroom(snap.now_s, r.end_time_s, limit_cap_end_s.get(&r.id).copied(), bound_now);
        jobs.push(RunningPower { job: r.id, policy: r.hints.policy, gpus, steps, start_step, max_slowdown: r.hints.max_slowdown.max(1.0), limit_headroom });
    }
    for (i, n) in snap.nodes.iter().enumerate() {
        if n.power == PowerState::Suspended {
            continue;
        }
        let idle_w = snap.gpu_types.get(n.gpu_type).map_or(0.0, |g| g.idle_power_w);
        *base_w_by_node.entry(i as u32).or_default() += idle_w * f64::from(n.gpus.saturating_sub(busy.get(&(i as u32)).copied().unwrap_or(0)));
    }
    NodePowers { base_w_by_node, jobs, job_nodes }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 4-step ladder (MHz 900..1530) with this job's powers (W at each step, all GPUs) and
    /// time ratios.
    fn job(id: u32, policy: EnergyPolicy, max_slowdown: f64, powers_w: [f64; 4], ratios: [f64; 4]) -> RunningPower {
        let clocks = [900, 1100, 1300, 1530];
        RunningPower {
            job: JobId(id),
            policy,
            gpus: 1,
            steps: (0..4).map(|i| StepPower { clock_mhz: clocks[i], power_limit_w: 100.0 + 50.0 * i as f64, power_w: powers_w[i], time_ratio: ratios[i], worst_slowdown: ratios[i] }).collect(),
            start_step: 3,
            max_slowdown,
            limit_headroom: 10.0,
        }
    }

    const CHEAP: [f64; 4] = [1.06, 1.03, 1.01, 1.0];
    const DEAR: [f64; 4] = [1.6, 1.3, 1.1, 1.0];
    const POWER: [f64; 4] = [150.0, 200.0, 250.0, 300.0];

    fn ceiling_of(d: &Decided, id: u32) -> Option<u32> {
        d.ceilings[&JobId(id)].map(|c| c.clock_mhz)
    }

    #[test]
    fn no_cap_or_a_cap_above_the_draw_directs_nothing() {
        let jobs = [job(1, EnergyPolicy::Balanced, 2.0, POWER, CHEAP)];
        for cap in [None, Some(400.0)] {
            let d = decide(cap, 100.0, &jobs);
            assert_eq!(ceiling_of(&d, 1), None);
            assert!(!d.unmet);
        }
    }

    #[test]
    fn a_cap_drop_slows_the_cheapest_job_first() {
        let jobs = [job(1, EnergyPolicy::Balanced, 2.0, POWER, DEAR), job(2, EnergyPolicy::Balanced, 2.0, POWER, CHEAP)];
        // 600 W drawn; 500 W cap: 100 W to save, two steps of the cheap job.
        let d = decide(Some(500.0), 0.0, &jobs);
        assert_eq!((ceiling_of(&d, 1), ceiling_of(&d, 2)), (None, Some(1100)));
        assert!(d.predicted_w <= 500.0 && !d.unmet);
        // Deeper: the cheap job to its floor, then the dear one.
        let d = decide(Some(400.0), 0.0, &jobs);
        assert_eq!((ceiling_of(&d, 1), ceiling_of(&d, 2)), (Some(1300), Some(900)));
    }

    #[test]
    fn a_ceiling_reports_its_slowdown_and_the_limit_grows_by_it_once() {
        let jobs = [job(1, EnergyPolicy::Balanced, 2.0, POWER, DEAR), job(2, EnergyPolicy::Balanced, 2.0, POWER, CHEAP)];
        let d = decide(Some(400.0), 0.0, &jobs);
        // Job 1 at 1300 MHz (1.1 / 1.0), job 2 at 900 (1.06 / 1.0).
        assert!((d.slowdowns[&JobId(1)] - 1.1).abs() < 1e-9 && (d.slowdowns[&JobId(2)] - 1.06).abs() < 1e-9, "{:?}", d.slowdowns);
        assert_eq!(decide(None, 0.0, &jobs).slowdowns[&JobId(1)], 1.0);
        // The limit grows by the change of slowdown only: first ceiling, a lower one, a raised one.
        assert!((extension_factor(1.0, 1.1) - 1.1).abs() < 1e-9);
        assert!((extension_factor(1.1, 1.3) - 1.3 / 1.1).abs() < 1e-9);
        assert_eq!(extension_factor(1.3, 1.1), 1.0);
        assert_eq!(extension_factor(1.1, 1.1), 1.0);
    }

    #[test]
    fn the_room_to_slow_is_the_limit_slurm_lets_it_be_extended_to() {
        // Now 1000 s; the limit ends at 1100 s (100 s left, whatever the runtime history predicts).
        let room = |cap_end_s| limit_headroom(1000.0, 1100.0, cap_end_s, 1.0);
        assert!((room(Some(1100.0)) - 1.0).abs() < 1e-9, "capped at its own limit (an admin's limit): no room");
        assert!((room(Some(1050.0)) - 1.0).abs() < 1e-9, "a cap below its limit never shortens it");
        assert!((room(Some(1130.0)) - 1.3).abs() < 1e-9, "MaxTime 30 s beyond it");
        assert!(room(None).is_infinite(), "uncapped: only the slowdown bound counts");
        assert_eq!(limit_headroom(1000.0, 1000.0, None, 1.0), 1.0, "nothing left of its limit");
        // A limit already extended for a ceiling of worst case 1.2: 120 s left are 100 s at its
        // start clock, so up to 1.56 of its start clock's time fits by 1156 s.
        assert!((limit_headroom(1000.0, 1120.0, Some(1156.0), 1.2) - 1.56).abs() < 1e-9);
        let mut capped = job(1, EnergyPolicy::Balanced, 2.0, POWER, DEAR);
        capped.limit_headroom = room(Some(1130.0));
        assert_eq!(ceiling_of(&decide(Some(10.0), 0.0, &[capped.clone()]), 1), Some(1100), "1.3 of room: down to 1100 (1.3), not 900 (1.6)");
        // The room is for the worst case, not the prediction: 1100 MHz may cost 1.35.
        capped.steps[1].worst_slowdown = 1.35;
        assert_eq!(ceiling_of(&decide(Some(10.0), 0.0, &[capped]), 1), Some(1300), "1.35 worst case > 1.3 of room at 1100 MHz");
    }

    /// A job the truth slows more than its class predicts, with a time limit just above its
    /// run: what the limit is extended to against what the truth needs.
    #[test]
    fn a_job_slowed_more_than_predicted_still_ends_within_its_extended_limit() {
        let mut j = job(1, EnergyPolicy::Efficiency, 2.0, POWER, DEAR);
        // 1300 MHz predicted 1.1 for its class; the worst measured workload slows 1.25 there.
        j.steps[2].worst_slowdown = 1.25;
        let d = decide(Some(260.0), 0.0, std::slice::from_ref(&j));
        assert_eq!(ceiling_of(&d, 1), Some(1300));
        assert!((d.slowdowns[&JobId(1)] - 1.1).abs() < 1e-9, "{:?}", d.slowdowns);
        // Now 0; 1000 s left of its limit; it needs 980 s more at its own clock, and the truth
        // slows it by 1.2 under the ceiling (more than the 1.1 predicted, within the worst case).
        let (left_limit_s, left_run_s, truth_slowdown) = (1000.0, 980.0, 1.2);
        let needed_s = left_run_s * truth_slowdown;
        let extended_s = left_limit_s * extension_factor(1.0, d.limit_bounds[&JobId(1)]);
        assert!((d.limit_bounds[&JobId(1)] - 1.25).abs() < 1e-9, "{:?}", d.limit_bounds);
        assert!(extended_s >= needed_s, "limit {extended_s} s < {needed_s} s the truth needs: killed for the cap");
        // By the prediction alone it would have been killed: 1100 s < 1176 s.
        assert!(left_limit_s * extension_factor(1.0, d.slowdowns[&JobId(1)]) < needed_s);
        // Lowered further (1100 MHz: worst 1.3), the limit grows by the change of the worst case.
        let deeper = decide(Some(210.0), 0.0, std::slice::from_ref(&j));
        assert_eq!(ceiling_of(&deeper, 1), Some(1100));
        assert!((extension_factor(d.limit_bounds[&JobId(1)], deeper.limit_bounds[&JobId(1)]) - 1.3 / 1.25).abs() < 1e-9);
        // Not under a ceiling: nothing to extend for.
        assert_eq!(decide(None, 0.0, &[j]).limit_bounds[&JobId(1)], 1.0);
    }

    #[test]
    fn measured_power_above_the_prediction_slows_more() {
        let jobs = [job(1, EnergyPolicy::Balanced, 2.0, POWER, DEAR), job(2, EnergyPolicy::Balanced, 2.0, POWER, CHEAP)];
        // Predicted 600 W for a 500 W cap: two steps of the cheap job (500 W predicted).
        assert_eq!(ceiling_of(&decide(Some(500.0), 0.0, &jobs), 2), Some(1100));
        // Measured 20 % above that prediction: 500 W predicted is 600 W for real; more goes.
        let c = measured_correction(Some(600.0), 500.0);
        assert!((c - 1.2).abs() < 1e-9);
        let d = decide_corrected(Some(500.0), 0.0, &jobs, c);
        assert!(d.predicted_w <= 500.0 + 1e-9 && !d.unmet, "{d:?}");
        assert_eq!((ceiling_of(&d, 1), ceiling_of(&d, 2)), (Some(1300), Some(900)));
        // Bounded, and ignored when unknown.
        assert_eq!(measured_correction(Some(5000.0), 500.0), 2.0);
        assert_eq!(measured_correction(Some(10.0), 500.0), 0.5);
        assert_eq!(measured_correction(None, 500.0), 1.0);
        assert_eq!(measured_correction(Some(600.0), 0.0), 1.0);
    }

    /// Two jobs on two nodes; `heavy_reads`: node 1's reading over its prediction.
    fn two_nodes(heavy_policy: EnergyPolicy) -> NodePowers {
        // Job 1 (node 0) is the cheaper to slow; job 2 (node 1) draws twice its prediction.
        let jobs = vec![job(1, EnergyPolicy::Balanced, 2.0, POWER, CHEAP), job(2, heavy_policy, 2.0, POWER, DEAR)];
        NodePowers {
            base_w_by_node: BTreeMap::from([(0, 0.0), (1, 0.0)]),
            jobs,
            job_nodes: BTreeMap::from([(JobId(1), vec![(0, 1.0)]), (JobId(2), vec![(1, 1.0)])]),
        }
    }

    /// Corrections from node readings only (no job measured its own GPUs).
    fn node_only(measured: &BTreeMap<u32, f64>, predicted: &BTreeMap<u32, f64>) -> Corrections {
        corrections(measured, &BTreeMap::new(), predicted, &BTreeMap::new())
    }

    /// Two jobs on one node: job 1 the cheaper to slow, job 2 (another user's) the one that
    /// draws twice its prediction.
    fn one_node() -> NodePowers {
        let jobs = vec![job(1, EnergyPolicy::Balanced, 2.0, POWER, CHEAP), job(2, EnergyPolicy::Balanced, 2.0, POWER, DEAR)];
        NodePowers { base_w_by_node: BTreeMap::from([(0, 0.0)]), jobs, job_nodes: BTreeMap::from([(JobId(1), vec![(0, 1.0)]), (JobId(2), vec![(0, 1.0)])]) }
    }

    // Issue 24, hostile users: a job that draws more than predicted (a user's power virus) must
    // not get its neighbour on the same node slowed in its place.
    #[test]
    fn a_jobs_own_reading_charges_its_excess_to_it_not_to_its_neighbour_on_the_node() {
        let powers = one_node();
        // Predicted 300 W each, 600 W for the node; the node reads 900 W: job 2 draws 600 W.
        let node_w = BTreeMap::from([(0, 900.0)]);
        let predicted_node_w = BTreeMap::from([(0, 600.0)]);
        // By the node alone both jobs look alike, and the cheaper one (job 1) pays.
        let by_node = decide_by_node(Some(800.0), &powers, &node_only(&node_w, &predicted_node_w));
        assert_eq!((ceiling_of(&by_node.decided, 1), ceiling_of(&by_node.decided, 2)), (Some(1100), None), "the node's rule slows the neighbour: {by_node:?}");
        // With each job's own reading, job 2 pays for its own excess and job 1 runs untouched.
        let job_node_w = BTreeMap::from([((JobId(1), 0), 300.0), ((JobId(2), 0), 600.0)]);
        let predicted_job_node_w = BTreeMap::from([((JobId(1), 0), 300.0), ((JobId(2), 0), 300.0)]);
        let c = corrections(&node_w, &job_node_w, &predicted_node_w, &predicted_job_node_w);
        assert_eq!(c.by_job, BTreeMap::from([(JobId(1), 1.0), (JobId(2), 2.0)]));
        assert_eq!(c.by_node, BTreeMap::new(), "nothing left on the node to correct");
        let d = decide_by_node(Some(800.0), &powers, &c);
        assert_eq!((ceiling_of(&d.decided, 1), ceiling_of(&d.decided, 2)), (None, Some(1300)), "{d:?}");
        assert!((d.decided.predicted_w - 800.0).abs() < 1e-9 && !d.decided.unmet, "{d:?}");
        assert_eq!(d.raw_w_by_job_node, BTreeMap::from([((JobId(1), 0), 300.0), ((JobId(2), 0), 250.0)]));
        // Only one of them measured (the other shares a GPU): the rest of the node's reading
        // corrects the rest of its prediction.
        let c = corrections(&node_w, &BTreeMap::from([((JobId(2), 0), 600.0)]), &predicted_node_w, &predicted_job_node_w);
        assert_eq!((c.by_job.get(&JobId(2)), c.by_node.get(&0)), (Some(&2.0), Some(&1.0)));
        let d = decide_by_node(Some(800.0), &powers, &c);
        assert_eq!((ceiling_of(&d.decided, 1), ceiling_of(&d.decided, 2)), (None, Some(1300)), "{d:?}");
        // A reading without a prediction to set it against is left out.
        assert_eq!(corrections(&BTreeMap::new(), &BTreeMap::from([((JobId(9), 0), 600.0)]), &BTreeMap::new(), &predicted_job_node_w), Corrections::default());
    }

    #[test]
    fn one_nodes_excess_slows_its_own_job_first_not_the_others() {
        let powers = two_nodes(EnergyPolicy::Balanced);
        // Predicted 300 W each; node 1 measures 600 W. 800 W cap: 900 W drawn for real.
        let corrections = node_only(&BTreeMap::from([(0, 300.0), (1, 600.0)]), &BTreeMap::from([(0, 300.0), (1, 300.0)]));
        assert_eq!(corrections.by_node, BTreeMap::from([(0, 1.0), (1, 2.0)]));
        let d = decide_by_node(Some(800.0), &powers, &corrections);
        assert_eq!((ceiling_of(&d.decided, 1), ceiling_of(&d.decided, 2)), (None, Some(1300)), "the heavy job pays its own excess: {d:?}");
        assert!((d.decided.predicted_w - 800.0).abs() < 1e-9 && !d.decided.unmet, "{d:?}");
        assert_eq!(d.raw_w_by_node, BTreeMap::from([(0, 300.0), (1, 250.0)]));
        // Even when it asked for performance: its excess is its own.
        let d = decide_by_node(Some(800.0), &two_nodes(EnergyPolicy::Performance), &corrections);
        assert_eq!((ceiling_of(&d.decided, 1), ceiling_of(&d.decided, 2)), (None, Some(1300)), "{d:?}");
        // Without excess the rule is decide's: the cheaper job first.
        let plain = decide_by_node(Some(500.0), &powers, &Corrections::default());
        assert_eq!(plain.decided, decide(Some(500.0), 0.0, &powers.jobs));
        // Only once the heavy job is at its floor does the rest fall on the others (the cap holds).
        let d = decide_by_node(Some(500.0), &powers, &corrections);
        assert_eq!((ceiling_of(&d.decided, 1), ceiling_of(&d.decided, 2)), (Some(1100), Some(900)), "{d:?}");
        assert!(d.decided.predicted_w <= 500.0 + 1e-9 && !d.decided.unmet, "{d:?}");
        // A node reading low gives its room to everyone.
        let low = node_only(&BTreeMap::from([(0, 300.0), (1, 150.0)]), &BTreeMap::from([(0, 300.0), (1, 300.0)]));
        assert_eq!(ceiling_of(&decide_by_node(Some(500.0), &powers, &low).decided, 1), None);
    }

    #[test]
    fn performance_jobs_are_slowed_last() {
        // The performance job is the cheapest to slow, and still waits for the other.
        let jobs = [job(1, EnergyPolicy::Performance, 2.0, POWER, CHEAP), job(2, EnergyPolicy::Efficiency, 2.0, POWER, DEAR)];
        let d = decide(Some(450.0), 0.0, &jobs);
        assert_eq!((ceiling_of(&d, 1), ceiling_of(&d, 2)), (None, Some(900)));
        let d = decide(Some(350.0), 0.0, &jobs);
        assert_eq!((ceiling_of(&d, 1), ceiling_of(&d, 2)), (Some(1100), Some(900)));
    }

    #[test]
    fn no_job_is_slowed_beyond_its_bound_or_its_time_limit() {
        let mut tight = job(1, EnergyPolicy::Balanced, 1.05, POWER, DEAR);
        let mut short = job(2, EnergyPolicy::Balanced, 3.0, POWER, DEAR);
        short.limit_headroom = 1.15;
        let d = decide(Some(10.0), 0.0, &[tight.clone(), short.clone()]);
        assert_eq!((ceiling_of(&d, 1), ceiling_of(&d, 2)), (None, Some(1300)), "1.1 > 1.05 for job 1; 1.3 > 1.15 for job 2");
        assert!(d.unmet, "a cap no bound allows stays unmet");
        // A job that already started at a lower clock is bounded relative to the default.
        tight.max_slowdown = 1.3;
        tight.start_step = 2;
        short.limit_headroom = 1.0;
        let d = decide(Some(10.0), 0.0, &[tight, short]);
        assert_eq!((ceiling_of(&d, 1), ceiling_of(&d, 2)), (Some(1100), None));
    }

    #[test]
    fn a_rising_cap_gives_back_in_reverse_order_and_a_lifted_cap_removes_every_ceiling() {
        let jobs = [job(1, EnergyPolicy::Performance, 2.0, POWER, CHEAP), job(2, EnergyPolicy::Balanced, 2.0, POWER, DEAR)];
        let low = decide(Some(350.0), 0.0, &jobs);
        assert_eq!((ceiling_of(&low, 1), ceiling_of(&low, 2)), (Some(1100), Some(900)));
        // Slowed last (the performance job), given back first.
        let mid = decide(Some(450.0), 0.0, &jobs);
        assert_eq!((ceiling_of(&mid, 1), ceiling_of(&mid, 2)), (None, Some(900)));
        let lifted = decide(None, 0.0, &jobs);
        assert!(lifted.ceilings.values().all(Option::is_none));
        // Through the table: each change numbered above the last, the lift included.
        let mut table = DirectiveTable::default();
        let first = table.update(&low.ceilings, 1_000);
        assert_eq!(first.len(), 2);
        let s1 = table.get(JobId(1)).expect("known").seq;
        assert!(table.update(&low.ceilings, 2_000).is_empty(), "no change, no new number");
        assert_eq!(table.get(JobId(1)).expect("known").seq, s1);
        let lift = table.update(&lifted.ceilings, 1_500);
        assert_eq!(lift.len(), 2);
        let d1 = table.get(JobId(1)).expect("known");
        assert!(d1.seq > s1 && d1.ceiling.is_none(), "{d1:?}");
        assert_eq!(table.capped(), 0);
        // A job that ended is forgotten.
        table.update(&BTreeMap::from([(JobId(2), None)]), 3_000);
        assert_eq!(table.get(JobId(1)), None);
    }

    #[test]
    fn a_restarted_table_numbers_above_the_old_one_and_says_none_to_jobs_it_first_sees() {
        let mut before = DirectiveTable::default();
        before.update(&BTreeMap::from([(JobId(7), Some(Ceiling { clock_mhz: 900, power_limit_w: 0.0 }))]), 1_000_000);
        let old = before.get(JobId(7)).expect("known").seq;
        let mut after = DirectiveTable::default();
        let changes = after.update(&BTreeMap::from([(JobId(7), None)]), 1_005_000);
        assert!(changes.is_empty(), "first sight without a ceiling is not logged as a change");
        let d = after.get(JobId(7)).expect("numbered at first sight");
        assert!(d.seq > old && d.ceiling.is_none());
    }

    #[test]
    fn the_reply_round_trips_and_bad_ones_are_refused() {
        let r = DirectiveReply { job_id: 12, node: "n1".into(), seq: 1_764_280_000_123, ceiling: Some(Ceiling { clock_mhz: 1087, power_limit_w: 170.0 }) };
        assert_eq!(DirectiveReply::parse(&r.to_wire()), Ok(r.clone()));
        let none = DirectiveReply { ceiling: None, ..r };
        assert_eq!(DirectiveReply::parse(&none.to_wire()), Ok(none));
        for bad in ["", "slurm-energy-use/1 job=1", "slurm-energy-directive/1 job=1 node=n seq=x ceiling_mhz=none", "slurm-energy-directive/1 job=1 node=n seq=1 ceiling_mhz=0", "slurm-energy-directive/1 job=1 seq=1 ceiling_mhz=none"] {
            assert!(DirectiveReply::parse(bad).is_err(), "{bad:?}");
        }
    }
}
