//! Where Slurm lets a job run ([`model::eligibility`]): the planner places and reserves only on
//! the nodes of a job's routes, keeps everyone else off advanced reservations for their
//! window, lets a job inside a reservation use it from its start, and hands requests it
//! cannot express to Slurm. Each test checks one promise on a small hand-made cluster.

use model::config::PlannerConfig;
use model::decision::Decision;
use model::eligibility::{AdvanceReservation, Eligibility, NodeSet};
use model::planner::plan_snapshot;
use model::predictor::Predictor;
use model::types::*;

const HOUR_S: f64 = 3600.0;

fn gpu() -> GpuType {
    GpuType { name: "a100".into(), default_clock_mhz: 1410, min_clock_mhz: 210, max_clock_mhz: 1410, idle_power_w: 50.0, max_power_w: 400.0 }
}

fn node(i: usize) -> Node {
    Node { name: format!("n{i}"), gpu_type: 0, gpus: 4, cpus: 32, mem_mb: 256 * 1024, power: PowerState::On, available: true }
}

fn job(id: u32, nodes: u32, gpus: u32, limit_s: f64) -> PendingJob {
    PendingJob {
        id: JobId(id),
        user: 1,
        priority: 1000 - id,
        submit_time_s: 0.0,
        request: Request { nodes, gpus_per_node: gpus, cpus_per_node: 2 * gpus, mem_mb_per_node: 1024 },
        time_limit_s: limit_s,
        hints: Hints { policy: EnergyPolicy::Performance, ..Hints::default() },
        cpus_range: None,
        eligible: Vec::new(),
        placed_by_slurm: false,
        alternative: false,
        no_reservation: false,
        slurm_may_spread: false,
    }
}

fn route(node_set: u32, route: u32) -> Eligibility {
    Eligibility { node_set, reservation: None, not_before_s: 0.0, route }
}

fn running(id: u32, node: u32, gpus: &[u8], end_s: f64) -> RunningJob {
    RunningJob {
        id: JobId(id),
        user: 1,
        start_time_s: 0.0,
        end_time_s: end_s,
        allocations: vec![NodeAllocation { node: NodeIdx(node), gpu_indices: gpus.to_vec(), cpus: 2, mem_mb: 1024 }],
        clock_mhz: 1410,
        hints: Hints::default(),
        shared: false,
    }
}

fn cluster(nodes: usize, pending: Vec<PendingJob>, node_sets: Vec<NodeSet>) -> Snapshot {
    Snapshot {
        now_s: 0.0,
        gpu_types: vec![gpu()],
        nodes: (0..nodes).map(node).collect(),
        running: Vec::new(),
        pending,
        node_sets,
        reservations: Vec::new(),
    }
}

fn set(nodes: &[usize]) -> NodeSet {
    nodes.iter().copied().collect()
}

fn plan(s: &Snapshot) -> model::decision::PlanOutcome {
    plan_snapshot(s, &PlannerConfig::default(), &Predictor::default())
}

fn started_on(out: &model::decision::PlanOutcome, id: u32) -> Option<(Vec<u32>, Option<u32>)> {
    out.starts().find(|s| s.job == JobId(id)).map(|s| (s.allocations.iter().map(|a| a.node.0).collect(), s.route))
}

#[test]
fn a_job_runs_only_on_the_nodes_of_its_partition() {
    // Node 0 would be the planner's first choice; the job's partition has only node 2.
    let mut j = job(1, 1, 2, HOUR_S);
    j.eligible = vec![route(0, 7)];
    let out = plan(&cluster(3, vec![j], vec![set(&[2])]));
    assert_eq!(started_on(&out, 1), Some((vec![2], Some(7))));
}

#[test]
fn a_multi_partition_job_starts_through_the_first_route_with_room() {
    let mut s = cluster(2, Vec::new(), vec![set(&[0]), set(&[1])]);
    s.running.push(running(9, 0, &[0, 1, 2, 3], 10.0 * HOUR_S));
    let mut j = job(1, 1, 2, HOUR_S);
    j.eligible = vec![route(0, 10), route(1, 11)];
    s.pending.push(j);
    let out = plan(&s);
    assert_eq!(started_on(&out, 1), Some((vec![1], Some(11))));
}

