//! sched/energy inside a real slurmctld (3 nodes x 4 fake GPUs, on loopback):
//! the plugin loads, `sbatch --gres=gpu:N` jobs are started by it (slurmctld's own scheduler is
//! off with `sched_interval=-1`) and complete, `sacct` shows each job's decision record, and a
//! bad `energy.toml` stops slurmctld at start with a line naming file, line and key.
//!
//! Skipped (with a printed reason) only when not root or when Slurm is not installed.

use std::path::Path;
use std::time::{Duration, Instant};

use slurm_testcluster::{ClusterConfig, ClusterError, LocalCluster, skip_live_test};

mod common;
use common::plugin_dir;

const JOB_TIMEOUT: Duration = Duration::from_secs(90);

fn config(plugin_dir: &Path, energy_toml: &str, with_accounting: bool) -> ClusterConfig {
    ClusterConfig {
        nodes: 3,
        gpus_per_node: 4,
        plugin_dir: Some(plugin_dir.to_path_buf()),
        sched_type: "sched/energy".into(),
        scheduler_parameters: Some("sched_interval=-1,defer".into()),
        extra_files: vec![("energy.toml".into(), energy_toml.into())],
        with_accounting,
        ..ClusterConfig::default()
    }
}

/// Whether the cluster's slurmctld re-executes itself on `scontrol reconfigure` (24.11 and later)
/// instead of calling the plugins' reconfigure entry points.
fn reconfigure_reexecs() -> bool {
    let release = slurm_testcluster::slurm_release().unwrap_or_default();
    let mut parts = release.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (24, 11)
}

const GOOD_TOML: &str = "\
# energy.toml for the live test: short cycles, details in the log.
[sched]
interval_s = 1
debug = true

