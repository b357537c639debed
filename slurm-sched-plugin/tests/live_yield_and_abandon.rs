//! Plans are applied safely across yields. With `bf_yield_interval=1` (µs) and
//! `bf_yield_sleep=2000000` (2 s) sched/energy gives its locks back for two seconds after each
//! start of a plan (it has held them longer than 1 µs by then), as sched/backfill does. While a
//! partition keeps changing (`scontrol update PartitionName=...`), every such yield sees a
//! change, and the rest of the plan is abandoned (its routes and node indices may be stale):
//! no start ever follows a yield, each cycle starts at most its first job. Once the partition
//! stays put, the remaining jobs start. Live: 2 nodes x 4 GPUs, four 1-GPU jobs.

use std::time::{Duration, Instant};

use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};

mod common;
use common::plugin_dir;

const TIMEOUT: Duration = Duration::from_secs(90);

fn run(cluster: &LocalCluster, prog: &str, args: &[&str]) -> String {
    let out = cluster.command(prog).args(args).output().unwrap_or_else(|e| panic!("{prog}: {e}"));
    assert!(out.status.success(), "{prog} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_plan_is_abandoned_when_partitions_change_during_a_yield() {
    if skip_live_test("a_plan_is_abandoned_when_partitions_change_during_a_yield") {
        return;
    }
    let plugins = plugin_dir();
    let cluster = LocalCluster::start(ClusterConfig {
        nodes: 2,
        plugin_dir: Some(plugins.path().to_path_buf()),
        sched_type: "sched/energy".into(),
        scheduler_parameters: Some("sched_interval=-1,defer,bf_yield_interval=1,bf_yield_sleep=2000000".into()),
        extra_files: vec![("energy.toml".into(), "[sched]\ninterval_s = 1\n".into())],
        // Abandoned plans are logged at verbose level.
        extra_slurm_conf: vec!["SlurmctldDebug=verbose".into()],
        with_accounting: false,
        ..ClusterConfig::default()
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));

    let jobs: Vec<u32> = (0..4).map(|_| cluster.sbatch(&["--gres=gpu:1", "-t", "2", "--wrap", "sleep 1"], "").expect("sbatch")).collect();
    // Change the partition every 300 ms for 6 s: every yield (2 s) sees a change.
    let hammer = Instant::now();
    let mut max_time = 10;
    while hammer.elapsed() < Duration::from_secs(6) {
        max_time += 1;
        run(&cluster, "scontrol", &["update", "PartitionName=debug", &format!("MaxTime={max_time}")]);
        std::thread::sleep(Duration::from_millis(300));
    }
    let log = cluster.slurmctld_log();
    let abandoned = "sched/energy: partitions, reservations or configuration changed during a yield: rest of the plan abandoned";
    let events: Vec<&str> = log
        .lines()
        .filter_map(|l| if l.contains("sched/energy: started JobId=") { Some("start") } else if l.contains(abandoned) { Some("abandon") } else { None })
        .collect();
    assert!(events.contains(&"abandon"), "no plan abandoned during a yield\n{log}");
    assert!(!events.windows(2).any(|w| w == ["start", "start"]), "a start followed a yield during which the partition changed: {events:?}\n{log}");

    // The partition stays put now: the jobs start (one yield of 2 s before each start).
    for &job in &jobs {
        let state = cluster.wait_job_done(job, TIMEOUT).unwrap_or_else(|e| panic!("{e}\n{}", cluster.slurmctld_log()));
        assert_eq!(state, "COMPLETED");
    }
    // sdiag counts the plugin's cycles as backfill cycles (with their yields in the depth).
    let sdiag = run(&cluster, "sdiag", &[]);
    assert!(sdiag.contains("Total backfilled jobs (since last slurm start): 4"), "{sdiag}");
    cluster.stop().expect("stop");
}
