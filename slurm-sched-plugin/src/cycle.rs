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
use slurm_bindings::start::StartError;

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
}

impl std::fmt::Display for CycleStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(
            f,
            "{:.3} ms (locked {:.3}, snapshot {:.3}, plan {:.3}, start {:.3}); nodes {} running {} pending {}; tested {} started {} failed {} reserved {} deferred {} yields {} end {:?}",
            ms(self.duration),
            ms(self.locked),
            ms(self.snapshot),
            ms(self.plan),
            ms(self.apply),
            self.nodes,
            self.running,
            self.pending,
            self.jobs_tested,
            self.jobs_started,
            self.start_failures,
            self.reservations,
            self.deferrals,
            self.yields,
            self.end,
        )
    }
}

pub fn run(cfg: &Config, predictor: &Predictor) -> Result<CycleStats, String> {
    let started = Instant::now();
    let lock = SlurmctldLock::acquire(LockLevels::SCHEDULER).map_err(|e| e.to_string())?;
    let conf = ConfView::read(&lock).map_err(|e| e.to_string())?;
    LOG.set_debug(cfg.sched.debug || conf.debug_backfill());
    let now_s = unix_now_s();
    let built = snapshot::build(&lock, &conf, cfg, now_s).map_err(|e| e.to_string())?;
    // A panic here unwinds through the lock guard, which must release slurmctld's locks.
    #[cfg(feature = "fault-injection")]
    fault::maybe_panic(fault::Site::Locked);
    drop(lock);
    let snapshot_time = started.elapsed();

    let plan_start = Instant::now();
    let outcome = plan(&built, cfg, predictor);
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
    };
    for d in &outcome.decisions {
        match d {
            Decision::Reserve(r) => slurm_log!(LOG, debug, "JobId={} reserved from {:.0} s on {} node(s)", r.job, r.start_s - now_s, r.nodes.len()),
            Decision::Defer(x) => slurm_log!(LOG, debug, "JobId={} deferred {:.0} s for a cleaner grid ({:.0} -> {:.0} g/kWh)", x.job, x.until_s - now_s, x.carbon_now_g_per_kwh, x.carbon_forecast_g_per_kwh),
            // GPU clocks are applied on the nodes (GPU/SPANK plugins), not by slurmctld.
            Decision::Reclock(r) => slurm_log!(LOG, debug, "JobId={} reclock to {} MHz not applied (no clock control from slurmctld)", r.job, r.clock_mhz),
            Decision::Start(_) => {}
        }
    }

    // `--energy-share=deny` shard jobs that stay pending while shard jobs run: they wait for a
    // node without shard jobs (the node filter kept them off the others); say so in their
    // reason and, once per job, in the log.
    let planned_starts: std::collections::HashSet<u32> = outcome.starts().map(|s| s.job.0).collect();
    let waiting_deny = built.shards.waiting_deny(&built.snapshot.pending, &planned_starts);

    let apply_start = Instant::now();
    if !waiting_deny.is_empty() {
        let mut lock = SlurmctldLock::acquire(LockLevels::SCHEDULER).map_err(|e| e.to_string())?;
        let held_since = Instant::now();
        for &id in &waiting_deny {
            match lock.set_pending_reason(id, DENY_WAIT_REASON) {
                Ok(true) => slurm_log!(LOG, info, "JobId={id} waits: {DENY_WAIT_REASON}"),
                Ok(false) => {}
                Err(e) => slurm_log!(LOG, debug, "JobId={id}: reason not set: {e}"),
            }
        }
        stats.locked += held_since.elapsed();
    }
    if outcome.starts().next().is_some() {
        let max_locked = Duration::from_millis(cfg.sched.max_lock_ms);
        let pause = Duration::from_millis(cfg.sched.yield_ms);
        let mut lock = SlurmctldLock::acquire(LockLevels::SCHEDULER).map_err(|e| e.to_string())?;
        let mut held_since = Instant::now();
        for start in outcome.starts() {
            if held_since.elapsed() >= max_locked {
                stats.locked += held_since.elapsed();
                lock.yield_for(pause);
                stats.yields += 1;
                held_since = Instant::now();
            }
            let mut table_nodes = Vec::with_capacity(start.allocations.len());
            let mut names = Vec::with_capacity(start.allocations.len());
            for a in &start.allocations {
                let i = a.node.0 as usize;
                if let (Some(&t), Some(n)) = (built.table_index.get(i), built.node_names.get(i)) {
                    table_nodes.push(t);
                    names.push(n.as_str());
                }
            }
            let record = start.record(&names);
            match lock.start_job(start.job.0, &table_nodes, Some(&record)) {
                Ok(s) => {
                    stats.jobs_started += 1;
                    slurm_log!(LOG, info, "started JobId={} on {}: {}", s.job_id, s.nodes, record);
                    // The planner extends the limit of a job it slows (extend_time_limits).
                    let limit_min = (start.time_limit_s / 60.0).ceil();
                    if limit_min.is_finite() && limit_min >= 1.0 {
                        match lock.extend_time_limit(s.job_id, limit_min.min(f64::from(u32::MAX - 1)) as u32) {
                            Ok(Some((old, new))) => {
                                slurm_log!(LOG, info, "JobId={}: time limit {old} -> {new} min (predicted slowdown {:.3})", s.job_id, start.predicted_slowdown)
                            }
                            Ok(None) => {}
                            Err(e) => slurm_log!(LOG, error, "JobId={}: time limit not extended: {e}", s.job_id),
                        }
                    }
                }
                Err(e @ (StartError::NotPending | StartError::AccountingPolicy)) => {
                    stats.start_failures += 1;
                    slurm_log!(LOG, debug, "JobId={} not started: {e}", start.job);
                }
                Err(e) => {
                    stats.start_failures += 1;
                    slurm_log!(LOG, verbose, "JobId={} not started on {}: {e}", start.job, names.join(","));
                }
            }
        }
        stats.locked += held_since.elapsed();
    }
    stats.apply = apply_start.elapsed();
    stats.duration = started.elapsed();
    Ok(stats)
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
    plan_snapshot_filtered(&built.snapshot, &cfg.planner, predictor, filter)
}

/// The pending reason of a `--energy-share=deny` shard job kept off nodes with shard jobs.
pub const DENY_WAIT_REASON: &str = "sched/energy: --energy-share=deny gres/shard job waits for a node without other gres/shard jobs";

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

fn unix_now_s() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}
