//! slurmd and slurmstepd side of the plugin: applies each step's GPU clock through the node's
//! clock arbiter when the step starts and releases it when the step ends; repairs the ledger
//! when slurmd starts. Decisions are in [`crate::clocks`]; this module only talks to Slurm and
//! logs. It never fails a step: every problem is logged (once per step for each GPU and NVML
//! call) and the step runs on.

use std::collections::BTreeSet;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::Path;
use std::sync::Mutex;

use gpu_control::arbiter::{Arbiter, Outcome, Source, StepKey};
use gpu_control::{GpuControl, GpuError, GpuErrorKind, NvmlGpu};
use gres_energy::devmap;

use crate::clocks::{self, BATCH_STEP, Choice, ClockArgs, EXTERN_STEP, PolicyModel, StepEnv};
use crate::{job_clock, log_error, log_info, lookup};

/// `enum spank_item` values used (from `<slurm/spank.h>`).
const S_JOB_ID: c_int = 2;
const S_JOB_STEPID: c_int = 3;
const S_JOB_ENV: c_int = 10;

type GetItemFn = unsafe extern "C" fn(spank: *mut c_void, item: c_int, ...) -> c_int;

/// The step this slurmstepd runs, between start and end.
struct ActiveStep {
    key: StepKey,
    label: String,
    /// NVML indices of the step's GPUs.
    gpus: Vec<u32>,
    /// The step's GPUs are shared with other jobs (`gres/shard`: Slurm sets
    /// `SLURM_SHARDS_ON_NODE` in the step's environment).
    shards: bool,
}

