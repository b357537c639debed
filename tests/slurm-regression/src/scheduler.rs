//! The two schedulers compared and the cluster each one runs on: 3 nodes x 4 fake GPUs with
//! accounting (`ClusterConfig::default()`), differing only in `SchedulerType`, the
//! `SchedulerParameters` sched/energy requires, and sched/energy's `energy.toml`.

use std::path::{Path, PathBuf};

use slurm_testcluster::ClusterConfig;

/// sched/energy's configuration for these runs: a scheduling cycle every second.
pub const ENERGY_TOML: &str = "\
# energy.toml for Slurm's regression tests: short cycles.
[sched]
interval_s = 1
";

/// sched/energy refuses to load without both: slurmctld's own scheduler off (`sched_interval=-1`)
/// and no scheduling at submit time (`defer`); the plugin starts every job.
pub const ENERGY_SCHEDULER_PARAMETERS: &str = "sched_interval=-1,defer";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheduler {
    Backfill,
    Energy,
}

impl Scheduler {
    pub const BOTH: [Scheduler; 2] = [Scheduler::Backfill, Scheduler::Energy];

    /// `SchedulerType`.
    pub fn sched_type(self) -> &'static str {
        match self {
            Scheduler::Backfill => "sched/backfill",
            Scheduler::Energy => "sched/energy",
        }
    }

    /// A short name, for directories and columns.
    pub fn short_name(self) -> &'static str {
        match self {
            Scheduler::Backfill => "backfill",
            Scheduler::Energy => "energy",
        }
    }

    pub fn parse(name: &str) -> Option<Scheduler> {
        match name {
            "backfill" | "sched/backfill" => Some(Scheduler::Backfill),
            "energy" | "sched/energy" => Some(Scheduler::Energy),
            _ => None,
        }
    }

    /// The cluster for this scheduler. `energy_plugin_dir` holds `sched_energy.so` (see
    /// [`energy_plugin_dir`]); only sched/energy uses it.
    pub fn cluster_config(self, energy_plugin_dir: &Path) -> ClusterConfig {
        let base = ClusterConfig { nodes: 3, gpus_per_node: 4, with_accounting: true, ..ClusterConfig::default() };
        match self {
            Scheduler::Backfill => base,
            Scheduler::Energy => ClusterConfig {
                plugin_dir: Some(energy_plugin_dir.to_path_buf()),
                sched_type: self.sched_type().into(),
                scheduler_parameters: Some(ENERGY_SCHEDULER_PARAMETERS.into()),
                extra_files: vec![("energy.toml".into(), ENERGY_TOML.into())],
                ..base
            },
        }
    }
}

/// A plugin directory holding the built `libsched_energy.so` under the name slurmctld loads,
/// `sched_energy.so`. `built` is the cargo-built library.
pub fn energy_plugin_dir(built: &Path) -> Result<tempfile::TempDir, String> {
    let dir = tempfile::Builder::new()
        .prefix("sched-energy-")
        .tempdir()
        .map_err(|e| format!("plugin temp dir: {e}"))?;
    let target: PathBuf = dir.path().join("sched_energy.so");
    std::fs::copy(built, &target).map_err(|e| format!("copy {} to {}: {e}", built.display(), target.display()))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_clusters_differ_only_in_the_scheduler() {
        let dir = Path::new("/opt/plugins");
        let backfill = Scheduler::Backfill.cluster_config(dir);
        let energy = Scheduler::Energy.cluster_config(dir);
        assert_eq!(backfill.sched_type, "sched/backfill");
        assert_eq!(backfill.scheduler_parameters, None);
        assert_eq!(energy.sched_type, "sched/energy");
        assert_eq!(energy.scheduler_parameters.as_deref(), Some("sched_interval=-1,defer"));
        assert_eq!(energy.plugin_dir.as_deref(), Some(dir));
        for cfg in [&backfill, &energy] {
            assert_eq!((cfg.nodes, cfg.gpus_per_node, cfg.with_accounting), (3, 4, true));
        }
        assert_eq!(backfill.cpus_per_node, energy.cpus_per_node);
        assert_eq!(backfill.mem_mb_per_node, energy.mem_mb_per_node);
    }

    #[test]
    fn names_parse_back() {
        for s in Scheduler::BOTH {
            assert_eq!(Scheduler::parse(s.short_name()), Some(s));
            assert_eq!(Scheduler::parse(s.sched_type()), Some(s));
        }
        assert_eq!(Scheduler::parse("builtin"), None);
    }
}
