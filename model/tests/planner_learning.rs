//! The planner with what it learnt and with a site's carbon source: the same calls the
//! simulator and sched/energy make.

use model::carbon::CarbonSignal;
use model::carbon_source::IntensitySeries;
use model::config::PlannerConfig;
use model::decision::{Decision, recorded_field};
use model::history::FinishedJob;
use model::planner::plan_snapshot;
use model::predictor::Predictor;
use model::types::*;

fn v100() -> GpuType {
    GpuType { name: "v100".into(), default_clock_mhz: 1530, min_clock_mhz: 135, max_clock_mhz: 1530, idle_power_w: 41.0, max_power_w: 250.0 }
}

fn snapshot(now_s: f64, policy: EnergyPolicy, defer_max_s: f64) -> Snapshot {
    let hints = Hints { policy, max_slowdown: 1.3, share_allowed: false, defer_max_s, tag: Some("ResNet-18".into()) };
    Snapshot {
        now_s,
        node_sets: Vec::new(),
        reservations: Vec::new(),
        gpu_types: vec![v100()],
        nodes: vec![Node { name: "n0".into(), gpu_type: 0, gpus: 4, cpus: 40, mem_mb: 512 * 1024, power: PowerState::On, available: true }],
        running: Vec::new(),
        pending: vec![PendingJob {
            id: JobId(1),
            user: 1000,
            priority: 1,
            submit_time_s: now_s - 10.0,
            request: Request { nodes: 1, gpus_per_node: 2, cpus_per_node: 6, mem_mb_per_node: 2048 },
            time_limit_s: 3600.0,
            hints,
            cpus_range: None,
            eligible: Vec::new(),
            placed_by_slurm: false,
            alternative: false,
            no_reservation: false,
            slurm_may_spread: false,
        }],
    }
}

fn predictor() -> Predictor {
    Predictor::from_data_dir(&model::data::default_data_dir(), "v100").expect("reference data")
}

#[test]
fn history_changes_the_prediction_and_the_record_says_so() {
    let mut pred = predictor();
    let s = snapshot(100.0, EnergyPolicy::Balanced, 0.0);
    let cfg = PlannerConfig::default();
    let before = plan_snapshot(&s, &cfg, &pred).starts().next().cloned().expect("starts");
    assert_eq!(before.prediction, "prior");
    assert_eq!(recorded_field(&before.record(&["n0"]), "pred"), Some("prior"));

    // Three jobs of this user and tag ran 6 min of their hour, at 60 % of the predicted power.
    for _ in 0..3 {
        pred.runtime.observe_finished(&FinishedJob {
            user: 1000,
            tag: Some("ResNet-18"),
            runtime_s: 360.0,
            time_limit_s: 3600.0,
            gpus: 2,
            energy_j: Some(0.6 * before.predicted_power_w * 360.0),
            predicted_power_w: Some(before.predicted_power_w),
            clock_mhz: Some(before.clock_mhz),
        });
    }
    let after = plan_snapshot(&s, &cfg, &pred).starts().next().cloned().expect("starts");
    assert_eq!(after.prediction, "history:u1000/ResNet-18:n=3");
    assert_eq!(recorded_field(&after.record(&["n0"]), "pred"), Some("history:u1000/ResNet-18:n=3"));
    // Run time 0.3 of the limit instead of 0.5, power (3 * 0.6 + 1) / 4 = 0.7 of the model's.
    let ratio = after.predicted_energy_j / before.predicted_energy_j;
    assert!(ratio < 0.6, "energy prediction {} -> {} J", before.predicted_energy_j, after.predicted_energy_j);
    assert!((after.predicted_power_w / before.predicted_power_w - 0.7).abs() < 1e-6);
    // Another user is still predicted from the prior.
    let mut other = s.clone();
    other.pending[0].user = 1001;
    assert_eq!(plan_snapshot(&other, &cfg, &pred).starts().next().map(|d| d.prediction.clone()), Some("prior".into()));
}

#[test]
fn a_dirty_grid_now_and_a_clean_one_soon_defers_a_job_that_allows_it() {
    let now = 1_800_000_000.0;
    let t0 = now as i64 - 600;
    let series = IntensitySeries::from_points(&[(t0, 480.0), (t0 + 1800, 470.0), (t0 + 3600, 110.0), (t0 + 5400, 120.0)], None);
    let mut pred = predictor();
    let cfg = PlannerConfig::default();
    let s = snapshot(now, EnergyPolicy::Balanced, 2.0 * 3600.0);

    let without = plan_snapshot(&s, &cfg, &pred);
    assert_eq!(without.starts().count(), 1, "no carbon source: starts now");
    let baseline_clock = without.starts().next().map(|d| d.clock_mhz);

    pred.carbon = Some(CarbonSignal::published(series));
    let with = plan_snapshot(&s, &cfg, &pred);
    let defer = with.decisions.iter().find_map(|d| if let Decision::Defer(x) = d { Some(x.clone()) } else { None }).expect("deferred");
    assert_eq!(defer.until_s, (t0 + 3600) as f64);
    assert_eq!((defer.carbon_now_g_per_kwh, defer.carbon_forecast_g_per_kwh), (480.0, 110.0));
    assert_eq!(with.starts().count(), 0);

    // A job that may not wait starts, at a clock no higher than without the signal (the grid
    // is dirtier than the coming day's mean).
    let s = snapshot(now, EnergyPolicy::Balanced, 0.0);
    let started = plan_snapshot(&s, &cfg, &pred).starts().next().cloned().expect("starts");
    assert!(Some(started.clock_mhz) <= baseline_clock);
    assert!(started.score.carbon > 0.5, "dirty grid scored: {:?}", started.score);
}
