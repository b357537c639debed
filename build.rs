//! Bindings to Slurm's internal headers, from a configured source tree of the installed release.
//!
//! `SLURM_SRC_DIR` names the tree (`tools/slurm-env.sh` prepares it and prints the variable).
//! We run bindgen over `src/shim/shim.h` with allowlists, compile the shim with `cc`, and derive
//! cfg flags from `SLURM_VERSION_NUMBER`, so version differences are handled in Rust with
//! `#[cfg(slurm_ge_23_02)]`-style flags and never by editing generated code.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

// VERSION_GATES and emit_slurm_cfg(), shared with the plugin packages' build scripts.
include!("src/slurm_cfg.rs");

/// The releases (major, minor) the bundle is written and tested for. The shim and the Rust code
/// choose between their interfaces with `slurm_ge_24_11`/`slurm_ge_25_11`/`slurm_ge_26_05`; a
/// release in between would get one of those forms untested, so the build refuses it.
const SUPPORTED: &[(u32, u32)] = &[(22, 5), (24, 11), (25, 11), (26, 5)];

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_SRC_DIR");
    println!("cargo:rerun-if-changed=src/shim/shim.h");
    println!("cargo:rerun-if-changed=src/shim/shim.c");
    println!("cargo:rerun-if-changed=src/shim/stepd.c");
    println!("cargo:rerun-if-changed=src/slurm_cfg.rs");

    let src = match env::var_os("SLURM_SRC_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => fail(
            "SLURM_SRC_DIR is not set. The Slurm plugins are built against the internal headers of a \
             configured Slurm source tree of exactly the installed release. Run (as root) \
             `tools/slurm-env.sh`, then `export SLURM_SRC_DIR=...` with the path it prints.",
        ),
    };
    let version_h = src.join("slurm").join("slurm_version.h");
    let config_h = src.join("config.h");
    for needed in [&version_h, &config_h, &src.join("src/slurmctld/slurmctld.h")] {
        if !needed.is_file() {
            fail(&format!(
                "SLURM_SRC_DIR={} is not a configured Slurm source tree ({} is missing). \
                 Run `tools/slurm-env.sh` and export the SLURM_SRC_DIR it prints.",
                src.display(),
                needed.display()
            ));
        }
    }
    println!("cargo:rerun-if-changed={}", version_h.display());
    println!("cargo:rerun-if-changed={}", config_h.display());

    let version = slurm_version_number(&version_h).unwrap_or_else(|| {
        fail(&format!("no SLURM_VERSION_NUMBER in {}", version_h.display()))
    });
    let (major, minor, micro) = (version >> 16, (version >> 8) & 0xff, version & 0xff);
    if !SUPPORTED.contains(&(major, minor)) {
        let list: Vec<String> = SUPPORTED.iter().map(|(a, b)| format!("{a}.{b:02}")).collect();
        fail(&format!(
            "SLURM_SRC_DIR={} is Slurm {major}.{minor:02}.{micro}; the bundle supports the releases {} \
             (tools/slurm-release.sh builds them)",
            src.display(),
            list.join(", ")
        ));
    }
    emit_slurm_cfg(version);
    println!("cargo:rustc-env=SLURM_ENERGY_SLURM_VERSION={major}.{minor:02}.{micro}");
    // Dependents (the plugin crates) read these through `links`: DEP_SLURM_ENERGY_SHIM_*.
    println!("cargo:version_number={version}");
    println!("cargo:src_dir={}", src.display());

    let includes = [src.clone(), src.join("slurm")];
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let shim_dir = manifest.join("src").join("shim");

    let mut build = cc::Build::new();
    // -Wall, and the mismatches a release's changed signature produces as errors: C accepts an
    // integer where 25.11 takes a pointer with a warning only, which crashed slurmctld at run
    // time (job_complete() on 25.11 and 26.05) while `-w` hid it.
    build
        .file(shim_dir.join("shim.c"))
        .file(shim_dir.join("stepd.c"))
        .include(&shim_dir)
        .warnings(true)
        .extra_warnings(false)
        .flag_if_supported("-fvisibility=hidden")
        .flag("-Werror=int-conversion")
        .flag("-Werror=incompatible-pointer-types")
        .flag("-Werror=implicit-function-declaration")
        .flag("-Werror=int-to-pointer-cast")
        .flag("-Werror=pointer-to-int-cast");
    for inc in &includes {
        build.include(inc);
    }
    build.compile("slurm_energy_shim");

    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut builder = bindgen::Builder::default()
        .header(shim_dir.join("shim.h").display().to_string())
        .clang_arg(format!("-I{}", shim_dir.display()))
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .use_core()
        .derive_default(false)
        .derive_debug(false)
        .layout_tests(false)
        .generate_comments(false)
        .prepend_enum_name(false)
        .default_enum_style(bindgen::EnumVariation::Consts)
        // The API table and the shim's helpers pull in every type they mention.
        .allowlist_type("energy_slurm_api_t")
        .allowlist_function("energy_.*")
        .allowlist_type("job_record_t|job_details_t|node_record_t|part_record_t|job_queue_rec_t")
        .allowlist_type("gres_state_t|gres_job_state_t|gres_node_state_t|job_resources_t")
        .allowlist_type("slurmctld_lock_t|lock_level_t|slurm_conf_t|log_level_t|job_node_select_t|energy_list_t|energy_list_itr_t|energy_job_details_t")
        // The node side: the GPU plugin interface and acct_gather_energy's records.
        .allowlist_type("energy_node_api_t|node_config_load_t|gpu_status_t|acct_gather_energy_t|acct_energy_type|acct_gather_data_t")
        .allowlist_item("ENERGY_DATA_.*")
        .allowlist_type("energy_route_status")
        .allowlist_var("SLURM_VERSION_NUMBER|NO_VAL|NO_VAL16|NO_VAL64|INFINITE|INFINITE16|INFINITE64|SHARED_FORCE|PREEMPT_MODE_GANG")
        .allowlist_item("SLURM_SUCCESS|SLURM_ERROR|ESLURM_.*|LOG_LEVEL_.*|PROLOG_FLAG_ALLOC|PROLOG_FLAG_CONTAIN")
        // Opaque where we never look inside: keeps the generated code small and version-proof.
        .opaque_type("xlist|listIterator|bitstr_t|slurm_mutex_t|pthread_.*|s_p_options_t|s_p_hashtbl_t|s_p_hashtbl|slurmctld_config|slurmctld_config_t")
        .blocklist_item("plugin_type|plugin_name|plugin_version");
    for inc in &includes {
        builder = builder.clang_arg(format!("-I{}", inc.display()));
    }
    let bindings = builder.generate().unwrap_or_else(|e| {
        fail(&format!(
            "bindgen could not parse the Slurm headers under {} ({e}). It needs libclang \
             (Debian: `apt-get install libclang-dev`, which tools/slurm-env.sh installs).",
            src.display()
        ))
    });
    bindings.write_to_file(out.join("slurm_sys.rs")).unwrap_or_else(|e| fail(&format!("cannot write bindings: {e}")));
}

/// `#define SLURM_VERSION_NUMBER 0x160508` -> 0x160508.
fn slurm_version_number(version_h: &Path) -> Option<u32> {
    let text = fs::read_to_string(version_h).ok()?;
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("#define"), Some("SLURM_VERSION_NUMBER"), Some(value)) => {
                let value = value.trim_start_matches("0x").trim_start_matches("0X");
                u32::from_str_radix(value, 16).ok()
            }
            _ => None,
        }
    })
}

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    panic!("{msg}");
}
