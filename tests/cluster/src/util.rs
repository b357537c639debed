//! Small helpers: finding programs, free ports, reading log tails, running a client command,
//! polling with a time bound.

use std::collections::HashSet;
use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
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

/// The registry of ports handed out to live clusters on this host, shared by every process (test
/// binaries run side by side, tools/run-tests.sh). One line per port: `<port> <owner pid>`.
pub const PORT_REGISTRY: &str = "/tmp/slurm-testcluster-ports";

/// Lowest port handed out. The top is the kernel's ephemeral range's start (exclusive).
const FIRST_PORT: u16 = 15000;

/// `count` distinct ports for a cluster's daemons, safe across processes.
///
/// Invariant: among processes that are alive, no port is handed out twice. Each port chosen is
/// written to [`PORT_REGISTRY`] with this process's id while an exclusive `flock` on that file is
/// held, and a line is dropped only once its owner has exited (so a cluster keeps its ports for
/// restarts of its daemons as long as its test binary lives). The ports lie below the kernel's
/// ephemeral range (`net.ipv4.ip_local_port_range`), so no outgoing connection of any process is
/// given one between now and the moment its daemon binds it; each was bindable on 0.0.0.0 (what
/// the daemons bind) when chosen.
pub(crate) fn free_ports(count: usize) -> Result<Vec<u16>, ClusterError> {
    free_ports_in(Path::new(PORT_REGISTRY), FIRST_PORT..ephemeral_start(), count)
}

/// The start of the kernel's ephemeral port range (32768 when it cannot be read).
fn ephemeral_start() -> u16 {
    fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .filter(|&p: &u16| p > FIRST_PORT)
        .unwrap_or(32768)
}

fn free_ports_in(
    registry: &Path,
    range: std::ops::Range<u16>,
    count: usize,
) -> Result<Vec<u16>, ClusterError> {
    use std::io::{Seek, Write};
    let what = |op: &str| format!("{op} {}", registry.display());
    let mut file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(registry)
        .map_err(|e| ClusterError::io(what("open"), e))?;
    // Root's file must stay usable by a test run as another user, and the other way round.
    let _ = set_mode(registry, 0o666);
    // Released when `file` is dropped (end of this function), after the registry is written.
    file.lock().map_err(|e| ClusterError::io(what("flock"), e))?;
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|e| ClusterError::io(what("read"), e))?;
    let mut live: Vec<(u16, u32)> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .filter(|&(_, pid)| pid_exists(pid))
        .collect();
    let taken: HashSet<u16> = live.iter().map(|&(port, _)| port).collect();
    let span = usize::from(range.end.saturating_sub(range.start));
    // Start at a random place so that processes do not all probe the same first ports.
    let offset = random_bytes(2).map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])))?;
    let mut ports = Vec::new();
    for i in 0..span {
        if ports.len() == count {
            break;
        }
        let port = range.start + ((offset + i) % span) as u16;
        if !taken.contains(&port) && TcpListener::bind(("0.0.0.0", port)).is_ok() {
            ports.push(port);
        }
    }
    if ports.len() < count {
        return Err(ClusterError::Unsupported(format!(
            "cannot find {count} free ports in {range:?} ({} held by live processes in {})",
            taken.len(),
            registry.display()
        )));
    }
    let me = std::process::id();
    live.extend(ports.iter().map(|&port| (port, me)));
    let mut out = String::new();
    for (port, pid) in &live {
        out.push_str(&format!("{port} {pid}\n"));
    }
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| file.write_all(out.as_bytes()))
        .map_err(|e| ClusterError::io(what("write"), e))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};

    const CHILD_ENV: &str = "SLURM_TESTCLUSTER_PORTS_CHILD";

    /// Not a test of its own: run by `ports_never_overlap_across_live_processes` in a child
    /// process, it takes ports, prints them and stays alive (its ports in use, as a cluster's are)
    /// until its stdin closes.
    #[test]
    fn port_registry_child() {
        let Some(count) = std::env::var(CHILD_ENV).ok().and_then(|v| v.parse().ok()) else { return };
        let ports = free_ports(count).expect("free_ports");
        let line: Vec<String> = ports.iter().map(u16::to_string).collect();
        println!("PORTS {}", line.join(" "));
        let mut rest = String::new();
        let _ = std::io::stdin().read_to_string(&mut rest);
    }

    #[test]
    fn ports_never_overlap_across_live_processes() {
        const CHILDREN: usize = 4;
        const EACH: usize = 400;
        let exe = std::env::current_exe().expect("test binary");
        let mut children: Vec<std::process::Child> = (0..CHILDREN)
            .map(|_| {
                Command::new(&exe)
                    .args(["--exact", "util::tests::port_registry_child", "--nocapture", "--test-threads=1"])
                    .env(CHILD_ENV, EACH.to_string())
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("spawn a child")
            })
            .collect();
        let mut seen: HashSet<u16> = HashSet::new();
        let mut outputs = Vec::new();
        for child in &mut children {
            let mut out = BufReader::new(child.stdout.take().expect("stdout"));
            let line = (&mut out)
                .lines()
                .map_while(Result::ok)
                .find_map(|l| Some(l.split_once("PORTS ")?.1.to_string()))
                .expect("the child printed its ports");
            // (libtest's "test <name> ... " precedes them on the line.)
            let ports: Vec<u16> = line.split(' ').map(|p| p.parse().expect("a port")).collect();
            assert_eq!(ports.len(), EACH);
            for port in ports {
                assert!(seen.insert(port), "port {port} handed out to two live processes");
            }
            outputs.push(out);
        }
        for (mut child, mut out) in children.into_iter().zip(outputs) {
            drop(child.stdin.take());
            let _ = out.read_to_string(&mut String::new());
            assert!(child.wait().expect("wait").success());
        }
    }

    #[test]
    fn ports_of_exited_processes_are_handed_out_again() {
        let dir = tempfile::tempdir().expect("temp dir");
        let registry = dir.path().join("ports");
        let mut exited = Command::new("true").spawn().expect("spawn true");
        let dead = exited.id();
        exited.wait().expect("wait");
        let me = std::process::id();
        // Two ports free on the host, found by the kernel.
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = a.local_addr().unwrap().port();
        drop(a);
        write_file(&registry, &format!("{port} {dead}\n{} {me}\n", port + 1)).unwrap();
        let got = free_ports_in(&registry, port..port + 2, 1).unwrap();
        assert_eq!(got, vec![port], "the exited owner's port is free, the live one's is not");
        let text = fs::read_to_string(&registry).unwrap();
        assert_eq!(text, format!("{} {me}\n{port} {me}\n", port + 1));
        assert!(free_ports_in(&registry, port..port + 2, 1).is_err(), "both held by a live process");
    }
}
