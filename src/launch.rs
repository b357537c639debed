//! Launching started jobs only once their start is on disk.
//!
//! slurmctld writes its job state file from a thread of its own, at most every
//! `SAVE_MAX_WAIT` (5) seconds after something asked for it. A slurmctld killed in between
//! (`kill -9`, OOM killer, power loss) recovers every job it started since the last write as
//! pending and starts it again, while the first copy is still running on its nodes; the nodes'
//! registrations then kill that copy, and a relaunch that meets it drains the node
//! (`Duplicate jobid`). Stock Slurm's schedulers send the launch RPC right after the start.
//!
//! With save-before-launch on, [`SlurmctldLock::start_job`] starts a job in slurmctld's
//! records (nodes, GRES, accounting, and for a batch job the batch host and batch step that
//! `launch_job()` would record) but keeps the launch RPC (batch) or the allocation answer
//! (salloc/srun) back. Whenever the guard lets go of the locks (a yield, the end of the apply
//! phase, or its drop), it writes the job state file first, with slurmctld's own
//! `dump_all_job_state()`, and only then launches what it kept back, re-checking each job. A
//! job whose start reached nobody is in the file as running: a crash now recovers it as running,
//! never as pending. Its batch step is in the file too: without it the restarted slurmctld
//! ignores the completion of a script that did run (a "late or duplicate" batch completion) and
//! the job stays running until its time limit; with it the job completes, and one whose launch
//! never left is found missing from its batch host (after `BatchStartTimeout`) and ended.
//!
//! This module holds the switch and the watch after a restart; the guard ([`SlurmctldLock`])
//! writes the file and launches at each of its release points, with the `kept_back` module
//! (below the guard, so that the guard does not depend on this one).

use crate::api::call;
use crate::kept_back::Unlaunched;
use crate::locks::{LockLevel, NotLocked, SlurmctldLock};
use crate::node::opt_str;
use crate::sys;

// The report lives with the kept-back starts, below the lock guard that returns it.
pub use crate::kept_back::LaunchReport;

impl SlurmctldLock {
    /// Keep launches back until the job state file holds the start (see the module docs).
    pub fn set_save_before_launch(&mut self, on: bool) {
        self.save_before_launch = on;
    }

    pub fn save_before_launch(&self) -> bool {
        self.save_before_launch
    }

    /// Starts kept back so far.
    pub fn unlaunched(&self) -> usize {
        self.unlaunched.len()
    }

    pub(crate) fn keep_back(&mut self, job_id: u32, start_time: sys::time_t) {
        self.unlaunched.push(Unlaunched { job_id, start_time });
    }
}

/// After a slurmctld restart: batch jobs the previous slurmctld started whose launch may never
/// have left (a crash between writing the state file and sending the launch RPC). They were
/// recovered as running, and their node's registration does not report them; slurmctld's own
/// check (`_purge_missing_jobs`) ends only jobs that started `BatchStartTimeout` + `MessageTimeout`
/// before that registration, so a younger one would hold its nodes until its time limit.
///
/// From slurmctld's start until its first node registration, each such job whose first node has
/// not registered yet gets `time_last_active = 0`; that node's registration sets
/// it to the registration time for every job it reports. A watched job still at 0 once its first
/// node has registered is missing there, and is ended as slurmctld ends missing batch jobs,
/// unless it still waits for its prolog (`PrologFlags=Alloc`): a prolog that still runs leaves
/// slurmd nothing to report, so such a job is looked at until the wait ends.
/// Jobs are picked for watching until the first node registers, at most this long after the
/// plugin started.
const ARMING_LIMIT_S: i64 = 30;

fn now_s() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

