//! Every scheduling decision of the energy-aware Slurm bundle.
//!
//! Pure Rust: no FFI, no daemon, no I/O beyond reading its own parameter files. The sched
//! plugin and the trace simulator both call [`planner::plan`] with a [`types::Snapshot`] of what
//! slurmctld knows, and apply the [`decision::Decision`]s it returns.

pub mod data;
pub mod types;
