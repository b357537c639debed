//! The soak (`slurm-energy soak`): thousands of jobs of mixed shapes and hints through the demo
//! cluster (sched/energy, spank_energy, gpu_nvml and acct_gather_energy/nvml over the fake NVML,
//! slurmdbd with MariaDB) while faults are injected, then checks that nothing was lost:
//!
//! - every job reached a final state, exactly once, and `sacct` holds it;
//! - no job started twice (each job script appends a line to a marker file of its own);
//! - every GPU is back at the clocks it had before the first job, and the clock ledgers hold no
//!   request and no job clock record;
//! - slurmctld's resident memory stays bounded (sampled all along).
//!
//! Faults, in turn, every `faults_every` submitted jobs: NVML calls failing on some GPUs for a
//! while (the fake's fail rules), slurmctld restarted cleanly, a job's slurmstepd killed with
//! SIGKILL, `scontrol reconfigure` with a broken and then a changed good energy.toml, a slurmd
//! restarted, slurmctld killed with SIGKILL while it is starting jobs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use slurm_testcluster::Stop;

use crate::demo::{DemoCluster, DemoSetup, FakeGpuSite, PluginFiles};
use crate::sim::rng::Rng;

/// What to run.
#[derive(Clone, Debug)]
pub struct SoakOptions {
    /// Jobs to run, array tasks counted one by one.
    pub jobs: u32,
    /// Give up (and fail) after this long.
    pub max_duration: Duration,
    pub seed: u64,
    /// Jobs submitted between two faults (0: no faults).
    pub faults_every: u32,
    /// The kinds of fault injected, in turn (empty: every kind, in [`FAULT_ORDER`]).
    pub fault_kinds: Vec<Fault>,
    /// Jobs pending or running at most; submission waits below it.
    pub max_queued: u32,
    /// The plugins to load (built by the caller).
    pub plugins: PluginFiles,
    /// The project's energy.toml (the soak shortens the cycle and adds the data dir).
    pub energy_toml: String,
    /// Measured data for sched/energy's predictor.
    pub data_dir: Option<PathBuf>,
    pub progress: bool,
    /// `SchedulerType` of the cluster: `sched/energy`, or `sched/backfill` to run the same soak
    /// on Slurm's own scheduler (a yardstick for what the faults do to stock Slurm).
    pub sched_type: String,
    /// Run slurmctld and slurmd as sites run them from systemd (daemonised; `--systemd` with a
    /// notify socket where the release has it), and add log rotation (SIGHUP) to the faults.
    pub site_mode: bool,
}

/// The kinds of fault, in the order they are injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    NvmlFailures,
    SlurmctldRestart,
    SlurmstepdKill,
    Reconfigure,
    SlurmdRestart,
    SlurmctldKill,
    /// Log rotation: slurmctld's and one slurmd's log renamed, then SIGHUP (site mode).
    Sighup,
}

pub const FAULT_ORDER: [Fault; 6] =
    [Fault::NvmlFailures, Fault::SlurmctldRestart, Fault::SlurmstepdKill, Fault::Reconfigure, Fault::SlurmdRestart, Fault::SlurmctldKill];

/// The faults in site mode: every kind, log rotation (SIGHUP) among them.
pub const SITE_FAULT_ORDER: [Fault; 7] =
    [Fault::NvmlFailures, Fault::SlurmctldRestart, Fault::Sighup, Fault::SlurmstepdKill, Fault::Reconfigure, Fault::SlurmdRestart, Fault::SlurmctldKill];

/// One fault as it happened.
#[derive(Clone, Debug, Serialize)]
pub struct FaultEvent {
    pub fault: Fault,
    /// Seconds since the soak started.
    pub at_s: f64,
    /// Jobs submitted when it happened.
    pub after_jobs: u32,
    pub what: String,
}

/// slurmctld's resident memory at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct RssSample {
    pub at_s: f64,
    pub jobs_done: u32,
    /// How many slurmctld processes came before this one (restarts so far).
    pub slurmctld_generation: u32,
    pub rss_kib: u64,
}

/// The nodes srun names in a job's output as ones it could not launch a step on
/// (`srun: error: Task launch for StepId=5173.0 failed on node n3: Connection reset by peer`).
pub fn launch_failed_on_nodes(output: &str) -> Vec<String> {
    output
        .lines()
        .filter_map(|l| l.split_once("Task launch for StepId=")?.1.split_once(" failed on node ")?.1.split(':').next().map(|n| n.trim().to_string()))
        .filter(|n| !n.is_empty())
        .collect()
}

/// Did an `srun` in the job fail to talk to slurmctld (its allocation could not be confirmed,
/// the message was lost on the socket)? Seen when slurmctld took SIGHUP while it received the
/// message: 22.05.8 logs `slurm_receive_msg ...: Socket timed out on send/recv operation` in the
/// same millisecond as `Reconfigure signal (SIGHUP) received`, and srun says `Unable to confirm
/// allocation for job N`.
pub fn srun_lost_slurmctld(output: &str) -> bool {
    output.lines().any(|l| l.starts_with("srun: error: Unable to confirm allocation for job") || (l.starts_with("srun: error: slurm_msg_sendto:") && l.contains("socket error")))
}

/// Did slurmd launch the job's batch script but fail to confirm the launch to slurmctld, and
/// cancel the job for it? A batch job sent just before a slurmctld SIGKILL: slurmd logs
/// `Could not confirm batch launch for job N` and then `Could not launch job N and not able to
/// requeue it, cancelling job` (the soak's jobs are `--no-requeue`), and the job ends CANCELLED
/// without its script having run.
pub fn batch_launch_unconfirmed(slurmd_log: &str, job_id: &str) -> bool {
    // 22.05 names the job `job 214`, later releases `JobId=214`; exact ids: `214` is not `2140`.
    let names = |l: &str, before: &str, after: &str| {
        [format!("{before}job {job_id}{after}"), format!("{before}JobId={job_id}{after}")].iter().any(|needle| l.contains(needle.as_str()))
    };
    slurmd_log.lines().any(|l| names(l, "Could not confirm batch launch for ", ","))
        && slurmd_log.lines().any(|l| names(l, "Could not launch ", " and not able to requeue it"))
}

/// What the soak found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SoakReport {
    pub seed: u64,
    /// When the soak started (Unix seconds): the job markers and Slurm's logs use wall time.
    pub started_unix_s: u64,
    /// The soak's files (job scripts, outputs, start markers), kept when a problem was found.
    pub kept_dir: Option<PathBuf>,
    pub jobs_submitted: u32,
    pub submissions: u32,
    pub elapsed_s: f64,
    /// Final state (as `sacct` has it) -> jobs.
    pub states: BTreeMap<String, u32>,
    /// Jobs by shape.
    pub shapes: BTreeMap<String, u32>,
    pub faults: Vec<FaultEvent>,
    /// Jobs whose slurmstepd the soak killed (they may end FAILED or CANCELLED).
    pub killed_jobs: Vec<String>,
    /// Whether a job may run twice after a slurmctld SIGKILL: stock Slurm launches a job before
    /// its start is in the state file, and a restarted slurmctld recovers such a job as pending
    /// and runs it again. Not for sched/energy with `save_before_launch` (the default).
    pub reruns_allowed: bool,
    /// Jobs started within Slurm's state-save window before a slurmctld SIGKILL that ran again
    /// (listed when `reruns_allowed`, else each is a problem).
    pub rerun_after_crash: Vec<String>,
    /// Jobs that did not complete because they started around a slurmctld SIGKILL (e.g. a
    /// launch the dying slurmctld never sent: the job is recovered as running, its node reports
    /// it missing, and Slurm ends it). Listed, not counted as problems.
    pub lost_to_crash: Vec<String>,
    /// Jobs one of whose steps `srun` launched onto a node while the soak restarted that node's
    /// slurmd (`Task launch for StepId=... failed on node n3`), which fails the step under any
    /// scheduler: the job script then exits with srun's error. Listed, not counted as problems.
    pub lost_to_slurmd_restart: Vec<String>,
    /// Jobs whose `srun` lost its message to slurmctld at the moment the soak sent slurmctld
    /// SIGHUP (log rotation), which Slurm's own RPC handling fails ([`srun_lost_slurmctld`]):
    /// the job script then exits with srun's error. Listed, not counted as problems.
    pub lost_to_slurmctld_sighup: Vec<String>,
    /// Jobs that slurmdbd still had running (or pending) after the soak although slurmctld no
    /// longer had them: their end record was in the queue of a slurmctld the soak SIGKILLed
    /// while they ran (stock Slurm keeps that queue in memory). Slurm's own repair after a
    /// crash, `sacctmgr show runawayjobs`, listed and fixed them; each must have started before
    /// a SIGKILL and be in a final state afterwards. Listed, not counted as problems.
    pub runaway_after_crash: Vec<String>,
    /// Array tasks that ran once, as the array's own job record (the last task), starting
    /// around a slurmctld SIGKILL, and that slurmdbd still names by the array's range
    /// (`219_[0-7]`): the message telling it the task id was lost with the dying slurmctld's
    /// queue. `(task, sacct's name)`. Listed, not counted as problems.
    pub unnamed_after_crash: Vec<(String, String)>,
    /// Submissions that sbatch answered but a slurmctld SIGKILL lost before they reached the
    /// state file: the restarted slurmctld handed their job ids out again (Slurm's own state
    /// saving; no scheduler can save them). Array tasks counted one by one.
    pub lost_submissions: Vec<String>,
    /// Nodes Slurm drained with `Duplicate jobid` after a SIGKILL, when `reruns_allowed` (a
    /// relaunch met the first copy still running there); a problem otherwise.
    pub drained_after_crash: Vec<String>,
    pub rss: Vec<RssSample>,
    /// Jobs that ran with a sched/energy decision record.
    pub with_decision: u32,
    /// Everything that broke a promise; empty when the soak passed.
    pub problems: Vec<String>,
}

