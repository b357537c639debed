//! Finds `SLURM_VERSION_NUMBER` in `slurm/slurm_version.h` (the configured source tree named by
//! `SLURM_SRC_DIR`, else the installed `/usr/include/slurm/slurm_version.h`) so that the plugin's
//! `plugin_version` matches the Slurm it is built for (SPANK compares major.minor).

use std::path::PathBuf;

include!("../tests/cluster/live_cfg.rs");

fn main() {
    emit_live_cfg();
    println!("cargo:rerun-if-env-changed=SLURM_SRC_DIR");
    println!("cargo:rerun-if-env-changed=SLURM_VERSION_H");
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os("SLURM_VERSION_H") {
        candidates.push(PathBuf::from(p));
    }
    if let Some(dir) = std::env::var_os("SLURM_SRC_DIR") {
        candidates.push(PathBuf::from(dir).join("slurm/slurm_version.h"));
    }
    candidates.push(PathBuf::from("/usr/include/slurm/slurm_version.h"));
    for path in &candidates {
        let Ok(text) = std::fs::read_to_string(path) else { continue };
        println!("cargo:rerun-if-changed={}", path.display());
        let number = text.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("#define") && words.next() == Some("SLURM_VERSION_NUMBER"))
                .then(|| words.next())
                .flatten()
                .and_then(|v| u32::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        });
        match number {
            Some(n) => {
                println!("cargo:rustc-env=SPANK_ENERGY_SLURM_VERSION_NUMBER={n}");
                return;
            }
            None => panic!("{}: no `#define SLURM_VERSION_NUMBER 0x...` line", path.display()),
        }
    }
    panic!(
        "spank-energy: slurm/slurm_version.h not found (looked at {:?}). Install the Slurm \
         headers (libslurm-dev) or run `bash tools/slurm-env.sh` and export SLURM_SRC_DIR.",
        candidates
    );
}
