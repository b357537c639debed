//! The planner's configuration: the `[planner]`, `[scorers]`, `[hints]` ... tables of
//! `energy.toml`. Parsing the TOML file is the caller's job (the plugin and the tools); this
//! module holds the types, their defaults and a validation that names the key at fault.

use serde::{Deserialize, Serialize};

use crate::types::{EnergyPolicy, Hints};

/// Weights of the independent node scorers. Each score is normalised to 0..1 before weighting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScorerWeights {
    /// Predicted energy of the placement, including waking a suspended node.
    pub energy: f64,
    /// Predicted slowdown from sharing a GPU.
    pub interference: f64,
    /// Fragmentation: prefer nodes the job fills up, and buddy-aligned GPU blocks.
    pub fragmentation: f64,
    /// Carbon intensity now compared with the forecast (applies to clock choice and deferral).
    pub carbon: f64,
    /// Slurm's own order: lowest node index first (what select/cons_tres does with equal weights).
    pub node_order: f64,
}

impl Default for ScorerWeights {
    fn default() -> Self {
        ScorerWeights { energy: 1.0, interference: 1.0, fragmentation: 1.0, carbon: 0.5, node_order: 0.05 }
    }
}

/// Defaults applied to jobs that carry no hints, and bounds on what users may ask for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HintDefaults {
    pub policy: EnergyPolicy,
    /// Slowdown accepted by `balanced` jobs without an explicit `--energy-max-slowdown`.
    pub balanced_max_slowdown: f64,
    /// Slowdown accepted by `efficiency` jobs without an explicit `--energy-max-slowdown`.
    pub efficiency_max_slowdown: f64,
    /// Whether jobs without `--energy-share` may share GPUs.
    pub share_allowed: bool,
    /// Default start deferral allowed (s).
    pub defer_s: f64,
    /// Largest deferral a user may ask for (s).
    pub max_defer_s: f64,
    /// Largest slowdown a user may ask for.
    pub max_slowdown_limit: f64,
}

impl Default for HintDefaults {
    fn default() -> Self {
        HintDefaults {
            policy: EnergyPolicy::Balanced,
            balanced_max_slowdown: 1.05,
            efficiency_max_slowdown: 1.25,
            share_allowed: false,
            defer_s: 0.0,
            max_defer_s: 12.0 * 3600.0,
            max_slowdown_limit: 3.0,
        }
    }
}

impl HintDefaults {
    /// Hints for a job that gave none.
    pub fn default_hints(&self) -> Hints {
        Hints {
            policy: self.policy,
            max_slowdown: self.slowdown_for(self.policy),
            share_allowed: self.share_allowed,
            defer_max_s: self.defer_s,
            tag: None,
        }
    }

    /// The slowdown bound a policy implies when the user gave none.
    pub fn slowdown_for(&self, policy: EnergyPolicy) -> f64 {
        match policy {
            EnergyPolicy::Performance => 1.0,
            EnergyPolicy::Balanced => self.balanced_max_slowdown,
            EnergyPolicy::Efficiency => self.efficiency_max_slowdown,
        }
    }
}

/// `reservation_depth` that reserves for every blocked job a cycle tests (the most a cycle can
/// test is bounded by `max_jobs_tested`).
pub const ALL_TESTED: usize = 10_000;

