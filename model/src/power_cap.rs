//! A cluster power cap that changes over time: the facility's envelope, a demand-response event
//! from the grid ("20 % less for the next two hours"), summer derating. The site (or the tool
//! that follows its grid program) writes a small file; sched/energy re-reads it when it
//! changes and plans under the cap that holds now.
//!
//! The file: one change per line, `<time>,<cap>`, the cap holding from that time until the
//! next line's. `<time>` is Unix seconds or an RFC 3339 timestamp (`2026-11-27T18:00:00Z`);
//! `<cap>` is the cluster's GPU power in watts (a positive number, `W` suffix allowed) or
//! `none` (no cap from then on). Times must increase line by line. A file holding one bare
//! cap (`48000`) caps from now on. `#` starts a comment; blank lines are skipped. Before the
//! first line's time, the file says nothing (the static `power_cap_w` of energy.toml holds).

use std::fmt;
use std::path::{Path, PathBuf};

use crate::carbon_source::parse_timestamp;

/// Largest cap accepted (W): 1 TW, far above any machine room; a larger figure is a typo.
pub const MAX_CAP_W: f64 = 1.0e12;

/// One line of a cap file: from `from_unix_s` on, the cap is `cap_w` (`None`: no cap).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapChange {
    /// `None`: holds from the beginning (a file of one bare cap).
    pub from_unix_s: Option<i64>,
    pub cap_w: Option<f64>,
}

/// A cap file's content, in time order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CapSchedule {
    changes: Vec<CapChange>,
}

/// What the schedule says about one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CapAt {
    /// The file says nothing about this moment (before its first line): the static cap holds.
    Unspecified,
    /// No cap (a `none` line).
    Uncapped,
    /// This cap, in watts.
    Capped(f64),
}

/// Why a cap file could not be read: the file, the line, the reason.
#[derive(Debug, Clone, PartialEq)]
pub struct CapFileError {
    pub path: PathBuf,
    /// 1-based line; `None` for the whole file.
    pub line: Option<usize>,
    pub reason: String,
}

impl fmt::Display for CapFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.path.display(), l, self.reason),
            None => write!(f, "{}: {}", self.path.display(), self.reason),
        }
    }
}

impl std::error::Error for CapFileError {}

/// The cap of one field: watts (positive, finite, at most [`MAX_CAP_W`]; `W` suffix allowed)
/// or `none`.
fn parse_cap(text: &str) -> Result<Option<f64>, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let number = t.strip_suffix(['W', 'w']).unwrap_or(t).trim();
    match number.parse::<f64>() {
        Ok(w) if w.is_finite() && w > 0.0 && w <= MAX_CAP_W => Ok(Some(w)),
        Ok(_) => Err(format!("cap '{t}' must be more than 0 W and at most {MAX_CAP_W:e} W (or 'none' for no cap)")),
        Err(_) => Err(format!("cap '{t}' is not a number of watts (or 'none' for no cap)")),
    }
}

impl CapSchedule {
    /// Parse a cap file's text; errors name the 1-based line.
    pub fn parse(text: &str) -> Result<CapSchedule, (Option<usize>, String)> {
        let mut changes: Vec<CapChange> = Vec::new();
        let mut bare = false;
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            if bare {
                return Err((Some(line_no), "a file with a bare cap (no time) holds that one cap only".into()));
            }
            let change = match line.split_once(',') {
                None => {
                    if !changes.is_empty() {
                        return Err((Some(line_no), "expected '<time>,<cap>' (a bare cap is allowed only as the file's one line)".into()));
                    }
                    bare = true;
                    CapChange { from_unix_s: None, cap_w: parse_cap(line).map_err(|e| (Some(line_no), e))? }
                }
                Some((time, cap)) => {
                    if cap.contains(',') {
                        return Err((Some(line_no), "expected two fields, '<time>,<cap>'".into()));
                    }
                    let from = parse_timestamp(time).ok_or_else(|| (Some(line_no), format!("time '{}' is neither Unix seconds nor an RFC 3339 timestamp", time.trim())))?;
                    if let Some(prev) = changes.last().and_then(|c| c.from_unix_s)
                        && from <= prev
                    {
                        return Err((Some(line_no), format!("time {from} is not after the previous line's ({prev}): lines must be in time order")));
                    }
                    CapChange { from_unix_s: Some(from), cap_w: parse_cap(cap).map_err(|e| (Some(line_no), e))? }
                }
            };
            changes.push(change);
        }
        if changes.is_empty() {
            return Err((None, "no cap in the file (lines '<time>,<cap>', or one bare cap)".into()));
        }
        Ok(CapSchedule { changes })
    }

    /// Read and parse a cap file.
    pub fn from_file(path: &Path) -> Result<CapSchedule, CapFileError> {
        let text = std::fs::read_to_string(path).map_err(|e| CapFileError { path: path.to_path_buf(), line: None, reason: format!("cannot read: {e}") })?;
        CapSchedule::parse(&text).map_err(|(line, reason)| CapFileError { path: path.to_path_buf(), line, reason })
    }

    pub fn changes(&self) -> &[CapChange] {
        &self.changes
    }

    /// The cap at `unix_s`: the last line whose time has come.
    pub fn at(&self, unix_s: i64) -> CapAt {
        let current = self.changes.iter().take_while(|c| c.from_unix_s.is_none_or(|t| t <= unix_s)).last();
        match current {
            None => CapAt::Unspecified,
            Some(CapChange { cap_w: None, .. }) => CapAt::Uncapped,
            Some(CapChange { cap_w: Some(w), .. }) => CapAt::Capped(*w),
        }
    }

    /// When the cap changes next after `unix_s`, if the file says.
    pub fn next_change_after(&self, unix_s: i64) -> Option<i64> {
        self.changes.iter().filter_map(|c| c.from_unix_s).find(|&t| t > unix_s)
    }
}

