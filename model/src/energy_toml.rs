//! `energy.toml`, the bundle's configuration file next to slurm.conf: its types, defaults and
//! the one parser sched/energy and `slurm-energy whatif` both read it with.
//!
//! ```toml
//! [sched]              # the plugin itself
//! interval_s = 5
//! [planner]            # model::config::PlannerConfig (with [planner.scorers], [planner.hints])
//! reservation_depth = 4
//! [gpu_types.v100]     # GPU models by GRES type name ("gpu" for untyped GRES)
//! default_clock_mhz = 1312
//! [carbon]             # the site's carbon-intensity file (docs/carbon.md)
//! source = "/var/lib/slurm-energy/intensity.csv"
//! [learning]           # what the planner learns from jobs (docs/learning.md)
//! state_file = "/var/spool/slurmctld/energy-learning.json"
//! [power_cap]          # the site's power-cap file (docs/power-cap.md)
//! file = "/var/lib/slurm-energy/power-cap"
//! ```
//!
//! Every error names the file, the line and the key, so slurmctld's log says what to fix.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::config::PlannerConfig;
use crate::types::GpuType;
use serde::Deserialize;

/// The planner's wall-time bound per cycle when the file does not set one: a cycle must never
/// hold up slurmctld, whatever the queue.
pub const DEFAULT_MAX_CYCLE_MS: u64 = 2_000;

/// Settings of the plugin itself (`[sched]`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedSettings {
    /// Seconds between scheduling cycles.
    pub interval_s: f64,
    /// Log each cycle's details at info level (also on with `DebugFlags=Backfill`).
    pub debug: bool,
    /// Release slurmctld's locks after holding them this long while starting jobs (ms).
    pub max_lock_ms: u64,
    /// How long to let RPCs through when yielding the locks (ms).
    pub yield_ms: u64,
    /// Write slurmctld's job state file before a start's launch RPC leaves (see
    /// the plugin's slurm_bindings::launch): a slurmctld killed right after a cycle then never runs a job
    /// twice. Off: launches go out at once, as sched/backfill sends them.
    pub save_before_launch: bool,
    /// After a slurmctld restart, complete the prolog of a recovered batch job whose prolog
    /// completion died with the previous slurmctld, and end as missing one whose launch never
    /// left (see model::lost_prolog). Off: such jobs keep waiting for their prolog until they
    /// end or reach their time limit.
    pub finish_lost_prologs: bool,
    /// Directory with the measured data the predictor is fitted to (zeus/, gavel/, synergy/);
    /// none: GPUs are predicted at their default clock at 75 % of maximum power.
    pub data_dir: Option<PathBuf>,
    /// GPU model whose pair throughputs calibrate the interference model.
    pub interference_gpu: String,
    /// Cycle statistics kept in memory for comparison.
    pub stats_kept: usize,
}

impl Default for SchedSettings {
    fn default() -> Self {
        SchedSettings {
            interval_s: 5.0,
            debug: false,
            max_lock_ms: 500,
            yield_ms: 20,
            save_before_launch: true,
            finish_lost_prologs: true,
            data_dir: None,
            interference_gpu: "v100".into(),
            stats_kept: 100,
        }
    }
}

/// The carbon-intensity source (`[carbon]`): a file a site's cron job refreshes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CarbonSettings {
    /// The file (CSV `timestamp,g_per_kwh` or a saved grid-service response); none: no carbon
    /// signal, no per-job carbon.
    pub source: Option<PathBuf>,
    /// `auto`, `csv`, `national-grid-uk`, `electricity-maps` or `watttime`.
    pub format: String,
    /// How often to look at the file's modification time (s); it is re-read when it changed.
    pub refresh_s: f64,
}

impl Default for CarbonSettings {
    fn default() -> Self {
        CarbonSettings { source: None, format: "auto".into(), refresh_s: 60.0 }
    }
}

impl CarbonSettings {
    pub fn source_format(&self) -> Option<crate::carbon_source::SourceFormat> {
        crate::carbon_source::SourceFormat::parse(&self.format)
    }
}

/// The cluster power cap's file (`[power_cap]`): a schedule of caps the site, or the tool that
/// follows its grid program, writes (format in `model::power_cap`). The static cap is
/// `[planner] power_cap_w`; the file's cap replaces it while the file says something about now.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PowerCapSettings {
    /// The file; none: the static cap only.
    pub file: Option<PathBuf>,
    /// How often to look at the file's modification time (s); it is re-read when it changed.
    pub refresh_s: f64,
}

impl Default for PowerCapSettings {
    fn default() -> Self {
        PowerCapSettings { file: None, refresh_s: 10.0 }
    }
}

