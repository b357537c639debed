//! The report as text tables for the terminal. Every text that comes from the records (job
//! names, users, accounts, ...: users choose some of them) goes through [`clean`], so no
//! escape sequence reaches the terminal of whoever reads the report.

use std::fmt::Write as _;

use super::aggregate::{GroupTotals, JobFigures, Report};

/// Energy in the unit that reads best (J, kJ, MJ, kWh above 10 MJ).
pub fn fmt_energy(j: f64) -> String {
    let a = j.abs();
    if a >= 1e7 {
        format!("{:.1} kWh", j / 3.6e6)
    } else if a >= 1e6 {
        format!("{:.2} MJ", j / 1e6)
    } else if a >= 1e3 {
        format!("{:.1} kJ", j / 1e3)
    } else {
        format!("{j:.0} J")
    }
}

pub fn fmt_carbon(g: f64) -> String {
    if g.abs() >= 1e3 { format!("{:.2} kg", g / 1e3) } else { format!("{g:.2} g") }
}

/// A ratio with three significant digits (small ratios in scientific notation).
pub fn ratio(r: f64) -> String {
    if r != 0.0 && r.abs() < 0.01 { format!("{r:.2e}") } else { format!("{r:.3}") }
}

/// Jobs listed one per line at most (all are in the JSON).
pub const MAX_JOB_LINES: usize = 200;

/// `s` without terminal control: control characters (C0, DEL, C1: escape sequences, bell,
/// carriage return, newline, tab) and the bidirectional overrides that reorder what is shown
/// become `?`.
pub fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c) || ('\u{2066}'..='\u{2069}').contains(&c) { '?' } else { c })
        .collect()
}

