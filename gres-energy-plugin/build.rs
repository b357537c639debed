//! Marks the live-cluster tests ignored where a cluster cannot run (see live_cfg.rs), and sets
//! the `slurm_ge_*` cfgs of the Slurm release the plugins are built for (see src/slurm_cfg.rs).

include!("../tests/cluster/live_cfg.rs");
include!("../src/slurm_cfg.rs");

fn main() {
    emit_live_cfg();
    emit_slurm_cfg_from_dep();
}
