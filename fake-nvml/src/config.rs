//! The static description of the simulated machine: how many GPUs, their names, UUIDs, PCI
//! bus ids, clock tables, power limits and power model. Read once per `nvmlInit` from a
//! `key = value` file; everything has a V100-SXM2-32GB default.
//!
//! Format (one `key = value` per line, `#` starts a comment, unknown keys are an error so
//! typos do not pass silently):
//!
//! ```text
//! gpu_count = 8                       # default 4
//! name = Tesla V100-SXM2-32GB         # all GPUs; name.<i> overrides GPU i
//! uuid.0 = GPU-...                    # default GPU-fa4e0000-0000-4000-8000-<12 hex digits of i>
//! pci_bus_id.0 = 00000000:06:00.0     # default DGX-1 V100 bus ids, then 0x10+i
//! memory_clocks_mhz = 877             # descending list, comma separated
//! graphics_clocks_mhz = 1530,1312,135 # explicit list, or the ladder below
//! graphics_clock_min_mhz = 135        # ladder: floor(max - k*step) down to min
//! graphics_clock_max_mhz = 1530
//! graphics_clock_step_mhz = 7.5
//! default_memory_clock_mhz = 877
//! default_graphics_clock_mhz = 1312
//! power_limit_min_mw = 150000
//! power_limit_max_mw = 300000
//! power_limit_default_mw = 300000
//! idle_power_mw = 41000               # power at 0 % utilisation
//! max_power_mw = 250000               # power at 100 % and the highest graphics clock
//! memory_total_bytes = 34359738368
//! cpu_count = 40                      # CPUs of the node, split evenly over numa_nodes
//! numa_nodes = 2                      # GPU i is near NUMA node i * numa_nodes / gpu_count
//! nvlinks_per_gpu = 6                 # link l of GPU i goes to GPU (i + l + 1) % gpu_count
//! driver_version = 535.183.01
//! cuda_driver_version = 12020
//! model = V100                        # V100 | A100 | H100: name, clock tables, power limits
//!                                     # and support matrix of that model (see `generations`)
//! model.<i> = H100                    # GPU i plays that model (its own tables and matrix)
//! application_clocks = supported      # supported | not_supported | no_permission; `.<i>` for one GPU
//! locked_clocks = supported           # likewise (nvmlDeviceSetGpuLockedClocks)
//! power_limit = supported             # nvmlDeviceSetPowerManagementLimit
//! set_requires_root = false           # true: every setter answers NO_PERMISSION unless euid 0
//! ```
//!
//! `model = X` sets the machine-wide tables (clock lists, limits, matrix) and the default name
//! to model X's; the table keys above then override them in any order. `model.<i> = X` gives
//! GPU i model X's tables and matrix whole (the machine-wide table keys do not apply to it), its
//! name unless `name.<i>` says otherwise; [`Config::for_gpu`] is the view one GPU's calls see.

use std::borrow::Cow;
use std::fmt;
use std::path::{Path, PathBuf};

pub use crate::generations::clock_ladder_mhz;
use crate::generations::{Answer, Control, GpuModel, Preset, SupportMatrix};

/// One simulated GPU's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuSpec {
    pub name: String,
    pub uuid: String,
    /// NVML's 16-character form, `00000000:06:00.0`.
    pub pci_bus_id: String,
    pub pci_domain: u32,
    pub pci_bus: u32,
    pub pci_device: u32,
    pub minor_number: u32,
    /// `model.<i>`: this GPU plays another model than the machine-wide tables describe.
    pub model: Option<GpuModel>,
    /// `<control>.<i>`: this GPU's answers that differ from its model's matrix.
    pub support_overrides: Vec<(Control, Answer)>,
}

