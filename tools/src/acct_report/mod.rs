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

use std::path::{Path, PathBuf};

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
    /// energy.toml whose `[carbon] source` is the intensity file when `carbon_file` is not
    /// given (default: `energy.toml` beside the slurm.conf `SLURM_CONF` names, if present).
    pub energy_toml: Option<PathBuf>,
    /// Measured data whose curves estimate the default-clock energy (`None`: no estimate).
    pub data_dir: Option<PathBuf>,
    pub gpu_model: String,
}

/// Reads the records and computes the report.
pub fn build(opts: &ReportOptions) -> Result<Report, String> {
    let window = window::Window::new(opts.start.as_deref(), opts.end.as_deref())?;
    let (read, source) = match &opts.sacct_file {
        Some(path) => (sacct::read_file(path).map_err(|e| e.to_string())?, path.display().to_string()),
        None => {
            let exe = opts.sacct.clone().unwrap_or_else(sacct::default_sacct);
            let conf = std::env::var("SLURM_CONF").unwrap_or_else(|_| "the default slurm.conf".into());
            (sacct::run(&exe, &window).map_err(|e| e.to_string())?, format!("sacct ({conf})"))
        }
    };
    let carbon_file = match &opts.carbon_file {
        Some(file) => Some(file.clone()),
        None => match opts.energy_toml.clone().or_else(default_energy_toml) {
            Some(toml) => carbon_source_of(&toml)?,
            None => None,
        },
    };
    let carbon = carbon_file
        .as_deref()
        .map(|f| carbon::load(f).map_err(|e| format!("carbon intensity {}: {e}", f.display())))
        .transpose()?;
    let saving = match &opts.data_dir {
        Some(dir) if dir.join("zeus").is_dir() => Some(saving::SavingModel::load(dir, &opts.gpu_model)?),
        _ => None,
    };
    let mut report =
        aggregate::build(&read.jobs, &aggregate::Inputs { window, source, carbon: carbon.as_deref(), saving: saving.as_ref() });
    report.skipped = aggregate::Skipped::of(&read);
    Ok(report)
}

/// `energy.toml` beside the slurm.conf that `SLURM_CONF` names, when there is one.
fn default_energy_toml() -> Option<PathBuf> {
    let conf = PathBuf::from(std::env::var_os("SLURM_CONF")?);
    Some(conf.parent()?.join("energy.toml")).filter(|p| p.is_file())
}

/// The `[carbon] source` of an energy.toml (the intensity file sched/energy reads), resolved
/// against the file's directory; `None` when it sets none.
pub fn carbon_source_of(energy_toml: &Path) -> Result<Option<PathBuf>, String> {
    let text = std::fs::read_to_string(energy_toml).map_err(|e| format!("{}: {e}", energy_toml.display()))?;
    let value: toml::Value = toml::from_str(&text).map_err(|e| format!("{}: {e}", energy_toml.display()))?;
    match value.get("carbon").and_then(|c| c.get("source")) {
        None => Ok(None),
        Some(toml::Value::String(s)) if !s.trim().is_empty() => {
            let base = energy_toml.parent().unwrap_or_else(|| Path::new("."));
            Ok(Some(base.join(s.trim())))
        }
        Some(other) => Err(format!("{}: [carbon] source must be a file name, not {other}", energy_toml.display())),
    }
}

/// The JSON of a report (pretty-printed).
pub fn to_json(report: &Report) -> Result<String, String> {
    serde_json::to_string_pretty(report).map_err(|e| format!("JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_carbon_source_of_energy_toml_is_found_relative_to_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let toml = dir.path().join("energy.toml");
        std::fs::write(&toml, "[carbon]\nsource = \"ci.csv\"\n").expect("write");
        assert_eq!(carbon_source_of(&toml), Ok(Some(dir.path().join("ci.csv"))));
        std::fs::write(&toml, "[sched]\ncycle_s = 5\n").expect("write");
        assert_eq!(carbon_source_of(&toml), Ok(None));
        std::fs::write(&toml, "[carbon]\nsource = 5\n").expect("write");
        assert!(carbon_source_of(&toml).expect_err("not a path").contains("[carbon] source"));
        std::fs::write(&toml, "[carbon\n").expect("write");
        assert!(carbon_source_of(&toml).expect_err("bad TOML").starts_with(&toml.display().to_string()));
    }
}
