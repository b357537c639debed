//! The split of the measured data between the planner and the ground truth, so that every
//! prediction is scored against measurements it was not fitted on.
//!
//! Within each workload family, the measured variants are sorted by batch size and alternate:
//! the 1st, 3rd, ... go to the planner (its clock curves and co-location table are fitted on
//! them), the 2nd, 4th, ... are held out for the truth (a job's sweep and Gavel type are drawn
//! among them). A family measured at one batch size only (Gavel's A3C and CycleGAN) is held out
//! whole: the planner meets it as an unknown family.
//!
//! So a clock prediction for a job never used the job's own batch size, and a co-location
//! prediction never used the pair (nor any pair with either job type) it is scored on.

use std::collections::{BTreeMap, BTreeSet};

use model::data::zeus::ZeusSweep;
use model::workloads::gavel_family;

/// Batch size in a Gavel job type name (`"ResNet-50 (batch size 64)"` -> 64); 0 when none.
pub fn gavel_batch_size(job_type: &str) -> u32 {
    job_type.split("(batch size").nth(1).and_then(|rest| rest.trim().trim_end_matches(')').trim().parse().ok()).unwrap_or(0)
}

/// Held out for the truth: the odd positions of each group's sorted batch sizes, and groups of
/// a single batch size.
fn held_out_sizes<K: Ord + Clone>(items: impl Iterator<Item = (K, u32)>) -> BTreeSet<(K, u32)> {
    let mut groups: BTreeMap<K, BTreeSet<u32>> = BTreeMap::new();
    for (k, b) in items {
        groups.entry(k).or_default().insert(b);
    }
    let mut out = BTreeSet::new();
    for (k, sizes) in groups {
        let single = sizes.len() == 1;
        for (i, b) in sizes.into_iter().enumerate() {
            if single || i % 2 == 1 {
                out.insert((k.clone(), b));
            }
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Split {
    /// (Zeus network, batch size) pairs held out for the truth.
    zeus: BTreeSet<(String, u32)>,
    /// Gavel job types held out for the truth.
    gavel: BTreeSet<String>,
}

impl Split {
    pub fn new(sweeps: &[ZeusSweep], gavel_types: &[String]) -> Split {
        let zeus = held_out_sizes(sweeps.iter().map(|s| (s.network.clone(), s.batch_size)));
        let held = held_out_sizes(gavel_types.iter().map(|t| (gavel_family(t).to_string(), gavel_batch_size(t))));
        let gavel = gavel_types.iter().filter(|t| held.contains(&(gavel_family(t).to_string(), gavel_batch_size(t)))).cloned().collect();
        Split { zeus, gavel }
    }

    /// Is this sweep the truth's (else the planner's)?
    pub fn truth_sweep(&self, s: &ZeusSweep) -> bool {
        self.zeus.contains(&(s.network.clone(), s.batch_size))
    }

    /// Is this Gavel job type the truth's (else the planner's)?
    pub fn truth_type(&self, job_type: &str) -> bool {
        self.gavel.contains(job_type)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep(network: &str, batch_size: u32) -> ZeusSweep {
        ZeusSweep { dataset: "d".into(), network: network.into(), batch_size, optimizer: "adam".into(), points: Vec::new() }
    }

    #[test]
    fn batch_sizes_alternate_and_single_variants_are_held_out() {
        let sweeps = [sweep("a", 32), sweep("a", 8), sweep("a", 16), sweep("a", 16), sweep("b", 4)];
        let types: Vec<String> = ["X (batch size 64)", "X (batch size 16)", "X (batch size 32)", "Y"].iter().map(|s| s.to_string()).collect();
        let s = Split::new(&sweeps, &types);
        // a: 8 planner, 16 truth, 32 planner; b has one size: truth.
        assert!(!s.truth_sweep(&sweep("a", 8)) && s.truth_sweep(&sweep("a", 16)) && !s.truth_sweep(&sweep("a", 32)));
        assert!(s.truth_sweep(&sweep("b", 4)));
        assert!(!s.truth_type("X (batch size 16)") && s.truth_type("X (batch size 32)") && !s.truth_type("X (batch size 64)"));
        assert!(s.truth_type("Y"));
        assert_eq!(gavel_batch_size("LM (batch size 80)"), 80);
        assert_eq!(gavel_batch_size("A3C"), 0);
    }
}
