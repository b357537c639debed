//! `cli_filter_energy.so` (`CliFilterPlugins=cli_filter/energy`): lets `--gpu-freq` through on
//! jobs and steps that ask for `gres/shard`.
//!
//! Stock Slurm refuses `--gpu-freq` together with a shared GRES (`gres_job_state_validate()`
//! returns ESLURM_INVALID_GRES, in sbatch/srun/salloc and again in slurmctld), because one
//! job cannot own the clock of a GPU that others share. The bundle's `spank_energy.so` arbitrates
//! clocks on shared GPUs; its `--energy-gpu-freq` takes the same grammar. In `pre_submit` (which
//! the 22.05 clients run after option parsing and before `spank_init_post_opt()` and
//! `slurm_opt_create_job_desc()`), this plugin, for a request with `shard` in `--gres` and a
//! `--gpu-freq`:
//!
//! 1. finds spank_energy's `--energy-gpu-freq` in the SPANK option table
//!    (`spank_option_table_create`) and processes the value through `spank_process_option`, the
//!    very call the client makes when the user types the option: the plugin's callback validates
//!    it and Slurm marks the option found, so `spank_init_post_opt()` exports it as
//!    `_SLURM_SPANK_OPTION_energy_energy_gpu_freq` into the job's SPANK environment (and
//!    `spank_set_remote_options` sends it with srun's step launch);
//! 2. clears `--gpu-freq` (`slurm_option_reset`, which frees `gpu_freq` and `tres_freq`);
//! 3. prints one info line to the user.
//!
//! Anything else (no shard, no `--gpu-freq`, spank_energy not loaded, the value refused by it, a
//! Slurm symbol missing, a panic) leaves the options as they are: the plugin never fails a
//! submission; Slurm's own checks then decide as without it.
//!
//! Slurm's functions are looked up with `dlsym(RTLD_DEFAULT)` in the client that loaded the
//! plugin (libslurmfull is already there), so the cdylib has no link-time dependency on libslurm.

#![allow(non_upper_case_globals)]

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

// ---- symbols the cli_filter loader resolves (src/common/cli_filter.c, 22.05) --------------------

#[unsafe(no_mangle)]
pub static plugin_name: [u8; 39] = *b"cli_filter energy: gpu-freq with shard\0";

#[unsafe(no_mangle)]
pub static plugin_type: [u8; 18] = *b"cli_filter/energy\0";

/// `SLURM_VERSION_NUMBER` of the headers this was built against.
#[unsafe(no_mangle)]
pub static plugin_version: c_uint = SLURM_VERSION_NUMBER;

const SLURM_VERSION_NUMBER: c_uint = parse_u32(env!("CLI_FILTER_ENERGY_SLURM_VERSION_NUMBER"));

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

/// The SPANK option (of spank_energy.so) that carries the clock request to the nodes.
pub const SPANK_OPTION: &str = "energy-gpu-freq";

const SLURM_SUCCESS: c_int = 0;

// ---- pure logic ---------------------------------------------------------------------------------

/// Whether a `--gres` value asks for `shard` (any count, typed or not). Slurm 22.05 stores the
/// option with a `gres:` prefix on every element (`gres:shard:1,gres:gpu:1`); a bare list is
/// accepted too.
pub fn requests_shard(gres: &str) -> bool {
    gres.split(',').any(|item| {
        let item = item.trim();
        let item = item
            .strip_prefix("gres:")
            .or_else(|| item.strip_prefix("gres/"))
            .unwrap_or(item);
        item.split(':')
            .next()
            .is_some_and(|name| name.eq_ignore_ascii_case("shard"))
    })
}

/// The line printed to the user when the request is moved.
pub fn info_line(gpu_freq: &str) -> String {
    format!(
        "cli_filter/energy: --gpu-freq={gpu_freq} with gres/shard: applied by spank_energy's clock arbiter (as --{SPANK_OPTION})"
    )
}

// ---- Slurm functions, looked up at run time -----------------------------------------------------

