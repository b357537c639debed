//! Clock arbitration between the steps that share a GPU, and the node-local ledger that makes
//! it survive crashes.
//!
//! Several steps may run on one GPU (`gres/shard`, or the GPU plugin and the SPANK plugin both
//! asking for the same step). Each asks for application clocks; the GPU runs at the **highest**
//! request among the live steps on it, drops back when a step leaves, and returns to the clocks
//! in force before the first request when the last one leaves (the driver's defaults, unless an
//! admin had set others). Within one job an
//! [`Source::Explicit`] `--gpu-freq` beats the [`Source::Policy`] clock (of the same step, or of
//! the batch step around an `srun --gpu-freq`).
//!
//! A [`Source::Ceiling`] (sched/energy's power directive for a running job, applied by the
//! job's extern step, docs/power-cap.md) is not a request: it bounds the GPU's clock from
//! above, whatever the tenants ask for (the lowest ceiling on the GPU wins; a GPU no step
//! asks anything of runs at its default clock bounded by the ceiling). It is a record of the
//! extern step like any other, so it goes when that step ends (its release, or repair once its
//! slurmstepd is gone) and the GPU's clock comes back.
//!
//! How a clock reaches a GPU is the GPU's **control** ([`crate::clock_control`]): locked clocks,
//! application clocks or a power limit, probed in that order (or `$SLURM_ENERGY_GPU_CONTROLS`)
//! the first time a step asks for a setting on the GPU, kept in the ledger, and undone the same
//! way when the last step leaves (also by repair, after a step died).
//!
//! # The ledger
//!
//! One directory per host (default [`DEFAULT_LEDGER_DIR`]), mode 0700, owned by the user the
//! daemons run as (root). It holds `ledger` (the records) and `ledger.lock` (an `flock`, held
//! exclusively for the whole read-modify-apply-write of one operation, so concurrent steps on
//! the node, and several slurmd sharing a host in tests, serialise). Writes are atomic: a
//! temporary file in the same directory, `fsync`, `rename`, `fsync` of the directory. GPUs are
//! keyed by UUID, so every process agrees on which GPU a record means whatever its NVML index
//! order, and several slurmd that share a host (and its GPUs) share one ledger.
//!
//! Text format, one record per line (`#` starts a comment):
//!
//! ```text
//! gpu uuid=GPU-... default_memory_mhz=877 default_graphics_mhz=1312 prior_memory_mhz=0 prior_graphics_mhz=0 reset_pending=0 control=locked_clocks prior_power_limit_mw=0
//! req uuid=GPU-... job=17 step=4294967291 node=n1 pid=4242 start_ticks=991 source=policy memory_mhz=877 graphics_mhz=945 power_limit_mw=0
//! ```
//!
//! `control` is the GPU's control once probed (`none` before; a ledger written before controls
//! existed has only application clocks, and is read so), `prior_power_limit_mw` the limit to
//! restore under the power-limit control, `power_limit_mw` the planner's ladder limit of a
//! request (0: only a clock).
//!
//! A `gpu` line exists while the arbiter has (or may have) changed that GPU's clocks: its
//! defaults as the driver reported them, the clocks in force before the first request when
//! they differed from those (`prior_*`, 0 = none), and `reset_pending=1` when a reset failed
//! and must be retried. A `req` line is one step's request on one GPU: the step (job id, step id, node
//! name), its slurmstepd (pid and start time in clock ticks since boot, field 22 of
//! `/proc/<pid>/stat`, which tells a live slurmstepd from a new process that reuses its pid),
//! where the clock came from, and the clocks.
//!
//! # Repair
//!
//! Every operation ([`Arbiter::request`], [`Arbiter::release`], [`Arbiter::repair`]) first drops
//! the requests of steps whose slurmstepd is gone (no such pid, or a different start time) and
//! re-applies the clocks of the GPUs they were on. So a step killed with SIGKILL, or a
//! slurmstepd that died, leaves no GPU at a low clock once the next step on the node starts or
//! ends, or once slurmd calls [`Arbiter::repair`] at start.
//!
//! A request is written to the ledger **before** clocks are changed, so a crash between the two
//! leaves a record that repair undoes; a release changes clocks first and then writes once (a
//! crash in between leaves requests of an exiting slurmstepd, which the next operation prunes). Nothing here panics on data from files, `/proc` or NVML.
//!
//! # Hostile files
//!
//! The directory is refused when it is a symlink, belongs to another user, or sits in a
//! directory others may write to without the sticky bit; files in it are opened without
//! following symlinks. A ledger that cannot be read as ours (it does not parse, is a symlink
//! or not a regular file) is moved aside as `ledger.corrupt-<unix time>` and the operation goes
//! on with an empty one; since nothing then tells which GPU a step slowed, every GPU not at its
//! default clocks is reset (never slower than without the bundle). A lock held by a stuck
//! process is waited for at most 3 s; a step that cannot release its clocks then resets those
//! of its GPUs that no other job's live step asks for ([`Arbiter::restore_without_ledger`]),
//! and leaves a shared one to the next operation, which drops the step's request once its
//! slurmstepd is gone. Nothing sets clocks without the ledger.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::clock_control::{self, ClockControl, ControlOrder, Prior, Setting};
pub use crate::clock_control::Applied;
use crate::control::{AppClocksMhz, GpuControl};
use crate::error::GpuError;

/// Where the ledger lives unless configured otherwise.
pub const DEFAULT_LEDGER_DIR: &str = "/var/spool/slurm-energy/clock-ledger";
/// Environment variable that overrides [`DEFAULT_LEDGER_DIR`] (see [`ledger_dir_from_env`]).
pub const LEDGER_DIR_ENV: &str = "SLURM_ENERGY_CLOCK_LEDGER";

const LEDGER_FILE: &str = "ledger";
const LOCK_FILE: &str = "ledger.lock";
/// How long an operation waits for another process's lock before giving up (a step must not
/// hang because another one is stuck in the driver).
const LOCK_TIMEOUT: Duration = Duration::from_secs(3);

/// `$SLURM_ENERGY_CLOCK_LEDGER`, else [`DEFAULT_LEDGER_DIR`].
pub fn ledger_dir_from_env() -> PathBuf {
    std::env::var_os(LEDGER_DIR_ENV).filter(|v| !v.is_empty()).map_or_else(|| PathBuf::from(DEFAULT_LEDGER_DIR), PathBuf::from)
}

/// Where a step's clock request came from. Within one job, `Explicit` wins over `Policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// The energy policy's choice (sched/energy's decision, or the job's hints and the model).
    Policy,
    /// The user's `--gpu-freq`.
    Explicit,
    /// A bound on the GPU's clock (sched/energy's power directive), not a request.
    Ceiling,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Policy => "policy",
            Source::Explicit => "explicit",
            Source::Ceiling => "ceiling",
        }
    }
    fn parse(s: &str) -> Option<Source> {
        match s {
            "policy" => Some(Source::Policy),
            "explicit" => Some(Source::Explicit),
            "ceiling" => Some(Source::Ceiling),
            _ => None,
        }
    }
}

/// One step and the slurmstepd that runs it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StepKey {
    pub job_id: u32,
    /// Slurm's step id (`SLURM_BATCH_SCRIPT` = 0xfffffffb for the batch step).
    pub step_id: u32,
    /// Slurm node name (several slurmd may share a host).
    pub node: String,
    /// pid of the slurmstepd that runs the step.
    pub stepd_pid: u32,
    /// Its start time, clock ticks after boot (field 22 of `/proc/<pid>/stat`).
    pub stepd_start_ticks: u64,
}

impl StepKey {
    /// The step run by process `stepd_pid` (normally `std::process::id()` in slurmstepd).
    pub fn for_process(job_id: u32, step_id: u32, node: &str, stepd_pid: u32) -> io::Result<StepKey> {
        let stepd_start_ticks = process_start_ticks(stepd_pid)?;
        Ok(StepKey { job_id, step_id, node: node.to_string(), stepd_pid, stepd_start_ticks })
    }

    /// True while the same process (pid and start time) exists and has not exited (a killed
    /// slurmstepd stays a zombie until its parent, often init, reaps it).
    pub fn is_alive(&self) -> bool {
        process_status(self.stepd_pid).is_ok_and(|(state, t)| t == self.stepd_start_ticks && !matches!(state, 'Z' | 'X' | 'x'))
    }

    fn same_step(&self, other: &StepKey) -> bool {
        self == other
    }
}

impl fmt::Display for StepKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let step = match self.step_id {
            0xffff_fffa => "interactive".to_string(),
            0xffff_fffb => "batch".to_string(),
            0xffff_fffc => "extern".to_string(),
            n => n.to_string(),
        };
        write!(f, "job {} step {step} on {} (slurmstepd {})", self.job_id, self.node, self.stepd_pid)
    }
}

/// Start time of a process in clock ticks after boot.
pub fn process_start_ticks(pid: u32) -> io::Result<u64> {
    process_status(pid).map(|(_, t)| t)
}

