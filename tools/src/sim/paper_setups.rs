//! `slurm-energy paper-setup eaco|synergy`: each paper baseline in a setup like its paper's,
//! against the paper's own baseline, paired over seeds (issue 23: a reimplementation should show
//! its paper's headline effect in direction and rough size where its paper's conditions hold).
//!
//! - **eaco** (`etc/cluster-eaco-paper.toml`): 4 nodes of 8 V100s; single-GPU training jobs of
//!   the families the V100 logs measured alone (ResNet-18 and Transformer, about a quarter of
//!   their GPU used, and LM at 82 %), under the opt-in under-utilisation truth
//!   (`gpu_util.rs`); Poisson arrivals at [`EACO_LOAD`] of the GPUs, runtimes log-uniform in
//!   [`EACO_RUNTIME_S`]. Baseline: exclusive GPUs with Slurm's power saving (`slurm-powersave`,
//!   and `slurm` without). Operating point: the spec's sharing bound (1.15), so that the mean
//!   job runtime grows by about 3 % (EaCO: < 3.2 %). Paper: up to 39 % less total energy than
//!   existing algorithms on production traces.
//! - **synergy** (`etc/cluster-synergy-paper.toml`): Synergy's simulated cluster, 16 servers of
//!   8 GPUs, 24 CPUs and 500 GB; a loaded cluster ([`SYNERGY_LOAD`] of the GPUs offered while
//!   jobs arrive) where every CPU is handed out with the GPUs under proportional allocation;
//!   jobs of 1, 2, 4 or 8 GPUs ([`SYNERGY_GPU_MIX`]) of Gavel's held-out types of the families
//!   with a Synergy CPU profile ([`SYNERGY_FAMILIES`]: image, RL and GAN models that gain from
//!   CPUs, language models that do not), like Synergy's image/language/speech mix. Baseline: GPU-proportional CPUs (`slurm-powersave`, the same FIFO +
//!   EASY and power saving). Paper: up to 3.4x better mean JCT.
//!
//! The traces are generated per seed (arrivals, runtimes, GPU counts, types), so the intervals
//! cover the workload's randomness as well as the truth's draws.

use std::path::{Path, PathBuf};

use model::workloads::canonical_family;

use super::Workload;
use super::gpu_util;
use super::jobs::prepare;
use super::metrics::Metrics;
use super::policies::{Policy, Setup};
use super::rng::Rng;
use super::spec::{ClusterSpec, GpuUtilisation};
use super::stats::{Estimate, paired};
use super::truth::Truth;
use crate::trace::{Trace, TraceFormat, TraceJob};

pub const EACO_SPEC_TOML: &str = include_str!("../../../etc/cluster-eaco-paper.toml");
pub const SYNERGY_SPEC_TOML: &str = include_str!("../../../etc/cluster-synergy-paper.toml");

/// Offered load of the EaCO setup: GPU-seconds asked per second over the cluster's GPUs.
pub const EACO_LOAD: f64 = 0.6;
/// Runtimes of the EaCO setup's jobs alone, log-uniform between these (s).
pub const EACO_RUNTIME_S: (f64, f64) = (1800.0, 4.0 * 3600.0);
/// Families of the EaCO setup: those with a V100 log of their own (`gpu_util::SOLO_LOGS`).
pub const EACO_FAMILIES: [&str; 3] = ["resnet18", "transformer", "lm"];
/// Offered load of the Synergy setup while jobs arrive.
pub const SYNERGY_LOAD: f64 = 1.5;
/// Runtimes of the Synergy setup's jobs alone, log-uniform between these (s).
pub const SYNERGY_RUNTIME_S: (f64, f64) = (1800.0, 6.0 * 3600.0);
/// Families of the Synergy setup: Gavel's families with a Synergy CPU profile of their own
/// (`model::workloads::synergy_model`): CPU-sensitive ResNet-18, A3C (MobileNet's profile) and
/// CycleGAN (VAE's), and language models (Transformer, LM) that need few CPUs. Left out:
/// Recommendation (no profile) and ResNet-50 (flat beyond 4 CPUs per GPU).
pub const SYNERGY_FAMILIES: [&str; 5] = ["resnet18", "a3c", "cyclegan", "transformer", "lm"];
/// GPU counts of the Synergy setup's jobs and their shares (Philly-like: mostly one GPU).
pub const SYNERGY_GPU_MIX: [(u32, f64); 4] = [(1, 0.6), (2, 0.15), (4, 0.15), (8, 0.1)];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaperSetup {
    Eaco,
    Synergy,
}