#[derive(Debug, Default)]
pub struct RecoveryWatch {
    /// When this slurmctld (the plugin) started, Unix seconds: jobs started before it are the
    /// previous slurmctld's.
    started_s: i64,
    armed: bool,
    watched: Vec<u32>,
    /// Batch jobs picked with the watched ones that were also waiting for their prolog
    /// (`PrologFlags=Alloc`): judged by `model::lost_prolog` until settled.
    prolog_waits: Vec<u32>,
    /// Watched jobs seen waiting for their prolog (when picked, or when their first node
    /// registered without them): never ended as missing by this watch (a wait that ended means
    /// slurmd ran the prolog; one that does not is `model::lost_prolog`'s to judge).
    held_for_prolog: Vec<u32>,
    /// Jobs picked after their first node had registered: left to slurmctld's own check at the
    /// registration asked of that node (never judged by this watch).
    late: Vec<u32>,
    /// Nodes asked to register again.
    registration_asked: Vec<String>,
    /// Late-picked jobs too young, when picked, for slurmctld's missing-job check at a
    /// registration (`BatchStartTimeout` + min(10 s, `MessageTimeout`), strictly): their node is
    /// asked to register again only once they are older (a registration asked at once would
    /// leave a job whose launch never left running to its time limit; seen in CI on 26.05.3).
    late_asks: Vec<u32>,
    /// Registration requests not yet reported by [`RecoveryWatch::take_registrations`].
    registrations: Vec<RegistrationAsked>,
    /// Watched jobs found younger than Slurm's grace after their node registered without them.
    grace_waits: Vec<u32>,
    /// Watched jobs whose node was asked to register again because it reported them without
    /// their batch script.
    script_asks: Vec<u32>,
    /// Watched jobs seen waiting for their prolog, and when the wait was seen to end (Unix s).
    prolog_wait_ended: Vec<(u32, i64)>,
}

/// A node the watch asked to register again, for a job picked after the node had registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationAsked {
    pub node: String,
    /// The job it was asked for (the first such job of the node).
    pub job_id: u32,
    /// 0: queued to slurmctld's agent.
    pub rc: i32,
    /// Asked because the node reported the job without its batch script (else: without the job).
    pub for_script: bool,
}

/// A job the watch ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingJob {
    pub job_id: u32,
    pub node: String,
    /// job_complete()'s return code (0: ended or requeued).
    pub rc: i32,
    /// Its node ran other steps of it (its extern step) but not its batch script.
    pub script_gone: bool,
    /// Every node of it had completed its epilog (ended there; not requeued).
    pub no_node_left: bool,
}

impl RecoveryWatch {
    pub fn new(started_s: i64) -> RecoveryWatch {
        RecoveryWatch {
            started_s,
            armed: false,
            watched: Vec::new(),
            prolog_waits: Vec::new(),
            held_for_prolog: Vec::new(),
            late: Vec::new(),
            registration_asked: Vec::new(),
            late_asks: Vec::new(),
            registrations: Vec::new(),
            grace_waits: Vec::new(),
            script_asks: Vec::new(),
            prolog_wait_ended: Vec::new(),
        }
    }

    /// The registration requests made since the last call (for the log).
    pub fn take_registrations(&mut self) -> Vec<RegistrationAsked> {
        std::mem::take(&mut self.registrations)
    }

    /// Jobs still watched (their first node has not registered yet).
    pub fn watched(&self) -> usize {
        self.watched.len()
    }

    /// Nothing left to do: armed, and every watched job settled.
    pub fn done(&self) -> bool {
        self.armed && self.watched.is_empty() && self.prolog_waits.is_empty() && self.late_asks.is_empty()
    }

    /// Recovered jobs still waiting for their prolog that are judged.
    pub fn prolog_waits(&self) -> usize {
        self.prolog_waits.len()
    }

    /// How soon to look again: often while picking jobs (slurmctld reads its state after the
    /// plugin started, and serves the first node registration a moment later), then calmly.
    pub fn poll_interval(&self) -> std::time::Duration {
        std::time::Duration::from_millis(if self.armed { 500 } else { 50 })
    }
}

