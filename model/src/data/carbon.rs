//! Grid carbon-intensity traces (`carbon/<region>_ci.csv`: `Time,Carbon Intensity`, UTC civil
//! time, gCO2/kWh) as a fixed-step series.
//!
//! Only puts the recorded values on a regular grid; never interpolates or forecasts. Timestamps
//! are parsed here (no date crate): `YYYY-MM-DD HH:MM:SS`, read as UTC.

use std::path::Path;

use super::DataError;
use super::csv::{column_indices, finite, header_and_records, raw, read_text};
use super::stats::mean;

/// A carbon-intensity series on a regular grid: sample `i` holds from
/// `start_unix_s + i * step_s` to the next sample.
#[derive(Debug, Clone, PartialEq)]
pub struct CarbonTrace {
    pub start_unix_s: i64,
    /// The interval between the first two samples; the grid of the whole trace.
    pub step_s: f64,
    pub g_per_kwh: Vec<f64>,
    /// Grid slots with no sample, filled with the previous value.
    pub gaps_filled: usize,
    /// Samples between grid slots (a finer recording step, as in `gb_ci.csv` from 2020-10-31),
    /// dropped so the grid keeps the values recorded at its own instants.
    pub finer_samples_skipped: usize,
}

/// Longest series kept (samples on the grid, gaps filled): 239 years of half hours. A
/// timestamp further on is an error, not a fill of gigabytes.
const MAX_SAMPLES: usize = 1 << 22;

/// Reads a carbon-intensity CSV. The first two samples set the step; later samples must land on
/// that grid (a missing slot holds the previous value) or between grid slots at an interval that
/// divides the step (skipped). Anything else, a timestamp not after the previous one, or an
/// empty, non-numeric or negative value is an error naming its line.
pub fn load_carbon(path: &Path) -> Result<CarbonTrace, DataError> {
    parse_carbon(path, &read_text(path)?)
}

/// Parses the text of a carbon-intensity CSV as [`load_carbon`] reads it; `path` is only used
/// in error messages.
pub fn parse_carbon(path: &Path, text: &str) -> Result<CarbonTrace, DataError> {
    let ((header_line, header), records) = header_and_records(path, text)?;
    let [time_col, ci_col] =
        column_indices(path, header_line, &header, ["Time", "Carbon Intensity"])?;
    let mut trace: Option<CarbonTrace> = None;
    let mut prev_unix_s = 0i64;
    let mut step_s = 0i64;
    for (line, f) in records {
        let stamp = raw(path, line, &f, time_col, "Time")?;
        let unix_s = parse_utc(stamp)
            .ok_or_else(|| DataError::at(path, line, format!("bad timestamp {stamp:?}")))?;
        let value = finite(path, line, &f, ci_col, "Carbon Intensity")?;
        if value < 0.0 {
            return Err(DataError::at(
                path,
                line,
                format!("negative carbon intensity {value}"),
            ));
        }
        let Some(t) = trace.as_mut() else {
            trace = Some(CarbonTrace {
                start_unix_s: unix_s,
                step_s: 0.0,
                g_per_kwh: vec![value],
                gaps_filled: 0,
                finer_samples_skipped: 0,
            });
            prev_unix_s = unix_s;
            continue;
        };
        let since_prev_s = unix_s - prev_unix_s;
        if since_prev_s <= 0 {
            return Err(DataError::at(
                path,
                line,
                "timestamp not after the previous one",
            ));
        }
        if step_s == 0 {
            step_s = since_prev_s;
            t.step_s = step_s as f64;
        }
        let offset_s = unix_s - t.start_unix_s;
        if offset_s % step_s == 0 {
            let slot = (offset_s / step_s) as usize;
            if slot >= MAX_SAMPLES {
                return Err(DataError::at(
                    path,
                    line,
                    format!("more than {MAX_SAMPLES} samples of {step_s} s after the first one"),
                ));
            }
            let held = t.g_per_kwh[t.g_per_kwh.len() - 1];
            t.gaps_filled += slot - t.g_per_kwh.len();
            t.g_per_kwh.resize(slot, held);
            t.g_per_kwh.push(value);
        } else if step_s % since_prev_s == 0 {
            t.finer_samples_skipped += 1;
        } else {
            return Err(DataError::at(
                path,
                line,
                format!("{since_prev_s} s after the previous sample, off the {step_s} s grid"),
            ));
        }
        prev_unix_s = unix_s;
    }
    match trace {
        Some(t) if t.step_s > 0.0 => Ok(t),
        _ => Err(DataError::file(
            path,
            "needs at least two samples to know the step",
        )),
    }
}

