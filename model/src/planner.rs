//! The energy-aware backfill planner: one scheduling cycle.
//!
//! The cycle walks the pending queue in Slurm's priority order:
//! 1. **defer** a job that allows it when the carbon forecast promises a cleaner hour soon;
//! 2. **place** it now if a node passes the filter: score the best-fitting feasible nodes (and
//!    GPUs it could time-share), choose its clock within its slowdown bound, respect the power
//!    cap, and commit the placement to the cycle's view;
//! 3. otherwise **reserve**: the first `reservation_depth` blocked jobs get the earliest nodes
//!    they can have (by running jobs' time limits), and those claims are honoured by every later
//!    placement, so no job of lower priority delays them (EASY backfill when the depth is 1).
//!
//! Reservations are computed lazily, just before the first later job is placed, which keeps
//! cycles over a full cluster cheap; with `report_reservations` the remaining ones are computed
//! at the end too, so a plugin can show expected start times.
//!
//! The cycle is bounded by a job count (deterministic) and optionally by wall time.

use std::collections::HashMap;
use std::time::Instant;

use crate::config::PlannerConfig;
use crate::decision::{CycleEnd, CycleStats, Decision, Deferral, PlanOutcome, Reclock, Reservation, ScoreBreakdown, StartDecision};
use crate::fit_index::{FitIndex, FitKey};
use crate::predictor::Predictor;
use crate::ranking;
use crate::state::{Amount, Claim, ClusterView, GpuTenant, NodeView};
use crate::types::{EnergyPolicy, JobId, NodeAllocation, NodeIdx, PendingJob, PowerState, Snapshot};

/// Plan one cycle over a snapshot (what a plugin does every cycle).
pub fn plan_snapshot(s: &Snapshot, cfg: &PlannerConfig, pred: &Predictor) -> PlanOutcome {
    plan_snapshot_filtered(s, cfg, pred, None)
}

/// Which nodes a pending job may be placed on, beyond its resources: `false` keeps the job off
/// the node in this cycle (exclusive and shared placements alike). A plugin uses it for
/// constraints the planner does not model (e.g. sched/energy keeps `--energy-share=deny`
/// `gres/shard` jobs off nodes where other shard jobs run, since Slurm picks the GPU).
pub type NodeFilter<'f> = &'f dyn Fn(&PendingJob, &NodeView) -> bool;

/// [`plan_snapshot`] with an optional [`NodeFilter`]; `None` plans exactly as `plan_snapshot`.
pub fn plan_snapshot_filtered(s: &Snapshot, cfg: &PlannerConfig, pred: &Predictor, filter: Option<NodeFilter<'_>>) -> PlanOutcome {
    // Running jobs share a few tags and (tag, GPU type, clock) combinations: work out each
    // family and predict each power once (hashed: tags are the users' to choose, and a user
    // with a new tag per job must not make this quadratic).
    let families: std::cell::RefCell<HashMap<Option<&str>, Option<std::sync::Arc<str>>>> = std::cell::RefCell::new(HashMap::new());
    let known_w: std::cell::RefCell<HashMap<KnownPower<'_>, f64>> = std::cell::RefCell::new(HashMap::new());
    let mut view = ClusterView::from_snapshot(
        s,
        |h| {
            let tag = h.tag.as_deref();
            families.borrow_mut().entry(tag).or_insert_with(|| Predictor::family(tag).map(std::sync::Arc::from)).clone()
        },
        |r| {
            let Some(gpu_type) = r.allocations.first().and_then(|a| s.nodes.get(a.node.0 as usize)).map(|n| n.gpu_type) else { return 0.0 };
            let tag = r.hints.tag.as_deref();
            *known_w.borrow_mut().entry((tag, gpu_type, r.clock_mhz)).or_insert_with(|| running_power_w(s, pred, tag, gpu_type, r.clock_mhz))
        },
    );
    let slurm = SlurmLimits { node_sets: &s.node_sets, reservations: &s.reservations };
    plan_inner(&mut view, s.now_s, &s.pending, cfg, pred, filter, slurm)
}

/// Free profiles of nodes for jobs outside any Slurm reservation, each valid until its node
/// changes; a profile built again reuses its memory.
#[derive(Default)]
struct PlainProfiles {
    profiles: Vec<crate::state::FreeProfile>,
    valid: Vec<bool>,
}

/// Running jobs with one (tag, GPU type, clock MHz): they share a predicted power per GPU.
type KnownPower<'s> = (Option<&'s str>, usize, u32);

/// Predicted power per GPU of a running job with `tag` on `gpu_type` at `clock_mhz`: its
/// family's curve at the ladder step closest to that clock.
fn running_power_w(s: &Snapshot, pred: &Predictor, tag: Option<&str>, gpu_type: usize, clock_mhz: u32) -> f64 {
    let Some(gt) = s.gpu_types.get(gpu_type) else { return 0.0 };
    let family = Predictor::family(tag);
    let step = pred.curves(&gt.name).map_or(0, |c| {
        c.ladder
            .iter()
            .enumerate()
            .min_by_key(|(_, st)| step_clock_mhz(gt, st).abs_diff(clock_mhz))
            .map_or(c.default_step(), |(i, _)| i)
    });
    pred.predict_clock(&gt.name, gt.max_power_w, family.as_deref(), step).power_w
}

/// What Slurm itself says about where jobs may run: the snapshot's node sets and advanced
/// reservations (empty in the simulator).
#[derive(Clone, Copy, Default)]
struct SlurmLimits<'a> {
    node_sets: &'a [crate::eligibility::NodeSet],
    reservations: &'a [crate::eligibility::AdvanceReservation],
}

/// The first `k` of `nodes` (in order) that can hold `need` over `[start, start + duration)`.
fn fit_together(view: &ClusterView, nodes: impl Iterator<Item = usize>, k: usize, start: f64, need: &Amount, duration: f64, own: Option<u32>) -> Option<Vec<usize>> {
    let ok: Vec<usize> = nodes.filter(|&i| view.nodes[i].min_free_over_for(start, start + duration, own).covers(need)).take(k).collect();
    (ok.len() == k).then_some(ok)
}

/// Among nodes ordered by their earliest fit, the earliest moment at which `k` of them can all
/// hold `need` over `[start, start + duration)` (a node's earliest fit says nothing about a
/// later moment: another claim may start in between), and those nodes.
fn common_start(view: &ClusterView, fits: impl Iterator<Item = (f64, usize)> + Clone, k: usize, need: &Amount, duration: f64, own: Option<u32>) -> Option<(f64, Vec<usize>)> {
    for (start, _) in fits.clone() {
        let before = fits.clone().take_while(|(t, _)| *t <= start).map(|(_, i)| i);
        if let Some(ok) = fit_together(view, before, k, start, need, duration, own) {
            return Some((start, ok));
        }
        if k == 1 {
            break;
        }
    }
    None
}

/// A request's shape: (nodes, GPUs per node, CPUs per node, memory per node) and where it may
/// go (node set, own Slurm reservation). The few shapes of a queue are kept in small vectors: a
/// linear scan beats hashing here.
type Shape = (u32, u32, u32, u64, Option<(u32, Option<u32>)>);

