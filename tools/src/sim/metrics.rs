//! What a run measured: energy by category, carbon, job completion times, waits, utilisation,
//! and the cluster's power over time.

use serde::Serialize;

use super::jobs::SimJob;

const J_PER_KWH: f64 = 3.6e6;
const BIN_S: f64 = 3600.0;

/// Running sums kept by the engine.
pub struct Accumulators {
    /// Power now (W) of GPUs running jobs, of idle GPUs on powered nodes, and of node bases.
    pub active_w: f64,
    pub idle_w: f64,
    pub base_w: f64,
    /// Power of the CPU cores allocated to running jobs (W).
    pub cpu_w: f64,
    pub busy_gpus: f64,
    pub gpu_busy: Vec<bool>,
    active_j: f64,
    idle_j: f64,
    base_j: f64,
    cpu_j: f64,
    carbon_g: f64,
    busy_gpu_s: f64,
    power_bins_j: Vec<f64>,
    jct_s: Vec<f64>,
    wait_s: Vec<f64>,
    slowdown: Vec<f64>,
    per_job: Vec<JobRecord>,
    pub finished: u64,
    pub shared_starts: u64,
    pub requeues: u64,
    pub colocation_failures: u64,
    pub reclocks: u64,
    pub grown_starts: u64,
    pub shrunk_starts: u64,
    pub cpu_resized_starts: u64,
    pub reallocations: u64,
    pub realloc_shrinks: u64,
    pub realloc_pause_s: f64,
    pub cycles: u64,
    pub cycle_time_s: f64,
    clock_sum_mhz: f64,
    starts: u64,
    wakes: u64,
    killed: u64,
    killed_work_gpu_s: f64,
    killed_remaining: Vec<(u32, f64)>,
    slowdown_sum: f64,
    last_end_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Metrics {
    pub jobs: u64,
    pub energy_kwh: f64,
    pub gpu_energy_kwh: f64,
    pub idle_energy_kwh: f64,
    /// Powered-on nodes at their idle host power.
    pub base_energy_kwh: f64,
    /// CPU cores running jobs keep busy (`Truth::busy_cores`), above idle.
    pub cpu_energy_kwh: f64,
    pub carbon_kg: f64,
    pub mean_jct_s: f64,
    pub p50_jct_s: f64,
    pub p99_jct_s: f64,
    pub mean_wait_s: f64,
    pub makespan_s: f64,
    pub gpu_utilization: f64,
    /// Mean of (runtime / runtime alone at default clock).
    pub mean_slowdown: f64,
    /// Distribution of the same per-job slowdown: median, 90th and 99th percentile.
    pub p50_slowdown: f64,
    pub p90_slowdown: f64,
    pub p99_slowdown: f64,
    pub shared_starts: u64,
    /// Shared runs separated by the early-stage check (the newcomer requeued).
    pub sharing_requeues: u64,
    /// Starts next to a partner Gavel could not co-run: the job failed and was resubmitted
    /// without sharing.
    pub colocation_failures: u64,
    /// Running jobs raised back to the default clock when the queue built up.
    pub reclocks: u64,
    /// Starts on more (resp. fewer) GPUs than the job asked for (elastic policies).
    pub grown_starts: u64,
    pub shrunk_starts: u64,
    /// Starts on other CPUs per node than the request's (its GPU-proportional share on an
    /// elastic count): Synergy's CPU choice at work.
    pub cpu_resized_starts: u64,
    /// Running jobs re-allocated to another GPU count by checkpoint and restart (PowerFlow,
    /// GreenFlow), of them those that gave back GPUs they were grown by, and the sum of their
    /// checkpoint-restart pauses (h; the job's GPUs are held and charged meanwhile).
    pub reallocations: u64,
    pub realloc_shrinks: u64,
    pub realloc_pause_h: f64,
    pub mean_clock_mhz: f64,
    pub node_resumes: u64,
    /// Jobs killed at their (possibly extended) time limit, as Slurm does (state TIMEOUT). They
    /// count in `jobs` and in the JCT figures (ending at the kill).
    pub killed_at_time_limit: u64,
    /// Work those jobs had left, in GPU hours at full speed: lost to the users.
    pub killed_work_gpu_h: f64,
    /// The least energy any policy could have spent on that unfinished work (each killed job's
    /// remaining work at the `oracle`'s least energy per work second for it, kWh): what the
    /// policy's energy is compared with the oracle's bound with, since the bound does all the
    /// work (`oracle.rs`). 0 for the oracle.
    pub unfinished_work_floor_kwh: f64,
    pub planner_cycles: u64,
    pub mean_cycle_us: f64,
    pub wall_s: f64,
    /// Under a power cap only (absent from uncapped runs): time a cap was in force (s), time the
    /// truth's GPU power was over it (s), its largest excess (W), the longest unbroken stretch
    /// over it (s: the time taken to comply), the truth's peak GPU power (W), the ceilings
    /// changed and the time limits extended (`super::power_cap::CapStats`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_cap_in_force_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_cap_over_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_cap_max_excess_w: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_cap_longest_over_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_gpu_power_w: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_cap_ceiling_changes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_cap_limit_extensions: Option<u64>,
    /// Jobs killed at their time limit that had run under a ceiling (their limit was extended
    /// by the ceiling's worst-case slowdown; a job whose limit was too short at its own clock is
    /// still killed, and counted here if it ran under a ceiling).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_cap_killed_after_ceiling: Option<u64>,
    /// Of those, the jobs the ceilings cost at least the work they had left when killed
    /// (`CapStats::killed_for_cap`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_cap_killed_for_cap: Option<u64>,
}

impl Metrics {
    /// Fill in the power cap's figures of a capped run.
    pub fn set_power_cap(&mut self, s: &super::power_cap::CapStats) {
        self.power_cap_in_force_s = Some(s.in_force_s);
        self.power_cap_over_s = Some(s.over_s);
        self.power_cap_max_excess_w = Some(s.max_excess_w);
        self.power_cap_longest_over_s = Some(s.longest_over_s);
        self.peak_gpu_power_w = Some(s.peak_gpu_w);
        self.power_cap_ceiling_changes = Some(s.ceiling_changes);
        self.power_cap_limit_extensions = Some(s.limit_extensions);
        self.power_cap_killed_after_ceiling = Some(s.killed_after_ceiling);
        self.power_cap_killed_for_cap = Some(s.killed_for_cap);
    }
}

/// One finished job, for `--jobs-csv`.
#[derive(Debug, Clone, Copy)]
pub struct JobRecord {
    pub job: u32,
    pub gpus: u32,
    pub submit_s: f64,
    pub start_s: f64,
    pub end_s: f64,
    pub duration_alone_s: f64,
    pub time_limit_s: f64,
}

#[derive(Debug, Clone)]
pub struct RunResult {
    /// Finished jobs in completion order.
    pub jobs: Vec<JobRecord>,
    pub name: String,
    pub metrics: Metrics,
    /// (days since start, cluster power in kW averaged over the hour).
    pub power_kw: Vec<(f64, f64)>,
    /// Sorted job completion times (s).
    pub jct_sorted_s: Vec<f64>,
    /// Jobs killed at their time limit: (job id, work seconds left at the request's speed).
    pub killed_remaining_work_s: Vec<(u32, f64)>,
    /// Under a power cap: the state after each run of the power directives.
    pub power_cap_timeline: Vec<super::power_cap::CapSample>,
}

fn percentile_sorted(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

impl Accumulators {
    pub fn new(nodes: usize) -> Accumulators {
        Accumulators {
            active_w: 0.0,
            idle_w: 0.0,
            base_w: 0.0,
            cpu_w: 0.0,
            busy_gpus: 0.0,
            gpu_busy: vec![false; nodes * 64],
            active_j: 0.0,
            idle_j: 0.0,
            base_j: 0.0,
            cpu_j: 0.0,
            carbon_g: 0.0,
            busy_gpu_s: 0.0,
            power_bins_j: Vec::new(),
            jct_s: Vec::new(),
            wait_s: Vec::new(),
            slowdown: Vec::new(),
            per_job: Vec::new(),
            finished: 0,
            shared_starts: 0,
            requeues: 0,
            colocation_failures: 0,
            reclocks: 0,
            grown_starts: 0,
            shrunk_starts: 0,
            cpu_resized_starts: 0,
            reallocations: 0,
            realloc_shrinks: 0,
            realloc_pause_s: 0.0,
            cycles: 0,
            cycle_time_s: 0.0,
            clock_sum_mhz: 0.0,
            starts: 0,
            wakes: 0,
            killed: 0,
            killed_work_gpu_s: 0.0,
            killed_remaining: Vec::new(),
            slowdown_sum: 0.0,
            last_end_s: 0.0,
        }
    }

    /// Add `dt_s` at the current power, starting at `t_s`, at carbon intensity `g_per_kwh`.
    /// The caller never lets an interval cross an hour boundary.
    pub fn integrate(&mut self, t_s: f64, dt_s: f64, g_per_kwh: f64) {
        if dt_s <= 0.0 {
            return;
        }
        let total_w = self.active_w + self.idle_w + self.base_w + self.cpu_w;
        self.active_j += self.active_w * dt_s;
        self.idle_j += self.idle_w * dt_s;
        self.base_j += self.base_w * dt_s;
        self.cpu_j += self.cpu_w * dt_s;
        self.carbon_g += total_w * dt_s / J_PER_KWH * g_per_kwh;
        self.busy_gpu_s += self.busy_gpus * dt_s;
        let bin = (t_s / BIN_S).floor().max(0.0) as usize;
        if self.power_bins_j.len() <= bin {
            self.power_bins_j.resize(bin + 1, 0.0);
        }
        self.power_bins_j[bin] += total_w * dt_s;
    }

    pub fn record_start(&mut self, _job: &SimJob, _ready_s: f64, clock_mhz: u32, wakes: usize) {
        self.starts += 1;
        self.clock_sum_mhz += clock_mhz as f64;
        self.wakes += wakes as u64;
    }

    pub fn record_finish(&mut self, job: &SimJob, _start_s: f64, ready_s: f64, end_s: f64, time_limit_s: f64) {
        self.finished += 1;
        self.jct_s.push(end_s - job.submit_s);
        self.wait_s.push(ready_s - job.submit_s);
        let slowdown = (end_s - ready_s) / job.duration_s;
        self.slowdown_sum += slowdown;
        self.slowdown.push(slowdown);
        self.last_end_s = self.last_end_s.max(end_s);
        self.per_job.push(JobRecord {
            job: job.id.0,
            gpus: job.total_gpus(),
            submit_s: job.submit_s,
            start_s: ready_s,
            end_s,
            duration_alone_s: job.duration_s,
            time_limit_s,
        });
    }

    /// A job killed at its time limit with `remaining_work_s` of work (at full speed) left.
    pub fn record_kill(&mut self, job: &SimJob, ready_s: f64, end_s: f64, remaining_work_s: f64) {
        self.killed += 1;
        self.killed_work_gpu_s += remaining_work_s * job.total_gpus() as f64;
        self.killed_remaining.push((job.id.0, remaining_work_s));
        let limit = end_s - ready_s;
        self.record_finish(job, ready_s, ready_s, end_s, limit);
    }

    pub fn finish(mut self, name: &str, total_gpus: u32, wall_s: f64, carbon_used: bool) -> RunResult {
        self.jct_s.sort_by(f64::total_cmp);
        self.slowdown.sort_by(f64::total_cmp);
        let n = self.jct_s.len().max(1) as f64;
        let makespan = self.last_end_s;
        let metrics = Metrics {
            jobs: self.finished,
            energy_kwh: (self.active_j + self.idle_j + self.base_j + self.cpu_j) / J_PER_KWH,
            gpu_energy_kwh: self.active_j / J_PER_KWH,
            idle_energy_kwh: self.idle_j / J_PER_KWH,
            base_energy_kwh: self.base_j / J_PER_KWH,
            cpu_energy_kwh: self.cpu_j / J_PER_KWH,
            carbon_kg: if carbon_used { self.carbon_g / 1000.0 } else { 0.0 },
            mean_jct_s: self.jct_s.iter().sum::<f64>() / n,
            p50_jct_s: percentile_sorted(&self.jct_s, 0.50),
            p99_jct_s: percentile_sorted(&self.jct_s, 0.99),
            mean_wait_s: self.wait_s.iter().sum::<f64>() / n,
            makespan_s: makespan,
            gpu_utilization: if total_gpus > 0 && makespan > 0.0 { self.busy_gpu_s / (total_gpus as f64 * makespan) } else { 0.0 },
            mean_slowdown: self.slowdown_sum / n,
            p50_slowdown: percentile_sorted(&self.slowdown, 0.50),
            p90_slowdown: percentile_sorted(&self.slowdown, 0.90),
            p99_slowdown: percentile_sorted(&self.slowdown, 0.99),
            shared_starts: self.shared_starts,
            sharing_requeues: self.requeues,
            colocation_failures: self.colocation_failures,
            reclocks: self.reclocks,
            grown_starts: self.grown_starts,
            shrunk_starts: self.shrunk_starts,
            cpu_resized_starts: self.cpu_resized_starts,
            reallocations: self.reallocations,
            realloc_shrinks: self.realloc_shrinks,
            realloc_pause_h: self.realloc_pause_s / 3600.0,
            mean_clock_mhz: if self.starts > 0 { self.clock_sum_mhz / self.starts as f64 } else { 0.0 },
            node_resumes: self.wakes,
            killed_at_time_limit: self.killed,
            killed_work_gpu_h: self.killed_work_gpu_s / 3600.0,
            unfinished_work_floor_kwh: 0.0,
            planner_cycles: self.cycles,
            mean_cycle_us: if self.cycles > 0 { self.cycle_time_s / self.cycles as f64 * 1e6 } else { 0.0 },
            wall_s,
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
        let power_kw = self.power_bins_j.iter().enumerate().map(|(i, j)| ((i as f64 + 0.5) * BIN_S / 86_400.0, j / BIN_S / 1000.0)).collect();
        RunResult { jobs: self.per_job, name: name.to_string(), metrics, power_kw, jct_sorted_s: self.jct_s, killed_remaining_work_s: self.killed_remaining, power_cap_timeline: Vec::new() }
    }
}

