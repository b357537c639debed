//! The two schedulers compared and the clusters they run on: the three-node cluster (3 nodes x
//! 4 fake GPUs with accounting) or the heterogeneous site cluster
//! (`slurm_testcluster::site_cluster()`). On either, the two schedulers' clusters differ only in
//! `SchedulerType`, the `SchedulerParameters` sched/energy requires, and sched/energy's
//! `energy.toml`.

use std::path::{Path, PathBuf};

use slurm_testcluster::{ClusterConfig, site_cluster};

/// sched/energy's configuration for these runs: a scheduling cycle every second.
pub const ENERGY_TOML: &str = "\
# energy.toml for Slurm's regression tests: short cycles.
[sched]
interval_s = 1
";

/// sched/energy refuses to load without both: slurmctld's own scheduler off (`sched_interval=-1`)
/// and no scheduling at submit time (`defer`); the plugin starts every job.
pub const ENERGY_SCHEDULER_PARAMETERS: &str = "sched_interval=-1,defer";

/// The cluster a run starts (once per scheduler).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cluster {
    /// 3 homogeneous nodes `n1..n3`, 4 CPUs, 4096 MB and 4 untyped fake GPUs each, `CR_Core`,
    /// one partition, accounting through slurmdbd. The cluster of [`crate::subset::SUBSET`].
    ThreeNode,
    /// `slurm_testcluster::site_cluster()`: 6 nodes of 4 shapes (CPU-only, a100, v100,
    /// a100+a40), `CR_Core_Memory`, `ThreadsPerCore=2` on `n1`, weights, topology/tree,
    /// partitions `cpu`, `gpu` (default), `a100`, `excl`, `physics`, a license; with accounting
    /// turned off, the one change (no test of [`crate::subset::SITE_SUBSET`] calls `sacct` or
    /// `sacctmgr`, and without MariaDB and slurmdbd the cluster starts in a second). The
    /// cluster of [`crate::subset::SITE_SUBSET`]; a test needing a property it lacks runs on
    /// one of the two variants below ([`Cluster::for_test`]).
    Site,
    /// The site cluster with `a100` (`n3`, `n4`: 4 CPUs and 4 a100 each) as the default
    /// partition instead of `gpu`. For test39.5, test39.7 and test39.23, which take the CPU (and
    /// socket) count of the first node a GPU job lands on (`n5` in `gpu`: 8 CPUs, 2 GPUs) and
    /// expect the default partition's other GPU nodes to be like it; in `gpu` they are not.
    SiteA100Default,
    /// The site cluster with every node laid out alike (`CPUs=4`, one thread per core; memory,
    /// GPUs, weights, features, partitions, topology and license unchanged) and a default
    /// partition `all` of the 6 nodes. For test3.11, whose part 9 needs at least 5 nodes in the
    /// default partition and the same sockets and cores on every node, else it is skipped.
    SiteUniformCpus,
}

impl Cluster {
    pub const ALL: [Cluster; 4] = [Cluster::ThreeNode, Cluster::Site, Cluster::SiteA100Default, Cluster::SiteUniformCpus];

