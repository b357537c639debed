//! Reporting a running job's GPU use to sched/energy, which learns from it (docs/learning.md).
//!
//! The job's extern step (one per job and node, alive as long as the job, `PrologFlags=Contain`)
//! measures at each of its polls (`JobAcctGatherFrequency`) how much of its GPUs the job's own
//! processes used since the previous poll ([`job_util_pct`]), and sends it as one UDP datagram,
//! signed with munge, to every `SlurmctldHost` at `[learning] gpu_use_port` of `energy.toml`
//! (next to slurm.conf). A datagram lost is an interval not learnt, never a delayed job: sending
//! does not wait for anyone, a target that fails does not stop the others, and a failure is
//! logged once.
//!
//! The credential can be decoded only by SlurmUser (munge's uid restriction; slurm.conf's
//! `SlurmUser`, which slurmstepd knows as `slurm_conf.slurm_user_id` in 22.05 and 24.11 alike:
//! 24.11's slurmstepd gets the uid, not the name, from slurmd).
//!
//! Measurement: NVML's per-process SM samples taken in the interval (the job's processes found
//! by their `SLURM_JOB_ID`, as for the energy split, [`crate::share`]); without samples, the
//! GPU's utilisation split equally among the jobs that have compute processes on it. A GPU on
//! which the job has no process yet (it is still starting) is left out, so start-up does not
//! read as idle use. The report also carries the GPU power the job's GPUs drew over the
//! interval, from their energy counters, when no other job's process runs on them
//! ([`job_power_w`]): the power cap charges a job's excess over its prediction to that job.
//!
//! slurmctld answers each report with the job's power directive (docs/power-cap.md): a clock
//! ceiling, or none, and a sequence number. The answers arrive on the sockets the reports left
//! from and are read, without waiting, at the next poll ([`UseReporter::directives`]). One is
//! accepted only when munge verifies it was signed by SlurmUser (slurmctld's uid), it names
//! this job and this node, and its number is newer than the last accepted ([`DirectiveGate`]);
//! the caller applies it through the node's clock arbiter as a ceiling.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::Path;

use gpu_control::GpuControl;
use model::gpu_use::UseReport;
use model::power_directive::DirectiveReply;
use slurm_bindings::munge::Munge;

use crate::share;

/// The job's SM utilisation (%) on NVML device `gpu` since `since_unix_us`; `None` when it has
/// no process there.
pub fn job_util_pct(
    ctrl: &dyn GpuControl,
    gpu: u32,
    job: u32,
    since_unix_us: u64,
    job_of: &dyn Fn(u32) -> Option<u32>,
) -> Option<f64> {
    if let Ok(samples) = ctrl.process_sm_utilization_pct(gpu, since_unix_us)
        && !samples.is_empty()
    {
        let mine: Vec<u32> = samples
            .iter()
            .filter(|s| job_of(s.pid) == Some(job))
            .map(|s| s.sm_pct.min(100))
            .collect();
        return (!mine.is_empty()).then(|| f64::from(mine.iter().sum::<u32>().min(100)));
    }
    let pids: Vec<u32> = ctrl
        .compute_processes(gpu)
        .ok()?
        .iter()
        .map(|p| p.pid)
        .collect();
    let mut jobs: Vec<u32> = pids.iter().filter_map(|&p| job_of(p)).collect();
    jobs.sort_unstable();
    jobs.dedup();
    if !jobs.contains(&job) {
        return None;
    }
    let gpu_pct = ctrl.utilization_pct(gpu).ok()?.gpu_pct.min(100);
    Some(f64::from(gpu_pct) / jobs.len() as f64)
}

/// The job's use of `gpus` over one interval: mean utilisation over the GPUs it has processes
/// on, and how many those are. `None`: on none of them.
pub fn measure(
    ctrl: &dyn GpuControl,
    gpus: &[u32],
    job: u32,
    since_unix_us: u64,
    job_of: &dyn Fn(u32) -> Option<u32>,
) -> Option<(f64, u32)> {
    let used: Vec<f64> = gpus
        .iter()
        .filter_map(|&g| job_util_pct(ctrl, g, job, since_unix_us, job_of))
        .collect();
    (!used.is_empty()).then(|| {
        (
            used.iter().sum::<f64>() / used.len() as f64,
            used.len() as u32,
        )
    })
}

