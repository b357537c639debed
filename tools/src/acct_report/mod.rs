//! `slurm-energy report`: energy, carbon, GPU-hours and decision statistics of a cluster's jobs
//! over a time window, from its accounting records (`sacct`), as a text table, JSON and a
//! self-contained HTML page. How each number is computed: docs/report.md.
//!
//! Modules: [`window`] (the time window), [`sacct`] (running and parsing sacct), [`record`]
//! (sched/energy's decision record), [`carbon`] (carbon from an intensity file), [`saving`]
//! (energy at the default clock), [`aggregate`] (the figures), [`text`], [`html`] (outputs; the
//! JSON is [`aggregate::Report`] serialised).

pub mod aggregate;
pub mod carbon;
pub mod html;
pub mod record;
pub mod sacct;
pub mod saving;
pub mod text;
pub mod window;

use std::path::PathBuf;

pub use aggregate::Report;

/// What `slurm-energy report` was asked for.
#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    pub start: Option<String>,
    pub end: Option<String>,
    /// Read this file of sacct output instead of running sacct.
    pub sacct_file: Option<PathBuf>,
    /// The sacct to run (default `$SLURM_ENERGY_SACCT`, else `sacct` on the PATH).
    pub sacct: Option<PathBuf>,
    /// Grid-intensity file for jobs whose record has no `carbon_g=`.
    pub carbon_file: Option<PathBuf>,
    /// Measured data whose curves estimate the default-clock energy (`None`: no estimate).
    pub data_dir: Option<PathBuf>,
    pub gpu_model: String,
}

/// Reads the records and computes the report.
pub fn build(opts: &ReportOptions) -> Result<Report, String> {
    let window = window::Window::new(opts.start.as_deref(), opts.end.as_deref())?;
    let (records, source) = match &opts.sacct_file {
        Some(path) => (sacct::read_file(path).map_err(|e| e.to_string())?, path.display().to_string()),
        None => {
            let exe = opts.sacct.clone().unwrap_or_else(sacct::default_sacct);
            let conf = std::env::var("SLURM_CONF").unwrap_or_else(|_| "the default slurm.conf".into());
            (sacct::run(&exe, &window).map_err(|e| e.to_string())?, format!("sacct ({conf})"))
        }
    };
    let carbon = opts.carbon_file.as_deref().map(carbon::load).transpose().map_err(|e| format!("--carbon: {e}"))?;
    let saving = match &opts.data_dir {
        Some(dir) if dir.join("zeus").is_dir() => Some(saving::SavingModel::load(dir, &opts.gpu_model)?),
        _ => None,
    };
    Ok(aggregate::build(
        &records,
        &aggregate::Inputs { window, source, carbon: carbon.as_deref(), saving: saving.as_ref() },
    ))
}

/// The JSON of a report (pretty-printed).
pub fn to_json(report: &Report) -> Result<String, String> {
    serde_json::to_string_pretty(report).map_err(|e| format!("JSON: {e}"))
}
