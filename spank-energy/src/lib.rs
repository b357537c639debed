//! `spank_energy.so`: a SPANK plugin that gives `sbatch`, `srun` and `salloc` the energy hint
//! options `--energy-policy`, `--energy-max-slowdown`, `--energy-share`, `--energy-defer` and
//! `--energy-tag`. Bad values are rejected at submission with a message that says what is
//! allowed; valid values are forwarded by Slurm itself into the job's SPANK environment as
//! `_SLURM_SPANK_OPTION_energy_energy_<opt>=<value>` (plugin name `energy`, option name
//! `energy-<opt>`, `-` turned into `_`), where sched/energy reads them.
//!
//! In slurmstepd (remote context) it also sets every step's GPU clock, batch script included:
//! `slurm_spank_init_post_opt` asks the node's clock arbiter for the clock of the user's
//! `--gpu-freq` or of the energy policy, `slurm_spank_exit` releases it; in slurmd,
//! `slurm_spank_init` repairs clocks left by dead steps (see [`clocks`] and `remote`).
//!
//! In sbatch, `--energy-whatif` prints `slurm-energy whatif`'s estimate for the job instead of
//! submitting it (see [`whatif`]).
//!
//! The plugin has no link-time dependency on libslurm: the few SPANK/log functions it calls are
//! looked up with `dlsym(RTLD_DEFAULT)` in the loading process (sbatch, srun, salloc, slurmd,
//! slurmstepd), so Rust's BIND_NOW linking cannot make `dlopen` fail. No panic crosses an
//! `extern "C"` boundary.

#![allow(non_upper_case_globals)]

pub mod clocks;
pub mod job_clock;
pub mod parse;
mod remote;
pub mod whatif;

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use parse::{Bounds, Opt};

// ---- symbols the SPANK loader looks for ---------------------------------------------------------

/// Plugin name: the `<plugin>` part of `_SLURM_SPANK_OPTION_<plugin>_<option>`.
#[unsafe(no_mangle)]
pub static plugin_name: [u8; 7] = *b"energy\0";

#[unsafe(no_mangle)]
pub static plugin_type: [u8; 6] = *b"spank\0";

/// `SLURM_VERSION_NUMBER` of the headers this was built against; SPANK compares major.minor.
#[unsafe(no_mangle)]
pub static plugin_version: c_uint = SLURM_VERSION_NUMBER;

#[unsafe(no_mangle)]
pub static spank_plugin_version: c_uint = 1;

const SLURM_VERSION_NUMBER: c_uint = parse_u32(env!("SPANK_ENERGY_SLURM_VERSION_NUMBER"));

const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut n: u32 = 0;
    while i < b.len() {
        n = n * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    n
}

// ---- spank.h, the parts used ----------------------------------------------------------------------

type SpankOptCb = unsafe extern "C" fn(val: c_int, optarg: *const c_char, remote: c_int) -> c_int;

/// `struct spank_option` from `<slurm/spank.h>`.
#[repr(C)]
struct SpankOption {
    name: *const c_char,
    arginfo: *const c_char,
    usage: *const c_char,
    has_arg: c_int,
    val: c_int,
    cb: Option<SpankOptCb>,
}

/// `enum spank_context`.
const S_CTX_LOCAL: c_int = 1;
const S_CTX_REMOTE: c_int = 2;
const S_CTX_ALLOCATOR: c_int = 3;
const S_CTX_SLURMD: c_int = 4;

type OptionRegisterFn = unsafe extern "C" fn(spank: *mut c_void, opt: *mut SpankOption) -> c_int;
type ContextFn = unsafe extern "C" fn() -> c_int;
type LogFn = unsafe extern "C" fn(fmt: *const c_char, ...);

/// A function of the loading process, or `None` where it does not exist.
fn lookup(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads the name.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!sym.is_null()).then_some(sym)
}

fn log_with(func: &CStr, msg: &str) {
    let text = CString::new(format!("spank/energy: {msg}").replace('\0', "")).unwrap_or_default();
    match lookup(func) {
        Some(sym) => {
            // SAFETY: slurm_error/slurm_info are `void f(const char *fmt, ...)`; "%s" with one
            // NUL-terminated string matches that.
            let f: LogFn = unsafe { std::mem::transmute::<*mut c_void, LogFn>(sym) };
            unsafe { f(c"%s".as_ptr(), text.as_ptr()) };
        }
        None => eprintln!("{}", text.to_string_lossy()),
    }
}

