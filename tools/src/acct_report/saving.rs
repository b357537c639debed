//! Energy saved against running at the default clock, estimated per job from its decision
//! record and the measured clock/power curves (`model::perf_power`).
//!
//! The record says which clock the job ran at only as MHz and the slowdown the planner
//! predicted for it (`slow=`, runtime against the default clock). The curve of the GPU model
//! (`--gpu-model`, fitted to Zeus's measurements) gives the clock fraction `f` with that
//! slowdown, `time_ratio(f) = slow`, and the energy at `f` relative to the default clock,
//! `energy_ratio(f)`. The job's measured energy divided by that ratio is the estimate of what
//! it would have used at the default clock; the saving is the difference (negative when the
//! lower clock cost energy). A job at the default clock (`slow=1`) saved nothing. Jobs without
//! a record, a slowdown or a measured energy get no estimate and are counted apart.

use std::path::Path;

use model::perf_power::{CurveParams, PerfPowerModel};

/// The curve the estimates use.
pub struct SavingModel {
    pub gpu_model: String,
    curve: CurveParams,
}

impl SavingModel {
    /// Fits the curves from `data_dir` and takes `gpu_model`'s generic curve.
    pub fn load(data_dir: &Path, gpu_model: &str) -> Result<SavingModel, String> {
        let model = PerfPowerModel::fit_from_dir(data_dir).map_err(|e| format!("{}: {e}", data_dir.display()))?;
        let curves = model
            .curves(gpu_model)
            .ok_or_else(|| format!("no measured curves for GPU model {gpu_model:?} in {}", data_dir.display()))?;
        Ok(SavingModel { gpu_model: gpu_model.to_string(), curve: curves.generic })
    }

    pub fn from_curve(gpu_model: &str, curve: CurveParams) -> SavingModel {
        SavingModel { gpu_model: gpu_model.to_string(), curve }
    }

    /// Estimated energy (J) at the default clock of a job that used `measured_j` at the clock
    /// the planner predicted `slowdown` for.
    pub fn default_clock_energy_j(&self, measured_j: f64, slowdown: f64) -> Option<f64> {
        if !(measured_j.is_finite() && slowdown.is_finite() && slowdown >= 1.0) {
            return None;
        }
        let beta = self.curve.beta;
        let f = if slowdown <= 1.0 + 1e-9 || beta <= 0.0 { 1.0 } else { (beta / (slowdown - 1.0 + beta)).clamp(0.05, 1.0) };
        let ratio = self.curve.energy_ratio(f);
        (ratio.is_finite() && ratio > 0.0).then(|| measured_j / ratio)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve() -> CurveParams {
        CurveParams { beta: 0.5, alpha: 2.0, power_floor_w: 50.0, power_full_w: 250.0 }
    }

    #[test]
    fn default_clock_saves_nothing_and_a_lower_clock_is_inverted_from_its_slowdown() {
        let m = SavingModel::from_curve("t", curve());
        assert_eq!(m.default_clock_energy_j(1_000.0, 1.0), Some(1_000.0));
        // f = 0.5: time ratio 1.5, power 50 + 200 * 0.25 = 100 W, energy ratio 1.5 * 100 / 250 = 0.6.
        let e = m.default_clock_energy_j(600.0, 1.5).expect("estimate");
        assert!((e - 1_000.0).abs() < 1e-6, "{e}");
        assert_eq!(m.default_clock_energy_j(600.0, 0.5), None);
        assert_eq!(m.default_clock_energy_j(f64::NAN, 1.2), None);
    }
}
