//! The node-local books of GPUs shared between jobs (`gres/shard`): one file per GPU in
//! `<clock ledger dir>/energy-share/`, keyed by the GPU's UUID, holding the energy counter at
//! the last settlement, each co-runner job's energy so far and the steps that hold the GPU.
//!
//! Every co-runner's slurmstepd settles the GPU whenever it reads its energy (each poll, step
//! start and end): under an exclusive lock it reads the counter, splits the step since the last
//! settlement among the jobs holding the GPU now ([`crate::share::split`]) and adds each part to
//! that job's account. Every interval of the counter is split exactly once, so the co-runners'
//! accounts add up to the counter over the time the GPU was shared. A step's energy is its job's
//! account now minus at its start.
//!
//! Holders whose slurmstepd is gone (killed) are dropped at the next settlement: a holder is
//! kept with its slurmstepd's pid and start time (clock ticks after boot, as the clock ledger
//! keeps its steps), so a new process that reuses the pid does not keep a finished job holding
//! the GPU. A counter that went back (driver reload, GPU reset) restarts the interval from the
//! new reading: what it shows since the restart is split, what it lost before is not known here.
//!
//! The directory is checked like the clock ledger's
//! ([`gpu_control::arbiter::ensure_private_dir`]: no symlink, ours, mode 0700, in a parent
//! others cannot swap it in); files in it are opened without following symlinks and written
//! atomically (a fresh temporary file per process, fsync, rename, fsync of the directory).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use gpu_control::arbiter::{self, StepKey};
use gpu_control::{GpuControl, GpuError};
use slurm_bindings::Logger;

use crate::energy::Totals;
use crate::errors::ErrorOnce;
use crate::share::{self, Basis, Usage};

/// Subdirectory of the clock ledger directory.
pub const SHARE_DIR: &str = "energy-share";

/// What a settlement does to the caller's hold on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Step `step` of the job (slurmstepd `pid`, known by its start time) starts holding the GPU.
    Join { step: u32, pid: u32 },
    Keep,
    /// Step `step` of the job lets go.
    Leave { step: u32 },
}

/// The result of one settlement, for the caller's job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settled {
    /// The job's account on this GPU, mJ.
    pub job_mj: u64,
    /// Power of the GPU now, mW (0 if unknown).
    pub power_mw: u32,
    /// Jobs holding the GPU in the interval just split.
    pub co_runners: usize,
    /// Where the split's utilisation came from (`None`: nothing was split).
    pub basis: Option<Basis>,
}

#[derive(Debug)]
pub enum ShareError {
    Gpu(GpuError),
    Io(PathBuf, std::io::Error),
}

impl std::fmt::Display for ShareError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShareError::Gpu(e) => write!(f, "{e}"),
            ShareError::Io(p, e) => write!(f, "GPU share ledger {}: {e}", p.display()),
        }
    }
}

/// One GPU's books.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Books {
    counter_mj: Option<u64>,
    /// When the counter was read (Unix µs): the per-process samples after it are the interval's.
    at_unix_us: u64,
    job_mj: BTreeMap<u32, u64>,
    /// (job, step) -> its slurmstepd.
    holders: BTreeMap<(u32, u32), Holder>,
}

/// The slurmstepd of a holding step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Holder {
    pid: u32,
    /// Its start time (clock ticks after boot); `None` in books written before it was kept.
    start_ticks: Option<u64>,
}

impl Holder {
    /// The same process (pid and start time), not exited. A holder of older books (no start
    /// time) holds while its pid exists.
    fn is_alive(&self) -> bool {
        match self.start_ticks {
            Some(t) => StepKey { job_id: 0, step_id: 0, node: String::new(), stepd_pid: self.pid, stepd_start_ticks: t }.is_alive(),
            None => Path::new(&format!("/proc/{}", self.pid)).exists(),
        }
    }
}

