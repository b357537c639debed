//! The discrete-event simulation of one policy over one trace.
//!
//! The planner (`model::planner::plan`) sees a [`ClusterView`] and the pending queue, exactly
//! what a plugin gives it; the engine applies its decisions and then lets *measured* behaviour
//! ([`Truth`]) decide how fast jobs progress and how much power GPUs draw. Energy is integrated
//! exactly between events, split at every half hour so that carbon intensity and the power time
//! series are exact too.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Instant;

use model::carbon::CarbonSignal;
use model::config::PlannerConfig;
use model::decision::{Decision, StartDecision};
use model::elastic::{ElasticJob, Resize, RunningElastic, ScalingModel, allocate, choices, reallocate};
use model::interference::keep_sharing;
use model::planner::plan;
use model::power_directive::{Ceiling, Corrections, DecidedByNode, decide_by_node, extension_factor, running_powers_by_node};
use model::predictor::Predictor;
use model::state::ClusterView;
use model::types::{EnergyPolicy, GpuType, Hints, JobId, Node, NodeAllocation, NodeIdx, PendingJob, PowerState, Request, RunningJob, Snapshot};

use super::jobs::SimJob;
use super::metrics::{Accumulators, RunResult};
use super::policies::{HintRule, Setup};
use super::power_cap::{CapSample, CapStats, OVER_TOLERANCE_W, SimPowerCap, cap_at_w, change_times_s};
use super::rng::Rng;
use super::spec::ClusterSpec;
use super::truth::{JobTruth, Truth};

/// Early-stage observation of a shared run (EaCO): after this long, the measured slowdowns of
/// the pair are fed back into the interference history.
pub const EARLY_OBSERVATION_S: f64 = 600.0;
/// Slack on the slowdown bounds before the early check separates a pair.
pub const SHARING_TOLERANCE: f64 = 0.05;
/// What the planner records for a pair that failed to share a GPU (the pair is learnt as far
/// worse than any sharing bound).
pub const FAILED_PAIR_SLOWDOWN: f64 = 4.0;
/// Integration step boundary (s): carbon intensity and the power series change only here.
const SLICE_S: f64 = 1800.0;
/// Under a power cap, how soon the rule runs again when the truth's GPU power is still over the
/// cap after its ceilings changed (s): sched/energy's cycle (`[sched] interval_s`, default 5),
/// in which it measures the nodes again and corrects its prediction.
pub const DIRECTIVE_INTERVAL_S: f64 = 5.0;

#[derive(Debug, Clone, Copy, PartialEq)]
enum EventKind {
    Arrival(usize),
    Finish(usize, u64),
    Wake,
    SuspendCheck(usize, u64),
    NodeReady(usize),
    Observe(usize, usize),
    /// The time limit of the job's `n`-th start (a requeued job starts again) is reached.
    TimeLimit(usize, u32),
    /// A scheduler that plans on a timer (`Setup::cycle_interval_s`) runs its cycle.
    CycleTick,
    /// The power cap's file changes the cap.
    CapChange,
    /// The power directives run again (the GPU power was still over the cap).
    PowerTick,
}

#[derive(Debug, Clone, Copy)]
struct Event {
    at_s: f64,
    seq: u64,
    kind: EventKind,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    // Min-heap on (time, seq).
    fn cmp(&self, o: &Self) -> Ordering {
        o.at_s.total_cmp(&self.at_s).then(o.seq.cmp(&self.seq))
    }
}

#[derive(Debug, Clone)]
struct Running {
    allocations: Vec<NodeAllocation>,
    power_limit_w: f64,
    cpus_per_node: u32,
    start_s: f64,
    ready_s: f64,
    time_limit_s: f64,
    remaining_work_s: f64,
    rate: f64,
    /// Its speed without its ceiling (the same formula at its own power limit): `rate` when it
    /// has none.
    rate_own: f64,
    /// Work it would have done by now without its ceilings (s of work at full speed).
    ceiling_lost_work_s: f64,
    /// How much its time limit grew for its ceilings (s): without them it would not have had it.
    cap_extended_s: f64,
    /// Speed from the job's CPUs (1.0 at the proportional share), which its GPU power follows.
    cpu_speed: f64,
    /// Cores the job keeps busy now, on all its nodes ([`Truth::busy_cores`]), charged
    /// `cpu_w_per_busy_core` each.
    busy_cores: f64,
    last_s: f64,
    version: u64,
    partner: Option<usize>,
    /// GPUs the job runs on (all nodes), which may differ from its request (elastic policies).
    gpus: u32,
    /// Measured GPU energy so far (J): its share of each of its GPUs' power (split evenly
    /// between tenants), integrated up to `energy_last_s`. What a node's counters tell the
    /// plugin's learning about a finished job.
    energy_j: f64,
    energy_last_s: f64,
    /// The planner's predicted GPU power for the job when it started (W).
    predicted_power_w: f64,
    /// The power limit and clock the scheduler set (at the start, or a reclock); `power_limit_w`
    /// is this one, or the power cap's ceiling when one holds.
    own_power_limit_w: f64,
    own_clock_mhz: u32,
    /// The power cap's clock ceiling in force (`model::power_directive`).
    ceiling: Option<Ceiling>,
    /// It ran under a ceiling at some time.
    was_capped: bool,
}

/// The power cap of a capped run (`super::power_cap`): the cap in force, the planner config
/// planning under it, and the rule's memory of the worst-case slowdowns it extended limits for
/// (`model::power_directive::Decided::limit_bounds`).
struct CapRun {
    cap: SimPowerCap,
    static_w: f64,
    cap_w: f64,
    planner: PlannerConfig,
    limit_bounds: BTreeMap<JobId, f64>,
    stats: CapStats,
    tick_pending: bool,
    /// Running jobs under a ceiling now.
    ceilings_in_force: usize,
}

/// Synergy's CPU range of a job asking for `cpus_per_node` CPUs per node: half to three times
/// the request, within the node's `node_cpus`; `None` unless the policy and the job allow it.
fn cpus_range(allowed: bool, cpus_per_node: u32, node_cpus: u32) -> Option<(u32, u32)> {
    allowed.then(|| ((cpus_per_node / 2).max(1), (cpus_per_node * 3).min(node_cpus)))
}

/// The truth's CPU speed of a job on `allocations` with `cpus_per_node` CPUs on each node:
/// Synergy's profiles are read with one node's GPUs and CPUs (every node of a job has the same
/// shape), against the proportional share of that node's GPUs.
pub fn allocation_cpu_speed(truth: &Truth, jt: &JobTruth, allocations: &[NodeAllocation], cpus_per_node: u32, job_cpus_per_gpu: u32, limit_w: f64) -> f64 {
    let gpus_per_node = allocations.first().map_or(1, |a| a.gpu_indices.len() as u32).max(1);
    let proportional = (job_cpus_per_gpu * gpus_per_node).max(1);
    truth.cpu_speed(jt, gpus_per_node, cpus_per_node, proportional, limit_w)
}

/// Cores a job on `allocations` keeps busy on all its nodes at `speed` ([`Truth::busy_cores`]
/// per node).
pub fn allocation_busy_cores(truth: &Truth, jt: &JobTruth, allocations: &[NodeAllocation], speed: f64) -> f64 {
    allocations.iter().map(|a| truth.busy_cores(jt, (a.gpu_indices.len() as u32).max(1), a.cpus, speed)).sum()
}

pub struct Engine<'a> {
    setup: &'a Setup,
    spec: &'a ClusterSpec,
    truth: &'a Truth,
    jobs: &'a [SimJob],
    pred: Predictor,
    carbon: Option<CarbonSignal>,
    view: ClusterView,
    heap: BinaryHeap<Event>,
    seq: u64,
    now_s: f64,
    pending: Vec<PendingJob>,
    started: Vec<bool>,
    /// How often each job was started (a requeue starts it again); ties limit events to a start.
    start_count: Vec<u32>,
    wake_at: Vec<f64>,
    running: Vec<Option<Running>>,
    /// Jobs on each GPU of each node (at most two).
    tenants: Vec<Vec<Vec<usize>>>,
    gpu_power_w: Vec<Vec<f64>>,
    node_power: Vec<PowerState>,
    idle_epoch: Vec<u64>,
    /// Jobs that failed to share a GPU with a partner Gavel could not co-run: resubmitted
    /// without sharing.
    no_share: Vec<bool>,
    /// Measurement noise of early-stage observations.
    noise: Rng,
    /// The planner's scaling predictions, for elastic GPU counts.
    scaling: Option<ScalingModel>,
    /// Per job: its elastic shape (built on the first elastic cycle).
    elastic_jobs: Vec<(ElasticJob, usize)>,
    acc: Accumulators,
    /// Under a timer-driven scheduler: a cycle is already due at this time.
    tick_at_s: Option<f64>,
    /// This batch of events holds the due cycle tick.
    tick_now: bool,
    /// The cluster power cap, for a capped run.
    cap: Option<CapRun>,
}

