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
//!   and the first minutes of each shared run (a pair worse than the bound is separated and
//!   remembered); **consolidation**: a shareable GPU within the bound is taken before a free
//!   one (`sharing_first`), and exclusive jobs are packed, so whole nodes empty and power saving
//!   suspends them. Not modelled: migration of running jobs (the abstract names none).
//! - `powerflow` (PowerFlow): mean JCT under an energy budget, as its price (J per second of
//!   JCT saved, `Elastic`): **elastic GPU counts** re-planned at every cycle for pending jobs
//!   (`model::elastic`: half, the request or twice it in buddy-aligned powers of two; narrower
//!   only to start now at no more energy, wider while the GPUs are free and the extra energy
//!   is within the price), scaling predicted from Gavel's multi-GPU measurements; **running
//!   jobs re-allocated** by checkpoint and restart (`model::elastic::reallocate`: grown one
//!   step onto idle GPUs of their node when the JCT saved beats the restart pause and the
//!   price, grown GPUs given back when a waiting job fits nowhere; the pause is the spec's
//!   `[elastic]`); the energy-optimal clock within a slowdown bound; packing with
//!   buddy-aligned blocks. No sharing. Not modelled: migration to another node, batch-size
//!   tuning. `powerflow-no-realloc` leaves running jobs alone.
//! - `greenflow` (GreenFlow): PowerFlow under a carbon budget: the price weighs energy by the
//!   grid's intensity now relative to its forecast (wider jobs while the grid is clean),
//!   clocks lowered less when the grid is clean, and a short deferral to a cleaner half hour.
//! - `synergy` (Synergy): FIFO + EASY like `slurm`, but CPUs given by each job's measured
//!   sensitivity instead of in proportion to GPUs.
//! - `union` (issue 23's comparator, no paper): the papers' mechanisms stacked without
//!   integration: `powerflow`'s planner config, hints and elastic price as they are, plus
//!   `synergy`'s CPU choice (`cpu_by_sensitivity`, per-job CPU flexibility) and `eaco`'s
//!   sharing switches (`sharing`, `prefer_sharing`, `sharing_first`, every job allowing it).
//!   Each switch is read off the baselines' own setups (`Setup::union`), so a change to a
//!   baseline changes the union. What `energy` adds over it is what integrating them buys.
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
    /// PowerFlow + Synergy's CPUs + EaCO's sharing, stacked (`Setup::union`).
    Union,
    Energy,
    /// The lower bound of `oracle.rs`: not a planner configuration.
    Oracle,
}

pub const ALL: [Policy; 9] = [Policy::Slurm, Policy::SlurmPowersave, Policy::Eaco, Policy::Powerflow, Policy::Greenflow, Policy::Synergy, Policy::Union, Policy::Energy, Policy::Oracle];

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Slurm => "slurm",
            Policy::SlurmPowersave => "slurm-powersave",
            Policy::Eaco => "eaco",
            Policy::Powerflow => "powerflow",
            Policy::Greenflow => "greenflow",
            Policy::Synergy => "synergy",
            Policy::Union => "union",
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
    /// Elastic GPU counts under an energy (or carbon) price (PowerFlow, GreenFlow).
    pub elastic: Option<Elastic>,
    /// 0: the scheduler plans on every event (arrival, end), as slurmctld's main scheduler does.
    /// Otherwise it plans only every this many seconds of simulated time, as sched/energy does
    /// (`[sched] interval_s`; it runs with the main scheduler off). The replay against the live
    /// cluster sets it; on the full trace a few seconds do not matter.
    pub cycle_interval_s: f64,
    /// EaCO's early check separates a shared pair observed worse than the bound (the newcomer
    /// is requeued). sched/energy live only learns from such a pair (docs/learning.md);
    /// `false` simulates that.
    pub early_separation: bool,
}

/// The budget of PowerFlow (energy) or GreenFlow (carbon) as the price of JCT: the energy (J)
/// the scheduler may spend to save one second of a job's completion time
/// (`model::elastic::allocate`). Swept in the frontier; the budget table reads the best JCT
/// within each energy budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Elastic {
    pub joules_per_jct_s: f64,
    /// Weigh energy by the grid's relative carbon intensity now (GreenFlow).
    pub carbon: bool,
    /// Running jobs are re-allocated too (checkpoint and restart at another count,
    /// `model::elastic::reallocate`), as the papers do; `false` for the `*-no-realloc` ablation.
    pub realloc: bool,
}

