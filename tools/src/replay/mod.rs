//! `slurm-energy replay`: the simulator checked against the live local cluster (issue 11).
//!
//! The same Philly jobs, compressed in time, run twice on a real Slurm cluster with fake GPUs
//! (stock `sched/backfill`, then `sched/energy`), each job running `slurm-energy workload`,
//! which follows the simulator's ground truth on the GPU clock it finds; and the simulator runs
//! the same jobs on the same cluster shape under the matching policies. Both give the ratios
//! energy/backfill of GPU energy and of mean JCT; they agree when each pair of ratios is within
//! the tolerance stated up front ([`Tolerance`], justified in docs/replay.md).
//!
//! Modules: [`setup`] (job selection, compression, cluster spec and planner shared by both
//! sides), [`workload`] (the program jobs run), [`live`] (the live runs and their
//! measurements).

pub mod cli;
pub mod live;
pub mod setup;
pub mod workload;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use model::predictor::Predictor;
use serde::Serialize;

use crate::demo::PluginFiles;
use crate::sim::Workload;
use crate::sim::metrics::RunResult;
use live::{LiveOptions, LiveResult, run_live};
use setup::{Selection, generic_trace, live_energy_toml, load_philly, replay_spec, select, sim_setups};

/// How far the live and the simulated ratio may differ (absolute, on ratios near 1).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Tolerance {
    pub energy_ratio: f64,
    pub jct_ratio: f64,
}

/// Stated before any run (docs/replay.md says why): GPU energy depends on the clocks chosen and
/// on how long GPUs sit idle, both of which the simulator models directly, so 0.05; mean JCT
/// also carries every live start-up latency (sched cycle, launch, prolog: 1-3 wall seconds, a
/// minute or more of trace time at 60x) and the queueing that amplifies it, so 0.10.
pub const TOLERANCE: Tolerance = Tolerance { energy_ratio: 0.05, jct_ratio: 0.10 };

pub struct ReplayOptions {
    pub trace: PathBuf,
    pub data_dir: PathBuf,
    pub selection: Selection,
    pub seed: u64,
    /// Which live runs: `sched/backfill`, `sched/energy` (both for the ratios).
    pub scheds: Vec<String>,
    /// Skip the live runs (simulator only).
    pub sim_only: bool,
    pub plugins: Option<PluginFiles>,
    pub exe: PathBuf,
    pub progress: bool,
    pub tolerance: Tolerance,
}

/// One side's figures for one policy.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    pub gpu_energy_kwh: f64,
    pub mean_jct_s: f64,
    pub makespan_s: f64,
    pub jobs_done: usize,
    /// Energy of the GPUs while they ran jobs (kWh): the simulator's busy-GPU energy; live,
    /// sacct's ConsumedEnergy summed over the jobs.
    pub busy_gpu_energy_kwh: Option<f64>,
    /// Jobs killed at their time limit.
    pub timeouts: usize,
    pub other_states: String,
    pub mean_clock_mhz: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub jobs: usize,
    pub speedup: f64,
    pub seed: u64,
    pub sim_backfill: Figures,
    pub sim_energy: Figures,
    pub live_backfill: Option<Figures>,
    pub live_energy: Option<Figures>,
    pub tolerance: Tolerance,
}

const J_PER_KWH: f64 = 3.6e6;

fn sim_figures(r: &RunResult) -> Figures {
    let m = &r.metrics;
    Figures {
        gpu_energy_kwh: m.gpu_energy_kwh + m.idle_energy_kwh,
        mean_jct_s: m.mean_jct_s,
        makespan_s: m.makespan_s,
        jobs_done: m.jobs as usize,
        busy_gpu_energy_kwh: Some(m.gpu_energy_kwh),
        timeouts: m.killed_at_time_limit as usize,
        other_states: String::new(),
        mean_clock_mhz: Some(m.mean_clock_mhz),
    }
}

fn live_figures(r: &LiveResult) -> Figures {
    let states = r.states();
    let timeouts = states.get("TIMEOUT").copied().unwrap_or(0);
    let others: Vec<String> = states.iter().filter(|(k, _)| *k != "COMPLETED" && *k != "TIMEOUT").map(|(k, v)| format!("{k} {v}")).collect();
    Figures {
        gpu_energy_kwh: r.gpu_energy_j / J_PER_KWH,
        mean_jct_s: r.mean_jct_s(),
        makespan_s: r.makespan_s,
        jobs_done: r.jobs.iter().filter(|j| j.jct_s.is_some()).count(),
        busy_gpu_energy_kwh: Some(r.sacct_energy_j() / J_PER_KWH),
        timeouts,
        other_states: others.join(", "),
        mean_clock_mhz: r.mean_clock_mhz(),
    }
}

