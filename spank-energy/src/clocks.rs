//! The remote side: GPU clocks for every step of a job, batch script included.
//!
//! slurmstepd calls the plugin (as root, before the tasks start) in `slurm_spank_init_post_opt`
//! and again in `slurm_spank_exit` after they ended. This module decides what the step asks
//! for and hands it to the node's clock arbiter ([`gpu_control::arbiter`]), which applies the
//! highest request among the steps on each GPU and restores the default when the last leaves.
//!
//! What a step asks for, first match wins:
//! 1. an explicit `--gpu-freq` (`SLURM_GPU_FREQ` in the step's environment: `sbatch` and
//!    `salloc` set it from the option, and `srun` inside the job passes it on), or the plugin's
//!    own `--energy-gpu-freq` (same grammar, also allowed with `gres/shard`, where Slurm refuses
//!    `--gpu-freq`), resolved with stock Slurm's rules ([`gpu_control::gpu_freq`]). A bare
//!    `srun --gpu-freq` outside a batch job reaches slurmstepd only as the step's `tres_freq`,
//!    which SPANK cannot read: the bundle's GPU plugin (`gpu_nvml.so`) asks the arbiter for it;
//! 2. the clock sched/energy chose for the job: it travels with the job in its SPANK environment
//!    and the plugin's job prolog keeps it on the node ([`crate::job_clock`]); no call to
//!    slurmctld per step (`sched_decision=off` ignores it);
//! 3. the job's hints (`--energy-*`, over the defaults of `[planner.hints]` in energy.toml) and
//!    the model: the planner is asked where this job would start on an idle node of this GPU
//!    type, and its decision's clock is taken ([`PolicyModel::clock_mhz`]).
//!
//! A policy clock is never above the GPU's default application clock (an energy policy must not
//! make a GPU run hotter than it would without the bundle) and is rounded up to a clock the GPU
//! supports. The step's GPUs are `SLURM_JOB_GPUS` (batch step) or `SLURM_STEP_GPUS` (other
//! steps): Slurm's GPU indices, taken as NVML indices (true with `AutoDetect=nvml`, and with a
//! hand-written gres.conf that lists `/dev/nvidia0..N` in order). Shard steps carry the same
//! variables for the GPU their shards are on.
//!
//! Nothing here may fail a step: every problem is returned for the caller to log.

use crate::job_clock::JobDecision;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gpu_control::arbiter::ledger_dir_from_env;
use gpu_control::gpu_freq::{FreqValue, GpuFreqRequest, SLURM_DEFAULT_GPU_FREQ_DEF, parse_gpu_freq, resolve_application_clocks, resolve_freq_mhz};
use gpu_control::{AppClocksMhz, GpuControl, GpuError};
use model::config::{HintDefaults, PlannerConfig};
use gpu_control::clock_control::Setting;
use model::perf_power::PerfPowerModel;
use model::predictor::Predictor;
use model::types::{EnergyPolicy, GpuType, Hints, JobId, Node, PendingJob, PowerState, Request, Snapshot};

/// `SLURM_BATCH_SCRIPT`
pub const BATCH_STEP: u32 = 0xffff_fffb;
/// `SLURM_EXTERN_CONT`: the job's container step; it has no tasks that use GPUs.
pub const EXTERN_STEP: u32 = 0xffff_fffc;

/// plugstack.conf keys of this module.
pub const ARG_KEYS: [&str; 6] = ["gpu_clocks", "clock_ledger", "nvml", "data_dir", "energy_config", "sched_decision"];

