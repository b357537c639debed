//! `oracle`: a lower bound on the energy of every policy the simulator runs, under the same
//! ground truth, so that a policy's result reads as a fraction of what is physically possible.
//!
//! It is a relaxation, not a schedule: every job is bounded on its own, ignoring queueing and the
//! cluster's size, by the least energy the truth lets *any* policy spend on it, over every
//! choice a policy may make:
//!
//! - every power limit a planner may set (its clock ladder's limits, the GPU's default limit,
//!   the limits of the Zeus sweeps), read in the truth as the engine reads it;
//! - every CPU count per node any policy may give it (Synergy's and `energy`'s range, half to
//!   three times the request within the node, and the elastic policies' proportional count);
//! - every GPU count the elastic policies may give a single-node job
//!   ([`model::elastic::choices`]), at Gavel's measured scaling of its type (superlinear in
//!   places);
//! - sharing a GPU (a single-GPU job) with any job type of the workload Gavel ran it with.
//!
//! and charges every power term the engine charges, or a provable lower bound of it:
//!
//! - a busy GPU's power ([`Truth::power_at_speed_w`]) plus `node_base_w / gpus_per_node` of host
//!   per busy GPU (a powered node has at most `gpus_per_node` busy GPUs, so its base power is at
//!   least that; idle GPUs, suspended nodes and resumes cost more and are left out);
//! - the cores the job keeps busy ([`Truth::busy_cores`]) at `cpu_w_per_busy_core`;
//! - a shared GPU's power plus its host share is split between its two tenants: each pays its own
//!   active power above idle plus the idle GPU and host share in proportion to its throughput in
//!   the pair, all scaled down by the power limit's cap; the partner's active power is taken at
//!   its largest possible value, which makes that scaling smallest.
//!
//! Each configuration `c` then costs `cost(c)` W (attributable to the job) for `rate(c)` work
//! seconds per second. Whatever a policy does with a job over time (re-clocking, a partner
//! coming and going), the energy it spends on it is at least `min_c cost/rate` per work second,
//! and the attributions of all jobs add up to no more than the cluster's energy. The oracle does
//! every job's work (`duration_s`) at that least energy per work second, and sums.
//!
//! **Killed jobs.** A policy whose job is killed at its time limit does less work. So the bound
//! holds for a policy's energy *plus* the least energy of the work its killed jobs left undone
//! (their remaining work at the same per-job least energy per work second,
//! [`Metrics::unfinished_work_floor_kwh`](super::metrics::Metrics), which the report adds). A
//! bound on energy alone would have to let every job be run at its least power until its time
//! limit and be killed, which on Philly lets 38 % of the jobs be "killed" and takes the bound from
//! 0.69 to 0.61 of `slurm-powersave`'s energy, a bound on nothing any policy tries. A policy that
//! never starts a job is not bounded at all; the tool counts jobs.
//!
//! Its carbon, JCT and waits are those of each job started at its submit time in its bounding
//! configuration: a reference, not a bound (GreenFlow's deferral can emit less).

use std::collections::HashMap;

use model::carbon::CarbonSignal;
use model::elastic::choices;
use model::types::{NodeAllocation, NodeIdx};

use super::engine::allocation_cpu_speed;
use super::jobs::SimJob;
use super::metrics::{JobRecord, Metrics, RunResult};
use super::spec::ClusterSpec;
use super::truth::{JobTruth, Truth};

const J_PER_KWH: f64 = 3.6e6;
const BIN_S: f64 = 3600.0;

/// One way to run a job: the power attributable to it (W) by category, and its progress in work
/// seconds (at its request, default clock, proportional CPUs) per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    pub gpu_w: f64,
    pub host_w: f64,
    pub cpu_w: f64,
    pub rate: f64,
    /// GPUs it runs on (all nodes), and whether it shares them.
    pub gpus: u32,
    pub shared: bool,
    /// CPUs per node other than the request's (its proportional share at `gpus`).
    pub cpus_changed: bool,
}

impl Config {
    pub fn power_w(&self) -> f64 {
        self.gpu_w + self.host_w + self.cpu_w
    }

    pub fn j_per_work_s(&self) -> f64 {
        self.power_w() / self.rate.max(1e-12)
    }
}

