//! Energy of a set of GPUs from NVML's total-energy counters
//! (`nvmlDeviceGetTotalEnergyConsumption`, mJ since the driver loaded, monotonic): the
//! difference since the meter started is exact, however rarely it is read — unlike integrating
//! power samples, which is what stock acct_gather_energy/gpu does.
//!
//! A GPU whose counter cannot be read at start starts at its first good reading; a failed
//! later read keeps the last good value (so a transient error loses nothing, a permanent one
//! stops the count for that GPU). Each failure is logged once per GPU and call.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpu_control::GpuControl;
use slurm_bindings::Logger;

use crate::errors::ErrorOnce;

/// One GPU's last good counter and power.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reading {
    energy_mj: u64,
    power_mw: u32,
}

/// Sums over the meter's GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Energy since the meter started, mJ.
    pub consumed_mj: u64,
    /// Power now, mW.
    pub power_mw: u64,
    /// Time since the meter started.
    pub elapsed: Duration,
}

/// Counter-based energy of a fixed set of GPUs (NVML indices).
#[derive(Debug)]
pub struct EnergyMeter {
    gpus: Vec<u32>,
    start_mj: Vec<Option<u64>>,
    last: Vec<Option<Reading>>,
    started: Instant,
}

impl EnergyMeter {
    /// Reads every GPU's counter now.
    pub fn start(ctrl: &dyn GpuControl, gpus: &[u32], errs: &mut ErrorOnce, log: &Logger, ctx: &str) -> EnergyMeter {
        let mut meter = EnergyMeter {
            gpus: gpus.to_vec(),
            start_mj: vec![None; gpus.len()],
            last: vec![None; gpus.len()],
            started: Instant::now(),
        };
        meter.read(ctrl, errs, log, ctx);
        meter
    }

    pub fn gpus(&self) -> &[u32] {
        &self.gpus
    }

    /// Reads every GPU and returns the totals since start.
    pub fn read(&mut self, ctrl: &dyn GpuControl, errs: &mut ErrorOnce, log: &Logger, ctx: &str) -> Totals {
        for (k, &gpu) in self.gpus.iter().enumerate() {
            let energy = match ctrl.total_energy_mj(gpu) {
                Ok(e) => Some(e),
                Err(e) => {
                    errs.report(log, ctx, &e);
                    None
                }
            };
            let power = match ctrl.power_usage_mw(gpu) {
                Ok(p) => Some(p),
                Err(e) => {
                    errs.report(log, ctx, &e);
                    None
                }
            };
            let previous = self.last[k];
            if let Some(energy_mj) = energy {
                if self.start_mj[k].is_none() {
                    self.start_mj[k] = Some(energy_mj);
                }
                // Monotonic by specification; never count backwards if a driver disagrees.
                let energy_mj = previous.map_or(energy_mj, |p| energy_mj.max(p.energy_mj));
                self.last[k] = Some(Reading { energy_mj, power_mw: power.unwrap_or(0) });
            } else if let (Some(p), Some(power_mw)) = (previous, power) {
                self.last[k] = Some(Reading { power_mw, ..p });
            }
        }
        self.totals()
    }

    /// The totals of the last read.
    pub fn totals(&self) -> Totals {
        let mut consumed_mj = 0u64;
        let mut power_mw = 0u64;
        for (start, last) in self.start_mj.iter().zip(&self.last) {
            if let (Some(start), Some(last)) = (start, last) {
                consumed_mj += last.energy_mj.saturating_sub(*start);
                power_mw += u64::from(last.power_mw);
            }
        }
        Totals { consumed_mj, power_mw, elapsed: self.started.elapsed() }
    }
}

/// The fields of Slurm's `acct_gather_energy_t`, in its units (J, W, Unix s).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EnergyFields {
    pub ave_watts: u32,
    /// Energy since the previous report, J.
    pub base_consumed_energy: u64,
    /// Energy since the start, J.
    pub consumed_energy: u64,
    pub current_watts: u32,
    /// `consumed_energy` of the previous report, J.
    pub previous_consumed_energy: u64,
    pub poll_time: i64,
}

impl EnergyFields {
    /// The report that follows `previous` given new totals.
    pub fn next(previous: &EnergyFields, totals: &Totals) -> EnergyFields {
        let consumed_j = totals.consumed_mj / 1000;
        let elapsed_s = totals.elapsed.as_secs_f64();
        let current_watts = u32::try_from(totals.power_mw.div_ceil(1000).max(totals.power_mw / 1000)).unwrap_or(u32::MAX);
        let ave_watts = if elapsed_s >= 1.0 {
            u32::try_from((totals.consumed_mj as f64 / 1000.0 / elapsed_s).round() as u64).unwrap_or(u32::MAX)
        } else {
            current_watts
        };
        EnergyFields {
            ave_watts,
            base_consumed_energy: consumed_j.saturating_sub(previous.consumed_energy),
            consumed_energy: consumed_j,
            current_watts: u32::try_from((totals.power_mw + 500) / 1000).unwrap_or(u32::MAX).min(current_watts),
            previous_consumed_energy: previous.consumed_energy,
            poll_time: unix_now_s(),
        }
    }
}

/// Wall clock, Unix seconds.
pub fn unix_now_s() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_control::FakeGpus;

    static LOG: Logger = Logger::new("test");

    #[test]
    fn counts_only_its_gpus_from_the_counter() {
        let gpus = FakeGpus::v100s(4);
        for g in 0..4 {
            gpus.with_gpu(g, |s| {
                s.energy_mj = 1_000_000 * u64::from(g);
                s.power_mw = 100_000;
            })
            .unwrap();
        }
        let mut errs = ErrorOnce::new();
        let mut meter = EnergyMeter::start(&gpus, &[1, 3], &mut errs, &LOG, "t");
        gpus.with_gpu(1, |s| s.energy_mj += 2_500).unwrap();
        gpus.with_gpu(3, |s| s.energy_mj += 7_600).unwrap();
        gpus.with_gpu(0, |s| s.energy_mj += 99_000_000).unwrap();
        let t = meter.read(&gpus, &mut errs, &LOG, "t");
        assert_eq!(t.consumed_mj, 10_100);
        assert_eq!(t.power_mw, 200_000);
        let f = EnergyFields::next(&EnergyFields::default(), &t);
        assert_eq!((f.consumed_energy, f.current_watts), (10, 200));
        let g = EnergyFields::next(&f, &Totals { consumed_mj: 25_000, ..t });
        assert_eq!((g.previous_consumed_energy, g.base_consumed_energy, g.consumed_energy), (10, 15, 25));
        assert_eq!(errs.reported(), 0);
    }

    #[test]
    fn missing_gpu_is_reported_once_and_counted_as_nothing() {
        let gpus = FakeGpus::v100s(1);
        let mut errs = ErrorOnce::new();
        let mut meter = EnergyMeter::start(&gpus, &[0, 5], &mut errs, &LOG, "t");
        gpus.with_gpu(0, |s| s.energy_mj += 3_000).unwrap();
        let t = meter.read(&gpus, &mut errs, &LOG, "t");
        assert_eq!(t.consumed_mj, 3_000);
        // Both calls fail in the same handle lookup of GPU 5: one line, however often it is read.
        meter.read(&gpus, &mut errs, &LOG, "t");
        assert_eq!(errs.reported(), 1);
    }
}
