//! Scheduling cycle time of sched/energy against stock sched/backfill on a live local cluster,
//! with the same 2,000-job queue.
//!
//! ```sh
//! cargo bench -p slurm-sched-plugin --bench live_cycle_time            # as root, Slurm installed
//! cargo bench -p slurm-sched-plugin --bench live_cycle_time -- --jobs 500 --measure-s 30
//! # time under the locks on a big table: 10,000 pending, 1,000 nodes (994 of them down)
//! cargo bench -p slurm-sched-plugin --bench live_cycle_time -- --jobs 10000 --extra-nodes 994 --energy-only
//! ```
//!
//! For each scheduler in turn: a fresh cluster of the same shape (accounting off), the same
//! queue submitted held (`sbatch -H`, every job sleeps far longer than the run, so the nodes stay
//! full and the queue stays), released at once with one `scontrol release`, then cycles are
//! measured for a fixed window. sched/backfill's figures come from `sdiag` (reset right after the
//! release); sched/energy's from its own per-cycle log lines (`sched/energy: debug: cycle N:
//! X ms (locked L, snapshot S, ...) ...; tested T started S ...`), once as configured by default
//! (a reservation for every blocked job it tests, as sched/backfill makes) and once with
//! `reservation_depth = 4`. All test at most 500 jobs per cycle
//! (`bf_max_job_test` default, `max_jobs_tested` default) and run a cycle every 5 s. The ratio
//! printed last is mean cycle time of sched/energy over that of sched/backfill, from this run.
//!
//! Not run by `cargo test` (a `harness = false` bench). Prints `SKIPPED: ...` when not root or
//! Slurm is absent.

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};

#[path = "../tests/common/mod.rs"]
mod common;

struct Options {
    jobs: usize,
    nodes: u32,
    /// Nodes in slurm.conf without a slurmd (down): a big node table for the snapshot.
    extra_nodes: u32,
    energy_only: bool,
    measure_s: u64,
}

impl Options {
    fn parse() -> Result<Options, String> {
        let mut o = Options { jobs: 2_000, nodes: 6, extra_nodes: 0, energy_only: false, measure_s: 60 };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
            match a.as_str() {
                "--jobs" => o.jobs = value("--jobs")?.parse().map_err(|e| format!("--jobs: {e}"))?,
                "--nodes" => o.nodes = value("--nodes")?.parse().map_err(|e| format!("--nodes: {e}"))?,
                "--measure-s" => o.measure_s = value("--measure-s")?.parse().map_err(|e| format!("--measure-s: {e}"))?,
                "--extra-nodes" => o.extra_nodes = value("--extra-nodes")?.parse().map_err(|e| format!("--extra-nodes: {e}"))?,
                "--energy-only" => o.energy_only = true,
                // cargo bench passes --bench; ignore it and anything test-harness-like.
                "--bench" => {}
                "--help" | "-h" => {
                    println!(
                        "live_cycle_time [--jobs N (2000)] [--nodes N (6, 4 GPUs each)] [--measure-s S (60)]\n\
                         [--extra-nodes N (0): down nodes added to the table] [--energy-only]\n\
                         Same held queue under sched/backfill and sched/energy; cycle times from sdiag and the plugin's log."
                    );
                    std::process::exit(0);
                }
                other if other.starts_with('-') => return Err(format!("unknown option {other}")),
                _ => {} // a name filter from cargo bench
            }
        }
        Ok(o)
    }
}

/// One scheduler's figures over the measuring window.
#[derive(Debug, Default)]
struct Figures {
    cycles: usize,
    mean_ms: f64,
    last_ms: f64,
    max_ms: f64,
    /// Jobs tested per cycle (mean), and the last cycle's.
    tested_mean: f64,
    tested_last: f64,
    /// Queue length the scheduler saw (mean).
    queue_mean: f64,
    /// Jobs the scheduler itself started during the window.
    started: usize,
    /// sched/energy: time under slurmctld's locks per cycle (mean, max) and of the snapshot.
    locked_mean_ms: f64,
    locked_max_ms: f64,
    snapshot_mean_ms: f64,
    running_at_end: usize,
    note: String,
}