fn opt(v: Option<f64>, f: fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

fn groups(out: &mut String, title: &str, rows: &[GroupTotals]) {
    let _ = writeln!(out, "\n{title}");
    let _ = writeln!(out, "  {:<20} {:>5} {:>12} {:>11} {:>10} {:>12}", "name", "jobs", "energy", "carbon", "GPU-h", "saved");
    for g in rows {
        let unknown = if g.jobs_without_energy > 0 { format!(" ({} unknown)", g.jobs_without_energy) } else { String::new() };
        let _ = writeln!(
            out,
            "  {:<20} {:>5} {:>12} {:>11} {:>10.3} {:>12}{unknown}",
            clean(&g.name),
            g.jobs,
            fmt_energy(g.energy_j),
            g.carbon_g.map_or_else(|| "-".into(), fmt_carbon),
            g.gpu_hours,
            fmt_energy(g.energy_saved_j)
        );
    }
}

fn job_line(out: &mut String, j: &JobFigures) {
    let _ = writeln!(
        out,
        "  {:<10} {:<14} {:<10} {:>4} {:>12} {:>11} {:<14} {:>8} {:>12}{}",
        clean(&j.job_id),
        clean(&j.name).chars().take(14).collect::<String>(),
        clean(&j.user),
        j.gpus,
        opt(j.energy_j, fmt_energy),
        opt(j.carbon_g, fmt_carbon),
        j.carbon_source.as_str(),
        j.clock_mhz.map_or_else(|| "-".into(), |c| format!("{c} MHz")),
        opt(j.energy_saved_j, fmt_energy),
        if j.running { "  (running)" } else { "" }
    );
}

/// The sacct records left out, and why (the first ones).
fn skipped(out: &mut String, r: &Report) {
    let s = &r.skipped;
    if s.legacy_delimiter {
        out.push_str("\nRead with the old '|' delimiter (no header line): a job name holding '|' or a newline may have shifted its job's fields\n");
    }
    if s.records == 0 {
        return;
    }
    let _ = writeln!(out, "\nSkipped {} sacct records that could not be read (in no figure above):", s.records);
    for reason in &s.first {
        let _ = writeln!(out, "  {}", clean(reason));
    }
    if s.records > s.first.len() {
        let _ = writeln!(out, "  ... {} more", s.records - s.first.len());
    }
}

pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let t = &r.totals;
    let _ = writeln!(
        out,
        "Energy report: {} to {} (source: {})",
        clean(r.window.start.as_deref().unwrap_or("sacct's default start")),
        clean(r.window.end.as_deref().unwrap_or("now")),
        clean(&r.source)
    );
    let _ = writeln!(
        out,
        "  {} jobs ({} running, {} array tasks), {} GPU-hours, energy {} ({} jobs unknown), carbon {} ({} jobs unknown)",
        t.jobs,
        r.running_jobs,
        r.array_tasks,
        format_args!("{:.3}", t.gpu_hours),
        fmt_energy(t.energy_j),
        t.jobs_without_energy,
        t.carbon_g.map_or_else(|| "-".into(), fmt_carbon),
        t.jobs_without_carbon
    );
    match &r.saving_model {
        Some(m) => {
            let _ = writeln!(
                out,
                "  energy saved against the default clock: {} over {} jobs (estimate, {} curves)",
                fmt_energy(t.energy_saved_j),
                r.decisions.jobs_with_saving_estimate,
                clean(m)
            );
        }
        None => out.push_str("  energy saved against the default clock: not estimated (no measured curves)\n"),
    }
    skipped(&mut out, r);
    groups(&mut out, "Per user", &r.users);
    groups(&mut out, "Per account", &r.accounts);
    groups(&mut out, "Per partition", &r.partitions);
    groups(&mut out, "Per tag", &r.tags);
    out.push_str("\nGPU-hours by clock\n");
    for c in &r.gpu_hours_by_clock {
        let clock = c.clock_mhz.map_or_else(|| "no record".to_string(), |m| format!("{m} MHz"));
        let _ = writeln!(out, "  {clock:<12} {:>5} jobs {:>10.3} GPU-h {:>12}", c.jobs, c.gpu_hours, fmt_energy(c.energy_j));
    }
    out.push_str("\nTop jobs by energy\n");
    let _ = writeln!(
        out,
        "  {:<10} {:<14} {:<10} {:>4} {:>12} {:>11} {:<14} {:>8} {:>12}",
        "job", "name", "user", "GPUs", "energy", "carbon", "carbon source", "clock", "saved"
    );
    for j in &r.top_jobs {
        job_line(&mut out, j);
    }
    let _ = writeln!(out, "\nJobs ({})", r.jobs.len());
    for j in r.jobs.iter().take(MAX_JOB_LINES) {
        job_line(&mut out, j);
    }
    if r.jobs.len() > MAX_JOB_LINES {
        let _ = writeln!(out, "  ... {} more in the JSON", r.jobs.len() - MAX_JOB_LINES);
    }
    let d = &r.decisions;
    let _ = writeln!(out, "\nDecision records: {} jobs with one, {} without", d.jobs_with_record, d.jobs_without_record);
    let policies: Vec<String> = d.jobs_per_policy.iter().map(|(p, n)| format!("{} {n}", clean(p))).collect();
    let _ = writeln!(out, "  policies: {}", if policies.is_empty() { "-".into() } else { policies.join(", ") });
    let _ = writeln!(
        out,
        "  below the default clock: {} jobs; sharing GPUs: {}; mean predicted slowdown: {}; measured/predicted energy: {}",
        d.jobs_below_default_clock,
        d.jobs_shared,
        opt(d.mean_predicted_slowdown, |s| format!("{s:.3}")),
        opt(d.measured_over_predicted_energy, ratio)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acct_report::aggregate::{self, Inputs};
    use crate::acct_report::sacct::{self, Delimiter};

    /// Finding 12 of security-2026-11-27.md: OSC 52 (clipboard), a title change, a screen clear,
    /// a C1 CSI and a right-to-left override in user-derived fields.
    #[test]
    fn control_characters_of_user_fields_never_reach_the_terminal() {
        let d = Delimiter::new("<D>").expect("delimiter");
        let hostile = "\u{1b}]52;c;cm0gLXJmIH4=\u{7}\u{1b}]0;root\u{7}\u{1b}[2J\u{9b}31m\u{202e}gpj.exe\r\n\t";
        let row = [
            "42", "42", hostile, hostile, hostile, hostile, "COMPLETED", "1700000000", "1700000060", "60", "gres/gpu=1", "500", "n1",
            "energy:policy=balanced clock=1200MHz tag=t",
        ];
        let mut bad = row;
        bad[9] = hostile;
        let text = format!("{}\n{}\n{}\n", sacct::header_line(&d), row.join("<D>"), bad.join("<D>"));
        let read = sacct::parse(&text, hostile);
        assert_eq!((read.jobs.len(), read.skipped.len()), (1, 1), "{read:?}");
        let inputs = Inputs { window: Default::default(), source: hostile.into(), carbon: None, saving: None };
        let mut report = aggregate::build(&read.jobs, &inputs);
        report.skipped = aggregate::Skipped::of(&read);
        let out = render(&report);
        let bad: Vec<char> =
            out.chars().filter(|&c| (c.is_control() && c != '\n') || ('\u{202a}'..='\u{202e}').contains(&c) || ('\u{2066}'..='\u{2069}').contains(&c)).collect();
        assert!(bad.is_empty(), "{bad:?} in\n{out}");
        assert!(out.contains("Skipped 1 sacct records"), "{out}");
        // Every job line is still one line.
        assert_eq!(out.lines().filter(|l| l.trim_start().starts_with("42 ")).count(), 2, "{out}");
    }
}
