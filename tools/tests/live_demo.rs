//! `slurm-energy demo`'s core against real daemons: build the plugins with cargo, start the demo
//! cluster (sched/energy + spank_energy + gpu_nvml + acct_gather_energy/nvml over the fake NVML,
//! accounting), run a small workload with different hints, and check that every job completed,
//! ran where its decision record says, carries the policy it asked for, has GPU energy in sacct
//! and ran at a clock that follows its policy; then that the cluster is gone.
//!
//! The plugins are built (debug) into `<target>/plugin-builds` beside this test binary, so
//! `cargo test --workspace` on a fresh clone runs it; `tools/slurm-env.sh` is run only when
//! `SLURM_SRC_DIR` is not set. Skipped (with a printed reason) only when not root or when Slurm is
//! not installed.

use std::time::{Duration, Instant};

use slurm_testcluster::{pid_exists, skip_live_test};
use tools::demo::{DemoJob, DemoOptions, Plugins, default_project_dir, format_table, run_demo};

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn demo_runs_a_mixed_workload_and_every_job_has_a_decision_record() {
    if skip_live_test("demo_runs_a_mixed_workload_and_every_job_has_a_decision_record") {
        return;
    }
    let t0 = Instant::now();
    let exe = std::env::current_exe().expect("test binary path");
    // <target>/<profile>/deps/<test> -> <target>
    let target = exe.ancestors().nth(3).expect("target dir").join("plugin-builds");
    let workload = vec![
        DemoJob::new("perf", 4, 3, &["--energy-policy=performance"]),
        DemoJob::new("eff", 2, 2, &["--energy-policy=efficiency", "--energy-max-slowdown=1.5"]),
        DemoJob::new("share", 1, 2, &["--energy-policy=efficiency", "--energy-share=allow"]),
        DemoJob::new("plain", 1, 2, &[]),
        DemoJob::new("big", 4, 2, &["--energy-policy=balanced", "--energy-share=deny"]),
    ];
    let opts = DemoOptions {
        project_dir: default_project_dir(),
        install: std::env::var_os("SLURM_SRC_DIR").is_none(),
        plugins: Plugins::Build { release: false, target_dir: Some(target) },
        workload: workload.clone(),
        keep: false,
        timeout: Duration::from_secs(180),
        progress: false,
        data_dir: Some(model::data::default_data_dir()),
    };
    let report = run_demo(&opts).unwrap_or_else(|e| panic!("demo failed: {e}"));
    let table = format_table(&report.rows);
    println!("{table}");
    assert!(report.kept.is_none());
    assert_eq!(report.rows.len(), workload.len(), "{table}");
    let mut ids: Vec<u32> = report.rows.iter().map(|r| r.job_id).collect();
    ids.dedup();
    assert_eq!(ids.len(), workload.len(), "job ids repeat: {table}");
    for (row, job) in report.rows.iter().zip(&workload) {
        assert_eq!(&row.job, job, "rows in submission order");
        assert_eq!(row.state, "COMPLETED", "job {} ({}): {table}", row.job_id, job.name);
        assert!(row.decision.starts_with("energy:policy="), "job {} has no decision record: {table}", row.job_id);
        // The record names the node(s) the job ran on.
        assert!(!row.nodes.is_empty() && row.decision.contains(&format!("nodes={}", row.nodes)), "job {}: nodes {} vs record {}", row.job_id, row.nodes, row.decision);
        // The policy hint reached the planner (jobs without one get the configured default).
        let want = job.hints.iter().find_map(|h| h.strip_prefix("--energy-policy=")).unwrap_or("balanced");
        assert!(row.decision.contains(&format!("policy={want} ")), "job {} asked for {want}: {}", row.job_id, row.decision);
        assert!(row.elapsed.starts_with("00:"), "job {} elapsed {}", row.job_id, row.elapsed);
        // The node side is loaded: GPU energy from the fake NVML's counters, and the clock the
        // SPANK plugin applied before the script ran.
        let energy_j = row.energy_j.unwrap_or_else(|| panic!("job {} has no ConsumedEnergy: {table}", row.job_id));
        // At least idle power (41 W) on each GPU for the seconds the job slept.
        assert!(energy_j >= 41.0 * f64::from(job.gpus) * f64::from(job.sleep_s) * 0.9, "job {}: {energy_j} J: {table}", row.job_id);
        assert!(row.gpu_clock_mhz.is_some(), "job {} shows no GPU clock: {table}", row.job_id);
    }
    // The policy shows in the clocks: efficiency below performance (the fake's default is the
    // performance clock).
    let clock_of = |name: &str| report.rows.iter().find(|r| r.job.name == name).and_then(|r| r.gpu_clock_mhz).expect("clock");
    assert!(clock_of("eff") < clock_of("perf"), "efficiency {} MHz vs performance {} MHz: {table}", clock_of("eff"), clock_of("perf"));
    // Every line of the table is there, with the shortened decision.
    assert_eq!(table.lines().count(), workload.len() + 1, "{table}");
    assert!(table.lines().skip(1).all(|l| l.contains("policy=") && l.contains("COMPLETED")), "{table}");
    println!("demo test {:.1} s", t0.elapsed().as_secs_f64());
}

/// `--keep` hands back instructions naming live daemons; stopping them by those pids works.
/// (Cheap: reuses nothing of the test above, but only checks the kept cluster's text and pids.)
#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn kept_cluster_instructions_name_running_daemons() {
    if skip_live_test("kept_cluster_instructions_name_running_daemons") {
        return;
    }
    // Without accounting and plugins this is a plain sched/backfill cluster: only the hand-over
    // text and the pids are under test here.
    let cluster = slurm_testcluster::LocalCluster::start(slurm_testcluster::ClusterConfig {
        nodes: 1,
        with_accounting: false,
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    let pids = cluster.pids();
    let text = tools::demo::keep_text(&cluster, &[std::path::PathBuf::from("/nonexistent-plugins")]);
    for (_, pid) in &pids {
        assert!(pid_exists(*pid));
        assert!(text.contains(&pid.to_string()), "pid {pid} missing from:\n{text}");
    }
    assert!(text.contains(&format!("export SLURM_CONF={}", cluster.conf_path().display())), "{text}");
    cluster.stop().expect("stop");
    for (name, pid) in &pids {
        assert!(!pid_exists(*pid), "{name} ({pid}) still running after stop");
    }
}