    /// A short name, for the command line and the table.
    pub fn short_name(self) -> &'static str {
        match self {
            Cluster::ThreeNode => "three-node",
            Cluster::Site => "site",
            Cluster::SiteA100Default => "site-a100-default",
            Cluster::SiteUniformCpus => "site-uniform-cpus",
        }
    }

    pub fn parse(name: &str) -> Option<Cluster> {
        Cluster::ALL.into_iter().find(|c| c.short_name() == name)
    }

    /// What it is, in a few words, for the "last run" section.
    pub fn describe(self) -> &'static str {
        match self {
            Cluster::ThreeNode => "3 nodes x 4 fake GPUs with accounting",
            Cluster::Site => {
                "the site cluster (6 nodes of 4 shapes, a100/v100/a40 fake GPUs, CR_Core_Memory, \
                 topology/tree, 5 partitions, no accounting)"
            }
            Cluster::SiteA100Default => "the site cluster with `a100` as the default partition",
            Cluster::SiteUniformCpus => {
                "the site cluster with 4 CPUs on every node and a default partition of all 6 nodes"
            }
        }
    }

    /// The tests run on it by default.
    pub fn subset(self) -> &'static [crate::subset::Entry] {
        match self {
            Cluster::ThreeNode => crate::subset::SUBSET,
            Cluster::Site | Cluster::SiteA100Default | Cluster::SiteUniformCpus => crate::subset::SITE_SUBSET,
        }
    }

    /// The cluster `test` runs on when this one is asked for: the site cluster, except for the
    /// tests that need a variant of it (see the variants).
    pub fn for_test(self, test: &str) -> Cluster {
        match (self, test) {
            (Cluster::Site, "test39.5" | "test39.7" | "test39.23") => Cluster::SiteA100Default,
            (Cluster::Site, "test3.11") => Cluster::SiteUniformCpus,
            _ => self,
        }
    }

    /// The cluster under sched/backfill (Slurm's default `SchedulerParameters`).
    fn base_config(self) -> ClusterConfig {
        match self {
            Cluster::ThreeNode => ClusterConfig { nodes: 3, gpus_per_node: 4, with_accounting: true, ..ClusterConfig::default() },
            Cluster::Site => ClusterConfig { with_accounting: false, ..site_cluster() },
            Cluster::SiteA100Default => {
                let mut cfg = Cluster::Site.base_config();
                for p in &mut cfg.partitions {
                    *p = p.replace(" Default=YES", "");
                    if p.starts_with("PartitionName=a100 ") {
                        p.push_str(" Default=YES");
                    }
                }
                cfg
            }
            Cluster::SiteUniformCpus => {
                let mut cfg = Cluster::Site.base_config();
                for shape in &mut cfg.node_shapes {
                    shape.cpus = 4;
                    shape.threads_per_core = 1;
                }
                for p in &mut cfg.partitions {
                    *p = p.replace(" Default=YES", "");
                }
                cfg.partitions.insert(0, format!("PartitionName=all Nodes=n[1-{}] Default=YES MaxTime=INFINITE State=UP", cfg.nodes));
                cfg
            }
        }
    }
}

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

    /// The three-node cluster for this scheduler. `energy_plugin_dir` holds `sched_energy.so`
    /// (see [`energy_plugin_dir`]); only sched/energy uses it.
    pub fn cluster_config(self, energy_plugin_dir: &Path) -> ClusterConfig {
        self.config_on(Cluster::ThreeNode, energy_plugin_dir)
    }

    /// `cluster` for this scheduler: as it is under sched/backfill; under sched/energy with
    /// `SchedulerType`, `SchedulerParameters`, the plugin directory and `energy.toml` (added to
    /// the cluster's own files, e.g. the site's `topology.conf`) changed, nothing else.
    pub fn config_on(self, cluster: Cluster, energy_plugin_dir: &Path) -> ClusterConfig {
        let base = cluster.base_config();
        match self {
            Scheduler::Backfill => base,
            Scheduler::Energy => {
                let mut extra_files = base.extra_files.clone();
                extra_files.push(("energy.toml".into(), ENERGY_TOML.into()));
                ClusterConfig {
                    plugin_dir: Some(energy_plugin_dir.to_path_buf()),
                    sched_type: self.sched_type().into(),
                    scheduler_parameters: Some(ENERGY_SCHEDULER_PARAMETERS.into()),
                    extra_files,
                    ..base
                }
            }
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
    fn on_the_site_cluster_too_only_the_scheduler_differs() {
        let dir = Path::new("/opt/plugins");
        let backfill = Scheduler::Backfill.config_on(Cluster::Site, dir);
        let energy = Scheduler::Energy.config_on(Cluster::Site, dir);
        let site = site_cluster();
        assert_eq!(backfill.sched_type, "sched/backfill");
        assert_eq!(backfill.scheduler_parameters, site.scheduler_parameters);
        assert_eq!(backfill.partitions.len(), 5, "site_cluster()'s partitions changed: check the variants and docs");
        assert_eq!(energy.sched_type, "sched/energy");
        assert_eq!(energy.scheduler_parameters.as_deref(), Some("sched_interval=-1,defer"));
        assert_eq!(energy.plugin_dir.as_deref(), Some(dir));
        for cfg in [&backfill, &energy] {
            assert_eq!(cfg.nodes, 6);
            assert_eq!(cfg.node_shapes.len(), site.node_shapes.len());
            assert_eq!(cfg.partitions, site.partitions);
            assert_eq!(cfg.select_type_parameters, site.select_type_parameters);
            assert_eq!(cfg.extra_slurm_conf, site.extra_slurm_conf);
            assert!(!cfg.with_accounting);
            assert!(cfg.extra_files.iter().any(|(name, _)| name == "topology.conf"), "the site's topology.conf is kept");
        }
        assert!(energy.extra_files.iter().any(|(name, text)| name == "energy.toml" && text == ENERGY_TOML));
        assert!(!backfill.extra_files.iter().any(|(name, _)| name == "energy.toml"));
    }

    #[test]
    fn the_site_variants_change_only_what_their_test_needs() {
        let site = Cluster::Site.base_config();
        assert!(!site.with_accounting);
        let default_partitions = |cfg: &ClusterConfig| -> Vec<String> {
            cfg.partitions.iter().filter(|p| p.contains("Default=YES")).map(|p| p.split_whitespace().next().unwrap().to_string()).collect()
        };
        assert_eq!(default_partitions(&site), ["PartitionName=gpu"]);

        let a100 = Cluster::SiteA100Default.base_config();
        assert_eq!(default_partitions(&a100), ["PartitionName=a100"]);
        assert_eq!(a100.partitions.len(), site.partitions.len());
        assert!(a100.partitions.iter().any(|p| p.starts_with("PartitionName=a100 ") && p.contains("PriorityTier=10")));
        assert_eq!(format!("{:?}", a100.node_shapes), format!("{:?}", site.node_shapes));

        let uniform = Cluster::SiteUniformCpus.base_config();
        assert_eq!(default_partitions(&uniform), ["PartitionName=all"]);
        assert!(uniform.partitions.iter().any(|p| p.starts_with("PartitionName=all Nodes=n[1-6] ")));
        assert_eq!(uniform.partitions.len(), site.partitions.len() + 1);
        assert!(uniform.node_shapes.iter().all(|n| n.cpus == 4 && n.threads_per_core == 1));
        for (u, s) in uniform.node_shapes.iter().zip(&site.node_shapes) {
            assert_eq!((u.mem_mb, &u.gpus, u.weight, &u.features), (s.mem_mb, &s.gpus, s.weight, &s.features));
        }
        for cfg in [&a100, &uniform] {
            assert_eq!(cfg.select_type_parameters, site.select_type_parameters);
            assert_eq!(cfg.extra_slurm_conf, site.extra_slurm_conf);
            assert_eq!(cfg.extra_files, site.extra_files);
        }

        assert_eq!(Cluster::Site.for_test("test39.5"), Cluster::SiteA100Default);
        assert_eq!(Cluster::Site.for_test("test39.7"), Cluster::SiteA100Default);
        assert_eq!(Cluster::Site.for_test("test3.11"), Cluster::SiteUniformCpus);
        assert_eq!(Cluster::Site.for_test("test2.13"), Cluster::Site);
        assert_eq!(Cluster::ThreeNode.for_test("test3.11"), Cluster::ThreeNode);
    }

    #[test]
    fn cluster_names_parse_back() {
        for c in Cluster::ALL {
            assert_eq!(Cluster::parse(c.short_name()), Some(c));
        }
        assert_eq!(Cluster::parse("five-node"), None);
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
