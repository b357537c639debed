//! Interference of two jobs time-sharing one GPU (EaCO): predicted slowdown of each.
//!
//! Three sources, best first:
//! 1. **history**: slowdowns observed on this cluster for the same pair of workload families,
//!    including the first minutes of runs still going (EaCO's early-stage observations);
//! 2. **experiments**: Gavel's measured pair throughputs, averaged over the batch sizes of each
//!    family (a user tags a model, not a batch size);
//! 3. **fallback**: for unknown families, a conservative quantile (p75) of all measured pair
//!    slowdowns, so an unknown pair is expected to interfere more than a typical known one.
//!
//! On a live cluster every observation is the testimony of a user: a job's slowdown is its GPU
//! use while sharing against its kind's use alone, and the user controls both (security review
//! of 2026-11-27, finding 4). So the history is kept per user and per side of a pair (each job's
//! slowdown is its own user's testimony, [`InterferenceModel::observe_by`]), and for each side:
//! - each user is one voice: the value is the **median of the users' means**, so one user's
//!   extreme values, however many pairs they run, cannot drag it;
//! - it moves the prediction only once [`MIN_DISTINCT_USERS`] users reported that side;
//! - each user weighs at most [`MAX_WEIGHT_PER_USER`] observations, and all users together at
//!   most [`MAX_HISTORY_TO_PRIOR`] times the prior: the experiment is never forgotten.
//!
//! The prediction is a running mean in which the experiment counts as `PRIOR_WEIGHT`
//! observations and the users' median as their (bounded) weight. Measurements no user controls
//! (the simulator's, [`InterferenceModel::observe`]) are added to it as they are, one weight
//! each, as before. A state file written before users were recorded loads, and what it holds
//! counts as the testimony of one anonymous user.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::data::gavel::GavelThroughputs;
use crate::workloads::canonical_family;

/// How many observations the experiment is worth.
pub const PRIOR_WEIGHT: f64 = 2.0;
/// Distinct users whose jobs must have reported one side of a pair before the history moves
/// that side's prediction away from the experiment: fewer, and one user (or two) could teach the
/// planner that any two families share for free, or never.
pub const MIN_DISTINCT_USERS: usize = 3;
/// Most observations one user's reports weigh in the blend, however many pairs they ran.
pub const MAX_WEIGHT_PER_USER: f64 = 2.0;
/// The users' reports together weigh at most this many times the experiment.
pub const MAX_HISTORY_TO_PRIOR: f64 = 4.0;
/// Most users remembered for one side of a pair; a newcomer beyond it is not recorded (the
/// state file stays bounded, and the median of this many users is settled).
pub const MAX_USERS_PER_PAIR: usize = 64;
/// Most workload families in the history; observations of further families are not recorded.
pub const MAX_FAMILIES: usize = 256;

/// Slowdown = runtime shared / runtime alone (>= 1 when sharing costs something).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairPrediction {
    pub slowdown_a: f64,
    pub slowdown_b: f64,
    pub source: PredictionSource,
    /// Pairs of this kind observed on the cluster (0 unless `source` is `History`).
    #[serde(default)]
    pub observed: u32,
    /// Distinct users whose reports moved the prediction (0: measurements without users only).
    #[serde(default)]
    pub users: u32,
}