/// State letter (`R`, `S`, `Z`, ...) and start time of a process, from `/proc/<pid>/stat`.
fn process_status(pid: u32) -> io::Result<(char, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may contain spaces and parentheses: fields after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).ok_or_else(|| io::Error::other("malformed /proc stat"))?;
    // rest starts at field 3 (state); starttime is field 22.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first().and_then(|s| s.chars().next()).ok_or_else(|| io::Error::other("no state in /proc stat"))?;
    let start = fields.get(22 - 3).and_then(|t| t.parse().ok()).ok_or_else(|| io::Error::other("no start time in /proc stat"))?;
    Ok((state, start))
}

/// One GPU the arbiter looks after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuRecord {
    pub uuid: String,
    /// The driver's default application clocks, when it could tell.
    pub default_clocks_mhz: Option<AppClocksMhz>,
    /// The application clocks in force before the first request (set by an admin or another
    /// tool), when they differ from the defaults: restored when no step is left.
    pub prior_clocks_mhz: Option<AppClocksMhz>,
    /// A reset failed: retry it at the next operation.
    pub reset_pending: bool,
    /// How this GPU's clock is set; `None` until a control worked.
    pub control: Option<ClockControl>,
    /// The power limit in force before the power-limit control changed it.
    pub prior_power_limit_mw: Option<u32>,
}

impl GpuRecord {
    fn new(uuid: String, default_clocks_mhz: Option<AppClocksMhz>) -> GpuRecord {
        GpuRecord { uuid, default_clocks_mhz, prior_clocks_mhz: None, reset_pending: false, control: None, prior_power_limit_mw: None }
    }

    fn prior(&self) -> Prior {
        Prior { clocks_mhz: self.prior_clocks_mhz, power_limit_mw: self.prior_power_limit_mw }
    }
}

/// One step's request on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub uuid: String,
    pub step: StepKey,
    pub source: Source,
    pub clocks_mhz: AppClocksMhz,
    /// The planner's power limit for this clock (its ladder's unit), if it chose one.
    pub power_limit_mw: Option<u32>,
}

impl Request {
    fn setting(&self) -> Setting {
        Setting { clocks_mhz: self.clocks_mhz, power_limit_mw: self.power_limit_mw }
    }
}

/// The ledger's content.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ledger {
    pub gpus: Vec<GpuRecord>,
    pub requests: Vec<Request>,
}

impl Ledger {
    /// The clocks GPU `uuid` should run at: the highest graphics and memory clock among its
    /// jobs' requests (each clock on its own, [`clock_control::highest_clocks_mhz`]), where a job
    /// that has any explicit (`--gpu-freq`) request on the GPU counts only its explicit
    /// requests (so a user's `srun --gpu-freq` inside a batch job beats the policy clock the
    /// batch step asked for), else its policy requests. `None`: no step left, reset to default.
    pub fn effective_clocks_mhz(&self, uuid: &str) -> Option<AppClocksMhz> {
        clock_control::highest_clocks_mhz(self.job_settings(uuid).into_iter().map(|s| s.clocks_mhz))
    }

    /// Each job's winning setting on GPU `uuid` (explicit over policy, then the highest clock);
    /// [`clock_control::combine`] makes them one.
    pub fn job_settings(&self, uuid: &str) -> Vec<Setting> {
        let key = |c: &AppClocksMhz| (c.graphics_mhz, c.memory_mhz);
        let mut per_job: BTreeMap<u32, (Source, Setting)> = BTreeMap::new();
        for r in self.requests.iter().filter(|r| r.uuid == uuid && r.source != Source::Ceiling) {
            let e = per_job.entry(r.step.job_id).or_insert((r.source, r.setting()));
            if r.source > e.0 || (r.source == e.0 && key(&r.clocks_mhz) > key(&e.1.clocks_mhz)) {
                *e = (r.source, r.setting());
            }
        }
        per_job.into_values().map(|(_, s)| s).collect()
    }

    /// The lowest ceiling on GPU `uuid` ([`Source::Ceiling`] records): the lowest graphics clock,
    /// the lowest memory clock among those that bound it (0: unbounded), the lowest power
    /// limit among those that carry one. `None`: no ceiling.
    pub fn ceiling(&self, uuid: &str) -> Option<Setting> {
        let min_nonzero = |a: u32, b: u32| if a == 0 { b } else if b == 0 { a } else { a.min(b) };
        self.requests.iter().filter(|r| r.uuid == uuid && r.source == Source::Ceiling).map(Request::setting).reduce(|a, b| Setting {
            clocks_mhz: AppClocksMhz { memory_mhz: min_nonzero(a.clocks_mhz.memory_mhz, b.clocks_mhz.memory_mhz), graphics_mhz: a.clocks_mhz.graphics_mhz.min(b.clocks_mhz.graphics_mhz) },
            power_limit_mw: match (a.power_limit_mw, b.power_limit_mw) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            },
        })
    }

    fn gpu_mut(&mut self, uuid: &str) -> Option<&mut GpuRecord> {
        self.gpus.iter_mut().find(|g| g.uuid == uuid)
    }

    /// Text form (see the module docs).
    pub fn to_text(&self) -> String {
        let mut out = String::from("# slurm-energy GPU clock ledger (gpu_control::arbiter); do not edit while jobs run\n");
        for g in &self.gpus {
            let (m, gr) = g.default_clocks_mhz.map_or((0, 0), |c| (c.memory_mhz, c.graphics_mhz));
            let (pm, pg) = g.prior_clocks_mhz.map_or((0, 0), |c| (c.memory_mhz, c.graphics_mhz));
            out.push_str(&format!(
                "gpu uuid={} default_memory_mhz={m} default_graphics_mhz={gr} prior_memory_mhz={pm} prior_graphics_mhz={pg} reset_pending={} control={} prior_power_limit_mw={}\n",
                g.uuid,
                u8::from(g.reset_pending),
                g.control.map_or("none", ClockControl::as_str),
                g.prior_power_limit_mw.unwrap_or(0)
            ));
        }
        for r in &self.requests {
            out.push_str(&format!(
                "req uuid={} job={} step={} node={} pid={} start_ticks={} source={} memory_mhz={} graphics_mhz={} power_limit_mw={}\n",
                r.uuid,
                r.step.job_id,
                r.step.step_id,
                r.step.node,
                r.step.stepd_pid,
                r.step.stepd_start_ticks,
                r.source.as_str(),
                r.clocks_mhz.memory_mhz,
                r.clocks_mhz.graphics_mhz,
                r.power_limit_mw.unwrap_or(0)
            ));
        }
        out
    }

    /// Parses [`Ledger::to_text`]; an error names the line.
    pub fn parse(text: &str) -> Result<Ledger, String> {
        let mut ledger = Ledger::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let kind = words.next().unwrap_or_default();
            let fields: BTreeMap<&str, &str> = words.filter_map(|w| w.split_once('=')).collect();
            let bad = |what: &str| format!("line {}: {what}: {line:?}", n + 1);
            let text_of = |k: &str| fields.get(k).copied().filter(|v| !v.is_empty()).ok_or_else(|| bad(&format!("no {k}")));
            let num = |k: &str| -> Result<u64, String> { text_of(k)?.parse::<u64>().map_err(|_| bad(&format!("bad {k}"))) };
            let num32 = |k: &str| -> Result<u32, String> { u32::try_from(num(k)?).map_err(|_| bad(&format!("bad {k}"))) };
            match kind {
                "gpu" => {
                    let defaults = AppClocksMhz { memory_mhz: num32("default_memory_mhz")?, graphics_mhz: num32("default_graphics_mhz")? };
                    // Ledgers written before prior clocks were kept have none.
                    let optional = |k: &str| if fields.contains_key(k) { num32(k) } else { Ok(0) };
                    let prior = AppClocksMhz { memory_mhz: optional("prior_memory_mhz")?, graphics_mhz: optional("prior_graphics_mhz")? };
                    // Ledgers written before controls existed used application clocks only.
                    let control = match fields.get("control").copied() {
                        None => Some(ClockControl::ApplicationClocks),
                        Some("none") => None,
                        Some(c) => Some(ClockControl::parse(c).ok_or_else(|| bad("bad control"))?),
                    };
                    ledger.gpus.push(GpuRecord {
                        uuid: text_of("uuid")?.to_string(),
                        default_clocks_mhz: (defaults.graphics_mhz != 0).then_some(defaults),
                        prior_clocks_mhz: (prior.graphics_mhz != 0).then_some(prior),
                        reset_pending: num("reset_pending")? != 0,
                        control,
                        prior_power_limit_mw: Some(optional("prior_power_limit_mw")?).filter(|l| *l != 0),
                    });
                }
                "req" => ledger.requests.push(Request {
                    uuid: text_of("uuid")?.to_string(),
                    step: StepKey {
                        job_id: num32("job")?,
                        step_id: num32("step")?,
                        node: text_of("node")?.to_string(),
                        stepd_pid: num32("pid")?,
                        stepd_start_ticks: num("start_ticks")?,
                    },
                    source: Source::parse(text_of("source")?).ok_or_else(|| bad("bad source"))?,
                    clocks_mhz: AppClocksMhz { memory_mhz: num32("memory_mhz")?, graphics_mhz: num32("graphics_mhz")? },
                    power_limit_mw: if fields.contains_key("power_limit_mw") { Some(num32("power_limit_mw")?).filter(|l| *l != 0) } else { None },
                }),
                _ => return Err(bad("unknown record")),
            }
        }
        Ok(ledger)
    }
}