/// (clock step, clock MHz, power limit W, predicted slowdown, predicted power W per GPU).
type ClockChoice = (usize, u32, f64, f64, f64);

/// One candidate placement of a job.
struct Candidate {
    /// Inline for a single node (every candidate but a merged multi-node one): a cycle scores
    /// hundreds of thousands of candidates and keeps one per started job.
    allocations: smallvec::SmallVec<[NodeAllocation; 1]>,
    shares_with: Vec<JobId>,
    clock_step: usize,
    clock_mhz: u32,
    power_limit_w: f64,
    slowdown: f64,
    power_w: f64,
    energy_j: f64,
    wakes: Vec<NodeIdx>,
    ready_s: f64,
    score: ScoreBreakdown,
    /// A shared placement's pair prediction, as the record names it.
    interference: Option<String>,
}

struct Cycle<'a> {
    cfg: &'a PlannerConfig,
    pred: &'a Predictor,
    now_s: f64,
    /// Carbon intensity now relative to the day's forecast, computed on first use.
    relative_carbon: std::cell::OnceCell<Option<f64>>,
    gpu_power_now_w: f64,
    decisions: Vec<Decision>,
    stats: CycleStats,
    /// Blocked jobs whose reservation is still to be computed.
    unreserved: Vec<&'a PendingJob>,
    reservations_left: usize,
    /// Request shapes that found no exclusive placement this cycle, with the earliest end that
    /// failed: resources only shrink and claims only grow during a cycle, so a later job of the
    /// same shape that would end no earlier fails too. Keeps cycles over long queues cheap.
    failed_shapes: Vec<(Shape, f64)>,
    /// The same for time-sharing: (tag, shape) that found no GPU to share (hashed: tags are
    /// the users' to choose, one per job would make a list quadratic).
    failed_shares: std::collections::HashSet<(Option<&'a str>, Shape)>,
    /// `view.max_free_gpus()` and whether any GPU can take a second tenant, refreshed after
    /// each placement: the per-job test of a long queue must cost next to nothing.
    max_free_gpus: u32,
    any_shareable: bool,
    /// Cleanest forecast moment per deferral deadline (rounded to the carbon step).
    cleanest: HashMap<i64, (f64, f64)>,
    /// More GPUs are wanted by the queue than are free: jobs will wait, so slowing jobs down
    /// would lengthen every wait. Balanced jobs then run at the default clock.
    congested: std::cell::OnceCell<bool>,
    /// GPUs of available nodes, and how many were busy when the cycle began.
    gpus_total: i64,
    gpus_busy_at_start: i64,
    pending: &'a [PendingJob],
    /// Optional per-job node filter (plugins only; `None` in the simulator).
    filter: Option<NodeFilter<'a>>,
    /// The filter turned a node away for the job being tried: its failure says nothing about
    /// other jobs of the same shape, so it is not cached.
    filtered_out: std::cell::Cell<bool>,
    slurm: SlurmLimits<'a>,
    /// Reservation search: earliest fits per (shape, duration, route), and which nodes changed
    /// in this cycle (see `fit_index`).
    fit_index: std::cell::RefCell<FitIndex>,
    /// Free profiles of nodes (for jobs outside any Slurm reservation; per own reservation in
    /// `profiles`), until the node changes.
    plain_profiles: std::cell::RefCell<PlainProfiles>,
    profiles: std::cell::RefCell<std::collections::BTreeMap<(usize, Option<u32>), crate::state::FreeProfile>>,
    /// Jobs started, handed to Slurm or deferred in this cycle: their alternative queue
    /// records are skipped.
    settled: std::collections::HashSet<JobId>,
    /// Workload family per job tag (see `Cycle::family`).
    families: std::cell::RefCell<HashMap<String, Option<std::sync::Arc<str>>>>,
}

/// Plan one cycle on a view the caller keeps (the simulator). Started jobs are added to the
/// view; claims of reservations are cleared at the start of the next cycle.
pub fn plan(view: &mut ClusterView, now_s: f64, pending: &[PendingJob], cfg: &PlannerConfig, pred: &Predictor) -> PlanOutcome {
    plan_filtered(view, now_s, pending, cfg, pred, None)
}

/// [`plan`] with an optional [`NodeFilter`]; `None` plans exactly as `plan`.
pub fn plan_filtered<'a>(view: &mut ClusterView, now_s: f64, pending: &'a [PendingJob], cfg: &'a PlannerConfig, pred: &'a Predictor, filter: Option<NodeFilter<'a>>) -> PlanOutcome {
    plan_inner(view, now_s, pending, cfg, pred, filter, SlurmLimits::default())
}

fn plan_inner<'a>(view: &mut ClusterView, now_s: f64, pending: &'a [PendingJob], cfg: &'a PlannerConfig, pred: &'a Predictor, filter: Option<NodeFilter<'a>>, slurm: SlurmLimits<'a>) -> PlanOutcome {
    let started = Instant::now();
    view.clear_claims();
    view.add_reservation_claims(slurm.reservations, slurm.node_sets);
    let mut cycle = Cycle {
        cfg,
        pred,
        now_s,
        relative_carbon: std::cell::OnceCell::new(),
        gpu_power_now_w: if cfg.power_cap_w > 0.0 { predicted_gpu_power_w(view) } else { 0.0 },
        decisions: Vec::new(),
        stats: CycleStats::default(),
        unreserved: Vec::new(),
        reservations_left: cfg.reservation_depth,
        failed_shapes: Vec::new(),
        failed_shares: std::collections::HashSet::new(),
        cleanest: HashMap::new(),
        max_free_gpus: view.max_free_gpus(),
        any_shareable: view.shareable_nodes().next().is_some(),
        congested: std::cell::OnceCell::new(),
        gpus_total: view.nodes.iter().filter(|n| n.node.available).map(|n| n.node.gpus as i64).sum(),
        gpus_busy_at_start: view.nodes.iter().filter(|n| n.node.available).map(|n| n.node.gpus as i64 - n.free.gpus.max(0)).sum(),
        pending,
        filter,
        filtered_out: std::cell::Cell::new(false),
        slurm,
        fit_index: std::cell::RefCell::new(FitIndex::new(view.nodes.len())),
        plain_profiles: std::cell::RefCell::new(PlainProfiles::default()),
        profiles: std::cell::RefCell::new(std::collections::BTreeMap::new()),
        settled: std::collections::HashSet::new(),
        families: std::cell::RefCell::new(HashMap::new()),
    };
    if cfg.boost_when_congested && cycle.congested() {
        cycle.boost_running(view);
    }
    // A full cluster with nothing to share and no job that needs no GPU: nothing can start,
    // and reservations only matter to jobs that could start. Deferral waits for the next cycle.
    let nothing_fits = view.max_free_gpus() == 0
        && (!cfg.sharing || view.shareable_nodes().next().is_none())
        && !pending.iter().any(|p| p.request.gpus_per_node == 0 || p.placed_by_slurm);
    if nothing_fits && !cfg.report_reservations {
        return PlanOutcome { decisions: cycle.decisions, end: CycleEnd::Complete, stats: cycle.stats };
    }
    let mut end = CycleEnd::Complete;
    for job in pending {
        if cycle.stats.jobs_tested >= cfg.max_jobs_tested {
            end = CycleEnd::JobLimit;
            break;
        }
        if cfg.max_cycle_ms > 0 && cycle.stats.jobs_tested.is_multiple_of(32) && started.elapsed().as_millis() as u64 >= cfg.max_cycle_ms {
            end = CycleEnd::TimeLimit;
            log::debug!("cycle stopped at max_cycle_ms = {} after {} jobs tested", cfg.max_cycle_ms, cycle.stats.jobs_tested);
            break;
        }
        if job.alternative && cycle.settled.contains(&job.id) {
            continue;
        }
        cycle.stats.jobs_tested += 1;
        if !job.alternative && cycle.try_defer(job) {
            cycle.settled.insert(job.id);
            continue;
        }
        if job.placed_by_slurm {
            cycle.leave_to_slurm(view, job);
            continue;
        }
        if cycle.try_start(view, job) {
            cycle.settled.insert(job.id);
            continue;
        }
        if job.slurm_may_spread {
            cycle.leave_to_slurm(view, job);
            continue;
        }
        if job.alternative || job.no_reservation {
            continue;
        }
        // Slots are only used up by reservations that exist: settle the owed ones before
        // turning a blocked job away for want of a slot.
        if cycle.reservations_left == 0 && !cycle.unreserved.is_empty() {
            cycle.materialize_reservations(view);
        }
        if cycle.reservations_left > 0 {
            cycle.reservations_left -= 1;
            cycle.unreserved.push(job);
        }
    }
    if cfg.report_reservations {
        cycle.materialize_reservations(view);
    }
    PlanOutcome { decisions: cycle.decisions, end, stats: cycle.stats }
}

