//! The live side of the replay: the prepared jobs submitted to a local Slurm cluster (the
//! demo's: 3 nodes x 4 fake V100s, every plugin of the bundle, accounting) at their compressed
//! arrival times, each running `slurm-energy workload` on its GPUs, then measured:
//!
//! - **GPU energy**: the fake NVML's energy counters of all 12 GPUs (idle ones included, as in
//!   the simulator), from just before the first submission to the last job's end (the idle tail
//!   between the last end and the reading is taken off at the power the GPUs draw then);
//!   `sacct` ConsumedEnergy summed over the jobs is reported beside it;
//! - **JCT** per job: from the moment `sbatch` returned to the end marker the job script writes
//!   after its workload exits (sub-second, where `sacct` has whole seconds).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fake_nvml::model as nvml_model;
use fake_nvml::{Config, FakeNvml};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use model::types::EnergyPolicy;

use crate::demo::{DemoCluster, DemoSetup, FakeGpuSite, PluginFiles};
use crate::sim::jobs::SimJob;

/// What one live run needs.
pub struct LiveOptions<'a> {
    pub plugins: &'a PluginFiles,
    /// `sched/backfill` or `sched/energy`.
    pub sched_type: String,
    /// The energy.toml (see `setup::live_energy_toml`).
    pub energy_toml: String,
    pub data_dir: PathBuf,
    /// The `slurm-energy` binary the jobs run.
    pub exe: PathBuf,
    pub jobs: &'a [SimJob],
    /// Whether jobs carry their users' hints (`sched/energy`) or all run at
    /// `--energy-policy=performance` (the stock baseline).
    pub user_hints: bool,
    pub timeout: Duration,
    pub progress: bool,
    pub gpu_model: String,
    pub idle_gpu_w: f64,
}

/// One job as measured live.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveJob {
    pub index: usize,
    pub job_id: u32,
    pub state: String,
    pub jct_s: Option<f64>,
    pub sacct_energy_j: Option<f64>,
    pub decision: String,
    /// Mean GPU clock the workload ran at (its own report in the job's output).
    pub mean_clock_mhz: Option<f64>,
}

/// What a live run measured.
#[derive(Debug, Clone)]
pub struct LiveResult {
    pub sched_type: String,
    pub jobs: Vec<LiveJob>,
    pub gpu_energy_j: f64,
    pub makespan_s: f64,
    pub wall_s: f64,
}

impl LiveResult {
    pub fn mean_jct_s(&self) -> f64 {
        let v: Vec<f64> = self.jobs.iter().filter_map(|j| j.jct_s).collect();
        if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 }
    }

    /// Mean over the jobs of each job's mean GPU clock (MHz).
    pub fn mean_clock_mhz(&self) -> Option<f64> {
        let v: Vec<f64> = self.jobs.iter().filter_map(|j| j.mean_clock_mhz).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    pub fn sacct_energy_j(&self) -> f64 {
        self.jobs.iter().filter_map(|j| j.sacct_energy_j).sum()
    }

    pub fn states(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for j in &self.jobs {
            *m.entry(j.state.clone()).or_default() += 1;
        }
        m
    }
}

fn unix_now_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// `--energy-*` options of a job's hints.
pub fn hint_args(job: &SimJob) -> Vec<String> {
    let h = &job.user_hints;
    let policy = match h.policy {
        EnergyPolicy::Performance => "performance",
        EnergyPolicy::Balanced => "balanced",
        EnergyPolicy::Efficiency => "efficiency",
    };
    let mut args = vec![format!("--energy-policy={policy}")];
    if h.policy != EnergyPolicy::Performance {
        args.push(format!("--energy-max-slowdown={:.3}", h.max_slowdown));
    }
    args.push(format!("--energy-share={}", if h.share_allowed { "allow" } else { "deny" }));
    if let Some(tag) = &h.tag {
        let clean: String = tag.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect();
        if !clean.is_empty() {
            args.push(format!("--energy-tag={clean}"));
        }
    }
    args
}

/// The job's batch script: start marker, the workload (through `srun` on every node of a
/// multi-node job), end marker. A job killed at its time limit takes its load off its GPUs.
pub fn job_script(o: &LiveOptions, site: &FakeGpuSite, job: &SimJob, marks: &Path, ctl: &Path) -> Result<String, String> {
    let jt = &job.truth.job_type;
    if jt.contains('\'') {
        return Err(format!("job type {jt:?} has a quote"));
    }
    let state_root = site.state_dir("x").parent().map(Path::to_path_buf).ok_or("no fake GPU state root")?;
    let workload = format!(
        "{exe} workload --nvml-config {conf} --state-root {root} --data {data} --gpu-model {gpu} --idle-gpu-w {idle} --job-type '{jt}' --sweep {sweep} --work-s {work:.3}",
        exe = o.exe.display(),
        conf = site.config_path().display(),
        root = state_root.display(),
        data = o.data_dir.display(),
        gpu = o.gpu_model,
        idle = o.idle_gpu_w,
        sweep = job.truth.sweep,
        work = job.duration_s,
    );
    let run = if job.nodes > 1 { format!("srun --ntasks-per-node=1 {workload}") } else { workload };
    Ok(format!(
        "#!/bin/sh\n\
         ctl=\"{ctl} --config {conf} --state-dir {root}/$SLURMD_NODENAME\"\n\
         idle() {{ for g in $(echo \"$SLURM_JOB_GPUS\" | tr , ' '); do $ctl set-util \"$g\" 0; done; }}\n\
         trap 'idle; date +%s.%N > {marks}/$SLURM_JOB_ID.end; exit 143' TERM\n\
         date +%s.%N > {marks}/$SLURM_JOB_ID.start\n\
         {run} &\n\
         wait $!\n\
         rc=$?\n\
         date +%s.%N > {marks}/$SLURM_JOB_ID.end\n\
         exit $rc\n",
        ctl = ctl.display(),
        conf = site.config_path().display(),
        root = state_root.display(),
        marks = marks.display(),
    ))
}

