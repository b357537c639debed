//! A real Slurm cluster on this machine, for integration tests.
//!
//! [`LocalCluster::start`] builds everything under one temporary base dir: munged with its own
//! key and socket, MariaDB and slurmdbd (unless `with_accounting` is off), slurmctld and N slurmd
//! (`slurmd -N nK`) with fake GPU character devices, on free loopback ports, and returns once every
//! node is idle. Client commands run against it through [`LocalCluster::command`], which sets
//! `SLURM_CONF`. Dropping the cluster (or [`LocalCluster::stop`]) stops every daemon it started,
//! by pid, in reverse order, and removes the base dir unless `SLURM_TESTCLUSTER_KEEP=1`.
//!
//! It must never signal a process it did not start: by default every daemon is our child, run in
//! the foreground, and is only signalled before we have reaped it. In site mode
//! ([`DaemonMode::Systemd`], `ClusterConfig::daemon_mode`) slurmctld and slurmd run as sites'
//! systemd units run them (`--systemd` with a notify-socket stand-in where the release has it,
//! else daemonised with their `PidFile`); the harness follows each one's real process across
//! the re-executions of a reconfigure and signals it through a pidfd, opened only for a process
//! whose environment names this cluster's slurm.conf. [`LocalCluster::signal_daemon`],
//! [`LocalCluster::rotate_log`] (log rotation: rename, then SIGHUP) and
//! [`LocalCluster::main_pids`] are for tests of that mode.
//!
//! Needs root and Slurm's packages; `tools/slurm-env.sh` installs them. Tests call
//! [`skip_reason`] first and skip with a message where it returns `Some`.

mod config;
mod daemon;
mod error;
mod freshness;
mod notify;
pub mod munged;
mod site;
mod util;

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub use config::{ClusterConfig, DaemonMode, NodeShape};
pub use site::{SITE_PARTITIONS, site_cluster};
pub use error::ClusterError;
pub use util::{PREFIX_ENV, pid_exists, slurm_prefix};

use config::{CLUSTER_NAME, DB_NAME, DB_USER, Layout, Ports, SlurmConfInput};
use daemon::{Daemon, SiteWatch};
use util::{create_dir, find_program, poll, require_program, run, set_mode, tail_file, write_file};

/// Set to `1` to keep the base dir (configuration, logs, job output) after the cluster stops.
pub const KEEP_ENV: &str = "SLURM_TESTCLUSTER_KEEP";

const POLL: Duration = Duration::from_millis(200);
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// SIGTERM to SIGKILL, as systemd's default TimeoutStopSec (90 s; Slurm's units set none):
/// slurmctld alone may wait CONTROL_TIMEOUT (30 s) for RPCs still in flight before it saves
/// its state, so a 30 s grace could kill it before that save.
const STOP_GRACE: Duration = Duration::from_secs(90);
/// The longest path a Unix socket address can hold (sun_path, less its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Why a live-cluster test cannot run here, or `None` when it can: it needs root (daemons, device
/// nodes) and an installed slurmctld.
pub fn skip_reason() -> Option<String> {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not running as root (the local Slurm cluster needs root)".to_string());
    }
    if find_program("slurmctld").is_none() {
        return Some(match slurm_prefix() {
            Some(p) => format!("{PREFIX_ENV}={} holds no sbin/slurmctld (run tools/slurm-release.sh)", p.display()),
            None => "slurmctld is not installed (run tools/slurm-env.sh as root)".to_string(),
        });
    }
    None
}

/// The release of the Slurm the cluster runs (`slurmctld -V`: `24.11.5`), or `None` when there is
/// none to run.
pub fn slurm_release() -> Option<String> {
    let out = Command::new(find_program("slurmctld")?).arg("-V").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().nth(1).map(str::to_string)
}

/// For a live test: `true`, after printing `SKIPPED: <test>: <why>`, when a cluster cannot run
/// here; under `CI=true` it panics instead, so that a live test never passes by skipping.
pub fn skip_live_test(test: &str) -> bool {
    let Some(why) = skip_reason() else { return false };
    assert!(std::env::var("CI").as_deref() != Ok("true"), "live test {test} cannot run under CI: {why}");
    println!("SKIPPED: {test}: {why}");
    true
}

/// For a live test missing something else it needs (a plugin another package builds, the
/// measured data): prints `SKIPPED: <test>: <why>`; under `CI=true` it panics instead, so that
/// the test cannot pass by skipping there. Use as `return skip_for(test, why)`.
pub fn skip_for(test: &str, why: &str) {
    assert!(std::env::var("CI").as_deref() != Ok("true"), "live test {test} cannot run under CI: {why}");
    println!("SKIPPED: {test}: {why}");
}

/// A file cargo built for this test run (a plugin's `lib<name>.so`, a binary): looked up in the
/// test binary's own `target/<profile>/deps/` and in `target/<profile>/`, the newer one if both
/// exist. `None` when cargo did not build it (e.g. another package's cdylib under `cargo test
/// -p`). Panics when it is older than one of its sources ([`freshness`]): `cargo test -p` does
/// not rebuild another package's cdylib, and a live test must not run old code as new.
pub fn built_artifact(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    let newest = [deps.join(name), deps.parent()?.join(name)]
        .into_iter()
        .filter(|p| p.is_file())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())?;
    // This crate is tests/cluster of the workspace, where cargo runs rustc.
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2)?;
    Some(fresh_artifact(&newest, workspace).unwrap_or_else(|e| panic!("{e}")))
}

/// `artifact`, unless a source it was built from (its dep-info, relative to `workspace`) changed
/// after it was built.
fn fresh_artifact(artifact: &Path, workspace: &Path) -> Result<PathBuf, String> {
    match freshness::newer_source(artifact, workspace) {
        None => Ok(artifact.to_path_buf()),
        Some(source) => Err(format!(
            "{} is stale: {} changed after it was built, and the test would run the old code; rebuild its package (cargo build -p <package>) with this run's CARGO_TARGET_DIR and SLURM_SRC_DIR",
            artifact.display(),
            source.display()
        )),
    }
}

/// [`built_artifact`], for tests that cannot run without it.
pub fn require_built(name: &str) -> PathBuf {
    built_artifact(name).unwrap_or_else(|| panic!("{name} was not built: run `cargo test --workspace` (or build its package first)"))
}

/// A running local cluster. See the crate documentation.
/// How a daemon goes down when the harness restarts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM: the daemon saves its state and exits.
    Clean,
    /// SIGKILL: a crash.
    Kill,
}

