//! Reads `SLURM_VERSION_NUMBER` from `slurm/slurm_version.h` (the configured tree named by
//! `SLURM_SRC_DIR`, else `/usr/include`) for the plugin's `plugin_version`.

use std::path::PathBuf;

fn version_number(text: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["#define", "SLURM_VERSION_NUMBER", value, ..] => {
                u32::from_str_radix(value.trim_start_matches("0x"), 16).ok()
            }
            _ => None,
        }
    })
}

include!("../tests/cluster/live_cfg.rs");

fn main() {
    emit_live_cfg();
    println!("cargo:rerun-if-env-changed=SLURM_SRC_DIR");
    let mut headers = Vec::new();
    if let Some(dir) = std::env::var_os("SLURM_SRC_DIR") {
        headers.push(PathBuf::from(dir).join("slurm/slurm_version.h"));
    }
    headers.push(PathBuf::from("/usr/include/slurm/slurm_version.h"));
    for header in &headers {
        let Ok(text) = std::fs::read_to_string(header) else {
            continue;
        };
        println!("cargo:rerun-if-changed={}", header.display());
        let Some(number) = version_number(&text) else {
            panic!(
                "{}: no `#define SLURM_VERSION_NUMBER 0x...` line",
                header.display()
            )
        };
        println!("cargo:rustc-env=CLI_FILTER_ENERGY_SLURM_VERSION_NUMBER={number}");
        return;
    }
    panic!(
        "cli-filter-energy: slurm/slurm_version.h not found (looked at {headers:?}); install libslurm-dev or export SLURM_SRC_DIR"
    );
}