static STEP: Mutex<Option<ActiveStep>> = Mutex::new(None);
/// `--energy-*` values Slurm handed to the option callbacks in this slurmstepd, as
/// (`_SLURM_SPANK_OPTION_energy_<name with _>`, value).
static REMOTE_OPTIONS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Keeps an option value seen in remote context (for srun steps Slurm passes the options to
/// slurmstepd in the launch request, not in the step's environment).
pub(crate) fn remember_option(name: &str, value: &str) {
    let key = format!("_SLURM_SPANK_OPTION_energy_{}", name.replace('-', "_"));
    let mut opts = REMOTE_OPTIONS.lock().unwrap_or_else(|e| e.into_inner());
    opts.retain(|(k, _)| *k != key);
    opts.push((key, value.to_string()));
}
/// (GPU, call) pairs already logged for this step.
static LOGGED: Mutex<BTreeSet<(Option<u32>, &'static str)>> = Mutex::new(BTreeSet::new());

fn log_once(gpu: Option<u32>, call: &'static str, msg: &str) {
    let first = LOGGED.lock().unwrap_or_else(|e| e.into_inner()).insert((gpu, call));
    if first {
        log_error(msg);
    }
}

fn log_gpu_errors(label: &str, errors: &[GpuError], consequence: &str) {
    for e in errors {
        log_once(e.gpu, e.call, &format!("{label}: {e}; {consequence}"));
    }
}

fn open_nvml(args: &ClockArgs) -> Result<NvmlGpu, GpuError> {
    NvmlGpu::open_from(args.nvml_lib.as_deref())
}

/// slurmd start: steps that died with their slurmstepd (SIGKILL, a crash, a node reboot)
/// leave requests in the ledger; drop them and restore those GPUs.
pub(crate) fn slurmd_start(args: &ClockArgs) {
    if !args.enabled || !args.ledger_dir.join("ledger").exists() {
        return;
    }
    let arbiter = match Arbiter::open(&args.ledger_dir) {
        Ok(a) => a,
        Err(e) => return log_error(&format!("slurmd start: {e}; GPU clocks of dead steps not repaired")),
    };
    let gpu = match open_nvml(args) {
        Ok(g) => g,
        Err(e) => return log_error(&format!("slurmd start: {e}; GPU clocks of dead steps not repaired")),
    };
    match arbiter.repair(&gpu) {
        Ok(out) => {
            if let Some(q) = &out.quarantined {
                log_error(&format!("slurmd start: the clock ledger could not be read ({}); moved to {} and GPUs off their default clocks were reset", q.reason, q.path.display()));
            }
            for e in &out.gpu_errors {
                log_error(&format!("slurmd start: clock repair: {e}"));
            }
            if !out.repaired_steps.is_empty() {
                let steps: Vec<String> = out.repaired_steps.iter().map(ToString::to_string).collect();
                log_info(&format!("slurmd start: restored the GPU clocks left by {}", steps.join(", ")));
            }
        }
        Err(e) => log_error(&format!("slurmd start: {e}")),
    }
}

/// The job id of a job prolog or epilog (`S_JOB_ID` is available in job-script context).
fn script_job_id(spank: *mut c_void) -> Option<u32> {
    let sym = lookup(c"spank_get_item")?;
    // SAFETY: `spank_err_t spank_get_item(spank_t, spank_item_t, ...)` from <slurm/spank.h>.
    let get_item: GetItemFn = unsafe { std::mem::transmute::<*mut c_void, GetItemFn>(sym) };
    let mut job_id: u32 = 0;
    // SAFETY: S_JOB_ID takes a `uint32_t *`; `spank` is the handle Slurm passed to the callback.
    (unsafe { get_item(spank, S_JOB_ID, &mut job_id as *mut u32) } == 0 && job_id != 0).then_some(job_id)
}

/// Job prolog (root, on each node of the job before any of its steps there): keeps the clock
/// sched/energy chose for the job, which slurmctld sent with the prolog in the job's SPANK
/// environment, for the job's steps on this node.
pub(crate) fn job_prolog(spank: *mut c_void, args: &ClockArgs) {
    if !args.enabled || !args.sched_decision {
        return;
    }
    let Some(job_id) = script_job_id(spank) else {
        return log_error("job prolog: no job id from Slurm; sched/energy's clock not kept for the job's steps");
    };
    let dir = job_clock::records_dir(&args.ledger_dir);
    let value = std::env::var(job_clock::PROLOG_ENV).ok();
    let limit = std::env::var(job_clock::PROLOG_POWER_ENV).ok();
    let api = slurm_bindings::node_api::node_api().ok();
    let origin = PrologOrigin {
        at_allocation: api.and_then(|api| api.prolog_flags_alloc()),
        scheduler_type: api.and_then(|api| api.scheduler_type()),
    };
    match keep_decision(&dir, job_id, value.as_deref(), limit.as_deref(), &origin) {
        Ok(()) => {}
        Err(Refused::NotFromSlurmctld(why)) => {
            // Once per node (a marker in the root-only records directory), not per job.
            if mark_once(&dir, NOT_FROM_SLURMCTLD_MARK) {
                log_error(&format!("job {job_id} prolog: {why}; the jobs' steps on this node follow their hints (logged once)"));
            }
        }
        Err(Refused::NotSchedEnergy(why)) => {
            if mark_once(&dir, NOT_SCHED_ENERGY_MARK) {
                log_error(&format!("job {job_id} prolog: {why}; the jobs' steps on this node follow their hints (logged once)"));
            }
        }
        Err(Refused::Other(e)) => log_error(&format!("job {job_id} prolog: {e}; the job's steps follow its hints")),
    }
}

/// Why the job prolog kept no clock.
#[derive(Debug, PartialEq, Eq)]
enum Refused {
    /// The prolog's environment may be the user's (module docs of [`keep_decision`]).
    NotFromSlurmctld(String),
    /// slurm.conf's scheduler is not sched/energy: nothing replaced the user's value.
    NotSchedEnergy(String),
    Other(String),
}

/// Where the job prolog's SPANK environment came from, as slurm.conf says.
#[derive(Debug, Clone, Default)]
struct PrologOrigin {
    /// `PrologFlags` has `Alloc` (`None`: configuration not loaded).
    at_allocation: Option<bool>,
    /// `SchedulerType` (`None`: configuration not loaded).
    scheduler_type: Option<String>,
}

/// The scheduler whose decision the prolog's environment may carry.
const SCHED_ENERGY: &str = "sched/energy";

/// Marker file (in the records directory) of the "not from slurmctld" error, logged once.
const NOT_FROM_SLURMCTLD_MARK: &str = ".prolog-not-at-allocation";

/// Marker file of the "not sched/energy" error, logged once.
const NOT_SCHED_ENERGY_MARK: &str = ".prolog-not-sched-energy";

/// True the first time (creates `dir/name`); false once it exists. True when the directory
/// cannot be used (better logged each time than never). Never fails the prolog.
fn mark_once(dir: &Path, name: &str) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    if gpu_control::arbiter::ensure_private_dir(dir).is_err() {
        return true;
    }
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(dir.join(name)).is_ok()
}

/// Keeps `value` (the prolog's [`job_clock::PROLOG_ENV`]) as job `job_id`'s decision clock, with
/// `limit` ([`job_clock::PROLOG_POWER_ENV`], the ladder step's power limit) if sched/energy sent
/// one, or removes the job's record. A limit that is not one refuses the whole decision. The value is taken only when the prolog runs at allocation
/// (`prolog_at_allocation`: slurm.conf's `PrologFlags` has `Alloc`, which `Contain` sets):
/// then slurmctld sent the prolog with the job's SPANK environment, where sched/energy replaced
/// any value of the user's. Without it slurmd runs the prolog at the first step it launches on
/// the node, with the SPANK environment of that launch request, which `srun` fills from the
/// user's own `SLURM_SPANK_*` variables (22.05 `slurmd/req.c`, `_rpc_launch_tasks`): the value
/// may be the user's, and is refused. Nor is it taken under another scheduler than sched/energy
/// (slurm.conf's `SchedulerType` as this node read it): only sched/energy replaces the user's
/// `SLURM_SPANK_SLURM_ENERGY_*` entries before the start, so under sched/backfill the value is
/// whatever the user exported. An unknown configuration (`None`) is refused too.
fn keep_decision(dir: &Path, job_id: u32, value: Option<&str>, limit: Option<&str>, origin: &PrologOrigin) -> Result<(), Refused> {
    let prolog_at_allocation = origin.at_allocation;
    let scheduler_type = origin.scheduler_type.as_deref();
    let power_limit_mw = match limit.map(|l| (l, model::decision::parse_power_limit_mw(l))) {
        None => Ok(None),
        Some((_, Some(mw))) => Ok(Some(mw)),
        Some((l, None)) => Err(Refused::Other(format!("{}={l:?} is not a power limit in mW", job_clock::PROLOG_POWER_ENV))),
    };
    let kept = match value.map(|v| (v, job_clock::parse_clock_mhz(v))) {
        Some(_) if prolog_at_allocation != Some(true) => Err(Refused::NotFromSlurmctld(format!(
            "{} not taken: without PrologFlags=Alloc (or Contain) in slurm.conf the prolog runs with the environment of the first step's launch, which the user sets",
            job_clock::PROLOG_ENV
        ))),
        Some(_) if scheduler_type != Some(SCHED_ENERGY) => Err(Refused::NotSchedEnergy(format!(
            "{} not taken: slurm.conf's SchedulerType is {}, not {SCHED_ENERGY}, so the value is the user's",
            job_clock::PROLOG_ENV,
            scheduler_type.unwrap_or("unknown")
        ))),
        Some((_, Some(mhz))) => power_limit_mw.and_then(|power_limit_mw| {
            job_clock::write(dir, job_id, job_clock::JobDecision { clock_mhz: mhz, power_limit_mw })
                .map_err(|e| Refused::Other(format!("cannot keep sched/energy's clock {mhz} MHz in {}: {e}", dir.display())))
        }),
        Some((v, None)) => Err(Refused::Other(format!("{}={v:?} is not a clock in MHz", job_clock::PROLOG_ENV))),
        // Not started by sched/energy (or without a clock): the job's hints decide. A record
        // left by an earlier run of a requeued job must not.
        None => job_clock::remove(dir, job_id).map_err(|e| Refused::Other(format!("cannot remove an old record in {}: {e}", dir.display()))),
    };
    if kept.is_err() {
        let _ = job_clock::remove(dir, job_id);
    }
    if prolog_at_allocation == Some(true) {
        // The error is logged again should the configuration lose Alloc later.
        let _ = std::fs::remove_file(dir.join(NOT_FROM_SLURMCTLD_MARK));
    }
    if scheduler_type == Some(SCHED_ENERGY) {
        let _ = std::fs::remove_file(dir.join(NOT_SCHED_ENERGY_MARK));
    }
    kept
}

/// Job epilog (root, on each node of the job after its last step): drops the job's record.
pub(crate) fn job_epilog(spank: *mut c_void, args: &ClockArgs) {
    let Some(job_id) = script_job_id(spank) else { return };
    let dir = job_clock::records_dir(&args.ledger_dir);
    if let Err(e) = job_clock::remove(&dir, job_id) {
        log_error(&format!("job {job_id} epilog: cannot remove sched/energy's clock record in {}: {e}", dir.display()));
    }
}

/// Reads the step's ids and environment from Slurm.
fn step_identity(spank: *mut c_void) -> Option<(u32, u32, StepEnv)> {
    let sym = lookup(c"spank_get_item")?;
    // SAFETY: `spank_err_t spank_get_item(spank_t, spank_item_t, ...)` from <slurm/spank.h>.
    let get_item: GetItemFn = unsafe { std::mem::transmute::<*mut c_void, GetItemFn>(sym) };
    let mut job_id: u32 = 0;
    let mut step_id: u32 = 0;
    let mut env: *mut *mut c_char = std::ptr::null_mut();
    // SAFETY: each item's argument type as spank.h documents it: S_JOB_ID and S_JOB_STEPID take
    // `uint32_t *`, S_JOB_ENV `char ***`; `spank` is the handle Slurm passed to the callback.
    let ok = unsafe {
        get_item(spank, S_JOB_ID, &mut job_id as *mut u32) == 0
            && get_item(spank, S_JOB_STEPID, &mut step_id as *mut u32) == 0
            && get_item(spank, S_JOB_ENV, &mut env as *mut *mut *mut c_char) == 0
    };
    if !ok {
        return None;
    }
    let mut entries = Vec::new();
    let mut p = env;
    // SAFETY: Slurm's environment array is NULL-terminated, each entry a NUL-terminated string,
    // and stays valid for the duration of the callback.
    unsafe {
        while !p.is_null() && !(*p).is_null() {
            entries.push(CStr::from_ptr(*p).to_string_lossy().into_owned());
            p = p.add(1);
        }
    }
    Some((job_id, step_id, StepEnv::from_entries(entries.iter().map(String::as_str))))
}

/// Step start (slurmstepd, root, before the tasks): ask for the step's clock.
pub(crate) fn step_start(spank: *mut c_void, args: &ClockArgs) {
    LOGGED.lock().unwrap_or_else(|e| e.into_inner()).clear();
    if !args.enabled {
        return;
    }
    let Some((job_id, step_id, mut env)) = step_identity(spank) else {
        return log_error("cannot read the step's id and environment from slurmstepd; GPU clocks unchanged");
    };
    if step_id == EXTERN_STEP {
        return;
    }
    for (k, v) in REMOTE_OPTIONS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        env.set(k, v);
    }
    let slurm_gpus: Vec<usize> = env.gpus(step_id).into_iter().map(|g| g as usize).collect();
    if slurm_gpus.is_empty() {
        return;
    }
    let step_name = if step_id == BATCH_STEP { "batch".to_string() } else { step_id.to_string() };
    let label = format!("job {job_id} step {step_name}");
    let key = match StepKey::for_process(job_id, step_id, &env.node_name(), std::process::id()) {
        Ok(k) => k,
        Err(e) => return log_error(&format!("{label}: /proc/self/stat: {e}; GPU clocks unchanged")),
    };
    // NVML first: a node without it (GPUs Slurm knows only from gres.conf) gets no ledger.
    let gpu = match open_nvml(args) {
        Ok(g) => g,
        // No NVML library on this node: nothing to control, not a fault of this step.
        Err(e) if e.kind == GpuErrorKind::Library => return log_info(&format!("{label}: {e}; GPU clocks unchanged")),
        Err(e) => return log_once(e.gpu, e.call, &format!("{label}: {e}; GPU clocks unchanged")),
    };
    let Some(gpus) = nvml_indices(&gpu, &slurm_gpus, &label) else { return };
    let arbiter = match Arbiter::open(&args.ledger_dir) {
        Ok(a) => a,
        Err(e) => return log_error(&format!("{label}: {e}; GPU clocks unchanged")),
    };
    // sched/energy's decision (kept on this node by the job prolog), unless the user set the
    // clock.
    let decision = if args.sched_decision && env.explicit_gpu_freq().is_none() {
        match job_clock::read(&job_clock::records_dir(&args.ledger_dir), job_id) {
            Ok(decision) => decision,
            Err(e) => {
                log_once(None, "job record", &format!("{label}: sched/energy's clock for the job: {e}; the job's hints decide"));
                None
            }
        }
    } else {
        None
    };
    // energy.toml's hint defaults decide the choice only when the job gave no explicit clock;
    // the model (a fit over the measured data) is loaded only when the hints need it.
    let (choice, choice_problem) = {
        let quick = clocks::choose(&env, decision, &model::config::HintDefaults::default());
        match quick.0 {
            Choice::Hints(_) => match PolicyModel::load(args) {
                Ok(model) => {
                    let (choice, problem) = clocks::choose(&env, decision, &model.planner.hints);
                    request(&arbiter, &gpu, &key, &label, &gpus, &choice, Some(&model));
                    (choice, problem)
                }
                Err(e) => {
                    log_once(None, "energy.toml", &format!("{label}: {e}; the policy clock is the default clock"));
                    request(&arbiter, &gpu, &key, &label, &gpus, &quick.0, None);
                    quick
                }
            },
            _ => {
                request(&arbiter, &gpu, &key, &label, &gpus, &quick.0, None);
                quick
            }
        }
    };
    if let Some(p) = choice_problem {
        log_once(None, "SLURM_GPU_FREQ", &format!("{label}: {p}; using {}", choice.describe()));
    }
    let shards = env.get("SLURM_SHARDS_ON_NODE").is_some();
    *STEP.lock().unwrap_or_else(|e| e.into_inner()) = Some(ActiveStep { key, label, gpus, shards });
}

