//! Receives the compute nodes' reports of running jobs' GPU use (`model::gpu_use`, sent by
//! `acct_gather_energy/nvml` in each job's extern step) on `[learning] gpu_use_port` (UDP, IPv4
//! and IPv6).
//!
//! Each datagram is a munge credential. It is dropped, without asking munged, unless it comes
//! from an address of a node of slurmctld's node table ([`sources`]) within that address's rate;
//! it is kept only when munge accepts it (the cluster's key, not expired, not replayed), it was
//! signed by root or SlurmdUser (the uids slurmstepd runs as), and the node it names is the node
//! it came from ([`gate`]). Refusals are counted and logged at most once a minute, with the
//! count. The threads wait at most [`POLL`] for a datagram, so dropping the listener (plugin
//! `fini`, reconfigure) stops and joins them promptly.
//!
//! Each kept report is answered, on the socket it came in on, with its job's power directive
//! ([`crate::power_directives`], docs/power-cap.md): one datagram signed by munge as
//! slurmctld's user and decodable only by SlurmdUser (the extern step that sent the report).
//! A reply that cannot be signed or sent is logged once a minute and answered again at the
//! job's next report.
//!
//! A port that cannot be bound never fails the plugin's `init`: 24.11's slurmctld reconfigures
//! by starting a new process while the old one still holds the port, and another local process
//! may hold it at start or at failover. The thread then tries again every [`RETRY`], says so in
//! the log (the first time, then every 60th try), and listens once the port is free.

pub mod gate;
pub mod sources;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use model::gpu_use::UseLog;
use slurm_bindings::munge::Munge;
use slurm_bindings::slurm_log;

pub use gate::Trusted;
use gate::{Gate, RateLimit, RefusalLog};
pub use sources::NodeAddresses;
use sources::Sources;

use crate::LOG;

/// How long a thread blocks in one receive.
const POLL: Duration = Duration::from_millis(500);

/// How often a port that could not be bound is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// At most one refusal line per this time.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);

/// Datagrams received and not yet judged; beyond this, more are dropped unread.
const QUEUE: usize = 1024;

/// The node table's addresses as last posted by the scheduler thread, and a count of changes.
#[derive(Default)]
struct Posted {
    generation: u64,
    nodes: Vec<NodeAddresses>,
}

