//! Running jobs' power directives (docs/power-cap.md): each cycle, the ceilings
//! `model::power_directive` decides for the running jobs under the cap in force, kept in one
//! table the GPU-use listener reads to answer each report. Nothing is decided here.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use model::gpu_use::MeasuredPower;
use model::power_directive::{self, DirectiveReply, DirectiveTable};
use model::predictor::Predictor;
use model::types::{JobId, Snapshot};
use slurm_bindings::slurm_log;

use crate::LOG;

/// The directives in force (one plugin per slurmctld process).
static TABLE: Mutex<Option<Table>> = Mutex::new(None);

struct Table {
    directives: DirectiveTable,
    /// Each directed job's worst-case slowdown under its ceiling (relative to its start clock),
    /// as its time limit was last extended for it (`Decided::limit_bounds`).
    limit_bounds: BTreeMap<JobId, f64>,
    /// The last "cap not met" state logged, so that it is said once per change.
    unmet_logged: bool,
    /// Each GPU node's correction, by name: its measured power over its predicted draw (absent:
    /// 1, until measured).
    corrections: BTreeMap<String, f64>,
    /// Each node's uncorrected prediction for the ceilings in force, by name.
    raw_w_by_node: BTreeMap<String, f64>,
    /// Each directed job's uncorrected prediction on each of its nodes (by name) for the
    /// ceilings in force: what its own GPUs' reading there is set against.
    raw_w_by_job_node: BTreeMap<(JobId, String), f64>,
    /// Each job's correction from its own GPUs' readings, as last logged.
    job_corrections: BTreeMap<JobId, f64>,
    /// When the ceilings last changed (Unix ms): readings from before that (plus the time the
    /// nodes take to apply them) do not measure them.
    changed_ms: u64,
}

/// How long the nodes may take to apply a change of ceilings (their report period and more).
const APPLY_MS: u64 = 5_000;

impl Table {
    fn new() -> Table {
        Table { directives: DirectiveTable::default(), limit_bounds: Default::default(), unmet_logged: false, corrections: BTreeMap::new(), raw_w_by_node: BTreeMap::new(), raw_w_by_job_node: BTreeMap::new(), job_corrections: BTreeMap::new(), changed_ms: 0 }
    }
}

fn table() -> MutexGuard<'static, Option<Table>> {
    TABLE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running job's time limit to extend, because its ceiling slows it (as a planned slowdown
/// extends the limit of a job it starts).
#[derive(Debug, Clone, PartialEq)]
pub struct Extension {
    pub job_id: u32,
    /// The new limit, minutes (Slurm's caps still apply when it is set).
    pub limit_min: u32,
    /// The worst-case slowdown of its remaining time under its ceiling: what its limit grew for.
    pub bound: f64,
    /// The predicted slowdown of its remaining time under its ceiling (for the log).
    pub slowdown: f64,
}

/// Readings older than this do not count as a node's power now.
const READING_MAX_AGE_S: i64 = 60;

