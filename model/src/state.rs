//! The planner's working view of the cluster: per node, which GPUs are free or shared by whom,
//! free CPUs and memory, when running jobs release what they hold (by their time limits), and
//! the claims of reservations made in this cycle.
//!
//! A plugin builds it fresh from a [`Snapshot`] every cycle; the simulator keeps one alive and
//! updates it as jobs start and end, which is what makes replaying a long trace fast.

use std::collections::{BTreeMap, BTreeSet};

use crate::types::{GpuType, Hints, JobId, Node, NodeAllocation, NodeIdx, PowerState, RunningJob, Snapshot};

/// Resources counted per node.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Amount {
    pub gpus: i64,
    pub cpus: i64,
    pub mem_mb: i64,
}

impl Amount {
    pub fn covers(&self, need: &Amount) -> bool {
        self.gpus >= need.gpus && self.cpus >= need.cpus && self.mem_mb >= need.mem_mb
    }
    fn add(&mut self, o: &Amount) {
        self.gpus += o.gpus;
        self.cpus += o.cpus;
        self.mem_mb += o.mem_mb;
    }
    fn sub(&mut self, o: &Amount) {
        self.gpus -= o.gpus;
        self.cpus -= o.cpus;
        self.mem_mb -= o.mem_mb;
    }
    fn min(&self, o: &Amount) -> Amount {
        Amount { gpus: self.gpus.min(o.gpus), cpus: self.cpus.min(o.cpus), mem_mb: self.mem_mb.min(o.mem_mb) }
    }
}

/// A job on one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuTenant {
    pub job: JobId,
    pub share_allowed: bool,
    pub max_slowdown: f64,
    pub family: Option<String>,
    pub clock_mhz: u32,
    /// Predicted power of this job alone at its clock (W).
    pub power_w: f64,
}

/// Resources that come back when a running job ends (at the latest by its time limit).
#[derive(Debug, Clone, PartialEq)]
pub struct Release {
    pub at_s: f64,
    pub job: JobId,
    pub amount: Amount,
}

/// Resources a reservation holds on a node over `[start_s, end_s)`: the planner's reservation
/// for a blocked job, or (with `resv`) one of Slurm's advanced reservations, which holds the
/// whole node against every job that does not run inside it.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub job: JobId,
    pub start_s: f64,
    pub end_s: f64,
    pub amount: Amount,
    /// Index of the Slurm reservation (in the snapshot) this claim stands for.
    pub resv: Option<u32>,
}

impl Claim {
    /// Does this claim hold resources against a job running inside reservation `own`?
    fn binds(&self, own: Option<u32>) -> bool {
        self.resv.is_none() || self.resv != own
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    pub node: Node,
    /// Up to two tenants per GPU (time-slicing).
    pub gpus: Vec<Vec<GpuTenant>>,
    pub free: Amount,
    pub releases: Vec<Release>,
    pub claims: Vec<Claim>,
    pub jobs: BTreeSet<JobId>,
}

impl NodeView {
    pub fn free_gpu_indices(&self) -> impl Iterator<Item = u8> + '_ {
        self.gpus.iter().enumerate().filter(|(_, t)| t.is_empty()).map(|(i, _)| i as u8)
    }

