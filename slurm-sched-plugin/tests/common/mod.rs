//! What the live tests of sched/energy share.

use std::path::PathBuf;

/// A plugin dir holding the freshly built `libsched_energy.so` as `sched_energy.so`.
pub fn plugin_dir() -> tempfile::TempDir {
    let built = slurm_testcluster::require_built("libsched_energy.so");
    let dir = tempfile::Builder::new().prefix("sched-energy-").tempdir().expect("plugin temp dir");
    std::fs::copy(built, dir.path().join("sched_energy.so")).expect("copy the plugin");
    dir
}

/// `libspank_energy.so` as cargo built it (`cargo test -p spank-energy` or a workspace build), if
/// it is there: the tests of hints skip without it.
#[allow(dead_code)] // not every test binary of this crate uses it
pub fn spank_plugin() -> Option<PathBuf> {
    slurm_testcluster::built_artifact("libspank_energy.so")
}

/// The measured data (`$SLURM_ENERGY_DATA`, else `shared/data` next to the checkout), if there.
#[allow(dead_code)]
pub fn data_dir() -> Option<PathBuf> {
    let dir = model::data::default_data_dir();
    (dir.join("zeus").is_dir() && dir.join("gavel").is_dir()).then_some(dir)
}
