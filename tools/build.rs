//! Marks the live-cluster tests ignored where a cluster cannot run (see live_cfg.rs).

include!("../tests/cluster/live_cfg.rs");

fn main() {
    emit_live_cfg();
}
