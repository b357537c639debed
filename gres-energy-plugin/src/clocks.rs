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
//! Clocks are never set without the ledger: if it cannot be used (no usable spool directory,
//! a lock held for more than 3 s, an unknown step), the GPUs' clocks are left as they are and
//! that is logged. A clock set without a record could neither be arbitrated on a shared GPU
//! nor restored after the step died. A release that fails restores, without the ledger, only
//! the GPUs no other job's step asks for ([`Arbiter::restore_without_ledger`]); a shared one
//! keeps its clocks until the next ledger operation drops this step's request.

use std::path::Path;

use gpu_control::arbiter::{Applied, Arbiter, Outcome, Source, StepKey};
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
    /// Nothing was set (no usable ledger): nothing to undo.
    Untouched,
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
        let untouched = |why: String| {
            // Set without the ledger, a clock could override a co-tenant's on a shared GPU
            // and would outlive a step that dies; the step runs at the clocks in force.
            log.error(&format!("{ctx}: {why}; GPU clocks left as they are (--gpu-freq={request} not applied)"));
            StepClocks { gpus: gpus.to_vec(), how: How::Untouched }
        };
        let Some(key) = step else { return untouched("step identity unknown".into()) };
        let arbiter = match Arbiter::open(ledger_dir) {
            Ok(a) => a,
            Err(e) => return untouched(e.to_string()),
        };
        match arbiter.request_each(ctrl, &key, &wanted, Source::Explicit) {
            Ok(out) => {
                log_outcome(log, ctx, &format!("for --gpu-freq={request}"), &out, request.verbose, errs);
                StepClocks { gpus: gpus.to_vec(), how: How::Arbitrated(arbiter, key) }
            }
            // The request is not in the ledger (nothing was written or set before the error).
            Err(e) => untouched(e.to_string()),
        }
    }

    /// NVML indices of the step's GPUs.
    pub fn gpus(&self) -> &[u32] {
        &self.gpus
    }

    /// Gives the step's clocks back (the arbiter restores what other steps ask for, or the
    /// default).
    pub fn finish(self, ctrl: &dyn GpuControl, errs: &mut ErrorOnce, log: &Logger, ctx: &str) {
        let How::Arbitrated(arbiter, key) = self.how else { return };
        let e = match arbiter.release(ctrl, &key) {
            Ok(out) => return log_outcome(log, ctx, "at step end", &out, false, errs),
            Err(e) => e,
        };
        // The ledger could not be used: the GPUs no other job asks for go back to their
        // defaults (never slower than stock); a shared one is left to the next ledger operation.
        let out = arbiter.restore_without_ledger(ctrl, &key, &self.gpus);
        for gpu_error in &out.errors {
            errs.report(log, ctx, gpu_error);
        }
        log.error(&format!("{ctx}: {e}; {}", describe_unarbitrated(&out)));
    }
}

/// What a release without the ledger did, for the log.
pub fn describe_unarbitrated(out: &gpu_control::arbiter::Unarbitrated) -> String {
    let list = |g: &[u32]| g.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
    let mut parts = Vec::new();
    if !out.reset.is_empty() {
        parts.push(format!("reset GPU(s) {} to their default clocks without the ledger", list(&out.reset)));
    }
    if !out.left.is_empty() {
        parts.push(format!(
            "left GPU(s) {} as they are (another job's step asks for a clock there; the next step start or end on the node, or slurmd's start, drops this step's request)",
            list(&out.left)
        ));
    }
    if parts.is_empty() { "no GPU clock to restore".into() } else { parts.join("; ") }
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
    fn nothing_is_set_without_the_ledger() {
        static LOG: Logger = Logger::new("test");
        let mut errs = ErrorOnce::new();
        let req = step_request("gpu:low", None).unwrap().unwrap();
        // An H100 refusing locked clocks: its power limit would be the control.
        let gpus = gpu_control::FakeGpus::new(vec![gpu_control::FakeGpu::h100(0)]);
        gpus.with_gpu(0, |g| g.refuse_locked = Some(gpu_control::GpuErrorKind::NoPermission)).unwrap();
        // No step identity, then a ledger directory that cannot be made (a file in the way).
        let clocks = StepClocks::start(&gpus, Path::new("/nonexistent"), None, &[0], &req, &mut errs, &LOG, "t");
        assert_eq!(gpus.power_limit_mw(0).unwrap(), 700_000, "no clock without arbitration");
        clocks.finish(&gpus, &mut errs, &LOG, "t");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), "").unwrap();
        let key = StepKey::for_process(5, 0, "n1", std::process::id()).unwrap();
        let clocks = StepClocks::start(&gpus, &dir.path().join("file").join("ledger"), Some(key), &[0], &req, &mut errs, &LOG, "t");
        assert_eq!(gpus.power_limit_mw(0).unwrap(), 700_000, "no clock without arbitration");
        clocks.finish(&gpus, &mut errs, &LOG, "t");
        assert_eq!(gpus.power_limit_mw(0).unwrap(), 700_000);
        assert_eq!(errs.reported(), 0);
    }

    #[test]
    fn a_release_that_cannot_lock_the_ledger_keeps_a_co_tenants_clock() {
        use std::os::fd::AsRawFd;
        static LOG: Logger = Logger::new("test");
        let dir = tempfile::tempdir().unwrap();
        let gpus = FakeGpus::v100s(2);
        let mut errs = ErrorOnce::new();
        let me = std::process::id();
        // Job 5 on GPUs 0 and 1; job 6 shares GPU 1 and asks for more.
        let five = StepClocks::start(&gpus, dir.path(), Some(StepKey::for_process(5, 0, "n1", me).unwrap()), &[0, 1], &step_request("gpu:1000", None).unwrap().unwrap(), &mut errs, &LOG, "5.0");
        let _six = StepClocks::start(&gpus, dir.path(), Some(StepKey::for_process(6, 0, "n1", me).unwrap()), &[1], &step_request("gpu:1200", None).unwrap().unwrap(), &mut errs, &LOG, "6.0");
        let graphics = |g: u32| gpus.with_gpu(g, |x| x.locked_clocks_mhz).unwrap().map(|c| c.1);
        assert!(graphics(1).is_some_and(|c| c >= 1200));
        // Another process holds the ledger's lock past the wait.
        let holder = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(dir.path().join("ledger.lock")).unwrap();
        // SAFETY: flock on a descriptor this test owns.
        assert_eq!(unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX) }, 0);
        five.finish(&gpus, &mut errs, &LOG, "5.0");
        assert_eq!(graphics(0), None, "job 5's own GPU is restored without the ledger");
        assert!(graphics(1).is_some_and(|c| c >= 1200), "job 6's clock on the shared GPU is kept");
    }
}