/// PowerFlow and GreenFlow without re-allocation of running jobs (the ablation, and its points
/// in the frontier sweep).
pub const NO_REALLOC: [&str; 2] = ["powerflow-no-realloc", "greenflow-no-realloc"];

/// Switch off the re-allocation of running jobs.
pub fn without_realloc(s: &mut Setup) {
    if let Some(e) = s.elastic.as_mut() {
        e.realloc = false;
    }
}

/// PowerFlow's and GreenFlow's price in single-point runs (J per second of JCT saved).
pub const DEFAULT_PRICE_J_PER_S: f64 = 400.0;

/// Ideas of the `energy` policy that the ablation switches off one at a time.
pub const IDEAS: [&str; 6] = ["packing", "clocks", "sharing", "carbon", "synergy", "powersave"];

impl Setup {
    /// The setup of a policy the planner runs; `None` for `oracle`, which is computed, not run.
    pub fn for_policy(p: Policy, spec: &ClusterSpec) -> Option<Setup> {
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
                PlannerConfig { sharing: true, prefer_sharing: true, sharing_first: true, ..energy_aware },
                true,
                hints(EnergyPolicy::Balanced, 1.0, true, 0.0),
                false,
            ),
            Policy::Powerflow => (
                PlannerConfig { clock_scaling: true, ..energy_aware },
                true,
                hints(EnergyPolicy::Balanced, 1.10, false, 0.0),
                false,
            ),
            Policy::Greenflow => (
                PlannerConfig {
                    clock_scaling: true,
                    carbon_aware_clocks: true,
                    carbon_deferral: true,
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
            Policy::Union => return Setup::union(spec),
            Policy::Oracle => return None,
        };
        let elastic = match p {
            Policy::Powerflow => Some(Elastic { joules_per_jct_s: DEFAULT_PRICE_J_PER_S, carbon: false, realloc: true }),
            Policy::Greenflow => Some(Elastic { joules_per_jct_s: DEFAULT_PRICE_J_PER_S, carbon: true, realloc: true }),
            _ => None,
        };
        Some(Setup { name: p.name().to_string(), planner, power_saving, hints: rule, cpu_flexible, user_slowdowns: None, elastic, cycle_interval_s: 0.0, early_separation: true })
    }

    /// `union`: `powerflow`'s setup (planner config with its clock rule, hints with its
    /// slowdown bound, elastic price, power saving) with `synergy`'s CPU allocation and
    /// `eaco`'s sharing switched on exactly as those baselines set them. Nothing is tuned for
    /// the union: where the baselines disagree (hints' `share_allowed`), the mechanism's
    /// owner wins, so every job may share as under EaCO and keeps PowerFlow's slowdown bound.
    pub fn union(spec: &ClusterSpec) -> Option<Setup> {
        let mut s = Setup::for_policy(Policy::Powerflow, spec)?;
        let synergy = Setup::for_policy(Policy::Synergy, spec)?;
        let eaco = Setup::for_policy(Policy::Eaco, spec)?;
        s.planner.cpu_by_sensitivity = synergy.planner.cpu_by_sensitivity;
        s.cpu_flexible = synergy.cpu_flexible;
        s.planner.sharing = eaco.planner.sharing;
        s.planner.prefer_sharing = eaco.planner.prefer_sharing;
        s.planner.sharing_first = eaco.planner.sharing_first;
        s.planner.sharing_max_slowdown = eaco.planner.sharing_max_slowdown;
        if let (HintRule::Fixed(h), HintRule::Fixed(e)) = (&mut s.hints, &eaco.hints) {
            h.share_allowed = e.share_allowed;
        }
        s.name = Policy::Union.name().to_string();
        Some(s)
    }