#[test]
fn a_job_with_no_node_in_its_routes_never_starts_and_takes_no_slot() {
    // Job 1 may use no node at all (e.g. a feature no node has); job 2, blocked behind a
    // running job, must still get the one reservation slot.
    let mut s = cluster(1, Vec::new(), vec![NodeSet::new(), set(&[0])]);
    s.running.push(running(9, 0, &[0, 1, 2, 3], 2.0 * HOUR_S));
    let mut j1 = job(1, 1, 1, HOUR_S);
    j1.eligible = vec![route(0, 0)];
    let mut j2 = job(2, 1, 4, HOUR_S);
    j2.eligible = vec![route(1, 1)];
    s.pending = vec![j1, j2];
    let cfg = PlannerConfig { reservation_depth: 1, ..PlannerConfig::default() };
    let out = plan_snapshot(&s, &cfg, &Predictor::default());
    assert!(out.starts().next().is_none());
    let reserved: Vec<_> = out.reservations().map(|r| (r.job, r.start_s)).collect();
    assert_eq!(reserved, vec![(JobId(2), 2.0 * HOUR_S)], "{:?}", out.decisions);
}

#[test]
fn a_maintenance_window_keeps_other_jobs_off_its_nodes() {
    // Maintenance on node 0 from 30 min to 2 h: a one-hour job may not start there now (it
    // would overlap), but node 1 is free; a second one-hour job, with node 1 then taken, is
    // reserved on node 0 after the window (or on node 1 after the first job), never inside it.
    let mut s = cluster(2, vec![job(1, 1, 4, HOUR_S), job(2, 1, 4, HOUR_S)], vec![set(&[0])]);
    s.reservations.push(AdvanceReservation { name: "maint".into(), node_set: 0, start_s: 0.5 * HOUR_S, end_s: 2.0 * HOUR_S, held_for: None });
    let out = plan(&s);
    assert_eq!(started_on(&out, 1).map(|(n, _)| n), Some(vec![1]));
    let r = out.reservations().find(|r| r.job == JobId(2)).expect("job 2 is reserved");
    assert!(r.start_s >= HOUR_S - 1e-6, "reserved inside the window: {r:?}");
    // A short job that ends before the window may use node 0 now (backfill before maintenance).
    let mut s = cluster(1, vec![job(3, 1, 1, 0.25 * HOUR_S)], vec![set(&[0])]);
    s.reservations.push(AdvanceReservation { name: "maint".into(), node_set: 0, start_s: 0.5 * HOUR_S, end_s: 2.0 * HOUR_S, held_for: None });
    assert_eq!(started_on(&plan(&s), 3).map(|(n, _)| n), Some(vec![0]));
}

#[test]
fn a_job_in_a_future_reservation_waits_for_it_and_others_stay_out_of_it() {
    // Reservation "train" on node 1 from 1 h to 5 h. Job 1 runs inside it: not now, reserved at
    // its start on node 1. Job 2 (no reservation, 2 h limit) must not take node 1 now.
    let mut s = cluster(2, Vec::new(), vec![set(&[1]), set(&[0, 1])]);
    s.reservations.push(AdvanceReservation { name: "train".into(), node_set: 0, start_s: HOUR_S, end_s: 5.0 * HOUR_S, held_for: None });
    s.running.push(running(9, 0, &[0, 1, 2, 3], 10.0 * HOUR_S));
    let mut j1 = job(1, 1, 4, HOUR_S);
    j1.eligible = vec![Eligibility { node_set: 0, reservation: Some(0), not_before_s: HOUR_S, route: 3 }];
    let mut j2 = job(2, 1, 1, 2.0 * HOUR_S);
    j2.eligible = vec![route(1, 4)];
    s.pending = vec![j1, j2];
    let out = plan(&s);
    assert!(started_on(&out, 1).is_none(), "{:?}", out.decisions);
    let r = out.reservations().find(|r| r.job == JobId(1)).expect("job 1 is reserved at its reservation's start");
    assert_eq!((r.start_s, r.nodes.clone(), r.route), (HOUR_S, vec![NodeIdx(1)], Some(3)));
    assert!(started_on(&out, 2).is_none(), "job 2 was started into the reservation: {:?}", out.decisions);
}