/// The GPU power (W) the job's `gpus` drew over the last `interval_s`, all together, from their
/// energy counters: `last_energy_mj` holds each GPU's counter at the previous poll and is
/// updated here for every GPU, whatever the answer. `None` (the report then carries no power,
/// and slurmctld judges the job by its node's reading) when one of the GPUs also runs a process
/// that is not the job's (a shared GPU's draw cannot be told apart: the power cap must never
/// charge one job with another's), or a counter could not be read, had no earlier reading or
/// went backwards (a driver reload).
pub fn job_power_w(
    ctrl: &dyn GpuControl,
    gpus: &[u32],
    job: u32,
    last_energy_mj: &mut [Option<u64>],
    interval_s: f64,
    job_of: &dyn Fn(u32) -> Option<u32>,
) -> Option<f64> {
    let mut total_mj: Option<u64> = Some(0);
    for (&g, last) in gpus.iter().zip(last_energy_mj.iter_mut()) {
        let now = ctrl.total_energy_mj(g).ok();
        let delta = match (now, *last) {
            (Some(now), Some(before)) => now.checked_sub(before),
            _ => None,
        };
        *last = now;
        let own_only = ctrl
            .compute_processes(g)
            .is_ok_and(|ps| ps.iter().all(|p| job_of(p.pid) == Some(job)));
        total_mj = match (total_mj, delta) {
            (Some(t), Some(d)) if own_only => t.checked_add(d),
            _ => None,
        };
    }
    let total_mj = total_mj.filter(|_| !gpus.is_empty() && interval_s > 0.0)?;
    Some(total_mj as f64 / 1000.0 / interval_s)
}

/// `[learning] gpu_use_port` of the `energy.toml` beside `slurm_conf`: `Ok(None)` when the
/// file or the setting is absent or 0 (reporting off).
pub fn port_from_config(slurm_conf: &Path) -> Result<Option<u16>, String> {
    let path = slurm_conf.with_file_name("energy.toml");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let value: toml::Table = text
        .parse()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    match value.get("learning").and_then(|l| l.get("gpu_use_port")) {
        None => Ok(None),
        Some(toml::Value::Integer(0)) => Ok(None),
        Some(toml::Value::Integer(p)) => u16::try_from(*p).map(Some).map_err(|_| {
            format!(
                "{}: learning.gpu_use_port = {p} is not a port",
                path.display()
            )
        }),
        Some(other) => Err(format!(
            "{}: learning.gpu_use_port = {other} is not a port number",
            path.display()
        )),
    }
}

/// One job's reporter on one node.
pub struct UseReporter {
    job_id: u32,
    node: String,
    gpus: Vec<u32>,
    targets: Targets,
    munge: Munge,
    last_unix_us: u64,
    /// Each GPU's energy counter at the last poll (mJ; `None`: not read).
    last_energy_mj: Vec<Option<u64>>,
    /// Decodes slurmctld's answers (no uid restriction: it only verifies).
    verifier: Munge,
    gate: DirectiveGate,
}

/// Which answers from slurmctld a job's extern step accepts (module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct DirectiveGate {
    pub job_id: u32,
    pub node: String,
    /// slurm.conf's SlurmUser: the uid slurmctld signs as.
    pub slurm_user_id: u32,
    /// The number of the last directive accepted (0: none yet).
    pub last_seq: u64,
}

impl DirectiveGate {
    /// Judges one answer, given the uid munge verified it was signed by and its payload; an
    /// accepted one becomes the last.
    pub fn accept(&mut self, signer_uid: u32, payload: &[u8]) -> Result<DirectiveReply, String> {
        if signer_uid != self.slurm_user_id {
            return Err(format!("signed by uid {signer_uid}, not SlurmUser ({})", self.slurm_user_id));
        }
        let text = std::str::from_utf8(payload).map_err(|_| "not text".to_string())?;
        let d = DirectiveReply::parse(text)?;
        if d.job_id != self.job_id {
            return Err(format!("for job {}, not job {}", d.job_id, self.job_id));
        }
        if d.node != self.node {
            return Err(format!("for node {}, not {}", d.node, self.node));
        }
        if d.seq <= self.last_seq {
            return Err(format!("directive {} is not newer than directive {} (replayed or out of order)", d.seq, self.last_seq));
        }
        self.last_seq = d.seq;
        Ok(d)
    }
}

