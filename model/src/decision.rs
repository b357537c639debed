//! What the planner answers: decisions a plugin can apply to slurmctld, each with the
//! explanation an admin reads afterwards (`scontrol show job`, `sacct`).

use serde::{Deserialize, Serialize};

use crate::types::{EnergyPolicy, JobId, NodeAllocation, NodeIdx};

/// Costs of one placement per scorer, each in 0..1 (lower is better), and their weighted sum.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ScoreBreakdown {
    pub energy: f64,
    pub interference: f64,
    pub fragmentation: f64,
    pub carbon: f64,
    pub node_order: f64,
    pub total: f64,
}

/// Start a job now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartDecision {
    pub job: JobId,
    pub policy: EnergyPolicy,
    pub allocations: Vec<NodeAllocation>,
    /// GPU clock to apply to every step of the job (MHz); the default clock when not scaled.
    pub clock_mhz: u32,
    /// The power limit the clock step was measured under (W), for sites that cap power instead.
    pub power_limit_w: f64,
    /// Jobs whose GPUs this job time-shares.
    pub shares_with: Vec<JobId>,
    /// Time limit to set (s): the user's, extended by the slowdown the planner imposed.
    pub time_limit_s: f64,
    /// Predicted runtime / runtime alone at the default clock.
    pub predicted_slowdown: f64,
    /// Predicted GPU power of the job (W, all its GPUs).
    pub predicted_power_w: f64,
    /// Predicted energy (J) attributable to the job, over its expected runtime.
    pub predicted_energy_j: f64,
    /// Nodes that are suspended and must be resumed for this job.
    pub wakes: Vec<NodeIdx>,
    pub score: ScoreBreakdown,
    /// The [`crate::eligibility::Eligibility::route`] it starts through (`None`: the job had
    /// no eligibility list).
    #[serde(default)]
    pub route: Option<u32>,
    /// Where the run-time and power predictions came from (`prior`, or
    /// `history:u<uid>/<tag>:n=<jobs>`, see [`crate::history::PredictionSource`]).
    #[serde(default)]
    pub prediction: String,
    /// The job's workload tag (`--energy-tag`), repeated in the record so that accounting
    /// (sacct, `slurm-energy report`) can group by it.
    #[serde(default)]
    pub tag: Option<String>,
    /// A shared placement: where its pair-slowdown prediction came from (`experiment`,
    /// `fallback`, `history:n=<pairs>`, see [`crate::interference::PairPrediction::describe`]).
    #[serde(default)]
    pub interference: Option<String>,
}

/// [`StartDecision::prediction`] of a run time and power from the prior (no history yet):
/// `model::history::PredictionSource::Prior` as written.
pub const PRIOR_PREDICTION: &str = "prior";

impl StartDecision {
    /// The power limit the planner chose for each of the job's GPUs (mW, as NVML takes it):
    /// the measured limit of the ladder step whose clock it picked, carried to the nodes with
    /// the clock ([`DECISION_POWER_LIMIT_ENV`]) so that a GPU controlled by its power limit
    /// gets exactly that limit. `None` when the planner had no ladder (no limit to apply).
    pub fn power_limit_mw(&self) -> Option<u32> {
        power_limit_mw_of_w(self.power_limit_w)
    }

    /// One-line decision record for the job's admin comment; short and `key=value` so that
    /// `sacct` output stays greppable. Node names are resolved by the caller.
    pub fn record(&self, node_names: &[&str]) -> String {
        let share = if self.shares_with.is_empty() {
            "none".to_string()
        } else {
            self.shares_with.iter().map(|j| j.to_string()).collect::<Vec<_>>().join("+")
        };
        let limit = self.power_limit_mw().map_or(String::new(), |mw| format!(" limit={}W", f64::from(mw) / 1000.0));
        // A job without a time limit has no run time to predict from until history gives one:
        // its energy is not a prediction (the prior's fraction of a year), so none is recorded.
        let pred_kwh = if self.time_limit_s >= crate::types::UNLIMITED_TIME_S && self.prediction == PRIOR_PREDICTION {
            "unknown".to_string()
        } else {
            format!("{:.3}", self.predicted_energy_j / 3.6e6)
        };
        format!(
            "energy:policy={} nodes={} clock={}MHz{limit} share={} slow={:.3} pred_w={:.0} pred_kwh={pred_kwh} score=e{:.2}/i{:.2}/f{:.2}/c{:.2}/o{:.2}",
            self.policy.as_str(),
            node_names.join(","),
            self.clock_mhz,
            share,
            self.predicted_slowdown,
            self.predicted_power_w,
            self.score.energy,
            self.score.interference,
            self.score.fragmentation,
            self.score.carbon,
            self.score.node_order,
        ) + &if self.prediction.is_empty() { String::new() } else { format!(" pred={}", self.prediction) }
            + &match self.tag.as_deref().filter(|t| !t.is_empty() && !t.contains(char::is_whitespace) && !t.contains(RECORD_SEPARATOR)) {
                Some(t) => format!(" tag={t}"),
                None => String::new(),
            }
            + &match self.interference.as_deref().filter(|_| !self.shares_with.is_empty()) {
                Some(source) => format!(" ipred={source}"),
                None => String::new(),
            }
    }
}