/// The plugin's clock settings (plugstack.conf arguments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockArgs {
    /// `gpu_clocks=on|off` (default on).
    pub enabled: bool,
    /// `clock_ledger=DIR`; default `$SLURM_ENERGY_CLOCK_LEDGER` of slurmd's environment, else
    /// `/var/spool/slurm-energy/clock-ledger` (what the GPU plugin uses too: they must agree).
    pub ledger_dir: PathBuf,
    /// `nvml=PATH` of libnvidia-ml.so (default: the loader's search path).
    pub nvml_lib: Option<PathBuf>,
    /// `data_dir=DIR` with the model's measured data (`zeus/`); default `[sched] data_dir` of
    /// energy.toml. Without data the model has no clock curves and the policy clock is the
    /// default clock.
    pub data_dir: Option<PathBuf>,
    /// `energy_config=PATH` (default `energy.toml` next to slurm.conf).
    pub energy_config: Option<PathBuf>,
    /// `sched_decision=on|off` (default on): use the clock sched/energy chose for the job (kept
    /// on the node by the job prolog) when the step has no explicit clock.
    pub sched_decision: bool,
}

impl Default for ClockArgs {
    fn default() -> Self {
        ClockArgs { enabled: true, ledger_dir: ledger_dir_from_env(), nvml_lib: None, data_dir: None, energy_config: None, sched_decision: true }
    }
}

impl ClockArgs {
    /// Reads this module's keys from the plugin's arguments; other keys are left to the caller.
    pub fn parse<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<ClockArgs, String> {
        let mut c = ClockArgs::default();
        for arg in args {
            let (key, value) = arg.split_once('=').unwrap_or((arg, ""));
            let path = || -> Result<PathBuf, String> {
                if value.starts_with('/') {
                    Ok(PathBuf::from(value))
                } else {
                    Err(format!("plugstack.conf argument '{arg}': {key} takes an absolute path"))
                }
            };
            match key {
                "gpu_clocks" | "sched_decision" => {
                    let on = match value {
                        "on" | "yes" | "1" => true,
                        "off" | "no" | "0" => false,
                        _ => return Err(format!("plugstack.conf argument '{arg}': {key} takes on or off")),
                    };
                    if key == "gpu_clocks" {
                        c.enabled = on;
                    } else {
                        c.sched_decision = on;
                    }
                }
                "clock_ledger" => c.ledger_dir = path()?,
                "nvml" => c.nvml_lib = Some(path()?),
                "data_dir" => c.data_dir = Some(path()?),
                "energy_config" => c.energy_config = Some(path()?),
                _ => {}
            }
        }
        Ok(c)
    }
}

/// A step's environment as `KEY=VALUE` pairs.
#[derive(Debug, Clone, Default)]
pub struct StepEnv {
    vars: BTreeMap<String, String>,
}

impl StepEnv {
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = &'a str>) -> StepEnv {
        let vars = entries.into_iter().filter_map(|e| e.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect();
        StepEnv { vars }
    }

    /// Adds or replaces one variable.
    pub fn set(&mut self, key: &str, value: &str) {
        self.vars.insert(key.to_string(), value.to_string());
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.vars.get(key).map(String::as_str)
    }

    /// Slurm GPU indices of the step: `SLURM_JOB_GPUS` for the batch step, `SLURM_STEP_GPUS`
    /// for the others (which inherit the batch step's `SLURM_JOB_GPUS`). Items may be ranges
    /// (`0-2`); anything unparsable is skipped.
    pub fn gpus(&self, step_id: u32) -> Vec<u32> {
        let var = if step_id == BATCH_STEP { "SLURM_JOB_GPUS" } else { "SLURM_STEP_GPUS" };
        let mut out = Vec::new();
        for item in self.get(var).unwrap_or_default().split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let range = match item.split_once('-') {
                Some((a, b)) => a.parse::<u32>().ok().zip(b.parse::<u32>().ok()),
                None => item.parse::<u32>().ok().map(|a| (a, a)),
            };
            if let Some((a, b)) = range {
                // A bound on the range keeps a malformed value from allocating without limit.
                for g in a..=b.min(a.saturating_add(1024)) {
                    if !out.contains(&g) {
                        out.push(g);
                    }
                }
            }
        }
        out
    }

    /// The user's `--gpu-freq` (`SLURM_GPU_FREQ`), else `--energy-gpu-freq`, if any.
    pub fn explicit_gpu_freq(&self) -> Option<String> {
        self.get("SLURM_GPU_FREQ")
            .map(str::to_string)
            .or_else(|| self.hint_values().remove("gpu_freq"))
            .filter(|v| !v.trim().is_empty())
    }

    /// The job's `--energy-*` values, by option name without the `energy-` prefix
    /// (`policy`, `max_slowdown`, ...), as the step sees them in its SPANK environment.
    pub fn hint_values(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (k, v) in &self.vars {
            let Some(pos) = k.find("_SLURM_SPANK_OPTION_energy_") else { continue };
            let opt = &k[pos + "_SLURM_SPANK_OPTION_energy_".len()..];
            let opt = opt.strip_prefix("energy_").unwrap_or(opt);
            out.insert(opt.to_string(), v.clone());
        }
        out
    }

    /// The step's node name: `SLURMD_NODENAME`, else `SLURM_TOPOLOGY_ADDR` (slurmstepd sets it
    /// to the node's name without a topology plugin), else the host name.
    pub fn node_name(&self) -> String {
        self.get("SLURMD_NODENAME")
            .or_else(|| self.get("SLURM_TOPOLOGY_ADDR"))
            .map(str::to_string)
            .filter(|n| !n.is_empty() && !n.contains(char::is_whitespace))
            .unwrap_or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "localhost".into()))
    }
}

