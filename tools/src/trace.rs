//! Job traces for `slurm-energy simulate`: reads a trace file into a list of jobs sorted by
//! submit time, ready for the planner.
//!
//! Two formats are accepted (see `docs/trace-format.md`):
//! - **Philly**: Microsoft's Philly trace as cleaned by AdaptDL, header exactly
//!   `timestamp,duration,num_gpus,gpu_time,cluster`.
//! - **Generic**: any header holding `submit_time_s,duration_s,num_gpus` (any order) plus the
//!   optional columns `job_type,user,num_cpus,mem_gb,priority`.
//!
//! This module only reads and checks what is in the file. It never fills in missing values
//! (job type, CPUs, memory, priority): that is the simulator's job, so that the defaults live
//! in one place and are seeded there. It never panics on bad input: every problem comes back as
//! a [`TraceError`] naming the file, the 1-based line and what was expected.

use std::borrow::Cow;
use std::fmt;
use std::path::{Path, PathBuf};

/// One job of a trace, as read from the file.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    /// 1-based line of the job in the file (blank lines count), for error messages downstream.
    pub line: usize,
    /// Submit time relative to the earliest submit in the file, so always `>= 0`.
    pub submit_time_s: f64,
    /// Run time of the job when it ran alone on its GPUs (`> 0`).
    pub duration_s: f64,
    /// GPUs requested (`> 0`).
    pub num_gpus: u32,
    /// Workload name (e.g. one of Gavel's job types); `None` when the file does not say.
    pub job_type: Option<String>,
    /// Owner of the job. For Philly this is the virtual cluster, the closest thing the trace
    /// has to an account.
    pub user: Option<String>,
    /// CPUs requested; `None` when the file does not say.
    pub num_cpus: Option<u32>,
    /// Host memory requested in GB; `None` when the file does not say.
    pub mem_gb: Option<f64>,
    /// Scheduling priority (higher is more urgent); `None` when the file does not say.
    pub priority: Option<u32>,
}

/// Which layout the file had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// `timestamp,duration,num_gpus,gpu_time,cluster` (Philly, as cleaned by AdaptDL).
    Philly,
    /// `submit_time_s,duration_s,num_gpus[,job_type,user,num_cpus,mem_gb,priority]`.
    Generic,
}

/// A parsed trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub format: TraceFormat,
    /// Sorted by `submit_time_s`; jobs submitted at the same time keep their file order.
    pub jobs: Vec<TraceJob>,
    /// Philly only: unix time (UTC) of the earliest timestamp in the file, i.e. of
    /// `submit_time_s == 0`. `None` for generic traces, whose times are already relative.
    pub start_unix_s: Option<i64>,
}

/// A trace that could not be read. `line` is 1-based; 0 means the file as a whole (it could
/// not be read, or it is empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    pub path: PathBuf,
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.path.display(), self.line, self.reason)
    }
}

impl std::error::Error for TraceError {}

const PHILLY_HEADER: &str = "timestamp,duration,num_gpus,gpu_time,cluster";
const PHILLY_FIELDS: usize = 5;

/// Columns of the generic format, required ones first.
const GENERIC_COLUMNS: [&str; 8] = [
    "submit_time_s",
    "duration_s",
    "num_gpus",
    "job_type",
    "user",
    "num_cpus",
    "mem_gb",
    "priority",
];
const GENERIC_REQUIRED: usize = 3;

/// Reads and parses the trace at `path`. See [`parse_trace`].
pub fn load_trace(path: &Path, max_jobs: Option<usize>) -> Result<Trace, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|e| TraceError {
        path: path.to_path_buf(),
        line: 0,
        reason: format!("cannot read the trace: {e}"),
    })?;
    parse_trace(&text, path, max_jobs)
}

