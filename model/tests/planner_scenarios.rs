//! Scenarios of the planner on small hand-made clusters: each checks one promise.

use model::config::PlannerConfig;
use model::decision::Decision;
use model::planner::plan_snapshot;
use model::predictor::Predictor;
use model::types::*;

fn v100() -> GpuType {
    GpuType { name: "v100".into(), default_clock_mhz: 1530, min_clock_mhz: 135, max_clock_mhz: 1530, idle_power_w: 41.0, max_power_w: 250.0 }
}

fn node(i: usize, gpus: u32) -> Node {
    Node { name: format!("n{i}"), gpu_type: 0, gpus, cpus: 40, mem_mb: 512 * 1024, power: PowerState::On, available: true }
}

fn hints(policy: EnergyPolicy, max_slowdown: f64, share: bool, tag: &str) -> Hints {
    Hints { policy, max_slowdown, share_allowed: share, defer_max_s: 0.0, tag: Some(tag.into()) }
}

fn pending(id: u32, nodes: u32, gpus: u32, limit_s: f64, h: Hints) -> PendingJob {
    PendingJob {
        id: JobId(id),
        user: 1,
        priority: 100 - id,
        submit_time_s: id as f64,
        request: Request { nodes, gpus_per_node: gpus, cpus_per_node: 3 * gpus, mem_mb_per_node: 1024 * gpus as u64 },
        time_limit_s: limit_s,
        hints: h,
        cpus_range: None,
        eligible: Vec::new(),
        placed_by_slurm: false,
        alternative: false,
        no_reservation: false,
        slurm_may_spread: false,
    }
}

fn running(id: u32, node: u32, gpus: &[u8], end_s: f64, h: Hints) -> RunningJob {
    RunningJob {
        id: JobId(id),
        user: 1,
        start_time_s: 0.0,
        end_time_s: end_s,
        allocations: vec![NodeAllocation { node: NodeIdx(node), gpu_indices: gpus.to_vec(), cpus: 3 * gpus.len() as u32, mem_mb: 1024 * gpus.len() as u64 }],
        clock_mhz: 1530,
        shared: h.share_allowed,
        hints: h,
    }
}

fn predictor() -> Predictor {
    Predictor::from_data_dir(&model::data::default_data_dir(), "v100").expect("reference data")
}

#[test]
fn a_job_that_allows_sharing_shares_when_no_gpu_is_free() {
    let h = hints(EnergyPolicy::Balanced, 1.6, true, "ResNet-18");
    let s = Snapshot {
        now_s: 10.0,
        node_sets: Vec::new(),
        reservations: Vec::new(),
        gpu_types: vec![v100()],
        nodes: vec![node(0, 1)],
        running: vec![running(1, 0, &[0], 5000.0, h.clone())],
        pending: vec![pending(2, 1, 1, 3600.0, h)],
    };
    let out = plan_snapshot(&s, &PlannerConfig::default(), &predictor());
    let start = out.starts().next().expect("the job starts shared");
    assert_eq!(start.shares_with, vec![JobId(1)]);
    assert!(start.predicted_slowdown <= PlannerConfig::default().sharing_max_slowdown);
}

#[test]
fn a_job_that_denies_sharing_waits_instead() {
    let tenant = hints(EnergyPolicy::Balanced, 1.6, true, "ResNet-18");
    let s = Snapshot {
        now_s: 10.0,
        node_sets: Vec::new(),
        reservations: Vec::new(),
        gpu_types: vec![v100()],
        nodes: vec![node(0, 1)],
        running: vec![running(1, 0, &[0], 5000.0, tenant)],
        pending: vec![pending(2, 1, 1, 3600.0, hints(EnergyPolicy::Balanced, 1.6, false, "ResNet-18"))],
    };
    let out = plan_snapshot(&s, &PlannerConfig::default(), &predictor());
    assert_eq!(out.starts().count(), 0);
    assert!(out.decisions.iter().any(|d| matches!(d, Decision::Reserve(r) if r.job == JobId(2) && r.start_s == 5000.0)));
}

