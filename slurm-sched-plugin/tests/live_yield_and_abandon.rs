//! Plans are applied safely across yields. With `bf_yield_interval=1` (µs) and
//! `bf_yield_sleep=2000000` (2 s) sched/energy gives its locks back for two seconds after each
//! start of a plan (it has held them longer than 1 µs by then), as sched/backfill does. While a
//! partition keeps changing (`scontrol update PartitionName=...`), every such yield sees a
//! change, and the rest of the plan is abandoned (its routes and node indices may be stale):
//! no start ever follows a yield, each cycle starts at most its first job. Once the partition
//! stays put, the remaining jobs start. Live: 2 nodes x 4 GPUs, four 1-GPU jobs. Also: a
//! shutdown during a yield starts nothing more; `max_rpc_cnt` makes the plugin yield while
//! slurmctld serves RPCs.

use std::time::{Duration, Instant};

use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};

mod common;
use common::{energy_cluster, plugin_dir, run};

const TIMEOUT: Duration = Duration::from_secs(90);

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn a_plan_is_abandoned_when_partitions_change_during_a_yield() {
    if skip_live_test("a_plan_is_abandoned_when_partitions_change_during_a_yield") {
        return;
    }
    let plugins = plugin_dir();
    let cluster = LocalCluster::start(ClusterConfig {
        // Abandoned plans are logged at verbose level.
        extra_slurm_conf: vec!["SlurmctldDebug=verbose".into()],
        ..energy_cluster(plugins.path(), 2, ",bf_yield_interval=1,bf_yield_sleep=2000000", false)
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));

    // Held, then released at once: one plan holds all four (two consecutive starts could
    // otherwise come from two cycles).
    let jobs: Vec<u32> = (0..4).map(|_| cluster.sbatch(&["--hold", "--gres=gpu:1", "-t", "2", "--wrap", "sleep 1"], "").expect("sbatch")).collect();
    let ids: Vec<String> = jobs.iter().map(u32::to_string).collect();
    run(&cluster, "scontrol", &["release", &ids.join(",")]);
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

/// Whether a process runs (a zombie, exited but not yet reaped by the harness, does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
}

/// slurmctld shuts down while sched/energy yields in the middle of a plan: nothing more of the
/// plan starts, and the plugin's thread lets slurmctld finish (fini joins it, no hang).
#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn nothing_more_starts_once_slurmctld_shuts_down() {
    if skip_live_test("nothing_more_starts_once_slurmctld_shuts_down") {
        return;
    }
    let plugins = plugin_dir();
    let cluster = LocalCluster::start(energy_cluster(plugins.path(), 2, ",bf_yield_interval=1,bf_yield_sleep=3000000", false))
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    let ctld = cluster.pids().into_iter().find(|(name, _)| name == "slurmctld").map(|(_, pid)| pid).expect("slurmctld pid");
    for _ in 0..3 {
        cluster.sbatch(&["--gres=gpu:1", "-t", "2", "--wrap", "sleep 30"], "").expect("sbatch");
    }
    // The first start of the plan; the plugin now yields for 3 s before the next one.
    let deadline = Instant::now() + TIMEOUT;
    while !cluster.slurmctld_log().contains("sched/energy: started JobId=") {
        assert!(Instant::now() < deadline, "no job started\n{}", cluster.slurmctld_log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let asked = Instant::now();
    run(&cluster, "scontrol", &["shutdown", "slurmctld"]);
    while running(ctld) {
        assert!(asked.elapsed() < Duration::from_secs(30), "slurmctld did not stop within 30 s of the shutdown (plugin thread not joined?)");
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = cluster.slurmctld_log();
    let starts = log.lines().filter(|l| l.contains("sched/energy: started JobId=")).count();
    assert_eq!(starts, 1, "jobs started after the shutdown began\n{log}");
    assert!(log.contains("sched/energy: slurmctld is shutting down: rest of the plan abandoned"), "{log}");
    println!("slurmctld stopped {:.1} s after the shutdown request", asked.elapsed().as_secs_f64());
    drop(cluster);
}

/// `max_rpc_cnt`: while slurmctld serves at least that many RPCs at once, the plugin gives its
/// locks back before a start, as sched/backfill does (its cycle lines count the yields).
#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn busy_rpc_threads_make_the_plugin_yield() {
    if skip_live_test("busy_rpc_threads_make_the_plugin_yield") {
        return;
    }
    let plugins = plugin_dir();
    let cluster = LocalCluster::start(energy_cluster(plugins.path(), 2, ",max_rpc_cnt=1,bf_yield_sleep=100000", true))
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    // Keep slurmctld's RPC threads busy from four clients while jobs are started.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let storm: Vec<_> = (0..4)
        .map(|_| {
            let stop = std::sync::Arc::clone(&stop);
            let mut cmd = cluster.command("squeue");
            cmd.args(["-h", "-o", "%i"]);
            let program = cmd.get_program().to_owned();
            let envs: Vec<_> = cmd.get_envs().filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))).collect();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = std::process::Command::new(&program).args(["-h", "-o", "%i"]).envs(envs.iter().cloned()).output();
                }
            })
        })
        .collect();
    let jobs: Vec<u32> = (0..16).map(|_| cluster.sbatch(&["--gres=gpu:1", "-t", "2", "--wrap", "sleep 1"], "").expect("sbatch")).collect();
    for &job in &jobs {
        let state = cluster.wait_job_done(job, TIMEOUT).unwrap_or_else(|e| panic!("{e}\n{}", cluster.slurmctld_log()));
        assert_eq!(state, "COMPLETED");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in storm {
        let _ = t.join();
    }
    let log = cluster.slurmctld_log();
    let yields: usize = log
        .lines()
        .filter(|l| l.contains("sched/energy: debug: cycle ") && !l.contains(" started 0 "))
        .filter_map(|l| l.split(" yields ").nth(1).and_then(|r| r.split_whitespace().next()).and_then(|n| n.parse::<usize>().ok()))
        .sum();
    assert!(yields > 0, "no yield in cycles that started jobs while RPCs were being served\n{log}");
    println!("yields in cycles with starts: {yields}");
}
