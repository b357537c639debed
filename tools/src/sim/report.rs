//! Output of `simulate`: the table per policy (means and 95 % intervals over seeds) with paired
//! ratios to `slurm-powersave` and `slurm`, the JSON file, and the SVG plots.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde_json::json;

use crate::plots::{Series, downsample, line_chart_svg, stacked_bar_svg};
use crate::sim::frontier::Point;
use crate::sim::metrics::RunResult;
use crate::sim::stats::{Estimate, paired, share_of_saving};

/// Runs of the same setups under several seeds: `runs[k]` holds every setup's result for
/// `seeds[k]`, in the same setup order for every seed.
pub struct SeededRuns {
    pub seeds: Vec<u64>,
    pub runs: Vec<Vec<RunResult>>,
}

/// Baselines that paired ratios are given against, headline first.
pub const BASELINES: [&str; 2] = ["slurm-powersave", "slurm"];

/// The reference of the oracle's saving (the headline baseline).
pub const REFERENCE: &str = "slurm-powersave";
/// The lower bound (`oracle.rs`).
pub const ORACLE: &str = "oracle";
/// The policy whose paired differences to every other policy are given.
pub const FOCUS: &str = "energy";
/// Metrics of those differences.
const DIFF_METRICS: [&str; 2] = ["energy_kwh", "mean_jct_s"];

/// Metrics that the ratio tables compare.
const RATIO_METRICS: [&str; 6] = ["energy_kwh", "carbon_kg", "mean_jct_s", "p99_jct_s", "mean_wait_s", "makespan_s"];

/// Every numeric metric of a run, by its JSON name.
fn numbers(r: &RunResult) -> BTreeMap<String, f64> {
    match serde_json::to_value(&r.metrics) {
        Ok(serde_json::Value::Object(m)) => m.into_iter().filter_map(|(k, v)| v.as_f64().map(|x| (k, x))).collect(),
        _ => BTreeMap::new(),
    }
}

impl SeededRuns {
    /// Setup names in the order they were run.
    pub fn names(&self) -> Vec<String> {
        self.runs.first().map(|rs| rs.iter().map(|r| r.name.clone()).collect()).unwrap_or_default()
    }

    /// The values of one metric of one setup, one per seed.
    pub fn values(&self, name: &str, metric: &str) -> Vec<f64> {
        self.runs.iter().filter_map(|rs| rs.iter().find(|r| r.name == name)).filter_map(|r| numbers(r).get(metric).copied()).collect()
    }

    /// Mean and 95 % interval of every metric of one setup over the seeds.
    pub fn summary(&self, name: &str) -> BTreeMap<String, Estimate> {
        // This setup's own metrics: a capped setup has the power cap's, others do not.
        let metrics: Vec<String> = self.runs.first().and_then(|rs| rs.iter().find(|r| r.name == name)).map(|r| numbers(r).into_keys().collect()).unwrap_or_default();
        metrics.into_iter().map(|m| {
            let e = Estimate::of(&self.values(name, &m));
            (m, e)
        }).collect()
    }

    /// A setup's energy per seed plus the least energy of the work its killed jobs left undone
    /// (what the oracle's bound holds for, `oracle.rs`).
    pub fn charged_energy_kwh(&self, name: &str) -> Vec<f64> {
        self.values(name, "energy_kwh").iter().zip(self.values(name, "unfinished_work_floor_kwh")).map(|(e, u)| e + u).collect()
    }

    /// Share of the oracle's saving over [`REFERENCE`] that `name` reaches, per seed (energies as
    /// [`SeededRuns::charged_energy_kwh`]), then mean and interval; `None` without the reference
    /// or the oracle.
    pub fn oracle_share(&self, name: &str) -> Option<Estimate> {
        let (p, r, o) = (self.charged_energy_kwh(name), self.charged_energy_kwh(REFERENCE), self.charged_energy_kwh(ORACLE));
        (!r.is_empty() && p.len() == r.len() && o.len() == r.len()).then(|| share_of_saving(&p, &r, &o))
    }

    /// Paired per-seed difference [`FOCUS`] − `name` of `metric` (mean and interval).
    pub fn focus_difference(&self, name: &str, metric: &str) -> Option<Estimate> {
        self.paired(FOCUS, name, metric).map(|(_, d)| d)
    }