type OptionGetFn = unsafe extern "C" fn(opt: *mut c_void, name: *const c_char) -> *mut c_char;
type OptionResetFn = unsafe extern "C" fn(opt: *mut c_void, name: *const c_char) -> bool;
type XfreeFn = unsafe extern "C" fn(item: *mut *mut c_void);
type TableCreateFn = unsafe extern "C" fn(orig: *const GetoptOption) -> *mut GetoptOption;
type TableDestroyFn = unsafe extern "C" fn(table: *mut GetoptOption);
type ProcessOptionFn = unsafe extern "C" fn(optval: c_int, arg: *const c_char) -> c_int;
type LogFn = unsafe extern "C" fn(fmt: *const c_char, ...);

/// `struct option` of `<getopt.h>`, the element of `spank_option_table_create`'s table.
#[repr(C)]
struct GetoptOption {
    name: *const c_char,
    has_arg: c_int,
    flag: *mut c_int,
    val: c_int,
}

fn lookup(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads the name.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!sym.is_null()).then_some(sym)
}

macro_rules! slurm_fn {
    ($name:expr, $ty:ty) => {
        // SAFETY: the symbol is the Slurm function of that name, whose C prototype `$ty` mirrors.
        lookup($name).map(|p| unsafe { std::mem::transmute::<*mut c_void, $ty>(p) })
    };
}

fn log_with(symbol: &CStr, text: &str) {
    let Some(log) = slurm_fn!(symbol, LogFn) else {
        eprintln!("{text}");
        return;
    };
    let Ok(text) = CString::new(text.replace('\0', " ")) else {
        return;
    };
    // SAFETY: printf-style call with a "%s" format and one NUL-terminated string.
    unsafe { log(c"%s".as_ptr(), text.as_ptr()) };
}

fn info(text: &str) {
    log_with(c"slurm_info", text);
}

fn error(text: &str) {
    log_with(c"slurm_error", text);
}

/// `slurm_option_get(opt, name)` as an owned string (the xmalloc'd copy is freed).
///
/// # Safety
/// `opt` is the `slurm_opt_t *` the client passed to the plugin.
unsafe fn option_get(opt: *mut c_void, name: &CStr) -> Result<Option<String>, String> {
    let get = slurm_fn!(c"slurm_option_get", OptionGetFn).ok_or("slurm_option_get not found")?;
    let xfree = slurm_fn!(c"slurm_xfree", XfreeFn).ok_or("slurm_xfree not found")?;
    // SAFETY: valid opt pointer (caller) and NUL-terminated name.
    let mut value = unsafe { get(opt, name.as_ptr()) };
    if value.is_null() {
        return Ok(None);
    }
    // SAFETY: a non-NULL result is an xmalloc'd NUL-terminated string owned by us.
    let text = unsafe { CStr::from_ptr(value) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: frees the string returned above, once.
    unsafe { xfree((&mut value as *mut *mut c_char).cast()) };
    Ok(Some(text))
}

/// The optval Slurm gave `--<name>` among the SPANK options, if a SPANK plugin registered it.
fn spank_optval(name: &str) -> Result<Option<c_int>, String> {
    let create = slurm_fn!(c"spank_option_table_create", TableCreateFn)
        .ok_or("spank_option_table_create not found")?;
    let destroy = slurm_fn!(c"spank_option_table_destroy", TableDestroyFn)
        .ok_or("spank_option_table_destroy not found")?;
    // SAFETY: NULL means "no original options"; the result is a NULL-name-terminated table.
    let table = unsafe { create(std::ptr::null()) };
    if table.is_null() {
        return Ok(None);
    }
    let mut found = None;
    let mut i = 0;
    loop {
        // SAFETY: within the table, which ends with an element whose name is NULL.
        let entry = unsafe { &*table.add(i) };
        if entry.name.is_null() {
            break;
        }
        // SAFETY: option names are NUL-terminated strings.
        if unsafe { CStr::from_ptr(entry.name) }.to_bytes() == name.as_bytes() {
            found = Some(entry.val);
            break;
        }
        i += 1;
    }
    // SAFETY: the table created above, destroyed once.
    unsafe { destroy(table) };
    Ok(found)
}

/// What `pre_submit` did, for the log and the tests.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Untouched,
    Moved(String),
    Left(String),
}

