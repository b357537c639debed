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

/// The jobs on one GPU: one inline, a second (time-slicing) on the heap, so that a cycle's view
/// of a busy cluster costs no allocation per busy GPU.
pub type GpuTenants = smallvec::SmallVec<[GpuTenant; 1]>;

/// A job on one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuTenant {
    pub job: JobId,
    pub share_allowed: bool,
    pub max_slowdown: f64,
    /// Shared by the tenant's GPUs (a clone per GPU costs no allocation).
    pub family: Option<std::sync::Arc<str>>,
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
    pub gpus: Vec<GpuTenants>,
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

    /// Does a claim (a reservation of this cycle's plan, a Slurm reservation, a will-run
    /// window) that holds against a job in reservation `own` overlap `[from_s, to_s)`?
    pub fn claimed_over(&self, from_s: f64, to_s: f64, own: Option<u32>) -> bool {
        self.claims.iter().any(|c| c.binds(own) && c.start_s < to_s && c.end_s > from_s && (c.amount.gpus > 0 || c.amount.cpus > 0 || c.amount.mem_mb > 0))
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
        self.free_profile(own).earliest_fit(need, not_before_s, duration_s)
    }

    /// The free amount as a step function of time, for a job inside Slurm reservation `own`:
    /// releases raise it, claims lower it while they last.
    pub fn free_profile(&self, own: Option<u32>) -> FreeProfile {
        let mut p = FreeProfile::default();
        self.free_profile_into(own, &mut p);
        p
    }

    /// [`NodeView::free_profile`] written over `profile`, whose memory it reuses (the planner
    /// builds a node's profile again after every change to the node).
    pub fn free_profile_into(&self, own: Option<u32>, profile: &mut FreeProfile) {
        // The changes go into the profile's own vector and become levels in place.
        let segments = &mut profile.segments;
        segments.clear();
        segments.reserve(1 + self.releases.len() + 2 * self.claims.len());
        segments.push((f64::NEG_INFINITY, self.free));
        for r in &self.releases {
            segments.push((r.at_s, r.amount));
        }
        for c in self.claims.iter().filter(|c| c.binds(own)) {
            let neg = Amount { gpus: -c.amount.gpus, cpus: -c.amount.cpus, mem_mb: -c.amount.mem_mb };
            segments.push((c.start_s, neg));
            segments.push((c.end_s, c.amount));
        }
        segments[1..].sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut level = self.free;
        let (mut read, mut write) = (1, 1);
        while read < segments.len() {
            // Every change at this instant at once.
            let t = segments[read].0;
            while read < segments.len() && segments[read].0 == t {
                level.add(&segments[read].1);
                read += 1;
            }
            segments[write] = (t, level);
            write += 1;
        }
        segments.truncate(write);
    }

    /// Does a Slurm reservation other than `own` hold this node at some moment of
    /// `[from_s, to_s)`?
    pub fn reserved_by_other(&self, from_s: f64, to_s: f64, own: Option<u32>) -> bool {
        self.claims.iter().any(|c| c.resv.is_some() && c.resv != own && c.start_s < to_s && c.end_s > from_s)
    }
}

/// A node's free amount over time: `(from, level)` segments in time order, each lasting until
/// the next one's start (the first from -inf, the last to +inf).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FreeProfile {
    segments: Vec<(f64, Amount)>,
}

impl FreeProfile {
    /// Is `need` free over all of `[from_s, to_s)`?
    pub fn covers_over(&self, need: &Amount, from_s: f64, to_s: f64) -> bool {
        self.segments.iter().enumerate().all(|(k, (from, level))| {
            let to = self.segments.get(k + 1).map_or(f64::INFINITY, |s| s.0);
            to <= from_s || *from >= to_s || level.covers(need)
        })
    }

