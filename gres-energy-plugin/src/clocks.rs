//! `--gpu-freq` for a step: resolved with stock Slurm's grammar and rules
//! ([`gpu_control::gpu_freq`]), requested through the node's clock arbiter
//! ([`gpu_control::arbiter`]: the highest request per GPU wins, an explicit `--gpu-freq` beats the
//! policy clock of the same step, the last step out restores the default, dead steps are
//! repaired), and released at the step's end.
//!
//! Each GPU's clock goes through the control it supports ([`gpu_control::clock_control`]:
//! locked clocks, application clocks or a power limit), logged once when it is chosen:
//! `GPU 2: clock control: locked clocks`.
//!
//! If the arbiter's ledger cannot be used at all (no writable spool directory), the clocks are
//! set directly with the control probed the same way, undone with it at the step's end, and
//! that is logged.

use std::path::Path;

use gpu_control::arbiter::{Applied, Arbiter, Outcome, Source, StepKey};
use gpu_control::clock_control::{self, ControlOrder, Probed, Setting};
use gpu_control::gpu_freq::{self, GpuFreqError, GpuFreqRequest, SLURM_DEFAULT_GPU_FREQ_DEF};
use gpu_control::{AppClocksMhz, GpuControl};
use slurm_bindings::Logger;

use crate::errors::ErrorOnce;

/// Slurm's step ids for the special steps (`slurm.h`).
pub const SLURM_BATCH_SCRIPT: u32 = 0xffff_fffb;
pub const SLURM_EXTERN_CONT: u32 = 0xffff_fffc;
pub const SLURM_INTERACTIVE_STEP: u32 = 0xffff_fffa;

/// The request of a step's `tres_freq` (`gpu:...;...`), with slurm.conf's `GpuFreqDef` filling
/// what it leaves out; `Ok(None)` when it says nothing about GPUs.
pub fn step_request(tres_freq: &str, gpu_freq_def: Option<&str>) -> Result<Option<GpuFreqRequest>, GpuFreqError> {
    let Some(request) = gpu_freq::parse_tres_freq(tres_freq)? else { return Ok(None) };
    let defaults = match gpu_freq_def.map(str::trim).filter(|d| !d.is_empty()) {
        Some(def) => gpu_freq::parse_gpu_freq(def)?.or_defaults(&SLURM_DEFAULT_GPU_FREQ_DEF),
        None => SLURM_DEFAULT_GPU_FREQ_DEF,
    };
    // `verbose` of GpuFreqDef does not make every step verbose.
    let verbose = request.verbose;
    Ok(Some(GpuFreqRequest { verbose, ..request.or_defaults(&defaults) }))
}

/// `12.0`, `12.batch`, `12+1.3` (a slurmstepd's title without brackets) -> (job id, step id).
pub fn parse_step_ids(text: &str) -> Option<(u32, u32)> {
    let (job, step) = text.split_once('.')?;
    let job = job.split('+').next()?.parse().ok()?;
    let step = match step {
        "batch" => SLURM_BATCH_SCRIPT,
        "extern" => SLURM_EXTERN_CONT,
        "interactive" => SLURM_INTERACTIVE_STEP,
        n => n.parse().ok()?,
    };
    Some((job, step))
}

/// What a step changed, to undo at its end.
#[derive(Debug)]
pub struct StepClocks {
    /// NVML indices of the step's GPUs.
    gpus: Vec<u32>,
    how: How,
}

#[derive(Debug)]
enum How {
    Arbitrated(Arbiter, StepKey),
    /// Set directly (no usable ledger): undone directly at the end, with each GPU's control.
    Direct(Vec<(u32, Probed)>),
}

fn describe(c: AppClocksMhz) -> String {
    format!("graphics {} MHz, memory {} MHz", c.graphics_mhz, c.memory_mhz)
}

/// `GPU 0: application clocks for --gpu-freq=...: graphics 1005 MHz, memory 877 MHz`.
fn describe_applied(gpu: u32, what: &str, applied: &Applied) -> String {
    match applied {
        Applied::Set(c) => format!("GPU {gpu}: application clocks {what}: {}", describe(*c)),
        Applied::Locked { min_mhz, max_mhz } => format!("GPU {gpu}: locked clocks {what}: graphics {min_mhz}-{max_mhz} MHz"),
        Applied::PowerLimit { limit_mw } => format!("GPU {gpu}: power limit {what}: {} W", f64::from(*limit_mw) / 1000.0),
        Applied::Reset => format!("GPU {gpu}: clock control {what}: back to the setting before the first step"),
    }
}