/// The queue: job `i` asks for 1 to 4 GPUs, 1 to 4 CPUs, 256 to 2,048 MB and a time limit
/// between 30 and 240 minutes, in a fixed pattern (so every scheduler sees exactly the same jobs,
/// and a scheduler cannot skip most of them by remembering a few shapes that did not fit).
fn job_args(i: usize) -> Vec<String> {
    let gpus = [1, 2, 1, 4, 1, 2, 3, 1][i % 8];
    let cpus = 1 + i * 7 % 4;
    let mem_mb = 256 * (1 + i * 5 % 8);
    let limit_min = 30 + (i * 37 % 8) * 30;
    vec![
        "-H".into(),
        "-J".into(),
        format!("bench{i}"),
        format!("--gres=gpu:{gpus}"),
        "-c".into(),
        cpus.to_string(),
        format!("--mem={mem_mb}"),
        "-t".into(),
        limit_min.to_string(),
        "-o".into(),
        "/dev/null".into(),
        "--wrap".into(),
        "sleep 7200".into(),
    ]
}

fn submit_all(cluster: &LocalCluster, jobs: usize) -> Vec<u32> {
    let t0 = Instant::now();
    let threads = 4;
    let mut ids: Vec<u32> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    (t..jobs)
                        .step_by(threads)
                        .map(|i| {
                            let args = job_args(i);
                            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                            cluster.sbatch(&refs, "").unwrap_or_else(|e| panic!("sbatch job {i}: {e}"))
                        })
                        .collect::<Vec<u32>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("submit thread")).collect()
    });
    ids.sort_unstable();
    eprintln!("  submitted {} held jobs in {:.1} s", ids.len(), t0.elapsed().as_secs_f64());
    ids
}