/// One cycle's directives, from the snapshot the cycle planned on and the cap it planned under
/// (`cap_w` 0: none), and Slurm's caps on the running jobs' limits. Changes are logged.
/// Returns the time limits to extend for jobs whose ceiling was set or lowered.
/// `readings`: the nodes' last power readings (name -> W, poll time Unix s; `node_names` names
/// the snapshot's nodes) and `job_readings`: the running jobs' own GPUs' power in their GPU-use
/// reports. A reading taken once the ceilings in force applied corrects the prediction: a job's
/// own for that job, a node's for the rest of that node (model::power_directive::corrections).
#[allow(clippy::too_many_arguments)]
pub fn update(snapshot: &Snapshot, cap_w: f64, pred: &Predictor, limit_cap_end_s: &BTreeMap<JobId, f64>, node_names: &[String], readings: &HashMap<String, (f64, i64)>, job_readings: &[MeasuredPower], now_s: f64) -> Vec<Extension> {
    let cap = (cap_w > 0.0).then_some(cap_w);
    let mut guard = table();
    let t = guard.get_or_insert_with(Table::new);
    let powers = power_directive::running_powers_by_node(snapshot, pred, limit_cap_end_s, &t.limit_bounds);
    // Each GPU node's reading against its own prediction for the state it measured.
    let mut measured = BTreeMap::new();
    let mut predicted = BTreeMap::new();
    for (i, n) in snapshot.nodes.iter().enumerate() {
        let (Some(name), true) = (node_names.get(i), n.gpus > 0) else { continue };
        let (Some(&(w, at_s)), Some(&raw_w)) = (readings.get(name), t.raw_w_by_node.get(name)) else { continue };
        let fresh = (now_s as i64).saturating_sub(at_s) <= READING_MAX_AGE_S;
        let after_change = u64::try_from(at_s).unwrap_or(0).saturating_mul(1000) >= t.changed_ms + APPLY_MS;
        if fresh && after_change && cap.is_some() {
            measured.insert(i as u32, w);
            predicted.insert(i as u32, raw_w);
        }
    }
    // Each job's own GPUs' reading on a node, taken wholly after the ceilings in force applied.
    let index: HashMap<&str, u32> = node_names.iter().enumerate().map(|(i, n)| (n.as_str(), i as u32)).collect();
    let mut job_measured = BTreeMap::new();
    let mut job_predicted = BTreeMap::new();
    for m in job_readings {
        let (Some(&i), Some(&raw_w)) = (index.get(m.node.as_str()), t.raw_w_by_job_node.get(&(JobId(m.job_id), m.node.clone()))) else { continue };
        let fresh = now_s - m.to_unix_s <= READING_MAX_AGE_S as f64;
        let after_change = m.from_unix_s * 1000.0 >= (t.changed_ms + APPLY_MS) as f64;
        if fresh && after_change && cap.is_some() {
            job_measured.insert((JobId(m.job_id), i), m.power_w);
            job_predicted.insert((JobId(m.job_id), i), raw_w);
        }
    }
    // A job measured before but not in this look (its interval straddles a change) stands at
    // its last correction, so that its excess is not read as the rest of its node's.
    for ((job, node), &raw_w) in &t.raw_w_by_job_node {
        let (Some(&c), Some(&i)) = (t.job_corrections.get(job), index.get(node.as_str())) else { continue };
        job_predicted.entry((*job, i)).or_insert(raw_w);
        job_measured.entry((*job, i)).or_insert(raw_w * c);
    }
    let found = power_directive::corrections(&measured, &job_measured, &predicted, &job_predicted);
    for (i, c) in found.by_node {
        let Some(name) = node_names.get(i as usize) else { continue };
        let before = t.corrections.get(name).copied().unwrap_or(1.0);
        if (c - before).abs() > 0.02 {
            slurm_log!(LOG, info, "power cap: node {name} measured GPU power {:.0} W against {:.0} W predicted: what its jobs' own readings do not cover corrected by x{c:.2}", measured.get(&i).copied().unwrap_or(f64::NAN), predicted.get(&i).copied().unwrap_or(f64::NAN));
        }
        t.corrections.insert(name.clone(), c);
    }
    for (job, c) in found.by_job {
        let before = t.job_corrections.get(&job).copied().unwrap_or(1.0);
        if (c - before).abs() > 0.02 {
            let (w, p): (f64, f64) = job_measured.iter().filter(|((j, _), _)| *j == job).fold((0.0, 0.0), |(w, p), (k, m)| (w + m, p + job_predicted.get(k).copied().unwrap_or(0.0)));
            slurm_log!(LOG, info, "power cap: JobId={} measured GPU power {w:.0} W on its own GPUs against {p:.0} W predicted: its prediction corrected by x{c:.2}", job.0);
        }
        t.job_corrections.insert(job, c);
    }
    let running: std::collections::HashSet<JobId> = snapshot.running.iter().map(|r| r.id).collect();
    t.job_corrections.retain(|job, _| running.contains(job));
    let names: std::collections::HashSet<&String> = node_names.iter().collect();
    t.corrections.retain(|name, _| names.contains(name));
    let by_node: BTreeMap<u32, f64> = node_names.iter().enumerate().filter_map(|(i, name)| Some((i as u32, *t.corrections.get(name)?))).collect();
    let kept = power_directive::Corrections { by_node, by_job: t.job_corrections.clone() };
    let power_directive::DecidedByNode { decided, raw_w_by_node, raw_w_by_job_node } = power_directive::decide_by_node(cap, &powers, &kept);
    t.raw_w_by_job_node = raw_w_by_job_node.into_iter().filter_map(|((j, i), w)| Some(((j, node_names.get(i as usize)?.clone()), w))).collect();
    t.raw_w_by_node = raw_w_by_node.into_iter().filter_map(|(i, w)| Some((node_names.get(i as usize)?.clone(), w))).collect();
    // Limits grow by the change of the worst-case slowdown only, once per change (never
    // compounded per cycle).
    let mut extensions = Vec::new();
    for r in &snapshot.running {
        let after = decided.limit_bounds.get(&r.id).copied().unwrap_or(1.0);
        let before = t.limit_bounds.get(&r.id).copied().unwrap_or(1.0);
        let factor = power_directive::extension_factor(before, after);
        if factor > 1.0 && r.end_time_s > snapshot.now_s {
            let new_end_s = snapshot.now_s + (r.end_time_s - snapshot.now_s) * factor;
            let limit_min = ((new_end_s - r.start_time_s) / 60.0).ceil();
            if limit_min.is_finite() && limit_min >= 1.0 {
                extensions.push(Extension { job_id: r.id.0, limit_min: limit_min.min(f64::from(u32::MAX - 1)) as u32, bound: after, slowdown: decided.slowdowns.get(&r.id).copied().unwrap_or(1.0) });
            }
        }
    }
    t.limit_bounds = decided.limit_bounds.iter().filter(|(_, s)| **s > 1.0).map(|(j, s)| (*j, *s)).collect();
    let changes = t.directives.update(&decided.ceilings, unix_now_ms());
    if changes.iter().any(|c| c.before != c.after) {
        t.changed_ms = unix_now_ms();
    }
    for c in changes {
        match (c.before, c.after) {
            (_, Some(after)) => slurm_log!(LOG, info, "JobId={} GPU clock ceiling {after} under the power cap ({:.0} W; predicted {:.0} W with the ceilings) (directive {})", c.job.0, cap_w, decided.predicted_w, c.seq),
            (Some(before), None) => slurm_log!(LOG, info, "JobId={} GPU clock ceiling {before} lifted (power cap {}) (directive {})", c.job.0, cap.map_or("none".to_string(), |w| format!("{w:.0} W")), c.seq),
            (None, None) => {}
        }
    }
    if decided.unmet != t.unmet_logged {
        t.unmet_logged = decided.unmet;
        if decided.unmet {
            LOG.error(&format!("power cap {cap_w:.0} W not met by slowing running jobs within their slowdown bounds and time limits (predicted {:.0} W); no job is killed for it, new jobs wait", decided.predicted_w));
        } else {
            slurm_log!(LOG, info, "power cap met again (predicted {:.0} W)", decided.predicted_w);
        }
    }
    extensions
}

/// The reply to a report of `job_id` from `node`: its directive in force. `None` before the
/// first cycle, or for a job no cycle saw running (it gets one at its next report).
pub fn reply_for(job_id: u32, node: &str) -> Option<DirectiveReply> {
    let guard = table();
    let d = guard.as_ref()?.directives.get(JobId(job_id))?;
    Some(DirectiveReply { job_id, node: node.to_string(), seq: d.seq, ceiling: d.ceiling })
}

fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Tests: sets the table's ceilings as a cycle would.
#[cfg(test)]
pub(crate) fn set_for_test(ceilings: &BTreeMap<JobId, Option<model::power_directive::Ceiling>>) {
    let mut guard = table();
    let t = guard.get_or_insert_with(Table::new);
    t.directives.update(ceilings, unix_now_ms());
}
