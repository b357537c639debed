//! Sets the `slurm_ge_*` cfgs of the Slurm release the plugin is built for (the GPU interface
//! differs: src/slurm_cfg.rs at the workspace root).

include!("../../src/slurm_cfg.rs");

fn main() {
    emit_slurm_cfg_from_dep();
}
