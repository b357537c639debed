//! The planner learns how jobs use their GPUs while they run, on a live cluster: 1 node with 1
//! fake GPU cut into 4 shards, `gpu_nvml.so` + `acct_gather_energy_nvml.so` (whose extern steps
//! report each job's GPU use, munge-signed, to `[learning] gpu_use_port`), `sched/energy` with
//! the measured data and `spank_energy.so` for the hints.
//!
//! 1. `A1` (`--energy-tag=resnet18`) runs alone at 80 % SM utilisation (the fake NVML's
//!    per-process sample for its PID): `energy-learning.json` gets the group's solo use.
//! 2. `A2` and `B2` (both `resnet18`, `--energy-share=allow`) share the GPU, as Gavel's pair
//!    throughput predicts (slowdown 1.10 < 1.6, record `ipred=experiment`), but each gets only
//!    25 %: sched/energy observes slowdowns of 80/25 = 3.2 and learns the pair.
//! 3. That history comes from one user (root) only: it does not move the prediction until
//!    several users report the pair (docs/learning.md, "Learning from several users"), so `B3`,
//!    the same kind of job, still joins `A2` on the experiment's prediction (`ipred=experiment`).
//!    (`live_pair_learning_users` shows the same across two users.)
//! 4. A datagram from an address that is no node's (127.0.0.2) is dropped before munge, one
//!    from the node's address that munge did not sign is refused (both logged), and slurmctld,
//!    restarted, still knows the pair.
//!
//! Skipped (with a printed reason) when not root, Slurm is missing, `libspank_energy.so` is not
//! built, or the measured data is not found; fails instead under `CI=true`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};

mod common;
use common::{admin_comment, data_dir, fake_gpu_node, free_udp_port, plugin_dir, set_load, spank_plugin, wait_learnt, wait_running_on};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A shard job that prints its PID and runs until its stop file appears.
struct Job {
    id: u32,
    pid: u32,
    stop: PathBuf,
}

fn submit(cluster: &LocalCluster, name: &str, hints: &[&str]) -> (u32, PathBuf) {
    let stop = cluster.job_dir().join(format!("stop-{name}"));
    let out = cluster.job_dir().join(format!("use-{name}.out"));
    let script = format!("#!/bin/sh\necho PID=$$\nwhile [ ! -e {} ]; do sleep 0.2; done\n", stop.display());
    let mut args = vec!["-J", name, "--gres=shard:1", "-t", "10", "-o"];
    let out_arg = out.display().to_string();
    args.push(&out_arg);
    args.extend_from_slice(hints);
    (cluster.sbatch(&args, &script).unwrap_or_else(|e| panic!("sbatch {name}: {e}")), stop)
}

fn started(cluster: &LocalCluster, name: &str, id: u32, stop: PathBuf) -> Job {
    wait_running_on(cluster, id, TIMEOUT);
    let out = cluster.job_dir().join(format!("use-{name}.out"));
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        if let Some(pid) = text.lines().find_map(|l| l.strip_prefix("PID=")?.trim().parse().ok()) {
            return Job { id, pid, stop };
        }
        assert!(Instant::now() < deadline, "{name} printed no PID");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn end(cluster: &LocalCluster, job: &Job) {
    std::fs::write(&job.stop, "").expect("stop file");
    assert_eq!(cluster.wait_job_done(job.id, TIMEOUT).expect("job done"), "COMPLETED");
}



/// The first slurmctld log line after byte `from` that holds `what`, waited for.
fn wait_log_line(cluster: &LocalCluster, from: usize, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = cluster.slurmctld_log();
        if let Some(line) = log.get(from..).unwrap_or_default().lines().find(|l| l.contains(what)) {
            return line.to_string();
        }
        assert!(Instant::now() < deadline, "no log line with {what:?}:\n{log}");
        std::thread::sleep(Duration::from_millis(200));
    }
}



