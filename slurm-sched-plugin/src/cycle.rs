//! One scheduling cycle: snapshot under slurmctld's locks -> plan without them -> start the
//! chosen jobs under the locks again, yielding them when starting takes long.
//!
//! Locks are the ones sched/backfill takes (conf read, job write, node write, partition read,
//! federation read). Planning runs unlocked so RPCs keep flowing; every start looks its job up
//! again by id and `select_nodes` re-checks resources, so a snapshot that aged during planning
//! can only make a start fail, never start a job twice.

use std::time::{Duration, Instant};

use model::decision::{CycleEnd, Decision};
use model::planner::plan_snapshot_filtered;
use model::predictor::Predictor;
use slurm_bindings::conf::ConfView;
use slurm_bindings::locks::{LockLevels, SlurmctldLock};
use slurm_bindings::slurm_log;
use slurm_bindings::routes::Stamps;
use slurm_bindings::start::StartError;
use std::collections::HashMap;

use crate::LOG;
use crate::config::Config;
use crate::snapshot;

/// What one cycle did, for the debug log and for comparison with other schedulers.
#[derive(Debug, Clone, PartialEq)]
pub struct CycleStats {
    pub duration: Duration,
    /// Time spent holding slurmctld's locks (snapshot + starts).
    pub locked: Duration,
    pub snapshot: Duration,
    pub plan: Duration,
    pub apply: Duration,
    pub nodes: usize,
    pub running: usize,
    pub pending: usize,
    pub jobs_tested: usize,
    pub jobs_started: usize,
    pub start_failures: usize,
    pub reservations: usize,
    pub deferrals: usize,
    pub yields: usize,
    pub end: CycleEnd,
    /// Plans made this cycle (more than one when Slurm refused planned starts).
    pub passes: usize,
    /// Pending jobs Slurm says cannot start now (held, dependencies, limits...).
    pub not_runnable: usize,
    /// Writing slurmctld's job state file before the launches (`save_before_launch`), with no
    /// lock held.
    pub state_save: Duration,
}

impl std::fmt::Display for CycleStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(
            f,
            "{:.3} ms (locked {:.3}, snapshot {:.3}, plan {:.3}, start {:.3}, state save {:.3}); nodes {} running {} pending {} (not runnable {}); tested {} started {} failed {} reserved {} deferred {} yields {} passes {} end {:?}",
            ms(self.duration),
            ms(self.locked),
            ms(self.snapshot),
            ms(self.plan),
            ms(self.apply),
            ms(self.state_save),
            self.nodes,
            self.running,
            self.pending,
            self.not_runnable,
            self.jobs_tested,
            self.jobs_started,
            self.start_failures,
            self.reservations,
            self.deferrals,
            self.yields,
            self.passes,
            self.end,
        )
    }
}

/// What the plugin learns across cycles: placements `select_nodes` refused, so that the job is
/// planned elsewhere (and no node is held idle for it) for the next [`REFUSAL_CYCLES`] cycles.
#[derive(Debug, Default)]
pub struct Learnt {
    cycle: u64,
    /// Job -> node name -> last cycle the refusal counts.
    refused: HashMap<u32, HashMap<String, u64>>,
    /// The nodes' last power readings (acct_gather_energy: node -> W, poll time): they correct
    /// the power directives' prediction, node by node (model::power_directive::decide_by_node).
    pub node_power: HashMap<String, (f64, i64)>,
    /// The running jobs' own GPUs' power in their last GPU-use reports: they correct the power
    /// directives' prediction job by job (model::power_directive::corrections).
    pub job_power: Vec<model::gpu_use::MeasuredPower>,
}

/// How many cycles a refused (job, node) pair stays out of the job's plans.
pub const REFUSAL_CYCLES: u64 = 10;
/// Plans per cycle: the first, and re-plans of the rest after refused starts.
const MAX_PASSES: usize = 3;

impl Learnt {
    fn next_cycle(&mut self) {
        self.cycle += 1;
        let now = self.cycle;
        self.refused.retain(|_, nodes| {
            nodes.retain(|_, until| *until >= now);
            !nodes.is_empty()
        });
    }

    fn note_refusal(&mut self, job: u32, nodes: &[&str]) {
        let until = self.cycle + REFUSAL_CYCLES;
        let entry = self.refused.entry(job).or_default();
        for n in nodes {
            entry.insert((*n).to_string(), until);
        }
    }