/// The simulated machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file this came from; `None` for the built-in defaults.
    pub source: Option<PathBuf>,
    pub gpus: Vec<GpuSpec>,
    /// Descending, as NVML returns them.
    pub memory_clocks_mhz: Vec<u32>,
    /// Descending, as NVML returns them.
    pub graphics_clocks_mhz: Vec<u32>,
    pub default_memory_clock_mhz: u32,
    pub default_graphics_clock_mhz: u32,
    pub power_limit_min_mw: u32,
    pub power_limit_max_mw: u32,
    pub power_limit_default_mw: u32,
    pub idle_power_mw: u32,
    pub max_power_mw: u32,
    pub memory_total_bytes: u64,
    pub cpu_count: u32,
    pub numa_nodes: u32,
    pub nvlinks_per_gpu: u32,
    pub driver_version: String,
    pub cuda_driver_version: i32,
    pub pci_device_id: u32,
    pub pci_subsystem_id: u32,
    /// The model the machine-wide tables came from (`model = ...`; V100 by default).
    pub model: GpuModel,
    pub compute_capability: (i32, i32),
    /// What the setters answer (machine-wide; per GPU see [`Config::for_gpu`]).
    pub support: SupportMatrix,
    /// Setters answer `NO_PERMISSION` to a caller whose effective uid is not 0.
    pub set_requires_root: bool,
}

/// A config file that could not be read or understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub source: Option<PathBuf>,
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self
            .source
            .as_ref()
            .map_or_else(|| "<config>".to_string(), |p| p.display().to_string());
        write!(f, "{file}:{}: {}", self.line, self.message)
    }
}

impl std::error::Error for ConfigError {}

pub const DEFAULT_GPU_COUNT: usize = 4;
pub const DEFAULT_NAME: &str = "Tesla V100-SXM2-32GB";
/// PCI buses of the eight V100s in a DGX-1.
const DGX1_BUSES: [u32; 8] = [0x06, 0x07, 0x0A, 0x0B, 0x85, 0x86, 0x89, 0x8A];

fn default_uuid(index: usize) -> String {
    format!("GPU-fa4e0000-0000-4000-8000-{index:012x}")
}

fn default_bus(index: usize) -> u32 {
    DGX1_BUSES.get(index).copied().unwrap_or(0x10 + index as u32)
}

fn bus_id_string(domain: u32, bus: u32, device: u32) -> String {
    format!("{domain:08X}:{bus:02X}:{device:02X}.0")
}

/// Parses `0000:06:00.0` or `00000000:06:00.0` (function ignored) into (domain, bus, device).
pub fn parse_bus_id(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.trim().split(':');
    let domain = u32::from_str_radix(parts.next()?, 16).ok()?;
    let bus = u32::from_str_radix(parts.next()?, 16).ok()?;
    let dev_fn = parts.next()?;
    if parts.next().is_some() {
        return None;
    }
    let device = u32::from_str_radix(dev_fn.split('.').next()?, 16).ok()?;
    Some((domain, bus, device))
}

impl Default for Config {
    fn default() -> Self {
        let v100 = GpuModel::V100.preset();
        let mut config = Config {
            source: None,
            gpus: Vec::new(),
            memory_clocks_mhz: Vec::new(),
            graphics_clocks_mhz: Vec::new(),
            default_memory_clock_mhz: 0,
            default_graphics_clock_mhz: 0,
            power_limit_min_mw: 0,
            power_limit_max_mw: 0,
            power_limit_default_mw: 0,
            idle_power_mw: 0,
            max_power_mw: 0,
            memory_total_bytes: 0,
            cpu_count: 40,
            numa_nodes: 2,
            nvlinks_per_gpu: 6,
            driver_version: "535.183.01".to_string(),
            cuda_driver_version: 12020,
            pci_device_id: 0,
            pci_subsystem_id: 0,
            model: GpuModel::V100,
            compute_capability: (0, 0),
            support: v100.support,
            set_requires_root: false,
        };
        config.apply_preset(GpuModel::V100, &v100);
        config.set_gpu_count(DEFAULT_GPU_COUNT);
        config
    }
}

impl Config {
    /// Model `model`'s tables, limits and matrix (not the GPUs' identities).
    fn apply_preset(&mut self, model: GpuModel, p: &Preset) {
        self.model = model;
        self.memory_clocks_mhz = p.memory_clocks_mhz.clone();
        self.graphics_clocks_mhz = p.graphics_clocks_mhz.clone();
        self.default_memory_clock_mhz = p.default_memory_clock_mhz;
        self.default_graphics_clock_mhz = p.default_graphics_clock_mhz;
        self.power_limit_min_mw = p.power_limit_min_mw;
        self.power_limit_max_mw = p.power_limit_max_mw;
        self.power_limit_default_mw = p.power_limit_default_mw;
        self.idle_power_mw = p.idle_power_mw;
        self.max_power_mw = p.max_power_mw;
        self.memory_total_bytes = p.memory_total_bytes;
        self.pci_device_id = p.pci_device_id;
        self.pci_subsystem_id = p.pci_subsystem_id;
        self.compute_capability = p.compute_capability;
        self.support = p.support;
    }

