//! slurmd and slurmstepd side of the plugin: applies each step's GPU clock through the node's
//! clock arbiter when the step starts and releases it when the step ends; repairs the ledger
//! when slurmd starts. Decisions are in [`crate::clocks`]; this module only talks to Slurm and
//! logs. It never fails a step: every problem is logged (once per step for each GPU and NVML
//! call) and the step runs on.

use std::collections::BTreeSet;
use std::ffi::{CStr, c_char, c_int, c_void};
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
    let kept = match value.as_deref().map(|v| (v, job_clock::parse_clock_mhz(v))) {
        Some((_, Some(mhz))) => job_clock::write(&dir, job_id, mhz).map_err(|e| format!("cannot keep sched/energy's clock {mhz} MHz in {}: {e}", dir.display())),
        Some((v, None)) => Err(format!("{}={v:?} is not a clock in MHz", job_clock::PROLOG_ENV)),
        // Not started by sched/energy (or without a clock): the job's hints decide. A record
        // left by an earlier run of a requeued job must not.
        None => job_clock::remove(&dir, job_id).map_err(|e| format!("cannot remove an old record in {}: {e}", dir.display())),
    };
    if let Err(e) = kept {
        log_error(&format!("job {job_id} prolog: {e}; the job's steps follow its hints"));
        let _ = job_clock::remove(&dir, job_id);
    }
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
    let decision_mhz = if args.sched_decision && env.explicit_gpu_freq().is_none() {
        match job_clock::read(&job_clock::records_dir(&args.ledger_dir), job_id) {
            Ok(mhz) => mhz,
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
        let quick = clocks::choose(&env, decision_mhz, &model::config::HintDefaults::default());
        match quick.0 {
            Choice::Hints(_) => match PolicyModel::load(args) {
                Ok(model) => {
                    let (choice, problem) = clocks::choose(&env, decision_mhz, &model.planner.hints);
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
    *STEP.lock().unwrap_or_else(|e| e.into_inner()) = Some(ActiveStep { key, label, gpus });
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
        // The ledger stayed locked (another process stuck): do not leave this step's GPUs
        // slowed; their defaults are never slower. The next operation prunes the request.
        Err(e) if e.op == "lock" => {
            let reset: Vec<String> = step.gpus.iter().filter(|&&g| gpu_control::clock_control::reset_all(&gpu, g).is_ok()).map(ToString::to_string).collect();
            log_error(&format!("{}: {e}; reset GPU(s) {} to their default clocks without the ledger", step.label, reset.join(",")));
        }
        Err(e) => log_error(&format!("{}: {e}; the next step or slurmd start repairs the clocks", step.label)),
    }
}
