//! Every scheduling decision of the energy-aware Slurm bundle.
//!
//! Pure Rust: no FFI, no daemon, no I/O beyond reading its own parameter files. The sched
//! plugin and the trace simulator both call [`planner::plan`] (or [`planner::plan_snapshot`])
//! with what slurmctld knows, and apply the [`decision::Decision`]s it returns.

pub mod carbon;
pub mod carbon_source;
pub mod config;
pub mod energy_split;
pub mod data;
pub mod decision;
pub mod duration;
pub mod elastic;
pub mod energy_toml;
pub mod eligibility;
mod fit_index;
pub mod gpu_use;
pub mod gpu_use_learning;
pub mod history;
pub mod interference;
pub mod lost_launch;
pub mod lost_prolog;
pub mod min_tree;
pub mod perf_power;
pub mod planner;
pub mod power_cap;
pub mod power_directive;
pub mod predictor;
pub mod ranking;
pub mod sensitivity;
pub mod shard_placement;
pub mod state;
pub mod time_min;
pub mod tag;
pub mod types;
pub mod whatif;
pub mod workloads;