/// Parses the text of a trace; `path` is only used in error messages.
///
/// The format is chosen from the header (the first non-blank line). Blank lines, a trailing
/// newline, CRLF line ends, a UTF-8 byte order mark and spaces around fields are accepted.
/// Fields are separated by commas; a field may be wrapped in double quotes (with `""` for a
/// quote inside), which is how spreadsheet tools write names holding a comma.
///
/// `max_jobs = Some(n)` keeps the first `n` jobs *by submit time* (after sorting), not the
/// first `n` lines of the file: the Philly file is not in time order. The whole file is still
/// checked, so a bad row after the cut is still an error.
pub fn parse_trace(text: &str, path: &Path, max_jobs: Option<usize>) -> Result<Trace, TraceError> {
    let err = |line: usize, reason: String| TraceError {
        path: path.to_path_buf(),
        line,
        reason,
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((header_line, header)) = lines.next() else {
        return Err(err(0, "no jobs: the file is empty".to_string()));
    };

    let mut fields: Vec<Cow<'_, str>> = Vec::with_capacity(GENERIC_COLUMNS.len());
    let header_trimmed = header.trim();
    let (format, mut jobs, start_unix_s) = if header_trimmed == PHILLY_HEADER {
        let mut rows: Vec<(i64, TraceJob)> = Vec::new();
        for (line, text) in lines {
            let row = parse_philly_row(text, &mut fields).map_err(|r| err(line, r))?;
            rows.push((row.0, row.1.into_job(line)));
        }
        let Some(start) = rows.iter().map(|(t, _)| *t).min() else {
            return Err(err(
                header_line,
                "no jobs: the file has a header but no rows".into(),
            ));
        };
        let jobs = rows
            .into_iter()
            .map(|(t, mut job)| {
                // Exact: trace spans are far below 2^53 s.
                job.submit_time_s = (t - start) as f64;
                job
            })
            .collect();
        (TraceFormat::Philly, jobs, Some(start))
    } else {
        let columns =
            parse_generic_header(header_trimmed, &mut fields).map_err(|r| err(header_line, r))?;
        let mut jobs: Vec<TraceJob> = Vec::new();
        for (line, text) in lines {
            let job = parse_generic_row(text, &columns, &mut fields).map_err(|r| err(line, r))?;
            jobs.push(job.into_job(line));
        }
        if jobs.is_empty() {
            return Err(err(
                header_line,
                "no jobs: the file has a header but no rows".into(),
            ));
        }
        let start = jobs
            .iter()
            .map(|j| j.submit_time_s)
            .fold(f64::INFINITY, f64::min);
        for job in &mut jobs {
            job.submit_time_s -= start;
        }
        (TraceFormat::Generic, jobs, None)
    };

    // `sort_by` is stable, so simultaneous submits keep their file order.
    jobs.sort_by(|a, b| a.submit_time_s.total_cmp(&b.submit_time_s));
    if let Some(n) = max_jobs {
        jobs.truncate(n);
    }
    Ok(Trace {
        format,
        jobs,
        start_unix_s,
    })
}

/// A row's values before its line number and relative time are known.
struct Row {
    submit_time_s: f64,
    duration_s: f64,
    num_gpus: u32,
    job_type: Option<String>,
    user: Option<String>,
    num_cpus: Option<u32>,
    mem_gb: Option<f64>,
    priority: Option<u32>,
}

impl Row {
    fn into_job(self, line: usize) -> TraceJob {
        TraceJob {
            line,
            submit_time_s: self.submit_time_s,
            duration_s: self.duration_s,
            num_gpus: self.num_gpus,
            job_type: self.job_type,
            user: self.user,
            num_cpus: self.num_cpus,
            mem_gb: self.mem_gb,
            priority: self.priority,
        }
    }
}

fn parse_philly_row<'a>(
    text: &'a str,
    fields: &mut Vec<Cow<'a, str>>,
) -> Result<(i64, Row), String> {
    split_fields(text, fields)?;
    if fields.len() != PHILLY_FIELDS {
        return Err(format!(
            "expected {PHILLY_FIELDS} fields ({PHILLY_HEADER}), found {}",
            fields.len()
        ));
    }
    let t = parse_timestamp(&fields[0]).ok_or_else(|| {
        format!(
            "timestamp: expected a UTC date and time \"YYYY-MM-DD HH:MM:SS\", found \"{}\"",
            fields[0]
        )
    })?;
    let duration_s = positive_f64("duration", &fields[1])?;
    let num_gpus = positive_u32("num_gpus", &fields[2])?;
    // gpu_time (= duration x num_gpus) is redundant and not used.
    let user = non_empty(&fields[4]);
    Ok((
        t,
        Row {
            submit_time_s: 0.0,
            duration_s,
            num_gpus,
            job_type: None,
            user,
            num_cpus: None,
            mem_gb: None,
            priority: None,
        },
    ))
}