/// The clock step with the least predicted energy whose predicted slowdown stays within
/// `bound` (the default step when none does better).
/// The clock of a ladder step on a GPU type: the step's fraction of the clock the type runs at
/// by default (the measured sweeps are relative to an unconstrained run at that clock), kept
/// within the type's range. Sites state `default_clock_mhz` as their GPUs' default application
/// clock, so the clock a step names is one the GPU plugin can apply as is.
fn step_clock_mhz(gt: &crate::types::GpuType, s: &crate::perf_power::ClockStep) -> u32 {
    ((s.clock_frac * f64::from(gt.default_clock_mhz)).round() as u32).clamp(gt.min_clock_mhz, gt.max_clock_mhz)
}

fn lowest_energy_step(curves: &crate::perf_power::GpuCurves, class: Option<&str>, bound: f64) -> (usize, crate::perf_power::Prediction) {
    let mut best = curves.default_step();
    let mut best_p = curves.predict(class, best);
    for step in 0..curves.ladder.len() {
        let p = curves.predict(class, step);
        if p.time_ratio <= bound + 1e-9 && p.time_ratio * p.power_w < best_p.time_ratio * best_p.power_w - 1e-9 {
            best = step;
            best_p = p;
        }
    }
    (best, best_p)
}

/// Predicted GPU power of the cluster now: running jobs at their predicted power, idle GPUs at
/// idle power.
fn predicted_gpu_power_w(view: &ClusterView) -> f64 {
    let mut total = 0.0;
    for nv in &view.nodes {
        let idle_w = view.gpu_types.get(nv.node.gpu_type).map_or(0.0, |g| g.idle_power_w);
        for tenants in &nv.gpus {
            total += if tenants.is_empty() {
                if nv.node.power == PowerState::Suspended { 0.0 } else { idle_w }
            } else {
                tenants.iter().map(|t| t.power_w).fold(0.0, f64::max)
            };
        }
    }
    total
}

impl<'a> Cycle<'a> {
    /// Busy GPUs plus the GPUs the queue wants exceed `congestion_load` of all GPUs (at the
    /// start of the cycle). Computed on first use: it reads the whole queue.
    fn congested(&self) -> bool {
        *self.congested.get_or_init(|| {
            self.cfg.congestion_aware_clocks && {
                let wanted: i64 = self.pending.iter().map(|p| p.request.total_gpus() as i64).sum();
                (self.gpus_busy_at_start + wanted) as f64 > self.cfg.congestion_load * self.gpus_total as f64
            }
        })
    }

    fn relative_carbon(&self) -> Option<f64> {
        *self.relative_carbon.get_or_init(|| {
            if self.cfg.carbon_aware_clocks || self.cfg.scorers.carbon > 0.0 {
                self.pred.carbon.as_ref().map(|c| c.relative_intensity(self.now_s))
            } else {
                None
            }
        })
    }

    /// The job's workload family (from its tag), worked out once per tag in a cycle.
    fn family(&self, job: &PendingJob) -> Option<std::sync::Arc<str>> {
        let tag = job.hints.tag.as_deref()?;
        let mut known = self.families.borrow_mut();
        if let Some(f) = known.get(tag) {
            return f.clone();
        }
        let f: Option<std::sync::Arc<str>> = Predictor::family(Some(tag)).map(std::sync::Arc::from);
        known.insert(tag.to_owned(), f.clone());
        f
    }

    /// Time limit the job would get, extended by its slowdown bound when it may be slowed.
    fn extended_limit_s(&self, job: &PendingJob) -> f64 {
        if self.cfg.extend_time_limits && job.hints.policy != EnergyPolicy::Performance {
            job.time_limit_s * job.hints.max_slowdown.max(1.0)
        } else {
            job.time_limit_s
        }
    }

    /// What must be free on each node: the request as submitted. A job with a CPU range may
    /// end up with fewer CPUs only when it is predicted to lose nothing by it (see
    /// [`Cycle::choose_cpus`]), never because the node was short.
    fn need(job: &PendingJob) -> Amount {
        Amount { gpus: job.request.gpus_per_node as i64, cpus: job.request.cpus_per_node as i64, mem_mb: job.request.mem_mb_per_node as i64 }
    }

    /// Raise running jobs that run below the clock a congested cluster allows them (their
    /// slowdown budget cut to `congested_slowdown_share`) up to that clock.
    fn boost_running(&mut self, view: &mut ClusterView) {
        let mut seen: Vec<JobId> = Vec::new();
        let mut raise: Vec<(JobId, u32, f64, f64)> = Vec::new();
        for nv in &view.nodes {
            let Some(gt) = view.gpu_types.get(nv.node.gpu_type) else { continue };
            let Some(curves) = self.pred.curves(&gt.name) else { continue };
            for tenants in &nv.gpus {
                for t in tenants {
                    if t.clock_mhz >= gt.default_clock_mhz || seen.contains(&t.job) {
                        continue;
                    }
                    seen.push(t.job);
                    let bound = 1.0 + (t.max_slowdown.max(1.0) - 1.0) * self.cfg.congested_slowdown_share;
                    let class = t.family.as_deref().and_then(crate::workloads::zeus_network);
                    let (step, p) = lowest_energy_step(curves, class, bound);
                    let s = curves.ladder[step];
                    let clock = step_clock_mhz(gt, &s);
                    if clock > t.clock_mhz {
                        raise.push((t.job, clock, s.power_limit_w, p.power_w));
                    }
                }
            }
        }
        for (job, clock_mhz, power_limit_w, power_w) in raise {
            view.set_clock(job, clock_mhz, power_w);
            self.decisions.push(Decision::Reclock(Reclock { job, clock_mhz, power_limit_w }));
        }
    }

