//! Workload profiles: a program that stands for a training job on simulated GPUs (the replay's
//! `slurm-energy workload`) registers what it is, so that
//!
//! - the GPUs it runs on draw the power its measured behaviour says (the fake's own formula in
//!   [`crate::model`] knows nothing of workloads), through the GPU's `workload_power_mw`;
//! - the processes NVML lists on each GPU are its own (with its SM share), as for a real job;
//! - another workload on the same GPU (a co-runner under `gres/shard`) can see who it shares
//!   with, and both follow the same measured pair throughputs.
//!
//! A profile is a small `key = value` file `<state dir>/workloads/<pid>`:
//!
//! ```text
//! pid = 4242
//! gpus = 0,1           # this node's GPU indices (NVML order)
//! job_type = ResNet-50 (batch size 64)
//! sweep = 17           # the measured clock/power sweep standing for this job
//! ```
//!
//! Profiles of processes that no longer exist are ignored (and removed by [`prune`]), so a
//! workload killed with SIGKILL leaves nothing behind that counts.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::FakeNvml;
use crate::state::{GpuProcess, StateError};

/// Directory of the profiles, inside the fake's state directory.
pub const PROFILE_DIR: &str = "workloads";

/// What one workload process registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadProfile {
    pub pid: u32,
    pub gpus: Vec<u32>,
    pub job_type: String,
    pub sweep: usize,
}

impl WorkloadProfile {
    pub fn to_text(&self) -> String {
        let gpus: Vec<String> = self.gpus.iter().map(u32::to_string).collect();
        format!("pid = {}\ngpus = {}\njob_type = {}\nsweep = {}\n", self.pid, gpus.join(","), self.job_type, self.sweep)
    }

    /// Parses a profile; errors name the line and what is wrong.
    pub fn parse(text: &str) -> Result<WorkloadProfile, String> {
        let (mut pid, mut gpus, mut job_type, mut sweep) = (None, None, None, None);
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |what: &str| format!("line {}: {what}: {raw:?}", n + 1);
            let (key, value) = line.split_once('=').ok_or_else(|| bad("expected key = value"))?;
            let value = value.trim();
            match key.trim() {
                "pid" => pid = Some(value.parse::<u32>().map_err(|_| bad("expected a process id"))?),
                "gpus" => {
                    let list: Result<Vec<u32>, _> = value.split(',').filter(|g| !g.trim().is_empty()).map(|g| g.trim().parse::<u32>()).collect();
                    gpus = Some(list.map_err(|_| bad("expected GPU indices separated by commas"))?);
                }
                "job_type" => job_type = Some(value.to_string()),
                "sweep" => sweep = Some(value.parse::<usize>().map_err(|_| bad("expected a sweep index"))?),
                _ => return Err(bad("unknown key")),
            }
        }
        Ok(WorkloadProfile {
            pid: pid.ok_or("missing pid")?,
            gpus: gpus.ok_or("missing gpus")?,
            job_type: job_type.ok_or("missing job_type")?,
            sweep: sweep.ok_or("missing sweep")?,
        })
    }
}

fn profile_dir(state_dir: &Path) -> PathBuf {
    state_dir.join(PROFILE_DIR)
}

fn alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Writes (atomically) the profile of a workload process.
pub fn register(state_dir: &Path, profile: &WorkloadProfile) -> io::Result<PathBuf> {
    let dir = profile_dir(state_dir);
    fs::create_dir_all(&dir)?;
    let path = dir.join(profile.pid.to_string());
    let tmp = dir.join(format!(".{}.tmp", profile.pid));
    fs::write(&tmp, profile.to_text())?;
    fs::rename(&tmp, &path)?;
    Ok(path)
}

/// Removes a workload's profile (absent already is fine).
pub fn unregister(state_dir: &Path, pid: u32) -> io::Result<()> {
    match fs::remove_file(profile_dir(state_dir).join(pid.to_string())) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Profiles of the live workload processes, sorted by pid. An unreadable profile is an error
/// naming its file; one of a process that is gone is skipped.
pub fn list(state_dir: &Path) -> Result<Vec<WorkloadProfile>, String> {
    let dir = profile_dir(state_dir);
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let Ok(pid) = name.parse::<u32>() else { continue };
        if !alive(pid) {
            continue;
        }
        let path = entry.path();
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            // Unregistered between listing and reading.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        out.push(WorkloadProfile::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?);
    }
    out.sort_by_key(|p| p.pid);
    Ok(out)
}

/// Removes the profiles of processes that are gone; returns how many.
pub fn prune(state_dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(profile_dir(state_dir)) else { return 0 };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok().map(|pid| (pid, e.path())))
        .filter(|(pid, path)| !alive(*pid) && fs::remove_file(path).is_ok())
        .count()
}

