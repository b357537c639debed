//! The mutable state of the simulated GPUs, shared by every process that loads the fake
//! (slurmd, slurmstepd, a test) through one text file, and the file lock that serialises it.
//!
//! Files in the state directory:
//! - `state`: the state, `key = value` lines (format below);
//! - `state.lock`: taken with `flock` — exclusive around every read-modify-write, shared around
//!   every read, so a reader never sees a half-written file.
//!
//! ```text
//! format = 1
//! config = /path/to/fake-nvml.conf          # informational: the config that created it
//! fail = nvmlDeviceSetGpuLockedClocks:NO_PERMISSION   # zero or more rules, see FailRule
//! gpu.0.util_gpu_pct = 0                    # set by tests; drives clock and power
//! gpu.0.util_memory_pct = 0
//! gpu.0.app_memory_clock_mhz = 877          # application clocks
//! gpu.0.app_graphics_clock_mhz = 1312
//! gpu.0.locked_clocks_mhz = none            # or min,max
//! gpu.0.power_limit_mw = 300000
//! gpu.0.energy_mj = 1234.567                # energy counter at energy_at_unix_ns
//! gpu.0.energy_at_unix_ns = 1700000000000000000
//! gpu.0.processes = 1234:1073741824 4321:2048:35   # pid:used_bytes[:sm_util_pct], space separated
//! ```
//!
//! The energy counter is stored lazily: a reader adds power x time since `energy_at_unix_ns`;
//! every update folds that into `energy_mj` first, so a change of clock or utilisation takes
//! effect from the moment it is written. Edit the file by hand only under the lock (or with
//! `fake-nvml-ctl`), or energy accounting may jump.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::codes::{self, Ret};
use crate::config::Config;
use crate::model;

pub const STATE_FILE: &str = "state";
pub const LOCK_FILE: &str = "state.lock";
const FORMAT: u32 = 1;

/// Makes matching calls fail: `fail = <call>[@<gpu>][:<code>]`.
///
/// `<call>` is an NVML function name; a version suffix is ignored on both sides, so
/// `nvmlDeviceGetHandleByIndex` matches `nvmlDeviceGetHandleByIndex_v2`. `*` matches every call
/// except `nvmlErrorString` and `nvmlShutdown`. `@<gpu>` limits the rule to one GPU index.
/// `<code>` is a number or a name (`NO_PERMISSION`); default `UNKNOWN` (999).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailRule {
    pub call: String,
    pub gpu: Option<u32>,
    pub code: Ret,
}

fn strip_version(name: &str) -> &str {
    match name.rsplit_once("_v") {
        Some((base, v)) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => name,
    }
}

impl FailRule {
    pub fn parse(text: &str) -> Option<FailRule> {
        let (target, code) = match text.trim().rsplit_once(':') {
            Some((t, c)) => (t, codes::parse(c)?),
            None => (text.trim(), codes::UNKNOWN),
        };
        let (call, gpu) = match target.split_once('@') {
            Some((c, g)) => (c, Some(g.trim().parse().ok()?)),
            None => (target, None),
        };
        let call = call.trim();
        (!call.is_empty()).then(|| FailRule { call: call.to_string(), gpu, code })
    }

    /// Does this rule fail `call` on GPU `gpu` (None for calls not about one GPU)?
    pub fn matches(&self, call: &str, gpu: Option<u32>) -> bool {
        let call_ok = if self.call == "*" {
            call != "nvmlErrorString" && call != "nvmlShutdown"
        } else {
            strip_version(&self.call) == strip_version(call)
        };
        let gpu_ok = match self.gpu {
            None => true,
            Some(g) => gpu == Some(g),
        };
        call_ok && gpu_ok
    }
}

impl fmt::Display for FailRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.call)?;
        if let Some(g) = self.gpu {
            write!(f, "@{g}")?;
        }
        write!(f, ":{}", codes::name(self.code))
    }
}

/// A process the fake reports as running on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuProcess {
    pub pid: u32,
    pub used_memory_bytes: u64,
    /// Its share of the GPU's SM time (%), as `nvmlDeviceGetProcessUtilization` reports it;
    /// `None`: the driver reports no sample for it.
    pub sm_util_pct: Option<u32>,
}

impl GpuProcess {
    /// `pid:bytes` or `pid:bytes:sm_pct`.
    pub fn parse(text: &str) -> Option<GpuProcess> {
        let mut parts = text.split(':');
        let pid = parts.next()?.parse().ok()?;
        let used_memory_bytes = parts.next()?.parse().ok()?;
        let sm_util_pct = match parts.next() {
            Some(sm) => Some(sm.parse::<u32>().ok()?.min(100)),
            None => None,
        };
        parts.next().is_none().then_some(GpuProcess { pid, used_memory_bytes, sm_util_pct })
    }
}