    pub fn is_idle(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Smallest amount free at any moment of `[from_s, to_s)`, counting releases by time limit
    /// and this cycle's reservation claims.
    pub fn min_free_over(&self, from_s: f64, to_s: f64) -> Amount {
        self.min_free_over_for(from_s, to_s, None)
    }

    /// [`NodeView::min_free_over`] for a job running inside Slurm reservation `own` (whose
    /// claims do not hold against it).
    pub fn min_free_over_for(&self, from_s: f64, to_s: f64, own: Option<u32>) -> Amount {
        if self.claims.is_empty() {
            return if self.releases.iter().any(|r| r.at_s <= from_s) { self.free_at(from_s) } else { self.free };
        }
        // Free only drops when a claim starts: check the start and every claim start inside.
        let mut lowest = self.free_at_for(from_s, own);
        for c in &self.claims {
            if c.start_s > from_s && c.start_s < to_s && c.binds(own) {
                lowest = lowest.min(&self.free_at_for(c.start_s, own));
            }
        }
        lowest
    }

    /// Free amount at time `t_s` (releases up to `t_s` returned, claims active at `t_s` taken).
    pub fn free_at(&self, t_s: f64) -> Amount {
        self.free_at_for(t_s, None)
    }

    fn free_at_for(&self, t_s: f64, own: Option<u32>) -> Amount {
        let mut a = self.free;
        for r in &self.releases {
            if r.at_s <= t_s {
                a.add(&r.amount);
            }
        }
        for c in &self.claims {
            if c.start_s <= t_s && t_s < c.end_s && c.binds(own) {
                a.sub(&c.amount);
            }
        }
        a
    }

    /// Earliest `t >= not_before_s` at which `need` is free for all of `[t, t + duration_s)`.
    pub fn earliest_fit(&self, need: &Amount, not_before_s: f64, duration_s: f64) -> Option<f64> {
        self.earliest_fit_for(need, not_before_s, duration_s, None)
    }

    /// [`NodeView::earliest_fit`] for a job running inside Slurm reservation `own`.
    pub fn earliest_fit_for(&self, need: &Amount, not_before_s: f64, duration_s: f64, own: Option<u32>) -> Option<f64> {
        // Free only rises when a release happens or a claim ends: the earliest fit is the
        // smallest of those moments (or `not_before_s`) at which the whole window fits.
        let fits = |t: f64| self.min_free_over_for(t, t + duration_s, own).covers(need);
        if fits(not_before_s) {
            return Some(not_before_s);
        }
        self.releases
            .iter()
            .map(|r| r.at_s)
            .chain(self.claims.iter().filter(|c| c.binds(own)).map(|c| c.end_s))
            .filter(|t| *t > not_before_s)
            .filter(|t| fits(*t))
            .min_by(f64::total_cmp)
    }

    /// Does a Slurm reservation other than `own` hold this node at some moment of
    /// `[from_s, to_s)`?
    pub fn reserved_by_other(&self, from_s: f64, to_s: f64, own: Option<u32>) -> bool {
        self.claims.iter().any(|c| c.resv.is_some() && c.resv != own && c.start_s < to_s && c.end_s > from_s)
    }
}

/// The whole cluster as the planner sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterView {
    pub gpu_types: Vec<GpuType>,
    pub nodes: Vec<NodeView>,
    /// Node indices by number of free GPUs (index = free count), for best-fit search.
    by_free_gpus: Vec<BTreeSet<u32>>,
    /// Where each running job sits.
    pub placements: BTreeMap<JobId, Vec<NodeAllocation>>,
    /// Nodes with a GPU that has exactly one tenant, and that tenant allows sharing.
    shareable: BTreeSet<u32>,
}

impl ClusterView {
    pub fn new(gpu_types: Vec<GpuType>, nodes: Vec<Node>) -> ClusterView {
        let max_gpus = nodes.iter().map(|n| n.gpus as usize).max().unwrap_or(0);
        let mut by_free_gpus = vec![BTreeSet::new(); max_gpus + 1];
        let views = nodes
            .into_iter()
            .enumerate()
            .map(|(i, node)| {
                by_free_gpus[node.gpus as usize].insert(i as u32);
                NodeView {
                    gpus: vec![Vec::new(); node.gpus as usize],
                    free: Amount { gpus: node.gpus as i64, cpus: node.cpus as i64, mem_mb: node.mem_mb as i64 },
                    releases: Vec::new(),
                    claims: Vec::new(),
                    jobs: BTreeSet::new(),
                    node,
                }
            })
            .collect();
        ClusterView { gpu_types, nodes: views, by_free_gpus, placements: BTreeMap::new(), shareable: BTreeSet::new() }
    }

    /// Build from a snapshot. Allocations that do not fit the node (inconsistent input) are
    /// counted as far as they go; the planner never places more on such a node.
    pub fn from_snapshot(s: &Snapshot, family_of: impl Fn(&Hints) -> Option<String>, power_of: impl Fn(&RunningJob) -> f64) -> ClusterView {
        let mut v = ClusterView::new(s.gpu_types.clone(), s.nodes.clone());
        for r in &s.running {
            let tenant = GpuTenant {
                job: r.id,
                share_allowed: r.shared || r.hints.share_allowed,
                max_slowdown: r.hints.max_slowdown,
                family: family_of(&r.hints),
                clock_mhz: r.clock_mhz,
                power_w: power_of(r),
            };
            v.add_job(r.id, &r.allocations, r.end_time_s, &tenant);
        }
        v
    }

    fn reindex(&mut self, node: usize, old_free: i64) {
        let shareable = self.nodes[node].gpus.iter().any(|t| t.len() == 1 && t[0].share_allowed);
        if shareable {
            self.shareable.insert(node as u32);
        } else {
            self.shareable.remove(&(node as u32));
        }
        let new_free = self.nodes[node].free.gpus.max(0) as usize;
        let old = old_free.max(0) as usize;
        if old != new_free {
            if let Some(set) = self.by_free_gpus.get_mut(old) {
                set.remove(&(node as u32));
            }
            if let Some(set) = self.by_free_gpus.get_mut(new_free) {
                set.insert(node as u32);
            }
        }
    }

    /// Record a job as running on `allocations` until `end_s` (its time limit).
    pub fn add_job(&mut self, job: JobId, allocations: &[NodeAllocation], end_s: f64, tenant: &GpuTenant) {
        for a in allocations {
            let Some(nv) = self.nodes.get_mut(a.node.0 as usize) else { continue };
            let old_free = nv.free.gpus;
            let mut exclusive_gpus = 0;
            for &g in &a.gpu_indices {
                if let Some(slot) = nv.gpus.get_mut(g as usize) {
                    if slot.is_empty() {
                        exclusive_gpus += 1;
                    }
                    slot.push(GpuTenant { job, ..tenant.clone() });
                }
            }
            let amount = Amount { gpus: exclusive_gpus, cpus: a.cpus as i64, mem_mb: a.mem_mb as i64 };
            nv.free.sub(&amount);
            nv.releases.push(Release { at_s: end_s, job, amount });
            nv.jobs.insert(job);
            self.reindex(a.node.0 as usize, old_free);
        }
        self.placements.insert(job, allocations.to_vec());
    }

