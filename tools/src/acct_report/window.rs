//! The report's time window: `--start`/`--end` checked here, then handed to `sacct`
//! (`--starttime`/`--endtime`), which selects every job allocation that was running, or
//! ended, at some time within the window. Accepted forms (a subset of sacct's):
//! `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM`, `YYYY-MM-DDTHH:MM:SS`, `now`, and `now-N` / `now+N` with
//! an optional unit `seconds`, `minutes`, `hours`, `days` or `weeks` (default seconds).

use serde::Serialize;

/// A checked window; `None` leaves the bound to sacct (start: midnight today, end: now).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Window {
    pub start: Option<String>,
    pub end: Option<String>,
}

impl Window {
    pub fn new(start: Option<&str>, end: Option<&str>) -> Result<Window, String> {
        let check = |flag: &str, value: Option<&str>| -> Result<Option<String>, String> {
            value
                .map(|v| check_time(v).map(|()| v.trim().to_string()).map_err(|why| format!("{flag} {v:?}: {why}")))
                .transpose()
        };
        Ok(Window { start: check("--start", start)?, end: check("--end", end)? })
    }
}

fn check_time(value: &str) -> Result<(), String> {
    let v = value.trim();
    if let Some(rest) = v.strip_prefix("now") {
        if rest.is_empty() {
            return Ok(());
        }
        let rest = rest.strip_prefix(['-', '+']).ok_or("after `now` comes `-N` or `+N`")?;
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err("`now-` needs a count, e.g. now-2days".into());
        }
        let unit = &rest[digits..];
        return match unit {
            "" | "seconds" | "minutes" | "hours" | "days" | "weeks" => Ok(()),
            _ => Err(format!("unknown unit {unit:?} (seconds, minutes, hours, days, weeks)")),
        };
    }
    let (date, time) = match v.split_once('T') {
        Some((d, t)) => (d, Some(t)),
        None => (v, None),
    };
    let nums = |s: &str, sep: char, lens: &[usize]| -> Option<Vec<u32>> {
        let parts: Vec<&str> = s.split(sep).collect();
        (parts.len() == lens.len() && parts.iter().zip(lens).all(|(p, n)| p.len() == *n && p.bytes().all(|b| b.is_ascii_digit())))
            .then(|| parts.iter().filter_map(|p| p.parse().ok()).collect())
    };
    let d = nums(date, '-', &[4, 2, 2]).ok_or("expected YYYY-MM-DD[THH:MM[:SS]] or now[-N[unit]]")?;
    if !(1..=12).contains(&d[1]) || !(1..=31).contains(&d[2]) {
        return Err("month or day out of range".into());
    }
    if let Some(t) = time {
        let t = nums(t, ':', &[2, 2, 2]).or_else(|| nums(t, ':', &[2, 2])).ok_or("time is HH:MM or HH:MM:SS")?;
        if t[0] > 23 || t[1] > 59 || t.get(2).is_some_and(|s| *s > 59) {
            return Err("hour, minute or second out of range".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_time_forms_are_accepted() {
        for ok in ["now", "now-2days", "now-90", "now+1hours", "2026-11-25", "2026-11-25T03:04", "2026-11-25T03:04:05"] {
            assert!(Window::new(Some(ok), None).is_ok(), "{ok}");
        }
    }

    #[test]
    fn bad_times_say_which_flag_and_why() {
        let e = Window::new(None, Some("yesterday")).expect_err("not a time");
        assert!(e.starts_with("--end \"yesterday\""), "{e}");
        assert!(Window::new(Some("2026-13-01"), None).expect_err("month").contains("out of range"));
        assert!(Window::new(Some("2026-11-25T25:00"), None).is_err());
        assert!(Window::new(Some("now-3fortnights"), None).expect_err("unit").contains("unknown unit"));
        assert!(Window::new(Some("now-"), None).is_err());
    }
}