/// What the planner learns from jobs (`[learning]`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LearningSettings {
    /// Learn from finished and running jobs and predict with it.
    pub enabled: bool,
    /// Where the learnt state is kept across restarts; default `energy-learning.json` in
    /// slurmctld's StateSaveLocation.
    pub state_file: Option<PathBuf>,
    /// A running job's measured power and GPU use are learnt once it has run this long (s);
    /// a shared run's slowdown once the pair has run this long together.
    pub early_after_s: f64,
    /// UDP port on which slurmctld receives the nodes' reports of running jobs' GPU use (the
    /// nodes read the same setting); 0: no reports, GPU use is not learnt.
    pub gpu_use_port: u16,
}

impl Default for LearningSettings {
    fn default() -> Self {
        LearningSettings { enabled: true, state_file: None, early_after_s: 120.0, gpu_use_port: 0 }
    }
}

/// A GPU model (`[gpu_types.<gres type>]`); unset fields take the defaults of [`GpuSpec`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GpuSpec {
    /// The measured GPU model (`v100`, `a40`, ...) whose clock/power curves predict this GRES
    /// type, when the type's own name is not one (e.g. untyped `gpu`). Default: the type's name.
    pub model: Option<String>,
    pub default_clock_mhz: u32,
    pub min_clock_mhz: u32,
    pub max_clock_mhz: u32,
    pub idle_power_w: f64,
    pub max_power_w: f64,
}

impl Default for GpuSpec {
    /// A V100-class GPU.
    fn default() -> Self {
        GpuSpec { model: None, default_clock_mhz: 1312, min_clock_mhz: 510, max_clock_mhz: 1530, idle_power_w: 40.0, max_power_w: 300.0 }
    }
}

impl GpuSpec {
    pub fn gpu_type(&self, name: &str) -> GpuType {
        GpuType {
            // The planner finds the predictor's curves by this name.
            name: self.model.clone().unwrap_or_else(|| name.to_string()),
            default_clock_mhz: self.default_clock_mhz,
            min_clock_mhz: self.min_clock_mhz,
            max_clock_mhz: self.max_clock_mhz,
            idle_power_w: self.idle_power_w,
            max_power_w: self.max_power_w,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct FileConfig {
    sched: SchedSettings,
    planner: PlannerConfig,
    gpu_types: BTreeMap<String, GpuSpec>,
    carbon: CarbonSettings,
    learning: LearningSettings,
    power_cap: PowerCapSettings,
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where it came from (`None`: built-in defaults, no file).
    pub path: Option<PathBuf>,
    pub sched: SchedSettings,
    pub planner: PlannerConfig,
    pub gpu_types: BTreeMap<String, GpuSpec>,
    pub carbon: CarbonSettings,
    pub learning: LearningSettings,
    pub power_cap: PowerCapSettings,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            path: None,
            sched: SchedSettings::default(),
            planner: PlannerConfig { max_cycle_ms: DEFAULT_MAX_CYCLE_MS, ..PlannerConfig::default() },
            gpu_types: BTreeMap::new(),
            carbon: CarbonSettings::default(),
            learning: LearningSettings::default(),
            power_cap: PowerCapSettings::default(),
        }
    }
}

impl Config {
    pub fn gpu_spec(&self, type_name: &str) -> GpuSpec {
        self.gpu_types.get(type_name).cloned().unwrap_or_default()
    }
}

/// What is wrong with the file, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub path: PathBuf,
    /// 1-based; `None` when the fault has no single place (unreadable file).
    pub line: Option<usize>,
    /// Dotted key (`planner.hints.defer_s`), when known.
    pub key: Option<String>,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": key '{key}'")?;
        }
        write!(f, ": {}", self.reason)
    }
}

impl std::error::Error for ConfigError {}

/// `energy.toml` in the directory of slurm.conf.
pub fn path_next_to(slurm_conf: &Path) -> PathBuf {
    slurm_conf.parent().unwrap_or(Path::new("/etc/slurm")).join("energy.toml")
}

/// Reads the file; a missing file gives the defaults (with `path` unset).
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(path, &text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
        Err(e) => Err(ConfigError { path: path.to_path_buf(), line: None, key: None, reason: format!("cannot read: {e}") }),
    }
}

