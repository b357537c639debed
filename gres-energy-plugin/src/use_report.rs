//! Reporting a running job's GPU use to sched/energy, which learns from it (docs/learning.md).
//!
//! The job's extern step (one per job and node, alive as long as the job, `PrologFlags=Contain`)
//! measures at each of its polls (`JobAcctGatherFrequency`) how much of its GPUs the job's own
//! processes used since the previous poll ([`job_util_pct`]), and sends it as one UDP datagram,
//! signed with munge, to every `SlurmctldHost` at `[learning] gpu_use_port` of `energy.toml`
//! (next to slurm.conf). A datagram lost is an interval not learnt, never a delayed job: sending
//! does not wait for anyone, and a failure is logged once.
//!
//! Measurement: NVML's per-process SM samples taken in the interval (the job's processes found
//! by their `SLURM_JOB_ID`, as for the energy split, [`crate::share`]); without samples, the
//! GPU's utilisation split equally among the jobs that have compute processes on it. A GPU on
//! which the job has no process yet (it is still starting) is left out, so start-up does not
//! read as idle use.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::Path;

use gpu_control::GpuControl;
use model::gpu_use::UseReport;
use slurm_bindings::munge::Munge;

use crate::share;

/// The job's SM utilisation (%) on NVML device `gpu` since `since_unix_us`; `None` when it has
/// no process there.
pub fn job_util_pct(
    ctrl: &dyn GpuControl,
    gpu: u32,
    job: u32,
    since_unix_us: u64,
    job_of: &dyn Fn(u32) -> Option<u32>,
) -> Option<f64> {
    if let Ok(samples) = ctrl.process_sm_utilization_pct(gpu, since_unix_us)
        && !samples.is_empty()
    {
        let mine: Vec<u32> = samples
            .iter()
            .filter(|s| job_of(s.pid) == Some(job))
            .map(|s| s.sm_pct.min(100))
            .collect();
        return (!mine.is_empty()).then(|| f64::from(mine.iter().sum::<u32>().min(100)));
    }
    let pids: Vec<u32> = ctrl
        .compute_processes(gpu)
        .ok()?
        .iter()
        .map(|p| p.pid)
        .collect();
    let mut jobs: Vec<u32> = pids.iter().filter_map(|&p| job_of(p)).collect();
    jobs.sort_unstable();
    jobs.dedup();
    if !jobs.contains(&job) {
        return None;
    }
    let gpu_pct = ctrl.utilization_pct(gpu).ok()?.gpu_pct.min(100);
    Some(f64::from(gpu_pct) / jobs.len() as f64)
}

/// The job's use of `gpus` over one interval: mean utilisation over the GPUs it has processes
/// on, and how many those are. `None`: on none of them.
pub fn measure(
    ctrl: &dyn GpuControl,
    gpus: &[u32],
    job: u32,
    since_unix_us: u64,
    job_of: &dyn Fn(u32) -> Option<u32>,
) -> Option<(f64, u32)> {
    let used: Vec<f64> = gpus
        .iter()
        .filter_map(|&g| job_util_pct(ctrl, g, job, since_unix_us, job_of))
        .collect();
    (!used.is_empty()).then(|| {
        (
            used.iter().sum::<f64>() / used.len() as f64,
            used.len() as u32,
        )
    })
}

/// `[learning] gpu_use_port` of the `energy.toml` beside `slurm_conf`: `Ok(None)` when the
/// file or the setting is absent or 0 (reporting off).
pub fn port_from_config(slurm_conf: &Path) -> Result<Option<u16>, String> {
    let path = slurm_conf.with_file_name("energy.toml");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let value: toml::Table = text
        .parse()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    match value.get("learning").and_then(|l| l.get("gpu_use_port")) {
        None => Ok(None),
        Some(toml::Value::Integer(0)) => Ok(None),
        Some(toml::Value::Integer(p)) => u16::try_from(*p).map(Some).map_err(|_| {
            format!(
                "{}: learning.gpu_use_port = {p} is not a port",
                path.display()
            )
        }),
        Some(other) => Err(format!(
            "{}: learning.gpu_use_port = {other} is not a port number",
            path.display()
        )),
    }
}

/// One job's reporter on one node.
pub struct UseReporter {
    job_id: u32,
    node: String,
    gpus: Vec<u32>,
    targets: Vec<SocketAddr>,
    socket: UdpSocket,
    munge: Munge,
    last_unix_us: u64,
}

impl UseReporter {
    /// `slurmctld_hosts`: the `SlurmctldHost` addresses; `munge_socket`: AuthInfo's.
    pub fn start(
        job_id: u32,
        node: String,
        gpus: Vec<u32>,
        slurmctld_hosts: &[String],
        port: u16,
        munge_socket: Option<&str>,
    ) -> Result<UseReporter, String> {
        let targets: Vec<SocketAddr> = slurmctld_hosts
            .iter()
            .filter_map(|h| (h.as_str(), port).to_socket_addrs().ok()?.next())
            .collect();
        if targets.is_empty() {
            return Err(format!("no address for SlurmctldHost {slurmctld_hosts:?}"));
        }
        let bind = if targets[0].is_ipv6() {
            "[::]:0"
        } else {
            "0.0.0.0:0"
        };
        let socket = UdpSocket::bind(bind).map_err(|e| format!("UDP socket: {e}"))?;
        socket
            .set_nonblocking(true)
            .map_err(|e| format!("UDP socket: {e}"))?;
        let munge = Munge::new(munge_socket).map_err(|e| e.to_string())?;
        Ok(UseReporter {
            job_id,
            node,
            gpus,
            targets,
            socket,
            munge,
            last_unix_us: unix_now_us(),
        })
    }