impl PaperSetup {
    pub fn parse(s: &str) -> Result<PaperSetup, String> {
        match s {
            "eaco" | "eaco-paper" => Ok(PaperSetup::Eaco),
            "synergy" | "synergy-paper" => Ok(PaperSetup::Synergy),
            _ => Err(format!("unknown paper setup '{s}': allowed are eaco, synergy")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PaperSetup::Eaco => "eaco",
            PaperSetup::Synergy => "synergy",
        }
    }

    /// The setup's cluster spec (compiled in from `etc/`).
    pub fn spec(self) -> Result<ClusterSpec, String> {
        let (text, name) = match self {
            PaperSetup::Eaco => (EACO_SPEC_TOML, "etc/cluster-eaco-paper.toml"),
            PaperSetup::Synergy => (SYNERGY_SPEC_TOML, "etc/cluster-synergy-paper.toml"),
        };
        ClusterSpec::parse(text, Path::new(name)).map_err(|e| e.to_string())
    }

    /// The paper's policy, then its baselines (the first is the one the headline is paired with).
    pub fn policies(self) -> [Policy; 3] {
        match self {
            PaperSetup::Eaco => [Policy::Eaco, Policy::SlurmPowersave, Policy::Slurm],
            PaperSetup::Synergy => [Policy::Synergy, Policy::SlurmPowersave, Policy::Slurm],
        }
    }

    /// Jobs per seed when the caller does not say.
    pub fn default_jobs(self) -> usize {
        match self {
            PaperSetup::Eaco => 400,
            PaperSetup::Synergy => 600,
        }
    }
}

fn log_uniform(rng: &mut Rng, (lo, hi): (f64, f64)) -> f64 {
    (lo.ln() + (hi.ln() - lo.ln()) * rng.unit()).exp()
}

fn mean_log_uniform((lo, hi): (f64, f64)) -> f64 {
    (hi - lo) / (hi / lo).ln()
}

/// Poisson arrivals of `n` jobs offering `load` of `gpus` GPUs, given the jobs' mean GPU-seconds.
fn arrivals(rng: &mut Rng, n: usize, load: f64, gpus: f64, mean_gpu_s: f64) -> Vec<f64> {
    let rate_per_s = load * gpus / mean_gpu_s;
    let mut t = 0.0;
    (0..n)
        .map(|_| {
            let at = t;
            t += -(1.0 - rng.unit()).max(1e-12).ln() / rate_per_s;
            at
        })
        .collect()
}

fn job(line: usize, submit_time_s: f64, duration_s: f64, num_gpus: u32, job_type: Option<String>) -> TraceJob {
    TraceJob { line, submit_time_s, duration_s, num_gpus, job_type, user: None, num_cpus: None, mem_gb: None, priority: None }
}

/// The setup's trace for one seed: `n` jobs (module documentation).
pub fn trace(setup: PaperSetup, spec: &ClusterSpec, truth: &Truth, n: usize, seed: u64) -> Result<Trace, String> {
    let mut rng = Rng::derive(seed, 101);
    let gpus = (spec.cluster.nodes * spec.cluster.gpus_per_node) as f64;
    let jobs = match setup {
        PaperSetup::Eaco => {
            let types: Vec<&String> = truth.job_types().iter().filter(|t| EACO_FAMILIES.contains(&canonical_family(t).as_str())).collect();
            if types.is_empty() {
                return Err("no held-out Gavel job type of ResNet-18, Transformer or LM".into());
            }
            let at = arrivals(&mut rng, n, EACO_LOAD, gpus, mean_log_uniform(EACO_RUNTIME_S));
            at.into_iter().enumerate().map(|(i, s)| job(i + 2, s, log_uniform(&mut rng, EACO_RUNTIME_S), 1, Some(types[rng.below(types.len())].clone()))).collect()
        }
        PaperSetup::Synergy => {
            let types: Vec<&String> = truth.job_types().iter().filter(|t| SYNERGY_FAMILIES.contains(&canonical_family(t).as_str())).collect();
            if types.is_empty() {
                return Err("no held-out Gavel job type of a family with a Synergy CPU profile".into());
            }
            let mean_gpus: f64 = SYNERGY_GPU_MIX.iter().map(|(g, p)| *g as f64 * p).sum();
            let at = arrivals(&mut rng, n, SYNERGY_LOAD, gpus, mean_gpus * mean_log_uniform(SYNERGY_RUNTIME_S));
            at.into_iter()
                .enumerate()
                .map(|(i, s)| {
                    let duration = log_uniform(&mut rng, SYNERGY_RUNTIME_S);
                    let mut u = rng.unit();
                    let g = SYNERGY_GPU_MIX.iter().find(|(_, p)| {
                        u -= p;
                        u < 0.0
                    });
                    job(i + 2, s, duration, g.map_or(1, |g| g.0), Some(types[rng.below(types.len())].clone()))
                })
                .collect()
        }
    };
    Ok(Trace { format: TraceFormat::Generic, jobs, start_unix_s: None })
}

/// Per seed, each policy's metrics, in [`PaperSetup::policies`] order.
pub struct PaperRuns {
    pub setup: PaperSetup,
    pub seeds: Vec<u64>,
    pub jobs_per_seed: usize,
    pub gpu_utilisation: GpuUtilisation,
    pub sharing_max_slowdown: f64,
    pub names: Vec<String>,
    /// `[seed][policy]`.
    pub metrics: Vec<Vec<Metrics>>,
}

/// Run the setup under `seeds` seeds from `first_seed`, `jobs` jobs each.
///
/// `sharing_max_slowdown` overrides the spec's sharing bound (EaCO's operating point),
/// `gpu_utilisation` the spec's truth of solo GPU utilisation.
#[allow(clippy::too_many_arguments)]
pub fn run(setup: PaperSetup, data_dir: &Path, first_seed: u64, seeds: u64, jobs: usize, threads: usize, sharing_max_slowdown: Option<f64>, gpu_utilisation: Option<GpuUtilisation>) -> Result<PaperRuns, String> {
    let mut spec = setup.spec()?;
    if let Some(u) = gpu_utilisation {
        spec.truth.gpu_utilisation = u;
    }
    if let Some(b) = sharing_max_slowdown {
        if !(b.is_finite() && b >= 1.0) {
            return Err(format!("sharing bound {b}: must be a number >= 1"));
        }
        spec.planner.sharing_max_slowdown = b;
    }
    let mut truth = Truth::load(data_dir, &spec.cluster.gpu_type, spec.gpu.idle_power_w, spec.truth.colocation).map_err(|e| e.to_string())?;
    let mut predictor = truth.planner_predictor(data_dir).map_err(|e| e.to_string())?;
    if spec.truth.gpu_utilisation == GpuUtilisation::V100Logs {
        gpu_util::switch_on(&mut truth, &mut predictor, data_dir)?;
    }
    let scaling = truth.planner_scaling(data_dir).map_err(|e| e.to_string())?;
    let setups: Vec<Setup> = setup.policies().iter().filter_map(|p| Setup::for_policy(*p, &spec)).collect();
    let first = trace(setup, &spec, &truth, jobs, first_seed)?;
    let prepared = prepare(&first, &spec, &truth, first_seed);
    let mut w = Workload { spec, trace_path: PathBuf::from(format!("<{} paper setup>", setup.name())), trace: first, prepared, truth, predictor, scaling, carbon: None, power_cap: None };
    let mut metrics = Vec::new();
    let seed_list: Vec<u64> = (first_seed..first_seed + seeds).collect();
    for &seed in &seed_list {
        w.trace = trace(setup, &w.spec, &w.truth, jobs, seed)?;
        w.reseed(seed);
        let results = w.run_all(&setups, threads, false, "");
        let by_name: Vec<Metrics> = setups.iter().filter_map(|s| results.iter().find(|r| r.name == s.name).map(|r| r.metrics.clone())).collect();
        if by_name.len() != setups.len() {
            return Err(format!("seed {seed}: a policy's run is missing"));
        }
        metrics.push(by_name);
    }
    Ok(PaperRuns { setup, seeds: seed_list, jobs_per_seed: jobs, gpu_utilisation: w.spec.truth.gpu_utilisation, sharing_max_slowdown: w.spec.planner.sharing_max_slowdown, names: setups.iter().map(|s| s.name.clone()).collect(), metrics })
}

impl PaperRuns {
    /// One metric of policy `p` (index into `names`) over the seeds.
    pub fn values(&self, p: usize, f: impl Fn(&Metrics) -> f64) -> Vec<f64> {
        self.metrics.iter().map(|m| f(&m[p])).collect()
    }

