//! The `slurm-energy` command-line tools: the trace simulator (the same planner the sched plugin
//! runs), its reports and plots, and the local demo cluster (`slurm-energy demo`).

pub mod acct_report;
pub mod demo;
pub mod package;
pub mod plots;
pub mod replay;
pub mod sim;
pub mod soak;
pub mod trace;
pub mod whatif;