/// The other live workloads on GPU `gpu` of this node.
pub fn co_runners(state_dir: &Path, gpu: u32, own_pid: u32) -> Result<Vec<WorkloadProfile>, String> {
    Ok(list(state_dir)?.into_iter().filter(|p| p.pid != own_pid && p.gpus.contains(&gpu)).collect())
}

/// Memory a workload process is shown to use on each of its GPUs (a figure for `nvidia-smi`
/// style listings only; nothing is computed from it).
pub const WORKLOAD_MEMORY_BYTES: u64 = 8 << 30;

impl FakeNvml {
    /// A workload process `pid` runs on GPU `gpu` at `sm_pct` % of its SM time, and the GPU
    /// draws `power_w` (W) while busy: utilisation and processes as NVML would show them.
    pub fn set_workload_power(&self, gpu: usize, pid: u32, power_w: f64, sm_pct: u32) -> Result<(), StateError> {
        let path = self.store.state_path();
        let found = self.update(|s| {
            let g = s.gpus.get_mut(gpu)?;
            g.util_gpu_pct = g.util_gpu_pct.max(sm_pct.clamp(1, 100)).max(1);
            g.workload_power_mw = Some((power_w.max(0.0) * 1000.0).round() as u32);
            let entry = GpuProcess { pid, used_memory_bytes: WORKLOAD_MEMORY_BYTES, sm_util_pct: Some(sm_pct.min(100)) };
            match g.processes.iter_mut().find(|p| p.pid == pid) {
                Some(p) => *p = entry,
                None => g.processes.push(entry),
            }
            Some(())
        })?;
        found.ok_or_else(|| StateError { path, message: format!("no GPU {gpu}") })
    }

    /// Workload process `pid` left GPU `gpu`; when no process is left on it the GPU goes idle
    /// (utilisation 0, power by the fake's formula again).
    pub fn clear_workload(&self, gpu: usize, pid: u32) -> Result<(), StateError> {
        self.update(|s| {
            if let Some(g) = s.gpus.get_mut(gpu) {
                g.processes.retain(|p| p.pid != pid);
                if g.processes.iter().all(|p| !alive(p.pid)) {
                    g.processes.clear();
                    g.util_gpu_pct = 0;
                    g.util_memory_pct = 0;
                    g.workload_power_mw = None;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, model};

    /// A fresh directory of this test's own (removed at the end of the test by the caller).
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fake-nvml-workload-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn profile_round_trips_and_bad_lines_are_named() {
        let p = WorkloadProfile { pid: 7, gpus: vec![0, 3], job_type: "ResNet-50 (batch size 64)".into(), sweep: 12 };
        assert_eq!(WorkloadProfile::parse(&p.to_text()).unwrap(), p);
        let e = WorkloadProfile::parse("pid = 7\ngpus = 0,x\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        assert!(WorkloadProfile::parse("pid = 7\n").unwrap_err().contains("missing gpus"));
    }

    #[test]
    fn registered_power_drives_the_gpu_and_goes_when_the_workload_leaves() {
        let dir = scratch("power");
        let fake = FakeNvml::new(Config::default(), &dir);
        let me = std::process::id();
        register(&dir, &WorkloadProfile { pid: me, gpus: vec![1], job_type: "A".into(), sweep: 0 }).unwrap();
        assert_eq!(list(&dir).unwrap().len(), 1);
        assert!(co_runners(&dir, 1, me).unwrap().is_empty());
        fake.set_workload_power(1, me, 173.5, 100).unwrap();
        let s = fake.state().unwrap();
        assert!((model::power_mw(&fake.config, &s.gpus[1]) - 173_500.0).abs() < 1e-6);
        assert_eq!(s.gpus[1].processes.len(), 1);
        // Held under the power limit as the board would.
        fake.update(|s| s.gpus[1].power_limit_mw = 150_000).unwrap();
        assert_eq!(model::power_mw(&fake.config, &fake.state().unwrap().gpus[1]), 150_000.0);
        fake.clear_workload(1, me).unwrap();
        let s = fake.state().unwrap();
        assert_eq!(model::power_mw(&fake.config, &s.gpus[1]), f64::from(fake.config.idle_power_mw));
        unregister(&dir, me).unwrap();
        assert!(list(&dir).unwrap().is_empty());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn profiles_of_dead_processes_do_not_count() {
        let dir = scratch("dead");
        // Pid 0 never names a process in /proc.
        register(&dir, &WorkloadProfile { pid: 0, gpus: vec![0], job_type: "A".into(), sweep: 0 }).unwrap();
        assert!(list(&dir).unwrap().is_empty());
        assert_eq!(prune(&dir), 1);
        let _ = fs::remove_dir_all(&dir);
    }
}
