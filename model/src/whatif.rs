//! What-if at submission: what the planner would do with one job that is not submitted yet,
//! under each energy policy, on the cluster as it is now.
//!
//! The job is appended to the snapshot's queue (lowest priority: a new job has no age yet) and
//! the snapshot is planned with [`crate::planner::plan_snapshot`], exactly as sched/energy plans
//! its cycles. A job that starts now takes the planner's start decision (nodes, clock, predicted
//! power and energy). A job that is reserved or deferred is planned again at that moment, on the
//! snapshot with the running jobs that will have ended by then removed, to get the clock and
//! power it would start with; such estimates are marked ([`Estimate::planned_at_start`]).
//!
//! Uncertainty, stated in each estimate:
//! - the start is the planner's reservation, which assumes every running job uses its whole
//!   time limit and no job of higher priority arrives: it is a latest start under that queue;
//! - the run time is the time limit times the fraction history expects for this user and tag
//!   ([`crate::history::History::predict`], the prior when none), times the predicted slowdown;
//!   it can be anything up to the (extended) time limit, so the energy comes with its value at
//!   the limit too.

use serde::Serialize;

use crate::config::{HintDefaults, PlannerConfig};
use crate::decision::{Decision, StartDecision};
use crate::planner::plan_snapshot;
use crate::predictor::Predictor;
use crate::types::{EnergyPolicy, Hints, JobId, NodeIdx, PendingJob, Snapshot};

/// Id the hypothetical job carries in the plan (no Slurm job id reaches it: Slurm's ids stop at
/// 0x03ffffff for plain jobs and below 0xfffffffe for any).
pub const WHATIF_JOB_ID: JobId = JobId(u32::MAX - 2);

/// The `--energy-*` options as the user typed them (`None`: not given, the site's default).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HintOptions {
    pub policy: Option<EnergyPolicy>,
    pub max_slowdown: Option<f64>,
    pub share: Option<bool>,
    pub defer_s: Option<f64>,
    pub tag: Option<String>,
}

