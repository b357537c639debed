//! The cluster power cap from the site's file, live (docs/power-cap.md): one node of two fake
//! V100s under sched/energy with `[power_cap] file`, the jobs `--energy-policy=performance`
//! (whose clock is the default one unless the cap forbids it).
//!
//! 1. No file: the job starts at the default clock; its record's `pred_w` is its full power.
//! 2. The file caps the cluster's GPU power below the two idle GPUs plus that power: the next
//!    job starts at a lower clock whose predicted power fits, and its GPU gets that clock.
//! 3. A cap below any clock's power: the next job waits.
//! 4. The file lifts the cap (`none`): that job starts, at the default clock.
//!
//! Each change of the cap in force is in slurmctld's log.

use std::path::Path;
use std::time::{Duration, Instant};

use model::decision::{recorded_clock_mhz, recorded_field};
use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};

mod common;
use common::{admin_comment, data_dir, fake_gpu_node, plugin_dir, spank_plugin, squeue_field, wait_running_on};

const NAME: &str = "a_power_cap_file_lowers_new_jobs_clocks_and_holds_starts";
/// The default clock of the `[gpu_types]` entry below (GpuSpec's default, a V100).
const DEFAULT_CLOCK_MHZ: u32 = 1312;
const IDLE_W: f64 = 40.0;
const GPUS: u32 = 2;

fn submit(cluster: &LocalCluster) -> u32 {
    cluster.sbatch(&["--energy-policy=performance", "-G", "1", "-t", "5", "--wrap", "sleep 120"], "").unwrap_or_else(|e| panic!("sbatch: {e}"))
}

