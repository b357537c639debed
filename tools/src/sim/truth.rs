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
//! - optionally (`[truth] gpu_utilisation = "v100-logs"`), per-job-type GPU
//!   under-utilisation from five V100 logs: lower power alone, little interference between two
//!   jobs that together leave the GPU idle part of the time ([`super::gpu_util`]);
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

use super::gpu_util::GpuUtilTruth;
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
    /// Synergy's measured CPU profiles read per GPU ([`Truth::cpu_factor`]): per model, for a
    /// job with 1 to [`PROFILE_GPUS`] GPUs on a node, `(CPUs per GPU, throughput)` at every
    /// measured level, ascending.
    cpu_profiles: Vec<(String, PerGpuProfiles)>,
    /// Median measured speedup (over one GPU) of the held-out types at 2, 4 and 8 GPUs, for
    /// types Gavel measured on one GPU only.
    median_speedup: [f64; 3],
    /// Per-job-type GPU under-utilisation (opt-in, [`super::gpu_util`]); `None`: every job
    /// uses its GPU fully.
    gpu_util: Option<GpuUtilTruth>,
}

/// One model's CPU profiles read per GPU: for a job with 1 to [`PROFILE_GPUS`] GPUs on a node
/// (index + 1), `(CPUs per GPU, throughput)` at every measured level, ascending.
type PerGpuProfiles = Vec<Vec<(u32, f64)>>;

/// Node sizes (GPUs per node) the per-GPU CPU profiles are built for; a larger node reads the
/// largest.
const PROFILE_GPUS: u32 = 8;

/// Synergy's profiles of each model read per GPU, for a job with `g` = 1..=[`PROFILE_GPUS`]
/// GPUs on a node: at each CPU level (per GPU) any profile measured, the throughput of the
/// profile of the most GPUs not above `g` that measured it (a 0.0 cell is one Synergy could not
/// run: the next smaller profile answers, down to the 1-GPU one).
fn per_gpu_profiles(table: &SynergyTable) -> Vec<(String, PerGpuProfiles)> {
    let models = table.models();
    let mut names: Vec<String> = models.iter().map(|(m, _)| m.clone()).collect();
    names.dedup();
    names
        .into_iter()
        .map(|model| {
            let by_gpus: Vec<Vec<(u32, f64)>> = (1..=PROFILE_GPUS)
                .map(|g| {
                    let mut keys: Vec<u32> = models.iter().filter(|(m, k)| *m == model && *k <= g).map(|(_, k)| *k).collect();
                    keys.sort_unstable_by(|a, b| b.cmp(a));
                    let mut levels: Vec<u32> = keys.iter().flat_map(|k| table.cpu_levels(&model, *k)).collect();
                    levels.sort_unstable();
                    levels.dedup();
                    levels.into_iter().filter_map(|l| keys.iter().find_map(|k| table.throughput(&model, *k, l, 1.0e6).filter(|t| *t > 0.0)).map(|t| (l, t))).collect::<Vec<_>>()
                })
                .collect();
            (model, by_gpus)
        })
        .collect()
}

/// Normalised throughputs assumed for a pair Gavel could not run together (`[0, 0]`) or
/// never measured: plain time slicing with no overlap, each job at half speed.
pub const UNMEASURED_PAIR: (f64, f64) = (0.5, 0.5);