impl SoakReport {
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }

    /// A few lines for the terminal.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "soak (seed {}): {} jobs in {} submissions, {:.0} s; {} with a sched/energy decision record",
            self.seed, self.jobs_submitted, self.submissions, self.elapsed_s, self.with_decision
        );
        let states: Vec<String> = self.states.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(s, "final states (sacct): {}", states.join(", "));
        let shapes: Vec<String> = self.shapes.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(s, "shapes: {}", shapes.join(", "));
        let mut per_fault: BTreeMap<Fault, u32> = BTreeMap::new();
        for f in &self.faults {
            *per_fault.entry(f.fault).or_default() += 1;
        }
        let faults: Vec<String> = per_fault.iter().map(|(k, v)| format!("{k:?} {v}")).collect();
        let _ = writeln!(s, "faults: {}", faults.join(", "));
        if let (Some(first), Some(max)) = (self.rss.iter().find(|r| r.jobs_done > 0), self.rss.iter().map(|r| r.rss_kib).max()) {
            let last = self.rss.last().map_or(0, |r| r.rss_kib);
            let _ = writeln!(
                s,
                "slurmctld RSS: {} MiB after the first jobs, {} MiB at most, {} MiB at the end ({} samples)",
                first.rss_kib / 1024,
                max / 1024,
                last / 1024,
                self.rss.len()
            );
        }
        if !self.rerun_after_crash.is_empty() {
            let _ = writeln!(
                s,
                "{} job(s) launched before slurmctld saved their start ran again after a SIGKILL: {}",
                self.rerun_after_crash.len(),
                self.rerun_after_crash.join(" ")
            );
        }
        if !self.lost_to_crash.is_empty() {
            let _ = writeln!(
                s,
                "{} job(s) started around a slurmctld SIGKILL ended early: {}",
                self.lost_to_crash.len(),
                self.lost_to_crash.join(" ")
            );
        }
        if !self.lost_to_slurmd_restart.is_empty() {
            let _ = writeln!(
                s,
                "{} job(s) whose srun step was launched onto a node while its slurmd restarted failed: {}",
                self.lost_to_slurmd_restart.len(),
                self.lost_to_slurmd_restart.join(" ")
            );
        }
        if !self.lost_to_slurmctld_sighup.is_empty() {
            let _ = writeln!(
                s,
                "{} job(s) whose srun lost its message to slurmctld when slurmctld took SIGHUP (log rotation) failed: {}",
                self.lost_to_slurmctld_sighup.len(),
                self.lost_to_slurmctld_sighup.join(" ")
            );
        }
        if !self.runaway_after_crash.is_empty() {
            let _ = writeln!(
                s,
                "{} job(s) left running in slurmdbd by a slurmctld SIGKILL (end record lost with its queue; fixed by `sacctmgr show runawayjobs`, as after any crash): {}",
                self.runaway_after_crash.len(),
                self.runaway_after_crash.join(" ")
            );
        }
        if !self.unnamed_after_crash.is_empty() {
            let names: Vec<String> = self.unnamed_after_crash.iter().map(|(task, name)| format!("{task} as {name}")).collect();
            let _ = writeln!(s, "job(s) around a slurmctld SIGKILL that sacct names otherwise (an array's range, or a lost array's task for a reissued id): {}", names.join(" "));
        }
        if !self.drained_after_crash.is_empty() {
            let _ = writeln!(s, "drained after a SIGKILL (a relaunch met the first copy), resumed: {}", self.drained_after_crash.join("; "));
        }
        if !self.lost_submissions.is_empty() {
            let _ = writeln!(
                s,
                "{} submitted job(s) lost by a slurmctld SIGKILL before slurmctld saved them (their ids were handed out again): {}",
                self.lost_submissions.len(),
                self.lost_submissions.join(" ")
            );
        }
        if let Some(dir) = &self.kept_dir {
            let _ = writeln!(s, "job scripts, outputs and start markers kept in {}", dir.display());
        }
        if self.problems.is_empty() {
            let reruns = if self.reruns_allowed { "none started twice outside a crash window" } else { "none started twice" };
            let _ = writeln!(s, "PASSED: every job final exactly once and in sacct, {reruns}, GPUs at their clocks, ledgers empty");
        } else {
            let _ = writeln!(s, "FAILED: {} problem(s):", self.problems.len());
            for p in self.problems.iter().take(40) {
                let _ = writeln!(s, "  {p}");
            }
        }
        s
    }
}

/// One submission: a job or an array of `tasks` jobs.
#[derive(Clone, Debug)]
struct Shape {
    name: &'static str,
    args: Vec<String>,
    body: &'static str,
    tasks: u32,
}

const HINTS: [&[&str]; 6] = [
    &[],
    &["--energy-policy=efficiency", "--energy-max-slowdown=1.5"],
    &["--energy-policy=performance"],
    &["--energy-policy=efficiency", "--energy-share=allow"],
    &["--energy-policy=balanced", "--energy-share=deny", "--energy-tag=soak"],
    &["--energy-max-slowdown=1.2", "--energy-tag=sweep"],
];

fn draw_shape(rng: &mut Rng, room: u32) -> Shape {
    let sleep = ["true", "sleep 1", "sleep 2"][rng.below(3)];
    let pick = rng.below(100);
    let (name, args, body, tasks): (&'static str, Vec<String>, &'static str, u32) = match pick {
        0..=29 => ("gpu1", vec!["--gres=gpu:1".into()], sleep, 1),
        30..=41 => ("gpu2", vec!["--gres=gpu:2".into()], sleep, 1),
        42..=47 => ("gpu4", vec!["--gres=gpu:4".into()], sleep, 1),
        48..=57 => ("mpi-2node", vec!["-N2".into(), "--ntasks-per-node=1".into(), "--gres=gpu:1".into()], "srun true", 1),
        58..=69 => ("cpu-only", vec!["-n2".into()], sleep, 1),
        70..=89 => ("gpu-freq-step", vec!["--gres=gpu:1".into()], "srun --gpu-freq=low true", 1),
        _ => {
            let tasks = (2 + rng.below(9) as u32).min(room.max(1));
            ("array", vec![format!("--array=0-{}", tasks - 1), "--gres=gpu:1".into()], "true", tasks)
        }
    };
    let mut args = args;
    args.extend(HINTS[rng.below(HINTS.len())].iter().map(|s| s.to_string()));
    Shape { name, args, body, tasks }
}

/// A job's script: a start marker line into `<marks>/<job>` (array tasks `<array job>_<task>`),
/// then the shape's body.
fn script_text(marks: &Path, body: &str) -> String {
    format!(
        "#!/bin/sh\nid=${{SLURM_ARRAY_JOB_ID:+${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}}}\nid=${{id:-$SLURM_JOB_ID}}\necho \"$SLURM_JOB_ID $(date +%s) $SLURMD_NODENAME\" >> {}/\"$id\"\n{body}\n",
        marks.display()
    )
}

