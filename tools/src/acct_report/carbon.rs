//! Carbon of a job's energy when the decision record does not carry it: through
//! [`CarbonIntensity`], from a grid-intensity file given with `--carbon FILE`.
//!
//! The file is read with `model::data::carbon` (`Time,Carbon Intensity` CSV, UTC). The job's
//! carbon is its energy spread evenly over [start, end] times the mean intensity over those
//! minutes. The trait keeps the report independent of the reader, so that the site's
//! carbon-source reader (`model::carbon_source::IntensitySeries::job_carbon_g`) can replace this
//! one without touching the aggregation.

use std::path::Path;

use model::data::carbon::{CarbonTrace, load_carbon};

/// gCO2 of `energy_j` used evenly over `[start_unix_s, end_unix_s]`; `None` when unknown.
pub trait CarbonIntensity {
    fn job_carbon_g(&self, start_unix_s: i64, end_unix_s: i64, energy_j: f64) -> Option<f64>;
}

/// Reads `--carbon FILE`.
pub fn load(path: &Path) -> Result<Box<dyn CarbonIntensity>, String> {
    let trace = load_carbon(path).map_err(|e| e.to_string())?;
    Ok(Box::new(TraceIntensity { trace }))
}

struct TraceIntensity {
    trace: CarbonTrace,
}

/// Samples of the mean intensity at most this far apart (s).
const SAMPLE_STEP_S: i64 = 60;

impl CarbonIntensity for TraceIntensity {
    fn job_carbon_g(&self, start_unix_s: i64, end_unix_s: i64, energy_j: f64) -> Option<f64> {
        if end_unix_s < start_unix_s || !energy_j.is_finite() {
            return None;
        }
        let first = self.trace.start_unix_s;
        let last = first + (self.trace.step_s * self.trace.g_per_kwh.len() as f64) as i64;
        // Only inside the recorded span: an intensity from another year is not this job's.
        if start_unix_s < first || end_unix_s > last {
            return None;
        }
        let samples = ((end_unix_s - start_unix_s) / SAMPLE_STEP_S).clamp(0, 100_000) + 1;
        let step = (end_unix_s - start_unix_s) as f64 / samples as f64;
        let mean = (0..samples)
            .map(|i| self.trace.at_unix_s(start_unix_s + ((i as f64 + 0.5) * step) as i64))
            .sum::<f64>()
            / samples as f64;
        mean.is_finite().then_some(energy_j / 3.6e6 * mean)
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
