//! A job whose request the planner cannot express (`-n 10` on 4-CPU nodes without `-N`: Slurm
//! chooses how many nodes) and that cannot start now gets its expected start and nodes from
//! Slurm's own will-run test (`squeue --start`), and keeps them from the first plan that sees
//! it: a smaller, lower-priority job released at the same moment that would fit on the idle
//! node now but run past that start does not take it (sched/backfill's promise). When the
//! blocking job ends, the big job starts first. Live: 3 nodes x 4 CPUs.

use std::time::{Duration, Instant};

use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};

mod common;
use common::{energy_cluster, plugin_dir};

const TIMEOUT: Duration = Duration::from_secs(90);

fn squeue(cluster: &LocalCluster, args: &[&str]) -> String {
    let out = cluster.command("squeue").args(["-h"]).args(args).output().expect("squeue");
    assert!(out.status.success(), "squeue {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn state(cluster: &LocalCluster, job: u32) -> String {
    squeue(cluster, &["-j", &job.to_string(), "-o", "%T"])
}

fn wait_until(what: &str, cluster: &LocalCluster, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}\n{}", cluster.slurmctld_log());
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn a_job_slurm_places_gets_its_will_run_start_and_keeps_it() {
    if skip_live_test("a_job_slurm_places_gets_its_will_run_start_and_keeps_it") {
        return;
    }
    let plugins = plugin_dir();
    let cluster = LocalCluster::start(ClusterConfig { gpus_per_node: 0, cpus_per_node: 4, ..energy_cluster(plugins.path(), 3, "", false) })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    let submit = |args: &[&str]| cluster.sbatch(args, "").unwrap_or_else(|e| panic!("sbatch {args:?}: {e}"));

    // Two of the three nodes busy for (at most) 2 minutes.
    let blocker = submit(&["-N2", "--exclusive", "-t", "2", "--wrap", "sleep 300"]);
    wait_until("the blocking job to run", &cluster, || state(&cluster, blocker) == "RUNNING");

    // 10 tasks need all three nodes; Slurm decides the layout. A small, long job behind it fits
    // on the idle node now, but would still run when the big job is expected to start there:
    // it must wait. Both are released together, so that the very first plan that sees the big
    // job must already keep the idle node for it.
    let big = submit(&["--hold", "-n", "10", "-t", "2", "--wrap", "sleep 1"]);
    let small = submit(&["--hold", "-n", "1", "-t", "10", "--wrap", "sleep 1"]);
    let out = cluster.command("scontrol").args(["release", &format!("{big},{small}")]).output().expect("scontrol release");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut shown = String::new();
    wait_until("an expected start for the big job", &cluster, || {
        shown = squeue(&cluster, &["-j", &big.to_string(), "--start", "-o", "%S|%Y|%r"]);
        shown.split('|').next().is_some_and(|s| s.contains('T'))
    });
    let fields: Vec<&str> = shown.split('|').collect();
    assert_eq!(fields.len(), 3, "{shown}");
    let sched_nodes = fields[1];
    for node in cluster.node_names() {
        assert!(sched_nodes.contains(&node) || sched_nodes.contains('['), "big job's SCHEDNODES {sched_nodes:?} lacks {node}");
    }
    assert_eq!(fields[2], "Resources", "{shown}");
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_secs(6) {
        assert_eq!(state(&cluster, small), "PENDING", "the small job took a node the big job's will-run start holds\n{}", cluster.slurmctld_log());
        assert_eq!(state(&cluster, big), "PENDING");
        std::thread::sleep(Duration::from_millis(500));
    }

    // The blocker ends: the big job starts (before the small one).
    let out = cluster.command("scancel").arg(blocker.to_string()).output().expect("scancel");
    assert!(out.status.success());
    let big_state = cluster.wait_job_done(big, TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(big_state, "COMPLETED");
    let small_state = cluster.wait_job_done(small, TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(small_state, "COMPLETED");
    let started = |job: u32| {
        let out = cluster.command("scontrol").args(["show", "job", "-o", &job.to_string()]).output().expect("scontrol");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.split_whitespace().find_map(|kv| kv.strip_prefix("StartTime=")).map(str::to_string).unwrap_or_default()
    };
    assert!(started(big) <= started(small), "big started {} after small {}", started(big), started(small));
    cluster.stop().expect("stop");
}