#[test]
fn a_multi_node_reservation_finds_the_earliest_common_start() {
    // Node 0 frees at 1 h, node 1 at 3 h, node 2 at 2 h: a 2-node job can start at 2 h on
    // nodes 0 and 2, not at 1 h (only one node) and not at 3 h.
    let mut s = cluster(3, vec![job(1, 2, 4, HOUR_S)], Vec::new());
    s.running = vec![running(7, 0, &[0], HOUR_S), running(8, 1, &[0], 3.0 * HOUR_S), running(9, 2, &[0], 2.0 * HOUR_S)];
    let out = plan(&s);
    let r = out.reservations().next().expect("reserved");
    assert_eq!(r.start_s, 2.0 * HOUR_S);
    let mut nodes: Vec<u32> = r.nodes.iter().map(|n| n.0).collect();
    nodes.sort();
    assert_eq!(nodes, vec![0, 2]);
}

#[test]
fn every_blocked_job_gets_a_reservation_by_default() {
    let mut s = cluster(1, (1..=20).map(|i| job(i, 1, 4, HOUR_S)).collect(), Vec::new());
    s.running.push(running(99, 0, &[0], HOUR_S));
    let out = plan(&s);
    assert_eq!(out.reservations().count(), 20);
    // One after another on the one node, in priority order.
    let starts: Vec<f64> = out.reservations().map(|r| r.start_s).collect();
    assert!(starts.windows(2).all(|w| w[1] >= w[0] + HOUR_S - 1e-6), "{starts:?}");
}

#[test]
fn a_request_the_planner_cannot_express_goes_to_slurm_without_reserved_nodes() {
    // Job 1 (4 GPUs) is blocked and reserved on node 0 at 1 h; job 2 has a shape the planner
    // cannot express: Slurm may place it, but not on node 0 (its two-hour limit would delay
    // job 1) and only on its partition's nodes (0, 1, 2).
    let mut s = cluster(4, Vec::new(), vec![set(&[0, 1, 2])]);
    s.running = vec![running(8, 0, &[0], HOUR_S), running(9, 1, &[0], 3.0 * HOUR_S), running(10, 2, &[0], 3.0 * HOUR_S), running(11, 3, &[0], 3.0 * HOUR_S)];
    let mut j1 = job(1, 1, 4, HOUR_S);
    j1.eligible = vec![route(0, 0)];
    let mut j2 = job(2, 1, 1, 2.0 * HOUR_S);
    j2.eligible = vec![route(0, 0)];
    j2.placed_by_slurm = true;
    s.pending = vec![j1, j2];
    let out = plan(&s);
    let handed = out.slurm_starts().next().expect("handed to Slurm");
    assert_eq!(handed.job, JobId(2));
    assert_eq!(handed.nodes, vec![NodeIdx(1), NodeIdx(2)]);
    assert!(!out.decisions.iter().any(|d| matches!(d, Decision::Start(_))));
}