impl SlurmctldLock {
    /// One step of `watch` (see [`RecoveryWatch`]): picks the jobs to watch, then `decide` says
    /// for each watched job's facts what to do now (the rule: `model::lost_launch`). Returns the
    /// jobs it ended as missing. Needs the job write lock and the configuration read lock.
    /// `judged_at_registration(age_s, batch_start_timeout_s, msg_timeout_s)`: would slurmctld's
    /// missing-job check judge a batch job that old at a registration now (the rule:
    /// `model::lost_launch::registration_judges`)? A job picked after its node registered has
    /// its node asked again only then.
    pub fn watch_recovered_starts(
        &mut self,
        watch: &mut RecoveryWatch,
        mut decide: impl FnMut(&WatchedStartFacts) -> StartWatchAction,
        judged_at_registration: impl Fn(i64, i64, i64) -> bool,
    ) -> Result<Vec<MissingJob>, NotLocked> {
        self.require("recovered jobs", |l| l.job, LockLevel::Write)?;
        self.require("recovered jobs", |l| l.node, LockLevel::Read)?;
        self.require("recovered jobs", |l| l.conf, LockLevel::Read)?;
        let api = self.api();
        // SAFETY: slurm_conf's address (non-NULL after resolve); the SCHEDULER levels hold the
        // configuration read lock.
        let conf = unsafe { &*api.raw().slurm_conf };
        let (batch_start_timeout_s, msg_timeout_s) = (i64::from(conf.batch_start_timeout), i64::from(conf.msg_timeout));
        if !watch.armed {
            // Until the first node registers (the plugin starts after slurmctld has read its
            // state, while its first nodes may register), every such job is picked.
            let mut new = Vec::new();
            for job in self.jobs()? {
                let rec = job.raw();
                // SAFETY: the shim reads state fields under the job lock.
                let candidate = unsafe { sys::energy_job_is_running(rec) && !sys::energy_job_is_configuring(rec) };
                let picked = watch.watched.contains(&rec.job_id) || watch.late.contains(&rec.job_id);
                if candidate && rec.batch_flag != 0 && rec.het_job_id == 0 && rec.start_time < watch.started_s && !picked {
                    new.push(rec.job_id);
                }
            }
            for id in new {
                // SAFETY: lookup and a plain field write under the job write lock; slurmctld
                // reads time_last_active only to find defunct jobs (and to time out inactive
                // allocations, which these batch jobs are not).
                if let Some(rec) = unsafe { call!(api, find_job_record(id)).as_mut() } {
                    rec.time_last_active = 0;
                    // SAFETY: reads the job's bitmap and the node table under the job and node locks.
                    if unsafe { sys::energy_job_first_node_registered(rec) } {
                        // Its node registered before this look (26.05 serves the registrations
                        // that queued while it loaded its state before it starts this plugin):
                        // whether that registration reported the job cannot be told now. Its
                        // node is asked to register again; that registration reports the job
                        // if it runs there (time_last_active set again), and slurmctld's own
                        // check of missing batch jobs ends it if not and it is past Slurm's
                        // grace. Not judged here.
                        watch.late.push(id);
                        // SAFETY: batch host string owned by the record.
                        let node = unsafe { opt_str(rec.batch_host) }.unwrap_or("?").to_string();
                        if !judged_at_registration(now_s() - rec.start_time, batch_start_timeout_s, msg_timeout_s) {
                            // Too young for slurmctld's check at a registration now: asked
                            // once it is past it (below, at a later look).
                            watch.late_asks.push(id);
                        } else if !watch.registration_asked.contains(&node) {
                            // SAFETY: reads the job's bitmap and the node table under the job
                            // and node locks; the agent takes its own copy of the request.
                            let rc = unsafe { sys::energy_request_first_node_registration(rec) };
                            watch.registrations.push(RegistrationAsked { node: node.clone(), job_id: id, rc, for_script: false });
                            watch.registration_asked.push(node);
                        }
                        // SAFETY: reads the job's state reason and prolog bitmap under the job lock.
                        if unsafe { sys::energy_job_waits_for_prolog(rec) } && !watch.prolog_waits.contains(&id) {
                            watch.prolog_waits.push(id);
                        }
                        continue;
                    }
                    // SAFETY: the job's batch step record under the job write lock.
                    unsafe { sys::energy_batch_step_forget_report(rec) };
                    watch.watched.push(id);
                    // SAFETY: reads the job's state reason and prolog bitmap under the job lock.
                    if unsafe { sys::energy_job_waits_for_prolog(rec) } && !watch.prolog_waits.contains(&id) {
                        watch.prolog_waits.push(id);
                        // Seen waiting: if the wait has ended by the time its node registered
                        // (the completion came between two looks), slurmd ran its prolog and
                        // the job is not missing.
                        watch.held_for_prolog.push(id);
                    }
                }
            }
            // SAFETY: reads the node table under the job lock (nodes' version strings only).
            watch.armed = unsafe { sys::energy_any_node_registered() } || now_s() - watch.started_s > ARMING_LIMIT_S;
        }
        // Late-picked jobs that were too young for slurmctld's check: their node is asked to
        // register again once they are past it (a second ask of the same node is a new
        // registration, judged at that age).
        let mut asked_now: Vec<String> = Vec::new();
        for id in std::mem::take(&mut watch.late_asks) {
            // SAFETY: lookup under the job write lock.
            let Some(rec) = (unsafe { call!(api, find_job_record(id)).as_mut() }) else { continue };
            // SAFETY: the shim reads state fields under the job lock.
            if !unsafe { sys::energy_job_is_running(rec) } {
                continue;
            }
            if !judged_at_registration(now_s() - rec.start_time, batch_start_timeout_s, msg_timeout_s) {
                watch.late_asks.push(id);
                continue;
            }
            // SAFETY: batch host string owned by the record.
            let node = unsafe { opt_str(rec.batch_host) }.unwrap_or("?").to_string();
            if !asked_now.contains(&node) {
                // SAFETY: reads the job's bitmap and the node table under the job and node
                // locks; the agent takes its own copy of the request.
                let rc = unsafe { sys::energy_request_first_node_registration(rec) };
                watch.registrations.push(RegistrationAsked { node: node.clone(), job_id: id, rc, for_script: false });
                asked_now.push(node);
            }
        }
        let mut ended = Vec::new();
        let mut still = Vec::new();
        for id in std::mem::take(&mut watch.watched) {
            // SAFETY: lookup under the job write lock.
            let job = unsafe { call!(api, find_job_record(id)) };
            // SAFETY: NULL or a record under the job write lock.
            let Some(rec) = (unsafe { job.as_mut() }) else { continue };
            // SAFETY: the shim reads the record's state, bitmaps, prolog state and the node
            // table under the job lock.
            let waits_for_prolog = unsafe { sys::energy_job_waits_for_prolog(rec) };
            if !waits_for_prolog && watch.held_for_prolog.contains(&id) && !watch.prolog_wait_ended.iter().any(|&(j, _)| j == id) {
                watch.prolog_wait_ended.push((id, now_s()));
            }
            // SAFETY: as above.
            let facts = unsafe {
                let first_node_registered = sys::energy_job_first_node_registered(rec);
                WatchedStartFacts {
                    job_id: id,
                    running: sys::energy_job_is_running(rec),
                    no_node_left: sys::energy_job_no_node_left(rec),
                    first_node_registered,
                    // Zeroed when picked; the first node's registration sets it for every job
                    // it reports.
                    reported: first_node_registered && rec.time_last_active != 0,
                    waits_for_prolog,
                    seen_waiting_for_prolog: watch.held_for_prolog.contains(&id),
                    age_s: now_s() - rec.start_time,
                    waited_for_grace: watch.grace_waits.contains(&id),
                    batch_step_reported: match sys::energy_batch_step_reported(rec) {
                        -1 => None,
                        r => Some(r == 1),
                    },
                    asked_for_script: watch.script_asks.contains(&id),
                    since_prolog_wait_ended_s: watch.prolog_wait_ended.iter().find(|&&(j, _)| j == id).map(|&(_, at)| now_s() - at),
                    batch_start_timeout_s,
                    msg_timeout_s,
                }
            };
            match decide(&facts) {
                StartWatchAction::Stop => {}
                StartWatchAction::KeepWatching => still.push(id),
                StartWatchAction::PrologMayRun => {
                    // Its prolog may still run: slurmd has no step of the job to report before
                    // the prolog ends. Looked at again until the wait ends; judged by
                    // `judge_recovered_prolog_waits` from now on, also where the wait was not
                    // yet visible when the job was picked (26.05 restores the prolog bitmap
                    // later).
                    if !watch.held_for_prolog.contains(&id) {
                        watch.held_for_prolog.push(id);
                    }
                    if !watch.prolog_waits.contains(&id) {
                        watch.prolog_waits.push(id);
                    }
                    still.push(id);
                }
                StartWatchAction::WaitForGrace => {
                    if !watch.grace_waits.contains(&id) {
                        watch.grace_waits.push(id);
                    }
                    still.push(id);
                }
                StartWatchAction::AskNodeAgain => {
                    // Its node registered without it while it was young; the registration asked
                    // now reports it if its launch arrived since (time_last_active set again),
                    // and slurmctld's own missing-job check ends it if not.
                    watch.grace_waits.retain(|&j| j != id);
                    // SAFETY: batch host string owned by the record.
                    let node = unsafe { opt_str(rec.batch_host) }.unwrap_or("?").to_string();
                    // SAFETY: reads the job's bitmap and the node table under the job and node
                    // locks; the agent takes its own copy of the request.
                    let rc = unsafe { sys::energy_request_first_node_registration(rec) };
                    watch.registrations.push(RegistrationAsked { node, job_id: id, rc, for_script: false });
                }
                StartWatchAction::AskNodeForScript => {
                    // Forgotten, so that what the asked registration reports can be told:
                    // slurmctld sets both again for a job and a step the node reports. A
                    // registration that does not report the job at all runs slurmctld's own
                    // missing-job check on it.
                    rec.time_last_active = 0;
                    // SAFETY: the job's batch step record under the job write lock.
                    unsafe { sys::energy_batch_step_forget_report(rec) };
                    // SAFETY: batch host string owned by the record.
                    let node = unsafe { opt_str(rec.batch_host) }.unwrap_or("?").to_string();
                    // SAFETY: as for AskNodeAgain.
                    let rc = unsafe { sys::energy_request_first_node_registration(rec) };
                    watch.registrations.push(RegistrationAsked { node, job_id: id, rc, for_script: true });
                    watch.script_asks.push(id);
                    still.push(id);
                }
                StartWatchAction::MarkActive => {
                    // Left to Slurm's own check of missing batch jobs, from the time slurmctld
                    // would have set at a registration that reported it.
                    rec.time_last_active = now_s();
                    watch.held_for_prolog.retain(|&j| j != id);
                }
                StartWatchAction::EndAsMissing => {
                    // SAFETY: batch host string owned by the record.
                    let node = unsafe { opt_str(rec.batch_host) }.unwrap_or("?").to_string();
                    // SAFETY: a running batch job under the job write lock, ended as slurmctld
                    // ends a batch job missing from its node.
                    let rc = unsafe { sys::energy_job_complete_missing(rec, true) };
                    ended.push(MissingJob { job_id: id, node, rc, script_gone: false, no_node_left: false });
                }
                StartWatchAction::EndScriptGone => {
                    // SAFETY: batch host string owned by the record.
                    let node = unsafe { opt_str(rec.batch_host) }.unwrap_or("?").to_string();
                    // SAFETY: as for EndAsMissing; not requeued (its script most likely ran to its
                    // end: stock keeps such a job to its time limit and ends it unrequeued).
                    let rc = unsafe { sys::energy_job_complete_missing(rec, false) };
                    ended.push(MissingJob { job_id: id, node, rc, script_gone: true, no_node_left: false });
                }
                StartWatchAction::EndNoNodeLeft => {
                    // SAFETY: batch host string owned by the record.
                    let node = unsafe { opt_str(rec.batch_host) }.unwrap_or("?").to_string();
                    // SAFETY: a running batch job under the job write lock; not requeued (it ran
                    // to its end on its nodes).
                    let rc = unsafe { sys::energy_job_complete_missing(rec, false) };
                    ended.push(MissingJob { job_id: id, node, rc, script_gone: false, no_node_left: true });
                }
            }
        }
        watch.watched = still;
        Ok(ended)
    }
}

