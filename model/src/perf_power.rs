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
//! **Units.** Zeus measured under power limits, so each ladder step keeps the limit it was
//! measured at ([`ClockStep::power_limit_w`]) beside the clock it maps to. On a GPU whose
//! control is its power limit (`gpu_control::clock_control`), a step is applied as that limit,
//! relative to the ladder's top ([`ClockStep::power_limit_frac`]) times the GPU's default limit;
//! the clock of the step is used only where a clock control (locked or application clocks) is.
//!
//! **A100 and H100** have no sweeps in the data. They stand in with the A40's ([`STAND_INS`]):
//! the A40 is the only Ampere GPU measured, the architecture of the A100 and the closest to the
//! H100 (Hopper keeps Ampere's clock/voltage management; nothing newer was measured). The stand-in
//! keeps the A40's clock fractions, slow-down curves and power shape, and scales its powers and
//! limits by the ratio of board powers (A100-SXM4 400 W, H100-SXM5 700 W, A40 300 W), so a
//! step is the same fraction of the board's limit; clocks come from the target's own maximum.
//! What this does not capture: HBM (A100, H100) instead of GDDR6 (A40) changes the share of
//! memory power, so memory-bound classes will save less on them than predicted.
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
    /// The power limit the step was measured at (the data's unit), in W of the measured GPU.
    pub power_limit_w: f64,
    /// The most any measured workload of the GPU type slowed at this step or any above it
    /// (time at the step's limit over time at the ladder's top, the largest over every sweep;
    /// 0: unknown). What a job lowered to this step may lose whatever its class predicts:
    /// power-cap ceilings extend time limits by it ([`ClockStep::worst_slowdown`]).
    #[serde(default)]
    pub worst_time_ratio: f64,
}

impl ClockStep {
    /// The worst slowdown of a job at this step relative to the default clock: the measured
    /// worst ([`ClockStep::worst_time_ratio`]), and never less than a fully clock-bound job's
    /// (`1 / clock_frac`, what the step's clock alone implies).
    pub fn worst_slowdown(&self) -> f64 {
        let clock_bound = if self.clock_frac > 0.0 { 1.0 / self.clock_frac } else { 1.0 };
        self.worst_time_ratio.max(clock_bound).max(1.0)
    }

    /// The step's limit as a fraction of the ladder's top limit (`ladder_top_w`): what it is on
    /// another board of the same type (`fraction x that board's default limit`).
    pub fn power_limit_frac(&self, ladder_top_w: f64) -> f64 {
        if ladder_top_w > 0.0 { (self.power_limit_w / ladder_top_w).clamp(0.0, 1.0) } else { 1.0 }
    }
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
                let worst = r.last().copied().unwrap_or(1.0).max(1.0);
                let frac = (1.0 / p90.max(1.0)).clamp(0.05, 1.0);
                ClockStep { clock_mhz: (frac * max_clock_mhz as f64).round() as u32, clock_frac: frac, power_limit_w: limit as f64, worst_time_ratio: worst }
            })
            .collect();
        if let Some(top) = ladder.last_mut() {
            top.clock_frac = 1.0;
            top.clock_mhz = max_clock_mhz;
        }
        // A lower limit never speeds a job: the worst at a step is at least the worst above it
        // (the measured maxima are noisy from one limit to the next).
        let mut worst_above: f64 = 1.0;
        for step in ladder.iter_mut().rev() {
            worst_above = worst_above.max(step.worst_time_ratio);
            step.worst_time_ratio = worst_above;
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

    /// The ladder's top power limit (W): what a step's limit is relative to.
    pub fn top_power_limit_w(&self) -> f64 {
        self.ladder.last().map_or(0.0, |s| s.power_limit_w)
    }

    /// These curves standing in for GPU type `gpu` (module docs): same clock fractions and
    /// slow-downs, clocks from `max_clock_mhz`, powers and limits times `power_scale`.
    pub fn stand_in(&self, gpu: &str, max_clock_mhz: u32, power_scale: f64) -> GpuCurves {
        let scale = |p: &CurveParams| CurveParams { power_floor_w: p.power_floor_w * power_scale, power_full_w: p.power_full_w * power_scale, ..*p };
        GpuCurves {
            gpu: gpu.to_string(),
            ladder: self
                .ladder
                .iter()
                .map(|s| ClockStep { clock_mhz: (s.clock_frac * f64::from(max_clock_mhz)).round() as u32, power_limit_w: s.power_limit_w * power_scale, ..*s })
                .collect(),
            classes: self.classes.iter().map(|(k, p)| (k.clone(), scale(p))).collect(),
            generic: scale(&self.generic),
        }
    }
}