/// Sum of the GPUs' energy counters (J) and present power (W) over the nodes.
fn read_energy(site: &FakeGpuSite, nodes: &[String]) -> Result<(f64, f64), String> {
    let config = Config::load(&site.config_path()).map_err(|e| e.to_string())?;
    let now = fake_nvml::state::now_unix_ns();
    let (mut mj, mut mw) = (0.0, 0.0);
    for n in nodes {
        let fake = FakeNvml::new(config.clone(), site.state_dir(n));
        // Through an update: a node whose GPUs nothing has touched yet has no state file, and
        // reading alone would start its counters afresh at every reading.
        let state = fake.update(|s| s.clone()).map_err(|e| e.to_string())?;
        for g in &state.gpus {
            mj += nvml_model::energy_mj_at(&config, g, now);
            mw += nvml_model::power_mw(&config, g);
        }
    }
    Ok((mj / 1000.0, mw / 1000.0))
}

/// The mean clock in the workload's last line (`... mean clock 1087 MHz ...`).
pub fn parse_mean_clock_mhz(output: &str) -> Option<f64> {
    let line = output.lines().rev().find(|l| l.starts_with("workload done:"))?;
    line.split("mean clock ").nth(1)?.split_whitespace().next()?.parse().ok()
}

fn read_mark(path: &Path) -> Option<f64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}


/// Runs the jobs on a fresh local cluster and measures them.
pub fn run_live(o: &LiveOptions) -> Result<LiveResult, String> {
    let gpu_files = o.plugins.gpu.as_ref().ok_or("the replay needs gpu_nvml.so, acct_gather_energy_nvml.so and the fake NVML built")?;
    let site = FakeGpuSite::create(gpu_files)?;
    let ctl = gpu_files.fake_nvml_ctl.clone();
    let setup = DemoSetup {
        plugins: Some(o.plugins.clone()),
        data_dir: Some(o.data_dir.clone()),
        cpus_per_node: Some(super::setup::CPUS_PER_NODE),
        sched_type: Some(o.sched_type.clone()),
        // Stock backfill every 2 s, as sched/energy's cycle (its default, 30 s, would add up to
        // half a minute, half an hour of trace time, to every wait).
        scheduler_parameters: (o.sched_type == "sched/backfill").then(|| "bf_interval=2".to_string()),
        ..DemoSetup::default()
    };
    let cluster = DemoCluster::start(&o.energy_toml, &setup, Some(site))?;
    let result = drive(o, &cluster, &ctl);
    let stopped = cluster.stop();
    let r = result?;
    stopped?;
    Ok(r)
}