    /// Setups the oracle share and the differences are given for: all but the oracle.
    fn compared(&self) -> Vec<String> {
        self.names().into_iter().filter(|n| n != ORACLE).collect()
    }

    /// Paired (ratio, difference) of `metric` of `name` against `baseline`, seed by seed.
    pub fn paired(&self, name: &str, baseline: &str, metric: &str) -> Option<(Estimate, Estimate)> {
        let (a, b) = (self.values(name, metric), self.values(baseline, metric));
        (!b.is_empty() && a.len() == b.len()).then(|| paired(&a, &b))
    }
}

/// The table of means (with 95 % intervals when there are several seeds), then the paired
/// ratios to each baseline that was run.
pub fn table(all: &SeededRuns) -> String {
    let mut out = String::new();
    let n = all.seeds.len();
    let _ = writeln!(out, "means over {n} seed(s) {:?}{}", all.seeds, if n > 1 { ", ± half-width of the 95 % confidence interval (Student t)" } else { "" });
    let _ = writeln!(
        out,
        "{:<34} {:>7} {:>15} {:>13} {:>11} {:>13} {:>15} {:>15} {:>15} {:>15} {:>13} {:>9} {:>15} {:>9}",
        "policy", "jobs", "energy MWh", "GPU MWh", "idle MWh", "host MWh", "carbon t", "mean JCT h", "p99 JCT h", "mean wait h", "GPU util %", "shared", "slowdown p50/p99", "killed"
    );
    for name in all.names() {
        let s = all.summary(&name);
        let get = |m: &str| s.get(m).copied().unwrap_or(Estimate { mean: f64::NAN, ci95: None });
        let _ = writeln!(
            out,
            "{:<34} {:>7.0} {:>15} {:>13} {:>11} {:>13} {:>15} {:>15} {:>15} {:>15} {:>13} {:>9.0} {:>7.3}/{:<7.3} {:>9.1}",
            name,
            get("jobs").mean,
            get("energy_kwh").scaled(1e-3).show(1),
            get("gpu_energy_kwh").scaled(1e-3).show(1),
            get("idle_energy_kwh").scaled(1e-3).show(1),
            Estimate::of(&all.values(&name, "base_energy_kwh").iter().zip(all.values(&name, "cpu_energy_kwh")).map(|(b, c)| b + c).collect::<Vec<_>>()).scaled(1e-3).show(1),
            get("carbon_kg").scaled(1e-3).show(1),
            get("mean_jct_s").scaled(1.0 / 3600.0).show(2),
            get("p99_jct_s").scaled(1.0 / 3600.0).show(1),
            get("mean_wait_s").scaled(1.0 / 3600.0).show(2),
            get("gpu_utilization").scaled(100.0).show(1),
            get("shared_starts").mean,
            get("p50_slowdown").mean,
            get("p99_slowdown").mean,
            get("killed_at_time_limit").mean,
        );
    }
    for baseline in BASELINES {
        if !all.names().iter().any(|n| n == baseline) {
            continue;
        }
        let _ = writeln!(out, "\nratios to {baseline} (paired by seed):");
        let _ = writeln!(out, "{:<34} {:>15} {:>15} {:>15} {:>15} {:>15} {:>15}", "policy", "energy", "carbon", "mean JCT", "p99 JCT", "mean wait", "makespan");
        for name in all.names() {
            let cell = |m: &str| all.paired(&name, baseline, m).map_or_else(|| "-".to_string(), |(r, _)| r.show(3));
            let _ = writeln!(
                out,
                "{:<34} {:>15} {:>15} {:>15} {:>15} {:>15} {:>15}",
                name,
                cell("energy_kwh"),
                cell("carbon_kg"),
                cell("mean_jct_s"),
                cell("p99_jct_s"),
                cell("mean_wait_s"),
                cell("makespan_s")
            );
        }
    }
    out.push_str(&share_and_differences(all));
    out.push_str(&crate::sim::elastic_report::realloc_table(all));
    out.push_str(&power_cap_table(all));
    out
}

