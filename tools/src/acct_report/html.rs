//! The report as one self-contained HTML page: inline CSS, the plots as inline SVG (drawn by
//! [`crate::plots`] with plotters), no scripts, no fonts, no network: a browser opens it offline.

use std::fmt::Write as _;

use super::aggregate::{GroupTotals, JobFigures, Report};
use super::text::{MAX_JOB_LINES, fmt_carbon, fmt_energy, ratio};
use crate::plots::{Series, bar_svg, line_chart_svg};

const STYLE: &str = "body{font-family:sans-serif;margin:2em auto;max-width:1100px;color:#222}\
h1{font-size:1.6em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;margin:.5em 0}td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}\
td:first-child,th:first-child{text-align:left}.plots{display:flex;flex-wrap:wrap;gap:12px}\
.plots svg{border:1px solid #eee;width:540px;height:auto}.note{color:#666;font-size:.9em}";

/// Points of the cumulative energy curve.
const TIME_POINTS: usize = 200;

/// The unit bars of energy are drawn in: (joules per unit, name).
fn energy_unit(max_j: f64) -> (f64, &'static str) {
    if max_j >= 3.6e6 { (3.6e6, "kWh") } else if max_j >= 1e3 { (1e3, "kJ") } else { (1.0, "J") }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn group_plot(title: &str, groups: &[GroupTotals]) -> String {
    let (per, unit) = energy_unit(groups.iter().map(|g| g.energy_j).fold(0.0, f64::max));
    let bars: Vec<(String, f64)> = groups.iter().map(|g| (g.name.clone(), g.energy_j / per)).collect();
    bar_svg(title, &format!("Energy ({unit})"), "energy", &bars)
}

fn group_table(out: &mut String, title: &str, rows: &[GroupTotals]) {
    let _ = writeln!(out, "<h2>{}</h2>\n<table><tr><th>name</th><th>jobs</th><th>energy</th><th>energy_j</th><th>unknown energy</th><th>carbon</th><th>unknown carbon</th><th>GPU-hours</th><th>saved</th></tr>", esc(title));
    for g in rows {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.0}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{}</td></tr>",
            esc(&g.name),
            g.jobs,
            fmt_energy(g.energy_j),
            g.energy_j,
            g.jobs_without_energy,
            g.carbon_g.map_or_else(|| "-".into(), fmt_carbon),
            g.jobs_without_carbon,
            g.gpu_hours,
            fmt_energy(g.energy_saved_j)
        );
    }
    out.push_str("</table>\n");
}

/// The unit of a time axis spanning `span_s` seconds: (seconds per unit, its name), so that a
/// 20-second window reads 0 to 20 s, not 0.000 to 0.006 h.
fn time_unit(span_s: f64) -> (f64, &'static str) {
    const MIN_S: f64 = 60.0;
    const HOUR_S: f64 = 3_600.0;
    const DAY_S: f64 = 86_400.0;
    if span_s <= 2.0 * MIN_S {
        (1.0, "Seconds")
    } else if span_s <= 2.0 * HOUR_S {
        (MIN_S, "Minutes")
    } else if span_s <= 2.0 * DAY_S {
        (HOUR_S, "Hours")
    } else {
        (DAY_S, "Days")
    }
}

/// Cumulative energy (in `per` units) over seconds since the first start, each job's energy
/// spread evenly over its run.
fn cumulative_energy(jobs: &[JobFigures], per: f64) -> Vec<(f64, f64)> {
    let spans: Vec<(f64, f64, f64)> = jobs
        .iter()
        .filter_map(|j| {
            let start = j.start_unix_s? as f64;
            let end = j.end_unix_s.map_or(start + j.elapsed_s as f64, |e| e as f64).max(start);
            Some((start, end, j.energy_j?))
        })
        .collect();
    let Some(t0) = spans.iter().map(|s| s.0).reduce(f64::min) else { return Vec::new() };
    let t1 = spans.iter().map(|s| s.1).fold(t0, f64::max);
    (0..=TIME_POINTS)
        .map(|i| {
            let t = t0 + (t1 - t0) * i as f64 / TIME_POINTS as f64;
            let e: f64 = spans
                .iter()
                .map(|&(s, end, e)| if end <= s { if t >= s { e } else { 0.0 } } else { e * ((t - s) / (end - s)).clamp(0.0, 1.0) })
                .sum();
            (t - t0, e / per)
        })
        .collect()
}