fn log_error(msg: &str) {
    log_with(c"slurm_error", msg);
}

/// The `log` facade's lines (model/, gpu-control/) go through the SPANK log functions of the
/// loading process, each at its level (spank.h exports `slurm_debug` etc. as well; whether a
/// debug line shows is the process's own log level's decision).
struct SpankSink;

impl slurm_bindings::log::Sink for SpankSink {
    fn enabled(&self, _level: slurm_bindings::log::Level) -> bool {
        true
    }
    fn write(&self, level: slurm_bindings::log::Level, msg: &str) {
        use slurm_bindings::log::Level;
        let func = match level {
            Level::Error => c"slurm_error",
            Level::Info => c"slurm_info",
            Level::Verbose => c"slurm_verbose",
            Level::Debug => c"slurm_debug",
            Level::Debug2 => c"slurm_debug2",
        };
        log_with(func, msg);
    }
}

static SPANK_SINK: SpankSink = SpankSink;

fn log_info(msg: &str) {
    log_with(c"slurm_info", msg);
}

fn context() -> c_int {
    match lookup(c"spank_context") {
        // SAFETY: `spank_context_t spank_context(void)`.
        Some(sym) => unsafe { std::mem::transmute::<*mut c_void, ContextFn>(sym)() },
        None => 0,
    }
}

/// Bounds from this process's plugstack.conf arguments (set by `slurm_spank_init`).
static BOUNDS: Mutex<Bounds> = Mutex::new(Bounds { max_defer_s: 12 * 3600, max_slowdown: 3.0 });

fn bounds() -> Bounds {
    *BOUNDS.lock().unwrap_or_else(|e| e.into_inner())
}

/// GPU clock settings from this process's plugstack.conf arguments.
static CLOCK_ARGS: Mutex<Option<clocks::ClockArgs>> = Mutex::new(None);

fn clock_args() -> clocks::ClockArgs {
    CLOCK_ARGS.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default()
}

/// `whatif=PATH` from plugstack.conf (sbatch --energy-whatif's binary).
static WHATIF_BINARY: Mutex<Option<std::path::PathBuf>> = Mutex::new(None);
/// `--energy-whatif` was given (sbatch only).
static WHATIF_ASKED: AtomicBool = AtomicBool::new(false);
/// The `val` of `--energy-whatif` (apart from the valued options' [`Opt::val`]).
const WHATIF_VAL: c_int = 100;

/// The plugin's arguments from `slurm_spank_*(spank, ac, av)`.
///
/// # Safety
/// `av` holds `ac` pointers, each NULL or a NUL-terminated string.
unsafe fn plugin_args(ac: c_int, av: *mut *mut c_char) -> Vec<String> {
    (0..ac.max(0) as usize)
        .filter_map(|i| {
            // SAFETY: per this function's contract.
            let p = if av.is_null() { std::ptr::null() } else { unsafe { *av.add(i) } };
            // SAFETY: non-NULL entries are NUL-terminated strings.
            (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        })
        .collect()
}

/// The clock settings of a job prolog or epilog. Those run with the environment Slurm builds
/// for them, not slurmd's: unless plugstack.conf names the ledger directory, the one slurmd
/// was started with (`$SLURM_ENERGY_CLOCK_LEDGER`, which the steps inherit) is read from
/// slurmd's own environment (the script's parent), so that prolog and steps agree.
fn script_clock_args(args: &[String]) -> Result<clocks::ClockArgs, String> {
    let mut clock = clocks::ClockArgs::parse(args.iter().map(String::as_str))?;
    let named = args.iter().any(|a| a.starts_with("clock_ledger="));
    if !named && std::env::var_os(gpu_control::arbiter::LEDGER_DIR_ENV).is_none() {
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() };
        if let Some(dir) = slurmd_env_var(parent as u32, gpu_control::arbiter::LEDGER_DIR_ENV) {
            clock.ledger_dir = dir.into();
        }
    }
    Ok(clock)
}

/// `name` in the environment of process `pid` if that process is slurmd.
fn slurmd_env_var(pid: u32, name: &str) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    if comm.trim() != "slurmd" {
        return None;
    }
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ.split(|&b| b == 0).find_map(|entry| {
        let text = std::str::from_utf8(entry).ok()?;
        let (k, v) = text.split_once('=')?;
        (k == name && v.starts_with('/')).then(|| v.to_string())
    })
}

// ---- entry points ----------------------------------------------------------------------------------