/// The power cap's figures of the capped setups (empty when none was capped).
fn power_cap_table(all: &SeededRuns) -> String {
    let mut out = String::new();
    let capped: Vec<String> = all.names().into_iter().filter(|n| !all.values(n, "power_cap_in_force_s").is_empty()).collect();
    if capped.is_empty() {
        return out;
    }
    let _ = writeln!(out, "\npower cap (truth's cluster GPU power against the cap in force):");
    let _ = writeln!(
        out,
        "{:<34} {:>13} {:>15} {:>15} {:>17} {:>15} {:>11} {:>11} {:>15} {:>13}",
        "policy", "capped h", "over cap s", "max excess W", "longest over s", "peak GPU kW", "ceilings", "extended", "killed, capped", "for the cap"
    );
    for name in capped {
        let e = |m: &str| Estimate::of(&all.values(&name, m));
        let _ = writeln!(
            out,
            "{:<34} {:>13} {:>15} {:>15} {:>17} {:>15} {:>11.0} {:>11.0} {:>15.1} {:>13.1}",
            name,
            e("power_cap_in_force_s").scaled(1.0 / 3600.0).show(2),
            e("power_cap_over_s").show(0),
            e("power_cap_max_excess_w").show(0),
            e("power_cap_longest_over_s").show(0),
            e("peak_gpu_power_w").scaled(1e-3).show(1),
            e("power_cap_ceiling_changes").mean,
            e("power_cap_limit_extensions").mean,
            e("power_cap_killed_after_ceiling").mean,
            e("power_cap_killed_for_cap").mean,
        );
    }
    out
}

/// The share of the oracle's saving each policy reaches, and `energy`'s paired differences to
/// every other policy (empty when the runs lack what they need).
fn share_and_differences(all: &SeededRuns) -> String {
    let mut out = String::new();
    let names = all.names();
    if names.iter().any(|n| n == REFERENCE) && names.iter().any(|n| n == ORACLE) {
        let _ = writeln!(
            out,
            "\nshare of the oracle's saving over {REFERENCE}, per seed (E_{REFERENCE} - E) / (E_{REFERENCE} - E_oracle), then mean ± 95 % interval;\nE includes the least energy of the work killed jobs left undone (the oracle's bound does all the work):"
        );
        let _ = writeln!(out, "{:<34} {:>17} {:>24}", "policy", "share %", "unfinished work floor kWh");
        for name in all.compared() {
            let share = all.oracle_share(&name).map_or_else(|| "-".to_string(), |e| e.scaled(100.0).show(1));
            let floor = Estimate::of(&all.values(&name, "unfinished_work_floor_kwh")).show(1);
            let _ = writeln!(out, "{:<34} {:>17} {:>24}", name, share, floor);
        }
    }
    if names.iter().any(|n| n == FOCUS) && all.seeds.len() > 1 {
        let _ = writeln!(out, "\n{FOCUS} - each policy, paired by seed (mean ± 95 % interval; * = the interval excludes 0):");
        let _ = writeln!(out, "{:<34} {:>20} {:>20}", "policy", "energy MWh", "mean JCT h");
        for name in all.compared().into_iter().filter(|n| n != FOCUS) {
            let cell = |metric: &str, scale: f64, decimals: usize| {
                all.focus_difference(&name, metric).map_or_else(|| "-".to_string(), |d| format!("{}{}", d.scaled(scale).show(decimals), if d.excludes_zero() { " *" } else { "  " }))
            };
            let _ = writeln!(out, "{:<34} {:>20} {:>20}", name, cell("energy_kwh", 1e-3, 2), cell("mean_jct_s", 1.0 / 3600.0, 2));
        }
    }
    out
}

/// `{"mean": .., "ci95": ..}` (ci95 null for a single seed).
fn est_json(e: Estimate) -> serde_json::Value {
    serde_json::to_value(e).unwrap_or(serde_json::Value::Null)
}

