//! The simulated cluster, read from TOML (`etc/cluster-*.toml`): its nodes, the power figures
//! that are assumptions rather than measurements, how users set time limits, the mix of energy
//! hints users give, and the planner configuration of the `energy` policy.
//!
//! Every assumption has a default here and a comment in `etc/cluster-philly.toml` that says
//! where it comes from.

use std::path::{Path, PathBuf};

use model::config::PlannerConfig;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSection {
    pub name: String,
    pub nodes: u32,
    pub gpus_per_node: u32,
    /// GPU type as the data sets name it (`v100`); ground truth exists for `v100`.
    pub gpu_type: String,
    pub cpus_per_node: u32,
    pub mem_gb_per_node: f64,
    /// What a job asks for per GPU when the trace does not say (`--cpus-per-gpu`,
    /// `--mem-per-gpu`); also the share Synergy's measurements are normalised to.
    pub job_cpus_per_gpu: u32,
    pub job_mem_gb_per_gpu: f64,
}

impl Default for ClusterSection {
    fn default() -> Self {
        ClusterSection {
            name: "philly-v100".into(),
            nodes: 64,
            gpus_per_node: 8,
            gpu_type: "v100".into(),
            cpus_per_node: 40,
            mem_gb_per_node: 512.0,
            job_cpus_per_gpu: 3,
            job_mem_gb_per_gpu: 62.5,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GpuSection {
    pub default_clock_mhz: u32,
    pub min_clock_mhz: u32,
    pub max_clock_mhz: u32,
    pub idle_power_w: f64,
    pub max_power_w: f64,
}

impl Default for GpuSection {
    fn default() -> Self {
        GpuSection { default_clock_mhz: 1530, min_clock_mhz: 135, max_clock_mhz: 1530, idle_power_w: 41.0, max_power_w: 250.0 }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PowerSection {
    /// A powered-on node with no busy core: CPUs idle, memory, fans, NICs (W).
    pub node_base_w: f64,
    /// Added per CPU core allocated to a running job (W).
    pub cpu_w_per_busy_core: f64,
    pub node_suspended_w: f64,
    pub resume_s: f64,
    /// Slurm's `SuspendTime`: idle time after which power saving suspends a node.
    pub suspend_after_idle_s: f64,
}

impl Default for PowerSection {
    fn default() -> Self {
        PowerSection { node_base_w: 250.0, cpu_w_per_busy_core: 5.0, node_suspended_w: 10.0, resume_s: 300.0, suspend_after_idle_s: 600.0 }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeLimitSection {
    /// Users over-estimate: limit = runtime x a factor drawn log-uniformly from this range (a
    /// factor below 1 is a user who under-estimates: Slurm kills the job at its limit) ...
    pub overestimate_min: f64,
    pub overestimate_max: f64,
    /// ... rounded up to the next of these popular values (s).
    pub round_up_to_s: Vec<f64>,
}

impl Default for TimeLimitSection {
    fn default() -> Self {
        let h = 3600.0;
        TimeLimitSection {
            overestimate_min: 1.0,
            overestimate_max: 5.0,
            round_up_to_s: vec![900.0, 1800.0, h, 2.0 * h, 4.0 * h, 8.0 * h, 12.0 * h, 24.0 * h, 48.0 * h, 72.0 * h, 168.0 * h, 336.0 * h, 720.0 * h, 1440.0 * h],
        }
    }
}

/// Which hints users give (drawn per job, seeded). Applies to the `energy` policy; the papers'
/// policies ignore hints and apply their own rules.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HintMix {
    pub performance: f64,
    pub efficiency: f64,
    /// Fraction of non-performance jobs that allow GPU sharing (accepting the planner's
    /// `sharing_max_slowdown`).
    pub share_allowed: f64,
    /// Fraction of non-performance jobs that allow a deferred start, and by how much.
    pub deferrable: f64,
    pub defer_s: f64,
    /// Fraction of jobs that tag their workload (`--energy-tag`).
    pub tagged: f64,
    /// Fraction of jobs whose CPU count the scheduler may choose (Synergy), within
    /// [request / 2, request x 3].
    pub cpu_flexible: f64,
}

impl Default for HintMix {
    fn default() -> Self {
        HintMix { performance: 0.1, efficiency: 0.3, share_allowed: 0.5, deferrable: 0.1, defer_s: 4.0 * 3600.0, tagged: 0.8, cpu_flexible: 0.8 }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CarbonSection {
    /// Carbon-intensity CSV, relative to the data directory unless absolute.
    pub file: String,
}

impl Default for CarbonSection {
    fn default() -> Self {
        CarbonSection { file: "carbon/gb_ci.csv".into() }
    }
}

/// PowerFlow's and GreenFlow's re-allocation of running jobs: the pause of one checkpoint and
/// restart at a new GPU count (`model::elastic::RestartCost`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ElasticSection {
    /// Fixed part of the pause (s): save the state, stop, restart on the new GPUs, load it.
    pub restart_fixed_s: f64,
    /// Added per GPU of the larger of the two allocations (s): processes and communicators.
    pub restart_per_gpu_s: f64,
}

impl Default for ElasticSection {
    fn default() -> Self {
        ElasticSection { restart_fixed_s: 60.0, restart_per_gpu_s: 5.0 }
    }
}

impl ElasticSection {
    pub fn restart(&self) -> model::elastic::RestartCost {
        model::elastic::RestartCost { fixed_s: self.restart_fixed_s, per_gpu_s: self.restart_per_gpu_s }
    }
}

/// Which of Gavel's two throughput files is the ground truth of co-location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Colocation {
    /// `physical_cluster_throughputs.json`: measured on Gavel's physical cluster (median pair
    /// sum 1.09 on V100).
    #[default]
    Physical,
    /// `simulation_throughputs.json`: the table Gavel's simulator uses (median pair sum 1.37).
    Simulated,
}

impl Colocation {
    pub fn parse(s: &str) -> Result<Colocation, String> {
        match s {
            "physical" => Ok(Colocation::Physical),
            "simulated" => Ok(Colocation::Simulated),
            _ => Err(format!("unknown co-location truth '{s}': allowed are physical, simulated")),
        }
    }

    pub fn file_name(self) -> &'static str {
        match self {
            Colocation::Physical => "physical_cluster_throughputs.json",
            Colocation::Simulated => "simulation_throughputs.json",
        }
    }
}

/// How the simulator's ground truth is kept apart from the planner's predictions.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TruthSection {
    pub colocation: Colocation,
    /// Relative noise (standard deviation of a log-normal factor) of the slowdowns the planner
    /// observes in the first minutes of a shared run.
    pub observation_noise: f64,
    /// Spread (standard deviation of a log-normal factor) of a job's own CPU sensitivity
    /// around its model's Synergy profile: the gain from extra CPUs differs per job.
    pub cpu_sensitivity_noise: f64,
    /// Whether jobs use their GPU fully (`full`, the default) or as the V100 logs of five
    /// single training jobs say (`v100-logs`: `tools/src/sim/gpu_util.rs`, opt-in).
    pub gpu_utilisation: GpuUtilisation,
}

/// The truth's solo GPU utilisation of a job ([`TruthSection::gpu_utilisation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub enum GpuUtilisation {
    /// Every job keeps its GPU busy (as before issue 23).
    #[default]
    #[serde(rename = "full")]
    Full,
    /// Per job type from `v100-colocation/*_alone.csv` (`gpu_util.rs`).
    #[serde(rename = "v100-logs")]
    V100Logs,
}

impl Default for TruthSection {
    fn default() -> Self {
        TruthSection { colocation: Colocation::Physical, observation_noise: 0.05, cpu_sensitivity_noise: 0.3, gpu_utilisation: GpuUtilisation::Full }
    }
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSpec {
    pub cluster: ClusterSection,
    pub gpu: GpuSection,
    pub power: PowerSection,
    pub time_limits: TimeLimitSection,
    pub hints: HintMix,
    pub carbon: CarbonSection,
    pub truth: TruthSection,
    pub elastic: ElasticSection,
    /// Planner configuration of the `energy` policy (the same tables as `energy.toml`).
    pub planner: PlannerConfig,
}

/// The spec used for `docs/results.md`, compiled in so that `--cluster` may be omitted.
pub const DEFAULT_SPEC_TOML: &str = include_str!("../../../etc/cluster-philly.toml");
pub const DEFAULT_SPEC_NAME: &str = "etc/cluster-philly.toml";

#[derive(Debug)]
pub struct SpecError {
    pub path: PathBuf,
    pub reason: String,
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

impl std::error::Error for SpecError {}

impl ClusterSpec {
    pub fn parse(text: &str, path: &Path) -> Result<ClusterSpec, SpecError> {
        let spec: ClusterSpec = toml::from_str(text).map_err(|e| SpecError { path: path.to_path_buf(), reason: e.to_string().trim_end().to_string() })?;
        spec.validate().map_err(|reason| SpecError { path: path.to_path_buf(), reason })?;
        Ok(spec)
    }

    pub fn load(path: Option<&Path>) -> Result<ClusterSpec, SpecError> {
        match path {
            None => ClusterSpec::parse(DEFAULT_SPEC_TOML, Path::new(DEFAULT_SPEC_NAME)),
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| SpecError { path: p.to_path_buf(), reason: format!("cannot read: {e}") })?;
                ClusterSpec::parse(&text, p)
            }
        }
    }

    fn validate(&self) -> Result<(), String> {
        let c = &self.cluster;
        if c.nodes == 0 || c.gpus_per_node == 0 || c.gpus_per_node > 64 {
            return Err("cluster.nodes must be >= 1 and cluster.gpus_per_node in 1..=64".into());
        }
        if c.cpus_per_node == 0 || c.mem_gb_per_node <= 0.0 {
            return Err("cluster.cpus_per_node and cluster.mem_gb_per_node must be positive".into());
        }
        if c.job_cpus_per_gpu == 0 || c.job_cpus_per_gpu * c.gpus_per_node > c.cpus_per_node {
            return Err("cluster.job_cpus_per_gpu must be >= 1 and fit gpus_per_node times into cpus_per_node".into());
        }
        if !(c.job_mem_gb_per_gpu > 0.0 && c.job_mem_gb_per_gpu * c.gpus_per_node as f64 <= c.mem_gb_per_node) {
            return Err("cluster.job_mem_gb_per_gpu must be > 0 and fit gpus_per_node times into mem_gb_per_node".into());
        }
        let g = &self.gpu;
        if !(g.min_clock_mhz <= g.default_clock_mhz && g.default_clock_mhz <= g.max_clock_mhz) {
            return Err("gpu: need min_clock_mhz <= default_clock_mhz <= max_clock_mhz".into());
        }
        if !(g.idle_power_w >= 0.0 && g.max_power_w > g.idle_power_w) {
            return Err("gpu: need 0 <= idle_power_w < max_power_w".into());
        }
        let p = &self.power;
        for (k, v) in [("power.node_base_w", p.node_base_w), ("power.cpu_w_per_busy_core", p.cpu_w_per_busy_core), ("power.node_suspended_w", p.node_suspended_w), ("power.resume_s", p.resume_s), ("power.suspend_after_idle_s", p.suspend_after_idle_s)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{k} must be a finite number >= 0"));
            }
        }
        let el = &self.elastic;
        for (k, v) in [("elastic.restart_fixed_s", el.restart_fixed_s), ("elastic.restart_per_gpu_s", el.restart_per_gpu_s)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{k} must be a finite number >= 0"));
            }
        }
        let tr = &self.truth;
        for (k, v) in [("truth.observation_noise", tr.observation_noise), ("truth.cpu_sensitivity_noise", tr.cpu_sensitivity_noise)] {
            if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
                return Err(format!("{k} must be in 0..=1"));
            }
        }
        let t = &self.time_limits;
        if !(t.overestimate_min > 0.0 && t.overestimate_max >= t.overestimate_min && t.overestimate_max.is_finite()) {
            return Err("time_limits: need 0 < overestimate_min <= overestimate_max".into());
        }
        if t.round_up_to_s.is_empty() || t.round_up_to_s.windows(2).any(|w| w[0] >= w[1]) {
            return Err("time_limits.round_up_to_s must be a non-empty ascending list".into());
        }
        let h = &self.hints;
        for (k, v) in [("hints.performance", h.performance), ("hints.efficiency", h.efficiency), ("hints.share_allowed", h.share_allowed), ("hints.deferrable", h.deferrable), ("hints.tagged", h.tagged), ("hints.cpu_flexible", h.cpu_flexible)] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{k} must be a fraction in [0, 1]"));
            }
        }
        if h.performance + h.efficiency > 1.0 {
            return Err("hints.performance + hints.efficiency must be at most 1".into());
        }
        self.planner.validate().map_err(|e| format!("planner.{e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_spec_parses() {
        let s = ClusterSpec::load(None).expect("default spec");
        assert!(s.cluster.nodes > 0);
    }

    #[test]
    fn errors_name_the_line_and_key() {
        let e = ClusterSpec::parse("[cluster]\nnodes = 4\nbogus = 1\n", Path::new("x.toml")).unwrap_err();
        assert!(e.to_string().contains("line 3"), "{e}");
        assert!(e.to_string().contains("bogus"), "{e}");
        let e = ClusterSpec::parse("[hints]\nefficiency = 2.0\n", Path::new("x.toml")).unwrap_err();
        assert!(e.to_string().contains("hints.efficiency"), "{e}");
    }
}
