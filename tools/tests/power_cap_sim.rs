//! The cluster power cap in the simulator (docs/power-cap.md, "In the simulator"): on a small
//! synthetic trace that fills the cluster, a cap below its draw for one hour is met by lowering
//! the running jobs' clocks (model::power_directive, as sched/energy does), no job is lost, and
//! the clocks come back when the cap is lifted.

use std::path::{Path, PathBuf};

use model::power_cap::CapSchedule;
use tools::sim::Workload;
use tools::sim::metrics::RunResult;
use tools::sim::policies::{Policy, Setup};
use tools::sim::power_cap::{CapSample, SimPowerCap};
use tools::sim::spec::ClusterSpec;

fn data_dir() -> PathBuf {
    std::env::var_os("SLURM_ENERGY_DATA").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")))
}

/// 1 January 2020 00:00 UTC: simulated time 0 of a trace without dates.
const EPOCH_UNIX_S: i64 = 1_577_836_800;
/// The cap holds from 1 h to 2 h.
const CAP_FROM_S: f64 = 3600.0;
const CAP_UNTIL_S: f64 = 7200.0;
/// The bound this test states: after TIME_TO_COMPLY_S from the cap's start the truth's GPU power
/// stays within EXCESS_BOUND of the cap.
const TIME_TO_COMPLY_S: f64 = 60.0;
const EXCESS_BOUND: f64 = 0.02;

/// 4 nodes x 8 V100; every job `efficiency` (slowdown bound 1.5), exclusive, at the default
/// clock (no clock scaling), no deferral, no carbon signal: a cluster full of jobs the cap may
/// slow.
fn spec() -> ClusterSpec {
    let mut s = ClusterSpec::load(None).expect("default spec");
    s.cluster.nodes = 4;
    s.hints.performance = 0.0;
    s.hints.efficiency = 1.0;
    s.hints.share_allowed = 0.0;
    s.hints.deferrable = 0.0;
    s.carbon.file = String::new();
    s.planner.clock_scaling = false;
    s.planner.carbon_deferral = false;
    s.planner.carbon_aware_clocks = false;
    s.planner.hints.efficiency_max_slowdown = 1.5;
    s.time_limits.overestimate_min = 2.0;
    s.time_limits.overestimate_max = 3.0;
    s
}

/// 32 one-GPU jobs of 4 h submitted at once (the cluster is full until they end), then 8 more
/// that wait for them.
fn trace(dir: &Path) -> PathBuf {
    let path = dir.join("trace.csv");
    let mut text = String::from("submit_time_s,duration_s,num_gpus\n");
    for k in 0..32 {
        text.push_str(&format!("{},{},1\n", k, 4 * 3600 + 60 * k));
    }
    for k in 0..8 {
        text.push_str(&format!("{},{},1\n", 600 + k, 1800));
    }
    std::fs::write(&path, text).expect("trace written");
    path
}

fn workload(dir: &Path) -> Workload {
    Workload::load(spec(), &data_dir(), &trace(dir), None, None, 3).expect("workload loads")
}

fn run(w: &mut Workload, cap_file: Option<&str>) -> RunResult {
    w.power_cap = cap_file.map(|text| SimPowerCap { schedule: Some(CapSchedule::parse(text).expect("cap parses")), epoch_unix_s: EPOCH_UNIX_S });
    let setup = Setup::for_policy(Policy::Energy, &w.spec).expect("energy setup");
    w.run_one(&setup, |_| {})
}

/// The truth's GPU power at `t_s` in a run's timeline (the last sample at or before it).
fn gpu_at(timeline: &[CapSample], t_s: f64) -> f64 {
    timeline.iter().take_while(|s| s.t_s <= t_s).last().expect("a sample before").gpu_w
}

/// The uncapped draw in the window, from a run under a cap no cluster reaches (1 TW: the rule
/// never acts, the run is the uncapped one), and the cap 15 % below its lowest point.
fn uncapped_and_cap(w: &mut Workload) -> (RunResult, f64) {
    let free = run(w, Some("1e12\n"));
    let lowest_w = free.power_cap_timeline.iter().filter(|s| s.t_s >= CAP_FROM_S && s.t_s <= CAP_UNTIL_S).map(|s| s.gpu_w).fold(gpu_at(&free.power_cap_timeline, CAP_FROM_S), f64::min);
    (free, (0.85 * lowest_w).round())
}

fn cap_file(cap_w: f64) -> String {
    format!("2020-01-01T01:00:00Z,{cap_w}\n2020-01-01T02:00:00Z,none\n")
}

#[test]
fn an_unreachable_cap_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut w = workload(dir.path());
    let plain = run(&mut w, None);
    let (free, _) = uncapped_and_cap(&mut w);
    assert!(plain.power_cap_timeline.is_empty() && plain.metrics.power_cap_over_s.is_none(), "an uncapped run has no cap figures");
    let ends = |r: &RunResult| r.jobs.iter().map(|j| (j.job, j.end_s.to_bits())).collect::<Vec<_>>();
    assert_eq!(ends(&plain), ends(&free));
    assert_eq!(plain.metrics.energy_kwh.to_bits(), free.metrics.energy_kwh.to_bits());
    assert_eq!(free.metrics.power_cap_ceiling_changes, Some(0));
}

