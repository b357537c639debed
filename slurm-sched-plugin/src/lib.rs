//! sched/energy: the energy-aware scheduler plugin for slurmctld (`sched_energy.so`).
//!
//! Laid out like Slurm's own sched plugins: the loader's symbols, `init`, `fini`, then the one
//! API function, `sched_p_reconfig`. `init` reads `energy.toml` next to slurm.conf and starts
//! the scheduling thread; each cycle ([`cycle`]) turns slurmctld's records into a
//! `model::types::Snapshot` ([`snapshot`]), asks `model`'s planner, and starts the chosen jobs
//! through slurmctld's own path. Every decision is `model`'s; this crate only translates.
//!
//! Admins must set `SchedulerParameters=sched_interval=-1` (else slurmctld's main scheduler
//! starts jobs too; `init` warns) and know that heterogeneous jobs are rejected unless
//! `SchedulerType=sched/backfill`.
//!
//! No panic may cross into slurmctld: every `extern "C"` entry and every cycle of the thread
//! runs under `catch_unwind` and turns a panic into a log line.

pub mod accounting;
pub mod carbon_feed;
pub mod power_cap_feed;
pub mod power_directives;
pub mod watched_file;
pub mod config;
pub mod cycle;
pub mod gpu_use_listener;
pub mod hints;
pub mod learning;
pub mod snapshot;

use std::collections::VecDeque;
use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use model::predictor::Predictor;
use slurm_bindings::conf::{ConfView, sched_params_problem};
use slurm_bindings::{Logger, slurm_log};

use crate::config::Config;
use crate::cycle::CycleStats;

/// The plugin's type, also the prefix of its log lines.
pub const PLUGIN_TYPE: &str = "sched/energy";

pub static LOG: Logger = Logger::new(PLUGIN_TYPE);

// ---- The loader's symbols (src/common/plugin.c): NUL-terminated char arrays and the version.

#[unsafe(no_mangle)]
#[used]
pub static plugin_name: [u8; 42] = *b"Energy-aware GPU scheduler (slurm-energy)\0";

#[unsafe(no_mangle)]
#[used]
pub static plugin_type: [u8; 13] = *b"sched/energy\0";

/// Must equal the running slurmctld's `SLURM_VERSION_NUMBER` (major, minor and micro).
#[unsafe(no_mangle)]
#[used]
pub static plugin_version: u32 = slurm_bindings::SLURM_VERSION_NUMBER;

const SLURM_SUCCESS: c_int = 0;
const SLURM_ERROR: c_int = -1;

/// Called by slurmctld when it loads the plugin (from `read_slurm_conf`, with the configuration
/// write lock held). Non-zero makes slurmctld fail to start.
#[unsafe(no_mangle)]
pub extern "C" fn init() -> c_int {
    slurm_bindings::log::install_bridge(&LOG);
    LOG.guarded("init", SLURM_ERROR, || match start() {
        Ok(()) => SLURM_SUCCESS,
        Err(e) => {
            LOG.error(&e);
            SLURM_ERROR
        }
    })
}

/// Called when slurmctld unloads the plugin (shutdown, or a SchedulerType change).
#[unsafe(no_mangle)]
pub extern "C" fn fini() {
    LOG.guarded("fini", (), stop)
}

/// `scontrol reconfigure` and friends. slurmctld may hold its configuration write lock here:
/// take no lock, only ask the thread to re-read the configuration.
#[unsafe(no_mangle)]
pub extern "C" fn sched_p_reconfig() -> c_int {
    LOG.guarded("sched_p_reconfig", SLURM_SUCCESS, || {
        if let Ok(state) = STATE.lock() {
            if let Some(running) = state.as_ref() {
                running.shared.reconfig.store(true, Ordering::SeqCst);
                running.shared.wake.notify_all();
            }
        }
        SLURM_SUCCESS
    })
}

// ---- The scheduling thread.

struct Shared {
    stop: Mutex<bool>,
    wake: Condvar,
    reconfig: AtomicBool,
}

struct Running {
    shared: Arc<Shared>,
    handle: JoinHandle<()>,
}

/// Survives dlclose/dlopen (a plugin that started a thread is never really unloaded), so
/// `start` resets it and `stop` empties it.
static STATE: Mutex<Option<Running>> = Mutex::new(None);

