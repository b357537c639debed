//! Grid carbon intensity as the planner may know it: the value now, and a forecast built only
//! from the past (GreenFlow; deferral as in "Let's Wait Awhile").
//!
//! The forecast is seasonal-naive: the intensity at `t + h` is predicted as the mean of the
//! values at the same time of day on the last [`FORECAST_DAYS`] days that are already in the
//! past at `t`. Deferral decisions use this forecast and nothing else: the planner never peeks
//! at the future values of the series.

use crate::data::carbon::CarbonTrace;

pub const FORECAST_DAYS: u32 = 7;
const DAY_S: f64 = 86_400.0;

/// A carbon-intensity series aligned to the planner's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct CarbonSignal {
    trace: CarbonTrace,
    /// Planner time 0 corresponds to this offset into the series.
    offset_s: f64,
}

impl CarbonSignal {
    pub fn new(trace: CarbonTrace, offset_s: f64) -> CarbonSignal {
        CarbonSignal { trace, offset_s }
    }

    pub fn step_s(&self) -> f64 {
        self.trace.step_s
    }

    /// Intensity (gCO2/kWh) at planner time `t_s`: what the grid operator publishes now.
    pub fn intensity_at(&self, t_s: f64) -> f64 {
        self.trace.at_offset(self.offset_s + t_s)
    }

    /// Forecast at `now_s` of the intensity at `at_s >= now_s`, using only values before `now_s`.
    pub fn forecast(&self, now_s: f64, at_s: f64) -> f64 {
        if at_s <= now_s {
            return self.intensity_at(at_s.min(now_s));
        }
        let ahead_days = ((at_s - now_s) / DAY_S).floor() as u32 + 1;
        let mut sum = 0.0;
        let mut n = 0.0;
        for d in ahead_days..ahead_days + FORECAST_DAYS {
            sum += self.intensity_at(at_s - d as f64 * DAY_S);
            n += 1.0;
        }
        sum / n
    }

    /// The cleanest moment in `[now_s, now_s + window_s]` by the forecast, sampled at the
    /// starts of the series' steps, and its forecast intensity. `now_s` itself is included at
    /// its known value.
    pub fn cleanest_within(&self, now_s: f64, window_s: f64) -> (f64, f64) {
        let mut best = (now_s, self.intensity_at(now_s));
        let step = self.trace.step_s.max(60.0);
        let mut t = ((now_s + self.offset_s) / step).floor() * step - self.offset_s + step;
        while t <= now_s + window_s {
            let g = self.forecast(now_s, t);
            if g < best.1 {
                best = (t, g);
            }
            t += step;
        }
        best
    }

    /// Intensity now relative to the forecast mean of the next day (> 1: dirtier than usual).
    pub fn relative_intensity(&self, now_s: f64) -> f64 {
        let step = self.trace.step_s.max(60.0);
        let mut sum = 0.0;
        let mut n = 0.0;
        let mut t = now_s + step;
        while t <= now_s + DAY_S {
            sum += self.forecast(now_s, t);
            n += 1.0;
            t += step;
        }
        let mean = if n > 0.0 { sum / n } else { self.intensity_at(now_s) };
        if mean > 0.0 { self.intensity_at(now_s) / mean } else { 1.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn daily_wave(days: usize) -> CarbonTrace {
        // 30-min steps, clean at night (100), dirty by day (300).
        let g = (0..days * 48).map(|i| if (i % 48) < 24 { 100.0 } else { 300.0 }).collect();
        CarbonTrace { start_unix_s: 0, step_s: 1800.0, g_per_kwh: g, gaps_filled: 0, finer_samples_skipped: 0 }
    }

    #[test]
    fn forecast_uses_the_past_only() {
        let mut trace = daily_wave(30);
        // A spike tomorrow that no forecast can know about.
        trace.g_per_kwh[20 * 48 + 10] = 10_000.0;
        let s = CarbonSignal::new(trace, 0.0);
        let now = 19.0 * DAY_S + 10.0 * 1800.0;
        let f = s.forecast(now, now + DAY_S);
        assert!((f - 100.0).abs() < 1e-9, "forecast saw the future: {f}");
    }

    #[test]
    fn cleanest_window_is_found() {
        let s = CarbonSignal::new(daily_wave(30), 0.0);
        let now = 10.0 * DAY_S + 13.0 * 3600.0; // in the dirty half
        let (t, g) = s.cleanest_within(now, 12.0 * 3600.0);
        assert_eq!(g, 100.0);
        assert!(t > now);
        assert!(s.relative_intensity(now) > 1.0);
    }
}
