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
//! or among all of them when none has. A process belongs to a job by the `SLURM_JOB_ID` in its
//! environment (read as root from `/proc/<pid>/environ`), else by a `job_<id>` element of its
//! cgroup path; a process of no co-runner counts as idle time.

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

/// The job a process belongs to: `SLURM_JOB_ID` of its environment (NUL-separated
/// `/proc/<pid>/environ`), else a `job_<id>` element of its cgroup path (`/proc/<pid>/cgroup`).
pub fn job_of_process(environ: Option<&[u8]>, cgroup: Option<&str>) -> Option<u32> {
    let from_env = environ.and_then(|env| {
        env.split(|&b| b == 0).find_map(|var| var.strip_prefix(b"SLURM_JOB_ID=")).and_then(|v| std::str::from_utf8(v).ok()?.trim().parse().ok())
    });
    from_env.or_else(|| {
        cgroup?.split(['/', '\n', ':']).find_map(|part| part.strip_prefix("job_")?.parse().ok())
    })
}

/// [`job_of_process`] of a live process.
pub fn job_of_pid(pid: u32) -> Option<u32> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok();
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok();
    job_of_process(environ.as_deref(), cgroup.as_deref())
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

    #[test]
    fn processes_belong_to_jobs_by_environment_or_cgroup() {
        assert_eq!(job_of_process(Some(b"PATH=/bin\0SLURM_JOB_ID=42\0X=1\0"), None), Some(42));
        assert_eq!(job_of_process(None, Some("0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n")), Some(7));
        assert_eq!(job_of_process(Some(b"SLURM_JOB_ID=x\0"), Some("0::/user.slice\n")), None);
        assert_eq!(job_of_process(None, None), None);
    }
}
