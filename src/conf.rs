//! The parts of slurmctld's configuration (`slurm_conf`) the plugins read.

use std::ffi::CStr;
use std::path::PathBuf;

use crate::api::{ApiError, api};
use crate::locks::{LockLevel, NotLocked, SlurmctldLock};
use crate::sys;

/// A copy of what the plugins need from `slurm_conf`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConfView {
    /// Path of the slurm.conf the daemon read.
    pub slurm_conf_path: Option<PathBuf>,
    /// `SchedulerParameters`.
    pub sched_params: Option<String>,
    /// `DebugFlags` bits.
    pub debug_flags: u64,
    /// `SelectTypeParameters` bits.
    pub select_type_param: u16,
    /// `PreemptType`.
    pub preempt_type: Option<String>,
    /// `PrologFlags` bits.
    pub prolog_flags: u32,
    /// `StateSaveLocation`: where slurmctld (and sched/energy) keep state across restarts.
    pub state_save_location: Option<PathBuf>,
    /// `AuthInfo` (its `socket=` names munged's socket).
    pub authinfo: Option<String>,
    /// The uid of `SlurmUser`.
    pub slurm_user_id: u32,
    /// The uid of `SlurmdUser` (slurmd and slurmstepd).
    pub slurmd_user_id: u32,
    pub preempt_mode: u16,
    pub select_type: Option<String>,
}

impl ConfView {
    /// Read under the guard's configuration lock.
    pub fn read(lock: &SlurmctldLock) -> Result<ConfView, NotLocked> {
        lock.require("slurm_conf", |l| l.conf, LockLevel::Read)?;
        // SAFETY: the guard holds at least the configuration read lock.
        Ok(unsafe { Self::read_raw(lock.api()) })
    }

    /// Read while the *caller* holds slurmctld's configuration lock (plugin `init`, which
    /// slurmctld calls from `read_slurm_conf` with the configuration write lock held).
    ///
    /// # Safety
    /// The configuration lock must be held by this thread's caller for the whole call.
    pub unsafe fn read_held_by_caller() -> Result<ConfView, ApiError> {
        let api = api()?;
        // SAFETY: forwarded contract.
        Ok(unsafe { Self::read_raw(api) })
    }

    /// Does `DebugFlags` include `Backfill` (the flag sched plugins log their details under)?
    pub fn debug_backfill(&self) -> bool {
        // SAFETY: the shim returns a constant.
        self.debug_flags & unsafe { sys::energy_debug_flag_backfill() } != 0
    }

    /// Is a preemption plugin other than `preempt/none` configured?
    pub fn preemption_enabled(&self) -> bool {
        self.preempt_type.as_deref().is_some_and(|t| !t.is_empty() && !t.eq_ignore_ascii_case("preempt/none"))
    }

    /// Does slurmctld send each job's prolog to its nodes when it allocates them
    /// (`PrologFlags=Alloc`, also set by `Contain`)? Only then does every node of the job get
    /// the job's SPANK environment before its first step there.
    /// `SelectType=select/linear`: whole nodes for every job, which the planner's per-CPU and
    /// per-GPU packing does not model.
    pub fn whole_node_selection(&self) -> bool {
        self.select_type.as_deref().is_some_and(|t| t.eq_ignore_ascii_case("select/linear"))
    }

    /// `PreemptMode` includes GANG (time slicing of jobs that share resources).
    pub fn gang_scheduling(&self) -> bool {
        u32::from(self.preempt_mode) & sys::PREEMPT_MODE_GANG != 0
    }

    pub fn prolog_at_allocation(&self) -> bool {
        self.prolog_flags & sys::PROLOG_FLAG_ALLOC != 0
    }

    /// Does cons_tres allocate whole cores (`CR_Core`, `CR_Core_Memory`)? A job's CPUs on a
    /// node with `ThreadsPerCore>1` are then rounded up to whole cores.
    pub fn allocates_whole_cores(&self) -> bool {
        // SAFETY: the shim returns a constant.
        self.select_type_param & unsafe { sys::energy_cr_core_flag() } != 0
    }

    /// Is memory a consumable resource (`CR_*_Memory`)?
    pub fn memory_consumable(&self) -> bool {
        // SAFETY: the shim returns a constant.
        self.select_type_param & unsafe { sys::energy_cr_memory_flag() } != 0
    }