#[test]
fn backfill_never_delays_the_reserved_job() {
    // Two nodes of 8 GPUs; node 0 busy until t=2000; node 1 has 4 GPUs busy until t=1000 and
    // 4 free. Job 2 (high priority) needs a whole node: reserved on node 1 at t=1000.
    // Job 3 (4 GPUs, 5000 s) fits node 1 now but would delay job 2; job 4 (4 GPUs, 500 s) ends
    // before the reservation and may backfill.
    let h = hints(EnergyPolicy::Performance, 1.0, false, "ResNet-50");
    let s = Snapshot {
        now_s: 0.0,
        node_sets: Vec::new(),
        reservations: Vec::new(),
        gpu_types: vec![v100()],
        nodes: vec![node(0, 8), node(1, 8)],
        running: vec![running(1, 0, &[0, 1, 2, 3, 4, 5, 6, 7], 2000.0, h.clone()), running(9, 1, &[0, 1, 2, 3], 1000.0, h.clone())],
        pending: vec![pending(2, 1, 8, 3600.0, h.clone()), pending(3, 1, 4, 5000.0, h.clone()), pending(4, 1, 4, 500.0, h)],
    };
    let out = plan_snapshot(&s, &PlannerConfig::slurm_baseline(), &predictor());
    let reserved: Vec<_> = out.reservations().collect();
    assert_eq!(reserved.len(), 1);
    assert_eq!(reserved[0].job, JobId(2));
    assert_eq!(reserved[0].start_s, 1000.0);
    assert_eq!(reserved[0].nodes, vec![NodeIdx(1)]);
    let started: Vec<JobId> = out.starts().map(|s| s.job).collect();
    assert_eq!(started, vec![JobId(4)], "only the short job may backfill: {out:?}");
}

#[test]
fn efficiency_jobs_run_at_a_lower_clock_and_performance_jobs_do_not() {
    let s = Snapshot {
        now_s: 0.0,
        node_sets: Vec::new(),
        reservations: Vec::new(),
        gpu_types: vec![v100()],
        nodes: vec![node(0, 8)],
        running: vec![],
        pending: vec![
            pending(1, 1, 1, 3600.0, hints(EnergyPolicy::Efficiency, 1.25, false, "ResNet-50")),
            pending(2, 1, 1, 3600.0, hints(EnergyPolicy::Performance, 1.0, false, "ResNet-50")),
        ],
    };
    let out = plan_snapshot(&s, &PlannerConfig::default(), &predictor());
    let clock = |id| out.starts().find(|s| s.job == JobId(id)).map(|s| s.clock_mhz).expect("started");
    assert!(clock(1) < 1530, "efficiency job clock {}", clock(1));
    assert_eq!(clock(2), 1530);
    let eff = out.starts().find(|s| s.job == JobId(1)).expect("started");
    assert!(eff.predicted_slowdown <= 1.25 + 1e-9);
    assert!(eff.time_limit_s > 3600.0, "a slowed job gets its limit extended");
}

#[test]
fn packing_fills_busy_nodes_before_idle_ones() {
    let h = hints(EnergyPolicy::Balanced, 1.05, false, "ResNet-50");
    let s = Snapshot {
        now_s: 0.0,
        node_sets: Vec::new(),
        reservations: Vec::new(),
        gpu_types: vec![v100()],
        nodes: vec![node(0, 8), node(1, 8), node(2, 8)],
        running: vec![running(1, 2, &[0, 1, 2, 3, 4, 5], 9000.0, h.clone())],
        pending: vec![pending(2, 1, 2, 3600.0, h)],
    };
    let out = plan_snapshot(&s, &PlannerConfig::default(), &predictor());
    let st = out.starts().next().expect("started");
    assert_eq!(st.allocations[0].node, NodeIdx(2), "{:?}", st.score);
    assert_eq!(st.allocations[0].gpu_indices, vec![6, 7]);
    // The baseline takes the first node in index order.
    let base = plan_snapshot(&s, &PlannerConfig::slurm_baseline(), &predictor());
    assert_eq!(base.starts().next().expect("started").allocations[0].node, NodeIdx(0));
}

