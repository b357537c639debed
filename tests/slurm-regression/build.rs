//! Marks the live-cluster tests ignored where a cluster cannot run (see live_cfg.rs), and the
//! site-cluster regression run ignored unless `SLURM_REGRESSION_SITE=1` asks for it (it is too
//! long for CI; docs/slurm-regression.md).

include!("../cluster/live_cfg.rs");

fn main() {
    emit_live_cfg();
    println!("cargo::rustc-check-cfg=cfg(site_regression)");
    println!("cargo:rerun-if-env-changed=SLURM_REGRESSION_SITE");
    if std::env::var("SLURM_REGRESSION_SITE").as_deref() == Ok("1") {
        println!("cargo:rustc-cfg=site_regression");
    }
}
