//! A site's carbon-intensity source: a file of timestamped gCO2/kWh values that a cron job
//! refreshes, in the project's CSV format or as the saved JSON response of a public
//! grid-intensity service (format in `docs/carbon.md`).
//!
//! The result is an [`IntensitySeries`]: intervals of known intensity, each value holding from
//! its timestamp to the next one (the last one for one step of the series, or until the `to`
//! the service gave). Outside the intervals the intensity is unknown (`None`): a file that is
//! not refreshed stops giving a signal instead of giving an old one.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::data::carbon::{CarbonTrace, days_from_civil};

/// How long the last value of a series holds when nothing else says so, if the series has a
/// single point (a "latest" response): one hour, the resolution of most services.
pub const SINGLE_POINT_HOLD_S: i64 = 3_600;

/// Latest timestamp accepted (9999-12-31T23:59:59Z); earliest is the Unix epoch.
pub const MAX_UNIX_S: i64 = 253_402_300_799;
/// Longest regular grid [`IntensitySeries::to_trace`] builds (as the simulator's reader).
const MAX_TRACE_SAMPLES: i64 = 1 << 22;

/// One pound per megawatt-hour in grams per kilowatt-hour (WattTime's unit).
pub const G_PER_KWH_PER_LB_PER_MWH: f64 = 0.453_592_37;

/// Which shape the file has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceFormat {
    /// Decide from the content: JSON by its fields, anything else the CSV format.
    Auto,
    /// `timestamp,g_per_kwh` lines (also the simulator's `Time,Carbon Intensity` files).
    Csv,
    /// The UK National Grid carbon-intensity API: `data[].from/to/intensity.actual|forecast`.
    NationalGridUk,
    /// Electricity Maps: `carbonIntensity`/`datetime`, alone or in a `history`/`forecast` list.
    ElectricityMaps,
    /// WattTime v3: `data[].point_time/value` in lbs CO2/MWh (`meta.units`).
    WattTime,
}

impl SourceFormat {
    pub fn parse(name: &str) -> Option<SourceFormat> {
        Some(match name {
            "auto" => SourceFormat::Auto,
            "csv" => SourceFormat::Csv,
            "national-grid-uk" => SourceFormat::NationalGridUk,
            "electricity-maps" => SourceFormat::ElectricityMaps,
            "watttime" => SourceFormat::WattTime,
            _ => return None,
        })
    }

    pub const NAMES: &'static str = "auto, csv, national-grid-uk, electricity-maps, watttime";
}

/// Why a source file could not be read: the file, the line (CSV) or entry (JSON), the reason.
#[derive(Debug, Clone, PartialEq)]
pub struct CarbonSourceError {
    pub path: PathBuf,
    /// 1-based line of a CSV file; `None` for the whole file or a JSON entry.
    pub line: Option<usize>,
    pub reason: String,
}

impl CarbonSourceError {
    fn file(path: &Path, reason: impl Into<String>) -> Self {
        CarbonSourceError { path: path.to_path_buf(), line: None, reason: reason.into() }
    }
    fn at(path: &Path, line: usize, reason: impl Into<String>) -> Self {
        CarbonSourceError { path: path.to_path_buf(), line: Some(line), reason: reason.into() }
    }
}

impl fmt::Display for CarbonSourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.path.display(), l, self.reason),
            None => write!(f, "{}: {}", self.path.display(), self.reason),
        }
    }
}

impl std::error::Error for CarbonSourceError {}

/// Known intensity from `start_unix_s` (inclusive) to `end_unix_s` (exclusive).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub start_unix_s: i64,
    pub end_unix_s: i64,
    pub g_per_kwh: f64,
}

/// Grid carbon intensity over time: sorted, non-overlapping intervals.
#[derive(Debug, Clone, PartialEq)]
pub struct IntensitySeries {
    intervals: Vec<Interval>,
}

impl IntensitySeries {
    /// Reads a source file, detecting its format.
    pub fn from_file(path: &Path) -> Result<IntensitySeries, CarbonSourceError> {
        Self::from_file_as(path, SourceFormat::Auto)
    }

