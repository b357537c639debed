//! Small helpers: finding programs, free ports, reading log tails, running a client command,
//! polling with a time bound.

use std::collections::HashSet;
use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::ClusterError;

/// Directories searched after `PATH`: the daemons live in /usr/sbin, which a non-login shell's
/// `PATH` may lack.
const EXTRA_BIN_DIRS: &[&str] = &[
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
    "/usr/local/sbin",
    "/usr/local/bin",
];

/// Names the Slurm install to use instead of the one on `PATH` (a prefix with `sbin/slurmctld`,
/// `bin/sbatch`, `lib/slurm/`, as `tools/slurm-release.sh` builds them).
pub const PREFIX_ENV: &str = "SLURM_ENERGY_SLURM_PREFIX";

/// The install [`PREFIX_ENV`] names, if set and not empty.
pub fn slurm_prefix() -> Option<PathBuf> {
    std::env::var_os(PREFIX_ENV).filter(|p| !p.is_empty()).map(PathBuf::from)
}

/// The install's program directories, searched first (`sbin`, `bin`).
pub(crate) fn prefix_bin_dirs() -> Vec<PathBuf> {
    slurm_prefix().map(|p| vec![p.join("sbin"), p.join("bin")]).unwrap_or_default()
}

pub(crate) fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    prefix_bin_dirs()
        .into_iter()
        .chain(std::env::split_paths(&path))
        .chain(EXTRA_BIN_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

pub(crate) fn require_program(name: &str) -> Result<PathBuf, ClusterError> {
    find_program(name).ok_or_else(|| {
        ClusterError::Unsupported(format!(
            "`{name}` not found in ${PREFIX_ENV}, on PATH or in /usr/sbin (run tools/slurm-env.sh, or tools/slurm-release.sh for another release)"
        ))
    })
}

/// Ports handed out by this process, so that two clusters of one test binary never get the same
/// one even if the kernel offers it twice.
fn handed_out() -> &'static Mutex<HashSet<u16>> {
    static PORTS: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    PORTS.get_or_init(|| Mutex::new(HashSet::new()))
}

/// `count` distinct ports that were free on 127.0.0.1 a moment ago. All listeners are held until
/// every port is chosen, so the kernel cannot offer one twice within a call.
pub(crate) fn free_ports(count: usize) -> Result<Vec<u16>, ClusterError> {
    let mut listeners = Vec::new();
    let mut ports = Vec::new();
    let mut taken = handed_out()
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    let mut attempts = 0;
    while ports.len() < count {
        attempts += 1;
        if attempts > count * 20 {
            return Err(ClusterError::Unsupported(
                "cannot find free ports on 127.0.0.1".into(),
            ));
        }
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| ClusterError::io("bind 127.0.0.1:0", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| ClusterError::io("local_addr", e))?
            .port();
        if taken.insert(port) {
            ports.push(port);
        }
        listeners.push(listener);
    }
    Ok(ports)
}

pub(crate) fn short_hostname() -> Result<String, ClusterError> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its whole length; gethostname NUL-terminates within it when
    // the name fits, and the last byte is forced to NUL below in case it did not.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return Err(ClusterError::io(
            "gethostname",
            std::io::Error::last_os_error(),
        ));
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len() - 1);
    let full = String::from_utf8_lossy(&buf[..end]).into_owned();
    let short = full.split('.').next().unwrap_or_default().to_string();
    if short.is_empty() {
        return Err(ClusterError::Unsupported("the host has no name".into()));
    }
    Ok(short)
}

/// Bytes from the kernel's random source: the munge key.
pub(crate) fn random_bytes(count: usize) -> Result<Vec<u8>, ClusterError> {
    let mut bytes = vec![0u8; count];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| ClusterError::io("read /dev/urandom", e))?;
    Ok(bytes)
}

/// A random hex string: the database password.
pub(crate) fn random_hex(bytes: usize) -> Result<String, ClusterError> {
    Ok(random_bytes(bytes)?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The last `lines` lines of a file, or a note saying why there are none.
pub(crate) fn tail_file(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            let start = all.len().saturating_sub(lines);
            if all.is_empty() {
                format!("({} is empty)", path.display())
            } else {
                all[start..].join("\n")
            }
        }
        Err(e) => format!("({}: {e})", path.display()),
    }
}

pub(crate) fn describe(cmd: &Command) -> String {
    let mut text = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// Runs a short client command to completion (stdin closed) and returns its stdout; a non-zero
/// exit is an error that carries stdout and stderr.
pub(crate) fn run(cmd: &mut Command) -> Result<String, ClusterError> {
    let output = output_of(cmd)?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(ClusterError::Command {
            command: describe(cmd),
            status: output.status.to_string(),
            output: format!("{stdout}{}", String::from_utf8_lossy(&output.stderr)),
        })
    }
}

pub(crate) fn output_of(cmd: &mut Command) -> Result<Output, ClusterError> {
    cmd.stdin(Stdio::null());
    cmd.output()
        .map_err(|e| ClusterError::io(format!("run `{}`", describe(cmd)), e))
}

/// Polls `check` every `interval` until it returns `Some`, an error, or `timeout` passes.
pub(crate) fn poll<T>(
    timeout: Duration,
    interval: Duration,
    mut check: impl FnMut() -> Result<Option<T>, ClusterError>,
) -> Result<Option<T>, ClusterError> {
    let start = Instant::now();
    loop {
        if let Some(value) = check()? {
            return Ok(Some(value));
        }
        if start.elapsed() >= timeout {
            return Ok(None);
        }
        thread::sleep(interval);
    }
}

pub(crate) fn write_file(path: &Path, content: &str) -> Result<(), ClusterError> {
    fs::write(path, content).map_err(|e| ClusterError::io(format!("write {}", path.display()), e))
}

pub(crate) fn create_dir(path: &Path) -> Result<(), ClusterError> {
    fs::create_dir_all(path).map_err(|e| ClusterError::io(format!("create {}", path.display()), e))
}

pub(crate) fn set_mode(path: &Path, mode: u32) -> Result<(), ClusterError> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| ClusterError::io(format!("chmod {mode:o} {}", path.display()), e))
}

/// True while a process with this id exists (a zombie counts: it has not been reaped yet).
pub fn pid_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Processes of a cluster's jobs: a command line naming a path under `spool` (batch scripts,
/// `/bin/sh <base>/spool/<node>/jobNNNNN/slurm_script`) or an environment with
/// `SLURM_CONF=<conf>` (every task: the job's environment comes from the submitting command,
/// which the harness runs with that variable). Returns (pid, process group id), never this
/// process.
pub fn job_processes(spool: &Path, conf: &Path) -> Vec<(u32, u32)> {
    let spool = spool.display().to_string();
    let conf_var = format!("SLURM_CONF={}", conf.display());
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            if pid == me {
                return None;
            }
            let cmdline = fs::read(e.path().join("cmdline")).ok()?;
            let ours = String::from_utf8_lossy(&cmdline).replace('\0', " ").contains(&spool)
                || fs::read(e.path().join("environ"))
                    .ok()
                    .is_some_and(|env| env.split(|b| *b == 0).any(|v| v == conf_var.as_bytes()));
            if !ours {
                return None;
            }
            // /proc/<pid>/stat: "pid (comm) state ppid pgrp ..."; comm may hold blanks.
            let stat = fs::read_to_string(e.path().join("stat")).ok()?;
            let after_comm = &stat[stat.rfind(')')? + 1..];
            let pgid: u32 = after_comm.split_whitespace().nth(2)?.parse().ok()?;
            Some((pid, pgid))
        })
        .collect()
}
