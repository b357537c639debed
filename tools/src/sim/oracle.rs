//! `oracle`: a lower bound under the same ground truth, so that a policy's result reads as a
//! fraction of what is physically possible. What it assumes:
//!
//! - every job starts at its submit time (no waiting, as if the cluster were infinite);
//! - at its energy-optimal power limit in its true Zeus sweep, counting its share of the host
//!   (the limit that minimises (GPU power + host share) x time);
//! - alone on its GPUs, with its proportional CPUs;
//! - hosts on only while busy and perfectly packed: a job pays `node_base_w` in proportion to
//!   the node's GPUs it uses, plus its busy cores; no idle GPU, no suspended node, no resume.
//!
//! It is not a schedule (it ignores the cluster's size), only the bound. Sharing a GPU is left
//! out: on Gavel's physical measurements it rarely saves work per joule, but a policy that
//! shares could in principle go below the bound on the pairs where it does.

use super::jobs::SimJob;
use super::metrics::{JobRecord, Metrics, RunResult};
use super::spec::ClusterSpec;
use super::truth::Truth;
use model::carbon::CarbonSignal;

const J_PER_KWH: f64 = 3.6e6;
const BIN_S: f64 = 3600.0;

/// (time ratio to the default clock, GPU power in W) of a job at its energy-optimal limit, with
/// `host_w_per_gpu` of host power per GPU running alongside.
pub fn optimal_point(truth: &Truth, job: &SimJob, host_w_per_gpu: f64) -> (f64, f64) {
    let Some(sweep) = truth.sweep_of(&job.truth) else { return (1.0, truth.idle_gpu_w) };
    let Some(full) = sweep.points.last().filter(|p| p.time_per_epoch_s > 0.0) else { return (1.0, truth.idle_gpu_w) };
    sweep
        .points
        .iter()
        .map(|p| (p.time_per_epoch_s / full.time_per_epoch_s, p.average_power_w))
        .min_by(|a, b| (a.0 * (a.1 + host_w_per_gpu)).total_cmp(&(b.0 * (b.1 + host_w_per_gpu))))
        .unwrap_or((1.0, full.average_power_w))
}

fn percentile_sorted(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

pub fn run_oracle(jobs: &[SimJob], truth: &Truth, spec: &ClusterSpec, carbon: Option<&CarbonSignal>) -> RunResult {
    let wall = std::time::Instant::now();
    let p = &spec.power;
    let host_w_per_gpu = p.node_base_w / spec.cluster.gpus_per_node.max(1) as f64;
    let (mut gpu_j, mut base_j, mut cpu_j, mut carbon_g, mut busy_gpu_s) = (0.0, 0.0, 0.0, 0.0, 0.0);
    let mut bins_j: Vec<f64> = Vec::new();
    let mut jct = Vec::with_capacity(jobs.len());
    let mut slowdown = Vec::with_capacity(jobs.len());
    let mut records = Vec::with_capacity(jobs.len());
    let mut makespan: f64 = 0.0;
    for job in jobs {
        let gpus = job.total_gpus() as f64;
        let (ratio, gpu_w) = optimal_point(truth, job, host_w_per_gpu);
        let runtime = job.duration_s * ratio;
        // Proportional CPUs, of which the cores its speed keeps busy are charged (as in the engine).
        let busy_cores = job.nodes as f64 * truth.busy_cores(&job.truth, job.gpus_per_node, job.cpus_per_node, 1.0 / ratio.max(1e-9));
        let cpu_w = busy_cores * p.cpu_w_per_busy_core;
        let power_w = gpus * (gpu_w + host_w_per_gpu) + cpu_w;
        gpu_j += gpus * gpu_w * runtime;
        base_j += gpus * host_w_per_gpu * runtime;
        cpu_j += cpu_w * runtime;
        busy_gpu_s += gpus * runtime;
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
        slowdown.push(ratio);
        records.push(JobRecord { job: job.id.0, gpus: job.total_gpus(), submit_s: start, start_s: start, end_s: end, duration_alone_s: job.duration_s, time_limit_s: job.time_limit_s });
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
        shared_starts: 0,
        sharing_requeues: 0,
        colocation_failures: 0,
        reclocks: 0,
        grown_starts: 0,
        shrunk_starts: 0,
        mean_clock_mhz: 0.0,
        node_resumes: 0,
        killed_at_time_limit: 0,
        killed_work_gpu_h: 0.0,
        planner_cycles: 0,
        mean_cycle_us: 0.0,
        wall_s: wall.elapsed().as_secs_f64(),
    };
    let power_kw = bins_j.iter().enumerate().map(|(i, j)| ((i as f64 + 0.5) * BIN_S / 86_400.0, j / BIN_S / 1000.0)).collect();
    RunResult { jobs: records, name: "oracle".to_string(), metrics, power_kw, jct_sorted_s: jct }
}