fn log_outcome(log: &Logger, ctx: &str, what: &str, out: &Outcome, verbose: bool, errs: &mut ErrorOnce) {
    for line in out.describe_controls() {
        log.info(&format!("{ctx}: {line}"));
    }
    for (gpu, applied) in &out.applied {
        let text = format!("{ctx}: {}", describe_applied(*gpu, what, applied));
        if verbose { log.info(&text) } else { slurm_bindings::slurm_log!(log, verbose, "{text}") }
    }
    for step in &out.repaired_steps {
        log.info(&format!("{ctx}: dropped the clock requests of {step}, whose slurmstepd is gone"));
    }
    if let Some(q) = &out.quarantined {
        log.error(&format!("{ctx}: the clock ledger could not be read ({}); moved to {} and GPUs off their default clocks were reset", q.reason, q.path.display()));
    }
    for e in &out.gpu_errors {
        errs.report(log, ctx, e);
    }
}

impl StepClocks {
    /// Applies `request` to the step's GPUs (NVML indices). Never fails: what goes wrong is
    /// logged once per GPU and call, and the step runs on.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        ctrl: &dyn GpuControl,
        ledger_dir: &Path,
        step: Option<StepKey>,
        gpus: &[u32],
        request: &GpuFreqRequest,
        errs: &mut ErrorOnce,
        log: &Logger,
        ctx: &str,
    ) -> StepClocks {
        let mut wanted = Vec::new();
        for &gpu in gpus {
            match gpu_freq::resolve_application_clocks(request, ctrl, gpu) {
                Ok(c) => wanted.push((gpu, c)),
                Err(e) => {
                    errs.report(log, ctx, &e);
                }
            }
        }
        let arbiter = step.map(|key| Arbiter::open(ledger_dir).map(|a| (a, key)));
        match arbiter {
            Some(Ok((arbiter, key))) => match arbiter.request_each(ctrl, &key, &wanted, Source::Explicit) {
                Ok(out) => {
                    log_outcome(log, ctx, &format!("for --gpu-freq={request}"), &out, request.verbose, errs);
                    return StepClocks { gpus: gpus.to_vec(), how: How::Arbitrated(arbiter, key) };
                }
                Err(e) => log.error(&format!("{ctx}: {e}; setting clocks without arbitration")),
            },
            Some(Err(e)) => log.error(&format!("{ctx}: {e}; setting clocks without arbitration")),
            None => log.error(&format!("{ctx}: step identity unknown; setting clocks without arbitration")),
        }
        let order = ControlOrder::from_env().unwrap_or_else(|e| {
            log.error(&format!("{ctx}: {e}; using the default order"));
            ControlOrder::default()
        });
        let mut done = Vec::new();
        for (gpu, clocks) in wanted {
            match clock_control::probe_and_apply(ctrl, gpu, &order, Setting::clocks(clocks)) {
                Ok(probed) => {
                    log.info(&format!("{ctx}: GPU {gpu}: clock control: {}", probed.control.describe()));
                    let text = format!("{ctx}: {}", describe_applied(gpu, &format!("set for --gpu-freq={request}"), &probed.applied));
                    if request.verbose { log.info(&text) } else { slurm_bindings::slurm_log!(log, verbose, "{text}") }
                    done.push((gpu, probed));
                }
                Err(e) => {
                    errs.report(log, ctx, &e);
                }
            }
        }
        StepClocks { gpus: gpus.to_vec(), how: How::Direct(done) }
    }

    /// NVML indices of the step's GPUs.
    pub fn gpus(&self) -> &[u32] {
        &self.gpus
    }

    /// Gives the step's clocks back (the arbiter restores what other steps ask for, or the
    /// default).
    pub fn finish(self, ctrl: &dyn GpuControl, errs: &mut ErrorOnce, log: &Logger, ctx: &str) {
        match self.how {
            How::Arbitrated(arbiter, key) => match arbiter.release(ctrl, &key) {
                Ok(out) => {
                    log_outcome(log, ctx, "at step end", &out, false, errs);
                    return;
                }
                Err(e) => log.error(&format!("{ctx}: {e}; resetting clocks directly")),
            },
            How::Direct(done) => {
                for (gpu, probed) in done {
                    if let Err(e) = clock_control::restore(ctrl, gpu, probed.control, probed.prior) {
                        errs.report(log, ctx, &e);
                    }
                }
                return;
            }
        }
        // The ledger could not be reached: nothing tells which control was used, so every
        // control of the step's GPUs goes back to its default (never slower than stock).
        for &gpu in &self.gpus {
            if let Err(errors) = clock_control::reset_all(ctrl, gpu) {
                for e in errors {
                    errs.report(log, ctx, &e);
                }
            }
        }
    }
}