impl std::fmt::Display for GpuProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.pid, self.used_memory_bytes)?;
        match self.sm_util_pct {
            Some(sm) => write!(f, ":{sm}"),
            None => Ok(()),
        }
    }
}

/// Mutable state of one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuState {
    pub util_gpu_pct: u32,
    pub util_memory_pct: u32,
    pub app_memory_clock_mhz: u32,
    pub app_graphics_clock_mhz: u32,
    /// (min, max) while locked with `nvmlDeviceSetGpuLockedClocks`.
    pub locked_clocks_mhz: Option<(u32, u32)>,
    pub power_limit_mw: u32,
    pub energy_mj: f64,
    pub energy_at_unix_ns: u128,
    pub processes: Vec<GpuProcess>,
    /// Power a registered workload draws on this GPU while busy, in mW (see
    /// `workload_profile`); `None`: the formula of `model` decides.
    pub workload_power_mw: Option<u32>,
}

impl GpuState {
    /// A GPU just after boot: default clocks and limit, idle, counter at zero now.
    pub fn initial(config: &Config, index: usize) -> GpuState {
        let config = config.for_gpu(index);
        GpuState {
            util_gpu_pct: 0,
            util_memory_pct: 0,
            app_memory_clock_mhz: config.default_memory_clock_mhz,
            app_graphics_clock_mhz: config.default_graphics_clock_mhz,
            locked_clocks_mhz: None,
            power_limit_mw: config.power_limit_default_mw,
            energy_mj: 0.0,
            energy_at_unix_ns: now_unix_ns(),
            processes: Vec::new(),
            workload_power_mw: None,
        }
    }

    /// The graphics clock this GPU runs at when busy, whichever control set it: the top of the
    /// locked range while clocks are locked, else the application clock.
    pub fn target_graphics_clock_mhz(&self) -> u32 {
        self.locked_clocks_mhz.map_or(self.app_graphics_clock_mhz, |(_, max)| max)
    }

    pub fn memory_used_bytes(&self) -> u64 {
        self.processes.iter().map(|p| p.used_memory_bytes).sum()
    }
}

/// The whole shared state.
#[derive(Debug, Clone, PartialEq)]
pub struct State {
    pub config: Option<PathBuf>,
    pub fail: Vec<FailRule>,
    pub gpus: Vec<GpuState>,
}

/// A state file that could not be read, written or parsed.
#[derive(Debug)]
pub struct StateError {
    pub path: PathBuf,
    pub message: String,
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for StateError {}

pub fn now_unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

impl State {
    pub fn initial(config: &Config) -> State {
        State {
            config: config.source.clone(),
            fail: Vec::new(),
            gpus: (0..config.gpu_count()).map(|i| GpuState::initial(config, i)).collect(),
        }
    }

    /// The first rule that fails `call` on `gpu`, as its NVML code.
    pub fn failure_for(&self, call: &str, gpu: Option<u32>) -> Option<Ret> {
        self.fail.iter().find(|r| r.matches(call, gpu)).map(|r| r.code)
    }

    /// Adds GPUs the config has and the file lacks (a config may have grown).
    fn reconcile(&mut self, config: &Config) {
        while self.gpus.len() < config.gpu_count() {
            self.gpus.push(GpuState::initial(config, self.gpus.len()));
        }
    }

    /// Moves the energy each GPU drew since its last fold into its counter.
    fn fold_energy(&mut self, config: &Config, now_ns: u128) {
        for (index, gpu) in self.gpus.iter_mut().enumerate() {
            gpu.energy_mj = model::energy_mj_at(&config.for_gpu(index), gpu, now_ns);
            gpu.energy_at_unix_ns = gpu.energy_at_unix_ns.max(now_ns);
        }
    }

    pub fn to_text(&self) -> String {
        let mut out = format!(
            "# fake-nvml state; written under flock(state.lock); see fake-nvml's state.rs\nformat = {FORMAT}\n"
        );
        let config = self
            .config
            .as_ref()
            .map_or_else(|| "(builtin)".to_string(), |p| p.display().to_string());
        out.push_str(&format!("config = {config}\n"));
        for rule in &self.fail {
            out.push_str(&format!("fail = {rule}\n"));
        }
        for (i, g) in self.gpus.iter().enumerate() {
            let locked = g
                .locked_clocks_mhz
                .map_or_else(|| "none".to_string(), |(lo, hi)| format!("{lo},{hi}"));
            let procs: Vec<String> = g
                .processes
                .iter()
                .map(ToString::to_string)
                .collect();
            out.push_str(&format!(
                "gpu.{i}.util_gpu_pct = {}\ngpu.{i}.util_memory_pct = {}\n\
                 gpu.{i}.app_memory_clock_mhz = {}\ngpu.{i}.app_graphics_clock_mhz = {}\n\
                 gpu.{i}.locked_clocks_mhz = {locked}\ngpu.{i}.power_limit_mw = {}\n\
                 gpu.{i}.energy_mj = {:.3}\ngpu.{i}.energy_at_unix_ns = {}\ngpu.{i}.processes = {}\n\
                 gpu.{i}.workload_power_mw = {}\n",
                g.util_gpu_pct,
                g.util_memory_pct,
                g.app_memory_clock_mhz,
                g.app_graphics_clock_mhz,
                g.power_limit_mw,
                g.energy_mj,
                g.energy_at_unix_ns,
                procs.join(" "),
                g.workload_power_mw.map_or_else(|| "none".to_string(), |p| p.to_string()),
            ));
        }
        out
    }