    fn try_defer(&mut self, job: &PendingJob) -> bool {
        let Some(carbon) = self.pred.carbon.as_ref() else { return false };
        if !self.cfg.carbon_deferral || job.hints.defer_max_s <= 0.0 || job.hints.policy == EnergyPolicy::Performance {
            return false;
        }
        let deadline = job.submit_time_s + job.hints.defer_max_s.min(self.cfg.hints.max_defer_s);
        if self.now_s >= deadline {
            return false;
        }
        let now_g = carbon.intensity_at(self.now_s);
        let slot = (deadline / carbon.step_s().max(60.0)).floor() as i64;
        let now_s = self.now_s;
        let (best_t, best_g) = *self.cleanest.entry(slot).or_insert_with(|| carbon.cleanest_within(now_s, deadline - now_s));
        if best_t > self.now_s && best_g < now_g * (1.0 - self.cfg.deferral_min_gain) {
            self.decisions.push(Decision::Defer(Deferral {
                job: job.id,
                until_s: best_t,
                carbon_now_g_per_kwh: now_g,
                carbon_forecast_g_per_kwh: best_g,
            }));
            self.stats.deferrals += 1;
            return true;
        }
        false
    }

    /// Compute the reservations of blocked jobs that are still owed one.
    fn materialize_reservations(&mut self, view: &mut ClusterView) {
        let owed = std::mem::take(&mut self.unreserved);
        for job in owed {
            match self.reserve(view, job) {
                Some(r) => {
                    self.decisions.push(Decision::Reserve(r));
                    self.stats.reservations += 1;
                }
                // Only a reservation that exists uses up a slot.
                None => self.reservations_left += 1,
            }
        }
    }

    /// Earliest nodes for a blocked job over every route Slurm allows it, claimed in the view
    /// for the rest of the cycle.
    fn reserve(&self, view: &mut ClusterView, job: &PendingJob) -> Option<Reservation> {
        if job.eligible.is_empty() {
            return self.reserve_on(view, job, None);
        }
        // The earliest start over the routes; only that one is claimed.
        let mut best: Option<(f64, &crate::eligibility::Eligibility)> = None;
        for alt in &job.eligible {
            if let Some((start_s, _)) = self.earliest_common_start(view, job, Some(alt))
                && best.is_none_or(|(b, _)| start_s < b)
            {
                best = Some((start_s, alt));
            }
        }
        let (_, alt) = best?;
        self.reserve_on(view, job, Some(alt))
    }

    fn reserve_on(&self, view: &mut ClusterView, job: &PendingJob, alt: Option<&crate::eligibility::Eligibility>) -> Option<Reservation> {
        let (start_s, picked) = self.earliest_common_start(view, job, alt)?;
        if start_s > self.now_s + self.cfg.reservation_window_s {
            return None;
        }
        let need = Self::need(job);
        let duration = self.extended_limit_s(job);
        let mut nodes = Vec::with_capacity(picked.len());
        for i in picked {
            view.nodes[i].claims.push(Claim { job: job.id, start_s, end_s: start_s + duration, amount: need, resv: None });
            self.node_changed(i);
            nodes.push(NodeIdx(i as u32));
        }
        Some(Reservation { job: job.id, start_s, nodes, route: alt.map(|a| a.route) })
    }

    /// The earliest moment at which `k` nodes of the route can all hold the job for its whole
    /// (extended) time limit, and those nodes.
    fn earliest_common_start(&self, view: &ClusterView, job: &PendingJob, alt: Option<&crate::eligibility::Eligibility>) -> Option<(f64, Vec<usize>)> {
        let need = Self::need(job);
        let duration = self.extended_limit_s(job);
        let own = alt.and_then(|a| a.reservation);
        let route_not_before = alt.map_or(self.now_s, |a| a.not_before_s.max(self.now_s));
        let k = job.request.nodes.max(1) as usize;
        // The plugin's node filter depends on the job (and on what the cycle placed): no cache.
        if self.filter.is_some() {
            let mut fits: Vec<(f64, usize)> =
                (0..view.nodes.len()).filter_map(|i| self.node_fit(view, job, alt, &need, duration, route_not_before, i).map(|t| (t, i))).collect();
            if fits.len() < k {
                return None;
            }
            fits.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            return common_start(view, fits.iter().copied(), k, &need, duration, own);
        }
        // Earliest fits per request shape, duration and route, kept across the cycle's
        // reservations and starts (see `fit_index`).
        let key: FitKey = (need.gpus, need.cpus, need.mem_mb, duration.to_bits(), route_not_before.to_bits(), alt.map(|a| (a.node_set, a.reservation)));
        self.fit_index.borrow_mut().earliest(
            key,
            k,
            |i| self.node_fit(view, job, alt, &need, duration, route_not_before, i).map(f64::to_bits),
            |n, start| self.covers_over(view, n, own, &need, start, start + duration),
        )
    }

    /// The earliest moment node `i` can hold `need` for `duration_s` from `not_before_s` on (or
    /// from when it is powered up), if the node may take the job at all.
    #[allow(clippy::too_many_arguments)]
    fn node_fit(&self, view: &ClusterView, job: &PendingJob, alt: Option<&crate::eligibility::Eligibility>, need: &Amount, duration_s: f64, not_before_s: f64, i: usize) -> Option<f64> {
        let nv = view.nodes.get(i)?;
        if !(nv.node.available && nv.node.gpus as i64 >= need.gpus && nv.node.cpus as i64 >= need.cpus && nv.node.mem_mb as i64 >= need.mem_mb) {
            return None;
        }
        // The plugin's node filter (as the nodes are now): no claim where the job may not go.
        if !self.in_route(alt, i) || !self.filter.is_none_or(|f| f(job, nv)) {
            return None;
        }
        let not_before = match nv.node.power {
            PowerState::On => not_before_s,
            PowerState::Suspended => not_before_s.max(self.now_s + self.pred.node_power.resume_s),
            PowerState::Resuming { ready_at_s } => ready_at_s.max(not_before_s),
        };
        // Beyond the planning window (bf_window) no reservation is made: a fit there is no fit,
        // and since fits only grow within a cycle, the node leaves the shape's search for good.
        let horizon_s = self.now_s + self.cfg.reservation_window_s;
        self.with_profile(view, i, alt.and_then(|a| a.reservation), |p| p.earliest_fit(need, not_before, duration_s)).filter(|&t| t <= horizon_s)
    }