impl Books {
    fn parse(text: &str) -> Books {
        let mut b = Books::default();
        for line in text.lines() {
            let Some((key, value)) = line.split_once('=') else { continue };
            let (key, value) = (key.trim(), value.trim());
            // `holder.<job>.<step> = <pid> <start ticks>`; everything else one number.
            let mut words = value.split_whitespace();
            let Some(Ok(n)) = words.next().map(str::parse::<u64>) else { continue };
            let second = words.next().map(str::parse::<u64>);
            let parts: Vec<&str> = key.split('.').collect();
            match parts.as_slice() {
                ["counter_mj"] => b.counter_mj = Some(n),
                ["at_unix_us"] => b.at_unix_us = n,
                ["job", j] => {
                    if let Ok(j) = j.parse() {
                        b.job_mj.insert(j, n);
                    }
                }
                ["holder", j, s] => {
                    let start_ticks = match second {
                        None => None,
                        Some(Ok(t)) => Some(t),
                        Some(Err(_)) => continue,
                    };
                    if let (Ok(j), Ok(s), Ok(pid)) = (j.parse(), s.parse(), u32::try_from(n)) {
                        b.holders.insert((j, s), Holder { pid, start_ticks });
                    }
                }
                _ => {}
            }
        }
        b
    }

    fn to_text(&self) -> String {
        let mut out = String::from("# slurm-energy: GPU energy of the jobs sharing this GPU (mJ)\n");
        if let Some(c) = self.counter_mj {
            out.push_str(&format!("counter_mj = {c}\nat_unix_us = {}\n", self.at_unix_us));
        }
        for (j, mj) in &self.job_mj {
            out.push_str(&format!("job.{j} = {mj}\n"));
        }
        for ((j, s), h) in &self.holders {
            match h.start_ticks {
                Some(t) => out.push_str(&format!("holder.{j}.{s} = {} {t}\n", h.pid)),
                None => out.push_str(&format!("holder.{j}.{s} = {}\n", h.pid)),
            }
        }
        out
    }

    fn jobs(&self) -> Vec<u32> {
        let mut jobs: Vec<u32> = self.holders.keys().map(|(j, _)| *j).collect();
        jobs.dedup();
        jobs
    }
}

/// The books of a node's shared GPUs.
#[derive(Debug, Clone)]
pub struct ShareLedger {
    dir: PathBuf,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ShareError + '_ {
    move |e| ShareError::Io(path.to_path_buf(), e)
}

/// Opening flags of every file in the books' directory: a symlink planted there is refused
/// (ELOOP), never followed by root.
const NO_FOLLOW: i32 = libc::O_NOFOLLOW | libc::O_CLOEXEC;

impl ShareLedger {
    /// `<clock ledger dir>/energy-share`, created root-only and checked as the clock ledger's
    /// directory is ([`arbiter::ensure_private_dir`]; the clock ledger directory is made or
    /// checked the same way first): whoever could write the books could make root write
    /// through their links.
    pub fn open(clock_ledger_dir: &Path) -> Result<ShareLedger, ShareError> {
        let dir = clock_ledger_dir.join(SHARE_DIR);
        for d in [clock_ledger_dir, dir.as_path()] {
            arbiter::ensure_private_dir(d).map_err(|e| ShareError::Io(e.path.clone(), std::io::Error::other(format!("{}: {}", e.op, e.reason))))?;
        }
        Ok(ShareLedger { dir })
    }

    /// Settles GPU `gpu` (NVML index) and applies `hold` for `job`; returns the job's account.
    pub fn settle(&self, ctrl: &dyn GpuControl, gpu: u32, job: u32, hold: Hold) -> Result<Settled, ShareError> {
        let key = ctrl.uuid(gpu).map_err(ShareError::Gpu)?;
        let key: String = key.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        let path = self.dir.join(&key);
        let lock_path = self.dir.join(format!("{key}.lock"));
        let lock = OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).custom_flags(NO_FOLLOW).open(&lock_path).map_err(io_err(&lock_path))?;
        lock_within(&lock, LOCK_WAIT).map_err(io_err(&lock_path))?;
        let mut books = match read_books(&path) {
            Ok(text) => Books::parse(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Books::default(),
            Err(e) => return Err(ShareError::Io(path, e)),
        };
        // Holders whose slurmstepd is gone (or whose pid a new process reuses) hold nothing.
        books.holders.retain(|_, h| h.is_alive());
        let raw_mj = ctrl.total_energy_mj(gpu).map_err(ShareError::Gpu)?;
        let power_mw = ctrl.power_usage_mw(gpu).unwrap_or(0);
        let jobs = books.jobs();
        let mut basis = None;
        if let Some(last) = books.counter_mj {
            let step_mj = if raw_mj >= last {
                raw_mj - last
            } else if raw_mj < last / 2 {
                raw_mj // restarted from 0
            } else {
                0
            };
            if !jobs.is_empty() && step_mj > 0 {
                let usage = measure(ctrl, gpu, &jobs, books.at_unix_us);
                basis = Some(usage.basis);
                for (j, part) in share::split(step_mj, &jobs, &usage) {
                    let acc = books.job_mj.entry(j).or_insert(0);
                    *acc = acc.saturating_add(part);
                }
            }
        }
        books.counter_mj = Some(raw_mj);
        books.at_unix_us = unix_now_us();
        let co_runners = jobs.len();
        match hold {
            Hold::Join { step, pid } => {
                let start_ticks = arbiter::process_start_ticks(pid).map_err(io_err(Path::new("/proc/<pid>/stat")))?;
                books.holders.insert((job, step), Holder { pid, start_ticks: Some(start_ticks) });
                books.job_mj.entry(job).or_insert(0);
            }
            Hold::Keep => {}
            Hold::Leave { step } => {
                books.holders.remove(&(job, step));
            }
        }
        let job_mj = books.job_mj.get(&job).copied().unwrap_or(0);
        // Accounts of jobs that hold nothing any more are finished.
        let live = books.jobs();
        books.job_mj.retain(|j, _| live.contains(j));
        if books.holders.is_empty() {
            books.counter_mj = None;
        }
        write_atomically(&path, &books.to_text())?;
        drop(lock);
        Ok(Settled { job_mj, power_mw, co_runners, basis })
    }
}