/// A ledger operation that could not be done at all (the GPUs were not touched).
#[derive(Debug)]
pub struct ArbiterError {
    pub path: PathBuf,
    /// What was being done, e.g. `create`, `lock`, `read`, `write`.
    pub op: &'static str,
    pub reason: String,
}

impl fmt::Display for ArbiterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "clock ledger {}: {}: {}", self.path.display(), self.op, self.reason)
    }
}

impl std::error::Error for ArbiterError {}

fn ioerr<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> ArbiterError + 'a {
    move |e| ArbiterError { path: path.to_path_buf(), op, reason: e.to_string() }
}

/// What an operation did. GPU failures do not stop it: the ledger stays right, the failed
/// GPUs are listed (each error names the GPU and the NVML call), and a failed reset is retried
/// by the next operation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// (NVML index, what was applied).
    pub applied: Vec<(u32, Applied)>,
    pub gpu_errors: Vec<GpuError>,
    /// Steps whose slurmstepd was gone; their requests were dropped.
    pub repaired_steps: Vec<StepKey>,
    /// A ledger that could not be read was moved aside (the operation went on without it).
    pub quarantined: Option<Quarantined>,
    /// GPUs whose control was probed by this operation: (NVML index, the control that worked,
    /// the controls skipped before it with their answers).
    pub controls: Vec<(u32, ClockControl, Vec<GpuError>)>,
}

impl Outcome {
    /// One log line per GPU whose control was chosen, e.g. `GPU 2: clock control: locked clocks
    /// (skipped application clocks: nvmlDeviceSetApplicationsClocks: Not Supported)`.
    pub fn describe_controls(&self) -> Vec<String> {
        self.controls
            .iter()
            .map(|(gpu, control, skipped)| {
                let mut line = format!("GPU {gpu}: clock control: {}", control.describe());
                if !skipped.is_empty() {
                    let s: Vec<String> = skipped.iter().map(|e| format!("{}: {}", e.call, e.reason)).collect();
                    line.push_str(&format!(" (skipped {})", s.join("; ")));
                }
                line
            })
            .collect()
    }
}

/// What [`Arbiter::restore_without_ledger`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unarbitrated {
    /// GPUs (NVML indices) put back to their defaults.
    pub reset: Vec<u32>,
    /// GPUs left as they are (another job's step asks for them, or their UUID was unreadable).
    pub left: Vec<u32>,
    pub errors: Vec<GpuError>,
}

/// Where an unreadable ledger went, and why it was unreadable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    pub path: PathBuf,
    pub reason: String,
}

/// The node's clock arbiter over one ledger directory.
#[derive(Debug, Clone)]
pub struct Arbiter {
    dir: PathBuf,
    order: ControlOrder,
}

/// Exclusive lock on the ledger; released on drop (closing the descriptor).
struct LockGuard {
    _file: File,
}

impl Arbiter {
    /// Opens (creating if needed) the ledger directory, checked by [`ensure_private_dir`]:
    /// whoever can write the ledger can make root set clocks.
    ///
    /// The order in which GPU controls are probed comes from `$SLURM_ENERGY_GPU_CONTROLS`
    /// (default locked clocks, application clocks, power limit); a value that does not parse
    /// is an error (`op` = `config`).
    pub fn open(dir: &Path) -> Result<Arbiter, ArbiterError> {
        let order = ControlOrder::from_env().map_err(|reason| ArbiterError { path: dir.to_path_buf(), op: "config", reason })?;
        ensure_private_dir(dir)?;
        Ok(Arbiter { dir: dir.to_path_buf(), order })
    }