/// Everything the planner is told by the site.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlannerConfig {
    /// How many blocked high-priority jobs get a reservation (1 = EASY backfill). The default,
    /// [`ALL_TESTED`], reserves for every blocked job the cycle tests, as sched/backfill does.
    pub reservation_depth: usize,
    /// Stop a cycle after testing this many pending jobs (deterministic bound; 500 like Slurm's
    /// `bf_max_job_test` default).
    pub max_jobs_tested: usize,
    /// Stop a cycle after this much wall time (0 = off; the simulator keeps it off so that runs
    /// are reproducible, the plugin keeps it on so a cycle can never hang slurmctld).
    pub max_cycle_ms: u64,
    /// Score at most this many feasible nodes per job (like kube-scheduler's
    /// percentageOfNodesToScore): the best-fitting ones first.
    pub max_nodes_scored: usize,
    /// Choose GPU clocks below the default within the job's slowdown bound.
    pub clock_scaling: bool,
    /// Let jobs that allow it time-share a GPU (EaCO).
    pub sharing: bool,
    /// Consider sharing for every job that allows it even when a whole GPU is free (otherwise
    /// only `efficiency` jobs do, and the others share only instead of waiting).
    pub prefer_sharing: bool,
    /// Take a GPU to time-share (within `sharing_max_slowdown`) before a free one whenever one
    /// is offered, so that work consolidates and whole nodes empty for power saving (EaCO).
    /// Needs `prefer_sharing` (or `efficiency` jobs) for shared GPUs to be offered at all.
    pub sharing_first: bool,
    /// Never share when the predicted slowdown of either job exceeds this.
    pub sharing_max_slowdown: f64,
    /// While the cluster is congested (see `congestion_load`), spend only part of each job's
    /// slowdown budget on lower clocks: slowing jobs then lengthens every wait (PowerFlow:
    /// minimise JCT within the budget).
    pub congestion_aware_clocks: bool,
    /// The cluster counts as congested when busy GPUs plus the GPUs the queue wants exceed
    /// this fraction of all GPUs.
    pub congestion_load: f64,
    /// While congested, raise running jobs that run below the default clock back to it.
    pub boost_when_congested: bool,
    /// Share of a job's slowdown budget the clock may use while the cluster is congested.
    pub congested_slowdown_share: f64,
    /// Defer jobs that allow it to a cleaner hour (GreenFlow); needs a carbon forecast.
    pub carbon_deferral: bool,
    /// Defer only when the forecast minimum within the allowed window is this much cleaner.
    pub deferral_min_gain: f64,
    /// Lower clocks further while the grid is dirtier than its forecast median (GreenFlow).
    pub carbon_aware_clocks: bool,
    /// Give CPUs by measured sensitivity within a job's allowed range (Synergy).
    pub cpu_by_sensitivity: bool,
    /// Cluster power cap for GPUs in W (PowerFlow's budget, expressed as power); 0 = none.
    pub power_cap_w: f64,
    /// How far ahead reservations are planned (s), sched/backfill's `bf_window`: a blocked job
    /// whose earliest start is later than this after now gets no reservation ("starts too far
    /// in the future to worry about", as backfill says), and the search for it stops there.
    /// Not an energy.toml key: sched/energy sets it from slurm.conf's `SchedulerParameters`
    /// (`bf_window`, 1 day when not set, as sched/backfill); the simulator and the benches
    /// plan without a horizon unless told.
    #[serde(skip)]
    pub reservation_window_s: f64,
    /// Extend a job's time limit by its slowdown bound when the planner slows it, so that a job
    /// is never killed for a choice it did not make.
    pub extend_time_limits: bool,
    /// Prefer powered-on nodes and buddy-aligned GPU blocks (packing, PowerFlow).
    pub packing: bool,
    /// Compute a reservation for every blocked job up to the depth even when nothing behind it
    /// could start (so expected start times can be shown); the simulator turns it off for speed
    /// since it changes no start.
    pub report_reservations: bool,
    pub scorers: ScorerWeights,
    pub hints: HintDefaults,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig {
            reservation_depth: ALL_TESTED,
            max_jobs_tested: 500,
            max_cycle_ms: 0,
            max_nodes_scored: 32,
            clock_scaling: true,
            congestion_aware_clocks: true,
            congestion_load: 0.8,
            congested_slowdown_share: 0.25,
            boost_when_congested: true,
            sharing: true,
            prefer_sharing: false,
            sharing_first: false,
            sharing_max_slowdown: 1.6,
            carbon_deferral: true,
            deferral_min_gain: 0.15,
            carbon_aware_clocks: true,
            cpu_by_sensitivity: true,
            power_cap_w: 0.0,
            reservation_window_s: f64::INFINITY,
            extend_time_limits: true,
            packing: true,
            report_reservations: true,
            scorers: ScorerWeights::default(),
            hints: HintDefaults::default(),
        }
    }
}

/// A configuration value that makes no sense, with the key that holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub key: String,
    pub reason: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.reason)
    }
}