/// A GPU type without sweeps of its own: (type, measured type standing in, its maximum
/// graphics clock MHz, its board power W, the measured type's board power W).
pub const STAND_INS: [(&str, &str, u32, f64, f64); 2] = [("a100", "a40", 1410, 400.0, 300.0), ("h100", "a40", 1980, 700.0, 300.0)];

/// Curves for every GPU type the site has data for.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PerfPowerModel {
    pub gpus: Vec<GpuCurves>,
}

/// GPU types with Zeus sweeps, and their maximum graphics clock (MHz, from NVIDIA's data sheets).
pub const ZEUS_GPUS: [(&str, u32); 4] = [("v100", 1530), ("a40", 1740), ("p100", 1480), ("rtx6000", 1770)];

impl PerfPowerModel {
    /// Fit from `<data_dir>/zeus/summary_power_<gpu>.csv` for each known GPU type present, and
    /// the [`STAND_INS`] of those types.
    pub fn fit_from_dir(data_dir: &Path) -> Result<PerfPowerModel, DataError> {
        let mut gpus: Vec<GpuCurves> = Vec::new();
        for (gpu, max_clock_mhz) in ZEUS_GPUS {
            if let Some(c) = fit_measured(data_dir, gpu, max_clock_mhz)? {
                gpus.push(c);
            }
        }
        for (gpu, source, max_clock_mhz, board_w, source_board_w) in STAND_INS {
            let stand_in = gpus.iter().find(|c| c.gpu == source).map(|c| c.stand_in(gpu, max_clock_mhz, board_w / source_board_w));
            gpus.extend(stand_in);
        }
        Ok(PerfPowerModel { gpus })
    }

    /// The curves of one GPU type: fitted from its own sweeps, or its stand-in's
    /// ([`STAND_INS`]); `None` when the data has neither.
    pub fn fit_type(data_dir: &Path, gpu_type: &str) -> Result<Option<GpuCurves>, DataError> {
        if let Some((gpu, max_clock_mhz)) = ZEUS_GPUS.iter().copied().find(|(g, _)| *g == gpu_type) {
            return fit_measured(data_dir, gpu, max_clock_mhz);
        }
        let Some((gpu, source, max_clock_mhz, board_w, source_board_w)) = STAND_INS.iter().copied().find(|(g, ..)| *g == gpu_type) else {
            return Ok(None);
        };
        let source_clock = ZEUS_GPUS.iter().find(|(g, _)| *g == source).map_or(max_clock_mhz, |(_, c)| *c);
        Ok(fit_measured(data_dir, source, source_clock)?.map(|c| c.stand_in(gpu, max_clock_mhz, board_w / source_board_w)))
    }

    /// GPU types the model knows, measured or standing in (`v100`, ..., `a100`, `h100`).
    pub fn known_types() -> impl Iterator<Item = &'static str> {
        ZEUS_GPUS.iter().map(|(g, _)| *g).chain(STAND_INS.iter().map(|(g, ..)| *g))
    }

    pub fn curves(&self, gpu: &str) -> Option<&GpuCurves> {
        let gpu = gpu.to_ascii_lowercase();
        self.gpus.iter().find(|c| c.gpu == gpu)
    }
}

