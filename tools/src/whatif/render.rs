//! The what-if as a text table (terminal) and as JSON (`--json`).

use std::fmt::Write;

use model::whatif::StartKind;

use super::Report;

/// `1h05m`, `45s`, `2d03h`, `unlimited`.
pub fn duration(s: f64) -> String {
    if s >= model::types::UNLIMITED_TIME_S {
        return "unlimited".into();
    }
    let s = s.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

fn kwh(j: f64) -> String {
    format!("{:.3}", j / 3.6e6)
}

/// `HH:MM:SSZ` of a unix time (UTC), with the date when it is not `now_s`'s day.
pub(crate) fn clock(t: f64, now_s: f64) -> String {
    let t = t as i64;
    let (day, now_day) = (t.div_euclid(86_400), (now_s as i64).div_euclid(86_400));
    let s = t.rem_euclid(86_400);
    let hms = format!("{:02}:{:02}:{:02}Z", s / 3600, s % 3600 / 60, s % 60);
    if day == now_day { hms } else { format!("+{}d {hms}", day - now_day) }
}

pub fn text(r: &Report) -> String {
    let mut out = String::new();
    let j = &r.job;
    let gpus = match &j.gpu_type {
        Some(t) => format!("{} GPU(s) {t}", j.gpus_per_node),
        None => format!("{} GPU(s)", j.gpus_per_node),
    };
    let _ = writeln!(
        out,
        "What-if for user {}: {} node(s) x {gpus}, {} CPU(s){}, time limit {}, partition {}",
        j.user,
        j.nodes,
        j.cpus_per_node,
        if j.mem_mb_per_node > 0 { format!(", {} MB", j.mem_mb_per_node) } else { String::new() },
        duration(j.time_limit_s),
        j.partition
    );
    let source = if r.from_prior { "the prior (no history)".to_string() } else { r.prediction.clone() };
    let _ = writeln!(out, "Predictions from {source}: run time {:.0} % of the limit, power x{:.2} the model's", r.runtime_fraction * 100.0, r.power_ratio);
    let _ = writeln!(
        out,
        "Cluster: {} nodes, {} running, {} pending ahead, {} reservation(s); carbon: {}; power cap: {}",
        r.cluster.nodes,
        r.cluster.running_jobs,
        r.cluster.pending_jobs,
        r.cluster.reservations,
        r.carbon_source.as_deref().unwrap_or("no source configured"),
        r.power_cap_w.map_or("none".to_string(), |w| format!("{w:.0} W"))
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "{:<18} {:<14} {:>9} {:<12} {:>6} {:>6} {:>19} {:>21} {:>9}", "policy", "start", "wait", "nodes", "MHz", "slow", "run time (max)", "GPU kWh (max)", "CO2 g");
    for row in &r.rows {
        let e = &row.estimate;
        let start = match (e.kind, e.start_s) {
            (StartKind::Now, _) => "now".to_string(),
            (StartKind::NotPlanned, _) => "not planned".to_string(),
            (StartKind::BySlurm, None) => "by Slurm".to_string(),
            (kind, Some(t)) => format!("{}{}", clock(t, r.now_s), if kind == StartKind::Deferred { " (defer)" } else { "" }),
            (_, None) => "-".to_string(),
        };
        let wait = row.wait_s.map_or("-".into(), duration);
        let nodes = if row.node_names.is_empty() { "-".to_string() } else { row.node_names.join(",") };
        let mhz = e.clock_mhz.map_or("-".into(), |c| c.to_string());
        let slow = e.predicted_slowdown.map_or("-".into(), |s| format!("{s:.3}"));
        let run = match (e.runtime_s, e.runtime_max_s) {
            (Some(a), Some(b)) => format!("{} ({})", duration(a), duration(b)),
            _ => "-".into(),
        };
        let energy = match (e.energy_j, e.energy_max_j) {
            (Some(a), Some(b)) => format!("{} ({})", kwh(a), kwh(b)),
            _ => "-".into(),
        };
        let co2 = e.carbon_g.map_or("-".into(), |g| format!("{g:.1}"));
        let shared = if e.shared { " shared" } else { "" };
        let _ = writeln!(out, "{:<18} {:<14} {:>9} {:<12} {:>6} {:>6} {:>19} {:>21} {:>9}{shared}", e.scenario, start, wait, nodes, mhz, slow, run, energy, co2);
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "Uncertainty: a start is the latest under today's queue (running jobs use their whole limits, no job of higher");
    let _ = writeln!(out, "priority arrives); the run time is the limit times the fraction above, and anything up to (max); the energy");
    let _ = writeln!(out, "likewise (max: if it runs to its limit). A reserved or deferred start's clock is planned for that moment.");
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

pub fn json(r: &Report) -> Result<String, String> {
    serde_json::to_string_pretty(r).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration(5.0), "5s");
        assert_eq!(duration(65.0), "1m05s");
        assert_eq!(duration(3900.0), "1h05m");
        assert_eq!(duration(2.0 * 86_400.0 + 7200.0), "2d02h");
        assert_eq!(duration(model::types::UNLIMITED_TIME_S), "unlimited");
        assert_eq!(clock(3661.0, 0.0), "01:01:01Z");
        assert_eq!(clock(86_400.0 + 60.0, 0.0), "+1d 00:01:00Z");
    }
}
