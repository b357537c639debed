//! Receives the compute nodes' reports of running jobs' GPU use (`model::gpu_use`, sent by
//! `acct_gather_energy/nvml` in each job's extern step) on `[learning] gpu_use_port` (UDP).
//!
//! Each datagram is a munge credential. A report is kept only when munge accepts it (the
//! cluster's key, not expired, not replayed) and it was signed by root or SlurmUser, the
//! identities slurmstepd runs as; anything else is counted and logged (the first time, then
//! every 100th), never learnt from. The thread waits at most [`POLL`] for a datagram, so
//! dropping the listener (plugin `fini`, reconfigure) stops and joins it promptly.

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
    thread: Option<JoinHandle<()>>,
}

impl UseListener {
    /// Binds the port (all addresses) and starts the thread.
    pub fn start(
        port: u16,
        munge_socket: Option<String>,
        trusted: Trusted,
    ) -> Result<UseListener, String> {
        let socket = UdpSocket::bind(("0.0.0.0", port))
            .map_err(|e| format!("learning.gpu_use_port {port}: cannot listen: {e}"))?;
        socket
            .set_read_timeout(Some(POLL))
            .map_err(|e| format!("learning.gpu_use_port {port}: {e}"))?;
        let munge = Munge::new(munge_socket.as_deref())
            .map_err(|e| format!("learning.gpu_use_port {port}: {e}"))?;
        let log = Arc::new(Mutex::new(UseLog::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (thread_log, thread_stop) = (Arc::clone(&log), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("sched/energy use".into())
            .spawn(move || receive(socket, munge, trusted, &thread_log, &thread_stop))
            .map_err(|e| format!("cannot start the GPU use listener: {e}"))?;
        slurm_log!(
            LOG,
            info,
            "learning: receiving the nodes' GPU use reports on UDP port {port}"
        );
        Ok(UseListener {
            port,
            log,
            stop,
            thread: Some(thread),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
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
