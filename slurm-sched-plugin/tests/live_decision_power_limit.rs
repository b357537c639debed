//! The power limit sched/energy chose reaches a GPU controlled by its power limit, live.
//!
//! An H100 (fake NVML: locked clocks `NO_PERMISSION`, application clocks `NOT_SUPPORTED`) is
//! controlled by its power limit. sched/energy picks a step of the measured ladder for an
//! `--energy-policy=efficiency` job: a clock and the limit that step was measured at. Both
//! travel with the job (`SLURM_ENERGY_CLOCK_MHZ`, `SLURM_ENERGY_POWER_LIMIT_MW` in the job's
//! SPANK environment, kept by spank_energy's job prolog under `PrologFlags=Contain`), and the
//! GPU must get exactly the limit of the decision record, not the clock's linear mapping
//! (`700 W x clock / 1980 MHz`) that the node used when only the clock travelled. After the
//! job the GPU is back at its default limit. A limit and a clock the user put into the
//! environment at submission are not taken.
//!
//! Skipped (printed) when not root, when Slurm or the measured data is missing; fails under
//! `CI=true` instead.

mod common;

use std::time::{Duration, Instant};

use common::{admin_comment, data_dir, fake_gpu_node, plugin_dir, users_own_spank_env};
use slurm_testcluster::{ClusterConfig, LocalCluster, require_built, skip_live_test};

/// The H100's default power limit in the fake (mW) and its default graphics clock (MHz).
const H100_DEFAULT_LIMIT_MW: u32 = 700_000;
const H100_DEFAULT_CLOCK_MHZ: u32 = 1980;

fn power_limit_mw(fake: &fake_nvml::FakeNvml) -> u32 {
    fake.state().expect("fake state").gpus[0].power_limit_mw
}