/// Clocks of one GPU as `fake-nvml-ctl show` prints them (`app M/G MHz  locked L`).
fn gpu_clock_lines(site: &FakeGpuSite, node: &str) -> Result<Vec<String>, String> {
    let out = site.ctl(node).arg("show").output().map_err(|e| format!("fake-nvml-ctl show: {e}"))?;
    if !out.status.success() {
        return Err(format!("fake-nvml-ctl show on {node}: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("gpu "))
        .map(|l| {
            let gpu = l.split(':').next().unwrap_or_default();
            let app = l.split(" app ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or("?");
            let locked = l.split(" locked ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or("?");
            format!("{gpu}: app {app} MHz, locked {locked}")
        })
        .collect())
}

/// slurmctld writes its state at most every 5 s (`SAVE_MAX_WAIT` in its state_save.c), so a
/// SIGKILL loses up to that much: starts and ends in the last 5 s before a crash. A soak job
/// runs at most about 3 s, so one that started up to 10 s before the crash may have started or
/// ended in those 5 s.
const STATE_SAVE_WINDOW_S: f64 = 10.0;

/// Every soak job's time limit (`sbatch -t`), minutes.
const JOB_TIME_LIMIT_MIN: u32 = 3;

/// How long after a SIGKILL sbatch may hand out ids the dead slurmctld had already given
/// (the restart, then the first submissions of the restarted slurmctld).
const REISSUE_WINDOW_S: f64 = 60.0;

fn unix_now_s() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()
}

/// `(pid, job id)` of the slurmstepd processes (any step) of this cluster's running jobs (their
/// environment names the cluster's clock ledgers).
fn stepds(ledger_base: &Path) -> Vec<(u32, String)> {
    let marker = format!("{}={}", gpu_control::arbiter::LEDGER_DIR_ENV, ledger_base.display());
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            // slurmstepd names itself "slurmstepd: [<job>.<step>]" (step: batch, extern, 0, ...).
            let job = cmdline.strip_prefix("slurmstepd: [")?.split('.').next().filter(|j| !j.is_empty() && j.bytes().all(|b| b.is_ascii_digit()))?;
            let env = std::fs::read(e.path().join("environ")).ok()?;
            env.split(|b| *b == 0).any(|v| v.starts_with(marker.as_bytes())).then(|| (pid, job.to_string()))
        })
        .collect()
}

/// Counts of this cluster's jobs slurmctld still knows that have not ended.
fn queued(demo: &DemoCluster) -> Result<u32, String> {
    let out = demo.cluster.command("squeue").args(["-h", "-r", "-t", "PD,R,CF,CG,S", "-o", "%i"]).output().map_err(|e| format!("squeue: {e}"))?;
    if !out.status.success() {
        return Err(format!("squeue: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.trim().is_empty()).count() as u32)
}

struct Soak<'a> {
    opts: &'a SoakOptions,
    demo: DemoCluster,
    dir: tempfile::TempDir,
    rng: Rng,
    t0: Instant,
    report: SoakReport,
    /// Expected job ids (`123`, `124_7`).
    expected: BTreeSet<String>,
    /// Fail rules in force on a node until a time.
    nvml_rules_until: Option<(String, Instant)>,
    generation: u32,
    /// Unix times at which slurmctld was killed with SIGKILL.
    crashes_unix_s: Vec<f64>,
    /// Each slurmd restart: the node, and when it began and ended (Unix s).
    slurmd_restarts: Vec<(String, f64, f64)>,
    /// When slurmctld was sent SIGHUP (Unix s).
    sighups_unix_s: Vec<f64>,
    /// Job ids sbatch handed out a second time (the first submission was lost by a crash).
    reissued: BTreeSet<String>,
    /// When sbatch answered each submission (Unix s), by expected job id.
    submitted_unix_s: BTreeMap<String, f64>,
    energy_toml: String,
    reconfigures: u32,
}

impl Soak<'_> {
    fn at_s(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn site(&self) -> Result<&FakeGpuSite, String> {
        self.demo.gpus().ok_or_else(|| "the soak needs the GPU plugins (gpu_nvml.so, acct_gather_energy_nvml.so)".to_string())
    }

    fn submit(&mut self, shape: &Shape, script: &Path) -> Result<(), String> {
        let out_dir = self.dir.path().join("out");
        let output = if shape.tasks > 1 { out_dir.join("%A_%a.out") } else { out_dir.join("%j.out") };
        let out = self
            .demo
            .cluster
            .command("sbatch")
            .args(["--parsable", "-t", &JOB_TIME_LIMIT_MIN.to_string(), "--no-requeue", "-J", shape.name, "-o"])
            .arg(&output)
            .args(&shape.args)
            .arg(script)
            .output()
            .map_err(|e| format!("sbatch: {e}"))?;
        if !out.status.success() {
            // slurmctld may be down for a moment (a restart): not a lost job, nothing was queued.
            return Err(format!("sbatch {:?}: {}", shape.args, String::from_utf8_lossy(&out.stderr).trim()));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let id: u32 = text.trim().split(';').next().and_then(|s| s.trim().parse().ok()).ok_or_else(|| format!("sbatch printed {text:?}"))?;
        let taken = |e: &BTreeSet<String>| e.contains(&id.to_string()) || e.range(format!("{id}_")..format!("{id}`")).next().is_some();
        if taken(&self.expected) {
            // The id was handed out before: slurmctld lost that submission (a SIGKILL before
            // its state was saved) and its restarted self counts ids from the saved state.
            let old: Vec<String> = self.expected.iter().filter(|e| e.as_str() == id.to_string() || e.starts_with(&format!("{id}_"))).cloned().collect();
            if self.crashes_unix_s.is_empty() {
                self.report.problems.push(format!("job id {id} handed out twice by sbatch, with no slurmctld crash before"));
            }
            for e in old {
                self.expected.remove(&e);
                self.reissued.insert(e.clone());
                self.report.lost_submissions.push(e);
            }
        }
        let now_s = unix_now_s();
        let ids: Vec<String> = if shape.tasks > 1 { (0..shape.tasks).map(|t| format!("{id}_{t}")).collect() } else { vec![id.to_string()] };
        for e in ids {
            self.submitted_unix_s.insert(e.clone(), now_s);
            self.expected.insert(e);
        }
        self.report.jobs_submitted += shape.tasks;
        self.report.submissions += 1;
        *self.report.shapes.entry(shape.name.to_string()).or_default() += shape.tasks;
        Ok(())
    }

    fn event(&mut self, fault: Fault, what: String) {
        let e = FaultEvent { fault, at_s: self.at_s(), after_jobs: self.report.jobs_submitted, what };
        self.report.faults.push(e);
    }

    fn sample_rss(&mut self, jobs_done: u32) {
        if let Some(rss_kib) = self.demo.cluster.pid_of("slurmctld").and_then(rss_kib) {
            let sample = RssSample { at_s: self.at_s(), jobs_done, slurmctld_generation: self.generation, rss_kib };
            self.report.rss.push(sample);
        }
    }

    fn nodes(&self) -> Vec<String> {
        self.demo.cluster.node_names()
    }

    fn inject(&mut self, fault: Fault) -> Result<(), String> {
        match fault {
            Fault::NvmlFailures => {
                let nodes = self.nodes();
                let node = nodes[self.rng.below(nodes.len())].clone();
                let gpu = self.rng.below(crate::demo::DEMO_GPUS_PER_NODE as usize);
                let rules = [
                    format!("nvmlDeviceSetApplicationsClocks@{gpu}:UNKNOWN"),
                    format!("nvmlDeviceResetApplicationsClocks@{gpu}:GPU_IS_LOST"),
                    format!("nvmlDeviceGetTotalEnergyConsumption@{gpu}:UNKNOWN"),
                    format!("*@{gpu}:UNKNOWN"),
                    "nvmlDeviceGetPowerUsage:NOT_SUPPORTED".to_string(),
                ];
                let rule = rules[self.rng.below(rules.len())].clone();
                let window = Duration::from_secs(5 + self.rng.below(16) as u64);
                let out = self.site()?.ctl(&node).args(["fail", &rule]).output().map_err(|e| format!("fake-nvml-ctl fail: {e}"))?;
                if !out.status.success() {
                    return Err(format!("fake-nvml-ctl fail {rule}: {}", String::from_utf8_lossy(&out.stderr).trim()));
                }
                self.nvml_rules_until = Some((node.clone(), Instant::now() + window));
                self.event(fault, format!("{node}: {rule} for {} s", window.as_secs()));
            }
            Fault::SlurmctldRestart | Fault::SlurmctldKill => {
                let stop = if fault == Fault::SlurmctldKill { Stop::Kill } else { Stop::Clean };
                if stop == Stop::Kill {
                    // While jobs are being started: right after the next scheduling cycle's
                    // line, plus a random part of a second.
                    self.wait_next_cycle_line(Duration::from_secs(10));
                    std::thread::sleep(Duration::from_millis(self.rng.below(800) as u64));
                }
                let old = self.demo.cluster.pid_of("slurmctld").unwrap_or(0);
                if stop == Stop::Kill {
                    self.crashes_unix_s.push(unix_now_s());
                }
                self.demo.cluster.restart_slurmctld_after(stop).map_err(|e| format!("restart slurmctld: {e}"))?;
                self.generation += 1;
                let new = self.demo.cluster.pid_of("slurmctld").unwrap_or(0);
                self.event(fault, format!("slurmctld pid {old} ({}) -> {new}", if stop == Stop::Kill { "SIGKILL" } else { "SIGTERM" }));
            }
            Fault::SlurmstepdKill => {
                let ledger_base = self.site()?.ledger_dir("x").parent().map(Path::to_path_buf).unwrap_or_default();
                let stepds = stepds(&ledger_base);
                if stepds.is_empty() {
                    self.event(fault, "no slurmstepd running at that moment; none killed".into());
                    return Ok(());
                }
                let (pid, job) = stepds[self.rng.below(stepds.len())].clone();
                let killed = Command::new("kill").args(["-KILL", &pid.to_string()]).status().is_ok_and(|st| st.success());
                self.report.killed_jobs.push(job.clone());
                self.event(fault, format!("SIGKILL to slurmstepd pid {pid} of job {job} (delivered: {killed})"));
            }
            Fault::Reconfigure => {
                self.reconfigures += 1;
                let log_before = self.demo.cluster.slurmctld_log().len();
                self.demo.cluster.write_conf_file("energy.toml", "[sched]\ninterval_s = \"often\"\n[planner]\nno_such_key = 1\n").map_err(|e| e.to_string())?;
                self.demo.cluster.reconfigure().map_err(|e| format!("scontrol reconfigure: {e}"))?;
                let rejected = self.wait_log_after(log_before, "keeping the previous configuration", Duration::from_secs(30));
                // A good file that differs: the lock budget alternates between 500 and 400 ms.
                let lock_budget = if self.reconfigures.is_multiple_of(2) { "max_lock_ms = 500" } else { "max_lock_ms = 400" };
                let good = self.energy_toml.replace("max_lock_ms = 500", lock_budget);
                let log_before = self.demo.cluster.slurmctld_log().len();
                self.demo.cluster.write_conf_file("energy.toml", &good).map_err(|e| e.to_string())?;
                self.demo.cluster.reconfigure().map_err(|e| format!("scontrol reconfigure: {e}"))?;
                let taken = self.wait_log_after(log_before, "sched/energy: reconfigured from", Duration::from_secs(30));
                if self.opts.sched_type != "sched/energy" {
                    self.event(fault, "scontrol reconfigure with a broken and a good energy.toml (not read by this scheduler)".into());
                    return Ok(());
                }
                if !rejected {
                    self.report.problems.push("a broken energy.toml was not reported as rejected by sched/energy".into());
                }
                if !taken {
                    self.report.problems.push("a good energy.toml was not taken by sched/energy after scontrol reconfigure".into());
                }
                self.event(fault, format!("bad energy.toml rejected: {rejected}; good one ({lock_budget}) taken: {taken}"));
            }
            Fault::Sighup => {
                let nodes = self.nodes();
                let node = nodes[self.rng.below(nodes.len())].clone();
                self.sighups_unix_s.push(unix_now_s());
                let ctld = self.demo.cluster.rotate_log("slurmctld").map_err(|e| format!("rotate slurmctld's log: {e}"))?;
                let slurmd = self.demo.cluster.rotate_log(&format!("slurmd {node}")).map_err(|e| format!("rotate slurmd {node}'s log: {e}"))?;
                self.event(fault, format!("logs rotated, SIGHUP to slurmctld (now pid {ctld}) and slurmd {node} (now pid {slurmd})"));
            }
            Fault::SlurmdRestart => {
                let nodes = self.nodes();
                let node = nodes[self.rng.below(nodes.len())].clone();
                let from = unix_now_s();
                self.demo.cluster.restart_slurmd(&node).map_err(|e| format!("restart slurmd {node}: {e}"))?;
                self.slurmd_restarts.push((node.clone(), from, unix_now_s()));
                self.event(fault, format!("slurmd {node} restarted (SIGTERM)"));
            }
        }
        Ok(())
    }

    /// Nodes Slurm drained during the soak (e.g. `Duplicate jobid` when a launch meets a copy
    /// of the job still running there) are a problem; they are resumed so that the soak goes on.
    fn resume_drained(&mut self) {
        let Ok(out) = self.demo.cluster.command("sinfo").args(["-h", "-N", "-t", "drain,drained,draining", "-o", "%N|%E"]).output() else { return };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let (node, reason) = line.split_once('|').unwrap_or((line, ""));
            let node = node.trim();
            if node.is_empty() {
                continue;
            }
            if self.report.reruns_allowed && !self.crashes_unix_s.is_empty() && reason.contains("Duplicate jobid") {
                self.report.drained_after_crash.push(format!("{node}: {}", reason.trim()));
            } else {
                self.report.problems.push(format!("{node} was drained by Slurm: {}", reason.trim()));
            }
            let _ = self.demo.cluster.command("scontrol").args(["update", &format!("nodename={node}"), "state=resume"]).output();
        }
    }

    fn wait_log_after(&self, offset: usize, text: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let log = self.demo.cluster.slurmctld_log();
            if log.get(offset..).is_some_and(|new| new.contains(text)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }

    fn wait_next_cycle_line(&self, timeout: Duration) {
        let before = self.demo.cluster.slurmctld_log().len();
        let _ = self.wait_log_after(before, "sched/energy: cycle ", timeout);
    }

    fn clear_nvml_rules(&mut self, force: bool) -> Result<(), String> {
        if let Some((node, until)) = self.nvml_rules_until.clone()
            && (force || Instant::now() >= until)
        {
            let out = self.site()?.ctl(&node).arg("clear-fail").output().map_err(|e| format!("fake-nvml-ctl clear-fail: {e}"))?;
            if !out.status.success() {
                return Err(format!("fake-nvml-ctl clear-fail: {}", String::from_utf8_lossy(&out.stderr).trim()));
            }
            self.nvml_rules_until = None;
        }
        Ok(())
    }
}

/// Runs the soak; an error means it could not run (the report's `problems` hold what it found).
/// `energy_toml` with `[sched] save_before_launch = false`.
pub fn with_launch_before_save(energy_toml: &str) -> String {
    let mut lines: Vec<String> = energy_toml.lines().filter(|l| !l.trim_start().starts_with("save_before_launch")).map(str::to_string).collect();
    match lines.iter().position(|l| l.trim() == "[sched]") {
        Some(i) => lines.insert(i + 1, "save_before_launch = false".into()),
        None => lines.insert(0, "[sched]\nsave_before_launch = false".into()),
    }
    lines.join("\n") + "\n"
}

/// Stock Slurm (and sched/energy with `save_before_launch = false`) launches a job before its
/// start is in slurmctld's state file; see [`SoakReport::reruns_allowed`].
fn reruns_allowed(opts: &SoakOptions) -> bool {
    let off = |l: &str| {
        let l: String = l.split('#').next().unwrap_or_default().chars().filter(|c| !c.is_whitespace()).collect();
        l == "save_before_launch=false"
    };
    opts.sched_type != "sched/energy" || opts.energy_toml.lines().any(off)
}

pub fn run_soak(opts: &SoakOptions) -> Result<SoakReport, String> {
    let dir = tempfile::Builder::new().prefix("slurm-energy-soak-").tempdir().map_err(|e| format!("soak dir: {e}"))?;
    for sub in ["marks", "out", "scripts"] {
        std::fs::create_dir_all(dir.path().join(sub)).map_err(|e| format!("create {sub}: {e}"))?;
    }
    let gpu_files = opts.plugins.gpu.as_ref().ok_or("the soak needs gpu_nvml.so and acct_gather_energy_nvml.so")?;
    let site = FakeGpuSite::create(gpu_files)?;
    let setup = DemoSetup {
        plugins: Some(opts.plugins.clone()),
        data_dir: opts.data_dir.clone(),
        cpus_per_node: Some(16),
        sched_type: Some(opts.sched_type.clone()),
        // sched/backfill as a site runs it, but every second like sched/energy here.
        scheduler_parameters: (opts.sched_type != "sched/energy").then(|| "bf_interval=1,bf_continue".to_string()),
        daemon_mode: if opts.site_mode { slurm_testcluster::DaemonMode::Systemd } else { slurm_testcluster::DaemonMode::Attached },
        extra_slurm_conf: vec![
            // Room for every job of a long soak; finished jobs leave slurmctld's memory after
            // two minutes (sacct keeps them).
            "MaxJobCount=100000".into(),
            "MaxArraySize=1001".into(),
            "MinJobAge=120".into(),
        ],
        ..DemoSetup::default()
    };
    // A 1 s cycle, and each cycle's line in the log (the SIGKILL aims right after one).
    let energy_toml = {
        let t = crate::demo::demo_energy_toml(&opts.energy_toml, opts.data_dir.as_deref(), Some(&site.type_name));
        let mut lines: Vec<String> = t.lines().map(|l| if l.trim_start().starts_with("interval_s") { "interval_s = 1".to_string() } else { l.to_string() }).collect();
        if let Some(i) = lines.iter().position(|l| l.trim_start().starts_with("debug")) {
            lines[i] = "debug = true".into();
        } else if let Some(i) = lines.iter().position(|l| l.trim() == "[sched]") {
            lines.insert(i + 1, "debug = true".into());
        }
        lines.join("\n") + "\n"
    };
    let demo = DemoCluster::start(&opts.energy_toml, &setup, Some(site))?;
    // DemoCluster::start wrote the demo's energy.toml; the soak's replaces it before any job.
    demo.cluster.write_conf_file("energy.toml", &energy_toml).map_err(|e| e.to_string())?;
    demo.cluster.reconfigure().map_err(|e| format!("scontrol reconfigure: {e}"))?;

    let mut soak = Soak {
        opts,
        demo,
        dir,
        rng: Rng::new(opts.seed),
        t0: Instant::now(),
        report: SoakReport {
            seed: opts.seed,
            started_unix_s: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            reruns_allowed: reruns_allowed(opts),
            ..SoakReport::default()
        },
        expected: BTreeSet::new(),
        nvml_rules_until: None,
        generation: 0,
        crashes_unix_s: Vec::new(),
        slurmd_restarts: Vec::new(),
        sighups_unix_s: Vec::new(),
        reissued: BTreeSet::new(),
        submitted_unix_s: BTreeMap::new(),
        energy_toml,
        reconfigures: 0,
    };
    let outcome = soak.drive();
    let Soak { demo, mut report, dir, .. } = soak;
    if outcome.is_err() || !report.problems.is_empty() {
        // Slurm's logs go with the soak's files: the cluster's own dir is removed when it stops.
        let logs = dir.path().join("slurm-logs");
        if std::fs::create_dir_all(&logs).is_ok()
            && let Ok(entries) = std::fs::read_dir(demo.cluster.base_dir().join("log"))
        {
            for e in entries.flatten() {
                let _ = std::fs::copy(e.path(), logs.join(e.file_name()));
            }
        }
        report.kept_dir = Some(dir.keep());
    }
    let stopped = demo.stop();
    outcome?;
    if let Err(e) = stopped {
        report.problems.push(format!("stopping the cluster: {e}"));
    }
    Ok(report)
}

impl Soak<'_> {
    fn drive(&mut self) -> Result<(), String> {
        let nodes = self.nodes();
        let mut clocks_before = BTreeMap::new();
        for node in &nodes {
            clocks_before.insert(node.clone(), gpu_clock_lines(self.site()?, node)?);
        }
        let mut scripts = BTreeMap::new();
        let bar = if self.opts.progress { ProgressBar::new(u64::from(self.opts.jobs)) } else { ProgressBar::hidden() };
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} jobs submitted  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        let deadline = self.t0 + self.opts.max_duration;
        let total = self.opts.jobs;
        let mut next_fault_at = self.opts.faults_every;
        let mut fault_index = 0;
        let mut last_sample = Instant::now() - Duration::from_secs(60);
        let mut last_count = Instant::now() - Duration::from_secs(60);
        let mut submit_errors = 0u32;
        let mut in_queue = 0u32;
        loop {
            if Instant::now() >= deadline {
                self.report.problems.push(format!(
                    "time is up ({:?}): {} of {total} jobs submitted, {in_queue} still queued or running",
                    self.opts.max_duration, self.report.jobs_submitted
                ));
                break;
            }
            self.clear_nvml_rules(false)?;
            if last_count.elapsed() >= Duration::from_secs(2) {
                last_count = Instant::now();
                in_queue = queued(&self.demo).unwrap_or(in_queue);
            }
            let done = self.report.jobs_submitted.saturating_sub(in_queue);
            bar.set_position(u64::from(done));
            // Faults come by jobs done, up to the last fifth of the run, so that jobs are
            // running when they strike and the end state is reached with the faults behind;
            // the first round of every kind is completed past that point while jobs are still
            // queued or running (a fault can take seconds in which many short jobs end, so on a
            // fast machine the last fifth could come before the round's last kind).
            let kinds: Vec<Fault> = match (self.opts.fault_kinds.is_empty(), self.opts.site_mode) {
                (false, _) => self.opts.fault_kinds.clone(),
                (true, true) => SITE_FAULT_ORDER.to_vec(),
                (true, false) => FAULT_ORDER.to_vec(),
            };
            let last_fifth = done >= total - total / 5;
            let due = done >= next_fault_at && !last_fifth;
            let round_left = last_fifth && fault_index < kinds.len() && in_queue > 0;
            if self.opts.faults_every > 0 && (due || round_left) {
                let fault = kinds[fault_index % kinds.len()];
                fault_index += 1;
                next_fault_at = done + self.opts.faults_every;
                bar.set_message(format!("fault: {fault:?}"));
                self.resume_drained();
                self.inject(fault)?;
                last_count = Instant::now() - Duration::from_secs(60);
                continue;
            }
            if last_sample.elapsed() >= Duration::from_secs(10) {
                last_sample = Instant::now();
                self.sample_rss(done);
                self.resume_drained();
            }
            if self.report.jobs_submitted >= total {
                if in_queue == 0 && last_count.elapsed() < Duration::from_millis(100) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
            if in_queue >= self.opts.max_queued {
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
            let room = total - self.report.jobs_submitted;
            let shape = draw_shape(&mut self.rng, room);
            let script = match scripts.get(shape.body) {
                Some(p) => p,
                None => {
                    let path = self.dir.path().join("scripts").join(format!("{}.sh", scripts.len()));
                    std::fs::write(&path, script_text(&self.dir.path().join("marks"), shape.body)).map_err(|e| format!("write a job script: {e}"))?;
                    scripts.entry(shape.body).or_insert(path)
                }
            }
            .clone();
            match self.submit(&shape, &script) {
                Ok(()) => {
                    in_queue += shape.tasks;
                    bar.set_message(format!("{} submitted, ~{in_queue} queued", self.report.jobs_submitted));
                }
                Err(e) => {
                    submit_errors += 1;
                    if submit_errors > 200 {
                        return Err(format!("sbatch keeps failing: {e}"));
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        }
        bar.finish_and_clear();
        self.clear_nvml_rules(true)?;
        self.resume_drained();
        self.sample_rss(self.report.jobs_submitted);
        self.report.elapsed_s = self.at_s();
        self.check_accounting()?;
        self.check_starts();
        self.check_gpus(&clocks_before)?;
        self.check_memory();
        Ok(())
    }

    /// sacct: every expected job exactly once, in a final state; states counted.
    fn check_accounting(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(180);
        // Jobs not final in sacct when the wait ran out, before Slurm's runaway-job repair.
        let mut runaways: Option<Vec<String>> = None;
        loop {
            let out = self
                .demo
                .cluster
                .command("sacct")
                .args(["-a", "-X", "-D", "-n", "-P", "-S", "now-1days", "-E", "now", "-o", "JobID,State,Start,AdminComment"])
                // Start as Unix seconds.
                .env("SLURM_TIME_FORMAT", "%s")
                .stdout(Stdio::piped())
                .output()
                .map_err(|e| format!("sacct: {e}"))?;
            if !out.status.success() {
                return Err(format!("sacct: {}", String::from_utf8_lossy(&out.stderr).trim()));
            }
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
            let mut with_decision = 0;
            let mut starts: BTreeMap<String, f64> = BTreeMap::new();
            for line in text.lines() {
                let mut f = line.splitn(4, '|');
                let (id, state, start, comment) = (f.next().unwrap_or_default(), f.next().unwrap_or_default(), f.next().unwrap_or_default(), f.next().unwrap_or_default());
                if let Ok(t) = start.trim().parse::<f64>() {
                    starts.insert(id.to_string(), t);
                }
                if comment.starts_with("energy:") {
                    with_decision += 1;
                }
                rows.entry(id.to_string()).or_default().push(state.split_whitespace().next().unwrap_or_default().to_string());
            }
            let not_final: Vec<String> =
                self.expected.iter().filter(|id| rows.get(*id).is_none_or(|s| s.iter().any(|st| !is_final(st)))).cloned().collect();
            if !not_final.is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_secs(3));
                continue;
            }
            if !not_final.is_empty() && runaways.is_none() && !self.crashes_unix_s.is_empty() {
                // What an admin runs after a slurmctld crash: slurmdbd's jobs that slurmctld does
                // not have are listed and ended (`-i`: without asking).
                let fixed = self
                    .demo
                    .cluster
                    .command("sacctmgr")
                    .args(["-i", "show", "runawayjobs"])
                    .output()
                    .map_err(|e| format!("sacctmgr show runawayjobs: {e}"))?;
                let listing = String::from_utf8_lossy(&fixed.stdout);
                eprintln!("slurm-energy soak: {} job(s) not final in sacct after {} s: {}; sacctmgr show runawayjobs:\n{}", not_final.len(), 180, not_final.join(" "), listing.trim_end());
                runaways = Some(not_final);
                std::thread::sleep(Duration::from_secs(2));
                continue;
            }
            self.name_unnamed_array_records(&mut rows);
            self.name_array_rows_of_reissued_ids(&mut rows);
            let mut states = BTreeMap::new();
            for id in &self.expected {
                // A reissued id: the lost submission may have its own record (never final).
                let rows_of = rows.get(id).map(|s| if self.reissued.contains(id) && s.len() > 1 { s[s.len() - 1..].to_vec() } else { s.clone() });
                match rows_of {
                    None => self.report.problems.push(format!("job {id}: not in sacct")),
                    Some(s) if s.len() > 1 && (self.in_crash_window(id) || starts.get(id).is_some_and(|&t| self.near_crash(t))) => {
                        if self.report.reruns_allowed {
                            self.report.rerun_after_crash.push(id.clone());
                        } else {
                            self.report.problems.push(format!("job {id}: {} records in sacct ({}): run again after a slurmctld SIGKILL although its start was saved before its launch", s.len(), s.join(", ")));
                        }
                        *states.entry(s[s.len() - 1].clone()).or_insert(0) += 1;
                    }
                    Some(s) if s.len() > 1 => self.report.problems.push(format!("job {id}: {} records in sacct ({})", s.len(), s.join(", "))),
                    Some(s) if runaways.as_ref().is_some_and(|r| r.contains(id)) => {
                        // Ended by Slurm's repair: it must have been running when a SIGKILL struck.
                        let state = s[s.len() - 1].clone();
                        if !is_final(&state) {
                            self.report.problems.push(format!("job {id}: {state} in sacct even after `sacctmgr show runawayjobs`"));
                        } else if self.first_start_s(id).is_some_and(|t| self.crashes_unix_s.iter().any(|&c| c >= t && c <= t + f64::from(JOB_TIME_LIMIT_MIN) * 60.0 + 60.0))
                            // A job whose id the SIGKILLed slurmctld had handed out before and the
                            // new one handed out again (its row is the lost submission's, named
                            // as that one's array task, [`reissued_plain_job_of`]): the record
                            // left running is the lost submission's.
                            || self.report.unnamed_after_crash.iter().any(|(job, _)| job == id)
                        {
                            self.report.runaway_after_crash.push(id.clone());
                        } else {
                            self.report.problems.push(format!("job {id}: left running in slurmdbd, but no slurmctld SIGKILL struck while it could run"));
                        }
                        *states.entry(state).or_insert(0) += 1;
                    }
                    Some(s) => {
                        let state = s[0].clone();
                        if !is_final(&state) {
                            self.report.problems.push(format!("job {id}: {state} in sacct after the soak"));
                        } else if (state != "COMPLETED" && (self.in_crash_window(id) || starts.get(id).is_some_and(|&t| self.near_crash(t))))
                            || (state == "CANCELLED" && self.batch_launch_lost_with_slurmctld(id))
                        {
                            self.report.lost_to_crash.push(id.clone());
                        } else if state == "FAILED" && self.step_launch_hit_slurmd_restart(id) {
                            self.report.lost_to_slurmd_restart.push(id.clone());
                        } else if state == "FAILED" && self.srun_hit_slurmctld_sighup(id) {
                            self.report.lost_to_slurmctld_sighup.push(id.clone());
                        } else if state != "COMPLETED" && !self.report.killed_jobs.iter().any(|k| id == k || self.array_task_of(id, k)) {
                            self.report.problems.push(format!("job {id}: {state}, and no fault of the soak explains it"));
                        }
                        *states.entry(state).or_insert(0) += 1;
                    }
                }
            }
            for id in rows.keys().filter(|id| !self.expected.contains(*id) && !self.reissued.contains(*id)) {
                self.report.problems.push(format!("sacct has a job the soak did not submit: {id}"));
            }
            self.report.states = states;
            self.report.with_decision = with_decision;
            return Ok(());
        }
    }

    /// An array's own job record runs its last task; when it starts around a slurmctld SIGKILL,
    /// slurmdbd may keep it under the array's range (`219_[0-7]`) although it ran once: the
    /// update naming the task died with slurmctld's queue. Such a row stands for the one task of
    /// that array sacct lacks, when that task's marker shows it ran as the array's own job id,
    /// once, around a SIGKILL; the row is moved to the task's name and listed.
    fn name_unnamed_array_records(&mut self, rows: &mut BTreeMap<String, Vec<String>>) {
        let unnamed: Vec<String> = rows.keys().filter(|id| id.contains("_[") && !self.expected.contains(*id)).cloned().collect();
        let marks_dir = self.dir.path().join("marks");
        for name in unnamed {
            let marks = |task: &str| std::fs::read_to_string(marks_dir.join(task)).unwrap_or_default();
            let Some(task) = array_record_stands_for(&name, &self.expected, rows, marks) else { continue };
            if !self.in_crash_window(&task) {
                continue;
            }
            if let Some(states) = rows.remove(&name) {
                rows.insert(task.clone(), states);
                self.report.unnamed_after_crash.push((task, name));
            }
        }
    }

    /// A submission sbatch was never answered for (slurmctld SIGKILLed while handling it) may
    /// still reach slurmdbd; the restarted slurmctld hands its id out again. When the lost one
    /// was an array and the reissued one a plain job, slurmdbd can keep the plain job's record
    /// under the lost array's task name (`261_0` for job 261). Such a row stands for the plain
    /// job when that job was submitted soon after a SIGKILL, sacct has no row of its own, the
    /// soak never submitted the array, and the job's marker shows at most one start (as itself).
    fn name_array_rows_of_reissued_ids(&mut self, rows: &mut BTreeMap<String, Vec<String>>) {
        let foreign: Vec<String> =
            rows.keys().filter(|id| id.contains('_') && !id.contains("_[") && !self.expected.contains(*id) && !self.reissued.contains(*id)).cloned().collect();
        let marks_dir = self.dir.path().join("marks");
        for name in foreign {
            let marks = |job: &str| std::fs::read_to_string(marks_dir.join(job)).unwrap_or_default();
            let Some(job) = reissued_plain_job_of(&name, &self.expected, rows, &self.submitted_unix_s, &self.crashes_unix_s, marks) else { continue };
            if let Some(states) = rows.remove(&name) {
                rows.insert(job.clone(), states);
                self.report.unnamed_after_crash.push((job, name));
            }
        }
    }

    /// Array tasks appear in sacct as `<array>_<task>` while slurmstepd names a job by its own
    /// id: the task's marker line starts with that id.
    fn array_task_of(&self, id: &str, killed_job_id: &str) -> bool {
        let marks = self.dir.path().join("marks").join(id);
        std::fs::read_to_string(marks).is_ok_and(|t| t.lines().any(|l| l.split_whitespace().next() == Some(killed_job_id)))
    }

    /// Did one of the job's `srun` steps fail to launch on a node while the soak restarted that
    /// node's slurmd? From the job's output (srun's `Task launch for StepId=<id>.<step> failed on
    /// node <node>`), written (its mtime) within 60 s after a restart of that node began.
    fn step_launch_hit_slurmd_restart(&self, id: &str) -> bool {
        let path = self.dir.path().join("out").join(format!("{id}.out"));
        let Ok(text) = std::fs::read_to_string(&path) else { return false };
        let Some(written) = std::fs::metadata(&path).and_then(|m| m.modified()).ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()) else { return false };
        let written = written.as_secs_f64();
        launch_failed_on_nodes(&text)
            .iter()
            .any(|node| self.slurmd_restarts.iter().any(|(n, from, to)| n == node && written >= *from && written <= to.max(*from) + 60.0))
    }

    /// Did the job's srun lose its message to slurmctld ([`srun_lost_slurmctld`]) while the
    /// soak sent slurmctld SIGHUP (its output written within 10 s after one)?
    fn srun_hit_slurmctld_sighup(&self, id: &str) -> bool {
        let path = self.dir.path().join("out").join(format!("{id}.out"));
        let Ok(text) = std::fs::read_to_string(&path) else { return false };
        let Some(written) = std::fs::metadata(&path).and_then(|m| m.modified()).ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()) else { return false };
        let written = written.as_secs_f64();
        srun_lost_slurmctld(&text) && self.sighups_unix_s.iter().any(|&h| written >= h - 1.0 && written <= h + 10.0)
    }

    /// Was the job cancelled by a slurmd that could not confirm its batch launch
    /// ([`batch_launch_unconfirmed`]) to a slurmctld the soak SIGKILLed after the job's
    /// submission, with the script never started (no marker)?
    fn batch_launch_lost_with_slurmctld(&self, id: &str) -> bool {
        let submitted = self.submitted_unix_s.get(id).copied().unwrap_or(f64::INFINITY);
        self.first_start_s(id).is_none()
            && self.crashes_unix_s.iter().any(|&c| c >= submitted)
            && self.nodes().iter().any(|node| batch_launch_unconfirmed(&self.demo.cluster.slurmd_log(node), id))
    }

    /// When a job's script first started (Unix s), from its marker.
    fn first_start_s(&self, id: &str) -> Option<f64> {
        let text = std::fs::read_to_string(self.dir.path().join("marks").join(id)).ok()?;
        text.lines().next()?.split_whitespace().nth(1)?.parse().ok()
    }

    /// Did the job start within the state-save window before a slurmctld SIGKILL?
    fn in_crash_window(&self, id: &str) -> bool {
        self.first_start_s(id)
            .is_some_and(|t| self.crashes_unix_s.iter().any(|&c| t >= c - STATE_SAVE_WINDOW_S && t <= c + 1.0))
    }

    /// Did slurmctld (as sacct records it) start the job around a SIGKILL: in the state-save
    /// window before it, or in the 10 s after it, while the nodes' registrations revoke what the
    /// lost state still had running there (a job id the crash handed out again meets the revoked
    /// credential of its namesake)?
    fn near_crash(&self, start_s: f64) -> bool {
        self.crashes_unix_s.iter().any(|&c| start_s >= c - STATE_SAVE_WINDOW_S && start_s <= c + 10.0)
    }

    /// Each job's marker file has exactly one line.
    fn check_starts(&mut self) {
        let marks = self.dir.path().join("marks");
        let mut never = 0;
        for id in self.expected.clone() {
            match std::fs::read_to_string(marks.join(&id)) {
                Ok(t) if t.lines().count() > 1 && self.in_crash_window(&id) => {
                    if !self.report.reruns_allowed {
                        self.report.problems.push(format!("job {id} started {} times around a slurmctld SIGKILL although its start was saved before its launch: {}", t.lines().count(), t.replace('\n', "; ")));
                    } else if !self.report.rerun_after_crash.contains(&id) {
                        self.report.rerun_after_crash.push(id.clone());
                    }
                }
                Ok(t) if t.lines().count() > 1 => self.report.problems.push(format!("job {id} started {} times: {}", t.lines().count(), t.replace('\n', "; "))),
                Ok(_) => {}
                Err(_) => never += 1,
            }
        }
        if never > 0 {
            let cancelled_before_start = self.report.states.iter().filter(|(s, _)| s.as_str() != "COMPLETED").map(|(_, n)| n).sum::<u32>();
            if never > cancelled_before_start {
                self.report.problems.push(format!("{never} jobs never started their script, more than the {cancelled_before_start} that did not complete"));
            }
        }
    }

    fn check_gpus(&mut self, before: &BTreeMap<String, Vec<String>>) -> Result<(), String> {
        for (node, lines) in before {
            // The last step's epilog may still be restoring: a few seconds' grace.
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut now = gpu_clock_lines(self.site()?, node)?;
            while &now != lines && Instant::now() < deadline {
                std::thread::sleep(Duration::from_secs(1));
                now = gpu_clock_lines(self.site()?, node)?;
            }
            for (b, a) in lines.iter().zip(&now) {
                if b != a {
                    self.report.problems.push(format!("{node} {a}, before the soak {b}"));
                }
            }
            let ledger_dir = self.site()?.ledger_dir(node);
            match gpu_control::arbiter::Arbiter::open(&ledger_dir).and_then(|a| a.ledger()) {
                Ok(l) if l.requests.is_empty() => {}
                Ok(l) => self.report.problems.push(format!("{node}: the clock ledger still holds {} request(s): {}", l.requests.len(), l.to_text().replace('\n', "; "))),
                Err(e) => self.report.problems.push(format!("{node}: the clock ledger: {e}")),
            }
            // spank_energy's job clock records (`<ledger>/jobs/<job id>`), removed by the epilog.
            let left: Vec<String> = std::fs::read_dir(ledger_dir.join("jobs"))
                .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            if !left.is_empty() {
                self.report.problems.push(format!("{node}: job clock records left behind: {}", left.join(", ")));
            }
            if let Ok(entries) = std::fs::read_dir(&ledger_dir) {
                for e in entries.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if name.contains("corrupt") {
                        self.report.problems.push(format!("{node}: a quarantined ledger {name}"));
                    }
                }
            }
        }
        Ok(())
    }

    /// slurmctld's memory: within each slurmctld's life, the largest sample may not exceed twice
    /// the first one taken with jobs done, plus 64 MiB.
    fn check_memory(&mut self) {
        let mut by_generation: BTreeMap<u32, Vec<&RssSample>> = BTreeMap::new();
        for s in &self.report.rss {
            by_generation.entry(s.slurmctld_generation).or_default().push(s);
        }
        let Some(baseline) = self.report.rss.iter().find(|s| s.jobs_done > 0).map(|s| s.rss_kib) else { return };
        let bound = baseline * 2 + 64 * 1024;
        if let Some(s) = self.report.rss.iter().find(|s| s.rss_kib > bound) {
            self.report.problems.push(format!(
                "slurmctld RSS {} MiB at {:.0} s ({} jobs done) exceeds twice its first sample plus 64 MiB ({} MiB)",
                s.rss_kib / 1024,
                s.at_s,
                s.jobs_done,
                bound / 1024
            ));
        }
    }
}

fn is_final(state: &str) -> bool {
    matches!(state, "COMPLETED" | "FAILED" | "CANCELLED" | "TIMEOUT" | "NODE_FAIL" | "OUT_OF_MEMORY" | "BOOT_FAIL" | "DEADLINE" | "PREEMPTED")
}

/// The plain job an array task's row (`261_0`) that the soak never submitted stands for: job
/// 261, when the soak expects it, sacct has no row of its own, it was submitted within
/// `REISSUE_WINDOW_S` after a SIGKILL, and its marker (`marks(job)`) shows at most one start, as
/// itself.
fn reissued_plain_job_of(
    name: &str,
    expected: &BTreeSet<String>,
    rows: &BTreeMap<String, Vec<String>>,
    submitted_unix_s: &BTreeMap<String, f64>,
    crashes_unix_s: &[f64],
    marks: impl Fn(&str) -> String,
) -> Option<String> {
    let (job, task) = name.split_once('_')?;
    if task.starts_with('[') || !expected.contains(job) || rows.contains_key(job) {
        return None;
    }
    let after_crash = submitted_unix_s.get(job).is_some_and(|&t| crashes_unix_s.iter().any(|&c| t >= c && t <= c + REISSUE_WINDOW_S));
    let text = marks(job);
    let once_as_itself = text.lines().count() <= 1 && text.lines().all(|l| l.split_whitespace().next() == Some(job));
    (after_crash && once_as_itself).then(|| job.to_string())
}

/// The task an array's record named by its range (`219_[0-7]`) stands for: the one task of
/// array 219 that `rows` (sacct) lacks, if its marker (`marks(task)`) shows one start, as the
/// array's own job id (the array's record runs its last task).
fn array_record_stands_for(name: &str, expected: &BTreeSet<String>, rows: &BTreeMap<String, Vec<String>>, marks: impl Fn(&str) -> String) -> Option<String> {
    let (array, _) = name.split_once("_[")?;
    let prefix = format!("{array}_");
    let missing: Vec<&String> = expected.iter().filter(|id| id.starts_with(&prefix) && !rows.contains_key(*id)).collect();
    let [task] = missing.as_slice() else { return None };
    let text = marks(task);
    (text.lines().count() == 1 && text.split_whitespace().next() == Some(array)).then(|| (*task).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodes_srun_could_not_launch_on_are_read_from_the_output() {
        let out = "srun: error: slurm_receive_msgs: [(null)] failed: Connection reset by peer\n\
                   srun: error: Task launch for StepId=5173.0 failed on node n3: Connection reset by peer\n\
                   srun: error: Application launch failed: Connection reset by peer\n";
        assert_eq!(launch_failed_on_nodes(out), vec!["n3".to_string()]);
        assert!(launch_failed_on_nodes("job 12 n1 1700000000\n").is_empty());
        assert!(launch_failed_on_nodes("Task launch for StepId=1.0 failed on node : x").is_empty());
    }

    #[test]
    fn a_batch_launch_slurmd_could_not_confirm_is_read_from_its_log() {
        // What slurmd (22.05.8) logged for job 214 of a CI soak, launched as slurmctld took
        // SIGKILL (the times are made up).
        let log = "[2026-11-27T22:41:07.412] error: Could not confirm batch launch for job 214, aborting request\n\
                   [2026-11-27T22:41:07.413] Could not launch job 214 and not able to requeue it, cancelling job\n";
        assert!(batch_launch_unconfirmed(log, "214"));
        assert!(!batch_launch_unconfirmed(log, "21"));
        assert!(!batch_launch_unconfirmed(log, "2140"));
        let later = log.replace("job 214", "JobId=214");
        assert!(batch_launch_unconfirmed(&later, "214"));
        // Only the cancellation (a launch that failed for another reason) is not enough.
        let only_cancel = log.lines().nth(1).unwrap_or_default();
        assert!(!batch_launch_unconfirmed(only_cancel, "214"));
    }

    #[test]
    fn an_srun_that_lost_slurmctld_is_read_from_the_output() {
        // Job 48 of a CI soak (22.05.8): slurmctld took SIGHUP while it received srun's message.
        let out = "srun: error: slurm_msg_sendto: address:port=127.0.0.1:23244 msg_type=4027: Unexpected missing socket error\n\
                   srun: error: Unable to confirm allocation for job 48: Unexpected missing socket error\n\
                   srun: Check SLURM_JOB_ID environment variable. Expired or invalid job 48\n";
        assert!(srun_lost_slurmctld(out));
        assert!(!srun_lost_slurmctld("job 48 n2 1764271482\n"));
        assert!(!srun_lost_slurmctld("srun: error: Task launch for StepId=5.0 failed on node n3: Connection reset by peer\n"));
    }

    #[test]
    fn a_lost_arrays_task_row_stands_for_the_plain_job_that_got_its_id_after_a_crash() {
        let expected: BTreeSet<String> = ["260", "261"].map(String::from).into();
        let rows: BTreeMap<String, Vec<String>> = [("260", "COMPLETED"), ("261_0", "COMPLETED")].map(|(k, v)| (k.to_string(), vec![v.to_string()])).into();
        let submitted: BTreeMap<String, f64> = [("260".to_string(), 900.0), ("261".to_string(), 1010.0)].into();
        let ran_once = |job: &str| format!("{job} 1020 n1\n");
        assert_eq!(reissued_plain_job_of("261_0", &expected, &rows, &submitted, &[1000.0], ran_once), Some("261".into()));
        // No SIGKILL before its submission, or long before: a real problem, not renamed.
        assert_eq!(reissued_plain_job_of("261_0", &expected, &rows, &submitted, &[], ran_once), None);
        assert_eq!(reissued_plain_job_of("261_0", &expected, &rows, &submitted, &[900.0], ran_once), None);
        // The plain job ran twice, or its marker is another job's: not renamed.
        assert_eq!(reissued_plain_job_of("261_0", &expected, &rows, &submitted, &[1000.0], |_| "261 1020 n1\n261 1030 n2\n".into()), None);
        assert_eq!(reissued_plain_job_of("261_0", &expected, &rows, &submitted, &[1000.0], |_| "262 1020 n1\n".into()), None);
        // The plain job has its own row: the foreign row stays foreign.
        let mut both = rows.clone();
        both.insert("261".into(), vec!["COMPLETED".into()]);
        assert_eq!(reissued_plain_job_of("261_0", &expected, &both, &submitted, &[1000.0], ran_once), None);
        // Ranges are the other rule's.
        assert_eq!(reissued_plain_job_of("261_[0-3]", &expected, &rows, &submitted, &[1000.0], ran_once), None);
    }

    #[test]
    fn an_array_record_named_by_its_range_stands_for_its_one_missing_task() {
        let expected: BTreeSet<String> = ["219_0", "219_1", "219_7", "220"].map(String::from).into();
        let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for id in ["219_0", "219_1", "220", "219_[0-7]"] {
            rows.insert(id.to_string(), vec!["COMPLETED".to_string()]);
        }
        let ran_as_array = |t: &str| if t == "219_7" { "219 1795593502 n1\n".to_string() } else { String::new() };
        assert_eq!(array_record_stands_for("219_[0-7]", &expected, &rows, ran_as_array), Some("219_7".to_string()));
        // Started twice, or as another job id, or two tasks missing: no.
        assert_eq!(array_record_stands_for("219_[0-7]", &expected, &rows, |_| "219 1 n1\n219 2 n1\n".to_string()), None);
        assert_eq!(array_record_stands_for("219_[0-7]", &expected, &rows, |_| "289 1 n1\n".to_string()), None);
        rows.remove("219_1");
        assert_eq!(array_record_stands_for("219_[0-7]", &expected, &rows, ran_as_array), None);
    }

    #[test]
    fn launch_before_save_is_what_the_soak_then_allows() {
        let toml = "[sched]\ninterval_s = 5\nsave_before_launch = true\n[planner]\n";
        let off = with_launch_before_save(toml);
        assert_eq!(off.matches("save_before_launch").count(), 1, "{off}");
        assert!(off.contains("[sched]\nsave_before_launch = false\n"), "{off}");
        let cfg: toml::Value = toml::from_str(&off).expect("still TOML");
        assert_eq!(cfg["sched"]["save_before_launch"].as_bool(), Some(false));
        assert!(off.lines().any(|l| l.trim() == "interval_s = 5"));
    }

    #[test]
    fn shapes_fit_the_room_and_cover_every_kind() {
        let mut rng = Rng::new(3);
        let mut seen = BTreeSet::new();
        for _ in 0..2000 {
            let s = draw_shape(&mut rng, 5);
            assert!(s.tasks >= 1 && s.tasks <= 5, "{s:?}");
            seen.insert(s.name);
        }
        assert_eq!(seen.len(), 7, "{seen:?}");
    }

    #[test]
    fn the_script_names_its_marker_after_the_job_or_array_task() {
        let t = script_text(Path::new("/m"), "sleep 1");
        let out = Command::new("sh")
            .arg("-c")
            .arg(t.replace(">> /m/\"$id\"", "; echo \"$id\"").replace("sleep 1", ""))
            .env("SLURM_JOB_ID", "17")
            .env("SLURM_ARRAY_JOB_ID", "12")
            .env("SLURM_ARRAY_TASK_ID", "5")
            .output()
            .expect("sh");
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().last(), Some("12_5"));
        let out = Command::new("sh").arg("-c").arg(t.replace(">> /m/\"$id\"", "; echo \"$id\"").replace("sleep 1", "")).env("SLURM_JOB_ID", "17").env_remove("SLURM_ARRAY_JOB_ID").output().expect("sh");
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().last(), Some("17"));
    }
}