    /// Per-seed ratio policy `a` / policy `b` of a metric.
    pub fn ratio(&self, a: usize, b: usize, f: impl Fn(&Metrics) -> f64 + Copy) -> Estimate {
        paired(&self.values(a, f), &self.values(b, f)).0
    }

    /// The table: each policy's means, then the paper policy against each baseline, paired.
    pub fn render(&self) -> String {
        let mut out = format!("paper setup {} (truth: GPU utilisation {}, sharing bound {}): {} seeds ({}..={}), {} jobs each; mean ± 95 % CI over seeds\n\n", self.setup.name(), match self.gpu_utilisation {
            GpuUtilisation::Full => "full",
            GpuUtilisation::V100Logs => "v100-logs",
        }, self.sharing_max_slowdown, self.seeds.len(), self.seeds.first().copied().unwrap_or(0), self.seeds.last().copied().unwrap_or(0), self.jobs_per_seed);
        out += &format!("{:<16} {:>16} {:>16} {:>16} {:>14} {:>10} {:>8}\n", "policy", "energy kWh", "mean JCT h", "mean slowdown", "shared/cpu starts", "requeues", "killed");
        for (p, name) in self.names.iter().enumerate() {
            let e = |f: fn(&Metrics) -> f64, d| Estimate::of(&self.values(p, f)).show(d);
            out += &format!(
                "{:<16} {:>16} {:>16} {:>16} {:>14} {:>10} {:>8}\n",
                name,
                e(|m| m.energy_kwh, 1),
                e(|m| m.mean_jct_s / 3600.0, 2),
                e(|m| m.mean_slowdown, 3),
                e(|m| m.shared_starts as f64 + m.cpu_resized_starts as f64, 0),
                e(|m| m.sharing_requeues as f64, 0),
                e(|m| m.killed_at_time_limit as f64, 0)
            );
        }
        out += "\npaired by seed (ratio of the paper's policy to the baseline, mean ± 95 % CI):\n";
        for b in 1..self.names.len() {
            let energy = self.ratio(0, b, |m| m.energy_kwh);
            let runtime = self.ratio(0, b, |m| m.mean_slowdown);
            let jct = self.ratio(0, b, |m| m.mean_jct_s);
            let speedup = self.ratio(b, 0, |m| m.mean_jct_s);
            out += &format!(
                "  {} vs {}: energy {} ({:+.1} %), mean runtime {}, mean JCT {} (baseline's over {}'s: {}x)\n",
                self.names[0],
                self.names[b],
                energy.show(3),
                (energy.mean - 1.0) * 100.0,
                runtime.show(3),
                jct.show(3),
                self.names[0],
                speedup.show(2)
            );
        }
        out
    }
}

/// `slurm-energy paper-setup`.
#[derive(clap::Args)]
pub struct PaperSetupArgs {
    /// `eaco`: EaCO's setup (under-utilised single-GPU training jobs under the opt-in
    /// under-utilisation truth, exclusive GPUs as the baseline, sharing bound 1.15;
    /// etc/cluster-eaco-paper.toml). `synergy`: Synergy's (16 servers x 8 GPUs, 24 CPUs,
    /// 500 GB, a loaded cluster of jobs of the families with a Synergy CPU profile,
    /// GPU-proportional CPUs as the baseline;
    /// etc/cluster-synergy-paper.toml). docs/results.md puts each beside its paper's figure.
    #[arg(value_parser = PaperSetup::parse)]
    pub setup: PaperSetup,
    /// Seeds (first, first+1, ...): each draws its own trace, job types and time limits.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Jobs per seed (default: 400 for eaco, 600 for synergy).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Measured data (default: $SLURM_ENERGY_DATA, else ../shared/data next to the project).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Worker threads (one policy per thread).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// The sharing bound (largest predicted slowdown of either job of a pair) instead of the
    /// spec's: EaCO's operating point (etc/cluster-eaco-paper.toml: 1.15).
    #[arg(long)]
    pub sharing_max_slowdown: Option<f64>,
    /// The truth's solo GPU utilisation instead of the spec's: `full` (every job keeps its GPU
    /// busy, the default truth) or `v100-logs` (per job type from the five V100 logs,
    /// tools/src/sim/gpu_util.rs; the eaco setup's).
    #[arg(long, value_parser = parse_gpu_utilisation)]
    pub gpu_utilisation: Option<GpuUtilisation>,
}

fn parse_gpu_utilisation(s: &str) -> Result<GpuUtilisation, String> {
    match s {
        "full" => Ok(GpuUtilisation::Full),
        "v100-logs" => Ok(GpuUtilisation::V100Logs),
        _ => Err(format!("unknown GPU utilisation truth '{s}': allowed are full, v100-logs")),
    }
}

/// Run `slurm-energy paper-setup` and print its table.
pub fn cli(a: PaperSetupArgs) -> Result<(), String> {
    let data = a.data.unwrap_or_else(model::data::default_data_dir);
    let runs = run(a.setup, &data, a.seed, a.seeds, a.jobs.unwrap_or(a.setup.default_jobs()), a.threads, a.sharing_max_slowdown, a.gpu_utilisation)?;
    print!("{}", runs.render());
    Ok(())
}
