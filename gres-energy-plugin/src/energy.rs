//! Energy of a set of GPUs from NVML's total-energy counters
//! (`nvmlDeviceGetTotalEnergyConsumption`, mJ since the driver loaded): the sum of the
//! counter's steps since the meter started is exact, however rarely it is read — unlike
//! integrating power samples, which is what stock acct_gather_energy/gpu does.
//!
//! - **Rebase.** The counter restarts when the driver reloads or the GPU is reset, so a reading
//!   below the previous one is a new origin, never a reason to stop counting: the energy counted
//!   so far is kept, the interval in which the reset happened is estimated from the power at
//!   both ends of it, and counting goes on from the new reading.
//! - **Unknown is not 0 J.** A GPU whose counter has not been read yet, or whose last read
//!   failed, makes the meter's total unknown ([`Totals::unknown_gpus`]); Slurm is then told
//!   `NO_VAL64` ([`UNKNOWN_ENERGY_J`]), its own "no value", which sacct leaves blank and
//!   slurmctld does not add to the job. A transient failure costs nothing: the next good read
//!   counts the whole interval. Each failure is logged once per GPU and call.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpu_control::GpuControl;
use slurm_bindings::Logger;

use crate::errors::ErrorOnce;

/// Slurm's "no value" for energy (`NO_VAL64`), what Slurm's own energy plugins report when they
/// cannot read their sensor.
pub const UNKNOWN_ENERGY_J: u64 = 0xffff_ffff_ffff_fffe;

/// One GPU's counter as the meter follows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterTrack {
    /// Raw counter and power at the last good read, and when.
    last: Option<(u64, u32, Instant)>,
    /// Energy counted since the first good read, mJ.
    counted_mj: u64,
    /// The last attempt to read the counter failed.
    failing: bool,
    /// Times the counter went backwards.
    resets: u32,
}

/// What one read of a counter found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterStep {
    First,
    Forward,
    /// The counter went backwards (driver reload, GPU reset): from, to (mJ).
    Rebased { from_mj: u64, to_mj: u64 },
}

impl CounterTrack {
    /// Folds in a good reading of the raw counter (`power_mw`: the power now, 0 if unknown).
    pub fn good(&mut self, raw_mj: u64, power_mw: u32, now: Instant) -> CounterStep {
        self.failing = false;
        let step = match self.last {
            None => CounterStep::First,
            Some((prev_mj, _, _)) if raw_mj >= prev_mj => {
                self.counted_mj = self.counted_mj.saturating_add(raw_mj - prev_mj);
                CounterStep::Forward
            }
            Some((prev_mj, prev_power_mw, prev_at)) => {
                // The counter restarted somewhere in this interval: the power at its two ends
                // is our best estimate of what it lost.
                let seconds = now.saturating_duration_since(prev_at).as_secs_f64();
                let mean_mw = (f64::from(prev_power_mw) + f64::from(power_mw)) / 2.0;
                let estimate_mj = (mean_mw * seconds) as u64;
                // A counter that restarted from 0 shows a lower bound of the interval's energy;
                // one that merely dipped (far from 0) shows nothing about it.
                let restarted = raw_mj < prev_mj / 2;
                let interval_mj = if restarted { estimate_mj.max(raw_mj) } else { estimate_mj };
                self.counted_mj = self.counted_mj.saturating_add(interval_mj);
                self.resets = self.resets.saturating_add(1);
                CounterStep::Rebased { from_mj: prev_mj, to_mj: raw_mj }
            }
        };
        self.last = Some((raw_mj, power_mw, now));
        step
    }

    /// A read that failed: what was counted is kept, the total is unknown until the next good
    /// read.
    pub fn failed(&mut self) {
        self.failing = true;
    }

    pub fn counted_mj(&self) -> u64 {
        self.counted_mj
    }

    /// No good read yet, or the last read failed.
    pub fn is_unknown(&self) -> bool {
        self.failing || self.last.is_none()
    }

    pub fn resets(&self) -> u32 {
        self.resets
    }
}

/// Sums over the meter's GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Energy since the meter started, mJ (over the GPUs that could be read).
    pub consumed_mj: u64,
    /// Power now, mW.
    pub power_mw: u64,
    /// Time since the meter started.
    pub elapsed: Duration,
    /// GPUs whose counter is unknown now: the total is then unknown too.
    pub unknown_gpus: usize,
}