#[test]
fn a_request_slurm_places_that_cannot_start_asks_slurms_will_run_and_its_window_holds() {
    // Job 2's shape is Slurm's to place; no node of its partition (0, 1, 2) has room now: the
    // planner asks Slurm's will-run test over all of them instead of dropping it.
    let mut s = cluster(4, Vec::new(), vec![set(&[0, 1, 2])]);
    s.running = (0..4).map(|n| running(8 + n, n, &[0, 1, 2, 3], HOUR_S)).collect();
    let mut j2 = job(2, 1, 4, 2.0 * HOUR_S);
    j2.eligible = vec![route(0, 0)];
    j2.placed_by_slurm = true;
    s.pending = vec![j2.clone()];
    let out = plan(&s);
    assert!(out.slurm_starts().next().is_none());
    let asked = out.slurm_will_runs().next().expect("will-run asked");
    assert_eq!((asked.job, asked.nodes.clone(), asked.route), (JobId(2), vec![NodeIdx(0), NodeIdx(1), NodeIdx(2)], Some(0)));

    // The plugin hands Slurm's answer back as a window on the expected nodes (0) from 1 h,
    // which the job itself may use: a later 3-hour job does not take node 0 (free early), while
    // the window's own job is not kept out.
    // Node 0 is free now (its job ended).
    s.running = vec![running(9, 1, &[0, 1, 2, 3], HOUR_S), running(10, 2, &[0, 1, 2, 3], HOUR_S), running(11, 3, &[0, 1, 2, 3], HOUR_S)];
    s.now_s = 0.6 * HOUR_S;
    s.node_sets.push(set(&[0]));
    s.reservations = vec![AdvanceReservation { name: "will-run JobId=2".into(), node_set: 1, start_s: HOUR_S, end_s: 3.0 * HOUR_S, held_for: Some(JobId(2)) }];
    let mut j3 = job(3, 1, 1, 3.0 * HOUR_S);
    j3.eligible = vec![route(0, 0)];
    j2.eligible = vec![Eligibility { reservation: Some(0), ..route(0, 0) }];
    s.pending = vec![j2, j3];
    let out = plan(&s);
    assert!(started_on(&out, 3).is_none(), "job 3 took node 0 from job 2's will-run window");
    // Slurm gets every node of the route that no claim holds against job 2 (its own window
    // does not): node 0, and the busy nodes 1 and 2, on which Slurm's selection finds no room.
    let handed = out.slurm_starts().find(|h| h.job == JobId(2)).expect("job 2 handed to Slurm on node 0");
    assert_eq!(handed.nodes, vec![NodeIdx(0), NodeIdx(1), NodeIdx(2)]);
}

#[test]
fn slurm_judges_whether_a_job_it_places_fits_the_nodes_not_the_planners_per_node_amounts() {
    // Job 1 asks for 6 GPUs on "one node" as its minimum (`--gpus=6`, Slurm may use more
    // nodes): no node has 6 GPUs, but nodes 0 and 1 together have 8 free. Slurm's selection
    // gets both (issue 20: it stayed pending forever). Node 2, with a single free CPU and no
    // free GPU, is offered as well: Slurm decides what it can use.
    let mut s = cluster(3, Vec::new(), Vec::new());
    s.running = vec![running(9, 2, &[0, 1, 2, 3], HOUR_S)];
    let mut j1 = job(1, 1, 6, HOUR_S);
    j1.placed_by_slurm = true;
    s.pending = vec![j1];
    let out = plan(&s);
    let handed = out.slurm_starts().next().expect("handed to Slurm");
    assert_eq!(handed.nodes, vec![NodeIdx(0), NodeIdx(1), NodeIdx(2)]);

    // Fewer free GPUs in all than it asks for: not worth a selection; Slurm's will-run test
    // says when instead.
    s.running = vec![running(8, 0, &[0, 1, 2], HOUR_S), running(9, 1, &[0, 1, 2], HOUR_S), running(10, 2, &[0, 1, 2, 3], HOUR_S)];
    let out = plan(&s);
    assert!(out.slurm_starts().next().is_none());
    assert!(out.slurm_will_runs().next().is_some());
}

#[test]
fn a_will_run_window_holds_only_against_the_jobs_after_its_own() {
    // Job 2 (placed by Slurm, cannot start now) has a will-run window on node 0 from 1 h to
    // 3 h. Job 1, of higher priority, asks for 3 hours and fits node 0 now: backfill tests it
    // before job 2 and starts it there, so must the planner (the window is job 2's reservation,
    // made when job 2 is tested). Job 3, after job 2, must keep off node 0.
    let mut s = cluster(1, Vec::new(), vec![set(&[0]), set(&[0])]);
    s.reservations = vec![AdvanceReservation { name: "will-run JobId=2".into(), node_set: 1, start_s: HOUR_S, end_s: 3.0 * HOUR_S, held_for: Some(JobId(2)) }];
    let j1 = job(1, 1, 1, 3.0 * HOUR_S);
    let mut j2 = job(2, 1, 4, 2.0 * HOUR_S);
    j2.placed_by_slurm = true;
    j2.eligible = vec![Eligibility { reservation: Some(0), ..route(0, 0) }];
    let j3 = job(3, 1, 1, 3.0 * HOUR_S);
    s.pending = vec![j1, j2, j3];
    let out = plan(&s);
    assert!(started_on(&out, 1).is_some(), "the higher-priority job was kept off by a lower-priority job's will-run window");
    assert!(started_on(&out, 3).is_none(), "the lower-priority job took node 0 from job 2's will-run window");
}

