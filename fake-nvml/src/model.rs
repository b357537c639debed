//! The physics of the fake: which graphics clock a GPU runs at and how much power it draws,
//! from its configuration and its mutable state. Pure functions; no I/O.
//!
//! Clock: a busy GPU (utilisation > 0) runs at the top of its locked range if clocks are
//! locked, else at its application graphics clock; an idle GPU runs at the bottom of its locked
//! range, else at the lowest supported clock.
//!
//! Power, in mW:
//!
//! ```text
//! P = idle_power_mw + (max_power_mw - idle_power_mw) * (util_gpu_pct / 100) * (f / f_max)^2
//! ```
//!
//! capped at the GPU's power limit, where `f` is the clock above and `f_max` the highest
//! supported graphics clock. With the V100 defaults: 41 W idle, 250 W at 1530 MHz and 100 %,
//! 194.7 W at the default 1312 MHz and 100 %.

use crate::config::Config;
use crate::state::GpuState;

/// The graphics (= SM) clock GPU `gpu` runs at now.
pub fn current_graphics_clock_mhz(config: &Config, gpu: &GpuState) -> u32 {
    match (gpu.util_gpu_pct > 0, gpu.locked_clocks_mhz) {
        (true, Some((_, max))) => max,
        (true, None) => gpu.app_graphics_clock_mhz,
        (false, Some((min, _))) => min,
        (false, None) => config.min_graphics_clock_mhz(),
    }
}

/// Instant power draw of GPU `gpu`, in mW (fractional, so energy integrates exactly). A busy
/// GPU whose workload registered its own power (`crate::workload_profile`) draws that instead.
pub fn power_mw(config: &Config, gpu: &GpuState) -> f64 {
    if let (true, Some(p)) = (gpu.util_gpu_pct > 0, gpu.workload_power_mw) {
        return f64::from(p.max(config.idle_power_mw)).min(f64::from(gpu.power_limit_mw));
    }
    let util = f64::from(gpu.util_gpu_pct.min(100)) / 100.0;
    let f_max = f64::from(config.max_graphics_clock_mhz().max(1));
    let ratio = f64::from(current_graphics_clock_mhz(config, gpu)) / f_max;
    let idle = f64::from(config.idle_power_mw);
    let dynamic = f64::from(config.max_power_mw.saturating_sub(config.idle_power_mw));
    (idle + dynamic * util * ratio * ratio).min(f64::from(gpu.power_limit_mw))
}

/// Energy counter of GPU `gpu` at wall time `now_ns` (Unix ns), in mJ: the stored value plus
/// the current power integrated since it was stored. Never decreases, even if the wall clock
/// steps back.
pub fn energy_mj_at(config: &Config, gpu: &GpuState, now_ns: u128) -> f64 {
    let elapsed_s = now_ns.saturating_sub(gpu.energy_at_unix_ns) as f64 / 1e9;
    // mW * s = mJ
    gpu.energy_mj + power_mw(config, gpu) * elapsed_s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(util: u32, locked: Option<(u32, u32)>) -> GpuState {
        let mut g = GpuState::initial(&Config::default(), 0);
        g.util_gpu_pct = util;
        g.locked_clocks_mhz = locked;
        g
    }

    #[test]
    fn power_follows_documented_formula() {
        let c = Config::default();
        assert_eq!(power_mw(&c, &gpu(0, None)), 41_000.0);
        assert!((power_mw(&c, &gpu(100, Some((1530, 1530)))) - 250_000.0).abs() < 1e-6);
        let expected = 41_000.0 + 209_000.0 * 0.5 * (1312.0f64 / 1530.0).powi(2);
        assert!((power_mw(&c, &gpu(50, None)) - expected).abs() < 1e-6);
        let mut capped = gpu(100, Some((1530, 1530)));
        capped.power_limit_mw = 150_000;
        assert_eq!(power_mw(&c, &capped), 150_000.0);
    }

    #[test]
    fn energy_integrates_power_and_ignores_clock_steps_back() {
        let c = Config::default();
        let mut g = gpu(0, None);
        g.energy_mj = 10.0;
        g.energy_at_unix_ns = 1_000_000_000;
        assert!((energy_mj_at(&c, &g, 3_000_000_000) - (10.0 + 82_000.0)).abs() < 1e-6);
        assert_eq!(energy_mj_at(&c, &g, 0), 10.0);
    }
}
