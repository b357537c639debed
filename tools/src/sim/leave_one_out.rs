//! Leave-one-network-out (issue 23): how well the planner predicts a workload it has never
//! seen. The simulator's usual split ([`super::split`]) holds out batch sizes *within* each
//! network, and 80 % of jobs tell the planner their network, so its clock and CPU predictions
//! are in-distribution. Here each Zeus network (clocks) and each Synergy model (CPUs) is left
//! out of the planner's fit in turn and the fit is scored on it:
//!
//! - clocks: the planner's curves fitted on its half of the *other* networks' sweeps, the
//!   left-out network's held-out sweeps predicted with them (its tag names a class the curves
//!   do not know, so the generic curve answers); at the clock the planner would choose within
//!   a slowdown bound (least predicted energy, as `model::planner` does without congestion or
//!   carbon), the predicted against the measured slowdown and energy (relative to the default
//!   clock);
//! - CPUs: the planner's sensitivity model fitted without the left-out Synergy model (a family
//!   of that model is then unknown: predicted insensitive, given its request), its predicted
//!   throughput against the measured profile at every CPU count the planner may choose.
//!
//! The same functions score the in-distribution fit (network or model known), so the two can
//! be put side by side, and they take the fit as a function so that a test can show that a
//! bound on their error fails for a bad predictor.

use std::path::Path;

use model::data::DataError;
use model::data::synergy::{SynergyTable, load_synergy};
use model::data::zeus::ZeusSweep;
use model::perf_power::GpuCurves;
use model::sensitivity::SensitivityModel;
use model::workloads::synergy_model;

use super::truth::{JobTruth, Truth};

/// Prediction error of one network's held-out sweeps at the chosen clock.
#[derive(Debug, Clone, PartialEq)]
pub struct ClockError {
    pub network: String,
    /// Held-out sweeps scored.
    pub sweeps: usize,
    /// Mean predicted and measured slowdown at the chosen clock.
    pub predicted_slowdown: f64,
    pub true_slowdown: f64,
    /// Mean and largest absolute error of the slowdown ...
    pub slowdown_mae: f64,
    pub slowdown_max: f64,
    /// ... and of the GPU energy relative to the default clock.
    pub energy_mae: f64,
    pub energy_max: f64,
}

/// Fits the planner's clock curves from sweeps (`GpuCurves::fit` in the simulator).
pub type ClockFit<'a> = &'a dyn Fn(&[ZeusSweep]) -> Option<GpuCurves>;

/// The clock step the planner picks within `bound` for `class`: the least predicted energy
/// among the steps predicted no slower than `bound`, the default step when none saves.
pub fn chosen_step(curves: &GpuCurves, class: Option<&str>, bound: f64) -> usize {
    let default = curves.default_step();
    let energy = |step: usize| {
        let p = curves.predict(class, step);
        p.time_ratio * p.power_w
    };
    let mut best = (default, energy(default));
    for step in 0..curves.ladder.len() {
        let p = curves.predict(class, step);
        if p.time_ratio <= bound + 1e-9 && energy(step) < best.1 - 1e-9 {
            best = (step, energy(step));
        }
    }
    best.0
}

/// Per network of the truth's held-out sweeps: the planner's error at the clock it would
/// choose within `bound`. With `leave_out`, the curves are fitted on the planner's sweeps of
/// the other networks only (one fit per network); else on all the planner's sweeps, the
/// network known (the simulator's setting).
pub fn clock_errors(truth: &Truth, fit: ClockFit<'_>, bound: f64, leave_out: bool) -> Vec<ClockError> {
    let split = truth.split();
    let sweeps = truth.all_sweeps();
    let mut networks: Vec<String> = sweeps.iter().map(|s| s.network.clone()).collect();
    networks.sort();
    networks.dedup();
    let planner_half = |skip: Option<&str>| -> Vec<ZeusSweep> { sweeps.iter().filter(|s| !split.truth_sweep(s) && Some(s.network.as_str()) != skip).cloned().collect() };
    let in_distribution = if leave_out { None } else { fit(&planner_half(None)) };
    let mut out = Vec::new();
    for network in networks {
        let fitted = if leave_out { fit(&planner_half(Some(&network))) } else { None };
        let Some(curves) = fitted.as_ref().or(in_distribution.as_ref()) else { continue };
        let class = Some(network.as_str());
        let step = chosen_step(curves, class, bound);
        let (Some(at), Some(top)) = (curves.ladder.get(step), curves.ladder.last()) else { continue };
        let predicted = curves.predict(class, step);
        let predicted_default = curves.predict(class, curves.default_step());
        let predicted_energy = predicted.time_ratio * predicted.power_w / predicted_default.power_w.max(1e-9);
        let mut e = ClockError { network: network.clone(), sweeps: 0, predicted_slowdown: 0.0, true_slowdown: 0.0, slowdown_mae: 0.0, slowdown_max: 0.0, energy_mae: 0.0, energy_max: 0.0 };
        for (i, _) in sweeps.iter().enumerate().filter(|(_, s)| s.network == network && split.truth_sweep(s)) {
            let jt = JobTruth { job_type: String::new(), sweep: i, synergy_model: None, cpu_gain: 1.0 };
            let (slowdown, power_w) = truth.alone(&jt, at.power_limit_w);
            let (_, full_w) = truth.alone(&jt, top.power_limit_w);
            let true_energy = slowdown * power_w / full_w.max(1e-9);
            let (ds, de) = ((predicted.time_ratio - slowdown).abs(), (predicted_energy - true_energy).abs());
            e.sweeps += 1;
            e.predicted_slowdown += predicted.time_ratio;
            e.true_slowdown += slowdown;
            e.slowdown_mae += ds;
            e.energy_mae += de;
            e.slowdown_max = e.slowdown_max.max(ds);
            e.energy_max = e.energy_max.max(de);
        }
        if e.sweeps > 0 {
            let n = e.sweeps as f64;
            e.predicted_slowdown /= n;
            e.true_slowdown /= n;
            e.slowdown_mae /= n;
            e.energy_mae /= n;
            out.push(e);
        }
    }
    out
}