/// slurmd start: drops requests of steps that died and restores their GPUs' clocks.
pub fn repair(ctrl: &dyn GpuControl, ledger_dir: &Path, errs: &mut ErrorOnce, log: &Logger, ctx: &str) {
    if !ledger_dir.exists() {
        return; // nothing was ever recorded on this node
    }
    match Arbiter::open(ledger_dir).and_then(|a| a.repair(ctrl)) {
        Ok(out) => log_outcome(log, ctx, "after repair", &out, false, errs),
        Err(e) => log.error(&format!("{ctx}: clock repair: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_control::FakeGpus;
    use gpu_control::gpu_freq::FreqValue;

    #[test]
    fn tres_freq_with_defaults() {
        let r = step_request("gpu:1000", None).unwrap().unwrap();
        assert_eq!((r.graphics, r.memory), (Some(FreqValue::Mhz(1000)), Some(FreqValue::High)));
        let r = step_request("cpu:high;gpu:memory=low,verbose", Some("medium")).unwrap().unwrap();
        assert_eq!((r.graphics, r.memory, r.verbose), (Some(FreqValue::Medium), Some(FreqValue::Low), true));
        assert_eq!(step_request("cpu:high", None).unwrap(), None);
        assert!(step_request("gpu:turbo", None).is_err());
    }

    #[test]
    fn step_ids_from_titles() {
        assert_eq!(parse_step_ids("12.0"), Some((12, 0)));
        assert_eq!(parse_step_ids("7.batch"), Some((7, SLURM_BATCH_SCRIPT)));
        assert_eq!(parse_step_ids("9+1.3"), Some((9, 3)));
        assert_eq!(parse_step_ids("pid 5"), None);
    }

    #[test]
    fn arbitrated_set_and_restore() {
        static LOG: Logger = Logger::new("test");
        let dir = tempfile::tempdir().unwrap();
        let gpus = FakeGpus::v100s(2);
        let key = StepKey::for_process(5, 0, "n1", std::process::id()).unwrap();
        let mut errs = ErrorOnce::new();
        let req = step_request("gpu:1000", None).unwrap().unwrap();
        let clocks = StepClocks::start(&gpus, dir.path(), Some(key), &[1], &req, &mut errs, &LOG, "step 5.0");
        let c1 = gpus.with_gpu(1, |g| g.locked_clocks_mhz).unwrap().expect("locked clocks on a V100 by default");
        assert!(c1.1 >= 1000 && c1.1 < 1010, "{c1:?}");
        assert_eq!(gpus.with_gpu(0, |g| g.locked_clocks_mhz).unwrap(), None);
        clocks.finish(&gpus, &mut errs, &LOG, "step 5.0");
        assert_eq!(gpus.with_gpu(1, |g| g.locked_clocks_mhz).unwrap(), None);
        assert_eq!(gpus.application_clocks_mhz(1).unwrap(), gpus.default_application_clocks_mhz(1).unwrap());
        assert_eq!(errs.reported(), 0);
    }

    #[test]
    fn direct_without_step_identity() {
        static LOG: Logger = Logger::new("test");
        let mut errs = ErrorOnce::new();
        let req = step_request("gpu:low", None).unwrap().unwrap();
        // An H100 refusing locked clocks: no application clocks on Hopper, so its power limit.
        let gpus = gpu_control::FakeGpus::new(vec![gpu_control::FakeGpu::h100(0)]);
        gpus.with_gpu(0, |g| g.refuse_locked = Some(gpu_control::GpuErrorKind::NoPermission)).unwrap();
        let clocks = StepClocks::start(&gpus, Path::new("/nonexistent"), None, &[0], &req, &mut errs, &LOG, "t");
        // low = 345 MHz: 700 W x 345 / 1980 = 122 W, below the 200 W floor.
        assert_eq!(gpus.power_limit_mw(0).unwrap(), 200_000);
        clocks.finish(&gpus, &mut errs, &LOG, "t");
        assert_eq!(gpus.power_limit_mw(0).unwrap(), 700_000);
        assert_eq!(errs.reported(), 0);
    }
}
