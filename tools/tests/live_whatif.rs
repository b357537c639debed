//! `slurm-energy whatif` against the demo cluster (sched/energy, spank_energy, gpu_nvml and
//! acct_gather_energy/nvml over the fake NVML, slurmdbd):
//!
//! 1. on the idle cluster, the what-if of a 1-GPU job (`-t 2`, a 60 s workload) under each
//!    policy; then the three jobs are submitted with the same options and one policy each.
//!    Each must start within [`START_SLACK_S`] of the what-if's "now", its sacct energy must be
//!    within a factor [`ENERGY_FACTOR`] of the predicted energy, and the measured energies must
//!    be in the predicted order wherever the predictions differ by more than
//!    [`ORDER_MARGIN`] (closer predictions are a tie the measurement may break either way);
//! 2. with every GPU held by a blocker (`-t 1`, 20 s of work), the what-if of a 1-GPU job says
//!    "reserved" from the blocker's time limit; submitted, the job must start no later than
//!    that (+ [`START_SLACK_S`]) and not before the blocker ends.
//!
//! Skipped (with a printed reason) when not root or Slurm is missing; under `CI=true` it fails.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use slurm_testcluster::{LocalCluster, skip_for, skip_live_test};
use tools::demo::{DemoCluster, DemoSetup, FakeGpuSite, PluginFiles, build_plugins, default_project_dir};

const TEST: &str = "whatif_predicts_the_start_and_energy_of_the_submitted_jobs";
/// A job starts at most this long after the what-if's "now" (or its reserved start): submission,
/// sched/energy's cycle (2 s in the demo), the prolog.
const START_SLACK_S: f64 = 30.0;
/// Measured energy / predicted energy lies within [1/F, F].
const ENERGY_FACTOR: f64 = 2.0;
/// Predicted energies closer than this (relative) are not ordered by the test.
const ORDER_MARGIN: f64 = 0.05;
const POLICIES: [&str; 3] = ["performance", "balanced", "efficiency"];

fn data_dir() -> PathBuf {
    model::data::default_data_dir()
}

fn whatif(cluster: &LocalCluster, args: &[&str], json: bool) -> (String, Option<serde_json::Value>) {
    let mut cmd: Command = cluster.command(env!("CARGO_BIN_EXE_slurm-energy"));
    cmd.arg("whatif");
    if json {
        cmd.args(["--json", "-"]);
    }
    let out = cmd.args(args).output().expect("run slurm-energy whatif");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "whatif {args:?} failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    let value = json.then(|| serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("whatif --json: {e}: {stdout}")));
    (stdout, value)
}

/// (start, end, ConsumedEnergyRaw J) of an ended job from sacct, times in UTC; waits for the
/// energy to be accounted.
fn accounted(cluster: &LocalCluster, id: u32) -> (f64, f64, f64) {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let out = cluster.command("sacct").env("TZ", "UTC").args(["-X", "-n", "-P", "-j", &id.to_string(), "-o", "State,Start,End,ConsumedEnergyRaw"]).output().expect("sacct");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let f: Vec<&str> = text.lines().next().unwrap_or("").split('|').collect();
        if let [state, start, end, energy] = f.as_slice() {
            let t = |s: &str| model::carbon_source::parse_timestamp(s).map(|v| v as f64);
            let energy: Option<f64> = energy.trim().parse().ok().filter(|e| *e > 0.0);
            if let (Some(s), Some(e), Some(j)) = (t(start), t(end), energy) {
                assert_eq!(*state, "COMPLETED", "job {id}: {text}");
                return (s, e, j);
            }
        }
        assert!(Instant::now() < deadline, "job {id} not accounted after 240 s: {text}");
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn row<'a>(w: &'a serde_json::Value, scenario: &str) -> &'a serde_json::Value {
    w["rows"].as_array().expect("rows").iter().find(|r| r["scenario"] == scenario).unwrap_or_else(|| panic!("no {scenario} row: {w}"))
}

fn f(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"))
}

