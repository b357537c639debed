//! slurm-energy-openadr: drives sched/energy's cluster power cap file from an OpenADR 3
//! demand-response program, through LF Energy OpenLEADR's VEN client. A separate program: it
//! never runs inside slurmctld, which only re-reads the file it writes (docs/openadr.md).

pub mod cap_file;
pub mod config;
pub mod translate;
pub mod ven;
