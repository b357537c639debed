//! The `slurm-energy` command-line tools: the trace simulator (the same planner the sched plugin
//! runs), its reports and plots.

pub mod plots;
pub mod report;
pub mod sim;
pub mod trace;