    /// Is `need` free on node `i` over `[from_s, to_s)` for a job inside reservation `own`?
    #[allow(clippy::too_many_arguments)]
    fn covers_over(&self, view: &ClusterView, i: usize, own: Option<u32>, need: &Amount, from_s: f64, to_s: f64) -> bool {
        self.with_profile(view, i, own, |p| p.covers_over(need, from_s, to_s))
    }

    /// `f` of node `i`'s free profile (for a job inside reservation `own`), computed once until
    /// the node changes.
    fn with_profile<R>(&self, view: &ClusterView, i: usize, own: Option<u32>, f: impl FnOnce(&crate::state::FreeProfile) -> R) -> R {
        let nv = &view.nodes[i];
        if own.is_none() {
            let mut plain = self.plain_profiles.borrow_mut();
            if plain.profiles.len() < view.nodes.len() {
                plain.profiles.resize(view.nodes.len(), crate::state::FreeProfile::default());
                plain.valid.resize(view.nodes.len(), false);
            }
            let PlainProfiles { profiles, valid } = &mut *plain;
            if !valid[i] {
                nv.free_profile_into(None, &mut profiles[i]);
                valid[i] = true;
            }
            return f(&profiles[i]);
        }
        let mut profiles = self.profiles.borrow_mut();
        f(profiles.entry((i, own)).or_insert_with(|| nv.free_profile(own)))
    }

    /// Node `i`'s free resources, releases or claims changed: forget what was derived from them.
    fn node_changed(&self, i: usize) {
        self.fit_index.borrow_mut().node_changed(i);
        if let Some(v) = self.plain_profiles.borrow_mut().valid.get_mut(i) {
            *v = false;
        }
        let mut profiles = self.profiles.borrow_mut();
        let stale: Vec<(usize, Option<u32>)> = profiles.range((i, None)..=(i, Some(u32::MAX))).map(|(k, _)| *k).collect();
        for k in stale {
            profiles.remove(&k);
        }
    }

    /// Is node `n` one the route allows (always, without a route)?
    fn in_route(&self, alt: Option<&crate::eligibility::Eligibility>, n: usize) -> bool {
        alt.is_none_or(|a| self.slurm.node_sets.get(a.node_set as usize).is_some_and(|set| set.contains(n)))
    }

    /// Slurm places `job` ([`Cycle::hand_to_slurm`]), and unless the job takes no reservation,
    /// the window Slurm's will-run test gave it holds against the jobs after it
    /// ([`Cycle::hold_will_run_window`]).
    fn leave_to_slurm(&mut self, view: &mut ClusterView, job: &PendingJob) {
        self.hand_to_slurm(view, job);
        if !job.no_reservation {
            self.hold_will_run_window(view, job);
        }
    }

    /// A job whose request the planner cannot express (or whose feasibility is Slurm's to
    /// judge: whole nodes, several GPU types on a node): Slurm places it, on the nodes of its
    /// first route that may start now, less those on which a claim (this cycle's reservations
    /// for jobs before it, Slurm's reservations, will-run windows) overlaps its time limit, as
    /// sched/backfill keeps a later job off the nodes reserved for earlier ones, and less those
    /// the plugin's filter refuses. Whether and how the job fits those nodes is left to Slurm:
    /// the planner's per-node amounts are not asked for (`--gpus=6` on 4-GPU nodes fits two
    /// nodes that each have fewer than 6). When it cannot start now, Slurm's will-run test is
    /// asked when and where it will (over the nodes of its first route), as sched/backfill
    /// asks it.
    fn hand_to_slurm(&mut self, view: &mut ClusterView, job: &PendingJob) {
        if !self.unreserved.is_empty() {
            self.materialize_reservations(view);
        }
        let end_s = self.now_s + job.time_limit_s;
        let routes: Vec<Option<&crate::eligibility::Eligibility>> =
            if job.eligible.is_empty() { vec![None] } else { job.eligible.iter().map(Some).collect() };
        for alt in routes {
            if alt.is_some_and(|a| a.not_before_s > self.now_s + 1e-6) {
                continue;
            }
            let own = alt.and_then(|a| a.reservation);
            let nodes: Vec<NodeIdx> = view
                .nodes
                .iter()
                .enumerate()
                .filter(|(i, nv)| self.in_route(alt, *i) && nv.node.available && !nv.claimed_over(self.now_s, end_s, own) && self.filter.is_none_or(|f| f(job, nv)))
                .map(|(i, _)| NodeIdx(i as u32))
                .collect();
            // A cheap necessary condition before Slurm's selection is asked (it tests the
            // layout): enough nodes with a free CPU, and as many free GPUs among them as the
            // job asks for in all.
            let free: Vec<&crate::state::Amount> = nodes.iter().map(|n| &view.nodes[n.0 as usize].free).filter(|f| f.cpus > 0).collect();
            let free_gpus: i64 = free.iter().map(|f| f.gpus.max(0)).sum();
            if free.len() >= job.request.nodes.max(1) as usize && free_gpus >= i64::from(job.request.total_gpus()) {
                self.settled.insert(job.id);
                self.decisions.push(Decision::SlurmStart(crate::decision::SlurmStart { job: job.id, nodes, route: alt.map(|a| a.route) }));
                return;
            }
        }
        let alt = job.eligible.first();
        let nodes: Vec<NodeIdx> = (0..view.nodes.len()).filter(|&i| self.in_route(alt, i)).map(|i| NodeIdx(i as u32)).collect();
        if !nodes.is_empty() {
            self.decisions.push(Decision::SlurmWillRun(crate::decision::SlurmWillRun { job: job.id, nodes, route: alt.map(|a| a.route) }));
        }
    }

    /// From here on, the window Slurm's will-run test gave `job` (if any) holds against the
    /// jobs tested after it, as sched/backfill's reservation for a job it cannot start holds
    /// against the lower-priority jobs it tests next, never against the ones before.
    fn hold_will_run_window(&mut self, view: &mut ClusterView, job: &PendingJob) {
        for (r, resv) in self.slurm.reservations.iter().enumerate() {
            if resv.held_for == Some(job.id) {
                for n in view.add_reservation_claim(r as u32, resv, self.slurm.node_sets) {
                    self.node_changed(n);
                }
            }
        }
    }

