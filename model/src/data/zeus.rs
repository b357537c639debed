//! Zeus power-limit sweeps (`zeus/summary_power_<gpu>.csv`): epoch time and average power of a
//! training workload at each GPU power limit.
//!
//! Loads and groups the measurements; the energy of an epoch is time x average power, nothing
//! fitted. Never interpolates between power limits: a limit that was not measured is `None`.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use super::DataError;
use super::csv::{column_indices, field, finite, header_and_records, read_text};
use super::stats::median;

/// One line of a summary file.
#[derive(Debug, Clone, PartialEq)]
pub struct ZeusRow {
    pub dataset: String,
    pub network: String,
    pub batch_size: u32,
    pub optimizer: String,
    pub power_limit_w: f64,
    pub time_per_epoch_s: f64,
    pub average_power_w: f64,
}

/// One measured power limit of a sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct ZeusPoint {
    pub power_limit_w: f64,
    pub time_per_epoch_s: f64,
    pub average_power_w: f64,
}

/// All power limits measured for one (dataset, network, batch size, optimizer).
#[derive(Debug, Clone, PartialEq)]
pub struct ZeusSweep {
    pub dataset: String,
    pub network: String,
    pub batch_size: u32,
    pub optimizer: String,
    /// Never empty when built by [`zeus_sweeps`]; sorted by `power_limit_w` ascending.
    pub points: Vec<ZeusPoint>,
}

const COLUMNS: [&str; 7] = [
    "dataset",
    "network",
    "batch_size",
    "optimizer",
    "power_limit",
    "time_per_epoch",
    "average_power",
];

/// Reads a `summary_power_<gpu>.csv`. Times and powers must be finite and positive, and a
/// configuration may not be measured twice at the same limit.
pub fn load_zeus(path: &Path) -> Result<Vec<ZeusRow>, DataError> {
    let text = read_text(path)?;
    let ((header_line, header), records) = header_and_records(path, &text)?;
    let [ds, net, bs, opt, pl, t, p] = column_indices(path, header_line, &header, COLUMNS)?;
    let mut seen = HashSet::new();
    let mut rows = Vec::new();
    for (line, f) in records {
        let row = ZeusRow {
            dataset: field(path, line, &f, ds, "dataset")?,
            network: field(path, line, &f, net, "network")?,
            batch_size: field(path, line, &f, bs, "batch_size")?,
            optimizer: field(path, line, &f, opt, "optimizer")?,
            power_limit_w: finite(path, line, &f, pl, "power_limit")?,
            time_per_epoch_s: finite(path, line, &f, t, "time_per_epoch")?,
            average_power_w: finite(path, line, &f, p, "average_power")?,
        };
        if row.power_limit_w <= 0.0 || row.time_per_epoch_s <= 0.0 || row.average_power_w <= 0.0 {
            return Err(DataError::at(
                path,
                line,
                "power limit, time and power must be > 0",
            ));
        }
        let key = (key_of(&row), row.power_limit_w.to_bits());
        if !seen.insert(key) {
            return Err(DataError::at(
                path,
                line,
                "same configuration and power limit twice",
            ));
        }
        rows.push(row);
    }
    Ok(rows)
}

type SweepKey = (String, String, u32, String);

fn key_of(r: &ZeusRow) -> SweepKey {
    (
        r.dataset.clone(),
        r.network.clone(),
        r.batch_size,
        r.optimizer.clone(),
    )
}

/// Groups rows into sweeps, ordered by (dataset, network, batch size, optimizer).
pub fn zeus_sweeps(rows: &[ZeusRow]) -> Vec<ZeusSweep> {
    let mut groups: BTreeMap<SweepKey, Vec<ZeusPoint>> = BTreeMap::new();
    for r in rows {
        groups.entry(key_of(r)).or_default().push(ZeusPoint {
            power_limit_w: r.power_limit_w,
            time_per_epoch_s: r.time_per_epoch_s,
            average_power_w: r.average_power_w,
        });
    }
    groups
        .into_iter()
        .map(|((dataset, network, batch_size, optimizer), mut points)| {
            points.sort_by(|a, b| a.power_limit_w.total_cmp(&b.power_limit_w));
            ZeusSweep {
                dataset,
                network,
                batch_size,
                optimizer,
                points,
            }
        })
        .collect()
}

impl ZeusSweep {
    /// The point at the highest measured limit (the "default", uncapped setting).
    ///
    /// # Panics
    /// If `points` is empty, which [`zeus_sweeps`] never produces.
    pub fn max_limit_point(&self) -> &ZeusPoint {
        &self.points[self.points.len() - 1]
    }

    /// Energy of one epoch at this point: time x average power.
    pub fn energy_per_epoch_j(p: &ZeusPoint) -> f64 {
        p.time_per_epoch_s * p.average_power_w
    }

    /// The point with the least energy per epoch (the lower limit on a tie).
    ///
    /// # Panics
    /// If `points` is empty, which [`zeus_sweeps`] never produces.
    pub fn energy_optimal_point(&self) -> &ZeusPoint {
        let mut best = &self.points[0];
        for p in &self.points[1..] {
            if Self::energy_per_epoch_j(p) < Self::energy_per_epoch_j(best) {
                best = p;
            }
        }
        best
    }

    /// The point measured at `power_limit_w` (within 1 mW), if any.
    pub fn point_at(&self, power_limit_w: f64) -> Option<&ZeusPoint> {
        self.points
            .iter()
            .find(|p| (p.power_limit_w - power_limit_w).abs() < 1e-3)
    }

    /// `1 - E(energy-optimal limit) / E(highest limit)`: the share of epoch energy saved by the
    /// best power limit.
    pub fn optimal_saving(&self) -> f64 {
        1.0 - Self::energy_per_epoch_j(self.energy_optimal_point())
            / Self::energy_per_epoch_j(self.max_limit_point())
    }
}

/// Median over sweeps of [`ZeusSweep::optimal_saving`]; NaN without sweeps.
pub fn median_optimal_saving(sweeps: &[ZeusSweep]) -> f64 {
    let mut savings: Vec<f64> = sweeps.iter().map(ZeusSweep::optimal_saving).collect();
    median(&mut savings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(opt: &str, limit_w: f64, time_s: f64, power_w: f64) -> ZeusRow {
        ZeusRow {
            dataset: "d".into(),
            network: "n".into(),
            batch_size: 8,
            optimizer: opt.into(),
            power_limit_w: limit_w,
            time_per_epoch_s: time_s,
            average_power_w: power_w,
        }
    }

    #[test]
    fn sweeps_are_grouped_sorted_and_optimal_is_least_energy() {
        let rows = [
            row("b", 200.0, 10.0, 190.0),
            row("a", 200.0, 10.0, 190.0),
            row("a", 100.0, 15.0, 95.0),
            row("a", 150.0, 11.0, 140.0),
        ];
        let sweeps = zeus_sweeps(&rows);
        assert_eq!(sweeps.len(), 2);
        assert_eq!(sweeps[0].optimizer, "a");
        let limits: Vec<f64> = sweeps[0].points.iter().map(|p| p.power_limit_w).collect();
        assert_eq!(limits, [100.0, 150.0, 200.0]);
        assert_eq!(sweeps[0].max_limit_point().power_limit_w, 200.0);
        assert_eq!(sweeps[0].energy_optimal_point().power_limit_w, 100.0);
        assert!((sweeps[0].optimal_saving() - (1.0 - 1425.0 / 1900.0)).abs() < 1e-12);
        assert!(sweeps[0].point_at(125.0).is_none());
    }
}