    fn refused(&self) -> snapshot::Refused {
        self.refused.iter().map(|(job, nodes)| (*job, nodes.keys().cloned().collect())).collect()
    }

    /// (job, node) pairs remembered now.
    pub fn refusals(&self) -> usize {
        self.refused.values().map(HashMap::len).sum()
    }
}

/// One cycle: plan and apply; when Slurm refuses planned starts, the rest is planned again
/// without those placements (at most [`MAX_PASSES`] plans).
pub fn run(cfg: &Config, predictor: &Predictor, learnt: &mut Learnt) -> Result<CycleStats, String> {
    learnt.next_cycle();
    let mut total: Option<CycleStats> = None;
    for _ in 0..MAX_PASSES {
        let (stats, refused) = run_pass(cfg, predictor, learnt)?;
        let stop = refused == 0 || stats.end == CycleEnd::Abandoned;
        total = Some(match total {
            None => stats,
            Some(t) => t.merged(stats),
        });
        if stop {
            break;
        }
    }
    let total = total.ok_or_else(|| "no pass ran".to_string())?;
    if total.jobs_started > 0 {
        // As slurmctld's main scheduler does: without it the starts reach the state files only
        // with the next event that saves, and a crash before that restarts those jobs.
        slurm_bindings::routes::schedule_state_save();
    }
    // What `sdiag` shows under "Backfilling stats", as sched/backfill counts it.
    if let Ok(lock) = SlurmctldLock::acquire(LockLevels::SCHEDULER) {
        slurm_bindings::routes::record_cycle(&lock, total.duration, total.jobs_tested, total.jobs_tested.saturating_sub(total.not_runnable), total.pending + total.not_runnable, total.jobs_started);
    }
    Ok(total)
}

impl CycleStats {
    fn merged(self, o: CycleStats) -> CycleStats {
        CycleStats {
            duration: self.duration + o.duration,
            locked: self.locked + o.locked,
            snapshot: self.snapshot + o.snapshot,
            plan: self.plan + o.plan,
            apply: self.apply + o.apply,
            nodes: o.nodes,
            running: o.running,
            pending: o.pending,
            jobs_tested: self.jobs_tested + o.jobs_tested,
            jobs_started: self.jobs_started + o.jobs_started,
            start_failures: self.start_failures + o.start_failures,
            reservations: o.reservations,
            deferrals: o.deferrals,
            yields: self.yields + o.yields,
            end: o.end,
            passes: self.passes + o.passes,
            not_runnable: o.not_runnable,
            state_save: self.state_save + o.state_save,
        }
    }
}