/// Families of the simulator's job types with a Synergy model (one per model).
pub const CPU_FAMILIES: [&str; 10] = ["ResNet-50", "ResNet-18", "Transformer", "LM", "CycleGAN", "A3C", "ShuffleNet", "GNMT", "AlexNet", "DeepSpeech"];
/// GPUs per node of the jobs scored.
pub const CPU_GPUS: [u32; 3] = [1, 4, 8];

/// Prediction error of one Synergy model's CPU speed-up.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuError {
    pub model: String,
    /// (GPU count, CPUs) points scored.
    pub points: usize,
    /// Mean and largest absolute error of the speed-up (throughput relative to the
    /// proportional share) over every CPU count the planner may give (half to three times the
    /// request, 3 CPUs per GPU) ...
    pub range_mae: f64,
    pub range_max: f64,
    /// ... and at the CPU count it chooses (`SensitivityModel::choose_cpus`), per GPU count.
    pub chosen_mae: f64,
    pub chosen_max: f64,
}

/// Synergy's table as the simulator reads it.
pub fn load_cpu_table(data_dir: &Path) -> Result<SynergyTable, DataError> {
    load_synergy(&data_dir.join("synergy").join("cpu_mem_sensitivity.csv"))
}

/// Per Synergy model of [`CPU_FAMILIES`]: the planner's CPU speed-up error against the
/// truth's measured profile (each job's own factor left at 1). With `leave_out` the
/// sensitivity model is fitted without that model (`fit` builds it from a table).
pub fn cpu_errors(truth: &Truth, table: &SynergyTable, fit: &dyn Fn(SynergyTable) -> SensitivityModel, leave_out: bool) -> Vec<CpuError> {
    let in_distribution = if leave_out { None } else { Some(fit(table.clone())) };
    let mut out = Vec::new();
    for family in CPU_FAMILIES {
        let Some(model) = synergy_model(family) else { continue };
        let fitted = if leave_out { Some(fit(table.retain_models(|m| m != model))) } else { None };
        let Some(sens) = fitted.as_ref().or(in_distribution.as_ref()) else { continue };
        let jt = JobTruth { job_type: family.to_string(), sweep: 0, synergy_model: Some(model), cpu_gain: 1.0 };
        let mut e = CpuError { model: model.to_string(), points: 0, range_mae: 0.0, range_max: 0.0, chosen_mae: 0.0, chosen_max: 0.0 };
        let mut chosen = 0usize;
        for gpus in CPU_GPUS {
            let request = 3 * gpus;
            let predicted = |cpus: u32| sens.throughput(Some(family), gpus, cpus) / sens.throughput(Some(family), gpus, request).max(1e-9);
            for cpus in (request / 2).max(1)..=3 * request {
                let err = (predicted(cpus) - truth.cpu_factor(&jt, gpus, cpus, request)).abs();
                e.points += 1;
                e.range_mae += err;
                e.range_max = e.range_max.max(err);
            }
            let (cpus, _) = sens.choose_cpus(Some(family), gpus, (request / 2).max(1), 3 * request, request);
            let err = (predicted(cpus) - truth.cpu_factor(&jt, gpus, cpus, request)).abs();
            chosen += 1;
            e.chosen_mae += err;
            e.chosen_max = e.chosen_max.max(err);
        }
        e.range_mae /= e.points.max(1) as f64;
        e.chosen_mae /= chosen.max(1) as f64;
        out.push(e);
    }
    out
}

/// The mean of `f` over `rows` (0 without rows).
pub fn mean_of<T>(rows: &[T], f: impl Fn(&T) -> f64) -> f64 {
    rows.iter().map(f).sum::<f64>() / rows.len().max(1) as f64
}