impl PairPrediction {
    /// How a decision record names the source (`ipred=`): `experiment`, `fallback`,
    /// `history:n=<pairs observed>:users=<users who moved it>` or, from measurements without
    /// users (the simulator), `history:n=<pairs observed>`.
    pub fn describe(&self) -> String {
        match self.source {
            PredictionSource::History if self.users > 0 => format!("history:n={}:users={}", self.observed, self.users),
            PredictionSource::History => format!("history:n={}", self.observed),
            PredictionSource::Experiment => "experiment".into(),
            PredictionSource::Fallback => "fallback".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PredictionSource {
    History,
    Experiment,
    Fallback,
}

/// One side of a pair (family a next to family b) as reported: a sum of slowdowns of a and how
/// many.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SideSums {
    sum_slowdown: f64,
    count: f64,
}

impl SideSums {
    fn add(&mut self, slowdown: f64) {
        self.sum_slowdown += slowdown;
        self.count += 1.0;
    }
    fn is_empty(&self) -> bool {
        self.count <= 0.0
    }
}

/// What was observed of family a next to family b.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Observed {
    /// Every observation (a's and b's slowdowns, and how many): the totals a reader of the state
    /// file sees, and what [`InterferenceHistory::pairs_observed`] counts. What they hold beyond
    /// `by_user` and `measured` was written before users were recorded.
    sum_slowdown_a: f64,
    sum_slowdown_b: f64,
    count: f64,
    /// a's slowdowns by the uid of a's job (its user's testimony).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    by_user: BTreeMap<u32, SideSums>,
    /// a's slowdowns measured without a user (the simulator's ground truth).
    #[serde(skip_serializing_if = "SideSums::is_empty")]
    measured: SideSums,
}

impl Observed {
    fn add_total(&mut self, slowdown_a: f64, slowdown_b: f64) {
        self.sum_slowdown_a += slowdown_a;
        self.sum_slowdown_b += slowdown_b;
        self.count += 1.0;
    }

    /// What the totals hold beyond the users' and the measured: a state written before users
    /// were recorded, counted as one anonymous user.
    fn anonymous(&self) -> Option<SideSums> {
        let users = self.by_user.values().fold(SideSums::default(), |t, s| SideSums { sum_slowdown: t.sum_slowdown + s.sum_slowdown, count: t.count + s.count });
        let count = self.count - users.count - self.measured.count;
        // Counts are whole numbers; a sum left over with no count is rounding.
        (count >= 1.0).then_some(SideSums { sum_slowdown: self.sum_slowdown_a - users.sum_slowdown - self.measured.sum_slowdown, count })
    }

