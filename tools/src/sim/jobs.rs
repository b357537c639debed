//! Turning a trace into simulated jobs: what each job asks Slurm for (nodes, GPUs per node,
//! CPUs, memory, time limit, hints) and what it really does (its measured behaviour).
//!
//! - **Shape**: a job of `g` GPUs on nodes of `G` GPUs asks for `ceil(g / G)` nodes with
//!   `ceil(g / nodes)` GPUs each (`sbatch -N n --gres=gpu:k`); CPUs and memory default to the
//!   spec's per-GPU request.
//! - **Time limit**: users over-estimate and pick round values (Tsafrir, Etsion and Feitelson,
//!   "Modeling User Runtime Estimates", JSSPP 2005): limit = duration x a factor drawn
//!   log-uniformly from the spec's range, rounded up to the next popular value. The planner sees
//!   only this limit, never the duration.
//! - **Hints**: drawn from the spec's mix, seeded, independently of the duration (a user does not
//!   know it either).
//! - **Truth**: a Gavel job type (from the trace, or drawn) and a Zeus sweep of the matching
//!   network (drawn among that network's batch sizes and optimizers).

use std::collections::BTreeMap;

use model::types::{EnergyPolicy, Hints, JobId};
use model::workloads::gavel_family;

use super::rng::Rng;
use super::spec::ClusterSpec;
use super::truth::{JobTruth, Truth};
use crate::trace::Trace;

#[derive(Debug, Clone, PartialEq)]
pub struct SimJob {
    pub id: JobId,
    /// Line of the job in the trace file.
    pub line: usize,
    pub submit_s: f64,
    /// True runtime alone at the default clock with the proportional CPU share.
    pub duration_s: f64,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub cpus_per_node: u32,
    pub mem_mb_per_node: u64,
    pub time_limit_s: f64,
    pub user: u32,
    pub priority: u32,
    pub truth: JobTruth,
    /// What this job's user would pass as `--energy-*` options.
    pub user_hints: Hints,
    /// The CPU count may be chosen within bounds (Synergy) when a policy allows it.
    pub cpu_flexible: bool,
}

impl SimJob {
    pub fn total_gpus(&self) -> u32 {
        self.nodes * self.gpus_per_node
    }
}

/// Jobs that cannot run on the cluster at all (more nodes than it has) are left out and
/// counted, as Slurm would reject them at submission.
pub struct PreparedJobs {
    pub jobs: Vec<SimJob>,
    /// The seed the jobs were drawn with; the runs draw their own noise from it too.
    pub seed: u64,
    pub rejected: usize,
}

pub fn time_limit_s(duration_s: f64, factor: f64, round_up_to_s: &[f64]) -> f64 {
    let wanted = duration_s * factor;
    round_up_to_s.iter().copied().find(|v| *v >= wanted).unwrap_or_else(|| {
        // Beyond the largest popular value: whole days.
        (wanted / 86_400.0).ceil() * 86_400.0
    })
}

pub fn prepare(trace: &Trace, spec: &ClusterSpec, truth: &Truth, seed: u64) -> PreparedJobs {
    let per_node = spec.cluster.gpus_per_node;
    let mut users: BTreeMap<String, u32> = BTreeMap::new();
    for j in &trace.jobs {
        let n = users.len() as u32;
        users.entry(j.user.clone().unwrap_or_default()).or_insert(n);
    }
    let mut truth_rng = Rng::derive(seed, 1);
    let mut limit_rng = Rng::derive(seed, 2);
    let mut hint_rng = Rng::derive(seed, 3);
    let mut cpu_rng = Rng::derive(seed, 4);
    let mix = &spec.hints;
    let defaults = &spec.planner.hints;
    let (lo, hi) = (spec.time_limits.overestimate_min.ln(), spec.time_limits.overestimate_max.ln());
    let mut jobs = Vec::with_capacity(trace.jobs.len());
    let mut rejected = 0;
    for (i, t) in trace.jobs.iter().enumerate() {
        let nodes = t.num_gpus.div_ceil(per_node);
        if nodes > spec.cluster.nodes {
            rejected += 1;
            continue;
        }
        let gpus_per_node = t.num_gpus.div_ceil(nodes);
        let cpus_per_node = t.num_cpus.map_or(spec.cluster.job_cpus_per_gpu * gpus_per_node, |c| c.div_ceil(nodes).clamp(1, spec.cluster.cpus_per_node));
        let mem_gb = t.mem_gb.map_or(spec.cluster.job_mem_gb_per_gpu * gpus_per_node as f64, |m| (m / nodes as f64).min(spec.cluster.mem_gb_per_node));
        let mut truth_of = truth.assign(t.job_type.as_deref(), &mut truth_rng);
        truth_of.cpu_gain = cpu_rng.lognormal(spec.truth.cpu_sensitivity_noise);
        let factor = (lo + (hi - lo) * limit_rng.unit()).exp();
        let limit = time_limit_s(t.duration_s, factor, &spec.time_limits.round_up_to_s);
        // Hints: one draw per decision, always made, so that changing one fraction does not
        // reshuffle the others.
        let (u_policy, u_share, u_defer, u_tag, u_cpu) = (hint_rng.unit(), hint_rng.unit(), hint_rng.unit(), hint_rng.unit(), hint_rng.unit());
        let policy = if u_policy < mix.performance {
            EnergyPolicy::Performance
        } else if u_policy < mix.performance + mix.efficiency {
            EnergyPolicy::Efficiency
        } else {
            EnergyPolicy::Balanced
        };
        let flexible = policy != EnergyPolicy::Performance;
        let share_allowed = flexible && u_share < mix.share_allowed;
        let max_slowdown = defaults.slowdown_for(policy);
        let user_hints = Hints {
            policy,
            max_slowdown,
            share_allowed,
            defer_max_s: if flexible && u_defer < mix.deferrable { mix.defer_s } else { 0.0 },
            tag: if u_tag < mix.tagged { Some(gavel_family(&truth_of.job_type).to_string()) } else { None },
        };
        let user = users.get(t.user.as_deref().unwrap_or_default()).copied().unwrap_or(0);
        jobs.push(SimJob {
            id: JobId(i as u32 + 1),
            line: t.line,
            submit_s: t.submit_time_s,
            duration_s: t.duration_s,
            nodes,
            gpus_per_node,
            cpus_per_node,
            mem_mb_per_node: (mem_gb * 1024.0).round() as u64,
            time_limit_s: limit,
            user,
            priority: t.priority.unwrap_or(0),
            truth: truth_of,
            user_hints,
            cpu_flexible: u_cpu < mix.cpu_flexible,
        });
    }
    // Slurm's priority order: higher priority first, then submit order (FIFO).
    jobs.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s).then(a.id.cmp(&b.id)));
    PreparedJobs { jobs, seed, rejected }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_round_up_to_popular_values() {
        let v = [900.0, 3600.0, 86_400.0];
        assert_eq!(time_limit_s(100.0, 2.0, &v), 900.0);
        assert_eq!(time_limit_s(1000.0, 2.0, &v), 3600.0);
        assert_eq!(time_limit_s(100_000.0, 1.0, &v), 172_800.0);
    }
}
