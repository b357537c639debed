//! How one GPU's energy over an interval is split among the jobs sharing it (`gres/shard`).
//!
//! The rule, per interval (the energy counter's step between two settlements of the GPU's
//! share ledger, [`crate::share_ledger`]):
//!
//! - `n` co-runners: the jobs holding shards of the GPU during the interval;
//! - `u_j`: job `j`'s measured share of the GPU's time, in [0, 1]; `U = min(1, sum of u_j)`;
//! - job `j` gets `E * ((1 - U) / n + u_j * U / sum u)`: the time the GPU was in use is charged
//!   to whoever used it, the rest (idle power, and use by processes of no co-runner) is split
//!   equally, since every co-runner holds the GPU. The weights add up to 1, so the shares add
//!   up to the counter's step exactly (rounded to whole mJ, remainders to the largest parts).
//!
//! `u_j` comes from NVML's per-process SM utilisation (`nvmlDeviceGetProcessUtilization` with
//! the interval's start as `lastSeenTimeStamp`: each process's mean over the samples taken in the
//! interval, summed over the job's processes) — [`Basis::ProcessSamples`]. When the driver has
//! no per-process samples (not supported, or none yet), the fallback is
//! [`Basis::RunningProcesses`]: the GPU's own utilisation `U` is split equally among the
//! co-runners that have a compute process on the GPU (`nvmlDeviceGetComputeRunningProcesses`),
//! or among all of them when none has. A process of no co-runner counts as idle time.
//!
//! A process belongs to a job by its cgroup ([`job_of_process`]), which the kernel keeps and
//! only root can change: Slurm's own job cgroup, at the places Slurm's cgroup plugins make it
//! (v2: `<root>/system.slice/[<node>_]slurmstepd.scope/job_<id>/step_<step>/...`; v1:
//! `/slurm[_<node>]/uid_<uid>/job_<id>/step_<step>/...`). A `job_<id>` anywhere else (a user
//! may make cgroups of that name under a delegated user slice) is not a job. The process's own
//! `SLURM_JOB_ID` (its environment, which the user sets) is used only for a process in no Slurm
//! job cgroup (proctrack without cgroups), and only when its uid (real and effective) is the
//! job's: the uid of the tasks the job's slurmstepd started ([`job_uid_from_proc`]).

use std::collections::BTreeMap;

/// Where the utilisation of an interval came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    ProcessSamples,
    RunningProcesses,
}

/// The measured use of a GPU in one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Usage {
    pub basis: Basis,
    /// Job id -> its share of the GPU's time in [0, 1] (absent: 0).
    pub by_job: BTreeMap<u32, f64>,
    /// Total use of the GPU in [0, 1] (the fallback's device utilisation; with process samples,
    /// the sum over every process, co-runner or not).
    pub total: f64,
}

impl Usage {
    /// From per-process SM samples (pid, %) and a pid -> job lookup.
    pub fn from_process_samples(samples: &[(u32, u32)], job_of: impl Fn(u32) -> Option<u32>) -> Usage {
        let mut by_job = BTreeMap::new();
        let mut total = 0.0;
        for &(pid, pct) in samples {
            let u = f64::from(pct.min(100)) / 100.0;
            total += u;
            if let Some(job) = job_of(pid) {
                *by_job.entry(job).or_insert(0.0) += u;
            }
        }
        Usage { basis: Basis::ProcessSamples, by_job, total: total.min(1.0) }
    }

    /// The fallback: the GPU's utilisation (%), split equally among the co-runners that run a
    /// process on it (`pids`), or among all `jobs` when none does.
    pub fn from_running_processes(gpu_pct: u32, pids: &[u32], jobs: &[u32], job_of: impl Fn(u32) -> Option<u32>) -> Usage {
        let total = f64::from(gpu_pct.min(100)) / 100.0;
        let mut users: Vec<u32> = pids.iter().filter_map(|&p| job_of(p)).filter(|j| jobs.contains(j)).collect();
        users.sort_unstable();
        users.dedup();
        if users.is_empty() {
            users = jobs.to_vec();
        }
        let each = if users.is_empty() { 0.0 } else { total / users.len() as f64 };
        Usage { basis: Basis::RunningProcesses, by_job: users.into_iter().map(|j| (j, each)).collect(), total }
    }
}