/// The NVML devices of Slurm GPU indices, through the node's one mapping
/// (`gres_energy::devmap`: Slurm's own device files matched to NVML minor numbers).
fn nvml_indices(gpu: &dyn GpuControl, slurm_gpus: &[usize], label: &str) -> Option<Vec<u32>> {
    let api = slurm_bindings::node_api::node_api().ok();
    let (map, errors) = match devmap::build(gpu, api) {
        Ok(m) => m,
        Err(e) => {
            log_once(e.gpu, e.call, &format!("{label}: {e}; GPU clocks unchanged"));
            return None;
        }
    };
    log_gpu_errors(label, &errors, "that GPU cannot be matched to Slurm's device files");
    let (gpus, unknown) = map.nvml_indices(slurm_gpus);
    if !unknown.is_empty() {
        log_error(&format!("{label}: GPU indices {unknown:?} of the step have no NVML device ({}); their clocks are left alone", map.describe()));
    }
    (!gpus.is_empty()).then_some(gpus)
}

fn request(arbiter: &Arbiter, gpu: &dyn GpuControl, key: &StepKey, label: &str, gpus: &[u32], choice: &Choice, model: Option<&PolicyModel>) {
    let (per_gpu, errors) = clocks::step_settings(gpu, gpus, choice, model);
    log_gpu_errors(label, &errors, "the step runs without its clock on this GPU");
    if per_gpu.is_empty() {
        return;
    }
    let source = if matches!(choice, Choice::Explicit(..)) { Source::Explicit } else { Source::Policy };
    match arbiter.request_settings(gpu, key, &per_gpu, source) {
        Ok(out) => report(label, &out, choice, &per_gpu),
        Err(e) => log_once(None, "ledger", &format!("{label}: {e}; GPU clocks unchanged")),
    }
}

