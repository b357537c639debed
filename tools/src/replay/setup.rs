//! What the replay runs, shared by the live cluster and the simulator so that both see the
//! same jobs, cluster shape and policies:
//!
//! - **jobs**: Philly jobs in submit order, from `skip` on, keeping those whose duration lies
//!   in `[min_duration_s, max_duration_s]` and that fit on the cluster, the first `jobs` of
//!   them. Philly's run times span seconds to weeks; a replay of a few minutes can only hold a
//!   band of them (a job of a few wall seconds would be mostly Slurm's start-up).
//! - **arrivals**: the gaps between submissions scaled so that the jobs offer `load` times the
//!   cluster's GPU capacity over their submission span (Philly's arrival rate is that of a
//!   cluster of thousands of GPUs), then everything (gaps and durations) divided by `speedup`.
//!   The result is written as a generic trace (`submit_time_s,duration_s,num_gpus,user`), which
//!   the simulator loads like any trace, so the simulator's own job preparation (job types,
//!   sweeps, time limits, hints, seeded) draws the jobs both sides run.
//! - **cluster**: the live harness's shape (3 nodes x 4 V100 x 8 CPUs), the GPU figures of the
//!   fake NVML (idle 41 W, default application clock 1312 MHz), time limits rounded to minutes
//!   (Slurm's unit) instead of the hours a full-speed trace uses, no carbon signal, no deferral.
//! - **policies**: `backfill` is the simulator's `slurm` (stock backfill, default clock) and
//!   live `sched/backfill` with every job at `--energy-policy=performance`; `energy` is the
//!   planner with the users' hints, clocks and packing, and no GPU sharing (the harness has no
//!   `gres/shard`), no carbon, no CPU resizing and no power saving (the live cluster has none
//!   of these), the same `PlannerConfig` written into the live cluster's energy.toml.

use std::fmt::Write as _;
use std::path::Path;

use model::config::PlannerConfig;
use serde::Serialize;

use crate::sim::policies::{HintRule, Policy, Setup};
use crate::sim::spec::ClusterSpec;
use crate::trace::{Trace, TraceJob};

/// The live harness's cluster (see `demo::DemoCluster`).
pub const NODES: u32 = 3;
pub const GPUS_PER_NODE: u32 = 4;
pub const CPUS_PER_NODE: u32 = 8;
pub const JOB_CPUS_PER_GPU: u32 = 2;
/// The fake NVML's V100 (fake-nvml's config defaults).
pub const DEFAULT_CLOCK_MHZ: u32 = 1312;
pub const IDLE_GPU_W: f64 = 41.0;

/// Which jobs, and how time is compressed.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    pub jobs: usize,
    pub skip: usize,
    pub min_duration_s: f64,
    pub max_duration_s: f64,
    pub load: f64,
    pub speedup: f64,
}

impl Default for Selection {
    fn default() -> Self {
        Selection { jobs: 200, skip: 20_000, min_duration_s: 600.0, max_duration_s: 7200.0, load: 0.9, speedup: 60.0 }
    }
}

/// One job as both sides run it, in compressed time.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayJob {
    /// Line in the Philly trace.
    pub philly_line: usize,
    pub submit_s: f64,
    pub duration_s: f64,
    pub num_gpus: u32,
    pub user: String,
}

