//! The simulator's ground truth is independent of the planner's predictions (issue 11): every
//! prediction is scored against data it was not fitted on, and no truth is the planner's own
//! function. Each test fails if a prediction and its truth come from the same data or the same
//! function. Beyond that, the prediction *error* on held-out data is bounded (issue 23), so a
//! change that makes the planner worse at predicting the truth fails here too. And the error on a
//! workload the planner never saw is bounded: each Zeus network and each Synergy model left out of
//! its fit in turn (`tools::sim::leave_one_out`), with a deliberately bad predictor shown to fail
//! the same bounds.

use std::path::PathBuf;

use model::data::gavel::load_gavel;
use model::data::zeus::ZeusSweep;
use model::elastic::{ScalingModel, measured_speedup};
use model::interference::InterferenceModel;
use model::perf_power::GpuCurves;
use model::predictor::Predictor;
use model::workloads::{gavel_family, synergy_model, zeus_network};
use model::data::synergy::SynergyTable;
use model::sensitivity::SensitivityModel;
use tools::sim::leave_one_out::{self as loo, ClockError};
use tools::sim::rng::Rng;
use tools::sim::spec::{ClusterSpec, Colocation};
use tools::sim::truth::{JobTruth, Truth};

/// Bounds on the planner's prediction error against held-out data (issue 23): the errors
/// measured when they were set, with margin; a planner that predicts the truth worse fails.
/// Held-out Zeus sweeps, every clock step: slowdown MAE measured 0.048 (max 0.33).
const TIME_MAE_BOUND: f64 = 0.06;
/// Same points, relative power error: measured 0.167 (NCF's sweeps draw less than idle).
const POWER_MAE_BOUND: f64 = 0.20;
/// Synergy levels the fit never saw (2, 4, 6, 12 CPUs per GPU), 1-GPU jobs: measured 0.084.
const CPU_SINGLE_BOUND: f64 = 0.10;
/// Same levels, 4- and 8-GPU jobs: measured 0.027 (about 0.3 when the planner read a
/// multi-GPU profile's CPU level as the job's total CPUs, as before issue 23).
const CPU_MULTI_BOUND: f64 = 0.04;
/// Every CPU count the planner may give (half to three times the request), 1-, 4- and 8-GPU
/// jobs of every family with a Synergy model, model known: measured 0.100; predicting
/// "insensitive" (what the planner does for a model left out) errs 0.214.
const CPU_RANGE_BOUND: f64 = 0.15;

fn data_dir() -> PathBuf {
    std::env::var_os("SLURM_ENERGY_DATA").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")))
}

fn load() -> (Truth, Predictor) {
    let spec = ClusterSpec::default();
    let truth = Truth::load(&data_dir(), "v100", spec.gpu.idle_power_w, Colocation::Physical).expect("truth loads");
    let pred = truth.planner_predictor(&data_dir()).expect("predictor fits");
    (truth, pred)
}

fn key(s: &ZeusSweep) -> (String, u32) {
    (s.network.clone(), s.batch_size)
}

#[test]
fn clock_truth_is_a_batch_size_the_planner_never_saw() {
    let (truth, pred) = load();
    let planner_half: Vec<ZeusSweep> = truth.all_sweeps().iter().filter(|s| !truth.split().truth_sweep(s)).cloned().collect();
    let seen: std::collections::BTreeSet<(String, u32)> = planner_half.iter().map(key).collect();
    // The planner's curves are exactly the fit on its half, not on everything.
    let curves = pred.curves("v100").expect("v100 curves");
    assert_eq!(Some(curves), GpuCurves::fit("v100", &planner_half, 1530).as_ref());
    assert_ne!(Some(curves), GpuCurves::fit("v100", truth.all_sweeps(), 1530).as_ref(), "the planner must not be fitted on the truth's sweeps");
    let mut rng = Rng::new(5);
    let mut differs = 0;
    let mut drawn = 0;
    for _ in 0..400 {
        let jt = truth.assign(None, &mut rng);
        let sweep = truth.sweep_of(&jt).expect("a sweep");
        assert!(!seen.contains(&key(sweep)), "{:?}: the job's own batch size is in the planner's fit", key(sweep));
        // At every clock step below the default (where both are 1 by definition), the truth is
        // the measured sweep, not the planner's curve.
        let class = zeus_network(gavel_family(&jt.job_type));
        for (step, c) in curves.ladder.iter().enumerate().take(curves.ladder.len() - 1) {
            let (true_ratio, _) = truth.alone(&jt, c.power_limit_w);
            let predicted = pred.predict_class("v100", 250.0, class, step).time_ratio;
            drawn += 1;
            if (true_ratio - predicted).abs() > 1e-6 {
                differs += 1;
            }
        }
    }
    assert!(differs * 10 > drawn * 9, "prediction equals truth at {} of {drawn} steps", drawn - differs);
}

