//! Licenses are honoured between the starts of one plan: two jobs that each need the cluster's
//! only license (`Licenses=lic:1`) become runnable in the same cycle; `select_nodes` does not
//! test licenses (Slurm's schedulers do, before calling it), so sched/energy re-tests them
//! before each start. The second job never runs beside the first, is not taken for a node
//! problem (no node kept from it), and starts as soon as the license is free. Live: 3 nodes.

use std::time::{Duration, Instant};

use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};

mod common;
use common::{energy_cluster, plugin_dir};

const TIMEOUT: Duration = Duration::from_secs(90);

fn running_jobs(cluster: &LocalCluster) -> Vec<u32> {
    let out = cluster.command("squeue").args(["-h", "-t", "R", "-o", "%i"]).output().expect("squeue");
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect()
}

fn job_state(cluster: &LocalCluster, job: u32) -> String {
    let out = cluster.command("scontrol").args(["show", "job", "-o", &job.to_string()]).output().expect("scontrol");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.split_whitespace().find_map(|kv| kv.strip_prefix("JobState=")).unwrap_or_default().to_string()
}

/// `StartTime`/`EndTime` of a job as `scontrol show job` prints them (seconds since the epoch
/// via `date -d`), once it has ended.
fn times_s(cluster: &LocalCluster, job: u32) -> (i64, i64) {
    let out = cluster.command("scontrol").args(["show", "job", "-o", &job.to_string()]).output().expect("scontrol");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let field = |name: &str| {
        let v = text.split_whitespace().find_map(|kv| kv.strip_prefix(name)).unwrap_or_else(|| panic!("no {name} in {text}"));
        let out = std::process::Command::new("date").args(["-d", v, "+%s"]).output().expect("date");
        String::from_utf8_lossy(&out.stdout).trim().parse::<i64>().unwrap_or_else(|_| panic!("{name}{v}"))
    };
    (field("StartTime="), field("EndTime="))
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn two_jobs_for_the_last_license_run_one_after_the_other() {
    if skip_live_test("two_jobs_for_the_last_license_run_one_after_the_other") {
        return;
    }
    let plugins = plugin_dir();
    let cluster = LocalCluster::start(ClusterConfig { extra_slurm_conf: vec!["Licenses=lic:1".into()], ..energy_cluster(plugins.path(), 3, "", false) })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    let submit = |args: &[&str]| cluster.sbatch(args, "").unwrap_or_else(|e| panic!("sbatch {args:?}: {e}"));
    // Held, then released together: both are runnable in the same cycle.
    let first = submit(&["--hold", "-L", "lic:1", "--gres=gpu:1", "-t", "2", "--wrap", "sleep 4"]);
    let second = submit(&["--hold", "-L", "lic:1", "--gres=gpu:1", "-t", "2", "--wrap", "sleep 1"]);
    let out = cluster.command("scontrol").args(["release", &format!("{first},{second}")]).output().expect("scontrol release");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let deadline = Instant::now() + TIMEOUT;
    let mut done = 0;
    while done < 2 {
        let running = running_jobs(&cluster);
        assert!(!(running.contains(&first) && running.contains(&second)), "both jobs run with one license\n{}", cluster.slurmctld_log());
        done = [first, second].iter().filter(|j| job_state(&cluster, **j) == "COMPLETED").count();
        assert!(Instant::now() < deadline, "jobs did not finish\n{}", cluster.slurmctld_log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let (a_start, a_end) = times_s(&cluster, first);
    let (b_start, b_end) = times_s(&cluster, second);
    let (earlier_end, later_start) = if a_start <= b_start { (a_end, b_start) } else { (b_end, a_start) };
    assert!(later_start >= earlier_end, "overlap: {first} {a_start}-{a_end}, {second} {b_start}-{b_end}");
    // Not kept from nodes for REFUSAL_CYCLES (10) cycles as if a node had refused it.
    assert!(later_start - earlier_end <= 5, "the second job waited {} s after the license was free", later_start - earlier_end);
    cluster.stop().expect("stop");
}