    /// # Safety
    /// The configuration lock must be held.
    unsafe fn read_raw(api: &'static crate::Api) -> ConfView {
        let conf = api.raw().slurm_conf;
        // SAFETY: `conf` is the address of slurmctld's `slurm_conf` (non-NULL after resolve);
        // the lock keeps it from changing while we copy.
        let c = unsafe { &*conf };
        // SAFETY: string members are NULL or NUL-terminated strings owned by slurm_conf.
        let text = |p: *mut std::ffi::c_char| unsafe { (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned()) };
        ConfView {
            slurm_conf_path: text(c.slurm_conf).map(PathBuf::from),
            sched_params: text(c.sched_params),
            debug_flags: c.debug_flags,
            select_type_param: c.select_type_param,
            preempt_type: text(c.preempt_type),
            prolog_flags: u32::from(c.prolog_flags),
            state_save_location: text(c.state_save_location).map(PathBuf::from),
            authinfo: text(c.authinfo),
            slurm_user_id: c.slurm_user_id,
            slurmd_user_id: c.slurmd_user_id,
            preempt_mode: c.preempt_mode,
            select_type: text(c.select_type),
        }
    }
}

/// `SchedulerParameters` holds `sched_interval=-1` (slurmctld's main scheduler is off).
/// Slurm reads the parameters case-insensitively, and so do we.
pub fn main_scheduler_disabled(sched_params: Option<&str>) -> bool {
    has_param(sched_params, |kv| kv.replace(' ', "").eq_ignore_ascii_case("sched_interval=-1"))
}

/// `SchedulerParameters` holds `defer` (no job is started at submission, which would bypass
/// any sched plugin).
pub fn starts_deferred(sched_params: Option<&str>) -> bool {
    has_param(sched_params, |kv| kv.eq_ignore_ascii_case("defer"))
}

/// The value of `key=value` in `SchedulerParameters` (key case-insensitive).
pub fn param_value<'p>(sched_params: Option<&'p str>, key: &str) -> Option<&'p str> {
    sched_params?.split(',').map(str::trim).find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        k.trim().eq_ignore_ascii_case(key).then_some(v.trim())
    })
}

/// sched/backfill's yield settings from `SchedulerParameters`, as it reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct YieldParams {
    /// `bf_yield_interval` (µs): hold the locks at most this long before yielding.
    pub interval_us: Option<u64>,
    /// `bf_yield_sleep` (µs): how long to let RPCs through.
    pub sleep_us: Option<u64>,
    /// `max_rpc_cnt`: yield early when this many RPCs are waiting (0 = never).
    pub max_rpc_cnt: u32,
}

impl YieldParams {
    pub fn parse(sched_params: Option<&str>) -> YieldParams {
        let num = |k: &str| param_value(sched_params, k).and_then(|v| v.parse::<u64>().ok());
        YieldParams {
            interval_us: num("bf_yield_interval").filter(|&v| v > 0),
            sleep_us: num("bf_yield_sleep").filter(|&v| v > 0),
            max_rpc_cnt: num("max_rpc_cnt").map_or(0, |v| v.min(u64::from(u32::MAX)) as u32),
        }
    }
}

/// sched/backfill's `bf_min_prio_reserve` and `bf_min_age_reserve` (seconds): who gets a
/// reservation. 0 when not set or not a number (as backfill treats a bad value: ignored).
pub fn reservation_thresholds(sched_params: Option<&str>) -> (u32, u32) {
    let num = |k: &str| param_value(sched_params, k).and_then(|v| v.parse::<u64>().ok()).map_or(0, |v| v.min(u64::from(u32::MAX)) as u32);
    (num("bf_min_prio_reserve"), num("bf_min_age_reserve"))
}

/// sched/backfill's planning window, `bf_window` (minutes in slurm.conf), in seconds: read as
/// backfill reads it (the leading digits, like `atoi`); 1 day when not set, and when below 1
/// minute or above 30 days (backfill logs an error and uses its default, as
/// [`sched_params_warnings`] names it).
pub fn backfill_window_s(sched_params: Option<&str>) -> f64 {
    const DEFAULT_S: f64 = 24.0 * 3600.0;
    match param_value(sched_params, "bf_window").map(leading_int) {
        Some(min) if (1..=BACKFILL_WINDOW_MAX_MIN).contains(&min) => min as f64 * 60.0,
        _ => DEFAULT_S,
    }
}

