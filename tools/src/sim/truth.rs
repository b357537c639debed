//! Ground truth of the simulator: how fast and at what power a job *really* runs, alone or
//! sharing a GPU, at a power limit, with some CPUs. Only measured data answers here:
//!
//! - alone, at a power limit: the Zeus sweep drawn for the job (time per epoch and average
//!   power at that limit, relative to the sweep's highest limit);
//! - sharing a GPU: Gavel's pair throughputs for the two exact job types (batch sizes
//!   included), normalised to each job's isolated throughput, from its physical-cluster
//!   measurements by default (`[truth] colocation = "simulated"` takes its simulator's table);
//!   a pair Gavel could not run together (`[0, 0]`) or never measured cannot share a GPU: the
//!   newcomer fails at start;
//! - power of a shared GPU: idle power plus each tenant's active power above idle, weighted by
//!   its normalised throughput in the pair (which reproduces the V100 co-location logs: APS
//!   102 W and LSTM 188 W alone, 139 W together, for a throughput split near 0.43/0.57);
//! - CPUs: Synergy's measured throughput at the job's CPU count, relative to the proportional
//!   share, with the gain scaled by a factor of the job's own (drawn per job, unknown to the
//!   planner, which reads the profile only);
//! - a GPU's active power (above idle) follows the job's actual speed: a job sped up by extra
//!   CPUs keeps its GPU busier and draws more, up to the power limit; one starved of CPUs draws
//!   less.
//!
//! - GPU count: a job run on another number of GPUs than it asked for (PowerFlow, GreenFlow)
//!   progresses at Gavel's measured isolated throughput of its exact job type at that count
//!   relative to its request ([`model::elastic::measured_speedup`]: 1, 2, 4, 8 GPUs,
//!   interpolated between them; a type Gavel measured on one GPU only takes the median of the
//!   held-out types at that count). The planner predicts with per-family medians of the other half (`model::elastic`).
//!
//! Nothing here calls the planner's fitted models (`model::perf_power`, `model::interference`,
//! `model::sensitivity`): the planner is scored against data, not against itself. And the data
//! is split ([`Split`]): jobs are drawn only among the Zeus sweeps and Gavel job types held out
//! from the planner's fits ([`Truth::planner_predictor`] fits on the rest).

use std::collections::BTreeMap;
use std::path::Path;

use model::data::gavel::{GavelThroughputs, load_gavel};
use model::elastic::{MEASURED_SCALES, ScalingModel, measured_speedup};
use model::interference::InterferenceModel;
use model::perf_power::{GpuCurves, ZEUS_GPUS};
use model::predictor::Predictor;
use model::data::synergy::{SynergyTable, load_synergy};
use model::data::zeus::{ZeusPoint, ZeusSweep, load_zeus, zeus_sweeps};
use model::data::DataError;
use model::workloads::{synergy_model, zeus_network};

use super::rng::Rng;
use super::spec::Colocation;
use super::split::Split;

/// The measured behaviour assigned to one job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobTruth {
    /// Gavel job type, e.g. `ResNet-50 (batch size 64)`.
    pub job_type: String,
    /// Index of the Zeus sweep that stands for this job's clock/power response.
    pub sweep: usize,
    pub synergy_model: Option<&'static str>,
    /// This job's own CPU sensitivity relative to its model's Synergy profile: the gain (or
    /// loss) from CPUs other than the proportional share is the profile's times this factor.
    /// The planner sees the profile only.
    pub cpu_gain: f64,
}

pub struct Truth {
    pub gpu: String,
    pub idle_gpu_w: f64,
    sweeps: Vec<ZeusSweep>,
    /// The truth's sweeps (held out from the planner) of each network.
    sweeps_by_network: BTreeMap<String, Vec<usize>>,
    gavel: GavelThroughputs,
    /// Every job type Gavel measured on this GPU (a trace may name any).
    gavel_types: Vec<String>,
    /// The job types held out from the planner: jobs of traces without types are drawn here.
    truth_types: Vec<String>,
    split: Split,
    synergy: Option<SynergyTable>,
    /// Median measured speedup (over one GPU) of the held-out types at 2, 4 and 8 GPUs, for
    /// types Gavel measured on one GPU only.
    median_speedup: [f64; 3],
}

/// Normalised throughputs assumed for a pair Gavel could not run together (`[0, 0]`) or
/// never measured: plain time slicing with no overlap, each job at half speed.
pub const UNMEASURED_PAIR: (f64, f64) = (0.5, 0.5);

/// A job starved of CPUs still progresses (Synergy's lowest measured levels stay above this).
const MIN_CPU_FACTOR: f64 = 0.05;

