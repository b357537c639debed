//! What the planner learns from jobs, shared by the simulator and sched/energy: per user and
//! per user and tag (`--energy-tag`), how much of its time limit a job really runs, how its
//! measured GPU power compares with the prediction, and the run time at each clock (the
//! slowdown actually observed). Finished jobs teach it, and so do the first minutes of running
//! jobs (their measured power).
//!
//! Every prediction says where it came from ([`PredictionSource`]): the most specific group
//! with observations (user and tag, then user), else the prior. Serialisable, so that the
//! plugin can keep it across slurmctld restarts.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Before any history: jobs are expected to use this fraction of their time limit.
pub const PRIOR_RUNTIME_FRACTION: f64 = 0.5;
/// Weight of that prior, in jobs.
pub const PRIOR_RUNTIME_WEIGHT: f64 = 3.0;
/// Weight of the prior power ratio (1: the model is right), in observations.
pub const PRIOR_POWER_WEIGHT: f64 = 1.0;
/// Measured / predicted power is kept within these bounds (a misattributed reading must not
/// turn a prediction upside down).
pub const POWER_RATIO_RANGE: (f64, f64) = (0.25, 4.0);
/// Most tag groups (`u<uid>/<tag>`) kept per user; a new one beyond it replaces the user's
/// least recently taught (security review #7: tags are the user's to invent).
pub const MAX_TAG_GROUPS_PER_USER: usize = 32;

/// A running sum and count.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Mean {
    pub sum: f64,
    pub n: u32,
}

impl Mean {
    fn add(&mut self, x: f64) {
        if x.is_finite() {
            self.sum += x;
            self.n = self.n.saturating_add(1);
        }
    }
    pub fn value(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / f64::from(self.n))
    }
    /// Mean of the observations and `weight` observations of `prior`.
    fn with_prior(&self, prior: f64, weight: f64) -> f64 {
        (self.sum + prior * weight) / (f64::from(self.n) + weight)
    }
}

/// What was learnt about one group of jobs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct GroupStats {
    /// Finished jobs seen.
    pub jobs: u32,
    /// Run time / time limit (at most 1).
    pub runtime_fraction: Mean,
    /// Measured GPU energy per GPU-hour (J).
    pub energy_per_gpu_hour_j: Mean,
    /// Measured / predicted GPU power of finished jobs.
    pub power_ratio: Mean,
    /// Measured / predicted GPU power over the first minutes of running jobs.
    pub early_power_ratio: Mean,
    /// GPU utilisation of running jobs (%), where the node side reports it.
    pub early_gpu_util_pct: Mean,
    /// Run time (s) of finished jobs by the GPU clock they ran at (MHz).
    pub runtime_by_clock_s: BTreeMap<u32, Mean>,
    /// When the group was last taught, in [`History`]'s own count of observations (no clock:
    /// the order is all the tag cap needs).
    pub last_taught: u64,
}

impl GroupStats {
    /// Run time at `clock_mhz` over run time at `reference_mhz`, both measured; `None` until
    /// jobs ran at both.
    pub fn observed_slowdown(&self, clock_mhz: u32, reference_mhz: u32) -> Option<f64> {
        let at = self.runtime_by_clock_s.get(&clock_mhz)?.value()?;
        let reference = self.runtime_by_clock_s.get(&reference_mhz)?.value()?;
        (reference > 0.0).then(|| at / reference)
    }

    /// Measured / predicted power: from finished jobs when there are any, else from running
    /// jobs' first minutes.
    fn power_ratio(&self) -> Option<(Mean, bool)> {
        if self.power_ratio.n > 0 {
            Some((self.power_ratio, false))
        } else if self.early_power_ratio.n > 0 {
            Some((self.early_power_ratio, true))
        } else {
            None
        }
    }
}

/// A finished job as the scheduler saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedJob<'a> {
    pub user: u32,
    pub tag: Option<&'a str>,
    pub runtime_s: f64,
    pub time_limit_s: f64,
    pub gpus: u32,
    /// Measured GPU energy (J), if known.
    pub energy_j: Option<f64>,
    /// Predicted GPU power (W, all its GPUs) when it started, if known.
    pub predicted_power_w: Option<f64>,
    /// The GPU clock it ran at (MHz), if known.
    pub clock_mhz: Option<u32>,
}