#[test]
fn a_cap_below_the_draw_is_met_and_lifted_without_losing_a_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut w = workload(dir.path());
    let (free, cap_w) = uncapped_and_cap(&mut w);
    assert!(gpu_at(&free.power_cap_timeline, CAP_FROM_S) > cap_w * 1.1, "the uncapped draw is well over the cap");
    let capped = run(&mut w, Some(&cap_file(cap_w)));
    let t = &capped.power_cap_timeline;
    // The engine did not ignore the cap: it set ceilings, and within the stated time the truth's
    // GPU power is under the cap (plus the stated bound) for the rest of the window.
    let m = &capped.metrics;
    assert!(m.power_cap_ceiling_changes.unwrap_or(0) > 0, "ceilings set");
    assert!((m.power_cap_in_force_s.unwrap_or(0.0) - 3600.0).abs() < 1e-6, "{:?}", m.power_cap_in_force_s);
    let longest = m.power_cap_longest_over_s.unwrap_or(f64::INFINITY);
    assert!(longest <= TIME_TO_COMPLY_S, "over the cap for {longest} s at a stretch");
    for s in t.iter().filter(|s| s.t_s >= CAP_FROM_S + TIME_TO_COMPLY_S && s.t_s < CAP_UNTIL_S) {
        assert!(s.gpu_w <= cap_w * (1.0 + EXCESS_BOUND), "{s:?} over the cap {cap_w} W");
    }
    let during = t.iter().rfind(|s| s.t_s < CAP_UNTIL_S).expect("a sample under the cap");
    assert!(during.ceilings > 0 && !during.unmet, "{during:?}");
    // Lifted: no ceiling remains and the same jobs draw what they drew uncapped.
    let after = t.iter().find(|s| s.t_s >= CAP_UNTIL_S).expect("a sample at the lift");
    assert_eq!(after.ceilings, 0, "{after:?}");
    let free_after = gpu_at(&free.power_cap_timeline, CAP_UNTIL_S);
    assert!((after.gpu_w - free_after).abs() < 1e-6 * free_after, "clocks back: {} W against {free_after} W uncapped", after.gpu_w);
    // No job lost or killed for the cap: every job ends, none at its time limit, and the slowed
    // ones had their limits extended.
    assert_eq!(m.jobs, 40);
    assert_eq!(m.killed_at_time_limit, 0);
    assert_eq!(m.power_cap_killed_after_ceiling, Some(0));
    assert!(m.power_cap_limit_extensions.unwrap_or(0) > 0);
    // The cap costs time: the mean JCT grows.
    assert!(m.mean_jct_s > free.metrics.mean_jct_s, "{} vs {}", m.mean_jct_s, free.metrics.mean_jct_s);
}

/// Time limits 2 % above the jobs' runs (to the minute), and the cap 15 % below the draw from
/// 1 h to the end: the jobs run most of their time under ceilings, and a job the truth (its
/// drawn Zeus sweep) slows more than its class's predicted slowdown plus 2 % reaches a limit
/// extended by the prediction alone. Extended by the step's worst case, none is killed.
#[test]
fn a_job_the_truth_slows_more_than_predicted_is_not_killed_for_the_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut tight = spec();
    tight.time_limits.overestimate_min = 1.02;
    tight.time_limits.overestimate_max = 1.02;
    tight.time_limits.round_up_to_s = (1..=24 * 60).map(|m| f64::from(m) * 60.0).collect();
    let mut w = Workload::load(tight, &data_dir(), &trace(dir.path()), None, None, 3).expect("workload loads");
    let (free, cap_w) = uncapped_and_cap(&mut w);
    assert_eq!(free.metrics.killed_at_time_limit, 0, "uncapped, every job ends within its limit");
    let capped = run(&mut w, Some(&format!("2020-01-01T01:00:00Z,{cap_w}\n")));
    let m = &capped.metrics;
    assert!(m.power_cap_ceiling_changes.unwrap_or(0) > 0 && m.power_cap_limit_extensions.unwrap_or(0) > 0, "{m:?}");
    assert_eq!(m.jobs, 40);
    assert_eq!(m.power_cap_killed_after_ceiling, Some(0), "jobs killed at a limit extended for a ceiling");
    assert_eq!(m.power_cap_killed_for_cap, Some(0));
    assert_eq!(m.killed_at_time_limit, 0);
}

#[test]
fn a_static_cap_in_the_spec_is_run_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut w = workload(dir.path());
    let (free, cap_w) = uncapped_and_cap(&mut w);
    w.spec.planner.power_cap_w = cap_w;
    let capped = run(&mut w, None);
    let m = &capped.metrics;
    assert!(m.power_cap_ceiling_changes.unwrap_or(0) > 0 || m.power_cap_over_s == Some(0.0), "{m:?}");
    assert!(m.power_cap_longest_over_s.unwrap_or(f64::INFINITY) <= TIME_TO_COMPLY_S, "{m:?}");
    assert!(m.peak_gpu_power_w.unwrap_or(f64::INFINITY) <= cap_w * (1.0 + EXCESS_BOUND), "{m:?}");
    assert_eq!(m.jobs, 40);
    assert!(free.metrics.peak_gpu_power_w.unwrap_or(0.0) > cap_w);
}

#[test]
fn a_bad_cap_file_is_named_with_its_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cap = dir.path().join("cap");
    std::fs::write(&cap, "2020-01-01T01:00:00Z,1000\n2020-01-01T00:00:00Z,500\n").expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_slurm-energy"))
        .args(["simulate", "--policies", "energy", "--jobs", "10", "--power-cap"])
        .arg(&cap)
        .arg("--data")
        .arg(data_dir())
        .output()
        .expect("run slurm-energy");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:2:", cap.display())) && err.contains("time order"), "{err}");
}