/// Each co-runner's weight (they add up to 1); empty when there are no co-runners.
pub fn weights(jobs: &[u32], usage: &Usage) -> Vec<(u32, f64)> {
    if jobs.is_empty() {
        return Vec::new();
    }
    let used: Vec<f64> = jobs.iter().map(|j| usage.by_job.get(j).copied().unwrap_or(0.0).max(0.0)).collect();
    let sum_used: f64 = used.iter().sum();
    // The co-runners' own use, at most the GPU's time.
    let busy = if sum_used > 0.0 { sum_used.min(1.0) } else { 0.0 };
    let idle_each = (1.0 - busy) / jobs.len() as f64;
    jobs.iter()
        .zip(used)
        .map(|(&j, u)| (j, idle_each + if sum_used > 0.0 { u / sum_used * busy } else { 0.0 }))
        .collect()
}

/// Splits `energy_mj` among `jobs` by [`weights`]; the parts add up to `energy_mj` exactly.
pub fn split(energy_mj: u64, jobs: &[u32], usage: &Usage) -> Vec<(u32, u64)> {
    let w = weights(jobs, usage);
    if w.is_empty() {
        return Vec::new();
    }
    let exact: Vec<f64> = w.iter().map(|(_, x)| x * energy_mj as f64).collect();
    let mut parts: Vec<u64> = exact.iter().map(|x| x.floor() as u64).collect();
    let mut left = energy_mj.saturating_sub(parts.iter().sum());
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    for &k in order.iter().cycle().take(parts.len() * 2) {
        if left == 0 {
            break;
        }
        parts[k] += 1;
        left -= 1;
    }
    if left > 0 {
        parts[0] += left;
    }
    w.iter().map(|(j, _)| *j).zip(parts).collect()
}

/// What `/proc/<pid>` tells about a process, for [`job_of_process`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessFacts<'a> {
    /// `/proc/<pid>/cgroup`.
    pub cgroup: Option<&'a str>,
    /// `/proc/<pid>/environ` (NUL-separated).
    pub environ: Option<&'a [u8]>,
    /// Real and effective uid (`Uid:` of `/proc/<pid>/status`).
    pub uids: Option<(u32, u32)>,
}

/// The job a process belongs to: the job of its Slurm job cgroup ([`job_of_cgroup`], under
/// the cgroup root `init_root`, see [`slurm_cgroup_root`]); for a process in no Slurm job
/// cgroup, the `SLURM_JOB_ID` of its environment if its real and effective uid are that job's
/// (`job_uid`; a job whose uid is unknown gets no process from its environment).
pub fn job_of_process(facts: &ProcessFacts<'_>, init_root: &str, job_uid: &dyn Fn(u32) -> Option<u32>) -> Option<u32> {
    if let Some(cgroup) = facts.cgroup {
        match job_of_cgroup(cgroup, init_root) {
            CgroupJob::Job(job) => return Some(job),
            // In a Slurm job cgroup of no one job (several jobs' lines disagree): nobody's.
            CgroupJob::Conflict => return None,
            CgroupJob::NoJob => {}
        }
    }
    let job: u32 = facts.environ.and_then(|env| {
        env.split(|&b| b == 0).find_map(|var| var.strip_prefix(b"SLURM_JOB_ID=")).and_then(|v| std::str::from_utf8(v).ok()?.trim().parse().ok())
    })?;
    let (real, effective) = facts.uids?;
    (real == effective && job_uid(job) == Some(real)).then_some(job)
}

/// What a process's cgroup file says about its Slurm job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupJob {
    /// In Slurm's cgroup of this job.
    Job(u32),
    /// In no Slurm job cgroup.
    NoJob,
    /// Lines of the file name different jobs (cannot be Slurm's doing).
    Conflict,
}

