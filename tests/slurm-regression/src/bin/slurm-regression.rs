//! Runs Slurm's expect tests (the cluster's subset by default) under sched/backfill and
//! sched/energy on a local cluster (the three-node one by default, or the heterogeneous site
//! cluster with `--cluster site`, whose tests that assume alike nodes run on a variant of it),
//! prints the comparison and optionally writes it as markdown (a "last run" section of
//! docs/slurm-regression.md). Needs root, Slurm, `expect` and `$SLURM_SRC_DIR`, and a built
//! `libsched_energy.so` (`cargo build --workspace`).
//!
//! ```text
//! slurm-regression [--cluster three-node|site|site-a100-default|site-uniform-cpus]
//!                  [--sched both|backfill|energy] [--tests test1.2,test17.4,...]
//!                  [--out DIR] [--markdown FILE] [--per-test-limit-s N]
//! ```
//! Exit status: 0 when every test that passes under backfill passes under sched/energy too.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use slurm_regression::outcome::TestRun;
use slurm_regression::report::{disagreements, markdown_section, markdown_table, summary};
use slurm_regression::run::{RunOptions, default_per_test_limit, run_tests};
use slurm_regression::scheduler::{Cluster, Scheduler, energy_plugin_dir};
use slurm_regression::testsuite;

struct Args {
    cluster: Cluster,
    schedulers: Vec<Scheduler>,
    /// `None`: the cluster's subset.
    tests: Option<Vec<String>>,
    out_dir: PathBuf,
    markdown: Option<PathBuf>,
    /// `None`: the cluster's default.
    per_test_limit: Option<Duration>,
}

const USAGE: &str = "usage: slurm-regression [--cluster three-node|site|site-a100-default|site-uniform-cpus] [--sched both|backfill|energy] [--tests t1,t2,...] [--out DIR] [--markdown FILE] [--per-test-limit-s N]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        cluster: Cluster::ThreeNode,
        schedulers: Scheduler::BOTH.to_vec(),
        tests: None,
        out_dir: PathBuf::from("slurm-regression-out"),
        markdown: None,
        per_test_limit: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--cluster" => {
                let v = value()?;
                args.cluster = Cluster::parse(&v).ok_or_else(|| format!("unknown cluster {v}\n{USAGE}"))?;
            }
            "--sched" => {
                let v = value()?;
                args.schedulers = match v.as_str() {
                    "both" => Scheduler::BOTH.to_vec(),
                    name => vec![Scheduler::parse(name).ok_or_else(|| format!("unknown scheduler {name}"))?],
                }
            }
            "--tests" => args.tests = Some(value()?.split(',').map(str::to_string).collect()),
            "--out" => args.out_dir = PathBuf::from(value()?),
            "--markdown" => args.markdown = Some(PathBuf::from(value()?)),
            "--per-test-limit-s" => {
                let secs: u64 = value()?.parse().map_err(|e| format!("--per-test-limit-s: {e}"))?;
                args.per_test_limit = Some(Duration::from_secs(secs));
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("slurm-regression: {e}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> Result<ExitCode, String> {
    let args = parse_args()?;
    if let Some(why) = slurm_testcluster::skip_reason().or_else(testsuite::skip_reason) {
        return Err(format!("cannot run: {why}"));
    }
    let src_dir = testsuite::slurm_src_dir().ok_or("SLURM_SRC_DIR is not set")?;
    let built = slurm_testcluster::built_artifact("libsched_energy.so")
        .ok_or("libsched_energy.so not built next to this binary: run `cargo build --workspace` first")?;
    let plugin_dir = energy_plugin_dir(&built)?;
    let opts = RunOptions {
        cluster: args.cluster,
        src_dir,
        energy_plugin_dir: plugin_dir.path().to_path_buf(),
        out_dir: args.out_dir.clone(),
        per_test_limit: args.per_test_limit.unwrap_or_else(|| default_per_test_limit(args.cluster)),
    };
    let tests: Vec<&str> = match &args.tests {
        Some(names) => names.iter().map(String::as_str).collect(),
        None => args.cluster.subset().iter().map(|e| e.test).collect(),
    };
    let mut results = Vec::new();
    for &scheduler in &args.schedulers {
        eprintln!(
            "slurm-regression: {} tests under {} on the {} cluster",
            tests.len(),
            scheduler.sched_type(),
            args.cluster.short_name()
        );
        let run = run_tests(scheduler, &tests, &opts, |r| print_progress(scheduler, r))?;
        eprintln!(
            "slurm-regression: {}: {} in {:.0} s",
            scheduler.sched_type(),
            summary(&run),
            run.elapsed.as_secs_f64()
        );
        results.push(run);
    }
    let [backfill, energy] = match results.as_slice() {
        [b, e] => [b, e],
        _ => return Ok(ExitCode::SUCCESS),
    };
    let table = markdown_table(backfill, energy);
    println!("{table}");
    let found = disagreements(backfill, energy);
    for d in &found {
        eprintln!("DISAGREEMENT {}", d.describe());
    }
    if let Some(path) = &args.markdown {
        let text = markdown_section(backfill, energy);
        std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))?;
        eprintln!("slurm-regression: wrote {}", path.display());
    }
    Ok(if found.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn print_progress(scheduler: Scheduler, run: &TestRun) {
    eprintln!(
        "slurm-regression: [{}] {:<10} {:<7} {:>5.1} s {}",
        scheduler.short_name(),
        run.test,
        run.verdict.label(),
        run.elapsed.as_secs_f64(),
        run.reason.as_deref().unwrap_or("")
    );
}
