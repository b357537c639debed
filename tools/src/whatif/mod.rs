//! `slurm-energy whatif <sbatch options>`: what sched/energy would do with a job before it is
//! submitted, under each energy policy (docs/whatif.md).
//!
//! The decisions are `model::whatif`'s (the planner sched/energy runs each cycle); this module
//! only gathers its input as the plugin does: the cluster from Slurm's commands
//! ([`cluster`]), the energy.toml beside slurm.conf read by the plugin's own parser
//! (`model::energy_toml`: GPU types, planner settings, measured data, carbon source, learning
//! state file, the power-cap file), the cap that file sets now, and the learnt history of the
//! plugin's state file.

pub mod cluster;
pub mod render;
pub mod sbatch;

use std::path::{Path, PathBuf};

use model::energy_toml::Config;
use model::power_cap::{CapSchedule, effective_cap_w};
use model::eligibility::{Eligibility, NodeSet};
use model::predictor::Predictor;
use model::types::{JobId, PendingJob, Request, UNLIMITED_TIME_S};
use model::whatif::{WhatIf, scenarios, what_if};
use serde::Serialize;

/// The learning state file's name in StateSaveLocation (as sched/energy names it).
pub const LEARNING_STATE_FILE: &str = "energy-learning.json";

/// What `whatif` is asked.
#[derive(Debug, Clone, Default)]
pub struct WhatifOptions {
    pub sbatch: Vec<String>,
    /// Default: energy.toml beside the slurm.conf `scontrol show config` names.
    pub energy_toml: Option<PathBuf>,
    /// Default: `[learning] state_file`, else StateSaveLocation's energy-learning.json.
    pub learning_state: Option<PathBuf>,
    /// The cluster's text, instead of running scontrol (tests).
    pub cluster_text: Option<cluster::ClusterText>,
    /// Planner clock (unix s); default now.
    pub now_s: Option<f64>,
}

/// The job as planned.
#[derive(Debug, Clone, Serialize)]
pub struct JobSummary {
    pub user: u32,
    pub partition: String,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub gpu_type: Option<String>,
    pub cpus_per_node: u32,
    pub mem_mb_per_node: u64,
    pub time_limit_s: f64,
    pub hints: model::whatif::HintOptions,
}

/// One scenario's estimate with its node names.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    #[serde(flatten)]
    pub estimate: model::whatif::Estimate,
    pub node_names: Vec<String>,
    /// Seconds from now to the expected start.
    pub wait_s: Option<f64>,
}

/// Everything `whatif` shows (the text and the JSON).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub now_s: f64,
    pub job: JobSummary,
    pub prediction: String,
    pub from_prior: bool,
    pub runtime_fraction: f64,
    pub power_ratio: f64,
    pub rows: Vec<Row>,
    /// The carbon source, when one is configured and readable.
    pub carbon_source: Option<String>,
    pub energy_toml: Option<String>,
    /// The cluster GPU power cap planned under (W; `None`: no cap), as sched/energy has it now.
    pub power_cap_w: Option<f64>,
    pub learning_state: Option<String>,
    pub cluster: ClusterSummary,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClusterSummary {
    pub nodes: usize,
    pub running_jobs: usize,
    pub pending_jobs: usize,
    pub reservations: usize,
}

fn unix_now_s() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs() as f64)
}

/// The uid whose history is used: `--uid` (a name or a number), else the caller's.
fn uid_of(spec: Option<&str>) -> Result<u32, String> {
    use std::os::unix::fs::MetadataExt;
    match spec {
        None => std::fs::metadata("/proc/self").map(|m| m.uid()).map_err(|e| format!("cannot tell who runs this: {e}")),
        Some(n) if n.bytes().all(|b| b.is_ascii_digit()) => n.parse().map_err(|_| format!("--uid={n}: not a uid")),
        Some(name) => {
            let out = std::process::Command::new("id").args(["-u", "--", name]).output().map_err(|e| format!("id: {e}"))?;
            String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|_| format!("--uid={name}: no such user"))
        }
    }
}