/// Parses and validates the text of `path`.
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let err = |line, key: Option<String>, reason: String| ConfigError { path: path.to_path_buf(), line, key, reason };
    let mut value: toml::Table = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_at(text, s.start));
        err(line, None, e.message().to_string())
    })?;
    // The plugin's own default for the cycle bound (the planner's default, 0, means unbounded).
    if let Some(toml::Value::Table(planner)) = value.get_mut("planner") {
        planner.entry("max_cycle_ms").or_insert(toml::Value::Integer(DEFAULT_MAX_CYCLE_MS as i64));
    } else if !value.contains_key("planner") {
        let mut planner = toml::Table::new();
        planner.insert("max_cycle_ms".into(), toml::Value::Integer(DEFAULT_MAX_CYCLE_MS as i64));
        value.insert("planner".into(), toml::Value::Table(planner));
    }
    let file: FileConfig = FileConfig::deserialize(value).map_err(|e: toml::de::Error| {
        let reason = e.message().to_string();
        // serde names the unknown or ill-typed key in the message; find it in the text.
        let key = offending_key(&reason);
        let line = key.as_deref().and_then(|k| line_of_key(text, k));
        err(line, key, reason)
    })?;
    file.planner.validate().map_err(|e| {
        let key = format!("planner.{}", e.key);
        err(line_of_key(text, &key), Some(key), e.reason)
    })?;
    let s = &file.sched;
    let check = |ok: bool, key: &str, reason: &str| -> Result<(), ConfigError> {
        if ok { Ok(()) } else { Err(err(line_of_key(text, key), Some(key.into()), reason.into())) }
    };
    check(s.interval_s.is_finite() && s.interval_s >= 0.1 && s.interval_s <= 3600.0, "sched.interval_s", "must be between 0.1 and 3600 seconds")?;
    check(s.max_lock_ms >= 1, "sched.max_lock_ms", "must be at least 1 ms")?;
    check(s.yield_ms >= 1 && s.yield_ms <= 10_000, "sched.yield_ms", "must be between 1 and 10000 ms")?;
    for (name, g) in &file.gpu_types {
        let key = |k: &str| format!("gpu_types.{name}.{k}");
        check(g.min_clock_mhz <= g.default_clock_mhz && g.default_clock_mhz <= g.max_clock_mhz && g.max_clock_mhz > 0, &key("default_clock_mhz"), "clocks must satisfy 0 < min <= default <= max")?;
        check(g.idle_power_w.is_finite() && g.idle_power_w >= 0.0 && g.max_power_w.is_finite() && g.max_power_w > g.idle_power_w, &key("max_power_w"), "power must satisfy 0 <= idle < max")?;
    }
    let c = &file.carbon;
    check(c.source_format().is_some(), "carbon.format", &format!("unknown format; one of {}", crate::carbon_source::SourceFormat::NAMES))?;
    check(c.refresh_s.is_finite() && c.refresh_s >= 1.0 && c.refresh_s <= 86_400.0, "carbon.refresh_s", "must be between 1 and 86400 seconds")?;
    check(c.source.as_ref().is_none_or(|p| p.is_absolute()), "carbon.source", "must be an absolute path")?;
    let l = &file.learning;
    check(l.early_after_s.is_finite() && l.early_after_s >= 0.0, "learning.early_after_s", "must be a number of seconds >= 0")?;
    check(l.state_file.as_ref().is_none_or(|p| p.is_absolute()), "learning.state_file", "must be an absolute path")?;
    let pc = &file.power_cap;
    check(pc.refresh_s.is_finite() && pc.refresh_s >= 1.0 && pc.refresh_s <= 86_400.0, "power_cap.refresh_s", "must be between 1 and 86400 seconds")?;
    check(pc.file.as_ref().is_none_or(|p| p.is_absolute()), "power_cap.file", "must be an absolute path")?;
    Ok(Config {
        path: Some(path.to_path_buf()),
        sched: file.sched,
        planner: file.planner,
        gpu_types: file.gpu_types,
        carbon: file.carbon,
        learning: file.learning,
        power_cap: file.power_cap,
    })
}

/// 1-based line of byte offset `at`.
fn line_at(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

/// The key serde complains about: "unknown field `foo`, expected ..." or "invalid type ... for key `a.b`".
fn offending_key(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(message[start..start + len].to_string())
}

/// Line where dotted `key` is set (`planner.hints.defer_s` is `defer_s` under `[planner.hints]`,
/// or `hints.defer_s` under `[planner]`); for a bare key (from serde) the first line setting it.
pub fn line_of_key(text: &str, key: &str) -> Option<usize> {
    let mut table = String::new();
    let mut bare_match = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            table = name.trim_matches(|c| c == '[' || c == ']').trim().to_string();
            if table == key {
                return Some(i + 1);
            }
            continue;
        }
        let Some((k, _)) = line.split_once('=') else { continue };
        let k = k.trim().trim_matches('"');
        let full = if table.is_empty() { k.to_string() } else { format!("{table}.{k}") };
        if full == key {
            return Some(i + 1);
        }
        if bare_match.is_none() && (k == key || full.ends_with(&format!(".{key}"))) {
            bare_match = Some(i + 1);
        }
    }
    bare_match
}