/// Where a report goes: one address per `SlurmctldHost`, each sent to from a socket of its
/// own family (a v6 backup next to a v4 primary gets its reports too).
pub struct Targets {
    addrs: Vec<SocketAddr>,
    v4: Option<UdpSocket>,
    v6: Option<UdpSocket>,
}

impl Targets {
    /// The first address of each host (one report per controller: a second address of the same
    /// host would only be refused there as a replay). Hosts that do not resolve are left out;
    /// none resolving is an error.
    pub fn resolve(hosts: &[String], port: u16) -> Result<Targets, String> {
        let addrs: Vec<SocketAddr> = hosts
            .iter()
            .filter_map(|h| (h.as_str(), port).to_socket_addrs().ok()?.next())
            .collect();
        Targets::new(addrs).map_err(|e| format!("SlurmctldHost {hosts:?}: {e}"))
    }

    pub fn new(addrs: Vec<SocketAddr>) -> Result<Targets, String> {
        if addrs.is_empty() {
            return Err("no address".into());
        }
        let socket = |bind: &str| -> Result<UdpSocket, String> {
            let s = UdpSocket::bind(bind).map_err(|e| format!("UDP socket ({bind}): {e}"))?;
            s.set_nonblocking(true).map_err(|e| format!("UDP socket: {e}"))?;
            Ok(s)
        };
        let v4 = addrs.iter().any(SocketAddr::is_ipv4).then(|| socket("0.0.0.0:0")).transpose()?;
        let v6 = addrs.iter().any(SocketAddr::is_ipv6).then(|| socket("[::]:0")).transpose()?;
        Ok(Targets { addrs, v4, v6 })
    }

    /// Every datagram waiting on the sockets (never waits); a socket that fails otherwise than
    /// by having nothing waiting gives its error (it was dropped silently before).
    pub fn receive_waiting(&self) -> Vec<Result<Vec<u8>, String>> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 4096];
        for s in [self.v4.as_ref(), self.v6.as_ref()].into_iter().flatten() {
            // Bounded: a flood cannot keep a poll here.
            for _ in 0..64 {
                match s.recv_from(&mut buf) {
                    Ok((n, _)) => out.push(Ok(buf[..n].to_vec())),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        out.push(Err(format!("receive on {}: {e}", s.local_addr().map_or_else(|_| "?".into(), |a| a.to_string()))));
                        break;
                    }
                }
            }
        }
        out
    }

    /// Sends `datagram` to every target, whatever happens to the others; the failures, if any,
    /// as one error naming each.
    pub fn send(&self, datagram: &[u8]) -> Result<(), String> {
        let failed: Vec<String> = self
            .addrs
            .iter()
            .filter_map(|t| {
                let socket = if t.is_ipv6() { self.v6.as_ref() } else { self.v4.as_ref() };
                let sent = match socket {
                    Some(s) => s.send_to(datagram, t).map(|_| ()),
                    None => Err(std::io::Error::other("no socket of its family")),
                };
                sent.err().map(|e| format!("send to {t}: {e}"))
            })
            .collect();
        if failed.is_empty() { Ok(()) } else { Err(failed.join("; ")) }
    }
}

