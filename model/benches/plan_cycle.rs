//! Benchmark: one planner cycle over 10,000 pending jobs on 1,000 nodes x 8 GPUs with a
//! realistic mix of running jobs (about 85 % of GPUs busy, some time-shared).
//!
//! `cargo bench -p model --bench plan_cycle` prints the time of a cycle (snapshot to decisions,
//! including building the cluster view) with Slurm's default test depth (500 jobs, like
//! `bf_max_job_test`) and with every one of the 10,000 jobs tested.

use std::time::Instant;

use model::config::PlannerConfig;
use model::planner::plan_snapshot;
use model::predictor::Predictor;
use model::types::*;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[(self.next() % v.len() as u64) as usize]
    }
}

const FAMILIES: [&str; 7] = ["ResNet-18", "ResNet-50", "Transformer", "A3C", "LM", "Recommendation", "CycleGAN"];

fn hints(r: &mut Lcg) -> Hints {
    let policy = r.pick(&[EnergyPolicy::Performance, EnergyPolicy::Balanced, EnergyPolicy::Balanced, EnergyPolicy::Efficiency]);
    Hints {
        policy,
        max_slowdown: if policy == EnergyPolicy::Efficiency { 1.25 } else { 1.05 },
        share_allowed: r.next().is_multiple_of(2),
        defer_max_s: 0.0,
        tag: Some(r.pick(&FAMILIES).to_string()),
    }
}

fn snapshot() -> Snapshot {
    let mut r = Lcg(42);
    let nodes: Vec<Node> = (0..1000)
        .map(|i| Node { name: format!("n{i:04}"), gpu_type: 0, gpus: 8, cpus: 40, mem_mb: 512 * 1024, power: PowerState::On, available: true })
        .collect();
    let mut running = Vec::new();
    let mut id = 100_000;
    for n in 0..1000u32 {
        let mut g = 0u8;
        while g < 8 {
            let size = r.pick(&[1u8, 1, 1, 2, 4, 8]).min(8 - g);
            if r.next() % 100 < 15 {
                g += size; // leave free
                continue;
            }
            let h = hints(&mut r);
            let shared = size == 1 && h.share_allowed;
            let gpus: Vec<u8> = (g..g + size).collect();
            running.push(RunningJob {
                id: JobId(id),
                user: (id % 50),
                start_time_s: 0.0,
                end_time_s: 600.0 + (r.next() % 200_000) as f64,
                allocations: vec![NodeAllocation { node: NodeIdx(n), gpu_indices: gpus.clone(), cpus: 3 * size as u32, mem_mb: 32 * 1024 * size as u64 }],
                clock_mhz: 1530,
                hints: h.clone(),
                shared,
            });
            id += 1;
            if shared && r.next().is_multiple_of(3) {
                running.push(RunningJob {
                    id: JobId(id),
                    user: (id % 50),
                    start_time_s: 0.0,
                    end_time_s: 600.0 + (r.next() % 200_000) as f64,
                    allocations: vec![NodeAllocation { node: NodeIdx(n), gpu_indices: gpus, cpus: 3, mem_mb: 32 * 1024 }],
                    clock_mhz: 1530,
                    hints: Hints { share_allowed: true, ..h },
                    shared: true,
                });
                id += 1;
            }
            g += size;
        }
    }
    let pending = (0..10_000u32)
        .map(|i| {
            let gpus = r.pick(&[1u32, 1, 1, 1, 2, 4, 8]);
            let nodes = if gpus == 8 && r.next().is_multiple_of(4) { 2 } else { 1 };
            PendingJob {
                id: JobId(i + 1),
                user: i % 50,
                priority: 20_000 - i,
                submit_time_s: i as f64,
                request: Request { nodes, gpus_per_node: gpus, cpus_per_node: 3 * gpus, mem_mb_per_node: 32 * 1024 * gpus as u64 },
                time_limit_s: r.pick(&[3600.0, 4.0 * 3600.0, 24.0 * 3600.0, 72.0 * 3600.0]),
                hints: hints(&mut r),
                cpus_range: None,
                eligible: Vec::new(),
                placed_by_slurm: false,
            }
        })
        .collect();
    Snapshot {
        now_s: 0.0,
        node_sets: Vec::new(),
        reservations: Vec::new(),
        gpu_types: vec![GpuType { name: "v100".into(), default_clock_mhz: 1530, min_clock_mhz: 135, max_clock_mhz: 1530, idle_power_w: 41.0, max_power_w: 250.0 }],
        nodes,
        running,
        pending,
    }
}

fn measure(name: &str, s: &Snapshot, cfg: &PlannerConfig, pred: &Predictor) {
    let rounds = 15;
    let mut times_ms = Vec::with_capacity(rounds);
    let mut last = None;
    for _ in 0..rounds {
        let t = Instant::now();
        let out = plan_snapshot(s, cfg, pred);
        times_ms.push(t.elapsed().as_secs_f64() * 1e3);
        last = Some(out);
    }
    times_ms.sort_by(f64::total_cmp);
    let mean = times_ms.iter().sum::<f64>() / rounds as f64;
    let stats = last.map(|o| o.stats).unwrap_or_default();
    println!(
        "{name:<38} mean {mean:7.2} ms  p50 {:7.2} ms  max {:7.2} ms  (tested {}, started {}, reservations {}, nodes scored {})",
        times_ms[rounds / 2],
        times_ms[rounds - 1],
        stats.jobs_tested,
        stats.jobs_started,
        stats.reservations,
        stats.nodes_scored
    );
}

fn main() {
    let pred = match Predictor::from_data_dir(&model::data::default_data_dir(), "v100") {
        Ok(p) => p,
        Err(e) => {
            eprintln!("plan_cycle: cannot load the reference data: {e}");
            std::process::exit(1);
        }
    };
    let s = snapshot();
    let busy: usize = s.running.iter().map(|r| r.allocations[0].gpu_indices.len()).sum();
    println!("plan_cycle: {} nodes x 8 GPUs, {} running jobs ({} GPU slots), {} pending", s.nodes.len(), s.running.len(), busy, s.pending.len());
    let default = PlannerConfig::default();
    measure("default (500 tested, every one reserved)", &s, &default, &pred);
    let depth4 = PlannerConfig { reservation_depth: 4, ..PlannerConfig::default() };
    measure("500 tested, depth 4", &s, &depth4, &pred);
    let all = PlannerConfig { max_jobs_tested: 10_000, ..PlannerConfig::default() };
    measure("all 10,000 tested, every one reserved", &s, &all, &pred);
    let baseline = PlannerConfig { max_jobs_tested: 10_000, ..PlannerConfig::slurm_baseline() };
    measure("slurm baseline, all 10,000 tested", &s, &baseline, &pred);
}
