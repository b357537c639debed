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
    /// (family a, family b) -> (slowdown a, slowdown b), both orders stored.
    experiments: BTreeMap<(String, String), (f64, f64)>,
    history: BTreeMap<(String, String), Observed>,
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
        let mut sums: BTreeMap<(String, String), (f64, f64, f64)> = BTreeMap::new();
        let mut all = Vec::new();
        for a in &types {
            for b in &types {
                let Some((na, nb)) = gavel.pair_normalised(gpu, a, b) else { continue };
                if !(na > 0.0 && nb > 0.0 && na.is_finite() && nb.is_finite()) {
                    continue;
                }
                let (sa, sb) = (1.0 / na, 1.0 / nb);
                all.push(sa);
                let e = sums.entry((canonical_family(a), canonical_family(b))).or_insert((0.0, 0.0, 0.0));
                e.0 += sa;
                e.1 += sb;
                e.2 += 1.0;
            }
        }
        all.sort_by(f64::total_cmp);
        let fallback_slowdown = if all.is_empty() { 2.0 } else { percentile(&all, 0.75) };
        let experiments = sums.into_iter().map(|(k, (sa, sb, n))| (k, (sa / n, sb / n))).collect();
        InterferenceModel { experiments, history: BTreeMap::new(), fallback_slowdown }
    }

    pub fn fallback_slowdown(&self) -> f64 {
        self.fallback_slowdown
    }

    /// Predicted slowdowns when a job of family `a` shares a GPU with one of family `b`.
    pub fn predict(&self, a: Option<&str>, b: Option<&str>) -> PairPrediction {
        let (Some(a), Some(b)) = (a, b) else {
            return PairPrediction { slowdown_a: self.fallback_slowdown, slowdown_b: self.fallback_slowdown, source: PredictionSource::Fallback };
        };
        let key = (canonical_family(a), canonical_family(b));
        let prior = self.experiments.get(&key).copied();
        let seen = self.history.get(&key);
        match (prior, seen) {
            (Some((pa, pb)), Some(o)) if o.count > 0.0 => {
                let n = PRIOR_WEIGHT + o.count;
                PairPrediction {
                    slowdown_a: (pa * PRIOR_WEIGHT + o.sum_slowdown_a) / n,
                    slowdown_b: (pb * PRIOR_WEIGHT + o.sum_slowdown_b) / n,
                    source: PredictionSource::History,
                }
            }
            (None, Some(o)) if o.count > 0.0 => {
                let f = self.fallback_slowdown;
                let n = PRIOR_WEIGHT + o.count;
                PairPrediction {
                    slowdown_a: (f * PRIOR_WEIGHT + o.sum_slowdown_a) / n,
                    slowdown_b: (f * PRIOR_WEIGHT + o.sum_slowdown_b) / n,
                    source: PredictionSource::History,
                }
            }
            (Some((pa, pb)), _) => PairPrediction { slowdown_a: pa, slowdown_b: pb, source: PredictionSource::Experiment },
            _ => PairPrediction { slowdown_a: self.fallback_slowdown, slowdown_b: self.fallback_slowdown, source: PredictionSource::Fallback },
        }
    }

    /// Record slowdowns measured on the cluster (a whole shared run, or its first minutes).
    pub fn observe(&mut self, a: &str, b: &str, slowdown_a: f64, slowdown_b: f64) {
        if !(slowdown_a.is_finite() && slowdown_b.is_finite() && slowdown_a > 0.0 && slowdown_b > 0.0) {
            return;
        }
        let (fa, fb) = (canonical_family(a), canonical_family(b));
        let e = self.history.entry((fa.clone(), fb.clone())).or_default();
        e.sum_slowdown_a += slowdown_a;
        e.sum_slowdown_b += slowdown_b;
        e.count += 1.0;
        let r = self.history.entry((fb, fa)).or_default();
        r.sum_slowdown_a += slowdown_b;
        r.sum_slowdown_b += slowdown_a;
        r.count += 1.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_moves_the_prediction_towards_what_was_seen() {
        let mut m = InterferenceModel::default();
        m.experiments.insert(("resnet50".into(), "lm".into()), (1.5, 1.2));
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
    fn unknown_pairs_fall_back() {
        let m = InterferenceModel::default();
        let p = m.predict(Some("x"), None);
        assert_eq!(p.source, PredictionSource::Fallback);
        assert_eq!(p.slowdown_a, 2.0);
    }
}