impl UseReporter {
    /// `slurmctld_hosts`: the `SlurmctldHost` addresses; `munge_socket`: AuthInfo's;
    /// `slurm_user_id`: slurm.conf's SlurmUser (the uid slurmctld runs as), the only uid that
    /// can decode the reports.
    pub fn start(
        job_id: u32,
        node: String,
        gpus: Vec<u32>,
        slurmctld_hosts: &[String],
        port: u16,
        munge_socket: Option<&str>,
        slurm_user_id: u32,
    ) -> Result<UseReporter, String> {
        let targets = Targets::resolve(slurmctld_hosts, port)?;
        let munge = signer(munge_socket, slurm_user_id)?;
        let verifier = Munge::new(munge_socket).map_err(|e| e.to_string())?;
        let gate = DirectiveGate { job_id, node: node.clone(), slurm_user_id, last_seq: 0 };
        let last_energy_mj = vec![None; gpus.len()];
        Ok(UseReporter {
            job_id,
            node,
            gpus,
            targets,
            munge,
            last_unix_us: unix_now_us(),
            last_energy_mj,
            verifier,
            gate,
        })
    }

    /// The job (NVML indices of its GPUs on this node, the job id, the node name).
    pub fn job(&self) -> (&[u32], u32, &str) {
        (&self.gpus, self.job_id, &self.node)
    }

    /// slurmctld's answers received since the last look: each accepted directive, or why one
    /// was refused (module docs). Never waits.
    pub fn directives(&mut self) -> Vec<Result<DirectiveReply, String>> {
        self.targets
            .receive_waiting()
            .into_iter()
            .map(|received| {
                let datagram = received?;
                let cred = std::str::from_utf8(&datagram).map_err(|_| "not text".to_string())?;
                let v = self.verifier.decode(cred).map_err(|e| format!("munge: {e}"))?;
                self.gate.accept(v.uid, &v.payload)
            })
            .collect()
    }

    /// Measures the interval since the last poll and sends it. `Ok(None)`: the job had no
    /// process on its GPUs (nothing sent).
    pub fn poll(&mut self, ctrl: &dyn GpuControl) -> Result<Option<UseReport>, String> {
        let now = unix_now_us();
        let since = self.last_unix_us;
        if now <= since {
            return Ok(None);
        }
        self.last_unix_us = now;
        // Read before anything may return, so every counter's last reading is at `since`.
        let interval_s = (now - since) as f64 / 1e6;
        let power_w = job_power_w(ctrl, &self.gpus, self.job_id, &mut self.last_energy_mj, interval_s, &share::job_of_pid);
        let Some((util_pct, gpus)) =
            measure(ctrl, &self.gpus, self.job_id, since, &share::job_of_pid)
        else {
            return Ok(None);
        };
        let report = UseReport {
            job_id: self.job_id,
            node: self.node.clone(),
            from_unix_s: since as f64 / 1e6,
            to_unix_s: now as f64 / 1e6,
            gpus,
            util_pct,
            power_w,
        };
        send(&mut self.munge, &self.targets, &report)?;
        Ok(Some(report))
    }
}

/// A munge context whose credentials only `decoder_uid` (SlurmUser) can decode: a report
/// received by anyone else (a local user who took the port first, a sniffer) tells them
/// nothing and cannot be replayed to another munge consumer.
pub fn signer(munge_socket: Option<&str>, decoder_uid: u32) -> Result<Munge, String> {
    let mut munge = Munge::new(munge_socket).map_err(|e| e.to_string())?;
    munge.restrict_decoder_uid(decoder_uid).map_err(|e| e.to_string())?;
    Ok(munge)
}

/// Signs `report` and sends it to every target.
pub fn send(munge: &mut Munge, targets: &Targets, report: &UseReport) -> Result<(), String> {
    let cred = munge.encode(report.to_wire().as_bytes()).map_err(|e| e.to_string())?;
    targets.send(cred.as_bytes())
}

