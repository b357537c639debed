//! What the live tests of sched/energy share.

use std::path::{Path, PathBuf};

use slurm_testcluster::{ClusterConfig, LocalCluster};

/// A plugin dir holding the freshly built `libsched_energy.so` as `sched_energy.so`.
pub fn plugin_dir() -> tempfile::TempDir {
    let built = slurm_testcluster::require_built("libsched_energy.so");
    let dir = tempfile::Builder::new().prefix("sched-energy-").tempdir().expect("plugin temp dir");
    std::fs::copy(built, dir.path().join("sched_energy.so")).expect("copy the plugin");
    dir
}

/// `libspank_energy.so` as cargo built it (`cargo test -p spank-energy` or a workspace build), if
/// it is there: the tests of hints skip without it.
#[allow(dead_code)] // not every test binary of this crate uses it
pub fn spank_plugin() -> Option<PathBuf> {
    slurm_testcluster::built_artifact("libspank_energy.so")
}

/// The measured data (`$SLURM_ENERGY_DATA`, else `shared/data` next to the checkout), if there.
#[allow(dead_code)]
pub fn data_dir() -> Option<PathBuf> {
    let dir = model::data::default_data_dir();
    (dir.join("zeus").is_dir() && dir.join("gavel").is_dir()).then_some(dir)
}

/// A sched/energy cluster as most live tests here want it: `nodes` nodes (the harness's default
/// shape) loading the plugin from `plugins`, `SchedulerParameters=sched_interval=-1,defer` plus
/// `more_params` (e.g. `,bf_yield_sleep=2000000`), a 1 s cycle (with `debug`, every cycle's line
/// at info level), no accounting. Tests change what they need with `..energy_cluster(..)`.
#[allow(dead_code)]
pub fn energy_cluster(plugins: &Path, nodes: u32, more_params: &str, debug: bool) -> ClusterConfig {
    let toml = format!("[sched]\ninterval_s = 1\n{}", if debug { "debug = true\n" } else { "" });
    ClusterConfig {
        nodes,
        plugin_dir: Some(plugins.to_path_buf()),
        sched_type: "sched/energy".into(),
        scheduler_parameters: Some(format!("sched_interval=-1,defer{more_params}")),
        extra_files: vec![("energy.toml".into(), toml)],
        with_accounting: false,
        ..ClusterConfig::default()
    }
}

/// Runs a Slurm command of the cluster; panics with its stderr when it fails. Its stdout,
/// trimmed.
#[allow(dead_code)]
pub fn run(cluster: &LocalCluster, prog: &str, args: &[&str]) -> String {
    let out = cluster.command(prog).args(args).output().unwrap_or_else(|e| panic!("{prog}: {e}"));
    assert!(out.status.success(), "{prog} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A `squeue` field of one job (`%T`, `%N`, `%R`), empty once it left the queue.
#[allow(dead_code)]
pub fn squeue_field(cluster: &LocalCluster, job: u32, format: &str) -> String {
    let out = cluster.command("squeue").args(["-h", "-j", &job.to_string(), "-o", format]).output().expect("run squeue");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Waits until the job runs; the nodes it runs on.
#[allow(dead_code)]
pub fn wait_running_on(cluster: &LocalCluster, job: u32, timeout: std::time::Duration) -> String {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if squeue_field(cluster, job, "%T") == "RUNNING" {
            return squeue_field(cluster, job, "%N");
        }
        assert!(std::time::Instant::now() < deadline, "job {job} not running after {timeout:?} ({}):\n{}", squeue_field(cluster, job, "%T %R"), cluster.slurmctld_log());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// The job's `AdminComment=` (sched/energy's decision record).
#[allow(dead_code)]
pub fn admin_comment(cluster: &LocalCluster, job: u32) -> String {
    let out = cluster.command("scontrol").args(["show", "job", &job.to_string()]).output().expect("run scontrol");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().find_map(|l| l.trim().strip_prefix("AdminComment=")).unwrap_or("").to_string()
}
