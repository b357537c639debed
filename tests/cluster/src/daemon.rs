//! One daemon the harness started, kept as a child process in the foreground (`-D`, `-F`), so
//! that its pid is known without pid files, it is reaped by us, and it can never be confused
//! with a process someone else started: a child that has not been reaped keeps its pid.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::ClusterError;
use crate::util::{describe, tail_file};

const LOG_TAIL_LINES: usize = 40;

pub(crate) struct Daemon {
    pub(crate) name: String,
    child: Child,
    /// The daemon's own log file, if it writes one.
    log: Option<PathBuf>,
    /// The file that caught its stdout and stderr.
    console: PathBuf,
    exit: Option<ExitStatus>,
}

impl Daemon {
    /// Starts `cmd` with stdin closed and stdout/stderr appended to `console`.
    pub(crate) fn spawn(
        name: impl Into<String>,
        mut cmd: Command,
        log: Option<&Path>,
        console: &Path,
    ) -> Result<Daemon, ClusterError> {
        let name = name.into();
        let out = File::options()
            .create(true)
            .append(true)
            .open(console)
            .map_err(|e| ClusterError::io(format!("open {}", console.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| ClusterError::io("dup log handle", e))?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .map_err(|e| ClusterError::io(format!("start {name} (`{}`)", describe(&cmd)), e))?;
        Ok(Daemon {
            name,
            child,
            log: log.map(Path::to_path_buf),
            console: console.to_path_buf(),
            exit: None,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the daemon has exited (and is now reaped).
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none()
            && let Ok(Some(status)) = self.child.try_wait()
        {
            self.exit = Some(status);
        }
        self.exit
    }

    /// The tail of the daemon's log file and whatever its console caught that the log lacks.
    /// Slurm daemons in the foreground echo every log line to stderr as "<prog>: ..."; those
    /// echoes are dropped, what remains (a panic message, a crash) is kept.
    pub(crate) fn log_tail(&self) -> String {
        let mut parts = Vec::new();
        if let Some(log) = self
            .log
            .as_deref()
            .filter(|l| fs::metadata(l).is_ok_and(|m| m.len() > 0))
        {
            parts.push(format!(
                "==> {} <==\n{}",
                log.display(),
                tail_file(log, LOG_TAIL_LINES)
            ));
        }
        let console = fs::read(&self.console)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let prog = self.name.split_whitespace().next().unwrap_or_default();
        let echo = format!("{prog}: ");
        let extra: Vec<&str> = console
            .lines()
            .filter(|line| parts.is_empty() || !line.starts_with(&echo))
            .collect();
        if !extra.is_empty() {
            let start = extra.len().saturating_sub(LOG_TAIL_LINES);
            parts.push(format!(
                "==> {} <==\n{}",
                self.console.display(),
                extra[start..].join("\n")
            ));
        }
        if parts.is_empty() {
            format!("(no output in {})", self.console.display())
        } else {
            parts.join("\n")
        }
    }

    pub(crate) fn failed(&self, reason: impl Into<String>) -> ClusterError {
        ClusterError::DaemonFailed {
            daemon: self.name.clone(),
            reason: reason.into(),
            log_tail: self.log_tail(),
        }
    }

    /// An error if the daemon has exited; used while polling for readiness.
    pub(crate) fn check_running(&mut self) -> Result<(), ClusterError> {
        match self.exited() {
            Some(status) => Err(self.failed(format!("exited during start-up ({status})"))),
            None => Ok(()),
        }
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL and wait. Returns a description of what went
    /// wrong, if anything did.
    pub(crate) fn stop(&mut self, grace: Duration) -> Result<(), String> {
        if self.exited().is_some() {
            return Ok(());
        }
        self.signal(libc::SIGTERM);
        if self.wait_exit(grace) {
            return Ok(());
        }
        self.signal(libc::SIGKILL);
        if self.wait_exit(Duration::from_secs(10)) {
            Err(format!(
                "{} (pid {}) ignored SIGTERM for {grace:?}; killed",
                self.name,
                self.pid()
            ))
        } else {
            Err(format!(
                "{} (pid {}) survived SIGKILL",
                self.name,
                self.pid()
            ))
        }
    }

    /// SIGKILL, as a crash or the OOM killer would end it, and wait until it is reaped.
    pub(crate) fn kill(&mut self) -> Result<(), String> {
        if self.exited().is_some() {
            return Ok(());
        }
        self.signal(libc::SIGKILL);
        if self.wait_exit(Duration::from_secs(10)) {
            Ok(())
        } else {
            Err(format!("{} (pid {}) survived SIGKILL", self.name, self.pid()))
        }
    }

    fn signal(&self, signal: libc::c_int) {
        let Ok(pid) = libc::pid_t::try_from(self.child.id()) else {
            return;
        };
        // SAFETY: kill(2) has no memory effects. The pid is our own child's and it has not been
        // reaped yet (`exit` is None), so the kernel cannot have handed it to another process.
        unsafe {
            libc::kill(pid, signal);
        }
    }

    fn wait_exit(&mut self, timeout: Duration) -> bool {
        let start = Instant::now();
        loop {
            if self.exited().is_some() {
                return true;
            }
            if start.elapsed() >= timeout {
                return false;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}