/// Statistics of the last cycles, newest last.
static STATS: Mutex<VecDeque<CycleStats>> = Mutex::new(VecDeque::new());

/// A copy of the statistics kept so far (for comparison runs and tests).
pub fn recent_stats() -> Vec<CycleStats> {
    STATS.lock().map(|s| s.iter().cloned().collect()).unwrap_or_default()
}

fn config_path(conf: &ConfView) -> PathBuf {
    let slurm_conf = conf
        .slurm_conf_path
        .clone()
        .or_else(|| std::env::var_os("SLURM_CONF").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/etc/slurm/slurm.conf"));
    config::path_next_to(&slurm_conf)
}

fn load_predictor(cfg: &Config) -> Result<Predictor, String> {
    match &cfg.sched.data_dir {
        None => Ok(Predictor::default()),
        Some(dir) => Predictor::from_data_dir(dir, &cfg.sched.interference_gpu)
            .map_err(|e| format!("sched.data_dir {}: {e}", dir.display())),
    }
}

fn start() -> Result<(), String> {
    stop();
    // SAFETY: slurmctld calls init() from read_slurm_conf() with its configuration write lock
    // held, so slurm_conf is stable while we copy from it.
    let conf = unsafe { ConfView::read_held_by_caller() }.map_err(|e| format!("not running inside slurmctld: {e}"))?;
    let path = config_path(&conf);
    let cfg = config::load(&path).map_err(|e| format!("invalid configuration: {e}"))?;
    let mut predictor = load_predictor(&cfg).map_err(|e| format!("invalid configuration: {}: {e}", path.display()))?;
    // The carbon file must parse at start (a typo in it is found now, not at the first dirty
    // hour); a missing one is waited for.
    let carbon = carbon_feed::CarbonFeed::start(&cfg.carbon).map_err(|e| format!("invalid configuration: {}: carbon.source: {e}", path.display()))?;
    // So must the power-cap file (docs/power-cap.md).
    let power_cap = power_cap_feed::PowerCapFeed::start(&cfg.power_cap).map_err(|e| format!("invalid configuration: {}: power_cap.file: {e}", path.display()))?;
    let learning = cfg.learning.enabled.then(|| {
        let (l, history, pairs) = learning::Learning::load(learning::state_path(&cfg, conf.state_save_location.as_deref()));
        predictor.runtime = history;
        predictor.interference.set_history(pairs);
        l
    });
    let mut observer = learning::Observer {
        carbon,
        power_cap,
        accounting: accounting::Accounting::default(),
        learning,
        gpu_use: None,
        gpu_use_auth: (
            conf.authinfo.as_deref().and_then(slurm_bindings::munge::socket_from_authinfo),
            Some(gpu_use_listener::Trusted { slurmd_user_id: conf.slurmd_user_id }),
        ),
    };
    observer.listen_for_gpu_use(&cfg).map_err(|e| format!("invalid configuration: {}: {e}", path.display()))?;
    LOG.set_debug(cfg.sched.debug || conf.debug_backfill());
    if let Some(problem) = sched_params_problem(conf.sched_params.as_deref()) {
        return Err(problem);
    }
    for warning in slurm_bindings::conf::sched_params_warnings(conf.sched_params.as_deref()) {
        slurm_log!(LOG, error, "{warning}");
    }
    if conf.whole_node_selection() {
        return Err("SelectType=select/linear gives every job whole nodes, which sched/energy's planner (which packs jobs by CPUs and GPUs) does not model. Write SelectType=select/cons_tres in slurm.conf (or use SchedulerType=sched/backfill)".into());
    }
    if conf.gang_scheduling() {
        return Err("PreemptMode includes GANG: sched/energy does not time-slice jobs, so gang scheduling would silently not happen. Remove GANG from PreemptMode in slurm.conf (or use SchedulerType=sched/backfill)".into());
    }
    // SAFETY: init runs inside read_slurm_conf(), whose caller holds the partition lock.
    let oversubscribing = unsafe { slurm_bindings::conf::oversubscribing_partitions_held_by_caller() }.map_err(|e| e.to_string())?;
    if !oversubscribing.is_empty() {
        let list: Vec<String> = oversubscribing.iter().map(|(p, o)| format!("PartitionName={p} OverSubscribe={o}")).collect();
        return Err(format!(
            "{}: sched/energy does not let jobs share CPUs, so OverSubscribe would silently not happen. Write OverSubscribe=NO (or EXCLUSIVE) on those partition lines in slurm.conf (or use SchedulerType=sched/backfill)",
            list.join(", ")
        ));
    }
    if conf.preemption_enabled() {
        return Err("PreemptType is not preempt/none: sched/energy does not preempt jobs and would silently ignore preemption. Write PreemptType=preempt/none in slurm.conf (or use SchedulerType=sched/backfill)".into());
    }
    if !conf.prolog_at_allocation() {
        slurm_log!(LOG, error, "PrologFlags has neither Alloc nor Contain: the GPU clock chosen for a job reaches only the node of its batch script (other nodes, and jobs started by srun or salloc, run at the clock their hints give); write PrologFlags=Alloc (or Contain) in slurm.conf");
    }
    slurm_log!(LOG, info, "heterogeneous jobs are refused at submission by slurmctld unless SchedulerType=sched/backfill; sched/energy never starts them");
    match &cfg.path {
        Some(p) => slurm_log!(LOG, info, "loaded configuration {} (interval {} s)", p.display(), cfg.sched.interval_s),
        None => slurm_log!(LOG, info, "no {} found, using defaults (interval {} s)", path.display(), cfg.sched.interval_s),
    }
    if let Ok(mut stats) = STATS.lock() {
        stats.clear();
    }
    let shared = Arc::new(Shared { stop: Mutex::new(false), wake: Condvar::new(), reconfig: AtomicBool::new(false) });
    let thread_shared = Arc::clone(&shared);
    let handle = std::thread::Builder::new()
        .name("sched/energy".into())
        .spawn(move || scheduler_thread(thread_shared, path, cfg, predictor, observer))
        .map_err(|e| format!("cannot start the scheduling thread: {e}"))?;
    let mut state = STATE.lock().map_err(|_| "plugin state poisoned".to_string())?;
    *state = Some(Running { shared, handle });
    slurm_log!(LOG, info, "{} loaded (Slurm {}), scheduling thread started", PLUGIN_TYPE, slurm_bindings::SLURM_VERSION);
    Ok(())
}

fn stop() {
    let running = match STATE.lock() {
        Ok(mut state) => state.take(),
        Err(poisoned) => poisoned.into_inner().take(),
    };
    if let Some(running) = running {
        if let Ok(mut stop) = running.shared.stop.lock() {
            *stop = true;
        }
        running.shared.wake.notify_all();
        if running.handle.join().is_err() {
            LOG.error("scheduling thread ended with a panic");
        }
        slurm_log!(LOG, info, "scheduling thread stopped");
    }
}

/// Sleeps up to `interval`; true when asked to stop.
fn wait(shared: &Shared, interval: Duration) -> bool {
    let Ok(guard) = shared.stop.lock() else { return true };
    if *guard {
        return true;
    }
    match shared.wake.wait_timeout_while(guard, interval, |stop| !*stop && !shared.reconfig.load(Ordering::SeqCst)) {
        Ok((guard, _)) => *guard,
        Err(_) => true,
    }
}

fn scheduler_thread(shared: Arc<Shared>, path: PathBuf, mut cfg: Config, mut predictor: Predictor, mut observer: learning::Observer) {
    let mut cycle_no: u64 = 0;
    let mut learnt = cycle::Learnt::default();
    let started_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let mut recovery = slurm_bindings::launch::RecoveryWatch::new(started_s);
    let mut next_cycle = Instant::now() + Duration::from_secs_f64(cfg.sched.interval_s);
    LOG.guarded("GPU use senders", (), || post_node_addresses(&observer));
    loop {
        // While the previous slurmctld's starts are watched, wake often (see RecoveryWatch).
        let until_cycle = next_cycle.saturating_duration_since(Instant::now());
        let pause = if recovery.done() { until_cycle } else { until_cycle.min(recovery.poll_interval()) };
        if wait(&shared, pause) {
            if let Some(l) = observer.learning.as_mut() {
                l.save(&predictor.runtime, predictor.interference.history());
            }
            return;
        }
        if shared.reconfig.swap(false, Ordering::SeqCst) {
            LOG.guarded("reconfigure", (), || reload(&path, &mut cfg, &mut predictor, &mut observer));
            continue;
        }
        if !recovery.done() {
            LOG.guarded("recovered jobs", (), || watch_recovery(&mut recovery, cfg.sched.finish_lost_prologs));
        }
        if Instant::now() < next_cycle {
            continue;
        }
        next_cycle = Instant::now() + Duration::from_secs_f64(cfg.sched.interval_s);
        cycle_no += 1;
        LOG.guarded("GPU use senders", (), || post_node_addresses(&observer));
        LOG.guarded("observe", (), || observer.observe(&cfg, &mut predictor));
        // The cap the site's power-cap file sets now replaces energy.toml's for this cycle.
        let cap_w = LOG.guarded("power cap", cfg.planner.power_cap_w, || observer.power_cap_w(&cfg));
        let capped;
        let cycle_cfg = if cap_w == cfg.planner.power_cap_w {
            &cfg
        } else {
            let mut c = cfg.clone();
            c.planner.power_cap_w = cap_w;
            capped = c;
            &capped
        };
        learnt.node_power = observer.accounting.node_power();
        learnt.job_power = observer.gpu_use.as_ref().map(|l| l.reports().latest_powers(cycle::unix_now_s() - 120.0)).unwrap_or_default();
        let outcome = catch_unwind(AssertUnwindSafe(|| cycle::run(cycle_cfg, &predictor, &mut learnt)));
        match outcome {
            Ok(Ok(stats)) => {
                slurm_log!(LOG, debug, "cycle {cycle_no}: {stats}");
                if let Ok(mut kept) = STATS.lock() {
                    kept.push_back(stats);
                    while kept.len() > cfg.sched.stats_kept.max(1) {
                        kept.pop_front();
                    }
                }
            }
            Ok(Err(e)) => LOG.error(&format!("cycle skipped: {e} (cycle {cycle_no})")),
            Err(panic) => {
                LOG.error(&format!("cycle skipped: internal error (panic: {}) (cycle {cycle_no})", slurm_bindings::log::panic_text(&*panic)))
            }
        }
    }
}

/// Tells the GPU use listener which addresses are nodes' (copied under the node read lock; the
/// listener thread never reads the node table).
fn post_node_addresses(observer: &learning::Observer) {
    use slurm_bindings::locks::{LockLevel, LockLevels, SlurmctldLock};
    let Some(listener) = observer.gpu_use.as_ref() else { return };
    let node_read = LockLevels { conf: LockLevel::None, job: LockLevel::None, node: LockLevel::Read, part: LockLevel::None, fed: LockLevel::None };
    let Ok(lock) = SlurmctldLock::acquire(node_read) else { return };
    let nodes = match lock.nodes() {
        Ok(nodes) => nodes
            .iter()
            .map(|n| gpu_use_listener::NodeAddresses { name: n.name().to_string(), hosts: n.addr().into_iter().chain(n.hostname()).map(str::to_string).collect() })
            .collect(),
        Err(e) => return LOG.error(&format!("GPU use senders not updated: {e}")),
    };
    drop(lock);
    listener.set_nodes(nodes);
}

/// Ends the batch jobs a previous slurmctld started whose node does not have them (their launch
/// never left): see slurm_bindings::launch::RecoveryWatch.
fn watch_recovery(watch: &mut slurm_bindings::launch::RecoveryWatch, finish_lost_prologs: bool) {
    let Ok(mut lock) = slurm_bindings::locks::SlurmctldLock::acquire(slurm_bindings::locks::LockLevels::SCHEDULER) else { return };
    finish_lost_prologs_of(&mut lock, watch, finish_lost_prologs);
    let watched_before = (watch.watched(), watch.prolog_waits());
    let judged = lock.watch_recovered_starts(watch, |f| {
        use model::lost_launch::{BatchStep, LaunchVerdict, WatchedJob, judge, launch_grace_s};
        if LOG.debug_enabled() {
            LOG.debug(&format!("recovered start watched: {f:?}"));
        }
        use slurm_bindings::launch::StartWatchAction;
        let job = WatchedJob {
            running: f.running,
            first_node_registered: f.first_node_registered,
            reported: f.reported,
            waits_for_prolog: f.waits_for_prolog,
            seen_waiting_for_prolog: f.seen_waiting_for_prolog,
            age_s: f.age_s,
            waited_for_grace: f.waited_for_grace,
            no_node_left: f.no_node_left,
            batch_step: match f.batch_step_reported {
                None => BatchStep::Unknown,
                Some(true) => BatchStep::Reported,
                Some(false) => BatchStep::NotReported,
            },
            asked_for_script: f.asked_for_script,
            since_prolog_wait_ended_s: f.since_prolog_wait_ended_s,
        };
        match judge(&job, launch_grace_s(f.batch_start_timeout_s, f.msg_timeout_s)) {
            LaunchVerdict::Settled | LaunchVerdict::Alive => StartWatchAction::Stop,
            LaunchVerdict::KeepWatching => StartWatchAction::KeepWatching,
            LaunchVerdict::PrologMayRun => StartWatchAction::PrologMayRun,
            LaunchVerdict::PrologRan => StartWatchAction::MarkActive,
            LaunchVerdict::WaitForGrace => StartWatchAction::WaitForGrace,
            LaunchVerdict::AskNodeAgain => StartWatchAction::AskNodeAgain,
            LaunchVerdict::EndAsMissing => StartWatchAction::EndAsMissing,
            LaunchVerdict::AskNodeForScript => StartWatchAction::AskNodeForScript,
            LaunchVerdict::ScriptGone => StartWatchAction::EndScriptGone,
            LaunchVerdict::EndedOnItsNodes => StartWatchAction::EndNoNodeLeft,
        }
    }, |age_s, batch_start_timeout_s, msg_timeout_s| {
        use model::lost_launch::{launch_grace_s, registration_judges};
        registration_judges(age_s, launch_grace_s(batch_start_timeout_s, msg_timeout_s))
    });
    match judged {
        Ok(ended) => {
            for m in ended.iter().filter(|m| m.script_gone) {
                slurm_log!(
                    LOG,
                    info,
                    "Batch JobId={} missing from batch node {} after slurmctld restart (its node runs other steps of it but not its batch script, at a registration asked for past BatchStartTimeout: the script ended and its completion was lost with the previous slurmctld, or its slurmstepd died): ended as NODE_FAIL, not requeued (rc {})",
                    m.job_id,
                    m.node,
                    m.rc
                );
            }
            for m in ended.iter().filter(|m| m.no_node_left) {
                slurm_log!(
                    LOG,
                    info,
                    "recovered batch JobId={} (batch node {}) has ended on all its nodes (their epilogs completed after slurmctld restart: the previous slurmctld ended it and died before saving that): ended as NODE_FAIL, not requeued, its resources released (rc {})",
                    m.job_id,
                    m.node,
                    m.rc
                );
            }
            for m in ended.iter().filter(|m| !m.script_gone && !m.no_node_left) {
                slurm_log!(
                    LOG,
                    info,
                    "Batch JobId={} missing from batch node {} after slurmctld restart (started by the previous slurmctld, its launch never left): ended as Slurm ends missing batch jobs (rc {})",
                    m.job_id,
                    m.node,
                    m.rc
                );
            }
        }
        Err(e) => LOG.error(&format!("recovered jobs not checked: {e}")),
    }
    for r in watch.take_registrations() {
        if r.rc == 0 && r.for_script {
            slurm_log!(
                LOG,
                info,
                "recovered batch JobId={}: its node {} reported it without its batch script (only its other steps); asked {} to register again to tell whether the script still runs",
                r.job_id,
                r.node,
                r.node
            );
        } else if r.rc == 0 {
            slurm_log!(
                LOG,
                info,
                "recovered batch JobId={}: its node {} registered without it (before sched/energy started, or while the job was younger than BatchStartTimeout + min(10 s, MessageTimeout)); asked {} to register again (slurmctld's own missing-job check judges its jobs then)",
                r.job_id,
                r.node,
                r.node
            );
        } else {
            LOG.error(&format!("recovered batch JobId={}: could not ask node {} to register again (rc {}); its jobs are judged at its next registration", r.job_id, r.node, r.rc));
        }
    }
    if LOG.debug_enabled() && (watch.watched(), watch.prolog_waits()) != watched_before {
        LOG.debug(&format!("recovered jobs: {} watched until their first node registers, {} waiting for their prolog", watch.watched(), watch.prolog_waits()));
    }
}

/// Recovered batch jobs still waiting for a prolog whose completion died with the previous
/// slurmctld: completed as the completion RPC would have (the rule: model::lost_prolog).
fn finish_lost_prologs_of(lock: &mut slurm_bindings::locks::SlurmctldLock, watch: &mut slurm_bindings::launch::RecoveryWatch, on: bool) {
    use model::lost_prolog::{RecoveredJob, Verdict, judge, prolog_limit_s};
    use slurm_bindings::launch::{PrologWaitAction, PrologWaitEnd};
    let judged = lock.judge_recovered_prolog_waits(watch, |f| {
        if LOG.debug_enabled() {
            LOG.debug(&format!("recovered prolog wait: {f:?}"));
        }
        let job = RecoveredJob {
            running: f.running,
            configuring: f.configuring,
            batch: f.batch,
            waits_for_prolog: f.waits_for_prolog,
            prolog_nodes_registered: f.prolog_nodes_registered,
            reported_since_restart: f.reported_since_restart,
        };
        match judge(&job, f.since_restart_s, f.msg_timeout_s, prolog_limit_s(f.batch_start_timeout_s, f.prolog_timeout_s)) {
            Verdict::Settled => PrologWaitAction::Stop,
            Verdict::KeepWaiting => PrologWaitAction::Wait,
            // Switched off: left waiting as stock Slurm leaves it.
            Verdict::FinishProlog if on => PrologWaitAction::CompleteProlog,
            Verdict::EndAsMissing if on => PrologWaitAction::EndAsMissing,
            Verdict::FinishProlog | Verdict::EndAsMissing => PrologWaitAction::Wait,
        }
    });
    match judged {
        Ok(finished) => {
            for p in finished {
                match p.done {
                    PrologWaitEnd::PrologCompleted => slurm_log!(
                        LOG,
                        info,
                        "job {}: prolog completion lost with the previous slurmctld; its node reported the job since the restart and no completion came within slurmd's resend period: prolog completed as slurmd's RPC would have (rc {})",
                        p.job_id,
                        p.rc
                    ),
                    PrologWaitEnd::EndedAsMissing { node } => slurm_log!(
                        LOG,
                        info,
                        "Batch JobId={} missing from batch node {} after slurmctld restart (its start was saved, its launch never left: the node registered without it and no prolog completion came within BatchStartTimeout or the prolog timeout and slurmd's resend period): ended as Slurm ends missing batch jobs (rc {})",
                        p.job_id,
                        node,
                        p.rc
                    ),
                }
            }
        }
        Err(e) => LOG.error(&format!("recovered prolog waits not checked: {e}")),
    }
}

fn reload(path: &Path, cfg: &mut Config, predictor: &mut Predictor, observer: &mut learning::Observer) {
    match config::load(path).and_then(|new| {
        load_predictor(&new)
            .map(|p| (new, p))
            .map_err(|reason| config::ConfigError { path: path.to_path_buf(), line: None, key: Some("sched.data_dir".into()), reason })
    }) {
        Ok((new, mut p)) => {
            if new.power_cap != cfg.power_cap {
                match power_cap_feed::PowerCapFeed::start(&new.power_cap) {
                    Ok(feed) => observer.power_cap = feed,
                    Err(e) => LOG.error(&format!("reconfigure: power_cap.file: {e}; keeping the previous power cap file")),
                }
            }
            if new.carbon != cfg.carbon {
                match carbon_feed::CarbonFeed::start(&new.carbon) {
                    Ok(feed) => observer.carbon = feed,
                    Err(e) => LOG.error(&format!("reconfigure: carbon.source: {e}; keeping the previous carbon source")),
                }
            }
            // What was learnt stays; the signal is set again before the next cycle.
            p.runtime = std::mem::take(&mut predictor.runtime);
            p.interference.set_history(predictor.interference.history().clone());
            if let Err(e) = observer.listen_for_gpu_use(&new) {
                LOG.error(&format!("reconfigure: {e}; GPU use is not received"));
            }
            *cfg = new;
            *predictor = p;
            LOG.set_debug(cfg.sched.debug);
            slurm_log!(LOG, info, "reconfigured from {}", path.display());
        }
        Err(e) => LOG.error(&format!("reconfigure: {e}; keeping the previous configuration")),
    }
}