#[test]
fn a_later_queue_record_of_a_job_is_tried_at_its_own_place_and_only_if_the_job_has_not_started() {
    // Job 5 may run in partition A (node 0, full) and in partition B (node 1). Its record for
    // A comes first in Slurm's order (a higher PriorityTier), its record for B after job 2, of
    // higher priority in B, which needs all of node 1: job 2 starts there, job 5's record for B
    // finds nothing (as under sched/backfill), and it is reserved through its first record only.
    let mut s = cluster(2, Vec::new(), vec![set(&[0]), set(&[1])]);
    s.running = vec![running(9, 0, &[0, 1, 2, 3], HOUR_S)];
    let mut first = job(5, 1, 4, HOUR_S);
    first.eligible = vec![route(0, 0)];
    let mut j2 = job(2, 1, 4, HOUR_S);
    j2.eligible = vec![route(1, 1)];
    let mut later = first.clone();
    later.eligible = vec![route(1, 1)];
    later.alternative = true;
    s.pending = vec![first.clone(), j2.clone(), later.clone()];
    let out = plan(&s);
    assert_eq!(started_on(&out, 2), Some((vec![1], Some(1))), "the higher-priority job of partition B lost its node");
    assert!(started_on(&out, 5).is_none());
    let reserved: Vec<_> = out.reservations().filter(|r| r.job == JobId(5)).collect();
    assert_eq!(reserved.len(), 1, "job 5 reserved once, through its first record");
    assert_eq!(reserved[0].route, Some(0));

    // Partition B free for it: job 5 starts through its later record, and once only.
    s.pending = vec![first, later.clone(), later];
    let out = plan(&s);
    assert_eq!(out.starts().filter(|d| d.job == JobId(5)).count(), 1);
    assert_eq!(started_on(&out, 5), Some((vec![1], Some(1))));
}

#[test]
fn a_job_that_gets_no_reservation_starts_if_it_can_and_holds_nothing_otherwise() {
    // Job 1 (all of node 0, which frees at 1 h) would reserve node 0 and keep job 2 (3 hours)
    // off it; with no reservation (NoReserve QOS, bf_min_prio_reserve, ...), job 2 takes it.
    let mut s = cluster(1, Vec::new(), Vec::new());
    s.running = vec![running(9, 0, &[0, 1], HOUR_S)];
    let mut j1 = job(1, 1, 4, HOUR_S);
    let j2 = job(2, 1, 2, 3.0 * HOUR_S);
    s.pending = vec![j1.clone(), j2.clone()];
    let out = plan(&s);
    assert!(started_on(&out, 2).is_none(), "job 2 took node 0 from job 1's reservation");
    assert!(out.reservations().any(|r| r.job == JobId(1)));
    j1.no_reservation = true;
    s.pending = vec![j1, j2];
    let out = plan(&s);
    assert!(!out.reservations().any(|r| r.job == JobId(1)), "a job without reservations was reserved");
    assert_eq!(started_on(&out, 2), Some((vec![0], None)));
}

#[test]
fn a_job_slurm_may_spread_goes_to_slurm_when_no_single_node_has_room() {
    // Four tasks and a GPU per node, no node count: nodes 0 and 1 each have 2 free CPUs (of 4),
    // no node has 4. The planner cannot place it on one node; Slurm may spread it, so it is
    // handed over (over both nodes) instead of waiting.
    let mut s = cluster(2, Vec::new(), Vec::new());
    for n in &mut s.nodes {
        n.cpus = 4;
    }
    s.running = vec![running(8, 0, &[0], HOUR_S), running(9, 1, &[0], HOUR_S)];
    let mut j = job(1, 1, 1, HOUR_S);
    j.request.cpus_per_node = 4;
    s.pending = vec![j.clone()];
    assert!(plan(&s).slurm_starts().next().is_none(), "handed to Slurm without the flag");
    j.slurm_may_spread = true;
    s.pending = vec![j];
    let out = plan(&s);
    assert!(out.starts().next().is_none());
    assert_eq!(out.slurm_starts().next().map(|h| h.nodes.clone()), Some(vec![NodeIdx(0), NodeIdx(1)]));
}