/// The first minutes of a running job.
#[derive(Debug, Clone, PartialEq)]
pub struct EarlyRun<'a> {
    pub user: u32,
    pub tag: Option<&'a str>,
    /// Measured GPU power attributed to the job (W, all its GPUs).
    pub power_w: f64,
    /// Predicted GPU power (W, all its GPUs).
    pub predicted_power_w: f64,
    /// Its GPU utilisation (%) while it had its GPUs to itself, where the node side reports it.
    pub gpu_util_pct: Option<f64>,
}

/// Where a prediction came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PredictionSource {
    Prior,
    /// A group's history: its key (`u<uid>/<tag>` or `u<uid>`) and how many jobs taught it.
    History { group: String, n: u32 },
}

impl fmt::Display for PredictionSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PredictionSource::Prior => write!(f, "prior"),
            PredictionSource::History { group, n } => write!(f, "history:{group}:n={n}"),
        }
    }
}

/// What the planner uses for one pending job.
#[derive(Debug, Clone, PartialEq)]
pub struct Learnt {
    /// Expected run time / time limit.
    pub runtime_fraction: f64,
    /// Multiplies the model's GPU power.
    pub power_ratio: f64,
    pub source: PredictionSource,
}

/// Everything learnt, by group key.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct History {
    groups: BTreeMap<String, GroupStats>,
    /// Observations so far: the clock of `GroupStats::last_taught`.
    taught: u64,
}

/// Tag characters kept in a group key (anything else becomes `_`), so keys stay one token in a
/// decision record.
fn clean_tag(tag: &str) -> String {
    tag.chars().take(64).map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
}

pub fn user_key(user: u32) -> String {
    format!("u{user}")
}

pub fn group_key(user: u32, tag: Option<&str>) -> Option<String> {
    tag.filter(|t| !t.is_empty()).map(|t| format!("u{user}/{}", clean_tag(t)))
}

impl History {
    pub fn groups(&self) -> &BTreeMap<String, GroupStats> {
        &self.groups
    }

    pub fn group(&self, user: u32, tag: Option<&str>) -> Option<&GroupStats> {
        self.groups.get(&group_key(user, tag)?)
    }

    pub fn user(&self, user: u32) -> Option<&GroupStats> {
        self.groups.get(&user_key(user))
    }

    fn update(&mut self, user: u32, tag: Option<&str>, f: impl Fn(&mut GroupStats)) {
        self.taught += 1;
        let taught = self.taught;
        let g = self.groups.entry(user_key(user)).or_default();
        f(g);
        g.last_taught = taught;
        if let Some(k) = group_key(user, tag) {
            if !self.groups.contains_key(&k) {
                self.make_room_for_a_tag(user);
            }
            let g = self.groups.entry(k).or_default();
            f(g);
            g.last_taught = taught;
        }
    }

    /// Drops `user`'s least recently taught tag groups until a new one fits under
    /// [`MAX_TAG_GROUPS_PER_USER`].
    fn make_room_for_a_tag(&mut self, user: u32) {
        // `u<uid>/...` keys sort between `u<uid>/` and `u<uid>0` ('0' follows '/').
        let (from, to) = (format!("u{user}/"), format!("u{user}0"));
        loop {
            let tags = self.groups.range(from.clone()..to.clone());
            if tags.clone().count() < MAX_TAG_GROUPS_PER_USER {
                return;
            }
            let Some(oldest) = tags.min_by_key(|(_, g)| g.last_taught).map(|(k, _)| k.clone()) else { return };
            self.groups.remove(&oldest);
        }
    }

