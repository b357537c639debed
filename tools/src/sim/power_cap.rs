//! The cluster power cap in the simulator (docs/power-cap.md, "In the simulator"): the cap in
//! force at each moment (the static `[planner] power_cap_w` of the spec, replaced by a cap file's
//! schedule where the file says something), and what the run measured against it.
//!
//! The engine runs the plugin's own rule (`model::power_directive`) on the running jobs; this
//! module only holds the cap's calendar and the measurements.

use model::power_cap::{CapSchedule, effective_cap_w};

use crate::trace::Trace;

use super::policies::{HintRule, Setup};

/// The moment (Unix s) simulated time 0 stands for, on the calendar of the carbon series: the
/// trace's first submit moved to the same day of the year and time of day in 2020 (the year of
/// the carbon series), or 1 January 2020 00:00 UTC for traces without dates. A cap file's
/// times are read on this calendar, so a schedule derived from the carbon series lines up with
/// the carbon signal the run sees.
pub fn trace_epoch_unix_s(trace: &Trace) -> i64 {
    use model::data::carbon::days_from_civil;
    match trace.start_unix_s {
        Some(start) => {
            let days = start.div_euclid(86_400);
            let secs = start.rem_euclid(86_400);
            // Year of `start`: find the 1 January at or before it.
            let mut year = 1970 + days / 366;
            while days_from_civil(year + 1, 1, 1) <= days {
                year += 1;
            }
            let day_of_year = days - days_from_civil(year, 1, 1);
            (days_from_civil(2020, 1, 1) + day_of_year) * 86_400 + secs
        }
        None => days_from_civil(2020, 1, 1) * 86_400,
    }
}

/// A cap for the runs: the file's schedule (if any) and where simulated time 0 is on its
/// calendar.
#[derive(Debug, Clone, PartialEq)]
pub struct SimPowerCap {
    pub schedule: Option<CapSchedule>,
    pub epoch_unix_s: i64,
}

/// Whether a setup runs under the site's cap: the `energy` policy and its ablations (the site's
/// own configuration, whose jobs carry their users' hints); the papers' policies and stock Slurm
/// run uncapped, as they do under the spec's static `[planner] power_cap_w`.
pub fn capped_setup(setup: &Setup) -> bool {
    matches!(setup.hints, HintRule::Users)
}

/// The cap in force at simulated time `t_s` (W; 0: none).
pub fn cap_at_w(cap: &SimPowerCap, static_cap_w: f64, t_s: f64) -> f64 {
    effective_cap_w(cap.schedule.as_ref(), static_cap_w, cap.epoch_unix_s.saturating_add(t_s.floor() as i64))
}

/// The simulated times at which the file's cap changes (those before time 0 at 0).
pub fn change_times_s(cap: &SimPowerCap) -> Vec<f64> {
    let mut out: Vec<f64> = cap.schedule.iter().flat_map(|s| s.changes()).filter_map(|c| c.from_unix_s).map(|u| ((u - cap.epoch_unix_s) as f64).max(0.0)).collect();
    out.dedup();
    out
}

/// The state after one run of the power directives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapSample {
    pub t_s: f64,
    /// The cap in force (W; 0: none).
    pub cap_w: f64,
    /// The truth's cluster GPU power with the ceilings applied (W).
    pub gpu_w: f64,
    /// The rule's prediction for it, corrected by the measured power (W).
    pub predicted_w: f64,
    /// Running jobs under a clock ceiling.
    pub ceilings: u32,
    /// The rule could not meet the cap within the jobs' bounds.
    pub unmet: bool,
}

/// The truth's cluster GPU power against the cap, integrated between events (power is constant
/// between them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CapStats {
    /// Time a cap was in force (s).
    pub in_force_s: f64,
    /// Time the truth's GPU power exceeded the cap in force (s).
    pub over_s: f64,
    /// Largest excess of the truth's GPU power over the cap (W; 0: never over).
    pub max_excess_w: f64,
    /// Longest unbroken stretch over the cap (s): the time the rule took to comply.
    pub longest_over_s: f64,
    current_over_s: f64,
    /// Highest GPU power of the truth (W), capped or not.
    pub peak_gpu_w: f64,
    /// Ceilings set, lowered, raised or lifted.
    pub ceiling_changes: u64,
    /// Time limits extended for a ceiling's slowdown.
    pub limit_extensions: u64,
    /// Jobs killed at their (extended) time limit that ran under a ceiling at some time.
    pub killed_after_ceiling: u64,
    /// Of those, the jobs that without their ceilings would have ended within the limit they
    /// had without them (the work the ceilings cost them is at least the work they had left
    /// plus what their own speed does in the time their limit grew for the ceilings): killed
    /// for the cap. The others ran longer than their limit allowed at their own clock (a
    /// planned slowdown the truth made larger than predicted, too few CPUs, a user's short
    /// limit).
    pub killed_for_cap: u64,
    /// Every run of the directives, in time order.
    pub timeline: Vec<CapSample>,
}

/// GPU power within this of the cap counts as at the cap (W): rounding, not an excess.
pub const OVER_TOLERANCE_W: f64 = 1e-6;

impl CapStats {
    /// `dt_s` at GPU power `gpu_w` under cap `cap_w` (0: none).
    pub fn integrate(&mut self, cap_w: f64, gpu_w: f64, dt_s: f64) {
        if dt_s <= 0.0 {
            return;
        }
        self.peak_gpu_w = self.peak_gpu_w.max(gpu_w);
        if cap_w <= 0.0 {
            self.current_over_s = 0.0;
            return;
        }
        self.in_force_s += dt_s;
        if gpu_w > cap_w + OVER_TOLERANCE_W {
            self.over_s += dt_s;
            self.max_excess_w = self.max_excess_w.max(gpu_w - cap_w);
            self.current_over_s += dt_s;
            self.longest_over_s = self.longest_over_s.max(self.current_over_s);
        } else {
            self.current_over_s = 0.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stretches_over_the_cap_are_measured() {
        let mut s = CapStats::default();
        s.integrate(0.0, 500.0, 10.0);
        s.integrate(400.0, 500.0, 5.0);
        s.integrate(400.0, 450.0, 5.0);
        s.integrate(400.0, 300.0, 5.0);
        s.integrate(400.0, 410.0, 2.0);
        assert_eq!(s.in_force_s, 17.0);
        assert_eq!(s.over_s, 12.0);
        assert_eq!(s.longest_over_s, 10.0);
        assert_eq!(s.max_excess_w, 100.0);
        assert_eq!(s.peak_gpu_w, 500.0);
    }

    #[test]
    fn file_times_are_on_the_carbon_calendar() {
        let cap = SimPowerCap { schedule: Some(CapSchedule::parse("2020-01-01T01:00:00Z,1000\n2020-01-01T03:00:00Z,none\n").expect("parses")), epoch_unix_s: 1_577_836_800 };
        assert_eq!(change_times_s(&cap), vec![3600.0, 3.0 * 3600.0]);
        assert_eq!(cap_at_w(&cap, 0.0, 3599.0), 0.0);
        assert_eq!(cap_at_w(&cap, 0.0, 3600.0), 1000.0);
        assert_eq!(cap_at_w(&cap, 5000.0, 10.0), 5000.0, "before the file's first line the static cap holds");
        assert_eq!(cap_at_w(&cap, 5000.0, 4.0 * 3600.0), 0.0);
    }
}