/// energy.toml as sched/energy reads it (the same parser, the same file:line errors).
fn load_energy_toml(path: &Path) -> Result<Config, String> {
    model::energy_toml::load(path).map_err(|e| e.to_string())
}

/// The cap sched/energy plans under at `now_s` (W, 0: none): the power-cap file's
/// (`[power_cap] file`) where it says something about now, else energy.toml's `power_cap_w`;
/// and a note when the file is not used. The file is refused as sched/energy refuses it (owned
/// by someone other than root or `slurm_uid`, or writable by group or others).
fn cap_now_w(cfg: &Config, slurm_uid: Option<u32>, now_s: f64) -> (f64, Option<String>) {
    let static_w = cfg.planner.power_cap_w;
    let Some(path) = &cfg.power_cap.file else { return (static_w, None) };
    let refused = |why: String| (static_w, Some(format!("power cap file {}: {why}; planned with energy.toml's power_cap_w ({}) (sched/energy keeps the last schedule it read, if any)", path.display(), cap_text(static_w))));
    let md = match std::fs::metadata(path) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (static_w, Some(format!("no power cap file {} yet: energy.toml's power_cap_w ({}) holds", path.display(), cap_text(static_w)))),
        Err(e) => return refused(format!("cannot read: {e}")),
    };
    {
        use std::os::unix::fs::MetadataExt;
        if md.uid() != 0 && Some(md.uid()) != slurm_uid {
            return refused(format!("owned by uid {}, not root or SlurmUser: sched/energy refuses it", md.uid()));
        }
        if md.mode() & 0o022 != 0 {
            return refused(format!("writable by group or others (mode {:o}): sched/energy refuses it", md.mode() & 0o7777));
        }
    }
    match CapSchedule::from_file(path) {
        Ok(schedule) => {
            let now = now_s as i64;
            let cap_w = effective_cap_w(Some(&schedule), static_w, now);
            let next = schedule.next_change_after(now).map_or(String::new(), |t| format!("; it changes at {}", render::clock(t as f64, now_s)));
            let from = match schedule.at(now) {
                model::power_cap::CapAt::Unspecified => format!("energy.toml's power_cap_w (power cap file {} says nothing about now)", path.display()),
                _ => format!("power cap file {}", path.display()),
            };
            (cap_w, Some(format!("power cap {} from {from}{next}", cap_text(cap_w))))
        }
        Err(e) => refused(e.to_string()),
    }
}

fn cap_text(cap_w: f64) -> String {
    if cap_w > 0.0 { format!("{cap_w:.0} W") } else { "none".into() }
}

/// SlurmUser's uid from `scontrol show config` (`slurm(64030)`).
fn slurm_uid(text: &cluster::ClusterText) -> Option<u32> {
    let v = text.config_value("SlurmUser")?;
    let inner = v.split_once('(')?.1.strip_suffix(')')?;
    inner.parse().ok()
}

/// The history and pair observations of sched/energy's learning state file, as its
/// `learning::Learning::load` reads them (`history`, `interference`).
fn load_learning(path: &Path, pred: &mut Predictor) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(h) = v.get("history") {
        pred.runtime = serde_json::from_value(h.clone()).map_err(|e| format!("{}: history: {e}", path.display()))?;
    }
    if let Some(i) = v.get("interference") {
        pred.interference.set_history(serde_json::from_value(i.clone()).map_err(|e| format!("{}: interference: {e}", path.display()))?);
    }
    Ok(format!("{} ({} groups)", path.display(), pred.runtime.groups().len()))
}

/// Set by `sbatch --energy-whatif` (spank_energy) in the what-if's environment: the arguments
/// are sbatch's command line.
pub const FROM_SBATCH_ENV: &str = "SLURM_ENERGY_WHATIF_FROM_SBATCH";

/// From `sbatch --energy-whatif`, a job without a script file or `--wrap` had its script on
/// standard input, which sbatch has read: its `#SBATCH` lines cannot be seen.
fn check_from_sbatch(job: &sbatch::JobOptions, from_sbatch: bool) -> Result<(), String> {
    if from_sbatch && job.script.is_none() && !job.wrapped {
        return Err("sbatch --energy-whatif: the script came on standard input, which sbatch has read, so its #SBATCH lines cannot be seen; give the script as a file (sbatch --energy-whatif [options] job.sh) or run slurm-energy whatif [options] job.sh".into());
    }
    Ok(())
}

