//! `--time-min`: the limit a job that accepts a shorter run is started with.
//!
//! Slurm's backfill starts such a job in a hole before another job's reservation with its limit
//! cut to the hole: at least its minimum, at most the limit it asked for. The planner plans it
//! with its minimum; the plugin asks this rule for the limit once it knows where it starts.

/// The limit (whole minutes) of a job started at `now_s` that asked for `asked_s` and accepts
/// `min_s`, when windows held by other jobs on its nodes start at `held_starts_s`: the room
/// before the first of them that has not started, within `[min_s, asked_s]`. `None` when
/// nothing is held there (the job keeps the limit it asked for).
pub fn limit_min(now_s: f64, asked_s: f64, min_s: f64, held_starts_s: impl IntoIterator<Item = f64>) -> Option<u32> {
    let first_s = held_starts_s.into_iter().filter(|&t| t > now_s).fold(f64::INFINITY, f64::min);
    if !first_s.is_finite() {
        return None;
    }
    let room_s = (first_s - now_s).min(asked_s).max(min_s);
    Some((room_s / 60.0).floor().clamp(1.0, f64::from(u32::MAX - 2)) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_the_room_before_the_first_held_window_within_min_and_asked() {
        // A hole of 3.5 min before a reservation; asked 30, accepts 2: 3 whole minutes.
        assert_eq!(limit_min(1000.0, 1800.0, 120.0, [1210.0, 5000.0]), Some(3));
        // A window already started does not bound it; the next one does.
        assert_eq!(limit_min(1000.0, 1800.0, 120.0, [900.0, 1400.0]), Some(6));
        // Never below the minimum, never above what it asked for.
        assert_eq!(limit_min(1000.0, 1800.0, 120.0, [1030.0]), Some(2));
        assert_eq!(limit_min(1000.0, 600.0, 120.0, [9000.0]), Some(10));
        // Nothing held: the limit it asked for stays.
        assert_eq!(limit_min(1000.0, 1800.0, 120.0, []), None);
    }
}