/// The "energy over time" plot: the time axis in the unit of the window's length.
fn energy_over_time_plot(r: &Report) -> String {
    let (per, unit) = energy_unit(r.totals.energy_j);
    let curve = cumulative_energy(&r.jobs, per);
    let (per_s, time_unit) = time_unit(curve.last().map_or(0.0, |p| p.0));
    let points = curve.into_iter().map(|(t_s, e)| (t_s / per_s, e)).collect();
    line_chart_svg(
        "Energy over time",
        &format!("{time_unit} since the first job started"),
        &format!("Cumulative energy ({unit})"),
        &[Series { name: "all jobs".into(), points }],
        false,
    )
}

fn job_table(out: &mut String, title: &str, jobs: &[JobFigures]) {
    let _ = writeln!(out, "<h2>{}</h2>\n<table><tr><th>job</th><th>name</th><th>user</th><th>state</th><th>GPUs</th><th>energy</th><th>carbon</th><th>carbon source</th><th>policy</th><th>clock</th><th>saved</th></tr>", esc(title));
    for j in jobs {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&j.job_id),
            esc(&j.name),
            esc(&j.user),
            esc(&j.state),
            j.gpus,
            j.energy_j.map_or_else(|| "-".into(), fmt_energy),
            j.carbon_g.map_or_else(|| "-".into(), fmt_carbon),
            j.carbon_source.as_str(),
            esc(j.policy.as_deref().unwrap_or("-")),
            j.clock_mhz.map_or_else(|| "-".into(), |c| format!("{c} MHz")),
            j.energy_saved_j.map_or_else(|| "-".into(), fmt_energy)
        );
    }
    out.push_str("</table>\n");
}

/// The sacct records left out, and why (the first ones).
fn skipped(out: &mut String, r: &Report) {
    let s = &r.skipped;
    if s.legacy_delimiter {
        out.push_str("<p class=\"note\">Read with the old '|' delimiter (no header line): a job name holding '|' or a newline may have shifted its job's fields.</p>\n");
    }
    if s.records == 0 {
        return;
    }
    let _ = writeln!(out, "<p>Skipped {} sacct records that could not be read (in no figure of this page):</p>\n<ul>", s.records);
    for reason in &s.first {
        let _ = writeln!(out, "<li>{}</li>", esc(reason));
    }
    if s.records > s.first.len() {
        let _ = writeln!(out, "<li>... {} more</li>", s.records - s.first.len());
    }
    out.push_str("</ul>\n");
}

