//! Loaders for the measured reference data (`../shared/data` or a site's own files).
//!
//! Raw parsing and plain statistics only: these modules turn the files described in
//! `shared/data/README.md` into typed tables, and never fit, extrapolate or model anything.
//! Every error names the file and, when it comes from one line, the 1-based line number, so a
//! site that brings its own traces can fix them without reading this code.

use std::fmt;
use std::path::{Path, PathBuf};

mod csv;

pub mod carbon;
pub mod gavel;
pub mod stats;
pub mod synergy;
pub mod v100_logs;
pub mod zeus;

pub use carbon::{CarbonTrace, load_carbon};
pub use gavel::{GavelThroughputs, PairStats, combined_pair_stats, load_gavel};
pub use synergy::{SynergyTable, load_synergy};
pub use v100_logs::{SmiSample, SmiSummary, busy_summary, load_smi_log};
pub use zeus::{ZeusPoint, ZeusRow, ZeusSweep, load_zeus, median_optimal_saving, zeus_sweeps};

/// Environment variable that points at another data directory (a site's own traces).
pub const DATA_DIR_ENV: &str = "SLURM_ENERGY_DATA";

/// Why a data file could not be loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct DataError {
    pub path: PathBuf,
    /// 1-based line number, when the problem belongs to one line.
    pub line: Option<usize>,
    pub reason: String,
}

impl DataError {
    /// A problem on one line of `path`.
    pub fn at(path: &Path, line: usize, reason: impl Into<String>) -> Self {
        Self {
            path: path.to_path_buf(),
            line: Some(line),
            reason: reason.into(),
        }
    }

    /// A problem with the file as a whole (unreadable, empty, ...).
    pub fn file(path: &Path, reason: impl Into<String>) -> Self {
        Self {
            path: path.to_path_buf(),
            line: None,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.path.display(), line, self.reason),
            None => write!(f, "{}: {}", self.path.display(), self.reason),
        }
    }
}

impl std::error::Error for DataError {}

/// The data directory: `$SLURM_ENERGY_DATA` if set, else `shared/data` next to the checkout.
pub fn default_data_dir() -> PathBuf {
    match std::env::var_os(DATA_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")),
    }
}