impl Truth {
    pub fn load(data_dir: &Path, gpu: &str, idle_gpu_w: f64, colocation: Colocation) -> Result<Truth, DataError> {
        let zeus_path = data_dir.join("zeus").join(format!("summary_power_{gpu}.csv"));
        let sweeps = zeus_sweeps(&load_zeus(&zeus_path)?);
        if sweeps.is_empty() {
            return Err(DataError::file(&zeus_path, "no power sweeps for this GPU type"));
        }
        let gavel_path = data_dir.join("gavel").join(colocation.file_name());
        let gavel = load_gavel(&gavel_path)?;
        let gavel_types = gavel.job_types(gpu);
        if gavel_types.is_empty() {
            return Err(DataError::file(&gavel_path, format!("no job types measured on {gpu}")));
        }
        let split = Split::new(&sweeps, &gavel_types);
        let mut sweeps_by_network: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, s) in sweeps.iter().enumerate().filter(|(_, s)| split.truth_sweep(s)) {
            sweeps_by_network.entry(s.network.clone()).or_default().push(i);
        }
        let truth_types: Vec<String> = gavel_types.iter().filter(|t| split.truth_type(t)).cloned().collect();
        if truth_types.is_empty() || sweeps_by_network.is_empty() {
            return Err(DataError::file(&gavel_path, "nothing left for the truth after holding out the planner's half"));
        }
        let synergy_path = data_dir.join("synergy").join("cpu_mem_sensitivity.csv");
        let synergy = if synergy_path.exists() { Some(load_synergy(&synergy_path)?) } else { None };
        let mut median_speedup = [2.0, 4.0, 8.0];
        for (k, g) in MEASURED_SCALES.into_iter().skip(1).enumerate() {
            let mut v: Vec<f64> = truth_types.iter().filter_map(|t| measured_speedup(&gavel, gpu, t, g)).collect();
            v.sort_by(f64::total_cmp);
            if let Some(m) = v.get(v.len() / 2) {
                median_speedup[k] = *m;
            }
        }
        Ok(Truth { gpu: gpu.to_string(), idle_gpu_w, sweeps, sweeps_by_network, gavel, gavel_types, truth_types, split, synergy, median_speedup })
    }

    /// The Zeus sweep that is a job's clock/power truth.
    pub fn sweep_of(&self, jt: &JobTruth) -> Option<&ZeusSweep> {
        self.sweeps.get(jt.sweep)
    }

    /// Every Zeus sweep of this GPU type, both halves.
    pub fn all_sweeps(&self) -> &[ZeusSweep] {
        &self.sweeps
    }

    pub fn split(&self) -> &Split {
        &self.split
    }

    /// The planner's predictor for this GPU type, fitted only on the planner's half of the data:
    /// clock/power curves on the Zeus sweeps not held out, the co-location table on the Gavel
    /// job types not held out (from Gavel's simulator table, what a site would have at hand).
    /// Everything else (other GPU types, CPU sensitivity) as [`Predictor::from_data_dir`].
    pub fn planner_predictor(&self, data_dir: &Path) -> Result<Predictor, DataError> {
        let mut pred = Predictor::from_data_dir(data_dir, &self.gpu)?;
        let planner_sweeps: Vec<ZeusSweep> = self.sweeps.iter().filter(|s| !self.split.truth_sweep(s)).cloned().collect();
        let max_clock_mhz = ZEUS_GPUS.iter().find(|(g, _)| *g == self.gpu).map_or(1530, |(_, c)| *c);
        let zeus_path = data_dir.join("zeus").join(format!("summary_power_{}.csv", self.gpu));
        let curves = GpuCurves::fit(&self.gpu, &planner_sweeps, max_clock_mhz).ok_or_else(|| DataError::file(&zeus_path, "the planner's half of the sweeps fits no curve"))?;
        pred.perf.gpus.retain(|c| c.gpu != self.gpu);
        pred.perf.gpus.push(curves);
        let gavel = load_gavel(&data_dir.join("gavel").join(Colocation::Simulated.file_name()))?;
        pred.interference = InterferenceModel::from_gavel(&gavel.retain_job_types(|t| !self.split.truth_type(t)), &self.gpu);
        Ok(pred)
    }

    /// The planner's scaling curves (elastic GPU counts): per-family medians of the multi-GPU
    /// throughputs of the planner's half of Gavel's job types (simulator table, like its
    /// co-location table).
    pub fn planner_scaling(&self, data_dir: &Path) -> Result<Option<ScalingModel>, DataError> {
        let gavel = load_gavel(&data_dir.join("gavel").join(Colocation::Simulated.file_name()))?;
        Ok(ScalingModel::from_gavel(&gavel.retain_job_types(|t| !self.split.truth_type(t)), &self.gpu))
    }

    /// Measured speedup of the job on `gpus` GPUs over one GPU (see the module documentation).
    pub fn speedup(&self, jt: &JobTruth, gpus: u32) -> f64 {
        let at = |g: u32| -> f64 {
            if g <= 1 {
                return 1.0;
            }
            measured_speedup(&self.gavel, &self.gpu, &jt.job_type, g).unwrap_or_else(|| match g {
                2 => self.median_speedup[0],
                4 => self.median_speedup[1],
                _ => self.median_speedup[2],
            })
        };
        if MEASURED_SCALES.contains(&gpus) || gpus > 8 {
            return at(gpus.min(8)) * if gpus > 8 { gpus as f64 / 8.0 } else { 1.0 };
        }
        // Between two measured counts: linear in the GPU count.
        let lo = MEASURED_SCALES.into_iter().filter(|g| *g < gpus).max().unwrap_or(1);
        let hi = MEASURED_SCALES.into_iter().find(|g| *g > gpus).unwrap_or(8);
        let f = (gpus - lo) as f64 / (hi - lo).max(1) as f64;
        at(lo) + (at(hi) - at(lo)) * f
    }

    /// The job types jobs are drawn from when a trace does not name one.
    pub fn job_types(&self) -> &[String] {
        &self.truth_types
    }

    /// Assign measured behaviour to a job of `job_type` (or a type drawn among the held-out
    /// Gavel types when the trace does not say, or names a type Gavel did not measure). A type
    /// the trace names is kept even when it is on the planner's side; its sweep is always drawn
    /// among the held-out ones.
    pub fn assign(&self, job_type: Option<&str>, rng: &mut Rng) -> JobTruth {
        let job_type = match job_type {
            Some(t) if self.gavel_types.iter().any(|g| g == t) => t.to_string(),
            _ => self.truth_types[rng.below(self.truth_types.len())].clone(),
        };
        let sweep = match zeus_network(&job_type).and_then(|n| self.sweeps_by_network.get(n)) {
            Some(list) if !list.is_empty() => list[rng.below(list.len())],
            _ => rng.below(self.sweeps.len()),
        };
        JobTruth { synergy_model: synergy_model(&job_type), job_type, sweep, cpu_gain: 1.0 }
    }

    fn point(&self, sweep: usize, power_limit_w: f64) -> Option<(&ZeusPoint, &ZeusPoint)> {
        let s = self.sweeps.get(sweep)?;
        let full = s.points.last()?;
        let nearest = s.points.iter().min_by(|a, b| (a.power_limit_w - power_limit_w).abs().total_cmp(&(b.power_limit_w - power_limit_w).abs()))?;
        Some((nearest, full))
    }

    /// (runtime / runtime at the highest limit, average power in W) alone at `power_limit_w`.
    pub fn alone(&self, jt: &JobTruth, power_limit_w: f64) -> (f64, f64) {
        match self.point(jt.sweep, power_limit_w) {
            Some((p, full)) => (p.time_per_epoch_s / full.time_per_epoch_s, p.average_power_w),
            None => (1.0, self.idle_gpu_w),
        }
    }

    /// Measured normalised throughputs (each relative to running alone) of two jobs sharing;
    /// `None` when they cannot share a GPU (Gavel could not run them together, or never did).
    pub fn pair(&self, a: &JobTruth, b: &JobTruth) -> Option<(f64, f64)> {
        self.gavel.pair_normalised(&self.gpu, &a.job_type, &b.job_type).filter(|(na, nb)| *na > 0.0 && *nb > 0.0)
    }

    /// Power of a GPU shared by tenants with alone powers `p` and pair throughputs `n`, held
    /// under the GPU's power limit `limit_w` as the board's power controller does.
    pub fn shared_power_w(&self, p: (f64, f64), n: (f64, f64), limit_w: f64) -> f64 {
        let idle = self.idle_gpu_w;
        (idle + n.0 * (p.0 - idle).max(0.0) + n.1 * (p.1 - idle).max(0.0)).min(limit_w.max(idle))
    }

    /// Throughput with `cpus` CPUs relative to the proportional share `proportional_cpus`.
    pub fn cpu_factor(&self, jt: &JobTruth, gpus: u32, cpus: u32, proportional_cpus: u32) -> f64 {
        let (Some(table), Some(model)) = (self.synergy.as_ref(), jt.synergy_model) else { return 1.0 };
        if cpus == proportional_cpus {
            return 1.0;
        }
        let key = table.models().into_iter().filter(|(m, g)| m == model && *g <= gpus.max(1)).map(|(_, g)| g).max();
        let Some(key) = key else { return 1.0 };
        let scale = key as f64 / gpus.max(1) as f64;
        let level = |c: u32| ((c as f64 * scale).floor() as u32).max(1);
        let lookup = |c: u32| table.throughput(model, key, level(c), 1.0e6).unwrap_or(1.0);
        let base = lookup(proportional_cpus);
        let profile = if base > 0.0 { lookup(cpus) / base } else { 1.0 };
        (1.0 + (profile - 1.0) * jt.cpu_gain).max(MIN_CPU_FACTOR)
    }

    /// Power of a GPU running one job alone, whose active power above idle `alone_w` was
    /// measured at the proportional CPU share, now running `speed` times as fast because of
    /// its CPUs, held under the limit.
    pub fn power_at_speed_w(&self, alone_w: f64, speed: f64, limit_w: f64) -> f64 {
        let idle = self.idle_gpu_w;
        (idle + (alone_w - idle).max(0.0) * speed).min(limit_w.max(idle))
    }
}
