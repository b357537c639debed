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
//! History and experiments are blended as a running mean in which the experiment counts as
//! `PRIOR_WEIGHT` observations: a few observations move the prediction, many dominate it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::data::gavel::GavelThroughputs;
use crate::workloads::canonical_family;

/// How many observations the experiment is worth.
pub const PRIOR_WEIGHT: f64 = 2.0;

/// Slowdown = runtime shared / runtime alone (>= 1 when sharing costs something).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairPrediction {
    pub slowdown_a: f64,
    pub slowdown_b: f64,
    pub source: PredictionSource,
    /// Pairs of this kind observed on the cluster (0 unless `source` is `History`).
    #[serde(default)]
    pub observed: u32,
}

impl PairPrediction {
    /// How a decision record names the source (`ipred=`): `experiment`, `fallback` or
    /// `history:n=<pairs observed>`.
    pub fn describe(&self) -> String {
        match self.source {
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

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    sum_slowdown_a: f64,
    sum_slowdown_b: f64,
    count: f64,
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
        let fallback = PairPrediction { slowdown_a: self.fallback_slowdown, slowdown_b: self.fallback_slowdown, source: PredictionSource::Fallback, observed: 0 };
        let (Some(a), Some(b)) = (a, b) else { return fallback };
        let prior = self.experiments.get(a).and_then(|row| row.get(b)).copied();
        let seen = self.history.get(a, b).filter(|o| o.count > 0.0);
        match (prior, seen) {
            (prior, Some(o)) => {
                let (pa, pb) = prior.unwrap_or((self.fallback_slowdown, self.fallback_slowdown));
                let n = PRIOR_WEIGHT + o.count;
                PairPrediction {
                    slowdown_a: (pa * PRIOR_WEIGHT + o.sum_slowdown_a) / n,
                    slowdown_b: (pb * PRIOR_WEIGHT + o.sum_slowdown_b) / n,
                    source: PredictionSource::History,
                    // A pair of one family is stored in one entry, both orders added to it.
                    observed: if a == b { (o.count / 2.0) as u32 } else { o.count as u32 },
                }
            }
            (Some((pa, pb)), None) => PairPrediction { slowdown_a: pa, slowdown_b: pb, source: PredictionSource::Experiment, observed: 0 },
            (None, None) => fallback,
        }
    }

    /// Record slowdowns measured on the cluster (a whole shared run, or its first minutes).
    pub fn observe(&mut self, a: &str, b: &str, slowdown_a: f64, slowdown_b: f64) {
        if !(slowdown_a.is_finite() && slowdown_b.is_finite() && slowdown_a > 0.0 && slowdown_b > 0.0) {
            return;
        }
        let (fa, fb) = (canonical_family(a), canonical_family(b));
        let e = self.history.0.entry(fa.clone()).or_default().entry(fb.clone()).or_default();
        e.sum_slowdown_a += slowdown_a;
        e.sum_slowdown_b += slowdown_b;
        e.count += 1.0;
        let r = self.history.0.entry(fb).or_default().entry(fa).or_default();
        r.sum_slowdown_a += slowdown_b;
        r.sum_slowdown_b += slowdown_a;
        r.count += 1.0;
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
}