impl ReplayReport {
    pub fn sim_ratios(&self) -> (f64, f64) {
        (self.sim_energy.gpu_energy_kwh / self.sim_backfill.gpu_energy_kwh, self.sim_energy.mean_jct_s / self.sim_backfill.mean_jct_s)
    }

    pub fn live_ratios(&self) -> Option<(f64, f64)> {
        let (b, e) = (self.live_backfill.as_ref()?, self.live_energy.as_ref()?);
        Some((e.gpu_energy_kwh / b.gpu_energy_kwh, e.mean_jct_s / b.mean_jct_s))
    }

    /// (energy ratio agrees, JCT ratio agrees), when both live runs were made.
    pub fn agreement(&self) -> Option<(bool, bool)> {
        let (le, lj) = self.live_ratios()?;
        let (se, sj) = self.sim_ratios();
        Some(((le - se).abs() <= self.tolerance.energy_ratio, (lj - sj).abs() <= self.tolerance.jct_ratio))
    }

    /// The side-by-side table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "replay: {} Philly jobs, time compressed {}x, seed {} (times in compressed seconds)", self.jobs, self.speedup, self.seed);
        let _ = writeln!(s, "{:<22} {:>12} {:>12} {:>10} {:>8} {:>9} {:>13} {:>10}", "", "GPU_kWh", "mean_JCT_s", "makespan", "done", "timeouts", "busy_GPU_kWh", "clock_MHz");
        let row = |s: &mut String, name: &str, f: Option<&Figures>| {
            match f {
                Some(f) => {
                    let _ = writeln!(
                        s,
                        "{name:<22} {:>12.4} {:>12.1} {:>10.1} {:>8} {:>9} {:>13} {:>10}{}",
                        f.gpu_energy_kwh,
                        f.mean_jct_s,
                        f.makespan_s,
                        f.jobs_done,
                        f.timeouts,
                        f.busy_gpu_energy_kwh.map_or("-".into(), |k| format!("{k:.4}")),
                        f.mean_clock_mhz.map_or("-".into(), |c| format!("{c:.0}")),
                        if f.other_states.is_empty() { String::new() } else { format!("  ({})", f.other_states) }
                    );
                }
                None => {
                    let _ = writeln!(s, "{name:<22} (not run)");
                }
            }
        };
        row(&mut s, "simulated backfill", Some(&self.sim_backfill));
        row(&mut s, "simulated energy", Some(&self.sim_energy));
        row(&mut s, "live sched/backfill", self.live_backfill.as_ref());
        row(&mut s, "live sched/energy", self.live_energy.as_ref());
        let (se, sj) = self.sim_ratios();
        let _ = writeln!(s, "ratios energy/backfill   GPU energy   mean JCT");
        let _ = writeln!(s, "  simulated              {se:>10.3} {sj:>10.3}");
        match (self.live_ratios(), self.agreement()) {
            (Some((le, lj)), Some((ok_e, ok_j))) => {
                let _ = writeln!(s, "  live                   {le:>10.3} {lj:>10.3}");
                let _ = writeln!(s, "  |live - simulated|     {:>10.3} {:>10.3}", (le - se).abs(), (lj - sj).abs());
                let _ = writeln!(s, "  tolerance              {:>10.3} {:>10.3}", self.tolerance.energy_ratio, self.tolerance.jct_ratio);
                let verdict = |ok: bool| if ok { "agree" } else { "DO NOT AGREE" };
                let _ = writeln!(s, "  verdict                {:>10} {:>10}", verdict(ok_e), verdict(ok_j));
            }
            _ => {
                let _ = writeln!(s, "  live                   (needs both live runs)");
            }
        }
        s
    }
}

/// Writes the compressed trace and loads it as the simulator's workload (jobs drawn with
/// `seed`), with the live plugin's predictor (fitted on all the measured data, as
/// sched/energy's is).
pub fn prepare(o: &ReplayOptions, trace_dir: &Path) -> Result<Workload, String> {
    let philly = load_philly(&o.trace)?;
    let jobs = select(&philly, &o.selection)?;
    let path = trace_dir.join("replay-trace.csv");
    std::fs::write(&path, generic_trace(&jobs)).map_err(|e| format!("{}: {e}", path.display()))?;
    let spec = replay_spec()?;
    let mut w = Workload::load(spec, &o.data_dir, &path, None, None, o.seed)?;
    if w.prepared.rejected > 0 {
        return Err(format!("{} selected jobs do not fit the cluster", w.prepared.rejected));
    }
    w.predictor = Predictor::from_data_dir(&o.data_dir, &w.spec.cluster.gpu_type).map_err(|e| e.to_string())?;
    Ok(w)
}

