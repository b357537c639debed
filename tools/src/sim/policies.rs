//! The policies `simulate` compares. Each is the same planner (`model::planner`) under a
//! different configuration, plus whether Slurm's power saving suspends idle nodes, plus which
//! hints jobs carry. What each takes from its paper:
//!
//! - `slurm`: priority FIFO + EASY backfill (one reservation), first fit in node order, whole
//!   GPUs at the default clock, nodes always on. What a stock cluster does.
//! - `slurm-powersave`: the same, with Slurm's power saving (idle nodes suspended after
//!   `SuspendTime`, resumed on demand at a delay).
//! - `eaco` (EaCO): every job may time-share a GPU when the predicted slowdown of both jobs stays
//!   within the sharing bound; predictions from Gavel's experiments plus the cluster's history
//!   and the first minutes of each shared run; shares when no whole GPU is free; packs jobs.
//! - `powerflow` (PowerFlow): performance/energy model per job and clock; the energy-optimal
//!   clock within a small slowdown bound; packing with buddy-aligned GPU blocks; a cluster GPU
//!   power cap (its energy budget expressed as power). No sharing.
//! - `greenflow` (GreenFlow): PowerFlow following the grid: clocks lowered less when the grid is
//!   clean than when it is dirty, and a short deferral of each job to a cleaner half hour.
//! - `synergy` (Synergy): FIFO + EASY like `slurm`, but CPUs given by each job's measured
//!   sensitivity instead of in proportion to GPUs.
//! - `energy` (ours): all of the above, driven by each job's own hints and the site's config.
//!
//! All but `slurm` run with power saving on: a site that cares about energy enables it first.

use model::config::PlannerConfig;
use model::types::{EnergyPolicy, Hints};

use super::spec::ClusterSpec;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Policy {
    Slurm,
    SlurmPowersave,
    Eaco,
    Powerflow,
    Greenflow,
    Synergy,
    Energy,
    /// The lower bound of `oracle.rs`: not a planner configuration.
    Oracle,
}

pub const ALL: [Policy; 8] = [Policy::Slurm, Policy::SlurmPowersave, Policy::Eaco, Policy::Powerflow, Policy::Greenflow, Policy::Synergy, Policy::Energy, Policy::Oracle];

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Slurm => "slurm",
            Policy::SlurmPowersave => "slurm-powersave",
            Policy::Eaco => "eaco",
            Policy::Powerflow => "powerflow",
            Policy::Greenflow => "greenflow",
            Policy::Synergy => "synergy",
            Policy::Energy => "energy",
            Policy::Oracle => "oracle",
        }
    }

    pub fn parse(s: &str) -> Result<Policy, String> {
        ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            format!("unknown policy '{s}': allowed are {}", ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "))
        })
    }
}

/// How jobs get their hints under a policy.
#[derive(Debug, Clone, PartialEq)]
pub enum HintRule {
    /// Every job carries these hints (the paper's rule, not the user's).
    Fixed(Hints),
    /// Each job carries the hints drawn for it from the spec's mix (what users would say).
    Users,
}

/// One simulated configuration: planner config, power saving, hints, and which ideas may use
/// per-job CPU flexibility.
#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    pub name: String,
    pub planner: PlannerConfig,
    pub power_saving: bool,
    pub hints: HintRule,
    /// Jobs may get CPUs other than their request (within bounds) when the spec says so.
    pub cpu_flexible: bool,
    /// Under [`HintRule::Users`]: the slowdown bounds of `balanced` and `efficiency` jobs
    /// instead of the spec's (a knob of the frontier sweep).
    pub user_slowdowns: Option<(f64, f64)>,
}

/// Ideas of the `energy` policy that the ablation switches off one at a time.
pub const IDEAS: [&str; 6] = ["packing", "clocks", "sharing", "carbon", "synergy", "powersave"];