fn drive(o: &LiveOptions, cluster: &DemoCluster, ctl: &Path) -> Result<LiveResult, String> {
    let site = cluster.gpus().ok_or("no fake GPUs")?;
    let nodes: Vec<String> = (1..=super::setup::NODES).map(|i| format!("n{i}")).collect();
    let marks = cluster.cluster.base_dir().join("replay-marks");
    std::fs::create_dir_all(&marks).map_err(|e| format!("{}: {e}", marks.display()))?;
    let bar = ProgressBar::with_draw_target(Some(o.jobs.len() as u64), if o.progress { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() });
    bar.set_style(ProgressStyle::with_template("{prefix:>16} [{bar:40}] {pos}/{len} jobs done {elapsed} {msg}").unwrap_or_else(|_| ProgressStyle::default_bar()));
    bar.set_prefix(o.sched_type.clone());
    let (e0_j, _) = read_energy(site, &nodes)?;
    let t0 = Instant::now();
    let t0_unix = unix_now_s();
    let mut ids: Vec<(usize, u32, f64)> = Vec::with_capacity(o.jobs.len());
    let mut next = 0;
    let deadline = t0 + o.timeout;
    loop {
        // Submit what is due.
        while let Some(job) = o.jobs.get(next) {
            let due = t0 + Duration::from_secs_f64(job.submit_s.max(0.0));
            if Instant::now() < due {
                break;
            }
            let script = job_script(o, site, job, &marks, ctl)?;
            let minutes = (job.time_limit_s / 60.0).ceil().max(1.0) as u64;
            let mut args = vec![
                "-J".into(),
                format!("r{}", next + 1),
                format!("-N{}", job.nodes),
                "--ntasks-per-node=1".into(),
                format!("--cpus-per-task={}", job.cpus_per_node),
                format!("--gres=gpu:{}", job.gpus_per_node),
                format!("-t{minutes}"),
                format!("--output={}/%j.out", marks.display()),
            ];
            if o.user_hints {
                args.extend(hint_args(job));
            } else {
                args.push("--energy-policy=performance".into());
            }
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let id = cluster.cluster.sbatch(&refs, &script).map_err(|e| format!("sbatch of job {} (trace line {}): {e}", next + 1, job.line))?;
            ids.push((next, id, unix_now_s()));
            next += 1;
        }
        let done = ids.iter().filter(|(_, id, _)| marks.join(format!("{id}.end")).exists()).count();
        bar.set_position(done as u64);
        if next == o.jobs.len() && queue_empty(cluster)? {
            break;
        }
        if Instant::now() > deadline {
            bar.abandon();
            return Err(format!("the live replay under {} did not finish within {:?} ({done} of {} jobs done)", o.sched_type, o.timeout, o.jobs.len()));
        }
        let wait = o.jobs.get(next).map_or(Duration::from_millis(500), |j| (t0 + Duration::from_secs_f64(j.submit_s.max(0.0))).saturating_duration_since(Instant::now()));
        std::thread::sleep(wait.min(Duration::from_millis(500)));
    }
    let (e1_j, p_now_w) = read_energy(site, &nodes)?;
    let read_unix = unix_now_s();
    bar.finish();
    let ends: Vec<Option<f64>> = ids.iter().map(|(_, id, _)| read_mark(&marks.join(format!("{id}.end")))).collect();
    let last_end = ends.iter().flatten().copied().fold(t0_unix, f64::max);
    let tail_j = p_now_w * (read_unix - last_end).max(0.0);
    let acct = sacct_rows(cluster, &ids.iter().map(|(_, id, _)| *id).collect::<Vec<_>>())?;
    let jobs = ids
        .iter()
        .zip(&ends)
        .map(|((i, id, submit), end)| {
            let row = acct.get(id).cloned().unwrap_or_default();
            let clock = std::fs::read_to_string(marks.join(format!("{id}.out"))).ok().and_then(|t| parse_mean_clock_mhz(&t));
            LiveJob {
                index: *i,
                job_id: *id,
                state: if row.0.is_empty() { "UNKNOWN".into() } else { row.0 },
                jct_s: end.map(|e| e - submit),
                sacct_energy_j: row.1,
                decision: row.2,
                mean_clock_mhz: clock,
            }
        })
        .collect();
    Ok(LiveResult { sched_type: o.sched_type.clone(), jobs, gpu_energy_j: e1_j - e0_j - tail_j, makespan_s: last_end - t0_unix, wall_s: t0.elapsed().as_secs_f64() })
}

fn queue_empty(cluster: &DemoCluster) -> Result<bool, String> {
    let out = cluster.cluster.command("squeue").args(["-h", "-o", "%i"]).output().map_err(|e| format!("squeue: {e}"))?;
    if !out.status.success() {
        // slurmctld busy: try again later.
        return Ok(false);
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().is_empty())
}

type AcctRow = (String, Option<f64>, String);

/// Final state, ConsumedEnergyRaw (J) and admin comment of each job, waiting (up to a minute)
/// until slurmdbd has every job's end.
fn sacct_rows(cluster: &DemoCluster, ids: &[u32]) -> Result<BTreeMap<u32, AcctRow>, String> {
    let list: Vec<String> = ids.iter().map(u32::to_string).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut cmd: Command = cluster.cluster.command("sacct");
        cmd.args(["-X", "-n", "-P", "-o", "JobID,State,ConsumedEnergyRaw,AdminComment", "-j", &list.join(",")]);
        let out = cmd.output().map_err(|e| format!("sacct: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut rows = BTreeMap::new();
        for line in text.lines() {
            let f: Vec<&str> = line.splitn(4, '|').collect();
            let (Some(id), Some(state)) = (f.first().and_then(|s| s.parse::<u32>().ok()), f.get(1)) else { continue };
            let energy = f.get(2).and_then(|e| e.trim().parse::<f64>().ok());
            rows.insert(id, (state.split_whitespace().next().unwrap_or("").to_string(), energy, f.get(3).unwrap_or(&"").to_string()));
        }
        let final_state = |s: &str| !matches!(s, "" | "PENDING" | "RUNNING" | "COMPLETING");
        if ids.iter().all(|id| rows.get(id).is_some_and(|r: &AcctRow| final_state(&r.0))) || Instant::now() > deadline {
            return Ok(rows);
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workloads_mean_clock_is_read_from_its_last_line() {
        let out = "GPUs 0\nworkload done: 31.4 s wall, mean rate 0.912, mean clock 1087 MHz, 0 shared ticks\n";
        assert_eq!(parse_mean_clock_mhz(out), Some(1087.0));
        assert_eq!(parse_mean_clock_mhz("slurmstepd: error: ... CANCELLED\n"), None);
    }
}