pub fn run(opts: &WhatifOptions) -> Result<Report, String> {
    let job_opts = sbatch::parse(&opts.sbatch)?;
    check_from_sbatch(&job_opts, std::env::var_os(FROM_SBATCH_ENV).is_some())?;
    let mut notes = job_opts.notes.clone();
    let text = match &opts.cluster_text {
        Some(t) => t.clone(),
        None => cluster::ClusterText::read()?,
    };
    let slurm_conf = text.config_value("SLURM_CONF").map(PathBuf::from).or_else(|| std::env::var_os("SLURM_CONF").map(PathBuf::from)).unwrap_or_else(|| PathBuf::from("/etc/slurm/slurm.conf"));
    let toml_path = opts.energy_toml.clone().unwrap_or_else(|| model::energy_toml::path_next_to(&slurm_conf));
    let cfg = load_energy_toml(&toml_path)?;
    let energy_toml = toml_path.is_file().then(|| toml_path.display().to_string());
    if energy_toml.is_none() {
        notes.push(format!("no {}: sched/energy's defaults", toml_path.display()));
    }

    // The predictor as sched/energy loads it (lib.rs load_predictor): measured data only from
    // `[sched] data_dir`.
    let mut pred = match &cfg.sched.data_dir {
        Some(dir) => Predictor::from_data_dir(dir, &cfg.sched.interference_gpu).map_err(|e| format!("{}: sched.data_dir {}: {e}", toml_path.display(), dir.display()))?,
        None => {
            notes.push("no [sched] data_dir: GPUs are predicted at their default clock at 75 % of their maximum power, as sched/energy does".into());
            Predictor::default()
        }
    };
    let mut carbon_source = None;
    if let Some(src) = &cfg.carbon.source {
        let format = model::carbon_source::SourceFormat::parse(&cfg.carbon.format).ok_or_else(|| format!("{}: carbon.format {}: one of {}", toml_path.display(), cfg.carbon.format, model::carbon_source::SourceFormat::NAMES))?;
        match model::carbon_source::IntensitySeries::from_file_as(src, format) {
            Ok(series) => {
                pred.carbon = Some(model::carbon::CarbonSignal::published(series));
                carbon_source = Some(src.display().to_string());
            }
            Err(e) => notes.push(format!("carbon source {}: {e}; no carbon figures", src.display())),
        }
    }
    let mut learning_state = None;
    let mut history_unreadable = false;
    if cfg.learning.enabled {
        let path = opts.learning_state.clone().or_else(|| cfg.learning.state_file.clone()).or_else(|| text.config_value("StateSaveLocation").map(|d| Path::new(&d).join(LEARNING_STATE_FILE)));
        match path {
            Some(p) => match p.try_exists() {
                Ok(false) => notes.push(format!("no learning state at {} yet: predictions use the prior", p.display())),
                // Readable or not (mode 0600 in StateSaveLocation): reading says which.
                Ok(true) | Err(_) => match load_learning(&p, &mut pred) {
                    Ok(what) => learning_state = Some(what),
                    Err(e) => {
                        history_unreadable = true;
                        notes.push(format!("{e}: predictions use the prior (sched/energy itself uses the history)"));
                    }
                },
            },
            None => notes.push("no StateSaveLocation and no [learning] state_file: predictions use the prior".into()),
        }
    } else {
        notes.push("[learning] enabled = false: predictions use the prior, as sched/energy does".into());
    }

    let now_s = opts.now_s.unwrap_or_else(unix_now_s);
    let (power_cap_w, cap_note) = cap_now_w(&cfg, slurm_uid(&text), now_s);
    notes.extend(cap_note);
    let spec_of = |name: &str| cfg.gpu_types.get(name).cloned().unwrap_or_default().gpu_type(name);
    let defaults = cfg.planner.hints.clone();
    let mut built = cluster::build(&text, &spec_of, &defaults.default_hints(), now_s);
    notes.append(&mut built.notes);

    // The job.
    let user = uid_of(job_opts.uid.as_deref())?;
    let partition = match &job_opts.partition {
        Some(p) => built.partitions.iter().find(|q| &q.name == p).ok_or_else(|| format!("--partition={p}: no such partition"))?,
        None => built.partitions.iter().find(|q| q.default).or(built.partitions.first()).ok_or("the cluster has no partition")?,
    };
    if !partition.up {
        notes.push(format!("partition {} is not UP: Slurm starts nothing there until it is", partition.name));
    }
    let time_limit_s = match job_opts.time_limit_s {
        Some(Some(s)) => s as f64,
        Some(None) => UNLIMITED_TIME_S,
        None => partition.default_time_s.or(partition.max_time_s).unwrap_or(UNLIMITED_TIME_S),
    };
    if let Some(max) = partition.max_time_s.filter(|m| time_limit_s > *m) {
        return Err(format!("--time: {time_limit_s:.0} s is over partition {}'s MaxTime ({max:.0} s): Slurm would not start it", partition.name));
    }
    let ntasks = job_opts.ntasks.unwrap_or(1);
    let cpt = job_opts.cpus_per_task.unwrap_or(1);
    let mut nodes = job_opts.nodes.unwrap_or(1);
    if let Some(ntpn) = job_opts.ntasks_per_node {
        nodes = nodes.max(ntasks.div_ceil(ntpn));
    }
    let gpus_per_node = match (job_opts.gpus_per_node, job_opts.gpus_total) {
        (Some(g), _) => g,
        (None, Some(total)) if total % nodes == 0 => total / nodes,
        (None, Some(total)) => return Err(format!("--gpus={total} does not divide over {nodes} node(s): Slurm's own selection places such a job, the planner gives no estimate")),
        (None, None) => 0,
    };
    let cpus_per_node = match job_opts.ntasks_per_node {
        Some(ntpn) => ntpn * cpt,
        None => (ntasks * cpt).div_ceil(nodes),
    };
    // The partition's nodes, with the GPU type asked for.
    let mut set = NodeSet::new();
    for (i, name) in built.names.iter().enumerate() {
        let typed = job_opts.gpu_type.as_deref().is_none_or(|t| built.gres_types.get(i).is_some_and(|g| g == t));
        if typed && partition.nodes.contains(name) {
            set.insert(i);
        }
    }
    if set.is_empty() {
        return Err(format!("no node of partition {} has {}", partition.name, job_opts.gpu_type.as_deref().map_or("any node".to_string(), |t| format!("GPUs of type {t}"))));
    }
    let mem_mb_per_node = if !built.mem_consumable {
        0
    } else {
        match (job_opts.mem_mb_per_node, job_opts.mem_mb_per_cpu) {
            (Some(0), _) => {
                notes.push("--mem=0: all of a node's memory; planned with the largest node's".into());
                set.iter().map(|i| built.snapshot.nodes[i].mem_mb).max().unwrap_or(0)
            }
            (Some(mb), _) => mb,
            (None, Some(per_cpu)) => per_cpu * u64::from(cpus_per_node),
            (None, None) => {
                notes.push("no --mem: planned with no memory (the site's DefMemPerCPU/DefMemPerNode is not read)".into());
                0
            }
        }
    };
    let node_set = cluster::add_set(&mut built.snapshot, set);
    let hints = job_opts.hints.hints(&defaults);
    let job = PendingJob {
        id: JobId(0),
        user,
        priority: 0,
        submit_time_s: now_s,
        request: Request { nodes, gpus_per_node, cpus_per_node, mem_mb_per_node },
        time_limit_s,
        hints,
        cpus_range: None,
        eligible: vec![Eligibility { node_set, reservation: None, not_before_s: 0.0, route: 0 }],
        placed_by_slurm: false,
        alternative: false,
        no_reservation: false,
        slurm_may_spread: ntasks > 1 && job_opts.nodes.is_none() && job_opts.ntasks_per_node.is_none(),
    };
    let mut planner = cfg.planner.clone();
    planner.power_cap_w = power_cap_w;
    // The plugin bounds a cycle's wall time; the what-if plans to the end of the queue.
    planner.max_cycle_ms = 0;
    let w: WhatIf = what_if(&built.snapshot, &job, &scenarios(&job_opts.hints, &defaults), &planner, &pred);
    if w.from_prior {
        let tag = job_opts.hints.tag.as_deref().map_or(String::new(), |t| format!(" and tag {t}"));
        let what = if history_unreadable { "no history read" } else { "no history" };
        notes.insert(0, format!("{what} for user {user}{tag}: the prior is used (jobs run {:.0} % of their time limit, power as modelled)", w.runtime_fraction * 100.0));
    }
    let rows = w
        .estimates
        .iter()
        .map(|e| Row {
            estimate: e.clone(),
            node_names: e.nodes.iter().filter_map(|n| built.names.get(n.0 as usize).cloned()).collect(),
            wait_s: e.start_s.map(|s| (s - now_s).max(0.0)),
        })
        .collect();
    Ok(Report {
        now_s,
        job: JobSummary {
            user,
            partition: partition.name.clone(),
            nodes,
            gpus_per_node,
            gpu_type: job_opts.gpu_type.clone(),
            cpus_per_node,
            mem_mb_per_node,
            time_limit_s,
            hints: job_opts.hints.clone(),
        },
        prediction: w.prediction.clone(),
        from_prior: w.from_prior,
        runtime_fraction: w.runtime_fraction,
        power_ratio: w.power_ratio,
        rows,
        carbon_source,
        energy_toml,
        power_cap_w: (power_cap_w > 0.0).then_some(power_cap_w),
        learning_state,
        cluster: ClusterSummary {
            nodes: built.snapshot.nodes.len(),
            running_jobs: built.snapshot.running.len(),
            pending_jobs: built.snapshot.pending.len(),
            reservations: built.snapshot.reservations.len(),
        },
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::whatif::StartKind;

    const NODES: &str = "NodeName=n1 CPUTot=8 Gres=gpu:v100:4 RealMemory=16000 State=MIXED Weight=1\nNodeName=n2 CPUTot=8 Gres=gpu:v100:4 RealMemory=16000 State=IDLE Weight=1\n";
    const JOBS: &str = "JobId=11 UserId=alice(1001) Priority=100 JobState=RUNNING Reason=None TimeLimit=01:00:00 StartTime=2026-11-27T10:00:00 EndTime=2026-11-27T11:00:00 Partition=gpu NumNodes=1 NumCPUs=8 Nodes=n1 CPU_IDs=0-7 Mem=1000 GRES=gpu:v100:4(IDX:0-3)\n";
    const PARTS: &str = "PartitionName=gpu Default=YES DefaultTime=00:30:00 MaxTime=1-00:00:00 Nodes=n[1-2] State=UP\n";

    fn setup(dir: &Path, learning: Option<&str>) -> WhatifOptions {
        let data = model::data::default_data_dir();
        let toml = dir.join("energy.toml");
        std::fs::write(&toml, format!("[sched]\ndata_dir = {:?}\ninterval_s = 5\n[planner]\n", data.display().to_string())).unwrap();
        if let Some(l) = learning {
            std::fs::write(dir.join(LEARNING_STATE_FILE), l).unwrap();
        }
        let config = format!("SLURM_CONF               = {}\nSelectTypeParameters    = CR_CORE\nStateSaveLocation       = {}\n", dir.join("slurm.conf").display(), dir.display());
        WhatifOptions {
            sbatch: Vec::new(),
            energy_toml: None,
            learning_state: None,
            cluster_text: Some(cluster::ClusterText { config, nodes: NODES.into(), jobs: JOBS.into(), partitions: PARTS.into(), reservations: String::new() }),
            now_s: cluster::unix_s("2026-11-27T10:30:00"),
        }
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_policy_gets_a_row_now_or_at_the_running_jobs_end_and_energy_orders_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = setup(dir.path(), None);
        o.sbatch = args(&["--gres=gpu:2", "-t", "20", "--uid=1000", "--energy-defer=1h", "-J", "x"]);
        let r = run(&o).unwrap();
        let names: Vec<&str> = r.rows.iter().map(|x| x.estimate.scenario.as_str()).collect();
        assert_eq!(names, ["performance", "balanced", "efficiency", "balanced+defer", "efficiency+defer"]);
        assert!(r.from_prior);
        assert!(r.notes[0].starts_with("no history for user 1000"), "{:?}", r.notes);
        assert!(r.notes.iter().any(|n| n.contains("--job-name: ignored")), "{:?}", r.notes);
        for row in &r.rows {
            assert_eq!(row.estimate.kind, StartKind::Now, "{row:?}");
            assert_eq!(row.node_names, ["n2"], "n1 is full");
            assert_eq!(row.wait_s, Some(0.0));
        }
        assert_eq!(r.job.time_limit_s, 1200.0);
        let e: Vec<f64> = r.rows.iter().map(|x| x.estimate.energy_j.unwrap()).collect();
        assert!(e[0] >= e[1] && e[1] >= e[2] && e[0] > e[2], "{e:?}");
        let text = render::text(&r);
        assert!(text.contains("the prior (no history)") && text.contains("efficiency+defer") && text.contains("now"), "{text}");
        let v: serde_json::Value = serde_json::from_str(&render::json(&r).unwrap()).unwrap();
        assert_eq!(v["rows"].as_array().unwrap().len(), 5);
        assert_eq!(v["rows"][0]["scenario"], "performance");
        assert_eq!(v["rows"][0]["kind"], "now");
        assert!(v["rows"][2]["energy_j"].as_f64().unwrap() > 0.0);
        assert_eq!(v["from_prior"], true);

        // Three GPUs do not fit beside the running job until it ends at 11:00.
        o.sbatch = args(&["--gres=gpu:4", "-N", "2", "-t", "20", "--uid=1000"]);
        let r = run(&o).unwrap();
        assert_eq!(r.rows.len(), 3);
        for row in &r.rows {
            assert_eq!(row.estimate.kind, StartKind::Reserved, "{row:?}");
            assert_eq!(row.wait_s, Some(1800.0));
            assert!(row.estimate.energy_j.is_some());
        }
    }

    #[test]
    fn the_cap_the_sites_file_sets_now_is_planned_under_and_the_file_is_checked_as_the_plugin_does() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mut o = setup(dir.path(), None);
        let me = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap();
        if let Some(t) = o.cluster_text.as_mut() {
            t.config.push_str(&format!("SlurmUser               = me({me})\n"));
        }
        let cap = dir.path().join("power-cap");
        let toml = dir.path().join("energy.toml");
        let text = std::fs::read_to_string(&toml).unwrap();
        std::fs::write(&toml, format!("{text}\n[power_cap]\nfile = {:?}\n", cap.display().to_string())).unwrap();
        o.sbatch = args(&["--gres=gpu:2", "-t", "20", "--uid=1000"]);
        // No file yet: energy.toml's cap (none): it starts now.
        let r = run(&o).unwrap();
        assert_eq!((r.power_cap_w, r.rows[0].estimate.kind), (None, StartKind::Now));
        assert!(r.notes.iter().any(|n| n.contains("no power cap file")), "{:?}", r.notes);
        // The file caps the cluster at 800 W now (the running job's four GPUs and the idle ones draw 760 W):
        // no start until the running job ends.
        std::fs::write(&cap, "800\n").unwrap();
        std::fs::set_permissions(&cap, std::fs::Permissions::from_mode(0o644)).unwrap();
        let r = run(&o).unwrap();
        assert_eq!(r.power_cap_w, Some(800.0));
        for row in &r.rows {
            assert_ne!(row.estimate.kind, StartKind::Now, "{row:?}");
        }
        assert!(render::text(&r).contains("power cap: 800 W"));
        // A line not yet in force says nothing about now: energy.toml's cap holds.
        std::fs::write(&cap, "2026-11-27T12:00:00Z,1000\n").unwrap();
        let r = run(&o).unwrap();
        assert_eq!((r.power_cap_w, r.rows[0].estimate.kind), (None, StartKind::Now));
        assert!(r.notes.iter().any(|n| n.contains("says nothing about now") && n.contains("changes at")), "{:?}", r.notes);
        // A file others may write is refused, as sched/energy refuses it.
        std::fs::write(&cap, "800\n").unwrap();
        std::fs::set_permissions(&cap, std::fs::Permissions::from_mode(0o666)).unwrap();
        let r = run(&o).unwrap();
        assert_eq!(r.power_cap_w, None);
        assert!(r.notes.iter().any(|n| n.contains("writable by group or others")), "{:?}", r.notes);
        // energy.toml errors are the plugin's: file, line and key.
        std::fs::write(&toml, "[power_cap]\nfile = \"relative\"\n").unwrap();
        let e = run(&o).unwrap_err();
        assert!(e.ends_with("energy.toml:2: key 'power_cap.file': must be an absolute path"), "{e}");
    }

    #[test]
    fn from_sbatch_a_script_on_standard_input_is_refused() {
        let job = |a: &[&str]| sbatch::parse(&args(a)).unwrap();
        let e = check_from_sbatch(&job(&["--gres=gpu:1"]), true).unwrap_err();
        assert!(e.contains("standard input") && e.contains("slurm-energy whatif"), "{e}");
        assert!(check_from_sbatch(&job(&["--gres=gpu:1", "--wrap=hostname"]), true).is_ok());
        assert!(check_from_sbatch(&job(&["--gres=gpu:1"]), false).is_ok(), "slurm-energy whatif itself needs no script");
    }

    #[test]
    fn the_users_history_of_the_tag_is_used_and_errors_name_the_option() {
        let dir = tempfile::tempdir().unwrap();
        let state = r#"{"version":1,"history":{"groups":{"u1000":{"jobs":2,"runtime_fraction":{"sum":0.2,"n":2}},"u1000/bert":{"jobs":2,"runtime_fraction":{"sum":0.2,"n":2}}},"taught":4}}"#;
        let mut o = setup(dir.path(), Some(state));
        o.sbatch = args(&["--gres=gpu:1", "-t", "60", "--uid=1000", "--energy-tag=bert"]);
        let r = run(&o).unwrap();
        assert!(!r.from_prior);
        assert_eq!(r.prediction, "history:u1000/bert:n=2");
        assert!(r.learning_state.is_some());
        // (0.2 + 0.5 x 3) / 5 of the hour.
        let rt = r.rows[0].estimate.runtime_s.unwrap();
        assert!((rt - 3600.0 * 1.7 / 5.0).abs() < 1.0, "{rt}");
        // A state file that cannot be read: the prior, and a note naming the file.
        o.learning_state = Some(dir.path().join("missing-dir").join(LEARNING_STATE_FILE));
        let r = run(&o).unwrap();
        assert!(r.from_prior && r.notes[0].starts_with("no history for user 1000 and tag bert"), "{:?}", r.notes);
        assert!(r.notes.iter().any(|n| n.contains("no learning state at")), "{:?}", r.notes);
        o.learning_state = Some(dir.path().to_path_buf());
        let r = run(&o).unwrap();
        assert!(r.from_prior && r.notes[0].starts_with("no history read for user 1000"), "{:?}", r.notes);
        assert!(r.notes.iter().any(|n| n.contains("cannot read") && n.contains("predictions use the prior")), "{:?}", r.notes);
        o.learning_state = None;
        o.sbatch = args(&["--gres=gpu:1", "-p", "nope"]);
        assert!(run(&o).unwrap_err().contains("--partition=nope"));
        o.sbatch = args(&["--gres=gpu:1", "-t", "2-0"]);
        assert!(run(&o).unwrap_err().contains("MaxTime"));
        o.sbatch = args(&["--gres=gpu:a100:1"]);
        assert!(run(&o).unwrap_err().contains("type a100"));
    }
}
