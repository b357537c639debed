//! GPU performance/power model: runtime and power of a training job as a function of the GPU
//! clock, per GPU type and workload class, fitted from Zeus's power-limit sweeps.
//!
//! Model, for a clock fraction `f = clock / max_clock` in (0, 1]:
//!
//! ```text
//! time_ratio(f) = beta / f + (1 - beta)          (beta: the clock-bound share of a step)
//! power_w(f)    = p_floor + (p_full - p_floor) * f^alpha
//! ```
//!
//! Zeus varied the *power limit*, not the clock. Under a limit the GPU lowers its clock until it
//! fits; a fully clock-bound job then slows by exactly `1 / f`. So the clock a limit settles at
//! is read off the most clock-sensitive workloads: `f(limit) = 1 / p90(time ratio at limit)`
//! over all sweeps of the GPU type. Those limits and clocks form the GPU's **clock ladder**, the
//! settings the planner chooses from. Per workload class, `beta` is then the least-squares fit
//! of `time_ratio - 1 = beta (1/f - 1)` over the class's measured points, and `alpha`, `p_floor`
//! the least-squares fit of the measured powers (grid over `alpha`, closed form for `p_floor`).
//!
//! This module predicts; it must never be used as the simulator's ground truth.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::data::DataError;
use crate::data::zeus::{ZeusSweep, load_zeus, zeus_sweeps};

/// Fitted curve of one workload (class) on one GPU type.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CurveParams {
    pub beta: f64,
    pub alpha: f64,
    pub power_floor_w: f64,
    pub power_full_w: f64,
}

impl CurveParams {
    /// Runtime at clock fraction `f` relative to the runtime at the full clock.
    pub fn time_ratio(&self, clock_frac: f64) -> f64 {
        let f = clock_frac.clamp(0.05, 1.0);
        self.beta / f + (1.0 - self.beta)
    }

    /// Average board power at clock fraction `f` while the job runs alone.
    pub fn power_w(&self, clock_frac: f64) -> f64 {
        let f = clock_frac.clamp(0.05, 1.0);
        self.power_floor_w + (self.power_full_w - self.power_floor_w) * f.powf(self.alpha)
    }

    /// Energy at `f` relative to the energy at the full clock (same work).
    pub fn energy_ratio(&self, clock_frac: f64) -> f64 {
        self.time_ratio(clock_frac) * self.power_w(clock_frac) / self.power_full_w.max(1e-9)
    }
}

/// A measured point normalised to its sweep: (clock fraction of its limit, time ratio, power W).
type Point = (f64, f64, f64);

/// Least-squares fit of [`CurveParams`] to measured points at known clock fractions.
pub fn fit_points(points: &[Point], power_full_w: f64) -> Option<CurveParams> {
    if points.is_empty() || power_full_w <= 0.0 {
        return None;
    }
    // beta: time_ratio - 1 = beta * (1/f - 1), through the origin.
    let (mut num, mut den) = (0.0, 0.0);
    for (f, r, _) in points {
        let x = 1.0 / f - 1.0;
        num += x * (r - 1.0);
        den += x * x;
    }
    let beta = if den > 1e-12 { (num / den).clamp(0.0, 1.0) } else { 0.0 };
    let mut best: Option<(f64, CurveParams)> = None;
    for alpha_step in 2..=80 {
        let alpha = alpha_step as f64 * 0.1;
        // p_i - p_full * x_i = p_floor * (1 - x_i), x_i = f_i^alpha.
        let (mut num, mut den) = (0.0, 0.0);
        for (f, _, p) in points {
            let x = f.powf(alpha);
            num += (p - power_full_w * x) * (1.0 - x);
            den += (1.0 - x) * (1.0 - x);
        }
        let power_floor_w = if den > 1e-12 { (num / den).clamp(0.0, power_full_w) } else { power_full_w };
        let params = CurveParams { beta, alpha, power_floor_w, power_full_w };
        let err: f64 = points.iter().map(|(f, _, p)| (params.power_w(*f) - p).powi(2)).sum();
        if best.as_ref().is_none_or(|(e, _)| err < *e - 1e-12) {
            best = Some((err, params));
        }
    }
    best.map(|(_, p)| p)
}

/// Normalise a sweep's points against its highest limit, with the ladder's clock per limit.
fn sweep_points(sweep: &ZeusSweep, ladder: &[ClockStep]) -> Option<(Vec<Point>, f64)> {
    let full = sweep.points.iter().max_by(|a, b| a.power_limit_w.total_cmp(&b.power_limit_w))?;
    if full.time_per_epoch_s <= 0.0 {
        return None;
    }
    let pts = sweep
        .points
        .iter()
        .filter_map(|p| {
            let step = ladder.iter().find(|s| (s.power_limit_w - p.power_limit_w).abs() < 0.5)?;
            Some((step.clock_frac, p.time_per_epoch_s / full.time_per_epoch_s, p.average_power_w))
        })
        .collect();
    Some((pts, full.average_power_w))
}

/// Fit one sweep on a ladder (used to check the model against single measured sweeps).
pub fn fit_sweep(sweep: &ZeusSweep, ladder: &[ClockStep]) -> Option<CurveParams> {
    let (pts, full_w) = sweep_points(sweep, ladder)?;
    fit_points(&pts, full_w)
}

/// One setting the planner may choose: a clock, and the power limit it was measured under.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClockStep {
    pub clock_mhz: u32,
    pub clock_frac: f64,
    pub power_limit_w: f64,
}