/// Reads the plugin's arguments and registers the options.
///
/// # Safety
/// Called by Slurm's SPANK stack with its handle and `ac` argument strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_init(spank: *mut c_void, ac: c_int, av: *mut *mut c_char) -> c_int {
    catch_unwind(AssertUnwindSafe(|| {
        slurm_bindings::log::install_bridge(&SPANK_SINK);
        // SAFETY: Slurm passes `ac` valid NUL-terminated strings in `av`.
        let args = unsafe { plugin_args(ac, av) };
        let b = match parse::parse_plugin_args(args.iter().map(String::as_str)) {
            Ok(b) => b,
            Err(msg) => {
                log_error(&msg);
                return -1;
            }
        };
        *BOUNDS.lock().unwrap_or_else(|e| e.into_inner()) = b;
        let clock = match clocks::ClockArgs::parse(args.iter().map(String::as_str)) {
            Ok(c) => c,
            Err(msg) => {
                log_error(&msg);
                return -1;
            }
        };
        *CLOCK_ARGS.lock().unwrap_or_else(|e| e.into_inner()) = Some(clock.clone());
        match whatif::binary_from_args(args.iter().map(String::as_str)) {
            Ok(b) => *WHATIF_BINARY.lock().unwrap_or_else(|e| e.into_inner()) = b,
            Err(msg) => {
                log_error(&msg);
                return -1;
            }
        }
        if context() == S_CTX_SLURMD {
            remote::slurmd_start(&clock);
        }
        register_options(spank, &b)
    }))
    .unwrap_or_else(|_| {
        log_error("internal error in slurm_spank_init");
        -1
    })
}

/// In slurmstepd: the step starts (root, after the options were processed, before the tasks
/// are forked): ask for its GPU clock. Never fails the step.
///
/// # Safety
/// Called by Slurm's SPANK stack with its handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_init_post_opt(spank: *mut c_void, _ac: c_int, _av: *mut *mut c_char) -> c_int {
    if context() == S_CTX_ALLOCATOR && WHATIF_ASKED.load(Ordering::Relaxed) {
        return catch_unwind(run_whatif).unwrap_or_else(|_| {
            log_error("internal error in --energy-whatif; nothing submitted");
            -1
        });
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if context() == S_CTX_REMOTE {
            remote::step_start(spank, &clock_args());
        }
    }))
    .map_err(|_| log_error("internal error in slurm_spank_init_post_opt; GPU clocks unchanged"));
    0
}

/// `sbatch --energy-whatif` (sbatch has read every option and has not contacted slurmctld):
/// prints the what-if and ends sbatch with its status, submitting nothing. Returns (-1: sbatch
/// fails, submitting nothing) only when the what-if cannot be run.
fn run_whatif() -> c_int {
    let Some(binary) = WHATIF_BINARY.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
        log_error(&format!("--{}: not set up on this cluster (no whatif=PATH in plugstack.conf); nothing submitted. Run `slurm-energy whatif <sbatch options>` for an estimate", whatif::OPTION));
        return -1;
    };
    let args = match whatif::own_argv().and_then(|argv| whatif::build_args(&argv, &std::env::vars().collect::<Vec<_>>())) {
        Ok(a) => a,
        Err(msg) => {
            log_error(&format!("--{}: {msg}; nothing submitted", whatif::OPTION));
            return -1;
        }
    };
    let code = whatif::run(&binary, &args);
    // SAFETY: fflush(NULL) flushes every stdio stream of the process; _exit ends it without
    // running sbatch's atexit handlers (spank_fini would unload this plugin while its
    // post_opt callback is still on the stack). sbatch holds no job, allocation or file it
    // must finish at this point: nothing was sent to slurmctld yet.
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(code)
    }
}

/// In slurmd's job prolog (root, before any step of the job on this node): keep the clock
/// sched/energy chose for the job for its steps. Never fails the prolog (a failed prolog
/// drains the node).
///
/// # Safety
/// Called by Slurm's SPANK stack with its handle and `ac` argument strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_job_prolog(spank: *mut c_void, ac: c_int, av: *mut *mut c_char) -> c_int {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: Slurm passes `ac` valid NUL-terminated strings in `av`.
        let args = unsafe { plugin_args(ac, av) };
        match script_clock_args(&args) {
            Ok(clock) => remote::job_prolog(spank, &clock),
            Err(msg) => log_error(&format!("job prolog: {msg}")),
        }
    }))
    .map_err(|_| log_error("internal error in slurm_spank_job_prolog; the job's steps follow its hints"));
    0
}