/// What [`SlurmctldLock::watch_recovered_starts`] read of one watched job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchedStartFacts {
    pub job_id: u32,
    pub running: bool,
    /// Running, and none of its nodes is left on it (node count 0, empty node bitmap).
    pub no_node_left: bool,
    /// Its first node (the batch host) registered with this slurmctld.
    pub first_node_registered: bool,
    /// That registration reported the job.
    pub reported: bool,
    pub waits_for_prolog: bool,
    /// Seen waiting for its prolog at an earlier look (or when picked).
    pub seen_waiting_for_prolog: bool,
    /// Seconds since its start.
    pub age_s: i64,
    /// Seen younger than Slurm's grace at an earlier look, its node registered.
    pub waited_for_grace: bool,
    /// Whether the registrations since it was last forgotten reported its batch step (None: the
    /// job has no batch step record).
    pub batch_step_reported: Option<bool>,
    /// Its node was asked to register again because it reported it without its batch script.
    pub asked_for_script: bool,
    /// Seconds since its prolog wait was seen to end (None: not seen waiting, or still waiting).
    pub since_prolog_wait_ended_s: Option<i64>,
    /// slurm.conf `BatchStartTimeout`.
    pub batch_start_timeout_s: i64,
    /// slurm.conf `MessageTimeout`.
    pub msg_timeout_s: i64,
}

