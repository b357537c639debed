//! The `union` comparator (issue 23: PowerFlow + Synergy's CPUs + EaCO's sharing, stacked)
//! really runs each of the three mechanisms it stacks, on the first 1,500 jobs of the Philly
//! trace: it starts jobs on a shared GPU (EaCO), on more or fewer GPUs than requested
//! (PowerFlow's elastic counts) and on other CPUs than requested (Synergy). Each counter is
//! checked against the same run with that one mechanism switched off, where it must be 0, so
//! each assertion depends on its mechanism and nothing else.

use std::path::PathBuf;

use tools::sim::metrics::Metrics;
use tools::sim::policies::{Policy, Setup};
use tools::sim::spec::ClusterSpec;
use tools::sim::Workload;

fn data_dir() -> PathBuf {
    std::env::var_os("SLURM_ENERGY_DATA").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")))
}

fn run(w: &Workload, change: impl Fn(&mut Setup)) -> Metrics {
    let mut setup = Setup::for_policy(Policy::Union, &w.spec).expect("union is a planner policy");
    change(&mut setup);
    w.run_one(&setup, |_| {}).metrics
}

#[test]
fn union_shares_resizes_gpu_counts_and_chooses_cpus_and_each_needs_its_mechanism() {
    let data = data_dir();
    let trace = data.join("traces").join("philly.csv");
    let w = Workload::load(ClusterSpec::load(None).expect("default spec"), &data, &trace, None, Some(1500), 1).expect("workload loads");

    let union = run(&w, |_| {});
    assert_eq!(union.jobs, 1500, "every job finishes or is accounted for");
    assert!(union.shared_starts > 0, "EaCO's sharing: {union:?}");
    assert!(union.grown_starts + union.shrunk_starts > 0, "PowerFlow's elastic counts: {union:?}");
    assert!(union.cpu_resized_starts > 0, "Synergy's CPUs: {union:?}");

    let no_sharing = run(&w, |s| s.planner.sharing = false);
    assert_eq!(no_sharing.shared_starts, 0);
    assert!(no_sharing.grown_starts + no_sharing.shrunk_starts > 0 && no_sharing.cpu_resized_starts > 0);

    let no_elastic = run(&w, |s| s.elastic = None);
    assert_eq!(no_elastic.grown_starts + no_elastic.shrunk_starts, 0);
    assert!(no_elastic.shared_starts > 0 && no_elastic.cpu_resized_starts > 0);

    let no_synergy = run(&w, |s| s.planner.cpu_by_sensitivity = false);
    assert_eq!(no_synergy.cpu_resized_starts, 0);
    assert!(no_synergy.shared_starts > 0 && no_synergy.grown_starts + no_synergy.shrunk_starts > 0);

    // PowerFlow's clock rule: lower clocks than without it.
    let no_clocks = run(&w, |s| s.planner.clock_scaling = false);
    assert!(no_clocks.mean_clock_mhz > union.mean_clock_mhz, "{} vs {}", no_clocks.mean_clock_mhz, union.mean_clock_mhz);
}

/// `energy` − `union` is what integration adds only if `union`'s PowerFlow part is `powerflow`:
/// without sharing and Synergy's CPUs, `union` is `powerflow`, run for run.
#[test]
fn union_without_sharing_and_cpus_is_powerflow() {
    let data = data_dir();
    let trace = data.join("traces").join("philly.csv");
    let w = Workload::load(ClusterSpec::load(None).expect("default spec"), &data, &trace, None, Some(800), 2).expect("workload loads");
    let stripped = run(&w, |s| {
        s.planner.sharing = false;
        s.planner.cpu_by_sensitivity = false;
    });
    let powerflow = w.run_one(&Setup::for_policy(Policy::Powerflow, &w.spec).expect("powerflow"), |_| {}).metrics;
    assert_eq!(stripped.energy_kwh, powerflow.energy_kwh);
    assert_eq!(stripped.mean_jct_s, powerflow.mean_jct_s);
    assert_eq!((stripped.grown_starts, stripped.shrunk_starts), (powerflow.grown_starts, powerflow.shrunk_starts));
}