/// The curves of a measured type from `<data_dir>/zeus/summary_power_<gpu>.csv`, if present.
fn fit_measured(data_dir: &Path, gpu: &str, max_clock_mhz: u32) -> Result<Option<GpuCurves>, DataError> {
    let path = data_dir.join("zeus").join(format!("summary_power_{gpu}.csv"));
    if !path.exists() {
        return Ok(None);
    }
    let rows = load_zeus(&path)?;
    Ok(GpuCurves::fit(gpu, &zeus_sweeps(&rows), max_clock_mhz))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::default_data_dir;
    use crate::data::zeus::ZeusPoint;

    #[test]
    fn a100_and_h100_stand_in_with_the_a40_sweeps_scaled_to_their_boards() {
        let dir = default_data_dir();
        let model = PerfPowerModel::fit_from_dir(&dir).expect("zeus data");
        let a40 = model.curves("a40").expect("a40 measured");
        for (gpu, max_clock_mhz, board_w) in [("a100", 1410, 400.0), ("h100", 1980, 700.0)] {
            let c = model.curves(gpu).unwrap_or_else(|| panic!("{gpu} stands in"));
            let scale = board_w / 300.0;
            assert_eq!(c.ladder.len(), a40.ladder.len(), "{gpu}");
            for (s, m) in c.ladder.iter().zip(&a40.ladder) {
                assert_eq!(s.clock_frac, m.clock_frac);
                assert!((s.power_limit_w - m.power_limit_w * scale).abs() < 1e-9);
                assert!((s.power_limit_frac(c.top_power_limit_w()) - m.power_limit_frac(a40.top_power_limit_w())).abs() < 1e-12);
            }
            assert_eq!(c.ladder.last().map(|s| s.clock_mhz), Some(max_clock_mhz));
            // Same slow-down, power times the board ratio, so the same energy-optimal step.
            for step in 0..c.ladder.len() {
                let (p, q) = (c.predict(None, step), a40.predict(None, step));
                assert!((p.time_ratio - q.time_ratio).abs() < 1e-12);
                assert!((p.power_w - q.power_w * scale).abs() < 1e-9);
            }
            let own = PerfPowerModel::fit_type(&dir, gpu).expect("read").expect("stand-in");
            assert_eq!(&own, c, "fit_type and fit_from_dir agree for {gpu}");
        }
        assert_eq!(PerfPowerModel::fit_type(&dir, "b200").expect("read"), None);
        assert!(PerfPowerModel::known_types().any(|t| t == "h100"));
    }

    #[test]
    fn a_steps_worst_case_is_the_slowest_measured_workload_at_or_above_its_limit() {
        let sweep = |network: &str, times: [f64; 3]| ZeusSweep {
            dataset: "d".into(),
            network: network.into(),
            batch_size: 32,
            optimizer: "adam".into(),
            points: [100.0, 150.0, 200.0].iter().zip(times).map(|(&l, t)| ZeusPoint { power_limit_w: l, time_per_epoch_s: t, average_power_w: l * 0.8 }).collect(),
        };
        // Nine workloads slow 1.3 at 100 W and 1.1 at 150 W (the p90 the clocks are read from);
        // the tenth, 1.5 at 100 W and 1.6 at 150 W (the noise of one measurement).
        let mut sweeps: Vec<ZeusSweep> = (0..9).map(|k| sweep(&format!("n{k}"), [13.0, 11.0, 10.0])).collect();
        sweeps.push(sweep("odd", [15.0, 16.0, 10.0]));
        let ladder = GpuCurves::ladder(&sweeps, 1000);
        assert_eq!(ladder.len(), 3, "{ladder:?}");
        assert!((ladder[1].clock_frac - 1.0 / 1.1).abs() < 1e-9, "{ladder:?}");
        assert!((ladder[1].worst_time_ratio - 1.6).abs() < 1e-9, "the slowest measured, not the p90: {ladder:?}");
        assert!((ladder[0].worst_time_ratio - 1.6).abs() < 1e-9, "a lower limit is never faster: {ladder:?}");
        assert_eq!(ladder[2].worst_time_ratio, 1.0);
        for s in &ladder {
            assert!(s.worst_slowdown() >= 1.0 / s.clock_frac - 1e-9, "never below the clock bound: {s:?}");
        }
        // Unknown (an old ladder without it): the clock bound.
        let s = ClockStep { clock_mhz: 800, clock_frac: 0.8, power_limit_w: 150.0, worst_time_ratio: 0.0 };
        assert!((s.worst_slowdown() - 1.25).abs() < 1e-9);
        // On the measured V100 sweeps the worst case lies above every class's prediction.
        let model = PerfPowerModel::fit_from_dir(&default_data_dir()).expect("zeus data");
        let v100 = model.curves("v100").expect("v100 measured");
        for (step, s) in v100.ladder.iter().enumerate() {
            for class in v100.classes.keys() {
                assert!(s.worst_slowdown() >= v100.predict(Some(class), step).time_ratio - 1e-9, "{class} at {s:?}");
            }
        }
    }

    #[test]
    fn a_steps_limit_is_a_fraction_of_the_ladder_top() {
        let s = ClockStep { clock_mhz: 900, clock_frac: 0.6, power_limit_w: 150.0, worst_time_ratio: 0.0 };
        assert_eq!(s.power_limit_frac(250.0), 0.6);
        assert_eq!(s.power_limit_frac(0.0), 1.0);
        assert_eq!(s.power_limit_frac(100.0), 1.0, "never above the top");
    }
}