/// The selected jobs, compressed; errors say what is wrong with the selection.
pub fn select(trace: &Trace, sel: &Selection) -> Result<Vec<ReplayJob>, String> {
    let positive = |x: f64| x > 0.0 && x.is_finite();
    let band_ok = sel.min_duration_s.is_finite() && sel.max_duration_s.is_finite() && sel.min_duration_s <= sel.max_duration_s;
    if sel.jobs == 0 || !positive(sel.speedup) || !positive(sel.load) || !band_ok {
        return Err("need --jobs >= 1, --speedup > 0, --load > 0 and min duration <= max duration".into());
    }
    let cluster_gpus = NODES * GPUS_PER_NODE;
    let picked: Vec<&TraceJob> = trace
        .jobs
        .iter()
        .skip(sel.skip)
        .filter(|j| j.duration_s >= sel.min_duration_s && j.duration_s <= sel.max_duration_s && j.num_gpus <= cluster_gpus)
        .take(sel.jobs)
        .collect();
    if picked.len() < sel.jobs {
        return Err(format!("only {} jobs of the trace match the selection (wanted {})", picked.len(), sel.jobs));
    }
    let first = picked[0].submit_time_s;
    let span = picked.last().map_or(0.0, |j| j.submit_time_s) - first;
    let gpu_s: f64 = picked.iter().map(|j| j.duration_s * f64::from(j.num_gpus)).sum();
    // Gaps scaled so that the jobs offer `load` x the cluster over their submission span.
    let gap_scale = if span > 0.0 { gpu_s / (span * f64::from(cluster_gpus) * sel.load) } else { 1.0 };
    Ok(picked
        .iter()
        .map(|j| ReplayJob {
            philly_line: j.line,
            submit_s: (j.submit_time_s - first) * gap_scale / sel.speedup,
            duration_s: j.duration_s / sel.speedup,
            num_gpus: j.num_gpus,
            user: j.user.clone().unwrap_or_default(),
        })
        .collect())
}

/// The compressed jobs as a generic trace file.
pub fn generic_trace(jobs: &[ReplayJob]) -> String {
    let mut s = String::from("submit_time_s,duration_s,num_gpus,user\n");
    for j in jobs {
        let user: String = j.user.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
        let _ = writeln!(s, "{:.3},{:.3},{},{}", j.submit_s, j.duration_s, j.num_gpus, if user.is_empty() { "u" } else { &user });
    }
    s
}

/// The simulator's cluster spec for the replay (see the module docs).
pub fn replay_spec() -> Result<ClusterSpec, String> {
    let mut spec = ClusterSpec::load(None).map_err(|e| e.to_string())?;
    let c = &mut spec.cluster;
    c.name = "replay-local".into();
    c.nodes = NODES;
    c.gpus_per_node = GPUS_PER_NODE;
    c.cpus_per_node = CPUS_PER_NODE;
    c.job_cpus_per_gpu = JOB_CPUS_PER_GPU;
    c.mem_gb_per_node = 64.0;
    c.job_mem_gb_per_gpu = 1.0;
    spec.gpu.default_clock_mhz = DEFAULT_CLOCK_MHZ;
    spec.gpu.idle_power_w = IDLE_GPU_W;
    // Slurm counts time limits in minutes.
    spec.time_limits.round_up_to_s = [1.0, 2.0, 3.0, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0].iter().map(|m| m * 60.0).collect();
    spec.hints.deferrable = 0.0;
    spec.carbon.file = String::new();
    spec.planner = energy_planner(&spec.planner);
    Ok(spec)
}

/// The `energy` policy's planner for the replay: the site's tuned planner without the ideas
/// the live harness cannot run (sharing without `gres/shard`, carbon without a signal, CPU
/// resizing) and without a cluster power cap (the tuned cap is for 512 GPUs).
pub fn energy_planner(base: &PlannerConfig) -> PlannerConfig {
    PlannerConfig {
        sharing: false,
        carbon_deferral: false,
        carbon_aware_clocks: false,
        cpu_by_sensitivity: false,
        power_cap_w: 0.0,
        report_reservations: false,
        max_cycle_ms: 0,
        ..base.clone()
    }
}

/// The two simulated setups, `backfill` and `energy`, both without power saving.
pub fn sim_setups(spec: &ClusterSpec) -> Result<(Setup, Setup), String> {
    let mut backfill = Setup::for_policy(Policy::Slurm, spec).ok_or("no slurm setup")?;
    backfill.power_saving = false;
    backfill.name = "backfill".into();
    let energy = Setup {
        name: "energy".into(),
        planner: spec.planner.clone(),
        power_saving: false,
        hints: HintRule::Users,
        cpu_flexible: false,
        user_slowdowns: None,
        // Fixed GPU counts: jobs ask Slurm for a count, which the live side keeps.
        elastic: None,
        // Live, sched/energy starts jobs only in its cycle; stock Slurm's main scheduler starts
        // them on each event, as the simulator's `backfill` does.
        cycle_interval_s: LIVE_INTERVAL_S,
        // Live, a pair worse than its bound is learnt from, not separated.
        early_separation: false,
    };
    Ok((backfill, energy))
}

