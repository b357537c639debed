//! Node ranking in the shape of kube-scheduler's framework: a filter (can the job run on this
//! node now without delaying a reservation?) and independent scorers, each a cost in 0..1
//! (lower is better), weighted from configuration. The breakdown travels with the decision.

use crate::config::ScorerWeights;
use crate::decision::ScoreBreakdown;
use crate::state::{Amount, NodeView};
use crate::types::PowerState;

/// Can `need` run on this node from `now_s` until `end_s` without touching a claim?
pub fn filter(nv: &NodeView, need: &Amount, now_s: f64, end_s: f64) -> bool {
    filter_for(nv, need, now_s, end_s, None)
}

/// [`filter`] for a job running inside Slurm reservation `own`.
pub fn filter_for(nv: &NodeView, need: &Amount, now_s: f64, end_s: f64, own: Option<u32>) -> bool {
    nv.node.available && nv.free.covers(need) && nv.min_free_over_for(now_s, end_s, own).covers(need)
}

/// Energy cost: predicted energy of this placement relative to a reference placement on an
/// otherwise idle node at full power (so 1.0 is "as bad as it gets").
pub fn energy_cost(energy_j: f64, reference_j: f64) -> f64 {
    if reference_j > 0.0 { (energy_j / reference_j).clamp(0.0, 1.0) } else { 0.0 }
}

/// Energy of keeping or bringing a node up for a job that expects to run `runtime_s`, using
/// `gpus_used` of its GPUs: zero on a node that is busy anyway.
pub fn wake_energy_j(nv: &NodeView, gpus_used: u32, runtime_s: f64, base_w: f64, idle_gpu_w: f64, resume_s: f64) -> f64 {
    if !nv.is_idle() {
        return 0.0;
    }
    let idle_gpus = nv.node.gpus.saturating_sub(gpus_used) as f64;
    let keep_on = (base_w + idle_gpus * idle_gpu_w) * runtime_s;
    match nv.node.power {
        PowerState::Suspended => keep_on + base_w * resume_s,
        _ => keep_on,
    }
}

/// Interference cost: the predicted slowdowns of both tenants, relative to the largest the
/// site accepts.
pub fn interference_cost(slowdown_new: f64, slowdown_tenant: f64, max_slowdown: f64) -> f64 {
    let span = (max_slowdown - 1.0).max(1e-6);
    (((slowdown_new - 1.0).max(0.0) + (slowdown_tenant - 1.0).max(0.0)) / (2.0 * span)).clamp(0.0, 1.0)
}

/// Fragmentation cost: free GPUs the node keeps after the placement (best fit is 0), plus a
/// penalty when the GPUs are not a buddy-aligned block.
pub fn fragmentation_cost(gpus_total: u32, free_after: u32, aligned: bool) -> f64 {
    let left = if gpus_total > 0 { free_after as f64 / gpus_total as f64 } else { 0.0 };
    (0.8 * left + if aligned { 0.0 } else { 0.2 }).clamp(0.0, 1.0)
}

/// Carbon cost of running now: intensity now relative to the forecast for the next day, mapped
/// so that "as usual" is 0.5.
pub fn carbon_cost(relative_intensity: Option<f64>) -> f64 {
    relative_intensity.map_or(0.0, |r| (r / 2.0).clamp(0.0, 1.0))
}

/// Slurm's own preference: lower node index first.
pub fn node_order_cost(node_idx: usize, nodes: usize) -> f64 {
    if nodes > 1 { node_idx as f64 / (nodes - 1) as f64 } else { 0.0 }
}

pub fn weigh(w: &ScorerWeights, mut b: ScoreBreakdown) -> ScoreBreakdown {
    b.total = w.energy * b.energy
        + w.interference * b.interference
        + w.fragmentation * b.fragmentation
        + w.carbon * b.carbon
        + w.node_order * b.node_order;
    b
}

/// Pick `count` GPUs among the free ones: with buddy alignment, the tightest aligned block of
/// size `count.next_power_of_two()` that has them; otherwise (or if none) the lowest indices.
/// Returns the indices and whether they lie in one aligned block.
pub fn choose_gpus(nv: &NodeView, count: u32, buddy: bool) -> Option<(Vec<u8>, bool)> {
    // Called for every node a job is scored on: counted in place, one vector for the answer.
    if (nv.free_gpu_indices().count() as u32) < count {
        return None;
    }
    if count == 0 {
        return Some((Vec::new(), true));
    }
    let total = nv.gpus.len();
    let block = (count as usize).next_power_of_two();
    if buddy && block <= total {
        let mut best: Option<(usize, usize)> = None; // (free in block, offset)
        for offset in (0..total).step_by(block) {
            let end = (offset + block).min(total);
            let n_free = (offset..end).filter(|i| nv.gpus[*i].is_empty()).count();
            if n_free >= count as usize && best.is_none_or(|(bf, _)| n_free < bf) {
                best = Some((n_free, offset));
            }
        }
        if let Some((_, offset)) = best {
            let picked: Vec<u8> = (offset..(offset + block).min(total))
                .filter(|i| nv.gpus[*i].is_empty())
                .take(count as usize)
                .map(|i| i as u8)
                .collect();
            return Some((picked, true));
        }
    }
    let picked: Vec<u8> = nv.free_gpu_indices().take(count as usize).collect();
    let aligned = count.is_power_of_two() && picked.first().is_some_and(|f| (*f as usize).is_multiple_of(block)) && {
        let first = picked[0] as usize;
        picked.iter().enumerate().all(|(k, g)| *g as usize == first + k)
    };
    Some((picked, aligned))
}
