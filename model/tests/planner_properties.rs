//! Property tests of the planner's promises on random clusters and queues:
//! - it never hands out more GPUs, CPUs or memory than a node has (a GPU holds at most two jobs,
//!   and only jobs that allow sharing share);
//! - no started job delays a reservation made in the same cycle;
//! - a job that denies sharing never shares;
//! - the same input gives the same decisions;
//! - a start respects the job's limits from the snapshot: only nodes its partition (eligibility
//!   route) allows, none that is unavailable, not before the route allows, a time limit no
//!   shorter than the user's and stretched by no more than the predicted slowdown.

use std::sync::OnceLock;

use model::config::PlannerConfig;
use model::decision::{Decision, PlanOutcome};
use model::planner::plan_snapshot;
use model::predictor::Predictor;
use model::types::*;
use proptest::prelude::*;

fn predictor() -> &'static Predictor {
    static P: OnceLock<Predictor> = OnceLock::new();
    P.get_or_init(|| Predictor::from_data_dir(&model::data::default_data_dir(), "v100").expect("reference data"))
}

const GPUS: u32 = 8;
const CPUS: u32 = 32;
const MEM_MB: u64 = 256 * 1024;
const FAMILIES: [&str; 4] = ["ResNet-18", "Transformer", "LM", "A3C"];

#[derive(Debug, Clone)]
struct RunSpec {
    gpus: u32,
    share: bool,
    end_s: f64,
    family: usize,
}

#[derive(Debug, Clone)]
struct JobSpec {
    nodes: u32,
    gpus: u32,
    limit_s: f64,
    policy: u8,
    share: bool,
    family: usize,
}

fn run_spec() -> impl Strategy<Value = RunSpec> {
    (prop::sample::select(vec![1u32, 1, 1, 2, 4, 8]), any::<bool>(), 100.0f64..20_000.0, 0usize..FAMILIES.len())
        .prop_map(|(gpus, share, end_s, family)| RunSpec { gpus, share, end_s, family })
}

fn job_spec() -> impl Strategy<Value = JobSpec> {
    (
        prop::sample::select(vec![1u32, 1, 1, 1, 2]),
        prop::sample::select(vec![1u32, 1, 1, 2, 4, 8]),
        600.0f64..30_000.0,
        0u8..3,
        any::<bool>(),
        0usize..FAMILIES.len(),
    )
        .prop_map(|(nodes, gpus, limit_s, policy, share, family)| JobSpec { nodes, gpus, limit_s, policy, share, family })
}

fn hints(policy: u8, share: bool, family: usize) -> Hints {
    let policy = match policy {
        0 => EnergyPolicy::Performance,
        1 => EnergyPolicy::Balanced,
        _ => EnergyPolicy::Efficiency,
    };
    Hints { policy, max_slowdown: if policy == EnergyPolicy::Efficiency { 1.25 } else { 1.05 }, share_allowed: share, defer_max_s: 0.0, tag: Some(FAMILIES[family].into()) }
}

