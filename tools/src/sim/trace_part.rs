//! Replay only a part of a trace's period (`simulate --trace-from/--trace-until` or
//! `--trace-part`), by submit time: so that a setting can be tuned on one part of the period
//! and reported on another (issue 23: seeds of one trace replay the same arrivals, so tuning on
//! other seeds is not held out).
//!
//! A job belongs to the part its submit time falls in, whatever its duration: a job submitted
//! before the cut runs to its end in the first part and is absent from the second. The kept
//! jobs' times are made relative to the first kept submit, and the trace's start date moves
//! with them, so that the carbon series and power-cap files stay on the right calendar.
//!
//! This module never fills in or reorders jobs; it only drops those outside the part.

use crate::trace::{Trace, parse_timestamp};

/// One half of a trace's submit period: before or from the midpoint between its first and its
/// last submit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TracePart {
    FirstHalf,
    SecondHalf,
}

impl TracePart {
    pub fn parse(s: &str) -> Result<TracePart, String> {
        match s {
            "first-half" => Ok(TracePart::FirstHalf),
            "second-half" => Ok(TracePart::SecondHalf),
            _ => Err(format!("--trace-part '{s}': allowed are first-half, second-half")),
        }
    }
}

/// Which submit times to keep: `[from, until)` in unix seconds (UTC), or a half.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TraceWindow {
    pub from_unix_s: Option<i64>,
    pub until_unix_s: Option<i64>,
    pub part: Option<TracePart>,
}

/// `YYYY-MM-DD` (midnight UTC) or `YYYY-MM-DD HH:MM:SS` / `YYYY-MM-DDTHH:MM:SS` (UTC) to unix
/// seconds; `flag` names the option in the error.
pub fn parse_date(flag: &str, s: &str) -> Result<i64, String> {
    let t = s.trim();
    let full = if t.len() == 10 { format!("{t} 00:00:00") } else { t.replacen('T', " ", 1) };
    parse_timestamp(&full).ok_or_else(|| format!("{flag} '{s}': expected a date YYYY-MM-DD or YYYY-MM-DD HH:MM:SS (UTC)"))
}

impl TraceWindow {
    pub fn is_whole(&self) -> bool {
        self.from_unix_s.is_none() && self.until_unix_s.is_none() && self.part.is_none()
    }

