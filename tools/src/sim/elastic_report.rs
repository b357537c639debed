//! What PowerFlow's and GreenFlow's re-allocation of running jobs did in a run, and the papers'
//! own comparison: mean JCT at the same energy (PowerFlow) or carbon (GreenFlow) as a baseline,
//! read on each policy's interpolated frontier (`frontier::interpolated_within`), seed by seed,
//! with and without re-allocation so that its contribution is measured.

use std::fmt::Write as _;

use serde_json::json;

use super::frontier::{Point, interpolated_within};
use super::report::{BASELINES, SeededRuns};
use super::stats::Estimate;

/// Policies of the equal-budget comparison: (policy, the budget's metric, the same policy
/// without re-allocation, or `None` for that variant itself).
pub const EQUAL_BUDGET: [(&str, &str, Option<&str>); 4] =
    [("powerflow", "energy_kwh", Some("powerflow-no-realloc")), ("powerflow-no-realloc", "energy_kwh", None), ("greenflow", "carbon_kg", Some("greenflow-no-realloc")), ("greenflow-no-realloc", "carbon_kg", None)];

/// Re-allocations of running jobs per setup that made any (mean over seeds): how many, how many
/// gave GPUs back, and the pauses' total.
pub fn realloc_table(all: &SeededRuns) -> String {
    let mut out = String::new();
    let names: Vec<String> = all.names().into_iter().filter(|n| all.values(n, "reallocations").iter().any(|v| *v > 0.0)).collect();
    if names.is_empty() {
        return out;
    }
    let _ = writeln!(out, "\nre-allocations of running jobs (checkpoint and restart at another GPU count; means over seeds)");
    let _ = writeln!(out, "{:<34} {:>15} {:>15} {:>15} {:>15}", "policy", "re-allocations", "of them shrinks", "pauses h", "grown starts");
    for n in names {
        let m = |k: &str| Estimate::of(&all.values(&n, k));
        let _ = writeln!(out, "{:<34} {:>15} {:>15} {:>15} {:>15}", n, m("reallocations").show(0), m("realloc_shrinks").show(0), m("realloc_pause_h").show(1), m("grown_starts").show(0));
    }
    out
}

/// Per seed, the mean JCT (s) of `policy`'s interpolated frontier at the baseline's value of
/// `metric` in that seed; `None` for a seed whose budget is below every point of the policy.
pub fn jct_at_baseline_budget(all: &SeededRuns, points: &[Point], policy: &str, metric: &str) -> Vec<Option<f64>> {
    let budget = all.values(BASELINES[0], metric);
    let idx: Vec<usize> = (0..points.len()).filter(|&i| points[i].policy == policy).collect();
    let x: Vec<Vec<f64>> = idx.iter().map(|&i| all.values(&points[i].setup.name, metric)).collect();
    let jct: Vec<Vec<f64>> = idx.iter().map(|&i| all.values(&points[i].setup.name, "mean_jct_s")).collect();
    (0..budget.len())
        .map(|seed| {
            let xy: Vec<(f64, f64)> = x.iter().zip(&jct).filter_map(|(e, j)| Some((*e.get(seed)?, *j.get(seed)?))).collect();
            interpolated_within(&xy, budget[seed])
        })
        .collect()
}

/// One row of the comparison: the per-seed ratios baseline JCT / policy JCT at the baseline's
/// budget ("x better", as the papers state it), and no-realloc JCT / policy JCT at the same
/// budget (what re-allocation adds); `None` unless every seed has a value.
pub struct EqualBudget {
    pub policy: &'static str,
    pub metric: &'static str,
    pub vs_baseline: Option<Vec<f64>>,
    pub vs_no_realloc: Option<Vec<f64>>,
}

pub fn equal_budget(all: &SeededRuns, points: &[Point]) -> Vec<EqualBudget> {
    let all_seeds = |v: Vec<Option<f64>>| v.into_iter().collect::<Option<Vec<f64>>>();
    EQUAL_BUDGET
        .iter()
        .filter(|(p, _, _)| points.iter().any(|x| x.policy == *p))
        .map(|&(policy, metric, without)| {
            let base = all.values(BASELINES[0], "mean_jct_s");
            let own = all_seeds(jct_at_baseline_budget(all, points, policy, metric));
            let vs_baseline = own.as_ref().filter(|o| o.len() == base.len() && !o.is_empty()).map(|o| base.iter().zip(o).map(|(b, j)| b / j).collect());
            let other = without.filter(|w| points.iter().any(|x| x.policy == *w)).and_then(|w| all_seeds(jct_at_baseline_budget(all, points, w, metric)));
            let vs_no_realloc = match (&own, other) {
                (Some(o), Some(w)) if o.len() == w.len() && !o.is_empty() => Some(w.iter().zip(o).map(|(w, j)| w / j).collect()),
                _ => None,
            };
            EqualBudget { policy, metric, vs_baseline, vs_no_realloc }
        })
        .collect()
}

/// The comparison as a table (empty without the baseline or the elastic policies' points).
pub fn equal_budget_table(all: &SeededRuns, points: &[Point]) -> String {
    let mut out = String::new();
    let rows = equal_budget(all, points);
    if rows.is_empty() || !points.iter().any(|p| p.setup.name == BASELINES[0]) {
        return out;
    }
    let _ = writeln!(
        out,
        "\nequal budget (the papers' comparison): {0}'s mean JCT / the policy's on its interpolated frontier at {0}'s energy (PowerFlow) or carbon (GreenFlow), per seed, then mean ± 95 % (> 1: the policy is faster; * = the interval excludes 1)",
        BASELINES[0]
    );
    let _ = writeln!(out, "{:<22} {:<8} {:>22} {:>30}", "policy", "budget", "JCT ratio (x better)", "no-realloc JCT / policy JCT");
    let cell = |v: &Option<Vec<f64>>| match v {
        Some(v) => {
            let e = Estimate::of(v);
            let star = if e.ci95.is_some_and(|c| (e.mean - 1.0).abs() > c) { "*" } else { "" };
            format!("{}{star}", e.show(3))
        }
        None => "-".to_string(),
    };
    for r in &rows {
        let budget = if r.metric == "carbon_kg" { "carbon" } else { "energy" };
        let _ = writeln!(out, "{:<22} {:<8} {:>22} {:>30}", r.policy, budget, cell(&r.vs_baseline), cell(&r.vs_no_realloc));
    }
    out
}

/// The comparison as JSON: per policy, the ratios' mean and interval and the per-seed values.
pub fn equal_budget_json(all: &SeededRuns, points: &[Point]) -> serde_json::Value {
    let est = |v: &Option<Vec<f64>>| v.as_ref().map(|v| json!({ "estimate": Estimate::of(v), "per_seed": v }));
    let rows: serde_json::Map<String, serde_json::Value> = equal_budget(all, points)
        .iter()
        .map(|r| (r.policy.to_string(), json!({ "budget_metric": r.metric, "baseline": BASELINES[0], "jct_ratio_baseline_over_policy": est(&r.vs_baseline), "jct_ratio_no_realloc_over_policy": est(&r.vs_no_realloc) })))
        .collect();
    serde_json::Value::Object(rows)
}