/// A consistent snapshot: running jobs are packed first-fit onto nodes (whole GPUs).
fn snapshot(nodes: usize, runs: &[RunSpec], jobs: &[JobSpec]) -> Snapshot {
    let mut free: Vec<Vec<bool>> = vec![vec![true; GPUS as usize]; nodes];
    let mut running = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let Some(n) = free.iter().position(|f| f.iter().filter(|x| **x).count() as u32 >= r.gpus) else { continue };
        let gpus: Vec<u8> = free[n].iter().enumerate().filter(|(_, f)| **f).map(|(g, _)| g as u8).take(r.gpus as usize).collect();
        for g in &gpus {
            free[n][*g as usize] = false;
        }
        running.push(RunningJob {
            id: JobId(1000 + i as u32),
            user: 1,
            start_time_s: 0.0,
            end_time_s: r.end_s,
            allocations: vec![NodeAllocation { node: NodeIdx(n as u32), gpu_indices: gpus, cpus: 3 * r.gpus, mem_mb: 16 * 1024 * r.gpus as u64 }],
            clock_mhz: 1530,
            hints: hints(1, r.share && r.gpus == 1, r.family),
            shared: r.share && r.gpus == 1,
        });
    }
    let pending = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| PendingJob {
            id: JobId(1 + i as u32),
            user: 1,
            priority: 1000 - i as u32,
            submit_time_s: i as f64,
            request: Request { nodes: j.nodes, gpus_per_node: j.gpus, cpus_per_node: 3 * j.gpus, mem_mb_per_node: 16 * 1024 * j.gpus as u64 },
            time_limit_s: j.limit_s,
            hints: hints(j.policy, j.share, j.family),
            cpus_range: None,
            eligible: Vec::new(),
            placed_by_slurm: false,
            alternative: false,
            no_reservation: false,
            slurm_may_spread: false,
        })
        .collect();
    Snapshot {
        now_s: 0.0,
        node_sets: Vec::new(),
        reservations: Vec::new(),
        gpu_types: vec![GpuType { name: "v100".into(), default_clock_mhz: 1530, min_clock_mhz: 135, max_clock_mhz: 1530, idle_power_w: 41.0, max_power_w: 250.0 }],
        nodes: (0..nodes)
            .map(|i| Node { name: format!("n{i}"), gpu_type: 0, gpus: GPUS, cpus: CPUS, mem_mb: MEM_MB, power: PowerState::On, available: true })
            .collect(),
        running,
        pending,
    }
}

/// Per node: tenants per GPU (with their sharing consent), CPUs and memory used.
struct Usage {
    gpu_tenants: Vec<Vec<Vec<(JobId, bool)>>>,
    cpus: Vec<u32>,
    mem_mb: Vec<u64>,
}

fn usage_after(s: &Snapshot, out: &PlanOutcome) -> Usage {
    let n = s.nodes.len();
    let mut u = Usage { gpu_tenants: vec![vec![Vec::new(); GPUS as usize]; n], cpus: vec![0; n], mem_mb: vec![0; n] };
    let mut add = |job: JobId, share: bool, allocs: &[NodeAllocation]| {
        for a in allocs {
            let node = a.node.0 as usize;
            u.cpus[node] += a.cpus;
            u.mem_mb[node] += a.mem_mb;
            for g in &a.gpu_indices {
                u.gpu_tenants[node][*g as usize].push((job, share));
            }
        }
    };
    for r in &s.running {
        add(r.id, r.hints.share_allowed, &r.allocations);
    }
    for st in out.starts() {
        let share = s.pending.iter().find(|p| p.id == st.job).is_some_and(|p| p.hints.share_allowed);
        add(st.job, share, &st.allocations);
    }
    u
}