#[test]
fn colocation_truth_leaves_the_pair_out_and_is_gavels_physical_measurement() {
    let (truth, pred) = load();
    let sim = load_gavel(&data_dir().join("gavel").join("simulation_throughputs.json")).expect("gavel");
    let planner_types: Vec<String> = sim.job_types("v100").into_iter().filter(|t| !truth.split().truth_type(t)).collect();
    assert!(!planner_types.is_empty());
    // The planner's table is built on its half only ...
    assert_eq!(pred.interference, InterferenceModel::from_gavel(&sim.retain_job_types(|t| !truth.split().truth_type(t)), "v100"));
    assert_ne!(pred.interference, InterferenceModel::from_gavel(&sim, "v100"), "the planner must not see the truth's pairs");
    // ... and jobs are drawn among the other half, so no pair the truth scores was fitted on.
    let mut rng = Rng::new(9);
    let phys = load_gavel(&data_dir().join("gavel").join("physical_cluster_throughputs.json")).expect("gavel");
    let (mut compared, mut differs) = (0, 0);
    for _ in 0..300 {
        let (a, b) = (truth.assign(None, &mut rng), truth.assign(None, &mut rng));
        assert!(!planner_types.contains(&a.job_type) && !planner_types.contains(&b.job_type));
        let Some((na, nb)) = truth.pair(&a, &b) else { continue };
        // The truth is the physical measurement of the exact pair.
        assert_eq!(Some((na, nb)), phys.pair_normalised("v100", &a.job_type, &b.job_type));
        let p = pred.interference.predict(Some(gavel_family(&a.job_type)), Some(gavel_family(&b.job_type)));
        compared += 1;
        if (p.slowdown_a - 1.0 / na).abs() > 1e-6 || (p.slowdown_b - 1.0 / nb).abs() > 1e-6 {
            differs += 1;
        }
    }
    assert!(compared > 100 && differs * 10 > compared * 9, "{differs} of {compared} pairs differ");
}