/// The JSON document: every metric of every policy as mean and interval, the paired ratio and
/// difference to each baseline, and each seed's raw metrics.
pub fn json(all: &SeededRuns, extra: serde_json::Value) -> serde_json::Value {
    let mut policies = serde_json::Map::new();
    let mut per_seed = serde_json::Map::new();
    for name in all.names() {
        let summary: serde_json::Map<String, serde_json::Value> = all.summary(&name).into_iter().map(|(k, e)| (k, est_json(e))).collect();
        policies.insert(name.clone(), serde_json::Value::Object(summary));
        let raw: Vec<serde_json::Value> = all
            .runs
            .iter()
            .filter_map(|rs| rs.iter().find(|r| r.name == name))
            .map(|r| serde_json::to_value(&r.metrics).unwrap_or(serde_json::Value::Null))
            .collect();
        per_seed.insert(name, serde_json::Value::Array(raw));
    }
    let mut doc = serde_json::Map::new();
    doc.insert("policies".into(), serde_json::Value::Object(policies));
    for baseline in BASELINES {
        if !all.names().iter().any(|n| n == baseline) {
            continue;
        }
        let mut against = serde_json::Map::new();
        for name in all.names() {
            let mut m = serde_json::Map::new();
            for metric in RATIO_METRICS {
                if let Some((ratio, diff)) = all.paired(&name, baseline, metric) {
                    m.insert(metric.to_string(), json!({ "ratio": est_json(ratio), "difference": est_json(diff) }));
                }
            }
            against.insert(name, serde_json::Value::Object(m));
        }
        doc.insert(format!("vs_{baseline}"), serde_json::Value::Object(against));
    }
    let shares: serde_json::Map<String, serde_json::Value> = all.compared().into_iter().filter_map(|n| all.oracle_share(&n).map(|e| (n, est_json(e)))).collect();
    if !shares.is_empty() {
        doc.insert("oracle_share".into(), json!({ "reference": REFERENCE, "policies": shares }));
    }
    if all.names().iter().any(|n| n == FOCUS) {
        let mut diffs = serde_json::Map::new();
        for name in all.compared().into_iter().filter(|n| n != FOCUS) {
            let m: serde_json::Map<String, serde_json::Value> = DIFF_METRICS
                .iter()
                .filter_map(|metric| all.focus_difference(&name, metric).map(|d| (metric.to_string(), json!({ "mean": d.mean, "ci95": d.ci95, "excludes_zero": d.excludes_zero() }))))
                .collect();
            diffs.insert(name, serde_json::Value::Object(m));
        }
        doc.insert(format!("{FOCUS}_minus"), serde_json::Value::Object(diffs));
    }
    doc.insert("seeds".into(), json!(all.seeds));
    doc.insert("per_seed".into(), serde_json::Value::Object(per_seed));
    doc.insert("run".into(), extra);
    serde_json::Value::Object(doc)
}

/// JCT CDF per policy, energy by category per policy, cluster power over time.
pub fn write_plots(results: &[RunResult], dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let cdf: Vec<Series> = results
        .iter()
        .map(|r| {
            let n = r.jct_sorted_s.len().max(1) as f64;
            let pts: Vec<(f64, f64)> = r.jct_sorted_s.iter().enumerate().map(|(i, v)| (v.max(1.0), (i + 1) as f64 / n)).collect();
            Series { name: r.name.clone(), points: downsample(&pts, 600) }
        })
        .collect();
    let bars: Vec<(String, Vec<f64>)> = results
        .iter()
        .map(|r| (r.name.clone(), vec![r.metrics.gpu_energy_kwh / 1000.0, r.metrics.idle_energy_kwh / 1000.0, r.metrics.base_energy_kwh / 1000.0, r.metrics.cpu_energy_kwh / 1000.0]))
        .collect();
    let power: Vec<Series> = results.iter().map(|r| Series { name: r.name.clone(), points: downsample(&r.power_kw, 800) }).collect();
    let files = [
        ("jct_cdf.svg", line_chart_svg("Job completion time, CDF", "job completion time (s)", "fraction of jobs", &cdf, true)),
        ("energy_by_category.svg", stacked_bar_svg("Energy by category", "energy (MWh)", &["GPU active", "GPU idle", "node base", "busy CPU cores"], &bars)),
        ("cluster_power.svg", line_chart_svg("Cluster power (hourly mean)", "time (days)", "power (kW)", &power, false)),
    ];
    let mut written = Vec::new();
    for (name, svg) in files {
        let path = dir.join(name);
        std::fs::write(&path, svg)?;
        written.push(path);
    }
    Ok(written)
}

/// One CSV per run with every finished job: when it was submitted, started (after any node
/// resume) and ended, against its runtime alone and its time limit.
pub fn write_job_csvs(results: &[RunResult], dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for r in results {
        let mut out = String::from("job,gpus,submit_s,start_s,end_s,wait_s,jct_s,runtime_s,runtime_alone_s,time_limit_s\n");
        for j in &r.jobs {
            let _ = writeln!(
                out,
                "{},{},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0}",
                j.job,
                j.gpus,
                j.submit_s,
                j.start_s,
                j.end_s,
                j.start_s - j.submit_s,
                j.end_s - j.submit_s,
                j.end_s - j.start_s,
                j.duration_alone_s,
                j.time_limit_s
            );
        }
        std::fs::write(dir.join(format!("{}.jobs.csv", r.name)), out)?;
    }
    Ok(())
}

