//! sched/energy's carbon source, per-job carbon and live learning, against the real daemons:
//!
//! (a) carbon: with no `[carbon] source` a job that allows deferral starts at once; with a
//!     source that says the grid is dirty now and clean in 30 min (`scontrol reconfigure`),
//!     the next one waits and its reason says why; when the file is rewritten to say the grid is
//!     clean now (and dirty later), it starts, at a clock no lower than the first job's; while
//!     it runs, its decision record accumulates `energy_j=`/`carbon_g=` from the node's energy
//!     readings (fake NVML, acct_gather_energy/nvml, AcctGatherNodeFreq), and `sacct` has the
//!     final values with carbon = energy x the file's intensity.
//! (b) learning: jobs of one user and tag (`--energy-tag`) start with `pred=prior`; once three
//!     finished, the next one's record names their history and predicts less energy; after a
//!     slurmctld restart the history is still there (StateSaveLocation/energy-learning.json).
//!
//! Skipped (with a printed reason) only when not root or when Slurm is not installed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use model::decision::{recorded_carbon_g, recorded_clock_mhz, recorded_energy_j, recorded_field};
use slurm_testcluster::{ClusterConfig, LocalCluster, require_built, skip_live_test};

mod common;
use common::{data_dir, plugin_dir, spank_plugin};

const JOB_TIMEOUT: Duration = Duration::from_secs(120);
const GPUS: u32 = 4;

/// One cluster at a time in this binary (2 cores).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn now_s() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// `scontrol show job` of one job.
fn show_job(cluster: &LocalCluster, job: u32) -> String {
    let out = cluster.command("scontrol").args(["show", "job", &job.to_string()]).output().expect("scontrol");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A field of `scontrol show job`: `AdminComment` is the rest of its own line (it may hold
/// spaces); other fields are one token (scontrol writes `_` for spaces in a reason).
fn job_field(cluster: &LocalCluster, job: u32, key: &str) -> String {
    let text = show_job(cluster, job);
    if key == "AdminComment" {
        return text.lines().find_map(|l| l.trim().strip_prefix("AdminComment=")).unwrap_or("").trim().to_string();
    }
    text.split_whitespace().find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('='))).unwrap_or("").to_string()
}