/// The energy of a step on shared GPUs: its job's accounts on their books, from the step's start.
#[derive(Debug)]
pub struct SharedMeter {
    ledger: ShareLedger,
    job: u32,
    step: u32,
    gpus: Vec<u32>,
    start_mj: Vec<Option<u64>>,
    last_mj: Vec<Option<u64>>,
    power_mw: Vec<u32>,
    failing: Vec<bool>,
    started: std::time::Instant,
    basis: Option<Basis>,
}

impl SharedMeter {
    /// Joins the books of each GPU (NVML indices) as step `step` of `job`, held by this process.
    #[allow(clippy::too_many_arguments)]
    pub fn start(ctrl: &dyn GpuControl, ledger: ShareLedger, job: u32, step: u32, gpus: &[u32], errs: &mut ErrorOnce, log: &Logger, ctx: &str) -> SharedMeter {
        let n = gpus.len();
        let mut meter = SharedMeter {
            ledger,
            job,
            step,
            gpus: gpus.to_vec(),
            start_mj: vec![None; n],
            last_mj: vec![None; n],
            power_mw: vec![0; n],
            failing: vec![true; n],
            started: std::time::Instant::now(),
            basis: None,
        };
        meter.settle_all(ctrl, Hold::Join { step, pid: std::process::id() }, errs, log, ctx);
        meter
    }

    pub fn gpus(&self) -> &[u32] {
        &self.gpus
    }

    /// Where the last split's utilisation came from.
    pub fn basis(&self) -> Option<Basis> {
        self.basis
    }

    fn settle_all(&mut self, ctrl: &dyn GpuControl, hold: Hold, errs: &mut ErrorOnce, log: &Logger, ctx: &str) -> Totals {
        for k in 0..self.gpus.len() {
            // A step that could not join (its first settlement failed) joins at its next.
            let hold = match hold {
                Hold::Keep if self.start_mj[k].is_none() => Hold::Join { step: self.step, pid: std::process::id() },
                h => h,
            };
            match self.ledger.settle(ctrl, self.gpus[k], self.job, hold) {
                Ok(s) => {
                    self.start_mj[k].get_or_insert(s.job_mj);
                    self.last_mj[k] = Some(s.job_mj);
                    self.power_mw[k] = s.power_mw;
                    self.failing[k] = false;
                    self.basis = s.basis.or(self.basis);
                }
                Err(ShareError::Gpu(e)) => {
                    errs.report(log, ctx, &e);
                    self.failing[k] = true;
                }
                Err(e) => {
                    log.error(&format!("{ctx}: {e}"));
                    self.failing[k] = true;
                }
            }
        }
        self.totals()
    }

    /// Settles the step's GPUs and returns its energy so far.
    pub fn read(&mut self, ctrl: &dyn GpuControl, errs: &mut ErrorOnce, log: &Logger, ctx: &str) -> Totals {
        self.settle_all(ctrl, Hold::Keep, errs, log, ctx)
    }

