//! `slurm-energy workload`: the program a replayed job runs on its (simulated) GPUs.
//!
//! It stands for one training job whose measured behaviour is the simulator's ground truth
//! ([`crate::sim::truth`]): a Gavel job type and a Zeus sweep. Every tick it
//!
//! 1. reads the clock each of its GPUs runs at from the fake NVML's shared state (what
//!    `nvidia-smi` would show the job), and which other workloads share each GPU (their
//!    registered profiles, [`fake_nvml::workload_profile`]);
//! 2. advances its work at the truth's rate for that clock and co-runner: `share / time_ratio`,
//!    where `time_ratio` is the Zeus sweep's runtime at the power limit that clock stands for,
//!    and `share` Gavel's normalised pair throughput when a co-runner is there (1 alone); a job on
//!    several GPUs goes at the pace of its slowest GPU;
//! 3. makes each of its GPUs draw the truth's power (the sweep's average power at that limit,
//!    or the shared-GPU power of [`Truth::shared_power_w`]) through its profile;
//!
//! and exits when the work (trace seconds at the default clock, alone) is done. Time runs
//! `speedup` times faster than the trace's, as in the replay.
//!
//! Clock to power limit: Zeus varied power limits, not clocks; the clock a limit stands for is
//! the clock ladder's ([`GpuCurves::ladder`], a clock fraction per limit computed from the
//! measured sweeps), relative to the GPU's default application clock. It is the conversion the
//! simulator's engine applies (a start decision's clock comes with the ladder step's limit,
//! and the truth is read at that limit), so the two read the truth at the same points. No
//! prediction (fitted curve) is used.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fake_nvml::workload_profile::{self, WorkloadProfile};
use fake_nvml::{Config, FakeNvml, GpuState};
use model::perf_power::{ClockStep, GpuCurves};
use model::workloads::synergy_model;

use crate::sim::spec::Colocation;
use crate::sim::truth::{JobTruth, Truth};

/// What one workload process runs.
#[derive(Debug, Clone)]
pub struct WorkloadArgs {
    /// The fake NVML's configuration and this node's state directory.
    pub nvml_config: PathBuf,
    pub state_dir: PathBuf,
    /// Measured data (zeus/, gavel/, synergy/).
    pub data_dir: PathBuf,
    pub gpu_model: String,
    pub idle_gpu_w: f64,
    pub job_type: String,
    pub sweep: usize,
    /// Work in trace seconds: the job's runtime alone at the default clock.
    pub work_s: f64,
    pub speedup: f64,
    /// This node's GPU indices the job holds (NVML order).
    pub gpus: Vec<u32>,
    pub tick: Duration,
}

/// What the workload saw.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadOutcome {
    pub wall_s: f64,
    /// Work-weighted mean of the rate (work seconds per trace second).
    pub mean_rate: f64,
    pub mean_clock_mhz: f64,
    pub shared_ticks: u64,
}

/// Clock (MHz) to the power limit (W) it stands for, on the truth's clock ladder.
#[derive(Debug, Clone)]
pub struct ClockToLimit {
    ladder: Vec<ClockStep>,
    default_clock_mhz: u32,
}

impl ClockToLimit {
    pub fn new(truth: &Truth, default_clock_mhz: u32) -> Option<ClockToLimit> {
        let ladder = GpuCurves::ladder(truth.all_sweeps(), default_clock_mhz);
        (!ladder.is_empty() && default_clock_mhz > 0).then_some(ClockToLimit { ladder, default_clock_mhz })
    }

    /// The limit of the ladder step whose clock fraction is nearest `clock_mhz / default`; at
    /// or above the default clock, the highest limit.
    pub fn limit_w(&self, clock_mhz: u32) -> f64 {
        let frac = (f64::from(clock_mhz) / f64::from(self.default_clock_mhz)).min(1.0);
        self.ladder
            .iter()
            .min_by(|a, b| (a.clock_frac - frac).abs().total_cmp(&(b.clock_frac - frac).abs()))
            .map_or(0.0, |s| s.power_limit_w)
    }
}

/// The clock a GPU runs at while busy: the top of its locked range, else its application clock.
pub fn busy_clock_mhz(gpu: &GpuState) -> u32 {
    gpu.locked_clocks_mhz.map_or(gpu.app_graphics_clock_mhz, |(_, max)| max)
}

/// The job's truth as the replay assigned it.
pub fn job_truth(job_type: &str, sweep: usize) -> JobTruth {
    JobTruth { job_type: job_type.to_string(), sweep, synergy_model: synergy_model(job_type), cpu_gain: 1.0 }
}