impl HintOptions {
    /// Sets option `name` (`energy-policy`, `energy-max-slowdown`, `energy-share`,
    /// `energy-defer`, `energy-tag`) from `value`, with the rules spank_energy checks at
    /// submission. `Ok(false)` for a name that is not an energy hint.
    pub fn set(&mut self, name: &str, value: &str) -> Result<bool, String> {
        let value = value.trim();
        match name {
            "energy-policy" => self.policy = Some(value.parse()?),
            "energy-max-slowdown" => {
                let v: f64 = value.parse().map_err(|_| format!("--energy-max-slowdown={value}: not a number"))?;
                if !(v.is_finite() && v >= 1.0) {
                    return Err(format!("--energy-max-slowdown={value}: must be a number >= 1.0"));
                }
                self.max_slowdown = Some(v);
            }
            "energy-share" => {
                self.share = Some(match value {
                    "allow" => true,
                    "deny" => false,
                    _ => return Err(format!("--energy-share={value}: allowed are allow, deny")),
                })
            }
            "energy-defer" => {
                let s = crate::duration::parse_duration_s(value).ok_or_else(|| format!("--energy-defer={value}: not a duration (30m, 2h, 1h30m, HH:MM:SS, or minutes)"))?;
                self.defer_s = Some(s as f64);
            }
            "energy-tag" => {
                if !crate::tag::valid_tag(value) {
                    return Err(format!("--energy-tag {}: 1 to {} letters, digits, '-', '_' or '.'", crate::tag::describe_refused(value), crate::tag::MAX_TAG_LEN));
                }
                self.tag = Some(value.to_string());
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The hints sched/energy would read for a job with these options: each option over the
    /// site's default, within the site's bounds (as its SPANK-environment reader composes them).
    pub fn hints(&self, d: &HintDefaults) -> Hints {
        let policy = self.policy.unwrap_or(d.policy);
        Hints {
            policy,
            max_slowdown: self.max_slowdown.unwrap_or_else(|| d.slowdown_for(policy)).min(d.max_slowdown_limit),
            share_allowed: self.share.unwrap_or(d.share_allowed),
            defer_max_s: self.defer_s.unwrap_or(d.defer_s).min(d.max_defer_s),
            tag: self.tag.clone(),
        }
    }
}

/// One way of submitting the job: a policy, with or without the deferral window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    /// `performance`, `balanced`, `efficiency`, or `balanced+defer` / `efficiency+defer`.
    pub name: String,
    pub hints: Hints,
}

/// The scenarios shown for `opts`: each policy without deferral (every other option as given),
/// and, when the options (or the site's default) allow a deferral window, `balanced` and
/// `efficiency` with it (`performance` never defers).
pub fn scenarios(opts: &HintOptions, d: &HintDefaults) -> Vec<Scenario> {
    let mut out = Vec::new();
    for policy in [EnergyPolicy::Performance, EnergyPolicy::Balanced, EnergyPolicy::Efficiency] {
        let o = HintOptions { policy: Some(policy), defer_s: Some(0.0), ..opts.clone() };
        out.push(Scenario { name: policy.as_str().to_string(), hints: o.hints(d) });
    }
    let window_s = opts.hints(d).defer_max_s;
    if window_s > 0.0 {
        for policy in [EnergyPolicy::Balanced, EnergyPolicy::Efficiency] {
            let o = HintOptions { policy: Some(policy), ..opts.clone() };
            out.push(Scenario { name: format!("{}+defer", policy.as_str()), hints: o.hints(d) });
        }
    }
    out
}

/// How the job would get its nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StartKind {
    /// Started in the next cycle.
    Now,
    /// Blocked: nodes are held for it from the start time (running jobs at their limits).
    Reserved,
    /// Deferred for a cleaner grid until the start time.
    Deferred,
    /// A shape the planner hands to Slurm's own selection: no clock or energy estimate.
    BySlurm,
    /// The plan gives it no start (larger than any node set it may use, or past the cycle's
    /// bound on jobs tested).
    NotPlanned,
}

/// What the planner expects for the job under one scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub scenario: String,
    pub policy: EnergyPolicy,
    pub defer_max_s: f64,
    pub kind: StartKind,
    /// Expected start (unix s); the latest under the current queue (see the module doc).
    pub start_s: Option<f64>,
    pub nodes: Vec<NodeIdx>,
    pub clock_mhz: Option<u32>,
    pub predicted_slowdown: Option<f64>,
    /// Shares GPUs with running jobs.
    pub shared: bool,
    /// Expected run time (s) and the most it may run (its time limit, extended by the slowdown).
    pub runtime_s: Option<f64>,
    pub runtime_max_s: Option<f64>,
    /// Predicted GPU power of the job (W, all its GPUs).
    pub gpu_power_w: Option<f64>,
    /// Predicted GPU energy (J) of the job's GPUs over the expected run time (what sacct's
    /// ConsumedEnergy counts with a GPU energy plugin), and if it runs to its limit.
    pub energy_j: Option<f64>,
    pub energy_max_j: Option<f64>,
    /// The energy the planner weighs the placement by (its decision record's `pred_kwh`): the
    /// GPUs' plus, where the placement wakes or keeps a node on, that node's host share.
    pub planner_energy_j: Option<f64>,
    /// Carbon (g) of the expected energy at the forecast intensity over the expected run, when
    /// a carbon signal is configured and covers it.
    pub carbon_g: Option<f64>,
    /// The clock and power come from planning the job again at its start (reserved, deferred).
    pub planned_at_start: bool,
}

/// The answer for one job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WhatIf {
    pub now_s: f64,
    /// Where the run-time and power predictions come from (`prior`, `history:u<uid>/<tag>:n=..`).
    pub prediction: String,
    /// No history of this user (and tag): the prior is used.
    pub from_prior: bool,
    /// Expected run time / time limit, and measured / modelled power, that history gives.
    pub runtime_fraction: f64,
    pub power_ratio: f64,
    pub estimates: Vec<Estimate>,
}