fn config(depth: usize) -> PlannerConfig {
    PlannerConfig { reservation_depth: depth, ..PlannerConfig::default() }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    #[test]
    fn never_over_allocates_and_never_shares_a_deny_job(
        nodes in 1usize..6,
        runs in prop::collection::vec(run_spec(), 0..30),
        jobs in prop::collection::vec(job_spec(), 1..40),
        depth in 1usize..4,
    ) {
        let s = snapshot(nodes, &runs, &jobs);
        let out = plan_snapshot(&s, &config(depth), predictor());
        let u = usage_after(&s, &out);
        for node in 0..nodes {
            prop_assert!(u.cpus[node] <= CPUS, "node {node} CPUs {} > {CPUS}", u.cpus[node]);
            prop_assert!(u.mem_mb[node] <= MEM_MB, "node {node} memory over");
            for (g, tenants) in u.gpu_tenants[node].iter().enumerate() {
                prop_assert!(tenants.len() <= 2, "GPU {node}/{g} has {} jobs", tenants.len());
                if tenants.len() == 2 {
                    prop_assert!(tenants.iter().all(|(_, share)| *share), "GPU {node}/{g} shared by a job that denies it: {tenants:?}");
                }
            }
        }
        for st in out.starts() {
            let p = s.pending.iter().find(|p| p.id == st.job).expect("started job was pending");
            prop_assert_eq!(st.allocations.len() as u32, p.request.nodes.max(1));
            for a in &st.allocations {
                prop_assert_eq!(a.gpu_indices.len() as u32, p.request.gpus_per_node);
            }
            if !p.hints.share_allowed {
                prop_assert!(st.shares_with.is_empty());
            }
        }
    }

    #[test]
    fn no_start_delays_a_reservation(
        nodes in 1usize..5,
        runs in prop::collection::vec(run_spec(), 5..30),
        jobs in prop::collection::vec(job_spec(), 2..40),
        depth in 1usize..4,
    ) {
        let s = snapshot(nodes, &runs, &jobs);
        let out = plan_snapshot(&s, &config(depth), predictor());
        let reservations: Vec<_> = out.reservations().cloned().collect();
        for r in &reservations {
            let job = s.pending.iter().find(|p| p.id == r.job).expect("reserved job is pending");
            let rank = s.pending.iter().position(|p| p.id == r.job).unwrap_or(0);
            // Every earlier reservation that is still holding a reserved node at r.start_s.
            for node in &r.nodes {
                let n = node.0 as usize;
                // GPUs free at the reservation's start: node total minus what is still running
                // then (by time limit), minus jobs started now that end later, minus earlier
                // reservations active at that moment.
                let mut used = 0i64;
                for run in &s.running {
                    if run.end_time_s > r.start_s {
                        used += run.allocations.iter().filter(|a| a.node.0 as usize == n).map(|a| a.gpu_indices.len() as i64).sum::<i64>();
                    }
                }
                for st in out.starts() {
                    if st.shares_with.is_empty() && st.time_limit_s > r.start_s {
                        used += st.allocations.iter().filter(|a| a.node.0 as usize == n).map(|a| a.gpu_indices.len() as i64).sum::<i64>();
                    }
                }
                for other in &reservations {
                    let other_rank = s.pending.iter().position(|p| p.id == other.job).unwrap_or(0);
                    if other_rank < rank && other.nodes.contains(node) {
                        let other_job = s.pending.iter().find(|p| p.id == other.job).expect("pending");
                        let stretch = if other_job.hints.policy == EnergyPolicy::Performance { 1.0 } else { other_job.hints.max_slowdown };
                        let other_end = other.start_s + other_job.time_limit_s * stretch;
                        if other.start_s <= r.start_s && r.start_s < other_end {
                            used += other_job.request.gpus_per_node as i64;
                        }
                    }
                }
                prop_assert!(
                    GPUS as i64 - used >= job.request.gpus_per_node as i64,
                    "reservation of job {} on node {n} at {} lacks GPUs: used {used}",
                    r.job, r.start_s
                );
            }
        }
    }

    #[test]
    fn same_input_same_decisions(
        nodes in 1usize..5,
        runs in prop::collection::vec(run_spec(), 0..20),
        jobs in prop::collection::vec(job_spec(), 1..30),
    ) {
        let s = snapshot(nodes, &runs, &jobs);
        let a = plan_snapshot(&s, &PlannerConfig::default(), predictor());
        let b = plan_snapshot(&s, &PlannerConfig::default(), predictor());
        prop_assert_eq!(a, b);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn starts_respect_the_limits_in_the_snapshot(
        nodes in 2usize..6,
        runs in prop::collection::vec(run_spec(), 0..20),
        jobs in prop::collection::vec(job_spec(), 1..30),
        // Per job: which nodes its partition allows (bit i = node i), and whether that route
        // opens only later (a reservation or maintenance window ahead).
        partitions in prop::collection::vec((1u8..=u8::MAX, prop::bool::weighted(0.2)), 30),
        unavailable in 0u8..=u8::MAX,
    ) {
        let mut s = snapshot(nodes, &runs, &jobs);
        for (i, n) in s.nodes.iter_mut().enumerate() {
            n.available = unavailable & (1 << i) == 0;
        }
        let mut sets = model::eligibility::NodeSetInterner::default();
        for (j, (mask, later)) in s.pending.iter_mut().zip(&partitions) {
            let mut set = model::eligibility::NodeSet::new();
            (0..nodes).filter(|i| mask & (1 << i) != 0).for_each(|i| set.insert(i));
            j.eligible = vec![model::eligibility::Eligibility { node_set: sets.intern(set), reservation: None, not_before_s: if *later { 5000.0 } else { 0.0 }, route: j.id.0 }];
        }
        s.node_sets = sets.into_sets();
        let out = plan_snapshot(&s, &PlannerConfig::default(), predictor());
        for st in out.starts() {
            let p = s.pending.iter().find(|p| p.id == st.job).expect("started job was pending");
            let e = &p.eligible[0];
            prop_assert_eq!(st.route, Some(e.route));
            prop_assert!(e.not_before_s <= s.now_s, "job {} started before its route opens", p.id.0);
            for a in &st.allocations {
                let n = a.node.0 as usize;
                prop_assert!(s.node_sets[e.node_set as usize].contains(n), "job {} on node {n} outside its partition", p.id.0);
                prop_assert!(s.nodes[n].available, "job {} on unavailable node {n}", p.id.0);
            }
            prop_assert!(st.time_limit_s >= p.time_limit_s, "job {}: limit {} < the user's {}", p.id.0, st.time_limit_s, p.time_limit_s);
            prop_assert!(
                st.time_limit_s <= p.time_limit_s * st.predicted_slowdown.max(1.0) * (1.0 + 1e-9),
                "job {}: limit {} stretched past the predicted slowdown {}", p.id.0, st.time_limit_s, st.predicted_slowdown
            );
            if st.shares_with.is_empty() {
                prop_assert!(st.predicted_slowdown <= p.hints.max_slowdown + 1e-9, "job {}: slowdown {} over its bound {}", p.id.0, st.predicted_slowdown, p.hints.max_slowdown);
            }
        }
    }
}

#[test]
fn reservation_decisions_exist_in_a_full_cluster() {
    // Sanity for the properties above: they must see reservations to mean anything.
    let runs: Vec<RunSpec> = (0..8).map(|i| RunSpec { gpus: 8, share: false, end_s: 1000.0 + i as f64, family: 0 }).collect();
    let jobs = vec![JobSpec { nodes: 1, gpus: 8, limit_s: 3600.0, policy: 1, share: false, family: 0 }];
    let s = snapshot(2, &runs, &jobs);
    let out = plan_snapshot(&s, &config(1), predictor());
    assert!(out.decisions.iter().any(|d| matches!(d, Decision::Reserve(_))), "{out:?}");
}

#[test]
fn a_partition_limit_is_what_the_limits_property_sees() {
    // Sanity for starts_respect_the_limits_in_the_snapshot: a start happens, through the route,
    // on the one node the job's partition allows, though node 0 would fit as well.
    let jobs = vec![JobSpec { nodes: 1, gpus: 1, limit_s: 3600.0, policy: 1, share: false, family: 0 }];
    let mut s = snapshot(3, &[], &jobs);
    let mut set = model::eligibility::NodeSet::new();
    set.insert(2);
    s.node_sets = vec![set];
    s.nodes[1].available = false;
    s.pending[0].eligible = vec![model::eligibility::Eligibility { node_set: 0, reservation: None, not_before_s: 0.0, route: 7 }];
    let out = plan_snapshot(&s, &PlannerConfig::default(), predictor());
    let st = out.starts().next().expect("the job starts");
    assert_eq!(st.route, Some(7));
    assert_eq!(st.allocations.iter().map(|a| a.node.0).collect::<Vec<_>>(), vec![2]);
}