    /// The same ledger, probing GPU controls in `order`.
    pub fn with_order(mut self, order: ControlOrder) -> Arbiter {
        self.order = order;
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of the ledger file.
    pub fn ledger_path(&self) -> PathBuf {
        self.dir.join(LEDGER_FILE)
    }

    /// Step `step` asks for `clocks` on the GPUs with NVML indices `gpus`. Replaces the step's
    /// earlier request of the same source on those GPUs; applies each GPU's effective clocks.
    pub fn request(&self, gpu: &dyn GpuControl, step: &StepKey, gpus: &[u32], clocks: AppClocksMhz, source: Source) -> Result<Outcome, ArbiterError> {
        let each: Vec<(u32, AppClocksMhz)> = gpus.iter().map(|&g| (g, clocks)).collect();
        self.request_each(gpu, step, &each, source)
    }

    /// Like [`Arbiter::request`] with clocks per GPU (`(NVML index, clocks)`), for steps whose
    /// GPUs resolve the same `--gpu-freq` to different clocks.
    pub fn request_each(&self, gpu: &dyn GpuControl, step: &StepKey, gpus: &[(u32, AppClocksMhz)], source: Source) -> Result<Outcome, ArbiterError> {
        let each: Vec<(u32, Setting)> = gpus.iter().map(|&(g, c)| (g, Setting::clocks(c))).collect();
        self.request_settings(gpu, step, &each, source)
    }

    /// Like [`Arbiter::request_each`] with settings that may carry the planner's power limit
    /// (used as measured where a GPU is controlled by its power limit).
    pub fn request_settings(&self, gpu: &dyn GpuControl, step: &StepKey, gpus: &[(u32, Setting)], source: Source) -> Result<Outcome, ArbiterError> {
        let _lock = self.lock()?;
        let mut out = Outcome::default();
        let mut ledger = self.load(&mut out)?;
        if out.quarantined.is_some() {
            reset_off_default(gpu, &mut out);
        }
        let mut touched = prune_dead(&mut ledger, &mut out);
        let mut index_of: BTreeMap<String, u32> = BTreeMap::new();
        for &(index, setting) in gpus {
            let uuid = match gpu.uuid(index) {
                Ok(u) => u,
                Err(e) => {
                    out.gpu_errors.push(e);
                    continue;
                }
            };
            if ledger.gpu_mut(&uuid).is_none() {
                let defaults = match gpu.default_application_clocks_mhz(index) {
                    Ok(c) => Some(c),
                    Err(e) => {
                        out.gpu_errors.push(e);
                        None
                    }
                };
                // The control, and what it must restore, are found when the setting is applied.
                ledger.gpus.push(GpuRecord::new(uuid.clone(), defaults));
            }
            ledger.requests.retain(|r| !(r.uuid == uuid && r.source == source && r.step.same_step(step)));
            ledger.requests.push(Request { uuid: uuid.clone(), step: step.clone(), source, clocks_mhz: setting.clocks_mhz, power_limit_mw: setting.power_limit_mw });
            index_of.insert(uuid.clone(), index);
            touched.insert(uuid);
        }
        // Record first: a crash after this point leaves something for repair to undo.
        self.store(&ledger)?;
        self.apply(gpu, &mut ledger, &touched, &index_of, &mut out, false)?;
        Ok(out)
    }

    /// Step `step` (a job's extern step) bounds the clock of the GPUs with NVML indices `gpus`
    /// by `ceiling` (`None`: lifts its ceiling); replaces its earlier ceiling there and applies
    /// each GPU's effective setting. The graphics clock bounds the GPU's; a memory clock of 0
    /// leaves the memory clock unbounded.
    pub fn set_ceiling(&self, gpu: &dyn GpuControl, step: &StepKey, gpus: &[u32], ceiling: Option<Setting>) -> Result<Outcome, ArbiterError> {
        if let Some(c) = ceiling {
            let each: Vec<(u32, Setting)> = gpus.iter().map(|&g| (g, c)).collect();
            return self.request_settings(gpu, step, &each, Source::Ceiling);
        }
        let _lock = self.lock()?;
        let mut out = Outcome::default();
        let mut ledger = self.load(&mut out)?;
        if out.quarantined.is_some() {
            reset_off_default(gpu, &mut out);
        }
        let mut touched = prune_dead(&mut ledger, &mut out);
        let before = ledger.requests.len();
        ledger.requests.retain(|r| {
            let mine = r.source == Source::Ceiling && r.step.same_step(step);
            if mine {
                touched.insert(r.uuid.clone());
            }
            !mine
        });
        let changed = ledger.requests.len() != before || !out.repaired_steps.is_empty();
        self.apply(gpu, &mut ledger, &touched, &BTreeMap::new(), &mut out, changed)?;
        Ok(out)
    }

    /// Step `step` is over: drop all its requests (every source, every GPU) and apply what
    /// remains on its GPUs (the default when nothing does).
    pub fn release(&self, gpu: &dyn GpuControl, step: &StepKey) -> Result<Outcome, ArbiterError> {
        let _lock = self.lock()?;
        let mut out = Outcome::default();
        let mut ledger = self.load(&mut out)?;
        if out.quarantined.is_some() {
            reset_off_default(gpu, &mut out);
        }
        let mut touched = prune_dead(&mut ledger, &mut out);
        let before = ledger.requests.len();
        ledger.requests.retain(|r| {
            let mine = r.step.same_step(step);
            if mine {
                touched.insert(r.uuid.clone());
            }
            !mine
        });
        // Clocks first, then one write: a crash in between leaves requests of a slurmstepd
        // that is about to exit, which the next operation prunes and re-applies.
        let changed = ledger.requests.len() != before || !out.repaired_steps.is_empty();
        self.apply(gpu, &mut ledger, &touched, &BTreeMap::new(), &mut out, changed)?;
        Ok(out)
    }

    /// Drops the requests of dead steps and re-applies every recorded GPU's clocks (resetting
    /// those no live step asks for). For slurmd's start, and harmless at any time.
    pub fn repair(&self, gpu: &dyn GpuControl) -> Result<Outcome, ArbiterError> {
        let _lock = self.lock()?;
        let mut out = Outcome::default();
        let mut ledger = self.load(&mut out)?;
        if out.quarantined.is_some() {
            reset_off_default(gpu, &mut out);
        }
        let mut touched = prune_dead(&mut ledger, &mut out);
        touched.extend(ledger.gpus.iter().map(|g| g.uuid.clone()));
        let changed = !out.repaired_steps.is_empty();
        self.apply(gpu, &mut ledger, &touched, &BTreeMap::new(), &mut out, changed)?;
        Ok(out)
    }

    /// For a step whose [`Arbiter::release`] failed (the lock stayed held, the ledger could not
    /// be written): puts back, without the ledger, the GPUs among `gpus` (NVML indices) that no
    /// live step of another job asks for, each control to its default (never slower than
    /// without the bundle: the project's rule that a step's clocks are restored holds). A GPU
    /// another job's live step asks for (a shared GPU, `gres/shard`) is left as it is: a reset
    /// would drop that job's request; the step's own request stays in the ledger and the next
    /// operation on the node (any step's start or end, slurmd's start) drops it once this
    /// slurmstepd is gone and applies what the others ask for. Which steps ask for what is read
    /// from the ledger as last written, without the lock (a write replaces the file whole); a
    /// ledger that cannot be read tells of no other job (the next operation resets every GPU
    /// off its default anyway, see [`Arbiter::release`]). A GPU whose UUID cannot be read is left
    /// as it is.
    pub fn restore_without_ledger(&self, gpu: &dyn GpuControl, step: &StepKey, gpus: &[u32]) -> Unarbitrated {
        let ledger = self.load_unlocked().unwrap_or_default();
        let mut out = Unarbitrated::default();
        for &index in gpus {
            let uuid = match gpu.uuid(index) {
                Ok(u) => u,
                Err(e) => {
                    out.errors.push(e);
                    out.left.push(index);
                    continue;
                }
            };
            let shared = ledger.requests.iter().any(|r| r.uuid == uuid && r.step.job_id != step.job_id && r.step.is_alive());
            if shared {
                out.left.push(index);
                continue;
            }
            match clock_control::reset_all(gpu, index) {
                Ok(_) => out.reset.push(index),
                Err(errors) => out.errors.extend(errors),
            }
        }
        out
    }

    /// The ledger file as last written, read without the lock.
    fn load_unlocked(&self) -> io::Result<Ledger> {
        let path = self.ledger_path();
        let mut f = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(&path)?;
        if !f.metadata()?.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        let mut text = String::new();
        io::Read::read_to_string(&mut f, &mut text)?;
        Ledger::parse(&text).map_err(io::Error::other)
    }

    /// The ledger as it is now (for admins and tests).
    pub fn ledger(&self) -> Result<Ledger, ArbiterError> {
        let _lock = self.lock()?;
        self.load(&mut Outcome::default())
    }

    /// Applies the effective clocks of `uuids` and stores the ledger if `must_store` or GPU
    /// records changed (dropped after a reset, or marked for a retry).
    fn apply(&self, gpu: &dyn GpuControl, ledger: &mut Ledger, uuids: &BTreeSet<String>, known: &BTreeMap<String, u32>, out: &mut Outcome, must_store: bool) -> Result<(), ArbiterError> {
        // Also retry resets that failed before.
        let mut uuids = uuids.clone();
        uuids.extend(ledger.gpus.iter().filter(|g| g.reset_pending).map(|g| g.uuid.clone()));
        if uuids.is_empty() {
            return if must_store { self.store(ledger) } else { Ok(()) };
        }
        let mut index_of = known.clone();
        if uuids.iter().any(|u| !index_of.contains_key(u)) {
            match gpu.device_count() {
                Ok(n) => {
                    for i in 0..n {
                        match gpu.uuid(i) {
                            Ok(u) => {
                                index_of.entry(u).or_insert(i);
                            }
                            Err(e) => out.gpu_errors.push(e),
                        }
                    }
                }
                Err(e) => out.gpu_errors.push(e),
            }
        }
        let before = ledger.gpus.clone();
        for uuid in &uuids {
            let Some(&index) = index_of.get(uuid) else {
                // Not on this machine (any more): nothing to set. Keep a pending reset until
                // the GPU comes back; forget a GPU no request names.
                continue;
            };
            let record = ledger.gpus.iter().find(|g| &g.uuid == uuid).cloned();
            let asked = clock_control::combine(gpu, index, &ledger.job_settings(uuid));
            let defaults = record.as_ref().and_then(|r| r.default_clocks_mhz);
            let wanted = bounded(gpu, index, asked, ledger.ceiling(uuid), defaults);
            match (wanted, record.as_ref().and_then(|r| r.control)) {
                (Some(setting), Some(control)) => match clock_control::apply(gpu, index, control, setting) {
                    Ok(applied) => out.applied.push((index, applied)),
                    Err(e) => out.gpu_errors.push(e),
                },
                (Some(setting), None) => match clock_control::probe_and_apply(gpu, index, &self.order, setting) {
                    Ok(probed) => {
                        out.applied.push((index, probed.applied));
                        let r = match ledger.gpu_mut(uuid) {
                            Some(r) => r,
                            None => {
                                ledger.gpus.push(GpuRecord::new(uuid.clone(), None));
                                let last = ledger.gpus.len() - 1;
                                &mut ledger.gpus[last]
                            }
                        };
                        r.control = Some(probed.control);
                        r.prior_clocks_mhz = probed.prior.clocks_mhz;
                        r.prior_power_limit_mw = probed.prior.power_limit_mw;
                        out.controls.push((index, probed.control, probed.skipped));
                    }
                    Err(e) => out.gpu_errors.push(e),
                },
                // Nothing was ever applied with a control: nothing to undo.
                (None, None) => ledger.gpus.retain(|g| &g.uuid != uuid),
                (None, Some(control)) => {
                    let prior = record.as_ref().map(GpuRecord::prior).unwrap_or_default();
                    match clock_control::restore(gpu, index, control, prior) {
                        Ok(applied) => {
                            out.applied.push((index, applied));
                            ledger.gpus.retain(|g| &g.uuid != uuid);
                        }
                        Err(e) => {
                            out.gpu_errors.push(e);
                            if let Some(g) = ledger.gpu_mut(uuid) {
                                g.reset_pending = true;
                            }
                        }
                    }
                }
            }
        }
        if must_store || ledger.gpus != before {
            self.store(ledger)?;
        }
        Ok(())
    }

    fn lock(&self) -> Result<LockGuard, ArbiterError> {
        let path = self.dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&path)
            .map_err(ioerr(&path, "open lock"))?;
        let started = Instant::now();
        loop {
            // SAFETY: flock on a descriptor this function owns; no memory is passed.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                return Ok(LockGuard { _file: file });
            }
            let e = io::Error::last_os_error();
            let busy = matches!(e.raw_os_error(), Some(libc::EWOULDBLOCK) | Some(libc::EINTR));
            if !busy {
                return Err(ioerr(&path, "lock")(e));
            }
            if started.elapsed() > LOCK_TIMEOUT {
                return Err(ArbiterError { path, op: "lock", reason: format!("still held by another process after {LOCK_TIMEOUT:?}") });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The ledger; one that cannot be read as ours (it does not parse, is a symlink, is not a
    /// regular file) is moved aside (`ledger.corrupt-<unix time>`, reported in
    /// `out.quarantined`) and the operation goes on with an empty one, instead of every later
    /// request failing until someone deletes it.
    fn load(&self, out: &mut Outcome) -> Result<Ledger, ArbiterError> {
        let path = self.ledger_path();
        let read = || -> io::Result<String> {
            let mut f = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(&path)?;
            if !f.metadata()?.is_file() {
                return Err(io::Error::other("not a regular file"));
            }
            let mut text = String::new();
            io::Read::read_to_string(&mut f, &mut text)?;
            Ok(text)
        };
        let problem = match read() {
            Ok(text) => match Ledger::parse(&text) {
                Ok(ledger) => return Ok(ledger),
                Err(reason) => reason,
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Ledger::default()),
            // ELOOP: a symlink where the ledger should be.
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) || e.kind() == io::ErrorKind::Other || e.kind() == io::ErrorKind::InvalidData => e.to_string(),
            Err(e) => return Err(ioerr(&path, "read")(e)),
        };
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let aside = self.dir.join(format!("{LEDGER_FILE}.corrupt-{secs}"));
        fs::rename(&path, &aside).map_err(ioerr(&path, "quarantine"))?;
        out.quarantined = Some(Quarantined { path: aside, reason: problem });
        Ok(Ledger::default())
    }

    /// Atomic replace: temporary file, fsync, rename, fsync of the directory.
    fn store(&self, ledger: &Ledger) -> Result<(), ArbiterError> {
        let path = self.ledger_path();
        let tmp = self.dir.join(format!(".{LEDGER_FILE}.tmp.{}", std::process::id()));
        let write = || -> io::Result<()> {
            // A fresh file, never through a link someone left under the temporary name.
            match fs::remove_file(&tmp) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            let mut f = OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(&tmp)?;
            f.write_all(ledger.to_text().as_bytes())?;
            f.sync_all()?;
            fs::rename(&tmp, &path)?;
            File::open(&self.dir)?.sync_all()
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&tmp);
            ioerr(&path, "write")(e)
        })
    }
}