/// Runs the simulator and the live cluster on the same jobs.
pub fn run_replay(o: &ReplayOptions) -> Result<ReplayReport, String> {
    let dir = tempfile::Builder::new().prefix("slurm-energy-replay-").tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let w = prepare(o, dir.path())?;
    let (backfill, energy) = sim_setups(&w.spec)?;
    let sim_b = w.run_one(&backfill, |_| {});
    let sim_e = w.run_one(&energy, |_| {});
    let mut report = ReplayReport {
        jobs: w.prepared.jobs.len(),
        speedup: o.selection.speedup,
        seed: o.seed,
        sim_backfill: sim_figures(&sim_b),
        sim_energy: sim_figures(&sim_e),
        live_backfill: None,
        live_energy: None,
        tolerance: o.tolerance,
    };
    if o.sim_only {
        return Ok(report);
    }
    let plugins = o.plugins.as_ref().ok_or("the live runs need the plugins built")?;
    let energy_toml = live_energy_toml(&w.spec.planner)?;
    // Expected wall time: the simulated makespan of the slower policy, with room for Slurm.
    let expected_s = report.sim_backfill.makespan_s.max(report.sim_energy.makespan_s);
    for sched in &o.scheds {
        let user_hints = match sched.as_str() {
            "sched/backfill" => false,
            "sched/energy" => true,
            other => return Err(format!("unknown scheduler '{other}': allowed are sched/backfill, sched/energy")),
        };
        let lo = LiveOptions {
            plugins,
            sched_type: sched.clone(),
            energy_toml: energy_toml.clone(),
            data_dir: o.data_dir.clone(),
            exe: o.exe.clone(),
            jobs: &w.prepared.jobs,
            user_hints,
            timeout: Duration::from_secs_f64(expected_s * 2.0 + 300.0),
            progress: o.progress,
            gpu_model: w.spec.cluster.gpu_type.clone(),
            idle_gpu_w: w.spec.gpu.idle_power_w,
        };
        let r = run_live(&lo)?;
        let f = live_figures(&r);
        if user_hints {
            report.live_energy = Some(f);
        } else {
            report.live_backfill = Some(f);
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::data::default_data_dir;

    /// The simulated sched/energy plans only at its cycle's ticks, as the live plugin does with
    /// slurmctld's main scheduler off; the simulated stock Slurm starts jobs on events.
    #[test]
    fn simulated_sched_energy_starts_jobs_only_at_its_cycle() {
        let data = default_data_dir();
        let Ok(philly) = load_philly(&data.join("traces/philly.csv")) else {
            assert!(std::env::var("CI").is_err(), "measured data missing under CI");
            return;
        };
        let sel = Selection { jobs: 30, skip: 20_000, min_duration_s: 600.0, max_duration_s: 7200.0, load: 0.9, speedup: 60.0 };
        let jobs = select(&philly, &sel).expect("selection");
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("t.csv");
        std::fs::write(&path, generic_trace(&jobs)).expect("write trace");
        let w = Workload::load(replay_spec().expect("spec"), &data, &path, None, None, 1).expect("workload");
        let (backfill, energy) = sim_setups(&w.spec).expect("setups");
        assert_eq!(energy.cycle_interval_s, setup::LIVE_INTERVAL_S);
        assert_eq!(backfill.cycle_interval_s, 0.0);
        let on_tick = |t: f64| (t / setup::LIVE_INTERVAL_S - (t / setup::LIVE_INTERVAL_S).round()).abs() < 1e-6;
        let timed = w.run_one(&energy, |_| {});
        assert_eq!(timed.jobs.len(), 30);
        let off: Vec<f64> = timed.jobs.iter().map(|j| j.start_s).filter(|t| !on_tick(*t)).collect();
        assert!(off.is_empty(), "starts between ticks: {off:?}");
        // The same planner on events starts some job between ticks (arrivals are not on them),
        // and never later than on the timer on average.
        let evented = w.run_one(&crate::sim::policies::Setup { cycle_interval_s: 0.0, ..energy.clone() }, |_| {});
        assert!(evented.jobs.iter().any(|j| !on_tick(j.start_s)));
        let wait = |r: &RunResult| r.jobs.iter().map(|j| j.start_s - j.submit_s).sum::<f64>();
        assert!(wait(&evented) < wait(&timed), "{} vs {}", wait(&evented), wait(&timed));
    }
}
