//! Elastic GPU counts under an energy (or carbon) budget: PowerFlow's and GreenFlow's way of
//! trading JCT for joules by choosing how many GPUs each job gets.
//!
//! - **Scaling.** A job's throughput on `g` GPUs relative to one GPU is predicted per model
//!   family from Gavel's measured isolated throughputs at 1, 2, 4 and 8 GPUs
//!   ([`measured_speedup`]): the median over the family's job types (batch sizes) at each
//!   count, linear in between; a family without multi-GPU measurements gets the median over all
//!   families. (An Amdahl fit was tried first: Gavel's rows are far from Amdahl's shape, e.g.
//!   LM and Transformer run much less efficiently on 4 GPUs than on 2 or 8, and the fit
//!   predicted shrinking 8-GPU jobs to 4 as cheap when it costs 2-5x the GPU time.)
//! - **Choices.** A job that fits on one node may run on half, the same or twice its request,
//!   in powers of two (buddy-aligned blocks) up to one node's GPUs; a multi-node job keeps its
//!   request.
//! - **Allocation** ([`allocate`], re-run at every scheduling cycle for the pending jobs): jobs
//!   are admitted in queue order at their request, or narrower when only fewer GPUs are free
//!   and the narrower run is predicted to cost no more energy (rather than wait), and the GPUs left over go, one step at a time, to the admitted job
//!   that saves the most predicted JCT per extra GPU, as long as the extra energy is at most
//!   the budget's price `joules_per_jct_s` times the JCT it saves. The price is the budget's
//!   Lagrange multiplier: sweeping it traces the energy vs JCT frontier, and the budget table
//!   reads the best JCT within each budget. GreenFlow prices carbon instead: the extra energy
//!   is weighted by the grid's intensity now relative to its forecast (cheap when clean).
//!
//! - **Re-allocation of running jobs** ([`reallocate`], re-run at every scheduling event after
//!   the pending jobs were placed): the papers' JCT mechanism, a running job checkpointed and
//!   restarted at another count within the same [`choices`]. When the first waiting job does not
//!   fit on any node, GPUs a running job was *grown* by (above its request) are taken back, then
//!   running jobs go narrower where that costs no more predicted energy, cheapest predicted JCT
//!   loss first, on the node where that makes the waiting job fit;
//!   otherwise, when nothing waits, a running job grows one step onto free GPUs of its own node
//!   when the JCT its remaining work saves exceeds the restart pause ([`RestartCost`]) and the
//!   extra energy (pause included) is within the budget's price, as in admission's growth. Each
//!   change pauses the job for the restart; its progress carries over at the new speed.
//!
//! What the papers do beyond this and is not modelled: migrating a running job to another node
//! (ours restarts on its own node), a joint clock/count optimiser, and batch-size tuning.

use std::collections::BTreeMap;

use crate::data::gavel::GavelThroughputs;
use crate::workloads::{canonical_family, gavel_family};

/// GPU counts Gavel measured jobs on.
pub const MEASURED_SCALES: [u32; 4] = [1, 2, 4, 8];

/// Measured speedup of `job_type` on `gpus` GPUs over one GPU: Gavel's isolated throughputs,
/// held at most linear (a superlinear ratio, which some of Gavel's multi-GPU rows show, says the
/// one-GPU run was not representative; it is read as linear). `None` when either is missing.
pub fn measured_speedup(t: &GavelThroughputs, gpu: &str, job_type: &str, gpus: u32) -> Option<f64> {
    let one = t.isolated(gpu, job_type, 1).filter(|x| *x > 0.0)?;
    let at = t.isolated(gpu, job_type, gpus).filter(|x| *x > 0.0)?;
    Some((at / one).min(gpus as f64))
}

/// Speedups (over one GPU) at [`MEASURED_SCALES`] 2, 4 and 8, linear between them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalingCurve {
    pub at: [f64; 3],
}