fn log_repaired(label: &str, out: &Outcome) {
    if let Some(q) = &out.quarantined {
        log_error(&format!("{label}: the clock ledger could not be read ({}); moved to {} and GPUs off their default clocks were reset", q.reason, q.path.display()));
    }
    if !out.repaired_steps.is_empty() {
        let steps: Vec<String> = out.repaired_steps.iter().map(ToString::to_string).collect();
        log_info(&format!("{label}: restored the GPU clocks left by {}", steps.join(", ")));
    }
}

fn report(label: &str, out: &Outcome, choice: &Choice, asked: &[(u32, gpu_control::clock_control::Setting)]) {
    log_gpu_errors(label, &out.gpu_errors, "the step runs on; clocks are restored when it ends");
    log_repaired(label, out);
    for line in out.describe_controls() {
        log_info(&format!("{label}: {line}"));
    }
    let asked: Vec<String> = asked
        .iter()
        .map(|(g, s)| match s.power_limit_mw {
            Some(mw) => format!("GPU {g} {} MHz or {} W", s.clocks_mhz.graphics_mhz, mw / 1000),
            None => format!("GPU {g} {} MHz", s.clocks_mhz.graphics_mhz),
        })
        .collect();
    log_info(&format!("{label}: {} asks for {}", choice.describe(), asked.join(", ")));
}