/// The ledger was lost: nothing tells which GPU a step of ours slowed, so every GPU of the node
/// gets every control back to its default ([`clock_control::reset_all`]). Live steps lose their request and
/// run on at the default clock, never slower than without the bundle.
/// What the tenants ask for (`asked`; `None`: nothing, the GPU's default), bounded by the
/// ceiling on the GPU, if any.
fn bounded(gpu: &dyn GpuControl, index: u32, asked: Option<Setting>, ceiling: Option<Setting>, defaults: Option<AppClocksMhz>) -> Option<Setting> {
    let Some(c) = ceiling else { return asked };
    let base = match asked {
        Some(a) => a,
        None => {
            let clocks_mhz = defaults.or_else(|| gpu.default_application_clocks_mhz(index).ok())?;
            Setting::clocks(clocks_mhz)
        }
    };
    let memory_mhz = if c.clocks_mhz.memory_mhz == 0 { base.clocks_mhz.memory_mhz } else { base.clocks_mhz.memory_mhz.min(c.clocks_mhz.memory_mhz) };
    Some(Setting {
        clocks_mhz: AppClocksMhz { memory_mhz, graphics_mhz: base.clocks_mhz.graphics_mhz.min(c.clocks_mhz.graphics_mhz) },
        power_limit_mw: match (base.power_limit_mw, c.power_limit_mw) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        },
    })
}

fn reset_off_default(gpu: &dyn GpuControl, out: &mut Outcome) {
    let count = match gpu.device_count() {
        Ok(n) => n,
        Err(e) => return out.gpu_errors.push(e),
    };
    for index in 0..count {
        match clock_control::reset_all(gpu, index) {
            Ok(true) => out.applied.push((index, Applied::Reset)),
            Ok(false) => {}
            Err(errors) => out.gpu_errors.extend(errors),
        }
    }
}

/// Makes `dir` a directory only the effective user may use (created mode 0700 if missing,
/// chmod 0700 otherwise), for files root trusts (the ledger, the job clock records). Refuses a
/// symlink or other non-directory in its place (root would follow it), a directory another user
/// owns, and a parent directory others may write to without the sticky bit (they could swap the
/// directory).
pub fn ensure_private_dir(dir: &Path) -> Result<(), ArbiterError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(ioerr(parent, "create"))?;
        let pm = fs::metadata(parent).map_err(ioerr(parent, "stat"))?;
        let writable_by_others = pm.permissions().mode() & 0o022 != 0;
        let sticky = pm.permissions().mode() & 0o1000 != 0;
        if (pm.uid() != 0 && pm.uid() != euid) || (writable_by_others && !sticky) {
            return Err(ArbiterError {
                path: parent.to_path_buf(),
                op: "check parent",
                reason: format!("owned by uid {} with mode {:o}: others could replace the directory", pm.uid(), pm.permissions().mode() & 0o7777),
            });
        }
    }
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(ioerr(dir, "create")(e)),
        _ => {}
    }
    let meta = fs::symlink_metadata(dir).map_err(ioerr(dir, "stat"))?;
    if !meta.file_type().is_dir() {
        return Err(ArbiterError { path: dir.to_path_buf(), op: "check", reason: "not a directory (a symlink?)".into() });
    }
    if meta.uid() != euid {
        return Err(ArbiterError { path: dir.to_path_buf(), op: "check owner", reason: format!("owned by uid {}, not by uid {euid} that sets the clocks", meta.uid()) });
    }
    if meta.permissions().mode() & 0o777 != 0o700 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(ioerr(dir, "chmod 0700"))?;
    }
    Ok(())
}

