//! Slurm's expect testsuite in the fetched source tree, and running one of its tests against a
//! [`LocalCluster`].
//!
//! The tests `source ./globals`, so they run with the testsuite's own directory as working
//! directory. What is ours goes to a temporary [`Workspace`]: `globals.local` (found through
//! `SLURM_LOCAL_GLOBALS_FILE`) points the tests at the installed Slurm (`/usr`) and the
//! configured source tree, and puts their scratch directories (`<test>dir`) in the workspace;
//! `testsuite.conf` (`SLURM_TESTSUITE_CONF`) says the same to the unified configuration.
//! `SLURM_CONF` (set by [`LocalCluster::command`]) makes every Slurm command of a test talk to
//! the local cluster.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use slurm_testcluster::LocalCluster;

use crate::outcome::{TestRun, Verdict, reason_of, subtests_of, tail};
use crate::scheduler::Cluster;

/// Lines of a test's output kept in its [`TestRun`].
const OUTPUT_TAIL_LINES: usize = 40;
const POLL: Duration = Duration::from_millis(100);

/// The configured Slurm source tree: `$SLURM_SRC_DIR` at run time, else the one the project was
/// built against.
pub fn slurm_src_dir() -> Option<PathBuf> {
    std::env::var_os("SLURM_SRC_DIR")
        .map(PathBuf::from)
        .or_else(|| option_env!("SLURM_SRC_DIR").map(PathBuf::from))
}

/// Why the testsuite cannot run here (no source tree, no `expect`), or `None` when it can.
pub fn skip_reason() -> Option<String> {
    let Some(src) = slurm_src_dir() else {
        return Some("SLURM_SRC_DIR is not set (run tools/slurm-env.sh and export what it prints)".into());
    };
    let expect_dir = src.join("testsuite/expect");
    if !expect_dir.join("globals").is_file() {
        return Some(format!("no expect testsuite in {} (run tools/slurm-env.sh)", expect_dir.display()));
    }
    if !["/usr/bin/expect", "/bin/expect"].iter().any(|p| Path::new(p).is_file()) {
        return Some("`expect` is not installed (apt-get install expect; tools/slurm-env.sh does it)".into());
    }
    None
}

/// Where the tests' scripts are and where their files go.
pub struct Workspace {
    src_dir: PathBuf,
    expect_dir: PathBuf,
    dir: tempfile::TempDir,
    /// Each test's full output, `<out_dir>/<scheduler>/<test>.log`.
    out_dir: PathBuf,
}

impl Workspace {
    /// A fresh workspace for the source tree `src_dir`; full outputs go under `out_dir`.
    pub fn new(src_dir: &Path, out_dir: &Path) -> Result<Workspace, String> {
        let expect_dir = src_dir.join("testsuite/expect");
        let dir = tempfile::Builder::new()
            .prefix("slurm-regression-")
            .tempdir()
            .map_err(|e| format!("create the workspace: {e}"))?;
        let ws = Workspace { src_dir: src_dir.to_path_buf(), expect_dir, dir, out_dir: out_dir.to_path_buf() };
        ws.write_config()?;
        Ok(ws)
    }

    fn shared_dir(&self) -> PathBuf {
        self.dir.path().join("shared")
    }

    fn globals_local(&self) -> PathBuf {
        self.dir.path().join("globals.local")
    }

    fn testsuite_conf(&self) -> PathBuf {
        self.dir.path().join("testsuite.conf")
    }

    fn write_config(&self) -> Result<(), String> {
        let src = self.src_dir.display();
        let shared = self.shared_dir();
        fs::create_dir_all(&shared).map_err(|e| format!("create {}: {e}", shared.display()))?;
        let globals = format!(
            "# Written by slurm-regression for one run against a slurm-testcluster cluster.\n\
             set slurm_dir \"/usr\"\n\
             set build_dir \"{src}\"\n\
             set src_dir \"{src}\"\n\
             set testsuite_shared_dir \"{shared}\"\n\
             set testsuite_colorize false\n\
             set testsuite_cleanup_on_failure true\n",
            shared = shared.display()
        );
        let conf = format!("SlurmSourceDir={src}\nSlurmBuildDir={src}\nSlurmInstallDir=/usr\n");
        write(&self.globals_local(), &globals)?;
        write(&self.testsuite_conf(), &conf)
    }