/// Plans `job` (its hints replaced by each scenario's) on `snapshot` under each of `scenarios`.
pub fn what_if(snapshot: &Snapshot, job: &PendingJob, scenarios: &[Scenario], cfg: &PlannerConfig, pred: &Predictor) -> WhatIf {
    let learnt = pred.runtime.predict(job.user, job.hints.tag.as_deref());
    let from_prior = learnt.source == crate::history::PredictionSource::Prior;
    let estimates = scenarios.iter().map(|s| estimate(snapshot, job, s, cfg, pred, learnt.runtime_fraction)).collect();
    WhatIf { now_s: snapshot.now_s, prediction: learnt.source.to_string(), from_prior, runtime_fraction: learnt.runtime_fraction, power_ratio: learnt.power_ratio, estimates }
}

fn estimate(snapshot: &Snapshot, job: &PendingJob, scenario: &Scenario, cfg: &PlannerConfig, pred: &Predictor, runtime_fraction: f64) -> Estimate {
    let mut job = job.clone();
    job.id = WHATIF_JOB_ID;
    job.hints = scenario.hints.clone();
    let mut s = snapshot.clone();
    s.pending.retain(|p| p.id != WHATIF_JOB_ID);
    s.pending.push(job.clone());
    let outcome = plan_snapshot(&s, cfg, pred);
    let mine = outcome.decisions.iter().find(|d| decision_job(d) == Some(WHATIF_JOB_ID));
    let mut e = Estimate {
        scenario: scenario.name.clone(),
        policy: scenario.hints.policy,
        defer_max_s: scenario.hints.defer_max_s,
        kind: StartKind::NotPlanned,
        start_s: None,
        nodes: Vec::new(),
        clock_mhz: None,
        predicted_slowdown: None,
        shared: false,
        runtime_s: None,
        runtime_max_s: None,
        gpu_power_w: None,
        energy_j: None,
        energy_max_j: None,
        planner_energy_j: None,
        carbon_g: None,
        planned_at_start: false,
    };
    let later = |at_s: f64, e: &mut Estimate| {
        e.start_s = Some(at_s);
        e.planned_at_start = true;
        if let Some(d) = start_later(&s, &job, at_s, cfg, pred) {
            fill(e, &d, job.time_limit_s, runtime_fraction, at_s, pred);
        }
    };
    match mine {
        Some(Decision::Start(d)) => {
            e.kind = StartKind::Now;
            e.start_s = Some(snapshot.now_s);
            e.nodes = d.allocations.iter().map(|a| a.node).collect();
            fill(&mut e, d, job.time_limit_s, runtime_fraction, snapshot.now_s, pred);
        }
        Some(Decision::Reserve(r)) => {
            e.kind = StartKind::Reserved;
            e.nodes = r.nodes.clone();
            later(r.start_s.max(snapshot.now_s), &mut e);
        }
        Some(Decision::Defer(x)) => {
            e.kind = StartKind::Deferred;
            later(x.until_s.max(snapshot.now_s), &mut e);
        }
        Some(Decision::SlurmStart(x)) => {
            e.kind = StartKind::BySlurm;
            e.start_s = Some(snapshot.now_s);
            e.nodes = x.nodes.clone();
        }
        Some(Decision::SlurmWillRun(x)) => {
            e.kind = StartKind::BySlurm;
            e.nodes = x.nodes.clone();
        }
        Some(Decision::Reclock(_)) | None => {}
    }
    e
}

fn decision_job(d: &Decision) -> Option<JobId> {
    match d {
        Decision::Start(s) => Some(s.job),
        Decision::Reserve(r) => Some(r.job),
        Decision::Defer(x) => Some(x.job),
        Decision::SlurmStart(x) => Some(x.job),
        Decision::SlurmWillRun(x) => Some(x.job),
        Decision::Reclock(_) => None,
    }
}