/// Drops requests of dead slurmstepds; returns the GPUs they were on.
fn prune_dead(ledger: &mut Ledger, out: &mut Outcome) -> BTreeSet<String> {
    let mut touched = BTreeSet::new();
    let mut alive: BTreeMap<StepKey, bool> = BTreeMap::new();
    ledger.requests.retain(|r| {
        let live = *alive.entry(r.step.clone()).or_insert_with(|| r.step.is_alive());
        if !live {
            log::debug!("clock request of dead step {:?} on GPU {} dropped; its GPU gets the remaining requests' clocks", r.step, r.uuid);
            touched.insert(r.uuid.clone());
            if !out.repaired_steps.contains(&r.step) {
                out.repaired_steps.push(r.step.clone());
            }
        }
        live
    });
    touched
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{FakeGpu, FakeGpus};
    use crate::error::GpuErrorKind;

    fn tmp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join("gpu-control-arbiter").join(format!("{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn live_step(job_id: u32, step_id: u32) -> StepKey {
        StepKey::for_process(job_id, step_id, "n1", std::process::id()).unwrap()
    }

    /// A step whose slurmstepd has exited (a child that is reaped).
    fn dead_step(job_id: u32) -> StepKey {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let key = StepKey::for_process(job_id, 0, "n1", pid).unwrap_or(StepKey {
            job_id,
            step_id: 0,
            node: "n1".into(),
            stepd_pid: pid,
            stepd_start_ticks: 1,
        });
        child.wait().unwrap();
        key
    }

    fn clocks(graphics_mhz: u32) -> AppClocksMhz {
        AppClocksMhz { memory_mhz: 877, graphics_mhz }
    }

    /// The clock a busy GPU targets, whichever clock control set it.
    fn app(gpus: &FakeGpus, i: u32) -> u32 {
        gpus.with_gpu(i, |g| g.target_graphics_clock_mhz()).unwrap()
    }

    /// An arbiter that uses application clocks only (the behaviour before controls were probed).
    fn app_clock_arbiter(dir: &Path) -> Arbiter {
        Arbiter::open(dir).unwrap().with_order(ControlOrder(vec![ClockControl::ApplicationClocks]))
    }

    #[test]
    fn highest_request_wins_and_last_out_resets() {
        let dir = tmp_dir("highest");
        let arb = Arbiter::open(&dir).unwrap();
        let gpus = FakeGpus::v100s(2);
        let a = live_step(1, 0);
        let b = live_step(2, 0);
        let out = arb.request(&gpus, &a, &[0], clocks(945), Source::Policy).unwrap();
        assert_eq!(out.applied, vec![(0, Applied::Locked { min_mhz: 135, max_mhz: 945 })], "locked clocks first by default");
        assert_eq!(out.describe_controls(), vec!["GPU 0: clock control: locked clocks".to_string()]);
        assert_eq!(gpus.application_clocks_mhz(0).unwrap().graphics_mhz, 1312, "application clocks untouched");
        assert_eq!(app(&gpus, 0), 945);
        assert_eq!(app(&gpus, 1), 1312, "the other GPU is untouched");
        arb.request(&gpus, &b, &[0], clocks(1200), Source::Explicit).unwrap();
        assert_eq!(app(&gpus, 0), 1200);
        // A lower request does not lower a GPU another step needs higher.
        let c = live_step(3, 0);
        arb.request(&gpus, &c, &[0], clocks(510), Source::Policy).unwrap();
        assert_eq!(app(&gpus, 0), 1200);
        arb.release(&gpus, &b).unwrap();
        assert_eq!(app(&gpus, 0), 945, "drops to the highest remaining");
        arb.release(&gpus, &a).unwrap();
        assert_eq!(app(&gpus, 0), 510);
        let out = arb.release(&gpus, &c).unwrap();
        assert_eq!(out.applied, vec![(0, Applied::Reset)]);
        assert_eq!(app(&gpus, 0), 1312);
        let ledger = arb.ledger().unwrap();
        assert!(ledger.requests.is_empty() && ledger.gpus.is_empty(), "{ledger:?}");
    }

    // Issue 24: a power directive bounds the GPU's clock; it is not one more request that the
    // highest-request rule would ignore when it is lower than another's.
    #[test]
    fn a_ceiling_bounds_the_requests_and_goes_with_its_step() {
        let dir = tmp_dir("ceiling");
        let arb = Arbiter::open(&dir).unwrap();
        let gpus = FakeGpus::v100s(2);
        let batch = live_step(1, 0xffff_fffb);
        let ext = live_step(1, 0xffff_fffc);
        let other = live_step(2, 0);
        let ceiling = |mhz: u32| Some(Setting::clocks(AppClocksMhz { memory_mhz: 0, graphics_mhz: mhz }));
        // No request: the default clock (1312) bounded.
        arb.set_ceiling(&gpus, &ext, &[0], ceiling(1087)).unwrap();
        assert_eq!(app(&gpus, 0), 1087);
        assert_eq!(app(&gpus, 1), 1312, "the other GPU is untouched");
        // A request above the ceiling is bounded; one below it stands.
        arb.request(&gpus, &batch, &[0], clocks(1200), Source::Policy).unwrap();
        assert_eq!(app(&gpus, 0), 1087);
        arb.request(&gpus, &other, &[0], clocks(1300), Source::Explicit).unwrap();
        assert_eq!(app(&gpus, 0), 1087, "another tenant's higher request does not lift the ceiling");
        arb.set_ceiling(&gpus, &ext, &[0], ceiling(945)).unwrap();
        assert_eq!(app(&gpus, 0), 945, "a new directive replaces the step's ceiling");
        assert_eq!(arb.ledger().unwrap().requests.iter().filter(|r| r.source == Source::Ceiling).count(), 1);
        // Lifted: the highest request again.
        arb.set_ceiling(&gpus, &ext, &[0], None).unwrap();
        assert_eq!(app(&gpus, 0), 1300);
        // Set again, then the extern step ends: the ceiling goes with it.
        arb.set_ceiling(&gpus, &ext, &[0], ceiling(810)).unwrap();
        assert_eq!(app(&gpus, 0), 810);
        arb.release(&gpus, &ext).unwrap();
        assert_eq!(app(&gpus, 0), 1300);
        arb.release(&gpus, &other).unwrap();
        arb.release(&gpus, &batch).unwrap();
        assert_eq!(app(&gpus, 0), 1312, "back to the default when the job ends");
        // The ledger round-trips a ceiling record.
        arb.set_ceiling(&gpus, &ext, &[1], ceiling(900)).unwrap();
        let ledger = arb.ledger().unwrap();
        assert_eq!(Ledger::parse(&ledger.to_text()).unwrap(), ledger);
        arb.release(&gpus, &ext).unwrap();
        assert_eq!(app(&gpus, 1), 1312);
    }

    #[test]
    fn explicit_beats_policy_within_a_step() {
        let dir = tmp_dir("explicit");
        let arb = Arbiter::open(&dir).unwrap();
        let gpus = FakeGpus::v100s(1);
        let a = live_step(1, 0);
        arb.request(&gpus, &a, &[0], clocks(1200), Source::Policy).unwrap();
        arb.request(&gpus, &a, &[0], clocks(945), Source::Explicit).unwrap();
        assert_eq!(app(&gpus, 0), 945, "the user's lower --gpu-freq wins over the policy");
        // Re-requesting the same source replaces, not adds.
        arb.request(&gpus, &a, &[0], clocks(1005), Source::Explicit).unwrap();
        assert_eq!(app(&gpus, 0), 1005);
        assert_eq!(arb.ledger().unwrap().requests.len(), 2);
        arb.release(&gpus, &a).unwrap();
        assert_eq!(app(&gpus, 0), 1312);
    }

    #[test]
    fn explicit_srun_beats_the_batch_steps_policy_but_not_another_job() {
        let dir = tmp_dir("jobs");
        let arb = Arbiter::open(&dir).unwrap();
        let gpus = FakeGpus::v100s(1);
        let batch = live_step(5, 0xfffffffb);
        let srun = live_step(5, 0);
        arb.request(&gpus, &batch, &[0], clocks(1200), Source::Policy).unwrap();
        arb.request(&gpus, &srun, &[0], clocks(945), Source::Explicit).unwrap();
        assert_eq!(app(&gpus, 0), 945, "the job's explicit --gpu-freq beats its own policy");
        let other = live_step(6, 0);
        arb.request(&gpus, &other, &[0], clocks(1005), Source::Policy).unwrap();
        assert_eq!(app(&gpus, 0), 1005, "another job's higher request still counts");
        arb.release(&gpus, &other).unwrap();
        arb.release(&gpus, &srun).unwrap();
        assert_eq!(app(&gpus, 0), 1200, "back to the batch step's policy clock");
        arb.release(&gpus, &batch).unwrap();
        assert_eq!(app(&gpus, 0), 1312);
    }

    #[test]
    fn dead_steps_are_repaired_by_the_next_request_or_repair() {
        let dir = tmp_dir("dead");
        let arb = Arbiter::open(&dir).unwrap();
        let gpus = FakeGpus::v100s(2);
        let dead = dead_step(7);
        arb.request(&gpus, &dead, &[0, 1], clocks(510), Source::Policy).unwrap();
        assert_eq!(app(&gpus, 0), 510);
        // The next step, on GPU 1 only, repairs both GPUs.
        let next = live_step(8, 0);
        let out = arb.request(&gpus, &next, &[1], clocks(945), Source::Policy).unwrap();
        assert_eq!(out.repaired_steps, vec![dead.clone()]);
        assert_eq!(app(&gpus, 0), 1312);
        assert_eq!(app(&gpus, 1), 945);
        arb.release(&gpus, &next).unwrap();

        // Repair alone (slurmd start).
        let dead = dead_step(9);
        arb.request(&gpus, &dead, &[1], clocks(510), Source::Explicit).unwrap();
        assert_eq!(app(&gpus, 1), 510);
        let out = arb.repair(&gpus).unwrap();
        assert_eq!(out.repaired_steps.len(), 1);
        assert_eq!(app(&gpus, 1), 1312);
        assert!(arb.ledger().unwrap().gpus.is_empty());
    }

    #[test]
    fn a_zombie_slurmstepd_is_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let key = StepKey::for_process(1, 0, "n1", child.id()).unwrap();
        // Not reaped yet: a zombie once it has exited.
        let start = Instant::now();
        while key.is_alive() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(process_start_ticks(child.id()).is_ok(), "still in /proc as a zombie");
        assert!(!key.is_alive());
        child.wait().unwrap();
    }

    #[test]
    fn a_reused_pid_is_not_the_step() {
        let mut key = live_step(1, 0);
        assert!(key.is_alive());
        key.stepd_start_ticks += 1;
        assert!(!key.is_alive(), "same pid, other start time: another process");
    }

    #[test]
    fn failed_reset_is_retried_later() {
        // A GpuControl whose resets fail until told otherwise.
        struct Flaky {
            inner: FakeGpus,
            fail_reset: std::sync::atomic::AtomicBool,
        }
        impl Flaky {
            fn reset_fails(&self) -> bool {
                self.fail_reset.load(std::sync::atomic::Ordering::SeqCst)
            }
        }
        macro_rules! fwd {
            ($($name:ident($($a:ident: $t:ty),*) -> $r:ty;)*) => {
                $(fn $name(&self, $($a: $t),*) -> Result<$r, GpuError> { self.inner.$name($($a),*) })*
            };
        }
        impl GpuControl for Flaky {
            fwd! {
                device_count() -> u32; name(g: u32) -> String; uuid(g: u32) -> String; pci_bus_id(g: u32) -> String;
                minor_number(g: u32) -> u32; cpu_affinity(g: u32) -> Vec<u32>; nvlink_peers(g: u32) -> Vec<String>;
                supported_memory_clocks_mhz(g: u32) -> Vec<u32>; supported_graphics_clocks_mhz(g: u32, m: u32) -> Vec<u32>;
                default_application_clocks_mhz(g: u32) -> AppClocksMhz; application_clocks_mhz(g: u32) -> AppClocksMhz;
                set_application_clocks_mhz(g: u32, c: AppClocksMhz) -> ();
                set_locked_clocks_mhz(g: u32, a: u32, b: u32) -> (); reset_locked_clocks(g: u32) -> ();
                current_graphics_clock_mhz(g: u32) -> u32; power_usage_mw(g: u32) -> u32; total_energy_mj(g: u32) -> u64;
                power_limit_mw(g: u32) -> u32; power_limit_range_mw(g: u32) -> crate::PowerLimitRangeMw;
                default_power_limit_mw(g: u32) -> u32; set_power_limit_mw(g: u32, l: u32) -> ();
                utilization_pct(g: u32) -> crate::UtilizationPct; memory_used_total_bytes(g: u32) -> crate::MemoryBytes;
                compute_processes(g: u32) -> Vec<crate::GpuProcess>; process_sm_utilization_pct(g: u32, s: u64) -> Vec<crate::ProcessSmUtilPct>;
                process_utilization(g: u32, s: u64) -> Vec<crate::ProcessUtilization>;
            }
            fn reset_application_clocks(&self, g: u32) -> Result<(), GpuError> {
                if self.reset_fails() {
                    return Err(GpuError::new(Some(g), "nvmlDeviceResetApplicationsClocks", GpuErrorKind::Other, "injected"));
                }
                self.inner.reset_application_clocks(g)
            }
        }
        let dir = tmp_dir("flaky");
        let arb = app_clock_arbiter(&dir);
        let gpus = Flaky { inner: FakeGpus::v100s(1), fail_reset: true.into() };
        let a = live_step(1, 0);
        arb.request(&gpus, &a, &[0], clocks(510), Source::Policy).unwrap();
        let out = arb.release(&gpus, &a).unwrap();
        assert_eq!(out.gpu_errors.len(), 1);
        assert_eq!(out.gpu_errors[0].gpu, Some(0));
        assert_eq!(out.gpu_errors[0].call, "nvmlDeviceResetApplicationsClocks");
        assert_eq!(app(&gpus.inner, 0), 510);
        assert!(arb.ledger().unwrap().gpus[0].reset_pending);
        gpus.fail_reset.store(false, std::sync::atomic::Ordering::SeqCst);
        let out = arb.repair(&gpus).unwrap();
        assert_eq!(out.applied, vec![(0, Applied::Reset)]);
        assert_eq!(app(&gpus.inner, 0), 1312);
        assert!(arb.ledger().unwrap().gpus.is_empty());
    }

    #[test]
    fn ledger_is_private_and_round_trips() {
        let dir = tmp_dir("format");
        let arb = Arbiter::open(&dir).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        let gpus = FakeGpus::v100s(2);
        let a = live_step(12, 0xfffffffb);
        arb.request_each(&gpus, &a, &[(0, clocks(945)), (1, clocks(1005))], Source::Explicit).unwrap();
        let text = fs::read_to_string(arb.ledger_path()).unwrap();
        assert_eq!(fs::metadata(arb.ledger_path()).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(text.contains("job=12 step=4294967291 node=n1"), "{text}");
        assert!(text.contains("default_memory_mhz=877 default_graphics_mhz=1312"), "{text}");
        let parsed = Ledger::parse(&text).unwrap();
        assert_eq!(parsed, arb.ledger().unwrap());
        assert_eq!(parsed.to_text(), text);
        assert_eq!(parsed.effective_clocks_mhz(&gpus.uuid(1).unwrap()), Some(clocks(1005)));
        assert!(Ledger::parse("req uuid=x job=1").unwrap_err().contains("line 1"));
        arb.release(&gpus, &a).unwrap();
    }

    #[test]
    fn concurrent_requests_serialise() {
        let dir = tmp_dir("concurrent");
        let arb = Arbiter::open(&dir).unwrap();
        let gpus = std::sync::Arc::new(FakeGpus::v100s(1));
        let handles: Vec<_> = (0..8u32)
            .map(|k| {
                let (arb, gpus) = (arb.clone(), gpus.clone());
                std::thread::spawn(move || {
                    let step = live_step(100 + k, 0);
                    arb.request(&*gpus, &step, &[0], clocks(510 + 75 * k), Source::Policy).unwrap();
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(arb.ledger().unwrap().requests.len(), 8, "no request lost to a race");
        assert_eq!(app(&gpus, 0), 510 + 75 * 7);
    }

    #[test]
    fn a_symlinked_or_exposed_ledger_directory_is_refused() {
        let base = tmp_dir("hostile-dir");
        fs::create_dir_all(base.join("real")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
        let err = Arbiter::open(&base.join("link")).unwrap_err();
        assert_eq!(err.op, "check", "{err}");
        // A parent others may write to (no sticky bit): refused; with the sticky bit (/tmp's
        // kind) the ledger directory, ours and 0700, is safe.
        let open = base.join("open");
        fs::create_dir_all(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let err = Arbiter::open(&open.join("ledger")).unwrap_err();
        assert_eq!(err.op, "check parent", "{err}");
        fs::set_permissions(&open, fs::Permissions::from_mode(0o1777)).unwrap();
        Arbiter::open(&open.join("ledger")).unwrap();
    }

    #[test]
    fn an_unreadable_ledger_is_moved_aside_and_no_gpu_stays_slowed() {
        let dir = tmp_dir("corrupt");
        let arb = Arbiter::open(&dir).unwrap();
        let gpus = FakeGpus::v100s(2);
        // A step slowed GPU 1, then the ledger got garbled.
        gpus.set_application_clocks_mhz(1, clocks(945)).unwrap();
        fs::write(arb.ledger_path(), "gpu uuid=GPU-x default_memory_mhz=oops\n").unwrap();
        let a = live_step(1, 0);
        let out = arb.request(&gpus, &a, &[0], clocks(1200), Source::Policy).expect("a request still works");
        let q = out.quarantined.expect("quarantined");
        assert!(q.path.starts_with(&dir) && q.path.file_name().unwrap().to_string_lossy().starts_with("ledger.corrupt-"), "{q:?}");
        assert!(q.reason.contains("line 1"), "{q:?}");
        assert!(q.path.exists());
        assert_eq!(app(&gpus, 1), 1312, "GPU 1 was reset: nothing tells whose clock it had");
        assert_eq!(app(&gpus, 0), 1200);
        assert_eq!(arb.ledger().unwrap().requests.len(), 1, "a fresh ledger with the new request");
        arb.release(&gpus, &a).unwrap();
        assert_eq!(app(&gpus, 0), 1312);

        // A symlink in the ledger's place is not followed (nor written through): moved aside.
        let target = dir.join("target");
        fs::write(&target, "precious\n").unwrap();
        let _ = fs::remove_file(arb.ledger_path());
        std::os::unix::fs::symlink(&target, arb.ledger_path()).unwrap();
        let out = arb.repair(&gpus).unwrap();
        assert!(out.quarantined.is_some());
        assert_eq!(fs::read_to_string(&target).unwrap(), "precious\n");
    }

    #[test]
    fn the_clocks_in_force_before_the_first_request_come_back() {
        let dir = tmp_dir("prior");
        let arb = app_clock_arbiter(&dir);
        let gpus = FakeGpus::v100s(1);
        // An admin set 1005 MHz before any job.
        gpus.set_application_clocks_mhz(0, clocks(1005)).unwrap();
        let a = live_step(1, 0);
        arb.request(&gpus, &a, &[0], clocks(945), Source::Policy).unwrap();
        assert_eq!(app(&gpus, 0), 945);
        assert_eq!(arb.ledger().unwrap().gpus[0].prior_clocks_mhz, Some(clocks(1005)));
        let out = arb.release(&gpus, &a).unwrap();
        assert_eq!(out.applied, vec![(0, Applied::Set(clocks(1005)))]);
        assert_eq!(app(&gpus, 0), 1005, "the admin's clocks, not the driver default");
        // A ledger written before prior clocks were kept still parses.
        let old = "gpu uuid=GPU-1 default_memory_mhz=877 default_graphics_mhz=1312 reset_pending=0\n";
        let parsed = Ledger::parse(old).unwrap();
        assert_eq!(parsed.gpus[0].prior_clocks_mhz, None);
        assert_eq!(parsed.gpus[0].control, Some(ClockControl::ApplicationClocks), "older ledgers used application clocks only");
    }

    #[test]
    fn a_stuck_ledger_lock_is_waited_for_a_few_seconds_only() {
        let dir = tmp_dir("stuck");
        let arb = Arbiter::open(&dir).unwrap();
        let gpus = FakeGpus::v100s(1);
        let holder = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(dir.join(LOCK_FILE)).unwrap();
        // SAFETY: flock on a descriptor this test owns.
        assert_eq!(unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX) }, 0);
        let t0 = Instant::now();
        let err = arb.request(&gpus, &live_step(1, 0), &[0], clocks(945), Source::Policy).unwrap_err();
        assert_eq!(err.op, "lock");
        assert!(t0.elapsed() < LOCK_TIMEOUT + Duration::from_secs(1), "waited {:?}", t0.elapsed());
        assert_eq!(app(&gpus, 0), 1312, "nothing changed without the lock");
        drop(holder);
        arb.request(&gpus, &live_step(1, 0), &[0], clocks(945), Source::Policy).unwrap();
    }

    #[test]
    fn a_release_without_the_lock_resets_only_gpus_no_other_job_asks_for() {
        let dir = tmp_dir("release-no-lock");
        let arb = Arbiter::open(&dir).unwrap();
        let gpus = FakeGpus::v100s(2);
        // Job 1 alone on GPU 0; jobs 1 and 2 share GPU 1 (2 asks for more).
        let a = live_step(1, 0);
        let b = live_step(2, 0);
        arb.request(&gpus, &a, &[0, 1], clocks(945), Source::Policy).unwrap();
        arb.request(&gpus, &b, &[1], clocks(1005), Source::Policy).unwrap();
        let holder = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(dir.join(LOCK_FILE)).unwrap();
        // SAFETY: flock on a descriptor this test owns.
        assert_eq!(unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX) }, 0);
        assert_eq!(arb.release(&gpus, &a).unwrap_err().op, "lock");
        let out = arb.restore_without_ledger(&gpus, &a, &[0, 1]);
        assert_eq!((out.reset, out.left), (vec![0], vec![1]));
        assert_eq!(gpus.with_gpu(0, |g| g.locked_clocks_mhz).unwrap(), None, "job 1's own GPU is restored");
        assert_eq!(gpus.with_gpu(1, |g| g.locked_clocks_mhz).unwrap().map(|c| c.1), Some(1005), "job 2's clock is kept");
        drop(holder);
        // Job 2 leaves: job 1's request is still in the ledger (its slurmstepd, this process,
        // lives on here; a gone one is pruned); once it is released too, the default.
        arb.release(&gpus, &b).unwrap();
        assert_eq!(gpus.with_gpu(1, |g| g.locked_clocks_mhz).unwrap().map(|c| c.1), Some(945));
        arb.release(&gpus, &a).unwrap();
        assert_eq!(gpus.with_gpu(1, |g| g.locked_clocks_mhz).unwrap(), None);
    }

    /// A V100, an A100 and an H100 on one node, each with its default order of controls.
    fn three_generations() -> FakeGpus {
        FakeGpus::new(vec![FakeGpu::v100(0), FakeGpu::a100(1), FakeGpu::h100(2)])
    }

    #[test]
    fn each_generation_gets_the_control_it_supports_and_the_same_one_restores() {
        let dir = tmp_dir("generations");
        let gpus = three_generations();
        // Locked clocks refused by the admin on the V100; application clocks next.
        gpus.with_gpu(0, |g| g.refuse_locked = Some(GpuErrorKind::NoPermission)).unwrap();
        let arb = Arbiter::open(&dir).unwrap();
        let a = live_step(1, 0);
        let out = arb.request_each(&gpus, &a, &[(0, clocks(945)), (1, AppClocksMhz { memory_mhz: 1215, graphics_mhz: 1005 }), (2, AppClocksMhz { memory_mhz: 2619, graphics_mhz: 1290 })], Source::Policy).unwrap();
        assert!(out.gpu_errors.is_empty(), "{:?}", out.gpu_errors);
        let chosen: Vec<(u32, ClockControl)> = out.controls.iter().map(|(g, c, _)| (*g, *c)).collect();
        assert_eq!(chosen, vec![(0, ClockControl::ApplicationClocks), (1, ClockControl::LockedClocks), (2, ClockControl::LockedClocks)]);
        let lines = out.describe_controls();
        assert!(lines[0].starts_with("GPU 0: clock control: application clocks (skipped nvmlDeviceSetGpuLockedClocks"), "{lines:?}");
        assert_eq!(gpus.application_clocks_mhz(0).unwrap().graphics_mhz, 945);
        assert_eq!(gpus.with_gpu(1, |g| g.locked_clocks_mhz).unwrap(), Some((210, 1005)));
        assert_eq!(gpus.with_gpu(2, |g| g.locked_clocks_mhz).unwrap(), Some((345, 1290)));
        let text = fs::read_to_string(arb.ledger_path()).unwrap();
        assert!(text.contains("control=application_clocks") && text.matches("control=locked_clocks").count() == 2, "{text}");
        // A second step on the A100 does not probe again.
        let b = live_step(2, 0);
        let out = arb.request(&gpus, &b, &[1], AppClocksMhz { memory_mhz: 1215, graphics_mhz: 1200 }, Source::Explicit).unwrap();
        assert!(out.controls.is_empty());
        assert_eq!(gpus.with_gpu(1, |g| g.locked_clocks_mhz).unwrap(), Some((210, 1200)));
        arb.release(&gpus, &b).unwrap();
        let out = arb.release(&gpus, &a).unwrap();
        assert_eq!(out.applied.len(), 3, "{out:?}");
        assert!(out.applied.iter().all(|(_, a)| *a == Applied::Reset));
        for i in 0..3 {
            gpus.with_gpu(i, |g| {
                assert_eq!(g.locked_clocks_mhz, None, "GPU {i}");
                assert_eq!(g.app_clocks_mhz, g.default_clocks_mhz, "GPU {i}");
            })
            .unwrap();
        }
        assert!(arb.ledger().unwrap().gpus.is_empty());
    }

    #[test]
    fn power_limit_control_uses_the_planners_limit_and_restores_the_prior_limit() {
        let dir = tmp_dir("power");
        let gpus = three_generations();
        // No clock control allowed on the H100 (a site that only allows power capping).
        gpus.with_gpu(2, |g| g.refuse_locked = Some(GpuErrorKind::NoPermission)).unwrap();
        gpus.set_power_limit_mw(2, 650_000).unwrap();
        let arb = Arbiter::open(&dir).unwrap();
        let batch = live_step(3, 0xfffffffb);
        let ladder_step = Setting { clocks_mhz: AppClocksMhz { memory_mhz: 2619, graphics_mhz: 1290 }, power_limit_mw: Some(350_000) };
        let out = arb.request_settings(&gpus, &batch, &[(2, ladder_step)], Source::Policy).unwrap();
        assert_eq!(out.applied, vec![(2, Applied::PowerLimit { limit_mw: 350_000 })]);
        let text = fs::read_to_string(arb.ledger_path()).unwrap();
        assert!(text.contains("control=power_limit prior_power_limit_mw=650000") && text.contains("power_limit_mw=350000"), "{text}");
        // An srun --gpu-freq=1980 in the same job: only a clock, mapped to 700 W x 1980/1980.
        let srun = live_step(3, 0);
        let out = arb.request(&gpus, &srun, &[2], AppClocksMhz { memory_mhz: 2619, graphics_mhz: 1980 }, Source::Explicit).unwrap();
        assert_eq!(out.applied, vec![(2, Applied::PowerLimit { limit_mw: 700_000 })]);
        arb.release(&gpus, &srun).unwrap();
        assert_eq!(gpus.power_limit_mw(2).unwrap(), 350_000, "back to the batch step's ladder limit");
        arb.release(&gpus, &batch).unwrap();
        assert_eq!(gpus.power_limit_mw(2).unwrap(), 650_000, "the limit in force before, not the default");
    }

    #[test]
    fn a_gpu_without_any_control_is_an_error_not_a_panic() {
        let dir = tmp_dir("nocontrol");
        let gpus = three_generations();
        gpus.with_gpu(2, |g| {
            g.refuse_locked = Some(GpuErrorKind::NoPermission);
            g.refuse_power_limit = Some(GpuErrorKind::NotSupported);
        })
        .unwrap();
        let arb = Arbiter::open(&dir).unwrap();
        let a = live_step(4, 0);
        let out = arb.request(&gpus, &a, &[2], AppClocksMhz { memory_mhz: 2619, graphics_mhz: 1290 }, Source::Policy).unwrap();
        assert_eq!(out.gpu_errors.len(), 1);
        let e = &out.gpu_errors[0];
        assert_eq!((e.gpu, e.call, e.kind), (Some(2), "no clock control", GpuErrorKind::NotSupported));
        assert!(e.reason.contains("nvmlDeviceSetApplicationsClocks") && e.reason.contains("NoPermission"), "{e}");
        let out = arb.release(&gpus, &a).unwrap();
        assert!(out.gpu_errors.is_empty() && out.applied.is_empty(), "nothing to undo: {out:?}");
        assert!(arb.ledger().unwrap().gpus.is_empty());
    }

    #[test]
    fn a_dead_step_is_undone_with_each_gpus_own_control() {
        let dir = tmp_dir("dead-generations");
        let gpus = three_generations();
        gpus.with_gpu(2, |g| g.refuse_locked = Some(GpuErrorKind::NotSupported)).unwrap();
        let arb = Arbiter::open(&dir).unwrap();
        let dead = dead_step(11);
        let per_gpu = [(0, clocks(945)), (1, AppClocksMhz { memory_mhz: 1215, graphics_mhz: 1005 }), (2, AppClocksMhz { memory_mhz: 2619, graphics_mhz: 990 })];
        arb.request_each(&gpus, &dead, &per_gpu, Source::Policy).unwrap();
        assert_eq!(gpus.with_gpu(0, |g| g.locked_clocks_mhz).unwrap(), Some((135, 945)));
        // H100: no locked clocks here, no application clocks on Hopper: power limit,
        // 700 W x 990 / 1980.
        assert_eq!(gpus.power_limit_mw(2).unwrap(), 350_000);
        let out = arb.repair(&gpus).unwrap();
        assert_eq!(out.repaired_steps, vec![dead]);
        assert_eq!(gpus.with_gpu(0, |g| g.locked_clocks_mhz).unwrap(), None);
        assert_eq!(gpus.with_gpu(1, |g| g.locked_clocks_mhz).unwrap(), None);
        assert_eq!(gpus.power_limit_mw(2).unwrap(), 700_000);
        assert!(arb.ledger().unwrap().gpus.is_empty());
    }
}