/// One plan and its application. Returns the statistics and how many starts Slurm refused.
fn run_pass(cfg: &Config, predictor: &Predictor, learnt: &mut Learnt) -> Result<(CycleStats, usize), String> {
    let started = Instant::now();
    let lock = SlurmctldLock::acquire(LockLevels::SCHEDULER).map_err(|e| e.to_string())?;
    let conf = ConfView::read(&lock).map_err(|e| e.to_string())?;
    LOG.set_debug(cfg.sched.debug || conf.debug_backfill());
    // Checked again each cycle: `scontrol reconfigure` may have changed them.
    if let Some(problem) = slurm_bindings::conf::sched_params_problem(conf.sched_params.as_deref()) {
        return Err(format!("no job started: {problem}"));
    }
    let now_s = unix_now_s();
    let built = snapshot::build(&lock, &conf, cfg, now_s, &learnt.refused()).map_err(|e| e.to_string())?;
    let seen = lock.stamps();
    // A panic here unwinds through the lock guard, which must release slurmctld's locks.
    #[cfg(feature = "fault-injection")]
    fault::maybe_panic(fault::Site::Locked);
    drop(lock);
    let snapshot_time = started.elapsed();

    let plan_start = Instant::now();
    let outcome = plan(&built, cfg, predictor);
    // Running jobs' clock ceilings under the cap (answered to their nodes' GPU-use reports).
    let extensions = crate::power_directives::update(&built.snapshot, cfg.planner.power_cap_w, predictor, &built.limit_cap_end_s, &built.node_names, &learnt.node_power, &learnt.job_power, now_s);
    let plan_time = plan_start.elapsed();

    let mut stats = CycleStats {
        duration: Duration::ZERO,
        locked: snapshot_time,
        snapshot: snapshot_time,
        plan: plan_time,
        apply: Duration::ZERO,
        nodes: built.snapshot.nodes.len(),
        running: built.snapshot.running.len(),
        pending: built.snapshot.pending.len(),
        jobs_tested: outcome.stats.jobs_tested,
        jobs_started: 0,
        start_failures: 0,
        reservations: outcome.stats.reservations,
        deferrals: outcome.stats.deferrals,
        yields: 0,
        end: outcome.end,
        passes: 1,
        not_runnable: built.not_runnable,
        state_save: Duration::ZERO,
    };
    let mut refused = 0;
    for d in &outcome.decisions {
        match d {
            Decision::Reserve(r) => slurm_log!(LOG, debug, "JobId={} reserved from {:.0} s on {} node(s)", r.job, r.start_s - now_s, r.nodes.len()),
            Decision::Defer(x) => slurm_log!(LOG, debug, "JobId={} deferred {:.0} s for a cleaner grid ({:.0} -> {:.0} g/kWh)", x.job, x.until_s - now_s, x.carbon_now_g_per_kwh, x.carbon_forecast_g_per_kwh),
            // GPU clocks are applied on the nodes (GPU/SPANK plugins), not by slurmctld.
            Decision::Reclock(r) => slurm_log!(LOG, debug, "JobId={} reclock to {} MHz not applied (no clock control from slurmctld)", r.job, r.clock_mhz),
            Decision::Start(_) | Decision::SlurmStart(_) => {}
            Decision::SlurmWillRun(w) => slurm_log!(LOG, debug, "JobId={} placed by Slurm cannot start now: asking Slurm's will-run test", w.job),
        }
    }

    // `--energy-share=deny` shard jobs that stay pending while shard jobs run: they wait for a
    // node without shard jobs (the node filter kept them off the others); say so in their
    // reason and, once per job, in the log.
    let planned_starts: std::collections::HashSet<u32> = outcome.starts().map(|s| s.job.0).collect();
    let waiting_deny = built.shards.waiting_deny(&built.snapshot.pending, &planned_starts);

    let behind_higher_priority = waiting_behind(&built, &outcome);

    let apply_start = Instant::now();
    let deferred: Vec<(u32, String)> = outcome
        .decisions
        .iter()
        .filter_map(|d| if let Decision::Defer(x) = d { Some((x.job.0, deferral_reason(x))) } else { None })
        .collect();
    if !extensions.is_empty() {
        // Running jobs slowed by a new or lower power-cap ceiling: their limits grow by it.
        let mut lock = SlurmctldLock::acquire(LockLevels::SCHEDULER).map_err(|e| e.to_string())?;
        let held_since = Instant::now();
        for x in &extensions {
            match lock.extend_time_limit(x.job_id, x.limit_min) {
                Ok(Some((old, new))) => slurm_log!(LOG, info, "JobId={}: time limit {old} -> {new} min (GPU clock ceiling under the power cap, worst-case slowdown {:.3} of its remaining time, predicted {:.3})", x.job_id, x.bound, x.slowdown),
                Ok(None) => {}
                Err(e) => slurm_log!(LOG, error, "JobId={}: time limit not extended: {e}", x.job_id),
            }
        }
        stats.locked += held_since.elapsed();
    }
    if !waiting_deny.is_empty() || !deferred.is_empty() || !built.hetjobs.is_empty() {
        let mut lock = SlurmctldLock::acquire(LockLevels::SCHEDULER).map_err(|e| e.to_string())?;
        let held_since = Instant::now();
        let hetjobs = built.hetjobs.iter().map(|&id| (id, HETJOB_REASON.to_string()));
        let reasons = waiting_deny.iter().map(|&id| (id, DENY_WAIT_REASON.to_string())).chain(deferred).chain(hetjobs);
        for (id, reason) in reasons {
            match lock.set_pending_reason(id, &reason) {
                Ok(true) => slurm_log!(LOG, info, "JobId={id} waits: {reason}"),
                Ok(false) => {}
                Err(e) => slurm_log!(LOG, debug, "JobId={id}: reason not set: {e}"),
            }
        }
        stats.locked += held_since.elapsed();
    }
    // Also with nothing to start or reserve while jobs wait: their estimates are cleared.
    // And while nodes are still marked planned from a cycle before: they are unmarked.
    let any_waiting = !built.snapshot.pending.is_empty() || built.not_runnable > 0 || NODES_PLANNED.load(std::sync::atomic::Ordering::Relaxed);
    if any_waiting || outcome.starts().next().is_some() || outcome.slurm_starts().next().is_some() || outcome.reservations().next().is_some() || outcome.slurm_will_runs().next().is_some() {
        // sched/backfill's yield settings when SchedulerParameters gives them, else ours.
        let yp = slurm_bindings::conf::YieldParams::parse(conf.sched_params.as_deref());
        let max_locked = yp.interval_us.map_or(Duration::from_millis(cfg.sched.max_lock_ms), Duration::from_micros);
        let pause = yp.sleep_us.map_or(Duration::from_millis(cfg.sched.yield_ms), Duration::from_micros);
        let mut lock = SlurmctldLock::acquire(LockLevels::SCHEDULER).map_err(|e| e.to_string())?;
        lock.set_save_before_launch(cfg.sched.save_before_launch);
        let mut held_since = Instant::now();
        // The nodes Slurm's will-run test expects waiting jobs on (table indices).
        let mut will_run_nodes: Vec<usize> = Vec::new();
        // Partitions, reservations or the configuration changed while we planned: the plan's
        // routes and node indices may be wrong. Start nothing; the next cycle plans afresh.
        let changed = |a: Stamps, b: Stamps| a.part != b.part || a.resv != b.resv || a.conf != b.conf;
        if changed(seen, lock.stamps()) {
            slurm_log!(LOG, verbose, "partitions, reservations or configuration changed while planning: plan abandoned");
            stats.end = CycleEnd::Abandoned;
        } else {
            // As sched/backfill: every estimate is cleared, and this plan's are set below.
            will_run_nodes.clear();
            if let Err(e) = lock.clear_expected_starts() {
                slurm_log!(LOG, debug, "expected starts not cleared: {e}");
            }
            // Every job this plan evaluated: LastSchedEval, as sched/backfill stamps it.
            if let Err(e) = lock.note_evaluated(built.snapshot.pending.iter().map(|p| p.id.0), unix_now_s() as i64) {
                slurm_log!(LOG, debug, "LastSchedEval not set: {e}");
            }
            for d in &outcome.decisions {
                if slurm_bindings::routes::shutting_down() {
                    stats.end = CycleEnd::Abandoned;
                    break;
                }
                let many_rpcs = yp.max_rpc_cnt > 0 && slurm_bindings::routes::server_thread_count() >= yp.max_rpc_cnt as i32;
                if many_rpcs || held_since.elapsed() >= max_locked {
                    stats.locked += held_since.elapsed();
                    let before = lock.stamps();
                    let launched = lock.yield_until_quiet(pause, yp.max_rpc_cnt, max_locked.max(Duration::from_secs(5)), slurm_bindings::routes::shutting_down);
                    note_launches(&mut stats, launched);
                    stats.yields += 1;
                    held_since = Instant::now();
                    if changed(before, lock.stamps()) {
                        slurm_log!(LOG, verbose, "partitions, reservations or configuration changed during a yield: rest of the plan abandoned");
                        stats.end = CycleEnd::Abandoned;
                        break;
                    }
                    if slurm_bindings::routes::shutting_down() {
                        slurm_log!(LOG, info, "slurmctld is shutting down: rest of the plan abandoned");
                        stats.end = CycleEnd::Abandoned;
                        break;
                    }
                }
                match d {
                    Decision::Start(start) => {
                        let (table_nodes, names) = map_nodes(&built, start.allocations.iter().map(|a| a.node));
                        if !same_nodes(&lock, &table_nodes, &names) {
                            slurm_log!(LOG, verbose, "JobId={}: nodes {} are no longer where the plan saw them: not started", start.job, names.join(","));
                            continue;
                        }
                        let record = start.record(&names);
                        let route = start.route.and_then(|r| built.routes.get(r as usize));
                        let merge = |site: Option<&str>| model::decision::merge_record(site, &record);
                        // The clock and the ladder step's power limit travel with the job to
                        // its nodes (see DECISION_CLOCK_ENV); a user's values are replaced.
                        let clock = start.clock_mhz.to_string();
                        let limit = start.power_limit_mw().map(|mw| mw.to_string());
                        let env = [(model::decision::DECISION_CLOCK_ENV, Some(clock.as_str())), (model::decision::DECISION_POWER_LIMIT_ENV, limit.as_deref())];
                        let limit_min = time_min_room(&built, &outcome, start.job.0, start.allocations.iter().map(|a| a.node));
                        match lock.start_job_within(start.job.0, &table_nodes, route, Some(&merge), &env, limit_min) {
                            Ok(s) => {
                                stats.jobs_started += 1;
                                slurm_log!(LOG, info, "started JobId={} on {}: {}", s.job_id, s.nodes, record);
                                extend_limit(&mut lock, s.job_id, start);
                            }
                            Err(e) => {
                                stats.start_failures += 1;
                                // A limit reached after selection (QOS/association TRES with the
                                // jobs this plan started) is about the job, not the nodes: it
                                // waits, as Slurm's own schedulers leave it.
                                let node_refusal = matches!(e, StartError::Slurm { code, .. } if slurm_bindings::routes::refusal_is_about_nodes(code));
                                if node_refusal {
                                    refused += 1;
                                    learnt.note_refusal(start.job.0, &names);
                                    slurm_log!(LOG, verbose, "JobId={} not started on {}: {e}; planned elsewhere for the next {} cycles", start.job, names.join(","), REFUSAL_CYCLES);
                                } else {
                                    slurm_log!(LOG, debug, "JobId={} not started: {e}", start.job);
                                }
                            }
                        }
                    }
                    Decision::SlurmStart(x) => {
                        let (table_nodes, names) = map_nodes(&built, x.nodes.iter().copied());
                        if !same_nodes(&lock, &table_nodes, &names) {
                            slurm_log!(LOG, verbose, "JobId={}: nodes are no longer where the plan saw them: not started", x.job);
                            continue;
                        }
                        let route = x.route.and_then(|r| built.routes.get(r as usize));
                        let record = format!("energy:placed_by=slurm candidates={}", names.len());
                        let merge = |site: Option<&str>| model::decision::merge_record(site, &record);
                        // No clock chosen here: the nodes follow the job's hints.
                        let env = [(model::decision::DECISION_CLOCK_ENV, None), (model::decision::DECISION_POWER_LIMIT_ENV, None)];
                        let limit_min = time_min_room(&built, &outcome, x.job.0, x.nodes.iter().copied());
                        match lock.start_job_within(x.job.0, &table_nodes, route, Some(&merge), &env, limit_min) {
                            Ok(s) => {
                                stats.jobs_started += 1;
                                slurm_log!(LOG, info, "started JobId={} on {} (nodes chosen by Slurm among {} the plan leaves free)", s.job_id, s.nodes, names.len());
                            }
                            Err(e) => {
                                stats.start_failures += 1;
                                slurm_log!(LOG, debug, "JobId={} not started by Slurm's selection: {e}", x.job);
                                if matches!(e, StartError::Slurm { .. }) {
                                    // Not on the nodes free now: when, on any node of its route?
                                    let route_nodes = route_nodes(&built, x.job, x.route);
                                    will_run_nodes.extend(will_run(&mut lock, &built, x.job.0, route_nodes.into_iter(), x.route, false));
                                }
                            }
                        }
                    }
                    Decision::SlurmWillRun(w) => will_run_nodes.extend(will_run(&mut lock, &built, w.job.0, w.nodes.iter().copied(), w.route, behind_higher_priority.contains(&w.job.0))),
                    Decision::Reserve(r) => {
                        // What `squeue --start` shows, as sched/backfill sets it.
                        let (_, names) = map_nodes(&built, r.nodes.iter().copied());
                        let behind = behind_higher_priority.contains(&r.job.0);
                        if let Err(e) = lock.set_expected_start(r.job.0, r.start_s as i64, &names.join(","), behind) {
                            slurm_log!(LOG, debug, "JobId={}: expected start not set: {e}", r.job);
                        }
                    }
                    _ => {}
                }
            }
        }
        // sinfo's `planned`: the nodes held for waiting jobs (reservations and Slurm's will-run
        // windows of this plan), as sched/backfill marks them.
        if stats.end != CycleEnd::Abandoned {
            let held = outcome.reservations().flat_map(|r| r.nodes.iter());
            let mut planned: std::collections::HashSet<usize> = held.filter_map(|n| built.table_index.get(n.0 as usize).copied()).collect();
            planned.extend(will_run_nodes.iter().copied());
            match lock.set_planned_nodes(&planned) {
                Ok(_) => NODES_PLANNED.store(!planned.is_empty(), std::sync::atomic::Ordering::Relaxed),
                Err(e) => slurm_log!(LOG, debug, "planned nodes not set: {e}"),
            }
            // Stage-in ahead for jobs this plan expects to start (their StartTime is set).
            if let Err(e) = lock.try_stage_in_burst_buffers() {
                slurm_log!(LOG, debug, "burst buffer stage-in not tried: {e}");
            }
        }
        stats.locked += held_since.elapsed();
        // The starts kept back: the job state file first, then their launches.
        let launched = lock.launch_started();
        note_launches(&mut stats, launched);
    }
    stats.apply = apply_start.elapsed();
    stats.duration = started.elapsed();
    Ok((stats, refused))
}

