//! What happens to one datagram: dropped unless it comes from a node's address and that
//! address is within its rate, then checked by munge (signed by a trusted uid), parsed, and
//! kept only when the node it names is the node it came from.
//!
//! Cheap checks come first: a datagram from an unknown address, or over its address's rate,
//! never reaches munged (which also checks every Slurm RPC of the controller).

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use model::gpu_use::UseReport;
use slurm_bindings::munge::{Munge, MungeError, Verified};

use super::sources::Sources;

/// Datagrams one address may send at once (a node starting many jobs' extern steps).
const BURST: f64 = 200.0;
/// Datagrams one address may send per second, sustained: one report per job and poll
/// (`JobAcctGatherFrequency`, 30 s by default), so 100 jobs at a 1 s poll.
const PER_S: f64 = 100.0;

/// Who may report: the uids a report's credential must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trusted {
    /// slurm.conf's `SlurmdUser` (root by default): slurmd and the slurmstepds it starts run
    /// as that uid or as root. `SlurmUser` is not trusted: it is also the uid of slurmctld's
    /// scripts (`PrologSlurmctld`, `MailProg`, ...) and of slurmdbd, on any host of the munge
    /// realm.
    pub slurmd_user_id: u32,
}

impl Trusted {
    pub fn allows(&self, uid: u32) -> bool {
        uid == 0 || uid == self.slurmd_user_id
    }
}

/// Checks credentials (munge; a fake in tests).
pub trait Decoder {
    fn decode(&mut self, cred: &str) -> Result<Verified, MungeError>;
}

impl Decoder for Munge {
    fn decode(&mut self, cred: &str) -> Result<Verified, MungeError> {
        Munge::decode(self, cred)
    }
}

/// Why a datagram was not kept.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// Not from an address of a node of slurmctld's node table (munge not asked).
    UnknownSource,
    /// Its address sent more than its rate (munge not asked).
    OverRate,
    /// Munge, the signer, the payload or the sender's node said no.
    Invalid(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::UnknownSource => write!(f, "not from an address of a node of slurmctld's node table"),
            Refusal::OverRate => write!(f, "over {PER_S} datagrams/s from that address"),
            Refusal::Invalid(why) => write!(f, "{why}"),
        }
    }
}

/// A token bucket per source address.
#[derive(Debug, Default)]
pub struct RateLimit {
    buckets: HashMap<IpAddr, (f64, Instant)>,
}

impl RateLimit {
    /// Takes one datagram's token from `ip`'s bucket; false when it is empty.
    pub fn take(&mut self, ip: IpAddr, now: Instant) -> bool {
        let (tokens, at) = self.buckets.entry(ip).or_insert((BURST, now));
        *tokens = (*tokens + now.saturating_duration_since(*at).as_secs_f64() * PER_S).min(BURST);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Forgets addresses that are no longer nodes' (bounds the table by the node table).
    pub fn keep_only(&mut self, sources: &Sources) {
        self.buckets.retain(|ip, _| sources.knows(*ip));
    }
}

/// The checks, in order.
pub struct Gate<D: Decoder> {
    pub sources: Sources,
    pub rate: RateLimit,
    pub trusted: Trusted,
    pub decoder: D,
}

impl<D: Decoder> Gate<D> {
    pub fn judge(&mut self, datagram: &[u8], from: SocketAddr, now: Instant) -> Result<UseReport, Refusal> {
        let ip = from.ip().to_canonical();
        if !self.sources.knows(ip) {
            return Err(Refusal::UnknownSource);
        }
        if !self.rate.take(ip, now) {
            return Err(Refusal::OverRate);
        }
        let invalid = Refusal::Invalid;
        let cred = std::str::from_utf8(datagram).map_err(|_| invalid("not text".into()))?;
        let v = self.decoder.decode(cred).map_err(|e| invalid(e.to_string()))?;
        if !self.trusted.allows(v.uid) {
            return Err(invalid(format!("signed by uid {}, not root or SlurmdUser", v.uid)));
        }
        let text = String::from_utf8(v.payload).map_err(|_| invalid("payload not text".into()))?;
        let report = UseReport::parse(&text).map_err(|e| invalid(e.to_string()))?;
        // The report is bound to its sender: the node it names must be the node it came from,
        // and the host whose munged signed it (when munged knows its own address).
        if !self.sources.is_node_at(&report.node, ip) {
            return Err(invalid(format!("names node {}, sent from {ip}, not one of its addresses", report.node)));
        }
        if let Some(origin) = v.origin_ipv4
            && !self.sources.is_node_at(&report.node, IpAddr::V4(origin))
        {
            return Err(invalid(format!("names node {}, signed on {origin} (munged's origin), not one of its addresses", report.node)));
        }
        Ok(report)
    }
}

/// The refusal log, limited by time: the first refusal at once, then at most one line per
/// `every`, with how many were refused since the previous line.
#[derive(Debug)]
pub struct RefusalLog {
    every: Duration,
    last_line: Option<Instant>,
    pending: u64,
    total: u64,
    last: String,
}

impl RefusalLog {
    pub fn new(every: Duration) -> RefusalLog {
        RefusalLog { every, last_line: None, pending: 0, total: 0, last: String::new() }
    }