/// Hints from option values (`policy` -> `efficiency`, ...) over the site's defaults. A bad
/// value (the submit side rejects them, so only a hand-made environment has one) is ignored.
pub fn hints_from_values(values: &BTreeMap<String, String>, defaults: &HintDefaults) -> Hints {
    let get = |k: &str| values.get(k).map(|v| v.trim());
    let policy = get("policy").and_then(|v| v.parse::<EnergyPolicy>().ok()).unwrap_or(defaults.policy);
    let max_slowdown = get("max_slowdown")
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 1.0)
        .unwrap_or_else(|| defaults.slowdown_for(policy))
        .min(defaults.max_slowdown_limit);
    let share_allowed = match get("share") {
        Some("allow") => true,
        Some("deny") => false,
        _ => defaults.share_allowed,
    };
    Hints {
        policy,
        max_slowdown,
        share_allowed,
        defer_max_s: 0.0,
        // The client's rule: the environment may not come from the client (model::tag).
        tag: get("tag").filter(|t| model::tag::valid_tag(t)).map(str::to_string),
    }
}

/// The planner and its models as the step needs them.
#[derive(Debug, Clone, Default)]
pub struct PolicyModel {
    pub planner: PlannerConfig,
    pub predictor: Predictor,
    /// Measured data; the clock curves of a GPU type are fitted from it when first needed (a
    /// step needs one type, and fitting all of them would double its start-up cost).
    pub data_dir: Option<PathBuf>,
    /// Where the configuration came from, for logs.
    pub source: String,
}