/// For each column of the file, its index in [`GENERIC_COLUMNS`].
fn parse_generic_header<'a>(
    header: &'a str,
    fields: &mut Vec<Cow<'a, str>>,
) -> Result<Vec<usize>, String> {
    split_fields(header, fields)?;
    let mut columns = Vec::with_capacity(fields.len());
    for name in fields.iter() {
        let Some(idx) = GENERIC_COLUMNS.iter().position(|c| *c == name.as_ref()) else {
            return Err(format!(
                "unknown column \"{name}\"; allowed columns are {} (the first three are \
                 required), or the Philly header \"{PHILLY_HEADER}\"",
                GENERIC_COLUMNS.join(", ")
            ));
        };
        if columns.contains(&idx) {
            return Err(format!("column \"{name}\" appears twice"));
        }
        columns.push(idx);
    }
    for (idx, name) in GENERIC_COLUMNS.iter().enumerate().take(GENERIC_REQUIRED) {
        if !columns.contains(&idx) {
            return Err(format!(
                "missing required column \"{name}\"; a generic trace needs {}",
                GENERIC_COLUMNS[..GENERIC_REQUIRED].join(",")
            ));
        }
    }
    Ok(columns)
}

fn parse_generic_row<'a>(
    text: &'a str,
    columns: &[usize],
    fields: &mut Vec<Cow<'a, str>>,
) -> Result<Row, String> {
    split_fields(text, fields)?;
    if fields.len() != columns.len() {
        return Err(format!(
            "expected {} fields (one per header column), found {}",
            columns.len(),
            fields.len()
        ));
    }
    let mut row = Row {
        submit_time_s: 0.0,
        duration_s: 0.0,
        num_gpus: 0,
        job_type: None,
        user: None,
        num_cpus: None,
        mem_gb: None,
        priority: None,
    };
    for (field, &col) in fields.iter().zip(columns) {
        let name = GENERIC_COLUMNS[col];
        let field = field.as_ref();
        match col {
            0 => row.submit_time_s = non_negative_f64(name, field)?,
            1 => row.duration_s = positive_f64(name, field)?,
            2 => row.num_gpus = positive_u32(name, field)?,
            3 => row.job_type = non_empty(field),
            4 => row.user = non_empty(field),
            5 => row.num_cpus = optional(field, |f| positive_u32(name, f))?,
            6 => row.mem_gb = optional(field, |f| non_negative_f64(name, f))?,
            _ => row.priority = optional(field, |f| non_negative_u32(name, f))?,
        }
    }
    Ok(row)
}