#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn running_jobs_gpu_use_teaches_the_planner_which_pairs_share_well() {
    if skip_live_test("running_jobs_gpu_use_teaches_the_planner_which_pairs_share_well") {
        return;
    }
    let Some(spank) = spank_plugin() else {
        return slurm_testcluster::skip_for("GPU use learning", "libspank_energy.so not built (run `cargo test -p spank-energy -p slurm-sched-plugin`)");
    };
    let Some(data) = data_dir() else {
        return slurm_testcluster::skip_for("GPU use learning", "measured data not found (set SLURM_ENERGY_DATA)");
    };
    let t0 = Instant::now();
    let plugins = plugin_dir();
    let work = tempfile::Builder::new().prefix("gpu-use-live-").tempdir().expect("temp dir");
    let node = fake_gpu_node(work.path(), plugins.path(), 1, "cpu_count = 2\nnuma_nodes = 1\n");
    let fake = &node.fake;
    let port = free_udp_port();
    let gpu_type = node.gpu_type.clone();
    let toml = format!(
        "[sched]\ninterval_s = 1\ndebug = true\ndata_dir = \"{}\"\n\n[planner]\nsharing = true\nsharing_max_slowdown = 1.6\n\n[learning]\nearly_after_s = 5\ngpu_use_port = {port}\n\n[gpu_types.\"{gpu_type}\"]\nmodel = \"v100\"\n",
        data.display()
    );
    let mut cluster = LocalCluster::start(ClusterConfig { shards_per_gpu: 4, ..node.cluster(plugins.path(), toml, &spank) })
        .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    assert!(cluster.slurmctld_log().contains(&format!("learning: receiving the nodes' GPU use reports on UDP port {port}")), "{}", cluster.slurmctld_log());
    let resnet = ["--energy-tag=resnet18", "--energy-share=allow"];

    // 1. Alone: the group's use of a GPU to itself.
    let (id, stop) = submit(&cluster, "A1", &resnet);
    let a1 = started(&cluster, "A1", id, stop);
    set_load(fake, &[(a1.pid, 80)]);
    let solo = wait_learnt(&cluster, "A1's solo GPU use", |v| {
        let m = &v["history"]["groups"]["u0/resnet18"]["early_gpu_util_pct"];
        (m["n"].as_u64()? >= 1).then(|| m["sum"].as_f64().unwrap_or(0.0) / m["n"].as_f64().unwrap_or(1.0))
    });
    assert!((solo - 80.0).abs() < 3.0, "solo use {solo} %, the fake ran A1 at 80 %");
    let stepd = cluster.slurmd_log("n1");
    assert!(stepd.contains(&format!("reporting job {}'s GPU use to slurmctld port {port}", a1.id)), "{stepd}");
    set_load(fake, &[]);
    end(&cluster, &a1);

    // 2. A pair that Gavel says shares well, but each job gets a quarter of the GPU.
    let (id, stop) = submit(&cluster, "A2", &resnet);
    let a2 = started(&cluster, "A2", id, stop);
    let (id, stop) = submit(&cluster, "B2", &resnet);
    let b2 = started(&cluster, "B2", id, stop);
    let record = admin_comment(&cluster, b2.id);
    assert!(record.contains(&format!(" share={} ", a2.id)) && record.contains(" ipred=experiment"), "B2 not co-located by Gavel's prediction: {record}");
    set_load(fake, &[(a2.pid, 25), (b2.pid, 25)]);
    let (count, slowdown) = wait_learnt(&cluster, "the pair's slowdowns", |v| {
        let o = &v["interference"]["resnet18"]["resnet18"];
        let count = o["count"].as_f64().filter(|c| *c > 0.0)?;
        Some((count, o["sum_slowdown_a"].as_f64()? / count))
    });
    // One pair of one family: both orders in one entry.
    assert_eq!(count, 2.0);
    assert!((slowdown - 3.2).abs() < 0.35, "observed slowdown {slowdown}, expected 80/25 = 3.2");
    let log = cluster.slurmctld_log();
    let line = log.lines().find(|l| l.contains(&format!("learning: JobId={} (resnet18) shares a GPU with JobId={} (resnet18)", b2.id, a2.id))).unwrap_or_else(|| panic!("{log}"));
    println!("{line}");

    // 3. One user's pair does not move the prediction: B3 still joins A2 by the experiment.
    end(&cluster, &b2);
    let (id, stop) = submit(&cluster, "B3", &resnet);
    let b3 = started(&cluster, "B3", id, stop);
    let record = admin_comment(&cluster, b3.id);
    assert!(record.contains(&format!(" share={} ", a2.id)) && record.contains(" ipred=experiment"), "one user's pair moved the prediction for B3: {record}");
    set_load(fake, &[]);
    end(&cluster, &b3);
    end(&cluster, &a2);

    // 4. Datagrams from an address that is no node's are dropped before munge; forged reports
    //    are refused; the pair survives a restart.
    let stranger = std::net::UdpSocket::bind("127.0.0.2:0").expect("socket on 127.0.0.2");
    stranger.send_to(b"slurm-energy-use/1 job=1 node=n1 from=1 to=2 gpus=1 util_pct=1", ("127.0.0.1", port)).expect("send");
    let refused = wait_log_line(&cluster, 0, "GPU use report from 127.0.0.2");
    assert!(refused.contains("refused: not from an address of a node"), "{refused}");
    let log_len = cluster.slurmctld_log().len();
    cluster.restart_slurmctld().expect("restart slurmctld");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cluster.slurmctld_log().get(log_len..).unwrap_or_default().contains("1 shared pairs observed") {
        assert!(Instant::now() < deadline, "restarted slurmctld forgot the pair:\n{}", cluster.slurmctld_log());
        std::thread::sleep(Duration::from_millis(200));
    }
    // The restarted slurmctld's first refusal is logged at once (then at most one a minute).
    let forged = std::net::UdpSocket::bind("127.0.0.1:0").expect("socket");
    forged.send_to(b"slurm-energy-use/1 job=1 node=n1 from=1 to=2 gpus=1 util_pct=1", ("127.0.0.1", port)).expect("send");
    let refused = wait_log_line(&cluster, log_len, "GPU use report from 127.0.0.1");
    assert!(refused.contains("refused: munge: decode"), "{refused}");
    let log = cluster.slurmctld_log();
    assert!(!log.contains("internal error (panic"), "{log}");
    cluster.stop().expect("stop the cluster");
    println!("GPU use learning: solo {solo:.1} %, pair slowdown {slowdown:.2} observed, one user's history left the prediction alone; test {:.1} s", t0.elapsed().as_secs_f64());
}
