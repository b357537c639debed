// Included (`include!`) by build scripts: the root package's (which reads the version from the
// configured tree) and those of the packages that depend on it directly and choose code by
// release (which read it from the root package's `links` metadata,
// DEP_SLURM_ENERGY_SHIM_VERSION_NUMBER).
//
// `slurm_ge_<major>_<minor>` is set when the tree is at least that release.

/// Releases the code distinguishes. Add one here before using it in a `cfg`.
const VERSION_GATES: &[(u32, u32)] = &[(22, 5), (23, 2), (23, 11), (24, 5), (24, 11), (25, 5), (25, 11), (26, 5)];

/// Declares every gate (check-cfg) and sets those `version` (SLURM_VERSION_NUMBER) reaches.
fn emit_slurm_cfg(version: u32) {
    let (major, minor) = (version >> 16, (version >> 8) & 0xff);
    for &(gate_major, gate_minor) in VERSION_GATES {
        println!("cargo::rustc-check-cfg=cfg(slurm_ge_{gate_major}_{gate_minor:02})");
        if (major, minor) >= (gate_major, gate_minor) {
            println!("cargo:rustc-cfg=slurm_ge_{gate_major}_{gate_minor:02}");
        }
    }
}

/// For a package that depends on the root package: the gates of the release it was built for.
#[allow(dead_code)]
fn emit_slurm_cfg_from_dep() {
    println!("cargo:rerun-if-env-changed=DEP_SLURM_ENERGY_SHIM_VERSION_NUMBER");
    let version = std::env::var("DEP_SLURM_ENERGY_SHIM_VERSION_NUMBER")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .expect("DEP_SLURM_ENERGY_SHIM_VERSION_NUMBER (from slurm-bindings' build script) is set for direct dependents");
    emit_slurm_cfg(version);
}