#[test]
fn cpu_truth_is_not_the_planners_profile_and_gpu_power_follows_speed() {
    let (truth, pred) = load();
    let sensitivity = pred.sensitivity.as_ref().expect("synergy data");
    let spec = ClusterSpec::default();
    let mut rng = Rng::new(11);
    let mut noise = Rng::new(12);
    let (mut compared, mut differs) = (0, 0);
    for _ in 0..300 {
        let mut jt = truth.assign(None, &mut rng);
        jt.cpu_gain = noise.lognormal(spec.truth.cpu_sensitivity_noise);
        for cpus in [1, 2, 6, 9] {
            let family = gavel_family(&jt.job_type);
            let predicted = sensitivity.throughput(Some(family), 1, cpus) / sensitivity.throughput(Some(family), 1, 3);
            let actual = truth.cpu_factor(&jt, 1, cpus, 3);
            if (predicted - 1.0).abs() > 1e-3 {
                compared += 1;
                if (predicted - actual).abs() > 1e-6 {
                    differs += 1;
                }
            }
        }
    }
    assert!(compared > 50 && differs * 10 > compared * 9, "{differs} of {compared} CPU factors differ from the planner's");
    // Without the per-job factor (cpu_gain 1), the truth is the measured profile and the
    // planner's is its fitted curve: they must still differ at most sensitive levels, which
    // fails if both read the same function of the same table.
    let (mut compared, mut differs) = (0, 0);
    for _ in 0..300 {
        let jt = truth.assign(None, &mut rng);
        assert_eq!(jt.cpu_gain, 1.0);
        let family = gavel_family(&jt.job_type);
        for cpus in [1, 2, 4, 5, 6, 9, 12] {
            let predicted = sensitivity.throughput(Some(family), 1, cpus) / sensitivity.throughput(Some(family), 1, 3);
            let actual = truth.cpu_factor(&jt, 1, cpus, 3);
            if (predicted - 1.0).abs() > 1e-3 || (actual - 1.0).abs() > 1e-3 {
                compared += 1;
                if (predicted - actual).abs() > 1e-3 {
                    differs += 1;
                }
            }
        }
    }
    assert!(compared > 50 && differs * 4 > compared * 3, "without per-job noise, only {differs} of {compared} CPU factors differ: the planner reads the truth's function");
    // A GPU kept busier by more CPUs draws more power, up to its limit; a starved one less.
    let p = truth.power_at_speed_w(150.0, 1.2, 250.0);
    assert!((p - (41.0 + 109.0 * 1.2)).abs() < 1e-9, "{p}");
    assert_eq!(truth.power_at_speed_w(240.0, 1.5, 250.0), 250.0);
    assert!(truth.power_at_speed_w(150.0, 0.5, 250.0) < 150.0);
}

#[test]
fn observations_are_noisy_by_default() {
    let spec = ClusterSpec::default();
    assert!(spec.truth.observation_noise > 0.0 && spec.truth.cpu_sensitivity_noise > 0.0);
    assert_eq!(spec.truth.colocation, Colocation::Physical);
}

#[test]
fn gpu_scaling_truth_is_gavels_measurement_of_types_the_planner_never_saw() {
    let (truth, _) = load();
    let scaling = truth.planner_scaling(&data_dir()).expect("gavel loads").expect("a scaling fit");
    let sim = load_gavel(&data_dir().join("gavel").join("simulation_throughputs.json")).expect("gavel");
    let phys = load_gavel(&data_dir().join("gavel").join("physical_cluster_throughputs.json")).expect("gavel");
    // The planner's curves come from its half only.
    assert_eq!(Some(&scaling), ScalingModel::from_gavel(&sim.retain_job_types(|t| !truth.split().truth_type(t)), "v100").as_ref());
    assert_ne!(Some(&scaling), ScalingModel::from_gavel(&sim, "v100").as_ref(), "the planner must not see the truth's types");
    let mut rng = Rng::new(13);
    let (mut compared, mut differs, mut measured) = (0, 0, 0);
    for _ in 0..300 {
        let jt = truth.assign(None, &mut rng);
        for g in [2, 4, 8] {
            let actual = truth.speedup(&jt, g);
            // Where Gavel measured the exact type, the truth is that measurement.
            if let Some(m) = measured_speedup(&phys, "v100", &jt.job_type, g) {
                assert_eq!(actual, m);
                measured += 1;
            }
            compared += 1;
            if (actual - scaling.speedup(Some(gavel_family(&jt.job_type)), g)).abs() > 1e-6 {
                differs += 1;
            }
        }
    }
    assert!(measured > 100 && differs * 10 > compared * 8, "{differs} of {compared} speedups differ from the planner's ({measured} measured)");
}

/// Mean absolute error of the planner's clock predictions (time ratio to the highest limit, and
/// relative power) against every held-out Zeus sweep, at every step of its clock ladder; with
/// `by_network` false, as if the planner did not know the job's network (its generic curve).
fn clock_errors(truth: &Truth, pred: &Predictor, by_network: bool) -> (f64, f64, f64, usize) {
    let curves = pred.curves("v100").expect("v100 curves");
    let (mut n, mut time_err, mut time_max, mut power_err) = (0usize, 0.0, 0.0_f64, 0.0);
    for (i, sweep) in truth.all_sweeps().iter().enumerate().filter(|(_, s)| truth.split().truth_sweep(s)) {
        let jt = JobTruth { job_type: String::new(), sweep: i, synergy_model: None, cpu_gain: 1.0 };
        for (step, c) in curves.ladder.iter().enumerate() {
            let (true_ratio, true_w) = truth.alone(&jt, c.power_limit_w);
            let p = pred.predict_class("v100", 250.0, by_network.then_some(sweep.network.as_str()), step);
            time_err += (p.time_ratio - true_ratio).abs();
            time_max = time_max.max((p.time_ratio - true_ratio).abs());
            power_err += ((p.power_w - true_w) / true_w).abs();
            n += 1;
        }
    }
    (time_err / n as f64, time_max, power_err / n as f64, n)
}