    /// The last settlement, at the step's end: the step lets go of its GPUs.
    pub fn finish(&mut self, ctrl: &dyn GpuControl, errs: &mut ErrorOnce, log: &Logger, ctx: &str) -> Totals {
        let step = self.step;
        self.settle_all(ctrl, Hold::Leave { step }, errs, log, ctx)
    }

    pub fn totals(&self) -> Totals {
        let mut consumed_mj = 0u64;
        for (start, last) in self.start_mj.iter().zip(&self.last_mj) {
            if let (Some(s), Some(l)) = (start, last) {
                consumed_mj = consumed_mj.saturating_add(l.saturating_sub(*s));
            }
        }
        Totals {
            consumed_mj,
            power_mw: self.power_mw.iter().map(|&p| u64::from(p)).sum(),
            elapsed: self.started.elapsed(),
            unknown_gpus: self.failing.iter().filter(|&&f| f).count(),
        }
    }
}

fn unix_now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The use of the GPU over the interval since `since_unix_us`: the per-process samples taken in
/// it (each process's mean), else the fallback's utilisation now.
fn measure(ctrl: &dyn GpuControl, gpu: u32, jobs: &[u32], since_unix_us: u64) -> Usage {
    match ctrl.process_sm_utilization_pct(gpu, since_unix_us) {
        Ok(samples) if !samples.is_empty() => {
            let samples: Vec<(u32, u32)> = samples.iter().map(|s| (s.pid, s.sm_pct)).collect();
            Usage::from_process_samples(&samples, share::job_of_pid)
        }
        _ => {
            let gpu_pct = ctrl.utilization_pct(gpu).map_or(0, |u| u.gpu_pct);
            let pids: Vec<u32> = ctrl.compute_processes(gpu).map(|p| p.iter().map(|p| p.pid).collect()).unwrap_or_default();
            Usage::from_running_processes(gpu_pct, &pids, jobs, share::job_of_pid)
        }
    }
}

/// How long a settlement waits for the books of a GPU before giving up (the step's energy is
/// then unknown for that read, never a hung slurmstepd).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

fn lock_within(file: &File, wait: std::time::Duration) -> std::io::Result<()> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "locked by another step for 3 s"));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// The books' text; a symlink or anything but a regular file in their place is an error.
fn read_books(path: &Path) -> std::io::Result<String> {
    let mut f = OpenOptions::new().read(true).custom_flags(NO_FOLLOW).open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    Ok(text)
}

