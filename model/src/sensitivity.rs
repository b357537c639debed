//! CPU sensitivity of training jobs (Synergy): how much faster a job runs with more CPUs than
//! its GPU-proportional share, and the CPU count to give it.
//!
//! Predictions come from Synergy's profiles per model family; a job of unknown family is taken
//! as insensitive (gets its request). Memory is not traded: Slurm jobs keep their `--mem`.

use crate::data::synergy::SynergyTable;
use crate::workloads::synergy_model;

/// A job within this fraction of its best throughput is considered saturated.
pub const SATURATION: f64 = 0.98;
/// Memory level used when looking up CPU sensitivity (GB); generous, so memory is not the limit.
const LOOKUP_MEM_GB: f64 = 1.0e6;

#[derive(Debug, Clone, PartialEq)]
pub struct SensitivityModel {
    table: SynergyTable,
    /// (model, GPU count) rows of the table, listed once.
    rows: Vec<(String, u32)>,
}

impl SensitivityModel {
    pub fn new(table: SynergyTable) -> SensitivityModel {
        let rows = table.models();
        SensitivityModel { table, rows }
    }

    /// Table row (model, gpus) for a family and GPU count, and the factor that turns the job's
    /// CPU count into the table's CPU level.
    fn row(&self, family: &str, gpus: u32) -> Option<(&'static str, u32, f64)> {
        let model = synergy_model(family)?;
        let key = self.rows.iter().filter(|(m, g)| m == model && *g <= gpus.max(1)).map(|(_, g)| *g).max()?;
        Some((model, key, key as f64 / gpus.max(1) as f64))
    }

    /// Predicted throughput with `cpus` CPUs, normalised to the GPU-proportional share (1.0).
    pub fn throughput(&self, family: Option<&str>, gpus: u32, cpus: u32) -> f64 {
        let Some((model, key, scale)) = family.and_then(|f| self.row(f, gpus)) else { return 1.0 };
        let level = ((cpus as f64 * scale).floor() as u32).max(1);
        self.table.throughput(model, key, level, LOOKUP_MEM_GB).unwrap_or(1.0)
    }

    /// Fewest CPUs in `[min, max]` that reach [`SATURATION`] of the best predicted throughput in
    /// that range, and that throughput. Unknown families get `preferred` (their request).
    pub fn choose_cpus(&self, family: Option<&str>, gpus: u32, min: u32, max: u32, preferred: u32) -> (u32, f64) {
        if family.and_then(|f| self.row(f, gpus)).is_none() || max < min {
            return (preferred.clamp(min, max.max(min)), 1.0);
        }
        let best = (min..=max).map(|c| self.throughput(family, gpus, c)).fold(0.0_f64, f64::max);
        for c in min..=max {
            let t = self.throughput(family, gpus, c);
            if t >= SATURATION * best {
                return (c, t);
            }
        }
        (max, best)
    }
}