    /// Parses state text; GPUs missing from it start in their initial state.
    pub fn parse(text: &str, config: &Config) -> Result<State, String> {
        let mut state = State::initial(config);
        state.gpus.clear();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = |what: &str| format!("line {}: {what}: {raw:?}", n + 1);
            let (key, value) = line.split_once('=').ok_or_else(|| bad("expected key = value"))?;
            let (key, value) = (key.trim(), value.trim());
            match key {
                "format" => {
                    if value != FORMAT.to_string() {
                        return Err(bad("unsupported format"));
                    }
                }
                "config" => state.config = (value != "(builtin)").then(|| PathBuf::from(value)),
                "fail" => state.fail.push(FailRule::parse(value).ok_or_else(|| bad("bad fail rule"))?),
                _ => {
                    let mut parts = key.splitn(3, '.');
                    let (Some("gpu"), Some(index), Some(field)) = (parts.next(), parts.next(), parts.next()) else {
                        return Err(bad("unknown key"));
                    };
                    let index: usize = index.parse().map_err(|_| bad("bad GPU index"))?;
                    if index >= 64 {
                        return Err(bad("GPU index out of range"));
                    }
                    while state.gpus.len() <= index {
                        state.gpus.push(GpuState::initial(config, state.gpus.len()));
                    }
                    let gpu = &mut state.gpus[index];
                    let num = |v: &str| v.parse::<u32>().map_err(|_| bad("expected a whole number"));
                    match field {
                        "util_gpu_pct" => gpu.util_gpu_pct = num(value)?.min(100),
                        "util_memory_pct" => gpu.util_memory_pct = num(value)?.min(100),
                        "app_memory_clock_mhz" => gpu.app_memory_clock_mhz = num(value)?,
                        "app_graphics_clock_mhz" => gpu.app_graphics_clock_mhz = num(value)?,
                        "locked_clocks_mhz" => {
                            gpu.locked_clocks_mhz = if value == "none" {
                                None
                            } else {
                                let (lo, hi) = value.split_once(',').ok_or_else(|| bad("expected none or min,max"))?;
                                Some((num(lo.trim())?, num(hi.trim())?))
                            }
                        }
                        "power_limit_mw" => gpu.power_limit_mw = num(value)?,
                        "workload_power_mw" => gpu.workload_power_mw = if value == "none" { None } else { Some(num(value)?) },
                        "energy_mj" => {
                            gpu.energy_mj = value
                                .parse::<f64>()
                                .ok()
                                .filter(|e| e.is_finite() && *e >= 0.0)
                                .ok_or_else(|| bad("expected a non-negative number"))?
                        }
                        "energy_at_unix_ns" => {
                            gpu.energy_at_unix_ns = value.parse().map_err(|_| bad("expected a whole number"))?
                        }
                        "processes" => {
                            gpu.processes = value
                                .split_whitespace()
                                .map(GpuProcess::parse)
                                .collect::<Option<Vec<_>>>()
                                .ok_or_else(|| bad("expected pid:bytes[:sm_pct] ..."))?
                        }
                        _ => return Err(bad("unknown GPU field")),
                    }
                }
            }
        }
        state.reconcile(config);
        Ok(state)
    }
}

/// The state directory and its lock.
#[derive(Debug, Clone)]
pub struct StateStore {
    dir: PathBuf,
}

