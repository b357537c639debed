//! A real 3-node Slurm cluster with fake GPUs: jobs with `--gres=gpu:N` run, get their GPUs,
//! are accounted in `sacct`, survive a slurmctld restart, and every daemon is gone after `stop()`.
//!
//! Skipped (with a printed reason) only when not root or when slurmctld is not installed.

use std::time::{Duration, Instant};

use slurm_testcluster::{ClusterConfig, LocalCluster, pid_exists, skip_live_test};

const JOB_TIMEOUT: Duration = Duration::from_secs(60);

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn live_cluster_runs_gpu_jobs_and_accounts_them() {
    if skip_live_test("live_cluster_runs_gpu_jobs_and_accounts_them") {
        return;
    }
    let test_start = Instant::now();
    let mut cluster = LocalCluster::start(ClusterConfig {
        nodes: 3,
        gpus_per_node: 4,
        ..ClusterConfig::default()
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    let started = test_start.elapsed();

    let nodes = cluster.node_names();
    assert_eq!(nodes, ["n1", "n2", "n3"]);

    // Two-GPU jobs, more of them than one node holds, plus a one-GPU job and a plain script.
    let gpu2: Vec<u32> = (0..3)
        .map(|_| {
            cluster
                .sbatch(
                    &[
                        "--gres=gpu:2",
                        "--wrap",
                        "echo $CUDA_VISIBLE_DEVICES; sleep 2",
                    ],
                    "",
                )
                .unwrap_or_else(|e| panic!("sbatch: {e}"))
        })
        .collect();
    let gpu1 = cluster
        .sbatch(
            &["--gres=gpu:1", "--wrap", "echo $CUDA_VISIBLE_DEVICES"],
            "",
        )
        .unwrap_or_else(|e| panic!("sbatch: {e}"));
    let plain = cluster
        .sbatch(
            &["-N", "1", "--job-name=plain"],
            "#!/bin/sh\necho \"ran on $SLURMD_NODENAME\"\n",
        )
        .unwrap_or_else(|e| panic!("sbatch: {e}"));

    for &job in gpu2.iter().chain([&gpu1, &plain]) {
        let state = cluster
            .wait_job_done(job, JOB_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            state,
            "COMPLETED",
            "job {job}:\n{}",
            cluster.job_output(job).unwrap_or_default()
        );
    }

    for &job in &gpu2 {
        let state = cluster
            .wait_accounted(job, JOB_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(state, "COMPLETED");
        let tres = cluster
            .sacct(job, "AllocTRES")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            tres.split(',').any(|t| t == "gres/gpu=2"),
            "job {job} AllocTRES: {tres}"
        );
        assert_eq!(gpu_indices(&cluster, job).len(), 2, "job {job} output");
    }
    assert_eq!(gpu_indices(&cluster, gpu1).len(), 1);
    let tres = cluster
        .sacct(gpu1, "AllocTRES")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        tres.split(',').any(|t| t == "gres/gpu=1"),
        "AllocTRES: {tres}"
    );
    let plain_out = cluster.job_output(plain).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        nodes
            .iter()
            .any(|n| plain_out.trim() == format!("ran on {n}")),
        "{plain_out}"
    );

    // slurmctld comes back with its state, the nodes register again, and new jobs run.
    let old_ctld = pid_of(&cluster, "slurmctld");
    let restart_start = Instant::now();
    cluster
        .restart_slurmctld()
        .unwrap_or_else(|e| panic!("restart: {e}"));
    let restarted = restart_start.elapsed();
    assert_ne!(pid_of(&cluster, "slurmctld"), old_ctld);
    assert!(!pid_exists(old_ctld), "the old slurmctld is still there");
    let after = cluster
        .sbatch(
            &["--gres=gpu:2", "--wrap", "echo $CUDA_VISIBLE_DEVICES"],
            "",
        )
        .unwrap_or_else(|e| panic!("sbatch after restart: {e}"));
    assert_eq!(
        cluster
            .wait_job_done(after, JOB_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e}")),
        "COMPLETED"
    );
    assert_eq!(
        cluster
            .wait_accounted(after, JOB_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e}")),
        "COMPLETED"
    );
    assert_eq!(gpu_indices(&cluster, after).len(), 2);
    // Jobs from before the restart are still known to accounting.
    assert_eq!(
        cluster.sacct(gpu2[0], "State").unwrap_or_default(),
        "COMPLETED"
    );

    let pids = cluster.pids();
    let names: Vec<&str> = pids.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "munged",
            "mariadbd",
            "slurmdbd",
            "slurmctld",
            "slurmd n1",
            "slurmd n2",
            "slurmd n3"
        ]
    );
    let stop_start = Instant::now();
    cluster.stop().unwrap_or_else(|e| panic!("stop: {e}"));
    let stopped = stop_start.elapsed();
    for (name, pid) in &pids {
        assert!(
            !pid_exists(*pid),
            "{name} (pid {pid}) still exists after stop()"
        );
    }
    println!(
        "live cluster: start-to-idle {:.1} s, slurmctld restart {:.1} s, stop {:.1} s, whole test {:.1} s",
        started.as_secs_f64(),
        restarted.as_secs_f64(),
        stopped.as_secs_f64(),
        test_start.elapsed().as_secs_f64()
    );
}

