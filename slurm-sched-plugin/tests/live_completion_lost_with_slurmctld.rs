//! A batch job that ended just before a slurmctld SIGKILL, with its end not yet written, frees
//! its nodes' resources once the restarted slurmctld ends it, against the real daemons.
//!
//! Seen in the soak (22.05.8): jobs started, ran about a second and ended; slurmctld answered
//! their completion and was SIGKILLed before its next state save (it saves at most every 5 s).
//! The restarted slurmctld recovered them as running and still waiting for their prolog
//! (`PrologFlags=Contain`: sched/energy saves each start before its launch, so the saved state
//! predates the prolog's completion). Their nodes registered without them, and sched/energy's
//! lost-prolog rule (`model::lost_prolog`) ended them as Slurm ends a batch job missing from
//! its node. Afterwards every node still showed `AllocTRES=cpu=1,gres/gpu=1` with no job on it,
//! and a job asking for every GPU stayed pending for ever.
//!
//! One round per node: a one-GPU job is started and ends one second later; the test SIGKILLs
//! slurmctld as soon as the end is logged (checking that the job state file is older than the
//! end), restarts it, waits until the job is ended, and then asserts that no node has anything
//! allocated and that a job asking for every GPU of every node starts.
//!
//! The jobs come back in one of several states, depending on what reached the nodes before the
//! crash: still waiting for their prolog, or running; with their extern step still on the node
//! (the node reports the job, but not its batch script: `model::lost_launch::BatchStep`), or
//! with every node's epilog completed after the restart (no node left on the job, which
//! slurmctld's `job_complete()` then does not release: the soak's leak). Each run meets some of
//! them; the assertions hold for all.
//!
//! `LIVE_LOST_COMPLETION_SCHED=sched/backfill` runs it under stock Slurm, which only reports:
//! stock launches before it saves a start, so these one-second jobs come back pending and run a
//! second time (a longer job whose start was saved is kept running to its time limit).

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use slurm_testcluster::{ClusterConfig, LocalCluster, Stop, skip_live_test};

mod common;
use common::{plugin_dir, run, squeue_field};

const NODES: u32 = 2;
const GPUS_PER_NODE: u32 = 2;
/// How long after the restart a lost job may still look running: Slurm's grace
/// (BatchStartTimeout 10 s + MessageTimeout 10 s), slurmd's resend period (15 s), the nodes'
/// registrations and the plugin's look every 500 ms, plus margin.
const ENDED_AFTER_RESTART: Duration = Duration::from_secs(90);
/// How long the nodes may take to free an ended job (its epilog) and a new job to start.
const FREED: Duration = Duration::from_secs(40);

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// `AllocTRES` of every node, as `scontrol show node` prints it.
fn alloc_tres(cluster: &LocalCluster) -> Vec<(String, String)> {
    let out = run(cluster, "scontrol", &["-o", "show", "node"]);
    out.lines()
        .filter_map(|line| {
            let field = |key: &str| line.split_whitespace().find_map(|w| w.strip_prefix(key)).map(str::to_string);
            Some((field("NodeName=")?, field("AllocTRES=").unwrap_or_default()))
        })
        .collect()
}