#[test]
fn clock_prediction_error_on_held_out_sweeps_is_bounded() {
    let (truth, pred) = load();
    let (time_mae, time_max, power_mae, n) = clock_errors(&truth, &pred, true);
    let (generic_time, _, generic_power, _) = clock_errors(&truth, &pred, false);
    eprintln!("clock: {n} (held-out sweep, step) points, slowdown MAE {time_mae:.4} (max {time_max:.4}), relative power MAE {power_mae:.4}; generic curve {generic_time:.4} and {generic_power:.4}");
    assert!(n > 50, "{n} points");
    assert!(time_mae < TIME_MAE_BOUND, "slowdown MAE {time_mae}");
    assert!(power_mae < POWER_MAE_BOUND, "relative power MAE {power_mae}");
    // The bounds see a worse planner: without the network, the generic curve errs more.
    assert!(generic_time > time_mae && generic_power > power_mae, "{generic_time} {generic_power}");
}

/// The planner's predicted CPU factor (its fitted curve, relative to the proportional share)
/// against the truth's measured profile (each job's own factor left at 1) at the CPU levels the
/// fit never saw (2, 4, 6 and 12 CPUs per GPU), for 1-, 4- and 8-GPU jobs of every family with
/// a Synergy profile: (mean absolute error over 1-GPU jobs, over multi-GPU jobs, points).
fn cpu_errors(truth: &Truth, pred: &Predictor) -> (f64, f64, usize) {
    let sensitivity = pred.sensitivity.as_ref().expect("synergy data");
    let families = ["ResNet-18", "ResNet-50", "Transformer", "LM", "CycleGAN", "A3C", "ShuffleNet", "MobileNet", "GNMT", "AlexNet", "DeepSpeech"];
    let (mut single, mut multi, mut n_single, mut n_multi) = (0.0, 0.0, 0usize, 0usize);
    for family in families {
        let model = synergy_model(family).expect("a Synergy model");
        let jt = JobTruth { job_type: family.to_string(), sweep: 0, synergy_model: Some(model), cpu_gain: 1.0 };
        for gpus in [1u32, 4, 8] {
            for per_gpu in [2u32, 4, 6, 12] {
                let cpus = per_gpu * gpus;
                let predicted = sensitivity.throughput(Some(family), gpus, cpus) / sensitivity.throughput(Some(family), gpus, 3 * gpus);
                let err = (predicted - truth.cpu_factor(&jt, gpus, cpus, 3 * gpus)).abs();
                if gpus == 1 {
                    single += err;
                    n_single += 1;
                } else {
                    multi += err;
                    n_multi += 1;
                }
            }
        }
    }
    (single / n_single as f64, multi / n_multi as f64, n_single + n_multi)
}

#[test]
fn cpu_prediction_error_on_held_out_levels_is_bounded() {
    let (truth, pred) = load();
    let (single, multi, n) = cpu_errors(&truth, &pred);
    eprintln!("CPU: {n} points, MAE {single:.4} on 1-GPU jobs, {multi:.4} on 4- and 8-GPU jobs");
    assert!(single < CPU_SINGLE_BOUND, "1-GPU MAE {single}");
    assert!(multi < CPU_MULTI_BOUND, "multi-GPU MAE {multi}");
}