pub struct LocalCluster {
    cfg: ClusterConfig,
    layout: Layout,
    ports: Ports,
    dir: Option<tempfile::TempDir>,
    /// In start order; stopped in reverse.
    daemons: Vec<Daemon>,
    scripts: AtomicU32,
    stopped: bool,
    /// Site mode: the release's daemons take `--systemd` (23.11 on).
    systemd_flag: bool,
    /// Log files rotated by [`Self::rotate_log`] so far (names them `<log>.<n>`).
    rotations: AtomicU32,
}

impl LocalCluster {
    /// Starts a cluster and waits until every node is idle. On failure everything started so far
    /// is stopped and the error carries the tail of the failing daemon's log.
    pub fn start(cfg: ClusterConfig) -> Result<LocalCluster, ClusterError> {
        let started = Instant::now();
        if let Some(why) = skip_reason() {
            return Err(ClusterError::Unsupported(why));
        }
        if cfg.nodes == 0 {
            return Err(ClusterError::Unsupported(
                "a cluster needs at least one node".into(),
            ));
        }
        if !cfg.node_shapes.is_empty() && cfg.node_shapes.len() != cfg.nodes as usize {
            return Err(ClusterError::Unsupported(format!(
                "{} node shapes for {} nodes",
                cfg.node_shapes.len(),
                cfg.nodes
            )));
        }
        let mut programs = vec![
            "munged",
            "slurmctld",
            "slurmd",
            "scontrol",
            "sinfo",
            "squeue",
            "scancel",
        ];
        if cfg.with_accounting {
            programs.extend([
                "slurmdbd",
                "sacctmgr",
                "mariadbd",
                "mariadb-install-db",
                "mariadb",
                "mariadb-admin",
            ]);
        }
        for program in programs {
            require_program(program)?;
        }
        let stock_plugin_dir = stock_plugin_dir()?;
        let systemd_flag = cfg.daemon_mode == DaemonMode::Systemd && takes_systemd_flag()?;
        let hostname = util::short_hostname()?;

        let dir = tempfile::Builder::new()
            .prefix("slurm-tc-")
            .tempdir()
            .map_err(|e| ClusterError::io("create the cluster's temp dir", e))?;
        let layout = Layout::new(dir.path());
        for socket in [layout.munge_socket(), layout.db_socket()] {
            if socket.as_os_str().len() > MAX_SOCKET_PATH {
                return Err(ClusterError::Unsupported(format!(
                    "socket path {} is too long for a Unix socket: set TMPDIR to a shorter directory",
                    socket.display()
                )));
            }
        }
        let ports = util::free_ports(3 + cfg.nodes as usize).map(|p| Ports {
            slurmctld: p[0],
            slurmdbd: p[1],
            mysql: p[2],
            slurmd: p[3..].to_vec(),
        })?;

        let mut cluster = LocalCluster {
            cfg,
            layout,
            ports,
            dir: Some(dir),
            daemons: Vec::new(),
            scripts: AtomicU32::new(0),
            stopped: false,
            systemd_flag,
            rotations: AtomicU32::new(0),
        };
        // From here on, an early return drops `cluster`, which stops whatever was started.
        let db_password = util::random_hex(16)?;
        cluster.write_files(&hostname, &stock_plugin_dir, &db_password)?;
        cluster.start_munged()?;
        if cluster.cfg.with_accounting {
            cluster.start_mariadb(&db_password)?;
            cluster.start_slurmdbd()?;
        }
        cluster.start_slurmctld(true)?;
        for node in cluster.node_names() {
            cluster.start_slurmd(&node)?;
        }
        cluster.wait_nodes(NodeWait::AllIdle, START_TIMEOUT)?;
        eprintln!(
            "slurm-testcluster: {} nodes idle after {:.1} s in {}",
            cluster.cfg.nodes,
            started.elapsed().as_secs_f64(),
            cluster.layout.base.display()
        );
        Ok(cluster)
    }

    // ---- what a test uses -----------------------------------------------------------------