    /// The clock step for a job on a GPU type, given a slowdown it already suffers (sharing):
    /// the step with the least predicted energy whose total slowdown stays within the bound.
    fn choose_clock(&self, job: &PendingJob, family: Option<&str>, gpu_type: usize, view: &ClusterView, extra_slowdown: f64) -> ClockChoice {
        let Some(gt) = view.gpu_types.get(gpu_type) else { return (0, 0, 0.0, 1.0, 0.0) };
        let curves = self.pred.curves(&gt.name);
        let default_step = curves.map_or(0, |c| c.default_step());
        let class = family.and_then(crate::workloads::zeus_network);
        let at = |step: usize| self.pred.predict_class(&gt.name, gt.max_power_w, class, step);
        let default = at(default_step);
        let default_choice = (default_step, gt.default_clock_mhz, curves.and_then(|c| c.ladder.last()).map_or(gt.max_power_w, |s| s.power_limit_w), default.time_ratio, default.power_w);
        let Some(curves) = curves else { return default_choice };
        // A job without GPUs has no GPU clock to lower: it is never slowed (nor its limit
        // extended).
        if !self.cfg.clock_scaling || job.hints.policy == EnergyPolicy::Performance || job.request.gpus_per_node == 0 {
            return default_choice;
        }
        let mut bound = job.hints.max_slowdown.max(1.0);
        if self.congested() {
            // Jobs are waiting: every slowdown lengthens their waits, so only part of the
            // slowdown budget may be spent.
            bound = 1.0 + (bound - 1.0) * self.cfg.congested_slowdown_share;
        }
        if self.cfg.carbon_aware_clocks
            && let Some(rel) = self.relative_carbon() {
                // A clean grid: spend less of the slowdown budget (GreenFlow: work when clean).
                if rel < 1.0 {
                    bound = 1.0 + (bound - 1.0) * rel.max(0.0);
                }
            }
        let mut best = default_choice;
        let mut best_energy = default.time_ratio * default.power_w;
        for (step, s) in curves.ladder.iter().enumerate() {
            let p = at(step);
            if p.time_ratio * extra_slowdown > bound + 1e-9 {
                continue;
            }
            let e = p.time_ratio * p.power_w;
            if e < best_energy - 1e-9 {
                best_energy = e;
                let clock = step_clock_mhz(gt, s);
                best = (step, clock, s.power_limit_w, p.time_ratio, p.power_w);
            }
        }
        best
    }

    /// Try to start `job` now through the first route Slurm allows that has room; on success
    /// the placement is committed to the view.
    fn try_start(&mut self, view: &mut ClusterView, job: &'a PendingJob) -> bool {
        if job.eligible.is_empty() {
            return self.try_start_on(view, job, None);
        }
        for alt in &job.eligible {
            if alt.not_before_s > self.now_s + 1e-6 {
                continue;
            }
            if self.try_start_on(view, job, Some(alt)) {
                return true;
            }
        }
        false
    }

    fn try_start_on(&mut self, view: &mut ClusterView, job: &'a PendingJob, alt: Option<&'a crate::eligibility::Eligibility>) -> bool {
        let k = job.request.nodes.max(1) as usize;
        let g = job.request.gpus_per_node;
        let can_share = self.cfg.sharing
            && job.hints.share_allowed
            && job.hints.policy != EnergyPolicy::Performance
            && k == 1
            && g == 1;
        let exclusive_possible = self.max_free_gpus >= g;
        if !(exclusive_possible || can_share && self.any_shareable) {
            return false;
        }
        // Later jobs must see the claims of every blocked job before them.
        if !self.unreserved.is_empty() {
            self.materialize_reservations(view);
        }
        let need = Self::need(job);
        let end_s = self.now_s + self.extended_limit_s(job);
        let shape: Shape = (job.request.nodes, g, job.request.cpus_per_node, job.request.mem_mb_per_node, alt.map(|a| (a.node_set, a.reservation)));
        let known_failure = self.failed_shapes.iter().any(|(s, failed_end)| *s == shape && end_s >= *failed_end);
        let share_known_failure = self.failed_shares.contains(&(job.hints.tag.as_deref(), shape));
        if (!exclusive_possible || known_failure) && (!can_share || share_known_failure) {
            return false;
        }
        let family = self.family(job);
        // What history taught about this user's (and tag's) jobs: how much of the limit they
        // run, and how their measured power compares with the model's (model::history).
        let learnt = self.pred.runtime.predict(job.user, job.hints.tag.as_deref());
        let expected_runtime_s = job.time_limit_s * learnt.runtime_fraction;
        let mut candidates: Vec<Candidate> = Vec::new();
        if exclusive_possible && !known_failure {
            self.filtered_out.set(false);
            let nodes = self.exclusive_nodes(view, job, alt, &need, end_s, k);
            self.stats.nodes_scored += nodes.len();
            if nodes.len() >= k {
                // One clock choice per GPU type for this job.
                let mut clocks: Vec<(usize, ClockChoice)> = Vec::new();
                for &n in &nodes {
                    let gt = view.nodes[n].node.gpu_type;
                    if !clocks.iter().any(|(t, _)| *t == gt) {
                        let mut c = self.choose_clock(job, family.as_deref(), gt, view, 1.0);
                        c.4 *= learnt.power_ratio;
                        clocks.push((gt, c));
                    }
                    let clock = clocks.iter().find(|(t, _)| *t == gt).map(|(_, c)| *c);
                    if let Some(c) = clock.and_then(|clock| self.score_exclusive(view, job, n, expected_runtime_s, clock)) {
                        candidates.push(c);
                    }
                }
            } else {
                match self.failed_shapes.iter_mut().find(|(s, _)| *s == shape) {
                    _ if self.filtered_out.get() => {}
                    Some((_, failed_end)) => *failed_end = failed_end.min(end_s),
                    None => self.failed_shapes.push((shape, end_s)),
                }
            }
        }
        let prefer_sharing = job.hints.policy == EnergyPolicy::Efficiency || self.cfg.prefer_sharing;
        if can_share && (candidates.len() < k || prefer_sharing) {
            // Sharing skips nodes with claims, so whether a GPU can be shared does not depend
            // on the job's end: one failure per (tag, shape) holds for the rest of the cycle.
            if !share_known_failure {
                self.filtered_out.set(false);
                let shared = self.shared_candidates(view, job, alt, family.as_deref(), &need, end_s, expected_runtime_s);
                if shared.is_empty() && !self.filtered_out.get() {
                    self.failed_shares.insert((job.hints.tag.as_deref(), shape));
                }
                candidates.extend(shared);
            }
        }
        if candidates.len() < k {
            return false;
        }
        if self.cfg.sharing_first && k == 1 && candidates.iter().any(|c| !c.shares_with.is_empty()) {
            candidates.retain(|c| !c.shares_with.is_empty());
        }
        candidates.sort_by(|a, b| {
            a.score.total.total_cmp(&b.score.total).then(a.allocations[0].node.cmp(&b.allocations[0].node))
        });
        let chosen = if k == 1 {
            candidates.swap_remove(0)
        } else {
            // Multi-node jobs: the k best exclusive nodes, one clock for all.
            let mut parts: Vec<Candidate> = candidates.into_iter().filter(|c| c.shares_with.is_empty()).take(k).collect();
            if parts.len() < k {
                return false;
            }
            let mut merged = parts.remove(0);
            for p in parts {
                merged.allocations.extend(p.allocations);
                merged.wakes.extend(p.wakes);
                merged.energy_j += p.energy_j;
                merged.power_w += p.power_w;
                merged.ready_s = merged.ready_s.max(p.ready_s);
                merged.score.total += p.score.total;
            }
            merged
        };
        let mut chosen = chosen;
        if self.cfg.power_cap_w > 0.0 && !self.fit_power_cap(view, job, &mut chosen) {
            return false;
        }
        self.commit(view, job, chosen, alt.map(|a| a.route));
        self.max_free_gpus = view.max_free_gpus();
        self.any_shareable = view.shareable_nodes().next().is_some();
        true
    }

