//! Benchmark: one planner cycle over 10,000 pending jobs on 1,000 nodes x 8 GPUs with a
//! realistic mix of running jobs (about 85 % of GPUs busy, some time-shared), and the same at the
//! scale of the largest centres: 50,000 pending jobs on 10,000 nodes x 8 GPUs.
//!
//! `cargo bench -p model --bench plan_cycle` prints the time of a cycle (snapshot to decisions,
//! including building the cluster view) with Slurm's default test depth (500 jobs, like
//! `bf_max_job_test`) and with every one of the 10,000 jobs tested; then, on the large cluster,
//! with every one of the 50,000 jobs tested and a reservation for every blocked one (`-- large`
//! times only that one). "a tag per job" is the 10,000-job cycle with every job's tag its own
//! (what a user who writes a new `--energy-tag` on every job makes of the cycle). "bf_window 1
//! day" plans reservations only within a day, as sched/energy does under slurm.conf's default
//! `bf_window` (jobs that cannot start within it get none, as under sched/backfill).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The system allocator, counting allocations (a deterministic figure beside the noisy times).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed to the system allocator unchanged; the counter only observes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's layout contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as for `dealloc`; the new size is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

use model::config::PlannerConfig;
use model::planner::plan_snapshot;
use model::predictor::Predictor;
use model::types::Snapshot;

#[path = "../tests/support/bench_snapshot.rs"]
mod bench_snapshot;

/// Time the cycles whose name contains one of the words given on the command line (all of
/// them without any), e.g. `cargo bench -p model --bench plan_cycle -- 10,000` for profiling.
fn selected(name: &str) -> bool {
    let words: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    words.is_empty() || words.iter().any(|w| name.contains(w.as_str()))
}

fn measure(name: &str, s: &Snapshot, cfg: &PlannerConfig, pred: &Predictor) {
    if !selected(name) {
        return;
    }
    let rounds = 15;
    let mut times_ms = Vec::with_capacity(rounds);
    let mut cpu_ms = 0.0;
    let mut last = None;
    let allocations_before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..rounds {
        let (t, cpu_before_ns) = (Instant::now(), thread_cpu_ns());
        let out = plan_snapshot(s, cfg, pred);
        times_ms.push(t.elapsed().as_secs_f64() * 1e3);
        cpu_ms += thread_cpu_ns().zip(cpu_before_ns).map_or(f64::NAN, |(after, before)| after.saturating_sub(before) as f64 / 1e6);
        last = Some(out);
    }
    times_ms.sort_by(f64::total_cmp);
    let mean = times_ms.iter().sum::<f64>() / rounds as f64;
    let cpu_mean = cpu_ms / rounds as f64;
    let allocations = (ALLOCATIONS.load(Ordering::Relaxed) - allocations_before) / rounds as u64;
    let stats = last.map(|o| o.stats).unwrap_or_default();
    println!(
        "{name:<38} mean {mean:7.2} ms  p50 {:7.2} ms  max {:7.2} ms  on-CPU mean {cpu_mean:7.2} ms  {allocations} allocations  (tested {}, started {}, reservations {}, nodes scored {})",
        times_ms[rounds / 2],
        times_ms[rounds - 1],
        stats.jobs_tested,
        stats.jobs_started,
        stats.reservations,
        stats.nodes_scored
    );
}

fn main() {
    let pred = match Predictor::from_data_dir(&model::data::default_data_dir(), "v100") {
        Ok(p) => p,
        Err(e) => {
            eprintln!("plan_cycle: cannot load the reference data: {e}");
            std::process::exit(1);
        }
    };
    let s = bench_snapshot::snapshot(1000, 10_000, 42);
    describe(&s);
    let default = PlannerConfig::default();
    measure("default (500 tested, every one reserved)", &s, &default, &pred);
    let depth4 = PlannerConfig { reservation_depth: 4, ..PlannerConfig::default() };
    measure("500 tested, depth 4", &s, &depth4, &pred);
    let all = PlannerConfig { max_jobs_tested: 10_000, ..PlannerConfig::default() };
    measure("all 10,000 tested, every one reserved", &s, &all, &pred);
    let baseline = PlannerConfig { max_jobs_tested: 10_000, ..PlannerConfig::slurm_baseline() };
    measure("slurm baseline, all 10,000 tested", &s, &baseline, &pred);
    // Tags are the users' to choose: a new one on every job (running and pending) must cost
    // about what a few shared ones do.
    let mut own_tags = s.clone();
    for (i, r) in own_tags.running.iter_mut().enumerate() {
        r.hints.tag = r.hints.tag.as_ref().map(|t| format!("{t}-run{i}"));
    }
    for (i, p) in own_tags.pending.iter_mut().enumerate() {
        p.hints.tag = p.hints.tag.as_ref().map(|t| format!("{t}-job{i}"));
    }
    measure("all 10,000 tested, a tag per job", &own_tags, &all, &pred);
    // As sched/energy plans under slurm.conf's defaults: reservations within bf_window (1 day).
    let windowed = PlannerConfig { reservation_window_s: DAY_S, ..all.clone() };
    measure("all 10,000 tested, bf_window 1 day", &s, &windowed, &pred);

    // The largest centres: 50x the jobs on 10x the nodes, the same mix (same generator and
    // seed). Every job tested and every blocked one reserved: the reservation depth is raised
    // with the test depth, as `ALL_TESTED` (10,000) covers the 10,000-job cycle above.
    let large_name = "large: all 50,000 tested, every one reserved";
    if selected(large_name) {
        let s = bench_snapshot::snapshot(10_000, 50_000, 42);
        describe(&s);
        let all = PlannerConfig { max_jobs_tested: 50_000, reservation_depth: 50_000, ..PlannerConfig::default() };
        measure(large_name, &s, &all, &pred);
        let windowed = PlannerConfig { reservation_window_s: DAY_S, ..all.clone() };
        measure("large: all 50,000 tested, bf_window 1 day", &s, &windowed, &pred);
    }
}

/// Time this thread has run on a CPU (ns), from the kernel's scheduler statistics: unlike the
/// wall time, it does not count the time the thread waited for a CPU, which on a machine
/// shared with other work is most of the spread between runs (caches shared with that work
/// still slow it). `None` where /proc does not say.
fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// sched/backfill's default `bf_window` (s), which sched/energy honours.
const DAY_S: f64 = 24.0 * 3600.0;

fn describe(s: &Snapshot) {
    let busy: usize = s.running.iter().map(|r| r.allocations[0].gpu_indices.len()).sum();
    println!("plan_cycle: {} nodes x 8 GPUs, {} running jobs ({} GPU slots), {} pending", s.nodes.len(), s.running.len(), busy, s.pending.len());
}