    /// Runs `expect <test>` against `cluster` (which is `which`), killing it (and whatever it
    /// started) after `limit`. `label` names the output subdirectory (the scheduler).
    pub fn run_test(
        &self,
        cluster: &LocalCluster,
        which: Cluster,
        test: &str,
        label: &str,
        limit: Duration,
    ) -> Result<TestRun, String> {
        let log_dir = self.out_dir.join(label);
        fs::create_dir_all(&log_dir).map_err(|e| format!("create {}: {e}", log_dir.display()))?;
        let log_path = log_dir.join(format!("{test}.log"));
        let log = fs::File::create(&log_path).map_err(|e| format!("create {}: {e}", log_path.display()))?;
        let log_err = log.try_clone().map_err(|e| format!("dup log handle: {e}"))?;

        let ctld_log_before = cluster.slurmctld_log().len();
        let started = Instant::now();
        let mut cmd = cluster.command("expect");
        cmd.arg(test)
            .current_dir(&self.expect_dir)
            .env("SLURM_LOCAL_GLOBALS_FILE", self.globals_local())
            .env("SLURM_TESTSUITE_CONF", self.testsuite_conf())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            // Its own process group, so that a timeout can end what the test started too.
            .process_group(0);
        let child = cmd.spawn().map_err(|e| format!("start expect {test}: {e}"))?;
        let mut queue_at_timeout = None;
        let exit = wait_bounded(child, limit, || queue_at_timeout = Some(queue_now(cluster)))?;
        let elapsed = started.elapsed();

        let output = String::from_utf8_lossy(&fs::read(&log_path).unwrap_or_default()).into_owned();
        let verdict = match exit {
            Exit::Code(code) => Verdict::from_exit_code(code),
            Exit::TimedOut => Verdict::Timeout,
        };
        let ctld_log = cluster.slurmctld_log();
        let excerpt = notable_lines(ctld_log.get(ctld_log_before..).unwrap_or_default());
        let queue_at_end = match verdict {
            Verdict::Pass | Verdict::Skip => None,
            Verdict::Timeout => queue_at_timeout,
            Verdict::Fail => Some(queue_now(cluster)),
        };
        Ok(TestRun {
            test: test.to_string(),
            cluster: which,
            verdict,
            elapsed,
            reason: if verdict == Verdict::Pass { None } else { reason_of(&output) },
            subtests: subtests_of(&output),
            output_tail: tail(&output, OUTPUT_TAIL_LINES),
            slurmctld_excerpt: excerpt,
            queue_at_end,
        })
    }
}

/// Every job slurmctld knows, one line each: id, name, state, reason, expected start, nodes,
/// time limit, CPUs, GRES; or why squeue could not say.
fn queue_now(cluster: &LocalCluster) -> String {
    match cluster.command("squeue").args(["-h", "-a", "-o", "%i %j %T %r start=%S nodes=%N limit=%l cpus=%C gres=%b"]).output() {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if text.is_empty() { "(no jobs)".into() } else { text }
        }
        Ok(out) => format!("squeue failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
        Err(e) => format!("squeue could not run: {e}"),
    }
}

/// slurmctld's log lines worth showing next to a test's result: errors, jobs `select_nodes`
/// found never runnable, and our plugin's lines.
fn notable_lines(log: &str) -> String {
    const NOTABLE: [&str; 4] = ["error", "fatal", "never runnable", "sched/energy"];
    let lines: Vec<&str> = log.lines().filter(|l| NOTABLE.iter().any(|n| l.contains(n))).collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

enum Exit {
    Code(Option<i32>),
    TimedOut,
}

/// Waits for `child` at most `limit`. Either way, before the child is reaped (so its pid, which
/// is also its process group's id, cannot have been reused), whatever is left of its process
/// group is killed: processes the test started and left behind, or all of them on a timeout.
fn wait_bounded(mut child: Child, limit: Duration, before_timeout_kill: impl FnOnce()) -> Result<Exit, String> {
    let pid = child.id() as libc::pid_t;
    let started = Instant::now();
    let timed_out = loop {
        if exited_unreaped(pid)? {
            break false;
        }
        if started.elapsed() >= limit {
            break true;
        }
        std::thread::sleep(POLL);
    };
    if timed_out {
        before_timeout_kill();
    }
    // SAFETY: kill(2) of the process group our own, not yet reaped child leads; no memory is
    // touched.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    let status = child.wait().map_err(|e| format!("wait for expect: {e}"))?;
    Ok(if timed_out { Exit::TimedOut } else { Exit::Code(status.code()) })
}

/// Whether child `pid` has exited, leaving it unreaped (`waitid` with `WNOWAIT`).
fn exited_unreaped(pid: libc::pid_t) -> Result<bool, String> {
    // SAFETY: an all-zero siginfo_t is a valid value for waitid to fill in.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid(2) on our own child, writing only into `info`, which outlives the call.
    let rc = unsafe {
        libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT)
    };
    if rc != 0 {
        return Err(format!("waitid({pid}): {}", std::io::Error::last_os_error()));
    }
    // SAFETY: waitid filled `info` in; si_pid is 0 when the child has not exited yet.
    Ok(unsafe { info.si_pid() } != 0)
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
}