impl Setup {
    /// The setup of a policy the planner runs; `None` for `oracle`, which is computed, not run.
    pub fn for_policy(p: Policy, spec: &ClusterSpec) -> Option<Setup> {
        let gpus_total = (spec.cluster.nodes * spec.cluster.gpus_per_node) as f64;
        let base = PlannerConfig { report_reservations: false, ..PlannerConfig::slurm_baseline() };
        let energy_aware = PlannerConfig {
            report_reservations: false,
            reservation_depth: spec.planner.reservation_depth,
            packing: true,
            scorers: spec.planner.scorers.clone(),
            clock_scaling: false,
            sharing: false,
            carbon_deferral: false,
            carbon_aware_clocks: false,
            cpu_by_sensitivity: false,
            extend_time_limits: true,
            // The `energy` site's cap is its own: each paper's policy sets its own or none.
            power_cap_w: 0.0,
            ..spec.planner.clone()
        };
        let hints = |policy, max_slowdown, share_allowed, defer_max_s| HintRule::Fixed(Hints { policy, max_slowdown, share_allowed, defer_max_s, tag: None });
        let (planner, power_saving, rule, cpu_flexible) = match p {
            Policy::Slurm => (base, false, hints(EnergyPolicy::Performance, 1.0, false, 0.0), false),
            Policy::SlurmPowersave => (base, true, hints(EnergyPolicy::Performance, 1.0, false, 0.0), false),
            Policy::Eaco => (
                PlannerConfig { sharing: true, ..energy_aware },
                true,
                hints(EnergyPolicy::Balanced, 1.0, true, 0.0),
                false,
            ),
            Policy::Powerflow => (
                PlannerConfig { clock_scaling: true, power_cap_w: 0.6 * gpus_total * spec.gpu.max_power_w, ..energy_aware },
                true,
                hints(EnergyPolicy::Balanced, 1.10, false, 0.0),
                false,
            ),
            Policy::Greenflow => (
                PlannerConfig {
                    clock_scaling: true,
                    carbon_aware_clocks: true,
                    carbon_deferral: true,
                    power_cap_w: 0.6 * gpus_total * spec.gpu.max_power_w,
                    ..energy_aware
                },
                true,
                hints(EnergyPolicy::Balanced, 1.10, false, 3600.0),
                false,
            ),
            Policy::Synergy => (PlannerConfig { cpu_by_sensitivity: true, ..base }, true, hints(EnergyPolicy::Balanced, 1.0, false, 0.0), true),
            Policy::Energy => {
                let mut c = spec.planner.clone();
                c.report_reservations = false;
                (c, true, HintRule::Users, true)
            }
            Policy::Oracle => return None,
        };
        Some(Setup { name: p.name().to_string(), planner, power_saving, hints: rule, cpu_flexible, user_slowdowns: None })
    }

    /// The `energy` setup with one idea switched off.
    pub fn energy_without(idea: &str, spec: &ClusterSpec) -> Option<Setup> {
        let mut s = Setup::for_policy(Policy::Energy, spec)?;
        match idea {
            "packing" => {
                s.planner.packing = false;
                s.planner.scorers.energy = 0.0;
                s.planner.scorers.fragmentation = 0.0;
                s.planner.scorers.node_order = 1.0;
            }
            "clocks" => s.planner.clock_scaling = false,
            "sharing" => s.planner.sharing = false,
            "carbon" => {
                s.planner.carbon_deferral = false;
                s.planner.carbon_aware_clocks = false;
                s.planner.scorers.carbon = 0.0;
            }
            "synergy" => {
                s.planner.cpu_by_sensitivity = false;
                s.cpu_flexible = false;
            }
            "powersave" => s.power_saving = false,
            _ => return None,
        }
        s.name = format!("energy-no-{idea}");
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_powerflow_greenflow_and_the_sites_energy_config_cap_power() {
        let mut spec = ClusterSpec::default();
        spec.planner.power_cap_w = 1000.0;
        for p in ALL {
            if let Some(s) = Setup::for_policy(p, &spec) {
                let capped = matches!(p, Policy::Powerflow | Policy::Greenflow | Policy::Energy);
                assert_eq!(s.planner.power_cap_w > 0.0, capped, "{}", p.name());
            }
        }
    }

    #[test]
    fn power_saving_is_on_for_every_policy_but_slurm() {
        let spec = ClusterSpec::default();
        for p in ALL {
            if let Some(s) = Setup::for_policy(p, &spec) {
                assert_eq!(s.power_saving, p != Policy::Slurm, "{}", p.name());
            }
        }
    }
}
