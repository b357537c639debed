//! sched/energy with slurmctld and slurmd run as sites run them (`DaemonMode::Systemd`: 24.11's
//! `--systemd` units with a notify-socket stand-in, 22.05 daemonised with its pid files), on a
//! node with 2 fake GPUs (`gpu_nvml.so`, `acct_gather_energy_nvml.so` reporting each job's GPU
//! use to `[learning] gpu_use_port`, `spank_energy.so` applying sched/energy's clocks), with
//! accounting:
//!
//! - `reconfigure_with_jobs_running_and_a_changed_energy_toml`: `scontrol reconfigure` while two
//!   jobs run at a lowered GPU clock and two wait, with energy.toml changed (`debug` on: every
//!   cycle's line appears in the log from then on). On 24.11 slurmctld is a new process after it
//!   (the old one held the GPU-use port while the new one started: before the background bind,
//!   the new one's init failed and the reconfigure with it).
//! - `log_rotation_sighup_to_slurmctld_and_slurmd`: logrotate's rename + SIGHUP to slurmctld and
//!   to slurmd while jobs run.
//! - `slurmctld_restart_while_gpu_use_reports_arrive`: slurmctld stopped and started while the
//!   running jobs' GPU-use reports arrive; the new slurmctld receives them.
//!
//! Each checks: slurmctld up afterwards (by the pid the harness followed), every job in sacct
//! exactly once and COMPLETED, each job script started once, the GPUs back at their default
//! clocks, no daemon process left after the cluster stops.
//!
//! Skipped (with a printed reason) when not root, Slurm is missing, the GPU or SPANK plugins are
//! not built, or the measured data is not found; fails instead under `CI=true`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use slurm_testcluster::{ClusterConfig, DaemonMode, LocalCluster, built_artifact, skip_for, skip_live_test};

mod common;
use common::{data_dir, fake_gpu_node, free_udp_port, plugin_dir, spank_plugin, squeue_field};

const TIMEOUT: Duration = Duration::from_secs(90);
const GPUS: u32 = 2;
/// Jobs of each test: two run, two wait for a GPU.
const JOBS: usize = 4;
/// How long each job's script runs.
const JOB_S: u32 = 15;

/// A site-mode cluster with fake GPUs and what the test reads of them.
struct Rig {
    cluster: LocalCluster,
    fake: fake_nvml::FakeNvml,
    /// Each job script appends its job id here when it starts.
    starts: PathBuf,
    port: u16,
    /// The GPUs' application clocks before any job.
    default_mhz: Vec<u32>,
    _plugins: tempfile::TempDir,
    _work: tempfile::TempDir,
}

fn energy_toml(data: &std::path::Path, port: u16, gpu_type: &str, debug: bool) -> String {
    format!(
        "[sched]\ninterval_s = 1\ndebug = {debug}\ndata_dir = \"{}\"\n\n[learning]\nearly_after_s = 5\ngpu_use_port = {port}\n\n[gpu_types.\"{gpu_type}\"]\nmodel = \"v100\"\n",
        data.display()
    )
}

impl Rig {
    /// `None` (after saying why) when the test cannot run here.
    fn start(test: &str, debug: bool) -> Option<Rig> {
        if skip_live_test(test) {
            return None;
        }
        let Some(spank) = spank_plugin() else {
            skip_for(test, "libspank_energy.so not built (run `cargo test -p spank-energy -p slurm-sched-plugin`)");
            return None;
        };
        if built_artifact("libgpu_nvml.so").is_none() || built_artifact("libacct_gather_energy_nvml.so").is_none() {
            skip_for(test, "the GPU plugins are not built (run `cargo build -p gpu-nvml-plugin -p acct-gather-energy-nvml`)");
            return None;
        }
        let Some(data) = data_dir() else {
            skip_for(test, "measured data not found (set SLURM_ENERGY_DATA)");
            return None;
        };
        let plugins = plugin_dir();
        let work = tempfile::Builder::new().prefix("site-mode-").tempdir().expect("temp dir");
        let node = fake_gpu_node(work.path(), plugins.path(), GPUS, "cpu_count = 4\nnuma_nodes = 1\n");
        let port = free_udp_port();
        let default_mhz = gpu_clocks(&node.fake);
        let toml = energy_toml(&data, port, &node.gpu_type, debug);
        let cluster = LocalCluster::start(ClusterConfig { daemon_mode: DaemonMode::Systemd, ..node.cluster(plugins.path(), toml, &spank) })
            .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
        let fake = node.fake;
        let starts = cluster.job_dir().join("starts");
        println!(
            "{test}: Slurm {}, {}, slurmctld pid {:?}",
            slurm_testcluster::slurm_release().unwrap_or_default(),
            if cluster.runs_under_systemd_flag() { "--systemd" } else { "daemonised" },
            cluster.main_pids("slurmctld")
        );
        Some(Rig { cluster, fake, starts, port, default_mhz, _plugins: plugins, _work: work })
    }

