//! `acct_gather_energy/nvml` for Slurm 22.05 (`acct_gather_energy_nvml.so`): GPU energy from
//! NVML's total-energy counters, counted over **the step's own GPUs**.
//!
//! - slurmstepd: at `ENERGY_DATA_STEP_PTR` (before the tasks start) the step's GPU bitmap is
//!   read from its gres list, mapped to NVML devices through Slurm's own device files
//!   (`gres_energy::devmap`), and their counters are read; every later `get_data` reads them again, so the
//!   energy of the step is the exact counter difference at the moment jobacct_gather asks —
//!   including its final poll when the tasks end, so short steps are right too. No thread.
//! - slurmd: the node's total over all its GPUs since slurmd started (registration messages,
//!   `scontrol show node`).
//! - slurmctld (and anything else): loads cleanly and reports nothing. Unlike Debian 22.05.8's
//!   stock `acct_gather_energy/gpu`, it references no daemon-only symbol (everything is
//!   resolved with `dlsym`), so slurmctld does not die loading it.
//!
//! Named `nvml`, not `gpu`, so that it never shadows the stock plugin by accident and an admin
//! can tell from slurm.conf which one runs. Every entry point catches panics.

use std::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard};

use gpu_control::GpuControl;
use gpu_control::arbiter::ledger_dir_from_env;
use gres_energy::devmap;
use gres_energy::energy::{EnergyFields, EnergyMeter, Totals, unix_now_s};
use gres_energy::share_ledger::{ShareLedger, SharedMeter};
use gres_energy::use_report::{UseReporter, port_from_config};
use gres_energy::errors::ErrorOnce;
use gres_energy::nvml;
use slurm_bindings::node_api::{self, Daemon};
use slurm_bindings::{Logger, slurm_log, sys};

#[unsafe(no_mangle)]
#[used]
pub static plugin_name: [u8; 41] = *b"AcctGatherEnergy NVML GPU (slurm-energy)\0";

#[unsafe(no_mangle)]
#[used]
pub static plugin_type: [u8; 24] = *b"acct_gather_energy/nvml\0";

/// Must equal the running daemon's `SLURM_VERSION_NUMBER` (major, minor and micro).
#[unsafe(no_mangle)]
#[used]
pub static plugin_version: u32 = slurm_bindings::SLURM_VERSION_NUMBER;

const SLURM_SUCCESS: c_int = 0;
const SLURM_ERROR: c_int = -1;
/// Slurm's step id of the extern step (`SLURM_EXTERN_CONT`).
const SLURM_EXTERN_CONT: u32 = 0xffff_fffc;
/// ... and of the batch step (`SLURM_BATCH_SCRIPT`).
const SLURM_BATCH_SCRIPT: u32 = 0xffff_fffb;

static LOG: Logger = Logger::new("acct_gather_energy/nvml");

/// Why steps report no energy without `PrologFlags=Contain`.
const NO_CONTAIN: &str = "PrologFlags=Contain is not set: GPU energy per job cannot be counted \
    once without it (the batch step and the srun steps share the job's GPUs, and Slurm 22.05 drops \
    the batch step's energy), so steps report it as unknown; set PrologFlags=Contain";

/// How a step's GPUs are counted.
#[derive(Debug)]
enum Meter {
    /// GPUs of its own (`gres/gpu`), or the whole node (slurmd): their counters.
    Whole(EnergyMeter),
    /// GPUs shared with other jobs (`gres/shard`): the job's part of each, from the node's books.
    Shared(SharedMeter),
}

impl Meter {
    fn read(&mut self, ctrl: &dyn GpuControl, errs: &mut ErrorOnce, ctx: &str) -> Totals {
        match self {
            Meter::Whole(m) => m.read(ctrl, errs, &LOG, ctx),
            Meter::Shared(m) => m.read(ctrl, errs, &LOG, ctx),
        }
    }

    fn totals(&self) -> Totals {
        match self {
            Meter::Whole(m) => m.totals(),
            Meter::Shared(m) => m.totals(),
        }
    }

    fn gpus(&self) -> &[u32] {
        match self {
            Meter::Whole(m) => m.gpus(),
            Meter::Shared(m) => m.gpus(),
        }
    }
}