/// `sacct -n -P -X -j <job> -o AdminComment` once slurmdbd has the completion record.
fn sacct_comment(cluster: &LocalCluster, job: u32) -> String {
    cluster.wait_accounted(job, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
    let out = cluster.command("sacct").args(["-n", "-P", "-X", "-j", &job.to_string(), "-o", "AdminComment"]).output().expect("sacct");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn wait_state(cluster: &LocalCluster, job: u32, want: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let state = job_field(cluster, job, "JobState");
        if state == want {
            return;
        }
        assert!(Instant::now() < deadline, "job {job} is {state}, not {want}, after {timeout:?}:\n{}", cluster.slurmctld_log());
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn mknod_gpus(dir: &Path) {
    std::fs::create_dir_all(dir).expect("dev dir");
    for i in 0..GPUS {
        let path = dir.join(format!("nvidia{i}"));
        let status = std::process::Command::new("mknod").arg(&path).args(["c", "195", &i.to_string()]).status().expect("run mknod");
        assert!(status.success(), "mknod {}", path.display());
    }
}

/// A carbon file: `(offset from now in s, g/kWh)` points, 30-min steps.
fn write_carbon(path: &Path, points: &[(i64, f64)]) {
    let now = now_s();
    let mut text = String::from("# written by the test, as a site's cron job would\ntimestamp,g_per_kwh\n");
    for (off, g) in points {
        text.push_str(&format!("{},{g}\n", now + off));
    }
    // Through a rename, as a cron job should write it.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write carbon file");
    std::fs::rename(&tmp, path).expect("rename carbon file");
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn carbon_source_defers_and_jobs_carry_their_carbon() {
    if skip_live_test("carbon_source_defers_and_jobs_carry_their_carbon") {
        return;
    }
    let _serial = serial();
    let t0 = Instant::now();
    let plugins = plugin_dir();
    std::fs::copy(require_built("libacct_gather_energy_nvml.so"), plugins.path().join("acct_gather_energy_nvml.so")).expect("copy acct_gather_energy_nvml.so");
    let work = tempfile::Builder::new().prefix("carbon-live-").tempdir().expect("temp dir");
    let nvml_dir = work.path().join("nvml");
    fake_nvml::install_library(&require_built(fake_nvml::BUILT_LIBRARY_NAME), &nvml_dir).expect("install the fake NVML");
    std::fs::write(nvml_dir.join("fake-nvml.conf"), format!("gpu_count = {GPUS}\ncpu_count = 2\nnuma_nodes = 2\n")).expect("fake conf");
    // The fake keeps its energy counters in a state file: create it (GPUs at 50 % load).
    let fake = fake_nvml::FakeNvml::for_library_dir(&nvml_dir).expect("fake NVML state");
    for gpu in 0..GPUS as usize {
        fake.set_utilization(gpu, 50, 10).expect("set utilisation");
    }
    let dev = work.path().join("dev");
    mknod_gpus(&dev);
    let carbon = work.path().join("intensity.csv");
    let data = data_dir().map(|d| format!("data_dir = \"{}\"\n", d.display())).unwrap_or_default();
    // Every job may wait up to 2 h for a cleaner grid (no SPANK plugin here: the default).
    // A running job's measured power is learnt after 6 s (default 2 min).
    let base_toml = format!("[sched]\ninterval_s = 1\ndebug = true\n{data}\n[planner.hints]\ndefer_s = 7200\n\n[gpu_types.gpu]\nmodel = \"v100\"\n\n[learning]\nearly_after_s = 6\n");
    let cluster = LocalCluster::start(ClusterConfig {
        nodes: 1,
        gpus_per_node: GPUS,
        plugin_dir: Some(plugins.path().to_path_buf()),
        sched_type: "sched/energy".into(),
        scheduler_parameters: Some("sched_interval=-1,defer".into()),
        extra_files: vec![("energy.toml".into(), base_toml.clone())],
        extra_slurm_conf: vec![
            "AcctGatherEnergyType=acct_gather_energy/nvml".into(),
            "AcctGatherNodeFreq=5".into(),
            "PrologFlags=Contain".into(),
        ],
        daemon_env: vec![
            ("LD_LIBRARY_PATH".into(), nvml_dir.display().to_string()),
            ("SLURM_ENERGY_NVIDIA_DEV_DIR".into(), dev.display().to_string()),
            ("SLURM_ENERGY_CLOCK_LEDGER".into(), work.path().join("ledger").display().to_string()),
        ],
        with_accounting: true,
        ..ClusterConfig::default()
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    println!("cluster up after {:.1} s", t0.elapsed().as_secs_f64());
    let submit = || cluster.sbatch(&["--gres=gpu:2", "-t", "5", "--wrap", "sleep 20"], "").unwrap_or_else(|e| panic!("sbatch: {e}"));

    // 1. No carbon source: starts at once.
    let first = submit();
    wait_state(&cluster, first, "RUNNING", Duration::from_secs(30));
    let first_record = job_field(&cluster, first, "AdminComment");
    let first_clock = recorded_clock_mhz(&first_record).expect("first job's clock");
    println!("no source: job {first}: {first_record}");
    cluster.command("scancel").arg(first.to_string()).status().expect("scancel");
    wait_state(&cluster, first, "CANCELLED", Duration::from_secs(30));

    // 2. Dirty now, clean in 30 min: the job waits, and says why.
    write_carbon(&carbon, &[(-600, 480.0), (1200, 460.0), (3000, 110.0), (4800, 120.0), (6600, 300.0)]);
    let toml = format!("{base_toml}\n[carbon]\nsource = \"{}\"\nrefresh_s = 1\n", carbon.display());
    cluster.write_conf_file("energy.toml", &toml).expect("energy.toml");
    cluster.reconfigure().expect("scontrol reconfigure");
    std::thread::sleep(Duration::from_secs(2));
    let deferred = submit();
    let deadline = Instant::now() + Duration::from_secs(30);
    let reason = loop {
        let reason = job_field(&cluster, deferred, "Reason");
        if reason.contains("deferred_for_a_cleaner_grid") {
            break reason;
        }
        assert!(Instant::now() < deadline, "job {deferred} not deferred: {}\n{}", show_job(&cluster, deferred), cluster.slurmctld_log());
        std::thread::sleep(Duration::from_millis(250));
    };
    println!("dirty now, clean soon: job {deferred}: {reason}");
    assert!(reason.contains("480_g/kWh_now") && reason.contains("110_g/kWh_forecast"), "{reason}");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(job_field(&cluster, deferred, "JobState"), "PENDING", "deferred job started while the grid is dirty");

    // 3. The file now says the grid is clean now and dirty later: the job starts, at a clock
    //    no lower than the first job's (a clean hour spends less of the slowdown budget).
    let clean_g = 100.0;
    write_carbon(&carbon, &[(-600, clean_g), (1200, clean_g), (3000, 500.0), (4800, 520.0), (6600, 510.0), (8400, 505.0)]);
    wait_state(&cluster, deferred, "RUNNING", Duration::from_secs(30));
    let record = job_field(&cluster, deferred, "AdminComment");
    let clock = recorded_clock_mhz(&record).expect("clock in the record");
    println!("clean now: job {deferred}: {record}");
    assert!(clock >= first_clock, "clean-grid clock {clock} MHz below the no-signal clock {first_clock} MHz");
    if data_dir().is_some() {
        assert!(clock > first_clock, "no carbon-aware clock change ({clock} MHz both times) with the measured curves loaded");
    }
    // While it runs, the record accumulates energy and carbon.
    let deadline = Instant::now() + Duration::from_secs(30);
    let running_record = loop {
        let r = job_field(&cluster, deferred, "AdminComment");
        if recorded_energy_j(&r).is_some_and(|j| j > 0.0) {
            break r;
        }
        if Instant::now() >= deadline {
            let node = cluster.command("scontrol").args(["show", "node", "n1"]).output().expect("scontrol");
            let slurmd: Vec<String> = cluster.slurmd_log("n1").lines().filter(|l| l.contains("acct_gather_energy")).map(str::to_string).collect();
            panic!("no energy_j= in the running job's record: {r}\nnode: {}\nslurmd: {}\n{}", String::from_utf8_lossy(&node.stdout), slurmd.join("\n"), cluster.slurmctld_log());
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    println!("running: {running_record}");
    assert_eq!(cluster.wait_job_done(deferred, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}")), "COMPLETED");
    let comment = sacct_comment(&cluster, deferred);
    println!("sacct AdminComment: {comment}");
    let energy_j = recorded_energy_j(&comment).expect("energy_j in sacct");
    let carbon_g = recorded_carbon_g(&comment).expect("carbon_g in sacct");
    assert!(energy_j >= recorded_energy_j(&running_record).unwrap_or(0.0), "the final record has less energy than the running one");
    // All of it at 100 g/kWh; energy_j is printed to 1 J and carbon_g to 1 mg.
    let expected_g = energy_j * clean_g / 3.6e6;
    assert!((carbon_g - expected_g).abs() <= 0.0005 + 0.5 * clean_g / 3.6e6 + 1e-9, "carbon_g {carbon_g} vs {energy_j} J at {clean_g} g/kWh = {expected_g}");
    assert_eq!(recorded_field(&comment, "carbon_unknown_j"), None, "{comment}");
    // The energy of 2 of the node's 4 GPUs over ~20 s at the fake's power: the node's counter
    // (not CurrentWatts) split by GPUs, within what the last reading before the end misses.
    let gpu_w = fake_nvml::model::power_mw(&fake.config, &fake.state().expect("fake state").gpus[0]) / 1000.0;
    let ctld = cluster.slurmctld_log();
    assert!(!ctld.contains("does not advance"), "the node's energy counter was not used:\n{ctld}");
    let elapsed_s: f64 = {
        let out = cluster.command("sacct").env("SLURM_TIME_FORMAT", "%s").args(["-n", "-P", "-X", "-j", &deferred.to_string(), "-o", "ElapsedRaw"]).output().expect("sacct");
        String::from_utf8_lossy(&out.stdout).trim().parse().expect("ElapsedRaw")
    };
    let full_j = 2.0 * gpu_w * elapsed_s;
    println!("energy_j {energy_j} J; 2 GPUs x {gpu_w:.0} W x {elapsed_s} s = {full_j:.0} J");
    assert!(energy_j <= full_j * 1.05 && energy_j >= 2.0 * gpu_w * (elapsed_s - 5.0 - 2.0), "energy_j {energy_j} J vs {full_j:.0} J (AcctGatherNodeFreq=5)");
    // What was learnt from it: its first seconds' power, then the finished job's energy.
    std::thread::sleep(Duration::from_secs(3));
    let state: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(cluster.base_dir().join("state").join("energy-learning.json")).expect("learning state")).expect("JSON");
    let user = &state["history"]["groups"]["u0"];
    println!("learnt for u0: {user}");
    assert!(user["early_power_ratio"]["n"].as_u64().unwrap_or(0) >= 1, "no early-run observation: {user}");
    assert!(user["power_ratio"]["n"].as_u64().unwrap_or(0) >= 1, "no finished-job power observation: {user}");
    assert!(user["energy_per_gpu_hour_j"]["n"].as_u64().unwrap_or(0) >= 1, "no energy per GPU-hour: {user}");
    println!("carbon test done in {:.1} s", t0.elapsed().as_secs_f64());
    cluster.stop().expect("stop");
}

fn pred_kwh(record: &str) -> f64 {
    recorded_field(record, "pred_kwh").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no pred_kwh in {record}"))
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn the_planner_learns_from_finished_jobs_and_remembers_after_a_restart() {
    if skip_live_test("the_planner_learns_from_finished_jobs_and_remembers_after_a_restart") {
        return;
    }
    let Some(spank) = spank_plugin() else {
        return slurm_testcluster::skip_for("the_planner_learns_from_finished_jobs_and_remembers_after_a_restart", "libspank_energy.so not built (run `cargo build -p spank-energy`)");
    };
    let _serial = serial();
    let t0 = Instant::now();
    let plugins = plugin_dir();
    let data = data_dir().map(|d| format!("data_dir = \"{}\"\n", d.display())).unwrap_or_default();
    let toml = format!("[sched]\ninterval_s = 1\ndebug = true\n{data}\n[gpu_types.gpu]\nmodel = \"v100\"\n");
    let mut cluster = LocalCluster::start(ClusterConfig {
        nodes: 1,
        gpus_per_node: GPUS,
        plugin_dir: Some(plugins.path().to_path_buf()),
        sched_type: "sched/energy".into(),
        scheduler_parameters: Some("sched_interval=-1,defer".into()),
        extra_files: vec![("energy.toml".into(), toml), ("plugstack.conf".into(), format!("required {}\n", spank.display()))],
        with_accounting: false,
        ..ClusterConfig::default()
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    println!("cluster up after {:.1} s", t0.elapsed().as_secs_f64());
    let state_file: PathBuf = cluster.base_dir().join("state").join("energy-learning.json");
    // 10-minute limits, 2-second runs: the prior expects half the limit.
    let run = |cluster: &LocalCluster, tag: &str| -> String {
        let job = cluster.sbatch(&[&format!("--energy-tag={tag}"), "--gres=gpu:1", "-t", "10", "--wrap", "sleep 2"], "").unwrap_or_else(|e| panic!("sbatch: {e}"));
        assert_eq!(cluster.wait_job_done(job, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}")), "COMPLETED", "job {job}");
        let record = job_field(cluster, job, "AdminComment");
        println!("job {job} ({tag}): {record}");
        // Learnt at the next cycle.
        std::thread::sleep(Duration::from_secs(3));
        record
    };
    let first = run(&cluster, "resnet");
    assert_eq!(recorded_field(&first, "pred"), Some("prior"), "{first}");
    run(&cluster, "resnet");
    run(&cluster, "resnet");
    let fourth = run(&cluster, "resnet");
    assert_eq!(recorded_field(&fourth, "pred"), Some("history:u0/resnet:n=3"), "{fourth}");
    assert!(pred_kwh(&fourth) < pred_kwh(&first), "history of short runs did not lower the prediction: {first} -> {fourth}");
    // Another tag of the same user: the user's history (every tag).
    let other = run(&cluster, "bert");
    assert_eq!(recorded_field(&other, "pred"), Some("history:u0:n=4"), "{other}");
    assert!(state_file.is_file(), "no {}", state_file.display());

    cluster.restart_slurmctld().unwrap_or_else(|e| panic!("slurmctld restart: {e}"));
    let log = cluster.slurmctld_log();
    assert!(log.contains("learning: loaded"), "state not loaded after the restart:\n{log}");
    let after = run(&cluster, "resnet");
    assert_eq!(recorded_field(&after, "pred"), Some("history:u0/resnet:n=4"), "history lost in the restart: {after}");
    let saved = std::fs::read_to_string(&state_file).expect("state file");
    assert!(saved.contains("u0/resnet") && saved.contains("u0/bert"), "{saved}");
    println!("learning test done in {:.1} s", t0.elapsed().as_secs_f64());
    cluster.stop().expect("stop");
}
