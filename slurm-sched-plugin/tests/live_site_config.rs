//! sched/energy on a site-like slurm.conf, against real daemons: two partitions, typed GPUs of
//! two kinds on different nodes, node features, a maintenance reservation over a future window,
//! a job reservation, `--nodelist`/`--exclude`, multi-node `-n` jobs, `--exclusive` and a job
//! array. Every job must start where Slurm allows it (and only there), and nothing may wait
//! forever because the plan named a node Slurm refuses.
//!
//! Nodes: n1, n2 have `a100` GPUs and feature `ib`; n3, n4 have `v100` GPUs and feature `eth`.
//! The `v100` nodes come first in no order the planner could rely on: before this test's fix,
//! the planner (which saw one GPU type) put `gpu:a100` jobs on the lowest free node and
//! `select_nodes` refused them every cycle.

use std::time::Duration;

use slurm_testcluster::{ClusterConfig, LocalCluster, skip_reason};

mod common;
use common::plugin_dir;

const JOB_TIMEOUT: Duration = Duration::from_secs(90);

const ENERGY_TOML: &str = "[sched]\ninterval_s = 1\ndebug = true\n";

fn config(plugins: &std::path::Path) -> ClusterConfig {
    let pair = |n: &str, v: &str| (n.to_string(), v.to_string());
    ClusterConfig {
        nodes: 4,
        gpus_per_node: 2,
        cpus_per_node: 4,
        plugin_dir: Some(plugins.to_path_buf()),
        sched_type: "sched/energy".into(),
        scheduler_parameters: Some("sched_interval=-1,defer".into()),
        extra_files: vec![("energy.toml".into(), ENERGY_TOML.into())],
        with_accounting: false,
        node_gpu_types: vec![pair("n1", "a100"), pair("n2", "a100"), pair("n3", "v100"), pair("n4", "v100")],
        node_features: vec![pair("n1", "ib"), pair("n2", "ib"), pair("n3", "eth"), pair("n4", "eth")],
        partitions: vec![
            "PartitionName=gpu Nodes=n[1-4] Default=YES MaxTime=INFINITE State=UP".into(),
            "PartitionName=a100 Nodes=n[1-2] MaxTime=INFINITE State=UP".into(),
        ],
        ..ClusterConfig::default()
    }
}