/// The GPU clock (MHz) a decision record (from [`StartDecision::record`]) names: what the
/// controller and the compute nodes read back from a job's admin comment. `None` for any other
/// text, or text that only follows the record (a record is `energy:` first, `clock=` later).
pub fn recorded_clock_mhz(record: &str) -> Option<u32> {
    recorded_field(record, "clock")?.strip_suffix("MHz")?.parse().ok().filter(|&c| c > 0)
}

/// The value of `key=` in the decision record at the start of an admin comment (`None` if the
/// text has no record or the record no such field). The single parser of the record: the
/// controller, the compute nodes and `slurm-energy report` all read fields through it.
pub fn recorded_field<'a>(record: &'a str, key: &str) -> Option<&'a str> {
    let rest = record.trim_start().strip_prefix("energy:")?;
    let rest = rest.split(RECORD_SEPARATOR).next().unwrap_or("");
    rest.split_whitespace().find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// GPU energy (J) sched/energy attributed to the job so far (`energy_j=`), from the nodes'
/// energy counters while it ran.
pub fn recorded_energy_j(record: &str) -> Option<f64> {
    recorded_field(record, "energy_j")?.parse().ok().filter(|j: &f64| j.is_finite() && *j >= 0.0)
}

/// Carbon (gCO2) of that energy at the grid intensity of the moment it was used (`carbon_g=`);
/// absent when no carbon source was configured or it had no value then.
pub fn recorded_carbon_g(record: &str) -> Option<f64> {
    recorded_field(record, "carbon_g")?.parse().ok().filter(|g: &f64| g.is_finite() && *g >= 0.0)
}

/// The record with `key=value` set in its own part (replaced if present, else appended), the
/// site's text after it kept. Text without a record is returned unchanged.
pub fn set_recorded_field(comment: &str, key: &str, value: &str) -> String {
    let trimmed = comment.trim();
    let Some(ours) = trimmed.strip_prefix("energy:") else { return comment.to_string() };
    let (ours, site) = match ours.split_once(RECORD_SEPARATOR) {
        Some((o, s)) => (o, Some(s)),
        None => (ours, None),
    };
    let mut found = false;
    let mut fields: Vec<String> = ours
        .split_whitespace()
        .map(|kv| match kv.strip_prefix(key).and_then(|r| r.strip_prefix('=')) {
            Some(_) => {
                found = true;
                format!("{key}={value}")
            }
            None => kv.to_string(),
        })
        .collect();
    if !found {
        fields.push(format!("{key}={value}"));
    }
    let record = format!("energy:{}", fields.join(" "));
    match site {
        Some(site) => format!("{record}{RECORD_SEPARATOR}{site}"),
        None => record,
    }
}

/// The entry of a job's SPANK environment that carries the GPU clock sched/energy chose for it
/// (`SLURM_ENERGY_CLOCK_MHZ=<MHz>`) to the job's nodes: slurmctld sends the SPANK environment
/// with the prolog and the batch launch, where the SPANK plugin keeps it for the job's steps.
/// sched/energy sets it right before the start and removes any value the user put there.
pub const DECISION_CLOCK_ENV: &str = "SLURM_ENERGY_CLOCK_MHZ";