#[derive(Serialize)]
struct PlannerTable<'a> {
    planner: &'a PlannerConfig,
}

/// sched/energy's cycle on the live cluster (`[sched] interval_s`), in (compressed) seconds.
pub const LIVE_INTERVAL_S: f64 = 2.0;

/// The live cluster's energy.toml: the plugin's cycle and the same planner as the simulator's
/// `energy` (the demo setup then adds the data dir and the fake GPUs' type).
pub fn live_energy_toml(planner: &PlannerConfig) -> Result<String, String> {
    // A cycle must never hold slurmctld for long (the plugin's own default bound).
    let live = PlannerConfig { max_cycle_ms: 2000, report_reservations: true, ..planner.clone() };
    let table = toml::to_string(&PlannerTable { planner: &live }).map_err(|e| format!("energy.toml: {e}"))?;
    Ok(format!("[sched]\ninterval_s = {LIVE_INTERVAL_S}\nsave_before_launch = true\n\n{table}"))
}

/// Reads the Philly trace the simulator uses.
pub fn load_philly(path: &Path) -> Result<Trace, String> {
    crate::trace::load_trace(path, None).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::parse_trace;

    fn trace() -> Trace {
        let text = "submit_time_s,duration_s,num_gpus,user\n0,100,1,a\n10,1000,2,b\n20,2000,16,c\n30,3000,4,a\n40,50000,1,b\n";
        parse_trace(text, Path::new("t.csv"), None).unwrap()
    }

    #[test]
    fn selection_keeps_the_band_that_fits_and_offers_the_load() {
        let sel = Selection { jobs: 2, skip: 0, min_duration_s: 500.0, max_duration_s: 10_000.0, load: 1.0, speedup: 10.0 };
        let jobs = select(&trace(), &sel).unwrap();
        // 16 GPUs do not fit on 12; 100 s and 50000 s are outside the band.
        assert_eq!(jobs.iter().map(|j| j.num_gpus).collect::<Vec<_>>(), vec![2, 4]);
        assert_eq!(jobs[0].submit_s, 0.0);
        assert!((jobs[1].duration_s - 300.0).abs() < 1e-9);
        // Offered load: GPU-seconds over span x GPUs, in compressed time.
        let gpu_s: f64 = jobs.iter().map(|j| j.duration_s * f64::from(j.num_gpus)).sum();
        let load = gpu_s / (jobs[1].submit_s * 12.0);
        assert!((load - 1.0).abs() < 1e-9, "{load}");
        let e = select(&trace(), &Selection { jobs: 5, ..sel }).unwrap_err();
        assert!(e.contains("only 2 jobs"), "{e}");
    }

    #[test]
    fn generic_trace_reads_back_and_the_live_config_parses_as_the_planner() {
        let jobs = select(&trace(), &Selection { jobs: 2, skip: 0, min_duration_s: 500.0, max_duration_s: 10_000.0, load: 1.0, speedup: 10.0 }).unwrap();
        let back = parse_trace(&generic_trace(&jobs), Path::new("g.csv"), None).unwrap();
        assert_eq!(back.jobs.len(), 2);
        assert_eq!(back.jobs[1].num_gpus, 4);
        let spec = replay_spec().unwrap();
        let text = live_energy_toml(&spec.planner).unwrap();
        #[derive(serde::Deserialize)]
        struct File {
            planner: PlannerConfig,
        }
        let parsed: File = toml::from_str(&text).unwrap();
        assert!(!parsed.planner.sharing && parsed.planner.clock_scaling);
        assert_eq!(parsed.planner.hints, spec.planner.hints);
    }
}