/// Prediction for one job on one GPU at one clock step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    pub time_ratio: f64,
    pub power_w: f64,
}

/// Fitted curves of one GPU type.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuCurves {
    pub gpu: String,
    /// Ascending clocks; the last step is the default (full) clock.
    pub ladder: Vec<ClockStep>,
    /// Curve per workload class (Zeus network name), fitted over all its sweeps.
    pub classes: BTreeMap<String, CurveParams>,
    /// Curve for jobs of unknown class: fitted over every sweep.
    pub generic: CurveParams,
}

impl GpuCurves {
    /// The clock ladder of a GPU type from its sweeps (see the module docs).
    pub fn ladder(sweeps: &[ZeusSweep], max_clock_mhz: u32) -> Vec<ClockStep> {
        let mut ratios: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
        for s in sweeps {
            let Some(full) = s.points.iter().max_by(|a, b| a.power_limit_w.total_cmp(&b.power_limit_w)) else { continue };
            if full.time_per_epoch_s <= 0.0 {
                continue;
            }
            for p in &s.points {
                ratios.entry(p.power_limit_w.round() as i64).or_default().push(p.time_per_epoch_s / full.time_per_epoch_s);
            }
        }
        let mut ladder: Vec<ClockStep> = ratios
            .into_iter()
            .map(|(limit, mut r)| {
                r.sort_by(f64::total_cmp);
                let p90 = r[((r.len() as f64 * 0.9).ceil() as usize).clamp(1, r.len()) - 1];
                let frac = (1.0 / p90.max(1.0)).clamp(0.05, 1.0);
                ClockStep { clock_mhz: (frac * max_clock_mhz as f64).round() as u32, clock_frac: frac, power_limit_w: limit as f64 }
            })
            .collect();
        if let Some(top) = ladder.last_mut() {
            top.clock_frac = 1.0;
            top.clock_mhz = max_clock_mhz;
        }
        // A ladder must rise strictly: drop a step not below the one above it.
        let mut rising: Vec<ClockStep> = Vec::with_capacity(ladder.len());
        for step in ladder.into_iter().rev() {
            if rising.last().is_none_or(|above: &ClockStep| step.clock_frac < above.clock_frac) {
                rising.push(step);
            }
        }
        rising.reverse();
        rising
    }

    /// Fit every sweep of one GPU type; `max_clock_mhz` turns clock fractions into MHz.
    pub fn fit(gpu: &str, sweeps: &[ZeusSweep], max_clock_mhz: u32) -> Option<GpuCurves> {
        let ladder = Self::ladder(sweeps, max_clock_mhz);
        if ladder.is_empty() {
            return None;
        }
        let mut per_class: BTreeMap<String, (Vec<Point>, Vec<f64>)> = BTreeMap::new();
        let mut all: (Vec<Point>, Vec<f64>) = (Vec::new(), Vec::new());
        for s in sweeps {
            let Some((pts, full_w)) = sweep_points(s, &ladder) else { continue };
            let e = per_class.entry(s.network.clone()).or_default();
            e.0.extend(pts.iter().copied());
            e.1.push(full_w);
            all.0.extend(pts);
            all.1.push(full_w);
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let classes = per_class.iter().filter_map(|(k, (pts, fulls))| Some((k.clone(), fit_points(pts, mean(fulls))?))).collect();
        let generic = fit_points(&all.0, mean(&all.1))?;
        Some(GpuCurves { gpu: gpu.to_string(), ladder, classes, generic })
    }

    pub fn params(&self, class: Option<&str>) -> &CurveParams {
        class.and_then(|c| self.classes.get(c)).unwrap_or(&self.generic)
    }

    pub fn predict(&self, class: Option<&str>, step: usize) -> Prediction {
        let p = self.params(class);
        let frac = self.ladder.get(step).map_or(1.0, |s| s.clock_frac);
        Prediction { time_ratio: p.time_ratio(frac), power_w: p.power_w(frac) }
    }

    pub fn default_step(&self) -> usize {
        self.ladder.len().saturating_sub(1)
    }
}

/// Curves for every GPU type the site has data for.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PerfPowerModel {
    pub gpus: Vec<GpuCurves>,
}

/// GPU types with Zeus sweeps, and their maximum graphics clock (MHz, from NVIDIA's data sheets).
pub const ZEUS_GPUS: [(&str, u32); 4] = [("v100", 1530), ("a40", 1740), ("p100", 1480), ("rtx6000", 1770)];

impl PerfPowerModel {
    /// Fit from `<data_dir>/zeus/summary_power_<gpu>.csv` for each known GPU type present.
    pub fn fit_from_dir(data_dir: &Path) -> Result<PerfPowerModel, DataError> {
        let mut gpus = Vec::new();
        for (gpu, max_clock_mhz) in ZEUS_GPUS {
            let path = data_dir.join("zeus").join(format!("summary_power_{gpu}.csv"));
            if !path.exists() {
                continue;
            }
            let rows = load_zeus(&path)?;
            if let Some(c) = GpuCurves::fit(gpu, &zeus_sweeps(&rows), max_clock_mhz) {
                gpus.push(c);
            }
        }
        Ok(PerfPowerModel { gpus })
    }

    pub fn curves(&self, gpu: &str) -> Option<&GpuCurves> {
        let gpu = gpu.to_ascii_lowercase();
        self.gpus.iter().find(|c| c.gpu == gpu)
    }
}
