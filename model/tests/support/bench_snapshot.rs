//! The planner benchmark's snapshot generator (`benches/plan_cycle.rs`), shared with the test
//! that pins the planner's decisions (`tests/planner_pinned.rs`), so that the test checks
//! exactly the kind of cycle the benchmark times.
//!
//! A seeded generator: `snapshot(1000, 10_000, 42)` is the benchmark's cluster of 1,000 nodes x
//! 8 GPUs (about 85 % of GPUs busy, some time-shared) with 10,000 pending jobs;
//! `snapshot(10_000, 50_000, 42)` its large case (10,000 nodes, 50,000 pending jobs).

use model::types::*;

pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    pub fn pick<T: Copy>(&mut self, v: &[T]) -> T {
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

/// `nodes` nodes x 8 GPUs with running jobs on about 85 % of the GPUs, and `pending` jobs in
/// priority order, all drawn from one generator seeded with `seed`.
pub fn snapshot(nodes: u32, pending: u32, seed: u64) -> Snapshot {
    let mut r = Lcg(seed);
    let node_list: Vec<Node> = (0..nodes)
        .map(|i| Node { name: format!("n{i:04}"), gpu_type: 0, gpus: 8, cpus: 40, mem_mb: 512 * 1024, power: PowerState::On, available: true })
        .collect();
    let mut running = Vec::new();
    let mut id = 100_000;
    for n in 0..nodes {
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
    let pending = (0..pending)
        .map(|i| {
            let gpus = r.pick(&[1u32, 1, 1, 1, 2, 4, 8]);
            let nodes = if gpus == 8 && r.next().is_multiple_of(4) { 2 } else { 1 };
            PendingJob {
                id: JobId(i + 1),
                user: i % 50,
                // 20,000 - i up to 20,000 jobs (the pinned cases); counts down to 1 beyond.
                priority: pending.max(20_000) - i,
                submit_time_s: i as f64,
                request: Request { nodes, gpus_per_node: gpus, cpus_per_node: 3 * gpus, mem_mb_per_node: 32 * 1024 * gpus as u64 },
                time_limit_s: r.pick(&[3600.0, 4.0 * 3600.0, 24.0 * 3600.0, 72.0 * 3600.0]),
                hints: hints(&mut r),
                cpus_range: None,
                eligible: Vec::new(),
                placed_by_slurm: false,
                alternative: false,
                no_reservation: false,
                slurm_may_spread: false,
            }
        })
        .collect();
    Snapshot {
        now_s: 0.0,
        node_sets: Vec::new(),
        reservations: Vec::new(),
        gpu_types: vec![GpuType { name: "v100".into(), default_clock_mhz: 1530, min_clock_mhz: 135, max_clock_mhz: 1530, idle_power_w: 41.0, max_power_w: 250.0 }],
        nodes: node_list,
        running,
        pending,
    }
}