/// Budgets of the budget table, as fractions of `slurm-powersave`'s mean energy.
pub const BUDGETS: [f64; 4] = [0.85, 0.90, 0.95, 1.00];

/// Mean (energy MWh, mean JCT h, p99 JCT h) of each frontier point.
fn frontier_means(all: &SeededRuns, points: &[Point]) -> Vec<(f64, f64, f64)> {
    points
        .iter()
        .map(|p| {
            let s = all.summary(&p.setup.name);
            let m = |k: &str| s.get(k).map_or(f64::NAN, |e| e.mean);
            (m("energy_kwh") / 1000.0, m("mean_jct_s") / 3600.0, m("p99_jct_s") / 3600.0)
        })
        .collect()
}

/// Policies of the sweep in order of appearance.
fn frontier_policies(points: &[Point]) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for p in points {
        if !out.contains(&p.policy) {
            out.push(p.policy);
        }
    }
    out
}

/// Every point of the sweep (Pareto-optimal ones in energy vs mean JCT marked `*`), then the
/// budget table: at each cluster energy, the best mean JCT of each policy within it.
pub fn frontier_table(all: &SeededRuns, points: &[Point]) -> String {
    let mut out = String::new();
    let means = frontier_means(all, points);
    let _ = writeln!(out, "\nfrontier points (means over {} seed(s); ratios paired by seed; * = on the policy's energy vs mean JCT frontier)", all.seeds.len());
    let _ = writeln!(
        out,
        "{:<16} {:<26} {:>15} {:>15} {:>15} {:>15} {:>15} {:>15} {:>7}",
        "policy", "knobs", "energy MWh", "energy / ps", "mean JCT h", "JCT / ps", "p99 JCT h", "p99 / ps", "killed"
    );
    for policy in frontier_policies(points) {
        let idx: Vec<usize> = (0..points.len()).filter(|&i| points[i].policy == policy).collect();
        let xy: Vec<(f64, f64)> = idx.iter().map(|&i| (means[i].1, means[i].0)).collect();
        let on: Vec<usize> = crate::sim::frontier::pareto(&xy).into_iter().map(|k| idx[k]).collect();
        for &i in &idx {
            let name = &points[i].setup.name;
            let s = all.summary(name);
            let get = |m: &str| s.get(m).copied().unwrap_or(Estimate { mean: f64::NAN, ci95: None });
            let ratio = |m: &str| all.paired(name, BASELINES[0], m).map_or_else(|| "-".to_string(), |(r, _)| r.show(3));
            let _ = writeln!(
                out,
                "{:<16} {:<26} {:>15} {:>15} {:>15} {:>15} {:>15} {:>15} {:>7.1}",
                format!("{}{}", policy, if on.contains(&i) { " *" } else { "" }),
                points[i].knobs,
                get("energy_kwh").scaled(1e-3).show(1),
                ratio("energy_kwh"),
                get("mean_jct_s").scaled(1.0 / 3600.0).show(2),
                ratio("mean_jct_s"),
                get("p99_jct_s").scaled(1.0 / 3600.0).show(1),
                ratio("p99_jct_s"),
                get("killed_at_time_limit").mean,
            );
        }
    }
    out.push_str(&budget_table(all, points));
    out.push_str(&interpolated_budget_table(all, points));
    out.push_str(&crate::sim::elastic_report::equal_budget_table(all, points));
    out
}

/// Each policy's mean JCT (s) at each budget on its interpolated frontier, seed by seed: the
/// budget a fraction of that seed's `slurm-powersave` energy, the frontier from that seed's
/// points (`frontier::interpolated_within`). Per budget, `None` unless every seed has a value.
fn interpolated_jct_by_seed(all: &SeededRuns, points: &[Point], policy: &str) -> Vec<Option<Vec<f64>>> {
    let base = all.values(BASELINES[0], "energy_kwh");
    let idx: Vec<usize> = (0..points.len()).filter(|&i| points[i].policy == policy).collect();
    let energy: Vec<Vec<f64>> = idx.iter().map(|&i| all.values(&points[i].setup.name, "energy_kwh")).collect();
    let jct: Vec<Vec<f64>> = idx.iter().map(|&i| all.values(&points[i].setup.name, "mean_jct_s")).collect();
    BUDGETS
        .iter()
        .map(|b| {
            (0..base.len())
                .map(|seed| {
                    let ej: Vec<(f64, f64)> = energy.iter().zip(&jct).filter_map(|(e, j)| Some((*e.get(seed)?, *j.get(seed)?))).collect();
                    crate::sim::frontier::interpolated_within(&ej, b * base[seed])
                })
                .collect()
        })
        .collect()
}