    /// The papers' policies with one of their ideas switched off (ablation rows):
    /// `powerflow-no-realloc` and `greenflow-no-realloc` (elastic counts for pending jobs only,
    /// running jobs keep theirs),
    /// `eaco-no-consolidation` (shares only when no whole GPU is free, as before issue 11),
    /// `powerflow-no-elastic` and `greenflow-no-elastic` (every job on its requested GPU count),
    /// `powerflow-no-clocks` (elastic counts at the default clock), `greenflow-no-carbon-price`
    /// (its price weighs energy, not carbon), `union-no-elastic` (the union of the mechanisms
    /// `energy` can use in Slurm, where a job's GPU count is the user's).
    pub fn paper_ablations(spec: &ClusterSpec) -> Vec<Setup> {
        let mut out = Vec::new();
        let mut with = |p: Policy, name: &str, change: &dyn Fn(&mut Setup)| {
            if let Some(mut s) = Setup::for_policy(p, spec) {
                change(&mut s);
                s.name = name.to_string();
                out.push(s);
            }
        };
        with(Policy::Eaco, "eaco-no-consolidation", &|s| {
            s.planner.prefer_sharing = false;
            s.planner.sharing_first = false;
        });
        with(Policy::Powerflow, "powerflow-no-elastic", &|s| s.elastic = None);
        with(Policy::Powerflow, "powerflow-no-clocks", &|s| s.planner.clock_scaling = false);
        with(Policy::Powerflow, NO_REALLOC[0], &without_realloc);
        with(Policy::Greenflow, NO_REALLOC[1], &without_realloc);
        with(Policy::Greenflow, "greenflow-no-elastic", &|s| s.elastic = None);
        with(Policy::Greenflow, "greenflow-no-carbon-price", &|s| {
            if let Some(e) = s.elastic.as_mut() {
                e.carbon = false;
            }
        });
        with(Policy::Union, "union-no-elastic", &|s| s.elastic = None);
        out
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
    fn union_is_powerflow_with_synergys_cpus_and_eacos_sharing() {
        let spec = ClusterSpec::default();
        let get = |p| Setup::for_policy(p, &spec).expect("a planner policy");
        let (u, pf, syn, eaco) = (get(Policy::Union), get(Policy::Powerflow), get(Policy::Synergy), get(Policy::Eaco));
        assert_eq!(u.name, "union");
        assert_eq!(Policy::parse("union"), Ok(Policy::Union));
        // PowerFlow's clock rule, packing, elastic price and power saving.
        assert!(u.planner.clock_scaling && u.planner.clock_scaling == pf.planner.clock_scaling);
        assert_eq!(u.planner.packing, pf.planner.packing);
        assert_eq!(u.elastic, pf.elastic);
        assert!(u.elastic.is_some());
        assert_eq!(u.power_saving, pf.power_saving);
        // Synergy's CPUs.
        assert!(u.planner.cpu_by_sensitivity && u.cpu_flexible);
        assert_eq!((u.planner.cpu_by_sensitivity, u.cpu_flexible), (syn.planner.cpu_by_sensitivity, syn.cpu_flexible));
        // EaCO's sharing.
        assert!(u.planner.sharing && u.planner.prefer_sharing && u.planner.sharing_first);
        assert_eq!(u.planner.sharing_max_slowdown, eaco.planner.sharing_max_slowdown);
        let (HintRule::Fixed(h), HintRule::Fixed(p)) = (&u.hints, &pf.hints) else { panic!("fixed hints") };
        assert!(h.share_allowed);
        assert_eq!((h.policy, h.max_slowdown, h.defer_max_s), (p.policy, p.max_slowdown, p.defer_max_s));
        // Everything else is PowerFlow's.
        let strip = |mut s: Setup| {
            s.name.clear();
            s.planner.cpu_by_sensitivity = false;
            s.cpu_flexible = false;
            s.planner.sharing = false;
            s.planner.prefer_sharing = false;
            s.planner.sharing_first = false;
            s.planner.sharing_max_slowdown = 0.0;
            if let HintRule::Fixed(h) = &mut s.hints {
                h.share_allowed = false;
            }
            s
        };
        assert_eq!(strip(u), strip(pf));
    }

    #[test]
    fn union_no_elastic_is_the_union_at_requested_gpu_counts() {
        let spec = ClusterSpec::default();
        let mut u = Setup::for_policy(Policy::Union, &spec).expect("union");
        let fixed = Setup::paper_ablations(&spec).into_iter().find(|s| s.name == "union-no-elastic").expect("union-no-elastic row");
        assert!(u.elastic.is_some() && fixed.elastic.is_none());
        u.elastic = None;
        u.name = fixed.name.clone();
        assert_eq!(u, fixed);
    }

    #[test]
    fn only_the_sites_energy_config_caps_power() {
        let mut spec = ClusterSpec::default();
        spec.planner.power_cap_w = 1000.0;
        for p in ALL {
            if let Some(s) = Setup::for_policy(p, &spec) {
                let capped = matches!(p, Policy::Energy);
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
