//! Elastic GPU counts under an energy (or carbon) budget: PowerFlow's and GreenFlow's way of
//! trading JCT for joules by choosing how many GPUs each job gets.
//!
//! - **Scaling.** A job's throughput on `g` GPUs relative to one GPU is predicted by Amdahl's
//!   law, `S(g) = 1 / (s + (1 - s) / g)`, with the serial fraction `s` fitted per model family
//!   (least squares, grid over `s`) on Gavel's measured isolated throughputs at 1, 2, 4 and 8
//!   GPUs ([`measured_speedup`]); a family without multi-GPU measurements gets the fit pooled
//!   over all families.
//! - **Choices.** A job that fits on one node may run on half, the same or twice its request,
//!   in powers of two (buddy-aligned blocks) up to one node's GPUs; a multi-node job keeps its
//!   request.
//! - **Allocation** ([`allocate`], re-run at every scheduling cycle for the pending jobs): every
//!   pending job starts at its smallest choice, jobs are admitted in queue order while the free
//!   GPUs last, and the GPUs left over go, one doubling at a time, to the admitted job that
//!   saves the most predicted JCT per extra GPU, as long as the extra energy is at most the
//!   budget's price `joules_per_jct_s` times the JCT it saves. The price is the budget's
//!   Lagrange multiplier: sweeping it traces the energy vs JCT frontier, and the budget table
//!   reads the best JCT within each budget. GreenFlow prices carbon instead: the extra energy
//!   is weighted by the grid's intensity now relative to its forecast (cheap when clean).
//!
//! What the papers do beyond this and is not modelled: resizing *running* jobs (checkpoint and
//! restart at a new GPU count) and batch-size tuning.

use std::collections::BTreeMap;

use crate::data::gavel::GavelThroughputs;
use crate::workloads::{canonical_family, gavel_family};

/// Amdahl's law with serial fraction `serial`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Amdahl {
    pub serial: f64,
}

impl Amdahl {
    pub fn speedup(&self, gpus: u32) -> f64 {
        let g = gpus.max(1) as f64;
        1.0 / (self.serial + (1.0 - self.serial) / g)
    }

    /// Least-squares fit of `(gpus, speedup over one GPU)` points; `None` without points.
    pub fn fit(points: &[(u32, f64)]) -> Option<Amdahl> {
        if points.is_empty() {
            return None;
        }
        (0..=1000)
            .map(|i| Amdahl { serial: i as f64 / 1000.0 })
            .map(|a| (points.iter().map(|(g, s)| (a.speedup(*g) - s).powi(2)).sum::<f64>(), a))
            .min_by(|x, y| x.0.total_cmp(&y.0))
            .map(|(_, a)| a)
    }
}

/// GPU counts Gavel measured jobs on.
pub const MEASURED_SCALES: [u32; 4] = [1, 2, 4, 8];

/// Measured speedup of `job_type` on `gpus` GPUs over one GPU: Gavel's isolated throughputs,
/// held at most linear (a superlinear ratio, which some of Gavel's multi-GPU rows show, says the
/// one-GPU run was not representative; it is read as linear). `None` when either is missing.
pub fn measured_speedup(t: &GavelThroughputs, gpu: &str, job_type: &str, gpus: u32) -> Option<f64> {
    let one = t.isolated(gpu, job_type, 1).filter(|x| *x > 0.0)?;
    let at = t.isolated(gpu, job_type, gpus).filter(|x| *x > 0.0)?;
    Some((at / one).min(gpus as f64))
}

/// The planner's scaling predictions: one Amdahl fit per family, and a pooled one.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalingModel {
    per_family: BTreeMap<String, Amdahl>,
    pooled: Amdahl,
}

impl ScalingModel {
    /// Fit on every job type of `t` measured on `gpu` (pass the planner's half only).
    pub fn from_gavel(t: &GavelThroughputs, gpu: &str) -> Option<ScalingModel> {
        let mut by_family: BTreeMap<String, Vec<(u32, f64)>> = BTreeMap::new();
        for job_type in t.job_types(gpu) {
            for g in MEASURED_SCALES.into_iter().skip(1) {
                if let Some(s) = measured_speedup(t, gpu, &job_type, g) {
                    by_family.entry(canonical_family(gavel_family(&job_type))).or_default().push((g, s));
                }
            }
        }
        let all: Vec<(u32, f64)> = by_family.values().flatten().copied().collect();
        let pooled = Amdahl::fit(&all)?;
        let per_family = by_family.into_iter().filter_map(|(f, pts)| Amdahl::fit(&pts).map(|a| (f, a))).collect();
        Some(ScalingModel { per_family, pooled })
    }

    pub fn curve(&self, family: Option<&str>) -> Amdahl {
        family.and_then(|f| self.per_family.get(&canonical_family(f))).copied().unwrap_or(self.pooled)
    }

    pub fn speedup(&self, family: Option<&str>, gpus: u32) -> f64 {
        self.curve(family).speedup(gpus)
    }
}

/// GPU counts a job requesting `requested` GPUs may run on: half, the same, twice, in powers of
/// two, at most `per_node` (so the job stays on one node); a job larger than a node keeps its
/// request. Ascending, always containing `requested` when it fits on a node.
pub fn choices(requested: u32, per_node: u32) -> Vec<u32> {
    if requested == 0 || requested > per_node {
        return vec![requested];
    }
    let mut out: Vec<u32> = (0..=per_node.ilog2()).map(|e| 1u32 << e).filter(|g| 2 * g >= requested && *g <= 2 * requested && *g <= per_node).collect();
    out.push(requested);
    out.sort_unstable();
    out.dedup();
    out
}