/// The job of the Slurm job cgroup a process is in, from `/proc/<pid>/cgroup`:
///
/// - cgroup v2 (`0::<path>`): `<init_root>/system.slice/slurmstepd.scope/job_<id>/step_<s>/...`
///   or, with several slurmd on one host (`-N`/`SlurmdNodeName`), `<node>_slurmstepd.scope`:
///   `_set_int_cg_ns()` in Slurm's cgroup/v2 plugin (22.05: `<init_root>` is the cgroup
///   mount's root; 24.11: the parent of PID 1's cgroup when PID 1 is not at the root). Only root
///   (systemd, slurmd) makes cgroups directly under `system.slice`;
/// - cgroup v1 (`<n>:<controllers>:<path>`): `/slurm/uid_<uid>/job_<id>/step_<s>/...`, or
///   `/slurm_<node>/...` with several slurmd (`CgroupPrepend`'s defaults in Slurm's
///   `interfaces/cgroup.c`, expanded in cgroup/v1's `xcgroup_create_slurm_cg`). A site that
///   sets another `CgroupPrepend` is read as having no job cgroups.
pub fn job_of_cgroup(cgroup: &str, init_root: &str) -> CgroupJob {
    let mut found: Option<u32> = None;
    for line in cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(hierarchy), Some(_controllers), Some(path)) = (fields.next(), fields.next(), fields.next()) else { continue };
        let job = if hierarchy == "0" { job_of_v2_path(path, init_root) } else { job_of_v1_path(path) };
        match (job, found) {
            (Some(j), Some(f)) if j != f => return CgroupJob::Conflict,
            (Some(j), _) => found = Some(j),
            (None, _) => {}
        }
    }
    found.map_or(CgroupJob::NoJob, CgroupJob::Job)
}

/// `job_<id>` followed by `step_<...>` at the start of `parts`.
fn job_and_step<'a>(mut parts: impl Iterator<Item = &'a str>) -> Option<u32> {
    let job = parts.next()?.strip_prefix("job_")?;
    // Slurm writes the id with `%u`: digits only, no sign or leading zero games.
    if job.is_empty() || !job.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let job: u32 = job.parse().ok()?;
    parts.next()?.strip_prefix("step_").filter(|s| !s.is_empty())?;
    Some(job)
}

fn job_of_v2_path(path: &str, init_root: &str) -> Option<u32> {
    let init_root = init_root.trim_end_matches('/');
    let rest = path.strip_prefix(init_root)?.strip_prefix("/system.slice/")?;
    let mut parts = rest.split('/');
    let scope = parts.next()?;
    let scope_ok = scope == "slurmstepd.scope" || scope.strip_suffix("_slurmstepd.scope").is_some_and(|node| !node.is_empty());
    if !scope_ok {
        return None;
    }
    job_and_step(parts)
}

fn job_of_v1_path(path: &str) -> Option<u32> {
    let mut parts = path.strip_prefix('/')?.split('/');
    let prepend = parts.next()?;
    if prepend != "slurm" && prepend.strip_prefix("slurm_").is_none_or(str::is_empty) {
        return None;
    }
    let uid = parts.next()?.strip_prefix("uid_")?;
    if uid.is_empty() || !uid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    job_and_step(parts)
}

/// The cgroup (v2) under which Slurm 24.11+ puts `system.slice/slurmstepd.scope`: the parent
/// of PID 1's cgroup, or the root when PID 1 is at the root or in a child of it (as under
/// systemd, `/init.scope`); 22.05 always uses the root, the same on such hosts. Read from
/// `/proc/1/cgroup`, as Slurm does (`_get_init_cg_path()`).
pub fn slurm_cgroup_root(pid1_cgroup: Option<&str>) -> String {
    let path = pid1_cgroup.and_then(|text| text.lines().find_map(|l| l.strip_prefix("0::"))).map(str::trim).unwrap_or("/");
    match path.trim_end_matches('/').rsplit_once('/') {
        Some((parent, _)) => parent.to_string(),
        None => String::new(),
    }
}

/// Real and effective uid from `/proc/<pid>/status`.
pub fn status_uids(status: &str) -> Option<(u32, u32)> {
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let mut ids = line.split_whitespace().map(|v| v.parse::<u32>().ok());
    Some((ids.next()??, ids.next()??))
}