    /// The plugin's node filter for `job` (always true without one); notes a refusal.
    fn node_allowed(&self, job: &PendingJob, nv: &NodeView) -> bool {
        let Some(filter) = self.filter else { return true };
        let ok = filter(job, nv);
        if !ok {
            self.filtered_out.set(true);
        }
        ok
    }

    /// Feasible nodes for an exclusive placement, best-fitting first (or in node order when
    /// packing is off), at most `max_nodes_scored` (but at least `k`).
    fn exclusive_nodes(&self, view: &ClusterView, job: &PendingJob, alt: Option<&crate::eligibility::Eligibility>, need: &Amount, end_s: f64, k: usize) -> Vec<usize> {
        let limit = self.cfg.max_nodes_scored.max(k);
        let g = need.gpus.max(0) as u32;
        let own = alt.and_then(|a| a.reservation);
        let mut out = Vec::new();
        if self.cfg.packing {
            let mut suspended = Vec::new();
            for free in g..=view.max_free_gpus() {
                for n in view.nodes_with_free_gpus(free) {
                    let nv = &view.nodes[n as usize];
                    if !self.in_route(alt, n as usize) || !ranking::filter_for(nv, need, self.now_s, end_s, own) || !self.node_allowed(job, nv) {
                        continue;
                    }
                    if nv.node.power == PowerState::Suspended {
                        suspended.push(n as usize);
                    } else {
                        out.push(n as usize);
                    }
                    if out.len() >= limit {
                        return out;
                    }
                }
            }
            out.extend(suspended.into_iter().take(limit - out.len()));
        } else {
            for (i, nv) in view.nodes.iter().enumerate() {
                if nv.free.gpus >= need.gpus && self.in_route(alt, i) && ranking::filter_for(nv, need, self.now_s, end_s, own) && self.node_allowed(job, nv) {
                    out.push(i);
                    if out.len() >= limit {
                        break;
                    }
                }
            }
        }
        out
    }

    fn ready_time(&self, power: PowerState) -> (f64, bool) {
        match power {
            PowerState::On => (self.now_s, false),
            PowerState::Suspended => (self.now_s + self.pred.node_power.resume_s, true),
            PowerState::Resuming { ready_at_s } => (ready_at_s.max(self.now_s), false),
        }
    }

    fn score_exclusive(&self, view: &ClusterView, job: &PendingJob, n: usize, runtime_s: f64, clock: ClockChoice) -> Option<Candidate> {
        let nv = &view.nodes[n];
        let gt = view.gpu_types.get(nv.node.gpu_type)?;
        let g = job.request.gpus_per_node;
        let (gpus, aligned) = ranking::choose_gpus(nv, g, self.cfg.packing)?;
        let (step, clock_mhz, power_limit_w, slowdown, power_w) = clock;
        let np = &self.pred.node_power;
        let gpu_energy = g as f64 * power_w * runtime_s * slowdown;
        let wake = ranking::wake_energy_j(nv, g, runtime_s, np.base_w, gt.idle_power_w, np.resume_s);
        let reference = g as f64 * gt.max_power_w * runtime_s + (np.base_w + nv.node.gpus as f64 * gt.idle_power_w) * runtime_s + np.base_w * np.resume_s;
        let free_after = (nv.free.gpus.max(0) as u32).saturating_sub(g);
        let (ready_s, wakes) = self.ready_time(nv.node.power);
        let score = ranking::weigh(
            &self.cfg.scorers,
            ScoreBreakdown {
                energy: ranking::energy_cost(gpu_energy + wake, reference),
                interference: 0.0,
                fragmentation: ranking::fragmentation_cost(nv.node.gpus, free_after, aligned),
                carbon: ranking::carbon_cost(self.relative_carbon()),
                node_order: ranking::node_order_cost(n, view.nodes.len()),
                total: 0.0,
            },
        );
        let cpus = self.choose_cpus(job, nv, g);
        Some(Candidate {
            allocations: smallvec::smallvec![NodeAllocation { node: NodeIdx(n as u32), gpu_indices: gpus, cpus, mem_mb: job.request.mem_mb_per_node }],
            shares_with: Vec::new(),
            clock_step: step,
            clock_mhz,
            power_limit_w,
            slowdown,
            power_w: power_w * g as f64,
            energy_j: gpu_energy + wake,
            wakes: if wakes { vec![NodeIdx(n as u32)] } else { Vec::new() },
            ready_s,
            score,
            interference: None,
        })
    }

    /// CPUs for the job on `nv`: by measured sensitivity within the job's allowed range
    /// (Synergy), else its request. Extra CPUs come only from the node's spare ones: the
    /// GPU-proportional share of every GPU still free on the node stays available, so a job
    /// that gets more than its share never starves the next one.
    fn choose_cpus(&self, job: &PendingJob, nv: &crate::state::NodeView, gpus_taken: u32) -> u32 {
        let request = job.request.cpus_per_node;
        let (Some((lo, hi)), true, Some(model)) = (job.cpus_range, self.cfg.cpu_by_sensitivity, self.pred.sensitivity.as_ref()) else {
            return request;
        };
        let per_gpu = nv.node.cpus.checked_div(nv.node.gpus).unwrap_or(0);
        let free_gpus_after = (nv.free.gpus.max(0) as u32).saturating_sub(gpus_taken);
        let spare = (nv.free.cpus.max(0) as u32).saturating_sub(request).saturating_sub(free_gpus_after * per_gpu);
        let hi = hi.min(request + spare).max(request);
        let lo = lo.min(request);
        let family = self.family(job);
        model.choose_cpus(family.as_deref(), job.request.gpus_per_node, lo, hi, request).0
    }

