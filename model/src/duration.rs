//! Durations as users write them in `--energy-defer` (and as the sched plugin reads them back
//! from the job's SPANK environment): one grammar, shared by both plugins.

/// Seconds in a duration: a bare number is minutes (as Slurm reads `--time`), `45s`, `30m`,
/// `2h`, `1d`, combinations with the largest unit first (`1h30m`, `1d12h`), or `HH:MM:SS`.
/// `None` for anything else (negative, fractional, overflowing, units out of order).
pub fn parse_duration_s(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if s.bytes().all(|c| c.is_ascii_digit()) {
        return s.parse::<u64>().ok()?.checked_mul(60);
    }
    if s.contains(':') {
        let parts: Vec<&str> = s.split(':').collect();
        let [h, m, sec] = parts.as_slice() else { return None };
        let num = |p: &str| -> Option<u64> {
            (!p.is_empty() && p.len() <= 20 && p.bytes().all(|c| c.is_ascii_digit())).then(|| p.parse().ok()).flatten()
        };
        let (h, m, sec) = (num(h)?, num(m)?, num(sec)?);
        if m >= 60 || sec >= 60 {
            return None;
        }
        return h.checked_mul(3600)?.checked_add(m * 60 + sec);
    }
    let mut total: u64 = 0;
    let mut last_rank = usize::MAX;
    let mut rest = s;
    while !rest.is_empty() {
        let n_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        if n_len == 0 || n_len > 20 {
            return None;
        }
        let n: u64 = rest[..n_len].parse().ok()?;
        let unit = rest[n_len..].chars().next()?;
        let (rank, scale) = match unit.to_ascii_lowercase() {
            'd' => (0, 86400),
            'h' => (1, 3600),
            'm' => (2, 60),
            's' => (3, 1),
            _ => return None,
        };
        // Units in decreasing order, each at most once.
        if last_rank != usize::MAX && rank <= last_rank {
            return None;
        }
        last_rank = rank;
        total = total.checked_add(n.checked_mul(scale)?)?;
        rest = &rest[n_len + unit.len_utf8()..];
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_users_write() {
        assert_eq!(parse_duration_s("90"), Some(5400));
        assert_eq!(parse_duration_s("45s"), Some(45));
        assert_eq!(parse_duration_s("2h"), Some(7200));
        assert_eq!(parse_duration_s("1h30m"), Some(5400));
        assert_eq!(parse_duration_s("1d12h"), Some(129_600));
        assert_eq!(parse_duration_s("01:30:00"), Some(5400));
        assert_eq!(parse_duration_s("30m1h"), None);
        assert_eq!(parse_duration_s("-1h"), None);
        assert_eq!(parse_duration_s("1.5h"), None);
        assert_eq!(parse_duration_s("x"), None);
        assert_eq!(parse_duration_s("30"), Some(1800));
        assert_eq!(parse_duration_s("0"), Some(0));
        assert_eq!(parse_duration_s("30m"), Some(1800));
        assert_eq!(parse_duration_s("2H"), Some(7200));
        assert_eq!(parse_duration_s("1h30m15s"), Some(5415));
        assert_eq!(parse_duration_s("12:00:00"), Some(43200));
        assert_eq!(parse_duration_s(" 2h "), Some(7200));
        for bad in ["", "h", "1h1h", "1x", "1:60:00", "1:00", "1:00:00:00", "::", "1h 30m", "99999999999999999999999h", "２h"] {
            assert_eq!(parse_duration_s(bad), None, "{bad:?}");
        }
    }
}