/// In slurmd's job epilog (root): drop the job's clock record on this node.
///
/// # Safety
/// Called by Slurm's SPANK stack with its handle and `ac` argument strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_job_epilog(spank: *mut c_void, ac: c_int, av: *mut *mut c_char) -> c_int {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: Slurm passes `ac` valid NUL-terminated strings in `av`.
        let args = unsafe { plugin_args(ac, av) };
        if let Ok(clock) = script_clock_args(&args) {
            remote::job_epilog(spank, &clock);
        }
    }))
    .map_err(|_| log_error("internal error in slurm_spank_job_epilog"));
    0
}

/// In slurmstepd: the step is over (root, after the tasks ended): release its GPU clock.
///
/// # Safety
/// Called by Slurm's SPANK stack with its handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_exit(_spank: *mut c_void, _ac: c_int, _av: *mut *mut c_char) -> c_int {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if context() == S_CTX_REMOTE {
            remote::step_end(&clock_args());
        }
    }))
    .map_err(|_| log_error("internal error in slurm_spank_exit; the next step or slurmd start repairs the GPU clocks"));
    0
}

fn register_options(spank: *mut c_void, b: &Bounds) -> c_int {
    let Some(sym) = lookup(c"spank_option_register") else {
        log_error("spank_option_register not found in this process");
        return -1;
    };
    // SAFETY: signature from <slurm/spank.h>.
    let register: OptionRegisterFn = unsafe { std::mem::transmute::<*mut c_void, OptionRegisterFn>(sym) };
    let ctx = context();
    let client = ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR;
    for opt in Opt::ALL {
        // Slurm keeps the pointer for the life of the process: leak it on purpose.
        let leak = |s: String| CString::new(s).unwrap_or_default().into_raw() as *const c_char;
        let o = Box::leak(Box::new(SpankOption {
            name: leak(opt.name().to_string()),
            arginfo: leak(opt.arginfo().to_string()),
            usage: leak(opt.usage(b)),
            has_arg: 1,
            val: opt.val(),
            cb: Some(option_cb),
        }));
        // SAFETY: `spank` is the handle Slurm gave slurm_spank_init; `o` lives forever.
        let rc = unsafe { register(spank, o) };
        if rc != 0 && client {
            log_error(&format!("cannot register --{} (spank error {rc})", opt.name()));
            return -1;
        }
    }
    // --energy-whatif: a flag, sbatch only.
    let whatif_opt = Box::leak(Box::new(SpankOption {
        name: c"energy-whatif".as_ptr(),
        arginfo: std::ptr::null(),
        usage: whatif::USAGE.as_ptr(),
        has_arg: 0,
        val: WHATIF_VAL,
        cb: Some(whatif_cb),
    }));
    // SAFETY: as above; the strings are static.
    let rc = unsafe { register(spank, whatif_opt) };
    if rc != 0 && client {
        log_error(&format!("cannot register --{} (spank error {rc})", whatif::OPTION));
        return -1;
    }
    0
}

/// `--energy-whatif` seen: noted for `slurm_spank_init_post_opt` in sbatch; refused, with a
/// message, in salloc and srun.
unsafe extern "C" fn whatif_cb(_val: c_int, _optarg: *const c_char, remote: c_int) -> c_int {
    catch_unwind(|| {
        if remote != 0 {
            return 0;
        }
        if !whatif::own_argv().is_ok_and(|argv| whatif::in_sbatch(&argv)) {
            log_error(&whatif::only_sbatch_message());
            return -1;
        }
        WHATIF_ASKED.store(true, Ordering::Relaxed);
        0
    })
    .unwrap_or(-1)
}

/// Checks an option's value. On the submitting side (`remote == 0`) a bad value fails the
/// command with a message; on the remote side the job is already accepted, so it never fails.
unsafe extern "C" fn option_cb(val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(|| {
        let Some(opt) = Opt::from_val(val) else { return 0 };
        let value = if optarg.is_null() {
            String::new()
        } else {
            // SAFETY: Slurm passes the option's NUL-terminated argument.
            unsafe { CStr::from_ptr(optarg) }.to_string_lossy().into_owned()
        };
        if remote != 0 {
            // slurmstepd of an srun step gets the options this way, not in its environment.
            remote::remember_option(opt.name(), &value);
        }
        match opt.check(&value, &bounds()) {
            Ok(()) => 0,
            Err(_) if remote != 0 => 0,
            Err(e) => {
                log_error(&e.to_string());
                -1
            }
        }
    }))
    .unwrap_or(-1)
}