    /// A job finished: learn from what it did.
    pub fn observe_finished(&mut self, job: &FinishedJob<'_>) {
        if !(job.runtime_s.is_finite() && job.runtime_s >= 0.0) {
            return;
        }
        let fraction = (job.time_limit_s > 0.0).then(|| (job.runtime_s / job.time_limit_s).min(1.0));
        let gpu_h = f64::from(job.gpus) * job.runtime_s / 3600.0;
        let per_gpu_hour = job.energy_j.filter(|e| e.is_finite() && *e >= 0.0 && gpu_h > 0.0).map(|e| e / gpu_h);
        let ratio = match (job.energy_j, job.predicted_power_w) {
            (Some(e), Some(p)) if p > 0.0 && job.runtime_s > 0.0 && e.is_finite() && e > 0.0 => {
                Some((e / job.runtime_s / p).clamp(POWER_RATIO_RANGE.0, POWER_RATIO_RANGE.1))
            }
            _ => None,
        };
        self.update(job.user, job.tag, |g| {
            g.jobs = g.jobs.saturating_add(1);
            if let Some(f) = fraction {
                g.runtime_fraction.add(f);
            }
            if let Some(e) = per_gpu_hour {
                g.energy_per_gpu_hour_j.add(e);
            }
            if let Some(r) = ratio {
                g.power_ratio.add(r);
            }
            if let Some(c) = job.clock_mhz.filter(|c| *c > 0) {
                g.runtime_by_clock_s.entry(c).or_default().add(job.runtime_s);
            }
        });
    }

    /// A running job's first minutes: learn from its measured power.
    pub fn observe_early(&mut self, run: &EarlyRun<'_>) {
        if !(run.power_w.is_finite() && run.power_w >= 0.0 && run.predicted_power_w > 0.0) {
            return;
        }
        let ratio = (run.power_w / run.predicted_power_w).clamp(POWER_RATIO_RANGE.0, POWER_RATIO_RANGE.1);
        self.update(run.user, run.tag, |g| {
            g.early_power_ratio.add(ratio);
            if let Some(u) = run.gpu_util_pct.filter(|u| (0.0..=100.0).contains(u)) {
                g.early_gpu_util_pct.add(u);
            }
        });
    }

    /// A running job's GPU utilisation (%) while it had its GPUs to itself, measured once its
    /// first minutes are over (the power of the same minutes may be learnt at another time,
    /// [`History::observe_early`]).
    pub fn observe_solo_use(&mut self, user: u32, tag: Option<&str>, gpu_util_pct: f64) {
        if (0.0..=100.0).contains(&gpu_util_pct) {
            self.update(user, tag, |g| g.early_gpu_util_pct.add(gpu_util_pct));
        }
    }

    /// How much of its GPUs a job of `user` with `tag` uses when it has them to itself (%):
    /// the user+tag group's measurement, else the user's. The yardstick a shared run's use is
    /// measured against ([`crate::interference::slowdown_from_utilisation`]).
    pub fn solo_gpu_util_pct(&self, user: u32, tag: Option<&str>) -> Option<f64> {
        self.group(user, tag).and_then(|g| g.early_gpu_util_pct.value()).or_else(|| self.user(user)?.early_gpu_util_pct.value())
    }

    /// The simulator's form of [`History::observe_finished`]: run time and limit only, no tag.
    pub fn observe(&mut self, user: u32, runtime_s: f64, time_limit_s: f64) {
        if time_limit_s > 0.0 && runtime_s >= 0.0 {
            self.observe_finished(&FinishedJob { user, tag: None, runtime_s, time_limit_s, gpus: 0, energy_j: None, predicted_power_w: None, clock_mhz: None });
        }
    }

    /// Expected run time / time limit of a user's next job, whatever its tag.
    pub fn expected_fraction(&self, user: u32) -> f64 {
        self.predict(user, None).runtime_fraction
    }