impl PolicyModel {
    /// energy.toml's `[planner]` (defaults where the file or the table is missing) and the
    /// clock curves fitted from the data directory (none without one). An error names the file.
    pub fn load(args: &ClockArgs) -> Result<PolicyModel, String> {
        let config_path = args.energy_config.clone().unwrap_or_else(default_energy_config);
        let mut planner = PlannerConfig::default();
        let mut data_dir = args.data_dir.clone();
        let mut source = String::from("built-in defaults");
        match std::fs::read_to_string(&config_path) {
            Ok(text) => {
                let doc: toml::Table = text.parse().map_err(|e| format!("{}: {e}", config_path.display()))?;
                if let Some(p) = doc.get("planner") {
                    planner = p.clone().try_into().map_err(|e| format!("{}: [planner]: {e}", config_path.display()))?;
                }
                if data_dir.is_none()
                    && let Some(d) = doc.get("sched").and_then(|s| s.get("data_dir")).and_then(|d| d.as_str())
                {
                    data_dir = Some(PathBuf::from(d));
                }
                source = config_path.display().to_string();
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && args.energy_config.is_none() => {}
            Err(e) => return Err(format!("{}: {e}", config_path.display())),
        }
        if let Some(dir) = &data_dir {
            if !dir.join("zeus").is_dir() {
                return Err(format!("data_dir {}: no zeus/ directory with the clock/power sweeps", dir.display()));
            }
            source.push_str(&format!(", data {}", dir.display()));
        }
        Ok(PolicyModel { planner, predictor: Predictor::default(), data_dir, source })
    }

    /// The model with the curves of `gpu_type` fitted from the data directory, when it has
    /// sweeps for that type; `None` when there is nothing to add.
    fn with_curves_for(&self, gpu_type: &str) -> Option<Predictor> {
        if self.predictor.curves(gpu_type).is_some() {
            return None;
        }
        let dir = self.data_dir.as_ref()?;
        // Measured sweeps, or the stand-in's for A100/H100 (model::perf_power::STAND_INS).
        let curves = PerfPowerModel::fit_type(dir, gpu_type).ok()??;
        let mut predictor = self.predictor.clone();
        predictor.perf = PerfPowerModel { gpus: vec![curves] };
        Some(predictor)
    }

    /// The clock (MHz) the planner would give a job with `hints` and `gpus` GPUs of
    /// `gpu_type` on an idle node: the same planner sched/energy runs.
    pub fn clock_mhz(&self, hints: &Hints, gpu_type: &GpuType, gpus: u32) -> u32 {
        self.clock_and_power_frac(hints, gpu_type, gpus).0
    }

    /// The planner's clock (MHz) and, when it chose a step of a measured power-limit ladder,
    /// that step's limit as a fraction of the ladder's top (model::perf_power's units): applied
    /// as that fraction of the GPU's default limit where the GPU is controlled by its limit.
    pub fn clock_and_power_frac(&self, hints: &Hints, gpu_type: &GpuType, gpus: u32) -> (u32, Option<f64>) {
        let gpus = gpus.max(1);
        let job = PendingJob {
            id: JobId(1),
            user: 0,
            priority: 1,
            submit_time_s: 0.0,
            request: Request { nodes: 1, gpus_per_node: gpus, cpus_per_node: 1, mem_mb_per_node: 0 },
            time_limit_s: 3600.0,
            hints: Hints { defer_max_s: 0.0, ..hints.clone() },
            cpus_range: None,
            eligible: Vec::new(),
            placed_by_slurm: false,
            alternative: false,
            no_reservation: false,
            slurm_may_spread: false,
        };
        let node = Node { name: "step".into(), gpu_type: 0, gpus, cpus: 1, mem_mb: 0, power: PowerState::On, available: true };
        let snapshot = Snapshot { now_s: 0.0, gpu_types: vec![gpu_type.clone()], nodes: vec![node], running: Vec::new(), pending: vec![job], node_sets: Vec::new(), reservations: Vec::new() };
        let fitted = self.with_curves_for(&gpu_type.name);
        let predictor = fitted.as_ref().unwrap_or(&self.predictor);
        let outcome = model::planner::plan_snapshot(&snapshot, &self.planner, predictor);
        let top_w = predictor.curves(&gpu_type.name).map(|c| c.top_power_limit_w()).filter(|w| *w > 0.0);
        outcome
            .starts()
            .next()
            .map_or((gpu_type.default_clock_mhz, None), |d| (d.clock_mhz, top_w.map(|top| (d.power_limit_w / top).clamp(0.0, 1.0))))
    }
}

/// `energy.toml` next to slurm.conf (`$SLURM_CONF`, else `/etc/slurm/slurm.conf`).
pub fn default_energy_config() -> PathBuf {
    let conf = std::env::var_os("SLURM_CONF").map_or_else(|| PathBuf::from("/etc/slurm/slurm.conf"), PathBuf::from);
    conf.parent().unwrap_or(Path::new("/etc/slurm")).join("energy.toml")
}

/// The model's GPU type name for an NVML product name (`Tesla V100-SXM2-32GB` -> `v100`), or
/// the lower-cased name itself when the model has no curves for it.
pub fn gpu_type_name(nvml_name: &str) -> String {
    let flat: String = nvml_name.to_ascii_lowercase().chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    PerfPowerModel::known_types()
        .find(|name| flat.contains(name))
        .map_or_else(|| nvml_name.to_ascii_lowercase(), str::to_string)
}

/// The model's view of GPU `index`: name, default/min/max clocks and power from NVML.
pub fn gpu_type_of(gpu: &dyn GpuControl, index: u32) -> Result<GpuType, GpuError> {
    let name = gpu_type_name(&gpu.name(index)?);
    let defaults = gpu.default_application_clocks_mhz(index)?;
    let graphics = gpu.supported_graphics_clocks_mhz(index, defaults.memory_mhz)?;
    let max_power_w = f64::from(gpu.default_power_limit_mw(index)?) / 1000.0;
    Ok(GpuType {
        name,
        default_clock_mhz: defaults.graphics_mhz,
        min_clock_mhz: graphics.iter().copied().min().unwrap_or(defaults.graphics_mhz),
        max_clock_mhz: graphics.iter().copied().max().unwrap_or(defaults.graphics_mhz),
        idle_power_w: 0.15 * max_power_w,
        max_power_w,
    })
}

/// Application clocks for a policy clock on GPU `index`: the default memory clock and the
/// supported graphics clock at or above `clock_mhz`, never above the default graphics clock.
pub fn policy_clocks(gpu: &dyn GpuControl, index: u32, clock_mhz: u32) -> Result<AppClocksMhz, GpuError> {
    let defaults = gpu.default_application_clocks_mhz(index)?;
    let supported = gpu.supported_graphics_clocks_mhz(index, defaults.memory_mhz)?;
    let wanted = clock_mhz.min(defaults.graphics_mhz);
    let graphics_mhz = resolve_freq_mhz(FreqValue::Mhz(wanted), &supported).unwrap_or(defaults.graphics_mhz).min(defaults.graphics_mhz);
    Ok(AppClocksMhz { memory_mhz: defaults.memory_mhz, graphics_mhz })
}

/// Application clocks for an explicit `--gpu-freq` on GPU `index` (stock Slurm's rules; what
/// the request leaves out comes from Slurm's default `high,memory=high`).
pub fn explicit_clocks(gpu: &dyn GpuControl, index: u32, request: &GpuFreqRequest) -> Result<AppClocksMhz, GpuError> {
    resolve_application_clocks(&request.or_defaults(&SLURM_DEFAULT_GPU_FREQ_DEF), gpu, index)
}

/// Where a step's clock comes from, for logs.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    /// `--gpu-freq=<spec>`.
    Explicit(GpuFreqRequest, String),
    /// sched/energy's recorded decision: its clock, and the power limit of the ladder step it
    /// chose (applied as it is by a GPU controlled by its power limit).
    Decision(JobDecision),
    /// The job's hints through the model.
    Hints(Hints),
}