[planner]
reservation_depth = 2
";

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn sched_energy_starts_gpu_jobs_and_records_its_decisions() {
    if skip_live_test("sched_energy_starts_gpu_jobs_and_records_its_decisions") {
        return;
    }
    let t0 = Instant::now();
    let plugins = plugin_dir();
    let mut cluster = LocalCluster::start(config(plugins.path(), GOOD_TOML, true)).unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    let started_after = t0.elapsed();

    let log = cluster.slurmctld_log();
    assert!(log.contains("sched/energy: loaded configuration"), "no configuration line in slurmctld's log:\n{log}");
    assert!(log.contains("sched/energy: sched/energy loaded (Slurm "), "plugin did not report loading:\n{log}");
    assert!(!log.contains("lacks"), "spurious SchedulerParameters complaint:\n{log}");

    // More GPUs than the cluster has at once (2+2+2+1+4+4 = 15 > 12): some must wait for others.
    let mut jobs = Vec::new();
    for gres in ["gpu:2", "gpu:2", "gpu:2", "gpu:1", "gpu:4", "gpu:4"] {
        let job = cluster
            .sbatch(&[&format!("--gres={gres}"), "-t", "5", "--wrap", "echo GPUS=$CUDA_VISIBLE_DEVICES; sleep 2"], "")
            .unwrap_or_else(|e| panic!("sbatch: {e}"));
        jobs.push((job, gres));
    }
    let submitted = Instant::now();
    for &(job, _) in &jobs {
        let state = cluster.wait_job_done(job, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}\n{}", cluster.slurmctld_log()));
        assert_eq!(state, "COMPLETED", "job {job}:\n{}", cluster.job_output(job).unwrap_or_default());
    }
    let all_done = submitted.elapsed();

    for &(job, gres) in &jobs {
        cluster.wait_accounted(job, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
        let row = cluster.sacct(job, "JobID,State,AllocTRES,AdminComment").unwrap_or_else(|e| panic!("{e}"));
        println!("sacct: {row}");
        let fields: Vec<&str> = row.split('|').collect();
        assert_eq!(fields.get(1), Some(&"COMPLETED"), "{row}");
        let want = format!("gres/gpu={}", &gres[4..]);
        assert!(fields.get(2).is_some_and(|t| t.split(',').any(|x| x == want)), "job {job} AllocTRES: {row}");
        let record = fields.get(3).copied().unwrap_or_default();
        assert!(record.starts_with("energy:policy=balanced nodes=n"), "job {job} has no decision record: {row}");
        // The record names exactly the node the job ran on.
        let out = cluster.job_output(job).unwrap_or_default();
        assert!(out.contains("GPUS="), "job {job} output: {out}");
    }

    let log = cluster.slurmctld_log();
    for &(job, _) in &jobs {
        assert!(log.contains(&format!("sched/energy: started JobId={job} on n")), "no start line for job {job}:\n{log}");
    }
    // Per-cycle statistics at debug level (shown at info because of `debug = true`).
    assert!(log.contains("sched/energy: debug: cycle "), "no cycle statistics:\n{log}");
    let cycle_lines: Vec<&str> = log.lines().filter(|l| l.contains("sched/energy: debug: cycle ")).collect();
    println!("cycles logged: {}; last: {}", cycle_lines.len(), cycle_lines.last().unwrap_or(&""));
    for line in log.lines().filter(|l| l.contains("sched/energy: started")).take(3) {
        println!("log: {line}");
    }
    // No panic crossed into slurmctld and no cycle was skipped.
    assert!(!log.contains("sched/energy: cycle skipped"), "{log}");
    assert!(!log.contains("internal error (panic"), "{log}");

    // Reconfigure with a broken file.
    cluster.write_conf_file("energy.toml", "[planner]\nreservation_depth = \"many\"\n").expect("write energy.toml");
    cluster.reconfigure().expect("scontrol reconfigure");
    if reconfigure_reexecs() {
        // 24.11: `scontrol reconfigure` runs slurmctld anew; its sched/energy refuses the file
        // in init() and Slurm does not take that instance: a daemonized slurmctld keeps the old
        // one, one in the foreground (as here) exits. Fix the file and start it again.
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut refused = false;
        while Instant::now() < deadline && !refused {
            std::thread::sleep(Duration::from_millis(300));
            let log = cluster.slurmctld_log();
            refused = log.contains("Attempting to reconfigure") && log.contains("energy.toml: invalid type: string \"many\"");
        }
        assert!(refused, "the re-executed slurmctld did not refuse the broken energy.toml:\n{}", cluster.slurmctld_log());
        cluster.write_conf_file("energy.toml", GOOD_TOML).expect("write energy.toml");
        cluster.restart_slurmctld().expect("slurmctld starts again with the fixed file");
    } else {
        // 22.05: sched_p_reconfig; the old configuration stays, slurmctld keeps serving.
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut kept = false;
        while Instant::now() < deadline && !kept {
            std::thread::sleep(Duration::from_millis(300));
            kept = cluster.slurmctld_log().contains("keeping the previous configuration");
        }
        assert!(kept, "no 'keeping the previous configuration' line:\n{}", cluster.slurmctld_log());
    }
    let after = cluster.sbatch(&["--gres=gpu:1", "-t", "5", "--wrap", "true"], "").expect("sbatch after reconfigure");
    assert_eq!(cluster.wait_job_done(after, JOB_TIMEOUT).expect("job after reconfigure"), "COMPLETED");

    println!(
        "timings: cluster up {:.1} s, {} jobs done {:.1} s after submission, test {:.1} s",
        started_after.as_secs_f64(),
        jobs.len(),
        all_done.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    cluster.stop().expect("stop the cluster");
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn bad_energy_toml_stops_slurmctld_with_file_line_and_key() {
    if skip_live_test("bad_energy_toml_stops_slurmctld_with_file_line_and_key") {
        return;
    }
    let plugins = plugin_dir();
    let bad = "[sched]\ninterval_s = 1\n\n[planner]\nreservaton_depth = 2\n";
    match LocalCluster::start(config(plugins.path(), bad, false)) {
        Ok(cluster) => {
            let log = cluster.slurmctld_log();
            let _ = cluster.stop();
            panic!("slurmctld started with an invalid energy.toml:\n{log}");
        }
        Err(e @ ClusterError::DaemonFailed { .. }) => {
            let text = e.to_string();
            println!("start failed as expected: {}", text.lines().find(|l| l.contains("sched/energy")).unwrap_or(""));
            assert!(text.contains("slurmctld"), "{text}");
            assert!(
                text.contains("energy.toml:5: key 'reservaton_depth': unknown field `reservaton_depth`"),
                "log tail does not name file, line and key:\n{text}"
            );
        }
        Err(other) => panic!("unexpected error: {other}"),
    }
}