    /// What to expect of a job of `user` with `tag`: from the user+tag group when it has seen
    /// a job, else from the user's, else the prior.
    pub fn predict(&self, user: u32, tag: Option<&str>) -> Learnt {
        let chosen = group_key(user, tag)
            .and_then(|k| self.groups.get(&k).filter(|g| g.jobs > 0 || g.early_power_ratio.n > 0).map(|g| (k, g)))
            .or_else(|| {
                let k = user_key(user);
                self.groups.get(&k).filter(|g| g.jobs > 0 || g.early_power_ratio.n > 0).map(|g| (k, g))
            });
        let Some((group, g)) = chosen else {
            return Learnt { runtime_fraction: PRIOR_RUNTIME_FRACTION, power_ratio: 1.0, source: PredictionSource::Prior };
        };
        let power_ratio = g.power_ratio().map_or(1.0, |(m, _)| m.with_prior(1.0, PRIOR_POWER_WEIGHT));
        let n = g.jobs.max(g.early_power_ratio.n);
        Learnt {
            runtime_fraction: g.runtime_fraction.with_prior(PRIOR_RUNTIME_FRACTION, PRIOR_RUNTIME_WEIGHT),
            power_ratio,
            source: PredictionSource::History { group, n },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(user: u32, tag: Option<&str>, runtime_s: f64, energy_j: Option<f64>) -> FinishedJob<'_> {
        FinishedJob { user, tag, runtime_s, time_limit_s: 3600.0, gpus: 2, energy_j, predicted_power_w: Some(400.0), clock_mhz: Some(1312) }
    }

    #[test]
    fn no_history_is_the_prior() {
        let h = History::default();
        let p = h.predict(7, Some("bert"));
        assert_eq!(p.source, PredictionSource::Prior);
        assert_eq!(p.source.to_string(), "prior");
        assert_eq!(p.runtime_fraction, PRIOR_RUNTIME_FRACTION);
        assert_eq!(p.power_ratio, 1.0);
    }

    #[test]
    fn a_tag_learns_apart_from_the_user() {
        let mut h = History::default();
        for _ in 0..3 {
            h.observe_finished(&finished(7, Some("bert"), 360.0, Some(2.0 * 360.0 * 200.0)));
        }
        let p = h.predict(7, Some("bert"));
        assert_eq!(p.source.to_string(), "history:u7/bert:n=3");
        // (3 * 0.1 + 3 * 0.5) / 6
        assert!((p.runtime_fraction - 0.3).abs() < 1e-12, "{}", p.runtime_fraction);
        // measured 400 W against 400 W predicted: ratio 1.
        assert!((p.power_ratio - 1.0).abs() < 1e-12);
        // Another tag of the same user falls back to the user's history.
        assert_eq!(h.predict(7, Some("gpt")).source.to_string(), "history:u7:n=3");
        assert_eq!(h.predict(8, Some("bert")).source, PredictionSource::Prior);
        let g = h.group(7, Some("bert")).expect("group");
        let per_gpu_h = g.energy_per_gpu_hour_j.value().expect("energy");
        assert!((per_gpu_h - 200.0 * 3600.0).abs() < 1e-6, "{per_gpu_h}");
    }

    #[test]
    fn measured_power_corrects_the_model() {
        let mut h = History::default();
        // Predicted 400 W, measured 200 W (2 GPUs over 100 s: 20 kJ).
        h.observe_finished(&finished(1, None, 100.0, Some(20_000.0)));
        let p = h.predict(1, None);
        assert!((p.power_ratio - 0.75).abs() < 1e-12, "(0.5 + 1) / 2: {}", p.power_ratio);
        // Early runs teach it before any job finished.
        let mut h = History::default();
        h.observe_early(&EarlyRun { user: 2, tag: Some("x"), power_w: 800.0, predicted_power_w: 400.0, gpu_util_pct: Some(90.0) });
        let p = h.predict(2, Some("x"));
        assert_eq!(p.source.to_string(), "history:u2/x:n=1");
        assert!((p.power_ratio - 1.5).abs() < 1e-12);
        assert_eq!(p.runtime_fraction, PRIOR_RUNTIME_FRACTION);
        // Absurd readings are bounded.
        h.observe_early(&EarlyRun { user: 3, tag: None, power_w: 1e9, predicted_power_w: 1.0, gpu_util_pct: None });
        // Solo use: per tag, falling back to the user's.
        assert_eq!(h.solo_gpu_util_pct(4, Some("a")), None);
        h.observe_solo_use(4, Some("a"), 80.0);
        h.observe_solo_use(4, Some("b"), 40.0);
        h.observe_solo_use(4, Some("b"), 140.0);
        assert_eq!(h.solo_gpu_util_pct(4, Some("a")), Some(80.0));
        assert_eq!(h.solo_gpu_util_pct(4, Some("b")), Some(40.0));
        assert_eq!(h.solo_gpu_util_pct(4, Some("c")), Some(60.0), "the user's mean");
        assert!(h.predict(3, None).power_ratio <= POWER_RATIO_RANGE.1);
    }

    #[test]
    fn slowdown_is_observed_per_clock() {
        let mut h = History::default();
        let mut j = finished(1, Some("r"), 100.0, None);
        h.observe_finished(&j);
        j.clock_mhz = Some(1000);
        j.runtime_s = 120.0;
        h.observe_finished(&j);
        let g = h.group(1, Some("r")).expect("group");
        assert!((g.observed_slowdown(1000, 1312).expect("both clocks") - 1.2).abs() < 1e-12);
        assert_eq!(g.observed_slowdown(900, 1312), None);
    }

    #[test]
    fn the_simulators_form_matches_the_old_per_user_mean() {
        let mut h = History::default();
        h.observe(5, 30.0, 100.0);
        h.observe(5, 300.0, 100.0); // capped at 1
        assert!((h.expected_fraction(5) - (0.3 + 1.0 + 1.5) / 5.0).abs() < 1e-12);
        assert_eq!(h.expected_fraction(6), PRIOR_RUNTIME_FRACTION);
        // The simulator's jobs have tags but it learns without: a tagged job gets the user's.
        let p = h.predict(5, Some("ResNet-50"));
        assert_eq!((p.runtime_fraction, p.power_ratio), (h.expected_fraction(5), 1.0));
        assert_eq!(p.source.to_string(), "history:u5:n=2");
        h.observe(5, 10.0, 0.0); // no limit: ignored
        assert_eq!(h.user(5).map(|g| g.jobs), Some(2));
    }

    #[test]
    fn state_round_trips_through_json() {
        let mut h = History::default();
        h.observe_finished(&finished(7, Some("a b"), 360.0, Some(1000.0)));
        let text = serde_json::to_string(&h).expect("serialise");
        let back: History = serde_json::from_str(&text).expect("parse");
        assert_eq!(back, h);
        assert!(back.group(7, Some("a b")).is_some());
        assert!(text.contains("u7/a_b"), "{text}");
    }

    /// A user's tags are theirs to choose: one job per new tag must not grow the state without
    /// bound (security review #7). The least recently taught tag group goes first.
    #[test]
    fn a_users_tag_groups_are_capped_least_recently_seen_first() {
        let mut h = History::default();
        h.observe_finished(&finished(8, Some("other"), 360.0, None));
        for i in 0..(3 * MAX_TAG_GROUPS_PER_USER) {
            h.observe_finished(&finished(7, Some(&format!("t{i}")), 360.0, None));
            if i % 8 == 0 {
                h.observe_early(&EarlyRun { user: 7, tag: Some("kept"), power_w: 100.0, predicted_power_w: 100.0, gpu_util_pct: None });
            }
        }
        let tags = h.groups().keys().filter(|k| k.starts_with("u7/")).count();
        assert_eq!(tags, MAX_TAG_GROUPS_PER_USER);
        assert!(h.group(7, Some("kept")).is_some(), "taught recently");
        assert!(h.group(7, Some(&format!("t{}", 3 * MAX_TAG_GROUPS_PER_USER - 1))).is_some());
        assert!(h.group(7, Some("t0")).is_none(), "the oldest went first");
        // The user's own group and other users' groups are not touched.
        assert_eq!(h.user(7).map(|g| g.jobs), Some(3 * MAX_TAG_GROUPS_PER_USER as u32));
        assert!(h.group(8, Some("other")).is_some());
        let back: History = serde_json::from_str(&serde_json::to_string(&h).expect("json")).expect("parse");
        assert_eq!(back, h);
    }
}
