//! Fair comparison (`simulate --frontier`): each policy over a sweep of its own knobs, so that
//! policies are compared as energy vs JCT frontiers rather than at one setting each.
//!
//! Knobs per policy (power saving stays on for all, as in the single-point runs):
//! - `energy`: the slowdown bound of balanced jobs (efficiency jobs get 0.05 more), with and
//!   without PowerFlow's cluster power cap (60 % of TDP), and, at the spec's bound, two other
//!   sharing bounds;
//! - `powerflow`, `greenflow`: the budget's price (energy, resp. carbon-weighted energy, the
//!   scheduler may spend per second of JCT saved by giving a job more GPUs) at slowdown bound
//!   1.10, and the slowdown bound at the default price; each point also without re-allocation
//!   of running jobs (`powerflow-no-realloc`, `greenflow-no-realloc`), for the papers'
//!   equal-budget comparison with and without it (`elastic_report`);
//! - `eaco`: the sharing bound (how much slowdown a pair may cost);
//! - `slurm-powersave`, `synergy`: no knob (one point each).
//!
//! Also the budget comparison: at a given cluster energy, the best mean JCT each policy reaches
//! among its points within that energy.

use super::policies::{DEFAULT_PRICE_J_PER_S, HintRule, NO_REALLOC, Policy, Setup, without_realloc};
use super::spec::ClusterSpec;

/// Slowdown bounds swept for the clock policies.
pub const SLOWDOWNS: [f64; 4] = [1.05, 1.10, 1.20, 1.30];
/// Sharing bounds swept for EaCO (and two of them for `energy`).
pub const SHARING_BOUNDS: [f64; 4] = [1.2, 1.4, 1.6, 2.0];
/// Prices swept for PowerFlow and GreenFlow (J per second of JCT saved).
pub const PRICES_J_PER_S: [f64; 4] = [0.0, 100.0, 200.0, 400.0];
/// Slowdown bounds swept for PowerFlow and GreenFlow at the default price.
pub const ELASTIC_SLOWDOWNS: [f64; 3] = [1.05, 1.10, 1.20];
/// PowerFlow's cap as a fraction of the GPUs' total TDP.
pub const CAP_FRACTION: f64 = 0.6;

/// One point of a policy's sweep.
#[derive(Debug, Clone)]
pub struct Point {
    pub policy: &'static str,
    /// Knob settings, e.g. `slowdown 1.10, cap`.
    pub knobs: String,
    pub setup: Setup,
}

/// A policy without knobs keeps its plain name, so that ratios to `slurm-powersave` pair.
fn point(policy: Policy, knobs: String, mut setup: Setup) -> Point {
    setup.name = if knobs == "-" { policy.name().to_string() } else { format!("{} [{}]", policy.name(), knobs) };
    Point { policy: policy.name(), knobs, setup }
}

/// Every point of every policy's sweep (the baseline `slurm-powersave` first).
pub fn sweep(spec: &ClusterSpec) -> Vec<Point> {
    let cap_w = CAP_FRACTION * (spec.cluster.nodes * spec.cluster.gpus_per_node) as f64 * spec.gpu.max_power_w;
    let mut out = Vec::new();
    for p in [Policy::SlurmPowersave, Policy::Synergy] {
        if let Some(s) = Setup::for_policy(p, spec) {
            out.push(point(p, "-".into(), s));
        }
    }
    for bound in SHARING_BOUNDS {
        if let Some(mut s) = Setup::for_policy(Policy::Eaco, spec) {
            s.planner.sharing_max_slowdown = bound;
            out.push(point(Policy::Eaco, format!("share {bound:.1}"), s));
        }
    }
    for (p, no_realloc) in [(Policy::Powerflow, NO_REALLOC[0]), (Policy::Greenflow, NO_REALLOC[1])] {
        let mut knobs: Vec<(f64, f64)> = PRICES_J_PER_S.iter().map(|price| (*price, 1.10)).collect();
        knobs.extend(ELASTIC_SLOWDOWNS.iter().filter(|s| (**s - 1.10).abs() > 1e-9).map(|s| (DEFAULT_PRICE_J_PER_S, *s)));
        for (price, slowdown) in knobs {
            let Some(mut s) = Setup::for_policy(p, spec) else { continue };
            if let Some(e) = s.elastic.as_mut() {
                e.joules_per_jct_s = price;
            }
            if let HintRule::Fixed(h) = &mut s.hints {
                h.max_slowdown = slowdown;
            }
            let knobs = format!("price {price:.0}, slowdown {slowdown:.2}");
            // The same point without re-allocation of running jobs (the ablation's frontier).
            let mut fixed = s.clone();
            without_realloc(&mut fixed);
            fixed.name = format!("{no_realloc} [{knobs}]");
            out.push(point(p, knobs.clone(), s));
            out.push(Point { policy: no_realloc, knobs, setup: fixed });
        }
    }
    for p in [Policy::Energy] {
        for slowdown in SLOWDOWNS {
            for cap in [false, true] {
                let Some(mut s) = Setup::for_policy(p, spec) else { continue };
                s.planner.power_cap_w = if cap { cap_w } else { 0.0 };
                match &mut s.hints {
                    HintRule::Fixed(h) => h.max_slowdown = slowdown,
                    HintRule::Users => s.user_slowdowns = Some((slowdown, slowdown + 0.05)),
                }
                out.push(point(p, format!("slowdown {slowdown:.2}{}", if cap { ", cap" } else { "" }), s));
            }
        }
    }
    let spec_bound = spec.planner.hints.balanced_max_slowdown;
    let spec_cap = if spec.planner.power_cap_w > 0.0 { ", cap" } else { "" };
    for bound in [1.3, 2.0] {
        if let Some(mut s) = Setup::for_policy(Policy::Energy, spec) {
            s.planner.sharing_max_slowdown = bound;
            out.push(point(Policy::Energy, format!("slowdown {spec_bound:.2}{spec_cap}, share {bound:.1}"), s));
        }
    }
    out
}