impl std::error::Error for ConfigError {}

fn check(ok: bool, key: &str, reason: &str) -> Result<(), ConfigError> {
    if ok { Ok(()) } else { Err(ConfigError { key: key.to_string(), reason: reason.to_string() }) }
}

impl PlannerConfig {
    /// The `slurm` baseline: priority FIFO with EASY backfill, first fit in node order, whole
    /// GPUs at the default clock.
    pub fn slurm_baseline() -> Self {
        PlannerConfig {
            reservation_depth: 1,
            clock_scaling: false,
            sharing: false,
            carbon_deferral: false,
            carbon_aware_clocks: false,
            cpu_by_sensitivity: false,
            extend_time_limits: false,
            packing: false,
            scorers: ScorerWeights { energy: 0.0, interference: 0.0, fragmentation: 0.0, carbon: 0.0, node_order: 1.0 },
            hints: HintDefaults { policy: EnergyPolicy::Performance, ..HintDefaults::default() },
            ..PlannerConfig::default()
        }
    }

    /// Reject values that would make the planner misbehave, naming the key (`planner.<key>`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        check(self.reservation_depth <= 10_000, "reservation_depth", "must be at most 10000")?;
        check(self.max_jobs_tested >= 1, "max_jobs_tested", "must be at least 1")?;
        check(self.max_nodes_scored >= 1, "max_nodes_scored", "must be at least 1")?;
        check(
            self.sharing_max_slowdown.is_finite() && self.sharing_max_slowdown >= 1.0,
            "sharing_max_slowdown",
            "must be a ratio >= 1.0",
        )?;
        check(
            self.deferral_min_gain.is_finite() && (0.0..1.0).contains(&self.deferral_min_gain),
            "deferral_min_gain",
            "must be a fraction in [0, 1)",
        )?;
        check((0.0..=1.0).contains(&self.congested_slowdown_share), "congested_slowdown_share", "must be a fraction in [0, 1]")?;
        check(self.congestion_load.is_finite() && self.congestion_load > 0.0, "congestion_load", "must be a fraction > 0")?;
        check(self.power_cap_w.is_finite() && self.power_cap_w >= 0.0, "power_cap_w", "must be >= 0 (0 = no cap)")?;
        check(self.reservation_window_s > 0.0, "reservation_window_s", "must be > 0 (bf_window)")?;
        let w = &self.scorers;
        for (key, v) in [
            ("scorers.energy", w.energy),
            ("scorers.interference", w.interference),
            ("scorers.fragmentation", w.fragmentation),
            ("scorers.carbon", w.carbon),
            ("scorers.node_order", w.node_order),
        ] {
            check(v.is_finite() && v >= 0.0, key, "weight must be a finite number >= 0")?;
        }
        let h = &self.hints;
        for (key, v) in [
            ("hints.balanced_max_slowdown", h.balanced_max_slowdown),
            ("hints.efficiency_max_slowdown", h.efficiency_max_slowdown),
            ("hints.max_slowdown_limit", h.max_slowdown_limit),
        ] {
            check(v.is_finite() && v >= 1.0, key, "must be a ratio >= 1.0")?;
        }
        check(h.max_defer_s.is_finite() && h.max_defer_s >= 0.0, "hints.max_defer_s", "must be >= 0 seconds")?;
        check(
            h.defer_s.is_finite() && h.defer_s >= 0.0 && h.defer_s <= h.max_defer_s,
            "hints.defer_s",
            "must be between 0 and hints.max_defer_s",
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(PlannerConfig::default().validate(), Ok(()));
        assert_eq!(PlannerConfig::slurm_baseline().validate(), Ok(()));
    }

    #[test]
    fn bad_values_name_their_key() {
        let mut c = PlannerConfig::default();
        c.hints.balanced_max_slowdown = 0.5;
        assert_eq!(c.validate().unwrap_err().key, "hints.balanced_max_slowdown");
        let mut c = PlannerConfig::default();
        c.scorers.energy = f64::NAN;
        assert_eq!(c.validate().unwrap_err().key, "scorers.energy");
    }
}
