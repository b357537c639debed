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
//! Synergy's CPU levels are read per GPU (every profile is normalised to 1.0 at 3 CPUs, the
//! proportional share per GPU of its 24-CPU, 8-GPU servers), on the profile of the largest GPU
//! count not above the job's that the fit has measured points up to that level. Synergy could
//! not run its multi-GPU profiles above 24 CPUs per server (those cells are 0.0): they are left
//! out of the fit, and a level beyond a profile's measured points is read on the same model's
//! profile at fewer GPUs (the 1-GPU one covers every level), never extrapolated as free.
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
    /// (model, GPU count, fitted curve, highest CPU level per GPU it was fitted on) per
    /// Synergy profile.
    curves: Vec<(String, u32, CpuCurve, f64)>,
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
            let top = points.iter().map(|p| p.0).fold(0.0_f64, f64::max);
            if let Some(c) = CpuCurve::fit(&points) {
                curves.push((model, gpus, c, top));
            }
        }
        SensitivityModel { curves }
    }

    /// The fitted curve of a profile, if the table had one.
    pub fn curve(&self, model: &str, gpus: u32) -> Option<CpuCurve> {
        self.curves.iter().find(|(m, g, _, _)| m == model && *g == gpus).map(|(_, _, c, _)| *c)
    }

    /// Does the family have a profile for a job on `gpus` GPUs?
    fn known(&self, family: &str, gpus: u32) -> bool {
        synergy_model(family).is_some_and(|model| self.curves.iter().any(|(m, g, _, _)| m == model && *g <= gpus.max(1)))
    }

    /// Curve for a family at `level` CPUs per GPU on a job of `gpus` GPUs: the profile of the
    /// largest GPU count not above the job's whose fitted points reach that level, else the
    /// one fitted the furthest (the 1-GPU profile).
    fn row(&self, family: &str, gpus: u32, level: f64) -> Option<CpuCurve> {
        let model = synergy_model(family)?;
        let rows: Vec<&(String, u32, CpuCurve, f64)> = self.curves.iter().filter(|(m, g, _, _)| m == model && *g <= gpus.max(1)).collect();
        let covered = rows.iter().filter(|r| level <= r.3).max_by_key(|r| r.1);
        let row = covered.or_else(|| rows.iter().max_by(|a, b| a.3.total_cmp(&b.3)))?;
        Some(row.2)
    }

    /// Predicted throughput with `cpus` CPUs on a job of `gpus` GPUs (the fitted curve at the
    /// CPUs per GPU; 1.0 for an unknown family).
    pub fn throughput(&self, family: Option<&str>, gpus: u32, cpus: u32) -> f64 {
        let level = (cpus as f64 / gpus.max(1) as f64).max(1.0);
        let Some(curve) = family.and_then(|f| self.row(f, gpus, level)) else { return 1.0 };
        curve.at(level)
    }

    /// Fewest CPUs in `[min, max]` that reach [`SATURATION`] of the best predicted throughput in
    /// that range, and that throughput. Unknown families get `preferred` (their request).
    pub fn choose_cpus(&self, family: Option<&str>, gpus: u32, min: u32, max: u32, preferred: u32) -> (u32, f64) {
        if !family.is_some_and(|f| self.known(f, gpus)) || max < min {
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

    fn synergy() -> SensitivityModel {
        let dir = std::env::var_os("SLURM_ENERGY_DATA").map(std::path::PathBuf::from).unwrap_or_else(|| std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")));
        SensitivityModel::new(crate::data::synergy::load_synergy(&dir.join("synergy").join("cpu_mem_sensitivity.csv")).expect("synergy data"))
    }

    #[test]
    fn unmeasured_levels_are_not_read_as_free() {
        let m = synergy();
        // Synergy measured ResNet-18 on 4 GPUs up to 6 CPUs per GPU only; its 1-GPU profile
        // says 1.5 CPUs per GPU costs about half the throughput. A 4- or 8-GPU job with half its
        // proportional share must be predicted slower, and given no fewer CPUs than its share.
        for gpus in [4, 8] {
            let (half, share) = (m.throughput(Some("ResNet-18"), gpus, gpus * 3 / 2), m.throughput(Some("ResNet-18"), gpus, gpus * 3));
            assert!(half < 0.8 * share, "{gpus} GPUs: {half} at half the share, {share} at the share");
            let (cpus, _) = m.choose_cpus(Some("ResNet-18"), gpus, gpus * 3 / 2, gpus * 3, gpus * 3);
            assert_eq!(cpus, gpus * 3, "{gpus} GPUs");
        }
        // A level above the 4-GPU profile's measured points is read on the 1-GPU profile per GPU.
        assert_eq!(m.throughput(Some("ResNet-18"), 4, 48), m.throughput(Some("ResNet-18"), 1, 12));
        // An insensitive model stays insensitive.
        assert!((m.throughput(Some("Transformer"), 8, 12) - m.throughput(Some("Transformer"), 8, 24)).abs() < 0.05);
    }
}