/// Indices of the points not dominated in (x, y), both lower-is-better, sorted by x.
pub fn pareto(points: &[(f64, f64)]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..points.len()).filter(|&i| points[i].0.is_finite() && points[i].1.is_finite()).collect();
    idx.sort_by(|&a, &b| points[a].0.total_cmp(&points[b].0).then(points[a].1.total_cmp(&points[b].1)));
    let mut out = Vec::new();
    let mut best_y = f64::INFINITY;
    for i in idx {
        if points[i].1 < best_y {
            best_y = points[i].1;
            out.push(i);
        }
    }
    out
}

/// The lowest `jct` among points whose `energy` is within `budget` (`None` when none is).
pub fn best_within(points: &[(f64, f64)], budget: f64) -> Option<(usize, f64)> {
    points.iter().enumerate().filter(|(_, (e, j))| *e <= budget && j.is_finite()).map(|(i, (_, j))| (i, *j)).min_by(|a, b| a.1.total_cmp(&b.1))
}

/// The mean JCT a policy reaches at cluster energy `budget` on its interpolated frontier: its
/// Pareto points (`(energy, jct)`, both lower-is-better) joined by straight lines, read at
/// `budget` (a site alternating the two settings on either side reaches that line on average);
/// the last point's JCT at or above its energy; `None` below the first point's energy (no
/// setting of the policy stays within the budget). Unlike [`best_within`], the answer moves
/// smoothly with the budget and with each point, so that its seed-to-seed spread is the
/// policy's, not the accident of which of its points fell under the line.
pub fn interpolated_within(points: &[(f64, f64)], budget: f64) -> Option<f64> {
    let front: Vec<(f64, f64)> = pareto(points).into_iter().map(|i| points[i]).collect();
    let (first, last) = (front.first()?, front.last()?);
    if budget < first.0 {
        return None;
    }
    if budget >= last.0 {
        return Some(last.1);
    }
    front.windows(2).find(|w| budget >= w[0].0 && budget < w[1].0).map(|w| {
        let ((e1, j1), (e2, j2)) = (w[0], w[1]);
        j1 + (budget - e1) / (e2 - e1) * (j2 - j1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interpolated_frontier_is_read_between_adjacent_pareto_points() {
        // (energy, jct); (2.5, 4.0) is dominated by (2.0, 3.0) and never read.
        let pts = [(1.0, 5.0), (2.0, 3.0), (2.5, 4.0), (3.0, 1.0)];
        assert_eq!(interpolated_within(&pts, 0.9), None);
        assert_eq!(interpolated_within(&pts, 1.0), Some(5.0));
        assert_eq!(interpolated_within(&pts, 1.5), Some(4.0));
        assert_eq!(interpolated_within(&pts, 2.5), Some(2.0));
        assert_eq!(interpolated_within(&pts, 9.0), Some(1.0));
        // The best point within the budget is a step; the interpolation is at least as good.
        assert_eq!(best_within(&pts, 2.5).map(|(_, j)| j), Some(3.0));
        assert_eq!(interpolated_within(&[], 1.0), None);
        assert_eq!(interpolated_within(&[(f64::NAN, 1.0)], 1.0), None);
    }

    #[test]
    fn pareto_keeps_the_lower_left_edge() {
        let pts = [(1.0, 5.0), (2.0, 3.0), (2.5, 4.0), (3.0, 1.0), (4.0, 1.0)];
        assert_eq!(pareto(&pts), vec![0, 1, 3]);
        // (energy, jct): within 2.6 the best JCT is point 1's.
        assert_eq!(best_within(&[(1.0, 9.0), (2.0, 3.0), (3.0, 1.0)], 2.6), Some((1, 3.0)));
        assert_eq!(best_within(&[(3.0, 1.0)], 2.0), None);
    }

    #[test]
    fn every_policy_with_knobs_gets_several_points_and_unique_names() {
        let spec = ClusterSpec::default();
        let pts = sweep(&spec);
        for p in ["eaco", "powerflow", "greenflow", "energy"] {
            assert!(pts.iter().filter(|x| x.policy == p).count() >= 4, "{p}");
        }
        let mut names: Vec<&str> = pts.iter().map(|p| p.setup.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), pts.len());
        assert!(pts.iter().filter(|p| p.policy != "slurm").all(|p| p.setup.power_saving));
    }
}
