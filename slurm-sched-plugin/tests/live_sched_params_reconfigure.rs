//! `SchedulerParameters` is checked again after `scontrol reconfigure`: dropping `defer` makes
//! every sched/energy cycle start nothing and log why, with the line to write; putting it back
//! (in another case: Slurm reads the parameters case-insensitively) makes the plugin start jobs
//! again. Live: 1 node x 2 fake GPUs.
//!
//! From 24.11 `scontrol reconfigure` runs slurmctld anew instead: sched/energy refuses to load
//! without `defer` (with the line to write), Slurm does not take that instance, and a slurmctld in
//! the foreground (as here) exits; it starts again once the line is back.

use std::time::{Duration, Instant};

use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};

mod common;
use common::{energy_cluster, plugin_dir};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Whether the cluster's slurmctld re-executes itself on `scontrol reconfigure` (24.11 on).
fn reconfigure_reexecs() -> bool {
    let release = slurm_testcluster::slurm_release().unwrap_or_default();
    let mut parts = release.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (24, 11)
}

fn write_sched_params(cluster: &LocalCluster, params: &str) {
    let conf = std::fs::read_to_string(cluster.conf_path()).expect("read slurm.conf");
    let conf: String = conf
        .lines()
        .map(|l| if l.starts_with("SchedulerParameters=") { format!("SchedulerParameters={params}") } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n");
    cluster.write_conf_file("slurm.conf", &(conf + "\n")).expect("write slurm.conf");
}

fn set_sched_params(cluster: &LocalCluster, params: &str) {
    write_sched_params(cluster, params);
    cluster.reconfigure().expect("scontrol reconfigure");
}

fn wait_for_log(cluster: &LocalCluster, text: &str) {
    let deadline = Instant::now() + TIMEOUT;
    while !cluster.slurmctld_log().contains(text) {
        assert!(Instant::now() < deadline, "no '{text}' in slurmctld's log:\n{}", cluster.slurmctld_log());
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn a_reconfigure_without_defer_stops_starts_until_it_is_back() {
    if skip_live_test("a_reconfigure_without_defer_stops_starts_until_it_is_back") {
        return;
    }
    let plugins = plugin_dir();
    let mut cluster = LocalCluster::start(ClusterConfig { gpus_per_node: 2, ..energy_cluster(plugins.path(), 1, "", false) })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));

    set_sched_params(&cluster, "sched_interval=-1");
    if reconfigure_reexecs() {
        wait_for_log(&cluster, "SchedulerParameters=sched_interval=-1,defer");
        assert!(cluster.slurmctld_log().contains("Attempting to reconfigure"), "{}", cluster.slurmctld_log());
        write_sched_params(&cluster, "Sched_Interval=-1,DEFER");
        cluster.restart_slurmctld().unwrap_or_else(|e| panic!("slurmctld does not start again with defer: {e}"));
    } else {
        wait_for_log(&cluster, "sched/energy: cycle skipped: no job started: SchedulerParameters (sched_interval=-1) lacks defer");
        assert!(cluster.slurmctld_log().contains("Write this line in slurm.conf: SchedulerParameters=sched_interval=-1,defer"), "{}", cluster.slurmctld_log());
        set_sched_params(&cluster, "Sched_Interval=-1,DEFER");
    }
    let mark = cluster.slurmctld_log().len();
    let job = cluster.sbatch(&["--gres=gpu:1", "-t", "5", "--wrap", "sleep 1"], "").unwrap_or_else(|e| panic!("{e}"));
    let state = cluster.wait_job_done(job, TIMEOUT).unwrap_or_else(|e| panic!("{e}\n{}", cluster.slurmctld_log()));
    assert_eq!(state, "COMPLETED");
    let after = cluster.slurmctld_log().get(mark..).unwrap_or("").to_string();
    assert!(after.contains(&format!("sched/energy: started JobId={job} ")), "job {job} not started by sched/energy:\n{after}");
}