/// A job starved of CPUs still progresses (Synergy's lowest measured levels stay above this).
const MIN_CPU_FACTOR: f64 = 0.05;
/// A job's data pipeline counts as saturated at this share of its profile's highest throughput
/// ([`Truth::busy_cores`]).
pub const SATURATED_SHARE: f64 = 0.95;

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
        let cpu_profiles = synergy.as_ref().map(per_gpu_profiles).unwrap_or_default();
        Ok(Truth { gpu: gpu.to_string(), idle_gpu_w, sweeps, sweeps_by_network, gavel, gavel_types, truth_types, split, cpu_profiles, median_speedup, gpu_util: None })
    }

    /// Switch the per-job-type GPU under-utilisation truth on (`Some`) or off.
    pub fn set_gpu_util(&mut self, gpu_util: Option<GpuUtilTruth>) {
        self.gpu_util = gpu_util;
    }

    pub fn gpu_util(&self) -> Option<&GpuUtilTruth> {
        self.gpu_util.as_ref()
    }

    /// Every job type Gavel measured on this GPU.
    pub fn gavel_types(&self) -> &[String] {
        &self.gavel_types
    }

    /// A job's solo GPU utilisation (0..1): 1.0 unless the under-utilisation truth is on.
    pub fn solo_util(&self, jt: &JobTruth) -> f64 {
        self.gpu_util.as_ref().map_or(1.0, |g| g.util(&jt.job_type))
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
            Some((p, full)) => {
                let power_w = if self.gpu_util.is_some() { GpuUtilTruth::alone_power_w(self.idle_gpu_w, p.average_power_w, self.solo_util(jt)) } else { p.average_power_w };
                (p.time_per_epoch_s / full.time_per_epoch_s, power_w)
            }
            None => (1.0, self.idle_gpu_w),
        }
    }

    /// Measured normalised throughputs (each relative to running alone) of two jobs sharing;
    /// `None` when they cannot share a GPU (Gavel could not run them together, or never did).
    pub fn pair(&self, a: &JobTruth, b: &JobTruth) -> Option<(f64, f64)> {
        let n = self.gavel.pair_normalised(&self.gpu, &a.job_type, &b.job_type).filter(|(na, nb)| *na > 0.0 && *nb > 0.0)?;
        Some(if self.gpu_util.is_some() { GpuUtilTruth::pair((self.solo_util(a), self.solo_util(b)), n) } else { n })
    }

    /// Power of a GPU shared by tenants with alone powers `p` and pair throughputs `n`, held
    /// under the GPU's power limit `limit_w` as the board's power controller does.
    pub fn shared_power_w(&self, p: (f64, f64), n: (f64, f64), limit_w: f64) -> f64 {
        let idle = self.idle_gpu_w;
        match &self.gpu_util {
            Some(g) => (idle + g.shared_power_factor * (n.0 * (p.0 - idle).max(0.0) + n.1 * (p.1 - idle).max(0.0))).min(limit_w.max(idle)),
            None => (idle + n.0 * (p.0 - idle).max(0.0) + n.1 * (p.1 - idle).max(0.0)).min(limit_w.max(idle)),
        }
    }

    /// Synergy's measured throughput of `model` at `cores_per_gpu` CPUs per GPU on a node with
    /// `gpus_per_node` GPUs (relative to the proportional share, 3 CPUs per GPU).
    ///
    /// Synergy's levels are read per GPU: every profile is normalised to 1.0 at level 3, the
    /// proportional share of its 24-CPU, 8-GPU servers per GPU (`job_cpus_per_gpu = 3`), and its
    /// multi-GPU profiles stop where GPUs x level would exceed 24 (4 GPUs: up to 6). A cell
    /// Synergy did not measure (0.0) is unknown, not free: the same model's profile at fewer
    /// GPUs answers for it (per GPU), down to the 1-GPU profile, which covers every level.
    /// `None` when no profile of the model measured that level.
    fn measured_per_gpu(&self, model: &str, gpus_per_node: u32, cores_per_gpu: f64) -> Option<f64> {
        let profile = self.cpu_profile(model, gpus_per_node)?;
        let level = (cores_per_gpu.floor() as u32).max(1);
        // Synergy's step reading: the largest measured level not above the request (the lowest
        // level below all of them).
        profile.iter().rev().find(|(l, _)| *l <= level).or(profile.first()).map(|(_, t)| *t)
    }

    fn cpu_profile(&self, model: &str, gpus_per_node: u32) -> Option<&[(u32, f64)]> {
        let (_, by_gpus) = self.cpu_profiles.iter().find(|(m, _)| m == model)?;
        by_gpus.get(gpus_per_node.clamp(1, PROFILE_GPUS) as usize - 1).map(|p| p.as_slice()).filter(|p| !p.is_empty())
    }

    /// Throughput with `cpus_per_node` CPUs relative to the proportional share
    /// `proportional_cpus` (both per node), on a node where the job has `gpus_per_node` GPUs.
    /// A job of no Synergy model, or one whose model measured neither point, is taken as
    /// insensitive (1.0).
    pub fn cpu_factor(&self, jt: &JobTruth, gpus_per_node: u32, cpus_per_node: u32, proportional_cpus: u32) -> f64 {
        let Some(model) = jt.synergy_model else { return 1.0 };
        if cpus_per_node == proportional_cpus {
            return 1.0;
        }
        let gpus = gpus_per_node.max(1) as f64;
        let (Some(at), Some(base)) = (self.measured_per_gpu(model, gpus_per_node, cpus_per_node as f64 / gpus), self.measured_per_gpu(model, gpus_per_node, proportional_cpus as f64 / gpus)) else { return 1.0 };
        (1.0 + (at / base - 1.0) * jt.cpu_gain).max(MIN_CPU_FACTOR)
    }

    /// The job's speed from its CPUs ([`Truth::cpu_factor`]), held where its GPU reaches its
    /// power limit: a GPU sped up by `s` draws `idle + (alone - idle) x s`
    /// ([`Truth::power_at_speed_w`]), and the board cannot draw more than `limit_w`, so a
    /// speed-up beyond `(limit - idle) / (alone - idle)` is not physically available (Zeus
    /// measured `alone` at the proportional CPU share). Never below 1.0 from this rule: a job
    /// starved of CPUs still slows down.
    pub fn cpu_speed(&self, jt: &JobTruth, gpus_per_node: u32, cpus_per_node: u32, proportional_cpus: u32, limit_w: f64) -> f64 {
        let factor = self.cpu_factor(jt, gpus_per_node, cpus_per_node, proportional_cpus);
        if factor <= 1.0 {
            return factor;
        }
        let (_, alone_w) = self.alone(jt, limit_w);
        let idle = self.idle_gpu_w;
        if alone_w > idle { factor.min(((limit_w - idle) / (alone_w - idle)).max(1.0)) } else { factor }
    }

    /// Cores per GPU at which the job's model saturates, and its throughput there (relative to
    /// the proportional share): the smallest measured level reaching [`SATURATED_SHARE`] of the
    /// highest throughput of its profile (read per GPU, unmeasured cells as in
    /// [`Truth::cpu_factor`]). `None` for a job of no Synergy model.
    fn saturation(&self, jt: &JobTruth, gpus_per_node: u32) -> Option<(f64, f64)> {
        let profile = self.cpu_profile(jt.synergy_model?, gpus_per_node)?;
        let top = profile.iter().map(|p| p.1).fold(0.0_f64, f64::max);
        let (level, t) = profile.iter().find(|(_, t)| *t >= SATURATED_SHARE * top)?;
        Some((*level as f64, (1.0 + (t - 1.0) * jt.cpu_gain).max(MIN_CPU_FACTOR)))
    }

    /// Cores a job keeps busy on one node where it has `gpus_per_node` GPUs and
    /// `allocated_cpus` CPUs, running at `speed` (progress per second relative to alone at the
    /// default clock with the proportional CPU share: the Synergy profile's units). The CPU work
    /// per unit of training progress is constant for a job, so the cores needed grow with its
    /// speed: at its profile's saturation point it needs that level's cores per GPU for that
    /// level's throughput. A job never keeps more cores busy than it has. A job of no Synergy
    /// model (no measured profile) keeps all its allocated cores busy.
    pub fn busy_cores(&self, jt: &JobTruth, gpus_per_node: u32, allocated_cpus: u32, speed: f64) -> f64 {
        let allocated = allocated_cpus as f64;
        let Some((cores_per_gpu, throughput)) = self.saturation(jt, gpus_per_node) else { return allocated };
        let needed = cores_per_gpu * gpus_per_node.max(1) as f64 * speed.max(0.0) / throughput;
        needed.min(allocated)
    }

    /// Power of a GPU running one job alone, whose active power above idle `alone_w` was
    /// measured at the proportional CPU share, now running `speed` times as fast because of
    /// its CPUs, held under the limit.
    pub fn power_at_speed_w(&self, alone_w: f64, speed: f64, limit_w: f64) -> f64 {
        let idle = self.idle_gpu_w;
        (idle + (alone_w - idle).max(0.0) * speed).min(limit_w.max(idle))
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn data_dir() -> PathBuf {
        std::env::var_os("SLURM_ENERGY_DATA").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")))
    }

    fn truth() -> Truth {
        Truth::load(&data_dir(), "v100", 41.0, Colocation::Physical).expect("truth loads")
    }

    /// A job of Synergy model `model` (its own factor 1: the measured profile itself).
    fn job(truth: &Truth, job_type: &str, model: &'static str) -> JobTruth {
        let mut jt = truth.assign(Some(job_type), &mut Rng::new(3));
        jt.synergy_model = Some(model);
        jt.cpu_gain = 1.0;
        jt
    }

    #[test]
    fn unmeasured_synergy_cells_are_unknown_not_insensitive() {
        let truth = truth();
        // Synergy measured ResNet-18 on 4 GPUs up to 6 CPUs per GPU only (24 CPUs a server):
        // half the proportional share slows a 4- or 8-GPU job as its measured data says, not 1.0.
        let res18 = job(&truth, "ResNet-18 (batch size 32)", "res18");
        for gpus in [2, 4, 8] {
            let half = truth.cpu_factor(&res18, gpus, gpus * 3 / 2, gpus * 3);
            assert!(half < 0.8, "res18 on {gpus} GPUs with half its CPUs runs at {half}");
        }
        // Every model whose 1-GPU profile loses speed below the share does so on every GPU count.
        for model in ["alexnet", "res18", "res50", "mobilenet", "shufflenet", "m5", "deepspeech"] {
            let jt = job(&truth, "ResNet-18 (batch size 32)", model);
            for gpus in [1, 2, 4, 8] {
                let f = truth.cpu_factor(&jt, gpus, gpus, gpus * 3);
                assert!(f < 0.9, "{model} on {gpus} GPUs at 1 CPU per GPU: {f}");
            }
        }
        // Where every profile of a model measured a level, the multi-GPU profile per GPU is the
        // 1-GPU one; ResNet-18's profiles agree at every level.
        for model in ["alexnet", "res18", "mobilenet", "shufflenet"] {
            let jt = job(&truth, "ResNet-18 (batch size 32)", model);
            let top = if model == "res18" { 12 } else { 6 };
            for gpus in [2, 4, 8] {
                for per_gpu in 1..=top {
                    let (multi, single) = (truth.cpu_factor(&jt, gpus, gpus * per_gpu, gpus * 3), truth.cpu_factor(&jt, 1, per_gpu, 3));
                    assert!((multi - single).abs() < 1e-9, "{model}, {gpus} GPUs, {per_gpu} CPUs per GPU: {multi} vs {single} on 1 GPU");
                }
            }
        }
    }

    #[test]
    fn a_cpu_speed_up_stays_within_the_gpu_power_limit() {
        let truth = truth();
        let res18 = job(&truth, "ResNet-18 (batch size 32)", "res18");
        let sweep = truth.sweep_of(&res18).expect("a sweep").clone();
        let mut capped = 0;
        for p in &sweep.points {
            let limit = p.power_limit_w;
            let (_, alone_w) = truth.alone(&res18, limit);
            // 5 CPUs instead of 3: Synergy measured 1.53x, more than the board's power allows.
            let speed = truth.cpu_speed(&res18, 1, 5, 3, limit);
            let factor = truth.cpu_factor(&res18, 1, 5, 3);
            assert!(speed >= 1.0 && speed <= factor + 1e-12, "{speed} vs {factor}");
            let drawn_w = truth.idle_gpu_w + (alone_w - truth.idle_gpu_w) * speed;
            assert!(drawn_w <= limit + 1e-9, "at {limit} W the GPU would draw {drawn_w} W at {speed}x");
            if speed < factor - 1e-9 {
                capped += 1;
            }
            // Never below 1.0 from the limit; a job starved of CPUs still slows down.
            assert!((truth.cpu_speed(&res18, 1, 1, 3, limit) - truth.cpu_factor(&res18, 1, 1, 3)).abs() < 1e-12);
            assert!(truth.cpu_speed(&res18, 1, 1, 3, limit) < 1.0);
        }
        assert!(capped > 0, "no limit of the sweep holds the speed-up");
    }

    #[test]
    fn busy_cores_follow_the_work_not_the_allocation() {
        let truth = truth();
        // Transformer's data pipeline is saturated at 1 CPU per GPU (Synergy): of 24 allocated
        // cores an 8-GPU job keeps 8 busy at full speed, fewer when slowed down.
        let transformer = job(&truth, "Transformer (batch size 32)", "transformer");
        let busy = truth.busy_cores(&transformer, 8, 24, 1.0);
        assert!((busy - 8.0).abs() < 1e-9, "{busy}");
        assert!((truth.busy_cores(&transformer, 8, 24, 0.8) - 6.4).abs() < 1e-9);
        // ResNet-18 saturates at 9 CPUs per GPU for 2.4x: at 1x it keeps 9 / 2.4 = 3.75 cores
        // busy, so 5 allocated cores are not all busy, but 3 are.
        let res18 = job(&truth, "ResNet-18 (batch size 32)", "res18");
        assert!((truth.busy_cores(&res18, 1, 5, 1.0) - 3.75).abs() < 1e-9);
        assert_eq!(truth.busy_cores(&res18, 1, 3, 1.0), 3.0);
        // The CPU work per unit of progress is constant: below the allocation, busy cores
        // scale with speed.
        let (a, b) = (truth.busy_cores(&res18, 1, 9, 1.2), truth.busy_cores(&res18, 1, 9, 0.6));
        assert!((a - 2.0 * b).abs() < 1e-9, "{a} vs {b}");
        // A job of no Synergy model keeps what it has busy (no profile to say otherwise).
        let mut unknown = res18.clone();
        unknown.synergy_model = None;
        assert_eq!(truth.busy_cores(&unknown, 8, 24, 1.0), 24.0);
    }
}