/// One pending job as the allocation sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ElasticJob {
    /// Allowed GPU counts, ascending (see [`choices`]).
    pub choices: Vec<u32>,
    /// Predicted runtime at the first choice (s).
    pub runtime_at_first_s: f64,
    /// Predicted speedup (over one GPU) at each choice.
    pub speedup: Vec<f64>,
    /// Predicted power per GPU while running (W), host share included.
    pub power_per_gpu_w: f64,
}

impl ElasticJob {
    fn runtime_s(&self, k: usize) -> f64 {
        self.runtime_at_first_s * self.speedup[0] / self.speedup[k].max(1e-9)
    }

    fn energy_j(&self, k: usize) -> f64 {
        self.choices[k] as f64 * self.power_per_gpu_w * self.runtime_s(k)
    }
}

/// GPU count for each job (same order), given `free_gpus` and the budget's price: the energy
/// (J, weighted by `energy_weight`, e.g. relative carbon intensity) the scheduler may spend to
/// save one second of JCT. See the module documentation for the rule.
pub fn allocate(jobs: &[ElasticJob], free_gpus: u32, joules_per_jct_s: f64, energy_weight: f64) -> Vec<u32> {
    let mut level = vec![0usize; jobs.len()];
    let mut left = free_gpus as i64;
    let mut admitted = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        let need = j.choices.first().copied().unwrap_or(0) as i64;
        if need > left {
            break;
        }
        left -= need;
        admitted.push(i);
    }
    // Upgrades: the best JCT saved per extra GPU first, within the price.
    loop {
        let mut best: Option<(f64, usize, i64)> = None;
        for &i in &admitted {
            let j = &jobs[i];
            let k = level[i];
            if k + 1 >= j.choices.len() || j.speedup.len() != j.choices.len() {
                continue;
            }
            let extra = (j.choices[k + 1] - j.choices[k]) as i64;
            if extra > left {
                continue;
            }
            let saved_s = j.runtime_s(k) - j.runtime_s(k + 1);
            let cost_j = (j.energy_j(k + 1) - j.energy_j(k)) * energy_weight;
            if saved_s <= 0.0 || cost_j > joules_per_jct_s * saved_s {
                continue;
            }
            let value = saved_s / extra as f64;
            if best.is_none_or(|(v, _, _)| value > v) {
                best = Some((value, i, extra));
            }
        }
        let Some((_, i, extra)) = best else { break };
        level[i] += 1;
        left -= extra;
    }
    jobs.iter().zip(&level).map(|(j, k)| j.choices.get(*k).copied().unwrap_or(0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amdahl_fit_recovers_the_serial_fraction() {
        let truth = Amdahl { serial: 0.2 };
        let pts: Vec<(u32, f64)> = [2, 4, 8].iter().map(|g| (*g, truth.speedup(*g))).collect();
        let fit = Amdahl::fit(&pts).expect("fit");
        assert!((fit.serial - 0.2).abs() < 1e-3, "{fit:?}");
        assert!((Amdahl { serial: 0.0 }.speedup(8) - 8.0).abs() < 1e-9);
        assert!(Amdahl::fit(&[]).is_none());
    }

    #[test]
    fn choices_are_buddy_blocks_around_the_request() {
        assert_eq!(choices(1, 8), vec![1, 2]);
        assert_eq!(choices(2, 8), vec![1, 2, 4]);
        assert_eq!(choices(3, 8), vec![2, 3, 4]);
        assert_eq!(choices(8, 8), vec![4, 8]);
        assert_eq!(choices(16, 8), vec![16]);
    }

    fn job(choices: Vec<u32>, serial: f64) -> ElasticJob {
        let a = Amdahl { serial };
        let speedup = choices.iter().map(|g| a.speedup(*g)).collect();
        ElasticJob { choices, runtime_at_first_s: 3600.0, speedup, power_per_gpu_w: 250.0 }
    }

    #[test]
    fn the_price_decides_who_grows_and_scarcity_shrinks_everyone() {
        let jobs = [job(vec![1, 2, 4], 0.05), job(vec![1, 2, 4], 0.6)];
        // No energy to spare: everyone at the smallest count.
        assert_eq!(allocate(&jobs, 16, 0.0, 1.0), vec![1, 1]);
        // A moderate price grows the job that scales, not the one that does not.
        let a = allocate(&jobs, 16, 400.0, 1.0);
        assert!(a[0] >= 2 && a[1] == 1, "{a:?}");
        // Any price, but only two GPUs: both admitted at one.
        assert_eq!(allocate(&jobs, 2, 1e9, 1.0), vec![1, 1]);
        // A dirtier grid (weight 4) makes the same price buy less.
        let dirty = allocate(&jobs, 16, 400.0, 4.0);
        assert!(dirty[0] <= a[0], "{dirty:?} vs {a:?}");
        // Jobs beyond the free GPUs wait at their smallest count.
        assert_eq!(allocate(&[job(vec![4, 8], 0.1), job(vec![4, 8], 0.1)], 4, 1e9, 1.0), vec![4, 4]);
    }
}
