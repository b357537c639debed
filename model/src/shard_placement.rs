//! Placement rules for GPUs shared through Slurm's `gres/shard`, where the scheduler chooses
//! only the node and Slurm the GPU within it: a `deny` shard job goes only to a node without
//! other shard jobs, an `allow` shard job never next to a `deny` one, and a whole-GPU job never
//! to a node with shard jobs (Slurm 22.05.8's cons_tres can hand a whole-GPU job a GPU whose
//! shards are in use). The plugin fills [`ShardJobs`] from slurmctld's records and passes
//! [`ShardJobs::node_allowed`] to [`crate::planner::plan_snapshot_filtered`].

use std::collections::HashSet;

use crate::state::NodeView;
use crate::types::PendingJob;

/// The `gres/shard` jobs of a snapshot (running and pending), and which of them deny sharing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShardJobs {
    pub all: HashSet<u32>,
    pub deny: HashSet<u32>,
    /// Running shard jobs, for the "waits for a node without shard jobs" reason.
    pub running: usize,
}

impl ShardJobs {
    pub fn add(&mut self, id: u32, share: bool) {
        self.all.insert(id);
        if !share {
            self.deny.insert(id);
        }
    }

    pub fn is_deny(&self, id: u32) -> bool {
        self.deny.contains(&id)
    }

    /// The `deny` shard jobs of `pending` that stay pending this cycle (not in `started`) while
    /// shard jobs run: they wait for a node without shard jobs, which their reason should say.
    pub fn waiting_deny(&self, pending: &[PendingJob], started: &HashSet<u32>) -> Vec<u32> {
        if self.deny.is_empty() || self.running == 0 {
            return Vec::new();
        }
        pending.iter().map(|p| p.id.0).filter(|id| self.is_deny(*id) && !started.contains(id)).collect()
    }

    /// The planner's node filter: a `deny` shard job only on a node without other shard jobs
    /// (running, or started earlier in this plan); any other shard job never on a node with a
    /// `deny` shard job; a `gpu` job never on a node with shard jobs (Slurm could give it a GPU
    /// whose shards are in use). Jobs without GPUs are not constrained.
    pub fn node_allowed(&self, job: &PendingJob, node: &NodeView) -> bool {
        let id = job.id.0;
        if !self.all.contains(&id) {
            return job.request.gpus_per_node == 0 || !node.jobs.iter().any(|j| self.all.contains(&j.0));
        }
        if self.deny.contains(&id) {
            !node.jobs.iter().any(|j| j.0 != id && self.all.contains(&j.0))
        } else {
            !node.jobs.iter().any(|j| self.deny.contains(&j.0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{ClusterView, GpuTenant};
    use crate::types::{GpuType, Hints, JobId, Node, NodeAllocation, NodeIdx, PowerState, Request};

    fn pending(id: u32, gpus: u32) -> PendingJob {
        PendingJob {
            id: JobId(id),
            user: 0,
            priority: 1,
            submit_time_s: 0.0,
            request: Request { nodes: 1, gpus_per_node: gpus, cpus_per_node: 1, mem_mb_per_node: 0 },
            time_limit_s: 60.0,
            hints: Hints::default(),
            cpus_range: None,
            eligible: Vec::new(),
            placed_by_slurm: false,
            alternative: false,
            no_reservation: false,
            slurm_may_spread: false,
        }
    }

    /// Node 0 runs shard job 1 (allow), node 1 runs shard job 2 (deny), node 2 runs gpu job 3,
    /// node 3 is idle.
    fn view() -> ClusterView {
        let gt = GpuType { name: "v100".into(), default_clock_mhz: 1312, min_clock_mhz: 135, max_clock_mhz: 1530, idle_power_w: 40.0, max_power_w: 300.0 };
        let nodes = (0..4)
            .map(|i| Node { name: format!("n{i}"), gpu_type: 0, gpus: 2, cpus: 8, mem_mb: 0, power: PowerState::On, available: true })
            .collect();
        let mut v = ClusterView::new(vec![gt], nodes);
        for (job, node) in [(1, 0), (2, 1), (3, 2)] {
            let alloc = NodeAllocation { node: NodeIdx(node), gpu_indices: vec![0], cpus: 1, mem_mb: 0 };
            let tenant = GpuTenant { job: JobId(job), share_allowed: job == 1, max_slowdown: 1.0, family: None, clock_mhz: 1312, power_w: 100.0 };
            v.add_job(JobId(job), &[alloc], 1e9, &tenant);
        }
        v
    }

    #[test]
    fn deny_shard_jobs_and_gpu_jobs_stay_off_nodes_with_shard_jobs() {
        let mut shards = ShardJobs::default();
        shards.add(1, true);
        shards.add(2, false);
        shards.add(10, true); // pending allow shard job
        shards.add(11, false); // pending deny shard job
        let v = view();
        let allowed = |job: PendingJob| (0..4).filter(|&n| shards.node_allowed(&job, &v.nodes[n])).collect::<Vec<_>>();
        assert_eq!(allowed(pending(10, 1)), vec![0, 2, 3], "allow shard job: anywhere but next to the deny job");
        assert_eq!(allowed(pending(11, 1)), vec![2, 3], "deny shard job: only where no shard job runs");
        assert_eq!(allowed(pending(12, 1)), vec![2, 3], "gpu job: only where no shard job runs");
        assert_eq!(allowed(pending(13, 0)), vec![0, 1, 2, 3], "CPU-only job: anywhere");
    }
}
