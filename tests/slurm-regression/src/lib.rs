//! Slurm's own regression tests, run against our scheduler plugin.
//!
//! Slurm's source tree (the one `tools/slurm-env.sh` fetches, `$SLURM_SRC_DIR`) carries its
//! expect testsuite (`testsuite/expect/test*`). This crate runs chosen subsets of it (see
//! [`subset`]: one on a homogeneous three-node cluster, one on the heterogeneous site cluster)
//! against a real local cluster started by `slurm-testcluster`, once with
//! `SchedulerType=sched/backfill` and once with `SchedulerType=sched/energy`, the cluster being
//! otherwise the same, and compares the two: every test that passes under backfill should pass
//! under sched/energy too.
//!
//! The scripts are run where they are, from the cached source tree; nothing of them is copied
//! into the project. What a run needs besides (a `globals.local`, a `testsuite.conf`, the tests'
//! scratch directories) lives in a temporary directory.
//!
//! Two ways to use it: the tests `live_slurm_regression` and `live_slurm_regression_site`
//! (tests/; the second only with `SLURM_REGRESSION_SITE=1`), and the binary `slurm-regression`,
//! which also writes the markdown tables of docs/slurm-regression.md.

pub mod outcome;
pub mod report;
pub mod run;
pub mod scheduler;
pub mod subset;
pub mod testsuite;