/// The largest `bf_window` sched/backfill accepts (minutes): 30 days.
const BACKFILL_WINDOW_MAX_MIN: i64 = 30 * 24 * 60;

/// The number at the start of `text`, as C's `atoi` reads it (0 without one).
fn leading_int(text: &str) -> i64 {
    let text = text.trim_start();
    let (sign, digits) = match text.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text.strip_prefix('+').unwrap_or(text)),
    };
    let end = digits.find(|c: char| !c.is_ascii_digit()).unwrap_or(digits.len());
    digits[..end].parse::<i64>().map_or(0, |v| sign * v)
}

/// Partitions that let jobs share CPUs (`OverSubscribe=YES` or `FORCE` with a count above 1),
/// with their `OverSubscribe=` as slurm.conf writes it. Call only where slurmctld holds the
/// partition lock for the caller (sched/energy's `init`, inside `read_slurm_conf()`).
///
/// # Safety
/// The caller's thread must hold slurmctld's partition read lock.
pub unsafe fn oversubscribing_partitions_held_by_caller() -> Result<Vec<(String, String)>, ApiError> {
    let api = api()?;
    // SAFETY: part_list is slurmctld's list of partition records, valid under the partition
    // lock the caller holds.
    let list = unsafe { *api.raw().part_list };
    // SAFETY: as above; items are part_record_t.
    let Some(items) = (unsafe { crate::list::ListIter::new(api, list) }) else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for p in items {
        // SAFETY: an item of part_list, read under the partition lock.
        let Some(part) = (unsafe { (p as *const sys::part_record_t).as_ref() }) else { continue };
        let force = u32::from(part.max_share) & sys::SHARED_FORCE != 0;
        let count = u32::from(part.max_share) & !sys::SHARED_FORCE;
        if count > 1 {
            // SAFETY: the record's name, NULL or a string it owns.
            let name = unsafe { crate::node::opt_str(part.name) }.unwrap_or("?").to_string();
            out.push((name, format!("{}:{count}", if force { "FORCE" } else { "YES" })));
        }
    }
    Ok(out)
}

fn has_param(sched_params: Option<&str>, is: impl Fn(&str) -> bool) -> bool {
    sched_params.is_some_and(|p| p.split(',').any(|kv| is(kv.trim())))
}

/// Why sched/energy must not run with these `SchedulerParameters`, with the line to write;
/// `None` when they keep every start in the plugin's hands.
pub fn sched_params_problem(sched_params: Option<&str>) -> Option<String> {
    let mut missing = Vec::new();
    if !main_scheduler_disabled(sched_params) {
        missing.push("sched_interval=-1");
    }
    if !starts_deferred(sched_params) {
        missing.push("defer");
    }
    if missing.is_empty() {
        return None;
    }
    let mut wanted: Vec<String> = sched_params
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|kv| !kv.is_empty() && !kv.to_ascii_lowercase().starts_with("sched_interval="))
        .map(str::to_string)
        .collect();
    wanted.push("sched_interval=-1".into());
    if !starts_deferred(sched_params) {
        wanted.push("defer".into());
    }
    Some(format!(
        "SchedulerParameters ({}) lacks {}: slurmctld would start jobs itself ({}), bypassing sched/energy's plan and its reservations. Write this line in slurm.conf: SchedulerParameters={}",
        sched_params.unwrap_or("unset"),
        missing.join(" and "),
        if missing.len() == 2 { "periodically and at submission" } else if missing[0] == "defer" { "at submission" } else { "periodically" },
        wanted.join(",")
    ))
}

