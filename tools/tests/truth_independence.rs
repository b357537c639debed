//! The simulator's ground truth is independent of the planner's predictions (issue 11): every
//! prediction is scored against data it was not fitted on, and no truth is the planner's own
//! function. Each test fails if a prediction and its truth come from the same data or the same
//! function.

use std::path::PathBuf;

use model::data::gavel::load_gavel;
use model::data::zeus::ZeusSweep;
use model::elastic::{ScalingModel, measured_speedup};
use model::interference::InterferenceModel;
use model::perf_power::GpuCurves;
use model::predictor::Predictor;
use model::workloads::{gavel_family, zeus_network};
use tools::sim::rng::Rng;
use tools::sim::spec::{ClusterSpec, Colocation};
use tools::sim::truth::Truth;

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