/// A `--time-min` job's time limit (minutes) when started on `nodes`: the room before the
/// first window another job holds there (this plan's reservations and Slurm's reservations and
/// will-run windows), at least its minimum and at most the limit it asked for, as sched/backfill
/// cuts such a job's limit to fit. `None` for other jobs, and when nothing is held there.
fn time_min_room(built: &snapshot::Built, outcome: &model::decision::PlanOutcome, job: u32, nodes: impl Iterator<Item = model::types::NodeIdx>) -> Option<u32> {
    let &asked_s = built.time_min_jobs.get(&job)?;
    let snap = &built.snapshot;
    let nodes: std::collections::HashSet<usize> = nodes.map(|n| n.0 as usize).collect();
    let planned = outcome.reservations().filter(|r| r.job.0 != job && r.nodes.iter().any(|n| nodes.contains(&(n.0 as usize)))).map(|r| r.start_s);
    let held = snap
        .reservations
        .iter()
        .filter(|w| w.held_for.is_none_or(|h| h.0 != job) && w.end_s > snap.now_s)
        .filter(|w| snap.node_sets.get(w.node_set as usize).is_some_and(|set| nodes.iter().any(|&n| set.contains(n))))
        .map(|w| w.start_s);
    let min_s = snap.pending.iter().find(|p| p.id.0 == job).map_or(60.0, |p| p.time_limit_s);
    model::time_min::limit_min(snap.now_s, asked_s, min_s, planned.chain(held))
}