/// # Safety
/// `opt` is the `slurm_opt_t *` the client passed to the plugin.
unsafe fn move_gpu_freq(opt: *mut c_void) -> Result<Outcome, String> {
    // SAFETY: forwarded from the caller.
    let Some(gres) = (unsafe { option_get(opt, c"gres") })? else {
        return Ok(Outcome::Untouched);
    };
    if !requests_shard(&gres) {
        return Ok(Outcome::Untouched);
    }
    // SAFETY: forwarded from the caller.
    let Some(gpu_freq) = (unsafe { option_get(opt, c"gpu-freq") })? else {
        return Ok(Outcome::Untouched);
    };
    let gpu_freq = gpu_freq.trim().to_string();
    if gpu_freq.is_empty() {
        return Ok(Outcome::Untouched);
    }
    let Some(optval) = spank_optval(SPANK_OPTION)? else {
        return Ok(Outcome::Left(format!(
            "cli_filter/energy: --gpu-freq={gpu_freq} with gres/shard, but no SPANK plugin offers --{SPANK_OPTION} (spank_energy.so in plugstack.conf): left to Slurm"
        )));
    };
    let process = slurm_fn!(c"spank_process_option", ProcessOptionFn)
        .ok_or("spank_process_option not found")?;
    let reset =
        slurm_fn!(c"slurm_option_reset", OptionResetFn).ok_or("slurm_option_reset not found")?;
    let arg =
        CString::new(gpu_freq.clone()).map_err(|_| "gpu-freq value contains NUL".to_string())?;
    // SAFETY: optval from Slurm's own SPANK option table, NUL-terminated argument.
    let rc = unsafe { process(optval, arg.as_ptr()) };
    if rc != SLURM_SUCCESS {
        return Ok(Outcome::Left(format!(
            "cli_filter/energy: --{SPANK_OPTION} refused --gpu-freq={gpu_freq} (rc {rc}): left to Slurm"
        )));
    }
    // SAFETY: valid opt pointer (caller) and NUL-terminated name.
    if !unsafe { reset(opt, c"gpu-freq".as_ptr()) } {
        return Err("slurm_option_reset(gpu-freq) found no such option".into());
    }
    Ok(Outcome::Moved(gpu_freq))
}

// ---- entry points -------------------------------------------------------------------------------

/// `int cli_filter_p_setup_defaults(slurm_opt_t *opt, bool early)`: nothing to default.
#[unsafe(no_mangle)]
pub extern "C" fn cli_filter_p_setup_defaults(_opt: *mut c_void, _early: bool) -> c_int {
    SLURM_SUCCESS
}

/// `int cli_filter_p_pre_submit(slurm_opt_t *opt, int offset)`. Always SLURM_SUCCESS.
///
/// # Safety
/// Called by Slurm's cli_filter framework with its `slurm_opt_t *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cli_filter_p_pre_submit(opt: *mut c_void, _offset: c_int) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(|| {
        if opt.is_null() {
            return;
        }
        // SAFETY: opt is the client's option structure.
        match unsafe { move_gpu_freq(opt) } {
            Ok(Outcome::Untouched) => {}
            Ok(Outcome::Moved(freq)) => info(&info_line(&freq)),
            Ok(Outcome::Left(why)) => info(&why),
            Err(e) => error(&format!("cli_filter/energy: {e}; options left unchanged")),
        }
    }));
    if result.is_err() {
        error("cli_filter/energy: internal error (panic); options left unchanged");
    }
    SLURM_SUCCESS
}

/// `void cli_filter_p_post_submit(int offset, uint32_t jobid, uint32_t stepid)`: nothing to do.
#[unsafe(no_mangle)]
pub extern "C" fn cli_filter_p_post_submit(_offset: c_int, _jobid: u32, _stepid: u32) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_requests_are_recognised() {
        assert!(requests_shard("gres:shard:1"));
        assert!(requests_shard("gres:gpu:1,gres:shard:2"));
        assert!(requests_shard("shard:a100:1"));
        assert!(requests_shard("gres/shard"));
        assert!(!requests_shard("gres:gpu:1"));
        assert!(!requests_shard("none"));
        assert!(!requests_shard("gres:shardx:1"));
        assert!(!requests_shard(""));
    }

    #[test]
    fn info_line_names_both_options() {
        let line = info_line("1200");
        assert!(line.contains("--gpu-freq=1200") && line.contains("--energy-gpu-freq"));
    }
}