/// The uid job `job` runs as on this node: the uid of the tasks its slurmstepd processes
/// started. A slurmstepd is a root process named `slurmstepd` whose title is
/// `slurmstepd: [<job>.<step>]` (only root can make or rename such a process); its children
/// that are not root are the job's tasks (a root child is a helper, or a task before it took the
/// job's uid). `None` when no task tells, or tasks of one job disagree; `Some(0)` when the only
/// children are root's (a root job, or tasks not started yet: only root processes then pass
/// [`job_of_process`]'s check, and those are trusted anyway).
pub fn job_uid_from_proc(job: u32) -> Option<u32> {
    let procs = proc_table();
    let stepds: Vec<u32> = procs.iter().filter(|p| p.uids == (0, 0) && p.comm == "slurmstepd" && stepd_job(p.pid) == Some(job)).map(|p| p.pid).collect();
    job_uid_of_children(&procs, &stepds)
}

/// One process, as [`job_uid_from_proc`] needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcEntry {
    pub pid: u32,
    pub ppid: u32,
    pub uids: (u32, u32),
    pub comm: String,
}

/// The uid of the children of `parents` (see [`job_uid_from_proc`]).
pub fn job_uid_of_children(procs: &[ProcEntry], parents: &[u32]) -> Option<u32> {
    let mut uids: Vec<u32> = Vec::new();
    let mut root_child = false;
    for p in procs.iter().filter(|p| parents.contains(&p.ppid)) {
        let (real, effective) = p.uids;
        if real == 0 && effective == 0 {
            root_child = true;
        } else if real == effective && !uids.contains(&real) {
            uids.push(real);
        }
    }
    match uids.as_slice() {
        [uid] => Some(*uid),
        [] if root_child => Some(0),
        _ => None,
    }
}

fn proc_table() -> Vec<ProcEntry> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
            Some(ProcEntry { pid, ppid: field("PPid:")?.parse().ok()?, uids: status_uids(&status)?, comm: field("Name:")?.to_string() })
        })
        .collect()
}

/// The job of a slurmstepd from its title (`slurmstepd: [12.batch]`, `[9+1.3]`).
fn stepd_job(pid: u32) -> Option<u32> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let title = String::from_utf8_lossy(&cmdline);
    let ids = title.strip_prefix("slurmstepd: [")?.split(']').next()?;
    ids.split_once('.')?.0.split('+').next()?.parse().ok()
}