/// Time the state file took; a file that could not be written is logged (the jobs were
/// launched all the same, as stock Slurm launches them).
fn note_launches(stats: &mut CycleStats, r: slurm_bindings::launch::LaunchReport) {
    stats.state_save += r.save_time;
    if let Some(rc) = r.save_error {
        slurm_log!(LOG, error, "the job state file could not be written before launching {} job(s) (error {rc}): a crash now re-runs them", r.launched);
    }
    if r.dropped > 0 {
        slurm_log!(LOG, verbose, "{} started job(s) ended or were requeued before their launch", r.dropped);
    }
}

/// A job Slurm places that cannot start now: Slurm's will-run test, asked again after this
/// plan's starts, says when and where it will, shown by `squeue --start` (the planner held the
/// nodes of the snapshot's answer for it, see `snapshot::will_run_window`).
/// Asks Slurm's will-run test for `job_id` and shows its answer; the nodes it expects the job on
/// (table indices), empty without an answer.
fn will_run(lock: &mut SlurmctldLock, built: &snapshot::Built, job_id: u32, candidates: impl Iterator<Item = model::types::NodeIdx>, route: Option<u32>, behind_higher_priority: bool) -> Vec<usize> {
    let (table_nodes, _) = map_nodes(built, candidates);
    let route = route.and_then(|r| built.routes.get(r as usize));
    match lock.will_run(job_id, &table_nodes, route) {
        Ok((start, nodes)) => {
            let names: Vec<&str> = nodes.iter().filter_map(|t| built.table_index.iter().position(|x| x == t).and_then(|i| built.node_names.get(i))).map(String::as_str).collect();
            match lock.set_expected_start(job_id, start, &names.join(","), behind_higher_priority) {
                Ok(true) => slurm_log!(LOG, debug, "JobId={job_id}: Slurm's will-run test expects it at {start} on {}", names.join(",")),
                Ok(false) => {}
                Err(e) => slurm_log!(LOG, debug, "JobId={job_id}: expected start not set: {e}"),
            }
            nodes
        }
        Err(e) => {
            slurm_log!(LOG, debug, "JobId={job_id}: Slurm's will-run test: {e}");
            Vec::new()
        }
    }
}