    /// Reads a source file in the given format.
    pub fn from_file_as(path: &Path, format: SourceFormat) -> Result<IntensitySeries, CarbonSourceError> {
        let text = std::fs::read_to_string(path).map_err(|e| CarbonSourceError::file(path, format!("cannot read: {e}")))?;
        Self::parse(path, &text, format)
    }

    /// Parses the text of a source file; `path` only names it in errors.
    pub fn parse(path: &Path, text: &str, format: SourceFormat) -> Result<IntensitySeries, CarbonSourceError> {
        let format = match format {
            SourceFormat::Auto => detect(text),
            f => f,
        };
        let series = match format {
            SourceFormat::Csv | SourceFormat::Auto => parse_csv(path, text)?,
            json_format => {
                let v: Value = serde_json::from_str(text).map_err(|e| CarbonSourceError::at(path, e.line(), format!("not JSON: {e}")))?;
                match json_format {
                    SourceFormat::NationalGridUk => parse_national_grid(path, &v)?,
                    SourceFormat::ElectricityMaps => parse_electricity_maps(path, &v)?,
                    _ => parse_watttime(path, &v)?,
                }
            }
        };
        if series.intervals.is_empty() {
            return Err(CarbonSourceError::file(path, "no intensity values"));
        }
        Ok(series)
    }

    /// From points, each holding until the next; the last for the median step (or `last_hold_s`).
    pub fn from_points(points: &[(i64, f64)], last_hold_s: Option<i64>) -> IntensitySeries {
        let mut gaps: Vec<i64> = points.windows(2).map(|w| w[1].0.saturating_sub(w[0].0)).filter(|&g| g > 0).collect();
        gaps.sort_unstable();
        let step = last_hold_s.filter(|&s| s > 0).or_else(|| gaps.get(gaps.len() / 2).copied()).unwrap_or(SINGLE_POINT_HOLD_S);
        let intervals = points
            .iter()
            .enumerate()
            .map(|(i, &(t, g))| Interval { start_unix_s: t, end_unix_s: points.get(i + 1).map_or(t.saturating_add(step), |n| n.0), g_per_kwh: g })
            .filter(|iv| iv.end_unix_s > iv.start_unix_s)
            .collect();
        IntensitySeries { intervals }
    }

    pub fn intervals(&self) -> &[Interval] {
        &self.intervals
    }

    /// First and last covered instants (end exclusive).
    pub fn span_unix_s(&self) -> Option<(i64, i64)> {
        Some((self.intervals.first()?.start_unix_s, self.intervals.last()?.end_unix_s))
    }

    /// The typical step between values (median interval length, s).
    pub fn step_s(&self) -> i64 {
        let mut lens: Vec<i64> = self.intervals.iter().map(|i| i.end_unix_s - i.start_unix_s).collect();
        lens.sort_unstable();
        lens.get(lens.len() / 2).copied().unwrap_or(SINGLE_POINT_HOLD_S)
    }

    fn index_at(&self, unix_s: i64) -> Option<usize> {
        let i = self.intervals.partition_point(|iv| iv.start_unix_s <= unix_s).checked_sub(1)?;
        (unix_s < self.intervals[i].end_unix_s).then_some(i)
    }

    /// Intensity (gCO2/kWh) at a unix time; `None` where the series says nothing.
    pub fn intensity_at(&self, unix_s: i64) -> Option<f64> {
        self.index_at(unix_s).map(|i| self.intervals[i].g_per_kwh)
    }

    /// Mean intensity over `[start, end)`, weighted by time; `None` unless the series covers
    /// all of it. An empty interval takes the intensity at its start.
    pub fn mean_over(&self, start_unix_s: i64, end_unix_s: i64) -> Option<f64> {
        if end_unix_s <= start_unix_s {
            return self.intensity_at(start_unix_s);
        }
        let mut i = self.index_at(start_unix_s)?;
        let mut t = start_unix_s;
        let mut g_s = 0.0;
        while t < end_unix_s {
            let iv = self.intervals.get(i)?;
            if iv.start_unix_s > t {
                return None; // a gap
            }
            let upto = iv.end_unix_s.min(end_unix_s);
            g_s += iv.g_per_kwh * (upto - t) as f64;
            t = upto;
            i += 1;
        }
        Some(g_s / (end_unix_s - start_unix_s) as f64)
    }