fn run(cluster: &LocalCluster, prog: &str, args: &[&str]) -> String {
    let out = cluster.command(prog).args(args).output().unwrap_or_else(|e| panic!("{prog}: {e}"));
    assert!(out.status.success(), "{prog} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Nodes a finished job ran on, expanded (`n[1-2]` -> n1,n2) by scontrol.
fn nodes_of(cluster: &LocalCluster, job: u32) -> Vec<String> {
    let list = run(cluster, "squeue", &["-h", "-t", "all", "-j", &job.to_string(), "-o", "%N"]);
    let list = list.lines().next().unwrap_or("").to_string();
    if list.is_empty() {
        return Vec::new();
    }
    run(cluster, "scontrol", &["show", "hostnames", &list]).lines().map(str::to_string).collect()
}

fn submit(cluster: &LocalCluster, args: &[&str]) -> u32 {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--wrap", "sleep 2"]);
    cluster.sbatch(&all, "").unwrap_or_else(|e| panic!("sbatch {args:?}: {e}"))
}

fn wait_completed(cluster: &LocalCluster, job: u32, what: &str) {
    let state = cluster.wait_job_done(job, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{what} (job {job}): {e}\n{}", cluster.slurmctld_log()));
    assert_eq!(state, "COMPLETED", "{what} (job {job})");
}

#[test]
fn jobs_run_only_where_slurm_allows_on_a_site_like_cluster() {
    if let Some(why) = skip_reason() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "live test cannot run under CI: {why}");
        println!("SKIPPED: jobs_run_only_where_slurm_allows_on_a_site_like_cluster: {why}");
        return;
    }
    let plugins = plugin_dir();
    let cluster = LocalCluster::start(config(plugins.path())).unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    // A maintenance window on n4 from 30 minutes on, for two hours, and a reservation for the
    // user over n2 from now on (only jobs that ask for it may use n2 while it lasts).
    run(&cluster, "scontrol", &["create", "reservation", "ReservationName=maint", "StartTime=now+30minutes", "Duration=120", "Nodes=n4", "Flags=MAINT", "Users=root"]);
    run(&cluster, "scontrol", &["create", "reservation", "ReservationName=team", "StartTime=now", "Duration=600", "Nodes=n2", "Users=root"]);

    let checks: Vec<(&str, Vec<&str>, Vec<&str>)> = vec![
        ("typed a100 GPU", vec!["--gres=gpu:a100:1", "-t", "5"], vec!["n1"]),
        ("typed v100 GPUs, --gpus", vec!["--gpus=v100:2", "-t", "5"], vec!["n3", "n4"]),
        ("feature constraint", vec!["--constraint=eth", "--gres=gpu:1", "-t", "5"], vec!["n3", "n4"]),
        ("partition a100 outside the reservation", vec!["-p", "a100", "--gres=gpu:1", "-t", "5"], vec!["n1"]),
        ("the job reservation", vec!["--reservation=team", "--gres=gpu:2", "-t", "5"], vec!["n2"]),
        ("--exclude", vec!["--exclude=n1,n2,n3", "--gres=gpu:1", "-t", "5"], vec!["n4"]),
        ("--nodelist", vec!["--nodelist=n3", "--gres=gpu:1", "-t", "5"], vec!["n3"]),
        // Three hours would run into the maintenance window on n4: only n1 or n3 (n2 is the
        // team's).
        ("long job and a future maintenance window", vec!["--gres=gpu:1", "-t", "180"], vec!["n1", "n3"]),
        ("multi-partition job", vec!["-p", "a100,gpu", "--constraint=eth", "--gres=gpu:1", "-t", "5"], vec!["n3", "n4"]),
    ];
    for (what, args, allowed) in &checks {
        let job = submit(&cluster, args);
        wait_completed(&cluster, job, what);
        let nodes = nodes_of(&cluster, job);
        assert!(!nodes.is_empty() && nodes.iter().all(|n| allowed.contains(&n.as_str())), "{what}: ran on {nodes:?}, allowed {allowed:?}");
        println!("{what}: {nodes:?}");
    }

    // Multi-node: 4 tasks, 2 per node, one GPU per node; and a whole node.
    let job = submit(&cluster, &["-n", "4", "--ntasks-per-node=2", "--gres=gpu:1", "-t", "5", "--constraint=eth"]);
    wait_completed(&cluster, job, "-n 4 --ntasks-per-node=2");
    let nodes = nodes_of(&cluster, job);
    assert_eq!(nodes.len(), 2, "-n 4 --ntasks-per-node=2 ran on {nodes:?}");
    let job = submit(&cluster, &["--exclusive", "-p", "a100", "-t", "5"]);
    wait_completed(&cluster, job, "--exclusive");
    assert_eq!(nodes_of(&cluster, job), vec!["n1".to_string()]);

    // An array: every task runs, on a100 nodes only.
    let array = submit(&cluster, &["--array=0-5", "--gres=gpu:a100:1", "-t", "5"]);
    for task in 0..6 {
        let out = run(&cluster, "squeue", &["-h", "-t", "all", "-j", &format!("{array}_{task}"), "-o", "%T %N"]);
        println!("array task {task}: {out}");
    }
    let deadline = std::time::Instant::now() + JOB_TIMEOUT;
    loop {
        let pending = run(&cluster, "squeue", &["-h", "-j", &array.to_string(), "-o", "%i %T %N"]);
        if pending.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "array {array} still has tasks:\n{pending}\n{}", cluster.slurmctld_log());
        for line in pending.lines().filter(|l| l.contains("RUNNING")) {
            assert!(line.ends_with("n1"), "array task outside the a100 nodes it may use: {line}");
        }
        std::thread::sleep(Duration::from_millis(300));
    }

    let log = cluster.slurmctld_log();
    assert!(!log.contains("not started on"), "a planned start was refused by Slurm:\n{log}");
}

#[test]
fn without_defer_sched_energy_refuses_to_load_with_the_line_to_write() {
    if let Some(why) = skip_reason() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "live test cannot run under CI: {why}");
        println!("SKIPPED: without_defer_sched_energy_refuses_to_load_with_the_line_to_write: {why}");
        return;
    }
    let plugins = plugin_dir();
    let mut cfg = config(plugins.path());
    cfg.scheduler_parameters = Some("Sched_Interval=-1,bf_max_job_test=100".into());
    match LocalCluster::start(cfg) {
        Ok(c) => panic!("slurmctld started without defer:\n{}", c.slurmctld_log()),
        Err(e) => {
            let text = e.to_string();
            assert!(text.contains("lacks defer"), "{text}");
            assert!(text.contains("SchedulerParameters=bf_max_job_test=100,sched_interval=-1,defer"), "{text}");
        }
    }
}
