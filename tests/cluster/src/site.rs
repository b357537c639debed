//! A heterogeneous, site-like cluster for live tests: CPU-only nodes beside GPU nodes of two
//! types, one node with two GPU types, different core counts and memory (`CR_Core_Memory`,
//! `ThreadsPerCore=2` on one node), node weights, two leaf switches in `topology.conf`,
//! partitions with `PriorityTier` and `OverSubscribe=EXCLUSIVE`, and a license.
//!
//! | node | CPUs (threads) | memory | GPUs            | Weight | switch |
//! |------|----------------|--------|-----------------|--------|--------|
//! | n1   | 8 (2 per core) | 8 GB   | -               | 1      | s1     |
//! | n2   | 4              | 4 GB   | -               | 2      | s1     |
//! | n3   | 4              | 4 GB   | a100:4          | 10     | s1     |
//! | n4   | 4              | 4 GB   | a100:4          | 5      | s2     |
//! | n5   | 8              | 8 GB   | v100:2          | 1      | s2     |
//! | n6   | 4              | 4 GB   | a100:2, a40:2   | 20     | s2     |
//!
//! Partitions: `cpu` (n1-n2), `gpu` (n3-n6, the default), `a100` (n3-n4, `PriorityTier=10`),
//! `excl` (n5-n6, `OverSubscribe=EXCLUSIVE`), `physics` (n1-n2, `AllowAccounts=physics`). License
//! `fluent:2`. `DefMemPerCPU=512`. Accounting through slurmdbd (accounts and QOS with
//! `sacctmgr`; the account `physics` is not created here).

use crate::config::{ClusterConfig, NodeShape};

/// The partitions of [`site_cluster`], as written into slurm.conf.
pub const SITE_PARTITIONS: [&str; 5] = [
    "PartitionName=cpu Nodes=n[1-2] MaxTime=INFINITE State=UP",
    "PartitionName=gpu Nodes=n[3-6] Default=YES MaxTime=INFINITE State=UP",
    "PartitionName=a100 Nodes=n[3-4] PriorityTier=10 MaxTime=INFINITE State=UP",
    "PartitionName=excl Nodes=n[5-6] OverSubscribe=EXCLUSIVE MaxTime=INFINITE State=UP",
    "PartitionName=physics Nodes=n[1-2] AllowAccounts=physics MaxTime=INFINITE State=UP",
];

/// The site cluster under stock `sched/backfill`, with accounting; tests set the scheduler
/// (and plugin dir) they compare.
pub fn site_cluster() -> ClusterConfig {
    let node_shapes = vec![
        NodeShape::cpu(8, 8192).threads_per_core(2).features("cpu,bigmem"),
        NodeShape::cpu(4, 4096).weight(2).features("cpu"),
        NodeShape::cpu(4, 4096).with_gpus("a100", 4).weight(10).features("gpu,a100"),
        NodeShape::cpu(4, 4096).with_gpus("a100", 4).weight(5).features("gpu,a100"),
        NodeShape::cpu(8, 8192).with_gpus("v100", 2).weight(1).features("gpu,v100"),
        NodeShape::cpu(4, 4096).with_gpus("a100", 2).with_gpus("a40", 2).weight(20).features("gpu,mixed"),
    ];
    ClusterConfig {
        nodes: node_shapes.len() as u32,
        node_shapes,
        select_type_parameters: Some("CR_Core_Memory".into()),
        partitions: SITE_PARTITIONS.iter().map(|p| p.to_string()).collect(),
        extra_slurm_conf: vec!["TopologyPlugin=topology/tree".into(), "Licenses=fluent:2".into(), "DefMemPerCPU=512".into()],
        extra_files: vec![("topology.conf".into(), "SwitchName=s1 Nodes=n[1-3]\nSwitchName=s2 Nodes=n[4-6]\nSwitchName=top Switches=s[1-2]\n".into())],
        with_accounting: true,
        ..ClusterConfig::default()
    }
}