/// Rate and power of one GPU of the job now: (work seconds per trace second, GPU power W,
/// shared).
pub fn gpu_rate_and_power(truth: &Truth, me: &JobTruth, limit_w: f64, co_runner: Option<(&JobTruth, f64)>) -> (f64, f64, bool) {
    let (time_ratio, power_w) = truth.alone(me, limit_w);
    let time_ratio = time_ratio.max(1e-6);
    match co_runner.and_then(|(other, other_limit_w)| truth.pair(me, other).map(|n| (other, other_limit_w, n))) {
        Some((other, other_limit_w, n)) => {
            // As the simulator's engine: both tenants at the higher of the two limits.
            let limit = limit_w.max(other_limit_w);
            let (ratio, p_me) = truth.alone(me, limit);
            let p_other = truth.alone(other, limit).1;
            (n.0 / ratio.max(1e-6), truth.shared_power_w((p_me, p_other), n, limit), true)
        }
        None => (1.0 / time_ratio, power_w.min(limit_w.max(truth.idle_gpu_w)), false),
    }
}

fn limit_of(map: &ClockToLimit, gpu: &GpuState) -> f64 {
    map.limit_w(busy_clock_mhz(gpu))
}

/// Runs the workload to the end of its work.
pub fn run_workload(a: &WorkloadArgs) -> Result<WorkloadOutcome, String> {
    if !(a.work_s >= 0.0 && a.speedup > 0.0) {
        return Err(format!("--work-s must be >= 0 and --speedup > 0 (got {} and {})", a.work_s, a.speedup));
    }
    if a.gpus.is_empty() {
        return Err("no GPUs: pass --gpus or run under Slurm with --gres=gpu:N".into());
    }
    let truth = Truth::load(&a.data_dir, &a.gpu_model, a.idle_gpu_w, Colocation::Physical).map_err(|e| e.to_string())?;
    if truth.all_sweeps().get(a.sweep).is_none() {
        return Err(format!("sweep {} does not exist for {} ({} sweeps)", a.sweep, a.gpu_model, truth.all_sweeps().len()));
    }
    let config = Config::load(&a.nvml_config).map_err(|e| e.to_string())?;
    let map = ClockToLimit::new(&truth, config.default_graphics_clock_mhz).ok_or("no clock ladder for this GPU model")?;
    let fake = FakeNvml::new(config, &a.state_dir);
    let me = job_truth(&a.job_type, a.sweep);
    let pid = std::process::id();
    workload_profile::register(&a.state_dir, &WorkloadProfile { pid, gpus: a.gpus.clone(), job_type: a.job_type.clone(), sweep: a.sweep })
        .map_err(|e| format!("{}: register the workload: {e}", a.state_dir.display()))?;
    let result = drive(a, &truth, &map, &fake, &me, pid);
    for &g in &a.gpus {
        let _ = fake.clear_workload(g as usize, pid);
    }
    let _ = workload_profile::unregister(&a.state_dir, pid);
    result
}

fn drive(a: &WorkloadArgs, truth: &Truth, map: &ClockToLimit, fake: &FakeNvml, me: &JobTruth, pid: u32) -> Result<WorkloadOutcome, String> {
    let start = Instant::now();
    let mut done_s = 0.0;
    let (mut rate_time, mut clock_time, mut shared_ticks, mut trace_time) = (0.0, 0.0, 0u64, 0.0);
    loop {
        let state = fake.state().map_err(|e| e.to_string())?;
        let profiles = workload_profile::list(&a.state_dir)?;
        let mut rate = f64::INFINITY;
        let mut clock_sum = 0.0;
        let mut powers = Vec::with_capacity(a.gpus.len());
        let mut shared = false;
        for &g in &a.gpus {
            let gpu = state.gpus.get(g as usize).ok_or_else(|| format!("GPU {g} is not in the fake NVML's state ({} GPUs)", state.gpus.len()))?;
            let limit = limit_of(map, gpu);
            let other = profiles.iter().find(|p| p.pid != pid && p.gpus.contains(&g)).map(|p| job_truth(&p.job_type, p.sweep));
            // The co-runner runs at the same GPU's clock.
            let (r, p, s) = gpu_rate_and_power(truth, me, limit, other.as_ref().map(|o| (o, limit)));
            rate = rate.min(r);
            clock_sum += f64::from(busy_clock_mhz(gpu));
            shared |= s;
            powers.push((g, p, s));
        }
        for (g, p, s) in powers {
            let sm_pct = if s { 50 } else { 100 };
            fake.set_workload_power(g as usize, pid, p, sm_pct).map_err(|e| e.to_string())?;
        }
        // Trace seconds per wall second.
        let speed = rate * a.speedup;
        // The rate just read holds until the next tick.
        let remaining_wall_s = if speed > 0.0 { (a.work_s - done_s) / speed } else { f64::INFINITY };
        let step = remaining_wall_s.min(a.tick.as_secs_f64()).max(0.0);
        if step > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(step));
        }
        let trace_dt = step * a.speedup;
        done_s += rate * trace_dt;
        rate_time += rate * trace_dt;
        clock_time += clock_sum / a.gpus.len() as f64 * trace_dt;
        trace_time += trace_dt;
        shared_ticks += u64::from(shared);
        if done_s >= a.work_s - 1e-9 || remaining_wall_s <= a.tick.as_secs_f64() {
            break;
        }
    }
    let t = trace_time.max(1e-9);
    Ok(WorkloadOutcome { wall_s: start.elapsed().as_secs_f64(), mean_rate: rate_time / t, mean_clock_mhz: clock_time / t, shared_ticks })
}