/// Starts a job that ends about a second after its start, and SIGKILLs slurmctld the moment
/// its end is logged. Returns the job id, or None if the state was saved before the kill (the
/// round then did not reach a lost completion).
fn job_ended_then_crash(cluster: &mut LocalCluster, node: &str) -> Option<u32> {
    let job = cluster.sbatch(&["-t", "5", "--no-requeue", "-w", node, "--gres=gpu:1", "-n", "1"], "sleep 1\n").unwrap_or_else(|e| panic!("sbatch: {e}"));
    let done = format!("_job_complete: JobId={job} done");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if cluster.slurmctld_log().contains(&done) {
            break;
        }
        assert!(Instant::now() < deadline, "job {job} did not end: {}\n{}", squeue_field(cluster, job, "%T %r"), cluster.slurmctld_log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let ended = SystemTime::now();
    let state_file = cluster.base_dir().join("state").join("job_state");
    let saved = mtime(&state_file);
    cluster.restart_slurmctld_after(Stop::Kill).expect("restart slurmctld after SIGKILL");
    let lost = saved.is_some_and(|s| s < ended - Duration::from_millis(100));
    println!("job {job} on {node}: ended, slurmctld SIGKILLed; state saved before the end: {lost}; after the restart: {}", squeue_field(cluster, job, "%T %r"));
    lost.then_some(job)
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn a_job_ended_before_a_slurmctld_crash_leaves_nothing_allocated() {
    if skip_live_test("a_job_ended_before_a_slurmctld_crash_leaves_nothing_allocated") {
        return;
    }
    let sched = std::env::var("LIVE_LOST_COMPLETION_SCHED").unwrap_or_else(|_| "sched/energy".into());
    let under_energy = sched == "sched/energy";
    let plugins = plugin_dir();
    let mut cluster = LocalCluster::start(ClusterConfig {
        nodes: NODES,
        gpus_per_node: GPUS_PER_NODE,
        plugin_dir: Some(plugins.path().to_path_buf()),
        sched_type: sched.clone(),
        scheduler_parameters: under_energy.then(|| "sched_interval=-1,defer".into()),
        extra_files: vec![("energy.toml".into(), "[sched]\ninterval_s = 1\ndebug = true\n".into())],
        extra_slurm_conf: vec!["PrologFlags=Contain".into()],
        with_accounting: false,
        ..ClusterConfig::default()
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));

    let mut lost = Vec::new();
    for node in cluster.node_names() {
        // A few tries: the round needs the end to fall inside slurmctld's state-save delay.
        for _ in 0..3 {
            if let Some(job) = job_ended_then_crash(&mut cluster, &node) {
                lost.push(job);
                break;
            }
        }
    }
    assert!(!lost.is_empty(), "no round reached a completion lost with slurmctld (the state was saved before every SIGKILL)");

    let restarted = Instant::now();
    for &job in &lost {
        let left = ENDED_AFTER_RESTART.saturating_sub(restarted.elapsed());
        let state = cluster.wait_job_done(job, left).unwrap_or_else(|_| format!("not ended: {}", squeue_field(&cluster, job, "%T %r")));
        println!("job {job}: {state} {:.1} s after the last restart", restarted.elapsed().as_secs_f64());
    }

    // Nothing may stay allocated once the jobs are gone.
    let freed_by = Instant::now() + FREED;
    let mut tres = alloc_tres(&cluster);
    while tres.iter().any(|(_, t)| !t.is_empty()) && Instant::now() < freed_by {
        std::thread::sleep(Duration::from_millis(500));
        tres = alloc_tres(&cluster);
    }
    println!("{sched}: AllocTRES after the lost jobs ended: {tres:?}");
    let queue = format!("{}\n{}", run(&cluster, "squeue", &["-h", "-o", "%i %T %r %N"]), run(&cluster, "scontrol", &["show", "node"]));

    // And a job asking for everything starts.
    let everything = cluster
        .sbatch(&["-t", "5", "-N", &NODES.to_string(), &format!("--gres=gpu:{GPUS_PER_NODE}")], "sleep 1\n")
        .unwrap_or_else(|e| panic!("sbatch: {e}"));
    let all_started = cluster.wait_job_done(everything, FREED);
    let log = cluster.slurmctld_log();
    for line in log.lines().filter(|l| l.contains("missing from batch node") || l.contains("prolog completion lost") || l.contains("ended on all its nodes") || l.contains("register again")) {
        println!("slurmctld: {line}");
    }
    cluster.stop().expect("stop the cluster");
    if !under_energy {
        // Stock Slurm recovers these jobs as pending (its start was not saved) and runs them
        // again, or keeps a saved one running to its time limit: the round only reports.
        println!("{sched}: AllocTRES {tres:?}; a job asking for every GPU: {all_started:?}");
        return;
    }
    assert!(tres.iter().all(|(_, t)| t.is_empty()), "{sched}: resources still allocated with no job: {tres:?}; queue:\n{queue}\n{log}");
    assert_eq!(
        all_started.as_deref().unwrap_or("not done"),
        "COMPLETED",
        "{sched}: a job asking for every GPU did not run after the lost jobs ended ({all_started:?})"
    );
}