/// Leave-one-network-out bounds at the slowdown bound `energy` runs (1.10), on each network's
/// held-out sweeps at the clock the planner would choose. Derivation: the slowdown budget is
/// 0.10, so over the networks a left-out network's mean slowdown error must stay within it
/// (measured 0.084), and no single network may err by more than 2.5 budgets (BERT measured 0.181:
/// predicted 1.052, true 1.233); the GPU energy relative to the default clock within 0.10 on
/// average (measured 0.062) and 0.20 per network (NCF measured 0.150).
const LONO_BOUND: f64 = 1.10;
const LONO_SLOWDOWN_MEAN: f64 = 0.10;
const LONO_SLOWDOWN_NETWORK: f64 = 0.25;
const LONO_ENERGY_MEAN: f64 = 0.10;
const LONO_ENERGY_NETWORK: f64 = 0.20;

/// The planner's clock fit, as the simulator builds it.
fn fit_clocks(sweeps: &[ZeusSweep]) -> Option<GpuCurves> {
    GpuCurves::fit("v100", sweeps, 1530)
}

/// A deliberately bad clock fit: the real one with every curve predicting no slowdown at any
/// clock (so it picks the lowest-power step, whatever the job).
fn fit_clocks_blind(sweeps: &[ZeusSweep]) -> Option<GpuCurves> {
    let mut c = fit_clocks(sweeps)?;
    c.generic.beta = 0.0;
    for p in c.classes.values_mut() {
        p.beta = 0.0;
    }
    Some(c)
}

/// Print one table row per network: in-distribution and leave-one-network-out side by side.
fn print_clock_table(bound: f64, known: &[ClockError], lono: &[ClockError]) {
    eprintln!("clock, bound {bound:.2}: | network | sweeps | known: predicted / true slowdown | slowdown MAE (max) | energy MAE (max) | left out: predicted / true slowdown | slowdown MAE (max) | energy MAE (max) |");
    for (k, l) in known.iter().zip(lono) {
        eprintln!(
            "| {} | {} | {:.3} / {:.3} | {:.3} ({:.3}) | {:.3} ({:.3}) | {:.3} / {:.3} | {:.3} ({:.3}) | {:.3} ({:.3}) |",
            k.network, k.sweeps, k.predicted_slowdown, k.true_slowdown, k.slowdown_mae, k.slowdown_max, k.energy_mae, k.energy_max, l.predicted_slowdown, l.true_slowdown, l.slowdown_mae, l.slowdown_max, l.energy_mae, l.energy_max
        );
    }
    let (ks, ke, ls, le) = (loo::mean_of(known, |e| e.slowdown_mae), loo::mean_of(known, |e| e.energy_mae), loo::mean_of(lono, |e| e.slowdown_mae), loo::mean_of(lono, |e| e.energy_mae));
    eprintln!("clock, bound {bound:.2}: mean over networks: known slowdown MAE {ks:.3}, energy MAE {ke:.3}; left out slowdown MAE {ls:.3}, energy MAE {le:.3}");
}

/// The leave-one-network-out bounds (`LONO_*`) on a table of errors.
fn check_lono_clock(rows: &[ClockError]) -> Result<(), String> {
    if rows.len() < 5 {
        return Err(format!("only {} networks scored", rows.len()));
    }
    let (slowdown, energy) = (loo::mean_of(rows, |e| e.slowdown_mae), loo::mean_of(rows, |e| e.energy_mae));
    if slowdown >= LONO_SLOWDOWN_MEAN || energy >= LONO_ENERGY_MEAN {
        return Err(format!("mean over networks: slowdown MAE {slowdown:.3}, energy MAE {energy:.3}"));
    }
    match rows.iter().find(|e| e.slowdown_mae >= LONO_SLOWDOWN_NETWORK || e.energy_mae >= LONO_ENERGY_NETWORK) {
        Some(e) => Err(format!("{}: slowdown MAE {:.3}, energy MAE {:.3}", e.network, e.slowdown_mae, e.energy_mae)),
        None => Ok(()),
    }
}