/// Step end (slurmstepd, root, after the tasks): release the step's clock.
pub(crate) fn step_end(args: &ClockArgs) {
    let Some(step) = STEP.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
    let arbiter = match Arbiter::open(&args.ledger_dir) {
        Ok(a) => a,
        Err(e) => return log_error(&format!("{}: {e}; GPU clocks not restored (the next step or slurmd start repairs them)", step.label)),
    };
    let gpu = match open_nvml(args) {
        Ok(g) => g,
        Err(e) => {
            return log_once(e.gpu, e.call, &format!("{}: {e}; GPU clocks not restored (the next step or slurmd start repairs them)", step.label));
        }
    };
    match arbiter.release(&gpu, &step.key) {
        Ok(out) => {
            log_gpu_errors(&step.label, &out.gpu_errors, "the next step or slurmd start retries the restore");
            log_repaired(&step.label, &out);
        }
        Err(e) => {
            let done = restore_without_ledger(&arbiter, &gpu, &step);
            log_gpu_errors(&step.label, &done.errors, "the next step or slurmd start repairs the clocks");
            log_error(&format!("{}: {e}; {}", step.label, gres_energy::clocks::describe_unarbitrated(&done)));
        }
    }
}

/// A release that could not use the ledger (its lock stayed held, it could not be written): the
/// step's own GPUs go back to their defaults, so that no GPU stays slowed after its step; a GPU
/// shared with other jobs (a `gres/shard` step, or one another job's live step asks for) is left
/// as it is, since a reset would drop the other jobs' requests: the step's request stays in the
/// ledger, and the next ledger operation on the node drops it once this slurmstepd is gone
/// ([`Arbiter::restore_without_ledger`]).
fn restore_without_ledger(arbiter: &Arbiter, gpu: &dyn GpuControl, step: &ActiveStep) -> gpu_control::arbiter::Unarbitrated {
    if step.shards {
        return gpu_control::arbiter::Unarbitrated { left: step.gpus.clone(), ..Default::default() };
    }
    arbiter.restore_without_ledger(gpu, &step.key, &step.gpus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_control::arbiter::Source;
    use gpu_control::{AppClocksMhz, FakeGpus};
    use std::os::fd::AsRawFd;

    /// A prolog of sched/energy's cluster, with or without `PrologFlags=Alloc` (`None`: unknown).
    fn origin(at_allocation: Option<bool>) -> PrologOrigin {
        PrologOrigin { at_allocation, scheduler_type: Some(SCHED_ENERGY.into()) }
    }

    fn tmp_dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("spank-energy-remote-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_decision_clock_is_kept_only_from_a_prolog_at_allocation() {
        let dir = tmp_dir("prolog").join("jobs");
        // PrologFlags=Alloc/Contain: slurmctld's value is kept.
        keep_decision(&dir, 7, Some("1057"), None, &origin(Some(true))).unwrap();
        assert_eq!(job_clock::read(&dir, 7).unwrap(), Some(job_clock::JobDecision { clock_mhz: 1057, power_limit_mw: None }));
        // Without Alloc, the value (perhaps the user's, through srun) is refused, and an old
        // record of the job removed.
        let e = keep_decision(&dir, 7, Some("600"), None, &origin(Some(false))).unwrap_err();
        assert!(matches!(&e, Refused::NotFromSlurmctld(why) if why.contains("PrologFlags=Alloc")), "{e:?}");
        assert_eq!(job_clock::read(&dir, 7).unwrap(), None);
        assert!(matches!(keep_decision(&dir, 8, Some("600"), None, &origin(None)), Err(Refused::NotFromSlurmctld(_))), "unknown configuration");
        assert_eq!(job_clock::read(&dir, 8).unwrap(), None);
        // Logged once per node (also before the records directory exists), and again after
        // Alloc came back and went.
        let fresh = tmp_dir("prolog-fresh").join("jobs");
        assert!(mark_once(&fresh, NOT_FROM_SLURMCTLD_MARK));
        assert!(!mark_once(&fresh, NOT_FROM_SLURMCTLD_MARK));
        assert!(mark_once(&dir, NOT_FROM_SLURMCTLD_MARK));
        assert!(!mark_once(&dir, NOT_FROM_SLURMCTLD_MARK));
        keep_decision(&dir, 9, None, None, &origin(Some(true))).unwrap();
        assert!(mark_once(&dir, NOT_FROM_SLURMCTLD_MARK));
        // No value: nothing to refuse, whatever the flags.
        keep_decision(&dir, 9, None, None, &origin(Some(false))).unwrap();
    }

    #[test]
    fn a_decision_is_taken_only_under_sched_energy() {
        // Under sched/backfill nothing replaces what the user exported as
        // SLURM_SPANK_SLURM_ENERGY_CLOCK_MHZ / _POWER_LIMIT_MW: the prolog must not take it.
        let dir = tmp_dir("prolog-sched").join("jobs");
        let backfill = PrologOrigin { at_allocation: Some(true), scheduler_type: Some("sched/backfill".into()) };
        let e = keep_decision(&dir, 7, Some("300"), Some("100000"), &backfill).unwrap_err();
        assert!(matches!(&e, Refused::NotSchedEnergy(why) if why.contains("sched/backfill")), "{e:?}");
        assert_eq!(job_clock::read(&dir, 7).unwrap(), None);
        let unknown = PrologOrigin { at_allocation: Some(true), scheduler_type: None };
        assert!(matches!(keep_decision(&dir, 7, Some("300"), None, &unknown), Err(Refused::NotSchedEnergy(_))));
        // An old record of the job (a requeue after the scheduler changed) goes too.
        keep_decision(&dir, 8, Some("1057"), None, &origin(Some(true))).unwrap();
        assert!(keep_decision(&dir, 8, Some("300"), None, &backfill).is_err());
        assert_eq!(job_clock::read(&dir, 8).unwrap(), None);
        // No value under sched/backfill: nothing to refuse.
        keep_decision(&dir, 9, None, None, &backfill).unwrap();
    }

    #[test]
    fn the_planners_power_limit_is_kept_with_its_clock() {
        let dir = tmp_dir("prolog-limit").join("jobs");
        keep_decision(&dir, 7, Some("1057"), Some("437500"), &origin(Some(true))).unwrap();
        assert_eq!(job_clock::read(&dir, 7).unwrap(), Some(job_clock::JobDecision { clock_mhz: 1057, power_limit_mw: Some(437_500) }));
        // A limit that is not one refuses the decision (the hints decide), and drops the old one.
        let e = keep_decision(&dir, 7, Some("1057"), Some("437.5W"), &origin(Some(true))).unwrap_err();
        assert!(matches!(&e, Refused::Other(why) if why.contains("not a power limit")), "{e:?}");
        assert_eq!(job_clock::read(&dir, 7).unwrap(), None);
        // A limit without Alloc is refused with the clock.
        assert!(matches!(keep_decision(&dir, 8, Some("1057"), Some("437500"), &origin(Some(false))), Err(Refused::NotFromSlurmctld(_))));
        assert_eq!(job_clock::read(&dir, 8).unwrap(), None);
    }

    #[test]
    fn a_release_without_the_ledger_keeps_shared_gpus_clocks() {
        let dir = tmp_dir("release");
        let arbiter = Arbiter::open(&dir).unwrap();
        let gpus = FakeGpus::v100s(2);
        let me = std::process::id();
        let key = |job| StepKey::for_process(job, 0, "n1", me).unwrap();
        let clocks = |mhz| AppClocksMhz { memory_mhz: 877, graphics_mhz: mhz };
        arbiter.request(&gpus, &key(5), &[0, 1], clocks(945), Source::Policy).unwrap();
        arbiter.request(&gpus, &key(6), &[1], clocks(1200), Source::Policy).unwrap();
        let graphics = |g: u32| gpus.with_gpu(g, |x| x.locked_clocks_mhz).unwrap().map(|c| c.1);
        let holder = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(dir.join("ledger.lock")).unwrap();
        // SAFETY: flock on a descriptor this test owns.
        assert_eq!(unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX) }, 0);
        // A shard step resets nothing.
        let shard_step = ActiveStep { key: key(5), label: "job 5 step 0".into(), gpus: vec![0, 1], shards: true };
        let done = restore_without_ledger(&arbiter, &gpus, &shard_step);
        assert_eq!((done.reset.len(), done.left.len()), (0, 2));
        assert_eq!((graphics(0), graphics(1)), (Some(945), Some(1200)));
        // A step with whole GPUs resets those no other job asks for.
        let whole = ActiveStep { shards: false, ..shard_step };
        let done = restore_without_ledger(&arbiter, &gpus, &whole);
        assert_eq!((done.reset, done.left), (vec![0], vec![1]));
        assert_eq!((graphics(0), graphics(1)), (None, Some(1200)), "job 6's clock kept, job 5's own GPU restored");
        drop(holder);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