/// [`job_of_process`] of a live process (the environment path checks the job's uid with
/// [`job_uid_from_proc`]).
pub fn job_of_pid(pid: u32) -> Option<u32> {
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok();
    let root = slurm_cgroup_root(std::fs::read_to_string("/proc/1/cgroup").ok().as_deref());
    if let Some(text) = &cgroup {
        match job_of_cgroup(text, &root) {
            CgroupJob::Job(job) => return Some(job),
            CgroupJob::Conflict => return None,
            CgroupJob::NoJob => {}
        }
    }
    // Outside Slurm's cgroups only: the environment, checked against the job's uid.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok();
    let facts = ProcessFacts { cgroup: None, environ: environ.as_deref(), uids: status.as_deref().and_then(status_uids) };
    job_of_process(&facts, &root, &job_uid_from_proc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn busy_time_to_its_users_idle_time_equally() {
        // Two jobs at 60 % and 20 % of SM time: 20 % idle, 10 % each.
        let usage = Usage::from_process_samples(&[(1, 60), (2, 20)], |p| Some(p + 100));
        let w = weights(&[101, 102], &usage);
        assert!(close(w[0].1, 0.7) && close(w[1].1, 0.3), "{w:?}");
        // A third co-runner that does nothing gets its part of the idle time only.
        let w = weights(&[101, 102, 103], &usage);
        assert!(close(w[0].1, 0.6 + 0.2 / 3.0) && close(w[2].1, 0.2 / 3.0), "{w:?}");
        assert!(close(w.iter().map(|x| x.1).sum(), 1.0));
    }

    #[test]
    fn oversubscribed_samples_are_scaled_and_strangers_count_as_idle() {
        let usage = Usage::from_process_samples(&[(1, 90), (2, 90)], Some);
        let w = weights(&[1, 2], &usage);
        assert!(close(w[0].1, 0.5) && close(w[1].1, 0.5));
        // A process of no co-runner (pid 9): its 50 % is split like idle time.
        let usage = Usage::from_process_samples(&[(1, 30), (9, 50)], |p| (p != 9).then_some(p));
        let w = weights(&[1, 2], &usage);
        assert!(close(w[0].1, 0.3 + 0.35) && close(w[1].1, 0.35), "{w:?}");
    }

    #[test]
    fn fallback_splits_the_gpu_utilisation_among_jobs_with_processes() {
        let job_of = |p: u32| Some(p / 10);
        let usage = Usage::from_running_processes(80, &[11, 12, 31], &[1, 2, 3], job_of);
        assert_eq!(usage.basis, Basis::RunningProcesses);
        let w = weights(&[1, 2, 3], &usage);
        // 20 % idle over three, 80 % over jobs 1 and 3.
        assert!(close(w[0].1, 0.4 + 0.2 / 3.0) && close(w[1].1, 0.2 / 3.0) && close(w[2].1, 0.4 + 0.2 / 3.0), "{w:?}");
        // Nobody with a process: everyone alike.
        let w = weights(&[1, 2], &Usage::from_running_processes(50, &[], &[1, 2], job_of));
        assert!(close(w[0].1, 0.5) && close(w[1].1, 0.5));
    }

    #[test]
    fn parts_add_up_to_the_counter_exactly() {
        let usage = Usage::from_process_samples(&[(1, 33), (2, 33), (3, 33)], Some);
        for e in [0u64, 1, 2, 10, 999_999, 123_456_789] {
            let parts = split(e, &[1, 2, 3], &usage);
            assert_eq!(parts.iter().map(|p| p.1).sum::<u64>(), e);
        }
        assert!(split(5, &[], &usage).is_empty());
    }

    const V2_JOB_7: &str = "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n";

    fn facts<'a>(env: &'a [u8], cgroup: Option<&'a str>, uids: (u32, u32)) -> ProcessFacts<'a> {
        ProcessFacts { cgroup, environ: Some(env), uids: Some(uids) }
    }

    #[test]
    fn processes_belong_to_jobs_by_cgroup_then_checked_environment() {
        let uid_1000 = |_job: u32| Some(1000);
        // A process in no Slurm cgroup, with the job's uid: its environment.
        assert_eq!(job_of_process(&facts(b"PATH=/bin\0SLURM_JOB_ID=42\0X=1\0", Some("0::/user.slice\n"), (1000, 1000)), "", &uid_1000), Some(42));
        assert_eq!(job_of_process(&ProcessFacts { cgroup: Some(V2_JOB_7), ..ProcessFacts::default() }, "", &uid_1000), Some(7));
        assert_eq!(job_of_process(&facts(b"SLURM_JOB_ID=x\0", Some("0::/user.slice\n"), (1000, 1000)), "", &uid_1000), None);
        assert_eq!(job_of_process(&ProcessFacts::default(), "", &uid_1000), None);
    }

    #[test]
    fn the_cgroup_wins_over_the_environment() {
        // Job 7's process says it is job 9's: it is job 7's.
        let f = facts(b"SLURM_JOB_ID=9\0", Some(V2_JOB_7), (1000, 1000));
        assert_eq!(job_of_process(&f, "", &|_| Some(1000)), Some(7));
        // cgroup v1, and a second slurmd's scope (-N n2).
        let v1 = "12:freezer:/slurm/uid_1000/job_5/step_batch\n4:memory:/slurm/uid_1000/job_5/step_batch/task_0\n0::/\n";
        assert_eq!(job_of_process(&facts(b"SLURM_JOB_ID=9\0", Some(v1), (1000, 1000)), "", &|_| Some(1000)), Some(5));
        let multi = "0::/system.slice/n2_slurmstepd.scope/job_11/step_extern/user/task_special\n";
        assert_eq!(job_of_cgroup(multi, ""), CgroupJob::Job(11));
        // 24.11 with PID 1 in a non-root cgroup: the scope sits under PID 1's parent cgroup.
        let root = slurm_cgroup_root(Some("0::/machine/node3/init.scope\n"));
        assert_eq!(root, "/machine/node3");
        assert_eq!(job_of_cgroup("0::/machine/node3/system.slice/slurmstepd.scope/job_3/step_0/user/task_0\n", &root), CgroupJob::Job(3));
        assert_eq!(slurm_cgroup_root(Some("0::/init.scope\n")), "");
        assert_eq!(slurm_cgroup_root(Some("0::/\n")), "");
    }

    #[test]
    fn a_user_made_job_cgroup_is_not_a_job() {
        let no_env = |cg: &'static str| ProcessFacts { cgroup: Some(cg), ..ProcessFacts::default() };
        let uid = |_j: u32| Some(1000);
        for cg in [
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/job_7/step_0\n",
            // Slurm's layout, rebuilt inside the user's delegated subtree.
            "0::/user.slice/user-1000.slice/user@1000.service/system.slice/slurmstepd.scope/job_7/step_0\n",
            "0::/system.slice/slurmd.service/job_7/step_0\n",
            "0::/system.slice/slurmstepd.scope/job_7\n",
            "0::/system.slice/slurmstepd.scope/job_+7/step_0\n",
            "3:cpuset:/user/uid_1000/job_7/step_0\n",
        ] {
            assert_eq!(job_of_process(&no_env(cg), "", &uid), None, "{cg}");
        }
        // Lines that name two different jobs: no one's.
        assert_eq!(job_of_cgroup("4:memory:/slurm/uid_1/job_5/step_0\n0::/system.slice/slurmstepd.scope/job_6/step_0\n", ""), CgroupJob::Conflict);
    }

    #[test]
    fn the_environment_of_another_uid_is_refused() {
        let env = b"SLURM_JOB_ID=42\0";
        let job_42_is_uid_1000 = |j: u32| (j == 42).then_some(1000);
        // uid 2000 claims job 42 of uid 1000.
        assert_eq!(job_of_process(&facts(env, None, (2000, 2000)), "", &job_42_is_uid_1000), None);
        // Real and effective must both be the job's.
        assert_eq!(job_of_process(&facts(env, None, (2000, 1000)), "", &job_42_is_uid_1000), None);
        assert_eq!(job_of_process(&facts(env, None, (1000, 1000)), "", &job_42_is_uid_1000), Some(42));
        // A job whose uid is not known takes no process from the environment.
        assert_eq!(job_of_process(&facts(env, None, (1000, 1000)), "", &|_| None), None);
        assert_eq!(job_of_process(&ProcessFacts { uids: None, ..facts(env, None, (0, 0)) }, "", &job_42_is_uid_1000), None);
    }

    #[test]
    fn a_jobs_uid_is_its_stepds_non_root_children() {
        let p = |pid, ppid, uid, comm: &str| ProcEntry { pid, ppid, uids: (uid, uid), comm: comm.into() };
        let procs = vec![p(10, 1, 0, "slurmstepd"), p(11, 10, 0, "sleep"), p(12, 10, 1000, "bash"), p(13, 12, 1000, "python"), p(20, 1, 2000, "evil")];
        assert_eq!(job_uid_of_children(&procs, &[10]), Some(1000));
        assert_eq!(job_uid_of_children(&procs, &[10, 12]), Some(1000));
        assert_eq!(job_uid_of_children(&procs[..2], &[10]), Some(0));
        assert_eq!(job_uid_of_children(&procs, &[99]), None);
        let mixed = vec![p(10, 1, 0, "slurmstepd"), p(12, 10, 1000, "a"), p(14, 10, 2000, "b")];
        assert_eq!(job_uid_of_children(&mixed, &[10]), None);
        assert_eq!(status_uids("Name:\tx\nUid:\t1000\t0\t0\t0\n"), Some((1000, 0)));
    }
}