/// The budget comparison with intervals: at each budget, each policy's mean JCT on its
/// interpolated frontier (mean over seeds ± 95 %), and [`FOCUS`] minus it, paired by seed.
pub fn interpolated_budget_table(all: &SeededRuns, points: &[Point]) -> String {
    let mut out = String::new();
    if !points.iter().any(|p| p.setup.name == BASELINES[0]) {
        return out;
    }
    let _ = writeln!(
        out,
        "\nbudget on interpolated frontiers: mean JCT (h) at an energy budget (a fraction of each seed's {} energy), each seed's frontier read at its budget, then mean ± 95 %; {} - policy paired by seed (* = the interval excludes 0)",
        BASELINES[0], FOCUS
    );
    let _ = write!(out, "{:<16}", "policy");
    for b in BUDGETS {
        let _ = write!(out, " {:>34}", format!("{b:.2} x"));
    }
    let _ = writeln!(out);
    let focus = interpolated_jct_by_seed(all, points, FOCUS);
    for policy in frontier_policies(points) {
        let own = interpolated_jct_by_seed(all, points, policy);
        let _ = write!(out, "{:<16}", policy);
        for (k, _) in BUDGETS.iter().enumerate() {
            let cell = match (&own[k], focus.get(k).and_then(Option::as_ref)) {
                (Some(v), Some(f)) if policy != FOCUS => {
                    let (_, d) = paired(f, v);
                    let d = d.scaled(1.0 / 3600.0);
                    let sign = if d.mean >= 0.0 { "+" } else { "" };
                    format!("{} ({sign}{}{})", Estimate::of(v).scaled(1.0 / 3600.0).show(2), d.show(2), if d.excludes_zero() { "*" } else { "" })
                }
                (Some(v), _) => Estimate::of(v).scaled(1.0 / 3600.0).show(2),
                (None, _) => "-".to_string(),
            };
            let _ = write!(out, " {cell:>34}");
        }
        let _ = writeln!(out);
    }
    out
}

/// [`interpolated_budget_table`] as JSON: per policy, per budget, the mean JCT (h) with its
/// interval and the paired difference [`FOCUS`] − policy.
fn interpolated_budget_json(all: &SeededRuns, points: &[Point]) -> serde_json::Value {
    let focus = interpolated_jct_by_seed(all, points, FOCUS);
    let mut by_policy = serde_json::Map::new();
    for policy in frontier_policies(points) {
        let own = interpolated_jct_by_seed(all, points, policy);
        let cells: Vec<serde_json::Value> = BUDGETS
            .iter()
            .enumerate()
            .map(|(k, b)| match &own[k] {
                Some(v) => {
                    let e = Estimate::of(v).scaled(1.0 / 3600.0);
                    let diff = focus.get(k).and_then(Option::as_ref).filter(|_| policy != FOCUS).map(|f| paired(f, v).1.scaled(1.0 / 3600.0));
                    json!({ "budget_fraction": b, "mean_jct_h": e.mean, "ci95_h": e.ci95,
                            "focus_minus_h": diff.map(|d| json!({ "mean": d.mean, "ci95": d.ci95, "excludes_zero": d.excludes_zero() })) })
                }
                None => json!({ "budget_fraction": b, "mean_jct_h": null }),
            })
            .collect();
        by_policy.insert(policy.to_string(), serde_json::Value::Array(cells));
    }
    serde_json::Value::Object(by_policy)
}