/// The GPU indices a job printed from `$CUDA_VISIBLE_DEVICES` (first line of its output).
fn gpu_indices(cluster: &LocalCluster, job: u32) -> Vec<u32> {
    let out = cluster.job_output(job).unwrap_or_else(|e| panic!("{e}"));
    let line = out.lines().next().unwrap_or_default();
    let indices: Vec<u32> = line
        .split(',')
        .map(|i| {
            i.trim()
                .parse()
                .unwrap_or_else(|_| panic!("job {job}: not GPU indices: {out:?}"))
        })
        .collect();
    assert!(indices.iter().all(|&i| i < 4), "job {job}: {indices:?}");
    indices
}

fn pid_of(cluster: &LocalCluster, daemon: &str) -> u32 {
    cluster
        .pids()
        .into_iter()
        .find(|(name, _)| name == daemon)
        .map(|(_, pid)| pid)
        .unwrap_or_else(|| panic!("{daemon} is not running"))
}

/// Without accounting (no MariaDB, no slurmdbd) a cluster still runs GPU jobs; it runs beside the
/// other tests' clusters, on its own ports and directories.
#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn cluster_without_accounting_runs_jobs() {
    if skip_live_test("cluster_without_accounting_runs_jobs") {
        return;
    }
    let cfg = ClusterConfig {
        nodes: 3,
        gpus_per_node: 2,
        with_accounting: false,
        daemon_env: vec![("TESTCLUSTER_PROBE".into(), "daemon-env".into())],
        ..ClusterConfig::default()
    };
    let cluster = LocalCluster::start(cfg).unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    // daemon_env reaches the Slurm daemons (and only them).
    for (name, pid) in cluster.pids() {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let has_probe = environ
            .split(|&b| b == 0)
            .any(|var| var == b"TESTCLUSTER_PROBE=daemon-env");
        assert_eq!(has_probe, name != "munged", "{name}");
    }
    let names: Vec<String> = cluster.pids().into_iter().map(|(name, _)| name).collect();
    assert_eq!(
        names,
        ["munged", "slurmctld", "slurmd n1", "slurmd n2", "slurmd n3"]
    );
    let job = cluster
        .sbatch(
            &["--gres=gpu:2", "--wrap", "echo $CUDA_VISIBLE_DEVICES"],
            "",
        )
        .unwrap_or_else(|e| panic!("sbatch: {e}"));
    assert_eq!(
        cluster
            .wait_job_done(job, JOB_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e}")),
        "COMPLETED"
    );
    assert_eq!(gpu_indices(&cluster, job).len(), 2);
    // A job asking for more GPUs than a node has is refused at submission.
    assert!(
        cluster
            .sbatch(&["--gres=gpu:3", "--wrap", "true"], "")
            .is_err()
    );
    let pids = cluster.pids();
    cluster.stop().unwrap_or_else(|e| panic!("stop: {e}"));
    assert!(pids.iter().all(|(_, pid)| !pid_exists(*pid)));
}

/// A daemon that cannot start makes `start` fail with the tail of that daemon's log, and
/// whatever had started is stopped again.
#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn start_failure_reports_the_daemon_log() {
    if skip_live_test("start_failure_reports_the_daemon_log") {
        return;
    }
    let cfg = ClusterConfig {
        nodes: 1,
        sched_type: "sched/no_such_plugin".to_string(),
        with_accounting: false,
        ..ClusterConfig::default()
    };
    let err = match LocalCluster::start(cfg) {
        Ok(_) => panic!("slurmctld started with a scheduler plugin that does not exist"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("slurmctld failed"), "{err}");
    assert!(
        err.contains("sched/no_such_plugin"),
        "the error should quote slurmctld's log:\n{err}"
    );
}
