//! A stand-in for systemd's notify socket: the Unix datagram socket that a `Type=notify` unit's
//! daemon finds in `NOTIFY_SOCKET` and sends `sd_notify(3)` state changes to, one datagram of
//! newline-separated `KEY=value` assignments each (`READY=1`, `MAINPID=<pid>`, `STATUS=...`).
//! Slurm's `--systemd` daemons send `READY=1\nMAINPID=<pid>` when they are up and again when a
//! reconfigure hands the daemon over to a new process.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

use crate::error::ClusterError;

/// What the harness acts on; other assignments are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StateChange {
    Ready,
    MainPid(u32),
}

pub(crate) struct NotifySocket {
    socket: UnixDatagram,
    path: PathBuf,
}

impl NotifySocket {
    /// Binds a datagram socket at `path` (replacing a stale one), readable by the daemon only.
    pub(crate) fn bind(path: &Path) -> Result<NotifySocket, ClusterError> {
        let _ = std::fs::remove_file(path);
        let socket = UnixDatagram::bind(path).map_err(|e| ClusterError::io(format!("bind notify socket {}", path.display()), e))?;
        socket.set_nonblocking(true).map_err(|e| ClusterError::io("notify socket non-blocking", e))?;
        Ok(NotifySocket { socket, path: path.to_path_buf() })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Every state change received since the last call, in order.
    pub(crate) fn drain(&self) -> Vec<StateChange> {
        let mut changes = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = self.socket.recv(&mut buf) {
            changes.extend(parse(&buf[..n]));
        }
        changes
    }
}

impl Drop for NotifySocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The state changes of one datagram.
pub(crate) fn parse(datagram: &[u8]) -> Vec<StateChange> {
    String::from_utf8_lossy(datagram)
        .lines()
        .filter_map(|line| match line.trim().split_once('=')? {
            ("READY", "1") => Some(StateChange::Ready),
            ("MAINPID", pid) => pid.trim().parse().ok().filter(|p| *p > 0).map(StateChange::MainPid),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurms_ready_message_and_junk() {
        assert_eq!(parse(b"READY=1\nMAINPID=4242"), vec![StateChange::Ready, StateChange::MainPid(4242)]);
        assert_eq!(parse(b"STATUS=reconfiguring\nMAINPID=x\nMAINPID=0\nREADY=0"), vec![]);
    }

    #[test]
    fn datagrams_sent_to_the_path_are_read_in_order() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("notify.sock");
        let socket = NotifySocket::bind(&path).expect("bind");
        let sender = UnixDatagram::unbound().expect("sender");
        sender.send_to(b"READY=1\nMAINPID=10", &path).expect("send");
        sender.send_to(b"MAINPID=11", &path).expect("send");
        assert_eq!(socket.drain(), vec![StateChange::Ready, StateChange::MainPid(10), StateChange::MainPid(11)]);
        assert_eq!(socket.drain(), vec![]);
    }
}
