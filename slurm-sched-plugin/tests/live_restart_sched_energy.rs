//! sched/energy survives `scontrol reconfigure` and a slurmctld restart with jobs pending and
//! running, against the real daemons (3 nodes x 4 fake GPUs, on loopback): no job is lost, none
//! is started twice (each ends COMPLETED exactly once in `sacct -D`, and the plugin logged exactly
//! one start for it).
//!
//! Skipped (with a printed reason) only when not root or when Slurm is not installed.

use std::time::{Duration, Instant};

use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};

mod common;
use common::plugin_dir;

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

fn count_state(cluster: &LocalCluster, state: &str) -> usize {
    let out = cluster.command("squeue").args(["-h", "-t", state, "-o", "%i"]).output().expect("run squeue");
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.trim().is_empty()).count()
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn reconfigure_and_restart_lose_no_job_and_start_none_twice() {
    if skip_live_test("reconfigure_and_restart_lose_no_job_and_start_none_twice") {
        return;
    }
    let t0 = Instant::now();
    let plugins = plugin_dir();
    let mut cluster = LocalCluster::start(ClusterConfig {
        nodes: 3,
        gpus_per_node: 4,
        plugin_dir: Some(plugins.path().to_path_buf()),
        sched_type: "sched/energy".into(),
        scheduler_parameters: Some("sched_interval=-1,defer".into()),
        extra_files: vec![("energy.toml".into(), "[sched]\ninterval_s = 1\ndebug = true\n".into())],
        with_accounting: true,
        ..ClusterConfig::default()
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));

    // 16 x 2 GPUs on 12 GPUs: 6 run at a time, the rest wait.
    let submit = |cluster: &LocalCluster| -> u32 {
        cluster
            .sbatch(&["--gres=gpu:2", "-t", "2", "--wrap", "sleep 4"], "")
            .unwrap_or_else(|e| panic!("sbatch: {e}"))
    };
    let mut jobs: Vec<u32> = (0..16).map(|_| submit(&cluster)).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while count_state(&cluster, "R") == 0 {
        assert!(Instant::now() < deadline, "no job started:\n{}", cluster.slurmctld_log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let (running, pending) = (count_state(&cluster, "R"), count_state(&cluster, "PD"));
    println!("before reconfigure: {running} running, {pending} pending");
    assert!(pending > 0, "nothing pending before reconfigure");

    cluster.reconfigure().expect("scontrol reconfigure");
    jobs.extend((0..2).map(|_| submit(&cluster)));
    std::thread::sleep(Duration::from_secs(2));

    let (running, pending) = (count_state(&cluster, "R"), count_state(&cluster, "PD"));
    println!("before restart: {running} running, {pending} pending");
    assert!(running > 0 && pending > 0, "restart needs jobs running ({running}) and pending ({pending})");
    cluster.restart_slurmctld().unwrap_or_else(|e| panic!("slurmctld restart: {e}"));
    jobs.extend((0..2).map(|_| submit(&cluster)));

    for &job in &jobs {
        let state = cluster.wait_job_done(job, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}\n{}", cluster.slurmctld_log()));
        assert_eq!(state, "COMPLETED", "job {job}");
    }
    for &job in &jobs {
        cluster.wait_accounted(job, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
    }

    // Every record of every job (-D: also the ones a requeue would have superseded).
    let ids = jobs.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let out = cluster
        .command("sacct")
        .args(["-n", "-P", "-X", "-D", "-j", &ids, "-o", "JobID,State,AdminComment"])
        .output()
        .expect("run sacct");
    let text = String::from_utf8_lossy(&out.stdout);
    let log = cluster.slurmctld_log();
    for &job in &jobs {
        let rows: Vec<&str> = text.lines().filter(|l| l.split('|').next() == Some(&job.to_string())).collect();
        assert_eq!(rows.len(), 1, "job {job} has {} sacct records:\n{text}", rows.len());
        assert!(rows[0].starts_with(&format!("{job}|COMPLETED|energy:policy=")), "job {job}: {}", rows[0]);
        let starts = log.matches(&format!("sched/energy: started JobId={job} on ")).count();
        assert_eq!(starts, 1, "job {job} started {starts} times by sched/energy:\n{log}");
    }
    assert!(!log.contains("internal error (panic"), "{log}");
    let loads = log.matches("sched/energy: sched/energy loaded (Slurm ").count();
    assert!(loads >= 2, "plugin not loaded again after the restart ({loads} load lines)");
    cluster.stop().expect("stop the cluster");
    println!("restart: {} jobs, each COMPLETED once; test {:.1} s", jobs.len(), t0.elapsed().as_secs_f64());
}