/// What to do with a watched job now (see [`SlurmctldLock::watch_recovered_starts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartWatchAction {
    /// Stop watching it (ended, or reported by its node).
    Stop,
    /// Look again later (its first node has not registered).
    KeepWatching,
    /// Its prolog may still run: look again, and judge the wait as a recovered prolog wait.
    PrologMayRun,
    /// Leave it to Slurm's own check of missing batch jobs, as if its node had reported it now.
    MarkActive,
    /// Look again later: it may still be launching.
    WaitForGrace,
    /// Ask its node to register again and stop watching (slurmctld's check judges it then).
    AskNodeAgain,
    /// End it as slurmctld ends a batch job missing from its node.
    EndAsMissing,
    /// Its node reported it without its batch script: forget what was reported (the job's and
    /// its batch step's `time_last_active`), ask the node to register again, and look again.
    AskNodeForScript,
    /// The registration asked for reported it without its batch script again: end it as
    /// slurmctld ends a batch job missing from its node, not requeued.
    EndScriptGone,
    /// Ended on all its nodes (their epilogs completed): end it, not requeued, releasing what
    /// it holds.
    EndNoNodeLeft,
}

/// A recovered job whose prolog completion the previous slurmctld answered and never wrote:
/// finished the way slurmctld finishes it when the completion arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostProlog {
    pub job_id: u32,
    /// What was done: the prolog completed, or the job ended as missing from `node`.
    pub done: PrologWaitEnd,
    /// prolog_complete()'s or job_complete()'s return code (0: done).
    pub rc: i32,
}

