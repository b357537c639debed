//! CPU sensitivity of training jobs (Synergy): how much faster a job runs with more CPUs than
//! its GPU-proportional share, and the CPU count to give it.
//!
//! The planner predicts from a **fitted curve**, not from the measured table: for each Synergy
//! profile (model, GPU count) a two-parameter "linear then flat" curve
//! `t(c) = min(plateau, slope * c)` is fitted by least squares on half of the measured CPU
//! levels (the 1st, 3rd, 5th, ... of each profile, see [`planner_level`]); the other levels are
//! never seen by the fit. So the planner errs where a real pipeline bends differently from a
//! straight line, and a simulator that scores it against the measured profile (with each job's
//! own variation on top) scores it against data it was not built from.
//!
//! A job of unknown family is taken as insensitive (gets its request). Memory is not traded:
//! Slurm jobs keep their `--mem`.

use crate::data::synergy::SynergyTable;
use crate::workloads::synergy_model;

/// A job within this fraction of its best throughput is considered saturated.
pub const SATURATION: f64 = 0.98;
/// Memory level used when reading the measured profile (GB); generous, so memory is not the
/// limit.
const LOOKUP_MEM_GB: f64 = 1.0e6;

/// Is the `index`-th measured CPU level of a profile (ascending) one the planner's fit sees?
/// The even positions (1st, 3rd, ...) are the planner's; the odd ones are held out.
pub fn planner_level(index: usize) -> bool {
    index.is_multiple_of(2)
}

/// `t(c) = min(plateau, slope * c)`: normalised throughput at `c` CPUs (at the profile's level).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuCurve {
    pub slope: f64,
    pub plateau: f64,
}

impl CpuCurve {
    pub fn at(&self, cpus: f64) -> f64 {
        (self.slope * cpus).min(self.plateau).max(0.0)
    }

    /// Least-squares fit over `(cpus, throughput)` points by a grid over both parameters (a
    /// few thousand evaluations per profile). `None` without points.
    pub fn fit(points: &[(f64, f64)]) -> Option<CpuCurve> {
        if points.is_empty() {
            return None;
        }
        let top = points.iter().map(|p| p.1).fold(0.0_f64, f64::max);
        let mut best: Option<(f64, CpuCurve)> = None;
        // Slopes from 0.01 to 2 per CPU, plateaus from 0.2 to the highest measurement (+10 %).
        for si in 1..=200 {
            let slope = si as f64 * 0.01;
            for pi in 0..=120 {
                let plateau = 0.2 + (top * 1.1 - 0.2).max(0.0) * pi as f64 / 120.0;
                let c = CpuCurve { slope, plateau };
                let err: f64 = points.iter().map(|(x, y)| (c.at(*x) - y).powi(2)).sum();
                if best.is_none_or(|(e, _)| err < e - 1e-12) {
                    best = Some((err, c));
                }
            }
        }
        best.map(|(_, c)| c)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SensitivityModel {
    /// (model, GPU count, fitted curve) per Synergy profile.
    curves: Vec<(String, u32, CpuCurve)>,
}

impl SensitivityModel {
    /// Fit one curve per profile of the table, on the planner's half of its CPU levels
    /// (levels Synergy could not run, throughput 0, are left out).
    pub fn new(table: SynergyTable) -> SensitivityModel {
        let mut curves = Vec::new();
        for (model, gpus) in table.models() {
            let points: Vec<(f64, f64)> = table
                .cpu_levels(&model, gpus)
                .into_iter()
                .enumerate()
                .filter(|(i, _)| planner_level(*i))
                .filter_map(|(_, c)| table.throughput(&model, gpus, c, LOOKUP_MEM_GB).map(|t| (c as f64, t)))
                .filter(|(_, t)| *t > 0.0)
                .collect();
            if let Some(c) = CpuCurve::fit(&points) {
                curves.push((model, gpus, c));
            }
        }
        SensitivityModel { curves }
    }

    /// The fitted curve of a profile, if the table had one.
    pub fn curve(&self, model: &str, gpus: u32) -> Option<CpuCurve> {
        self.curves.iter().find(|(m, g, _)| m == model && *g == gpus).map(|(_, _, c)| *c)
    }

    /// Curve for a family and GPU count, and the factor that turns the job's CPU count into the
    /// profile's CPU level.
    fn row(&self, family: &str, gpus: u32) -> Option<(CpuCurve, f64)> {
        let model = synergy_model(family)?;
        let (_, key, curve) = self.curves.iter().filter(|(m, g, _)| m == model && *g <= gpus.max(1)).max_by_key(|(_, g, _)| *g)?;
        Some((*curve, *key as f64 / gpus.max(1) as f64))
    }

    /// Predicted throughput with `cpus` CPUs (the fitted curve; 1.0 for an unknown family).
    pub fn throughput(&self, family: Option<&str>, gpus: u32, cpus: u32) -> f64 {
        let Some((curve, scale)) = family.and_then(|f| self.row(f, gpus)) else { return 1.0 };
        curve.at((cpus as f64 * scale).max(1.0))
    }

    /// Fewest CPUs in `[min, max]` that reach [`SATURATION`] of the best predicted throughput in
    /// that range, and that throughput. Unknown families get `preferred` (their request).
    pub fn choose_cpus(&self, family: Option<&str>, gpus: u32, min: u32, max: u32, preferred: u32) -> (u32, f64) {
        if family.and_then(|f| self.row(f, gpus)).is_none() || max < min {
            return (preferred.clamp(min, max.max(min)), 1.0);
        }
        let best = (min..=max).map(|c| self.throughput(family, gpus, c)).fold(0.0_f64, f64::max);
        for c in min..=max {
            let t = self.throughput(family, gpus, c);
            if t >= SATURATION * best {
                return (c, t);
            }
        }
        (max, best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_recovers_a_linear_then_flat_profile_and_bends_where_data_does_not() {
        let truth = CpuCurve { slope: 0.33, plateau: 2.0 };
        let pts: Vec<(f64, f64)> = [1.0, 3.0, 5.0, 9.0, 24.0].iter().map(|c| (*c, truth.at(*c))).collect();
        let fit = CpuCurve::fit(&pts).expect("fit");
        assert!((fit.slope - 0.33).abs() < 0.011 && (fit.plateau - 2.0).abs() < 0.05, "{fit:?}");
        // A profile that saturates early (ResNet-50-like) is fitted with one straight bend.
        let pts = [(1.0, 0.4), (3.0, 1.0), (5.0, 1.15), (9.0, 1.15), (24.0, 1.15)];
        let fit = CpuCurve::fit(&pts).expect("fit");
        assert!((fit.at(24.0) - 1.15).abs() < 0.05 && fit.at(1.0) < 0.6, "{fit:?}");
        assert!(CpuCurve::fit(&[]).is_none());
        assert!(planner_level(0) && !planner_level(1) && planner_level(2));
    }
}