    /// Environment for Slurm client commands run against this cluster.
    /// With [`PREFIX_ENV`] set, `PATH` starts with that install's `bin` and `sbin`, so that what
    /// a job script runs (`srun`, `scontrol`) is of the same release.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![(
            "SLURM_CONF".to_string(),
            self.conf_path().display().to_string(),
        )];
        let dirs = util::prefix_bin_dirs();
        if !dirs.is_empty() {
            let path = std::env::var_os("PATH").unwrap_or_default();
            if let Ok(joined) = std::env::join_paths(dirs.into_iter().chain(std::env::split_paths(&path))) {
                env.push(("PATH".to_string(), joined.to_string_lossy().into_owned()));
            }
        }
        env
    }

    /// A client command (`sbatch`, `squeue`, `sacct`, `scontrol`, ...) with this cluster's
    /// environment, run from the job directory. `SLURM_*` variables of the calling process are
    /// removed so a test run inside a Slurm job talks to this cluster only.
    pub fn command(&self, prog: &str) -> Command {
        let path = find_program(prog).unwrap_or_else(|| PathBuf::from(prog));
        let mut cmd = Command::new(path);
        for (key, _) in std::env::vars_os() {
            if key.as_bytes().starts_with(b"SLURM_") {
                cmd.env_remove(key);
            }
        }
        cmd.envs(self.env()).current_dir(&self.layout.jobs);
        cmd
    }

    /// Submits a batch job and returns its id. `script` is the job script; pass `""` when `args`
    /// holds `--wrap`. Output goes to [`Self::job_output_path`] unless `args` say otherwise.
    pub fn sbatch(&self, args: &[&str], script: &str) -> Result<u32, ClusterError> {
        let mut cmd = self.command("sbatch");
        cmd.arg("--parsable").args(args);
        if !script.is_empty() {
            let n = self.scripts.fetch_add(1, Ordering::Relaxed);
            let path = self.layout.jobs.join(format!("script-{n}.sh"));
            let text = if script.starts_with("#!") {
                script.to_string()
            } else {
                format!("#!/bin/sh\n{script}")
            };
            write_file(&path, &text)?;
            cmd.arg(path);
        }
        let out = run(&mut cmd)?;
        // --parsable prints "<id>" or "<id>;<cluster>".
        out.trim()
            .split(';')
            .next()
            .and_then(|id| id.trim().parse().ok())
            .ok_or_else(|| ClusterError::Parse {
                what: "the job id from sbatch".into(),
                output: out.clone(),
            })
    }

    /// Waits until the job has ended and returns its final state as slurmctld reports it
    /// (`COMPLETED`, `FAILED`, `CANCELLED`, `TIMEOUT`, ...). Falls back to `sacct` once slurmctld
    /// has forgotten the job.
    pub fn wait_job_done(&self, job: u32, timeout: Duration) -> Result<String, ClusterError> {
        let found = poll(timeout, POLL, || {
            let out = util::output_of(self.command("scontrol").args([
                "show",
                "job",
                "-o",
                &job.to_string(),
            ]))?;
            let text = String::from_utf8_lossy(&out.stdout);
            if out.status.success() {
                return Ok(field(&text, "JobState")
                    .filter(|s| is_terminal(s))
                    .map(str::to_string));
            }
            if self.cfg.with_accounting {
                // slurmdbd may be catching up; a failed query is just "not yet".
                let state = self.sacct(job, "State").unwrap_or_default();
                let state = state.split_whitespace().next().unwrap_or_default();
                if is_terminal(state) {
                    return Ok(Some(state.to_string()));
                }
            }
            Ok(None)
        })?;
        found.ok_or_else(|| {
            self.timeout(format!("job {job} to finish within {timeout:?}"), Some(job))
        })
    }

    /// `sacct -n -P -X -j <job> -o <fields>`: one line per job allocation (no steps), fields
    /// separated by `|`, trimmed.
    pub fn sacct(&self, job: u32, fields: &str) -> Result<String, ClusterError> {
        let out = run(self.command("sacct").args([
            "-n",
            "-P",
            "-X",
            "-j",
            &job.to_string(),
            "-o",
            fields,
        ]))?;
        Ok(out.trim().to_string())
    }

    /// Waits until slurmdbd has recorded the job as ended (slurmctld sends the record a moment
    /// after the job ends) and returns `sacct`'s State for it.
    pub fn wait_accounted(&self, job: u32, timeout: Duration) -> Result<String, ClusterError> {
        let found = poll(timeout, POLL, || {
            let state = self.sacct(job, "State").unwrap_or_default();
            let first = state.split_whitespace().next().unwrap_or_default();
            Ok(is_terminal(first).then(|| state.clone()))
        })?;
        found.ok_or_else(|| {
            self.timeout(
                format!("job {job} to be accounted as ended within {timeout:?}"),
                Some(job),
            )
        })
    }

    /// Where a job submitted with [`Self::sbatch`] writes its output by default.
    pub fn job_output_path(&self, job: u32) -> PathBuf {
        self.layout.jobs.join(format!("slurm-{job}.out"))
    }

    pub fn job_output(&self, job: u32) -> Result<String, ClusterError> {
        let path = self.job_output_path(job);
        fs::read_to_string(&path)
            .map_err(|e| ClusterError::io(format!("read {}", path.display()), e))
    }

    /// slurmctld's log, with what [`Self::rotate_log`] rotated out of it first.
    pub fn slurmctld_log(&self) -> String {
        self.read_rotated(&self.layout.slurmctld_log())
    }

    /// slurmd's log of `node`, with what [`Self::rotate_log`] rotated out of it first.
    pub fn slurmd_log(&self, node: &str) -> String {
        self.read_rotated(&self.layout.slurmd_log(node))
    }

    pub fn slurmdbd_log(&self) -> String {
        read_lossy(&self.layout.slurmdbd_log())
    }

    /// Stops slurmctld (SIGTERM, it saves its state) and starts it again, then waits until it
    /// answers and every node has registered again. Jobs survive. Needed to apply settings that
    /// `scontrol reconfigure` does not (e.g. `AccountingStorageTRES`) or to reload a sched plugin
    /// from scratch.
    pub fn restart_slurmctld(&mut self) -> Result<(), ClusterError> {
        self.restart_slurmctld_after(Stop::Clean)
    }

    /// [`Self::restart_slurmctld`], with slurmctld going down as `stop` says: `Stop::Kill` is a
    /// crash (SIGKILL, nothing saved beyond what slurmctld had already written).
    pub fn restart_slurmctld_after(&mut self, stop: Stop) -> Result<(), ClusterError> {
        let index = self
            .daemons
            .iter()
            .position(|d| d.name == "slurmctld")
            .ok_or_else(|| ClusterError::Unsupported("slurmctld was never started".into()))?;
        let mut old = self.daemons.remove(index);
        let stopped = match stop {
            Stop::Clean => old.stop(STOP_GRACE),
            Stop::Kill => old.kill(),
        };
        if let Err(problem) = stopped {
            eprintln!("slurm-testcluster: {problem}");
        }
        let mut new = self.spawn_slurmctld(false)?;
        let ready = self.wait_slurmctld_up(&mut new);
        self.daemons.insert(index, new);
        ready?;
        self.wait_nodes(NodeWait::AllResponding, START_TIMEOUT)
    }

    /// A crash of slurmctld together with the slurmd of `nodes` (SIGKILL to all of them, as a
    /// power loss of the controller and those nodes would be): slurmctld is started again, then
    /// those slurmd, and this waits until every node responds. What a killed slurmd had received
    /// and not yet read is lost with it.
    pub fn restart_after_crash(&mut self, nodes: &[&str]) -> Result<(), ClusterError> {
        self.kill_and_restart(nodes, false)
    }

    /// [`LocalCluster::restart_after_crash`], but the nodes' slurmd start first, while no
    /// slurmctld runs (a machine room where the controller's host comes back last); they
    /// register once slurmctld is up and pings them.
    pub fn restart_after_crash_nodes_first(&mut self, nodes: &[&str]) -> Result<(), ClusterError> {
        self.kill_and_restart(nodes, true)
    }

    /// SIGKILLs slurmctld and the slurmd of `nodes`, then starts them again: slurmctld first
    /// (waiting until it answers), or the slurmd first.
    fn kill_and_restart(&mut self, nodes: &[&str], nodes_first: bool) -> Result<(), ClusterError> {
        let mut names = vec!["slurmctld".to_string()];
        names.extend(nodes.iter().map(|n| format!("slurmd {n}")));
        let mut indexes = Vec::new();
        for name in &names {
            let index = self
                .daemons
                .iter()
                .position(|d| &d.name == name)
                .ok_or_else(|| ClusterError::Unsupported(format!("{name} was never started")))?;
            if let Err(problem) = self.daemons[index].kill() {
                eprintln!("slurm-testcluster: {problem}");
            }
            indexes.push(index);
        }
        if nodes_first {
            for (node, &index) in nodes.iter().zip(&indexes[1..]) {
                self.daemons[index] = self.spawn_slurmd(node)?;
            }
            // Let them try to register (and fail) before slurmctld is back.
            std::thread::sleep(Duration::from_secs(2));
        }
        let mut ctld = self.spawn_slurmctld(false)?;
        let ready = self.wait_slurmctld_up(&mut ctld);
        self.daemons[indexes[0]] = ctld;
        ready?;
        if !nodes_first {
            for (node, &index) in nodes.iter().zip(&indexes[1..]) {
                self.daemons[index] = self.spawn_slurmd(node)?;
            }
        }
        self.wait_nodes(NodeWait::AllResponding, START_TIMEOUT)
    }

    /// Stops slurmd of `node` (SIGTERM; running steps' slurmstepd live on) and starts it again,
    /// then waits until every node responds. For what slurmd does at start (GPU detection, the
    /// GPU plugin's clock repair). slurmctld may still count the old slurmd's registration for a
    /// moment: a test that needs the new slurmd's start done waits for its effect.
    pub fn restart_slurmd(&mut self, node: &str) -> Result<(), ClusterError> {
        let name = format!("slurmd {node}");
        let index = self
            .daemons
            .iter()
            .position(|d| d.name == name)
            .ok_or_else(|| ClusterError::Unsupported(format!("{name} was never started")))?;
        let mut old = self.daemons.remove(index);
        if let Err(problem) = old.stop(STOP_GRACE) {
            eprintln!("slurm-testcluster: {problem}");
        }
        let new = self.spawn_slurmd(node)?;
        self.daemons.insert(index, new);
        self.wait_nodes(NodeWait::AllResponding, START_TIMEOUT)
    }

    /// Pid of a running daemon by its name in [`Self::pids`] (`slurmctld`, `slurmd n1`).
    pub fn pid_of(&self, daemon: &str) -> Option<u32> {
        self.daemons.iter().find(|d| d.name == daemon).map(|d| d.pid())
    }

    /// `scontrol reconfigure`: slurmctld and every slurmd re-read their configuration files.
    /// In site mode it then waits until slurmctld answers again (on 24.11 from a new process,
    /// whose pid [`Self::pid_of`] then gives).
    pub fn reconfigure(&self) -> Result<(), ClusterError> {
        run(self.command("scontrol").arg("reconfigure"))?;
        if self.cfg.daemon_mode == DaemonMode::Systemd {
            self.wait_ping("answering after scontrol reconfigure")?;
        }
        Ok(())
    }

    /// The daemon mode the cluster runs in.
    pub fn daemon_mode(&self) -> DaemonMode {
        self.cfg.daemon_mode
    }

    /// Whether site mode runs this release's daemons with `--systemd` (else daemonised).
    pub fn runs_under_systemd_flag(&self) -> bool {
        self.systemd_flag
    }

    /// Every pid the daemon's main process has had, in order (`slurmctld`, `slurmd n1`): one
    /// when attached; in site mode one more for each reconfigure or SIGHUP that re-executed it
    /// (24.11). Empty for an unknown daemon.
    pub fn main_pids(&self, daemon: &str) -> Vec<u32> {
        self.daemons.iter().find(|d| d.name == daemon).map(|d| d.main_pids()).unwrap_or_default()
    }

    /// `READY=1` notifications the daemon sent to its notify socket (site mode under
    /// `--systemd`; 0 otherwise).
    pub fn ready_notifications(&self, daemon: &str) -> u32 {
        self.daemons.iter().find(|d| d.name == daemon).map_or(0, |d| d.ready_count())
    }

    /// Sends `signal` to a daemon's current process (`slurmctld`, `slurmd n1`) and returns its
    /// pid. In site mode through the pidfd of its main process.
    pub fn signal_daemon(&mut self, daemon: &str, signal: libc::c_int) -> Result<u32, ClusterError> {
        let d = self
            .daemons
            .iter_mut()
            .find(|d| d.name == daemon)
            .ok_or_else(|| ClusterError::Unsupported(format!("{daemon} was never started")))?;
        d.signal(signal).map_err(ClusterError::Unsupported)
    }

    /// Log rotation as logrotate does it for Slurm (`postrotate`: the unit's `ExecReload`,
    /// SIGHUP): the daemon's log (`slurmctld`, `slurmd n1`) is renamed to `<log>.<n>`, SIGHUP
    /// sent, and this waits until the daemon has opened a new log and slurmctld answers (after
    /// slurmd's: every node responds). Returns the pid signalled. SIGHUP also makes the daemon
    /// re-read its configuration, and on 24.11 under `--systemd` or daemonised re-execute
    /// itself. [`Self::slurmctld_log`] and [`Self::slurmd_log`] read the rotated parts too.
    pub fn rotate_log(&mut self, daemon: &str) -> Result<u32, ClusterError> {
        let log = match daemon.split_once(' ') {
            None if daemon == "slurmctld" => self.layout.slurmctld_log(),
            Some(("slurmd", node)) => self.layout.slurmd_log(node),
            _ => return Err(ClusterError::Unsupported(format!("no log rotation for {daemon}"))),
        };
        let n = self.rotations.fetch_add(1, Ordering::Relaxed) + 1;
        let rotated = rotated_name(&log, n);
        fs::rename(&log, &rotated).map_err(|e| ClusterError::io(format!("rename {} to {}", log.display(), rotated.display()), e))?;
        let pid = self.signal_daemon(daemon, libc::SIGHUP)?;
        let reopened = poll(START_TIMEOUT, POLL, || Ok(log.exists().then_some(())))?;
        if reopened.is_none() {
            return Err(self.timeout(format!("{daemon} to open a new {} after SIGHUP", log.display()), None));
        }
        self.wait_ping("answering after SIGHUP")?;
        if daemon != "slurmctld" {
            self.wait_nodes(NodeWait::AllResponding, START_TIMEOUT)?;
        }
        Ok(pid)
    }

    /// A log with the parts [`Self::rotate_log`] rotated out of it first, oldest first.
    fn read_rotated(&self, log: &Path) -> String {
        let mut text = String::new();
        for n in 1..=self.rotations.load(Ordering::Relaxed) {
            text.push_str(&read_lossy(&rotated_name(log, n)));
        }
        text.push_str(&read_lossy(log));
        text
    }

    /// Waits until `scontrol ping` finds slurmctld up.
    fn wait_ping(&self, what: &str) -> Result<(), ClusterError> {
        let up = poll(START_TIMEOUT, POLL, || {
            let out = util::output_of(self.command("scontrol").arg("ping"))?;
            Ok((out.status.success() && String::from_utf8_lossy(&out.stdout).contains("is UP")).then_some(()))
        })?;
        up.ok_or_else(|| self.timeout(format!("slurmctld {what} within {START_TIMEOUT:?}"), None))
    }

    /// Replaces a file next to slurm.conf (say `energy.toml` before [`Self::reconfigure`]).
    pub fn write_conf_file(&self, name: &str, content: &str) -> Result<(), ClusterError> {
        write_file(&self.conf_file_path(name)?, content)
    }

    pub fn base_dir(&self) -> &Path {
        &self.layout.base
    }

    pub fn conf_path(&self) -> PathBuf {
        self.layout.slurm_conf()
    }

    /// The pid of this cluster's slurmstepd of `step` (`<job>.<step>`: `4.batch`, `7.0`): the
    /// process titled `slurmstepd: [<step>]` with `SLURM_CONF=<this cluster's slurm.conf>` in
    /// its environment. The clusters of other tests on the host number their jobs from 1 too,
    /// so the title alone can name another cluster's step (a test once SIGKILLed another
    /// test's job that way).
    pub fn stepd_pid(&self, step: &str) -> Option<u32> {
        let title = format!("slurmstepd: [{step}]");
        let mark = format!("SLURM_CONF={}", self.conf_path().display());
        fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = fs::read(e.path().join("cmdline")).ok()?;
            if !String::from_utf8_lossy(&cmdline).trim_end_matches('\0').starts_with(&title) {
                return None;
            }
            let environ = fs::read(e.path().join("environ")).ok()?;
            environ.split(|&b| b == 0).any(|v| v == mark.as_bytes()).then_some(pid)
        })
    }

    pub fn conf_dir(&self) -> &Path {
        &self.layout.etc
    }

    pub fn job_dir(&self) -> &Path {
        &self.layout.jobs
    }

    pub fn node_names(&self) -> Vec<String> {
        config::node_names(self.cfg.nodes)
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.cfg
    }

    /// The daemons started and not yet stopped, as (name, pid), in start order: `munged`,
    /// `mariadbd`, `slurmdbd`, `slurmctld`, `slurmd n1`, ...
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.daemons
            .iter()
            .map(|d| (d.name.clone(), d.pid()))
            .collect()
    }

    /// Cancels the remaining jobs, stops every daemon in reverse start order (SIGTERM, then
    /// SIGKILL after a grace period) and removes the base dir (kept with `SLURM_TESTCLUSTER_KEEP=1`).
    /// An error says what had to be killed or could not be removed; every daemon is gone anyway.
    pub fn stop(mut self) -> Result<(), ClusterError> {
        self.shutdown()
    }

    // ---- start-up ---------------------------------------------------------------------------

    fn write_files(
        &self,
        hostname: &str,
        stock_plugin_dir: &Path,
        db_password: &str,
    ) -> Result<(), ClusterError> {
        let l = &self.layout;
        for dir in l.all_dirs() {
            create_dir(dir)?;
        }
        // munged insists on a socket directory that others can enter but not write.
        set_mode(&l.munge_dir, 0o755)?;
        for node in self.node_names() {
            create_dir(&l.spool.join(node))?;
        }
        let conf = config::slurm_conf(&SlurmConfInput {
            cfg: &self.cfg,
            layout: l,
            ports: &self.ports,
            hostname,
            stock_plugin_dir,
        });
        write_file(&l.slurm_conf(), &conf)?;
        write_file(&l.etc.join("gres.conf"), &config::gres_conf(&self.cfg, l))?;
        if self.cfg.with_accounting {
            // slurmdbd refuses a configuration file that others could read: it holds a password.
            let path = l.etc.join("slurmdbd.conf");
            write_private(
                &path,
                config::slurmdbd_conf(l, &self.ports, hostname, db_password).as_bytes(),
            )?;
        }
        for (name, content) in &self.cfg.extra_files {
            write_file(&self.conf_file_path(name)?, content)?;
        }
        write_private(&l.munge_key(), &util::random_bytes(1024)?)?;
        for index in 0..self.cfg.max_gpus_per_node() {
            make_gpu_device(&l.gpu_device(index), index)?;
        }
        Ok(())
    }

    fn conf_file_path(&self, name: &str) -> Result<PathBuf, ClusterError> {
        if name.is_empty() || name.contains('/') || name == ".." || name == "." {
            return Err(ClusterError::Unsupported(format!(
                "`{name}` is not a plain file name"
            )));
        }
        Ok(self.layout.etc.join(name))
    }

    /// A daemon command with this cluster's configuration and none of the caller's `SLURM_*`.
    fn daemon_command(&self, prog: &str) -> Result<Command, ClusterError> {
        let mut cmd = Command::new(require_program(prog)?);
        for (key, _) in std::env::vars_os() {
            if key.as_bytes().starts_with(b"SLURM_") {
                cmd.env_remove(key);
            }
        }
        cmd.envs(self.env()).current_dir(&self.layout.base);
        Ok(cmd)
    }

    /// A Slurm daemon's command: [`Self::daemon_command`] plus `ClusterConfig::daemon_env`.
    fn slurm_daemon_command(&self, prog: &str) -> Result<Command, ClusterError> {
        let mut cmd = self.daemon_command(prog)?;
        cmd.envs(self.cfg.daemon_env.iter().map(|(k, v)| (k, v)));
        Ok(cmd)
    }

    /// `slurmd -D -N <node>` (site mode: `--systemd` or daemonising instead of `-D`) with
    /// `ClusterConfig::daemon_env`, `%n` in a value replaced by the node name (per-node fake GPU
    /// state and clock ledger on one host).
    fn slurmd_command(&self, node: &str) -> Result<Command, ClusterError> {
        let mut cmd = self.daemon_command("slurmd")?;
        cmd.envs(self.cfg.daemon_env.iter().map(|(k, v)| (k, v.replace("%n", node))));
        cmd.args(self.mode_args()).args(["-N", node]);
        Ok(cmd)
    }

    fn spawn(
        &mut self,
        name: &str,
        cmd: Command,
        log: Option<PathBuf>,
    ) -> Result<usize, ClusterError> {
        let console = self.layout.console(&name.replace(' ', "-"));
        let daemon = Daemon::spawn(name, cmd, log.as_deref(), &console)?;
        self.daemons.push(daemon);
        Ok(self.daemons.len() - 1)
    }

    /// Polls `ready` until it says yes, failing at once if daemon `index` exits.
    fn wait_ready(
        &mut self,
        index: usize,
        what: &str,
        mut ready: impl FnMut(&LocalCluster) -> Result<bool, ClusterError>,
    ) -> Result<(), ClusterError> {
        let start = Instant::now();
        loop {
            self.daemons[index].check_running()?;
            if ready(self)? {
                return Ok(());
            }
            if start.elapsed() >= START_TIMEOUT {
                let daemon = &self.daemons[index];
                return Err(daemon.failed(format!("not {what} after {START_TIMEOUT:?}")));
            }
            std::thread::sleep(POLL);
        }
    }

    fn start_munged(&mut self) -> Result<(), ClusterError> {
        let l = self.layout.clone();
        let mut cmd = self.daemon_command("munged")?;
        cmd.arg("--foreground")
            .arg(format!("--key-file={}", l.munge_key().display()))
            .arg(format!("--socket={}", l.munge_socket().display()))
            .arg(format!("--pid-file={}", l.run.join("munged.pid").display()))
            .arg(format!("--log-file={}", l.munged_log().display()))
            .arg(format!(
                "--seed-file={}",
                l.munge_dir.join("munged.seed").display()
            ));
        // In the foreground munged logs to stderr (the console file), not to --log-file.
        let index = self.spawn("munged", cmd, None)?;
        let socket = l.munge_socket();
        let munge = find_program("munge");
        self.wait_ready(index, "accepting credentials", |_| {
            if !socket.exists() {
                return Ok(false);
            }
            // A credential round trip, when the client is installed, proves the key was read.
            Ok(match &munge {
                Some(munge) => util::output_of(
                    Command::new(munge)
                        .arg("-n")
                        .arg(format!("--socket={}", socket.display())),
                )?
                .status
                .success(),
                None => true,
            })
        })
    }

    fn start_mariadb(&mut self, db_password: &str) -> Result<(), ClusterError> {
        let l = self.layout.clone();
        let install_log = l.log.join("mariadb-install-db.log");
        let mut install = Command::new(require_program("mariadb-install-db")?);
        install
            .arg("--no-defaults")
            .arg("--user=root")
            .arg(format!("--datadir={}", l.mysql_data.display()))
            .arg("--auth-root-authentication-method=socket")
            .arg("--skip-test-db")
            // Its own temporary directory: two clusters bootstrapping at once in the shared
            // /tmp collide on MariaDB's temporary tables.
            .arg(format!("--tmpdir={}", l.tmp.display()));
        let log = fs::File::create(&install_log)
            .map_err(|e| ClusterError::io("create mariadb-install-db.log", e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| ClusterError::io("dup log handle", e))?;
        let status = install
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .status()
            .map_err(|e| ClusterError::io("run mariadb-install-db", e))?;
        if !status.success() {
            return Err(ClusterError::DaemonFailed {
                daemon: "mariadb-install-db".into(),
                reason: status.to_string(),
                log_tail: tail_file(&install_log, 40),
            });
        }

        let mut cmd = self.daemon_command("mariadbd")?;
        cmd.arg("--no-defaults")
            .arg("--user=root")
            .arg(format!("--datadir={}", l.mysql_data.display()))
            .arg(format!("--socket={}", l.db_socket().display()))
            .arg(format!("--port={}", self.ports.mysql))
            .arg("--bind-address=127.0.0.1")
            .arg(format!(
                "--pid-file={}",
                l.run.join("mariadbd.pid").display()
            ))
            .arg(format!("--log-error={}", l.mariadb_log().display()))
            .arg(format!("--tmpdir={}", l.tmp.display()))
            .arg("--skip-log-bin")
            // What slurmdbd asks for (smaller values only make it warn) ...
            .arg("--innodb-buffer-pool-size=1G")
            .arg("--innodb-log-file-size=64M")
            .arg("--innodb-lock-wait-timeout=900")
            // ... and no durability, which a throw-away test database does not need: slurmdbd
            // creates its tables much faster.
            .arg("--innodb-flush-log-at-trx-commit=0")
            .arg("--skip-innodb-doublewrite");
        let index = self.spawn("mariadbd", cmd, Some(l.mariadb_log()))?;
        let admin = require_program("mariadb-admin")?;
        let socket = l.db_socket();
        self.wait_ready(index, "answering ping", |_| {
            let out = util::output_of(
                Command::new(&admin)
                    .arg("--no-defaults")
                    .arg(format!("--socket={}", socket.display()))
                    .args(["-u", "root", "ping"]),
            )?;
            Ok(out.status.success())
        })?;

        // TCP from 127.0.0.1 (slurmdbd) may be matched as either host name.
        let sql = format!(
            "CREATE USER '{DB_USER}'@'localhost' IDENTIFIED BY '{db_password}';\
             CREATE USER '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{db_password}';\
             GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'localhost';\
             GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'127.0.0.1';\
             FLUSH PRIVILEGES;"
        );
        run(Command::new(require_program("mariadb")?)
            .arg("--no-defaults")
            .arg(format!("--socket={}", socket.display()))
            .args(["-u", "root", "-e", &sql]))
        .map_err(|e| {
            self.daemons[index].failed(format!("creating the slurm database user: {e}"))
        })?;
        Ok(())
    }

    fn start_slurmdbd(&mut self) -> Result<(), ClusterError> {
        let mut cmd = self.slurm_daemon_command("slurmdbd")?;
        cmd.arg("-D");
        let index = self.spawn("slurmdbd", cmd, Some(self.layout.slurmdbd_log()))?;
        self.wait_ready(index, "answering sacctmgr", |c| {
            Ok(
                util::output_of(c.command("sacctmgr").args(["-n", "-P", "list", "cluster"]))?
                    .status
                    .success(),
            )
        })?;
        run(self
            .command("sacctmgr")
            .args(["-i", "add", "cluster", CLUSTER_NAME]))
        .map_err(|e| self.daemons[index].failed(format!("sacctmgr add cluster: {e}")))?;
        Ok(())
    }

    /// `fresh`: the first start, with no state to recover (`-c`, which spares the log a page of
    /// "could not open state file" errors).
    fn spawn_slurmctld(&self, fresh: bool) -> Result<Daemon, ClusterError> {
        let mut cmd = self.slurm_daemon_command("slurmctld")?;
        cmd.args(self.mode_args());
        if fresh {
            cmd.arg("-c");
        }
        let log = self.layout.slurmctld_log();
        let console = self.layout.console("slurmctld");
        match self.site_watch("slurmctld", "slurmctld")? {
            None => Daemon::spawn("slurmctld", cmd, Some(&log), &console),
            Some(watch) => Daemon::spawn_site("slurmctld", cmd, Some(&log), &console, watch),
        }
    }

    /// slurmctld's and slurmd's arguments for the daemon mode: `-D` (attached), `--systemd`
    /// (site mode where the release has it), none (site mode on an older release: the daemon
    /// daemonises).
    fn mode_args(&self) -> &'static [&'static str] {
        match self.cfg.daemon_mode {
            DaemonMode::Attached => &["-D"],
            DaemonMode::Systemd if self.systemd_flag => &["--systemd"],
            DaemonMode::Systemd => &[],
        }
    }

    /// How site mode follows a daemon whose command name is `comm` and whose pid file and
    /// notify socket are named after `unit` (`slurmctld`, `slurmd-n1`); `None` when attached.
    fn site_watch(&self, comm: &str, unit: &str) -> Result<Option<SiteWatch>, ClusterError> {
        if self.cfg.daemon_mode == DaemonMode::Attached {
            return Ok(None);
        }
        let env_mark = format!("SLURM_CONF={}", self.conf_path().display());
        if self.systemd_flag {
            let path = self.layout.run.join(format!("notify-{unit}.sock"));
            if path.as_os_str().len() > MAX_SOCKET_PATH {
                return Err(ClusterError::Unsupported(format!("notify socket path {} is too long: set TMPDIR to a shorter directory", path.display())));
            }
            let notify = notify::NotifySocket::bind(&path)?;
            Ok(Some(SiteWatch { notify: Some(notify), pid_file: None, env_mark, comm: comm.into() }))
        } else {
            // slurm.conf's SlurmctldPidFile and SlurmdPidFile. One left by an earlier process of
            // this daemon names nothing of ours now.
            let pid_file = self.layout.run.join(format!("{unit}.pid"));
            let _ = fs::remove_file(&pid_file);
            Ok(Some(SiteWatch { notify: None, pid_file: Some(pid_file), env_mark, comm: comm.into() }))
        }
    }

    /// slurmd of `node` in the cluster's daemon mode.
    fn spawn_slurmd(&self, node: &str) -> Result<Daemon, ClusterError> {
        let name = format!("slurmd {node}");
        let cmd = self.slurmd_command(node)?;
        let log = self.layout.slurmd_log(node);
        let console = self.layout.console(&name.replace(' ', "-"));
        match self.site_watch("slurmd", &format!("slurmd-{node}"))? {
            None => Daemon::spawn(&name, cmd, Some(&log), &console),
            Some(watch) => Daemon::spawn_site(&name, cmd, Some(&log), &console, watch),
        }
    }

    fn wait_slurmctld_up(&self, daemon: &mut Daemon) -> Result<(), ClusterError> {
        let start = Instant::now();
        loop {
            daemon.check_running()?;
            let out = util::output_of(self.command("scontrol").arg("ping"))?;
            if out.status.success() && String::from_utf8_lossy(&out.stdout).contains("is UP") {
                return Ok(());
            }
            if start.elapsed() >= START_TIMEOUT {
                return Err(daemon.failed(format!(
                    "not answering `scontrol ping` after {START_TIMEOUT:?}"
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    fn start_slurmctld(&mut self, fresh: bool) -> Result<(), ClusterError> {
        let mut daemon = self.spawn_slurmctld(fresh)?;
        let ready = self.wait_slurmctld_up(&mut daemon);
        self.daemons.push(daemon);
        ready
    }

    fn start_slurmd(&mut self, node: &str) -> Result<(), ClusterError> {
        let daemon = self.spawn_slurmd(node)?;
        self.daemons.push(daemon);
        Ok(())
    }

    /// Waits until `sinfo` lists every node in the wanted condition, failing at once if any
    /// daemon has exited.
    fn wait_nodes(&mut self, want: NodeWait, timeout: Duration) -> Result<(), ClusterError> {
        let start = Instant::now();
        let mut last = String::new();
        loop {
            for daemon in &mut self.daemons {
                daemon.check_running()?;
            }
            let out = util::output_of(self.command("sinfo").args(["-h", "-N", "-o", "%N %t"]))?;
            if out.status.success() {
                last = String::from_utf8_lossy(&out.stdout).into_owned();
                // One line per node and partition: a node in two partitions counts once. Only
                // our own nodes (a test may add nodes without a slurmd to the table).
                let ours = config::node_names(self.cfg.nodes);
                let states: Vec<&str> = last
                    .lines()
                    .filter_map(|l| {
                        let mut f = l.split_whitespace();
                        Some((f.next()?, f.next()?))
                    })
                    .filter(|(name, _)| ours.iter().any(|o| o == name))
                    .collect::<std::collections::BTreeMap<&str, &str>>()
                    .into_values()
                    .collect();
                if states.len() == self.cfg.nodes as usize && states.iter().all(|s| want.accepts(s))
                {
                    return Ok(());
                }
            }
            if start.elapsed() >= timeout {
                let slurmd_tail = self
                    .node_names()
                    .first()
                    .map(|n| tail_file(&self.layout.slurmd_log(n), 20))
                    .unwrap_or_default();
                return Err(ClusterError::Timeout {
                    what: format!("nodes to be {} ({timeout:?})", want.describe()),
                    detail: format!(
                        "sinfo:\n{last}\n--- slurmctld log ---\n{}\n--- slurmd log ---\n{slurmd_tail}",
                        tail_file(&self.layout.slurmctld_log(), 30)
                    ),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    fn timeout(&self, what: String, job: Option<u32>) -> ClusterError {
        let job_info = job
            .and_then(|j| {
                util::output_of(
                    self.command("scontrol")
                        .args(["show", "job", &j.to_string()]),
                )
                .ok()
            })
            .map(|o| {
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                )
            })
            .unwrap_or_default();
        ClusterError::Timeout {
            what,
            detail: format!(
                "{job_info}\n--- slurmctld log ---\n{}",
                tail_file(&self.layout.slurmctld_log(), 30)
            ),
        }
    }

    // ---- shutdown ---------------------------------------------------------------------------

    fn shutdown(&mut self) -> Result<(), ClusterError> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        self.cancel_jobs();
        let mut problems = Vec::new();
        for daemon in self.daemons.iter_mut().rev() {
            if let Err(problem) = daemon.stop(STOP_GRACE) {
                problems.push(problem);
            }
        }
        self.daemons.clear();
        if self.cfg.daemon_mode == DaemonMode::Systemd {
            problems.extend(self.leftover_daemon_processes());
        }
        self.kill_orphaned_job_scripts();
        if let Some(dir) = self.dir.take() {
            if std::env::var(KEEP_ENV).is_ok_and(|v| v == "1") {
                eprintln!("slurm-testcluster: kept {}", dir.keep().display());
            } else if let Err(e) = dir.close() {
                problems.push(format!("removing the base dir: {e}"));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ClusterError::Stop {
                reason: problems.join("; "),
                base_dir: self.layout.base.clone(),
            })
        }
    }

    /// Site mode: Slurm daemon processes of this cluster still running once every daemon was
    /// stopped (a process a reconfigure started that the harness did not learn of, a helper
    /// left behind). Helpers that end by themselves when their parent is gone (24.11's
    /// slurmscriptd) get a few seconds. Each one found is a problem; the caller kills them.
    fn leftover_daemon_processes(&self) -> Vec<String> {
        let daemons = ["slurmctld", "slurmd", "slurmscriptd", "slurmdbd"];
        let find = || -> Vec<(u32, String)> {
            util::job_processes(&self.layout.spool, &self.layout.slurm_conf())
                .into_iter()
                .filter_map(|(pid, _)| {
                    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim().to_string();
                    daemons.contains(&comm.as_str()).then_some((pid, comm))
                })
                .collect()
        };
        let left = poll(Duration::from_secs(5), POLL, || {
            let left = find();
            Ok(left.is_empty().then_some(()))
        });
        if matches!(left, Ok(Some(()))) {
            return Vec::new();
        }
        find().into_iter().map(|(pid, comm)| format!("{comm} (pid {pid}) of this cluster still ran after every daemon was stopped")).collect()
    }

    /// A job whose slurmstepd was killed (tests do that on purpose) leaves its tasks running with
    /// no one to end them, and `scancel` cannot reach them: once the daemons are down, kill what
    /// still runs of this cluster's jobs, with its process group when it leads one (slurmstepd
    /// makes each task a group leader). Only processes of this cluster match.
    fn kill_orphaned_job_scripts(&self) {
        // SAFETY: getpgrp(2) cannot fail.
        let own_pgid = unsafe { libc::getpgrp() } as u32;
        for (pid, pgid) in util::job_processes(&self.layout.spool, &self.layout.slurm_conf()) {
            let target = if pgid == pid && pgid != own_pgid { -(pid as i32) } else { pid as i32 };
            eprintln!("slurm-testcluster: killing job process {pid} left behind (process group {pgid})");
            // SAFETY: kill(2) of a job process of this cluster (its command line names our spool
            // dir, or its environment our slurm.conf) or of the group it leads; no memory is
            // touched.
            unsafe { libc::kill(target, libc::SIGKILL) };
        }
    }

    /// Jobs still running when the cluster stops would leave slurmstepd processes behind (slurmd
    /// does not take them down with it), so cancel them first, within a short bound.
    fn cancel_jobs(&mut self) {
        let ctld_running = self
            .daemons
            .iter_mut()
            .any(|d| d.name == "slurmctld" && d.exited().is_none());
        if !ctld_running {
            return;
        }
        let list = || -> Vec<String> {
            util::output_of(self.command("squeue").args(["-h", "-o", "%i"]))
                .map(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .split_whitespace()
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        let jobs = list();
        if jobs.is_empty() {
            return;
        }
        let _ = util::output_of(self.command("scancel").args(&jobs));
        let _ = poll(Duration::from_secs(20), POLL, || {
            Ok(list().is_empty().then_some(()))
        });
    }
}

impl std::fmt::Debug for LocalCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCluster")
            .field("base_dir", &self.layout.base)
            .field("nodes", &self.cfg.nodes)
            .field("daemons", &self.pids())
            .finish()
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            eprintln!("slurm-testcluster: {e}");
        }
    }
}

#[derive(Clone, Copy)]
enum NodeWait {
    AllIdle,
    /// Registered and answering, whatever they run (after a slurmctld restart).
    AllResponding,
}

impl NodeWait {
    fn accepts(self, state: &str) -> bool {
        match self {
            NodeWait::AllIdle => state == "idle",
            NodeWait::AllResponding => matches!(state, "idle" | "alloc" | "mix" | "comp" | "plnd"),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            NodeWait::AllIdle => "idle",
            NodeWait::AllResponding => "responding",
        }
    }
}

/// A job state after which nothing more happens to the job (scontrol's and sacct's names).
fn is_terminal(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "CANCELLED"
            | "FAILED"
            | "TIMEOUT"
            | "NODE_FAIL"
            | "PREEMPTED"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "OUT_OF_MEMORY"
    )
}

/// The value of `Key=value` in `scontrol show -o` output.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.split_whitespace()
        .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
}

/// `<log>.<n>`: the `n`-th part rotated out of `log` by [`LocalCluster::rotate_log`].
fn rotated_name(log: &Path, n: u32) -> PathBuf {
    let mut name = log.as_os_str().to_os_string();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// Whether this release's slurmctld takes `--systemd` (23.11 on), from its usage text.
fn takes_systemd_flag() -> Result<bool, ClusterError> {
    let out = util::output_of(Command::new(require_program("slurmctld")?).arg("-h"))?;
    let usage = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Ok(usage.contains("--systemd"))
}

fn read_lossy(path: &Path) -> String {
    fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn write_private(path: &Path, content: &[u8]) -> Result<(), ClusterError> {
    use std::io::Write;
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(content))
        .map_err(|e| ClusterError::io(format!("write {}", path.display()), e))
}

/// A character device with NVIDIA's major number: what gres.conf `File=` must name. Slurm only
/// looks at the node, nothing ever opens it.
fn make_gpu_device(path: &Path, index: u32) -> Result<(), ClusterError> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| ClusterError::Unsupported(format!("NUL in path {}", path.display())))?;
    // SAFETY: `c_path` is a valid NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mknod(
            c_path.as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(195, index),
        )
    };
    if rc != 0 {
        return Err(ClusterError::io(
            format!("mknod {} c 195 {index}", path.display()),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Slurm's own plugin directory, found next to the slurmctld on PATH (Debian:
/// /usr/lib/<multiarch>/slurm-wlm; a source build: <prefix>/lib/slurm).
fn stock_plugin_dir() -> Result<PathBuf, ClusterError> {
    let slurmctld = require_program("slurmctld")?;
    let prefix = slurmctld
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("/usr"));
    let mut candidates = vec![
        prefix.join("lib/slurm"),
        prefix.join("lib64/slurm"),
        prefix.join("lib/slurm-wlm"),
    ];
    if let Ok(entries) = fs::read_dir(prefix.join("lib")) {
        for entry in entries.flatten() {
            candidates.push(entry.path().join("slurm-wlm"));
            candidates.push(entry.path().join("slurm"));
        }
    }
    candidates
        .into_iter()
        .find(|dir| dir.join("select_cons_tres.so").is_file())
        .ok_or_else(|| {
            ClusterError::Unsupported(format!(
                "no Slurm plugin directory found under {}",
                prefix.display()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_reads_scontrol_one_line_output() {
        let text = "JobId=7 JobName=wrap UserId=root(0) JobState=COMPLETED Reason=None";
        assert_eq!(field(text, "JobState"), Some("COMPLETED"));
        assert_eq!(field(text, "JobId"), Some("7"));
        assert_eq!(field(text, "Missing"), None);
    }

    #[test]
    fn terminal_states_exclude_running_and_completing() {
        assert!(is_terminal("COMPLETED"));
        assert!(is_terminal("FAILED"));
        assert!(!is_terminal("RUNNING"));
        assert!(!is_terminal("COMPLETING"));
        assert!(!is_terminal("PENDING"));
    }
}