/// GPU indices from Slurm's environment (`SLURM_STEP_GPUS`, else `SLURM_JOB_GPUS`).
pub fn gpus_from_env() -> Vec<u32> {
    let list = std::env::var("SLURM_STEP_GPUS").ok().filter(|v| !v.is_empty()).or_else(|| std::env::var("SLURM_JOB_GPUS").ok()).unwrap_or_default();
    list.split(',').filter_map(|g| g.trim().parse().ok()).collect()
}

/// Parses `0,2,3`.
pub fn parse_gpu_list(text: &str) -> Result<Vec<u32>, String> {
    text.split(',').filter(|g| !g.trim().is_empty()).map(|g| g.trim().parse::<u32>().map_err(|_| format!("bad GPU index '{g}' in '{text}'"))).collect()
}

/// The fake NVML state directory of one node under a site's state root.
pub fn node_state_dir(root: &Path, node: &str) -> PathBuf {
    root.join(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::data::default_data_dir;

    fn truth() -> Option<Truth> {
        let dir = default_data_dir();
        Truth::load(&dir, "v100", 41.0, Colocation::Physical).ok()
    }

    #[test]
    fn default_clock_is_the_top_limit_and_lower_clocks_lower_limits() {
        let Some(t) = truth() else {
            assert!(std::env::var("CI").is_err(), "measured data missing under CI");
            return;
        };
        let map = ClockToLimit::new(&t, 1312).unwrap();
        let top = map.limit_w(1312);
        assert_eq!(top, map.limit_w(1530));
        assert!(map.limit_w(700) < top, "{} vs {top}", map.limit_w(700));
        let low = map.limit_w(700);
        let (mut rate_sum, mut n) = (0.0, 0.0);
        for sweep in 0..t.all_sweeps().len() {
            let jt = JobTruth { job_type: t.job_types()[0].clone(), sweep, synergy_model: None, cpu_gain: 1.0 };
            let (r_top, _, shared) = gpu_rate_and_power(&t, &jt, top, None);
            assert!(!shared);
            assert!((r_top - 1.0).abs() < 1e-9, "alone at the default clock a job runs at its trace speed: {r_top}");
            // At a lower clock: exactly the measured point of the sweep at the ladder's limit.
            let (r_low, p_low, _) = gpu_rate_and_power(&t, &jt, low, None);
            let (ratio, power) = t.alone(&jt, low);
            assert!((r_low - 1.0 / ratio).abs() < 1e-9 && (p_low - power.min(low)).abs() < 1e-9);
            rate_sum += r_low;
            n += 1.0;
        }
        // Measured sweeps are noisy one by one, but on the whole a lower clock slows jobs.
        assert!(rate_sum / n < 0.95, "mean rate at 700 MHz: {}", rate_sum / n);
    }

    #[test]
    fn a_co_runner_gives_the_measured_pair_share_and_shared_power() {
        let Some(t) = truth() else {
            assert!(std::env::var("CI").is_err(), "measured data missing under CI");
            return;
        };
        let map = ClockToLimit::new(&t, 1312).unwrap();
        let top = map.limit_w(1312);
        let types = t.job_types().to_vec();
        let jt = |i: usize, sweep: usize| JobTruth { job_type: types[i].clone(), sweep, synergy_model: None, cpu_gain: 1.0 };
        let pair = (0..types.len()).flat_map(|a| (0..types.len()).map(move |b| (a, b))).find(|&(a, b)| t.pair(&jt(a, 0), &jt(b, 1)).is_some_and(|n| n.0 < 0.9));
        let (a, b) = pair.expect("some measured pair slows its first job");
        let (me, other) = (jt(a, 0), jt(b, 1));
        let n = t.pair(&me, &other).unwrap();
        let (rate, power, shared) = gpu_rate_and_power(&t, &me, top, Some((&other, top)));
        assert!(shared);
        assert!((rate - n.0 / t.alone(&me, top).0).abs() < 1e-9, "{rate} vs {n:?}");
        let expected = t.shared_power_w((t.alone(&me, top).1, t.alone(&other, top).1), n, top);
        assert!((power - expected).abs() < 1e-9);
        assert!(rate < 1.0);
    }

    #[test]
    fn gpu_lists_parse_and_bad_ones_are_named() {
        assert_eq!(parse_gpu_list("0, 2,3").unwrap(), vec![0, 2, 3]);
        assert!(parse_gpu_list("0,x").unwrap_err().contains("'x'"));
    }
}