struct State {
    errors: ErrorOnce,
    /// Where log lines say we are (`step 12.0`, `slurmd`).
    ctx: String,
    /// slurmstepd: the step's GPUs; slurmd: all GPUs. `None`: nothing to count.
    meter: Option<Meter>,
    /// The last report.
    last: EnergyFields,
    /// slurmd: the node meter was tried (do not retry NVML every call when it is absent).
    node_meter_tried: bool,
    /// There are GPUs to count but no meter could be made (NVML missing or failing, GPUs
    /// Slurm names that NVML does not have): report "unknown", not 0 J.
    unknown: bool,
    /// The extern step: reports the job's GPU use to sched/energy at each poll.
    reporter: Option<UseReporter>,
    /// A report failed (logged once per step).
    report_failed: bool,
    /// The extern step holds a power-directive ceiling in the clock arbiter (released at fini).
    ceiling_step: Option<gpu_control::arbiter::StepKey>,
}

static STATE: Mutex<State> = Mutex::new(State {
    errors: ErrorOnce::new(),
    ctx: String::new(),
    meter: None,
    last: EnergyFields { ave_watts: 0, base_consumed_energy: 0, consumed_energy: 0, current_watts: 0, previous_consumed_energy: 0, poll_time: 0 },
    node_meter_tried: false,
    unknown: false,
    reporter: None,
    report_failed: false,
    ceiling_step: None,
});

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn daemon() -> Daemon {
    node_api::node_api().map_or(Daemon::Other, |a| a.daemon())
}