/// At equal cluster energy: for each budget (a fraction of `slurm-powersave`'s energy), each
/// policy's best mean JCT among its points within the budget, with the knobs that reach it.
pub fn budget_table(all: &SeededRuns, points: &[Point]) -> String {
    let mut out = String::new();
    let means = frontier_means(all, points);
    let Some(base) = points.iter().position(|p| p.setup.name == BASELINES[0]).map(|i| means[i].0) else { return out };
    let _ = writeln!(out, "\nbudget: best mean JCT (h) within an energy budget ({} energy = {:.1} MWh)", BASELINES[0], base);
    let _ = write!(out, "{:<16}", "policy");
    for b in BUDGETS {
        let _ = write!(out, " {:>34}", format!("<= {:.2} x ({:.1} MWh)", b, b * base));
    }
    let _ = writeln!(out);
    for policy in frontier_policies(points) {
        let idx: Vec<usize> = (0..points.len()).filter(|&i| points[i].policy == policy).collect();
        let ej: Vec<(f64, f64)> = idx.iter().map(|&i| (means[i].0, means[i].1)).collect();
        let _ = write!(out, "{:<16}", policy);
        for b in BUDGETS {
            let cell = match crate::sim::frontier::best_within(&ej, b * base) {
                Some((k, jct)) => format!("{jct:.2} [{}]", points[idx[k]].knobs),
                None => "-".to_string(),
            };
            let _ = write!(out, " {cell:>34}");
        }
        let _ = writeln!(out);
    }
    out
}

/// JSON of the sweep: per policy its points (knobs, run name, on the frontier or not) and the
/// budget table.
pub fn frontier_json(all: &SeededRuns, points: &[Point]) -> serde_json::Value {
    let means = frontier_means(all, points);
    let mut policies = serde_json::Map::new();
    let base = points.iter().position(|p| p.setup.name == BASELINES[0]).map(|i| means[i].0);
    let mut budget = serde_json::Map::new();
    for policy in frontier_policies(points) {
        let idx: Vec<usize> = (0..points.len()).filter(|&i| points[i].policy == policy).collect();
        let xy: Vec<(f64, f64)> = idx.iter().map(|&i| (means[i].1, means[i].0)).collect();
        let on: Vec<usize> = crate::sim::frontier::pareto(&xy).into_iter().map(|k| idx[k]).collect();
        let list: Vec<serde_json::Value> = idx.iter().map(|&i| json!({ "run": points[i].setup.name, "knobs": points[i].knobs, "on_frontier": on.contains(&i) })).collect();
        policies.insert(policy.to_string(), serde_json::Value::Array(list));
        if let Some(base) = base {
            let ej: Vec<(f64, f64)> = idx.iter().map(|&i| (means[i].0, means[i].1)).collect();
            let cells: Vec<serde_json::Value> = BUDGETS
                .iter()
                .map(|b| match crate::sim::frontier::best_within(&ej, b * base) {
                    Some((k, jct)) => json!({ "budget_fraction": b, "mean_jct_h": jct, "knobs": points[idx[k]].knobs }),
                    None => json!({ "budget_fraction": b, "mean_jct_h": null }),
                })
                .collect();
            budget.insert(policy.to_string(), serde_json::Value::Array(cells));
        }
    }
    json!({ "points": policies, "budget": budget, "budget_interpolated": interpolated_budget_json(all, points), "equal_budget": crate::sim::elastic_report::equal_budget_json(all, points) })
}

/// Energy vs mean JCT and energy vs p99 JCT: each policy's frontier (its Pareto-optimal points
/// in that plane, from the means over seeds).
pub fn write_frontier_plots(all: &SeededRuns, points: &[Point], dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let means = frontier_means(all, points);
    let series = |pick: fn(&(f64, f64, f64)) -> f64| -> Vec<Series> {
        frontier_policies(points)
            .into_iter()
            .map(|policy| {
                let idx: Vec<usize> = (0..points.len()).filter(|&i| points[i].policy == policy).collect();
                let xy: Vec<(f64, f64)> = idx.iter().map(|&i| (pick(&means[i]), means[i].0)).collect();
                let pts = crate::sim::frontier::pareto(&xy).into_iter().map(|k| xy[k]).collect();
                Series { name: policy.to_string(), points: pts }
            })
            .collect()
    };
    let files = [
        ("frontier_energy_jct.svg", line_chart_svg("Energy vs mean JCT (each policy's frontier)", "mean JCT (h)", "energy (MWh)", &series(|m| m.1), false)),
        ("frontier_energy_p99.svg", line_chart_svg("Energy vs p99 JCT (each policy's frontier)", "p99 JCT (h)", "energy (MWh)", &series(|m| m.2), false)),
    ];
    let mut written = Vec::new();
    for (name, svg) in files {
        let path = dir.join(name);
        std::fs::write(&path, svg)?;
        written.push(path);
    }
    Ok(written)
}