    /// Submits the test's jobs: one GPU each, at the efficiency policy (sched/energy lowers
    /// their clock), each recording its start and printing its PID.
    fn submit_jobs(&self) -> Vec<u32> {
        self.submit_jobs_running(&format!("sleep {JOB_S}"))
    }

    /// The test's jobs, each running `body` after it records its start.
    fn submit_jobs_running(&self, body: &str) -> Vec<u32> {
        let script = format!("#!/bin/sh\necho \"$SLURM_JOB_ID\" >> {}\necho PID=$$\n{body}\n", self.starts.display());
        (0..JOBS)
            .map(|i| {
                self.cluster
                    .sbatch(&["-J", &format!("site{i}"), "--gres=gpu:1", "-t", "5", "--energy-policy=efficiency", "--energy-max-slowdown=2.0"], &script)
                    .unwrap_or_else(|e| panic!("sbatch: {e}"))
            })
            .collect()
    }

    /// Waits until `count` of `jobs` run and some GPU runs below its default clock; the running
    /// jobs' script PIDs.
    fn wait_running_at_low_clock(&self, jobs: &[u32], count: usize) -> Vec<u32> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let running: Vec<u32> = jobs.iter().copied().filter(|j| squeue_field(&self.cluster, *j, "%T") == "RUNNING").collect();
            let pids: Vec<u32> = running
                .iter()
                .filter_map(|j| std::fs::read_to_string(self.cluster.job_output_path(*j)).ok()?.lines().find_map(|l| l.strip_prefix("PID=")?.trim().parse().ok()))
                .collect();
            let clocks = gpu_clocks(&self.fake);
            let low = clocks.iter().zip(&self.default_mhz).any(|(c, d)| c < d);
            if running.len() >= count && pids.len() >= count && low {
                println!("  {} running, clocks {clocks:?} (default {:?})", running.len(), self.default_mhz);
                return pids;
            }
            assert!(
                Instant::now() < deadline,
                "{count} jobs not running at a lowered clock within {TIMEOUT:?}: running {running:?}, clocks {clocks:?} (default {:?})\nslurmctld:\n{}\nslurmd:\n{}",
                self.default_mhz,
                tail(&self.cluster.slurmctld_log(), 40),
                tail(&self.cluster.slurmd_log("n1"), 40)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The fake GPUs report these PIDs at 60 % SM use each.
    fn set_load(&self, pids: &[u32]) {
        let processes: Vec<fake_nvml::GpuProcess> = pids.iter().map(|&pid| fake_nvml::GpuProcess { pid, used_memory_bytes: 1 << 30, sm_util_pct: Some(60) }).collect();
        self.fake
            .update(|s| {
                for gpu in s.gpus.iter_mut() {
                    gpu.util_gpu_pct = if processes.is_empty() { 0 } else { 60 };
                    gpu.processes = processes.clone();
                }
            })
            .expect("fake load");
    }

    /// After every job ended: slurmctld up, each job in sacct once and COMPLETED, each script
    /// started once, the GPUs at their default clocks, no crash in the log. Then stops the
    /// cluster, which fails when a daemon process of it is left.
    fn check_and_stop(self, test: &str, jobs: &[u32], t0: Instant) {
        let c = &self.cluster;
        for &job in jobs {
            let state = c.wait_job_done(job, TIMEOUT).unwrap_or_else(|e| panic!("job {job}: {e}"));
            assert_eq!(state, "COMPLETED", "job {job}");
        }
        let ping = c.command("scontrol").arg("ping").output().expect("scontrol ping");
        assert!(String::from_utf8_lossy(&ping.stdout).contains("is UP"), "slurmctld down after the test: {}", String::from_utf8_lossy(&ping.stdout));
        let ctld = c.pid_of("slurmctld").expect("slurmctld pid");
        assert!(slurm_testcluster::pid_exists(ctld), "slurmctld's process {ctld} is gone");
        for &job in jobs {
            c.wait_accounted(job, TIMEOUT).unwrap_or_else(|e| panic!("job {job} not accounted: {e}"));
        }
        let ids: Vec<String> = jobs.iter().map(u32::to_string).collect();
        // -D: every record of a job, a requeued or restarted one's too.
        let out = c.command("sacct").args(["-n", "-P", "-X", "-D", "-j", &ids.join(","), "-o", "JobID,State"]).output().expect("sacct");
        let rows = String::from_utf8_lossy(&out.stdout).into_owned();
        for id in &ids {
            let mine: Vec<&str> = rows.lines().filter(|l| l.split('|').next() == Some(id.as_str())).collect();
            assert_eq!(mine.len(), 1, "job {id}: sacct -D has {} records:\n{rows}", mine.len());
            assert_eq!(mine[0], format!("{id}|COMPLETED"), "job {id}");
        }
        let starts = std::fs::read_to_string(&self.starts).unwrap_or_default();
        for id in &ids {
            let n = starts.lines().filter(|l| l.trim() == id).count();
            assert_eq!(n, 1, "job {id}'s script started {n} times:\n{starts}");
        }
        let deadline = Instant::now() + TIMEOUT;
        while gpu_clocks(&self.fake) != self.default_mhz {
            assert!(Instant::now() < deadline, "GPU clocks {:?} after every job ended, default {:?}", gpu_clocks(&self.fake), self.default_mhz);
            std::thread::sleep(Duration::from_millis(200));
        }
        let log = c.slurmctld_log();
        for bad in ["internal error (panic", "Failed to initialize", "fatal:"] {
            assert!(!log.contains(bad), "slurmctld log has {bad:?}:\n{}", tail(&log, 60));
        }
        let mains = c.main_pids("slurmctld");
        self.cluster.stop().unwrap_or_else(|e| panic!("stop: {e}"));
        println!("{test}: slurmctld pids {mains:?}; {:.1} s", t0.elapsed().as_secs_f64());
    }
}

fn gpu_clocks(fake: &fake_nvml::FakeNvml) -> Vec<u32> {
    fake.state().expect("fake state").gpus.iter().map(|g| g.target_graphics_clock_mhz()).collect()
}

/// The last `lines` lines of a slurmctld log without its per-cycle debug lines (one a second).
fn tail_without_cycles(text: &str, lines: usize) -> String {
    let kept: Vec<&str> = text.lines().filter(|l| !l.contains("sched/energy: debug: cycle ")).collect();
    kept[kept.len().saturating_sub(lines)..].join("\n")
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn reconfigure_with_jobs_running_and_a_changed_energy_toml() {
    let test = "reconfigure_with_jobs_running_and_a_changed_energy_toml";
    let t0 = Instant::now();
    let Some(rig) = Rig::start(test, false) else { return };
    let c = &rig.cluster;
    let jobs = rig.submit_jobs();
    rig.wait_running_at_low_clock(&jobs, GPUS as usize);
    let before = c.main_pids("slurmctld");
    let log_len = c.slurmctld_log().len();
    assert!(!c.slurmctld_log().contains("sched/energy: debug: cycle "), "debug is off: no cycle lines yet");

    let data = data_dir().expect("data");
    let gpu_type = gpu_control::gres_type::slurm_type_name(&rig.fake.config.gpus[0].name);
    c.write_conf_file("energy.toml", &energy_toml(&data, rig.port, &gpu_type, true)).expect("write energy.toml");
    c.reconfigure().unwrap_or_else(|e| panic!("scontrol reconfigure: {e}\nslurmctld:\n{}", tail(&c.slurmctld_log(), 40)));
    let after = c.main_pids("slurmctld");
    println!("  reconfigured: slurmctld pids {before:?} -> {after:?}");
    if c.runs_under_systemd_flag() {
        // 24.11: a new process took over and said so on the notify socket.
        assert!(after.len() > before.len(), "slurmctld was not re-executed: {after:?}");
        // READY=1 at start and again with the new MAINPID.
        let ready = c.ready_notifications("slurmctld");
        assert!(ready >= 2, "{ready} READY=1 notifications from slurmctld");
    }

    // The changed setting took effect: every cycle's line, and the GPU-use port listened on.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let log = c.slurmctld_log();
        let since = log.get(log_len..).unwrap_or_default();
        if since.contains("sched/energy: debug: cycle ") && (!c.runs_under_systemd_flag() || since.contains(&format!("receiving the nodes' GPU use reports on UDP port {}", rig.port))) {
            break;
        }
        assert!(Instant::now() < deadline, "energy.toml's debug = true not taken after reconfigure:\n{}", tail(&log, 40));
        std::thread::sleep(Duration::from_millis(200));
    }
    rig.check_and_stop(test, &jobs, t0);
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn log_rotation_sighup_to_slurmctld_and_slurmd() {
    let test = "log_rotation_sighup_to_slurmctld_and_slurmd";
    let t0 = Instant::now();
    let Some(mut rig) = Rig::start(test, false) else { return };
    let jobs = rig.submit_jobs();
    rig.wait_running_at_low_clock(&jobs, GPUS as usize);
    for daemon in ["slurmctld", "slurmd n1"] {
        let pid = rig.cluster.rotate_log(daemon).unwrap_or_else(|e| panic!("rotate {daemon}'s log: {e}"));
        println!("  {daemon}: SIGHUP to {pid}, now {:?}", rig.cluster.main_pids(daemon));
    }
    let base = rig.cluster.base_dir().join("log");
    for log in ["slurmctld.log", "slurmd-n1.log"] {
        let deadline = Instant::now() + TIMEOUT;
        while std::fs::metadata(base.join(log)).map(|m| m.len()).unwrap_or(0) == 0 {
            assert!(Instant::now() < deadline, "nothing written to the new {log} after SIGHUP");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    rig.check_and_stop(test, &jobs, t0);
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn slurmctld_restart_while_gpu_use_reports_arrive() {
    let test = "slurmctld_restart_while_gpu_use_reports_arrive";
    let t0 = Instant::now();
    // debug: each report received is logged.
    let Some(mut rig) = Rig::start(test, true) else { return };
    // The jobs run until the restarted slurmctld has heard from them (the file below), so that
    // a slow shutdown (slurmctld may wait CONTROL_TIMEOUT, 30 s, for RPCs in flight) cannot
    // leave it no running job to hear from; at most 200 s, within their 5-minute limit.
    let release = rig.cluster.job_dir().join("release");
    let jobs = rig.submit_jobs_running(&format!("i=0\nwhile [ ! -e {} ] && [ $i -lt 200 ]; do sleep 1; i=$((i+1)); done", release.display()));
    let pids = rig.wait_running_at_low_clock(&jobs, GPUS as usize);
    rig.set_load(&pids);
    let report = |job: u32| format!("learning: JobId={job} on n1: GPU use");
    let wait_report = |rig: &Rig, from: usize, what: &str| {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let log = rig.cluster.slurmctld_log();
            if jobs.iter().any(|j| log.get(from..).unwrap_or_default().contains(&report(*j))) {
                return;
            }
            assert!(Instant::now() < deadline, "no GPU use report {what}:\n{}", tail_without_cycles(&log, 60));
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait_report(&rig, 0, "before the restart");
    let before = rig.cluster.main_pids("slurmctld");
    let log_len = rig.cluster.slurmctld_log().len();
    let restart = Instant::now();
    rig.cluster.restart_slurmctld().unwrap_or_else(|e| panic!("restart slurmctld: {e}"));
    println!("  restarted in {:.1} s: slurmctld pids {before:?} -> {:?}", restart.elapsed().as_secs_f64(), rig.cluster.main_pids("slurmctld"));
    wait_report(&rig, log_len, "received by the restarted slurmctld");
    std::fs::write(&release, b"").expect("release the jobs");
    rig.set_load(&[]);
    rig.check_and_stop(test, &jobs, t0);
}
