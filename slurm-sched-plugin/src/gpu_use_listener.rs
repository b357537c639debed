//! Receives the compute nodes' reports of running jobs' GPU use (`model::gpu_use`, sent by
//! `acct_gather_energy/nvml` in each job's extern step) on `[learning] gpu_use_port` (UDP).
//!
//! Each datagram is a munge credential. A report is kept only when munge accepts it (the
//! cluster's key, not expired, not replayed) and it was signed by root or SlurmUser, the
//! identities slurmstepd runs as; anything else is counted and logged (the first time, then
//! every 100th), never learnt from. The thread waits at most [`POLL`] for a datagram, so
//! dropping the listener (plugin `fini`, reconfigure) stops and joins it promptly.
//!
//! A port that cannot be bound never fails the plugin's `init`: 24.11's slurmctld reconfigures
//! by starting a new process while the old one still holds the port, and another local process
//! may hold it at start or at failover. The thread then tries again every [`RETRY`], says so in
//! the log (the first time, then every 60th try), and listens once the port is free.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use model::gpu_use::{UseLog, UseReport};
use slurm_bindings::munge::Munge;
use slurm_bindings::slurm_log;

use crate::LOG;

/// How long the thread blocks in one receive.
const POLL: Duration = Duration::from_millis(500);

/// How often a port that could not be bound is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// Who may report: the uids a report's credential must carry.
#[derive(Debug, Clone, Copy)]
pub struct Trusted {
    pub slurm_user_id: u32,
}

impl Trusted {
    fn allows(&self, uid: u32) -> bool {
        uid == 0 || uid == self.slurm_user_id
    }
}