    /// Notes a refusal (`what`: from where and why); the line to log now, if one is due.
    pub fn note(&mut self, what: String, now: Instant) -> Option<String> {
        self.total += 1;
        self.pending += 1;
        self.last = what;
        self.due(now)
    }

    /// The line for refusals not logged yet, once `every` has passed since the last line.
    pub fn due(&mut self, now: Instant) -> Option<String> {
        if self.pending == 0 || self.last_line.is_some_and(|t| now.saturating_duration_since(t) < self.every) {
            return None;
        }
        let line = match (self.pending, self.last_line) {
            (1, _) | (_, None) => format!("learning: {} ({} refused so far)", self.last, self.total),
            (n, Some(t)) => format!(
                "learning: {} ({n} refused in the last {} s, this one last; {} refused so far)",
                self.last,
                now.saturating_duration_since(t).as_secs(),
                self.total
            ),
        };
        self.pending = 0;
        self.last_line = Some(now);
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu_use_listener::sources::NodeAddresses;

    /// Counts its calls and says what it was set to.
    struct FakeMunge {
        calls: u32,
        answer: Result<Verified, MungeError>,
    }

    impl Decoder for FakeMunge {
        fn decode(&mut self, _cred: &str) -> Result<Verified, MungeError> {
            self.calls += 1;
            self.answer.clone()
        }
    }

    fn report(node: &str) -> Vec<u8> {
        UseReport { job_id: 5, node: node.into(), from_unix_s: 1.0, to_unix_s: 2.0, gpus: 1, util_pct: 40.0, power_w: None }.to_wire().into_bytes()
    }

    fn gate(uid: u32, payload: Vec<u8>, origin: Option<&str>) -> Gate<FakeMunge> {
        let nodes = [
            NodeAddresses { name: "n1".into(), hosts: vec!["10.1.0.1".into()] },
            NodeAddresses { name: "n2".into(), hosts: vec!["10.1.0.2".into(), "fd00::2".into()] },
        ];
        Gate {
            sources: Sources::resolve(&nodes),
            rate: RateLimit::default(),
            trusted: Trusted { slurmd_user_id: 0 },
            decoder: FakeMunge { calls: 0, answer: Ok(Verified { payload, uid, gid: 0, origin_ipv4: origin.map(|o| o.parse().expect("ip")) }) },
        }
    }

    fn from(t: &str) -> SocketAddr {
        t.parse().expect("socket address")
    }

    // Issue 21 (review #6): every datagram, from anywhere, cost a decode by munged.
    #[test]
    fn a_datagram_from_an_unknown_address_is_refused_without_asking_munge() {
        let mut g = gate(0, report("n1"), None);
        let now = Instant::now();
        assert_eq!(g.judge(b"MUNGE:x", from("192.0.2.9:4000"), now), Err(Refusal::UnknownSource));
        assert_eq!(g.judge(b"MUNGE:x", from("[2001:db8::9]:4000"), now), Err(Refusal::UnknownSource));
        assert_eq!(g.decoder.calls, 0, "munge was asked about a stranger's datagram");
        assert!(g.judge(b"MUNGE:x", from("10.1.0.1:4000"), now).is_ok());
        assert!(g.judge(b"MUNGE:x", from("[::ffff:10.1.0.1]:4000"), now).is_ok(), "a v4 node on the dual-stack socket");
        assert_eq!(g.decoder.calls, 2);
    }

    #[test]
    fn a_node_over_its_rate_is_refused_without_asking_munge_and_recovers() {
        let mut g = gate(0, report("n1"), None);
        let t0 = Instant::now();
        let n1 = from("10.1.0.1:4000");
        for _ in 0..BURST as u32 {
            assert!(g.judge(b"c", n1, t0).is_ok());
        }
        assert_eq!(g.judge(b"c", n1, t0), Err(Refusal::OverRate));
        assert_eq!(g.decoder.calls, BURST as u32);
        // Another node is not held back by n1's flood.
        let mut other = gate(0, report("n2"), None);
        other.rate = std::mem::take(&mut g.rate);
        assert!(other.judge(b"c", from("10.1.0.2:4000"), t0).is_ok());
        g.rate = std::mem::take(&mut other.rate);
        assert!(g.judge(b"c", n1, t0 + Duration::from_millis(50)).is_ok(), "tokens come back at {PER_S}/s");
    }

    // Issue 21 (review #11): SlurmUser (slurmctld's scripts, slurmdbd) was trusted; only
    // slurmstepd's uids are.
    #[test]
    fn only_root_and_slurmd_user_are_trusted() {
        let t = Trusted { slurmd_user_id: 0 };
        assert!(t.allows(0));
        assert!(!t.allows(64030) && !t.allows(65534) && !t.allows(1000));
        let t = Trusted { slurmd_user_id: 991 };
        assert!(t.allows(0) && t.allows(991));
        assert!(!t.allows(992) && !t.allows(65534));
        let mut g = gate(65534, report("n1"), None);
        let e = g.judge(b"c", from("10.1.0.1:1"), Instant::now()).expect_err("nobody signed it");
        assert!(e.to_string().contains("signed by uid 65534"), "{e}");
    }

    // Issue 21 (review #11): node= was trusted from any root anywhere.
    #[test]
    fn a_report_must_come_from_the_node_it_names() {
        let now = Instant::now();
        let mut g = gate(0, report("n2"), None);
        let e = g.judge(b"c", from("10.1.0.1:1"), now).expect_err("n1 speaking for n2");
        assert!(e.to_string().contains("names node n2, sent from 10.1.0.1"), "{e}");
        assert!(g.judge(b"c", from("10.1.0.2:1"), now).is_ok());
        assert!(g.judge(b"c", from("[fd00::2]:1"), now).is_ok());
        let mut g = gate(0, report("n2"), Some("10.1.0.1"));
        let e = g.judge(b"c", from("10.1.0.2:1"), now).expect_err("signed on n1");
        assert!(e.to_string().contains("signed on 10.1.0.1"), "{e}");
        let mut g = gate(0, report("n2"), Some("10.1.0.2"));
        assert!(g.judge(b"c", from("10.1.0.2:1"), now).is_ok());
    }

    #[test]
    fn munge_errors_and_bad_payloads_are_refusals() {
        let mut g = gate(0, b"not a report".to_vec(), None);
        assert!(matches!(g.judge(b"c", from("10.1.0.1:1"), Instant::now()), Err(Refusal::Invalid(_))));
        g.decoder.answer = Err(MungeError("decode: Invalid credential".into()));
        let e = g.judge(b"c", from("10.1.0.1:1"), Instant::now()).expect_err("munge said no");
        assert!(e.to_string().contains("munge: decode"), "{e}");
        assert!(matches!(g.judge(&[0xff, 0xfe], from("10.1.0.1:1"), Instant::now()), Err(Refusal::Invalid(_))));
    }

    // Issue 21 (review #6): the refusal log fired on every 100th datagram, so a flood of 50 k/s
    // wrote 500 lines/s.
    #[test]
    fn the_refusal_log_says_at_most_one_line_a_minute_with_a_count() {
        let mut log = RefusalLog::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let first = log.note("GPU use report from 192.0.2.9:1 refused: x".into(), t0).expect("the first is logged at once");
        assert!(first.contains("192.0.2.9") && first.contains("1 refused so far"), "{first}");
        let mut lines = 0;
        for i in 1..50_000u64 {
            let t = t0 + Duration::from_micros(i * 1000); // 50 s of 1000/s
            lines += log.note(format!("GPU use report from 192.0.2.9:{i} refused: x"), t).into_iter().count();
        }
        assert_eq!(lines, 0, "more than one line in a minute");
        assert_eq!(log.due(t0 + Duration::from_secs(59)), None);
        let summary = log.due(t0 + Duration::from_secs(61)).expect("the count, once the minute is over");
        assert!(summary.contains("49999 refused in the last 61 s") && summary.contains("50000 refused so far") && summary.contains(":49999 refused"), "{summary}");
        assert_eq!(log.due(t0 + Duration::from_secs(200)), None, "nothing new, nothing said");
        assert!(log.note("again".into(), t0 + Duration::from_secs(201)).is_some(), "a minute after the last line, the next refusal is logged at once");
    }
}