impl StateStore {
    pub fn new(dir: impl Into<PathBuf>) -> StateStore {
        StateStore { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn state_path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    fn error(&self, message: impl fmt::Display) -> StateError {
        StateError { path: self.state_path(), message: message.to_string() }
    }

    fn read_unlocked(&self, config: &Config) -> Result<State, StateError> {
        match fs::read_to_string(self.state_path()) {
            Ok(text) => State::parse(&text, config).map_err(|m| self.error(m)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(State::initial(config)),
            Err(e) => Err(self.error(e)),
        }
    }

    /// Reads the state under a shared lock. A directory or file that does not exist yet reads
    /// as the initial state (and is not created: readers may lack write permission).
    pub fn load(&self, config: &Config) -> Result<State, StateError> {
        match File::open(self.dir.join(LOCK_FILE)) {
            Ok(lock) => {
                lock.lock_shared().map_err(|e| self.error(format!("flock: {e}")))?;
                self.read_unlocked(config)
                // the lock is released when `lock` is dropped
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.read_unlocked(config),
            Err(e) => Err(self.error(e)),
        }
    }

    /// Read-modify-write under the exclusive lock. Energy is folded up to now before `change`
    /// runs, so what `change` does to clocks or utilisation counts from now on.
    pub fn update<T>(&self, config: &Config, change: impl FnOnce(&mut State) -> T) -> Result<T, StateError> {
        fs::create_dir_all(&self.dir).map_err(|e| self.error(format!("create state dir: {e}")))?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join(LOCK_FILE))
            .map_err(|e| self.error(format!("open lock: {e}")))?;
        lock.lock().map_err(|e| self.error(format!("flock: {e}")))?;
        let mut state = self.read_unlocked(config)?;
        state.fold_energy(config, now_unix_ns());
        let out = change(&mut state);
        // Rewritten in place: every reader holds the shared lock, so none sees a half-written
        // file. Overwrite-then-shrink rather than truncate-then-write or rename-over, which
        // ext4 (auto_da_alloc) turns into a synchronous flush of about a millisecond.
        let write = || -> io::Result<()> {
            let text = state.to_text();
            let mut f = OpenOptions::new().create(true).truncate(false).write(true).open(self.state_path())?;
            f.write_all(text.as_bytes())?;
            f.set_len(text.len() as u64)
        };
        write().map_err(|e| self.error(format!("write: {e}")))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_rules_parse_and_match() {
        let r = FailRule::parse("nvmlDeviceGetHandleByIndex:GPU_IS_LOST").unwrap();
        assert!(r.matches("nvmlDeviceGetHandleByIndex_v2", Some(3)));
        assert_eq!(r.code, codes::GPU_IS_LOST);
        let r = FailRule::parse("nvmlDeviceGetPowerUsage@1:4").unwrap();
        assert!(r.matches("nvmlDeviceGetPowerUsage", Some(1)));
        assert!(!r.matches("nvmlDeviceGetPowerUsage", Some(0)));
        let r = FailRule::parse("*").unwrap();
        assert_eq!(r.code, codes::UNKNOWN);
        assert!(r.matches("nvmlInit_v2", None));
        assert!(!r.matches("nvmlErrorString", None));
        assert_eq!(FailRule::parse("x:NOPE"), None);
        assert_eq!(r.to_string(), "*:UNKNOWN");
    }

    #[test]
    fn text_round_trips() {
        let config = Config::default();
        let mut s = State::initial(&config);
        s.fail.push(FailRule::parse("nvmlDeviceSetGpuLockedClocks@2:NO_PERMISSION").unwrap());
        s.gpus[1].locked_clocks_mhz = Some((135, 900));
        s.gpus[1].util_gpu_pct = 70;
        s.gpus[1].energy_mj = 12.5;
        s.gpus[3].processes = vec![
            GpuProcess { pid: 42, used_memory_bytes: 1 << 30, sm_util_pct: None },
            GpuProcess { pid: 43, used_memory_bytes: 2, sm_util_pct: Some(35) },
        ];
        let back = State::parse(&s.to_text(), &config).unwrap();
        assert_eq!(back, s);
        let e = State::parse("gpu.0.bogus = 1", &config).unwrap_err();
        assert!(e.contains("unknown GPU field"), "{e}");
    }

    #[test]
    fn concurrent_updates_are_not_lost() {
        let dir = std::env::temp_dir().join(format!("fake-nvml-lock-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let store = StateStore::new(&dir);
        let config = Config::default();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..25 {
                        store.update(&config, |s| s.gpus[0].util_gpu_pct += 1).unwrap();
                        assert!(store.load(&config).is_ok(), "a reader never sees a torn file");
                    }
                });
            }
        });
        assert_eq!(store.load(&config).unwrap().gpus[0].util_gpu_pct, 100);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn update_persists_and_load_sees_it() {
        let dir = std::env::temp_dir().join(format!("fake-nvml-state-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let store = StateStore::new(&dir);
        let config = Config::default();
        assert_eq!(store.load(&config).unwrap().gpus.len(), 4);
        store.update(&config, |s| s.gpus[2].util_gpu_pct = 55).unwrap();
        assert_eq!(store.load(&config).unwrap().gpus[2].util_gpu_pct, 55);
        let _ = fs::remove_dir_all(&dir);
    }
}
