//! `slurm-energy simulate`: replay a trace through the planner under several policies.

pub mod elastic_report;
pub mod engine;
pub mod frontier;
pub mod gpu_util;
pub mod jobs;
pub mod leave_one_out;
pub mod metrics;
pub mod oracle;
pub mod paper_setups;
pub mod policies;
pub mod power_cap;
pub mod report;
pub mod rng;
pub mod spec;
pub mod split;
pub mod stats;
pub mod trace_part;
pub mod truth;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use model::carbon::CarbonSignal;
use model::data::carbon::load_carbon;
use model::elastic::ScalingModel;
use model::predictor::Predictor;

use crate::trace::{Trace, load_trace};
use engine::Engine;
use jobs::{PreparedJobs, prepare};
use metrics::RunResult;
use policies::Setup;
use spec::ClusterSpec;
use truth::Truth;

/// Everything a set of runs shares: jobs, truth, the fitted predictor, the carbon signal.
pub struct Workload {
    pub spec: ClusterSpec,
    pub trace_path: PathBuf,
    pub trace: Trace,
    pub prepared: PreparedJobs,
    pub truth: Truth,
    pub predictor: Predictor,
    /// The planner's GPU scaling curves (elastic policies).
    pub scaling: Option<ScalingModel>,
    pub carbon: Option<CarbonSignal>,
    /// A power cap's file for the capped setups (`power_cap::capped_setup`); `None`: only the
    /// setups' static `power_cap_w` caps.
    pub power_cap: Option<power_cap::SimPowerCap>,
}

/// Where in the carbon series the trace starts: the same day of the year and time of day (the
/// series is of another year), or 1 January for traces without dates.
fn carbon_offset_s(trace: &Trace, carbon_start_unix_s: i64) -> f64 {
    (power_cap::trace_epoch_unix_s(trace) - carbon_start_unix_s) as f64
}

impl Workload {
    pub fn load(spec: ClusterSpec, data_dir: &Path, trace_path: &Path, carbon_path: Option<&Path>, max_jobs: Option<usize>, seed: u64) -> Result<Workload, String> {
        let trace = load_trace(trace_path, max_jobs).map_err(|e| e.to_string())?;
        Workload::from_trace(spec, data_dir, trace_path, trace, carbon_path, seed)
    }

    /// [`Workload::load`] of a trace already read (e.g. cut to a part of its period,
    /// [`trace_part::TraceWindow`]); `trace_path` only names it.
    pub fn from_trace(spec: ClusterSpec, data_dir: &Path, trace_path: &Path, trace: Trace, carbon_path: Option<&Path>, seed: u64) -> Result<Workload, String> {
        let mut truth = Truth::load(data_dir, &spec.cluster.gpu_type, spec.gpu.idle_power_w, spec.truth.colocation).map_err(|e| e.to_string())?;
        let mut predictor = truth.planner_predictor(data_dir).map_err(|e| e.to_string())?;
        if spec.truth.gpu_utilisation == spec::GpuUtilisation::V100Logs {
            gpu_util::switch_on(&mut truth, &mut predictor, data_dir)?;
        }
        let scaling = truth.planner_scaling(data_dir).map_err(|e| e.to_string())?;
        let carbon_file = match carbon_path {
            Some(p) => Some(p.to_path_buf()),
            None if spec.carbon.file.is_empty() => None,
            None => Some(data_dir.join(&spec.carbon.file)),
        };
        let carbon = match carbon_file {
            Some(p) => {
                let c = load_carbon(&p).map_err(|e| e.to_string())?;
                let offset = carbon_offset_s(&trace, c.start_unix_s);
                Some(CarbonSignal::new(c, offset))
            }
            None => None,
        };
        let prepared = prepare(&trace, &spec, &truth, seed);
        Ok(Workload { spec, trace_path: trace_path.to_path_buf(), trace, prepared, truth, predictor, scaling, carbon, power_cap: None })
    }

    /// Cap the capped setups' runs by a cap file (`model::power_cap` format), its times on the
    /// calendar of [`power_cap::trace_epoch_unix_s`].
    pub fn set_power_cap_file(&mut self, path: &Path) -> Result<(), String> {
        let schedule = model::power_cap::CapSchedule::from_file(path).map_err(|e| e.to_string())?;
        self.power_cap = Some(power_cap::SimPowerCap { schedule: Some(schedule), epoch_unix_s: power_cap::trace_epoch_unix_s(&self.trace) });
        Ok(())
    }