    /// Measures the interval since the last poll and sends it. `Ok(None)`: the job had no
    /// process on its GPUs (nothing sent).
    pub fn poll(&mut self, ctrl: &dyn GpuControl) -> Result<Option<UseReport>, String> {
        let now = unix_now_us();
        let since = self.last_unix_us;
        if now <= since {
            return Ok(None);
        }
        self.last_unix_us = now;
        let Some((util_pct, gpus)) =
            measure(ctrl, &self.gpus, self.job_id, since, &share::job_of_pid)
        else {
            return Ok(None);
        };
        let report = UseReport {
            job_id: self.job_id,
            node: self.node.clone(),
            from_unix_s: since as f64 / 1e6,
            to_unix_s: now as f64 / 1e6,
            gpus,
            util_pct,
        };
        let cred = self
            .munge
            .encode(report.to_wire().as_bytes())
            .map_err(|e| e.to_string())?;
        for t in &self.targets {
            self.socket
                .send_to(cred.as_bytes(), t)
                .map_err(|e| format!("send to {t}: {e}"))?;
        }
        Ok(Some(report))
    }
}

fn unix_now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_control::FakeGpus;
    use gpu_control::{GpuProcess, ProcessSmUtilPct};

    #[test]
    fn config_port_is_read_next_to_slurm_conf() {
        let dir = tempfile::tempdir().expect("temp dir");
        let conf = dir.path().join("slurm.conf");
        assert_eq!(port_from_config(&conf), Ok(None), "no energy.toml: off");
        std::fs::write(
            dir.path().join("energy.toml"),
            "[sched]\ninterval_s = 1\n[learning]\ngpu_use_port = 6831\n",
        )
        .unwrap();
        assert_eq!(port_from_config(&conf), Ok(Some(6831)));
        std::fs::write(
            dir.path().join("energy.toml"),
            "[learning]\ngpu_use_port = 0\n",
        )
        .unwrap();
        assert_eq!(port_from_config(&conf), Ok(None));
        std::fs::write(
            dir.path().join("energy.toml"),
            "[learning]\ngpu_use_port = 70000\n",
        )
        .unwrap();
        assert!(
            port_from_config(&conf)
                .expect_err("too big")
                .contains("70000")
        );
        std::fs::write(dir.path().join("energy.toml"), "[learning\n").unwrap();
        assert!(
            port_from_config(&conf)
                .expect_err("bad toml")
                .contains("energy.toml")
        );
    }

    #[test]
    fn a_job_counts_its_own_processes_only() {
        let fake = FakeGpus::v100s(2);
        let samples = |list: &[(u32, u32)]| {
            Some(
                list.iter()
                    .map(|&(pid, sm_pct)| ProcessSmUtilPct { pid, sm_pct })
                    .collect(),
            )
        };
        fake.with_gpu(0, |g| {
            g.process_sm_pct = samples(&[(100, 40), (101, 20), (200, 30)])
        })
        .unwrap();
        fake.with_gpu(1, |g| g.process_sm_pct = samples(&[(200, 90)]))
            .unwrap();
        let job_of = |pid: u32| Some(pid / 100);
        assert_eq!(job_util_pct(&fake, 0, 1, 0, &job_of), Some(60.0));
        assert_eq!(
            job_util_pct(&fake, 1, 1, 0, &job_of),
            None,
            "job 1 has no process on GPU 1"
        );
        assert_eq!(measure(&fake, &[0, 1], 2, 0, &job_of), Some((60.0, 2)));
        assert_eq!(measure(&fake, &[0, 1], 1, 0, &job_of), Some((60.0, 1)));
        assert_eq!(measure(&fake, &[0, 1], 3, 0, &job_of), None);
    }

    #[test]
    fn without_samples_the_gpu_is_split_among_jobs_with_processes() {
        let fake = FakeGpus::v100s(1);
        let process = |pid: u32| GpuProcess {
            pid,
            used_memory_bytes: Some(1 << 30),
        };
        fake.with_gpu(0, |g| {
            g.process_sm_pct = None;
            g.utilization.gpu_pct = 80;
            g.processes = vec![process(100), process(101), process(200)];
        })
        .unwrap();
        let job_of = |pid: u32| Some(pid / 100);
        assert_eq!(job_util_pct(&fake, 0, 1, 0, &job_of), Some(40.0));
        assert_eq!(job_util_pct(&fake, 0, 2, 0, &job_of), Some(40.0));
        assert_eq!(job_util_pct(&fake, 0, 3, 0, &job_of), None);
    }
}
