//! What the live regression tests share: run a subset on one cluster under sched/backfill and
//! sched/energy, print the table, write the markdown section if asked, and fail on a broken
//! harness or a disagreement.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use slurm_regression::outcome::Verdict;
use slurm_regression::report::{disagreements, markdown_section, markdown_table, summary};
use slurm_regression::run::{RunOptions, SchedulerRun, run_tests};
use slurm_regression::scheduler::{Cluster, Scheduler, energy_plugin_dir};
use slurm_regression::testsuite;

/// The share of the subset that must pass under sched/backfill, in percent.
const MIN_BACKFILL_PASS_PERCENT: usize = 80;

/// Why the live test cannot run here, or `None` when it can.
pub fn cannot_run() -> Option<String> {
    slurm_testcluster::skip_reason().or_else(testsuite::skip_reason)
}

/// For the live test `name`: `true`, after printing `SKIPPED`, when it cannot run here; under
/// `CI=true` it panics instead, so that it never passes by skipping there.
pub fn skip(name: &str) -> bool {
    let Some(why) = cannot_run() else { return false };
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{name} cannot run under CI=true: {why}");
    println!("SKIPPED: {name}: {why}");
    true
}

/// Runs `cluster`'s subset under sched/backfill, then under sched/energy, each test killed after
/// `per_test_limit`, and asserts that backfill passes most of it and that sched/energy passes
/// every test backfill passes (no disagreement).
///
/// Full outputs go to `$SLURM_REGRESSION_OUT/<scheduler>/` if set (kept), else to a temporary
/// directory; with `SLURM_REGRESSION_MARKDOWN=<file>` the "last run" section is written there.
pub fn compare(cluster: Cluster, per_test_limit: Duration) {
    let t0 = Instant::now();
    let plugin = energy_plugin_dir(&slurm_testcluster::require_built("libsched_energy.so")).expect("plugin dir");
    let scratch = tempfile::Builder::new().prefix("slurm-regression-out-").tempdir().expect("output dir");
    let out_dir = std::env::var_os("SLURM_REGRESSION_OUT").map_or_else(|| scratch.path().to_path_buf(), PathBuf::from);
    let opts = RunOptions {
        cluster,
        src_dir: testsuite::slurm_src_dir().expect("SLURM_SRC_DIR"),
        energy_plugin_dir: plugin.path().to_path_buf(),
        out_dir,
        per_test_limit,
    };
    let tests: Vec<&str> = cluster.subset().iter().map(|e| e.test).collect();
    let run = |scheduler: Scheduler| -> SchedulerRun {
        let result = run_tests(scheduler, &tests, &opts, |r| {
            eprintln!("[{}] {} {} {:.1} s", scheduler.short_name(), r.test, r.verdict.label(), r.elapsed.as_secs_f64());
        });
        result.unwrap_or_else(|e| panic!("{e}"))
    };
    let backfill = run(Scheduler::Backfill);
    let energy = run(Scheduler::Energy);

    println!("{}", markdown_table(&backfill, &energy));
    println!(
        "{} cluster: sched/backfill: {} ({:.0} s); sched/energy: {} ({:.0} s); total {:.0} s",
        cluster.short_name(),
        summary(&backfill),
        backfill.elapsed.as_secs_f64(),
        summary(&energy),
        energy.elapsed.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );

    if let Some(path) = std::env::var_os("SLURM_REGRESSION_MARKDOWN") {
        std::fs::write(&path, markdown_section(&backfill, &energy)).expect("write the markdown section");
    }

    let passed = backfill.runs.iter().filter(|r| r.verdict == Verdict::Pass).count();
    assert!(
        passed * 100 >= tests.len() * MIN_BACKFILL_PASS_PERCENT,
        "only {passed} of {} tests pass under sched/backfill: the subset or the harness is broken\n{}",
        tests.len(),
        backfill.runs.iter().filter(|r| r.verdict != Verdict::Pass).map(|r| format!("{}:\n{}\n", r.test, r.output_tail)).collect::<String>()
    );
    let found = disagreements(&backfill, &energy);
    assert!(
        found.is_empty(),
        "{} test(s) pass under sched/backfill and not under sched/energy:\n{}",
        found.len(),
        found.iter().map(|d| d.describe()).collect::<Vec<_>>().join("\n")
    );
}
