//! Grid carbon intensity as the planner may know it: the value now, and a forecast built only
//! from the past (GreenFlow; deferral as in "Let's Wait Awhile").
//!
//! The forecast is seasonal-naive: the intensity at `t + h` is predicted as the mean of the
//! values at the same time of day on the last [`FORECAST_DAYS`] days that are already in the
//! past at `t`. Deferral decisions use this forecast and nothing else: the planner never peeks
//! at the future values of the series.

use crate::carbon_source::IntensitySeries;
use crate::data::carbon::CarbonTrace;

pub const FORECAST_DAYS: u32 = 7;
const DAY_S: f64 = 86_400.0;

/// A carbon-intensity signal on the planner's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct CarbonSignal {
    source: Source,
}

#[derive(Debug, Clone, PartialEq)]
enum Source {
    /// A recorded series (the simulator): forecasts are seasonal-naive, from the past only.
    Trace {
        trace: CarbonTrace,
        /// Planner time 0 corresponds to this offset into the series.
        offset_s: f64,
    },
    /// A site's source file (sched/energy): planner time is unix time, and the values the file
    /// holds for later hours are the forecast (the grid operator's, as the site fetched it).
    /// Where the file says nothing the intensity is unknown (NaN): no deferral, no clock change.
    Published(IntensitySeries),
}

impl CarbonSignal {
    pub fn new(trace: CarbonTrace, offset_s: f64) -> CarbonSignal {
        CarbonSignal { source: Source::Trace { trace, offset_s } }
    }

    /// The live signal of a source file, on a planner clock that is unix time.
    pub fn published(series: IntensitySeries) -> CarbonSignal {
        CarbonSignal { source: Source::Published(series) }
    }

    pub fn step_s(&self) -> f64 {
        match &self.source {
            Source::Trace { trace, .. } => trace.step_s,
            Source::Published(s) => s.step_s() as f64,
        }
    }

    /// Intensity (gCO2/kWh) at planner time `t_s`: what the grid operator publishes now.
    pub fn intensity_at(&self, t_s: f64) -> f64 {
        match &self.source {
            Source::Trace { trace, offset_s } => trace.at_offset(offset_s + t_s),
            Source::Published(s) => published_at(s, t_s),
        }
    }

    /// Forecast at `now_s` of the intensity at `at_s >= now_s`: for a recorded trace from
    /// values before `now_s` only; for a source file, the file's value for `at_s`.
    pub fn forecast(&self, now_s: f64, at_s: f64) -> f64 {
        if at_s <= now_s {
            return self.intensity_at(at_s.min(now_s));
        }
        if let Source::Published(s) = &self.source {
            return published_at(s, at_s);
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
        if let Source::Published(s) = &self.source {
            for iv in s.intervals() {
                let t = iv.start_unix_s as f64;
                if t > now_s && t <= now_s + window_s && (iv.g_per_kwh < best.1 || best.1.is_nan()) {
                    best = (t, iv.g_per_kwh);
                }
            }
            return best;
        }
        let step = self.step_s().max(60.0);
        let Source::Trace { offset_s, .. } = &self.source else { return best };
        let mut t = ((now_s + offset_s) / step).floor() * step - offset_s + step;
        while t <= now_s + window_s {
            let g = self.forecast(now_s, t);
            if g < best.1 {
                best = (t, g);
            }
            t += step;
        }
        best
    }

    /// Intensity now relative to the forecast mean of the next day (> 1: dirtier than usual);
    /// 1 when either is unknown.
    pub fn relative_intensity(&self, now_s: f64) -> f64 {
        let now_g = self.intensity_at(now_s);
        let mean = match &self.source {
            Source::Published(s) => {
                // Time-weighted mean of what the file says about the next day.
                let (mut g_s, mut secs) = (0.0, 0.0);
                for iv in s.intervals() {
                    let a = (iv.start_unix_s as f64).max(now_s);
                    let b = (iv.end_unix_s as f64).min(now_s + DAY_S);
                    if b > a {
                        g_s += iv.g_per_kwh * (b - a);
                        secs += b - a;
                    }
                }
                if secs > 0.0 { g_s / secs } else { f64::NAN }
            }
            Source::Trace { .. } => {
                let step = self.step_s().max(60.0);
                let mut sum = 0.0;
                let mut n = 0.0;
                let mut t = now_s + step;
                while t <= now_s + DAY_S {
                    sum += self.forecast(now_s, t);
                    n += 1.0;
                    t += step;
                }
                if n > 0.0 { sum / n } else { now_g }
            }
        };
        let rel = now_g / mean;
        if mean > 0.0 && rel.is_finite() { rel } else { 1.0 }
    }
}

fn published_at(s: &IntensitySeries, t_s: f64) -> f64 {
    if !t_s.is_finite() {
        return f64::NAN;
    }
    s.intensity_at(t_s.floor() as i64).unwrap_or(f64::NAN)
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
    fn a_source_file_is_its_own_forecast() {
        // Dirty for the next hour, clean after it, then nothing known.
        let t0 = 1_800_000_000;
        let series = IntensitySeries::from_points(&[(t0, 450.0), (t0 + 3600, 90.0), (t0 + 7200, 120.0)], None);
        let s = CarbonSignal::published(series);
        let now = t0 as f64 + 60.0;
        assert_eq!(s.intensity_at(now), 450.0);
        assert_eq!(s.forecast(now, now + 3600.0), 90.0);
        let (t, g) = s.cleanest_within(now, 2.0 * 3600.0);
        assert_eq!((t, g), ((t0 + 3600) as f64, 90.0));
        // Within the next 30 min nothing cleaner is known.
        assert_eq!(s.cleanest_within(now, 1800.0).1, 450.0);
        assert!(s.relative_intensity(now) > 2.0, "{}", s.relative_intensity(now));
        // Outside the file: unknown, so neutral.
        assert!(s.intensity_at((t0 + 20_000) as f64).is_nan());
        assert_eq!(s.relative_intensity((t0 + 20_000) as f64), 1.0);
        assert_eq!(s.step_s(), 3600.0);
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
