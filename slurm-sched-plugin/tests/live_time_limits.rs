//! A job sched/energy slows with a lower GPU clock gets its time limit extended by the slowdown
//! the planner predicts for it (not the bound the user allowed), within the partition's `MaxTime`, so that it is never killed for a choice it
//! did not make; a job run at the default clock keeps its limit. Live: 1 node x 4 fake GPUs,
//! `sched/energy` with the measured data (so that clocks are chosen per job) and
//! `spank_energy.so` for the hints.
//!
//! 1. `--energy-policy=efficiency --energy-max-slowdown=1.5 -t 4`: the record shows `slow>1`,
//!    `scontrol show job` shows a limit of ceil(4 x the recorded slowdown) min, and slurmctld
//!    logs the change.
//! 2. `--energy-policy=performance -t 4`: 4 min, no log line.
//! 3. The same efficiency job in a partition with `MaxTime=4`: its limit cannot grow, so it is
//!    not slowed (`slow=1.000`, the default clock) and keeps 4 min: a slowed job there would be
//!    killed at a limit that did not allow for the slowdown.
//!
//!
//! `limits_of_the_qos_and_the_admin_cap_the_extension` (with accounting): 4. the job's QOS
//! `MaxWall=4` caps it; 5. a limit an admin set (`scontrol update TimeLimit=` while the job is
//! held) is never raised; in both the job runs at the default clock, as in 3; 6. the extended
//! limit reaches slurmdbd (`sacct` Timelimit); 7. a QOS `MaxTRESMinsPerJob=gres/gpu=4` caps a
//! one-GPU job at 4 minutes; 8. a QOS `GrpTRESRunMins` keeps the limit Slurm checked at start.
//!
//! Under `CI=true` a missing prerequisite fails the test; elsewhere it is skipped with a printed
//! reason (not root, Slurm missing, `libspank_energy.so` not built, no measured data).

use std::time::{Duration, Instant};

use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};

mod common;
use common::{data_dir, plugin_dir, spank_plugin};

const TIMEOUT: Duration = Duration::from_secs(30);

/// `Key=value` of `scontrol show job`.
fn job_field(cluster: &LocalCluster, job: u32, key: &str) -> String {
    let out = cluster.command("scontrol").args(["show", "job", &job.to_string()]).output().expect("run scontrol");
    let text = String::from_utf8_lossy(&out.stdout);
    let want = format!("{key}=");
    // AdminComment holds blanks: take it to the end of its line.
    if key == "AdminComment" {
        return text.lines().find_map(|l| l.trim().strip_prefix(&want)).unwrap_or("").to_string();
    }
    text.split_whitespace().find_map(|w| w.strip_prefix(&want)).unwrap_or("").to_string()
}