/// The entry of a job's SPANK environment that carries the power limit sched/energy chose for
/// each of the job's GPUs (`SLURM_ENERGY_POWER_LIMIT_MW=<mW>`, [`StartDecision::power_limit_mw`])
/// beside [`DECISION_CLOCK_ENV`]: a GPU controlled by its power limit (no application or locked
/// clocks, as an H100) gets this limit, the others the clock. Set or removed with the clock.
pub const DECISION_POWER_LIMIT_ENV: &str = "SLURM_ENERGY_POWER_LIMIT_MW";

/// Largest power limit a decision may carry (mW): 10 kW, above any GPU's.
pub const MAX_POWER_LIMIT_MW: u32 = 10_000_000;

/// A limit in watts as NVML's milliwatts; `None` for anything not a positive limit a GPU may have.
fn power_limit_mw_of_w(w: f64) -> Option<u32> {
    let mw = (w * 1000.0).round();
    (mw.is_finite() && mw >= 1.0 && mw <= f64::from(MAX_POWER_LIMIT_MW)).then_some(mw as u32)
}

/// The power limit (mW) a value of [`DECISION_POWER_LIMIT_ENV`] names (`150000`); `None` for
/// anything else. The single parser of the value: the nodes read it through this.
pub fn parse_power_limit_mw(value: &str) -> Option<u32> {
    value.trim().parse::<u32>().ok().filter(|&mw| mw > 0 && mw <= MAX_POWER_LIMIT_MW)
}

/// Between the decision record and whatever the site keeps in the admin comment.
pub const RECORD_SEPARATOR: &str = "; ";

/// The admin comment with `record` as its first token, keeping what the site wrote there: a
/// previous record (a token starting with `energy:`) is replaced, anything else kept after it.
/// First, so that nothing a user controls can come before it in `scontrol show job`.
pub fn merge_record(existing: Option<&str>, record: &str) -> String {
    let site = existing.map(str::trim).map(|t| match t.strip_prefix("energy:") {
        Some(ours) => ours.split_once(RECORD_SEPARATOR).map_or("", |(_, site)| site),
        None => t,
    });
    match site {
        Some(site) if !site.is_empty() => format!("{record}{RECORD_SEPARATOR}{site}"),
        _ => record.to_string(),
    }
}

/// A blocked high-priority job: these nodes are held for it from `start_s`; nothing of lower
/// priority may delay it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reservation {
    pub job: JobId,
    pub start_s: f64,
    pub nodes: Vec<NodeIdx>,
    /// The eligibility route the reservation was found through, as in [`StartDecision::route`].
    #[serde(default)]
    pub route: Option<u32>,
}

/// A job whose request the planner cannot express ([`crate::types::PendingJob::placed_by_slurm`]):
/// Slurm's own node selection places it, on `nodes` only (the ones its route allows that no
/// reservation of this cycle holds); the planner commits nothing for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlurmStart {
    pub job: JobId,
    pub nodes: Vec<NodeIdx>,
    pub route: Option<u32>,
}

/// A job Slurm places (see [`SlurmStart`]) that cannot start now: the plugin asks Slurm's own
/// will-run test, after this plan's starts, when and where among `nodes` it would start, and
/// shows that (`squeue --start`). (The snapshot's answer to the same question is already in the
/// plan, as a window in [`crate::types::Snapshot::reservations`] that keeps other jobs off
/// those nodes.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlurmWillRun {
    pub job: JobId,
    pub nodes: Vec<NodeIdx>,
    pub route: Option<u32>,
}

/// A job that allowed deferral waits for a cleaner grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deferral {
    pub job: JobId,
    pub until_s: f64,
    pub carbon_now_g_per_kwh: f64,
    pub carbon_forecast_g_per_kwh: f64,
}

/// Change the GPU clock of a running job (PowerFlow adjusts running jobs' configurations):
/// when the queue builds up, jobs that were started at a lower clock in a quiet hour are raised
/// back to the default clock so that the cluster regains its capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reclock {
    pub job: JobId,
    pub clock_mhz: u32,
    pub power_limit_w: f64,
}

// A cycle makes a few decisions per started or reserved job, moved once into the plugin's list:
// boxing the start (the common case) would cost an allocation each for no gain.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Decision {
    Start(StartDecision),
    Reserve(Reservation),
    Defer(Deferral),
    Reclock(Reclock),
    SlurmStart(SlurmStart),
    SlurmWillRun(SlurmWillRun),
}