impl ScalingCurve {
    pub fn speedup(&self, gpus: u32) -> f64 {
        let pts = [(1u32, 1.0), (2, self.at[0]), (4, self.at[1]), (8, self.at[2])];
        if gpus <= 1 {
            return 1.0;
        }
        if gpus >= 8 {
            return self.at[2] * gpus as f64 / 8.0;
        }
        let hi = pts.iter().position(|(g, _)| *g >= gpus).unwrap_or(3);
        let (g0, s0) = pts[hi - 1];
        let (g1, s1) = pts[hi];
        s0 + (s1 - s0) * (gpus - g0) as f64 / (g1 - g0) as f64
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// The planner's scaling predictions: per model family, the median of the measured speedups
/// of the family's job types at 2, 4 and 8 GPUs; a family without multi-GPU measurements gets
/// the median over all families.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalingModel {
    per_family: BTreeMap<String, ScalingCurve>,
    pooled: ScalingCurve,
}

impl ScalingModel {
    /// Fit on every job type of `t` measured on `gpu` (pass the planner's half only).
    pub fn from_gavel(t: &GavelThroughputs, gpu: &str) -> Option<ScalingModel> {
        let mut by_family: BTreeMap<String, [Vec<f64>; 3]> = BTreeMap::new();
        for job_type in t.job_types(gpu) {
            for (k, g) in MEASURED_SCALES.into_iter().skip(1).enumerate() {
                if let Some(s) = measured_speedup(t, gpu, &job_type, g) {
                    by_family.entry(canonical_family(gavel_family(&job_type))).or_default()[k].push(s);
                }
            }
        }
        let curve = |v: &[Vec<f64>; 3]| -> Option<ScalingCurve> { Some(ScalingCurve { at: [median(v[0].clone())?, median(v[1].clone())?, median(v[2].clone())?] }) };
        let mut all: [Vec<f64>; 3] = Default::default();
        for v in by_family.values() {
            for k in 0..3 {
                all[k].extend(v[k].iter().copied());
            }
        }
        let pooled = curve(&all)?;
        let per_family = by_family.iter().filter_map(|(f, v)| curve(v).map(|c| (f.clone(), c))).collect();
        Some(ScalingModel { per_family, pooled })
    }

    pub fn curve(&self, family: Option<&str>) -> ScalingCurve {
        family.and_then(|f| self.per_family.get(&canonical_family(f))).copied().unwrap_or(self.pooled)
    }

    pub fn speedup(&self, family: Option<&str>, gpus: u32) -> f64 {
        self.curve(family).speedup(gpus)
    }
}

/// GPU counts a job requesting `requested` GPUs may run on: half, the same, twice, in powers of
/// two, at most `per_node` (so the job stays on one node); a job larger than a node keeps its
/// request. Ascending, always containing `requested` when it fits on a node.
pub fn choices(requested: u32, per_node: u32) -> Vec<u32> {
    if requested == 0 || requested > per_node {
        return vec![requested];
    }
    let mut out: Vec<u32> = (0..=per_node.ilog2()).map(|e| 1u32 << e).filter(|g| 2 * g >= requested && *g <= 2 * requested && *g <= per_node).collect();
    out.push(requested);
    out.sort_unstable();
    out.dedup();
    out
}

/// One pending job as the allocation sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ElasticJob {
    /// Allowed GPU counts, ascending (see [`choices`]).
    pub choices: Vec<u32>,
    /// Predicted runtime at the first choice (s).
    pub runtime_at_first_s: f64,
    /// Predicted speedup (over one GPU) at each choice.
    pub speedup: Vec<f64>,
    /// Predicted power per GPU while running (W), host share included.
    pub power_per_gpu_w: f64,
}

impl ElasticJob {
    fn runtime_s(&self, k: usize) -> f64 {
        self.runtime_at_first_s * self.speedup[0] / self.speedup[k].max(1e-9)
    }

    fn energy_j(&self, k: usize) -> f64 {
        self.choices[k] as f64 * self.power_per_gpu_w * self.runtime_s(k)
    }
}

/// One upgrade a job could take next, ordered by JCT saved per extra GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Upgrade {
    value: f64,
    job: usize,
}

impl Eq for Upgrade {}
impl PartialOrd for Upgrade {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Upgrade {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.value.total_cmp(&o.value).then(o.job.cmp(&self.job))
    }
}

