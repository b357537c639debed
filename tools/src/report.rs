//! Output of `simulate`: the table per policy with ratios to `slurm`, the JSON file, and the
//! SVG plots.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::json;

use crate::plots::{Series, downsample, line_chart_svg, stacked_bar_svg};
use crate::sim::metrics::RunResult;

fn hours(s: f64) -> String {
    format!("{:.2} h", s / 3600.0)
}

/// The table, then the ratios of each run to the `baseline` run when it is present.
pub fn table(results: &[RunResult], baseline: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:>6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>7}",
        "policy", "jobs", "energy", "gpu", "idle", "base", "carbon", "mean JCT", "p50 JCT", "p99 JCT", "mean wait", "makespan", "GPU util", "shared"
    );
    let _ = writeln!(
        out,
        "{:<20} {:>6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>7}",
        "", "", "kWh", "kWh", "kWh", "kWh", "kg", "", "", "", "", "days", "", "starts"
    );
    for r in results {
        let m = &r.metrics;
        let _ = writeln!(
            out,
            "{:<20} {:>6} {:>10.0} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>10} {:>10} {:>10} {:>10} {:>10.1} {:>7.1}% {:>7}",
            r.name,
            m.jobs,
            m.energy_kwh,
            m.gpu_energy_kwh,
            m.idle_energy_kwh,
            m.base_energy_kwh,
            m.carbon_kg,
            hours(m.mean_jct_s),
            hours(m.p50_jct_s),
            hours(m.p99_jct_s),
            hours(m.mean_wait_s),
            m.makespan_s / 86_400.0,
            m.gpu_utilization * 100.0,
            m.shared_starts,
        );
    }
    if let Some(base) = results.iter().find(|r| r.name == baseline) {
        let b = &base.metrics;
        let _ = writeln!(out, "\nratios to {baseline}:");
        let _ = writeln!(out, "{:<20} {:>8} {:>8} {:>8} {:>9} {:>8} {:>9}", "policy", "energy", "carbon", "mean JCT", "mean wait", "p99 JCT", "makespan");
        let ratio = |a: f64, b: f64| if b > 0.0 { format!("{:.3}", a / b) } else { "-".into() };
        for r in results {
            let m = &r.metrics;
            let _ = writeln!(
                out,
                "{:<20} {:>8} {:>8} {:>8} {:>9} {:>8} {:>9}",
                r.name,
                ratio(m.energy_kwh, b.energy_kwh),
                ratio(m.carbon_kg, b.carbon_kg),
                ratio(m.mean_jct_s, b.mean_jct_s),
                ratio(m.mean_wait_s, b.mean_wait_s),
                ratio(m.p99_jct_s, b.p99_jct_s),
                ratio(m.makespan_s, b.makespan_s),
            );
        }
    }
    out
}

pub fn json(results: &[RunResult], extra: serde_json::Value) -> serde_json::Value {
    let mut policies = serde_json::Map::new();
    for r in results {
        policies.insert(r.name.clone(), serde_json::to_value(&r.metrics).unwrap_or(serde_json::Value::Null));
    }
    json!({ "policies": policies, "run": extra })
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
        .map(|r| (r.name.clone(), vec![r.metrics.gpu_energy_kwh / 1000.0, r.metrics.idle_energy_kwh / 1000.0, r.metrics.base_energy_kwh / 1000.0]))
        .collect();
    let power: Vec<Series> = results.iter().map(|r| Series { name: r.name.clone(), points: downsample(&r.power_kw, 800) }).collect();
    let files = [
        ("jct_cdf.svg", line_chart_svg("Job completion time, CDF", "job completion time (s)", "fraction of jobs", &cdf, true)),
        ("energy_by_category.svg", stacked_bar_svg("Energy by category", "energy (MWh)", &["GPU active", "GPU idle", "node base"], &bars)),
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