#[unsafe(no_mangle)]
pub extern "C" fn init() -> c_int {
    slurm_bindings::log::install_bridge(&LOG);
    LOG.guarded("init", SLURM_ERROR, || {
        if let Err(e) = node_api::node_api() {
            LOG.error(&format!("cannot load: {e}"));
            return SLURM_ERROR;
        }
        let mut st = state();
        st.errors = ErrorOnce::new();
        st.meter = None;
        st.last = EnergyFields::default();
        st.node_meter_tried = false;
        st.unknown = false;
        st.ctx = match daemon() {
            Daemon::Slurmd => "slurmd".into(),
            // The step's title is set later; STEP_PTR names the step.
            Daemon::Slurmstepd => "slurmstepd".into(),
            Daemon::Slurmctld => "slurmctld".into(),
            Daemon::Other => "energy".into(),
        };
        let contain = node_api::node_api().ok().and_then(|a| a.prolog_flags_contain()).unwrap_or(true);
        if !contain && matches!(daemon(), Daemon::Slurmd | Daemon::Slurmctld) {
            LOG.error(&format!("{}: {NO_CONTAIN}", st.ctx));
        }
        let line = format!("{}: loaded (GPU energy from NVML counters)", st.ctx);
        // One line per daemon start; per step only when asked for.
        if daemon() == Daemon::Slurmstepd { slurm_log!(LOG, verbose, "{line}") } else { LOG.info(&line) }
        SLURM_SUCCESS
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn fini() -> c_int {
    LOG.guarded("fini", SLURM_SUCCESS, || {
        let mut st = state();
        if let Some(Meter::Shared(mut m)) = st.meter.take() {
            // The step lets go of its shared GPUs: the co-runners' books go on without it.
            let ctx = st.ctx.clone();
            if let Ok(nvml) = nvml::shared() {
                m.finish(nvml.as_ref(), &mut st.errors, &LOG, &ctx);
            }
        }
        st.meter = None;
        if let Some(step) = st.ceiling_step.take()
            && let Ok(nvml) = nvml::shared()
        {
            // The job's extern step ends: its ceiling goes (repair would drop it anyway once
            // this slurmstepd is gone, at the node's next clock operation).
            match gpu_control::arbiter::Arbiter::open(&ledger_dir_from_env()).and_then(|a| a.release(nvml.as_ref(), &step)) {
                Ok(_) => LOG.info(&format!("{}: power directive's GPU clock ceiling released", st.ctx)),
                Err(e) => LOG.error(&format!("{}: power directive's ceiling not released: {e} (the next clock operation on the node repairs it)", st.ctx)),
            }
        }
        drop(st);
        nvml::close();
        SLURM_SUCCESS
    })
}

/// slurmd: a meter over every GPU of the node, made on first use.
fn ensure_node_meter(st: &mut State) {
    if st.meter.is_some() || st.node_meter_tried || daemon() != Daemon::Slurmd {
        return;
    }
    st.node_meter_tried = true;
    let ctx = st.ctx.clone();
    let nvml = match nvml::shared() {
        Ok(n) => n,
        Err(e) => {
            st.errors.report(&LOG, &ctx, &e);
            st.unknown = true;
            return;
        }
    };
    let count = match nvml.device_count() {
        Ok(c) => c,
        Err(e) => {
            st.errors.report(&LOG, &ctx, &e);
            st.unknown = true;
            return;
        }
    };
    let all: Vec<u32> = (0..count).collect();
    st.meter = Some(Meter::Whole(EnergyMeter::start(nvml.as_ref(), &all, &mut st.errors, &LOG, &ctx)));
    LOG.info(&format!("{ctx}: counting the energy of {count} GPU(s) of this node"));
}

/// Reads the meter (if any) and returns the new report.
fn poll(st: &mut State) -> EnergyFields {
    ensure_node_meter(st);
    let ctx = st.ctx.clone();
    let Some(meter) = st.meter.as_mut() else {
        if st.unknown {
            st.last = EnergyFields::unknown(&st.last);
        }
        return st.last;
    };
    let totals = match nvml::shared() {
        Ok(nvml) => meter.read(nvml.as_ref(), &mut st.errors, &ctx),
        Err(e) => {
            st.errors.report(&LOG, &ctx, &e);
            meter.totals()
        }
    };
    st.last = EnergyFields::next(&st.last, &totals);
    if let (Some(reporter), Ok(nvml)) = (st.reporter.as_mut(), nvml::shared()) {
        match reporter.poll(nvml.as_ref()) {
            Ok(Some(r)) => slurm_log!(LOG, debug, "{ctx}: GPU use reported: {:.1} % of {} GPU(s) over {:.1} s", r.util_pct, r.gpus, r.to_unix_s - r.from_unix_s),
            Ok(None) => {}
            Err(e) if !st.report_failed => {
                st.report_failed = true;
                LOG.error(&format!("{ctx}: GPU use not reported to sched/energy: {e} (logged once per step)"));
            }
            Err(_) => {}
        }
    }
    slurm_log!(
        LOG,
        debug,
        "{ctx}: {} J over GPUs {:?} ({} W now)",
        st.last.consumed_energy,
        meter.gpus(),
        st.last.current_watts
    );
    if st.reporter.is_some()
        && let Ok(nvml) = nvml::shared()
    {
        apply_directives(st, nvml.as_ref(), &ctx);
    }
    st.last
}

/// slurmctld's accepted power directives (gres_energy::use_report), applied through the node's
/// clock arbiter as a ceiling held by this extern step; refusals are logged at debug level (a
/// stray or replayed datagram is not the job's problem).
fn apply_directives(st: &mut State, ctrl: &dyn GpuControl, ctx: &str) {
    let Some(reporter) = st.reporter.as_mut() else { return };
    let accepted: Vec<_> = reporter
        .directives()
        .into_iter()
        .filter_map(|r| r.map_err(|e| slurm_log!(LOG, debug, "{ctx}: answer from slurmctld refused: {e}")).ok())
        .collect();
    // Only the newest counts (they were accepted in increasing order).
    let Some(d) = accepted.last() else { return };
    if d.ceiling.is_none() && st.ceiling_step.is_none() {
        // No ceiling to lift (the number every job gets when slurmctld first sees it).
        slurm_log!(LOG, debug, "{ctx}: power directive {} from slurmctld: no ceiling", d.seq);
        return;
    }
    let (gpus, job_id, node) = reporter.job();
    let gpus = gpus.to_vec();
    let step = match st.ceiling_step.clone() {
        Some(s) => s,
        None => match gpu_control::arbiter::StepKey::for_process(job_id, SLURM_EXTERN_CONT, node, std::process::id()) {
            Ok(s) => s,
            Err(e) => return LOG.error(&format!("{ctx}: power directive {} not applied: this slurmstepd's start time: {e}", d.seq)),
        },
    };
    let ceiling = d.ceiling.map(|c| gpu_control::clock_control::Setting {
        clocks_mhz: gpu_control::AppClocksMhz { memory_mhz: 0, graphics_mhz: c.clock_mhz },
        power_limit_mw: Some((c.power_limit_w * 1000.0).round()).filter(|mw| mw.is_finite() && *mw >= 1.0 && *mw <= f64::from(u32::MAX)).map(|mw| mw as u32),
    });
    let arbiter = match gpu_control::arbiter::Arbiter::open(&ledger_dir_from_env()) {
        Ok(a) => a,
        Err(e) => return LOG.error(&format!("{ctx}: power directive {} not applied: {e}", d.seq)),
    };
    match arbiter.set_ceiling(ctrl, &step, &gpus, ceiling) {
        Ok(out) => {
            for e in &out.gpu_errors {
                LOG.error(&format!("{ctx}: power directive {}: {e}", d.seq));
            }
            match d.ceiling {
                Some(c) => LOG.info(&format!("{ctx}: power directive {} from slurmctld: GPU clock ceiling {c} on NVML GPU(s) {gpus:?}", d.seq)),
                None => LOG.info(&format!("{ctx}: power directive {} from slurmctld: no ceiling", d.seq)),
            }
            st.ceiling_step = Some(step);
        }
        Err(e) => LOG.error(&format!("{ctx}: power directive {} not applied: {e}", d.seq)),
    }
}

fn write_fields(out: &mut sys::acct_gather_energy_t, f: &EnergyFields) {
    out.ave_watts = f.ave_watts;
    out.base_consumed_energy = f.base_consumed_energy;
    out.consumed_energy = f.consumed_energy;
    out.current_watts = f.current_watts;
    out.previous_consumed_energy = f.previous_consumed_energy;
    out.poll_time = f.poll_time as sys::time_t;
}

#[unsafe(no_mangle)]
pub extern "C" fn acct_gather_energy_p_update_node_energy() -> c_int {
    LOG.guarded("acct_gather_energy_p_update_node_energy", SLURM_SUCCESS, || {
        let mut st = state();
        poll(&mut st);
        SLURM_SUCCESS
    })
}

/// # Safety
/// Called by Slurm: `data` is NULL or points to what `data_type` says (acct_gather_energy_t, time_t, uint16_t).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn acct_gather_energy_p_get_data(data_type: sys::acct_energy_type, data: *mut c_void) -> c_int {
    LOG.guarded("acct_gather_energy_p_get_data", SLURM_ERROR, || {
        if data.is_null() {
            return SLURM_ERROR;
        }
        let mut st = state();
        match data_type {
            sys::ENERGY_DATA_NODE_ENERGY_UP | sys::ENERGY_DATA_NODE_ENERGY | sys::ENERGY_DATA_JOULES_TASK | sys::ENERGY_DATA_STRUCT => {
                let fields = if data_type == sys::ENERGY_DATA_STRUCT { st.last } else { poll(&mut st) };
                // SAFETY: for these types Slurm passes an acct_gather_energy_t (an array of
                // SENSOR_CNT = 1 of them for STRUCT and JOULES_TASK).
                let out = unsafe { &mut *data.cast::<sys::acct_gather_energy_t>() };
                write_fields(out, &fields);
            }
            sys::ENERGY_DATA_LAST_POLL => {
                // SAFETY: Slurm passes a time_t.
                unsafe { *data.cast::<sys::time_t>() = st.last.poll_time as sys::time_t };
            }
            sys::ENERGY_DATA_SENSOR_CNT => {
                // SAFETY: Slurm passes a uint16_t. One aggregated sensor.
                unsafe { *data.cast::<u16>() = 1 };
            }
            other => {
                LOG.error(&format!("{}: get_data: unknown type {other}", st.ctx));
                return SLURM_ERROR;
            }
        }
        SLURM_SUCCESS
    })
}

/// slurmstepd: the step's GPUs, from its record.
fn start_step(st: &mut State, step: *const c_void) {
    let Ok(api) = node_api::node_api() else { return };
    // SAFETY: ENERGY_DATA_STEP_PTR carries slurmstepd's step record, alive for the step.
    let (job_id, step_id) = unsafe { node_api::step_ids(step) };
    st.ctx = gres_energy::StepId::current().to_string();
    let ctx = st.ctx.clone();
    // The batch and extern steps count the job's GPUs on this node (their credentials carry no
    // step gres). With `PrologFlags=Contain`, slurmctld adds only the extern step's energy to
    // the job's `energy` TRES (step_mgr.c), so the job's total is its GPUs over its whole life,
    // once. Without it there is no extern step: the job's total would be its srun steps (the
    // batch step's energy is dropped by 22.05), and the step lines would charge the job's GPUs
    // to the batch step and to every srun step alike. So without Contain we refuse, visibly.
    let job_fallback = matches!(step_id, SLURM_BATCH_SCRIPT | SLURM_EXTERN_CONT);
    // SAFETY: as above.
    let whole = unsafe { api.step_gpu_indices(step, job_fallback) };
    // SAFETY: as above.
    let shared = || unsafe { api.step_gres_indices(step, "shard", job_fallback) };
    let (indices, is_shared) = match whole.filter(|i| !i.is_empty()) {
        Some(i) => (i, false),
        None => match shared() {
            Some(i) => (i, true),
            None => {
                slurm_log!(LOG, verbose, "{ctx}: no GPUs in this step of job {job_id}; no GPU energy");
                return;
            }
        },
    };
    if indices.is_empty() {
        return;
    }
    if !api.prolog_flags_contain().unwrap_or(true) {
        st.unknown = true;
        slurm_log!(LOG, verbose, "{ctx}: {NO_CONTAIN}");
        return;
    }
    // From here on the step has GPUs: whatever fails makes its energy unknown, not 0 J.
    st.unknown = true;
    let nvml = match nvml::shared() {
        Ok(n) => n,
        Err(e) => {
            st.errors.report(&LOG, &ctx, &e);
            return;
        }
    };
    let map = match devmap::build(nvml.as_ref(), Some(api)) {
        Ok((map, errs)) => {
            for e in &errs {
                st.errors.report(&LOG, &ctx, e);
            }
            map
        }
        Err(e) => {
            st.errors.report(&LOG, &ctx, &e);
            return;
        }
    };
    let (gpus, unknown) = map.nvml_indices(&indices);
    if !unknown.is_empty() {
        LOG.error(&format!("{ctx}: GPU indices {unknown:?} of the step have no NVML device ({}); the step's energy is unknown", map.describe()));
        return;
    }
    st.unknown = false;
    let meter = if is_shared {
        let ledger = match ShareLedger::open(&ledger_dir_from_env()) {
            Ok(l) => l,
            Err(e) => {
                LOG.error(&format!("{ctx}: {e}; the step's energy is unknown"));
                return;
            }
        };
        LOG.info(&format!(
            "{ctx}: counting job {job_id}'s part of the shared GPU(s) {indices:?} (NVML {gpus:?}) by measured use"
        ));
        Meter::Shared(SharedMeter::start(nvml.as_ref(), ledger, job_id, step_id, &gpus, &mut st.errors, &LOG, &ctx))
    } else {
        LOG.info(&format!(
            "{ctx}: counting the energy of the step's GPU(s) {indices:?} (NVML {gpus:?}) from their counters"
        ));
        Meter::Whole(EnergyMeter::start(nvml.as_ref(), &gpus, &mut st.errors, &LOG, &ctx))
    };
    slurm_log!(LOG, verbose, "{ctx}: {}", map.describe());
    if step_id == SLURM_EXTERN_CONT {
        st.reporter = start_reporter(api, job_id, &gpus, &ctx);
    }
    st.meter = Some(meter);
    st.last = EnergyFields { poll_time: unix_now_s(), ..EnergyFields::default() };
}

/// The job's GPU-use reporter, when `[learning] gpu_use_port` is set in the `energy.toml` next
/// to slurm.conf (see `gres_energy::use_report`).
fn start_reporter(api: &node_api::NodeApi, job_id: u32, gpus: &[u32], ctx: &str) -> Option<UseReporter> {
    // slurmd exports the slurm.conf it read as SLURM_CONF (24.11's slurmstepd gets the
    // configuration from slurmd, and its own `slurm_conf.slurm_conf` is only the default path).
    let conf = std::env::var("SLURM_CONF").ok().filter(|p| !p.is_empty()).or_else(|| api.slurm_conf_path())?;
    let port = match port_from_config(std::path::Path::new(&conf)) {
        Ok(Some(p)) => p,
        Ok(None) => {
            slurm_log!(LOG, verbose, "{ctx}: no [learning] gpu_use_port in the energy.toml next to {conf}: GPU use not reported");
            return None;
        }
        Err(e) => {
            LOG.error(&format!("{ctx}: {e}; the job's GPU use is not reported"));
            return None;
        }
    };
    let node = node_api::slurmd_node_name(api).unwrap_or_default();
    let munge_socket = api.authinfo().as_deref().and_then(slurm_bindings::munge::socket_from_authinfo);
    let Some(slurm_user_id) = api.slurm_user_id() else {
        LOG.error(&format!("{ctx}: SlurmUser unknown (configuration not loaded); the job's GPU use is not reported"));
        return None;
    };
    match UseReporter::start(job_id, node, gpus.to_vec(), &api.slurmctld_addresses(), port, munge_socket.as_deref(), slurm_user_id) {
        Ok(r) => {
            LOG.info(&format!("{ctx}: reporting job {job_id}'s GPU use to slurmctld port {port}"));
            Some(r)
        }
        Err(e) => {
            LOG.error(&format!("{ctx}: {e}; the job's GPU use is not reported"));
            None
        }
    }
}

/// # Safety
/// Called by Slurm: for `ENERGY_DATA_STEP_PTR`, `data` is slurmstepd's step record, alive for the step.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn acct_gather_energy_p_set_data(data_type: sys::acct_energy_type, data: *mut c_void) -> c_int {
    LOG.guarded("acct_gather_energy_p_set_data", SLURM_ERROR, || {
        let mut st = state();
        match data_type {
            sys::ENERGY_DATA_STEP_PTR => {
                if !data.is_null() && daemon() == Daemon::Slurmstepd {
                    start_step(&mut st, data);
                }
                SLURM_SUCCESS
            }
            // Nothing to re-read; profiling (acct_gather_profile) is not fed by this plugin.
            sys::ENERGY_DATA_RECONFIG | sys::ENERGY_DATA_PROFILE => SLURM_SUCCESS,
            other => {
                LOG.error(&format!("{}: set_data: unknown type {other}", st.ctx));
                SLURM_ERROR
            }
        }
    })
}

/// No options of our own in acct_gather.conf.
#[unsafe(no_mangle)]
pub extern "C" fn acct_gather_energy_p_conf_options(_full_options: *mut *mut c_void, _full_options_cnt: *mut c_int) {
    LOG.guarded("acct_gather_energy_p_conf_options", (), || ())
}

#[unsafe(no_mangle)]
pub extern "C" fn acct_gather_energy_p_conf_set(_context_id: c_int, _tbl: *mut c_void) {
    LOG.guarded("acct_gather_energy_p_conf_set", (), || {
        let mut st = state();
        ensure_node_meter(&mut st);
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn acct_gather_energy_p_conf_values(_data: *mut sys::energy_list_t) {
    LOG.guarded("acct_gather_energy_p_conf_values", (), || ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn plugin_symbols() {
        assert_eq!(CStr::from_bytes_until_nul(&plugin_type).unwrap().to_str().unwrap(), "acct_gather_energy/nvml");
        assert_eq!(plugin_version, slurm_bindings::SLURM_VERSION_NUMBER);
    }

    #[test]
    fn outside_a_daemon_reports_nothing_and_does_not_fail() {
        // A test binary has no libslurmfull: init refuses cleanly, get_data gives zeros.
        assert_eq!(init(), SLURM_ERROR);
        // SAFETY: a plain C struct of integers; all zeros is valid.
        let mut e: sys::acct_gather_energy_t = unsafe { std::mem::zeroed() };
        // SAFETY: the pointers are to locals of the types the data types name.
        let rc = unsafe { acct_gather_energy_p_get_data(sys::ENERGY_DATA_NODE_ENERGY_UP, (&mut e as *mut sys::acct_gather_energy_t).cast()) };
        assert_eq!(rc, SLURM_SUCCESS);
        assert_eq!(e.consumed_energy, 0);
        let mut n: u16 = 0;
        // SAFETY: as above.
        let rc = unsafe { acct_gather_energy_p_get_data(sys::ENERGY_DATA_SENSOR_CNT, (&mut n as *mut u16).cast()) };
        assert_eq!(rc, SLURM_SUCCESS);
        assert_eq!(n, 1);
    }
}