impl<'a> Engine<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(setup: &'a Setup, spec: &'a ClusterSpec, truth: &'a Truth, jobs: &'a [SimJob], seed: u64, pred: Predictor, carbon: Option<CarbonSignal>, scaling: Option<ScalingModel>) -> Engine<'a> {
        let c = &spec.cluster;
        let gpu_type = GpuType {
            name: c.gpu_type.clone(),
            default_clock_mhz: spec.gpu.default_clock_mhz,
            min_clock_mhz: spec.gpu.min_clock_mhz,
            max_clock_mhz: spec.gpu.max_clock_mhz,
            idle_power_w: spec.gpu.idle_power_w,
            max_power_w: spec.gpu.max_power_w,
        };
        let nodes: Vec<Node> = (0..c.nodes)
            .map(|i| Node {
                name: format!("n{:04}", i + 1),
                gpu_type: 0,
                gpus: c.gpus_per_node,
                cpus: c.cpus_per_node,
                mem_mb: (c.mem_gb_per_node * 1024.0) as u64,
                power: PowerState::On,
                available: true,
            })
            .collect();
        let n = nodes.len();
        let g = c.gpus_per_node as usize;
        let mut pred = pred;
        pred.carbon = if setup.planner.carbon_deferral || setup.planner.carbon_aware_clocks || setup.planner.scorers.carbon > 0.0 { carbon.clone() } else { None };
        pred.node_power.base_w = spec.power.node_base_w;
        pred.node_power.suspended_w = spec.power.node_suspended_w;
        pred.node_power.resume_s = spec.power.resume_s;
        let mut e = Engine {
            setup,
            spec,
            truth,
            jobs,
            pred,
            carbon,
            view: ClusterView::new(vec![gpu_type], nodes),
            heap: BinaryHeap::new(),
            seq: 0,
            now_s: 0.0,
            pending: Vec::new(),
            started: vec![false; jobs.len()],
            start_count: vec![0; jobs.len()],
            wake_at: vec![f64::NAN; jobs.len()],
            running: vec![None; jobs.len()],
            tenants: vec![vec![Vec::new(); g]; n],
            gpu_power_w: vec![vec![spec.gpu.idle_power_w; g]; n],
            node_power: vec![PowerState::On; n],
            idle_epoch: vec![0; n],
            no_share: vec![false; jobs.len()],
            noise: Rng::derive(seed, 10),
            scaling: if setup.elastic.is_some() { scaling } else { None },
            elastic_jobs: Vec::new(),
            acc: Accumulators::new(n),
            tick_at_s: None,
            tick_now: false,
            cap: None,
        };
        e.acc.idle_w = spec.gpu.idle_power_w * (n * g) as f64;
        e.acc.base_w = spec.power.node_base_w * n as f64;
        for (i, j) in jobs.iter().enumerate() {
            e.push(j.submit_s, EventKind::Arrival(i));
        }
        if setup.power_saving {
            for node in 0..n {
                e.push(spec.power.suspend_after_idle_s, EventKind::SuspendCheck(node, 0));
            }
        }
        e
    }

    /// Run under a cluster power cap: `cap`'s file (if any), over the setup's static
    /// `power_cap_w`. Without either the run is uncapped (and unchanged). Under a cap, the
    /// planner plans new starts under the cap in force, and after every event the running
    /// jobs get the clock ceilings sched/energy gives them ([`Engine::power_directives`]).
    pub fn with_power_cap(mut self, cap: Option<&SimPowerCap>) -> Engine<'a> {
        let static_w = self.setup.planner.power_cap_w;
        if cap.is_none_or(|c| c.schedule.is_none()) && static_w <= 0.0 {
            return self;
        }
        let cap = cap.cloned().unwrap_or(SimPowerCap { schedule: None, epoch_unix_s: 0 });
        let cap_w = cap_at_w(&cap, static_w, 0.0);
        for t in change_times_s(&cap) {
            self.push(t, EventKind::CapChange);
        }
        let planner = PlannerConfig { power_cap_w: cap_w, ..self.setup.planner.clone() };
        self.cap = Some(CapRun { cap, static_w, cap_w, planner, limit_bounds: BTreeMap::new(), stats: CapStats::default(), tick_pending: false, ceilings_in_force: 0 });
        self
    }

    fn push(&mut self, at_s: f64, kind: EventKind) {
        self.seq += 1;
        self.heap.push(Event { at_s, seq: self.seq, kind });
    }

    /// Run to the end; `on_progress(done_jobs)` is called now and then.
    pub fn run(mut self, mut on_progress: impl FnMut(u64)) -> RunResult {
        let wall = Instant::now();
        let mut finished_reported = 0;
        while self.step() {
            if self.acc.finished - finished_reported >= 1000 {
                finished_reported = self.acc.finished;
                on_progress(finished_reported);
            }
        }
        on_progress(self.acc.finished);
        let carbon_used = self.carbon.is_some();
        let total_gpus = self.spec.cluster.nodes * self.spec.cluster.gpus_per_node;
        let cap = self.cap.take();
        let mut r = self.acc.finish(&self.setup.name, total_gpus, wall.elapsed().as_secs_f64(), carbon_used);
        if let Some(c) = cap {
            r.metrics.set_power_cap(&c.stats);
            r.power_cap_timeline = c.stats.timeline;
        }
        r
    }

    /// Handles the events of the next instant, then plans; `false` when no event is left.
    fn step(&mut self) -> bool {
        let Some(ev) = self.heap.pop() else { return false };
        // An outdated finish or time-limit event changes nothing; integrating up to it would
        // count idle power past the end of the replay.
        if self.stale(ev.kind, ev.at_s) {
            return true;
        }
        self.advance(ev.at_s);
        let mut replan = self.handle(ev.kind);
        while let Some(next) = self.heap.peek() {
            if next.at_s > self.now_s {
                break;
            }
            let Some(next) = self.heap.pop() else { break };
            replan |= self.handle(next.kind);
        }
        if replan && !self.pending.is_empty() {
            self.plan_or_wait_for_tick();
        }
        if replan && self.setup.elastic.is_some_and(|e| e.realloc) {
            self.reallocate_running();
        }
        if replan && self.cap.is_some() {
            self.power_directives();
        }
        self.tick_now = false;
        true
    }

    /// Plans now, as slurmctld's main scheduler does on every event (stock Slurm, and every
    /// policy by default); a scheduler with a timer (`cycle_interval_s`, as sched/energy's
    /// `[sched] interval_s`, which starts every job itself) plans at its next tick instead.
    fn plan_or_wait_for_tick(&mut self) {
        let interval_s = self.setup.cycle_interval_s;
        if interval_s <= 0.0 || self.tick_now {
            self.resize_pending();
            self.cycle();
            return;
        }
        if self.tick_at_s.is_none() {
            let next_s = ((self.now_s / interval_s).floor() + 1.0) * interval_s;
            self.tick_at_s = Some(next_s);
            self.push(next_s, EventKind::CycleTick);
        }
    }

    fn stale(&self, kind: EventKind, at_s: f64) -> bool {
        match kind {
            EventKind::Finish(i, version) => self.running[i].as_ref().is_none_or(|r| r.version != version),
            // A limit the power cap extended ends later: its earlier event is outdated.
            EventKind::TimeLimit(i, n) => self.start_count[i] != n || self.running[i].as_ref().is_none_or(|r| at_s < r.ready_s + r.time_limit_s),
            _ => false,
        }
    }

    /// Integrate power from `now_s` to `t_s`.
    fn advance(&mut self, t_s: f64) {
        while self.now_s < t_s {
            let slice_end = ((self.now_s / SLICE_S).floor() + 1.0) * SLICE_S;
            let until = slice_end.min(t_s);
            let dt = until - self.now_s;
            let g = self.carbon.as_ref().map_or(0.0, |c| c.intensity_at(self.now_s));
            self.acc.integrate(self.now_s, dt, g);
            if let Some(c) = self.cap.as_mut() {
                c.stats.integrate(c.cap_w, self.acc.active_w + self.acc.idle_w, dt);
            }
            self.now_s = until;
        }
    }

    fn handle(&mut self, kind: EventKind) -> bool {
        match kind {
            EventKind::Arrival(i) => {
                let pj = self.pending_job(i);
                let key = |p: &PendingJob| (std::cmp::Reverse(p.priority), p.submit_time_s.to_bits(), p.id);
                let at = self.pending.partition_point(|p| key(p) <= key(&pj));
                self.pending.insert(at, pj);
                true
            }
            EventKind::Finish(i, version) => {
                if self.running[i].as_ref().is_some_and(|r| r.version == version) {
                    self.finish(i);
                    true
                } else {
                    false
                }
            }
            EventKind::Wake => true,
            EventKind::CycleTick => {
                self.tick_at_s = None;
                self.tick_now = true;
                true
            }
            EventKind::CapChange => {
                let now_s = self.now_s;
                if let Some(c) = self.cap.as_mut() {
                    c.cap_w = cap_at_w(&c.cap, c.static_w, now_s);
                    c.planner.power_cap_w = c.cap_w;
                }
                true
            }
            EventKind::PowerTick => {
                if let Some(c) = self.cap.as_mut() {
                    c.tick_pending = false;
                }
                true
            }
            EventKind::TimeLimit(i, _) => {
                if self.stale(kind, self.now_s) {
                    return false;
                }
                self.settle(i);
                // A job whose last work ends at this very instant finished, it was not killed.
                if self.running[i].as_ref().is_some_and(|r| r.remaining_work_s <= 1e-6 * self.jobs[i].duration_s.max(1.0)) {
                    self.finish(i);
                } else {
                    self.kill(i);
                }
                true
            }
            EventKind::SuspendCheck(node, epoch) => {
                if self.idle_epoch[node] == epoch && self.view.nodes[node].is_idle() && self.node_power[node] == PowerState::On {
                    self.set_node_power(node, PowerState::Suspended);
                }
                false
            }
            EventKind::NodeReady(node) => {
                if matches!(self.node_power[node], PowerState::Resuming { .. }) {
                    self.set_node_power(node, PowerState::On);
                    if self.view.nodes[node].is_idle() {
                        self.schedule_suspend(node);
                    }
                }
                false
            }
            EventKind::Observe(a, b) => {
                let still = self.running[a].as_ref().is_some_and(|r| r.partner == Some(b));
                if !still {
                    return false;
                }
                // The first minutes of a shared run, measured (EaCO's early-stage observation)
                // as a profiler measures them: with noise, never the truth itself.
                let Some((na, nb)) = self.truth.pair(&self.jobs[a].truth, &self.jobs[b].truth) else { return false };
                let sd = self.spec.truth.observation_noise;
                let (na, nb) = (na * self.noise.lognormal(sd), nb * self.noise.lognormal(sd));
                let (ja, jb) = (&self.jobs[a], &self.jobs[b]);
                if let (Some(fa), Some(fb)) = (&ja.user_hints.tag, &jb.user_hints.tag) {
                    self.pred.interference.observe(fa, fb, 1.0 / na, 1.0 / nb);
                }
                let bound = self.setup.planner.sharing_max_slowdown;
                if !self.setup.early_separation || keep_sharing(1.0 / na, bound, 1.0 / nb, bound, SHARING_TOLERANCE) {
                    return false;
                }
                self.requeue(a);
                true
            }
        }
    }

    /// Take a job off its GPUs and put it back in the queue (`scontrol requeue`): its work so
    /// far is lost, its place in the queue is not.
    fn requeue(&mut self, i: usize) {
        let Some(r) = self.running[i].take() else { return };
        self.started[i] = false;
        self.acc.requeues += 1;
        self.vacate(i, &r);
        self.handle(EventKind::Arrival(i));
    }

    fn hints_for(&self, i: usize) -> Hints {
        let j = &self.jobs[i];
        let mut h = match &self.setup.hints {
            HintRule::Users => j.user_hints.clone(),
            HintRule::Fixed(h) => Hints { tag: j.user_hints.tag.clone(), ..h.clone() },
        };
        if self.no_share[i] {
            h.share_allowed = false;
        }
        if let (HintRule::Users, Some((balanced, efficiency))) = (&self.setup.hints, self.setup.user_slowdowns) {
            match h.policy {
                EnergyPolicy::Balanced => h.max_slowdown = balanced,
                EnergyPolicy::Efficiency => h.max_slowdown = efficiency,
                EnergyPolicy::Performance => {}
            }
        }
        h
    }

    fn pending_job(&self, i: usize) -> PendingJob {
        let j = &self.jobs[i];
        let cpus_range = cpus_range(self.setup.cpu_flexible && j.cpu_flexible && self.setup.planner.cpu_by_sensitivity, j.cpus_per_node, self.spec.cluster.cpus_per_node);
        PendingJob {
            id: j.id,
            user: j.user,
            priority: j.priority,
            submit_time_s: j.submit_s,
            request: Request { nodes: j.nodes, gpus_per_node: j.gpus_per_node, cpus_per_node: j.cpus_per_node, mem_mb_per_node: j.mem_mb_per_node },
            time_limit_s: j.time_limit_s,
            hints: self.hints_for(i),
            cpus_range,
            eligible: Vec::new(),
            placed_by_slurm: false,
            alternative: false,
            no_reservation: false,
            slurm_may_spread: false,
        }
    }

    /// PowerFlow / GreenFlow: choose every pending job's GPU count for this cycle
    /// (`model::elastic::allocate`) and rewrite its request accordingly (CPUs and memory in
    /// proportion; a job given fewer GPUs than it asked for gets its time limit stretched by the
    /// predicted slowdown, as the scheduler that shrank it would).
    fn resize_pending(&mut self) {
        let Some(el) = self.setup.elastic else { return };
        if !self.ensure_elastic_shapes() {
            return;
        }
        let free: u32 = self.view.nodes.iter().filter(|n| n.node.available).map(|n| n.free.gpus.max(0) as u32).sum();
        let weight = if el.carbon { self.pred.carbon.as_ref().map_or(1.0, |c| c.relative_intensity(self.now_s)) } else { 1.0 };
        let n = self.pending.len().min(self.setup.planner.max_jobs_tested);
        let mut batch = Vec::with_capacity(n);
        let mut requested = Vec::with_capacity(n);
        let mut runtime = Vec::with_capacity(n);
        for p in &self.pending[..n] {
            let i = p.id.0 as usize - 1;
            let (e, req) = &self.elastic_jobs[i];
            runtime.push(self.jobs[i].time_limit_s * self.pred.runtime.expected_fraction(self.jobs[i].user));
            batch.push(e);
            requested.push(*req);
        }
        let counts = allocate(&batch, &requested, &runtime, free, el.joules_per_jct_s, weight);
        for ((p, g), e) in self.pending[..n].iter_mut().zip(counts).zip(&batch) {
            let j = &self.jobs[p.id.0 as usize - 1];
            if j.nodes != 1 || g == 0 || g == p.request.gpus_per_node {
                continue;
            }
            // Predicted runtime at `g` over that at the request.
            let at = |gpus: u32| e.choices.iter().position(|c| *c == gpus).and_then(|k| e.speedup.get(k)).copied().unwrap_or(1.0);
            let stretch = (at(j.gpus_per_node) / at(g)).max(1.0);
            p.request.gpus_per_node = g;
            p.request.cpus_per_node = (j.cpus_per_node * g).div_ceil(j.gpus_per_node.max(1)).clamp(1, self.spec.cluster.cpus_per_node);
            p.request.mem_mb_per_node = j.mem_mb_per_node * g as u64 / j.gpus_per_node.max(1) as u64;
            p.time_limit_s = j.time_limit_s * stretch;
            // `union`: Synergy's range follows the rewritten request, as it does the original.
            p.cpus_range = cpus_range(p.cpus_range.is_some(), p.request.cpus_per_node, self.spec.cluster.cpus_per_node);
        }
    }

    /// Builds every job's elastic shape once; `false` without a scaling model.
    fn ensure_elastic_shapes(&mut self) -> bool {
        let Some(scaling) = self.scaling.as_ref() else { return false };
        if self.elastic_jobs.is_empty() {
            self.elastic_jobs = self.jobs.iter().map(|j| self.elastic_shape(j, scaling)).collect();
        }
        true
    }

    /// PowerFlow / GreenFlow: re-allocate running jobs (`model::elastic::reallocate` decides,
    /// this applies). Candidates are single-node jobs running alone on their GPUs; their
    /// predicted remaining runtime is the expected runtime the planner's history gives (as for
    /// pending jobs) less the work the job reports done (its progress, in seconds at its
    /// request). The first waiting job is the first pending one not deferred; a multi-node job
    /// waiting blocks any re-allocation (its start is not brought forward by one node's room,
    /// and growth would delay it). After GPUs are given back the queue is planned again, so the
    /// waiting job starts now.
    fn reallocate_running(&mut self) {
        let Some(el) = self.setup.elastic else { return };
        if !self.ensure_elastic_shapes() {
            return;
        }
        let now_s = self.now_s;
        // `wake_at` is NaN for a job never deferred.
        let deferred = |p: &PendingJob| self.wake_at[p.id.0 as usize - 1] > now_s;
        let waiting = self.pending.iter().find(|p| !deferred(p));
        let waiting_gpus = match waiting {
            Some(p) if p.request.nodes != 1 => return,
            Some(p) => Some(p.request.gpus_per_node),
            None => None,
        };
        let per_node = self.spec.cluster.gpus_per_node as usize;
        let free_by_node: Vec<u32> = (0..self.tenants.len())
            .map(|n| if self.view.nodes[n].node.available && self.node_power[n] == PowerState::On { (0..per_node).filter(|&g| self.tenants[n][g].is_empty()).count() as u32 } else { 0 })
            .collect();
        // The running jobs holding a GPU, in job order (as a scan of `running`, which holds a
        // slot per job of the trace, would find them: that scan at every event was most of a
        // replay's time).
        let mut on_gpus: Vec<usize> = self.tenants.iter().flatten().flatten().copied().collect();
        on_gpus.sort_unstable();
        on_gpus.dedup();
        let mut ids = Vec::new();
        let mut cands = Vec::new();
        for i in on_gpus {
            let Some(r) = self.running.get(i).and_then(Option::as_ref) else { continue };
            let job = &self.jobs[i];
            let (shape, requested) = &self.elastic_jobs[i];
            let Some(level) = shape.choices.iter().position(|g| *g == r.gpus) else { continue };
            if job.nodes != 1 || r.allocations.len() != 1 || r.partner.is_some() || shape.choices.len() < 2 {
                continue;
            }
            let expected_s = job.time_limit_s * self.pred.runtime.expected_fraction(job.user);
            let done_s = job.duration_s - r.remaining_work_s;
            ids.push(i);
            cands.push(RunningElastic { shape, level, requested: *requested, node: r.allocations[0].node.0 as usize, remaining_at_request_s: (expected_s - done_s).max(0.0) });
        }
        let weight = if el.carbon { self.pred.carbon.as_ref().map_or(1.0, |c| c.relative_intensity(now_s)) } else { 1.0 };
        let restart = self.spec.elastic.restart();
        let resizes = reallocate(&cands, &free_by_node, waiting_gpus, el.joules_per_jct_s, weight, restart);
        let shrunk = resizes.iter().any(|r| cands.get(r.job).is_some_and(|c| c.shape.choices.get(c.level).is_some_and(|g| r.gpus < *g)));
        let applied: Vec<(usize, u32)> = resizes.iter().filter_map(|Resize { job, gpus }| ids.get(*job).map(|i| (*i, *gpus))).collect();
        for (i, gpus) in applied {
            self.resize_running(i, gpus, restart);
        }
        if shrunk && !self.pending.is_empty() {
            self.resize_pending();
            self.cycle();
        }
    }

    /// Checkpoint job `i` and restart it on `gpus` GPUs of its node: fewer keeps the first of
    /// its GPUs, more adds free ones of the node (skipped when the node lacks the GPUs, CPUs or
    /// memory). CPUs and memory follow the GPU count in proportion. Its work done is kept (the
    /// remaining work carries over at the new speed); it makes no progress during the pause,
    /// which its GPUs are held and charged for, and its time limit grows by the pause (and, on
    /// fewer GPUs, its time left by the predicted slowdown).
    fn resize_running(&mut self, i: usize, gpus: u32, restart: model::elastic::RestartCost) {
        self.settle(i);
        self.settle_energy(i);
        let Some(r) = self.running[i].as_ref() else { return };
        let Some(a) = r.allocations.first().cloned() else { return };
        let node = a.node.0 as usize;
        let old = a.gpu_indices.len() as u32;
        if gpus == old || gpus == 0 {
            return;
        }
        let mut idx = a.gpu_indices.clone();
        idx.sort_unstable();
        if gpus < old {
            idx.truncate(gpus as usize);
        } else {
            let extra: Vec<u8> = (0..self.tenants[node].len() as u8).filter(|g| !idx.contains(g) && self.tenants[node][*g as usize].is_empty()).take((gpus - old) as usize).collect();
            if extra.len() < (gpus - old) as usize {
                return;
            }
            idx.extend(extra);
            idx.sort_unstable();
        }
        let cpus = (a.cpus * gpus).div_ceil(old.max(1)).clamp(1, self.spec.cluster.cpus_per_node);
        let mem_mb = a.mem_mb * gpus as u64 / old.max(1) as u64;
        let free = &self.view.nodes[node].free;
        if gpus > old && (free.cpus < (cpus as i64 - a.cpus as i64) || free.mem_mb < (mem_mb as i64 - a.mem_mb as i64)) {
            return;
        }
        let id = self.jobs[i].id;
        let Some(tenant) = a.gpu_indices.first().and_then(|g| self.view.nodes[node].gpus.get(*g as usize)).and_then(|t| t.iter().find(|t| t.job == id)).cloned() else { return };
        let pause_s = restart.pause_s(old, gpus);
        let new_alloc = NodeAllocation { node: a.node, gpu_indices: idx.clone(), cpus, mem_mb };
        // The time left grows by the pause, and on fewer GPUs by the predicted slowdown (as a
        // pending job started narrower gets its limit stretched).
        let at = |g: u32| self.elastic_jobs.get(i).and_then(|(e, _)| e.choices.iter().position(|c| *c == g).and_then(|k| e.speedup.get(k))).copied().unwrap_or(1.0).max(1e-9);
        let stretch = (at(old) / at(gpus)).max(1.0);
        let old_end_s = r.ready_s + r.time_limit_s;
        let end_s = self.now_s + pause_s + (old_end_s - self.now_s).max(0.0) * stretch;
        self.view.remove_job(id);
        self.view.add_job(id, std::slice::from_ref(&new_alloc), end_s, &tenant);
        for &g in a.gpu_indices.iter().filter(|g| !idx.contains(g)) {
            self.tenants[node][g as usize].retain(|t| *t != i);
        }
        for &g in idx.iter().filter(|g| !a.gpu_indices.contains(g)) {
            self.tenants[node][g as usize].push(i);
        }
        let now_s = self.now_s;
        if let Some(r) = self.running[i].as_mut() {
            r.allocations = vec![new_alloc];
            r.gpus = gpus;
            r.cpus_per_node = cpus;
            r.last_s = r.last_s.max(now_s) + pause_s;
            r.time_limit_s = end_s - r.ready_s;
        }
        self.push(end_s, EventKind::TimeLimit(i, self.start_count[i]));
        self.acc.reallocations += 1;
        self.acc.realloc_shrinks += (gpus < old) as u64;
        self.acc.realloc_pause_s += pause_s;
        self.refresh_rate(i);
        for g in a.gpu_indices.iter().chain(idx.iter()) {
            self.refresh_gpu(node, *g as usize);
        }
    }

    /// A job's GPU-count choices with the planner's predicted speedups and power per GPU, and
    /// the index of its request; `runtime_at_first_s` holds the runtime at the first choice per
    /// second at the request (the cycle scales it by the expected runtime).
    fn elastic_shape(&self, j: &SimJob, scaling: &ScalingModel) -> (ElasticJob, usize) {
        let per_node = self.spec.cluster.gpus_per_node;
        let gpu = &self.spec.cluster.gpu_type;
        let top = self.pred.curves(gpu).map_or(0, |c| c.ladder.len().saturating_sub(1));
        let host_w = self.spec.power.node_base_w / per_node.max(1) as f64 + self.spec.cluster.job_cpus_per_gpu as f64 * self.spec.power.cpu_w_per_busy_core;
        let family = Predictor::family(j.user_hints.tag.as_deref());
        let choices = choices(j.total_gpus(), per_node);
        let speedup: Vec<f64> = choices.iter().map(|g| scaling.speedup(family.as_deref(), *g)).collect();
        let power_w = self.pred.predict_clock(gpu, self.spec.gpu.max_power_w, family.as_deref(), top).power_w + host_w;
        let req = choices.iter().position(|g| *g == j.total_gpus()).unwrap_or(0);
        let first = scaling.speedup(family.as_deref(), j.total_gpus()) / speedup.first().copied().unwrap_or(1.0).max(1e-9);
        (ElasticJob { choices, runtime_at_first_s: first, speedup, power_per_gpu_w: power_w }, req)
    }

    fn cycle(&mut self) {
        let t0 = Instant::now();
        let cfg = self.cap.as_ref().map_or(&self.setup.planner, |c| &c.planner);
        let outcome = plan(&mut self.view, self.now_s, &self.pending, cfg, &self.pred);
        self.acc.cycles += 1;
        self.acc.cycle_time_s += t0.elapsed().as_secs_f64();
        let mut any_started = false;
        for d in outcome.decisions {
            match d {
                Decision::Start(s) => {
                    any_started = true;
                    self.start(s);
                }
                Decision::Defer(df) => {
                    let i = df.job.0 as usize - 1;
                    if self.wake_at[i] != df.until_s {
                        self.wake_at[i] = df.until_s;
                        self.push(df.until_s, EventKind::Wake);
                    }
                }
                Decision::Reserve(_) => {}
                // Every simulated job has a shape the planner expresses.
                Decision::SlurmStart(_) | Decision::SlurmWillRun(_) => {}
                Decision::Reclock(rc) => {
                    let i = rc.job.0 as usize - 1;
                    if let Some(r) = self.running[i].as_mut() {
                        r.own_power_limit_w = rc.power_limit_w;
                        r.own_clock_mhz = rc.clock_mhz;
                        r.power_limit_w = Self::limit_under(rc.power_limit_w, r.ceiling);
                    }
                    self.refresh_rate(i);
                    if let Some(p) = self.running[i].as_ref().and_then(|r| r.partner) {
                        self.refresh_rate(p);
                    }
                    self.refresh_job_gpus(i);
                    self.acc.reclocks += 1;
                }
            }
        }
        if any_started {
            let started = &self.started;
            self.pending.retain(|p| !started[p.id.0 as usize - 1]);
        }
    }

    /// A job's power limit under a clock ceiling: the ceiling's step limit when it is lower.
    fn limit_under(own_w: f64, ceiling: Option<Ceiling>) -> f64 {
        match ceiling {
            Some(c) if c.power_limit_w > 0.0 => c.power_limit_w.min(own_w),
            _ => own_w,
        }
    }

    /// What sched/energy's snapshot holds of the running jobs (for `model::power_directive`):
    /// each at the clock its scheduler set, until its (possibly extended) time limit.
    fn snapshot(&self) -> Snapshot {
        let running = self
            .running
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().map(|r| (i, r)))
            .map(|(i, r)| RunningJob {
                id: self.jobs[i].id,
                user: self.jobs[i].user,
                start_time_s: r.ready_s,
                end_time_s: r.ready_s + r.time_limit_s,
                allocations: r.allocations.clone(),
                clock_mhz: r.own_clock_mhz,
                hints: self.hints_for(i),
                shared: r.partner.is_some(),
            })
            .collect();
        Snapshot {
            now_s: self.now_s,
            gpu_types: self.view.gpu_types.clone(),
            nodes: self.view.nodes.iter().map(|n| n.node.clone()).collect(),
            running,
            pending: Vec::new(),
            node_sets: Vec::new(),
            reservations: Vec::new(),
        }
    }

    /// sched/energy's power directives (`slurm-sched-plugin/src/power_directives.rs`), through
    /// the same model code: the running jobs' ladders per node ([`running_powers_by_node`]),
    /// each node's measured GPU power (here the truth's, as the node's counters measure it)
    /// and each job's own GPUs' against their prediction for the ceilings in force
    /// ([`model::power_directive::corrections`]), the rule
    /// ([`decide_by_node`]), and the time limits of slowed jobs extended by their worst-case
    /// slowdown ([`extension_factor`] of `Decided::limit_bounds`). A ceiling takes effect at once: the job's power limit, speed and
    /// power change, and its end is rescheduled. No job is killed for the cap.
    fn power_directives(&mut self) {
        let Some(c) = self.cap.as_ref() else { return };
        let cap_w = c.cap_w;
        let gpu_w = self.acc.active_w + self.acc.idle_w;
        // With no ceiling in force and the measured power within the cap, the rule (whose
        // prediction the measured power corrects) sets none: it is not run, which keeps long
        // runs under a rarely binding cap as fast as uncapped ones.
        if c.limit_bounds.is_empty() && (cap_w <= 0.0 || gpu_w <= cap_w + OVER_TOLERANCE_W) && c.ceilings_in_force == 0 {
            let now_s = self.now_s;
            if let Some(c) = self.cap.as_mut() {
                c.stats.timeline.push(CapSample { t_s: now_s, cap_w, gpu_w, predicted_w: f64::NAN, ceilings: 0, unmet: false });
            }
            return;
        }
        let snap = self.snapshot();
        let bounds = self.cap.as_ref().map(|c| c.limit_bounds.clone()).unwrap_or_default();
        let powers = running_powers_by_node(&snap, &self.pred, &BTreeMap::new(), &bounds);
        // Each node's and each job's prediction for the state measured (each job at its
        // ceiling's step, else its own), against the node's measured GPU power and the job's own
        // GPUs' (a job that shares a GPU has no reading of its own, as on a real node); read
        // only under a cap, as the plugin does.
        let mut corrections = Corrections::default();
        if cap_w > 0.0 {
            let mut predicted_w = powers.base_w_by_node.clone();
            let mut predicted_job_w = BTreeMap::new();
            let mut measured_job_w = BTreeMap::new();
            for j in &powers.jobs {
                let Some(r) = self.running[j.job.0 as usize - 1].as_ref() else { continue };
                let step = r.ceiling.and_then(|c| j.steps.iter().position(|s| s.clock_mhz == c.clock_mhz)).unwrap_or(j.start_step);
                let job_w = j.steps.get(step).map_or(0.0, |s| s.power_w);
                for (n, share) in powers.job_nodes.get(&j.job).map_or(&[][..], Vec::as_slice) {
                    *predicted_w.entry(*n).or_default() += share * job_w;
                    predicted_job_w.insert((j.job, *n), share * job_w);
                }
                if r.partner.is_none() {
                    for a in &r.allocations {
                        let own_w: f64 = a.gpu_indices.iter().filter_map(|g| self.gpu_power_w.get(a.node.0 as usize)?.get(*g as usize)).sum();
                        measured_job_w.insert((j.job, a.node.0), own_w);
                    }
                }
            }
            let measured_w: BTreeMap<u32, f64> = self.gpu_power_w.iter().enumerate().map(|(n, gpus)| (n as u32, gpus.iter().sum())).collect();
            corrections = model::power_directive::corrections(&measured_w, &measured_job_w, &predicted_w, &predicted_job_w);
        }
        let DecidedByNode { decided, .. } = decide_by_node((cap_w > 0.0).then_some(cap_w), &powers, &corrections);
        let running: Vec<usize> = (0..self.running.len()).filter(|&i| self.running[i].is_some()).collect();
        let mut changes = 0;
        for &i in &running {
            let want = decided.ceilings.get(&self.jobs[i].id).copied().flatten();
            let Some(r) = self.running[i].as_mut() else { continue };
            if r.ceiling == want {
                continue;
            }
            let count_change = (want.is_some() as isize) - (r.ceiling.is_some() as isize);
            r.ceiling = want;
            r.was_capped |= want.is_some();
            if let Some(c) = self.cap.as_mut() {
                c.ceilings_in_force = c.ceilings_in_force.saturating_add_signed(count_change);
            }
            r.power_limit_w = Self::limit_under(r.own_power_limit_w, want);
            changes += 1;
            self.refresh_rate(i);
            if let Some(p) = self.running[i].as_ref().and_then(|r| r.partner) {
                self.refresh_rate(p);
            }
            self.refresh_job_gpus(i);
        }
        // Limits grow by the change of the worst-case slowdown only, once per change (as the
        // plugin's).
        let now_s = self.now_s;
        let mut extensions = 0;
        for &i in &running {
            let id = self.jobs[i].id;
            let factor = extension_factor(bounds.get(&id).copied().unwrap_or(1.0), decided.limit_bounds.get(&id).copied().unwrap_or(1.0));
            let Some(r) = self.running[i].as_mut() else { continue };
            let end_s = r.ready_s + r.time_limit_s;
            if factor > 1.0 && end_s > now_s {
                let new_end_s = now_s + (end_s - now_s) * factor;
                r.time_limit_s = new_end_s - r.ready_s;
                r.cap_extended_s += new_end_s - end_s;
                extensions += 1;
                let held_s = r.allocations.first().and_then(|a| self.view.nodes.get(a.node.0 as usize)).and_then(|n| n.releases.iter().find(|x| x.job == id)).map_or(new_end_s, |x| x.at_s);
                if new_end_s > held_s {
                    self.view.set_end(id, new_end_s);
                }
                self.push(new_end_s, EventKind::TimeLimit(i, self.start_count[i]));
            }
        }
        let over = cap_w > 0.0 && self.acc.active_w + self.acc.idle_w > cap_w + OVER_TOLERANCE_W;
        let Some(c) = self.cap.as_mut() else { return };
        c.limit_bounds = decided.limit_bounds.into_iter().filter(|(_, s)| *s > 1.0).collect();
        c.stats.ceiling_changes += changes;
        c.stats.limit_extensions += extensions;
        debug_assert_eq!(c.ceilings_in_force, self.running.iter().flatten().filter(|r| r.ceiling.is_some()).count(), "ceilings counted");
        c.stats.timeline.push(CapSample { t_s: now_s, cap_w, gpu_w: self.acc.active_w + self.acc.idle_w, predicted_w: decided.predicted_w, ceilings: c.ceilings_in_force as u32, unmet: decided.unmet });
        // Still over after a change: measure again next cycle (the prediction is corrected by
        // what the new ceilings draw). Without a change the same inputs decide the same.
        if over && changes > 0 && !c.tick_pending {
            c.tick_pending = true;
            self.push(now_s + DIRECTIVE_INTERVAL_S, EventKind::PowerTick);
        }
    }

    fn start(&mut self, s: StartDecision) {
        let i = s.job.0 as usize - 1;
        for w in &s.wakes {
            let node = w.0 as usize;
            let ready = self.now_s + self.spec.power.resume_s;
            self.set_node_power(node, PowerState::Resuming { ready_at_s: ready });
            self.push(ready, EventKind::NodeReady(node));
        }
        if let Some(other) = self.cannot_share_with(i, &s) {
            self.fail_colocation(i, other);
            return;
        }
        self.started[i] = true;
        let ready_s = s
            .allocations
            .iter()
            .map(|a| match self.node_power[a.node.0 as usize] {
                PowerState::Resuming { ready_at_s } => ready_at_s,
                _ => self.now_s,
            })
            .fold(self.now_s, f64::max);
        self.start_count[i] += 1;
        self.push(ready_s + s.time_limit_s, EventKind::TimeLimit(i, self.start_count[i]));
        let job = &self.jobs[i];
        let mut partner = None;
        for a in &s.allocations {
            let node = a.node.0 as usize;
            self.idle_epoch[node] += 1;
            for &g in &a.gpu_indices {
                for k in 0..self.tenants[node][g as usize].len() {
                    self.settle_energy(self.tenants[node][g as usize][k]);
                }
                let t = &mut self.tenants[node][g as usize];
                if let Some(&other) = t.first() {
                    partner = Some(other);
                }
                t.push(i);
            }
        }
        self.running[i] = Some(Running {
            allocations: s.allocations.clone(),
            power_limit_w: s.power_limit_w,
            cpus_per_node: s.allocations.first().map_or(job.cpus_per_node, |a| a.cpus),
            start_s: self.now_s,
            ready_s,
            time_limit_s: s.time_limit_s,
            remaining_work_s: job.duration_s,
            rate: 1.0,
            rate_own: 1.0,
            ceiling_lost_work_s: 0.0,
            cap_extended_s: 0.0,
            cpu_speed: 1.0,
            busy_cores: 0.0,
            last_s: ready_s,
            version: 0,
            partner,
            gpus: s.allocations.iter().map(|a| a.gpu_indices.len() as u32).sum(),
            energy_j: 0.0,
            energy_last_s: self.now_s,
            predicted_power_w: s.predicted_power_w,
            own_power_limit_w: s.power_limit_w,
            own_clock_mhz: s.clock_mhz,
            ceiling: None,
            was_capped: false,
        });
        let gpus_now: u32 = s.allocations.iter().map(|a| a.gpu_indices.len() as u32).sum();
        match gpus_now.cmp(&job.total_gpus()) {
            std::cmp::Ordering::Greater => self.acc.grown_starts += 1,
            std::cmp::Ordering::Less => self.acc.shrunk_starts += 1,
            std::cmp::Ordering::Equal => {}
        }
        // CPUs other than the request's (the elastic count's proportional share when resized).
        let gpus_first = s.allocations.first().map_or(job.gpus_per_node, |a| a.gpu_indices.len() as u32);
        let requested_cpus = if gpus_first == job.gpus_per_node { job.cpus_per_node } else { (job.cpus_per_node * gpus_first).div_ceil(job.gpus_per_node.max(1)).clamp(1, self.spec.cluster.cpus_per_node) };
        if s.allocations.first().is_some_and(|a| a.cpus != requested_cpus) {
            self.acc.cpu_resized_starts += 1;
        }
        if let Some(p) = partner {
            self.settle(p);
            if let Some(r) = self.running[p].as_mut() {
                r.partner = Some(i);
            }
            self.push(self.now_s + EARLY_OBSERVATION_S, EventKind::Observe(i, p));
            self.acc.shared_starts += 1;
        }
        self.acc.record_start(job, ready_s, s.clock_mhz, s.wakes.len());
        self.refresh_rate(i);
        if let Some(p) = partner {
            self.refresh_rate(p);
        }
        for a in &s.allocations {
            for &g in &a.gpu_indices {
                self.refresh_gpu(a.node.0 as usize, g as usize);
            }
        }
    }

    /// A tenant of one of the job's GPUs that Gavel could not run together with it.
    fn cannot_share_with(&self, i: usize, s: &StartDecision) -> Option<usize> {
        s.allocations.iter().flat_map(|a| a.gpu_indices.iter().map(move |g| (a.node.0 as usize, *g as usize))).find_map(|(node, g)| {
            self.tenants[node][g].iter().copied().find(|&t| self.truth.pair(&self.jobs[i].truth, &self.jobs[t].truth).is_none())
        })
    }

    /// The job started next to a partner it cannot run with (in Gavel's experiments the pair
    /// did not fit on one GPU): it fails at once and its user resubmits it without sharing. The
    /// planner learns the pair as one far past any sharing bound.
    fn fail_colocation(&mut self, i: usize, other: usize) {
        self.view.remove_job(self.jobs[i].id);
        self.acc.colocation_failures += 1;
        self.no_share[i] = true;
        if let (Some(fa), Some(fb)) = (&self.jobs[i].user_hints.tag, &self.jobs[other].user_hints.tag) {
            self.pred.interference.observe(fa, fb, FAILED_PAIR_SLOWDOWN, FAILED_PAIR_SLOWDOWN);
        }
        let hints = self.hints_for(i);
        if let Some(p) = self.pending.iter_mut().find(|p| p.id == self.jobs[i].id) {
            p.hints = hints;
        }
        // Let the next cycle place it (no event may come soon on a quiet cluster).
        self.push(self.now_s, EventKind::Wake);
    }

    /// Bring a running job's remaining work up to now.
    fn settle(&mut self, i: usize) {
        let now = self.now_s;
        if let Some(r) = self.running[i].as_mut()
            && now > r.last_s {
                r.remaining_work_s = (r.remaining_work_s - r.rate * (now - r.last_s)).max(0.0);
                r.ceiling_lost_work_s += (r.rate_own - r.rate).max(0.0) * (now - r.last_s);
                r.last_s = now;
            }
    }

    /// The measured speed of a job now (work seconds per second), and a new finish event.
    fn refresh_rate(&mut self, i: usize) {
        self.settle(i);
        let Some(r) = self.running[i].as_ref() else { return };
        let job = &self.jobs[i];
        let (limit_w, share) = match r.partner.and_then(|p| self.running[p].as_ref().map(|pr| (p, pr))) {
            // A pair that cannot share never starts (see `start`), so there is always a pair.
            Some((p, pr)) => (r.power_limit_w.max(pr.power_limit_w), self.truth.pair(&job.truth, &self.jobs[p].truth).map_or(1.0, |n| n.0)),
            None => (r.power_limit_w, 1.0),
        };
        let (time_ratio, _) = self.truth.alone(&job.truth, limit_w);
        let cpu = allocation_cpu_speed(self.truth, &job.truth, &r.allocations, r.cpus_per_node, self.spec.cluster.job_cpus_per_gpu, limit_w);
        // Work is counted in seconds at the requested GPU count: another count changes the
        // speed by the measured scaling.
        let scale = if r.gpus == job.total_gpus() { 1.0 } else { self.truth.speedup(&job.truth, r.gpus) / self.truth.speedup(&job.truth, job.total_gpus()) };
        let rate = (share * cpu * scale / time_ratio).max(1e-6);
        // The same without its ceiling (its own power limit), for the work a ceiling costs it.
        let rate_own = if r.ceiling.is_some() {
            let own_w = match r.partner.and_then(|p| self.running[p].as_ref()) {
                Some(pr) => r.own_power_limit_w.max(pr.power_limit_w),
                None => r.own_power_limit_w,
            };
            let cpu_own = allocation_cpu_speed(self.truth, &job.truth, &r.allocations, r.cpus_per_node, self.spec.cluster.job_cpus_per_gpu, own_w);
            (share * cpu_own * scale / self.truth.alone(&job.truth, own_w).0).max(1e-6)
        } else {
            rate
        };
        // Cores follow the job's progress per GPU (its GPU count's scaling aside).
        let busy_cores = allocation_busy_cores(self.truth, &job.truth, &r.allocations, share * cpu / time_ratio);
        self.acc.cpu_w += (busy_cores - r.busy_cores) * self.spec.power.cpu_w_per_busy_core;
        let finish_at = r.last_s.max(r.ready_s) + r.remaining_work_s / rate;
        let version = r.version + 1;
        let cpu_changed = self.running[i].as_ref().is_some_and(|r| r.cpu_speed != cpu);
        if let Some(r) = self.running[i].as_mut() {
            r.rate = rate;
            r.rate_own = rate_own;
            r.cpu_speed = cpu;
            r.busy_cores = busy_cores;
            r.version = version;
        }
        if cpu_changed {
            self.refresh_job_gpus(i);
        }
        self.push(finish_at, EventKind::Finish(i, version));
    }

    fn finish(&mut self, i: usize) {
        self.settle(i);
        self.settle_energy(i);
        let Some(r) = self.running[i].take() else { return };
        let job = &self.jobs[i];
        let end_s = self.now_s;
        let runtime = end_s - r.ready_s;
        self.learn(i, &r, runtime);
        self.acc.record_finish(job, r.start_s, r.ready_s, end_s, r.time_limit_s);
        self.vacate(i, &r);
    }

    /// Slurm's time limit: the job is killed with its work unfinished (state TIMEOUT). It is not
    /// requeued (Slurm does not), and it counts as killed; its JCT ends at the kill.
    fn kill(&mut self, i: usize) {
        self.settle_energy(i);
        let Some(r) = self.running[i].take() else { return };
        if let (Some(c), true) = (self.cap.as_mut(), r.was_capped) {
            c.stats.killed_after_ceiling += 1;
            // Without its ceilings it would have done its remaining work by now.
            // Without its ceilings it would have done the work they cost it, but its limit would
            // not have grown for them either: killed for the cap only if, at its own speed, it
            // would have finished within the limit it had without them.
            let left_without_cap_s = r.remaining_work_s - r.ceiling_lost_work_s + r.rate_own * r.cap_extended_s;
            if left_without_cap_s <= 1e-6 {
                c.stats.killed_for_cap += 1;
            }
        }
        let job = &self.jobs[i];
        let end_s = self.now_s;
        self.learn(i, &r, end_s - r.ready_s);
        self.acc.record_kill(job, r.ready_s, end_s, r.remaining_work_s);
        self.vacate(i, &r);
    }

    /// What the planner learns from a job that ended: the same observation, through the same
    /// model code ([`model::history`]), that sched/energy makes from the job's record (run time
    /// against its limit, measured GPU energy against the predicted power, per user and tag).
    fn learn(&mut self, i: usize, r: &Running, runtime_s: f64) {
        let job = &self.jobs[i];
        self.pred.runtime.observe_finished(&model::history::FinishedJob {
            user: job.user,
            tag: job.user_hints.tag.as_deref(),
            runtime_s,
            time_limit_s: job.time_limit_s,
            gpus: r.gpus,
            energy_j: Some(r.energy_j),
            predicted_power_w: (r.predicted_power_w > 0.0).then_some(r.predicted_power_w),
            clock_mhz: None,
        });
    }

    /// Integrates job `i`'s GPU power (its even share of each of its GPUs) up to now. Called
    /// before anything changes a GPU's power or tenants.
    fn settle_energy(&mut self, i: usize) {
        let Some(r) = self.running[i].as_ref() else { return };
        let dt = self.now_s - r.energy_last_s;
        if dt <= 0.0 {
            return;
        }
        let power_w: f64 = r
            .allocations
            .iter()
            .flat_map(|a| a.gpu_indices.iter().map(move |&g| (a.node.0 as usize, g as usize)))
            .map(|(node, g)| self.gpu_power_w[node][g] / self.tenants[node][g].len().max(1) as f64)
            .sum();
        if let Some(r) = self.running[i].as_mut() {
            r.energy_j += power_w * dt;
            r.energy_last_s = self.now_s;
        }
    }

    /// Take job `i` (already out of `running`) off its GPUs: the view forgets it, its GPUs'
    /// power changes, an emptied node starts its suspend timer, a co-tenant runs alone again.
    fn vacate(&mut self, i: usize, r: &Running) {
        self.view.remove_job(self.jobs[i].id);
        if let (Some(c), Some(_)) = (self.cap.as_mut(), r.ceiling) {
            c.ceilings_in_force = c.ceilings_in_force.saturating_sub(1);
        }
        self.acc.cpu_w -= r.busy_cores * self.spec.power.cpu_w_per_busy_core;
        for a in &r.allocations {
            let node = a.node.0 as usize;
            for &g in &a.gpu_indices {
                for k in 0..self.tenants[node][g as usize].len() {
                    self.settle_energy(self.tenants[node][g as usize][k]);
                }
                self.tenants[node][g as usize].retain(|t| *t != i);
                self.refresh_gpu(node, g as usize);
            }
            if self.view.nodes[node].is_idle() {
                self.idle_epoch[node] += 1;
                self.schedule_suspend(node);
            }
        }
        if let Some(p) = r.partner {
            if let Some(pr) = self.running[p].as_mut() {
                pr.partner = None;
            }
            self.refresh_rate(p);
            self.refresh_job_gpus(p);
        }
    }

    fn refresh_job_gpus(&mut self, i: usize) {
        let allocs = self.running[i].as_ref().map(|r| r.allocations.clone()).unwrap_or_default();
        for a in &allocs {
            for &g in &a.gpu_indices {
                self.refresh_gpu(a.node.0 as usize, g as usize);
            }
        }
    }

    fn schedule_suspend(&mut self, node: usize) {
        if self.setup.power_saving {
            let epoch = self.idle_epoch[node];
            self.push(self.now_s + self.spec.power.suspend_after_idle_s, EventKind::SuspendCheck(node, epoch));
        }
    }

    fn powered(state: PowerState) -> bool {
        !matches!(state, PowerState::Suspended)
    }

    fn set_node_power(&mut self, node: usize, state: PowerState) {
        let old = self.node_power[node];
        if Self::powered(old) != Self::powered(state) {
            let p = &self.spec.power;
            let (from, to) = if Self::powered(state) { (p.node_suspended_w, p.node_base_w) } else { (p.node_base_w, p.node_suspended_w) };
            self.acc.base_w += to - from;
        }
        self.node_power[node] = state;
        self.view.set_power(NodeIdx(node as u32), state);
        for g in 0..self.tenants[node].len() {
            self.refresh_gpu(node, g);
        }
    }

    /// Recompute the measured power of one GPU and move it between the accumulators.
    fn refresh_gpu(&mut self, node: usize, g: usize) {
        for k in 0..self.tenants[node][g].len() {
            self.settle_energy(self.tenants[node][g][k]);
        }
        let old = self.gpu_power_w[node][g];
        let was_busy = self.acc.gpu_busy[node * 64 + g];
        let tenants = &self.tenants[node][g];
        let (power, busy) = match tenants.as_slice() {
            [] => (if Self::powered(self.node_power[node]) { self.truth.idle_gpu_w } else { 0.0 }, false),
            [a] => {
                let (limit, speed) = self.running[*a].as_ref().map_or((0.0, 1.0), |r| (r.power_limit_w, r.cpu_speed));
                (self.truth.power_at_speed_w(self.truth.alone(&self.jobs[*a].truth, limit).1, speed, limit), true)
            }
            [a, b, ..] => {
                let (la, sa) = self.running[*a].as_ref().map_or((0.0, 1.0), |r| (r.power_limit_w, r.cpu_speed));
                let (lb, sb) = self.running[*b].as_ref().map_or((0.0, 1.0), |r| (r.power_limit_w, r.cpu_speed));
                let limit = la.max(lb);
                let (ja, jb) = (&self.jobs[*a].truth, &self.jobs[*b].truth);
                let p = (self.truth.alone(ja, limit).1, self.truth.alone(jb, limit).1);
                let n = self.truth.pair(ja, jb).unwrap_or((1.0, 1.0));
                (self.truth.shared_power_w(p, (n.0 * sa, n.1 * sb), limit), true)
            }
        };
        if was_busy {
            self.acc.active_w -= old;
            self.acc.busy_gpus -= 1.0;
        } else {
            self.acc.idle_w -= old;
        }
        if busy {
            self.acc.active_w += power;
            self.acc.busy_gpus += 1.0;
        } else {
            self.acc.idle_w += power;
        }
        self.acc.gpu_busy[node * 64 + g] = busy;
        self.gpu_power_w[node][g] = power;
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::sim::spec::Colocation;

    fn truth() -> Truth {
        let dir = std::env::var_os("SLURM_ENERGY_DATA").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")));
        Truth::load(&dir, "v100", 41.0, Colocation::Physical).expect("truth loads")
    }

    fn node(n: u32, gpus: u8, cpus: u32) -> NodeAllocation {
        NodeAllocation { node: NodeIdx(n), gpu_indices: (0..gpus).collect(), cpus, mem_mb: 0 }
    }

    #[test]
    fn a_multi_node_jobs_cpu_truth_is_read_per_node() {
        let truth = truth();
        let mut res18 = truth.assign(Some("ResNet-18 (batch size 32)"), &mut Rng::new(3));
        res18.cpu_gain = 1.0;
        // A 2 x 8-GPU job with 12 or 36 CPUs on each node runs as fast as the same job on one
        // node of that shape: per-node CPUs are never read against the total GPU count.
        for cpus in [12, 24, 36] {
            let one = allocation_cpu_speed(&truth, &res18, &[node(0, 8, cpus)], cpus, 3, 250.0);
            let two = allocation_cpu_speed(&truth, &res18, &[node(0, 8, cpus), node(1, 8, cpus)], cpus, 3, 250.0);
            assert!((one - two).abs() < 1e-12, "{cpus} CPUs per node: {two} on 2 nodes, {one} on 1");
            let busy_one = allocation_busy_cores(&truth, &res18, &[node(0, 8, cpus)], one);
            let busy_two = allocation_busy_cores(&truth, &res18, &[node(0, 8, cpus), node(1, 8, cpus)], two);
            assert!((busy_two - 2.0 * busy_one).abs() < 1e-9, "{busy_two} vs 2 x {busy_one}");
        }
        // At the proportional share the job runs at 1.0 on any number of nodes.
        assert_eq!(allocation_cpu_speed(&truth, &res18, &[node(0, 8, 24), node(1, 8, 24)], 24, 3, 250.0), 1.0);
    }

    /// One node of 8 GPUs, a 10-hour and a 1-hour job of 4 GPUs each: under `powerflow` (a
    /// price high enough to buy any speedup) the long job grows onto the GPUs the short one
    /// leaves, by checkpoint and restart: its work so far is kept, it pauses for the restart
    /// and then runs at the truth's speed on 8 GPUs to its end. Without re-allocation it stays
    /// on 4.
    #[test]
    fn a_running_job_grown_by_reallocation_keeps_its_work_and_pauses_for_the_restart() {
        use crate::sim::Workload;
        use crate::sim::policies::{Policy, Setup};
        let dir = tempfile::tempdir().expect("tempdir");
        let trace = dir.path().join("two.csv");
        std::fs::write(&trace, "submit_time_s,duration_s,num_gpus\n0,36000,4\n0,3600,4\n").expect("trace written");
        let data = std::env::var_os("SLURM_ENERGY_DATA").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")));
        let mut spec = ClusterSpec::load(None).expect("default spec");
        spec.cluster.nodes = 1;
        let w = Workload::load(spec, &data, &trace, None, None, 1).expect("workload");
        let mut setup = Setup::for_policy(Policy::Powerflow, &w.spec).expect("powerflow");
        if let Some(e) = setup.elastic.as_mut() {
            e.joules_per_jct_s = 1e9;
        }
        let engine = |setup| Engine::new(setup, &w.spec, &w.truth, &w.prepared.jobs, 1, w.predictor.clone(), w.carbon.clone(), w.scaling.clone());
        let mut e = engine(&setup);
        let long = w.prepared.jobs.iter().position(|j| j.duration_s > 10_000.0).expect("the long job");
        let (before, after, at_s) = loop {
            let was = e.running[long].clone();
            assert!(e.step(), "the replay ended before any re-allocation");
            if e.acc.reallocations > 0 {
                break (was, e.running[long].clone(), e.now_s);
            }
        };
        let (b, a) = (before.expect("running before"), after.expect("running after"));
        assert_eq!((b.gpus, a.gpus), (4, 8), "grown from its request onto the short job's GPUs");
        let job = &w.prepared.jobs[long];
        // Work done is kept: what was left at the restart is what is left after it.
        let left_s = b.remaining_work_s - b.rate * (at_s - b.last_s);
        assert!((a.remaining_work_s - left_s).abs() < 1e-6 * job.duration_s, "{} left after, {left_s} before", a.remaining_work_s);
        assert!(left_s > 0.5 * job.duration_s && left_s < job.duration_s);
        // It pauses for the restart, then runs at the truth's speed on 8 GPUs (same clock).
        let pause_s = w.spec.elastic.restart().pause_s(4, 8);
        assert!(pause_s > 0.0 && (a.last_s - (at_s + pause_s)).abs() < 1e-9);
        let ratio = w.truth.speedup(&job.truth, 8) / w.truth.speedup(&job.truth, 4);
        assert!(ratio > 1.0 && (a.rate / b.rate - ratio).abs() < 1e-9, "{} vs {ratio}", a.rate / b.rate);
        // And ends when that work is done, not killed.
        let r = e.run(|_| {});
        assert_eq!((r.metrics.jobs, r.metrics.killed_at_time_limit, r.metrics.reallocations), (2, 0, 1));
        let end_s = r.jobs.iter().find(|x| x.job == job.id.0).expect("long job finished").end_s;
        assert!((end_s - (at_s + pause_s + left_s / a.rate)).abs() < 1e-6, "{end_s}");
        // Without re-allocation the long job stays on 4 GPUs and ends later.
        let mut fixed = setup.clone();
        crate::sim::policies::without_realloc(&mut fixed);
        let r0 = engine(&fixed).run(|_| {});
        assert_eq!((r0.metrics.jobs, r0.metrics.reallocations), (2, 0));
        assert!(r0.jobs.iter().find(|x| x.job == job.id.0).expect("finished").end_s > end_s + 600.0);
    }
}
