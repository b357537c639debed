//! One daemon the harness started.
//!
//! Attached (`-D`, `-F`): the daemon is our child in the foreground, so its pid is known without
//! pid files, it is reaped by us, and it can never be confused with a process someone else
//! started: a child that has not been reaped keeps its pid.
//!
//! Site mode ([`crate::DaemonMode::Systemd`]): the process we start may hand over to another one
//! (it daemonises, or it re-executes itself on reconfigure, as 24.11 does under `--systemd`), so
//! the daemon's real process (its *main* process) is learnt as systemd learns it: from
//! `MAINPID=` on the notify socket ([`crate::notify::NotifySocket`]) or from its `PidFile`. Each
//! main process is held by a pidfd, opened only after checking that the process belongs to this
//! cluster (its environment names our slurm.conf, its command name is the daemon's), and every
//! signal goes through that pidfd: a pid the kernel has given to another process is never
//! signalled.

use std::fs::{self, File};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use crate::error::ClusterError;
use crate::notify::{NotifySocket, StateChange};
use crate::util::{describe, tail_file};

const LOG_TAIL_LINES: usize = 40;
/// How long a daemon whose main process ended may take to name its successor (a reconfigure's
/// new process writing the pid file) before it counts as gone.
const SUCCESSOR_GRACE: Duration = Duration::from_secs(10);

/// How the harness follows a daemon in site mode.
pub(crate) struct SiteWatch {
    /// The notify-socket stand-in handed to the daemon as `NOTIFY_SOCKET` (`--systemd`).
    pub notify: Option<NotifySocket>,
    /// The daemon's `PidFile` (a daemonised process that sends no notification).
    pub pid_file: Option<PathBuf>,
    /// `SLURM_CONF=<our slurm.conf>`: in the environment of every process of this cluster.
    pub env_mark: String,
    /// The daemon's command name (`/proc/<pid>/comm`): `slurmctld`, `slurmd`.
    pub comm: String,
}

/// A process held by a pidfd: it cannot be confused with a later process of the same pid.
struct MainProcess {
    pid: u32,
    fd: OwnedFd,
}

struct SiteState {
    watch: SiteWatch,
    main: Option<MainProcess>,
    /// Every main pid seen, in order (a reconfigure on 24.11 adds one).
    mains: Vec<u32>,
    /// `READY=1` messages received.
    ready: u32,
    /// Since when no main process has been known (its last one ended, or none was named yet
    /// after the started process exited).
    lost_since: Option<Instant>,
    notes: Vec<String>,
}

pub(crate) struct Daemon {
    pub(crate) name: String,
    /// The process we started: the daemon itself when attached; under `--systemd` its first
    /// main process; when daemonising, the parent that exits at once.
    child: Child,
    child_exit: Option<ExitStatus>,
    /// The daemon's own log file, if it writes one.
    log: Option<PathBuf>,
    /// The file that caught its stdout and stderr.
    console: PathBuf,
    /// Site mode only.
    site: Option<Mutex<SiteState>>,
}

impl Daemon {
    /// Starts `cmd` with stdin closed and stdout/stderr appended to `console`.
    pub(crate) fn spawn(
        name: impl Into<String>,
        cmd: Command,
        log: Option<&Path>,
        console: &Path,
    ) -> Result<Daemon, ClusterError> {
        Self::spawn_inner(name.into(), cmd, log, console, None)
    }

    /// Starts a daemon in site mode: `NOTIFY_SOCKET` names `watch.notify` if there is one, and
    /// the daemon is followed through its notifications and pid file.
    pub(crate) fn spawn_site(
        name: impl Into<String>,
        mut cmd: Command,
        log: Option<&Path>,
        console: &Path,
        watch: SiteWatch,
    ) -> Result<Daemon, ClusterError> {
        if let Some(notify) = &watch.notify {
            cmd.env("NOTIFY_SOCKET", notify.path());
        } else {
            cmd.env_remove("NOTIFY_SOCKET");
        }
        Self::spawn_inner(name.into(), cmd, log, console, Some(watch))
    }