    /// Carbon (g) of `energy_j` spread evenly over `[start, end]`; `None` unless the series
    /// covers the whole interval.
    pub fn job_carbon_g(&self, start_unix_s: i64, end_unix_s: i64, energy_j: f64) -> Option<f64> {
        if !energy_j.is_finite() || energy_j < 0.0 {
            return None;
        }
        Some(energy_j / 3.6e6 * self.mean_over(start_unix_s, end_unix_s)?)
    }

    /// The series on a regular grid of `step_s`, from its first instant, for the simulator's
    /// [`crate::carbon::CarbonSignal`]; a slot in a gap holds the previous value.
    pub fn to_trace(&self, step_s: i64) -> Option<CarbonTrace> {
        let (start, end) = self.span_unix_s()?;
        let step = step_s.max(1);
        if end.saturating_sub(start) / step > MAX_TRACE_SAMPLES {
            return None;
        }
        let mut g = Vec::new();
        let mut gaps = 0;
        let mut t = start;
        while t < end {
            match self.intensity_at(t) {
                Some(v) => g.push(v),
                None => {
                    gaps += 1;
                    g.push(g.last().copied().unwrap_or(self.intervals[0].g_per_kwh));
                }
            }
            t += step;
        }
        Some(CarbonTrace { start_unix_s: start, step_s: step as f64, g_per_kwh: g, gaps_filled: gaps, finer_samples_skipped: 0 })
    }
}

fn detect(text: &str) -> SourceFormat {
    let Ok(v) = serde_json::from_str::<Value>(text) else { return SourceFormat::Csv };
    if v.get("history").is_some() || v.get("forecast").is_some() || v.get("carbonIntensity").is_some() {
        return SourceFormat::ElectricityMaps;
    }
    let first = v.get("data").and_then(Value::as_array).and_then(|a| a.first());
    if first.is_some_and(|e| e.get("point_time").is_some()) || v.get("meta").is_some() {
        return SourceFormat::WattTime;
    }
    SourceFormat::NationalGridUk
}

fn parse_csv(path: &Path, text: &str) -> Result<IntensitySeries, CarbonSourceError> {
    let mut points: Vec<(i64, f64)> = Vec::new();
    let mut header_seen = false;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let fields: Vec<&str> = content.split(',').map(str::trim).collect();
        if fields.len() != 2 {
            return Err(CarbonSourceError::at(path, line, format!("expected 2 fields `timestamp,g_per_kwh`, found {}", fields.len())));
        }
        if !header_seen && points.is_empty() && fields[1].parse::<f64>().is_err() && parse_timestamp(fields[0]).is_none() {
            header_seen = true; // a header line such as `timestamp,g_per_kwh`
            continue;
        }
        let t = parse_timestamp(fields[0]).ok_or_else(|| CarbonSourceError::at(path, line, format!("bad timestamp {:?} (unix seconds or RFC 3339)", fields[0])))?;
        let g = intensity_value(fields[1]).map_err(|r| CarbonSourceError::at(path, line, r))?;
        if let Some(&(prev, _)) = points.last()
            && t <= prev
        {
            return Err(CarbonSourceError::at(path, line, "timestamp not after the previous one"));
        }
        points.push((t, g));
    }
    Ok(IntensitySeries::from_points(&points, None))
}

fn intensity_value(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(g) if g.is_finite() && g >= 0.0 => Ok(g),
        Ok(g) => Err(format!("intensity {g} is not a finite value >= 0")),
        Err(_) => Err(format!("intensity {s:?} is not a number")),
    }
}

fn json_number(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64).filter(|g| g.is_finite() && *g >= 0.0)
}

fn json_time(path: &Path, what: &str, v: Option<&Value>) -> Result<i64, CarbonSourceError> {
    let s = v.and_then(Value::as_str).ok_or_else(|| CarbonSourceError::file(path, format!("{what}: missing timestamp")))?;
    parse_timestamp(s).ok_or_else(|| CarbonSourceError::file(path, format!("{what}: bad timestamp {s:?}")))
}