/// The waiting jobs (reserved, or asked Slurm's will-run test) behind a higher-priority waiting
/// job of the same partition (or reservation): slurmctld's main scheduler stops at the first
/// job of a partition that cannot start and gives the ones after it reason `Priority`; that
/// first one gets `Resources`.
fn waiting_behind(built: &snapshot::Built, outcome: &model::decision::PlanOutcome) -> std::collections::HashSet<u32> {
    let position: std::collections::HashMap<u32, usize> = built.snapshot.pending.iter().enumerate().rev().map(|(i, p)| (p.id.0, i)).collect();
    let waiting = outcome.reservations().map(|r| (r.job, r.route)).chain(outcome.slurm_will_runs().map(|w| (w.job, w.route)));
    let mut reserved: Vec<(usize, u32, Option<&slurm_bindings::routes::RouteApply>)> =
        waiting.map(|(job, route)| (position.get(&job.0).copied().unwrap_or(usize::MAX), job.0, route.and_then(|i| built.routes.get(i as usize)))).collect();
    reserved.sort_by_key(|&(at, job, _)| (at, job));
    let mut blocked: std::collections::HashSet<(Option<&str>, Option<&str>)> = std::collections::HashSet::new();
    let mut behind = std::collections::HashSet::new();
    for (_, job, route) in reserved {
        let key = route.map_or((None, None), |r| if r.reservation.is_some() { (None, r.reservation.as_deref()) } else { (Some(r.partition.as_str()), None) });
        if !blocked.insert(key) {
            behind.insert(job);
        }
    }
    behind
}