/// Atomic replace as `gpu_control::arbiter` stores its ledger: a fresh temporary file of this
/// process (never through a link left under its name), fsync, rename, fsync of the directory.
fn write_atomically(path: &Path, text: &str) -> Result<(), ShareError> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        match std::fs::remove_file(&tmp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut f = OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(NO_FOLLOW).open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        ShareError::Io(path.to_path_buf(), e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_control::{FakeGpus, ProcessSmUtilPct};

    #[test]
    fn books_round_trip() {
        let mut b = Books { counter_mj: Some(5), at_unix_us: 17, ..Books::default() };
        b.job_mj.insert(3, 70);
        b.holders.insert((3, 0xffff_fffc), Holder { pid: 99, start_ticks: Some(1234) });
        b.holders.insert((4, 0), Holder { pid: 98, start_ticks: None });
        assert_eq!(Books::parse(&b.to_text()), b);
        // Books of the version before start times: a pid alone.
        assert_eq!(Books::parse("holder.4.0 = 98\n").holders[&(4, 0)], Holder { pid: 98, start_ticks: None });
    }

    #[test]
    fn a_reused_pid_holds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = ShareLedger::open(dir.path()).unwrap();
        let gpus = FakeGpus::v100s(1);
        let me = std::process::id();
        let my_ticks = arbiter::process_start_ticks(me).unwrap();
        gpus.with_gpu(0, |g| g.energy_mj = 1_000_000).unwrap();
        ledger.settle(&gpus, 0, 1, Hold::Join { step: 0, pid: me }).unwrap();
        // Job 2's slurmstepd died; a new process (this one) got its pid: other start time.
        let path = dir.path().join(SHARE_DIR).join(gpus.uuid(0).unwrap());
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{text}job.2 = 0\nholder.2.0 = {me} {}\n", my_ticks + 1)).unwrap();
        gpus.with_gpu(0, |g| g.energy_mj += 90_000).unwrap();
        let a = ledger.settle(&gpus, 0, 1, Hold::Keep).unwrap();
        assert_eq!((a.job_mj, a.co_runners), (90_000, 1), "job 2 no longer holds the GPU");
        assert!(!std::fs::read_to_string(&path).unwrap().contains("holder.2."));
    }

    #[test]
    fn planted_symlinks_are_not_followed_and_an_exposed_directory_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        let ledger_dir = base.path().join("ledger");
        let share = ledger_dir.join(SHARE_DIR);
        std::fs::create_dir_all(&share).unwrap();
        let gpus = FakeGpus::v100s(1);
        let uuid = gpus.uuid(0).unwrap();
        // Links planted under the temporary names and the lock's name, and a victim file.
        let victim = base.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        for name in [format!("{uuid}.tmp"), format!(".{uuid}.tmp.{}", std::process::id()), format!("{uuid}.lock")] {
            std::os::unix::fs::symlink(&victim, share.join(name)).unwrap();
        }
        let ledger = ShareLedger::open(&ledger_dir).unwrap();
        let r = ledger.settle(&gpus, 0, 1, Hold::Join { step: 0, pid: std::process::id() });
        assert!(r.is_err(), "the lock file is a symlink: refused");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        std::fs::remove_file(share.join(format!("{uuid}.lock"))).unwrap();
        ledger.settle(&gpus, 0, 1, Hold::Join { step: 0, pid: std::process::id() }).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n", "no write through a planted link");
        assert!(std::fs::symlink_metadata(share.join(&uuid)).unwrap().file_type().is_file());
        // The books themselves replaced by a link: refused, not read or written through.
        std::fs::remove_file(share.join(&uuid)).unwrap();
        std::os::unix::fs::symlink(&victim, share.join(&uuid)).unwrap();
        assert!(ledger.settle(&gpus, 0, 1, Hold::Keep).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        // A ledger directory in a parent anyone may write to (no sticky bit): refused; the
        // share directory as a symlink: refused.
        let open = base.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(ShareLedger::open(&open.join("ledger")).is_err());
        let other = base.path().join("other");
        std::fs::create_dir_all(other.join("real")).unwrap();
        std::os::unix::fs::symlink(other.join("real"), other.join(SHARE_DIR)).unwrap();
        assert!(ShareLedger::open(&other).is_err());
        // A world-writable share directory is made private again.
        std::fs::set_permissions(&share, std::fs::Permissions::from_mode(0o777)).unwrap();
        ShareLedger::open(&ledger_dir).unwrap();
        assert_eq!(std::fs::metadata(&share).unwrap().permissions().mode() & 0o777, 0o700);
    }

    #[test]
    fn co_runners_accounts_add_up_to_the_counter() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = ShareLedger::open(dir.path()).unwrap();
        let gpus = FakeGpus::v100s(1);
        let me = std::process::id();
        // Jobs 1 and 2 (this process stands in for both slurmstepds; no samples: fallback).
        gpus.with_gpu(0, |g| g.energy_mj = 1_000_000).unwrap();
        ledger.settle(&gpus, 0, 1, Hold::Join { step: 0, pid: me }).unwrap();
        ledger.settle(&gpus, 0, 2, Hold::Join { step: 0, pid: me }).unwrap();
        gpus.with_gpu(0, |g| g.energy_mj += 90_000).unwrap();
        let a = ledger.settle(&gpus, 0, 1, Hold::Keep).unwrap();
        assert_eq!((a.job_mj, a.co_runners, a.basis), (45_000, 2, Some(Basis::RunningProcesses)));
        // With samples: this process's pid is in no job, so it is idle time: equal again.
        gpus.with_gpu(0, |g| {
            g.energy_mj += 10_000;
            g.process_sm_pct = Some(vec![ProcessSmUtilPct { pid: me, sm_pct: 50 }]);
        })
        .unwrap();
        let b = ledger.settle(&gpus, 0, 2, Hold::Leave { step: 0 }).unwrap();
        assert_eq!((b.job_mj, b.basis), (50_000, Some(Basis::ProcessSamples)));
        let a = ledger.settle(&gpus, 0, 1, Hold::Leave { step: 0 }).unwrap();
        assert_eq!(a.job_mj + b.job_mj, 100_000);
        assert_eq!(std::fs::read_to_string(dir.path().join(SHARE_DIR).join(gpus.uuid(0).unwrap())).unwrap().lines().count(), 1);
    }
}