    /// GPUs this (single-GPU) job could time-share: one per partner family, the lowest node
    /// first, on nodes without reservation claims, when both predicted slowdowns are acceptable.
    #[allow(clippy::too_many_arguments)]
    fn shared_candidates(&mut self, view: &ClusterView, job: &PendingJob, alt: Option<&crate::eligibility::Eligibility>, family: Option<&str>, need: &Amount, end_s: f64, runtime_s: f64) -> Vec<Candidate> {
        let share_need = Amount { gpus: 0, ..*need };
        let mut seen_families: Vec<Option<&str>> = Vec::new();
        let mut out = Vec::new();
        let mut looked = 0;
        for n in view.shareable_nodes() {
            if looked >= self.cfg.max_nodes_scored {
                break;
            }
            let nv = &view.nodes[n as usize];
            if !nv.claims.is_empty() || !self.in_route(alt, n as usize) || !ranking::filter(nv, &share_need, self.now_s, end_s) || !self.node_allowed(job, nv) {
                continue;
            }
            looked += 1;
            self.stats.nodes_scored += 1;
            let Some(gt) = view.gpu_types.get(nv.node.gpu_type) else { continue };
            for (gi, tenants) in nv.gpus.iter().enumerate() {
                let [tenant] = tenants.as_slice() else { continue };
                if !tenant.share_allowed || seen_families.contains(&tenant.family.as_deref()) {
                    continue;
                }
                // One look per partner family (the lowest node first), accepted or not.
                seen_families.push(tenant.family.as_deref());
                let p = self.pred.interference.predict_canonical(family, tenant.family.as_deref());
                // Allowing sharing accepts the site's interference bound; the job's own
                // `max_slowdown` bounds what its clock may add on top.
                let limit_new = self.cfg.sharing_max_slowdown;
                let limit_tenant = self.cfg.sharing_max_slowdown;
                if p.slowdown_a > limit_new || p.slowdown_b > limit_tenant {
                    continue;
                }
                let (step, clock_mhz, power_limit_w, clock_slowdown, power_w) = self.choose_clock(job, family, nv.node.gpu_type, view, p.slowdown_a);
                let slowdown = p.slowdown_a * clock_slowdown;
                // Energy attributable to this job: the pair's power over its (slower) run, in
                // proportion to its share of the pair's progress.
                let pair_power = power_w.max(tenant.power_w);
                let (na, nb) = (1.0 / p.slowdown_a, 1.0 / p.slowdown_b);
                let energy_j = pair_power * runtime_s * slowdown * na / (na + nb);
                let np = &self.pred.node_power;
                let reference = gt.max_power_w * runtime_s + (np.base_w + nv.node.gpus as f64 * gt.idle_power_w) * runtime_s + np.base_w * np.resume_s;
                let score = ranking::weigh(
                    &self.cfg.scorers,
                    ScoreBreakdown {
                        energy: ranking::energy_cost(energy_j, reference),
                        interference: ranking::interference_cost(p.slowdown_a, p.slowdown_b, self.cfg.sharing_max_slowdown),
                        fragmentation: ranking::fragmentation_cost(nv.node.gpus, nv.free.gpus.max(0) as u32, true),
                        carbon: ranking::carbon_cost(self.relative_carbon()),
                        node_order: ranking::node_order_cost(n as usize, view.nodes.len()),
                        total: 0.0,
                    },
                );
                let cpus = self.choose_cpus(job, nv, 0);
                out.push(Candidate {
                    allocations: smallvec::smallvec![NodeAllocation { node: NodeIdx(n), gpu_indices: vec![gi as u8], cpus, mem_mb: job.request.mem_mb_per_node }],
                    shares_with: vec![tenant.job],
                    clock_step: step,
                    clock_mhz,
                    power_limit_w,
                    slowdown,
                    power_w: pair_power - tenant.power_w,
                    energy_j,
                    wakes: Vec::new(),
                    ready_s: self.now_s,
                    score,
                    interference: Some(p.describe()),
                });
            }
        }
        out
    }

    /// Lower the clock until the cluster's predicted GPU power stays under the cap.
    fn fit_power_cap(&self, view: &ClusterView, job: &PendingJob, c: &mut Candidate) -> bool {
        let cap = self.cfg.power_cap_w;
        let gpus: f64 = c.allocations.iter().map(|a| a.gpu_indices.len() as f64).sum();
        let Some(node) = c.allocations.first().map(|a| &view.nodes[a.node.0 as usize]) else { return false };
        let Some(gt) = view.gpu_types.get(node.node.gpu_type) else { return false };
        let idle_w = gt.idle_power_w;
        let delta = |power_w: f64| if c.shares_with.is_empty() { power_w - idle_w * gpus } else { power_w };
        if self.gpu_power_now_w + delta(c.power_w) <= cap {
            return true;
        }
        let Some(curves) = self.pred.curves(&gt.name) else { return false };
        let family = self.family(job);
        for step in (0..c.clock_step).rev() {
            let p = self.pred.predict_clock(&gt.name, gt.max_power_w, family.as_deref(), step);
            let power = p.power_w * gpus;
            if self.gpu_power_now_w + delta(power) <= cap {
                let s = curves.ladder[step];
                let base_slowdown = c.slowdown / self.pred.predict_clock(&gt.name, gt.max_power_w, family.as_deref(), c.clock_step).time_ratio;
                c.clock_step = step;
                c.clock_mhz = step_clock_mhz(gt, &s);
                c.power_limit_w = s.power_limit_w;
                c.slowdown = base_slowdown * p.time_ratio;
                c.power_w = power;
                return true;
            }
        }
        false
    }

    fn commit(&mut self, view: &mut ClusterView, job: &PendingJob, c: Candidate, route: Option<u32>) {
        let slowed = c.slowdown > 1.0 + 1e-9 || !c.shares_with.is_empty();
        // Slurm's limit grows by the predicted slowdown only (what the planner's choice costs
        // the job, never the bound the user allowed). The planner's own view keeps the job's
        // resources until the end its slowdown bound allows: a job may run slower than
        // predicted, and a plan that assumed its resources free earlier would hold them for
        // nobody.
        let extended = self.cfg.extend_time_limits && slowed;
        let time_limit_s = if extended { job.time_limit_s * c.slowdown.max(1.0) } else { job.time_limit_s };
        let held_limit_s = if extended { job.time_limit_s * job.hints.max_slowdown.max(c.slowdown).max(1.0) } else { job.time_limit_s };
        let tenant = GpuTenant {
            job: job.id,
            share_allowed: job.hints.share_allowed && self.cfg.sharing && c.allocations.len() == 1 && job.request.gpus_per_node == 1,
            max_slowdown: job.hints.max_slowdown,
            family: self.family(job),
            clock_mhz: c.clock_mhz,
            power_w: c.power_w / job.request.total_gpus().max(1) as f64,
        };
        view.add_job(job.id, &c.allocations, c.ready_s + held_limit_s, &tenant);
        for a in &c.allocations {
            self.node_changed(a.node.0 as usize);
        }
        for w in &c.wakes {
            view.set_power(*w, PowerState::Resuming { ready_at_s: c.ready_s });
        }
        if self.cfg.power_cap_w > 0.0 {
            let idle = view.nodes[c.allocations[0].node.0 as usize].node.gpu_type;
            let idle_w = view.gpu_types.get(idle).map_or(0.0, |g| g.idle_power_w);
            self.gpu_power_now_w += if c.shares_with.is_empty() { c.power_w - idle_w * job.request.total_gpus() as f64 } else { c.power_w };
        }
        self.stats.jobs_started += 1;
        self.decisions.push(Decision::Start(StartDecision {
            job: job.id,
            policy: job.hints.policy,
            allocations: c.allocations.into_vec(),
            clock_mhz: c.clock_mhz,
            power_limit_w: c.power_limit_w,
            shares_with: c.shares_with,
            time_limit_s,
            predicted_slowdown: c.slowdown,
            predicted_power_w: c.power_w,
            predicted_energy_j: c.energy_j,
            wakes: c.wakes,
            score: c.score,
            route,
            prediction: self.pred.runtime.predict(job.user, job.hints.tag.as_deref()).source.to_string(),
            tag: job.hints.tag.clone(),
            interference: c.interference,
        }));
    }
}
