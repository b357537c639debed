//! The fitted GPU clock/power model against the measured figures of `shared/data/README.md`.
//!
//! Tolerances: the model is fitted per workload class over all its sweeps, so a single sweep is
//! reproduced within 0.05 (time ratio and energy ratio); the median saving of the
//! energy-optimal setting over all V100 sweeps within 3 percentage points of the measured 22.6 %.

use model::data::default_data_dir;
use model::data::zeus::{load_zeus, zeus_sweeps};
use model::perf_power::{GpuCurves, fit_sweep};

fn v100() -> (Vec<model::data::zeus::ZeusSweep>, GpuCurves) {
    let rows = load_zeus(&default_data_dir().join("zeus/summary_power_v100.csv")).expect("zeus data");
    let sweeps = zeus_sweeps(&rows);
    let curves = GpuCurves::fit("v100", &sweeps, 1530).expect("fit");
    (sweeps, curves)
}

fn step_at(curves: &GpuCurves, limit_w: f64) -> usize {
    curves.ladder.iter().position(|s| (s.power_limit_w - limit_w).abs() < 0.5).expect("ladder step")
}

#[test]
fn the_ladder_rises_to_the_default_clock() {
    let (_, c) = v100();
    assert!(c.ladder.len() >= 5, "{:?}", c.ladder);
    assert!(c.ladder.windows(2).all(|w| w[0].clock_mhz < w[1].clock_mhz));
    assert_eq!(c.ladder.last().map(|s| s.clock_mhz), Some(1530));
}

#[test]
fn resnet50_at_150w_takes_1_18x_as_long_for_0_77x_the_energy() {
    let (sweeps, c) = v100();
    let sweep = sweeps.iter().find(|s| s.network == "resnet50" && s.batch_size == 256).expect("ResNet-50 b256");
    let step = step_at(&c, 150.0);
    let frac = c.ladder[step].clock_frac;
    // The sweep's own fit.
    let own = fit_sweep(sweep, &c.ladder).expect("fit");
    assert!((own.time_ratio(frac) - 1.18).abs() < 0.05, "time ratio {}", own.time_ratio(frac));
    assert!((own.energy_ratio(frac) - 0.77).abs() < 0.05, "energy ratio {}", own.energy_ratio(frac));
    // The class curve the planner uses for a job tagged ResNet-50.
    let p = c.predict(Some("resnet50"), step);
    let full = c.predict(Some("resnet50"), c.default_step());
    let energy = p.time_ratio * p.power_w / (full.time_ratio * full.power_w);
    assert!((p.time_ratio - 1.18).abs() < 0.05, "class time ratio {}", p.time_ratio);
    assert!((energy - 0.77).abs() < 0.05, "class energy ratio {energy}");
}

#[test]
fn the_energy_optimal_setting_saves_a_median_22_6_percent() {
    let (sweeps, c) = v100();
    let mut savings: Vec<f64> = sweeps
        .iter()
        .filter_map(|s| {
            let p = fit_sweep(s, &c.ladder)?;
            let best = c.ladder.iter().map(|st| p.energy_ratio(st.clock_frac)).fold(f64::INFINITY, f64::min);
            Some(1.0 - best)
        })
        .collect();
    savings.sort_by(f64::total_cmp);
    let median = savings[savings.len() / 2];
    assert!((median - 0.226).abs() < 0.03, "median predicted saving {median}");
}
