//! How much of its GPUs a running job uses, as the compute nodes measure it and report it to
//! sched/energy (`acct_gather_energy/nvml` in each job's extern step, see docs/learning.md).
//!
//! A report covers one interval on one node: the mean over the interval and over the job's
//! GPUs on that node of the SM utilisation of the job's own processes (a GPU it shares counts
//! only its processes). The wire form is one line of `key=value` fields after a version tag,
//! carried inside a munge credential (the node signs it, slurmctld checks who signed):
//!
//! ```text
//! slurm-energy-use/1 job=1234 node=gpu07 from=1764064800.000 to=1764064830.000 gpus=2 util_pct=71.5 power_w=412.0
//! ```
//!
//! `power_w` (optional; a slurmctld that does not know it ignores it) is the GPU power the
//! job's GPUs on the node drew over the interval: the increase of their energy counters over
//! the interval's seconds, all of them together. The node leaves it out when one of those GPUs
//! also runs another job's processes (a shared GPU's draw cannot be told apart) or a counter
//! could not be read. It is what lets the power cap charge a job's excess over its prediction
//! to that job alone (docs/power-cap.md), not to every job of its node.
//!
//! [`UseLog`] is slurmctld's side: the intervals each running job reported, from which the
//! learning pass takes the mean utilisation over a window (the first minutes of a job, or of a
//! shared run since its partner joined).

use std::collections::HashMap;
use std::fmt;

/// The first field of every report.
pub const WIRE_VERSION: &str = "slurm-energy-use/1";
/// Intervals kept per job (the oldest go first): at the default 30 s polls, four hours.
pub const MAX_INTERVALS_PER_JOB: usize = 480;

/// One node's measurement of one job over one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct UseReport {
    pub job_id: u32,
    pub node: String,
    pub from_unix_s: f64,
    pub to_unix_s: f64,
    /// The job's GPUs on the node.
    pub gpus: u32,
    /// Mean SM utilisation of the job's processes over the interval and its GPUs (%).
    pub util_pct: f64,
    /// GPU power of the job's GPUs on the node over the interval, all together (W); `None`
    /// where the node cannot tell it apart (module docs).
    pub power_w: Option<f64>,
}

/// The most a report may claim per GPU (W): above any GPU's power limit, so a plausible
/// reading always passes and a corrupt one does not reach the power cap.
pub const MAX_POWER_W_PER_GPU: f64 = 2_000.0;

/// Why a report was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadReport(pub String);

impl fmt::Display for BadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad GPU use report: {}", self.0)
    }
}

impl std::error::Error for BadReport {}

impl UseReport {
    pub fn to_wire(&self) -> String {
        let power = self.power_w.map_or(String::new(), |w| format!(" power_w={w:.1}"));
        format!(
            "{WIRE_VERSION} job={} node={} from={:.3} to={:.3} gpus={} util_pct={:.2}{power}",
            self.job_id, self.node, self.from_unix_s, self.to_unix_s, self.gpus, self.util_pct
        )
    }

    /// Parses [`UseReport::to_wire`]'s form; anything else (another version, a missing or
    /// malformed field, an interval that ends before it starts, a utilisation outside 0..=100
    /// per GPU) is refused with the reason.
    pub fn parse(text: &str) -> Result<UseReport, BadReport> {
        let mut words = text.split_whitespace();
        match words.next() {
            Some(WIRE_VERSION) => {}
            Some(other) => {
                return Err(BadReport(format!(
                    "version {other:?}, expected {WIRE_VERSION}"
                )));
            }
            None => return Err(BadReport("empty".into())),
        }
        let fields: HashMap<&str, &str> = words.filter_map(|w| w.split_once('=')).collect();
        let get = |k: &str| {
            fields
                .get(k)
                .copied()
                .ok_or_else(|| BadReport(format!("no {k}=")))
        };
        fn num<T: std::str::FromStr>(k: &str, v: &str) -> Result<T, BadReport> {
            v.parse()
                .map_err(|_| BadReport(format!("{k}={v:?} is not a number")))
        }
        let node = get("node")?;
        if node.is_empty() {
            return Err(BadReport("empty node=".into()));
        }
        let r = UseReport {
            job_id: num("job", get("job")?)?,
            node: node.to_string(),
            from_unix_s: num("from", get("from")?)?,
            to_unix_s: num("to", get("to")?)?,
            gpus: num("gpus", get("gpus")?)?,
            util_pct: num("util_pct", get("util_pct")?)?,
            power_w: fields.get("power_w").map(|v| num("power_w", v)).transpose()?,
        };
        if !(r.from_unix_s.is_finite() && r.to_unix_s.is_finite() && r.to_unix_s > r.from_unix_s) {
            return Err(BadReport(format!(
                "interval {}..{} is empty or backwards",
                r.from_unix_s, r.to_unix_s
            )));
        }
        if r.gpus == 0 || !(0.0..=100.0).contains(&r.util_pct) {
            return Err(BadReport(format!(
                "gpus={} util_pct={} (a mean per GPU, 0..100, over at least one GPU)",
                r.gpus, r.util_pct
            )));
        }
        if let Some(w) = r.power_w
            && !(w.is_finite() && (0.0..=MAX_POWER_W_PER_GPU * f64::from(r.gpus)).contains(&w))
        {
            return Err(BadReport(format!(
                "power_w={w} (0..{} W per GPU, for its {} GPUs together)",
                MAX_POWER_W_PER_GPU, r.gpus
            )));
        }
        Ok(r)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Interval {
    from_unix_s: f64,
    to_unix_s: f64,
    gpus: u32,
    util_pct: f64,
    power_w: Option<f64>,
}

/// A job's measured use over a window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasuredUse {
    /// Mean utilisation per GPU (%), weighted by GPUs and seconds.
    pub util_pct: f64,
    /// Seconds of the window the reports cover (the longest of the job's nodes).
    pub covered_s: f64,
}

/// A job's own GPU power on one node, as its newest report with one measured it.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredPower {
    pub job_id: u32,
    pub node: String,
    pub from_unix_s: f64,
    pub to_unix_s: f64,
    pub power_w: f64,
}

