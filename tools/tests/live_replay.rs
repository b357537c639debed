//! The CI-sized replay (`slurm-energy replay` runs the full one, docs/replay.md): a few dozen
//! compressed Philly jobs on the live local cluster under sched/backfill and under sched/energy,
//! each job running the truth-following workload on its fake GPUs, and the simulator on the same
//! jobs. Passes when the live and the simulated ratios energy/backfill (GPU energy, mean JCT)
//! agree within the tolerance stated in `tools::replay::TOLERANCE`.

use model::data::default_data_dir;
use slurm_testcluster::skip_live_test;
use tools::demo::{build_plugins, default_project_dir};
use tools::replay::setup::Selection;
use tools::replay::{ReplayOptions, TOLERANCE, run_replay};

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn live_and_simulated_ratios_agree_on_a_small_replay() {
    if skip_live_test("live_and_simulated_ratios_agree_on_a_small_replay") {
        return;
    }
    let exe_test = std::env::current_exe().expect("test binary path");
    let target = exe_test.ancestors().nth(3).expect("target dir");
    let plugins = build_plugins(&default_project_dir(), None, false, Some(&target.join("plugin-builds"))).unwrap_or_else(|e| panic!("{e}"));
    assert!(plugins.gpu.is_some(), "the replay needs gpu_nvml.so, acct_gather_energy_nvml.so and the fake NVML");
    // The jobs run the `slurm-energy` binary cargo built for this test.
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_slurm-energy"));
    let data = default_data_dir();
    assert!(data.join("zeus").is_dir(), "measured data missing at {}", data.display());
    let data = std::fs::canonicalize(&data).unwrap_or(data);
    let opts = ReplayOptions {
        trace: data.join("traces").join("philly.csv"),
        data_dir: data,
        selection: Selection { jobs: 36, ..Selection::default() },
        seed: 1,
        scheds: vec!["sched/backfill".into(), "sched/energy".into()],
        sim_only: false,
        plugins: Some(plugins),
        exe,
        progress: false,
        tolerance: TOLERANCE,
    };
    let report = run_replay(&opts).unwrap_or_else(|e| panic!("the replay could not run: {e}"));
    println!("{}", report.table());
    let (live_b, live_e) = (report.live_backfill.as_ref().expect("live backfill"), report.live_energy.as_ref().expect("live energy"));
    // Every job ran to its end on both live runs, as in the simulator.
    assert_eq!(live_b.jobs_done, 36, "{}", report.table());
    assert_eq!(live_e.jobs_done, 36, "{}", report.table());
    assert!(live_b.other_states.is_empty() && live_e.other_states.is_empty(), "{}", report.table());
    let (ok_energy, ok_jct) = report.agreement().expect("both live runs");
    assert!(ok_energy, "GPU energy ratios differ by more than {}:\n{}", TOLERANCE.energy_ratio, report.table());
    assert!(ok_jct, "mean JCT ratios differ by more than {}:\n{}", TOLERANCE.jct_ratio, report.table());
}