/// Why a cycle ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CycleEnd {
    /// Every pending job was considered.
    Complete,
    /// `max_jobs_tested` reached; the rest waits for the next cycle.
    JobLimit,
    /// `max_cycle_ms` reached.
    TimeLimit,
    /// The plugin stopped applying the plan: slurmctld's partitions, reservations or
    /// configuration changed under it, or slurmctld is shutting down.
    Abandoned,
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CycleStats {
    pub jobs_tested: usize,
    pub jobs_started: usize,
    pub reservations: usize,
    pub deferrals: usize,
    pub nodes_scored: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanOutcome {
    pub decisions: Vec<Decision>,
    pub end: CycleEnd,
    pub stats: CycleStats,
}

impl PlanOutcome {
    pub fn starts(&self) -> impl Iterator<Item = &StartDecision> {
        self.decisions.iter().filter_map(|d| if let Decision::Start(s) = d { Some(s) } else { None })
    }
    pub fn reservations(&self) -> impl Iterator<Item = &Reservation> {
        self.decisions.iter().filter_map(|d| if let Decision::Reserve(r) = d { Some(r) } else { None })
    }
    pub fn slurm_starts(&self) -> impl Iterator<Item = &SlurmStart> {
        self.decisions.iter().filter_map(|d| if let Decision::SlurmStart(s) = d { Some(s) } else { None })
    }
    pub fn slurm_will_runs(&self) -> impl Iterator<Item = &SlurmWillRun> {
        self.decisions.iter().filter_map(|d| if let Decision::SlurmWillRun(s) = d { Some(s) } else { None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_clock_reads_back() {
        let d = StartDecision {
            job: JobId(7),
            policy: EnergyPolicy::Efficiency,
            allocations: Vec::new(),
            clock_mhz: 1085,
            power_limit_w: 200.0,
            shares_with: Vec::new(),
            time_limit_s: 600.0,
            predicted_slowdown: 1.08,
            predicted_power_w: 300.0,
            predicted_energy_j: 1.0e5,
            wakes: Vec::new(),
            score: ScoreBreakdown::default(),
            route: None,
            prediction: "history:u1/bert:n=4".into(),
            tag: Some("bert".into()),
            interference: Some("history:n=2".into()),
        };
        assert_eq!(recorded_field(&d.record(&["n1"]), "pred"), Some("history:u1/bert:n=4"));
        assert_eq!(recorded_field(&d.record(&["n1"]), "tag"), Some("bert"));
        let untagged = StartDecision { tag: None, ..d.clone() };
        assert_eq!(recorded_field(&untagged.record(&["n1"]), "tag"), None);
        assert_eq!(recorded_field(&d.record(&["n1"]), "ipred"), None, "named for shared placements only");
        let shared = StartDecision { shares_with: vec![JobId(3)], ..d.clone() };
        assert_eq!(recorded_field(&shared.record(&["n1"]), "ipred"), Some("history:n=2"));
        assert_eq!(recorded_clock_mhz(&d.record(&["n1"])), Some(1085));
        assert_eq!(recorded_field(&d.record(&["n1"]), "limit"), Some("200W"));
        let no_ladder = StartDecision { power_limit_w: 0.0, ..d.clone() };
        assert_eq!(recorded_field(&no_ladder.record(&["n1"]), "limit"), None);
        assert_eq!(recorded_clock_mhz("note: clock=900MHz"), None);
        assert_eq!(recorded_clock_mhz("energy:policy=x clock=1.2GHz"), None);
        assert_eq!(recorded_clock_mhz("energy:policy=x clock=0MHz"), None);
        assert_eq!(recorded_clock_mhz("energy:policy=x nodes=n1; site note clock=900MHz"), None);
    }

    #[test]
    fn a_job_without_a_time_limit_records_no_energy_prediction_until_history_gives_a_run_time() {
        let d = StartDecision {
            job: JobId(8),
            policy: EnergyPolicy::Balanced,
            allocations: Vec::new(),
            clock_mhz: 1312,
            power_limit_w: 0.0,
            shares_with: Vec::new(),
            time_limit_s: crate::types::UNLIMITED_TIME_S,
            predicted_slowdown: 1.0,
            predicted_power_w: 250.0,
            // The prior's half of a year at 250 W.
            predicted_energy_j: 250.0 * 0.5 * crate::types::UNLIMITED_TIME_S,
            wakes: Vec::new(),
            score: ScoreBreakdown::default(),
            route: None,
            prediction: crate::history::PredictionSource::Prior.to_string(),
            tag: None,
            interference: None,
        };
        assert_eq!(d.prediction, PRIOR_PREDICTION);
        assert_eq!(recorded_field(&d.record(&["n1"]), "pred_kwh"), Some("unknown"));
        assert_eq!(recorded_field(&d.record(&["n1"]), "pred_w"), Some("250"));
        let learnt = StartDecision { prediction: "history:u1:n=3".into(), predicted_energy_j: 3.6e6, ..d.clone() };
        assert_eq!(recorded_field(&learnt.record(&["n1"]), "pred_kwh"), Some("1.000"));
        let limited = StartDecision { time_limit_s: 3_600.0, predicted_energy_j: 250.0 * 1_800.0, ..d.clone() };
        assert_eq!(recorded_field(&limited.record(&["n1"]), "pred_kwh"), Some("0.125"));
    }

    #[test]
    fn accounting_fields_are_set_and_read_back() {
        let c = "energy:policy=balanced nodes=n1 clock=1200MHz; project 42";
        let c = set_recorded_field(c, "energy_j", "1500");
        let c = set_recorded_field(&c, "carbon_g", "0.125");
        assert_eq!(c, "energy:policy=balanced nodes=n1 clock=1200MHz energy_j=1500 carbon_g=0.125; project 42");
        let c = set_recorded_field(&c, "energy_j", "3000");
        assert_eq!(recorded_energy_j(&c), Some(3000.0));
        assert_eq!(recorded_carbon_g(&c), Some(0.125));
        assert_eq!(recorded_clock_mhz(&c), Some(1200));
        assert_eq!(set_recorded_field("site note", "energy_j", "1"), "site note");
        assert_eq!(recorded_carbon_g("energy:x carbon_g=nan"), None);
        assert_eq!(recorded_carbon_g("energy:x; carbon_g=5"), None, "the site's part is not ours");
        // `carbon_g_x=` is not `carbon_g=`.
        assert_eq!(recorded_field("energy:carbon_gx=5", "carbon_g"), None);
    }

    #[test]
    fn the_power_limit_travels_in_milliwatts_and_reads_back() {
        let d = |w: f64| StartDecision {
            job: JobId(1),
            policy: EnergyPolicy::Efficiency,
            allocations: Vec::new(),
            clock_mhz: 1085,
            power_limit_w: w,
            shares_with: Vec::new(),
            time_limit_s: 600.0,
            predicted_slowdown: 1.0,
            predicted_power_w: 0.0,
            predicted_energy_j: 0.0,
            wakes: Vec::new(),
            score: ScoreBreakdown::default(),
            route: None,
            prediction: String::new(),
            tag: None,
            interference: None,
        };
        assert_eq!(d(437.5).power_limit_mw(), Some(437_500));
        assert_eq!(parse_power_limit_mw(&d(437.5).power_limit_mw().unwrap().to_string()), Some(437_500));
        for w in [0.0, -5.0, f64::NAN, f64::INFINITY, 20_000.0] {
            assert_eq!(d(w).power_limit_mw(), None, "{w} W is no limit");
        }
        for v in ["", "0", "-1", "150W", "1.5e5", "10000001", "99999999999"] {
            assert_eq!(parse_power_limit_mw(v), None, "{v:?}");
        }
        assert_eq!(parse_power_limit_mw(" 150000 "), Some(150_000));
    }

    #[test]
    fn the_record_keeps_what_the_site_wrote() {
        assert_eq!(merge_record(None, "energy:policy=a clock=1MHz"), "energy:policy=a clock=1MHz");
        assert_eq!(merge_record(Some(""), "energy:x"), "energy:x");
        assert_eq!(merge_record(Some("project 42; audited"), "energy:x"), "energy:x; project 42; audited");
        // A record written before (a requeued job) is replaced, the site's text kept once.
        assert_eq!(merge_record(Some("energy:old clock=5MHz; project 42"), "energy:new"), "energy:new; project 42");
        assert_eq!(merge_record(Some("energy:old clock=5MHz"), "energy:new"), "energy:new");
        assert_eq!(recorded_clock_mhz(&merge_record(Some("energy:policy=x clock=7MHz"), "energy:policy=y clock=9MHz")), Some(9));
    }
}