/// Every node of a pending job's route `route` (all nodes without routes).
fn route_nodes(built: &snapshot::Built, job: model::types::JobId, route: Option<u32>) -> Vec<model::types::NodeIdx> {
    let snap = &built.snapshot;
    // Any of the job's entries (each queue record of a job outside an array is one).
    let eligible = snap.pending.iter().filter(|p| p.id == job).flat_map(|p| p.eligible.iter()).find(|e| Some(e.route) == route);
    let set = eligible.and_then(|e| snap.node_sets.get(e.node_set as usize));
    (0..snap.nodes.len()).filter(|&i| set.is_none_or(|s| s.contains(i))).map(|i| model::types::NodeIdx(i as u32)).collect()
}

/// Do the node table's slots still hold the nodes the plan named (dynamic nodes can be deleted
/// and others created in their slots while the locks were yielded)? Nodes are matched by name.
fn same_nodes(lock: &SlurmctldLock, table_nodes: &[usize], names: &[&str]) -> bool {
    table_nodes.len() == names.len() && table_nodes.iter().zip(names).all(|(&t, name)| lock.node_name_at(t).ok().flatten() == Some(*name))
}

/// Snapshot node indices -> (node table indices, names).
fn map_nodes(built: &snapshot::Built, nodes: impl Iterator<Item = model::types::NodeIdx>) -> (Vec<usize>, Vec<&str>) {
    let mut table_nodes = Vec::new();
    let mut names = Vec::new();
    for n in nodes {
        let i = n.0 as usize;
        if let (Some(&t), Some(name)) = (built.table_index.get(i), built.node_names.get(i)) {
            table_nodes.push(t);
            names.push(name.as_str());
        }
    }
    (table_nodes, names)
}

/// The planner extends the limit of a job it slows (extend_time_limits).
fn extend_limit(lock: &mut SlurmctldLock, job_id: u32, start: &model::decision::StartDecision) {
    let limit_min = (start.time_limit_s / 60.0).ceil();
    if limit_min.is_finite() && limit_min >= 1.0 {
        match lock.extend_time_limit(job_id, limit_min.min(f64::from(u32::MAX - 1)) as u32) {
            Ok(Some((old, new))) => {
                slurm_log!(LOG, info, "JobId={job_id}: time limit {old} -> {new} min (predicted slowdown {:.3})", start.predicted_slowdown)
            }
            Ok(None) => {}
            Err(e) => slurm_log!(LOG, error, "JobId={job_id}: time limit not extended: {e}"),
        }
    }
}