    /// What GPU `index`'s calls see: the machine-wide config, or, for a GPU with its own
    /// `model.<i>` or `<control>.<i>` keys, a copy with that model's tables and its answers.
    pub fn for_gpu(&self, index: usize) -> Cow<'_, Config> {
        let Some(spec) = self.gpus.get(index) else { return Cow::Borrowed(self) };
        if spec.model.is_none() && spec.support_overrides.is_empty() {
            return Cow::Borrowed(self);
        }
        let mut view = self.clone();
        if let Some(model) = spec.model {
            view.apply_preset(model, &model.preset());
        }
        for &(control, answer) in &spec.support_overrides {
            view.support.set(control, answer);
        }
        Cow::Owned(view)
    }

    /// The model GPU `index` plays.
    pub fn model_of(&self, index: usize) -> GpuModel {
        self.gpus.get(index).and_then(|g| g.model).unwrap_or(self.model)
    }

    fn set_gpu_count(&mut self, count: usize) {
        let name = self
            .gpus
            .first()
            .map_or_else(|| DEFAULT_NAME.to_string(), |g| g.name.clone());
        self.gpus = (0..count)
            .map(|i| {
                let bus = default_bus(i);
                GpuSpec {
                    name: name.clone(),
                    uuid: default_uuid(i),
                    pci_bus_id: bus_id_string(0, bus, 0),
                    pci_domain: 0,
                    pci_bus: bus,
                    pci_device: 0,
                    minor_number: i as u32,
                    model: None,
                    support_overrides: Vec::new(),
                }
            })
            .collect();
    }

    /// Reads a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            source: Some(path.to_path_buf()),
            line: 0,
            message: format!("cannot read: {e}"),
        })?;
        Config::parse(&text, Some(path.to_path_buf()))
    }

    /// Parses config text (see the module docs for the keys).
    pub fn parse(text: &str, source: Option<PathBuf>) -> Result<Config, ConfigError> {
        let entries: Vec<(usize, &str, &str)> = text
            .lines()
            .enumerate()
            .filter_map(|(n, line)| {
                let line = line.split('#').next().unwrap_or("").trim();
                (!line.is_empty()).then_some((n + 1, line))
            })
            .map(|(n, line)| match line.split_once('=') {
                Some((k, v)) => Ok((n, k.trim(), v.trim())),
                None => Err(ConfigError {
                    source: source.clone(),
                    line: n,
                    message: format!("expected key = value, got {line:?}"),
                }),
            })
            .collect::<Result<_, _>>()?;
        let err = |line: usize, message: String| ConfigError { source: source.clone(), line, message };
        let num = |line: usize, key: &str, v: &str| -> Result<u64, ConfigError> {
            v.replace('_', "")
                .parse::<u64>()
                .map_err(|_| err(line, format!("{key}: expected a whole number, got {v:?}")))
        };
        let num32 = |line: usize, key: &str, v: &str| -> Result<u32, ConfigError> {
            u32::try_from(num(line, key, v)?).map_err(|_| err(line, format!("{key}: {v} is too large")))
        };
        let list = |line: usize, key: &str, v: &str| -> Result<Vec<u32>, ConfigError> {
            let mut out = v
                .split(',')
                .map(|s| num32(line, key, s.trim()))
                .collect::<Result<Vec<_>, _>>()?;
            out.sort_unstable_by(|a, b| b.cmp(a));
            out.dedup();
            Ok(out)
        };

        let mut config = Config { source: source.clone(), ..Config::default() };
        // gpu_count first: per-GPU keys refer to the final list.
        for (line, key, value) in &entries {
            if *key == "gpu_count" {
                let count = num32(*line, key, value)? as usize;
                if count == 0 || count > 64 {
                    return Err(err(*line, format!("gpu_count must be 1..=64, got {count}")));
                }
                config.set_gpu_count(count);
            }
        }
        // Then the models: the keys below override what a model sets, whatever their order.
        for (line, key, value) in &entries {
            let model = || GpuModel::parse(value).ok_or_else(|| err(*line, format!("{key}: expected V100, A100 or H100, got {value:?}")));
            if *key == "model" {
                let m = model()?;
                config.apply_preset(m, &m.preset());
                config.gpus.iter_mut().for_each(|g| g.name = m.preset().name.to_string());
            } else if let Some(i) = key.strip_prefix("model.") {
                let m = model()?;
                let count = config.gpus.len();
                let gpu = i
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| config.gpus.get_mut(i))
                    .ok_or_else(|| err(*line, format!("{key}: no such GPU (gpu_count = {count})")))?;
                gpu.model = Some(m);
                gpu.name = m.preset().name.to_string();
            }
        }
        let (mut ladder_min, mut ladder_max, mut ladder_step) = (config.min_graphics_clock_mhz(), config.max_graphics_clock_mhz(), 7.5f64);
        let mut ladder_given = false;
        let mut explicit_graphics = None;
        for (line, key, value) in entries {
            let (base, index) = match key.split_once('.') {
                Some((b, i)) => {
                    let i: usize = i
                        .parse()
                        .map_err(|_| err(line, format!("{key}: expected <key>.<gpu index>")))?;
                    if i >= config.gpus.len() {
                        return Err(err(line, format!("{key}: GPU {i} does not exist (gpu_count = {})", config.gpus.len())));
                    }
                    (b, Some(i))
                }
                None => (key, None),
            };
            let answer = |v: &str| Answer::parse(v).ok_or_else(|| err(line, format!("{key}: expected supported, not_supported or no_permission, got {v:?}")));
            match (base, index) {
                ("gpu_count", None) | ("model", _) => {}
                (control, None) if Control::parse_key(control).is_some() => {
                    if let Some(c) = Control::parse_key(control) {
                        config.support.set(c, answer(value)?);
                    }
                }
                (control, Some(i)) if Control::parse_key(control).is_some() => {
                    if let Some(c) = Control::parse_key(control) {
                        let a = answer(value)?;
                        config.gpus[i].support_overrides.retain(|(o, _)| *o != c);
                        config.gpus[i].support_overrides.push((c, a));
                    }
                }
                ("set_requires_root", None) => {
                    config.set_requires_root = match value.to_ascii_lowercase().as_str() {
                        "true" | "yes" | "1" => true,
                        "false" | "no" | "0" => false,
                        _ => return Err(err(line, format!("{key}: expected true or false, got {value:?}"))),
                    }
                }
                ("name", None) => config.gpus.iter_mut().for_each(|g| g.name = value.to_string()),
                ("name", Some(i)) => config.gpus[i].name = value.to_string(),
                ("uuid", Some(i)) => config.gpus[i].uuid = value.to_string(),
                ("pci_bus_id", Some(i)) => {
                    let (d, b, dev) = parse_bus_id(value)
                        .ok_or_else(|| err(line, format!("{key}: expected dddddddd:bb:dd.f, got {value:?}")))?;
                    let gpu = &mut config.gpus[i];
                    (gpu.pci_domain, gpu.pci_bus, gpu.pci_device) = (d, b, dev);
                    gpu.pci_bus_id = bus_id_string(d, b, dev);
                }
                ("minor_number", Some(i)) => config.gpus[i].minor_number = num32(line, key, value)?,
                ("memory_clocks_mhz", None) => config.memory_clocks_mhz = list(line, key, value)?,
                ("graphics_clocks_mhz", None) => explicit_graphics = Some(list(line, key, value)?),
                ("graphics_clock_min_mhz", None) => (ladder_min, ladder_given) = (num32(line, key, value)?, true),
                ("graphics_clock_max_mhz", None) => (ladder_max, ladder_given) = (num32(line, key, value)?, true),
                ("graphics_clock_step_mhz", None) => {
                    ladder_step = value
                        .parse::<f64>()
                        .ok()
                        .filter(|s| *s > 0.0)
                        .ok_or_else(|| err(line, format!("{key}: expected a positive number, got {value:?}")))?;
                    ladder_given = true;
                }
                ("default_memory_clock_mhz", None) => config.default_memory_clock_mhz = num32(line, key, value)?,
                ("default_graphics_clock_mhz", None) => config.default_graphics_clock_mhz = num32(line, key, value)?,
                ("power_limit_min_mw", None) => config.power_limit_min_mw = num32(line, key, value)?,
                ("power_limit_max_mw", None) => config.power_limit_max_mw = num32(line, key, value)?,
                ("power_limit_default_mw", None) => config.power_limit_default_mw = num32(line, key, value)?,
                ("idle_power_mw", None) => config.idle_power_mw = num32(line, key, value)?,
                ("max_power_mw", None) => config.max_power_mw = num32(line, key, value)?,
                ("memory_total_bytes", None) => config.memory_total_bytes = num(line, key, value)?,
                ("cpu_count", None) => config.cpu_count = num32(line, key, value)?.max(1),
                ("numa_nodes", None) => config.numa_nodes = num32(line, key, value)?.max(1),
                ("nvlinks_per_gpu", None) => config.nvlinks_per_gpu = num32(line, key, value)?.min(18),
                ("driver_version", None) => config.driver_version = value.to_string(),
                ("cuda_driver_version", None) => {
                    config.cuda_driver_version = value
                        .parse()
                        .map_err(|_| err(line, format!("{key}: expected a number, got {value:?}")))?;
                }
                _ => return Err(err(line, format!("unknown key {key:?}"))),
            }
        }
        if let Some(list) = explicit_graphics {
            config.graphics_clocks_mhz = list;
        } else if ladder_given {
            config.graphics_clocks_mhz = clock_ladder_mhz(ladder_min, ladder_max, ladder_step);
        }
        config.validate().map_err(|m| err(0, m))?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), String> {
        self.validate_tables()?;
        for i in 0..self.gpus.len() {
            if let Cow::Owned(view) = self.for_gpu(i) {
                view.validate_tables().map_err(|m| format!("GPU {i} ({}): {m}", view.model))?;
            }
        }
        Ok(())
    }

    fn validate_tables(&self) -> Result<(), String> {
        if self.graphics_clocks_mhz.is_empty() || self.memory_clocks_mhz.is_empty() {
            return Err("the clock lists must not be empty".into());
        }
        if !self.memory_clocks_mhz.contains(&self.default_memory_clock_mhz) {
            return Err(format!(
                "default_memory_clock_mhz {} is not in memory_clocks_mhz {:?}",
                self.default_memory_clock_mhz, self.memory_clocks_mhz
            ));
        }
        if !self.graphics_clocks_mhz.contains(&self.default_graphics_clock_mhz) {
            return Err(format!(
                "default_graphics_clock_mhz {} is not a supported graphics clock",
                self.default_graphics_clock_mhz
            ));
        }
        let (min, max, def) = (self.power_limit_min_mw, self.power_limit_max_mw, self.power_limit_default_mw);
        if !(min <= def && def <= max) {
            return Err(format!("power limits must satisfy min <= default <= max, got {min}, {def}, {max}"));
        }
        if self.idle_power_mw > self.max_power_mw {
            return Err("idle_power_mw must not exceed max_power_mw".into());
        }
        Ok(())
    }

    pub fn gpu_count(&self) -> usize {
        self.gpus.len()
    }

    pub fn max_graphics_clock_mhz(&self) -> u32 {
        self.graphics_clocks_mhz.first().copied().unwrap_or(0)
    }

    pub fn min_graphics_clock_mhz(&self) -> u32 {
        self.graphics_clocks_mhz.last().copied().unwrap_or(0)
    }

    /// CPUs near GPU `index`: its NUMA node's contiguous share of `cpu_count`.
    pub fn cpu_affinity(&self, index: usize) -> std::ops::Range<u32> {
        let nodes = self.numa_nodes.max(1);
        let count = self.gpus.len().max(1) as u32;
        let node = (index as u32 * nodes / count).min(nodes - 1);
        let per_node = self.cpu_count / nodes;
        node * per_node..(node + 1) * per_node
    }

    /// The GPU at the far end of NVLink `link` of GPU `index`, if that link is active.
    pub fn nvlink_peer(&self, index: usize, link: u32) -> Option<usize> {
        let n = self.gpus.len();
        let active = (link as usize) < (self.nvlinks_per_gpu as usize).min(n.saturating_sub(1));
        active.then(|| (index + link as usize + 1) % n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v100_ladder_has_187_clocks_from_1530_to_135() {
        let c = Config::default();
        assert_eq!(c.graphics_clocks_mhz.len(), 187);
        assert_eq!(c.graphics_clocks_mhz[..4], [1530, 1522, 1515, 1507]);
        assert_eq!(c.min_graphics_clock_mhz(), 135);
        assert!(c.graphics_clocks_mhz.contains(&1312));
    }

    #[test]
    fn parses_overrides_and_rejects_typos() {
        let c = Config::parse(
            "gpu_count = 2\nname = Fake A100\nuuid.1 = GPU-x\npci_bus_id.0 = 0000:3b:00.0\ngraphics_clocks_mhz = 1000, 500, 1312\n",
            None,
        )
        .unwrap();
        assert_eq!(c.gpu_count(), 2);
        assert_eq!(c.gpus[1].name, "Fake A100");
        assert_eq!(c.gpus[1].uuid, "GPU-x");
        assert_eq!(c.gpus[0].pci_bus_id, "00000000:3B:00.0");
        assert_eq!(c.graphics_clocks_mhz, [1312, 1000, 500]);
        let e = Config::parse("gpu_cuont = 2", None).unwrap_err();
        assert!(e.message.contains("gpu_cuont"), "{e}");
        let e = Config::parse("uuid.5 = x", None).unwrap_err();
        assert!(e.message.contains("GPU 5"), "{e}");
    }

    #[test]
    fn affinity_splits_gpus_over_numa_nodes() {
        let c = Config::parse("gpu_count = 8", None).unwrap();
        assert_eq!(c.cpu_affinity(0), 0..20);
        assert_eq!(c.cpu_affinity(7), 20..40);
        assert_eq!(c.nvlink_peer(7, 0), Some(0));
        assert_eq!(c.nvlink_peer(0, 6), None);
    }

    #[test]
    fn models_per_gpu_with_their_own_tables_and_answers() {
        let c = Config::parse("gpu_count = 3\nmodel.1 = A100\nmodel.2 = h100\nlocked_clocks.0 = no_permission\npower_limit.2 = not_supported\n", None).unwrap();
        assert_eq!(c.gpus[0].name, "Tesla V100-SXM2-32GB");
        assert_eq!(c.gpus[1].name, "NVIDIA A100-SXM4-40GB");
        assert_eq!(c.model_of(2), GpuModel::H100);
        let (v, a, h) = (c.for_gpu(0), c.for_gpu(1), c.for_gpu(2));
        assert_eq!(v.support.locked_clocks, Answer::NoPermission);
        assert_eq!(v.default_graphics_clock_mhz, 1312);
        assert_eq!((a.default_graphics_clock_mhz, a.max_graphics_clock_mhz(), a.power_limit_max_mw), (1410, 1410, 400_000));
        assert_eq!(a.support.application_clocks, Answer::Supported);
        assert_eq!(h.support.application_clocks, Answer::NotSupported);
        assert_eq!(h.support.power_limit, Answer::NotSupported);
        assert_eq!(h.compute_capability, (9, 0));
        assert!(matches!(c.for_gpu(1), Cow::Owned(_)));
        assert!(matches!(Config::default().for_gpu(0), Cow::Borrowed(_)), "no copy for a plain GPU");
    }

    #[test]
    fn a_machine_wide_model_and_keys_that_override_it() {
        let c = Config::parse("default_graphics_clock_mhz = 1200\nmodel = A100\napplication_clocks = not_supported\nset_requires_root = true\n", None).unwrap();
        assert_eq!(c.gpus[3].name, "NVIDIA A100-SXM4-40GB");
        assert_eq!(c.default_graphics_clock_mhz, 1200, "keys override the model in any order");
        assert_eq!(c.support.application_clocks, Answer::NotSupported);
        assert!(c.set_requires_root);
        for (text, needle) in [
            ("model = B200", "B200"),
            ("model.9 = A100", "no such GPU"),
            ("locked_clocks = sometimes", "sometimes"),
            ("set_requires_root = maybe", "true or false"),
        ] {
            let e = Config::parse(text, Some(PathBuf::from("x.conf"))).unwrap_err();
            assert!(e.to_string().contains(needle) && e.to_string().starts_with("x.conf:1:"), "{text}: {e}");
        }
    }
}