/// The reports of running jobs, by job.
#[derive(Debug, Default)]
pub struct UseLog {
    jobs: HashMap<u32, Vec<(String, Interval)>>,
}

impl UseLog {
    pub fn add(&mut self, r: UseReport) {
        let list = self.jobs.entry(r.job_id).or_default();
        if list.len() >= MAX_INTERVALS_PER_JOB {
            list.remove(0);
        }
        list.push((
            r.node,
            Interval {
                from_unix_s: r.from_unix_s,
                to_unix_s: r.to_unix_s,
                gpus: r.gpus,
                util_pct: r.util_pct,
                power_w: r.power_w,
            },
        ));
    }

    /// Each running job's GPU power on each of its nodes in its newest report that measured it
    /// and ended at `since_unix_s` or later (older ones are not read: the lists are in arrival
    /// order, so a cycle's look stays short however long the jobs run).
    pub fn latest_powers(&self, since_unix_s: f64) -> Vec<MeasuredPower> {
        let mut out: Vec<MeasuredPower> = Vec::new();
        for (&job_id, list) in &self.jobs {
            let first = out.len();
            for (node, iv) in list.iter().rev().take_while(|(_, iv)| iv.to_unix_s >= since_unix_s) {
                let Some(power_w) = iv.power_w else { continue };
                if !out[first..].iter().any(|m| m.node == *node) {
                    out.push(MeasuredPower { job_id, node: node.clone(), from_unix_s: iv.from_unix_s, to_unix_s: iv.to_unix_s, power_w });
                }
            }
        }
        out
    }

    /// The job's mean utilisation over what was reported of the time since `since_unix_s`
    /// (intervals that started before it count for their part after it). `None` without a
    /// report in the window.
    pub fn mean_since(&self, job_id: u32, since_unix_s: f64) -> Option<MeasuredUse> {
        self.mean_between(job_id, since_unix_s, f64::INFINITY)
    }

    /// The same over the window `from_unix_s..to_unix_s`.
    pub fn mean_between(
        &self,
        job_id: u32,
        from_unix_s: f64,
        to_unix_s: f64,
    ) -> Option<MeasuredUse> {
        let list = self.jobs.get(&job_id)?;
        let (mut weighted, mut weight) = (0.0, 0.0);
        let mut covered: HashMap<&str, f64> = HashMap::new();
        for (node, iv) in list {
            let seconds = iv.to_unix_s.min(to_unix_s) - iv.from_unix_s.max(from_unix_s);
            if seconds <= 0.0 {
                continue;
            }
            let w = seconds * f64::from(iv.gpus);
            weighted += iv.util_pct * w;
            weight += w;
            *covered.entry(node.as_str()).or_default() += seconds;
        }
        (weight > 0.0).then(|| MeasuredUse {
            util_pct: weighted / weight,
            covered_s: covered.values().copied().fold(0.0, f64::max),
        })
    }