/// The listening thread and what it received.
pub struct UseListener {
    port: u16,
    log: Arc<Mutex<UseLog>>,
    nodes: Arc<Mutex<Posted>>,
    stop: Arc<AtomicBool>,
    listening: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl UseListener {
    /// Starts the thread, which binds the port (all addresses, IPv6 and IPv4), at once or,
    /// while another process holds it, as soon as it is free. Datagrams wait (up to a queue's
    /// worth) until the node addresses are first posted ([`UseListener::set_nodes`]).
    pub fn start(
        port: u16,
        munge_socket: Option<String>,
        trusted: Trusted,
    ) -> Result<UseListener, String> {
        let munge = Munge::new(munge_socket.as_deref())
            .map_err(|e| format!("learning.gpu_use_port {port}: {e}"))?;
        // Replies are signed for SlurmdUser only (the uid the reporting extern step runs as).
        let signer = Munge::new(munge_socket.as_deref())
            .and_then(|mut m| m.restrict_decoder_uid(trusted.slurmd_user_id).map(|()| m))
            .map_err(|e| format!("learning.gpu_use_port {port}: power directives: {e}"))?;
        let log = Arc::new(Mutex::new(UseLog::default()));
        let nodes = Arc::new(Mutex::new(Posted::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let listening = Arc::new(AtomicBool::new(false));
        let (thread_log, thread_nodes, thread_stop, thread_listening) =
            (Arc::clone(&log), Arc::clone(&nodes), Arc::clone(&stop), Arc::clone(&listening));
        let thread = std::thread::Builder::new()
            .name("sched/energy use".into())
            .spawn(move || {
                let Some(sockets) = bind_when_free(port, &thread_stop) else { return };
                thread_listening.store(true, Ordering::SeqCst);
                let replier = Replier::new(&sockets, signer);
                let gate = Gate { sources: Sources::default(), rate: RateLimit::default(), trusted, decoder: munge };
                serve(sockets, gate, replier, &thread_nodes, &thread_log, &thread_stop);
            })
            .map_err(|e| format!("cannot start the GPU use listener: {e}"))?;
        Ok(UseListener {
            port,
            log,
            nodes,
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

    /// The nodes reports may come from, as the node table has them now (the caller read it
    /// under the node read lock). Cheap when nothing changed; the listener thread resolves a
    /// changed list itself.
    pub fn set_nodes(&self, nodes: Vec<NodeAddresses>) {
        let mut posted = self.nodes.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if posted.generation == 0 || posted.nodes != nodes {
            posted.nodes = nodes;
            posted.generation += 1;
        }
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

/// Binds `port` on every address, trying again every [`RETRY`] while it is taken, until
/// `stop`. `None` when stopped first.
fn bind_when_free(port: u16, stop: &AtomicBool) -> Option<Vec<UdpSocket>> {
    let mut tries = 0u64;
    while !stop.load(Ordering::SeqCst) {
        match bind_all(port) {
            Ok(sockets) => {
                let families = if sockets.len() == 2 { "IPv6 and IPv4" } else if sockets[0].local_addr().is_ok_and(|a| a.is_ipv6()) { "IPv6 and IPv4 (dual stack)" } else { "IPv4" };
                slurm_log!(LOG, info, "learning: receiving the nodes' GPU use reports on UDP port {port} ({families}){}", if tries > 0 { format!(" (bound after {tries} retries)") } else { String::new() });
                return Some(sockets);
            }
            Err(e) => {
                if tries % 60 == 0 {
                    LOG.error(&format!("learning: gpu_use_port {port}: cannot listen: {e}; another process holds the port? trying again every {} s (no GPU use reports until then; scheduling goes on)", RETRY.as_secs()));
                }
                tries += 1;
                // Sleep in short steps, so that fini (or a reconfigure) is not held up.
                let until = Instant::now() + RETRY;
                while Instant::now() < until && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
    None
}

/// `[::]:port`, which on Linux also receives IPv4 unless `net.ipv6.bindv6only` is set, and
/// `0.0.0.0:port` when it does not (then refused as in use, which the v6 socket covers). Without
/// IPv6 on the host, IPv4 only. A port held by another process is an error.
fn bind_all(port: u16) -> std::io::Result<Vec<UdpSocket>> {
    let timed = |s: UdpSocket| s.set_read_timeout(Some(POLL)).map(|()| s);
    let v6 = match UdpSocket::bind(("::", port)).and_then(timed) {
        Ok(s) => Some(s),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => return Err(e),
        // No IPv6 here (disabled, or no such address family).
        Err(_) => None,
    };
    let v4 = UdpSocket::bind(("0.0.0.0", port)).and_then(timed);
    match (v6, v4) {
        (Some(v6), Ok(v4)) => Ok(vec![v6, v4]),
        (Some(v6), Err(e)) if e.kind() == std::io::ErrorKind::AddrInUse => Ok(vec![v6]),
        (None, Ok(v4)) => Ok(vec![v4]),
        (_, Err(e)) => Err(e),
    }
}

/// Receives on `socket` until `stop`, handing each datagram to the judging thread; drops
/// what does not fit in its queue.
fn receive(socket: UdpSocket, index: usize, queue: SyncSender<(Vec<u8>, SocketAddr, usize)>, stop: &AtomicBool) {
    let mut buf = vec![0u8; 4096];
    while !stop.load(Ordering::SeqCst) {
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => match queue.try_send((buf[..n].to_vec(), from, index)) {
                Ok(()) | Err(TrySendError::Full(_)) => {}
                Err(TrySendError::Disconnected(_)) => return,
            },
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                LOG.error(&format!("learning: GPU use listener: {e}; stopped"));
                return;
            }
        }
    }
}

/// Starts a receiving thread per socket and judges what they receive, until `stop`.
fn serve(sockets: Vec<UdpSocket>, mut gate: Gate<Munge>, mut replier: Replier, nodes: &Mutex<Posted>, log: &Mutex<UseLog>, stop: &Arc<AtomicBool>) {
    let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
    let mut receivers = Vec::new();
    for (index, socket) in sockets.into_iter().enumerate() {
        let (tx, stop) = (tx.clone(), Arc::clone(stop));
        match std::thread::Builder::new().name("sched/energy rx".into()).spawn(move || receive(socket, index, tx, &stop)) {
            Ok(t) => receivers.push(t),
            Err(e) => LOG.error(&format!("learning: GPU use listener: cannot start a receiving thread: {e}")),
        }
    }
    drop(tx);
    judge_all(&rx, &mut gate, &mut replier, nodes, log, stop);
    for t in receivers {
        if t.join().is_err() {
            LOG.error("a GPU use receiving thread ended with a panic");
        }
    }
}

fn judge_all(rx: &Receiver<(Vec<u8>, SocketAddr, usize)>, gate: &mut Gate<Munge>, replier: &mut Replier, nodes: &Mutex<Posted>, log: &Mutex<UseLog>, stop: &AtomicBool) {
    let mut refusals = RefusalLog::new(REFUSAL_LOG_EVERY);
    let (mut seen_generation, mut received) = (0u64, 0u64);
    while !stop.load(Ordering::SeqCst) {
        refresh_sources(gate, nodes, &mut seen_generation);
        if seen_generation == 0 {
            // No node list yet (slurmctld is starting): keep what arrives queued rather than
            // refuse the nodes' reports as coming from strangers.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        let (datagram, peer, socket) = match rx.recv_timeout(POLL) {
            Ok(x) => x,
            Err(RecvTimeoutError::Timeout) => {
                if let Some(line) = refusals.due(Instant::now()) {
                    LOG.error(&line);
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        // A v4 peer on the dual-stack socket shows as ::ffff:a.b.c.d.
        let from = SocketAddr::new(peer.ip().to_canonical(), peer.port());
        match gate.judge(&datagram, from, Instant::now()) {
            Ok(report) => {
                received += 1;
                if received == 1 {
                    slurm_log!(LOG, verbose, "learning: first GPU use report, from {} ({from})", report.node);
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
                if let Some(reply) = crate::power_directives::reply_for(report.job_id, &report.node)
                    && let Err(e) = replier.send(&reply, socket, peer)
                    && let Some(line) = refusals.note(format!("power directive for JobId={} to {peer} not sent: {e}", report.job_id), Instant::now())
                {
                    LOG.error(&line);
                }
                log.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).add(report);
            }
            Err(why) => {
                if let Some(line) = refusals.note(format!("GPU use report from {from} refused: {why}"), Instant::now()) {
                    LOG.error(&line);
                }
            }
        }
    }
}

/// Answers reports: signs a directive and sends it from the socket the report came in on.
struct Replier {
    sockets: Vec<Option<UdpSocket>>,
    signer: Munge,
}

impl Replier {
    fn new(sockets: &[UdpSocket], signer: Munge) -> Replier {
        let sockets = sockets
            .iter()
            .map(|s| match s.try_clone() {
                Ok(c) => Some(c),
                Err(e) => {
                    LOG.error(&format!("learning: GPU use listener: no reply socket ({e}); power directives are not sent"));
                    None
                }
            })
            .collect();
        Replier { sockets, signer }
    }

    fn send(&mut self, reply: &model::power_directive::DirectiveReply, socket: usize, to: SocketAddr) -> Result<(), String> {
        let s = self.sockets.get(socket).and_then(Option::as_ref).ok_or("no reply socket")?;
        let cred = self.signer.encode(reply.to_wire().as_bytes()).map_err(|e| e.to_string())?;
        s.send_to(cred.as_bytes(), to).map(|_| ()).map_err(|e| e.to_string())
    }
}

/// Takes a node list posted since the last look, and resolves it (outside every lock).
fn refresh_sources(gate: &mut Gate<Munge>, nodes: &Mutex<Posted>, seen_generation: &mut u64) {
    let posted = {
        let p = nodes.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        (p.generation != *seen_generation).then(|| (p.generation, p.nodes.clone()))
    };
    let Some((generation, list)) = posted else { return };
    *seen_generation = generation;
    gate.sources = Sources::resolve(&list);
    gate.rate.keep_only(&gate.sources);
    slurm_log!(LOG, verbose, "learning: GPU use reports accepted from {} node(s) at {} address(es)", list.len(), gate.sources.len());
}

#[cfg(test)]
mod tests {
    use super::*;
    use gate::{Gate, RateLimit};

    // Issue 21: 24.11's reconfigure starts the new slurmctld while the old one still holds the
    // port, and a failed bind made init fail ("Failed to initialize the various schedulers").
    #[test]
    fn a_port_held_by_another_process_does_not_fail_start_and_is_bound_once_free() {
        let squatter = UdpSocket::bind(("0.0.0.0", 0)).expect("bind a free port");
        let port = squatter.local_addr().expect("address").port();
        let listener = UseListener::start(port, None, Trusted { slurmd_user_id: 0 }).expect("start must not fail on a taken port");
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

    /// A private munged, or `None` (and why) when this machine cannot run one.
    fn munged() -> Option<slurm_testcluster::munged::PrivateMunged> {
        match slurm_testcluster::munged::PrivateMunged::start() {
            Ok(Some(m)) => Some(m),
            Ok(None) => {
                eprintln!("skipped: munged not installed");
                None
            }
            Err(e) => panic!("private munged: {e}"),
        }
    }

    fn running_as_root() -> bool {
        std::fs::read_to_string("/proc/self/status").is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0")))
    }

    /// munge's client run as `user`: a credential for `payload`.
    fn signed_as(user: &str, socket: &std::path::Path, payload: &str) -> String {
        let out = std::process::Command::new("runuser")
            .args(["-u", user, "--", "munge", &format!("--socket={}", socket.display()), "-s", payload])
            .output()
            .expect("runuser munge");
        assert!(out.status.success(), "munge as {user}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("credential text")
    }

    fn report(node: &str, job_id: u32) -> String {
        model::gpu_use::UseReport { job_id, node: node.into(), from_unix_s: 10.0, to_unix_s: 20.0, gpus: 1, util_pct: 60.0, power_w: None }.to_wire()
    }

    fn uid_of(user: &str) -> u32 {
        let out = std::process::Command::new("id").args(["-u", user]).output().expect("id");
        String::from_utf8_lossy(&out.stdout).trim().parse().expect("a uid")
    }

    // Issue 21 (review #11): no test sent a valid credential signed by an unprivileged uid; and
    // SlurmUser's credentials were trusted (here `daemon` stands for SlurmUser, root for
    // SlurmdUser).
    #[test]
    fn valid_credentials_of_unprivileged_uids_and_of_slurm_user_are_refused() {
        if !running_as_root() {
            return eprintln!("skipped: needs root (signs as nobody and daemon through runuser)");
        }
        let Some(m) = munged() else { return };
        let socket = m.socket();
        let nodes = [NodeAddresses { name: "n1".into(), hosts: vec!["127.0.0.1".into()] }];
        let decoder = Munge::new(Some(&socket.display().to_string())).expect("munge");
        let mut gate = Gate { sources: Sources::resolve(&nodes), rate: RateLimit::default(), trusted: Trusted { slurmd_user_id: 0 }, decoder };
        let from: SocketAddr = "127.0.0.1:40000".parse().expect("address");
        for user in ["nobody", "daemon"] {
            let cred = signed_as(user, &socket, &report("n1", 3));
            let e = gate.judge(cred.as_bytes(), from, Instant::now()).expect_err("an unprivileged signer");
            assert!(e.to_string().contains(&format!("signed by uid {}", uid_of(user))), "{user}: {e}");
        }
        // The same report signed by root (slurmstepd) is kept: only the signer differed.
        let cred = signed_as("root", &socket, &report("n1", 3));
        let kept = gate.judge(cred.as_bytes(), from, Instant::now()).expect("root's report");
        assert_eq!((kept.job_id, kept.node.as_str()), (3, "n1"));
        // And a replay of it is refused by munged.
        assert!(gate.judge(cred.as_bytes(), from, Instant::now()).expect_err("replayed").to_string().contains("munge: decode"));
    }

    // Issue 21 (review #11): the listener bound IPv4 only; (review #6) it decoded datagrams
    // from anywhere.
    #[test]
    fn reports_arrive_over_ipv4_and_ipv6_from_node_addresses_only() {
        if !running_as_root() {
            return eprintln!("skipped: needs root (munged)");
        }
        if UdpSocket::bind("[::1]:0").is_err() {
            return eprintln!("skipped: no IPv6 loopback");
        }
        let Some(m) = munged() else { return };
        let socket = m.socket().display().to_string();
        let port = UdpSocket::bind(("0.0.0.0", 0)).and_then(|s| s.local_addr()).expect("a free port").port();
        let listener = UseListener::start(port, Some(socket.clone()), Trusted { slurmd_user_id: 0 }).expect("start");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !listener.listening() {
            assert!(Instant::now() < deadline, "not listening");
            std::thread::sleep(Duration::from_millis(20));
        }
        listener.set_nodes(vec![
            NodeAddresses { name: "v4".into(), hosts: vec!["127.0.0.1".into()] },
            // munged's origin here is 127.0.0.1, whichever family the datagram takes.
            NodeAddresses { name: "v6".into(), hosts: vec!["::1".into(), "127.0.0.1".into()] },
            NodeAddresses { name: "far".into(), hosts: vec!["192.0.2.7".into()] },
        ]);
        let mut signer = Munge::new(Some(&socket)).expect("munge");
        let send = |from: &str, to: SocketAddr, wire: String, signer: &mut Munge| {
            let cred = signer.encode(wire.as_bytes()).expect("encode");
            UdpSocket::bind(from).expect("sender").send_to(cred.as_bytes(), to).expect("send");
        };
        // Let the listener take the node list before the first datagram.
        std::thread::sleep(POLL + Duration::from_millis(200));
        send("127.0.0.1:0", format!("127.0.0.1:{port}").parse().unwrap(), report("v4", 41), &mut signer);
        send("[::1]:0", format!("[::1]:{port}").parse().unwrap(), report("v6", 61), &mut signer);
        // From a node address, but naming another node: refused.
        send("127.0.0.1:0", format!("127.0.0.1:{port}").parse().unwrap(), report("far", 62), &mut signer);
        let deadline = Instant::now() + Duration::from_secs(10);
        while listener.reports().jobs() < 2 {
            assert!(Instant::now() < deadline, "reports received: {}", listener.reports().jobs());
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(300));
        let log = listener.reports();
        assert!(log.mean_since(41, 0.0).is_some() && log.mean_since(61, 0.0).is_some(), "v4 and v6 reports kept");
        assert!(log.mean_since(62, 0.0).is_none(), "a report naming another node than its sender was kept");
    }

    // Issue 24: each kept report is answered with its job's power directive, signed by
    // slurmctld's munge (here root) and naming the job and node of the report.
    #[test]
    fn a_kept_report_is_answered_with_its_jobs_directive() {
        if !running_as_root() {
            return eprintln!("skipped: needs root (munged)");
        }
        let Some(m) = munged() else { return };
        let socket = m.socket().display().to_string();
        let port = UdpSocket::bind(("0.0.0.0", 0)).and_then(|s| s.local_addr()).expect("a free port").port();
        let listener = UseListener::start(port, Some(socket.clone()), Trusted { slurmd_user_id: 0 }).expect("start");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !listener.listening() {
            assert!(Instant::now() < deadline, "not listening");
            std::thread::sleep(Duration::from_millis(20));
        }
        listener.set_nodes(vec![NodeAddresses { name: "n1".into(), hosts: vec!["127.0.0.1".into()] }]);
        let ceiling = model::power_directive::Ceiling { clock_mhz: 1087, power_limit_w: 170.0 };
        crate::power_directives::set_for_test(&std::collections::BTreeMap::from([(model::types::JobId(424_242), Some(ceiling))]));
        std::thread::sleep(POLL + Duration::from_millis(200));
        let node = UdpSocket::bind("127.0.0.1:0").expect("node socket");
        node.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let mut munge = Munge::new(Some(&socket)).expect("munge");
        let cred = munge.encode(report("n1", 424_242).as_bytes()).expect("encode");
        node.send_to(cred.as_bytes(), format!("127.0.0.1:{port}")).expect("send");
        let mut buf = [0u8; 4096];
        let (n, _) = node.recv_from(&mut buf).expect("a reply within 5 s");
        let v = munge.decode(std::str::from_utf8(&buf[..n]).expect("text")).expect("munge accepts the reply");
        assert_eq!(v.uid, 0, "signed as slurmctld's user");
        let reply = model::power_directive::DirectiveReply::parse(std::str::from_utf8(&v.payload).expect("text")).expect("a directive");
        assert_eq!((reply.job_id, reply.node.as_str(), reply.ceiling), (424_242, "n1", Some(ceiling)));
        assert!(reply.seq > 0);
        // A job the table does not know gets no reply.
        let cred = munge.encode(report("n1", 424_243).as_bytes()).expect("encode");
        node.send_to(cred.as_bytes(), format!("127.0.0.1:{port}")).expect("send");
        node.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
        assert!(node.recv_from(&mut buf).is_err(), "a reply for a job no cycle saw");
    }

    #[test]
    fn stopping_while_waiting_for_the_port_joins_at_once() {
        let squatter = UdpSocket::bind(("0.0.0.0", 0)).expect("bind a free port");
        let port = squatter.local_addr().expect("address").port();
        let listener = UseListener::start(port, None, Trusted { slurmd_user_id: 0 }).expect("start");
        std::thread::sleep(Duration::from_millis(200));
        let t = std::time::Instant::now();
        drop(listener);
        assert!(t.elapsed() < Duration::from_secs(1), "stopping took {:?}", t.elapsed());
        drop(squatter);
    }
}