/// Splits one CSV line into `fields` (cleared first), trimming spaces around each field.
/// Quoted fields are only copied when they hold an escaped quote.
fn split_fields<'a>(line: &'a str, fields: &mut Vec<Cow<'a, str>>) -> Result<(), String> {
    fields.clear();
    if !line.contains('"') {
        fields.extend(line.split(',').map(|f| Cow::Borrowed(f.trim())));
        return Ok(());
    }
    let mut rest = line;
    loop {
        let trimmed = rest.trim_start();
        if let Some(quoted) = trimmed.strip_prefix('"') {
            // Find the closing quote, skipping doubled quotes.
            let bytes = quoted.as_bytes();
            let mut i = 0;
            let mut escaped = false;
            let end = loop {
                match bytes.get(i) {
                    None => return Err("unterminated quoted field".to_string()),
                    Some(b'"') if bytes.get(i + 1) == Some(&b'"') => {
                        escaped = true;
                        i += 2;
                    }
                    Some(b'"') => break i,
                    Some(_) => i += 1,
                }
            };
            let inner = &quoted[..end];
            fields.push(if escaped {
                Cow::Owned(inner.replace("\"\"", "\""))
            } else {
                Cow::Borrowed(inner)
            });
            let after = quoted[end + 1..].trim_start();
            match after.strip_prefix(',') {
                Some(next) => rest = next,
                None if after.is_empty() => return Ok(()),
                None => return Err(format!("unexpected text after a quoted field: \"{after}\"")),
            }
        } else {
            match rest.split_once(',') {
                Some((field, next)) => {
                    fields.push(Cow::Borrowed(field.trim()));
                    rest = next;
                }
                None => {
                    fields.push(Cow::Borrowed(rest.trim()));
                    return Ok(());
                }
            }
        }
    }
}

fn non_empty(field: &str) -> Option<String> {
    (!field.is_empty()).then(|| field.to_string())
}

fn optional<T>(
    field: &str,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<Option<T>, String> {
    if field.is_empty() {
        Ok(None)
    } else {
        parse(field).map(Some)
    }
}

fn positive_f64(name: &str, field: &str) -> Result<f64, String> {
    match field.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!(
            "{name}: expected a positive number of seconds, found \"{field}\""
        )),
    }
}

fn non_negative_f64(name: &str, field: &str) -> Result<f64, String> {
    match field.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "{name}: expected a non-negative number, found \"{field}\""
        )),
    }
}

fn positive_u32(name: &str, field: &str) -> Result<u32, String> {
    match parse_u32(field) {
        Some(v) if v > 0 => Ok(v),
        _ => Err(format!(
            "{name}: expected a positive integer, found \"{field}\""
        )),
    }
}

fn non_negative_u32(name: &str, field: &str) -> Result<u32, String> {
    parse_u32(field)
        .ok_or_else(|| format!("{name}: expected a non-negative integer, found \"{field}\""))
}

/// An integer, also written as `4.0`: pandas writes integer columns that way once a column has
/// an empty cell.
fn parse_u32(field: &str) -> Option<u32> {
    let digits = match field.split_once('.') {
        Some((int, frac)) if !frac.is_empty() && frac.bytes().all(|b| b == b'0') => int,
        Some(_) => return None,
        None => field,
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) to unix seconds; `None` unless it is a real date and time.
pub fn parse_timestamp(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 19
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b' '
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        b[from..to].iter().try_fold(0i64, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
        })
    };
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_match_known_unix_times() {
        assert_eq!(parse_timestamp("1970-01-01 00:00:00"), Some(0));
        assert_eq!(parse_timestamp("2017-09-04 10:30:41"), Some(1_504_521_041));
        assert_eq!(parse_timestamp("2000-02-29 23:59:59"), Some(951_868_799));
        assert_eq!(parse_timestamp("2017-02-29 00:00:00"), None);
        assert_eq!(parse_timestamp("2017-13-01 00:00:00"), None);
        assert_eq!(parse_timestamp("2017-09-04T10:30:41"), None);
        assert_eq!(parse_timestamp("2017-09-04 10:30:4x"), None);
    }

    #[test]
    fn quoted_fields_are_unwrapped() {
        let mut f = Vec::new();
        split_fields(r#"1, "a, ""b""" ,c"#, &mut f).unwrap();
        assert_eq!(f, vec!["1", "a, \"b\"", "c"]);
        assert!(split_fields(r#"1,"abc"#, &mut f).is_err());
    }

    #[test]
    fn integers_may_carry_a_zero_fraction() {
        assert_eq!(parse_u32("4"), Some(4));
        assert_eq!(parse_u32("4.0"), Some(4));
        assert_eq!(parse_u32("4.5"), None);
        assert_eq!(parse_u32("-4"), None);
        assert_eq!(parse_u32("4."), None);
        assert_eq!(parse_u32(""), None);
    }
}
