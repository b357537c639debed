// Included (`include!`) by the build scripts of the packages with live-cluster tests.
//
// Sets the cfg `live_skip` when a live cluster cannot run where the tests are built (not root, or
// no slurmctld installed), or `SLURM_ENERGY_NO_LIVE=1` asks to leave the live tests out, and `CI`
// is not `true`: the live tests carry
// `#[cfg_attr(live_skip, ignore = "...")]`, so that the test runner reports them as ignored
// instead of passed. Under `CI=true` the cfg is never set: the tests run and fail there. At run
// time `slurm_testcluster::skip_live_test` checks again (a test binary built as root may be run
// by another user).

fn live_cluster_cannot_run() -> bool {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(1)).map(str::to_string));
    let root = uid.as_deref() == Some("0");
    let path = std::env::var_os("PATH").unwrap_or_default();
    // The install the harness uses (SLURM_ENERGY_SLURM_PREFIX), else the one on PATH.
    let slurmctld = match std::env::var_os("SLURM_ENERGY_SLURM_PREFIX").filter(|p| !p.is_empty()) {
        Some(prefix) => std::path::Path::new(&prefix).join("sbin/slurmctld").is_file(),
        None => std::env::split_paths(&path)
            .chain(["/usr/sbin", "/usr/local/sbin"].map(std::path::PathBuf::from))
            .any(|dir| dir.join("slurmctld").is_file()),
    };
    !(root && slurmctld)
}

fn emit_live_cfg() {
    println!("cargo::rustc-check-cfg=cfg(live_skip)");
    println!("cargo:rerun-if-env-changed=CI");
    println!("cargo:rerun-if-env-changed=PATH");
    println!("cargo:rerun-if-env-changed=SLURM_ENERGY_NO_LIVE");
    println!("cargo:rerun-if-env-changed=SLURM_ENERGY_SLURM_PREFIX");
    // Built again once the install appears (or changes), so that a build made before the
    // release was installed does not keep its tests ignored: watch slurmctld, or the nearest
    // directory above it that exists (cargo scans a watched directory for changes; a watched
    // path that is missing reruns the script at every build).
    let slurmctld = match std::env::var_os("SLURM_ENERGY_SLURM_PREFIX").filter(|p| !p.is_empty()) {
        Some(prefix) => std::path::Path::new(&prefix).join("sbin/slurmctld"),
        None => std::path::PathBuf::from("/usr/sbin/slurmctld"),
    };
    let watched = slurmctld.ancestors().find(|p| p.exists() && *p != std::path::Path::new("/")).unwrap_or(&slurmctld);
    println!("cargo:rerun-if-changed={}", watched.display());
    let left_out = std::env::var("SLURM_ENERGY_NO_LIVE").as_deref() == Ok("1");
    if std::env::var("CI").as_deref() != Ok("true") && (left_out || live_cluster_cannot_run()) {
        println!("cargo:rustc-cfg=live_skip");
    }
}