fn wait_running(cluster: &LocalCluster, id: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = cluster.command("squeue").args(["-h", "-j", &id.to_string(), "-o", "%T"]).output().expect("squeue");
        if String::from_utf8_lossy(&out.stdout).trim() == "RUNNING" {
            return;
        }
        assert!(Instant::now() < deadline, "job {id} not running after 60 s");
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn whatif_predicts_the_start_and_energy_of_the_submitted_jobs() {
    if skip_live_test(TEST) {
        return;
    }
    if !data_dir().join("zeus").is_dir() {
        return skip_for(TEST, "no measured data (zeus/) for sched/energy's predictor: set SLURM_ENERGY_DATA");
    }
    let exe = std::env::current_exe().expect("test binary path");
    let target = exe.ancestors().nth(3).expect("target dir").join("plugin-builds");
    let project = default_project_dir();
    let slurm_src = std::env::var_os("SLURM_SRC_DIR").map(PathBuf::from);
    let plugins: PluginFiles = build_plugins(&project, slurm_src.as_deref(), false, Some(&target)).unwrap_or_else(|e| panic!("plugins: {e}"));
    let gpu_files = plugins.gpu.clone().expect("the GPU plugins and the fake NVML are built");
    let site = FakeGpuSite::create(&gpu_files).unwrap_or_else(|e| panic!("fake GPUs: {e}"));
    let energy_toml = std::fs::read_to_string(project.join("etc/energy.toml")).expect("etc/energy.toml");
    let setup = DemoSetup { plugins: Some(plugins), data_dir: Some(data_dir()), ..DemoSetup::default() };
    let demo = DemoCluster::start(&energy_toml, &setup, Some(site)).unwrap_or_else(|e| panic!("cluster: {e}"));
    let cluster = &demo.cluster;
    let script = demo.gpus().expect("fake GPUs").job_script(60);

    // 1. Idle cluster: each policy starts now; energies in the predicted order.
    let options = ["--gres=gpu:1", "-t", "2"];
    let (table, _) = whatif(cluster, &options, false);
    println!("{table}");
    let (_, w) = whatif(cluster, &options, true);
    let w = w.expect("json");
    assert_eq!(w["from_prior"], true, "no job ran yet: {w}");
    let now_s = f(&w, "now_s");
    let mut ids = Vec::new();
    for p in POLICIES {
        let policy = format!("--energy-policy={p}");
        let id = cluster.sbatch(&["-J", p, "--gres=gpu:1", "-t", "2", &policy], &script).expect("sbatch");
        ids.push(id);
    }
    let mut predicted = Vec::new();
    let mut measured = Vec::new();
    for (p, id) in POLICIES.iter().zip(&ids) {
        let r = row(&w, p);
        assert_eq!(r["kind"], "now", "{r}");
        let (start, end, energy_j) = accounted(cluster, *id);
        let (pred_j, pred_run_s) = (f(r, "energy_j"), f(r, "runtime_s"));
        println!(
            "{p:<12} job {id}: start {:+.0} s after the what-if (bound {START_SLACK_S} s), run {:.0} s (predicted {pred_run_s:.0}), energy {energy_j:.0} J, predicted {pred_j:.0} J (x{:.2}), clock {} MHz",
            start - now_s,
            end - start,
            energy_j / pred_j,
            r["clock_mhz"]
        );
        assert!(start - now_s >= -2.0 && start - now_s <= START_SLACK_S, "{p}: started {} s after the what-if", start - now_s);
        assert!(energy_j / pred_j <= ENERGY_FACTOR && pred_j / energy_j <= ENERGY_FACTOR, "{p}: measured {energy_j} J, predicted {pred_j} J");
        predicted.push(pred_j);
        measured.push(energy_j);
    }
    for a in 0..3 {
        for b in 0..3 {
            if predicted[a] > predicted[b] * (1.0 + ORDER_MARGIN) {
                assert!(measured[a] > measured[b], "predicted {} > {} ({:.0} > {:.0} J), measured {:.0} <= {:.0} J", POLICIES[a], POLICIES[b], predicted[a], predicted[b], measured[a], measured[b]);
            }
        }
    }

    // 2. Every GPU busy: the what-if reserves from the blocker's limit; the job starts no later.
    let nodes = cluster.command("scontrol").args(["-o", "show", "node"]).output().expect("scontrol show node");
    let nodes = String::from_utf8_lossy(&nodes.stdout).into_owned();
    let records = tools::whatif::cluster::parse_records(&nodes);
    let n = records.len();
    let gpus = records.iter().map(|r| tools::whatif::cluster::gpu_count(tools::whatif::cluster::field(r, "Gres").unwrap_or("")).0).min().unwrap_or(0);
    assert!(n > 0 && gpus > 0, "{nodes}");
    let blocker_script = demo.gpus().expect("fake GPUs").job_script(20);
    let blocker = cluster.sbatch(&["-J", "blocker", "-N", &n.to_string(), &format!("--gres=gpu:{gpus}"), "-t", "1", "--energy-policy=performance"], &blocker_script).expect("sbatch blocker");
    wait_running(cluster, blocker);
    let options = ["--gres=gpu:1", "-t", "2", "--energy-policy=performance"];
    let (table, _) = whatif(cluster, &options, false);
    println!("{table}");
    let (_, w) = whatif(cluster, &options, true);
    let w = w.expect("json");
    let r = row(&w, "performance");
    assert_eq!(r["kind"], "reserved", "{r}");
    let reserved_s = f(r, "start_s");
    let probe = cluster.sbatch(&["-J", "probe", "--gres=gpu:1", "-t", "2", "--energy-policy=performance"], &script).expect("sbatch probe");
    let (_, blocker_end, _) = accounted(cluster, blocker);
    let (start, _, energy_j) = accounted(cluster, probe);
    println!("probe: reserved start {:+.0} s, real start {:+.0} s, blocker ended {:+.0} s (after the what-if); energy {energy_j:.0} J, predicted {:.0} J", reserved_s - f(&w, "now_s"), start - f(&w, "now_s"), blocker_end - f(&w, "now_s"), f(r, "energy_j"));
    assert!(start <= reserved_s + START_SLACK_S, "started {start}, reserved from {reserved_s}");
    assert!(start + 1.0 >= blocker_end, "started {start} before the blocker ended {blocker_end}");
    let pred_j = f(r, "energy_j");
    assert!(energy_j / pred_j <= ENERGY_FACTOR && pred_j / energy_j <= ENERGY_FACTOR, "probe: measured {energy_j} J, predicted {pred_j} J");
    demo.stop().expect("stop the cluster");
}
