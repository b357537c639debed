//! Everything the planner predicts with, in one place: GPU clock/power curves, pair
//! interference, CPU sensitivity, the carbon signal, node power, and what history taught about
//! how long jobs really run compared with their time limits.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::carbon::CarbonSignal;
use crate::data::DataError;
use crate::data::gavel::load_gavel;
use crate::data::synergy::load_synergy;
use crate::interference::InterferenceModel;
use crate::perf_power::{GpuCurves, PerfPowerModel, Prediction};
use crate::sensitivity::SensitivityModel;
use crate::workloads::{canonical_family, zeus_network};

/// Power of a node apart from its GPUs, and what waking it costs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodePower {
    /// CPUs, memory, fans, NICs of a powered-on node (W).
    pub base_w: f64,
    /// A node powered down by Slurm's power saving (BMC only, W).
    pub suspended_w: f64,
    /// Time from resume request to a usable node (s).
    pub resume_s: f64,
}

impl Default for NodePower {
    fn default() -> Self {
        NodePower { base_w: 250.0, suspended_w: 10.0, resume_s: 300.0 }
    }
}

/// What history taught: per user and per user and tag ([`crate::history`]). Kept under its old
/// name for the simulator, which learns run time against time limit through it.
pub type RuntimeHistory = crate::history::History;
pub use crate::history::PRIOR_RUNTIME_FRACTION;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Predictor {
    pub perf: PerfPowerModel,
    pub interference: InterferenceModel,
    pub sensitivity: Option<SensitivityModel>,
    pub carbon: Option<CarbonSignal>,
    pub node_power: NodePower,
    pub runtime: RuntimeHistory,
}

impl Predictor {
    /// Load and fit everything from a data directory laid out like `../shared/data`
    /// (`zeus/`, `gavel/`, `synergy/`). The carbon signal is attached separately.
    pub fn from_data_dir(dir: &Path, interference_gpu: &str) -> Result<Predictor, DataError> {
        let perf = PerfPowerModel::fit_from_dir(dir)?;
        let gavel = load_gavel(&dir.join("gavel").join("simulation_throughputs.json"))?;
        let interference = InterferenceModel::from_gavel(&gavel, interference_gpu);
        let synergy_path = dir.join("synergy").join("cpu_mem_sensitivity.csv");
        let sensitivity = if synergy_path.exists() { Some(SensitivityModel::new(load_synergy(&synergy_path)?)) } else { None };
        log::debug!(
            "predictor fitted from {}: GPU curves, pair interference ({interference_gpu}), CPU sensitivity {}",
            dir.display(),
            if sensitivity.is_some() { "from Synergy" } else { "absent (no synergy/ data)" }
        );
        Ok(Predictor { perf, interference, sensitivity, carbon: None, node_power: NodePower::default(), runtime: RuntimeHistory::default() })
    }

    pub fn curves(&self, gpu_type: &str) -> Option<&GpuCurves> {
        self.perf.curves(gpu_type)
    }

    /// Workload family of a tag, as the models name it.
    pub fn family(tag: Option<&str>) -> Option<String> {
        tag.map(canonical_family)
    }

    /// Prediction at clock step `step` of `gpu_type`; unknown GPU types run at their default
    /// clock at 75 % of their maximum power (no curve, no scaling).
    pub fn predict_clock(&self, gpu_type: &str, max_power_w: f64, family: Option<&str>, step: usize) -> Prediction {
        self.predict_class(gpu_type, max_power_w, family.and_then(zeus_network), step)
    }

    /// [`Predictor::predict_clock`] for a family already named by its Zeus class
    /// ([`zeus_network`]): for callers that predict many steps of one family, since naming the
    /// class allocates.
    pub fn predict_class(&self, gpu_type: &str, max_power_w: f64, class: Option<&str>, step: usize) -> Prediction {
        match self.curves(gpu_type) {
            Some(c) => c.predict(class, step),
            None => Prediction { time_ratio: 1.0, power_w: 0.75 * max_power_w },
        }
    }
}