    /// Forgets the jobs `keep` says no to (ended ones).
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        self.jobs.retain(|id, _| keep(*id));
    }

    pub fn jobs(&self) -> usize {
        self.jobs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(job: u32, node: &str, from: f64, to: f64, gpus: u32, util: f64) -> UseReport {
        UseReport {
            job_id: job,
            node: node.into(),
            from_unix_s: from,
            to_unix_s: to,
            gpus,
            util_pct: util,
            power_w: None,
        }
    }

    #[test]
    fn wire_form_round_trips_and_bad_reports_say_why() {
        let r = report(1234, "gpu07", 1_764_064_800.0, 1_764_064_830.25, 2, 71.5);
        assert_eq!(
            r.to_wire(),
            "slurm-energy-use/1 job=1234 node=gpu07 from=1764064800.000 to=1764064830.250 gpus=2 util_pct=71.50"
        );
        assert_eq!(UseReport::parse(&r.to_wire()), Ok(r.clone()));
        for (text, why) in [
            ("", "empty"),
            ("slurm-energy-use/2 job=1", "version"),
            (
                "slurm-energy-use/1 node=a from=1 to=2 gpus=1 util_pct=5",
                "no job=",
            ),
            (
                "slurm-energy-use/1 job=x node=a from=1 to=2 gpus=1 util_pct=5",
                "job=\"x\"",
            ),
            (
                "slurm-energy-use/1 job=1 node=a from=3 to=2 gpus=1 util_pct=5",
                "backwards",
            ),
            (
                "slurm-energy-use/1 job=1 node=a from=1 to=2 gpus=1 util_pct=101",
                "0..100",
            ),
            (
                "slurm-energy-use/1 job=1 node=a from=1 to=2 gpus=0 util_pct=1",
                "at least one GPU",
            ),
        ] {
            let e = UseReport::parse(text).expect_err(text);
            assert!(e.to_string().contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn the_jobs_gpu_power_is_optional_on_the_wire_and_bounded() {
        let mut r = report(9, "gpu01", 10.0, 40.0, 2, 55.0);
        r.power_w = Some(412.25);
        assert!(r.to_wire().ends_with(" util_pct=55.00 power_w=412.2"), "{}", r.to_wire());
        let back = UseReport::parse(&r.to_wire()).expect("parses");
        assert_eq!(back.power_w, Some(412.2));
        // Without it (an older node): parsed, no power.
        assert_eq!(UseReport::parse(&report(9, "gpu01", 10.0, 40.0, 2, 55.0).to_wire()).expect("parses").power_w, None);
        for bad in ["power_w=x", "power_w=-1", "power_w=4000.5", "power_w=NaN", "power_w=inf"] {
            let text = format!("slurm-energy-use/1 job=1 node=a from=1 to=2 gpus=2 util_pct=5 {bad}");
            let e = UseReport::parse(&text).expect_err(&text);
            assert!(e.to_string().contains("power_w="), "{text}: {e}");
        }
        // 2 GPUs may draw up to twice the per-GPU bound.
        assert!(UseReport::parse("slurm-energy-use/1 job=1 node=a from=1 to=2 gpus=2 util_pct=5 power_w=3999").is_ok());
    }

    #[test]
    fn the_newest_measured_power_of_a_node_is_kept_per_job() {
        let mut log = UseLog::default();
        assert_eq!(log.latest_powers(0.0), vec![]);
        let mut r = report(3, "a", 0.0, 30.0, 1, 80.0);
        r.power_w = Some(250.0);
        log.add(r.clone());
        r.from_unix_s = 30.0;
        r.to_unix_s = 60.0;
        r.power_w = Some(270.0);
        log.add(r.clone());
        // A later report without power (a GPU became shared) does not hide the last reading.
        r.from_unix_s = 60.0;
        r.to_unix_s = 90.0;
        r.power_w = None;
        log.add(r);
        let mut other = report(3, "b", 0.0, 95.0, 1, 80.0);
        other.power_w = Some(100.0);
        log.add(other);
        log.add(report(4, "a", 0.0, 95.0, 1, 80.0));
        let mut got = log.latest_powers(0.0);
        got.sort_by(|x, y| x.node.cmp(&y.node));
        let m = |node: &str, from: f64, to: f64, w: f64| MeasuredPower { job_id: 3, node: node.into(), from_unix_s: from, to_unix_s: to, power_w: w };
        assert_eq!(got, vec![m("a", 30.0, 60.0, 270.0), m("b", 0.0, 95.0, 100.0)]);
        // Readings that ended before `since` are not read.
        assert_eq!(log.latest_powers(70.0), vec![m("b", 0.0, 95.0, 100.0)]);
    }

    #[test]
    fn mean_is_weighted_by_seconds_and_gpus_within_the_window() {
        let mut log = UseLog::default();
        assert_eq!(log.mean_since(7, 0.0), None);
        log.add(report(7, "a", 0.0, 10.0, 1, 90.0));
        log.add(report(7, "a", 10.0, 20.0, 1, 30.0));
        log.add(report(7, "b", 10.0, 20.0, 3, 50.0));
        let all = log.mean_since(7, 0.0).expect("reports");
        // (90*10 + 30*10 + 50*30) / (10 + 10 + 30)
        assert!((all.util_pct - 54.0).abs() < 1e-9, "{all:?}");
        assert_eq!(all.covered_s, 20.0);
        // From t=15: half of each later interval.
        let late = log.mean_since(7, 15.0).expect("reports");
        assert!((late.util_pct - 45.0).abs() < 1e-9, "{late:?}");
        assert_eq!(late.covered_s, 5.0);
        assert_eq!(log.mean_since(7, 20.0), None);
        let early = log.mean_between(7, 0.0, 10.0).expect("reports");
        assert_eq!((early.util_pct, early.covered_s), (90.0, 10.0));
        log.retain(|id| id != 7);
        assert_eq!(log.jobs(), 0);
    }

    #[test]
    fn old_intervals_make_room() {
        let mut log = UseLog::default();
        for k in 0..(MAX_INTERVALS_PER_JOB + 10) {
            log.add(report(1, "a", k as f64, k as f64 + 1.0, 1, 10.0));
        }
        assert_eq!(
            log.mean_since(1, 0.0).map(|m| m.covered_s),
            Some(MAX_INTERVALS_PER_JOB as f64)
        );
    }
}