/// What sched/energy does with each `SchedulerParameters` entry that sched/backfill or
/// slurmctld's main scheduler reads (the 22.05 to 26.05 manuals' lists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamHandling {
    /// Honoured as sched/backfill honours it (no word at start).
    Honoured,
    /// Not read; sched/energy's own setting in energy.toml plays its part.
    Mapped(&'static str),
    /// Has no effect under sched/energy, and why.
    Ignored(&'static str),
}

/// How sched/energy treats one `SchedulerParameters` key (case-insensitive); `None` for keys
/// that are not about scheduling jobs (slurmctld reads those itself).
pub fn param_handling(key: &str) -> Option<ParamHandling> {
    use ParamHandling::*;
    const MAIN_OFF: &str = "slurmctld's main scheduler does not run under sched/energy (sched_interval=-1)";
    const NO_EQUIVALENT: &str = "sched/energy has no equivalent: its planner decides this";
    let key = key.trim().to_ascii_lowercase();
    Some(match key.as_str() {
        "sched_interval" | "defer" | "bf_yield_interval" | "bf_yield_sleep" | "max_rpc_cnt" | "kill_invalid_depend" | "enable_user_top" | "disable_user_top"
        | "nohold_on_prolog_fail" | "permit_job_expansion" | "max_array_tasks" | "max_depend_depth" | "max_script_size" | "max_switch_wait"
        | "requeue_setup_env_fail" | "salloc_wait_nodes" | "sbatch_wait_nodes" | "preempt_strict_order"
        | "preempt_reorder_count" | "preempt_youngest_first" | "pack_serial_at_end" | "spec_cores_first" | "allow_zero_lic"
        | "enable_hetjob_steps" | "disable_hetjob_steps" | "ignore_numa" | "whole_hetjob" | "time_min_as_soft_limit" => Honoured,
        "bf_max_job_test" => Mapped("[planner] max_jobs_tested (jobs tested per cycle)"),
        "bf_interval" => Mapped("[sched] interval_s (seconds between cycles)"),
        "bf_max_time" => Mapped("[planner] max_cycle_ms (time a cycle may plan)"),
        "bf_continue" => Mapped("[planner] max_cycle_ms (a cycle stops at its time limit and the next one starts from the top)"),
        "bf_min_prio_reserve" | "bf_min_age_reserve" | "bf_window" => Honoured,
        "bf_max_job_user" | "bf_max_job_part" | "bf_max_job_assoc" | "bf_max_job_user_part" | "bf_max_job_start" | "bf_max_job_array_resv"
        | "bf_one_resv_per_job" | "bf_job_part_count_reserve" | "bf_resolution"
        | "bf_licenses" | "bf_busy_nodes" | "bf_ignore_newly_avail_nodes" | "bf_node_space_size" | "bf_running_job_reserve" | "bf_hetjob_immediate"
        | "bf_hetjob_prio" | "bf_allow_magnetic_slot" | "bf_topopt_enable" | "bf_topopt_iterations" | "bf_window_linear" | "bf_max_job_start_per_part"
        | "assoc_limit_stop" => Ignored(NO_EQUIVALENT),
        "default_queue_depth" | "partition_job_depth" | "sched_max_job_start" | "sched_min_interval" | "max_sched_time" | "defer_batch"
        | "reduce_completing_frag" => Ignored(MAIN_OFF),
        other if other.starts_with("bf_") => Ignored(NO_EQUIVALENT),
        _ => return None,
    })
}

/// The warnings sched/energy logs at start for `SchedulerParameters`: one per entry it does
/// not honour, naming the entry and what to do instead.
pub fn sched_params_warnings(sched_params: Option<&str>) -> Vec<String> {
    let Some(params) = sched_params else { return Vec::new() };
    params
        .split(',')
        .map(str::trim)
        .filter(|kv| !kv.is_empty())
        .filter_map(|kv| {
            let key = kv.split_once('=').map_or(kv, |(k, _)| k);
            match param_handling(key)? {
                ParamHandling::Honoured if key.trim().eq_ignore_ascii_case("bf_window") => {
                    let min = kv.split_once('=').map_or(0, |(_, v)| leading_int(v));
                    (!(1..=BACKFILL_WINDOW_MAX_MIN).contains(&min)).then(|| {
                        format!("SchedulerParameters {kv} is invalid (1 to {BACKFILL_WINDOW_MAX_MIN} minutes): 1 day is used, as sched/backfill does")
                    })
                }
                ParamHandling::Honoured => None,
                ParamHandling::Mapped(to) => Some(format!("SchedulerParameters {kv} is not read by sched/energy: set {to} in energy.toml instead")),
                ParamHandling::Ignored(why) => Some(format!("SchedulerParameters {kv} has no effect: {why}")),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservation_thresholds_are_read_as_backfill_reads_them() {
        assert_eq!(reservation_thresholds(Some("sched_interval=-1,defer,bf_min_prio_reserve=1000,BF_MIN_AGE_RESERVE=600")), (1000, 600));
        assert_eq!(reservation_thresholds(Some("bf_min_prio_reserve=x")), (0, 0));
        assert_eq!(reservation_thresholds(None), (0, 0));
        assert!(sched_params_warnings(Some("bf_min_prio_reserve=1000,bf_min_age_reserve=600")).is_empty());
    }

    #[test]
    fn the_planning_window_is_read_as_backfill_reads_bf_window() {
        assert_eq!(backfill_window_s(None), 86_400.0);
        assert_eq!(backfill_window_s(Some("bf_window=2880")), 2880.0 * 60.0);
        assert_eq!(backfill_window_s(Some("defer, BF_WINDOW=90min ,bf_interval=5")), 90.0 * 60.0);
        for bad in ["bf_window=0", "bf_window=x", "bf_window=43201", "bf_window=-5"] {
            assert_eq!(backfill_window_s(Some(bad)), 86_400.0, "{bad}");
            assert_eq!(sched_params_warnings(Some(bad)).len(), 1, "{bad}");
        }
        assert_eq!(backfill_window_s(Some("bf_window=43200")), 43_200.0 * 60.0);
        assert!(sched_params_warnings(Some("bf_window=2880,bf_window_linear=30")).len() == 1);
    }

    #[test]
    fn every_backfill_parameter_not_honoured_is_named() {
        let w = sched_params_warnings(Some("sched_interval=-1,defer,bf_yield_interval=1000000,bf_max_job_user=10,BF_WINDOW=0,bf_max_job_test=100,default_queue_depth=50,bf_future_knob=1,DebugFlags=x"));
        assert_eq!(w.len(), 5, "{w:#?}");
        assert!(w[0].starts_with("SchedulerParameters bf_max_job_user=10 has no effect"), "{w:#?}");
        assert!(w[1].contains("BF_WINDOW=0 is invalid") && w[1].contains("1 day is used"), "{w:#?}");
        assert!(w[2].contains("bf_max_job_test=100") && w[2].contains("max_jobs_tested"), "{w:#?}");
        assert!(w[3].contains("default_queue_depth=50") && w[3].contains("main scheduler"), "{w:#?}");
        assert!(w[4].contains("bf_future_knob=1"), "{w:#?}");
        assert!(sched_params_warnings(Some("sched_interval=-1,defer,max_rpc_cnt=150")).is_empty());
        assert!(sched_params_warnings(None).is_empty());
    }

    #[test]
    fn sched_interval_is_found_among_other_parameters() {
        assert!(main_scheduler_disabled(Some("sched_interval=-1,defer")));
        assert!(main_scheduler_disabled(Some("defer,sched_interval=-1")));
        assert!(!main_scheduler_disabled(Some("sched_interval=60")));
        assert!(!main_scheduler_disabled(Some("sched_interval=-10")));
        assert!(!main_scheduler_disabled(None));
        assert!(main_scheduler_disabled(Some("Sched_Interval=-1")));
    }

    #[test]
    fn backfill_yield_parameters_are_read_as_slurm_reads_them() {
        let p = YieldParams::parse(Some("defer,bf_yield_interval=1000000,BF_YIELD_SLEEP=250000,max_rpc_cnt=150"));
        assert_eq!(p, YieldParams { interval_us: Some(1_000_000), sleep_us: Some(250_000), max_rpc_cnt: 150 });
        assert_eq!(YieldParams::parse(None), YieldParams { interval_us: None, sleep_us: None, max_rpc_cnt: 0 });
        assert_eq!(YieldParams::parse(Some("bf_yield_interval=x")).interval_us, None);
    }

    #[test]
    fn sched_energy_needs_both_sched_interval_and_defer() {
        assert_eq!(sched_params_problem(Some("sched_interval=-1,defer")), None);
        assert_eq!(sched_params_problem(Some("DEFER, SCHED_INTERVAL=-1,bf_max_job_test=100")), None);
        let p = sched_params_problem(Some("sched_interval=-1")).unwrap();
        assert!(p.contains("lacks defer") && p.ends_with("SchedulerParameters=sched_interval=-1,defer"), "{p}");
        let p = sched_params_problem(Some("bf_interval=30,sched_interval=60")).unwrap();
        assert!(p.contains("lacks sched_interval=-1 and defer"), "{p}");
        assert!(p.ends_with("SchedulerParameters=bf_interval=30,sched_interval=-1,defer"), "{p}");
        assert!(sched_params_problem(None).unwrap().ends_with("SchedulerParameters=sched_interval=-1,defer"));
    }
}
