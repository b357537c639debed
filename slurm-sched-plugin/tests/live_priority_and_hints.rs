//! sched/energy against the real daemons (3 nodes x 4 fake GPUs, on loopback):
//!
//! 1. Priority is kept: with the cluster full of small low-priority jobs, a high-priority job
//!    needing a whole node (`--gres=gpu:4`) is not starved by a stream of 1-GPU jobs submitted
//!    after it: it starts no later under `sched/energy` than the same workload under stock
//!    `sched/backfill` (plus the plugin's cycle interval and two seconds of `sacct` rounding).
//! 2. Hints change placement: `--energy-policy=efficiency` 1-GPU jobs on an idle cluster are
//!    packed onto one node, and `--energy-share=deny` jobs carry `share=none` in their decision
//!    record even with sharing enabled in energy.toml (needs `spank_energy.so`; that test is
//!    skipped with a printed reason when cargo has not built it).
//!
//! Skipped (with a printed reason) only when not root or when Slurm is not installed.

use std::path::Path;
use std::time::{Duration, Instant};

use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};

mod common;
use common::{plugin_dir, spank_plugin};

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// One cluster at a time in this binary: the priority test's timings should not compete with
/// another cluster for the 2 cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
/// `[sched] interval_s` of the energy.toml used here.
const INTERVAL_S: i64 = 1;

fn energy_config(plugins: &Path, energy_toml: &str, mut extra: Vec<(String, String)>) -> ClusterConfig {
    extra.push(("energy.toml".into(), energy_toml.into()));
    ClusterConfig {
        nodes: 3,
        gpus_per_node: 4,
        plugin_dir: Some(plugins.to_path_buf()),
        sched_type: "sched/energy".into(),
        scheduler_parameters: Some("sched_interval=-1,defer".into()),
        extra_files: extra,
        with_accounting: true,
        ..ClusterConfig::default()
    }
}

/// `sacct -n -P -X -j <job> -o <fields>` with times as Unix seconds.
fn sacct_epoch(cluster: &LocalCluster, job: u32, fields: &str) -> Vec<String> {
    let out = cluster
        .command("sacct")
        .env("SLURM_TIME_FORMAT", "%s")
        .args(["-n", "-P", "-X", "-j", &job.to_string(), "-o", fields])
        .output()
        .expect("run sacct");
    assert!(out.status.success(), "sacct failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().split('|').map(str::to_string).collect()
}

fn running_jobs(cluster: &LocalCluster) -> usize {
    let out = cluster.command("squeue").args(["-h", "-t", "R", "-o", "%i"]).output().expect("run squeue");
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.trim().is_empty()).count()
}