/// GPU count for each job (same order), given `free_gpus` and the budget's price: the energy
/// (J, weighted by `energy_weight`, e.g. relative carbon intensity) the scheduler may spend to
/// save one second of JCT. `requested[i]` is the index in `jobs[i].choices` of the job's own
/// request; `runtime_scale[i]` multiplies `jobs[i].runtime_at_first_s` (e.g. the expected
/// runtime, when the shape holds runtimes per second of it).
///
/// 1. Admission, in queue order: a job gets its request if it fits in the GPUs left, else the
///    largest smaller choice that fits and is predicted to cost no more energy (it runs
///    narrower rather than wait); the first job that fits in no such choice stops admission (the rest keep their request and wait, as in FIFO).
/// 2. Growth: the GPUs left go one step at a time to the admitted job that saves the most
///    predicted JCT per extra GPU, as long as the extra energy is at most the price times the
///    JCT saved.
pub fn allocate(jobs: &[&ElasticJob], requested: &[usize], runtime_scale: &[f64], free_gpus: u32, joules_per_jct_s: f64, energy_weight: f64) -> Vec<u32> {
    let mut level: Vec<usize> = requested.iter().zip(jobs).map(|(r, j)| (*r).min(j.choices.len().saturating_sub(1))).collect();
    let mut left = free_gpus as i64;
    let mut admitted = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        // Narrower than the request only where that is predicted to cost no more energy
        // (GPU time): a job whose scaling is superlinear there waits instead.
        let req = level[i];
        let Some(k) = (0..=req).rev().find(|k| j.choices.get(*k).is_some_and(|g| *g as i64 <= left) && (*k == req || j.energy_j(*k) <= j.energy_j(req) * (1.0 + 1e-9))) else { break };
        level[i] = k;
        left -= j.choices[k] as i64;
        admitted.push(i);
    }
    let next = |i: usize, k: usize| -> Option<Upgrade> {
        let j = &jobs[i];
        if k + 1 >= j.choices.len() || j.speedup.len() != j.choices.len() {
            return None;
        }
        let extra = (j.choices[k + 1] - j.choices[k]) as f64;
        let scale = runtime_scale.get(i).copied().unwrap_or(1.0);
        let saved_s = (j.runtime_s(k) - j.runtime_s(k + 1)) * scale;
        let cost_j = (j.energy_j(k + 1) - j.energy_j(k)) * scale * energy_weight;
        (saved_s > 0.0 && cost_j <= joules_per_jct_s * saved_s).then_some(Upgrade { value: saved_s / extra, job: i })
    };
    let mut heap: std::collections::BinaryHeap<Upgrade> = admitted.iter().filter_map(|&i| next(i, level[i])).collect();
    while left > 0 {
        let Some(u) = heap.pop() else { break };
        let j = &jobs[u.job];
        let k = level[u.job];
        let extra = (j.choices[k + 1] - j.choices[k]) as i64;
        if extra > left {
            continue;
        }
        level[u.job] = k + 1;
        left -= extra;
        if let Some(n) = next(u.job, k + 1) {
            heap.push(n);
        }
    }
    jobs.iter().zip(&level).map(|(j, k)| j.choices.get(*k).copied().unwrap_or(0)).collect()
}

/// The pause of one checkpoint-restart at a new GPU count: a fixed part (save the state, stop,
/// requeue on the new GPUs, load it, warm up) plus a part per GPU of the larger of the two
/// allocations (processes and communicators to set up). Both are spec knobs
/// (`[elastic]` of the cluster spec).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RestartCost {
    pub fixed_s: f64,
    pub per_gpu_s: f64,
}

impl RestartCost {
    pub fn pause_s(&self, from_gpus: u32, to_gpus: u32) -> f64 {
        self.fixed_s + self.per_gpu_s * from_gpus.max(to_gpus) as f64
    }
}

/// One running job as the re-allocation sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningElastic<'a> {
    pub shape: &'a ElasticJob,
    /// Index in `shape.choices` of the count it runs on now, and of its request.
    pub level: usize,
    pub requested: usize,
    /// The node it runs on (single-node jobs only are re-allocated).
    pub node: usize,
    /// Predicted remaining runtime at its requested count (s): the expected runtime less the
    /// work it has done (both in seconds at the request), never below 0.
    pub remaining_at_request_s: f64,
}

impl RunningElastic<'_> {
    fn runtime_s(&self, k: usize) -> f64 {
        let s = &self.shape.speedup;
        let at = |k: usize| s.get(k).copied().unwrap_or(1.0).max(1e-9);
        self.remaining_at_request_s * at(self.requested) / at(k)
    }

    fn energy_j(&self, k: usize) -> f64 {
        self.shape.choices.get(k).copied().unwrap_or(0) as f64 * self.shape.power_per_gpu_w * self.runtime_s(k)
    }
}

/// A running job's new GPU count (`job` indexes the slice given to [`reallocate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resize {
    pub job: usize,
    pub gpus: u32,
}