impl Choice {
    pub fn describe(&self) -> String {
        match self {
            Choice::Explicit(_, spec) => format!("--gpu-freq={spec}"),
            // The limit, where the decision has one, is logged where a GPU applies it.
            Choice::Decision(JobDecision { clock_mhz, .. }) => format!("sched/energy decision {clock_mhz} MHz"),
            Choice::Hints(h) => format!("policy {} (max slowdown {:.2})", h.policy.as_str(), h.max_slowdown),
        }
    }
}

/// The step's choice from its environment and sched/energy's decision for the job (`decision`,
/// from the node's record, never from the environment the user controls); a `--gpu-freq` that
/// does not parse (srun checks it, so only a hand-made environment has one) is reported and the
/// policy used instead.
pub fn choose(env: &StepEnv, decision: Option<JobDecision>, defaults: &HintDefaults) -> (Choice, Option<String>) {
    let mut problem = None;
    if let Some(spec) = env.explicit_gpu_freq() {
        match parse_gpu_freq(&spec) {
            Ok(req) if req.graphics.is_some() || req.memory.is_some() => return (Choice::Explicit(req, spec), None),
            Ok(_) => {}
            Err(e) => problem = Some(e.to_string()),
        }
    }
    if let Some(decision) = decision {
        return (Choice::Decision(decision), problem);
    }
    (Choice::Hints(hints_from_values(&env.hint_values(), defaults)), problem)
}