/// Writes the cap file and waits until slurmctld's log says the cap changed (`expect`).
fn set_cap(cluster: &LocalCluster, file: &Path, content: &str, expect: &str) {
    let before = cluster.slurmctld_log().matches(expect).count();
    // A new file (rename) so that its modification time changes even within one second.
    let tmp = file.with_extension("new");
    std::fs::write(&tmp, content).expect("write the cap file");
    std::fs::rename(&tmp, file).expect("rename the cap file");
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.slurmctld_log().matches(expect).count() <= before {
        assert!(Instant::now() < deadline, "'{expect}' not logged 30 s after writing {content:?}:\n{}", cluster.slurmctld_log());
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn end(cluster: &LocalCluster, job: u32) {
    cluster.command("scancel").arg(job.to_string()).status().expect("scancel");
    cluster.wait_job_done(job, Duration::from_secs(60)).expect("job ended");
}

fn gpu_clocks(fake: &fake_nvml::FakeNvml) -> Vec<u32> {
    fake.state().expect("fake state").gpus.iter().map(|g| g.target_graphics_clock_mhz()).collect()
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn a_power_cap_file_lowers_new_jobs_clocks_and_holds_starts() {
    if skip_live_test(NAME) {
        return;
    }
    let Some(spank) = spank_plugin() else {
        return slurm_testcluster::skip_for(NAME, "libspank_energy.so not built (run `cargo test -p spank-energy -p slurm-sched-plugin`)");
    };
    let Some(data) = data_dir() else {
        return slurm_testcluster::skip_for(NAME, "measured data not found (set SLURM_ENERGY_DATA)");
    };
    let t0 = Instant::now();
    let plugins = plugin_dir();
    let work = tempfile::Builder::new().prefix("power-cap-live-").tempdir().expect("temp dir");
    let node = fake_gpu_node(work.path(), plugins.path(), GPUS, "cpu_count = 2\nnuma_nodes = 1\n");
    let cap_file = work.path().join("power-cap");
    let toml = format!(
        "[sched]\ninterval_s = 1\ndebug = true\ndata_dir = \"{}\"\n\n[gpu_types.\"{}\"]\nmodel = \"v100\"\nidle_power_w = {IDLE_W}\n\n[power_cap]\nfile = \"{}\"\nrefresh_s = 1\n",
        data.display(),
        node.gpu_type,
        cap_file.display()
    );
    let cluster = LocalCluster::start(ClusterConfig { with_accounting: false, ..node.cluster(plugins.path(), toml, &spank) }).unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    assert!(cluster.slurmctld_log().contains("not readable"), "a missing cap file is logged at start:\n{}", cluster.slurmctld_log());

    // 1. No cap.
    let a = submit(&cluster);
    wait_running_on(&cluster, a, Duration::from_secs(60));
    let record = admin_comment(&cluster, a);
    assert_eq!(recorded_clock_mhz(&record), Some(DEFAULT_CLOCK_MHZ), "a performance job runs at the default clock without a cap: {record}");
    let full_w: f64 = recorded_field(&record, "pred_w").and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("no pred_w: {record}"));
    assert!(full_w > IDLE_W + 50.0, "full power {full_w} W: {record}");
    end(&cluster, a);

    // 2. A cap that leaves 70 % of the job's power above idle.
    let cap_w = (GPUS as f64 * IDLE_W + 0.7 * (full_w - IDLE_W)).round();
    set_cap(&cluster, &cap_file, &format!("# test\n{cap_w}\n"), &format!("cluster GPU power cap now {cap_w:.0} W"));
    let b = submit(&cluster);
    wait_running_on(&cluster, b, Duration::from_secs(60));
    let record = admin_comment(&cluster, b);
    let clock_mhz = recorded_clock_mhz(&record).unwrap_or_else(|| panic!("no clock: {record}"));
    let capped_w: f64 = recorded_field(&record, "pred_w").and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("no pred_w: {record}"));
    println!("  cap {cap_w} W: clock {clock_mhz} MHz, predicted {capped_w} W (uncapped {DEFAULT_CLOCK_MHZ} MHz, {full_w} W)");
    assert!(clock_mhz < DEFAULT_CLOCK_MHZ, "under the cap the job runs slower: {record}");
    // The record rounds to 1 W.
    assert!(GPUS as f64 * IDLE_W + capped_w - IDLE_W <= cap_w + 1.0, "predicted cluster power {} W over the cap {cap_w} W: {record}", GPUS as f64 * IDLE_W + capped_w - IDLE_W);
    // The GPU takes the nearest clock it supports (a V100's are 7 to 8 MHz apart).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !gpu_clocks(&node.fake).iter().any(|&mhz| mhz.abs_diff(clock_mhz) <= 8) {
        assert!(Instant::now() < deadline, "no GPU at {clock_mhz} MHz: {:?}\n{}", gpu_clocks(&node.fake), cluster.slurmd_log("n1"));
        std::thread::sleep(Duration::from_millis(200));
    }
    end(&cluster, b);

    // 3. Below any clock's power: the job waits.
    let tiny_w = GPUS as f64 * IDLE_W + 1.0;
    set_cap(&cluster, &cap_file, &format!("{tiny_w}\n"), &format!("cluster GPU power cap now {tiny_w:.0} W"));
    let c = submit(&cluster);
    std::thread::sleep(Duration::from_secs(8));
    let waiting = squeue_field(&cluster, c, "%T %r");
    assert!(waiting.starts_with("PENDING"), "a job no clock of which fits the cap waits: {waiting}\n{}", cluster.slurmctld_log());

    // 4. The cap lifted: it starts at the default clock.
    set_cap(&cluster, &cap_file, "none\n", "cluster GPU power cap lifted");
    wait_running_on(&cluster, c, Duration::from_secs(60));
    let record = admin_comment(&cluster, c);
    assert_eq!(recorded_clock_mhz(&record), Some(DEFAULT_CLOCK_MHZ), "with the cap lifted, the default clock: {record}");
    end(&cluster, c);
    println!("{NAME}: {:.1} s", t0.elapsed().as_secs_f64());
    cluster.stop().expect("stop");
}
