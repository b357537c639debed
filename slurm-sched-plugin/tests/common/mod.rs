//! What the live tests of sched/energy share.

use std::path::{Path, PathBuf};

/// A plugin dir holding the freshly built `libsched_energy.so` as `sched_energy.so`.
pub fn plugin_dir() -> tempfile::TempDir {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> -> target/<profile>
    let profile_dir = exe.parent().and_then(Path::parent).expect("target dir");
    let candidates = [profile_dir.join("libsched_energy.so"), profile_dir.join("deps").join("libsched_energy.so")];
    let built: &PathBuf = candidates
        .iter()
        .filter(|p| p.is_file())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        .unwrap_or_else(|| panic!("libsched_energy.so not found in {candidates:?}: build the crate first"));
    let dir = tempfile::Builder::new().prefix("sched-energy-").tempdir().expect("plugin temp dir");
    std::fs::copy(built, dir.path().join("sched_energy.so")).expect("copy the plugin");
    dir
}
