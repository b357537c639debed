//! Slurm's own regression tests (the subset in `slurm_regression::subset`) on a local cluster
//! (3 nodes x 4 fake GPUs, accounting), once under sched/backfill and once under sched/energy:
//! every test that passes under backfill must pass under sched/energy, and backfill must pass
//! most of the subset (else the comparison says nothing).
//!
//! Part of `cargo test --workspace` (so CI runs it): about 9 minutes on the 2-core machine (two
//! clusters, 40 tests each). Alone:
//! `cargo test -p slurm-regression --test live_slurm_regression -- --nocapture`
//! (docs/slurm-regression.md).
//!
//! Needs root, Slurm, `expect` and the configured source tree (`$SLURM_SRC_DIR`), all of which
//! tools/slurm-env.sh provides. Without them it prints SKIPPED and returns, except when
//! `CI=true`, where it fails. Full outputs go to `$SLURM_REGRESSION_OUT` if set (kept), else to
//! a temporary directory. With `SLURM_REGRESSION_MARKDOWN=<file>` it also writes the "last run"
//! section of docs/slurm-regression.md there.

use std::path::PathBuf;
use std::time::Instant;

use slurm_regression::outcome::Verdict;
use slurm_regression::report::{disagreements, markdown_section, markdown_table, summary};
use slurm_regression::run::{DEFAULT_PER_TEST_LIMIT, RunOptions, SchedulerRun, run_tests};
use slurm_regression::scheduler::{Scheduler, energy_plugin_dir};
use slurm_regression::subset::SUBSET;
use slurm_regression::testsuite;

/// The share of the subset that must pass under sched/backfill, in percent.
const MIN_BACKFILL_PASS_PERCENT: usize = 80;

fn cannot_run() -> Option<String> {
    slurm_testcluster::skip_reason().or_else(testsuite::skip_reason)
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn live_slurm_regression() {
    if let Some(why) = cannot_run() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "live_slurm_regression cannot run under CI=true: {why}");
        println!("SKIPPED: live_slurm_regression: {why}");
        return;
    }
    let t0 = Instant::now();
    let plugin = energy_plugin_dir(&slurm_testcluster::require_built("libsched_energy.so")).expect("plugin dir");
    let scratch = tempfile::Builder::new().prefix("slurm-regression-out-").tempdir().expect("output dir");
    let out_dir = std::env::var_os("SLURM_REGRESSION_OUT").map_or_else(|| scratch.path().to_path_buf(), PathBuf::from);
    let opts = RunOptions {
        src_dir: testsuite::slurm_src_dir().expect("SLURM_SRC_DIR"),
        energy_plugin_dir: plugin.path().to_path_buf(),
        out_dir,
        per_test_limit: DEFAULT_PER_TEST_LIMIT,
    };
    let tests: Vec<&str> = SUBSET.iter().map(|e| e.test).collect();
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
        "sched/backfill: {} ({:.0} s); sched/energy: {} ({:.0} s); total {:.0} s",
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