fn wait_running(cluster: &LocalCluster, n: usize, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while running_jobs(cluster) < n {
        assert!(Instant::now() < deadline, "fewer than {n} jobs running after {timeout:?}:\n{}", cluster.slurmctld_log());
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn priority_of(cluster: &LocalCluster, job: u32) -> u64 {
    let out = cluster.command("squeue").args(["-h", "-j", &job.to_string(), "-o", "%Q"]).output().expect("run squeue");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0)
}

struct PriorityRun {
    /// Seconds from the big job's submission to its start (sacct, whole seconds).
    big_wait_s: i64,
    /// Stream jobs that started before the big job.
    stream_before_big: usize,
    stream_jobs: usize,
}

/// The workload of the priority test, on a running cluster.
fn priority_workload(cluster: &LocalCluster, label: &str) -> PriorityRun {
    // Fill all 12 GPUs with low-priority 1-GPU jobs, half ending after 4 s and half after 8 s
    // (alternating, so every node frees some GPUs early): a scheduler that hands freed GPUs to
    // the stream below instead of holding a node for the big job would starve it.
    let small = |sleep: &str| -> u32 {
        cluster
            .sbatch(&["--gres=gpu:1", "--nice=10000", "-t", "2", "--wrap", &format!("sleep {sleep}")], "")
            .unwrap_or_else(|e| panic!("sbatch: {e}"))
    };
    let fillers: Vec<u32> = (0..12).map(|i| small(if i % 2 == 0 { "4" } else { "8" })).collect();
    wait_running(cluster, 12, Duration::from_secs(60));

    // The high-priority whole-node job, then a stream of small jobs.
    let big = cluster
        .sbatch(&["--gres=gpu:4", "-t", "2", "--wrap", "sleep 3"], "")
        .unwrap_or_else(|e| panic!("sbatch big: {e}"));
    let mut stream: Vec<u32> = (0..8).map(|_| small("4")).collect();
    let big_prio = priority_of(cluster, big);
    let stream_prio = priority_of(cluster, stream[0]);
    assert!(big_prio > stream_prio, "{label}: big job priority {big_prio} <= stream priority {stream_prio}");
    // Keep the stream flowing while the fillers end.
    for _ in 0..4 {
        std::thread::sleep(Duration::from_secs(2));
        stream.extend((0..2).map(|_| small("4")));
    }

    for &job in fillers.iter().chain([big].iter()).chain(stream.iter()) {
        let state = cluster.wait_job_done(job, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(state, "COMPLETED", "{label}: job {job}");
    }
    for &job in fillers.iter().chain([big].iter()).chain(stream.iter()) {
        cluster.wait_accounted(job, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{label}: {e}"));
    }
    let big_row = sacct_epoch(cluster, big, "Submit,Start,NodeList,AllocTRES");
    let submit: i64 = big_row[0].parse().unwrap_or_else(|_| panic!("{label}: sacct Submit {big_row:?}"));
    let start: i64 = big_row[1].parse().unwrap_or_else(|_| panic!("{label}: sacct Start {big_row:?}"));
    assert!(big_row[3].split(',').any(|t| t == "gres/gpu=4"), "{label}: big job {big_row:?}");
    let stream_before_big = stream
        .iter()
        .filter(|&&j| sacct_epoch(cluster, j, "Start")[0].parse::<i64>().is_ok_and(|s| s < start))
        .count();
    println!(
        "{label}: big job {big} waited {} s (on {}), {stream_before_big} of {} stream jobs started before it",
        start - submit,
        big_row[2],
        stream.len()
    );
    PriorityRun { big_wait_s: start - submit, stream_before_big, stream_jobs: stream.len() }
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn priority_is_kept_no_later_than_sched_backfill() {
    if skip_live_test("priority_is_kept_no_later_than_sched_backfill") {
        return;
    }
    let _serial = serial();
    let t0 = Instant::now();

    // Stock sched/backfill, with a short backfill interval so it is not handicapped.
    let stock = LocalCluster::start(ClusterConfig {
        sched_type: "sched/backfill".into(),
        scheduler_parameters: Some("bf_interval=1".into()),
        ..ClusterConfig::default()
    })
    .unwrap_or_else(|e| panic!("sched/backfill cluster did not start: {e}"));
    let backfill = priority_workload(&stock, "sched/backfill");
    stock.stop().expect("stop the sched/backfill cluster");

    let plugins = plugin_dir();
    let toml = format!("[sched]\ninterval_s = {INTERVAL_S}\ndebug = true\n");
    let cluster = LocalCluster::start(energy_config(plugins.path(), &toml, Vec::new()))
        .unwrap_or_else(|e| panic!("sched/energy cluster did not start: {e}"));
    let energy = priority_workload(&cluster, "sched/energy");
    let log = cluster.slurmctld_log();
    assert!(!log.contains("internal error (panic"), "{log}");
    assert!(!log.contains("sched/energy: cycle skipped"), "{log}");
    cluster.stop().expect("stop the sched/energy cluster");

    // Not starved: the big job started while stream jobs were still waiting...
    assert!(
        energy.stream_before_big < energy.stream_jobs,
        "sched/energy: all {} stream jobs started before the high-priority job",
        energy.stream_jobs
    );
    // ...and no later than under sched/backfill, up to one cycle plus two seconds for sacct's
    // whole seconds (Submit and Start are both truncated). Losing the node to even one stream job
    // would cost 4 s more.
    let slack = INTERVAL_S + 2;
    assert!(
        energy.big_wait_s <= backfill.big_wait_s + slack,
        "high-priority job waited {} s under sched/energy, {} s under sched/backfill (slack {slack} s)",
        energy.big_wait_s,
        backfill.big_wait_s
    );
    println!(
        "priority: big job waited {} s under sched/energy vs {} s under sched/backfill; test {:.1} s",
        energy.big_wait_s,
        backfill.big_wait_s,
        t0.elapsed().as_secs_f64()
    );
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn hints_pack_efficiency_jobs_and_deny_sharing() {
    if skip_live_test("hints_pack_efficiency_jobs_and_deny_sharing") {
        return;
    }
    let Some(spank) = spank_plugin() else {
        return slurm_testcluster::skip_for("hints_pack_efficiency_jobs_and_deny_sharing", "libspank_energy.so not built (run `cargo test -p spank-energy -p slurm-sched-plugin`)");
    };
    let _serial = serial();
    let t0 = Instant::now();
    let plugins = plugin_dir();
    let toml = format!("[sched]\ninterval_s = {INTERVAL_S}\ndebug = true\n\n[planner]\nsharing = true\n\n[planner.hints]\nshare_allowed = true\n");
    let plugstack = format!("required {}\n", spank.display());
    let cluster = LocalCluster::start(energy_config(plugins.path(), &toml, vec![("plugstack.conf".into(), plugstack)]))
        .unwrap_or_else(|e| panic!("cluster did not start: {e}"));

    // 1. Four efficiency 1-GPU jobs on an idle 3x4 cluster share one node.
    let eff: Vec<u32> = (0..4)
        .map(|_| {
            cluster
                .sbatch(&["--energy-policy=efficiency", "--gres=gpu:1", "-t", "2", "--wrap", "sleep 4"], "")
                .unwrap_or_else(|e| panic!("sbatch: {e}"))
        })
        .collect();
    for &job in &eff {
        assert_eq!(cluster.wait_job_done(job, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}")), "COMPLETED", "job {job}");
    }
    let mut nodes = Vec::new();
    for &job in &eff {
        cluster.wait_accounted(job, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
        let row = sacct_epoch(&cluster, job, "NodeList,AdminComment");
        println!("efficiency job {job}: {row:?}");
        assert!(row[1].starts_with("energy:policy=efficiency "), "job {job} record: {row:?}");
        nodes.push(row[0].clone());
    }
    assert!(nodes.iter().all(|n| n == &nodes[0]), "efficiency jobs spread over nodes: {nodes:?}");

    // 2. share=deny jobs (mixed with share=allow ones) never share a GPU: their record says so,
    //    and no other job ran on their node's GPU at the same time.
    let mut jobs = Vec::new();
    for i in 0..6 {
        let share = if i % 2 == 0 { "deny" } else { "allow" };
        let job = cluster
            .sbatch(
                &[
                    "--energy-policy=efficiency",
                    &format!("--energy-share={share}"),
                    "--gres=gpu:1",
                    "-t",
                    "2",
                    "--wrap",
                    "echo GPUS=$CUDA_VISIBLE_DEVICES; sleep 3",
                ],
                "",
            )
            .unwrap_or_else(|e| panic!("sbatch: {e}"));
        jobs.push((job, share));
    }
    for &(job, _) in &jobs {
        assert_eq!(cluster.wait_job_done(job, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}")), "COMPLETED", "job {job}");
    }
    // (node, gpu, start, end) per job.
    let mut uses = Vec::new();
    for &(job, share) in &jobs {
        cluster.wait_accounted(job, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
        let row = sacct_epoch(&cluster, job, "NodeList,Start,End,AdminComment");
        println!("share={share} job {job}: {row:?}");
        let record = &row[3];
        assert!(record.starts_with("energy:policy=efficiency "), "job {job} record: {row:?}");
        if share == "deny" {
            assert!(record.contains(" share=none "), "share=deny job {job} shares: {row:?}");
        }
        let out = cluster.job_output(job).unwrap_or_default();
        let gpu = out.lines().find_map(|l| l.strip_prefix("GPUS=")).unwrap_or_default().trim().to_string();
        assert!(!gpu.is_empty(), "job {job} output: {out}");
        uses.push((job, share, row[0].clone(), gpu, row[1].parse::<i64>().unwrap(), row[2].parse::<i64>().unwrap()));
    }
    for a in uses.iter().filter(|u| u.1 == "deny") {
        for b in uses.iter().filter(|u| u.0 != a.0) {
            // Same node and GPU index, overlapping in time (sacct seconds: strict overlap).
            let overlap = a.2 == b.2 && a.3 == b.3 && a.4 < b.5 && b.4 < a.5;
            assert!(!overlap, "share=deny job {} shared GPU {} on {} with job {}", a.0, a.3, a.2, b.0);
        }
    }

    let log = cluster.slurmctld_log();
    assert!(!log.contains("internal error (panic"), "{log}");
    cluster.stop().expect("stop the cluster");
    println!("hints: test {:.1} s", t0.elapsed().as_secs_f64());
}
