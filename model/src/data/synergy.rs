//! Synergy's CPU and memory sensitivity (`synergy/cpu_mem_sensitivity.csv`): normalised
//! throughput of each model at each CPU and memory level.
//!
//! A step-function lookup over the measured levels, nothing interpolated: a request between two
//! levels gets the value of the level below it (what the job is sure to get), and a request
//! below the lowest level gets the lowest level's value.

use std::collections::BTreeMap;
use std::path::Path;

use super::DataError;
use super::csv::{column_indices, field, finite, header_and_records, raw, read_text};

/// One (model, GPU count) of the file.
#[derive(Debug, Clone, PartialEq)]
struct ModelTable {
    /// `(cpus, mem_gb, normalised throughput)` as measured.
    cells: Vec<(u32, f64, f64)>,
    best_cpus: u32,
    best_mem_gb: Option<f64>,
    speedup_at_best: f64,
    iter_time_s: f64,
}

/// The whole sensitivity file, keyed by (model, GPUs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SynergyTable {
    tables: BTreeMap<(String, u32), ModelTable>,
}

const COLUMNS: [&str; 9] = [
    "model",
    "gpus",
    "cpus_level",
    "mem_gb_level",
    "normalized_throughput",
    "best_cpus",
    "best_mem_gb",
    "speedup_at_best",
    "iter_time_s",
];

/// Reads `cpu_mem_sensitivity.csv`. The per-model summary columns (`best_*`, `speedup_at_best`,
/// `iter_time_s`) must agree on every row of a model, and a level may not appear twice.
pub fn load_synergy(path: &Path) -> Result<SynergyTable, DataError> {
    let text = read_text(path)?;
    let ((header_line, header), records) = header_and_records(path, &text)?;
    let [m, g, c, mem, thr, bc, bm, sp, it] = column_indices(path, header_line, &header, COLUMNS)?;
    let mut tables: BTreeMap<(String, u32), ModelTable> = BTreeMap::new();
    for (line, f) in records {
        let key = (
            field(path, line, &f, m, "model")?,
            field(path, line, &f, g, "gpus")?,
        );
        let cpus: u32 = field(path, line, &f, c, "cpus_level")?;
        let mem_gb = finite(path, line, &f, mem, "mem_gb_level")?;
        let value = finite(path, line, &f, thr, "normalized_throughput")?;
        let best_mem_gb = match raw(path, line, &f, bm, "best_mem_gb")? {
            "" => None,
            _ => Some(finite(path, line, &f, bm, "best_mem_gb")?),
        };
        let summary = ModelTable {
            cells: Vec::new(),
            best_cpus: field(path, line, &f, bc, "best_cpus")?,
            best_mem_gb,
            speedup_at_best: finite(path, line, &f, sp, "speedup_at_best")?,
            iter_time_s: finite(path, line, &f, it, "iter_time_s")?,
        };
        let table = tables.entry(key).or_insert_with(|| summary.clone());
        let same_summary = table.best_cpus == summary.best_cpus
            && table.best_mem_gb == summary.best_mem_gb
            && table.speedup_at_best == summary.speedup_at_best
            && table.iter_time_s == summary.iter_time_s;
        if !same_summary {
            return Err(DataError::at(
                path,
                line,
                "summary columns differ from earlier rows",
            ));
        }
        if table
            .cells
            .iter()
            .any(|(c0, m0, _)| *c0 == cpus && *m0 == mem_gb)
        {
            return Err(DataError::at(
                path,
                line,
                "CPU and memory level given twice",
            ));
        }
        table.cells.push((cpus, mem_gb, value));
    }
    Ok(SynergyTable { tables })
}

/// Largest level `<= want`, else the smallest level; `None` without levels.
fn level_at_most<T: PartialOrd + Copy>(levels: impl Iterator<Item = T>, want: T) -> Option<T> {
    let (mut below, mut lowest): (Option<T>, Option<T>) = (None, None);
    for l in levels {
        if lowest.is_none_or(|lo| l < lo) {
            lowest = Some(l);
        }
        if l <= want && below.is_none_or(|b| l > b) {
            below = Some(l);
        }
    }
    below.or(lowest)
}

impl SynergyTable {
    /// The table with only the models `keep` accepts (a fit that must not see a model, e.g.
    /// leave-one-model-out).
    pub fn retain_models(&self, keep: impl Fn(&str) -> bool) -> SynergyTable {
        SynergyTable { tables: self.tables.iter().filter(|((m, _), _)| keep(m)).map(|(k, v)| (k.clone(), v.clone())).collect() }
    }

    /// `(model, GPUs)` pairs in the file, sorted.
    pub fn models(&self) -> Vec<(String, u32)> {
        self.tables.keys().cloned().collect()
    }

    fn table(&self, model: &str, gpus: u32) -> Option<&ModelTable> {
        self.tables.get(&(model.to_string(), gpus))
    }

    /// Measured CPU levels, ascending.
    pub fn cpu_levels(&self, model: &str, gpus: u32) -> Vec<u32> {
        let mut levels: Vec<u32> = self
            .table(model, gpus)
            .map(|t| t.cells.iter().map(|c| c.0).collect())
            .unwrap_or_default();
        levels.sort_unstable();
        levels.dedup();
        levels
    }

    /// Measured memory levels in GB, ascending.
    pub fn mem_levels_gb(&self, model: &str, gpus: u32) -> Vec<f64> {
        let mut levels: Vec<f64> = self
            .table(model, gpus)
            .map(|t| t.cells.iter().map(|c| c.1).collect())
            .unwrap_or_default();
        levels.sort_by(f64::total_cmp);
        levels.dedup();
        levels
    }

    /// Normalised throughput with `cpus` CPUs and `mem_gb` GB: the cell at the largest measured
    /// level not above each request (the lowest level when the request is below all of them).
    /// `None` for an unknown model or a level combination the file does not have.
    pub fn throughput(&self, model: &str, gpus: u32, cpus: u32, mem_gb: f64) -> Option<f64> {
        let t = self.table(model, gpus)?;
        let c = level_at_most(t.cells.iter().map(|c| c.0), cpus)?;
        let m = level_at_most(t.cells.iter().filter(|x| x.0 == c).map(|x| x.1), mem_gb)?;
        t.cells.iter().find(|x| x.0 == c && x.1 == m).map(|x| x.2)
    }

    /// The CPU count Synergy's model file names as best.
    pub fn best_cpus(&self, model: &str, gpus: u32) -> Option<u32> {
        Some(self.table(model, gpus)?.best_cpus)
    }

    /// The memory Synergy's model file names as best, when it names one.
    pub fn best_mem_gb(&self, model: &str, gpus: u32) -> Option<f64> {
        self.table(model, gpus)?.best_mem_gb
    }

    /// Synergy's own speedup at the best allocation.
    pub fn speedup_at_best(&self, model: &str, gpus: u32) -> Option<f64> {
        Some(self.table(model, gpus)?.speedup_at_best)
    }

    /// Synergy's iteration time of the model, in seconds.
    pub fn iter_time_s(&self, model: &str, gpus: u32) -> Option<f64> {
        Some(self.table(model, gpus)?.iter_time_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_lookup_takes_the_level_below_or_the_lowest() {
        let levels = [1u32, 2, 4, 8];
        assert_eq!(level_at_most(levels.iter().copied(), 3), Some(2));
        assert_eq!(level_at_most(levels.iter().copied(), 0), Some(1));
        assert_eq!(level_at_most(levels.iter().copied(), 100), Some(8));
        assert_eq!(level_at_most(std::iter::empty::<u32>(), 3), None);
    }
}
