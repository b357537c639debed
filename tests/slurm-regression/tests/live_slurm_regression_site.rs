//! Slurm's own regression tests on the heterogeneous site cluster
//! (`slurm_testcluster::site_cluster()`: 6 nodes of 4 shapes, typed GPUs, `CR_Core_Memory`,
//! topology/tree, 4 partitions), the subset `slurm_regression::subset::SITE_SUBSET`: the tests
//! the three-node cluster could not run whole or left out for time. Once under sched/backfill,
//! once under sched/energy: every test that passes under backfill must pass under sched/energy.
//!
//! Not part of CI by default: it takes about 20 minutes on the 2-core machine (two schedulers,
//! 21 tests each, three clusters per scheduler). It is ignored unless `SLURM_REGRESSION_SITE=1`
//! is set when it is built:
//! `SLURM_REGRESSION_SITE=1 cargo test -p slurm-regression --test live_slurm_regression_site -- --nocapture`
//! (docs/slurm-regression.md). Same conventions otherwise as `live_slurm_regression`: without
//! root, Slurm, `expect` or the source tree it prints SKIPPED, and fails under `CI=true`;
//! `SLURM_REGRESSION_OUT` and `SLURM_REGRESSION_MARKDOWN` as there.

use slurm_regression::run::default_per_test_limit;
use slurm_regression::scheduler::Cluster;

mod common;

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[cfg_attr(
    all(not(live_skip), not(site_regression)),
    ignore = "about 20 min: set SLURM_REGRESSION_SITE=1 to run it (docs/slurm-regression.md)"
)]
#[test]
fn live_slurm_regression_site() {
    if common::skip("live_slurm_regression_site") {
        return;
    }
    common::compare(Cluster::Site, default_per_test_limit(Cluster::Site));
}