impl CarbonTrace {
    /// Intensity `offset_s` after the start, wrapping around the series (so a trace recorded in
    /// another year can drive any simulation). NaN for an empty series.
    pub fn at_offset(&self, offset_s: f64) -> f64 {
        if self.g_per_kwh.is_empty()
            || self.step_s.is_nan()
            || self.step_s <= 0.0
            || !offset_s.is_finite()
        {
            return f64::NAN;
        }
        let slot = (offset_s / self.step_s).floor() as i64;
        self.g_per_kwh[slot.rem_euclid(self.g_per_kwh.len() as i64) as usize]
    }

    /// Intensity at a unix time, wrapping like [`Self::at_offset`].
    pub fn at_unix_s(&self, unix_s: i64) -> f64 {
        self.at_offset((unix_s - self.start_unix_s) as f64)
    }

    /// Mean intensity over the series (gCO2/kWh).
    pub fn mean(&self) -> f64 {
        mean(&self.g_per_kwh)
    }
}

/// Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let month_from_march = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// `YYYY-MM-DD HH:MM:SS` (or with a `T`) as UTC unix seconds; `None` if malformed.
fn parse_utc(stamp: &str) -> Option<i64> {
    let (date, time) = stamp.split_once([' ', 'T'])?;
    let mut d = date.split('-');
    let (year, month, day): (i64, u32, u32) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    let mut t = time.split(':');
    let (h, m, s): (i64, i64, i64) = (
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
    );
    let in_range = (0..=9999).contains(&year)
        && (1..=12).contains(&month)
        && (1..=31).contains(&day)
        && (0..24).contains(&h)
        && (0..60).contains(&m)
        && (0..61).contains(&s);
    if !in_range || d.next().is_some() || t.next().is_some() {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + h * 3_600 + m * 60 + s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_match_known_unix_times() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert_eq!(parse_utc("2019-12-20 00:00:00"), Some(1_576_800_000));
        assert_eq!(parse_utc("2020-02-29 12:30:15"), Some(1_582_979_415));
        assert_eq!(parse_utc("2020-13-01 00:00:00"), None);
        assert_eq!(parse_utc("2020-01-01"), None);
        assert_eq!(parse_utc("9999-12-31 23:59:59"), Some(253_402_300_799));
    }

    // Found by the carbon_csv fuzz target (fuzz/): an overflow panic and a fill that ran for
    // seconds and took gigabytes.
    #[test]
    fn far_off_timestamps_are_errors() {
        assert_eq!(parse_utc("222222222222222020-10-31 00:00:00"), None);
        assert_eq!(parse_utc("-5-01-01 00:00:00"), None);
        let path = Path::new("c.csv");
        let text = "Time,Carbon Intensity\n2020-10-31 00:00:00,100.5\n2020-10-31 00:30:00,99\n9020-10-31 01:00:00,98\n";
        let e = parse_carbon(path, text).unwrap_err().to_string();
        assert!(e.contains("more than") && e.contains("c.csv:4:"), "{e}");
    }

    #[test]
    fn at_offset_wraps_both_ways() {
        let t = CarbonTrace {
            start_unix_s: 0,
            step_s: 10.0,
            g_per_kwh: vec![1.0, 2.0, 3.0],
            gaps_filled: 0,
            finer_samples_skipped: 0,
        };
        assert_eq!(t.at_offset(0.0), 1.0);
        assert_eq!(t.at_offset(19.9), 2.0);
        assert_eq!(t.at_offset(30.0), 1.0);
        assert_eq!(t.at_offset(-1.0), 3.0);
        assert!((t.mean() - 2.0).abs() < 1e-12);
    }
}