/// Counter-based energy of a fixed set of GPUs (NVML indices).
#[derive(Debug)]
pub struct EnergyMeter {
    gpus: Vec<u32>,
    tracks: Vec<CounterTrack>,
    power_mw: Vec<u32>,
    started: Instant,
}

impl EnergyMeter {
    /// Reads every GPU's counter now.
    pub fn start(ctrl: &dyn GpuControl, gpus: &[u32], errs: &mut ErrorOnce, log: &Logger, ctx: &str) -> EnergyMeter {
        let mut meter = EnergyMeter {
            gpus: gpus.to_vec(),
            tracks: vec![CounterTrack::default(); gpus.len()],
            power_mw: vec![0; gpus.len()],
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
        let now = Instant::now();
        for (k, &gpu) in self.gpus.iter().enumerate() {
            match ctrl.power_usage_mw(gpu) {
                Ok(p) => self.power_mw[k] = p,
                Err(e) => {
                    errs.report(log, ctx, &e);
                }
            }
            match ctrl.total_energy_mj(gpu) {
                Ok(raw_mj) => {
                    if let CounterStep::Rebased { from_mj, to_mj } = self.tracks[k].good(raw_mj, self.power_mw[k], now) {
                        log.info(&format!(
                            "{ctx}: GPU {gpu}: energy counter went back from {from_mj} to {to_mj} mJ (driver reload or GPU reset); counting on from the new value"
                        ));
                    }
                }
                Err(e) => {
                    errs.report(log, ctx, &e);
                    self.tracks[k].failed();
                }
            }
        }
        self.totals()
    }

    /// The totals of the last read.
    pub fn totals(&self) -> Totals {
        let consumed_mj = self.tracks.iter().map(CounterTrack::counted_mj).fold(0u64, u64::saturating_add);
        let power_mw = self.power_mw.iter().map(|&p| u64::from(p)).sum();
        let unknown_gpus = self.tracks.iter().filter(|t| t.is_unknown()).count();
        Totals { consumed_mj, power_mw, elapsed: self.started.elapsed(), unknown_gpus }
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
    /// The report when the energy cannot be known (NVML missing, a counter failing): Slurm's
    /// `NO_VAL64`/`NO_VAL`, never 0 J.
    pub fn unknown(previous: &EnergyFields) -> EnergyFields {
        // Only the energy carries "unknown": Slurm copies the watts into TRES usage as they are.
        EnergyFields {
            ave_watts: 0,
            base_consumed_energy: 0,
            consumed_energy: UNKNOWN_ENERGY_J,
            current_watts: 0,
            previous_consumed_energy: previous.consumed_energy,
            poll_time: unix_now_s(),
        }
    }

    pub fn is_unknown(&self) -> bool {
        self.consumed_energy == UNKNOWN_ENERGY_J
    }

    /// The report that follows `previous` given new totals.
    pub fn next(previous: &EnergyFields, totals: &Totals) -> EnergyFields {
        if totals.unknown_gpus > 0 {
            return EnergyFields::unknown(previous);
        }
        // After an unknown report, the previous value that counts is the last known one.
        let previous_j = if previous.is_unknown() { 0 } else { previous.consumed_energy };
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
            base_consumed_energy: consumed_j.saturating_sub(previous_j),
            consumed_energy: consumed_j,
            current_watts: u32::try_from((totals.power_mw + 500) / 1000).unwrap_or(u32::MAX).min(current_watts),
            previous_consumed_energy: previous_j,
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
        assert!(!g.is_unknown());
        assert_eq!((g.previous_consumed_energy, g.base_consumed_energy, g.consumed_energy), (10, 15, 25));
        assert_eq!(errs.reported(), 0);
    }

    #[test]
    fn missing_gpu_is_reported_once_and_makes_the_total_unknown() {
        let gpus = FakeGpus::v100s(1);
        let mut errs = ErrorOnce::new();
        let mut meter = EnergyMeter::start(&gpus, &[0, 5], &mut errs, &LOG, "t");
        gpus.with_gpu(0, |s| s.energy_mj += 3_000).unwrap();
        let t = meter.read(&gpus, &mut errs, &LOG, "t");
        assert_eq!((t.consumed_mj, t.unknown_gpus), (3_000, 1));
        let f = EnergyFields::next(&EnergyFields::default(), &t);
        assert!(f.is_unknown());
        assert_eq!((f.consumed_energy, f.current_watts), (UNKNOWN_ENERGY_J, 0));
        // Both calls fail in the same handle lookup of GPU 5: one line, however often it is read.
        meter.read(&gpus, &mut errs, &LOG, "t");
        assert_eq!(errs.reported(), 1);
    }

    #[test]
    fn no_gpus_is_a_known_zero() {
        let gpus = FakeGpus::v100s(1);
        let mut errs = ErrorOnce::new();
        let mut meter = EnergyMeter::start(&gpus, &[], &mut errs, &LOG, "t");
        let f = EnergyFields::next(&EnergyFields::default(), &meter.read(&gpus, &mut errs, &LOG, "t"));
        assert_eq!(f.consumed_energy, 0);
        assert!(!f.is_unknown());
    }

    #[test]
    fn a_transient_failure_is_unknown_then_loses_nothing() {
        let mut track = CounterTrack::default();
        let t0 = Instant::now();
        assert!(track.is_unknown(), "nothing read yet");
        assert_eq!(track.good(10_000, 100_000, t0), CounterStep::First);
        track.failed();
        assert!(track.is_unknown());
        assert_eq!(track.counted_mj(), 0);
        assert_eq!(track.good(15_000, 100_000, t0 + Duration::from_secs(1)), CounterStep::Forward);
        assert!(!track.is_unknown());
        assert_eq!(track.counted_mj(), 5_000);
    }

    #[test]
    fn a_counter_that_goes_back_is_rebased_not_frozen_or_zeroed() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let mut track = CounterTrack::default();
        track.good(50_000_000, 200_000, s(0));
        track.good(52_000_000, 200_000, s(10)); // 2,000 J in 10 s at 200 W
        // Driver reload within the next 10 s: the counter restarts, shows 1,200 J since.
        assert_eq!(track.good(1_200_000, 200_000, s(20)), CounterStep::Rebased { from_mj: 52_000_000, to_mj: 1_200_000 });
        // The interval is estimated from the power (200 W x 10 s), the counting goes on.
        assert_eq!(track.counted_mj(), 2_000_000 + 2_000_000);
        track.good(3_200_000, 200_000, s(30));
        assert_eq!(track.counted_mj(), 6_000_000);
        assert_eq!(track.resets(), 1);
        // Power unknown (0 W): what the counter shows since its restart is the lower bound.
        let mut track = CounterTrack::default();
        track.good(9_000_000, 0, s(0));
        track.good(400_000, 0, s(5));
        assert_eq!(track.counted_mj(), 400_000);
        // A counter that only dips (no restart) adds no more than the GPU could draw.
        let mut track = CounterTrack::default();
        track.good(9_000_000, 100_000, s(0));
        track.good(8_999_000, 100_000, s(1));
        assert_eq!(track.counted_mj(), 100_000);
    }

    #[test]
    fn meter_counts_through_a_reset_of_the_fake() {
        let gpus = FakeGpus::v100s(1);
        gpus.with_gpu(0, |s| s.energy_mj = 7_000_000).unwrap();
        let mut errs = ErrorOnce::new();
        let mut meter = EnergyMeter::start(&gpus, &[0], &mut errs, &LOG, "t");
        gpus.with_gpu(0, |s| s.energy_mj += 1_000_000).unwrap();
        assert_eq!(meter.read(&gpus, &mut errs, &LOG, "t").consumed_mj, 1_000_000);
        gpus.with_gpu(0, |s| s.energy_mj = 30_000).unwrap(); // reset, then 30 J
        let t = meter.read(&gpus, &mut errs, &LOG, "t");
        assert!(t.consumed_mj >= 1_030_000, "{t:?}");
        gpus.with_gpu(0, |s| s.energy_mj += 500_000).unwrap();
        let t2 = meter.read(&gpus, &mut errs, &LOG, "t");
        assert_eq!(t2.consumed_mj, t.consumed_mj + 500_000);
        assert_eq!(t2.unknown_gpus, 0);
    }
}