/// The listening thread and what it received.
pub struct UseListener {
    port: u16,
    log: Arc<Mutex<UseLog>>,
    stop: Arc<AtomicBool>,
    listening: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl UseListener {
    /// Starts the thread, which binds the port (all addresses), at once or, while another
    /// process holds it, as soon as it is free.
    pub fn start(
        port: u16,
        munge_socket: Option<String>,
        trusted: Trusted,
    ) -> Result<UseListener, String> {
        let munge = Munge::new(munge_socket.as_deref())
            .map_err(|e| format!("learning.gpu_use_port {port}: {e}"))?;
        let log = Arc::new(Mutex::new(UseLog::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let listening = Arc::new(AtomicBool::new(false));
        let (thread_log, thread_stop, thread_listening) = (Arc::clone(&log), Arc::clone(&stop), Arc::clone(&listening));
        let thread = std::thread::Builder::new()
            .name("sched/energy use".into())
            .spawn(move || {
                let Some(socket) = bind_when_free(port, &thread_stop) else { return };
                thread_listening.store(true, Ordering::SeqCst);
                receive(socket, munge, trusted, &thread_log, &thread_stop);
            })
            .map_err(|e| format!("cannot start the GPU use listener: {e}"))?;
        Ok(UseListener {
            port,
            log,
            stop,
            listening,
            thread: Some(thread),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the port is bound (reports can arrive).
    pub fn listening(&self) -> bool {
        self.listening.load(Ordering::SeqCst)
    }

    /// What was received (the thread adds to it between cycles).
    pub fn reports(&self) -> MutexGuard<'_, UseLog> {
        self.log
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for UseListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            LOG.error("the GPU use listener ended with a panic");
        }
    }
}

/// Binds `port`, trying again every [`RETRY`] while it is taken, until `stop`. `None` when
/// stopped first.
fn bind_when_free(port: u16, stop: &AtomicBool) -> Option<UdpSocket> {
    let mut tries = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let bound = UdpSocket::bind(("0.0.0.0", port)).and_then(|s| s.set_read_timeout(Some(POLL)).map(|()| s));
        match bound {
            Ok(socket) => {
                slurm_log!(LOG, info, "learning: receiving the nodes' GPU use reports on UDP port {port}{}", if tries > 0 { format!(" (bound after {tries} retries)") } else { String::new() });
                return Some(socket);
            }
            Err(e) => {
                if tries % 60 == 0 {
                    LOG.error(&format!("learning: gpu_use_port {port}: cannot listen: {e}; trying again every {} s (no GPU use reports until then; scheduling goes on)", RETRY.as_secs()));
                }
                tries += 1;
                // Sleep in short steps, so that fini (or a reconfigure) is not held up.
                let until = std::time::Instant::now() + RETRY;
                while std::time::Instant::now() < until && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
    None
}

fn receive(
    socket: UdpSocket,
    mut munge: Munge,
    trusted: Trusted,
    log: &Mutex<UseLog>,
    stop: &AtomicBool,
) {
    let mut buf = vec![0u8; 4096];
    let (mut received, mut refused) = (0u64, 0u64);
    while !stop.load(Ordering::SeqCst) {
        let (n, from) = match socket.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(e) => {
                LOG.error(&format!("learning: GPU use listener: {e}; stopped"));
                return;
            }
        };
        let outcome = std::str::from_utf8(&buf[..n])
            .map_err(|_| "not text".to_string())
            .and_then(|cred| munge.decode(cred).map_err(|e| e.to_string()))
            .and_then(|v| {
                if !trusted.allows(v.uid) {
                    return Err(format!("signed by uid {}, not root or SlurmUser", v.uid));
                }
                let text =
                    String::from_utf8(v.payload).map_err(|_| "payload not text".to_string())?;
                UseReport::parse(&text).map_err(|e| e.to_string())
            });
        match outcome {
            Ok(report) => {
                received += 1;
                if received == 1 {
                    slurm_log!(
                        LOG,
                        verbose,
                        "learning: first GPU use report, from {} ({from})",
                        report.node
                    );
                }
                slurm_log!(
                    LOG,
                    debug,
                    "learning: JobId={} on {}: GPU use {:.1} % over {:.1} s",
                    report.job_id,
                    report.node,
                    report.util_pct,
                    report.to_unix_s - report.from_unix_s
                );
                log.lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .add(report);
            }
            Err(why) => {
                refused += 1;
                if refused == 1 || refused % 100 == 0 {
                    LOG.error(&format!("learning: GPU use report from {from} refused: {why} ({refused} refused so far)"));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 21: 24.11's reconfigure starts the new slurmctld while the old one still holds the
    // port, and a failed bind made init fail ("Failed to initialize the various schedulers").
    #[test]
    fn a_port_held_by_another_process_does_not_fail_start_and_is_bound_once_free() {
        let squatter = UdpSocket::bind(("0.0.0.0", 0)).expect("bind a free port");
        let port = squatter.local_addr().expect("address").port();
        let listener = UseListener::start(port, None, Trusted { slurm_user_id: 0 }).expect("start must not fail on a taken port");
        std::thread::sleep(Duration::from_millis(300));
        assert!(!listener.listening(), "listening on a port another socket holds");
        drop(squatter);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !listener.listening() {
            assert!(std::time::Instant::now() < deadline, "port {port} not bound 10 s after it was freed");
            std::thread::sleep(Duration::from_millis(50));
        }
        // Dropping joins the thread promptly.
        let t = std::time::Instant::now();
        drop(listener);
        assert!(t.elapsed() < Duration::from_secs(2), "stopping took {:?}", t.elapsed());
    }

    #[test]
    fn stopping_while_waiting_for_the_port_joins_at_once() {
        let squatter = UdpSocket::bind(("0.0.0.0", 0)).expect("bind a free port");
        let port = squatter.local_addr().expect("address").port();
        let listener = UseListener::start(port, None, Trusted { slurm_user_id: 0 }).expect("start");
        std::thread::sleep(Duration::from_millis(200));
        let t = std::time::Instant::now();
        drop(listener);
        assert!(t.elapsed() < Duration::from_secs(1), "stopping took {:?}", t.elapsed());
        drop(squatter);
    }
}