    fn spawn_inner(
        name: String,
        mut cmd: Command,
        log: Option<&Path>,
        console: &Path,
        watch: Option<SiteWatch>,
    ) -> Result<Daemon, ClusterError> {
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
        let site = watch.map(|watch| {
            let mut state = SiteState { watch, main: None, mains: Vec::new(), ready: 0, lost_since: None, notes: Vec::new() };
            // Under --systemd the started process is the main one until it names another; our
            // unreaped child cannot be anyone else.
            if state.watch.notify.is_some()
                && let Some(fd) = pidfd_open(child.id())
            {
                state.main = Some(MainProcess { pid: child.id(), fd });
                state.mains.push(child.id());
            }
            Mutex::new(state)
        });
        Ok(Daemon {
            name,
            child,
            child_exit: None,
            log: log.map(Path::to_path_buf),
            console: console.to_path_buf(),
            site,
        })
    }

    /// The daemon's pid: our child's when attached; in site mode its current main process (the
    /// started process while none is known).
    pub(crate) fn pid(&self) -> u32 {
        match &self.site {
            None => self.child.id(),
            Some(site) => {
                let mut s = lock(site);
                s.refresh();
                s.main.as_ref().map_or(self.child.id(), |m| m.pid)
            }
        }
    }

    /// Every main pid the daemon has had, in order (site mode); the child's pid when attached.
    pub(crate) fn main_pids(&self) -> Vec<u32> {
        match &self.site {
            None => vec![self.child.id()],
            Some(site) => {
                let mut s = lock(site);
                s.refresh();
                s.mains.clone()
            }
        }
    }

    /// `READY=1` notifications received (site mode with a notify socket; 0 otherwise).
    pub(crate) fn ready_count(&self) -> u32 {
        self.site.as_ref().map_or(0, |site| {
            let mut s = lock(site);
            s.refresh();
            s.ready
        })
    }

    /// Why the daemon is gone, if it is. Attached: the child's exit status (it is reaped).
    /// Site mode: neither a main process nor the started process runs, and no successor was
    /// named within [`SUCCESSOR_GRACE`].
    pub(crate) fn exited(&mut self) -> Option<String> {
        if self.child_exit.is_none()
            && let Ok(Some(status)) = self.child.try_wait()
        {
            self.child_exit = Some(status);
        }
        let Some(site) = &self.site else {
            return self.child_exit.map(|s| s.to_string());
        };
        let mut s = lock(site);
        s.refresh();
        if s.main.is_some() {
            return None;
        }
        match self.child_exit {
            None => None, // still starting (daemonising) or the main process itself
            Some(status) if !status.success() && s.mains.is_empty() => Some(format!("exited before naming its process ({status})")),
            Some(_) => {
                let since = *s.lost_since.get_or_insert_with(Instant::now);
                (since.elapsed() >= SUCCESSOR_GRACE).then(|| match s.mains.last() {
                    Some(pid) => format!("its process {pid} ended and no other took over within {SUCCESSOR_GRACE:?}"),
                    None => format!("no process named by MAINPID or its pid file within {SUCCESSOR_GRACE:?}"),
                })
            }
        }
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
        if let Some(site) = &self.site {
            let s = lock(site);
            if !s.notes.is_empty() {
                parts.push(format!("==> harness <==\nmain pids {:?}\n{}", s.mains, s.notes.join("\n")));
            }
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
            Some(why) => Err(self.failed(format!("exited ({why})"))),
            None => Ok(()),
        }
    }

