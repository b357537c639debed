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

use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};

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
            "PartitionName=excl Nodes=n[3-4] OverSubscribe=EXCLUSIVE MaxTime=INFINITE State=UP".into(),
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

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn jobs_run_only_where_slurm_allows_on_a_site_like_cluster() {
    if skip_live_test("jobs_run_only_where_slurm_allows_on_a_site_like_cluster") {
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

    // An array of 6 one-GPU tasks on the two a100 nodes (n2 is reserved, so 2 GPUs, on n1):
    // as many tasks start in one cycle as fit (both GPUs of n1 at once, with the same start
    // time), the others wait, and every task runs on n1 only.
    let array = cluster
        .sbatch(&["--array=0-5", "--gres=gpu:a100:1", "-t", "5", "--wrap", "sleep 6"], "")
        .unwrap_or_else(|e| panic!("sbatch array: {e}"));
    let deadline = std::time::Instant::now() + JOB_TIMEOUT;
    let mut first_wave: Option<Vec<String>> = None;
    loop {
        let listed = run(&cluster, "squeue", &["-h", "-j", &array.to_string(), "-o", "%i %T %N %S"]);
        if listed.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "array {array} still has tasks:\n{listed}\n{}", cluster.slurmctld_log());
        let running: Vec<&str> = listed.lines().filter(|l| l.contains(" RUNNING ")).collect();
        for line in &running {
            assert!(line.split_whitespace().nth(2) == Some("n1"), "array task outside the node it may use: {line}");
        }
        if first_wave.is_none() && !running.is_empty() {
            first_wave = Some(running.iter().map(|l| l.to_string()).collect());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let first_wave = first_wave.expect("no array task was seen running");
    let starts: std::collections::BTreeSet<&str> = first_wave.iter().filter_map(|l| l.split_whitespace().nth(3)).collect();
    assert_eq!((first_wave.len(), starts.len()), (2, 1), "both free GPUs of n1 should take an array task in the same cycle: {first_wave:?}");

    // A blocked job gets a reservation that users see: `squeue --start` gives its expected
    // start and the node it is held on, and its reason is `Resources`.
    let blocker = cluster.sbatch(&["--nodelist=n3", "--gres=gpu:2", "-t", "5", "--wrap", "sleep 120"], "").unwrap_or_else(|e| panic!("{e}"));
    let waiting = cluster.sbatch(&["--nodelist=n3", "--gres=gpu:2", "-t", "5", "--wrap", "sleep 1"], "").unwrap_or_else(|e| panic!("{e}"));
    let deadline = std::time::Instant::now() + JOB_TIMEOUT;
    let shown = loop {
        let line = run(&cluster, "squeue", &["--start", "-h", "-j", &waiting.to_string(), "-o", "%T %S %Y %r"]);
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() == 4 && fields[0] == "PENDING" && fields[1] != "N/A" && fields[2] == "n3" && fields[3] == "Resources" {
            break line;
        }
        assert!(std::time::Instant::now() < deadline, "no expected start for job {waiting}: '{line}'\n{}", cluster.slurmctld_log());
        std::thread::sleep(Duration::from_millis(300));
    };
    println!("squeue --start: {shown}");
    run(&cluster, "scancel", &[&blocker.to_string(), &waiting.to_string()]);

    // A partition that gives whole nodes (OverSubscribe=EXCLUSIVE): its one-GPU job holds a
    // whole eth node, so the next eth job is planned on the other one (no refused start).
    let whole = cluster.sbatch(&["-p", "excl", "--gres=gpu:1", "-t", "5", "--wrap", "sleep 4"], "").unwrap_or_else(|e| panic!("{e}"));
    let next = cluster.sbatch(&["--constraint=eth", "--gres=gpu:1", "-t", "5", "--wrap", "sleep 1"], "").unwrap_or_else(|e| panic!("{e}"));
    wait_completed(&cluster, whole, "OverSubscribe=EXCLUSIVE partition");
    wait_completed(&cluster, next, "job next to an exclusive one");
    let (a, b) = (nodes_of(&cluster, whole), nodes_of(&cluster, next));
    println!("exclusive partition: {a:?}, next eth job: {b:?}");
    assert_eq!(a.len(), 1);

    // Heterogeneous jobs are refused at submission (only sched/backfill starts them).
    let het = cluster.command("sbatch").args(["-n", "1", ":", "-n", "1", "--wrap", "sleep 1"]).output().expect("sbatch het");
    assert!(!het.status.success(), "a heterogeneous job was accepted: {}", String::from_utf8_lossy(&het.stdout));
    assert!(cluster.slurmctld_log().contains("rejected as sched/backfill is not configured"), "{}", cluster.slurmctld_log());

    // The decision record goes first in the admin comment and keeps what the site wrote there.
    let noted = cluster.sbatch(&["-H", "--gres=gpu:1", "-t", "5", "--wrap", "sleep 1"], "").unwrap_or_else(|e| panic!("{e}"));
    run(&cluster, "scontrol", &["update", &format!("jobid={noted}"), "admincomment=project 42; audited"]);
    run(&cluster, "scontrol", &["release", &noted.to_string()]);
    wait_completed(&cluster, noted, "job with a site admin comment");
    let shown = run(&cluster, "scontrol", &["show", "job", &noted.to_string()]);
    let comment = shown.lines().find_map(|l| l.trim().strip_prefix("AdminComment=")).unwrap_or_default().to_string();
    assert!(comment.starts_with("energy:policy=") && comment.trim_end().ends_with("; project 42; audited"), "admin comment: '{comment}'\n{shown}");

    // sdiag shows the plugin's cycles and starts as backfill statistics.
    let sdiag = run(&cluster, "sdiag", &[]);
    let backfilled = sdiag
        .lines()
        .find_map(|l| l.trim().strip_prefix("Total backfilled jobs (since last slurm start):"))
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or_else(|| panic!("no backfill statistics in sdiag:\n{sdiag}"));
    assert!(backfilled >= 12, "sdiag counts {backfilled} started jobs:\n{sdiag}");

    let log = cluster.slurmctld_log();
    assert!(!log.contains("not started on"), "a planned start was refused by Slurm:\n{log}");
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn without_defer_sched_energy_refuses_to_load_with_the_line_to_write() {
    if skip_live_test("without_defer_sched_energy_refuses_to_load_with_the_line_to_write") {
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

/// A job held by a QOS limit takes no nodes from runnable jobs: with the user at its QOS's
/// `MaxTRESPerUser=gres/gpu=2`, a second `--qos=gpu2` job waits with Slurm's QOS reason, and a
/// lower-priority job without that QOS starts on the GPUs the held one would have wanted.
#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn a_job_held_at_its_qos_limit_takes_no_nodes_from_runnable_jobs() {
    if skip_live_test("a_job_held_at_its_qos_limit_takes_no_nodes_from_runnable_jobs") {
        return;
    }
    let plugins = plugin_dir();
    let cfg = ClusterConfig {
        nodes: 2,
        gpus_per_node: 2,
        plugin_dir: Some(plugins.path().to_path_buf()),
        sched_type: "sched/energy".into(),
        scheduler_parameters: Some("sched_interval=-1,defer".into()),
        extra_files: vec![("energy.toml".into(), ENERGY_TOML.into())],
        extra_slurm_conf: vec!["AccountingStorageEnforce=associations,limits,qos".into()],
        with_accounting: true,
        ..ClusterConfig::default()
    };
    let cluster = LocalCluster::start(cfg).unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    run(&cluster, "sacctmgr", &["-i", "add", "qos", "gpu2", "MaxTRESPerUser=gres/gpu=2"]);
    run(&cluster, "sacctmgr", &["-i", "modify", "user", "root", "set", "qos+=gpu2"]);
    std::thread::sleep(Duration::from_secs(2));

    let first = cluster.sbatch(&["--qos=gpu2", "--gres=gpu:2", "-t", "5", "--wrap", "sleep 30"], "").unwrap_or_else(|e| panic!("{e}"));
    let deadline = std::time::Instant::now() + JOB_TIMEOUT;
    while run(&cluster, "squeue", &["-h", "-j", &first.to_string(), "-o", "%T"]) != "RUNNING" {
        assert!(std::time::Instant::now() < deadline, "first gpu2 job not running:\n{}", cluster.slurmctld_log());
        std::thread::sleep(Duration::from_millis(300));
    }
    let held = cluster.sbatch(&["--qos=gpu2", "--gres=gpu:2", "-t", "5", "--wrap", "sleep 1"], "").unwrap_or_else(|e| panic!("{e}"));
    let other = cluster.sbatch(&["--nice=1000", "--gres=gpu:2", "-t", "5", "--wrap", "sleep 1"], "").unwrap_or_else(|e| panic!("{e}"));
    wait_completed(&cluster, other, "lower-priority job next to a QOS-held one");
    let held_state = run(&cluster, "squeue", &["-h", "-j", &held.to_string(), "-o", "%T %r"]);
    assert!(held_state.starts_with("PENDING") && held_state.contains("QOS"), "held job: '{held_state}'");
    for job in [first, held] {
        let _ = cluster.command("scancel").arg(job.to_string()).status();
    }
}

/// A job whose QOS is taken from its association while it waits (`sacctmgr modify user ...
/// set qos-=...`, with `AccountingStorageEnforce=qos`) is not started: it stays pending with
/// reason `InvalidQOS`, under sched/backfill and sched/energy alike; given back, it starts.
/// (Before the fix, sched/energy started it with the revoked QOS.)
#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn a_job_whose_qos_was_revoked_waits_with_invalid_qos_under_both_schedulers() {
    if skip_live_test("a_job_whose_qos_was_revoked_waits_with_invalid_qos_under_both_schedulers") {
        return;
    }
    let plugins = plugin_dir();
    for sched in ["sched/backfill", "sched/energy"] {
        let mut cfg = ClusterConfig {
            nodes: 1,
            gpus_per_node: 1,
            scheduler_parameters: Some("bf_interval=1".into()),
            extra_slurm_conf: vec!["AccountingStorageEnforce=associations,limits,qos".into()],
            with_accounting: true,
            ..ClusterConfig::default()
        };
        if sched == "sched/energy" {
            cfg.sched_type = sched.into();
            cfg.plugin_dir = Some(plugins.path().to_path_buf());
            cfg.scheduler_parameters = Some("sched_interval=-1,defer".into());
            cfg.extra_files.push(("energy.toml".into(), ENERGY_TOML.into()));
        }
        let cluster = LocalCluster::start(cfg).unwrap_or_else(|e| panic!("{sched}: cluster did not start: {e}"));
        run(&cluster, "sacctmgr", &["-i", "add", "qos", "revokable"]);
        run(&cluster, "sacctmgr", &["-i", "modify", "user", "root", "set", "qos+=revokable"]);
        std::thread::sleep(Duration::from_secs(2));
        let job = cluster.sbatch(&["--hold", "--qos=revokable", "-t", "5", "--wrap", "sleep 1"], "").unwrap_or_else(|e| panic!("{sched}: {e}"));
        run(&cluster, "sacctmgr", &["-i", "modify", "user", "root", "set", "qos-=revokable"]);
        std::thread::sleep(Duration::from_secs(2));
        run(&cluster, "scontrol", &["release", &job.to_string()]);
        let state = || run(&cluster, "squeue", &["-h", "-j", &job.to_string(), "-o", "%T %r"]);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while state() != "PENDING InvalidQOS" {
            assert!(std::time::Instant::now() < deadline, "{sched}: job {job} with a revoked QOS is '{}', not PENDING InvalidQOS:\n{}", state(), cluster.slurmctld_log());
            std::thread::sleep(Duration::from_millis(300));
        }
        // A few more cycles: still not started.
        std::thread::sleep(Duration::from_secs(4));
        assert_eq!(state(), "PENDING InvalidQOS", "{sched}: job {job} with a revoked QOS");
        run(&cluster, "sacctmgr", &["-i", "modify", "user", "root", "set", "qos+=revokable"]);
        wait_completed(&cluster, job, &format!("{sched}: the job once its QOS is given back"));
    }
}