#[test]
fn eaco_consolidation_shares_a_busy_gpu_although_an_empty_node_is_free() {
    // Node 0 runs a shareable job on one of its GPUs; node 1 is empty. With `sharing_first`
    // (EaCO) the newcomer joins the busy GPU when the pair is predicted within the bound, so
    // node 1 stays empty for power saving; without it, it takes a free GPU.
    let h = hints(EnergyPolicy::Balanced, 1.0, true, "ResNet-18");
    let s = Snapshot {
        now_s: 10.0,
        node_sets: Vec::new(),
        reservations: Vec::new(),
        gpu_types: vec![v100()],
        nodes: vec![node(0, 1), node(1, 8)],
        running: vec![running(1, 0, &[0], 5000.0, h.clone())],
        pending: vec![pending(2, 1, 1, 3600.0, h)],
    };
    let eaco = PlannerConfig { sharing: true, prefer_sharing: true, sharing_first: true, sharing_max_slowdown: 2.0, ..PlannerConfig::default() };
    let out = plan_snapshot(&s, &eaco, &predictor());
    let start = out.starts().next().expect("the job starts");
    assert_eq!(start.shares_with, vec![JobId(1)], "consolidated onto the busy GPU");
    assert_eq!(start.allocations[0].node, NodeIdx(0));
    let plain = PlannerConfig { sharing_first: false, prefer_sharing: false, ..eaco.clone() };
    let out = plan_snapshot(&s, &plain, &predictor());
    let start = out.starts().next().expect("the job starts");
    assert!(start.shares_with.is_empty(), "a free GPU is taken when sharing is not first");
    // A bound the pair exceeds keeps it apart even with consolidation on.
    let strict = PlannerConfig { sharing_max_slowdown: 1.0, ..eaco };
    let out = plan_snapshot(&s, &strict, &predictor());
    assert!(out.starts().next().expect("the job starts").shares_with.is_empty());
}

#[test]
fn a_job_that_starts_beyond_the_planning_window_gets_no_reservation_as_under_bf_window() {
    // As in backfill_never_delays_the_reserved_job: job 2's earliest start is t=1000 (node 1).
    // With sched/backfill's bf_window shorter than that, it "starts too far in the future to
    // worry about": no reservation, so job 3 (4 GPUs, 5000 s) backfills as under stock; with the
    // window past t=1000 job 2 is reserved and job 3 waits.
    let h = hints(EnergyPolicy::Performance, 1.0, false, "ResNet-50");
    let s = Snapshot {
        now_s: 0.0,
        node_sets: Vec::new(),
        reservations: Vec::new(),
        gpu_types: vec![v100()],
        nodes: vec![node(0, 8), node(1, 8)],
        running: vec![running(1, 0, &[0, 1, 2, 3, 4, 5, 6, 7], 2000.0, h.clone()), running(9, 1, &[0, 1, 2, 3], 1000.0, h.clone())],
        pending: vec![pending(2, 1, 8, 3600.0, h.clone()), pending(3, 1, 4, 5000.0, h.clone())],
    };
    let within = PlannerConfig { reservation_window_s: 1000.0, ..PlannerConfig::slurm_baseline() };
    let out = plan_snapshot(&s, &within, &predictor());
    assert_eq!(out.reservations().map(|r| (r.job, r.start_s)).collect::<Vec<_>>(), vec![(JobId(2), 1000.0)]);
    assert_eq!(out.starts().count(), 0, "job 3 would delay job 2's reservation: {out:?}");

    let short = PlannerConfig { reservation_window_s: 999.0, ..PlannerConfig::slurm_baseline() };
    let out = plan_snapshot(&s, &short, &predictor());
    assert_eq!(out.reservations().count(), 0, "job 2 starts beyond the window: {out:?}");
    assert_eq!(out.starts().map(|s| s.job).collect::<Vec<_>>(), vec![JobId(3)]);
}