/// Per-GPU clocks of a step. GPUs whose clocks cannot be worked out are left out, with their
/// errors. The model is asked once per GPU model name (NVML calls are cheap on real drivers but
/// not free, and nodes are usually uniform).
pub fn step_clocks(gpu: &dyn GpuControl, gpus: &[u32], choice: &Choice, model: Option<&PolicyModel>) -> (Vec<(u32, AppClocksMhz)>, Vec<GpuError>) {
    let (settings, errors) = step_settings(gpu, gpus, choice, model);
    (settings.into_iter().map(|(g, s)| (g, s.clocks_mhz)).collect(), errors)
}

/// [`step_clocks`] with the planner's power limit where it chose a ladder step (hints through
/// the model): the step's fraction of the ladder's top times this GPU's default limit.
pub fn step_settings(gpu: &dyn GpuControl, gpus: &[u32], choice: &Choice, model: Option<&PolicyModel>) -> (Vec<(u32, Setting)>, Vec<GpuError>) {
    let mut clocks = Vec::new();
    let mut errors = Vec::new();
    let mut by_name: BTreeMap<String, (AppClocksMhz, Option<f64>)> = BTreeMap::new();
    for &index in gpus {
        let result = match choice {
            Choice::Explicit(req, _) => explicit_clocks(gpu, index, req).map(Setting::clocks),
            // The planner's limit, where it chose one, as it is: the arbiter applies it on a GPU
            // controlled by its power limit (clamped to the GPU's range), the clock elsewhere.
            Choice::Decision(d) => policy_clocks(gpu, index, d.clock_mhz).map(|c| Setting { clocks_mhz: c, power_limit_mw: d.power_limit_mw }),
            Choice::Hints(hints) => gpu.name(index).and_then(|name| {
                let (c, frac) = match by_name.get(&name) {
                    Some(c) => *c,
                    None => {
                        let c = gpu_type_of(gpu, index).and_then(|gt| {
                            let (mhz, frac) = model.map_or((gt.default_clock_mhz, None), |m| m.clock_and_power_frac(hints, &gt, gpus.len() as u32));
                            Ok((policy_clocks(gpu, index, mhz)?, frac))
                        })?;
                        by_name.insert(name, c);
                        c
                    }
                };
                let power_limit_mw = match frac {
                    Some(f) => Some((f64::from(gpu.default_power_limit_mw(index)?) * f).round() as u32),
                    None => None,
                };
                Ok(Setting { clocks_mhz: c, power_limit_mw })
            }),
        };
        match result {
            Ok(c) => clocks.push((index, c)),
            Err(e) => errors.push(e),
        }
    }
    (clocks, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_control::FakeGpus;

    fn env(entries: &[&str]) -> StepEnv {
        StepEnv::from_entries(entries.iter().copied())
    }

    #[test]
    fn step_gpus_from_the_right_variable() {
        let e = env(&["SLURM_JOB_GPUS=0,2", "SLURM_STEP_GPUS=1-3", "CUDA_VISIBLE_DEVICES=0"]);
        assert_eq!(e.gpus(BATCH_STEP), vec![0, 2]);
        assert_eq!(e.gpus(0), vec![1, 2, 3]);
        assert!(env(&["SLURM_JOB_GPUS=0"]).gpus(0).is_empty(), "an srun step without GPUs inherits only the job's list");
        assert_eq!(env(&["SLURM_STEP_GPUS=x,1,,1"]).gpus(3), vec![1]);
    }

    #[test]
    fn explicit_beats_decision_beats_hints() {
        let d = HintDefaults::default();
        let decided = JobDecision { clock_mhz: 945, power_limit_mw: None };
        let e = env(&["SLURM_GPU_FREQ=low", "SLURM_SPANK__SLURM_SPANK_OPTION_energy_energy_policy=efficiency"]);
        assert!(matches!(choose(&e, Some(decided), &d).0, Choice::Explicit(..)));
        let e = env(&["SLURM_SPANK__SLURM_SPANK_OPTION_energy_energy_policy=efficiency"]);
        assert_eq!(choose(&e, Some(decided), &d).0, Choice::Decision(decided));
        let e = env(&["SLURM_SPANK__SLURM_SPANK_OPTION_energy_energy_policy=efficiency", "_SLURM_SPANK_OPTION_energy_energy_max_slowdown=2"]);
        let Choice::Hints(h) = choose(&e, None, &d).0 else { panic!("hints expected") };
        assert_eq!(h.policy, EnergyPolicy::Efficiency);
        assert_eq!(h.max_slowdown, 2.0);
        let e = env(&["SLURM_SPANK__SLURM_SPANK_OPTION_energy_energy_gpu_freq=1200", "SLURM_SPANK__SLURM_SPANK_OPTION_energy_energy_policy=efficiency"]);
        assert!(matches!(choose(&e, Some(decided), &d).0, Choice::Explicit(_, ref spec) if spec == "1200"), "--energy-gpu-freq is explicit");
        let (c, problem) = choose(&env(&["SLURM_GPU_FREQ=turbo"]), None, &d);
        assert!(matches!(c, Choice::Hints(ref h) if h.policy == d.policy));
        assert!(problem.is_some_and(|p| p.contains("turbo")));
    }

    #[test]
    fn the_environment_cannot_name_the_decision_clock() {
        // What a user can put into a job's environment (sbatch exports SLURM_SPANK_* entries)
        // is not sched/energy's decision: only the node's record is.
        let e = env(&["SLURM_SPANK_SLURM_ENERGY_CLOCK_MHZ=300", "SPANK_SLURM_ENERGY_CLOCK_MHZ=300", "SLURM_ENERGY_CLOCK_MHZ=300"]);
        assert!(matches!(choose(&e, None, &HintDefaults::default()).0, Choice::Hints(_)));
    }

    #[test]
    fn policy_clock_is_supported_and_never_above_default() {
        let gpus = FakeGpus::v100s(1);
        let c = policy_clocks(&gpus, 0, 1000).unwrap();
        assert!(c.graphics_mhz >= 1000 && c.graphics_mhz < 1010, "{c:?}");
        assert!(gpus.supported_graphics_clocks_mhz(0, 877).unwrap().contains(&c.graphics_mhz));
        assert_eq!(policy_clocks(&gpus, 0, 1500).unwrap().graphics_mhz, 1312);
    }

    #[test]
    fn model_lowers_the_clock_for_efficiency_only_with_data() {
        let gpus = FakeGpus::v100s(1);
        let gt = gpu_type_of(&gpus, 0).unwrap();
        assert_eq!(gt.name, "v100");
        let d = HintDefaults::default();
        let eff = hints_from_values(&[("policy".to_string(), "efficiency".to_string()), ("max_slowdown".into(), "2".into())].into(), &d);
        let perf = hints_from_values(&[("policy".to_string(), "performance".to_string())].into(), &d);
        // Without curves nothing can be predicted: the default clock.
        assert_eq!(PolicyModel::default().clock_mhz(&eff, &gt, 1), gt.default_clock_mhz);
        let data = model::data::default_data_dir();
        if !data.join("zeus").is_dir() {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "no model data at {} under CI", data.display());
            println!("SKIPPED part: no model data at {}", data.display());
            return;
        }
        let args = ClockArgs { data_dir: Some(data), energy_config: Some(PathBuf::from("/nonexistent/energy.toml")), ..ClockArgs::default() };
        assert!(PolicyModel::load(&args).is_err(), "a configured but missing energy.toml is an error");
        let args = ClockArgs { energy_config: None, ..args };
        let m = PolicyModel::load(&args).unwrap();
        assert_eq!(m.clock_mhz(&perf, &gt, 1), gt.default_clock_mhz);
        let eff_mhz = m.clock_mhz(&eff, &gt, 1);
        assert!(eff_mhz < gt.default_clock_mhz && eff_mhz >= gt.min_clock_mhz, "{eff_mhz}");
        let (clocks, errors) = step_clocks(&gpus, &[0], &Choice::Hints(eff), Some(&m));
        assert!(errors.is_empty());
        assert!(clocks[0].1.graphics_mhz >= eff_mhz && clocks[0].1.graphics_mhz < eff_mhz + 8);
    }

    #[test]
    fn h100_policy_steps_carry_the_ladders_power_limit() {
        let gpus = FakeGpus::new(vec![gpu_control::FakeGpu::h100(0)]);
        let gt = gpu_type_of(&gpus, 0).unwrap();
        assert_eq!((gt.name.as_str(), gt.default_clock_mhz), ("h100", 1980));
        let d = HintDefaults::default();
        let eff = hints_from_values(&[("policy".to_string(), "efficiency".to_string()), ("max_slowdown".into(), "2".into())].into(), &d);
        let data = model::data::default_data_dir();
        if !data.join("zeus").is_dir() {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "no model data at {} under CI", data.display());
            println!("SKIPPED: no model data at {}", data.display());
            return;
        }
        let m = PolicyModel::load(&ClockArgs { data_dir: Some(data), energy_config: None, ..ClockArgs::default() }).unwrap();
        let (mhz, frac) = m.clock_and_power_frac(&eff, &gt, 1);
        let frac = frac.expect("the A40 stand-in's ladder has limits");
        assert!(mhz < 1980 && frac < 1.0 && frac > 0.0, "{mhz} MHz, {frac}");
        let (settings, errors) = step_settings(&gpus, &[0], &Choice::Hints(eff.clone()), Some(&m));
        assert!(errors.is_empty(), "{errors:?}");
        let limit_mw = settings[0].1.power_limit_mw.expect("a limit");
        assert_eq!(limit_mw, (700_000.0 * frac).round() as u32, "the step's fraction of the H100's default limit");
        // sched/energy's decision without a limit carries only a clock (the arbiter maps it
        // linearly); with one, exactly that limit, whatever the model's fraction says.
        let (settings, _) = step_settings(&gpus, &[0], &Choice::Decision(JobDecision { clock_mhz: 1500, power_limit_mw: None }), Some(&m));
        assert_eq!(settings[0].1.power_limit_mw, None);
        let planned = JobDecision { clock_mhz: 1500, power_limit_mw: Some(437_500) };
        let (settings, _) = step_settings(&gpus, &[0], &Choice::Decision(planned), Some(&m));
        assert_eq!(settings[0].1.power_limit_mw, Some(437_500));
    }

    #[test]
    fn plugstack_args() {
        let a = ClockArgs::parse(["max_defer=1h", "clock_ledger=/run/l", "nvml=/opt/lib/libnvidia-ml.so.1", "gpu_clocks=off"]).unwrap();
        assert_eq!(a.ledger_dir, PathBuf::from("/run/l"));
        assert!(!a.enabled);
        assert!(ClockArgs::parse(["clock_ledger=rel"]).unwrap_err().contains("absolute"));
        assert!(ClockArgs::parse(["gpu_clocks=maybe"]).is_err());
        assert!(!ClockArgs::parse(["sched_decision=off"]).unwrap().sched_decision);
        assert!(ClockArgs::default().sched_decision);
    }

    /// The node reads the tag with the same rule as the client and sched/energy
    /// (`model::tag::valid_tag`): anything else is no tag.
    #[test]
    fn hints_drop_a_tag_the_client_would_refuse() {
        let d = HintDefaults::default();
        let huge = "a".repeat(100 * 1024);
        for bad in ["resnet\nforged", "x; energy_j=0", "x y", huge.as_str()] {
            let h = hints_from_values(&[("tag".to_string(), bad.to_string())].into(), &d);
            assert_eq!(h.tag, None, "{:?}", &bad[..bad.len().min(40)]);
        }
        assert_eq!(hints_from_values(&[("tag".to_string(), "resnet50".to_string())].into(), &d).tag.as_deref(), Some("resnet50"));
    }
}
