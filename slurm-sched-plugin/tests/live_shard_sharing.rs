//! GPU sharing through `gres/shard` (EaCO co-location) on a live cluster: 2 nodes x 1 fake GPU,
//! `GresTypes=gpu,shard`, 4 shards per GPU, `sched/energy` with the measured data (Gavel pairs)
//! and `spank_energy.so` for the `--energy-*` options.
//!
//! 1. `A` (`--gres=shard:1 --energy-share=allow --energy-tag=resnet18`) starts on a node `NA`.
//! 2. `G` (`--gres=gpu:1`) goes to the other node `NB`: A's shard holds NA's GPU.
//! 3. `D` (`--gres=shard:1 --energy-share=deny`): NA has a shard job and NB's GPU is G's, so D
//!    waits, with sched/energy's reason in `squeue` and a log line, although Slurm would take it
//!    on NA's GPU next to A.
//! 4. `B` (`--gres=shard:1 --energy-share=allow --energy-tag=resnet18`, lower priority than D
//!    only by submit order): co-located with A on NA (predicted resnet18 pair slowdown 1.10
//!    from Gavel), its decision record says `share=<A>`.
//! 5. G ends: D starts alone on NB, `share=none`.
//!
//! Skipped (with a printed reason) when not root, Slurm is missing, `libspank_energy.so` is not
//! built, or the measured data is not found.

use std::time::{Duration, Instant};

use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};

mod common;
use common::{admin_comment, data_dir, plugin_dir, spank_plugin, squeue_field as squeue, wait_running_on};

const TIMEOUT: Duration = Duration::from_secs(30);

fn shard_job(cluster: &LocalCluster, name: &str, hints: &[&str]) -> u32 {
    let mut args = vec!["-J", name, "--gres=shard:1", "-t", "5"];
    args.extend_from_slice(hints);
    cluster.sbatch(&args, "#!/bin/sh\nsleep 120\n").unwrap_or_else(|e| panic!("sbatch {name}: {e}"))
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn shard_jobs_share_by_interference_and_deny_jobs_never_share() {
    if skip_live_test("shard_jobs_share_by_interference_and_deny_jobs_never_share") {
        return;
    }
    let Some(spank) = spank_plugin() else {
        return slurm_testcluster::skip_for("shard sharing", "libspank_energy.so not built (run `cargo test -p spank-energy -p slurm-sched-plugin`)");
    };
    let Some(data) = data_dir() else {
        return slurm_testcluster::skip_for("shard sharing", "measured data not found (set SLURM_ENERGY_DATA)");
    };
    let t0 = Instant::now();
    let plugins = plugin_dir();
    let toml = format!("[sched]\ninterval_s = 1\ndebug = true\ndata_dir = \"{}\"\n\n[planner]\nsharing = true\n", data.display());
    let cluster = LocalCluster::start(ClusterConfig {
        nodes: 2,
        gpus_per_node: 1,
        shards_per_gpu: 4,
        plugin_dir: Some(plugins.path().to_path_buf()),
        sched_type: "sched/energy".into(),
        scheduler_parameters: Some("sched_interval=-1,defer".into()),
        extra_files: vec![("energy.toml".into(), toml), ("plugstack.conf".into(), format!("required {}\n", spank.display()))],
        ..ClusterConfig::default()
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    let nodes = cluster.node_names();

    // 1. The first shard tenant.
    let a = shard_job(&cluster, "A", &["--energy-share=allow", "--energy-tag=resnet18"]);
    let na = wait_running_on(&cluster, a, TIMEOUT);
    assert!(nodes.contains(&na), "A on {na:?}, nodes {nodes:?}");
    let nb = nodes.iter().find(|n| **n != na).cloned().expect("a second node");

    // 2. A whole GPU: not the one A's shard is on.
    let g = cluster.sbatch(&["-J", "G", "--gres=gpu:1", "-t", "5"], "#!/bin/sh\nsleep 120\n").expect("sbatch G");
    assert_eq!(wait_running_on(&cluster, g, TIMEOUT), nb, "gpu job G placed next to shard job A:\n{}", cluster.slurmctld_log());

    // 3. A deny shard job has nowhere to go alone: it waits, saying why.
    let d = shard_job(&cluster, "D", &["--energy-share=deny", "--energy-tag=resnet18"]);
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let reason = squeue(&cluster, d, "%T|%R");
        if reason.contains("waits for a node without other gres/shard jobs") {
            assert!(reason.starts_with("PENDING|"), "{reason}");
            break;
        }
        assert!(Instant::now() < deadline, "D: {reason}:\n{}", cluster.slurmctld_log());
        std::thread::sleep(Duration::from_millis(200));
    }

    // 4. A compatible allow shard job: co-located with A by predicted interference.
    let b = shard_job(&cluster, "B", &["--energy-share=allow", "--energy-tag=resnet18"]);
    assert_eq!(wait_running_on(&cluster, b, TIMEOUT), na, "allow job B not co-located with A:\n{}", cluster.slurmctld_log());
    let record_b = admin_comment(&cluster, b);
    assert!(record_b.contains(&format!(" share={a} ")), "B's record does not name A ({a}): {record_b}");
    let log = cluster.slurmctld_log();
    let started_b = log.lines().find(|l| l.contains(&format!("sched/energy: started JobId={b} on {na}: "))).unwrap_or_else(|| panic!("{log}"));
    assert!(started_b.contains(&format!(" share={a} ")), "{started_b}");
    // D still waits (B, submitted after it, shares; D never does).
    assert_eq!(squeue(&cluster, d, "%T"), "PENDING", "deny job D started next to a shard job");
    // Logged once, though D was tested in every cycle since.
    assert_eq!(log.matches(&format!("sched/energy: JobId={d} waits: ")).count(), 1, "{log}");

    // Slurm's view: A and B on the same GPU of NA.
    let detail = cluster.command("scontrol").args(["show", "job", "-d"]).output().expect("scontrol show job -d");
    let detail = String::from_utf8_lossy(&detail.stdout).to_string();
    println!("{}", detail.lines().filter(|l| l.contains("JobId=") || l.contains("GRES=")).collect::<Vec<_>>().join("\n"));

    // 5. NB frees up: D runs there, alone.
    let _ = cluster.command("scancel").arg(g.to_string()).status();
    assert_eq!(wait_running_on(&cluster, d, TIMEOUT), nb, "D after G ended:\n{}", cluster.slurmctld_log());
    let record_d = admin_comment(&cluster, d);
    assert!(record_d.contains(" share=none "), "D: {record_d}");
    let log = cluster.slurmctld_log();
    assert!(!log.contains("internal error (panic"), "{log}");

    for job in [a, b, d] {
        let _ = cluster.command("scancel").arg(job.to_string()).status();
    }
    cluster.stop().expect("stop the cluster");
    println!("shard sharing: A={a} on {na}, G={g} on {nb}, B={b} shares with A, D={d} waited then ran alone on {nb}; test {:.1} s", t0.elapsed().as_secs_f64());
}