/// The start decision the planner would make for `job` at `at_s`: the snapshot then, with the
/// running jobs that end by then gone, the job alone in the queue and no deferral left.
fn start_later(s: &Snapshot, job: &PendingJob, at_s: f64, cfg: &PlannerConfig, pred: &Predictor) -> Option<StartDecision> {
    let mut later = s.clone();
    later.now_s = at_s;
    later.running.retain(|r| r.end_time_s > at_s);
    let mut job = job.clone();
    job.hints.defer_max_s = 0.0;
    later.pending = vec![job];
    plan_snapshot(&later, cfg, pred).decisions.into_iter().find_map(|d| match d {
        Decision::Start(d) if d.job == WHATIF_JOB_ID => Some(d),
        _ => None,
    })
}

fn fill(e: &mut Estimate, d: &StartDecision, time_limit_s: f64, runtime_fraction: f64, start_s: f64, pred: &Predictor) {
    let slowdown = d.predicted_slowdown.max(1.0);
    // The planner's expected run time (crate::planner: limit x history's fraction x slowdown),
    // at most the limit it sets.
    let runtime_max_s = d.time_limit_s.max(time_limit_s);
    let runtime_s = (time_limit_s * runtime_fraction * slowdown).min(runtime_max_s);
    e.clock_mhz = Some(d.clock_mhz);
    e.predicted_slowdown = Some(slowdown);
    e.shared = !d.shares_with.is_empty();
    e.runtime_s = Some(runtime_s);
    e.runtime_max_s = Some(runtime_max_s);
    e.gpu_power_w = Some(d.predicted_power_w);
    let energy_j = d.predicted_power_w * runtime_s;
    e.energy_j = Some(energy_j);
    e.energy_max_j = Some(d.predicted_power_w * runtime_max_s);
    e.planner_energy_j = Some(d.predicted_energy_j);
    if e.nodes.is_empty() {
        e.nodes = d.allocations.iter().map(|a| a.node).collect();
    }
    e.carbon_g = carbon_g(pred, e.start_s.unwrap_or(start_s), start_s, runtime_s, energy_j);
}