/// Re-allocation of running jobs for this cycle, given each node's free GPUs and the GPUs the
/// first waiting job needs on one node (`None`: nothing waits, or what waits is not a
/// single-node job whose start a re-allocation could bring forward).
///
/// 1. A job waits and no node has room for it: on the node where it is cheapest, jobs grown
///    above their request go back to it, then jobs at or below their request go one step
///    narrower where that is predicted to cost no more energy (as admission narrows a pending
///    job), least predicted JCT lost per GPU freed first (the pause included), until the
///    waiting job fits there; none if no node can make room.
/// 2. Nothing waits: each job may grow one step onto free GPUs of its node, most JCT saved per
///    extra GPU first, when the JCT saved exceeds the pause and the extra energy (weighted by
///    `energy_weight`, the pause's energy at the new count included) is at most
///    `joules_per_jct_s` times the JCT saved.
pub fn reallocate(jobs: &[RunningElastic], free_by_node: &[u32], waiting_gpus: Option<u32>, joules_per_jct_s: f64, energy_weight: f64, restart: RestartCost) -> Vec<Resize> {
    let free = |n: usize| free_by_node.get(n).copied().unwrap_or(0);
    if let Some(need) = waiting_gpus {
        if free_by_node.iter().any(|f| *f >= need) {
            return Vec::new();
        }
        let mut best: Option<(f64, Vec<Resize>)> = None;
        let nodes: std::collections::BTreeSet<usize> = jobs.iter().map(|j| j.node).collect();
        for n in nodes {
            let mut narrower: Vec<(bool, f64, usize, usize)> = jobs
                .iter()
                .enumerate()
                .filter(|(_, j)| j.node == n && j.level > 0 && j.shape.choices.len() > j.level && j.shape.speedup.len() == j.shape.choices.len())
                .filter_map(|(i, j)| {
                    let to = if j.level > j.requested { j.requested } else { j.level - 1 };
                    if to < j.requested && j.energy_j(to) > j.energy_j(j.level) * (1.0 + 1e-9) {
                        return None;
                    }
                    let freed = (j.shape.choices[j.level] - j.shape.choices[to]) as f64;
                    let lost_s = j.runtime_s(to) - j.runtime_s(j.level) + restart.pause_s(j.shape.choices[j.level], j.shape.choices[to]);
                    // Grown jobs give back first.
                    Some((to < j.requested, lost_s / freed, i, to))
                })
                .collect();
            narrower.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));
            let (mut room, mut lost_s, mut out) = (free(n), 0.0, Vec::new());
            for (_, per_gpu_s, i, to) in narrower {
                if room >= need {
                    break;
                }
                let j = &jobs[i];
                let freed = j.shape.choices[j.level] - j.shape.choices[to];
                room += freed;
                lost_s += per_gpu_s * freed as f64;
                out.push(Resize { job: i, gpus: j.shape.choices[to] });
            }
            if room >= need && !out.is_empty() && best.as_ref().is_none_or(|(b, _)| lost_s < *b) {
                best = Some((lost_s, out));
            }
        }
        return best.map(|(_, r)| r).unwrap_or_default();
    }
    let mut room: Vec<u32> = free_by_node.to_vec();
    let mut candidates: Vec<(f64, usize, u32)> = jobs
        .iter()
        .enumerate()
        .filter_map(|(i, j)| {
            let (k, c) = (j.level, &j.shape.choices);
            if k + 1 >= c.len() || j.shape.speedup.len() != c.len() {
                return None;
            }
            let extra = c[k + 1] - c[k];
            let pause_s = restart.pause_s(c[k], c[k + 1]);
            let saved_s = j.runtime_s(k) - j.runtime_s(k + 1) - pause_s;
            let cost_j = (j.energy_j(k + 1) - j.energy_j(k) + c[k + 1] as f64 * j.shape.power_per_gpu_w * pause_s) * energy_weight;
            (saved_s > 0.0 && cost_j <= joules_per_jct_s * saved_s).then_some((saved_s / extra as f64, i, extra))
        })
        .collect();
    candidates.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut out = Vec::new();
    for (_, i, extra) in candidates {
        let j = &jobs[i];
        if let Some(r) = room.get_mut(j.node).filter(|r| **r >= extra) {
            *r -= extra;
            out.push(Resize { job: i, gpus: j.shape.choices[j.level + 1] });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_curve_interpolates_between_measured_counts() {
        let c = ScalingCurve { at: [1.8, 3.0, 5.0] };
        assert_eq!(c.speedup(1), 1.0);
        assert_eq!(c.speedup(4), 3.0);
        assert!((c.speedup(3) - 2.4).abs() < 1e-9 && (c.speedup(6) - 4.0).abs() < 1e-9);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
    }

    #[test]
    fn choices_are_buddy_blocks_around_the_request() {
        assert_eq!(choices(1, 8), vec![1, 2]);
        assert_eq!(choices(2, 8), vec![1, 2, 4]);
        assert_eq!(choices(3, 8), vec![2, 3, 4]);
        assert_eq!(choices(8, 8), vec![4, 8]);
        assert_eq!(choices(16, 8), vec![16]);
    }

    fn job(choices: Vec<u32>, serial: f64) -> ElasticJob {
        let amdahl = |g: u32| 1.0 / (serial + (1.0 - serial) / g as f64);
        let speedup = choices.iter().map(|g| amdahl(*g)).collect();
        ElasticJob { choices, runtime_at_first_s: 3600.0, speedup, power_per_gpu_w: 250.0 }
    }

    #[test]
    fn the_price_decides_who_grows_and_scarcity_shrinks_to_fit() {
        let jobs = [job(vec![1, 2, 4], 0.05), job(vec![1, 2, 4], 0.6)];
        let req = [0, 0];
        let refs: Vec<&ElasticJob> = jobs.iter().collect();
        let ones = [1.0, 1.0];
        // No energy to spare: everyone at its request.
        assert_eq!(allocate(&refs, &req, &ones, 16, 0.0, 1.0), vec![1, 1]);
        // A moderate price grows the job that scales, not the one that does not.
        let a = allocate(&refs, &req, &ones, 16, 400.0, 1.0);
        assert!(a[0] >= 2 && a[1] == 1, "{a:?}");
        // Any price, but only two GPUs: both admitted at one.
        assert_eq!(allocate(&refs, &req, &ones, 2, 1e9, 1.0), vec![1, 1]);
        // A dirtier grid (weight 4) makes the same price buy less.
        let dirty = allocate(&refs, &req, &ones, 16, 400.0, 4.0);
        assert!(dirty[0] <= a[0], "{dirty:?} vs {a:?}");
        // Requests of 8 with 12 free: the first gets 8, the second runs on 4 rather than wait,
        // a third waits at its request.
        let big = [job(vec![4, 8], 0.1), job(vec![4, 8], 0.1), job(vec![4, 8], 0.1)];
        assert_eq!(allocate(&big.iter().collect::<Vec<_>>(), &[1, 1, 1], &[1.0; 3], 12, 0.0, 1.0), vec![8, 4, 8]);
    }

    #[test]
    fn running_jobs_grow_onto_idle_gpus_and_give_them_back_to_a_waiting_job() {
        let scaling = job(vec![2, 4, 8], 0.05);
        let flat = job(vec![2, 4, 8], 0.9);
        let restart = RestartCost { fixed_s: 60.0, per_gpu_s: 5.0 };
        let run = |shape, level, node, remaining| RunningElastic { shape, level, requested: 1, node, remaining_at_request_s: remaining };
        // Nothing waits, 4 GPUs free on node 0, a price of 1000 J/s: the job that scales grows
        // to 8 (6.5 MJ more for 4.1 h less), the one that does not stays; a job about to end
        // is not worth the restart.
        let jobs = [run(&scaling, 1, 0, 36_000.0), run(&flat, 1, 0, 36_000.0), run(&scaling, 1, 0, 100.0)];
        assert_eq!(reallocate(&jobs, &[4], None, 1000.0, 1.0, restart), vec![Resize { job: 0, gpus: 8 }]);
        // No price, no growth (the extra GPUs cost energy); no room on its node, no growth.
        assert!(reallocate(&jobs, &[4], None, 0.0, 1.0, restart).is_empty());
        assert!(reallocate(&jobs, &[0, 4], None, 1000.0, 1.0, restart).is_empty());
        // A 6-GPU job waits and no node has room: the grown job on node 1 goes back to its
        // request (node 0's would free too little there).
        let grown = [run(&scaling, 2, 1, 36_000.0), run(&scaling, 2, 0, 36_000.0)];
        assert_eq!(reallocate(&grown, &[0, 2], Some(6), 400.0, 1.0, restart), vec![Resize { job: 0, gpus: 4 }]);
        assert!(reallocate(&grown, &[0, 1], Some(6), 400.0, 1.0, restart).is_empty());
        // With room somewhere already, nothing is taken back.
        assert!(reallocate(&grown, &[4, 0], Some(4), 400.0, 1.0, restart).is_empty());
        // Jobs at their request go one step narrower (half, at less energy: their scaling is
        // sublinear), least JCT lost per GPU first: the one about to end, then the one that does
        // not scale.
        assert_eq!(reallocate(&jobs, &[0], Some(4), 400.0, 1.0, restart), vec![Resize { job: 2, gpus: 2 }, Resize { job: 1, gpus: 2 }]);
        // A job grown above its request gives back before anyone goes below theirs.
        let mixed = [run(&flat, 1, 0, 36_000.0), run(&scaling, 2, 0, 36_000.0)];
        assert_eq!(reallocate(&mixed, &[0], Some(4), 400.0, 1.0, restart), vec![Resize { job: 1, gpus: 4 }]);
        assert_eq!(restart.pause_s(4, 8), 100.0);
    }
}
