//! A partition limit the planner does not model holds no node idle. Partition `capped` lets its
//! jobs use at most two CPUs of a node (`MaxCPUsPerNode=2`); n2 is busy. Two 2-CPU jobs of
//! `capped` want n1, where only the first fits under the cap. Before issue 20 the planner placed
//! both there and learnt from `select_nodes`' refusal (the node kept out of that job's plans for
//! 10 cycles); now a `MaxCPUsPerNode` partition's jobs are laid out by Slurm's own selection
//! over the nodes the plan leaves free, so nothing is refused: the second waits, a job of
//! another partition behind it gets n1's free CPUs at once instead of n1 being held idle, and
//! the waiting job starts on n2 once that is free. Live: 2 nodes x 4 CPUs x 4 fake GPUs.

use std::time::{Duration, Instant};

use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};

mod common;
use common::{energy_cluster, plugin_dir, run};

const TIMEOUT: Duration = Duration::from_secs(90);

fn state_and_nodes(cluster: &LocalCluster, job: u32) -> (String, String) {
    let line = run(cluster, "squeue", &["-h", "-t", "all", "-j", &job.to_string(), "-o", "%T|%N"]);
    let (state, nodes) = line.split_once('|').unwrap_or((&line, ""));
    (state.to_string(), nodes.to_string())
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn a_refused_start_is_planned_around_and_holds_no_node_idle() {
    if skip_live_test("a_refused_start_is_planned_around_and_holds_no_node_idle") {
        return;
    }
    let plugins = plugin_dir();
    let cluster = LocalCluster::start(ClusterConfig {
        cpus_per_node: 4,
        // The refusals are logged at verbose level.
        extra_slurm_conf: vec!["SlurmctldDebug=verbose".into()],
        partitions: vec![
            "PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP".into(),
            "PartitionName=capped Nodes=n[1-2] MaxCPUsPerNode=2 MaxTime=INFINITE State=UP".into(),
        ],
        ..energy_cluster(plugins.path(), 2, "", true)
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));

    // n2 busy for a while.
    let busy = cluster.sbatch(&["-w", "n2", "--exclusive", "-t", "5", "--wrap", "sleep 300"], "").expect("sbatch");
    let deadline = Instant::now() + TIMEOUT;
    while state_and_nodes(&cluster, busy).0 != "RUNNING" {
        assert!(Instant::now() < deadline, "n2's job did not start\n{}", cluster.slurmctld_log());
        std::thread::sleep(Duration::from_millis(200));
    }

    // Held and released together, so that one plan sees all three, in this order (priority).
    let first = cluster.sbatch(&["--hold", "-p", "capped", "-c", "2", "--gres=gpu:1", "-t", "2", "--wrap", "sleep 60"], "").expect("sbatch");
    let big = cluster.sbatch(&["--hold", "-p", "capped", "-c", "2", "--gres=gpu:1", "-t", "2", "--wrap", "sleep 1"], "").expect("sbatch");
    let small = cluster.sbatch(&["--hold", "-c", "2", "--gres=gpu:1", "-t", "2", "--wrap", "sleep 20"], "").expect("sbatch small");
    run(&cluster, "scontrol", &["release", &format!("{first},{big},{small}")]);

    // The small job runs on n1 while n2 is still busy: n1 is not held for the big job.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let (state, nodes) = state_and_nodes(&cluster, small);
        if state == "RUNNING" {
            assert_eq!(nodes, "n1");
            break;
        }
        assert!(Instant::now() < deadline, "the small job never started (state {state}); n1 held idle for a refused start?\n{}", cluster.slurmctld_log());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(state_and_nodes(&cluster, busy).0, "RUNNING");
    assert_eq!(state_and_nodes(&cluster, first), ("RUNNING".to_string(), "n1".to_string()));
    assert_eq!(state_and_nodes(&cluster, big).0, "PENDING");
    // Slurm's selection judged the cap: no start of the capped job was tried on n1 and refused.
    std::thread::sleep(Duration::from_secs(4));
    let log = cluster.slurmctld_log();
    let refused = format!("JobId={big} not started on n1:");
    assert!(!log.lines().any(|l| l.contains(&refused)), "the capped job was planned on n1 and refused:\n{log}");
    assert_eq!(state_and_nodes(&cluster, big).0, "PENDING");

    // n2 frees up: the big job starts there.
    run(&cluster, "scancel", &[&busy.to_string()]);
    let state = cluster.wait_job_done(big, TIMEOUT).unwrap_or_else(|e| panic!("{e}\n{}", cluster.slurmctld_log()));
    assert_eq!(state, "COMPLETED");
    assert_eq!(state_and_nodes(&cluster, big).1, "n2");
    cluster.stop().expect("stop");
}