fn unix_now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_control::FakeGpus;
    use gpu_control::{GpuProcess, ProcessSmUtilPct};

    #[test]
    fn config_port_is_read_next_to_slurm_conf() {
        let dir = tempfile::tempdir().expect("temp dir");
        let conf = dir.path().join("slurm.conf");
        assert_eq!(port_from_config(&conf), Ok(None), "no energy.toml: off");
        std::fs::write(
            dir.path().join("energy.toml"),
            "[sched]\ninterval_s = 1\n[learning]\ngpu_use_port = 6831\n",
        )
        .unwrap();
        assert_eq!(port_from_config(&conf), Ok(Some(6831)));
        std::fs::write(
            dir.path().join("energy.toml"),
            "[learning]\ngpu_use_port = 0\n",
        )
        .unwrap();
        assert_eq!(port_from_config(&conf), Ok(None));
        std::fs::write(
            dir.path().join("energy.toml"),
            "[learning]\ngpu_use_port = 70000\n",
        )
        .unwrap();
        assert!(
            port_from_config(&conf)
                .expect_err("too big")
                .contains("70000")
        );
        std::fs::write(dir.path().join("energy.toml"), "[learning\n").unwrap();
        assert!(
            port_from_config(&conf)
                .expect_err("bad toml")
                .contains("energy.toml")
        );
    }

    fn listener(addr: &str) -> UdpSocket {
        let s = UdpSocket::bind(addr).expect("bind a test listener");
        s.set_read_timeout(Some(std::time::Duration::from_secs(5))).expect("timeout");
        s
    }

    fn received(s: &UdpSocket) -> Option<Vec<u8>> {
        let mut buf = [0u8; 4096];
        s.recv_from(&mut buf).ok().map(|(n, _)| buf[..n].to_vec())
    }

    // Issue 21 (review #11): the send loop stopped at the first failing target.
    #[test]
    fn a_failing_target_does_not_stop_the_others() {
        let good = listener("127.0.0.1:0");
        let good_addr = good.local_addr().expect("address");
        // Broadcast without SO_BROADCAST: the kernel refuses the send (EACCES).
        let refused: SocketAddr = "255.255.255.255:9".parse().expect("address");
        let targets = Targets::new(vec![refused, good_addr]).expect("targets");
        let e = targets.send(b"report").expect_err("the broadcast target fails");
        assert!(e.contains("255.255.255.255:9") && !e.contains(&good_addr.to_string()), "{e}");
        assert_eq!(received(&good).as_deref(), Some(&b"report"[..]), "the second target got nothing");
    }

    // Issue 21 (review #11): one socket, of the first target's family, served every target.
    #[test]
    fn a_v6_target_and_a_v4_target_both_get_the_report() {
        let Ok(v6) = UdpSocket::bind("[::1]:0") else {
            eprintln!("skipped: no IPv6 loopback here");
            return;
        };
        v6.set_read_timeout(Some(std::time::Duration::from_secs(5))).expect("timeout");
        let v4 = listener("127.0.0.1:0");
        for order in [[v4.local_addr().unwrap(), v6.local_addr().unwrap()], [v6.local_addr().unwrap(), v4.local_addr().unwrap()]] {
            let targets = Targets::new(order.to_vec()).expect("targets");
            targets.send(b"r").unwrap_or_else(|e| panic!("{order:?}: {e}"));
            assert_eq!(received(&v4).as_deref(), Some(&b"r"[..]), "{order:?}: v4 target");
            assert_eq!(received(&v6).as_deref(), Some(&b"r"[..]), "{order:?}: v6 target");
        }
    }

    /// munge's client `prog` run as `nobody` on `socket`, `input` on stdin: (success, output).
    fn as_nobody(prog: &str, socket: &Path, input: &str) -> (bool, String) {
        use std::io::Write;
        let mut child = std::process::Command::new("runuser")
            .args(["-u", "nobody", "--", prog, &format!("--socket={}", socket.display())])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("runuser");
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write");
        let out = child.wait_with_output().expect("wait");
        (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }

    // Issue 21 (review #5): the reports carried no uid restriction, so anyone who received one
    // (a local user holding the port first) could decode it.
    #[test]
    fn only_slurm_user_can_decode_a_report() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root (runs munge's client as nobody)");
            return;
        }
        let munged = match slurm_testcluster::munged::PrivateMunged::start() {
            Ok(Some(m)) => m,
            Ok(None) => return eprintln!("skipped: munged not installed"),
            Err(e) => panic!("private munged: {e}"),
        };
        let socket = munged.socket();
        let path = socket.display().to_string();
        let to = listener("127.0.0.1:0");
        let targets = Targets::new(vec![to.local_addr().expect("address")]).expect("targets");
        let report = UseReport { job_id: 7, node: "n1".into(), from_unix_s: 1.0, to_unix_s: 2.0, gpus: 1, util_pct: 50.0, power_w: None };
        // SlurmUser is root here: only root may decode.
        let mut munge = signer(Some(&path), 0).expect("signer");
        send(&mut munge, &targets, &report).expect("send");
        let cred = String::from_utf8(received(&to).expect("the report")).expect("text");
        let (ok, out) = as_nobody("unmunge", &socket, &cred);
        assert!(!ok && out.contains("Unauthorized"), "nobody decoded a report meant for SlurmUser: {out}");
        let decoded = Munge::new(Some(&path)).expect("munge").decode(&cred).expect("SlurmUser decodes");
        assert_eq!(String::from_utf8(decoded.payload).expect("text"), report.to_wire());
    }

    fn gate() -> DirectiveGate {
        DirectiveGate { job_id: 12, node: "n1".into(), slurm_user_id: 64030, last_seq: 0 }
    }

    fn directive(job_id: u32, node: &str, seq: u64) -> Vec<u8> {
        let ceiling = Some(model::power_directive::Ceiling { clock_mhz: 1087, power_limit_w: 0.0 });
        DirectiveReply { job_id, node: node.into(), seq, ceiling }.to_wire().into_bytes()
    }

    // Issue 24: a directive slows a running job: only slurmctld's, for this job and node, newer
    // than the last, is accepted.
    #[test]
    fn a_directive_is_accepted_only_from_slurm_user_for_this_job_and_node_and_newer() {
        let mut g = gate();
        let e = g.accept(0, &directive(12, "n1", 5)).expect_err("root is not SlurmUser");
        assert!(e.contains("uid 0"), "{e}");
        let e = g.accept(1000, &directive(12, "n1", 5)).expect_err("a user");
        assert!(e.contains("uid 1000"), "{e}");
        let e = g.accept(64030, &directive(13, "n1", 5)).expect_err("another job");
        assert!(e.contains("job 13"), "{e}");
        let e = g.accept(64030, &directive(12, "n2", 5)).expect_err("another node");
        assert!(e.contains("node n2"), "{e}");
        assert!(g.accept(64030, b"slurm-energy-use/1 job=12").is_err(), "not a directive");
        assert_eq!(g.last_seq, 0, "nothing refused counts");
        let d = g.accept(64030, &directive(12, "n1", 5)).expect("slurmctld's");
        assert_eq!((d.seq, d.ceiling.map(|c| c.clock_mhz)), (5, Some(1087)));
        let e = g.accept(64030, &directive(12, "n1", 5)).expect_err("replayed");
        assert!(e.contains("not newer"), "{e}");
        assert!(g.accept(64030, &directive(12, "n1", 4)).is_err(), "older");
        assert!(g.accept(64030, &directive(12, "n1", 6)).is_ok(), "newer");
    }

    // Issue 24: the answers are read from the socket the reports left from, without waiting.
    #[test]
    fn answers_to_the_reports_are_read_from_the_sending_socket() {
        let controller = listener("127.0.0.1:0");
        let targets = Targets::new(vec![controller.local_addr().expect("address")]).expect("targets");
        assert!(targets.receive_waiting().is_empty(), "nothing yet, and no wait");
        targets.send(b"report").expect("send");
        let mut buf = [0u8; 64];
        let (_, node) = controller.recv_from(&mut buf).expect("the report");
        controller.send_to(b"answer", node).expect("answer");
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(targets.receive_waiting(), vec![Ok(b"answer".to_vec())]);
    }

    #[test]
    fn a_job_counts_its_own_processes_only() {
        let fake = FakeGpus::v100s(2);
        let samples = |list: &[(u32, u32)]| {
            Some(
                list.iter()
                    .map(|&(pid, sm_pct)| ProcessSmUtilPct { pid, sm_pct })
                    .collect(),
            )
        };
        fake.with_gpu(0, |g| {
            g.process_sm_pct = samples(&[(100, 40), (101, 20), (200, 30)])
        })
        .unwrap();
        fake.with_gpu(1, |g| g.process_sm_pct = samples(&[(200, 90)]))
            .unwrap();
        let job_of = |pid: u32| Some(pid / 100);
        assert_eq!(job_util_pct(&fake, 0, 1, 0, &job_of), Some(60.0));
        assert_eq!(
            job_util_pct(&fake, 1, 1, 0, &job_of),
            None,
            "job 1 has no process on GPU 1"
        );
        assert_eq!(measure(&fake, &[0, 1], 2, 0, &job_of), Some((60.0, 2)));
        assert_eq!(measure(&fake, &[0, 1], 1, 0, &job_of), Some((60.0, 1)));
        assert_eq!(measure(&fake, &[0, 1], 3, 0, &job_of), None);
    }

    // Issue 24: the job's own GPU power goes with its report, so that the power cap charges a
    // job's excess to it alone; never when a GPU also runs another job's processes.
    #[test]
    fn a_jobs_power_is_its_gpus_energy_over_the_interval_and_only_on_gpus_of_its_own() {
        let fake = FakeGpus::v100s(3);
        let process = |pid: u32| GpuProcess { pid, used_memory_bytes: Some(1 << 30) };
        let job_of = |pid: u32| Some(pid / 100);
        let set = |gpu: u32, energy_mj: u64, pids: &[u32]| {
            fake.with_gpu(gpu, |g| {
                g.energy_mj = energy_mj;
                g.processes = pids.iter().map(|&p| process(p)).collect();
            })
            .unwrap();
        };
        set(0, 1_000_000, &[100]);
        set(1, 2_000_000, &[101]);
        set(2, 5_000_000, &[200]);
        let mut last = vec![None; 2];
        assert_eq!(job_power_w(&fake, &[0, 1], 1, &mut last, 10.0, &job_of), None, "no earlier reading");
        assert_eq!(last, vec![Some(1_000_000), Some(2_000_000)]);
        // 10 s later: 1,500 J and 2,500 J more: 400 W together.
        set(0, 2_500_000, &[100]);
        set(1, 4_500_000, &[101]);
        assert_eq!(job_power_w(&fake, &[0, 1], 1, &mut last, 10.0, &job_of), Some(400.0));
        // Job 2 starts a process on GPU 1: that GPU's draw is no longer job 1's alone.
        set(0, 3_500_000, &[100]);
        set(1, 6_500_000, &[101, 201]);
        assert_eq!(job_power_w(&fake, &[0, 1], 1, &mut last, 10.0, &job_of), None);
        assert_eq!(last, vec![Some(3_500_000), Some(6_500_000)], "counters kept up to date anyway");
        // Job 2 gone again: measured again from the readings kept.
        set(0, 4_500_000, &[100]);
        set(1, 7_500_000, &[101]);
        assert_eq!(job_power_w(&fake, &[0, 1], 1, &mut last, 10.0, &job_of), Some(200.0));
        // A counter that went backwards (driver reloaded) gives no figure, then counts again.
        set(0, 1_000, &[100]);
        assert_eq!(job_power_w(&fake, &[0, 1], 1, &mut last, 10.0, &job_of), None);
        set(0, 1_001_000, &[100]);
        set(1, 8_500_000, &[101]);
        assert_eq!(job_power_w(&fake, &[0, 1], 1, &mut last, 10.0, &job_of), Some(200.0));
    }

    #[test]
    fn without_samples_the_gpu_is_split_among_jobs_with_processes() {
        let fake = FakeGpus::v100s(1);
        let process = |pid: u32| GpuProcess {
            pid,
            used_memory_bytes: Some(1 << 30),
        };
        fake.with_gpu(0, |g| {
            g.process_sm_pct = None;
            g.utilization.gpu_pct = 80;
            g.processes = vec![process(100), process(101), process(200)];
        })
        .unwrap();
        let job_of = |pid: u32| Some(pid / 100);
        assert_eq!(job_util_pct(&fake, 0, 1, 0, &job_of), Some(40.0));
        assert_eq!(job_util_pct(&fake, 0, 2, 0, &job_of), Some(40.0));
        assert_eq!(job_util_pct(&fake, 0, 3, 0, &job_of), None);
    }
}