/// The least energy any policy can spend on one job, and the configurations behind it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobBound {
    /// The configuration with the least energy per work second.
    pub best: Config,
    /// `duration_s x best.j_per_work_s()`.
    pub energy_j: f64,
}

/// What the bound allows, built once per workload: the power limits a planner may set, and per
/// job type the pair throughputs of its partners in the workload.
pub struct Bounder<'a> {
    truth: &'a Truth,
    spec: &'a ClusterSpec,
    limits_w: Vec<f64>,
    /// Per job type: `(own, partner)` normalised throughputs with every type of the workload it
    /// can share a GPU with (distinct pairs).
    partners: HashMap<String, Vec<(f64, f64)>>,
    /// Per limit: the highest average power of any sweep of the workload at that limit (as
    /// the truth reads it), for the partner's active power.
    partner_w: Vec<f64>,
}

/// One node of `gpus` GPUs and `cpus` CPUs (what the truth reads of an allocation).
fn node(n: u32, gpus: u32, cpus: u32) -> NodeAllocation {
    NodeAllocation { node: NodeIdx(n), gpu_indices: (0..gpus.min(255) as u8).collect(), cpus, mem_mb: 0 }
}

impl<'a> Bounder<'a> {
    /// `ladder_limits_w`: the power limits of the planner's clock ladder (any limit a policy may
    /// set); the GPU's default limit and every sweep's limits are added.
    pub fn new(truth: &'a Truth, spec: &'a ClusterSpec, jobs: &[SimJob], ladder_limits_w: &[f64]) -> Bounder<'a> {
        let mut limits_w: Vec<f64> = ladder_limits_w.to_vec();
        limits_w.push(spec.gpu.max_power_w);
        limits_w.extend(truth.all_sweeps().iter().flat_map(|s| s.points.iter().map(|p| p.power_limit_w)));
        limits_w.retain(|l| l.is_finite() && *l > 0.0);
        limits_w.sort_by(f64::total_cmp);
        limits_w.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
        // One job of each type of the workload stands for the type (pairs depend on types only).
        let mut by_type: Vec<&JobTruth> = Vec::new();
        for j in jobs {
            if !by_type.iter().any(|t| t.job_type == j.truth.job_type) {
                by_type.push(&j.truth);
            }
        }
        let mut partners = HashMap::new();
        for a in &by_type {
            let mut pairs: Vec<(f64, f64)> = by_type.iter().filter_map(|b| truth.pair(a, b)).collect();
            pairs.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1)));
            pairs.dedup();
            partners.insert(a.job_type.clone(), pairs);
        }
        let mut sweeps: Vec<usize> = jobs.iter().map(|j| j.truth.sweep).collect();
        sweeps.sort_unstable();
        sweeps.dedup();
        let partner_w = limits_w
            .iter()
            .map(|l| {
                sweeps
                    .iter()
                    .filter_map(|s| {
                        let mut jt = by_type.first().map(|t| (*t).clone())?;
                        jt.sweep = *s;
                        Some(truth.alone(&jt, *l).1)
                    })
                    .fold(0.0_f64, f64::max)
            })
            .collect();
        Bounder { truth, spec, limits_w, partners, partner_w }
    }

    /// Every configuration the bound allows a job (see the module documentation).
    pub fn configs(&self, job: &SimJob) -> Vec<Config> {
        let (truth, spec) = (self.truth, self.spec);
        let per_node = spec.cluster.gpus_per_node.max(1);
        let node_cpus = spec.cluster.cpus_per_node.max(1);
        let host_w = spec.power.node_base_w / per_node as f64;
        let core_w = spec.power.cpu_w_per_busy_core;
        let idle = truth.idle_gpu_w;
        let total = job.total_gpus();
        let jt = &job.truth;
        let counts = if job.nodes <= 1 { choices(total, per_node) } else { vec![total] };
        let mut out = Vec::new();
        for g in counts {
            let nodes = if g == total { job.nodes.max(1) } else { 1 };
            let gpn = (g / nodes).max(1);
            let c = job.cpus_per_node.max(1);
            let c_g = if g == total { c } else { (c * g).div_ceil(job.gpus_per_node.max(1)).clamp(1, node_cpus) };
            let lo = (c / 2).max(1).min(c_g);
            let hi = (c * 3).min(node_cpus).max(c_g);
            let scale = if g == total { 1.0 } else { truth.speedup(jt, g) / truth.speedup(jt, total).max(1e-12) };
            // Cores per unit of speed on one node (`None`: every allocated core is busy).
            let per_speed = truth.busy_cores(jt, gpn, 1 << 30, 1.0);
            let per_speed = (per_speed < (1u32 << 29) as f64).then_some(per_speed);
            let busy = |cpus: u32, speed: f64| nodes as f64 * per_speed.map_or(cpus as f64, |k| (k * speed.max(0.0)).min(cpus as f64));
            let prop = (spec.cluster.job_cpus_per_gpu * gpn).max(1);
            // The fewest CPUs of each distinct CPU factor: more CPUs at the same speed only keep
            // more cores busy.
            let mut cpu_counts: Vec<(u32, f64)> = Vec::new();
            for cpus in lo..=hi {
                let f = truth.cpu_factor(jt, gpn, cpus, prop);
                if !cpu_counts.iter().any(|(_, g)| *g == f) {
                    cpu_counts.push((cpus, f));
                }
            }
            let allocs = |cpus: u32| -> Vec<NodeAllocation> { (0..nodes).map(|n| node(n, gpn, cpus)).collect() };
            for &(cpus, _) in &cpu_counts {
                let a = allocs(cpus);
                for (k, &limit) in self.limits_w.iter().enumerate() {
                    let (tr, p) = truth.alone(jt, limit);
                    let tr = tr.max(1e-12);
                    let s = allocation_cpu_speed(truth, jt, &a, cpus, spec.cluster.job_cpus_per_gpu, limit);
                    let gpu_w = truth.power_at_speed_w(p, s, limit);
                    out.push(Config { gpu_w: g as f64 * gpu_w, host_w: g as f64 * host_w, cpu_w: busy(cpus, s / tr) * core_w, rate: s * scale / tr, gpus: g, shared: false, cpus_changed: cpus != c_g });
                    if g != 1 || nodes != 1 {
                        continue;
                    }
                    // Sharing its GPU: its own active power, its throughput's share of the idle
                    // GPU and the host, all scaled by the limit's cap at its least.
                    let fixed = idle + host_w;
                    let own = s * (p - idle).max(0.0);
                    let partner_active = (self.partner_w[k].max(limit) - idle).max(0.0);
                    for &(na, nb) in self.partners.get(&jt.job_type).map_or(&[][..], |v| v.as_slice()) {
                        let a_a = na * own;
                        let cap = ((limit.max(idle) + host_w) / (fixed + a_a + nb * partner_active)).min(1.0);
                        let x = na / (na + nb);
                        out.push(Config {
                            gpu_w: cap * (a_a + idle * x),
                            host_w: cap * host_w * x,
                            cpu_w: busy(cpus, na * s / tr) * core_w,
                            rate: na * s * scale / tr,
                            gpus: 1,
                            shared: true,
                            cpus_changed: cpus != c_g,
                        });
                    }
                }
            }
        }
        out
    }

    /// The least energy any policy can spend on `job` (see the module documentation).
    pub fn bound(&self, job: &SimJob) -> JobBound {
        let configs = self.configs(job);
        let fallback = Config { gpu_w: 0.0, host_w: 0.0, cpu_w: 0.0, rate: 1.0, gpus: job.total_gpus(), shared: false, cpus_changed: false };
        let best = configs.iter().copied().min_by(|a, b| a.j_per_work_s().total_cmp(&b.j_per_work_s())).unwrap_or(fallback);
        JobBound { best, energy_j: job.duration_s * best.j_per_work_s() }
    }

    /// The least energy (kWh) any policy could have spent on the work its killed jobs left
    /// undone (`killed`: job id, remaining work seconds, as [`RunResult::killed_remaining_work_s`]).
    pub fn unfinished_floor_kwh(&self, jobs: &[SimJob], killed: &[(u32, f64)]) -> f64 {
        killed
            .iter()
            .filter_map(|(id, left_s)| jobs.iter().find(|j| j.id.0 == *id).map(|j| self.bound(j).best.j_per_work_s() * left_s.max(0.0)))
            .sum::<f64>()
            / J_PER_KWH
    }
}