    /// Sends `signal` to the daemon's current process (site mode: its main process, through
    /// its pidfd). Returns the pid signalled.
    pub(crate) fn signal(&mut self, signal: libc::c_int) -> Result<u32, String> {
        if self.child_exit.is_none()
            && let Ok(Some(status)) = self.child.try_wait()
        {
            self.child_exit = Some(status);
        }
        if let Some(site) = &self.site {
            let mut s = lock(site);
            s.refresh();
            if let Some(main) = &s.main {
                return if pidfd_send_signal(&main.fd, signal) {
                    Ok(main.pid)
                } else {
                    Err(format!("{}: signal {signal} to pid {}: {}", self.name, main.pid, std::io::Error::last_os_error()))
                };
            }
        }
        if self.child_exit.is_some() {
            return Err(format!("{} is not running", self.name));
        }
        self.signal_child(signal);
        Ok(self.child.id())
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL and wait. Returns a description of what went
    /// wrong, if anything did.
    pub(crate) fn stop(&mut self, grace: Duration) -> Result<(), String> {
        self.end(Some(grace))
    }

    /// SIGKILL, as a crash or the OOM killer would end it, and wait until it is gone.
    pub(crate) fn kill(&mut self) -> Result<(), String> {
        self.end(None)
    }

    /// Ends the daemon: SIGTERM and `grace` first when given, SIGKILL otherwise or after it.
    /// In site mode a successor named while it went down (a reconfigure in flight) is ended
    /// too, and the started process is reaped.
    fn end(&mut self, grace: Option<Duration>) -> Result<(), String> {
        let mut problems = Vec::new();
        if let Some(site) = &self.site {
            for _ in 0..4 {
                let target = {
                    let mut s = lock(site);
                    s.refresh();
                    s.main.take()
                };
                let Some(main) = target else { break };
                if let Err(problem) = end_process(&self.name, &main, grace) {
                    problems.push(problem);
                }
                // A notification sent just before it ended is read by the next refresh.
                thread::sleep(Duration::from_millis(100));
            }
        }
        if self.child_exit.is_none() {
            let already = matches!(self.child.try_wait(), Ok(Some(_)));
            if !already {
                match grace {
                    Some(grace) => {
                        self.signal_child(libc::SIGTERM);
                        if !self.wait_child(grace) {
                            let threads = thread_dump(self.child.id());
                            self.signal_child(libc::SIGKILL);
                            problems.push(format!("{} (pid {}) ignored SIGTERM for {grace:?}; killed; its threads then:\n{threads}", self.name, self.child.id()));
                        }
                    }
                    None => self.signal_child(libc::SIGKILL),
                }
                if !self.wait_child(Duration::from_secs(10)) {
                    problems.push(format!("{} (pid {}) survived SIGKILL", self.name, self.child.id()));
                }
            } else {
                self.wait_child(Duration::ZERO);
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
    }

    fn signal_child(&self, signal: libc::c_int) {
        if self.child_exit.is_some() {
            return;
        }
        let Ok(pid) = libc::pid_t::try_from(self.child.id()) else {
            return;
        };
        // SAFETY: kill(2) has no memory effects. The pid is our own child's and it has not been
        // reaped yet (`child_exit` is None), so the kernel cannot have handed it to another
        // process.
        unsafe {
            libc::kill(pid, signal);
        }
    }

    /// Waits until the started process has exited and reaps it.
    fn wait_child(&mut self, timeout: Duration) -> bool {
        let start = Instant::now();
        loop {
            if self.child_exit.is_none()
                && let Ok(Some(status)) = self.child.try_wait()
            {
                self.child_exit = Some(status);
            }
            if self.child_exit.is_some() {
                return true;
            }
            if start.elapsed() >= timeout {
                return false;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl SiteState {
    /// Reads what the daemon announced (notify socket, pid file) and notices a main process
    /// that ended.
    fn refresh(&mut self) {
        let mut named = Vec::new();
        if let Some(notify) = &self.watch.notify {
            for change in notify.drain() {
                match change {
                    StateChange::Ready => self.ready += 1,
                    StateChange::MainPid(pid) => named.push(pid),
                }
            }
        }
        if let Some(path) = &self.watch.pid_file
            && let Some(pid) = fs::read_to_string(path).ok().and_then(|t| t.trim().parse::<u32>().ok())
        {
            named.push(pid);
        }
        for pid in named {
            if self.main.as_ref().is_some_and(|m| m.pid == pid) {
                continue;
            }
            match adopt(pid, &self.watch) {
                Ok(main) => {
                    if let Some(old) = &self.main {
                        self.notes.push(format!("main process {} handed over to {pid}", old.pid));
                    }
                    if self.mains.last() != Some(&pid) {
                        self.mains.push(pid);
                    }
                    self.main = Some(main);
                    self.lost_since = None;
                }
                Err(why) => {
                    let note = format!("pid {pid} not taken as the main process: {why}");
                    if self.notes.last() != Some(&note) {
                        self.notes.push(note);
                    }
                }
            }
        }
        if let Some(main) = &self.main
            && pidfd_wait_exit(&main.fd, Duration::ZERO)
        {
            self.notes.push(format!("main process {} ended", main.pid));
            self.main = None;
            self.lost_since = Some(Instant::now());
        }
    }
}

/// Takes `pid` as the daemon's main process if it runs and is of this cluster.
fn adopt(pid: u32, watch: &SiteWatch) -> Result<MainProcess, String> {
    let fd = pidfd_open(pid).ok_or_else(|| format!("pidfd_open: {}", std::io::Error::last_os_error()))?;
    // Checked after the pidfd is held: the process the pidfd names is the one checked, unless
    // it ended in between, which the exit check below sees.
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let comm = fs::read_to_string(proc_dir.join("comm")).map_err(|e| format!("comm: {e}"))?;
    if comm.trim() != watch.comm {
        return Err(format!("its command is {:?}, not {}", comm.trim(), watch.comm));
    }
    let environ = fs::read(proc_dir.join("environ")).map_err(|e| format!("environ: {e}"))?;
    if !environ.split(|b| *b == 0).any(|v| v == watch.env_mark.as_bytes()) {
        return Err(format!("its environment lacks {}", watch.env_mark));
    }
    if pidfd_wait_exit(&fd, Duration::ZERO) {
        return Err("it has ended".into());
    }
    Ok(MainProcess { pid, fd })
}

/// SIGTERM (when `grace` is given) then SIGKILL, through the pidfd, waiting for the end.
fn end_process(name: &str, main: &MainProcess, grace: Option<Duration>) -> Result<(), String> {
    let mut threads = String::new();
    if let Some(grace) = grace {
        pidfd_send_signal(&main.fd, libc::SIGTERM);
        if pidfd_wait_exit(&main.fd, grace) {
            return Ok(());
        }
        threads = thread_dump(main.pid);
    }
    pidfd_send_signal(&main.fd, libc::SIGKILL);
    let killed = pidfd_wait_exit(&main.fd, Duration::from_secs(10));
    match (grace, killed) {
        (_, false) => Err(format!("{name} (pid {}) survived SIGKILL", main.pid)),
        (Some(grace), true) => Err(format!("{name} (pid {}) ignored SIGTERM for {grace:?}; killed; its threads then:\n{threads}", main.pid)),
        (None, true) => Ok(()),
    }
}

/// What each thread of a daemon that ignored SIGTERM was doing, for the report: its name and
/// kernel wait channel from /proc, then gdb's backtraces of every thread when gdb is installed
/// (bounded by `timeout`, so a wedged process cannot hold the test).
fn thread_dump(pid: u32) -> String {
    let mut out = String::new();
    if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            let dir = task.path();
            let read = |f: &str| fs::read_to_string(dir.join(f)).map(|s| s.trim().to_string()).unwrap_or_default();
            out.push_str(&format!("  task {} {:?} wchan {}\n", task.file_name().to_string_lossy(), read("comm"), read("wchan")));
        }
    }
    let gdb = Command::new("timeout")
        .args(["60", "gdb", "-p", &pid.to_string(), "-batch", "-nx", "-ex", "set pagination off", "-ex", "thread apply all bt"])
        .stdin(Stdio::null())
        .output();
    if let Ok(gdb) = gdb {
        let text = String::from_utf8_lossy(&gdb.stdout);
        out.extend(text.lines().filter(|l| l.starts_with("Thread ") || l.starts_with('#')).map(|l| format!("  {l}\n")));
    }
    out
}

fn lock(site: &Mutex<SiteState>) -> std::sync::MutexGuard<'_, SiteState> {
    site.lock().unwrap_or_else(|poison| poison.into_inner())
}

fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: pidfd_open(2) reads only its two integer arguments; a non-negative result is a
    // new file descriptor that nothing else owns, so OwnedFd may take it.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: see above: a fresh descriptor returned by the kernel to us alone.
    Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn pidfd_send_signal(fd: &OwnedFd, signal: libc::c_int) -> bool {
    // SAFETY: pidfd_send_signal(2) with a valid pidfd we own, a null siginfo (the kernel fills
    // in a default one) and no flags; it touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_send_signal, fd.as_raw_fd(), signal, std::ptr::null::<libc::siginfo_t>(), 0) };
    rc == 0
}

/// True once the process the pidfd names has ended (a pidfd polls readable then), waiting up to
/// `timeout`.
fn pidfd_wait_exit(fd: &OwnedFd, timeout: Duration) -> bool {
    let start = Instant::now();
    loop {
        let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let left = timeout.saturating_sub(start.elapsed());
        let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: poll(2) on one pollfd that lives on our stack for the whole call.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc > 0 {
            return true;
        }
        if rc == 0 || start.elapsed() >= timeout {
            return false;
        }
        // EINTR: poll again for what is left.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pidfd_sees_its_process_end_and_signals_only_it() {
        let mut child = Command::new("sleep").arg("30").spawn().expect("spawn sleep");
        let fd = pidfd_open(child.id()).expect("pidfd");
        assert!(!pidfd_wait_exit(&fd, Duration::from_millis(50)));
        assert!(pidfd_send_signal(&fd, libc::SIGTERM));
        assert!(pidfd_wait_exit(&fd, Duration::from_secs(5)));
        let _ = child.wait();
        // Reaped: the pidfd still names the ended process, never a new one of that pid.
        assert!(!pidfd_send_signal(&fd, libc::SIGTERM));
    }

    #[test]
    fn a_process_of_another_environment_is_not_adopted() {
        let mut child = Command::new("sleep").arg("30").env("SLURM_CONF", "/elsewhere/slurm.conf").spawn().expect("spawn sleep");
        // spawn() returns after fork; until the child has exec'd, /proc shows the test's own
        // command and environment (seen in CI), so wait for the exec first.
        // The new name appears during the exec before the new environment's addresses are set
        // (seen in CI under load: comm `sleep`, environ still empty), so wait for both.
        let comm_path = format!("/proc/{}/comm", child.id());
        let environ_path = format!("/proc/{}/environ", child.id());
        let exec_deadline = Instant::now() + Duration::from_secs(10);
        let execed = || {
            fs::read_to_string(&comm_path).is_ok_and(|c| c.trim() == "sleep")
                && fs::read(&environ_path).is_ok_and(|e| e.split(|&b| b == 0).any(|v| v == b"SLURM_CONF=/elsewhere/slurm.conf"))
        };
        while !execed() {
            assert!(Instant::now() < exec_deadline, "sleep did not exec within 10 s");
            std::thread::sleep(Duration::from_millis(10));
        }
        let watch = |mark: &str, comm: &str| SiteWatch { notify: None, pid_file: None, env_mark: mark.into(), comm: comm.into() };
        assert!(adopt(child.id(), &watch("SLURM_CONF=/ours/slurm.conf", "sleep")).is_err());
        assert!(adopt(child.id(), &watch("SLURM_CONF=/elsewhere/slurm.conf", "slurmctld")).is_err());
        assert!(adopt(child.id(), &watch("SLURM_CONF=/elsewhere/slurm.conf", "sleep")).is_ok());
        let _ = child.kill();
        let _ = child.wait();
    }
}