fn run_cmd(cluster: &LocalCluster, prog: &str, args: &[&str]) -> String {
    let out = cluster.command(prog).args(args).output().unwrap_or_else(|e| panic!("{prog}: {e}"));
    assert!(out.status.success(), "{prog} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn release_all(cluster: &LocalCluster, ids: &[u32]) {
    for chunk in ids.chunks(500) {
        let list = chunk.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        run_cmd(cluster, "scontrol", &["release", &list]);
    }
}

fn count_running(cluster: &LocalCluster) -> usize {
    run_cmd(cluster, "squeue", &["-h", "-t", "R", "-o", "%i"]).lines().count()
}

/// `name: value` inside sdiag's "Backfilling stats" section.
fn sdiag_value(sdiag: &str, name: &str) -> Option<f64> {
    let section = sdiag.split("Backfilling stats").nth(1)?;
    section.lines().find_map(|l| {
        let (k, v) = l.trim().split_once(':')?;
        (k.trim() == name).then(|| v.split_whitespace().next()?.parse().ok())?
    })
}

/// sched/energy's configuration in the benchmark: cycles every 5 s, statistics logged, and
/// `extra` (e.g. a deeper reservation).
fn energy_toml(extra: &str) -> String {
    format!("[sched]\ninterval_s = 5\ndebug = true\n\n[planner]\n{extra}\n")
}

fn cluster_config(plugin_dir: &Path, sched_type: &str, nodes: u32, extra_nodes: u32, jobs: usize, energy_extra: &str) -> ClusterConfig {
    let energy = sched_type == "sched/energy";
    // Slurm's default MaxJobCount (10,000) would refuse the last jobs of a big queue.
    let mut extra_slurm_conf = vec![format!("MaxJobCount={}", (2 * jobs).max(10_000))];
    if extra_nodes > 0 {
        // Never started: slurmctld keeps them down, but they are in every node table walk.
        extra_slurm_conf.push(format!("NodeName=x[1-{extra_nodes}] NodeAddr=127.0.0.2 CPUs=8 RealMemory=4096 Gres=gpu:4 State=DOWN"));
        extra_slurm_conf.push("PartitionName=big Nodes=ALL State=UP MaxTime=INFINITE".into());
    }
    ClusterConfig {
        extra_slurm_conf,
        nodes,
        gpus_per_node: 4,
        cpus_per_node: 8,
        plugin_dir: Some(plugin_dir.to_path_buf()),
        sched_type: sched_type.into(),
        // sched/energy must be the only one starting jobs; sched/backfill keeps slurmctld's main
        // scheduler (the stock setup), but sdiag's backfill figures time the backfill thread only.
        scheduler_parameters: Some(if energy { "sched_interval=-1,defer".into() } else { "bf_interval=5".into() }),
        extra_files: vec![("energy.toml".into(), energy_toml(energy_extra))],
        with_accounting: false,
        ..ClusterConfig::default()
    }
}

fn measure(plugin_dir: &Path, sched_type: &str, energy_extra: &str, o: &Options) -> Figures {
    eprintln!("{sched_type} {energy_extra}: starting a {}-node cluster", o.nodes);
    let cluster = LocalCluster::start(cluster_config(plugin_dir, sched_type, o.nodes, o.extra_nodes, o.jobs, energy_extra))
        .unwrap_or_else(|e| panic!("cluster: {e}"));
    let ids = submit_all(&cluster, o.jobs);
    let log_offset = cluster.slurmctld_log().len();
    release_all(&cluster, &ids);
    run_cmd(&cluster, "sdiag", &["--reset"]);
    eprintln!("  released; measuring for {} s", o.measure_s);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(o.measure_s) {
        std::thread::sleep(Duration::from_secs(5));
        eprint!(".");
        let _ = std::io::stderr().flush();
    }
    eprintln!();
    let mut f = Figures { running_at_end: count_running(&cluster), ..Figures::default() };
    if sched_type == "sched/backfill" {
        let sdiag = run_cmd(&cluster, "sdiag", &[]);
        let us = |name: &str| sdiag_value(&sdiag, name).unwrap_or(f64::NAN);
        f.cycles = us("Total cycles") as usize;
        f.mean_ms = us("Mean cycle") / 1e3;
        f.last_ms = us("Last cycle") / 1e3;
        f.max_ms = us("Max cycle") / 1e3;
        // 22.05 labels the mean "Depth Mean (try depth)".
        f.tested_mean = sdiag_value(&sdiag, "Depth Mean (try sched)").or_else(|| sdiag_value(&sdiag, "Depth Mean (try depth)")).unwrap_or(f64::NAN);
        f.tested_last = us("Last depth cycle (try sched)");
        f.queue_mean = us("Queue length mean");
        f.started = us("Total backfilled jobs (since last stats cycle start)") as usize;
        f.note = format!(
            "sdiag: depth mean {} (all jobs looked at), last queue length {}",
            us("Depth Mean"),
            us("Last queue length")
        );
        println!("--- sdiag (sched/backfill, after {} s) ---\n{}", o.measure_s, sdiag.trim_end());
    } else {
        let log = cluster.slurmctld_log();
        let window = log.get(log_offset..).unwrap_or("");
        let cycles: Vec<EnergyCycle> = window.lines().filter_map(parse_energy_cycle).collect();
        assert!(!cycles.is_empty(), "no sched/energy cycle lines after the release:\n{window}");
        let n = cycles.len() as f64;
        f.cycles = cycles.len();
        f.mean_ms = cycles.iter().map(|c| c.ms).sum::<f64>() / n;
        f.max_ms = cycles.iter().map(|c| c.ms).fold(0.0, f64::max);
        f.tested_mean = cycles.iter().map(|c| c.tested as f64).sum::<f64>() / n;
        f.queue_mean = cycles.iter().map(|c| c.pending as f64).sum::<f64>() / n;
        f.started = cycles.iter().map(|c| c.started).sum();
        f.locked_mean_ms = cycles.iter().map(|c| c.locked_ms).sum::<f64>() / n;
        f.locked_max_ms = cycles.iter().map(|c| c.locked_ms).fold(0.0, f64::max);
        f.snapshot_mean_ms = cycles.iter().map(|c| c.snapshot_ms).sum::<f64>() / n;
        if let Some(last) = cycles.last() {
            f.last_ms = last.ms;
            f.tested_last = last.tested as f64;
            f.note = format!("last cycle line: {}", last.line);
        }
    }
    eprintln!("  stopping ({} jobs to cancel)", ids.len());
    cluster.stop().unwrap_or_else(|e| eprintln!("  stop: {e}"));
    f
}

struct EnergyCycle {
    ms: f64,
    locked_ms: f64,
    snapshot_ms: f64,
    pending: usize,
    tested: usize,
    started: usize,
    line: String,
}

/// `... sched/energy: debug: cycle 12: 4.123 ms (locked ...); nodes 6 running 24 pending 1976;
/// tested 500 started 0 ...`
fn parse_energy_cycle(line: &str) -> Option<EnergyCycle> {
    let rest = line.split("sched/energy: debug: cycle ").nth(1)?;
    let (_, rest) = rest.split_once(": ")?;
    let ms = rest.split_whitespace().next()?.parse().ok()?;
    let inner = |key: &str| -> Option<f64> { rest.split(key).nth(1)?.split([',', ')']).next()?.trim().parse().ok() };
    let word_after = |key: &str| -> Option<usize> {
        let mut words = rest.split_whitespace();
        words.find(|w| *w == key)?;
        words.next()?.trim_end_matches(';').parse().ok()
    };
    Some(EnergyCycle {
        ms,
        locked_ms: inner("(locked ")?,
        snapshot_ms: inner("snapshot ")?,
        pending: word_after("pending")?,
        tested: word_after("tested")?,
        started: word_after("started")?,
        line: line.trim().to_string(),
    })
}

fn main() {
    if skip_live_test("live_cycle_time") {
        return;
    }
    let o = match Options::parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("live_cycle_time: {e}");
            std::process::exit(2);
        }
    };
    let plugins = common::plugin_dir();
    let backfill = if o.energy_only { Figures::default() } else { measure(plugins.path(), "sched/backfill", "", &o) };
    // As configured by default (a reservation for every blocked job it tests, like
    // sched/backfill), and with only 4 reservations per cycle.
    let energy = measure(plugins.path(), "sched/energy", "", &o);
    let energy_shallow = if o.energy_only { Figures::default() } else { measure(plugins.path(), "sched/energy", "reservation_depth = 4", &o) };

    println!();
    println!(
        "Cycle time, same {}-job queue, {} nodes x 4 GPUs (8 CPUs each) + {} down nodes, {} s after the release:",
        o.jobs, o.nodes, o.extra_nodes, o.measure_s
    );
    println!(
        "{:<15} {:>6} {:>10} {:>10} {:>10} {:>12} {:>12} {:>10} {:>8} {:>8} {:>11} {:>11} {:>12}",
        "scheduler", "cycles", "mean ms", "last ms", "max ms", "tested/cyc", "tested last", "queue", "started", "running", "locked ms", "locked max", "snapshot ms"
    );
    for (name, f) in [("sched/backfill", &backfill), ("sched/energy", &energy), ("energy depth4", &energy_shallow)] {
        if f.cycles == 0 {
            continue;
        }
        println!(
            "{:<15} {:>6} {:>10.3} {:>10.3} {:>10.3} {:>12.1} {:>12.0} {:>10.0} {:>8} {:>8} {:>11.3} {:>11.3} {:>12.3}",
            name, f.cycles, f.mean_ms, f.last_ms, f.max_ms, f.tested_mean, f.tested_last, f.queue_mean, f.started, f.running_at_end, f.locked_mean_ms, f.locked_max_ms, f.snapshot_mean_ms
        );
    }
    if !o.energy_only {
        println!("backfill: {}", backfill.note);
        println!("depth4:   {}", energy_shallow.note);
        let ratio = energy.mean_ms / backfill.mean_ms;
        println!("ratio sched/energy (every tested job reserved) / sched/backfill (mean cycle time): {ratio:.3}x (goal < 0.25x)");
        let ratio_shallow = energy_shallow.mean_ms / backfill.mean_ms;
        println!("ratio sched/energy with reservation_depth = 4 / sched/backfill: {ratio_shallow:.3}x");
    }
    println!("energy:   {}", energy.note);
}