fn percentile_sorted(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

/// The bound for `jobs`; `ladder_limits_w` as in [`Bounder::new`].
pub fn run_oracle(jobs: &[SimJob], truth: &Truth, spec: &ClusterSpec, carbon: Option<&CarbonSignal>, ladder_limits_w: &[f64]) -> RunResult {
    let wall = std::time::Instant::now();
    let bounder = Bounder::new(truth, spec, jobs, ladder_limits_w);
    let (mut gpu_j, mut base_j, mut cpu_j, mut carbon_g, mut busy_gpu_s) = (0.0, 0.0, 0.0, 0.0, 0.0);
    let mut bins_j: Vec<f64> = Vec::new();
    let mut jct = Vec::with_capacity(jobs.len());
    let mut slowdown = Vec::with_capacity(jobs.len());
    let mut records = Vec::with_capacity(jobs.len());
    let mut makespan: f64 = 0.0;
    let (mut shared, mut grown, mut shrunk, mut cpu_resized) = (0u64, 0u64, 0u64, 0u64);
    for job in jobs {
        let c = bounder.bound(job).best;
        let runtime = job.duration_s / c.rate.max(1e-12);
        shared += c.shared as u64;
        grown += (c.gpus > job.total_gpus()) as u64;
        shrunk += (c.gpus < job.total_gpus()) as u64;
        cpu_resized += c.cpus_changed as u64;
        let power_w = c.power_w();
        gpu_j += c.gpu_w * runtime;
        base_j += c.host_w * runtime;
        cpu_j += c.cpu_w * runtime;
        busy_gpu_s += c.gpus as f64 * runtime * if c.shared { 0.5 } else { 1.0 };
        let (start, end) = (job.submit_s, job.submit_s + runtime);
        // Spread the job's energy over the hours it runs, for carbon and the power plot.
        let mut t = start;
        while t < end {
            let bin = (t / BIN_S).floor().max(0.0) as usize;
            let until = ((bin + 1) as f64 * BIN_S).min(end);
            let e = power_w * (until - t);
            if bins_j.len() <= bin {
                bins_j.resize(bin + 1, 0.0);
            }
            bins_j[bin] += e;
            carbon_g += e / J_PER_KWH * carbon.map_or(0.0, |c| c.intensity_at(t));
            t = until;
        }
        makespan = makespan.max(end);
        jct.push(runtime);
        slowdown.push(runtime / job.duration_s.max(1e-9));
        records.push(JobRecord { job: job.id.0, gpus: c.gpus, submit_s: start, start_s: start, end_s: end, duration_alone_s: job.duration_s, time_limit_s: job.time_limit_s });
    }
    jct.sort_by(f64::total_cmp);
    slowdown.sort_by(f64::total_cmp);
    let n = jct.len().max(1) as f64;
    let total_gpus = (spec.cluster.nodes * spec.cluster.gpus_per_node) as f64;
    let metrics = Metrics {
        jobs: jobs.len() as u64,
        energy_kwh: (gpu_j + base_j + cpu_j) / J_PER_KWH,
        gpu_energy_kwh: gpu_j / J_PER_KWH,
        idle_energy_kwh: 0.0,
        base_energy_kwh: base_j / J_PER_KWH,
        cpu_energy_kwh: cpu_j / J_PER_KWH,
        carbon_kg: carbon_g / 1000.0,
        mean_jct_s: jct.iter().sum::<f64>() / n,
        p50_jct_s: percentile_sorted(&jct, 0.5),
        p99_jct_s: percentile_sorted(&jct, 0.99),
        mean_wait_s: 0.0,
        makespan_s: makespan,
        gpu_utilization: if makespan > 0.0 && total_gpus > 0.0 { busy_gpu_s / (total_gpus * makespan) } else { 0.0 },
        mean_slowdown: slowdown.iter().sum::<f64>() / n,
        p50_slowdown: percentile_sorted(&slowdown, 0.5),
        p90_slowdown: percentile_sorted(&slowdown, 0.9),
        p99_slowdown: percentile_sorted(&slowdown, 0.99),
        shared_starts: shared,
        sharing_requeues: 0,
        colocation_failures: 0,
        reclocks: 0,
        grown_starts: grown,
        shrunk_starts: shrunk,
        cpu_resized_starts: cpu_resized,
        reallocations: 0,
        realloc_shrinks: 0,
        realloc_pause_h: 0.0,
        mean_clock_mhz: 0.0,
        node_resumes: 0,
        killed_at_time_limit: 0,
        killed_work_gpu_h: 0.0,
        unfinished_work_floor_kwh: 0.0,
        planner_cycles: 0,
        mean_cycle_us: 0.0,
        wall_s: wall.elapsed().as_secs_f64(),
        power_cap_in_force_s: None,
        power_cap_over_s: None,
        power_cap_max_excess_w: None,
        power_cap_longest_over_s: None,
        peak_gpu_power_w: None,
        power_cap_ceiling_changes: None,
        power_cap_limit_extensions: None,
        power_cap_killed_after_ceiling: None,
        power_cap_killed_for_cap: None,
    };
    let power_kw = bins_j.iter().enumerate().map(|(i, j)| ((i as f64 + 0.5) * BIN_S / 86_400.0, j / BIN_S / 1000.0)).collect();
    RunResult { jobs: records, name: "oracle".to_string(), metrics, power_kw, jct_sorted_s: jct, killed_remaining_work_s: Vec::new(), power_cap_timeline: Vec::new() }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use model::types::{Hints, JobId};

    use super::*;
    use crate::sim::rng::Rng;
    use crate::sim::spec::Colocation;

    fn truth() -> Truth {
        let dir = std::env::var_os("SLURM_ENERGY_DATA").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")));
        Truth::load(&dir, "v100", 41.0, Colocation::Physical).expect("truth loads")
    }

    fn job(truth: &Truth, id: u32, job_type: &str, gpus: u32) -> SimJob {
        SimJob {
            id: JobId(id),
            line: id as usize,
            submit_s: 0.0,
            duration_s: 3600.0,
            nodes: 1,
            gpus_per_node: gpus,
            cpus_per_node: 3 * gpus,
            mem_mb_per_node: 0,
            time_limit_s: 7200.0,
            user: 0,
            priority: 0,
            truth: truth.assign(Some(job_type), &mut Rng::new(id as u64)),
            user_hints: Hints::default(),
            cpu_flexible: true,
        }
    }

    #[test]
    fn the_bound_takes_every_choice_a_policy_may_make() {
        let truth = truth();
        let spec = ClusterSpec::default();
        let lm = job(&truth, 1, "LM (batch size 10)", 4);
        let rec = job(&truth, 2, "Recommendation (batch size 512)", 1);
        let jobs = vec![lm.clone(), rec.clone()];
        let b = Bounder::new(&truth, &spec, &jobs, &[]);
        // Gavel's LM (batch size 10) runs faster on 2 GPUs than on 4: an elastic GPU count
        // costs less per unit of work than any configuration on its 4.
        let lm_bound = b.bound(&lm);
        assert_ne!(lm_bound.best.gpus, 4, "{lm_bound:?}");
        let on_request = b.configs(&lm).into_iter().filter(|c| c.gpus == 4).map(|c| c.j_per_work_s()).fold(f64::INFINITY, f64::min);
        assert!(lm_bound.best.j_per_work_s() < on_request);
        // Its own optimum counts its busy cores, and the host share of every GPU it runs on.
        assert!(lm_bound.best.cpu_w > 0.0 && (lm_bound.best.host_w - lm_bound.best.gpus as f64 * spec.power.node_base_w / 8.0).abs() < 1e-9);
        // Every limit of the planner's ladder and of the sweeps is tried, every CPU count of
        // the policies' range (here 1..=9 for a 1-GPU job with 3 CPUs).
        let configs = b.configs(&rec);
        assert!(configs.iter().filter(|c| !c.shared).count() >= 7, "{}", configs.len());
        // A 1-GPU job may share its GPU with any type of the workload Gavel co-ran it with.
        assert!(configs.iter().any(|c| c.shared));
        assert!(b.bound(&rec).energy_j <= configs.iter().map(|c| c.j_per_work_s()).fold(f64::INFINITY, f64::min) * rec.duration_s + 1e-6);
    }
}
