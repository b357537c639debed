//! Running a list of expect tests under one scheduler: start the cluster, run each test with a
//! time limit, cancel whatever a test left behind before the next one, stop the cluster.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use slurm_testcluster::LocalCluster;

use crate::outcome::TestRun;
use crate::scheduler::{Cluster, Scheduler};
use crate::testsuite::Workspace;

/// How a run is done.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The cluster started for each scheduler.
    pub cluster: Cluster,
    /// The configured Slurm source tree holding `testsuite/expect`.
    pub src_dir: PathBuf,
    /// The directory holding `sched_energy.so` (only sched/energy uses it).
    pub energy_plugin_dir: PathBuf,
    /// Where each test's full output goes (`<out_dir>/<scheduler>/<test>.log`), with slurmctld's
    /// log of the run (`<out_dir>/<scheduler>/slurmctld.log`, and `slurmctld-<variant>.log` for
    /// each variant of the cluster some tests ran on).
    pub out_dir: PathBuf,
    /// A test running longer is killed and counted as a timeout.
    pub per_test_limit: Duration,
}

/// The results of one scheduler's run.
#[derive(Clone, Debug)]
pub struct SchedulerRun {
    pub scheduler: Scheduler,
    /// The cluster asked for (some tests may have run on a variant of it: [`TestRun::cluster`]).
    pub cluster: Cluster,
    pub runs: Vec<TestRun>,
    /// From the start of the (first) cluster to the stop of the last.
    pub elapsed: Duration,
    /// `scontrol --version`.
    pub slurm_version: String,
}

impl SchedulerRun {
    pub fn get(&self, test: &str) -> Option<&TestRun> {
        self.runs.iter().find(|r| r.test == test)
    }
}

/// The default limit of one test: twice the longest test of the subset under sched/backfill on
/// the 2-core machine (test3.11, about 50 s), with room to spare.
pub const DEFAULT_PER_TEST_LIMIT: Duration = Duration::from_secs(120);

/// The default limit of one test on `cluster`: [`DEFAULT_PER_TEST_LIMIT`] on the three-node
/// cluster; 300 s on the site cluster, where test3.11 (whole, on its variant) takes about 150 s
/// and test2.13 and test39.5 70-80 s under sched/backfill.
pub fn default_per_test_limit(cluster: Cluster) -> Duration {
    match cluster {
        Cluster::ThreeNode => DEFAULT_PER_TEST_LIMIT,
        Cluster::Site | Cluster::SiteA100Default | Cluster::SiteUniformCpus => Duration::from_secs(300),
    }
}

/// How long leftover jobs get to go away after `scancel`.
const CANCEL_WAIT: Duration = Duration::from_secs(30);

/// Runs `tests` in order under `scheduler` on `opts.cluster`, or on the variant of it a test
/// needs ([`Cluster::for_test`]): each run of consecutive tests on one cluster starts that
/// cluster, runs them and stops it. `progress` sees each result as it comes.
pub fn run_tests(
    scheduler: Scheduler,
    tests: &[&str],
    opts: &RunOptions,
    mut progress: impl FnMut(&TestRun),
) -> Result<SchedulerRun, String> {
    let started = Instant::now();
    let workspace = Workspace::new(&opts.src_dir, &opts.out_dir)?;
    let mut runs = Vec::new();
    let mut slurm_version = String::new();
    let mut rest = tests;
    while let Some(first) = rest.first() {
        let cluster = opts.cluster.for_test(first);
        let n = rest.iter().take_while(|t| opts.cluster.for_test(t) == cluster).count();
        let (group, after) = rest.split_at(n);
        rest = after;
        let (group_runs, version) = run_group(scheduler, cluster, group, opts, &workspace, &mut progress)?;
        runs.extend(group_runs);
        if slurm_version.is_empty() {
            slurm_version = version;
        }
    }
    Ok(SchedulerRun { scheduler, cluster: opts.cluster, runs, elapsed: started.elapsed(), slurm_version })
}

/// Starts `cluster` for `scheduler`, runs `tests` on it in order and stops it. Returns the
/// results and `scontrol --version`.
fn run_group(
    scheduler: Scheduler,
    cluster: Cluster,
    tests: &[&str],
    opts: &RunOptions,
    workspace: &Workspace,
    progress: &mut impl FnMut(&TestRun),
) -> Result<(Vec<TestRun>, String), String> {
    let local = LocalCluster::start(scheduler.config_on(cluster, &opts.energy_plugin_dir))
        .map_err(|e| format!("{} cluster ({}) did not start: {e}", scheduler.sched_type(), cluster.short_name()))?;
    let slurm_version = client_output(&local, "scontrol", &["--version"]);
    let mut runs = Vec::new();
    for test in tests {
        let run = workspace.run_test(&local, cluster, test, scheduler.short_name(), opts.per_test_limit)?;
        progress(&run);
        runs.push(run);
        cancel_leftover_jobs(&local);
    }
    // One slurmctld log per cluster: `slurmctld.log` for the cluster asked for, else
    // `slurmctld-<cluster>.log`.
    let log_name = if cluster == opts.cluster { "slurmctld.log".to_string() } else { format!("slurmctld-{}.log", cluster.short_name()) };
    save_slurmctld_log(&local, &opts.out_dir.join(scheduler.short_name()), &log_name);
    local.stop().map_err(|e| format!("stopping the {} cluster ({}): {e}", scheduler.sched_type(), cluster.short_name()))?;
    Ok((runs, slurm_version))
}

/// Cancels every job still known to slurmctld and waits (bounded) until they are gone, so that
/// one test's leftovers do not occupy the nodes of the next.
fn cancel_leftover_jobs(cluster: &LocalCluster) {
    let jobs = || -> Vec<String> {
        client_output(cluster, "squeue", &["-h", "-o", "%i"]).split_whitespace().map(str::to_string).collect()
    };
    let leftover = jobs();
    if leftover.is_empty() {
        return;
    }
    eprintln!("slurm-regression: cancelling jobs left behind: {}", leftover.join(" "));
    let _ = cluster.command("scancel").args(&leftover).output();
    let deadline = Instant::now() + CANCEL_WAIT;
    while !jobs().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn save_slurmctld_log(cluster: &LocalCluster, dir: &Path, name: &str) {
    let path = dir.join(name);
    if let Err(e) = std::fs::create_dir_all(dir).and_then(|_| std::fs::write(&path, cluster.slurmctld_log())) {
        eprintln!("slurm-regression: could not save {}: {e}", path.display());
    }
}

/// A client command's stdout, trimmed; empty if it could not run.
fn client_output(cluster: &LocalCluster, prog: &str, args: &[&str]) -> String {
    cluster
        .command(prog)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}