    /// Keep only the jobs submitted within the window; their times (and the trace's start date)
    /// then count from the first kept submit. Errors when dates are asked of a trace without
    /// dates, or when no job is left.
    pub fn apply(&self, trace: &mut Trace) -> Result<(), String> {
        if self.is_whole() {
            return Ok(());
        }
        let (first, last) = match (trace.jobs.first(), trace.jobs.last()) {
            (Some(a), Some(b)) => (a.submit_time_s, b.submit_time_s),
            _ => return Err("the trace has no jobs".into()),
        };
        // Bounds in the trace's own relative seconds.
        let (mut lo, mut hi) = (f64::NEG_INFINITY, f64::INFINITY);
        if self.from_unix_s.is_some() || self.until_unix_s.is_some() {
            let Some(start) = trace.start_unix_s else {
                return Err("--trace-from/--trace-until need a trace with dates (the Philly format); use --trace-part for a generic trace".into());
            };
            if let Some(f) = self.from_unix_s {
                lo = (f - start) as f64;
            }
            if let Some(u) = self.until_unix_s {
                hi = (u - start) as f64;
            }
            if hi <= lo {
                return Err("--trace-until must be later than --trace-from".into());
            }
        }
        if let Some(part) = self.part {
            let mid = first + (last - first) / 2.0;
            match part {
                TracePart::FirstHalf => hi = hi.min(mid),
                TracePart::SecondHalf => lo = lo.max(mid),
            }
        }
        trace.jobs.retain(|j| j.submit_time_s >= lo && j.submit_time_s < hi);
        let Some(shift) = trace.jobs.first().map(|j| j.submit_time_s) else {
            return Err(format!("no job of the trace was submitted in the part asked for (the trace's submits span {:.1} days)", (last - first) / 86_400.0));
        };
        for j in &mut trace.jobs {
            j.submit_time_s -= shift;
        }
        // Philly's times are whole seconds, so the shift is exact.
        trace.start_unix_s = trace.start_unix_s.map(|s| s + shift.round() as i64);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::trace::parse_trace;

    const PHILLY: &str = "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,10,1,10,a\n2017-10-03 00:00:00,10,2,20,a\n2017-10-02 12:00:00,10,1,10,b\n2017-10-05 00:00:00,10,1,10,a\n";

    fn philly() -> Trace {
        parse_trace(PHILLY, Path::new("t.csv"), None).expect("parses")
    }

    #[test]
    fn halves_split_at_the_midpoint_of_the_submits_and_rebase_the_calendar() {
        let start = philly().start_unix_s.expect("dated");
        // Submits at day 0, 1.5, 2 and 4: the midpoint is day 2.
        let mut first = philly();
        TraceWindow { part: Some(TracePart::FirstHalf), ..Default::default() }.apply(&mut first).expect("first half");
        assert_eq!(first.jobs.iter().map(|j| j.submit_time_s / 86_400.0).collect::<Vec<_>>(), vec![0.0, 1.5]);
        assert_eq!(first.start_unix_s, Some(start));
        let mut second = philly();
        TraceWindow { part: Some(TracePart::SecondHalf), ..Default::default() }.apply(&mut second).expect("second half");
        assert_eq!(second.jobs.iter().map(|j| j.submit_time_s / 86_400.0).collect::<Vec<_>>(), vec![0.0, 2.0]);
        assert_eq!(second.start_unix_s, Some(start + 2 * 86_400));
        assert_eq!(first.jobs.len() + second.jobs.len(), philly().jobs.len());
    }

    #[test]
    fn dates_bound_the_submits_from_inclusive_until_exclusive() {
        let mut t = philly();
        let w = TraceWindow { from_unix_s: Some(parse_date("--trace-from", "2017-10-02").expect("date")), until_unix_s: Some(parse_date("--trace-until", "2017-10-05").expect("date")), part: None };
        w.apply(&mut t).expect("window");
        assert_eq!(t.jobs.iter().map(|j| j.num_gpus).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(t.jobs[0].submit_time_s, 0.0);
        assert_eq!(parse_date("x", "2017-10-02T12:00:00"), parse_date("x", "2017-10-02 12:00:00"));
    }

    #[test]
    fn bad_values_are_clear_errors() {
        assert!(TracePart::parse("third-half").unwrap_err().contains("first-half, second-half"));
        assert!(parse_date("--trace-from", "2017-13-01").unwrap_err().contains("--trace-from '2017-13-01'"));
        assert!(parse_date("--trace-from", "yesterday").is_err());
        let mut t = philly();
        let e = TraceWindow { from_unix_s: parse_date("f", "2018-01-01").ok(), ..Default::default() }.apply(&mut t).unwrap_err();
        assert!(e.contains("no job"), "{e}");
        let e = TraceWindow { from_unix_s: parse_date("f", "2017-10-03").ok(), until_unix_s: parse_date("u", "2017-10-02").ok(), part: None }.apply(&mut philly()).unwrap_err();
        assert!(e.contains("later than"), "{e}");
        let mut generic = parse_trace("submit_time_s,duration_s,num_gpus\n0,10,1\n100,10,1\n", Path::new("g.csv"), None).expect("parses");
        let e = TraceWindow { from_unix_s: Some(0), ..Default::default() }.apply(&mut generic).unwrap_err();
        assert!(e.contains("--trace-part"), "{e}");
        TraceWindow { part: Some(TracePart::SecondHalf), ..Default::default() }.apply(&mut generic).expect("a generic trace splits in halves");
        assert_eq!(generic.jobs.len(), 1);
    }
}