    /// Draw the jobs again under another seed (job types, time limits, hints); the trace, the
    /// measured data and the fitted predictor stay.
    pub fn reseed(&mut self, seed: u64) {
        self.prepared = prepare(&self.trace, &self.spec, &self.truth, seed);
    }

    pub fn run_one(&self, setup: &Setup, on_progress: impl FnMut(u64)) -> RunResult {
        let cap = self.power_cap.as_ref().filter(|_| power_cap::capped_setup(setup));
        let engine = Engine::new(setup, &self.spec, &self.truth, &self.prepared.jobs, self.prepared.seed, self.predictor.clone(), self.carbon.clone(), self.scaling.clone()).with_power_cap(cap);
        let mut r = engine.run(on_progress);
        self.charge_unfinished_work(std::slice::from_mut(&mut r));
        r
    }

    /// The `oracle` lower bound for the current jobs (every power limit of the planner's clock
    /// ladder allowed).
    pub fn oracle(&self) -> RunResult {
        oracle::run_oracle(&self.prepared.jobs, &self.truth, &self.spec, self.carbon.as_ref(), &self.ladder_limits_w())
    }

    /// The power limits of the planner's clock ladder: every limit a policy may set.
    fn ladder_limits_w(&self) -> Vec<f64> {
        self.predictor.curves(&self.spec.cluster.gpu_type).map(|c| c.ladder.iter().map(|s| s.power_limit_w).collect()).unwrap_or_default()
    }

    /// Fill in each run's [`metrics::Metrics::unfinished_work_floor_kwh`] (its killed jobs'
    /// unfinished work at the oracle's least energy per work second).
    fn charge_unfinished_work(&self, results: &mut [RunResult]) {
        if results.iter().all(|r| r.killed_remaining_work_s.is_empty()) {
            return;
        }
        let ladder = self.ladder_limits_w();
        let bounder = oracle::Bounder::new(&self.truth, &self.spec, &self.prepared.jobs, &ladder);
        for r in results {
            r.metrics.unfinished_work_floor_kwh = bounder.unfinished_floor_kwh(&self.prepared.jobs, &r.killed_remaining_work_s);
        }
    }

    /// Run every setup, `threads` at a time, with a progress bar per run on a terminal.
    /// `label` follows each bar's name (e.g. the seed).
    pub fn run_all(&self, setups: &[Setup], threads: usize, show_progress: bool, label: &str) -> Vec<RunResult> {
        let multi = MultiProgress::with_draw_target(if show_progress { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() });
        let style = ProgressStyle::with_template("{prefix:>18} [{bar:40}] {pos}/{len} jobs {elapsed}").unwrap_or_else(|_| ProgressStyle::default_bar());
        // Longest runs first, so that the threads finish together: policies that share GPUs or
        // choose CPUs cost the most per cycle.
        let cost = |s: &Setup| (s.planner.sharing as u8) * 2 + (s.planner.cpu_by_sensitivity as u8) + (s.planner.clock_scaling as u8);
        let mut order: Vec<usize> = (0..setups.len()).collect();
        order.sort_by_key(|i| std::cmp::Reverse(cost(&setups[*i])));
        let next = AtomicUsize::new(0);
        let results: Mutex<Vec<Option<RunResult>>> = Mutex::new(vec![None; setups.len()]);
        let total = self.prepared.jobs.len() as u64;
        std::thread::scope(|scope| {
            for _ in 0..threads.max(1) {
                scope.spawn(|| {
                    while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let Some(setup) = setups.get(i) else { break };
                        let bar = multi.add(ProgressBar::new(total));
                        bar.set_style(style.clone());
                        bar.set_prefix(format!("{}{}", setup.name, label));
                        let r = self.run_one(setup, |done| bar.set_position(done));
                        bar.finish();
                        if let Ok(mut all) = results.lock() {
                            all[i] = Some(r);
                        }
                    }
                });
            }
        });
        results.into_inner().unwrap_or_default().into_iter().flatten().collect()
    }
}