/// Sorts points by time; two values for one instant are an error.
fn sorted_points(path: &Path, mut points: Vec<(i64, f64)>) -> Result<Vec<(i64, f64)>, CarbonSourceError> {
    points.sort_by_key(|p| p.0);
    if let Some(w) = points.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(CarbonSourceError::file(path, format!("two values for the instant {}", w[0].0)));
    }
    Ok(points)
}

/// `{"data": [{"from", "to", "intensity": {"forecast", "actual"}}]}`; the regional endpoints
/// nest one more `data` list per region (the first region is read).
fn parse_national_grid(path: &Path, v: &Value) -> Result<IntensitySeries, CarbonSourceError> {
    let mut list = v.get("data").and_then(Value::as_array).ok_or_else(|| CarbonSourceError::file(path, "national-grid-uk: no `data` list"))?;
    if let Some(inner) = list.first().and_then(|r| r.get("data")).and_then(Value::as_array) {
        list = inner;
    }
    let mut intervals = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let what = format!("national-grid-uk: data[{i}]");
        let from = json_time(path, &format!("{what}.from"), e.get("from"))?;
        let to = json_time(path, &format!("{what}.to"), e.get("to"))?;
        if to <= from {
            return Err(CarbonSourceError::file(path, format!("{what}: `to` not after `from`")));
        }
        let intensity = e.get("intensity");
        let g = json_number(intensity.and_then(|x| x.get("actual")))
            .or_else(|| json_number(intensity.and_then(|x| x.get("forecast"))))
            .ok_or_else(|| CarbonSourceError::file(path, format!("{what}: neither intensity.actual nor intensity.forecast is a number >= 0")))?;
        intervals.push(Interval { start_unix_s: from, end_unix_s: to, g_per_kwh: g });
    }
    intervals.sort_by_key(|iv| iv.start_unix_s);
    if let Some(w) = intervals.windows(2).find(|w| w[1].start_unix_s < w[0].end_unix_s) {
        return Err(CarbonSourceError::file(path, format!("national-grid-uk: intervals overlap at {}", w[1].start_unix_s)));
    }
    Ok(IntensitySeries { intervals })
}

/// A single `{"carbonIntensity", "datetime"}` or a `history` / `forecast` list of them.
fn parse_electricity_maps(path: &Path, v: &Value) -> Result<IntensitySeries, CarbonSourceError> {
    let (name, entries): (&str, Vec<&Value>) = match v.get("history").or_else(|| v.get("forecast")).and_then(Value::as_array) {
        Some(list) => (if v.get("history").is_some() { "history" } else { "forecast" }, list.iter().collect()),
        None => ("response", vec![v]),
    };
    let mut points = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let what = format!("electricity-maps: {name}[{i}]");
        let t = json_time(path, &format!("{what}.datetime"), e.get("datetime"))?;
        match e.get("carbonIntensity") {
            Some(Value::Null) => continue, // an hour the service has no estimate for
            g => {
                let g = json_number(g).ok_or_else(|| CarbonSourceError::file(path, format!("{what}: carbonIntensity is not a number >= 0")))?;
                points.push((t, g));
            }
        }
    }
    Ok(IntensitySeries::from_points(&sorted_points(path, points)?, None))
}

/// `{"data": [{"point_time", "value"}], "meta": {"units", "data_point_period_seconds"}}`.
fn parse_watttime(path: &Path, v: &Value) -> Result<IntensitySeries, CarbonSourceError> {
    let meta = v.get("meta");
    let units = meta.and_then(|m| m.get("units")).and_then(Value::as_str).unwrap_or("lbs_co2_per_mwh");
    let to_g_per_kwh = match units {
        "lbs_co2_per_mwh" | "lbs/MWh" => G_PER_KWH_PER_LB_PER_MWH,
        "g_co2_per_kwh" | "gCO2/kWh" => 1.0,
        other => return Err(CarbonSourceError::file(path, format!("watttime: units {other:?} are not an emission rate (need lbs_co2_per_mwh)"))),
    };
    let period_s = meta.and_then(|m| m.get("data_point_period_seconds")).and_then(Value::as_i64);
    let list = v.get("data").and_then(Value::as_array).ok_or_else(|| CarbonSourceError::file(path, "watttime: no `data` list"))?;
    let mut points = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let what = format!("watttime: data[{i}]");
        let t = json_time(path, &format!("{what}.point_time"), e.get("point_time"))?;
        let value = json_number(e.get("value")).ok_or_else(|| CarbonSourceError::file(path, format!("{what}: value is not a number >= 0")))?;
        points.push((t, value * to_g_per_kwh));
    }
    Ok(IntensitySeries::from_points(&sorted_points(path, points)?, period_s))
}