/// The cap the planner plans under at `unix_s` (watts; 0: no cap): the file's, where it says
/// something about the moment, else the static one of energy.toml.
pub fn effective_cap_w(schedule: Option<&CapSchedule>, static_cap_w: f64, unix_s: i64) -> f64 {
    match schedule.map_or(CapAt::Unspecified, |s| s.at(unix_s)) {
        CapAt::Unspecified => static_cap_w,
        CapAt::Uncapped => 0.0,
        CapAt::Capped(w) => w,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_holds_each_cap_until_the_next_line() {
        let s = CapSchedule::parse("# demand response\n2026-11-27T18:00:00Z,48000\n2026-11-27T20:00:00Z, 33600 W # -30 %\n\n2026-11-27T22:00:00Z,none\n").expect("parses");
        let t18 = parse_timestamp("2026-11-27T18:00:00Z").expect("time");
        assert_eq!(s.at(t18 - 1), CapAt::Unspecified);
        assert_eq!(s.at(t18), CapAt::Capped(48_000.0));
        assert_eq!(s.at(t18 + 2 * 3600 - 1), CapAt::Capped(48_000.0));
        assert_eq!(s.at(t18 + 2 * 3600), CapAt::Capped(33_600.0));
        assert_eq!(s.at(t18 + 4 * 3600), CapAt::Uncapped);
        assert_eq!(s.next_change_after(t18), Some(t18 + 2 * 3600));
        assert_eq!(s.next_change_after(t18 + 4 * 3600), None);
        assert_eq!(effective_cap_w(Some(&s), 60_000.0, t18 - 1), 60_000.0, "before the file's first line the static cap holds");
        assert_eq!(effective_cap_w(Some(&s), 60_000.0, t18 + 3 * 3600), 33_600.0);
        assert_eq!(effective_cap_w(Some(&s), 60_000.0, t18 + 5 * 3600), 0.0, "'none' lifts the static cap too");
        assert_eq!(effective_cap_w(None, 60_000.0, t18), 60_000.0);
    }

    #[test]
    fn a_bare_cap_holds_from_now_on() {
        let s = CapSchedule::parse("48000\n").expect("parses");
        assert_eq!(s.at(0), CapAt::Capped(48_000.0));
        assert_eq!(s.at(i64::MAX), CapAt::Capped(48_000.0));
        assert_eq!(CapSchedule::parse("none").expect("parses").at(5), CapAt::Uncapped);
        assert_eq!(CapSchedule::parse("1700000000,5000").expect("unix seconds").at(1_700_000_000), CapAt::Capped(5_000.0));
    }

    #[test]
    fn bad_lines_are_named_with_what_is_allowed() {
        let cases: [(&str, Option<usize>, &str); 8] = [
            ("", None, "no cap in the file"),
            ("# only a comment\n", None, "no cap in the file"),
            ("2026-11-27T18:00:00Z,-5\n", Some(1), "more than 0 W"),
            ("2026-11-27T18:00:00Z,0\n", Some(1), "more than 0 W"),
            ("2026-11-27T18:00:00Z,lots\n", Some(1), "not a number of watts"),
            ("yesterday,5000\n", Some(1), "neither Unix seconds nor an RFC 3339"),
            ("2026-11-27T18:00:00Z,5000\n2026-11-27T17:00:00Z,4000\n", Some(2), "time order"),
            ("5000\n2026-11-27T17:00:00Z,4000\n", Some(2), "bare cap"),
        ];
        for (text, line, reason) in cases {
            let (l, r) = CapSchedule::parse(text).expect_err(text);
            assert_eq!(l, line, "{text:?}: {r}");
            assert!(r.contains(reason), "{text:?}: {r}");
        }
        let (l, r) = CapSchedule::parse("2026-11-27T18:00:00Z,5000,7\n").expect_err("three fields");
        assert_eq!(l, Some(1));
        assert!(r.contains("two fields"), "{r}");
        let (l, _) = CapSchedule::parse("2026-11-27T18:00:00Z,NaN\n").expect_err("NaN");
        assert_eq!(l, Some(1));
        let (l, _) = CapSchedule::parse("2026-11-27T18:00:00Z,inf\n").expect_err("inf");
        assert_eq!(l, Some(1));
    }

    #[test]
    fn a_file_error_names_the_file_and_line() {
        let dir = std::env::temp_dir().join(format!("power-cap-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("cap");
        std::fs::write(&path, "2026-11-27T18:00:00Z,5000\nbroken\n").expect("write");
        let e = CapSchedule::from_file(&path).expect_err("line 2");
        assert_eq!(e.to_string(), format!("{}:2: expected '<time>,<cap>' (a bare cap is allowed only as the file's one line)", path.display()));
        let missing = CapSchedule::from_file(&dir.join("missing")).expect_err("missing");
        assert_eq!(missing.line, None);
        assert!(missing.to_string().contains("cannot read"), "{missing}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
