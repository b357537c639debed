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
//! Zeus varied the *power limit*, not the clock; under a power limit the GPU lowers its clock
//! until it fits, so each measured point is (time, power) at an unknown clock. [`fit_sweep`]
//! recovers the clock of each point from its time ratio for a given `beta`, then fits `alpha` and
//! `p_floor` to the measured powers by least squares, and keeps the `beta` with the smallest
//! power error. The mean recovered clock fraction at each power limit across all sweeps of a GPU
//! type gives that type's clock ladder: the clocks the planner chooses from.
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

/// Result of fitting one sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct FittedSweep {
    pub network: String,
    pub params: CurveParams,
    /// (power limit in W, recovered clock fraction) for each measured point.
    pub clock_fracs: Vec<(f64, f64)>,
    /// Root-mean-square error of the fitted power (W).
    pub power_rms_w: f64,
}

/// Clock fraction at which `params` predicts the time ratio `ratio`.
fn clock_frac_for_time_ratio(beta: f64, ratio: f64) -> f64 {
    if ratio <= 1.0 || beta <= 0.0 {
        return 1.0;
    }
    (beta / (ratio - 1.0 + beta)).clamp(0.05, 1.0)
}

/// Fit [`CurveParams`] to one Zeus sweep (see the module docs). Deterministic grid search.
pub fn fit_sweep(sweep: &ZeusSweep) -> Option<FittedSweep> {
    let full = sweep.points.iter().max_by(|a, b| a.power_limit_w.total_cmp(&b.power_limit_w))?;
    if full.time_per_epoch_s <= 0.0 || full.average_power_w <= 0.0 {
        return None;
    }
    let p_full = full.average_power_w;
    let mut best: Option<(f64, CurveParams)> = None;
    for beta_step in 1..=50 {
        let beta = beta_step as f64 * 0.02;
        let fracs: Vec<f64> = sweep
            .points
            .iter()
            .map(|p| clock_frac_for_time_ratio(beta, p.time_per_epoch_s / full.time_per_epoch_s))
            .collect();
        for alpha_step in 5..=40 {
            let alpha = alpha_step as f64 * 0.1;
            // Closed-form least squares for p_floor given f and alpha:
            // p_i - p_full * x_i = p_floor * (1 - x_i), x_i = f_i^alpha.
            let (mut num, mut den) = (0.0, 0.0);
            for (p, f) in sweep.points.iter().zip(&fracs) {
                let x = f.powf(alpha);
                num += (p.average_power_w - p_full * x) * (1.0 - x);
                den += (1.0 - x) * (1.0 - x);
            }
            let p_floor = if den > 1e-12 { (num / den).clamp(0.0, p_full) } else { p_full * 0.3 };
            let params = CurveParams { beta, alpha, power_floor_w: p_floor, power_full_w: p_full };
            let err: f64 = sweep
                .points
                .iter()
                .zip(&fracs)
                .map(|(p, f)| (params.power_w(*f) - p.average_power_w).powi(2))
                .sum();
            if best.as_ref().is_none_or(|(e, _)| err < *e - 1e-12) {
                best = Some((err, params));
            }
        }
    }
    let (err, params) = best?;
    let clock_fracs = sweep
        .points
        .iter()
        .map(|p| {
            (p.power_limit_w, clock_frac_for_time_ratio(params.beta, p.time_per_epoch_s / full.time_per_epoch_s))
        })
        .collect();
    Some(FittedSweep {
        network: sweep.network.clone(),
        params,
        clock_fracs,
        power_rms_w: (err / sweep.points.len() as f64).sqrt(),
    })
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
    /// Curve per workload class (Zeus network name), median of its sweeps' parameters.
    pub classes: BTreeMap<String, CurveParams>,
    /// Curve for jobs of unknown class: median over every sweep.
    pub generic: CurveParams,
    pub sweeps: Vec<FittedSweep>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { 0.5 * (v[n / 2 - 1] + v[n / 2]) }
}

fn median_params(ps: &[CurveParams]) -> CurveParams {
    CurveParams {
        beta: median(ps.iter().map(|p| p.beta).collect()),
        alpha: median(ps.iter().map(|p| p.alpha).collect()),
        power_floor_w: median(ps.iter().map(|p| p.power_floor_w).collect()),
        power_full_w: median(ps.iter().map(|p| p.power_full_w).collect()),
    }
}

impl GpuCurves {
    /// Fit every sweep of one GPU type; `max_clock_mhz` turns clock fractions into MHz.
    pub fn fit(gpu: &str, sweeps: &[ZeusSweep], max_clock_mhz: u32) -> Option<GpuCurves> {
        let fitted: Vec<FittedSweep> = sweeps.iter().filter_map(fit_sweep).collect();
        if fitted.is_empty() {
            return None;
        }
        let mut by_limit: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
        for f in &fitted {
            for (limit, frac) in &f.clock_fracs {
                by_limit.entry(limit.round() as i64).or_default().push(*frac);
            }
        }
        let mut ladder: Vec<ClockStep> = by_limit
            .iter()
            .map(|(limit, fracs)| {
                let frac = (fracs.iter().sum::<f64>() / fracs.len() as f64).clamp(0.05, 1.0);
                ClockStep { clock_mhz: (frac * max_clock_mhz as f64).round() as u32, clock_frac: frac, power_limit_w: *limit as f64 }
            })
            .collect();
        // The top step is the default clock by definition.
        if let Some(top) = ladder.last_mut() {
            top.clock_frac = 1.0;
            top.clock_mhz = max_clock_mhz;
        }
        // A clock ladder must be monotonic; drop steps that are not strictly below the next.
        let mut monotonic: Vec<ClockStep> = Vec::with_capacity(ladder.len());
        for step in ladder.into_iter().rev() {
            if monotonic.last().is_none_or(|next: &ClockStep| step.clock_frac < next.clock_frac) {
                monotonic.push(step);
            }
        }
        monotonic.reverse();
        let mut per_class: BTreeMap<String, Vec<CurveParams>> = BTreeMap::new();
        for f in &fitted {
            per_class.entry(f.network.clone()).or_default().push(f.params);
        }
        let classes = per_class.iter().map(|(k, v)| (k.clone(), median_params(v))).collect();
        let all: Vec<CurveParams> = fitted.iter().map(|f| f.params).collect();
        Some(GpuCurves { gpu: gpu.to_string(), ladder: monotonic, classes, generic: median_params(&all), sweeps: fitted })
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