/// How a recovered prolog wait was ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrologWaitEnd {
    /// Completed as slurmd's completion RPC would have.
    PrologCompleted,
    /// Ended as slurmctld ends a batch job missing from its node (`node`).
    EndedAsMissing { node: String },
}

/// What to do with a recovered prolog wait now (see [`SlurmctldLock::judge_recovered_prolog_waits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrologWaitAction {
    /// Stop watching the job.
    Stop,
    /// Look again later.
    Wait,
    /// Complete its prolog.
    CompleteProlog,
    /// End it as missing from its batch node.
    EndAsMissing,
}

impl SlurmctldLock {
    /// One look at the recovered jobs still waiting for their prolog (see [`RecoveryWatch`] and
    /// `model::lost_prolog`): `decide` says, for each job's facts, what to do now. Returns the
    /// jobs whose wait it ended. Needs the job and node write locks and the configuration read
    /// lock.
    pub fn judge_recovered_prolog_waits(
        &mut self,
        watch: &mut RecoveryWatch,
        mut decide: impl FnMut(&RecoveredPrologFacts) -> PrologWaitAction,
    ) -> Result<Vec<LostProlog>, NotLocked> {
        self.require("recovered prolog waits", |l| l.job, LockLevel::Write)?;
        self.require("recovered prolog waits", |l| l.node, LockLevel::Read)?;
        self.require("recovered prolog waits", |l| l.conf, LockLevel::Read)?;
        if !watch.armed {
            return Ok(Vec::new());
        }
        let api = self.api();
        // SAFETY: slurm_conf's address (non-NULL after resolve); the configuration lock is held.
        let conf = unsafe { &*api.raw().slurm_conf };
        let msg_timeout_s = i64::from(conf.msg_timeout);
        let batch_start_timeout_s = i64::from(conf.batch_start_timeout);
        #[cfg(slurm_ge_25_11)]
        let prolog_timeout = conf.prolog_timeout;
        #[cfg(not(slurm_ge_25_11))]
        let prolog_timeout = conf.prolog_epilog_timeout;
        // Unset: 0, or NO_VAL16 (0xfffe) / INFINITE16 (0xffff): no timeout of its own.
        let prolog_timeout_s = (prolog_timeout != 0 && prolog_timeout < 0xfffe).then(|| i64::from(prolog_timeout));
        let since_restart_s = now_s() - watch.started_s;
        let mut finished = Vec::new();
        let mut still = Vec::new();
        for id in std::mem::take(&mut watch.prolog_waits) {
            // SAFETY: lookup under the job write lock.
            let job = unsafe { call!(api, find_job_record(id)) };
            // SAFETY: NULL or a record under the job write lock.
            let Some(rec) = (unsafe { job.as_mut() }) else { continue };
            // SAFETY: the shim reads the record's state, bitmaps and the node table under the
            // job and node locks.
            let facts = unsafe {
                RecoveredPrologFacts {
                    running: sys::energy_job_is_running(rec),
                    configuring: sys::energy_job_is_configuring(rec),
                    batch: rec.batch_flag != 0 && rec.het_job_id == 0,
                    waits_for_prolog: sys::energy_job_waits_for_prolog(rec),
                    prolog_nodes_registered: sys::energy_job_prolog_nodes_registered(rec),
                    // Zeroed when picked, before its first node registered; that node's
                    // registration sets it when it reports the job.
                    reported_since_restart: sys::energy_job_first_node_registered(rec) && rec.time_last_active != 0,
                    since_restart_s,
                    msg_timeout_s,
                    batch_start_timeout_s,
                    prolog_timeout_s,
                }
            };
            match decide(&facts) {
                PrologWaitAction::Stop => {}
                PrologWaitAction::Wait => still.push(id),
                PrologWaitAction::CompleteProlog => {
                    // SAFETY: a running job under the job write lock; prolog_complete() is what
                    // slurmctld runs for REQUEST_COMPLETE_PROLOG under that lock.
                    let rc = unsafe { sys::energy_job_finish_lost_prolog(rec) };
                    finished.push(LostProlog { job_id: id, done: PrologWaitEnd::PrologCompleted, rc });
                }
                PrologWaitAction::EndAsMissing => {
                    // SAFETY: batch host string owned by the record.
                    let node = unsafe { opt_str(rec.batch_host) }.unwrap_or("?").to_string();
                    // SAFETY: a running batch job under the job write lock, ended as slurmctld
                    // ends a batch job missing from its node.
                    let rc = unsafe { sys::energy_job_complete_missing(rec, true) };
                    watch.held_for_prolog.retain(|&j| j != id);
                    finished.push(LostProlog { job_id: id, done: PrologWaitEnd::EndedAsMissing { node }, rc });
                }
            }
        }
        watch.prolog_waits = still;
        Ok(finished)
    }
}

/// What [`SlurmctldLock::judge_recovered_prolog_waits`] read of one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveredPrologFacts {
    pub running: bool,
    pub configuring: bool,
    pub batch: bool,
    pub waits_for_prolog: bool,
    pub prolog_nodes_registered: bool,
    pub reported_since_restart: bool,
    pub since_restart_s: i64,
    pub msg_timeout_s: i64,
    /// slurm.conf `BatchStartTimeout`.
    pub batch_start_timeout_s: i64,
    /// The prolog's own timeout (`PrologEpilogTimeout`; `PrologTimeout` from 25.11), if set.
    pub prolog_timeout_s: Option<i64>,
}