/// Unix seconds (an integer), or an RFC 3339 / ISO 8601 date-time: `YYYY-MM-DD`, `T` or a
/// space, `HH:MM[:SS[.fraction]]`, then `Z`, `±HH:MM` or nothing (UTC).
pub fn parse_timestamp(s: &str) -> Option<i64> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().ok().filter(|t| (0..=MAX_UNIX_S).contains(t));
    }
    let (date, rest) = s.split_once(['T', 't', ' '])?;
    let mut d = date.split('-');
    let (year, month, day): (i64, u32, u32) = (d.next()?.parse().ok()?, d.next()?.parse().ok()?, d.next()?.parse().ok()?);
    if d.next().is_some() || !(0..=9999).contains(&year) || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let (clock, offset_s) = if let Some(c) = rest.strip_suffix(['Z', 'z']) {
        (c, 0)
    } else if let Some(pos) = rest.rfind(['+', '-']) {
        let (c, off) = rest.split_at(pos);
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let (oh, om) = off[1..].split_once(':').unwrap_or((&off[1..], "0"));
        let (oh, om): (i64, i64) = (oh.parse().ok()?, om.parse().ok()?);
        if oh > 23 || om > 59 {
            return None;
        }
        (c, sign * (oh * 3600 + om * 60))
    } else {
        (rest, 0)
    };
    let mut t = clock.split(':');
    let h: i64 = t.next()?.parse().ok()?;
    let m: i64 = t.next()?.parse().ok()?;
    let sec: i64 = match t.next() {
        Some(x) => x.split('.').next()?.parse().ok()?,
        None => 0,
    };
    if t.next().is_some() || !(0..24).contains(&h) || !(0..60).contains(&m) || !(0..61).contains(&sec) {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + h * 3_600 + m * 60 + sec - offset_s).filter(|t| (0..=MAX_UNIX_S).contains(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("site.csv")
    }

    proptest::proptest! {
        // No input makes the reader panic, whatever format it is read as.
        #[test]
        fn any_text_is_a_value_or_an_error(text in "\\PC{0,200}", n in 0usize..5) {
            let format = [SourceFormat::Auto, SourceFormat::Csv, SourceFormat::NationalGridUk, SourceFormat::ElectricityMaps, SourceFormat::WattTime][n];
            if let Ok(s) = IntensitySeries::parse(p(), &text, format) {
                let (a, b) = s.span_unix_s().expect("non-empty");
                let _ = s.mean_over(a, b);
                let _ = s.to_trace(s.step_s());
            }
        }

        #[test]
        fn extreme_numbers_are_handled(t0 in 0i64..=MAX_UNIX_S, t1 in 0i64..=MAX_UNIX_S, g in 0.0f64..1e300, hold in proptest::prelude::any::<i64>()) {
            let mut pts = vec![(t0, g), (t1, g)];
            pts.sort_by_key(|p| p.0);
            pts.dedup_by_key(|p| p.0);
            let s = IntensitySeries::from_points(&pts, Some(hold));
            if let Some((a, b)) = s.span_unix_s() {
                let _ = s.job_carbon_g(a, b, 1e30);
                let _ = s.to_trace(1);
            }
        }
    }

    #[test]
    fn out_of_range_times_are_errors() {
        assert_eq!(parse_timestamp("-1"), None);
        assert_eq!(parse_timestamp("99999999999999999999"), None);
        assert_eq!(parse_timestamp("253402300800"), None);
        let e = IntensitySeries::parse(p(), "9223372036854775807,1\n", SourceFormat::Csv).unwrap_err();
        assert!(e.to_string().contains(":1: bad timestamp"), "{e}");
    }

    #[test]
    fn timestamps_in_every_accepted_form() {
        assert_eq!(parse_timestamp("1576800000"), Some(1_576_800_000));
        assert_eq!(parse_timestamp("2019-12-20T00:00:00Z"), Some(1_576_800_000));
        assert_eq!(parse_timestamp("2019-12-20T00:00Z"), Some(1_576_800_000));
        assert_eq!(parse_timestamp("2019-12-20 00:00:00"), Some(1_576_800_000));
        assert_eq!(parse_timestamp("2019-12-20T01:30:00.250+01:30"), Some(1_576_800_000));
        assert_eq!(parse_timestamp("2019-12-19T19:00:00-05:00"), Some(1_576_800_000));
        assert_eq!(parse_timestamp("2019-13-20T00:00:00Z"), None);
        assert_eq!(parse_timestamp("yesterday"), None);
        assert_eq!(parse_timestamp("2019-12-20T25:00Z"), None);
    }

    #[test]
    fn csv_with_comments_header_and_both_timestamp_forms() {
        let text = "# refreshed by cron\ntimestamp,g_per_kwh\n2026-01-01T00:00:00Z,200 # dirty\n\n1767227400,100\n2026-01-01T01:00:00Z,50\n";
        let s = IntensitySeries::parse(p(), text, SourceFormat::Auto).expect("valid file");
        let t0 = 1_767_225_600;
        assert_eq!(s.intensity_at(t0 - 1), None);
        assert_eq!(s.intensity_at(t0), Some(200.0));
        assert_eq!(s.intensity_at(t0 + 1799), Some(200.0));
        assert_eq!(s.intensity_at(t0 + 1800), Some(100.0));
        // The last value holds for one step (30 min), then nothing is known.
        assert_eq!(s.intensity_at(t0 + 3600 + 1799), Some(50.0));
        assert_eq!(s.intensity_at(t0 + 5400), None);
        assert_eq!(s.step_s(), 1800);
    }

    #[test]
    fn csv_errors_name_file_line_and_reason() {
        let e = IntensitySeries::parse(p(), "timestamp,g_per_kwh\n100,5\n50,4\n", SourceFormat::Csv).unwrap_err();
        assert_eq!(e.to_string(), "site.csv:3: timestamp not after the previous one");
        let e = IntensitySeries::parse(p(), "100,5\n200,-4\n", SourceFormat::Csv).unwrap_err();
        assert!(e.to_string().starts_with("site.csv:2: intensity -4"), "{e}");
        let e = IntensitySeries::parse(p(), "100,5\n2026-02-30X,4\n", SourceFormat::Csv).unwrap_err();
        assert!(e.to_string().starts_with("site.csv:2: bad timestamp"), "{e}");
        let e = IntensitySeries::parse(p(), "100,5,7\n", SourceFormat::Csv).unwrap_err();
        assert!(e.to_string().contains(":1: expected 2 fields"), "{e}");
        let e = IntensitySeries::parse(p(), "# nothing yet\n", SourceFormat::Csv).unwrap_err();
        assert_eq!(e.to_string(), "site.csv: no intensity values");
    }

    #[test]
    fn job_carbon_integrates_over_the_job() {
        let s = IntensitySeries::from_points(&[(0, 100.0), (3600, 300.0), (7200, 0.0)], None);
        // 2 kWh over the first two hours: 1 kWh at 100 + 1 kWh at 300.
        let g = s.job_carbon_g(0, 7200, 7.2e6).expect("covered");
        assert!((g - 400.0).abs() < 1e-9, "{g}");
        // Half an hour into each hour.
        let g = s.job_carbon_g(1800, 5400, 3.6e6).expect("covered");
        assert!((g - 200.0).abs() < 1e-9, "{g}");
        assert_eq!(s.job_carbon_g(-10, 100, 1.0), None, "before the series");
        assert_eq!(s.job_carbon_g(7000, 11_000, 1.0), None, "after the series");
        assert_eq!(s.job_carbon_g(0, 10, f64::NAN), None);
        assert_eq!(s.job_carbon_g(100, 100, 3.6e6), Some(100.0));
    }

    #[test]
    fn simulator_traces_load_through_the_same_reader() {
        let text = "Time,Carbon Intensity\n2020-01-01 00:00:00,120\n2020-01-01 00:30:00,80\n";
        let s = IntensitySeries::parse(Path::new("gb_ci.csv"), text, SourceFormat::Auto).expect("valid");
        let tr = s.to_trace(1800).expect("non-empty");
        assert_eq!(tr.g_per_kwh, vec![120.0, 80.0]);
        assert_eq!(tr.start_unix_s, 1_577_836_800);
    }

    fn fixture(name: &str) -> (PathBuf, String) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/carbon").join(name);
        let text = std::fs::read_to_string(&path).expect("fixture present");
        (path, text)
    }

    #[test]
    fn national_grid_uk_prefers_actual_then_forecast() {
        let (path, text) = fixture("national-grid-uk.json");
        let s = IntensitySeries::parse(&path, &text, SourceFormat::Auto).expect("valid");
        let t0 = parse_timestamp("2026-03-02T10:00Z").expect("ts");
        assert_eq!(s.intensity_at(t0), Some(181.0)); // actual
        assert_eq!(s.intensity_at(t0 + 1800), Some(142.0)); // actual null -> forecast
        assert_eq!(s.intensity_at(t0 + 3600 + 1799), Some(97.0));
        assert_eq!(s.intensity_at(t0 + 5400), None); // `to` of the last entry
    }

    #[test]
    fn national_grid_uk_regional_shape() {
        let (path, text) = fixture("national-grid-uk-regional.json");
        let s = IntensitySeries::parse(&path, &text, SourceFormat::NationalGridUk).expect("valid");
        assert_eq!(s.intervals().len(), 2);
        assert_eq!(s.intervals()[1].g_per_kwh, 55.0);
    }

    #[test]
    fn electricity_maps_latest_and_history() {
        let (path, text) = fixture("electricity-maps-history.json");
        let s = IntensitySeries::parse(&path, &text, SourceFormat::Auto).expect("valid");
        let t0 = parse_timestamp("2026-03-02T08:00:00.000Z").expect("ts");
        assert_eq!(s.intensity_at(t0), Some(412.0));
        assert_eq!(s.intensity_at(t0 + 2 * 3600), Some(377.0));
        assert_eq!(s.intensity_at(t0 + 3 * 3600), None, "one hour after the last");
        let (path, text) = fixture("electricity-maps-latest.json");
        let s = IntensitySeries::parse(&path, &text, SourceFormat::Auto).expect("valid");
        assert_eq!(s.intervals().len(), 1);
        assert_eq!(s.intervals()[0].end_unix_s - s.intervals()[0].start_unix_s, SINGLE_POINT_HOLD_S);
    }

    #[test]
    fn watttime_converts_pounds_per_megawatt_hour() {
        let (path, text) = fixture("watttime-forecast.json");
        let s = IntensitySeries::parse(&path, &text, SourceFormat::Auto).expect("valid");
        let t0 = parse_timestamp("2026-03-02T10:00:00+00:00").expect("ts");
        let g = s.intensity_at(t0).expect("covered");
        assert!((g - 1000.0 * G_PER_KWH_PER_LB_PER_MWH).abs() < 1e-9, "{g}");
        // 5-minute points, the last one held for meta.data_point_period_seconds.
        assert!(s.intensity_at(t0 + 3 * 300 - 1).is_some());
        assert_eq!(s.intensity_at(t0 + 3 * 300), None);
        let bad = text.replace("lbs_co2_per_mwh", "percentile");
        let e = IntensitySeries::parse(&path, &bad, SourceFormat::WattTime).unwrap_err();
        assert!(e.to_string().contains("percentile"), "{e}");
    }

    #[test]
    fn json_errors_name_the_entry() {
        let text = r#"{"data":[{"from":"2026-03-02T10:00Z","to":"2026-03-02T10:30Z","intensity":{"forecast":null,"actual":null}}]}"#;
        let e = IntensitySeries::parse(p(), text, SourceFormat::Auto).unwrap_err();
        assert!(e.to_string().contains("data[0]"), "{e}");
        let e = IntensitySeries::parse(p(), "{\"history\": [", SourceFormat::ElectricityMaps).unwrap_err();
        assert!(e.to_string().contains("not JSON"), "{e}");
    }
}
