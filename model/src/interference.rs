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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PredictionSource {
    History,
    Experiment,
    Fallback,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Observed {
    sum_slowdown_a: f64,
    sum_slowdown_b: f64,
    count: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InterferenceModel {
    /// family a -> family b -> (slowdown a, slowdown b), both orders stored.
    experiments: BTreeMap<String, BTreeMap<String, (f64, f64)>>,
    history: BTreeMap<String, BTreeMap<String, Observed>>,
    fallback_slowdown: f64,
}

impl Default for InterferenceModel {
    fn default() -> Self {
        // Without any data: assume time slicing halves each job's speed (no gain from sharing),
        // which makes the planner share only where it has learnt better.
        InterferenceModel { experiments: BTreeMap::new(), history: BTreeMap::new(), fallback_slowdown: 2.0 }
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
        InterferenceModel { experiments, history: BTreeMap::new(), fallback_slowdown }
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
        let fallback = PairPrediction { slowdown_a: self.fallback_slowdown, slowdown_b: self.fallback_slowdown, source: PredictionSource::Fallback };
        let (Some(a), Some(b)) = (a, b) else { return fallback };
        let prior = self.experiments.get(a).and_then(|row| row.get(b)).copied();
        let seen = self.history.get(a).and_then(|row| row.get(b)).filter(|o| o.count > 0.0);
        match (prior, seen) {
            (prior, Some(o)) => {
                let (pa, pb) = prior.unwrap_or((self.fallback_slowdown, self.fallback_slowdown));
                let n = PRIOR_WEIGHT + o.count;
                PairPrediction {
                    slowdown_a: (pa * PRIOR_WEIGHT + o.sum_slowdown_a) / n,
                    slowdown_b: (pb * PRIOR_WEIGHT + o.sum_slowdown_b) / n,
                    source: PredictionSource::History,
                }
            }
            (Some((pa, pb)), None) => PairPrediction { slowdown_a: pa, slowdown_b: pb, source: PredictionSource::Experiment },
            (None, None) => fallback,
        }
    }

    /// Record slowdowns measured on the cluster (a whole shared run, or its first minutes).
    pub fn observe(&mut self, a: &str, b: &str, slowdown_a: f64, slowdown_b: f64) {
        if !(slowdown_a.is_finite() && slowdown_b.is_finite() && slowdown_a > 0.0 && slowdown_b > 0.0) {
            return;
        }
        let (fa, fb) = (canonical_family(a), canonical_family(b));
        let e = self.history.entry(fa.clone()).or_default().entry(fb.clone()).or_default();
        e.sum_slowdown_a += slowdown_a;
        e.sum_slowdown_b += slowdown_b;
        e.count += 1.0;
        let r = self.history.entry(fb).or_default().entry(fa).or_default();
        r.sum_slowdown_a += slowdown_b;
        r.sum_slowdown_b += slowdown_a;
        r.count += 1.0;
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
    fn unknown_pairs_fall_back() {
        let m = InterferenceModel::default();
        let p = m.predict(Some("x"), None);
        assert_eq!(p.source, PredictionSource::Fallback);
        assert_eq!(p.slowdown_a, 2.0);
    }
}
