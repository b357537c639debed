//! Carbon of a job's energy when the decision record does not carry it: through
//! [`CarbonIntensity`], from a grid-intensity file given with `--carbon FILE`.
//!
//! The file is read with `model::carbon_source` (the site's CSV, or a saved UK National Grid,
//! Electricity Maps or WattTime response; docs/carbon.md), the reader sched/energy uses. The
//! job's carbon is its energy spread evenly over [start, end] times the mean intensity over that
//! span (`IntensitySeries::job_carbon_g`); unknown where the file has no intensity.

use std::path::Path;

use model::carbon_source::IntensitySeries;

/// gCO2 of `energy_j` used evenly over `[start_unix_s, end_unix_s]`; `None` when unknown.
pub trait CarbonIntensity {
    fn job_carbon_g(&self, start_unix_s: i64, end_unix_s: i64, energy_j: f64) -> Option<f64>;
}

/// Reads `--carbon FILE` (any format `model::carbon_source` reads).
pub fn load(path: &Path) -> Result<Box<dyn CarbonIntensity>, String> {
    Ok(Box::new(IntensitySeries::from_file(path).map_err(|e| e.to_string())?))
}

impl CarbonIntensity for IntensitySeries {
    fn job_carbon_g(&self, start_unix_s: i64, end_unix_s: i64, energy_j: f64) -> Option<f64> {
        IntensitySeries::job_carbon_g(self, start_unix_s, end_unix_s, energy_j)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carbon_is_energy_times_mean_intensity_inside_the_trace_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("ci.csv");
        // 100 g/kWh for the first half hour, 300 for the second.
        std::fs::write(&path, "Time,Carbon Intensity\n2026-01-01 00:00:00,100\n2026-01-01 00:30:00,300\n").expect("write");
        let c = load(&path).expect("loads");
        let t0 = 1_767_225_600; // 2026-01-01T00:00:00Z
        let kwh = 3.6e6;
        assert!((c.job_carbon_g(t0, t0 + 1_800, kwh).unwrap_or(0.0) - 100.0).abs() < 1e-9);
        let both = c.job_carbon_g(t0, t0 + 3_600, kwh).unwrap_or(0.0);
        assert!((both - 200.0).abs() < 5.0, "{both}");
        assert_eq!(c.job_carbon_g(t0 - 10, t0 + 10, kwh), None, "before the trace");
        assert_eq!(c.job_carbon_g(t0 + 7_200, t0 + 7_300, kwh), None, "after the trace");
    }
}