fn wait_running(cluster: &LocalCluster, job: u32) {
    let deadline = Instant::now() + TIMEOUT;
    while job_field(cluster, job, "JobState") != "RUNNING" {
        assert!(Instant::now() < deadline, "job {job} not running after {TIMEOUT:?}:\n{}", cluster.slurmctld_log());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `slow=` of a decision record.
fn recorded_slowdown(record: &str) -> f64 {
    record.split_whitespace().find_map(|kv| kv.strip_prefix("slow=")).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
}

/// The SPANK plugin (for the hints) and energy.toml with the measured data: without them no job
/// is slowed and these tests would prove nothing. Missing: a failure under CI, else a skip.
fn prerequisites() -> Option<(std::path::PathBuf, String)> {
    let (Some(spank), Some(data)) = (spank_plugin(), data_dir()) else {
        slurm_testcluster::skip_for("time limits", "libspank_energy.so not built or measured data not found (set SLURM_ENERGY_DATA)");
        return None;
    };
    // The fake GPUs are untyped (`gpu`): predict them as the measured V100s.
    let toml = format!("[sched]\ninterval_s = 1\ndata_dir = \"{}\"\n\n[gpu_types.gpu]\nmodel = \"v100\"\n", data.display());
    Some((spank, toml))
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn slowed_jobs_get_longer_time_limits_within_the_partition() {
    if skip_live_test("slowed_jobs_get_longer_time_limits_within_the_partition") {
        return;
    }
    let Some((spank, toml)) = prerequisites() else { return };
    let t0 = Instant::now();
    let plugins = plugin_dir();
    let cluster = LocalCluster::start(ClusterConfig {
        nodes: 1,
        gpus_per_node: 4,
        plugin_dir: Some(plugins.path().to_path_buf()),
        sched_type: "sched/energy".into(),
        scheduler_parameters: Some("sched_interval=-1,defer".into()),
        extra_files: vec![("energy.toml".into(), toml), ("plugstack.conf".into(), format!("required {}\n", spank.display()))],
        extra_slurm_conf: vec!["PartitionName=short Nodes=ALL MaxTime=4 State=UP".into()],
        with_accounting: false,
        ..ClusterConfig::default()
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    let script = "#!/bin/sh\nsleep 60\n";

    // 1. Slowed: the limit grows by the predicted slowdown.
    let eff = cluster
        .sbatch(&["--gres=gpu:1", "-t", "4", "--energy-policy=efficiency", "--energy-max-slowdown=1.5"], script)
        .expect("sbatch efficiency");
    wait_running(&cluster, eff);
    let record = job_field(&cluster, eff, "AdminComment");
    let slow = recorded_slowdown(&record);
    println!("efficiency job {eff}: {record}; TimeLimit={}", job_field(&cluster, eff, "TimeLimit"));
    assert!(slow > 1.0 && slow <= 1.5, "the efficiency job was not slowed within its bound: {record}");
    let want_min = (4.0 * slow - 1e-6).ceil() as u32;
    assert!(want_min < 6, "extended by the bound (1.5), not by the predicted slowdown {slow}");
    assert_eq!(job_field(&cluster, eff, "TimeLimit"), format!("00:{want_min:02}:00"), "job {eff}: {record}");
    assert!(
        cluster.slurmctld_log().contains(&format!("sched/energy: JobId={eff}: time limit 4 -> {want_min} min")),
        "no time limit line for job {eff}:\n{}",
        cluster.slurmctld_log()
    );

    // 2. Not slowed: the user's limit stands.
    let perf = cluster.sbatch(&["--gres=gpu:1", "-t", "4", "--energy-policy=performance"], script).expect("sbatch performance");
    wait_running(&cluster, perf);
    let record = job_field(&cluster, perf, "AdminComment");
    assert!(record.contains(" slow=1.000 "), "{record}");
    assert_eq!(job_field(&cluster, perf, "TimeLimit"), "00:04:00", "job {perf}: {record}");
    assert!(!cluster.slurmctld_log().contains(&format!("JobId={perf}: time limit")), "{}", cluster.slurmctld_log());

    // 3. The partition's MaxTime caps the extension.
    let capped = cluster
        .sbatch(&["-p", "short", "--gres=gpu:1", "-t", "4", "--energy-policy=efficiency", "--energy-max-slowdown=1.5"], script)
        .expect("sbatch capped");
    wait_running(&cluster, capped);
    let record = job_field(&cluster, capped, "AdminComment");
    assert!(record.contains(" slow=1.000 "), "a job at its partition's MaxTime was slowed: {record}");
    assert_eq!(job_field(&cluster, capped, "TimeLimit"), "00:04:00", "job {capped}: {record}");
    assert!(!cluster.slurmctld_log().contains(&format!("JobId={capped}: time limit")), "{}", cluster.slurmctld_log());

    for job in [eff, perf, capped] {
        let _ = cluster.command("scancel").arg(job.to_string()).status();
    }
    cluster.stop().expect("stop the cluster");
    println!("time limits: test {:.1} s", t0.elapsed().as_secs_f64());
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn limits_of_the_qos_and_the_admin_cap_the_extension() {
    if skip_live_test("limits_of_the_qos_and_the_admin_cap_the_extension") {
        return;
    }
    let Some((spank, toml)) = prerequisites() else { return };
    let plugins = plugin_dir();
    let cluster = LocalCluster::start(ClusterConfig {
        nodes: 1,
        gpus_per_node: 4,
        plugin_dir: Some(plugins.path().to_path_buf()),
        sched_type: "sched/energy".into(),
        scheduler_parameters: Some("sched_interval=-1,defer".into()),
        extra_files: vec![("energy.toml".into(), toml), ("plugstack.conf".into(), format!("required {}\n", spank.display()))],
        extra_slurm_conf: vec!["AccountingStorageEnforce=associations,limits,qos".into()],
        with_accounting: true,
        ..ClusterConfig::default()
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    let sacctmgr = |args: &[&str]| {
        let out = cluster.command("sacctmgr").args(args).output().expect("sacctmgr");
        assert!(out.status.success(), "sacctmgr {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    sacctmgr(&["-i", "add", "qos", "wall4", "MaxWall=4"]);
    sacctmgr(&["-i", "modify", "user", "root", "set", "qos+=wall4"]);
    std::thread::sleep(Duration::from_secs(2));
    let script = "#!/bin/sh\nsleep 60\n";
    let hints = ["--energy-policy=efficiency", "--energy-max-slowdown=1.5"];

    // 4. The QOS's MaxWall caps the extension.
    let qos = cluster.sbatch(&["--qos=wall4", "--gres=gpu:1", "-t", "4", hints[0], hints[1]], script).expect("sbatch qos");
    wait_running(&cluster, qos);
    let record = job_field(&cluster, qos, "AdminComment");
    assert!(record.contains(" slow=1.000 "), "a job at its QOS's MaxWall was slowed: {record}");
    assert_eq!(job_field(&cluster, qos, "TimeLimit"), "00:04:00", "job {qos}: {record}");

    // 5. A limit the admin set is never raised.
    let admin = cluster.sbatch(&["--hold", "--gres=gpu:1", "-t", "10", hints[0], hints[1]], script).expect("sbatch admin");
    let out = cluster.command("scontrol").args(["update", &format!("jobid={admin}"), "TimeLimit=4"]).output().expect("scontrol");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = cluster.command("scontrol").args(["release", &admin.to_string()]).output().expect("scontrol");
    assert!(out.status.success());
    wait_running(&cluster, admin);
    let record = job_field(&cluster, admin, "AdminComment");
    assert!(record.contains(" slow=1.000 "), "a job whose limit an admin set was slowed: {record}");
    assert_eq!(job_field(&cluster, admin, "TimeLimit"), "00:04:00", "job {admin}: {record}");

    // 7. A TRES-minutes limit per job caps it: 4 GPU-minutes for a one-GPU job are 4 minutes.
    //    8. A group limit on running TRES-minutes: the limit Slurm checked at the start stays.
    sacctmgr(&["-i", "add", "qos", "gpumins4", "MaxTRESMinsPerJob=gres/gpu=4"]);
    sacctmgr(&["-i", "add", "qos", "runmins", "GrpTRESRunMins=gres/gpu=1000"]);
    sacctmgr(&["-i", "modify", "user", "root", "set", "qos+=gpumins4,runmins"]);
    std::thread::sleep(Duration::from_secs(2));
    let mut tres_jobs = Vec::new();
    for qos_name in ["gpumins4", "runmins"] {
        let job = cluster.sbatch(&[&format!("--qos={qos_name}"), "--gres=gpu:1", "-t", "4", hints[0], hints[1]], script).expect("sbatch tres-minutes");
        wait_running(&cluster, job);
        let record = job_field(&cluster, job, "AdminComment");
        assert!(record.contains(" slow=1.000 "), "a job at its QOS {qos_name}'s TRES-minutes limit was slowed: {record}");
        assert_eq!(job_field(&cluster, job, "TimeLimit"), "00:04:00", "job {job} (QOS {qos_name}): {record}");
        // Its GPU for the next one (the node has four).
        let _ = cluster.command("scancel").arg(job.to_string()).status();
        tres_jobs.push(job);
    }

    // 6. A slowed job with room: the extended limit is what slurmdbd records.
    let free = cluster.sbatch(&["--gres=gpu:1", "-t", "4", hints[0], hints[1]], script).expect("sbatch free");
    wait_running(&cluster, free);
    let record = job_field(&cluster, free, "AdminComment");
    let want_min = (4.0 * recorded_slowdown(&record) - 1e-6).ceil() as u32;
    assert!(want_min > 4, "{record}");
    assert_eq!(job_field(&cluster, free, "TimeLimit"), format!("00:{want_min:02}:00"));
    // slurmdbd holds the extended limit while the job runs. (Checked before the end: with Slurm
    // 22.05 a job cancelled within a second or so of any limit change, `scontrol update
    // TimeLimit=` included, ends up with an empty Timelimit in sacct.)
    let want = format!("00:{want_min:02}:00");
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let limit = cluster.sacct(free, "Timelimit").unwrap_or_default();
        if limit == want {
            break;
        }
        assert!(Instant::now() < deadline, "slurmdbd's record of job {free}: Timelimit {limit:?}, want {want}");
        std::thread::sleep(Duration::from_millis(500));
    }
    for job in [qos, admin, free].into_iter().chain(tres_jobs) {
        let _ = cluster.command("scancel").arg(job.to_string()).status();
    }
    cluster.stop().expect("stop the cluster");
}
