//! Slurm's own regression tests (the subset in `slurm_regression::subset::SUBSET`) on a local
//! cluster (3 nodes x 4 fake GPUs, accounting), once under sched/backfill and once under
//! sched/energy: every test that passes under backfill must pass under sched/energy, and backfill
//! must pass most of the subset (else the comparison says nothing).
//!
//! Part of `cargo test --workspace` (so CI runs it): about 9 minutes on the 2-core machine (two
//! clusters, 40 tests each). Alone:
//! `cargo test -p slurm-regression --test live_slurm_regression -- --nocapture`
//! (docs/slurm-regression.md).
//!
//! Needs root, Slurm, `expect` and the configured source tree (`$SLURM_SRC_DIR`), all of which
//! tools/slurm-env.sh provides. Without them it prints SKIPPED and returns, except when
//! `CI=true`, where it fails. Full outputs go to `$SLURM_REGRESSION_OUT` if set (kept), else to
//! a temporary directory. With `SLURM_REGRESSION_MARKDOWN=<file>` it also writes the "last run"
//! section of docs/slurm-regression.md there.

use slurm_regression::run::default_per_test_limit;
use slurm_regression::scheduler::Cluster;

mod common;

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn live_slurm_regression() {
    if common::skip("live_slurm_regression") {
        return;
    }
    common::compare(Cluster::ThreeNode, default_per_test_limit(Cluster::ThreeNode));
}
