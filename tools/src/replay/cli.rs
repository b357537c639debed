//! Command-line arguments of `slurm-energy replay` and `slurm-energy workload` (kept here so
//! that main.rs only names the subcommands).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use model::data::default_data_dir;

use super::setup::{IDLE_GPU_W, Selection};
use super::workload::{WorkloadArgs, gpus_from_env, parse_gpu_list, run_workload};
use super::{ReplayOptions, TOLERANCE, Tolerance, run_replay};

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Philly jobs to replay (after the selection below).
    #[arg(long, default_value_t = 200)]
    pub jobs: usize,
    /// Time compression: trace seconds per wall second (arrivals and durations).
    #[arg(long, default_value_t = 60.0)]
    pub speedup: f64,
    /// Live runs, comma-separated: sched/backfill, sched/energy (both give the live ratios).
    #[arg(long, value_delimiter = ',', default_value = "sched/backfill,sched/energy")]
    pub sched: Vec<String>,
    /// Skip this many jobs of the trace (in submit order) before selecting.
    #[arg(long, default_value_t = 20_000)]
    pub skip: usize,
    /// Keep jobs that ran at least this long in the trace (s).
    #[arg(long, default_value_t = 600.0)]
    pub min_duration_s: f64,
    /// Keep jobs that ran at most this long in the trace (s).
    #[arg(long, default_value_t = 7200.0)]
    pub max_duration_s: f64,
    /// Offered load: arrival gaps scaled so that the jobs ask for this fraction of the
    /// cluster's GPU time over their submission span.
    #[arg(long, default_value_t = 0.9)]
    pub load: f64,
    /// Seed of the job draws (job types, sweeps, time limits, hints), as `simulate --seed`.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulator only: skip the live runs.
    #[arg(long)]
    pub sim_only: bool,
    /// Trace (default: <data>/traces/philly.csv).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Measured data (default: $SLURM_ENERGY_DATA, else ../shared/data next to the project).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// The project's source tree (see `demo`).
    #[arg(long)]
    pub project_dir: Option<PathBuf>,
    /// Use already built plugins from this directory instead of building them.
    #[arg(long)]
    pub plugins: Option<PathBuf>,
    /// Write the report as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub fn replay(a: ReplayArgs) -> Result<(), String> {
    let data = a.data.unwrap_or_else(default_data_dir);
    let data = std::fs::canonicalize(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    let plugins = if a.sim_only {
        None
    } else {
        crate::demo::require_root()?;
        Some(match a.plugins {
            Some(dir) => crate::demo::PluginFiles::in_dir(&dir)?,
            None => {
                let project = a.project_dir.unwrap_or_else(crate::demo::default_project_dir);
                crate::demo::build_plugins(&project, None, true, None)?
            }
        })
    };
    let opts = ReplayOptions {
        trace: a.trace.unwrap_or_else(|| data.join("traces").join("philly.csv")),
        data_dir: data,
        selection: Selection { jobs: a.jobs, skip: a.skip, min_duration_s: a.min_duration_s, max_duration_s: a.max_duration_s, load: a.load, speedup: a.speedup },
        seed: a.seed,
        scheds: a.sched,
        sim_only: a.sim_only,
        plugins,
        exe: std::env::current_exe().map_err(|e| format!("own executable: {e}"))?,
        progress: std::io::stderr().is_terminal(),
        tolerance: TOLERANCE,
    };
    let report = run_replay(&opts)?;
    print!("{}", report.table());
    if let Some(path) = a.json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    match report.agreement() {
        Some((true, true)) | None => Ok(()),
        Some(_) => Err(format!("live and simulated ratios differ by more than the tolerance ({:?})", Tolerance { ..TOLERANCE })),
    }
}

#[derive(Args, Debug)]
pub struct WorkloadCliArgs {
    /// The fake NVML's configuration file.
    #[arg(long)]
    pub nvml_config: PathBuf,
    /// The fake NVML's state directory of this node.
    #[arg(long, conflicts_with = "state_root")]
    pub state_dir: Option<PathBuf>,
    /// Directory holding one state directory per node, named as $SLURMD_NODENAME.
    #[arg(long)]
    pub state_root: Option<PathBuf>,
    /// Measured data (default as for `simulate`).
    #[arg(long)]
    pub data: Option<PathBuf>,
    #[arg(long, default_value = "v100")]
    pub gpu_model: String,
    #[arg(long, default_value_t = IDLE_GPU_W)]
    pub idle_gpu_w: f64,
    /// Gavel job type, e.g. "ResNet-50 (batch size 64)".
    #[arg(long)]
    pub job_type: String,
    /// Index of the Zeus sweep that is this job's clock/power truth.
    #[arg(long)]
    pub sweep: usize,
    /// Work: the job's runtime alone at the default clock, in trace seconds.
    #[arg(long)]
    pub work_s: f64,
    /// Trace seconds per wall second.
    #[arg(long, default_value_t = 1.0)]
    pub speedup: f64,
    /// GPU indices (default: $SLURM_STEP_GPUS, else $SLURM_JOB_GPUS).
    #[arg(long)]
    pub gpus: Option<String>,
    /// Seconds between two readings of the GPUs' clocks.
    #[arg(long, default_value_t = 0.25)]
    pub tick_s: f64,
}

pub fn workload(a: WorkloadCliArgs) -> Result<(), String> {
    let state_dir = match (a.state_dir, a.state_root) {
        (Some(d), _) => d,
        (None, Some(root)) => {
            let node = std::env::var("SLURMD_NODENAME").map_err(|_| "--state-root needs $SLURMD_NODENAME (run under Slurm) or use --state-dir")?;
            root.join(node)
        }
        (None, None) => return Err("give --state-dir or --state-root".into()),
    };
    let gpus = match a.gpus {
        Some(list) => parse_gpu_list(&list)?,
        None => gpus_from_env(),
    };
    if !(a.tick_s > 0.0 && a.tick_s.is_finite()) {
        return Err(format!("--tick-s {}: must be a positive number", a.tick_s));
    }
    let args = WorkloadArgs {
        nvml_config: a.nvml_config,
        state_dir,
        data_dir: a.data.unwrap_or_else(default_data_dir),
        gpu_model: a.gpu_model,
        idle_gpu_w: a.idle_gpu_w,
        job_type: a.job_type,
        sweep: a.sweep,
        work_s: a.work_s,
        speedup: a.speedup,
        gpus,
        tick: Duration::from_secs_f64(a.tick_s),
    };
    let out = run_workload(&args)?;
    println!(
        "workload done: {:.1} s wall, mean rate {:.3}, mean clock {:.0} MHz, {} shared ticks",
        out.wall_s, out.mean_rate, out.mean_clock_mhz, out.shared_ticks
    );
    Ok(())
}