    /// The earliest `t >= not_before_s` at which `need` is free over all of
    /// `[t, t + duration_s)`: the segments where it is not free are "bad", and the window must
    /// meet none of them. One pass over the segments.
    pub fn earliest_fit(&self, need: &Amount, not_before_s: f64, duration_s: f64) -> Option<f64> {
        let mut t = not_before_s;
        for (k, (from, level)) in self.segments.iter().enumerate() {
            if level.covers(need) {
                continue;
            }
            let to = self.segments.get(k + 1).map_or(f64::INFINITY, |s| s.0);
            if to <= t {
                continue;
            }
            if t + duration_s <= *from {
                break;
            }
            t = to;
        }
        t.is_finite().then_some(t)
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
                    gpus: vec![GpuTenants::new(); node.gpus as usize],
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
    pub fn from_snapshot<'s>(s: &'s Snapshot, family_of: impl Fn(&'s Hints) -> Option<std::sync::Arc<str>>, power_of: impl Fn(&'s RunningJob) -> f64) -> ClusterView {
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
            // A pending job's will-run window is claimed when the planner reaches that job.
            if resv.held_for.is_none() {
                self.add_reservation_claim(r as u32, resv, node_sets);
            }
        }
    }

    /// Whole-node claims of reservation `r` over its window; the nodes it covers.
    pub fn add_reservation_claim(&mut self, r: u32, resv: &crate::eligibility::AdvanceReservation, node_sets: &[crate::eligibility::NodeSet]) -> Vec<usize> {
        let Some(set) = node_sets.get(resv.node_set as usize) else { return Vec::new() };
        let mut covered = Vec::new();
        for n in set.iter() {
            let Some(nv) = self.nodes.get_mut(n) else { continue };
            let whole = Amount { gpus: nv.node.gpus as i64, cpus: nv.node.cpus as i64, mem_mb: nv.node.mem_mb as i64 };
            nv.claims.push(Claim { job: JobId(0), start_s: resv.start_s, end_s: resv.end_s, amount: whole, resv: Some(r) });
            covered.push(n);
        }
        covered
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The definition the sweep must agree with: the earliest of `not_before_s`, release times
    /// and claim ends at which the whole window fits.
    fn earliest_fit_by_definition(nv: &NodeView, need: &Amount, not_before_s: f64, duration_s: f64, own: Option<u32>) -> Option<f64> {
        let fits = |t: f64| nv.min_free_over_for(t, t + duration_s, own).covers(need);
        if fits(not_before_s) {
            return Some(not_before_s);
        }
        nv.releases
            .iter()
            .map(|r| r.at_s)
            .chain(nv.claims.iter().filter(|c| c.binds(own)).map(|c| c.end_s))
            .filter(|t| *t > not_before_s)
            .filter(|t| fits(*t))
            .min_by(f64::total_cmp)
    }

    fn node(free_gpus: i64, releases: Vec<(f64, i64)>, claims: Vec<(f64, f64, i64, Option<u32>)>) -> NodeView {
        let amount = |g: i64| Amount { gpus: g, cpus: 4 * g, mem_mb: 1024 * g };
        NodeView {
            node: crate::types::Node { name: "n".into(), gpu_type: 0, gpus: 8, cpus: 32, mem_mb: 8192, power: PowerState::On, available: true },
            gpus: vec![GpuTenants::new(); 8],
            free: amount(free_gpus),
            releases: releases.into_iter().enumerate().map(|(i, (at_s, g))| Release { at_s, job: JobId(i as u32), amount: amount(g) }).collect(),
            claims: claims.into_iter().map(|(start_s, len, g, resv)| Claim { job: JobId(99), start_s, end_s: start_s + len, amount: amount(g), resv }).collect(),
            jobs: BTreeSet::new(),
        }
    }

    proptest! {
        #[test]
        fn the_sweep_agrees_with_the_definition(
            free in 0i64..5,
            releases in proptest::collection::vec((0u32..20, 1i64..4), 0..5),
            claims in proptest::collection::vec((0u32..20, 1u32..10, 1i64..8, proptest::option::of(0u32..2)), 0..6),
            need in 1i64..8,
            not_before in 0u32..10,
            duration in 1u32..10,
            own in proptest::option::of(0u32..2),
        ) {
            let nv = node(free, releases.into_iter().map(|(t, g)| (f64::from(t), g)).collect(), claims.into_iter().map(|(s, l, g, r)| (f64::from(s), f64::from(l), g, r)).collect());
            let need = Amount { gpus: need, cpus: 4 * need, mem_mb: 1024 * need };
            let (nb, d) = (f64::from(not_before), f64::from(duration));
            prop_assert_eq!(nv.earliest_fit_for(&need, nb, d, own), earliest_fit_by_definition(&nv, &need, nb, d, own));
            prop_assert_eq!(nv.free_profile(own).covers_over(&need, nb, nb + d), nv.min_free_over_for(nb, nb + d, own).covers(&need));
        }
    }
}