    /// Forget a job that ended. A GPU it shared stays with the other tenant.
    pub fn remove_job(&mut self, job: JobId) {
        let Some(allocs) = self.placements.remove(&job) else { return };
        for a in &allocs {
            let Some(nv) = self.nodes.get_mut(a.node.0 as usize) else { continue };
            let old_free = nv.free.gpus;
            let mut freed_gpus = 0;
            // The first tenant of a GPU owns it in the release list; when the owner leaves and a
            // co-tenant stays, the co-tenant becomes the owner and will release the GPU.
            let mut new_owners = Vec::new();
            for &g in &a.gpu_indices {
                if let Some(slot) = nv.gpus.get_mut(g as usize) {
                    let was_owner = slot.first().is_some_and(|t| t.job == job);
                    slot.retain(|t| t.job != job);
                    match slot.first() {
                        None if was_owner => freed_gpus += 1,
                        Some(other) if was_owner => new_owners.push(other.job),
                        _ => {}
                    }
                }
            }
            nv.free.add(&Amount { gpus: freed_gpus, cpus: a.cpus as i64, mem_mb: a.mem_mb as i64 });
            for owner in new_owners {
                if let Some(r) = nv.releases.iter_mut().find(|r| r.job == owner) {
                    r.amount.gpus += 1;
                }
            }
            nv.releases.retain(|r| r.job != job);
            nv.jobs.remove(&job);
            self.reindex(a.node.0 as usize, old_free);
        }
    }

    /// Move a job's end (e.g. its time limit was extended).
    pub fn set_end(&mut self, job: JobId, end_s: f64) {
        if let Some(allocs) = self.placements.get(&job) {
            for a in allocs {
                if let Some(nv) = self.nodes.get_mut(a.node.0 as usize) {
                    for r in nv.releases.iter_mut().filter(|r| r.job == job) {
                        r.at_s = end_s;
                    }
                }
            }
        }
    }

    /// Record a new clock for a running job on all its GPUs.
    pub fn set_clock(&mut self, job: JobId, clock_mhz: u32, power_w: f64) {
        let Some(allocs) = self.placements.get(&job) else { return };
        for a in allocs {
            let Some(nv) = self.nodes.get_mut(a.node.0 as usize) else { continue };
            for &g in &a.gpu_indices {
                if let Some(slot) = nv.gpus.get_mut(g as usize) {
                    for t in slot.iter_mut().filter(|t| t.job == job) {
                        t.clock_mhz = clock_mhz;
                        t.power_w = power_w;
                    }
                }
            }
        }
    }

    pub fn set_power(&mut self, node: NodeIdx, state: PowerState) {
        if let Some(nv) = self.nodes.get_mut(node.0 as usize) {
            nv.node.power = state;
        }
    }

    pub fn clear_claims(&mut self) {
        for nv in &mut self.nodes {
            nv.claims.clear();
        }
    }

    /// Claims for Slurm's advanced reservations: each holds its whole nodes over its window
    /// against every job that does not run inside it.
    pub fn add_reservation_claims(&mut self, reservations: &[crate::eligibility::AdvanceReservation], node_sets: &[crate::eligibility::NodeSet]) {
        for (r, resv) in reservations.iter().enumerate() {
            let Some(set) = node_sets.get(resv.node_set as usize) else { continue };
            for n in set.iter() {
                let Some(nv) = self.nodes.get_mut(n) else { continue };
                let whole = Amount { gpus: nv.node.gpus as i64, cpus: nv.node.cpus as i64, mem_mb: nv.node.mem_mb as i64 };
                nv.claims.push(Claim { job: JobId(0), start_s: resv.start_s, end_s: resv.end_s, amount: whole, resv: Some(r as u32) });
            }
        }
    }

    /// Largest number of free GPUs on any node.
    pub fn max_free_gpus(&self) -> u32 {
        self.by_free_gpus.iter().rposition(|s| !s.is_empty()).unwrap_or(0) as u32
    }

    /// Nodes where a GPU could take a second tenant, in index order.
    pub fn shareable_nodes(&self) -> impl Iterator<Item = u32> + '_ {
        self.shareable.iter().copied()
    }

    /// Nodes with exactly `free` free GPUs, in index order.
    pub fn nodes_with_free_gpus(&self, free: u32) -> impl Iterator<Item = u32> + '_ {
        self.by_free_gpus.get(free as usize).into_iter().flat_map(|s| s.iter().copied())
    }
}