#[test]
fn leave_one_network_out_clock_error_is_bounded() {
    let (truth, _) = load();
    for bound in [1.05, 1.10, 1.20] {
        let known = loo::clock_errors(&truth, &fit_clocks, bound, false);
        let lono = loo::clock_errors(&truth, &fit_clocks, bound, true);
        print_clock_table(bound, &known, &lono);
    }
    let lono = loo::clock_errors(&truth, &fit_clocks, LONO_BOUND, true);
    if let Err(e) = check_lono_clock(&lono) {
        panic!("leave-one-network-out at {LONO_BOUND}: {e}");
    }
    // The bounds see a bad predictor: one blind to clocks fails them, left out or not.
    for leave_out in [true, false] {
        let blind = loo::clock_errors(&truth, &fit_clocks_blind, LONO_BOUND, leave_out);
        let verdict = check_lono_clock(&blind);
        eprintln!("blind clock fit (leave out: {leave_out}): {verdict:?}");
        assert!(verdict.is_err(), "a fit that predicts no slowdown passes the bounds");
    }
}

#[test]
fn leave_one_model_out_cpu_error_is_bounded() {
    let (truth, _) = load();
    let table = loo::load_cpu_table(&data_dir()).expect("synergy");
    let known = loo::cpu_errors(&truth, &table, &SensitivityModel::new, false);
    let lono = loo::cpu_errors(&truth, &table, &SensitivityModel::new, true);
    eprintln!("cpu: | model | points | known: range MAE (max) | chosen MAE (max) | left out: range MAE (max) | chosen MAE (max) |");
    for (k, l) in known.iter().zip(&lono) {
        eprintln!("| {} | {} | {:.3} ({:.3}) | {:.3} ({:.3}) | {:.3} ({:.3}) | {:.3} ({:.3}) |", k.model, k.points, k.range_mae, k.range_max, k.chosen_mae, k.chosen_max, l.range_mae, l.range_max, l.chosen_mae, l.chosen_max);
    }
    // Where the chosen-count error comes from (docs/results.md, "Leave-one-network-out").
    let sens = SensitivityModel::new(table.clone());
    for family in loo::CPU_FAMILIES {
        let jt = JobTruth { job_type: family.to_string(), sweep: 0, synergy_model: synergy_model(family), cpu_gain: 1.0 };
        for gpus in loo::CPU_GPUS {
            let request = 3 * gpus;
            let (cpus, t) = sens.choose_cpus(Some(family), gpus, request / 2, 3 * request, request);
            eprintln!("cpu: {family} on {gpus} GPUs: chosen {cpus} CPUs ({:.2} per GPU), predicted {:.3}, true {:.3}", cpus as f64 / gpus as f64, t / sens.throughput(Some(family), gpus, request), truth.cpu_factor(&jt, gpus, cpus, request));
        }
    }
    let (known_range, lono_range) = (loo::mean_of(&known, |e| e.range_mae), loo::mean_of(&lono, |e| e.range_mae));
    eprintln!("cpu: mean over models: known range MAE {known_range:.3}, chosen MAE {:.3}; left out range MAE {lono_range:.3}", loo::mean_of(&known, |e| e.chosen_mae));
    assert_eq!(known.len(), loo::CPU_FAMILIES.len());
    // A model left out is unknown to the planner: it keeps the job's request, so no CPU
    // decision rests on a prediction for a workload it has no profile of (fails if a fallback
    // starts guessing); its error over the range is then that of predicting "insensitive".
    for e in &lono {
        assert!(e.chosen_max < 1e-9, "{}: the planner changed the CPUs of a model it never saw (error {:.3})", e.model, e.chosen_max);
    }
    // Where it knows the model, the fit must beat predicting "insensitive" (the left-out
    // prediction) by a margin over the CPU counts it may choose: measured 0.100 against 0.214.
    // A fit of no data (every model unknown) is that insensitive predictor and fails.
    assert!(known_range < CPU_RANGE_BOUND, "in-distribution CPU range MAE {known_range}");
    let blind = loo::mean_of(&loo::cpu_errors(&truth, &table, &|_| SensitivityModel::new(SynergyTable::default()), false), |e| e.range_mae);
    assert!((blind - lono_range).abs() < 1e-9 && blind >= CPU_RANGE_BOUND, "an insensitive predictor errs {blind}, left out {lono_range}");
}