fn wait_limit(fake: &fake_nvml::FakeNvml, cluster: &LocalCluster, what: &str, done: impl Fn(u32) -> bool) -> u32 {
    let start = Instant::now();
    loop {
        let now = power_limit_mw(fake);
        if done(now) {
            println!("  {what}: {now} mW after {:.1} s", start.elapsed().as_secs_f64());
            return now;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "{what}: the H100's limit is {now} mW\n{}", cluster.slurmd_log("n1"));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A one-node cluster with a fake H100 (autodetected through the GPU plugin), the SPANK plugin
/// and `PrologFlags=Contain`, under `sched_type`. The work dir holds the fake NVML's state.
fn h100_cluster(sched_type: &str, data: &std::path::Path) -> (LocalCluster, fake_nvml::FakeNvml, tempfile::TempDir, tempfile::TempDir) {
    let spank = require_built("libspank_energy.so");
    let plugins = plugin_dir();
    let work = tempfile::Builder::new().prefix("decision-power-limit-").tempdir().expect("temp dir");
    let node = fake_gpu_node(work.path(), plugins.path(), 1, "model = H100\nlocked_clocks.0 = no_permission\ncpu_count = 2\nnuma_nodes = 1\n");
    assert_eq!(power_limit_mw(&node.fake), H100_DEFAULT_LIMIT_MW, "the fake H100's default limit");
    let gpu_type = node.gpu_type.clone();
    let toml = format!(
        "[sched]\ninterval_s = 1\ndebug = true\ndata_dir = \"{}\"\n\n[gpu_types.\"{gpu_type}\"]\nmodel = \"h100\"\ndefault_clock_mhz = {H100_DEFAULT_CLOCK_MHZ}\nmin_clock_mhz = 210\nmax_clock_mhz = {H100_DEFAULT_CLOCK_MHZ}\nidle_power_w = 70\nmax_power_w = 700\n",
        data.display()
    );
    // No GPU energy accounting here: only the decision's limit on the GPU is looked at.
    let cluster = LocalCluster::start(ClusterConfig {
        sched_type: sched_type.into(),
        extra_slurm_conf: vec!["PrologFlags=Contain".into()],
        with_accounting: false,
        ..node.cluster(plugins.path(), toml, &spank)
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    (cluster, node.fake, work, plugins)
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn the_planners_power_limit_reaches_an_h100() {
    const NAME: &str = "the_planners_power_limit_reaches_an_h100";
    if skip_live_test(NAME) {
        return;
    }
    let Some(data) = data_dir() else {
        return slurm_testcluster::skip_for(NAME, "measured data not found (set SLURM_ENERGY_DATA)");
    };
    let (cluster, fake, work, _plugins) = h100_cluster("sched/energy", &data);
    let t0 = Instant::now();

    // The user's own values of both entries (put into the job's SPANK environment by a plugin of
    // their own in their sbatch) are replaced by sched/energy's.
    let users_conf = users_own_spank_env(&cluster, &work.path().join("user"), &[("SLURM_ENERGY_POWER_LIMIT_MW", "250000"), ("SLURM_ENERGY_CLOCK_MHZ", "600")], &[&require_built("libspank_energy.so")]);
    let out = cluster
        .command("sbatch")
        .env("SLURM_CONF", &users_conf)
        .args(["-G", "1", "-t", "5", "--energy-policy=efficiency", "--energy-max-slowdown=2.0", "--parsable", "--wrap", "sleep 15"])
        .output()
        .expect("run sbatch");
    assert!(out.status.success(), "sbatch: {}", String::from_utf8_lossy(&out.stderr));
    let job: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("job id");
    let applied = wait_limit(&fake, &cluster, "the job's limit on the H100", |mw| mw != H100_DEFAULT_LIMIT_MW);
    let record = admin_comment(&cluster, job);
    println!("  decision record: {record}");
    let clock_mhz = model::decision::recorded_clock_mhz(&record).unwrap_or_else(|| panic!("no clock in the record: {record}"));
    let planned_w: f64 = model::decision::recorded_field(&record, "limit")
        .and_then(|v| v.strip_suffix('W'))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no power limit in the decision record: {record}"));
    let planned_mw = (planned_w * 1000.0).round() as u32;
    let linear_mw = (u64::from(H100_DEFAULT_LIMIT_MW) * u64::from(clock_mhz) / u64::from(H100_DEFAULT_CLOCK_MHZ)) as u32;
    println!("  planned {planned_mw} mW at {clock_mhz} MHz; the clock's linear limit would be {linear_mw} mW; applied {applied} mW");
    assert!(clock_mhz < H100_DEFAULT_CLOCK_MHZ, "efficiency at a 2.0 bound lowers the H100: {record}");
    // The test can tell the two apart only if they differ.
    assert!(planned_mw.abs_diff(linear_mw) > 10_000, "the ladder's limit {planned_mw} mW is within 10 W of the linear {linear_mw} mW");
    assert_eq!(applied, planned_mw, "the H100 got {applied} mW, the planner chose {planned_mw} mW (linear mapping: {linear_mw} mW)");

    let state = cluster.wait_job_done(job, Duration::from_secs(120)).expect("job done");
    assert_eq!(state, "COMPLETED");
    wait_limit(&fake, &cluster, "job over: the default limit back", |mw| mw == H100_DEFAULT_LIMIT_MW);
    let log = cluster.slurmd_log("n1");
    assert!(log.contains("power limit"), "{log}");
    println!("{NAME}: {:.1} s", t0.elapsed().as_secs_f64());
    cluster.stop().expect("stop");
}

/// Under another scheduler nothing replaces the user's `SLURM_SPANK_SLURM_ENERGY_*` entries: the
/// node must not take them for a decision (a user could otherwise set any clock or power limit
/// on a GPU, shared ones included, that the policy would not give). The values come from a SPANK
/// plugin of the user's own in their sbatch ([`users_own_spank_env`]).
#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn a_users_limit_is_not_taken_under_sched_backfill() {
    const NAME: &str = "a_users_limit_is_not_taken_under_sched_backfill";
    const USERS_LIMIT_MW: u32 = 250_000;
    if skip_live_test(NAME) {
        return;
    }
    let Some(data) = data_dir() else {
        return slurm_testcluster::skip_for(NAME, "measured data not found (set SLURM_ENERGY_DATA)");
    };
    let (cluster, fake, work, _plugins) = h100_cluster("sched/backfill", &data);
    let t0 = Instant::now();
    let limit = USERS_LIMIT_MW.to_string();
    let users_conf = users_own_spank_env(&cluster, &work.path().join("user"), &[("SLURM_ENERGY_POWER_LIMIT_MW", &limit), ("SLURM_ENERGY_CLOCK_MHZ", "600")], &[&require_built("libspank_energy.so")]);
    let out = cluster
        .command("sbatch")
        .env("SLURM_CONF", &users_conf)
        .args(["-G", "1", "-t", "5", "--parsable", "--wrap", "sleep 8"])
        .output()
        .expect("run sbatch");
    assert!(out.status.success(), "sbatch: {}", String::from_utf8_lossy(&out.stderr));
    let job: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("job id");
    // Watch the H100 for the whole job: the user's limit must never reach it.
    let done = std::sync::atomic::AtomicBool::new(false);
    let (state, seen) = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            let mut seen = std::collections::BTreeSet::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                seen.insert(power_limit_mw(&fake));
                std::thread::sleep(Duration::from_millis(50));
            }
            seen
        });
        let state = cluster.wait_job_done(job, Duration::from_secs(120));
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (state, watcher.join().expect("watcher"))
    });
    let state = state.expect("job done");
    assert!(!seen.contains(&USERS_LIMIT_MW), "the user's {USERS_LIMIT_MW} mW reached the H100 under sched/backfill ({seen:?})\n{}", cluster.slurmd_log("n1"));
    assert_eq!(state, "COMPLETED");
    println!("  limits seen on the H100 during the job: {seen:?} mW");
    let log = cluster.slurmd_log("n1");
    assert!(log.contains("SchedulerType is sched/backfill"), "the prolog says why it refused the value\n{log}");
    println!("{NAME}: {:.1} s", t0.elapsed().as_secs_f64());
    cluster.stop().expect("stop");
}