pub fn render(r: &Report) -> String {
    let t = &r.totals;
    let mut out = String::with_capacity(64 * 1024);
    let _ = writeln!(out, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Energy report</title><style>{STYLE}</style></head><body>");
    let _ = writeln!(
        out,
        "<h1>Energy report</h1>\n<p>Window: {} to {} &middot; source: {}</p>",
        esc(r.window.start.as_deref().unwrap_or("sacct's default start")),
        esc(r.window.end.as_deref().unwrap_or("now")),
        esc(&r.source)
    );
    let saved = match &r.saving_model {
        Some(m) => format!("{} over {} jobs (estimate from the {} curves)", fmt_energy(t.energy_saved_j), r.decisions.jobs_with_saving_estimate, esc(m)),
        None => "not estimated (no measured curves)".into(),
    };
    let _ = writeln!(
        out,
        "<table><tr><td>jobs</td><td>{} ({} running, {} array tasks)</td></tr>\
         <tr><td>energy</td><td>{} ({:.0} J; {} jobs unknown)</td></tr>\
         <tr><td>carbon</td><td>{} ({} jobs unknown)</td></tr>\
         <tr><td>GPU-hours</td><td>{:.3}</td></tr><tr><td>energy saved against the default clock</td><td>{saved}</td></tr></table>",
        t.jobs,
        r.running_jobs,
        r.array_tasks,
        fmt_energy(t.energy_j),
        t.energy_j,
        t.jobs_without_energy,
        t.carbon_g.map_or_else(|| "-".into(), fmt_carbon),
        t.jobs_without_carbon,
        t.gpu_hours
    );

    skipped(&mut out, r);
    out.push_str("<h2>Plots</h2>\n<div class=\"plots\">\n");
    out.push_str(&group_plot("Energy per user", &r.users));
    out.push_str(&group_plot("Energy per account", &r.accounts));
    out.push_str(&group_plot("Energy per partition", &r.partitions));
    let clock_bars: Vec<(String, f64)> = r
        .gpu_hours_by_clock
        .iter()
        .map(|c| (c.clock_mhz.map_or_else(|| "no record".into(), |m| format!("{m} MHz")), c.gpu_hours))
        .collect();
    out.push_str(&bar_svg("GPU-hours by clock", "GPU-hours", "GPU-hours", &clock_bars));
    out.push_str(&energy_over_time_plot(r));
    let (per, unit) = energy_unit(r.top_jobs.first().and_then(|j| j.energy_j).unwrap_or(0.0));
    let top_bars: Vec<(String, f64)> = r.top_jobs.iter().map(|j| (j.job_id.clone(), j.energy_j.unwrap_or(0.0) / per)).collect();
    out.push_str(&bar_svg("Top jobs by energy", &format!("Energy ({unit})"), "energy", &top_bars));
    out.push_str("</div>\n");

    group_table(&mut out, "Per user", &r.users);
    group_table(&mut out, "Per account", &r.accounts);
    group_table(&mut out, "Per partition", &r.partitions);
    group_table(&mut out, "Per tag", &r.tags);

    out.push_str("<h2>GPU-hours by clock</h2>\n<table><tr><th>clock</th><th>jobs</th><th>GPU-hours</th><th>energy</th></tr>\n");
    for c in &r.gpu_hours_by_clock {
        let clock = c.clock_mhz.map_or_else(|| "no record".into(), |m| format!("{m} MHz"));
        let _ = writeln!(out, "<tr><td>{clock}</td><td>{}</td><td>{:.3}</td><td>{}</td></tr>", c.jobs, c.gpu_hours, fmt_energy(c.energy_j));
    }
    out.push_str("</table>\n");
    job_table(&mut out, "Top jobs by energy", &r.top_jobs);
    let shown = r.jobs.len().min(MAX_JOB_LINES);
    job_table(&mut out, &format!("Jobs ({shown} of {})", r.jobs.len()), &r.jobs[..shown]);
    let d = &r.decisions;
    let policies: Vec<String> = d.jobs_per_policy.iter().map(|(p, n)| format!("{} {n}", esc(p))).collect();
    let _ = writeln!(
        out,
        "<h2>Decision records</h2>\n<table><tr><td>jobs with a record</td><td>{}</td></tr><tr><td>jobs without</td><td>{}</td></tr>\
         <tr><td>policies</td><td>{}</td></tr><tr><td>below the default clock</td><td>{}</td></tr><tr><td>sharing GPUs</td><td>{}</td></tr>\
         <tr><td>mean predicted slowdown</td><td>{}</td></tr><tr><td>measured / predicted energy</td><td>{}</td></tr></table>",
        d.jobs_with_record,
        d.jobs_without_record,
        if policies.is_empty() { "-".into() } else { policies.join(", ") },
        d.jobs_below_default_clock,
        d.jobs_shared,
        d.mean_predicted_slowdown.map_or_else(|| "-".into(), |s| format!("{s:.3}")),
        d.measured_over_predicted_energy.map_or_else(|| "-".into(), ratio)
    );
    out.push_str("<p class=\"note\">How each number is computed: docs/report.md of the slurm-energy project.</p>\n</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acct_report::aggregate::CarbonSource;

    fn job(start: i64, end: Option<i64>, elapsed_s: u64, energy_j: Option<f64>) -> JobFigures {
        JobFigures {
            job_id: "1".into(),
            name: "j".into(),
            user: "u".into(),
            account: "a".into(),
            partition: "p".into(),
            tag: None,
            state: "COMPLETED".into(),
            running: end.is_none(),
            array_task: false,
            start_unix_s: Some(start),
            end_unix_s: end,
            elapsed_s,
            gpus: 1,
            gpu_hours: 0.0,
            energy_j,
            carbon_g: None,
            carbon_source: CarbonSource::None,
            policy: None,
            clock_mhz: None,
            predicted_energy_j: None,
            default_clock_energy_j: None,
            energy_saved_j: None,
        }
    }

    #[test]
    fn cumulative_energy_rises_to_the_total_and_spreads_each_job_over_its_run() {
        let jobs = [job(0, Some(3_600), 3_600, Some(1_000.0)), job(1_800, None, 5_400, Some(500.0)), job(0, Some(10), 10, None)];
        let curve = cumulative_energy(&jobs, 1.0);
        assert_eq!(curve.len(), TIME_POINTS + 1);
        assert_eq!(curve.first(), Some(&(0.0, 0.0)));
        let (last_s, last_j) = curve[TIME_POINTS];
        assert!((last_s - 7_200.0).abs() < 1e-9 && (last_j - 1_500.0).abs() < 1e-9, "{last_s} s, {last_j} J");
        assert!(curve.windows(2).all(|w| w[1].0 > w[0].0 && w[1].1 >= w[0].1));
        // Half way through the first job, before the second starts: half of the first's energy.
        let quarter = curve[TIME_POINTS / 4];
        assert!((quarter.0 - 1_800.0).abs() < 1e-9 && (quarter.1 - 500.0).abs() < 1e-9, "{quarter:?}");
        assert!(cumulative_energy(&[], 1.0).is_empty());
    }
}

#[cfg(test)]
mod time_axis_tests {
    use super::*;
    use crate::acct_report::aggregate::{self, Inputs};
    use crate::acct_report::sacct;

    fn page_of(span_s: i64) -> String {
        let text = format!(
            "1|1|a|u|a|p|COMPLETED|1700000000|{}|{span_s}|gres/gpu=1|100|n1|\n2|2|b|u|a|p|COMPLETED|1700000000|1700000005|5|gres/gpu=1|50|n1|\n",
            1_700_000_000 + span_s
        );
        let read = sacct::parse(&text, "t");
        render(&aggregate::build(&read.jobs, &Inputs { window: Default::default(), source: "t".into(), carbon: None, saving: None }))
    }

    #[test]
    fn the_energy_over_time_axis_has_the_unit_of_its_window() {
        for (span_s, unit) in [(20, "Seconds"), (1_800, "Minutes"), (30_000, "Hours"), (10 * 86_400, "Days")] {
            let page = page_of(span_s);
            assert!(page.contains(&format!("{unit} since the first job started")), "{span_s} s: no {unit} axis");
        }
        assert_eq!(time_unit(20.0), (1.0, "Seconds"));
        assert_eq!(time_unit(120.0), (1.0, "Seconds"));
        assert_eq!(time_unit(121.0), (60.0, "Minutes"));
        assert_eq!(time_unit(7_201.0), (3_600.0, "Hours"));
        assert_eq!(time_unit(3.0 * 86_400.0), (86_400.0, "Days"));
        assert_eq!(time_unit(0.0), (1.0, "Seconds"));
    }
}