/// Carbon (g) of `energy_j` spread evenly over `[start_s, start_s + runtime_s)`, at the
/// intensity the signal forecasts at `now_s`; `None` without a signal or where it says nothing.
fn carbon_g(pred: &Predictor, now_s: f64, start_s: f64, runtime_s: f64, energy_j: f64) -> Option<f64> {
    let signal = pred.carbon.as_ref()?;
    const SAMPLES: usize = 12;
    let mut sum = 0.0;
    for k in 0..SAMPLES {
        let t = start_s + runtime_s * (k as f64 + 0.5) / SAMPLES as f64;
        let g = signal.forecast(now_s.min(t), t);
        if !g.is_finite() {
            return None;
        }
        sum += g;
    }
    Some(energy_j / 3.6e6 * sum / SAMPLES as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{GpuType, Node, NodeAllocation, PowerState, Request, RunningJob};

    fn snapshot(running_until_s: Option<f64>) -> Snapshot {
        let gpu = GpuType { name: "v100".into(), default_clock_mhz: 1312, min_clock_mhz: 510, max_clock_mhz: 1530, idle_power_w: 40.0, max_power_w: 300.0 };
        let node = |name: &str| Node { name: name.into(), gpu_type: 0, gpus: 4, cpus: 16, mem_mb: 0, power: PowerState::On, available: true };
        let running = running_until_s
            .map(|end| {
                vec![RunningJob {
                    id: JobId(7),
                    user: 1,
                    start_time_s: 0.0,
                    end_time_s: end,
                    allocations: vec![NodeAllocation { node: NodeIdx(0), gpu_indices: vec![0, 1, 2, 3], cpus: 16, mem_mb: 0 }],
                    clock_mhz: 1312,
                    hints: Hints::default(),
                    shared: false,
                }]
            })
            .unwrap_or_default();
        Snapshot { now_s: 1000.0, gpu_types: vec![gpu], nodes: vec![node("n1")], running, pending: Vec::new(), node_sets: Vec::new(), reservations: Vec::new() }
    }

    fn job(gpus: u32) -> PendingJob {
        PendingJob {
            id: JobId(1),
            user: 42,
            priority: 0,
            submit_time_s: 1000.0,
            request: Request { nodes: 1, gpus_per_node: gpus, cpus_per_node: 2, mem_mb_per_node: 0 },
            time_limit_s: 3600.0,
            hints: Hints::default(),
            cpus_range: None,
            eligible: Vec::new(),
            placed_by_slurm: false,
            alternative: false,
            no_reservation: false,
            slurm_may_spread: false,
        }
    }

    fn predictor() -> Predictor {
        let dir = crate::data::default_data_dir();
        Predictor::from_data_dir(&dir, "v100").unwrap_or_default()
    }

    #[test]
    fn options_follow_the_spank_rules_and_the_site_bounds() {
        let mut o = HintOptions::default();
        assert_eq!(o.set("energy-policy", "efficiency"), Ok(true));
        assert_eq!(o.set("energy-max-slowdown", "9"), Ok(true));
        assert_eq!(o.set("energy-defer", "2h"), Ok(true));
        assert_eq!(o.set("energy-share", "allow"), Ok(true));
        assert_eq!(o.set("energy-tag", "bert"), Ok(true));
        assert_eq!(o.set("gres", "gpu:1"), Ok(false));
        assert!(o.set("energy-policy", "fast").is_err());
        assert!(o.set("energy-max-slowdown", "0.5").is_err());
        assert!(o.set("energy-share", "maybe").is_err());
        assert!(o.set("energy-defer", "-3").is_err());
        assert!(o.set("energy-tag", "a b").is_err());
        let d = HintDefaults::default();
        let h = o.hints(&d);
        assert_eq!(h.policy, EnergyPolicy::Efficiency);
        assert_eq!(h.max_slowdown, d.max_slowdown_limit, "capped by the site");
        assert_eq!(h.defer_max_s, 7200.0);
        assert!(h.share_allowed);
        assert_eq!(h.tag.as_deref(), Some("bert"));
        assert_eq!(HintOptions::default().hints(&d), d.default_hints());
    }

    #[test]
    fn scenarios_are_the_three_policies_and_the_deferral_window_when_allowed() {
        let d = HintDefaults::default();
        let names = |o: &HintOptions| scenarios(o, &d).into_iter().map(|s| s.name).collect::<Vec<_>>();
        assert_eq!(names(&HintOptions::default()), ["performance", "balanced", "efficiency"]);
        let o = HintOptions { defer_s: Some(3600.0), ..HintOptions::default() };
        assert_eq!(names(&o), ["performance", "balanced", "efficiency", "balanced+defer", "efficiency+defer"]);
        let s = scenarios(&o, &d);
        assert!(s[..3].iter().all(|s| s.hints.defer_max_s == 0.0));
        assert_eq!(s[3].hints.defer_max_s, 3600.0);
        assert_eq!(s[0].hints.max_slowdown, 1.0);
        assert_eq!(s[2].hints.max_slowdown, d.efficiency_max_slowdown);
    }

    #[test]
    fn each_policy_starts_now_on_an_idle_node_and_energy_falls_from_performance_to_efficiency() {
        let pred = predictor();
        let d = HintDefaults::default();
        let w = what_if(&snapshot(None), &job(2), &scenarios(&HintOptions::default(), &d), &PlannerConfig::default(), &pred);
        assert!(w.from_prior);
        assert_eq!(w.prediction, "prior");
        assert_eq!(w.estimates.len(), 3);
        for e in &w.estimates {
            assert_eq!(e.kind, StartKind::Now, "{e:?}");
            assert_eq!(e.start_s, Some(1000.0));
            assert_eq!(e.nodes, [NodeIdx(0)]);
            let (rt, rt_max) = (e.runtime_s.unwrap(), e.runtime_max_s.unwrap());
            assert!(rt > 0.0 && rt <= rt_max, "{e:?}");
            assert!(e.energy_j.unwrap() > 0.0 && e.energy_j.unwrap() <= e.energy_max_j.unwrap(), "{e:?}");
            assert!(e.carbon_g.is_none(), "no carbon signal");
        }
        let energy: Vec<f64> = w.estimates.iter().map(|e| e.energy_j.unwrap()).collect();
        assert_eq!(w.estimates[0].clock_mhz, Some(1312), "performance runs at the default clock");
        if pred.curves("v100").is_some() {
            assert!(energy[0] >= energy[1] && energy[1] >= energy[2] && energy[0] > energy[2], "{energy:?}");
            assert!(w.estimates[2].clock_mhz.unwrap() < 1312);
        }
    }

    #[test]
    fn a_full_node_gives_a_reservation_at_the_running_jobs_end_with_an_estimate_there() {
        let pred = predictor();
        let d = HintDefaults::default();
        let w = what_if(&snapshot(Some(5000.0)), &job(2), &scenarios(&HintOptions::default(), &d), &PlannerConfig::default(), &pred);
        for e in &w.estimates {
            assert_eq!(e.kind, StartKind::Reserved, "{e:?}");
            assert_eq!(e.start_s, Some(5000.0));
            assert!(e.planned_at_start);
            assert!(e.energy_j.is_some() && e.clock_mhz.is_some(), "{e:?}");
        }
        // Larger than any node: no start in the plan.
        let w = what_if(&snapshot(None), &job(8), &scenarios(&HintOptions::default(), &d), &PlannerConfig::default(), &pred);
        assert!(w.estimates.iter().all(|e| e.kind == StartKind::NotPlanned && e.energy_j.is_none()));
    }

    #[test]
    fn history_of_the_user_and_tag_is_used_and_named() {
        let mut pred = predictor();
        for _ in 0..4 {
            pred.runtime.observe_finished(&crate::history::FinishedJob { user: 42, tag: Some("bert"), runtime_s: 360.0, time_limit_s: 3600.0, gpus: 2, energy_j: None, predicted_power_w: None, clock_mhz: None });
        }
        let mut j = job(2);
        j.hints.tag = Some("bert".into());
        let d = HintDefaults::default();
        let o = HintOptions { tag: Some("bert".into()), ..HintOptions::default() };
        let w = what_if(&snapshot(None), &j, &scenarios(&o, &d), &PlannerConfig::default(), &pred);
        assert!(!w.from_prior);
        assert_eq!(w.prediction, "history:u42/bert:n=4");
        assert!(w.runtime_fraction < crate::history::PRIOR_RUNTIME_FRACTION);
        let perf = &w.estimates[0];
        assert!((perf.runtime_s.unwrap() - 3600.0 * w.runtime_fraction).abs() < 1e-6, "{perf:?}");
    }

    #[test]
    fn a_deferral_window_waits_for_the_cleaner_hour_and_its_carbon_is_lower() {
        let mut pred = predictor();
        // 400 g/kWh now (t = 1000), 100 g/kWh from t = 4600 on, for hours.
        let series = crate::carbon_source::IntensitySeries::from_points(&[(0, 400.0), (4600, 100.0), (4600 + 36_000, 100.0)], Some(3600));
        pred.carbon = Some(crate::carbon::CarbonSignal::published(series));
        let d = HintDefaults::default();
        let o = HintOptions { defer_s: Some(2.0 * 3600.0), ..HintOptions::default() };
        let w = what_if(&snapshot(None), &job(1), &scenarios(&o, &d), &PlannerConfig::default(), &pred);
        let by = |name: &str| w.estimates.iter().find(|e| e.scenario == name).unwrap_or_else(|| panic!("{name}"));
        let (now, deferred) = (by("balanced"), by("balanced+defer"));
        assert_eq!(now.kind, StartKind::Now);
        assert_eq!(deferred.kind, StartKind::Deferred, "{deferred:?}");
        assert_eq!(deferred.start_s, Some(4600.0));
        assert!(deferred.planned_at_start && deferred.energy_j.is_some());
        let (c_now, c_later) = (now.carbon_g.unwrap(), deferred.carbon_g.unwrap());
        assert!((c_now - now.energy_j.unwrap() / 3.6e6 * 400.0).abs() < 1e-6 * c_now.max(1.0), "{now:?}");
        assert!(c_later < c_now * 0.5, "{c_later} vs {c_now}");
        assert_eq!(by("performance").kind, StartKind::Now, "performance never defers");
    }
}