    /// a's predicted slowdown from `prior` and what was observed, and how many users moved it.
    fn blend(&self, prior: f64) -> (f64, usize) {
        let mut sum = prior * PRIOR_WEIGHT + self.measured.sum_slowdown;
        let mut weight = PRIOR_WEIGHT + self.measured.count;
        let users: Vec<(f64, f64)> = self
            .by_user
            .values()
            .copied()
            .chain(self.anonymous())
            .filter(|s| s.count > 0.0)
            .map(|s| (s.sum_slowdown / s.count, s.count.min(MAX_WEIGHT_PER_USER)))
            .collect();
        if users.len() < MIN_DISTINCT_USERS {
            return (sum / weight, 0);
        }
        let mut means: Vec<f64> = users.iter().map(|u| u.0).collect();
        means.sort_by(f64::total_cmp);
        let median = percentile(&means, 0.5);
        let users_weight = users.iter().map(|u| u.1).sum::<f64>().min(MAX_HISTORY_TO_PRIOR * PRIOR_WEIGHT);
        sum += median * users_weight;
        weight += users_weight;
        (sum / weight, users.len())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InterferenceModel {
    /// family a -> family b -> (slowdown a, slowdown b), both orders stored.
    experiments: BTreeMap<String, BTreeMap<String, (f64, f64)>>,
    history: InterferenceHistory,
    fallback_slowdown: f64,
}

/// The pair slowdowns observed on the cluster (family a -> family b -> sums, both orders): what
/// a scheduler keeps across restarts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct InterferenceHistory(BTreeMap<String, BTreeMap<String, Observed>>);

impl InterferenceHistory {
    /// Pairs observed (each pair once, whatever its order). Folded from +0.0: an empty float
    /// `sum()` is -0.0, which a log line would print as "-0".
    pub fn pairs_observed(&self) -> f64 {
        self.0
            .iter()
            .flat_map(|(a, row)| row.iter().filter(move |(b, _)| a.as_str() <= b.as_str()).map(move |(b, o)| if a == b { o.count / 2.0 } else { o.count }))
            .fold(0.0, |total, n| total + n)
    }

    fn get(&self, a: &str, b: &str) -> Option<&Observed> {
        self.0.get(a).and_then(|row| row.get(b))
    }

    /// The entry of a next to b, unless that would take the history past [`MAX_FAMILIES`].
    fn entry(&mut self, a: &str, b: &str) -> Option<&mut Observed> {
        if !self.0.contains_key(a) && self.0.len() >= MAX_FAMILIES {
            return None;
        }
        Some(self.0.entry(a.to_string()).or_default().entry(b.to_string()).or_default())
    }

    /// Room for both families of a pair (both orders are stored).
    fn has_room(&self, a: &str, b: &str) -> bool {
        let new = [a, b].iter().filter(|f| !self.0.contains_key(**f)).count() - usize::from(a == b && !self.0.contains_key(a));
        self.0.len() + new <= MAX_FAMILIES
    }
}

/// The largest slowdown an observation may report: a pair that ran slower is as bad as a pair
/// can be (and a ratio of tiny utilisations is noise).
pub const MAX_OBSERVED_SLOWDOWN: f64 = 4.0;
/// Below this GPU utilisation (%) a job's solo use says too little to measure a slowdown by.
pub const MIN_SOLO_UTIL_PCT: f64 = 5.0;

/// A job's slowdown while it time-shares a GPU, estimated from GPU utilisation: the share of
/// the GPU it got while sharing (`shared_util_pct`) against what its kind of job used alone
/// (`solo_util_pct`). Under time slicing a training job progresses in proportion to the GPU
/// time it gets, so running at half its solo utilisation is running at half speed. Bounded to
/// `1..=MAX_OBSERVED_SLOWDOWN`; `None` when either value is not a measurement.
pub fn slowdown_from_utilisation(solo_util_pct: f64, shared_util_pct: f64) -> Option<f64> {
    if !(solo_util_pct.is_finite() && shared_util_pct.is_finite()) || solo_util_pct < MIN_SOLO_UTIL_PCT || shared_util_pct < 0.0 {
        return None;
    }
    let floor = solo_util_pct / MAX_OBSERVED_SLOWDOWN;
    Some((solo_util_pct / shared_util_pct.max(floor)).clamp(1.0, MAX_OBSERVED_SLOWDOWN))
}

impl Default for InterferenceModel {
    fn default() -> Self {
        // Without any data: assume time slicing halves each job's speed (no gain from sharing),
        // which makes the planner share only where it has learnt better.
        InterferenceModel { experiments: BTreeMap::new(), history: InterferenceHistory::default(), fallback_slowdown: 2.0 }
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

impl InterferenceModel {
    /// Build the experiment table from Gavel's single-GPU pairs on `gpu` (e.g. `"v100"`).
    pub fn from_gavel(gavel: &GavelThroughputs, gpu: &str) -> InterferenceModel {
        let types = gavel.job_types(gpu);
        // Mean normalised throughput of each family pair over its batch-size variants, then
        // inverted: averaging slowdowns directly would let one bad variant dominate.
        let mut sums: BTreeMap<String, BTreeMap<String, (f64, f64, f64)>> = BTreeMap::new();
        let mut all = Vec::new();
        for a in &types {
            for b in &types {
                let Some((na, nb)) = gavel.pair_normalised(gpu, a, b) else { continue };
                if !(na > 0.0 && nb > 0.0 && na.is_finite() && nb.is_finite()) {
                    continue;
                }
                all.push(1.0 / na);
                let e = sums.entry(canonical_family(a)).or_default().entry(canonical_family(b)).or_insert((0.0, 0.0, 0.0));
                e.0 += na;
                e.1 += nb;
                e.2 += 1.0;
            }
        }
        all.sort_by(f64::total_cmp);
        let fallback_slowdown = if all.is_empty() { 2.0 } else { percentile(&all, 0.75) };
        let experiments = sums
            .into_iter()
            .map(|(a, row)| (a, row.into_iter().map(|(b, (na, nb, n))| (b, (n / na, n / nb))).collect()))
            .collect();
        InterferenceModel { experiments, history: InterferenceHistory::default(), fallback_slowdown }
    }

    pub fn fallback_slowdown(&self) -> f64 {
        self.fallback_slowdown
    }

    /// Predicted slowdowns when a job of family `a` shares a GPU with one of family `b`
    /// (any spelling of the family: see [`canonical_family`]).
    pub fn predict(&self, a: Option<&str>, b: Option<&str>) -> PairPrediction {
        let a = a.map(canonical_family);
        let b = b.map(canonical_family);
        self.predict_canonical(a.as_deref(), b.as_deref())
    }

    /// [`Self::predict`] for families already in canonical form (no allocation).
    pub fn predict_canonical(&self, a: Option<&str>, b: Option<&str>) -> PairPrediction {
        let fallback = PairPrediction { slowdown_a: self.fallback_slowdown, slowdown_b: self.fallback_slowdown, source: PredictionSource::Fallback, observed: 0, users: 0 };
        let (Some(a), Some(b)) = (a, b) else { return fallback };
        let prior = self.experiments.get(a).and_then(|row| row.get(b)).copied();
        let (ab, ba) = (self.history.get(a, b), self.history.get(b, a));
        let seen = ab.filter(|o| o.count > 0.0);
        let unmoved = match prior {
            Some((pa, pb)) => PairPrediction { slowdown_a: pa, slowdown_b: pb, source: PredictionSource::Experiment, observed: 0, users: 0 },
            None => fallback,
        };
        let Some(o) = seen else { return unmoved };
        let (pa, pb) = (unmoved.slowdown_a, unmoved.slowdown_b);
        // a's slowdown is what a's users reported next to b; b's, what b's reported next to a.
        let (slowdown_a, users_a) = o.blend(pa);
        let (slowdown_b, users_b) = ba.map_or((pb, 0), |r| r.blend(pb));
        let measured = o.measured.count > 0.0 || ba.is_some_and(|r| r.measured.count > 0.0);
        if users_a == 0 && users_b == 0 && !measured {
            return unmoved;
        }
        PairPrediction {
            slowdown_a,
            slowdown_b,
            source: PredictionSource::History,
            // A pair of one family is stored in one entry, both orders added to it.
            observed: if a == b { (o.count / 2.0) as u32 } else { o.count as u32 },
            users: users_a.max(users_b) as u32,
        }
    }

    /// Records slowdowns measured without a user (the simulator's ground truth, which no user
    /// controls): each weighs one observation against the prior, without [`MIN_DISTINCT_USERS`]
    /// or any bound. Never for what a user's job reports: that is [`Self::observe_by`].
    pub fn observe(&mut self, a: &str, b: &str, slowdown_a: f64, slowdown_b: f64) {
        self.record(a, b, slowdown_a, slowdown_b, |o, s| o.measured.add(s), |o, s| o.measured.add(s));
    }

    /// Records slowdowns observed on a live cluster: `slowdown_a` of a job of family `a` run by
    /// `user_a`, next to a job of family `b` run by `user_b` (the same user or another). Each is
    /// the testimony of its job's user, weighed as the module says.
    pub fn observe_by(&mut self, a: &str, user_a: u32, b: &str, user_b: u32, slowdown_a: f64, slowdown_b: f64) {
        let (fa, fb) = (canonical_family(a), canonical_family(b));
        // A side that already has MAX_USERS_PER_PAIR users takes no newcomer (nor its pair).
        let full = |x: &str, y: &str, user: u32| self.history.get(x, y).is_some_and(|o| o.by_user.len() >= MAX_USERS_PER_PAIR && !o.by_user.contains_key(&user));
        if full(&fa, &fb, user_a) || full(&fb, &fa, user_b) {
            return;
        }
        self.record(&fa, &fb, slowdown_a, slowdown_b, move |o, s| o.by_user.entry(user_a).or_default().add(s), move |o, s| o.by_user.entry(user_b).or_default().add(s));
    }

    fn record(&mut self, a: &str, b: &str, slowdown_a: f64, slowdown_b: f64, side_a: impl Fn(&mut Observed, f64), side_b: impl Fn(&mut Observed, f64)) {
        if !(slowdown_a.is_finite() && slowdown_b.is_finite() && slowdown_a > 0.0 && slowdown_b > 0.0) {
            return;
        }
        let (fa, fb) = (canonical_family(a), canonical_family(b));
        if !self.history.has_room(&fa, &fb) {
            return;
        }
        if let Some(e) = self.history.entry(&fa, &fb) {
            e.add_total(slowdown_a, slowdown_b);
            side_a(e, slowdown_a);
        }
        if let Some(r) = self.history.entry(&fb, &fa) {
            r.add_total(slowdown_b, slowdown_a);
            side_b(r, slowdown_b);
        }
    }

    /// What was observed on the cluster, to keep across restarts.
    pub fn history(&self) -> &InterferenceHistory {
        &self.history
    }

    /// Replaces what was observed (a restarted scheduler reading its saved state).
    pub fn set_history(&mut self, history: InterferenceHistory) {
        self.history = history;
    }
}

/// EaCO's early-stage check: after the first minutes of a shared run, keep the pair together
/// only if both jobs' observed slowdowns are within their bounds (with `tolerance`, e.g. 0.05
/// for 5 % measurement slack). Otherwise the newcomer is requeued: it has lost only minutes.
pub fn keep_sharing(observed_new: f64, bound_new: f64, observed_tenant: f64, bound_tenant: f64, tolerance: f64) -> bool {
    observed_new <= bound_new * (1.0 + tolerance) && observed_tenant <= bound_tenant * (1.0 + tolerance)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_moves_the_prediction_towards_what_was_seen() {
        let mut m = InterferenceModel::default();
        m.experiments.entry("resnet50".into()).or_default().insert("lm".into(), (1.5, 1.2));
        m.experiments.entry("lm".into()).or_default().insert("resnet50".into(), (1.2, 1.5));
        let before = m.predict(Some("ResNet-50"), Some("LM"));
        assert_eq!(before.source, PredictionSource::Experiment);
        for _ in 0..20 {
            m.observe("resnet50", "lm", 1.1, 1.1);
        }
        let after = m.predict(Some("resnet50"), Some("lm"));
        assert_eq!(after.source, PredictionSource::History);
        assert!(after.slowdown_a < 1.15 && after.slowdown_a > 1.1, "{after:?}");
        // The reverse order learnt too.
        assert!(m.predict(Some("lm"), Some("resnet50")).slowdown_b < 1.15);
    }

    #[test]
    fn early_check_requeues_pairs_worse_than_their_bounds() {
        assert!(keep_sharing(1.3, 1.6, 1.2, 1.6, 0.05));
        assert!(!keep_sharing(2.0, 1.6, 1.2, 1.6, 0.05));
        assert!(!keep_sharing(1.3, 1.6, 1.9, 1.6, 0.05));
    }

    #[test]
    fn slowdown_is_solo_use_over_shared_use_within_bounds() {
        assert_eq!(slowdown_from_utilisation(80.0, 40.0), Some(2.0));
        assert_eq!(slowdown_from_utilisation(60.0, 60.0), Some(1.0));
        // More use while sharing than alone is measurement noise, not a speed-up.
        assert_eq!(slowdown_from_utilisation(50.0, 70.0), Some(1.0));
        assert_eq!(slowdown_from_utilisation(80.0, 0.0), Some(MAX_OBSERVED_SLOWDOWN));
        assert_eq!(slowdown_from_utilisation(2.0, 1.0), None, "solo use too small to tell");
        assert_eq!(slowdown_from_utilisation(f64::NAN, 1.0), None);
        assert_eq!(slowdown_from_utilisation(50.0, -1.0), None);
    }

    #[test]
    fn observations_survive_a_restart_and_are_counted_per_pair() {
        let mut m = InterferenceModel::default();
        m.observe("resnet18", "vgg16", 2.0, 1.5);
        m.observe("resnet18", "resnet18", 1.2, 1.4);
        assert_eq!(m.history().pairs_observed(), 2.0);
        let saved = serde_json::to_string(m.history()).expect("json");
        let mut restarted = InterferenceModel::default();
        restarted.set_history(serde_json::from_str(&saved).expect("parse"));
        let p = restarted.predict(Some("ResNet-18"), Some("VGG-16"));
        assert_eq!((p.source, p.observed), (PredictionSource::History, 1));
        assert_eq!(p.describe(), "history:n=1");
        // Fallback 2.0 weighs PRIOR_WEIGHT, the observation 1.
        assert!((p.slowdown_a - 2.0).abs() < 1e-9 && (p.slowdown_b - (2.0 * 2.0 + 1.5) / 3.0).abs() < 1e-9, "{p:?}");
        let same = restarted.predict(Some("resnet18"), Some("resnet18"));
        assert_eq!(same.observed, 1);
        assert!((same.slowdown_a - (2.0 * 2.0 + 2.6) / 4.0).abs() < 1e-9, "{same:?}");
    }

    #[test]
    fn unknown_pairs_fall_back() {
        let m = InterferenceModel::default();
        let p = m.predict(Some("x"), None);
        assert_eq!(p.source, PredictionSource::Fallback);
        assert_eq!(p.slowdown_a, 2.0);
    }
    /// A model whose experiment says resnet50 next to lm slows down 1.5 and 1.2.
    fn with_prior() -> InterferenceModel {
        let mut m = InterferenceModel::default();
        m.experiments.entry("resnet50".into()).or_default().insert("lm".into(), (1.5, 1.2));
        m.experiments.entry("lm".into()).or_default().insert("resnet50".into(), (1.2, 1.5));
        m
    }

    #[test]
    fn one_user_with_fifty_pairs_cannot_move_the_prediction() {
        let mut m = with_prior();
        let before = m.predict(Some("resnet50"), Some("lm"));
        for _ in 0..50 {
            m.observe_by("resnet50", 666, "lm", 666, 1.0, 1.0);
        }
        // Nor by teaching "never share".
        for _ in 0..50 {
            m.observe_by("resnet18", 666, "vgg16", 666, MAX_OBSERVED_SLOWDOWN, MAX_OBSERVED_SLOWDOWN);
        }
        let after = m.predict(Some("resnet50"), Some("lm"));
        assert_eq!((after.slowdown_a, after.slowdown_b, after.source), (before.slowdown_a, before.slowdown_b, before.source), "{after:?}");
        let never = m.predict(Some("resnet18"), Some("vgg16"));
        assert_eq!((never.slowdown_a, never.source), (m.fallback_slowdown(), PredictionSource::Fallback), "{never:?}");
        // Two users are not enough either.
        for _ in 0..50 {
            m.observe_by("resnet50", 667, "lm", 667, 1.0, 1.0);
        }
        assert_eq!(m.predict(Some("resnet50"), Some("lm")).slowdown_a, before.slowdown_a);
        // What they reported is kept (and counted), waiting for other users.
        assert_eq!(m.history().pairs_observed(), 150.0);
    }

    #[test]
    fn three_users_agreeing_move_the_prediction() {
        let mut m = with_prior();
        for user in [1000, 1001, 1002] {
            for _ in 0..3 {
                m.observe_by("resnet50", user, "lm", user, 1.1, 1.1);
            }
        }
        let p = m.predict(Some("resnet50"), Some("lm"));
        assert_eq!(p.source, PredictionSource::History);
        assert_eq!(p.describe(), format!("history:n=9:users={MIN_DISTINCT_USERS}"));
        assert!(p.slowdown_a < 1.3 && p.slowdown_a > 1.1, "towards 1.1 from 1.5: {p:?}");
        assert!(p.slowdown_b < 1.2 && p.slowdown_b > 1.1, "towards 1.1 from 1.2: {p:?}");
        // Never all the way: the prior keeps a weight however much was seen.
        for user in 2000..2100 {
            m.observe_by("resnet50", user, "lm", user, 1.1, 1.1);
        }
        let p = m.predict(Some("resnet50"), Some("lm"));
        let floor = (1.5 * PRIOR_WEIGHT + 1.1 * MAX_HISTORY_TO_PRIOR * PRIOR_WEIGHT) / (PRIOR_WEIGHT * (1.0 + MAX_HISTORY_TO_PRIOR));
        assert!((p.slowdown_a - floor).abs() < 1e-9, "{p:?}, bound {floor}");
    }

    #[test]
    fn one_outlier_user_among_honest_ones_is_bounded() {
        let honest = |m: &mut InterferenceModel| {
            for user in [1000, 1001, 1002] {
                for _ in 0..2 {
                    m.observe_by("resnet50", user, "lm", user, 2.0, 1.8);
                }
            }
        };
        let mut clean = with_prior();
        honest(&mut clean);
        let expected = clean.predict(Some("resnet50"), Some("lm"));
        for (outlier, pairs) in [(1.0, 200), (MAX_OBSERVED_SLOWDOWN, 200)] {
            let mut m = with_prior();
            honest(&mut m);
            for _ in 0..pairs {
                m.observe_by("resnet50", 666, "lm", 666, outlier, outlier);
            }
            let p = m.predict(Some("resnet50"), Some("lm"));
            // The median of four users' means moves by at most half the honest spread (none
            // here) and the outlier's weight is one user's.
            assert!((p.slowdown_a - expected.slowdown_a).abs() < 0.05, "outlier {outlier}: {p:?} against {expected:?}");
            assert!((p.slowdown_b - expected.slowdown_b).abs() < 0.05, "outlier {outlier}: {p:?} against {expected:?}");
        }
    }

    #[test]
    fn each_side_of_a_pair_is_the_testimony_of_its_own_jobs_user() {
        // Users 1..=3 run lm next to the attacker's resnet50: each lm side is honest, the
        // resnet50 side is all the attacker's.
        let mut m = with_prior();
        for user in [1, 2, 3] {
            m.observe_by("resnet50", 666, "lm", user, 1.0, 1.1);
        }
        let p = m.predict(Some("resnet50"), Some("lm"));
        assert_eq!(p.slowdown_a, 1.5, "one user's testimony for resnet50: {p:?}");
        assert!(p.slowdown_b < 1.2, "three users' testimony for lm: {p:?}");
    }

    #[test]
    fn old_state_without_users_counts_as_one_anonymous_user() {
        // energy-learning.json written before users were recorded.
        let old = r#"{"lm":{"resnet50":{"sum_slowdown_a":20.0,"sum_slowdown_b":20.0,"count":20.0}},"resnet50":{"lm":{"sum_slowdown_a":20.0,"sum_slowdown_b":20.0,"count":20.0}}}"#;
        let mut m = with_prior();
        m.set_history(serde_json::from_str(old).expect("old state parses"));
        assert_eq!(m.history().pairs_observed(), 20.0);
        let p = m.predict(Some("resnet50"), Some("lm"));
        assert_eq!((p.slowdown_a, p.source), (1.5, PredictionSource::Experiment), "one anonymous user: {p:?}");
        // With two more users it is one of three.
        for user in [1000, 1001] {
            m.observe_by("resnet50", user, "lm", user, 1.0, 1.0);
        }
        let p = m.predict(Some("resnet50"), Some("lm"));
        assert_eq!(p.source, PredictionSource::History);
        assert!(p.slowdown_a < 1.5, "{p:?}");
        // And it survives another save and load.
        let again: InterferenceHistory = serde_json::from_str(&serde_json::to_string(m.history()).expect("json")).expect("parse");
        assert_eq!(&again, m.history());
    }
}