/// The planner call. With the `fault-injection` feature (test builds only) it panics while the
/// file named by `SCHED_ENERGY_FAULT_FILE` (in slurmctld's environment) exists, to prove that a
/// panic in the planner skips the cycle and never reaches slurmctld.
fn plan(built: &snapshot::Built, cfg: &Config, predictor: &Predictor) -> model::decision::PlanOutcome {
    #[cfg(feature = "fault-injection")]
    fault::maybe_panic(fault::Site::Planner);
    let shards = &built.shards;
    let filter = |job: &model::types::PendingJob, node: &model::state::NodeView| shards.node_allowed(job, node);
    // Without shard jobs the filter would accept every node: plan exactly as the simulator does.
    let filter: Option<model::planner::NodeFilter<'_>> = if shards.all.is_empty() { None } else { Some(&filter) };
    // Reservations within bf_window, as sched/backfill plans them.
    let planner = model::config::PlannerConfig { reservation_window_s: built.reservation_window_s, ..cfg.planner.clone() };
    plan_snapshot_filtered(&built.snapshot, &planner, predictor, filter)
}

/// The pending reason of a job deferred for a cleaner grid (`squeue` %R): the intensity now,
/// the forecast one and when (UTC).
pub fn deferral_reason(x: &model::decision::Deferral) -> String {
    format!(
        "sched/energy: deferred for a cleaner grid: {:.0} g/kWh now, {:.0} g/kWh forecast at {}",
        x.carbon_now_g_per_kwh,
        x.carbon_forecast_g_per_kwh,
        utc_text(x.until_s as i64)
    )
}

/// `YYYY-MM-DDTHH:MM:SSZ`.
fn utc_text(unix_s: i64) -> String {
    let days = unix_s.div_euclid(86_400);
    let secs = unix_s.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (inverse of model's days_from_civil).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs % 3600 / 60, secs % 60)
}

/// Whether the last applied plan marked nodes PLANNED (they are unmarked by the next one).
static NODES_PLANNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The pending reason of a `--energy-share=deny` shard job kept off nodes with shard jobs.
pub const DENY_WAIT_REASON: &str = "sched/energy: --energy-share=deny gres/shard job waits for a node without other gres/shard jobs";

/// The pending reason of a heterogeneous job queued before the site switched to sched/energy
/// (new ones are refused at submission): it never starts here, and says what to do.
pub const HETJOB_REASON: &str = "sched/energy does not start heterogeneous jobs: cancel it and submit its components as separate jobs, or use SchedulerType=sched/backfill";

/// Test builds only: panics on purpose while a trigger file exists. The file's content chooses
/// the site: `locked` panics while slurmctld's locks are held (after the snapshot), anything
/// else inside the planner call.
#[cfg(feature = "fault-injection")]
pub mod fault {
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Names the trigger file in slurmctld's environment.
    pub const ENV: &str = "SCHED_ENERGY_FAULT_FILE";

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Site {
        Planner,
        Locked,
    }

    static INJECTED: AtomicU64 = AtomicU64::new(0);

    /// Panics at `site` while the trigger file exists and names it.
    pub fn maybe_panic(site: Site) {
        let Some(trigger) = std::env::var_os(ENV) else { return };
        let Ok(content) = std::fs::read_to_string(&trigger) else { return };
        let wanted = if content.trim() == "locked" { Site::Locked } else { Site::Planner };
        if site == wanted {
            let n = INJECTED.fetch_add(1, Ordering::SeqCst) + 1;
            let place = match site {
                Site::Planner => "planner",
                Site::Locked => "locked snapshot",
            };
            panic!("injected {place} fault #{n} ({ENV} exists)");
        }
    }
}

pub(crate) fn unix_now_s() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_text_matches_the_model_calendar() {
        for unix in [0i64, 1_576_800_000, 1_582_979_415, 253_402_300_799] {
            let text = super::utc_text(unix);
            assert_eq!(model::carbon_source::parse_timestamp(&text), Some(unix), "{text}");
        }
        assert_eq!(super::utc_text(1_576_800_000), "2019-12-20T00:00:00Z");
    }
}
