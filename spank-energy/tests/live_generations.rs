//! The planner's clock on a node with a V100, an A100 and an H100 (fake NVML), live: a batch job
//! with `--energy-policy=efficiency` gets, through `spank_energy.so`, each GPU's policy setting
//! through the control that GPU supports, and everything back after the job:
//!
//! | GPU | model | answers | control | setting asserted in the fake's state file |
//! |---|---|---|---|---|
//! | 0 | V100 | locked clocks `NO_PERMISSION` | application clocks | the model's clock (Zeus V100 curves) |
//! | 1 | A100 | all supported | locked clocks | lowest..the model's clock (A40 stand-in curves) |
//! | 2 | H100 | locked clocks `NO_PERMISSION`, application clocks `NOT_SUPPORTED` | power limit | the ladder step's measured limit as a fraction of 700 W |
//!
//! Skipped (printed) when not root, when Slurm or the model's data is missing; fails under
//! `CI=true` instead.

use std::time::{Duration, Instant};

use fake_nvml::FakeNvml;
use gpu_control::NvmlGpu;
use model::config::HintDefaults;
use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};
use spank_energy::clocks::{self, Choice, ClockArgs, PolicyModel};

const FAKE_CONF: &str = "\
gpu_count = 3
model.1 = A100
model.2 = H100
locked_clocks.0 = no_permission
locked_clocks.2 = no_permission
";

/// (application graphics clock, locked range, power limit) of each GPU.
type Seen = Vec<(u32, Option<(u32, u32)>, u32)>;

fn seen(fake: &FakeNvml) -> Seen {
    fake.state().expect("fake state").gpus.iter().map(|g| (g.app_graphics_clock_mhz, g.locked_clocks_mhz, g.power_limit_mw)).collect()
}

fn wait_seen(fake: &FakeNvml, cluster: &LocalCluster, what: &str, want: &Seen) {
    let start = Instant::now();
    loop {
        let now = seen(fake);
        if &now == want {
            println!("  {what}: {now:?} after {:.1}s", start.elapsed().as_secs_f64());
            return;
        }
        if start.elapsed() > Duration::from_secs(60) {
            panic!("{what}: {now:?}, want {want:?}\n{}", cluster.slurmd_log("n1"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn policy_settings_reach_v100_a100_h100_through_their_controls() {
    const NAME: &str = "policy_settings_reach_v100_a100_h100_through_their_controls";
    if skip_live_test(NAME) {
        return;
    }
    let data = model::data::default_data_dir();
    if !data.join("zeus").is_dir() {
        return slurm_testcluster::skip_for(NAME, &format!("no model data at {} (set SLURM_ENERGY_DATA)", data.display()));
    }
    let work = std::env::temp_dir().join("spank-energy-generations").join(std::process::id().to_string());
    let _ = std::fs::remove_dir_all(&work);
    let lib_dir = work.join("lib");
    std::fs::create_dir_all(&lib_dir).unwrap();
    std::fs::write(lib_dir.join("fake-nvml.conf"), FAKE_CONF).unwrap();
    let built = fake_nvml::find_built_library().expect("libfake_nvml.so next to the test binary");
    let lib = fake_nvml::install_library(&built, &lib_dir).unwrap();
    let fake = FakeNvml::for_library_dir(&lib_dir).unwrap();
    let ledger = work.join("ledger");
    let rest = seen(&fake);

    // What the plugin must ask for: the same model, the same GPUs.
    let gpu = NvmlGpu::open(&lib).expect("open fake");
    let model = PolicyModel::load(&ClockArgs { data_dir: Some(data.clone()), ..ClockArgs::default() }).expect("model");
    let values = [("policy".to_string(), "efficiency".to_string()), ("max_slowdown".to_string(), "2.0".to_string())].into();
    let hints = clocks::hints_from_values(&values, &HintDefaults::default());
    let (settings, errors) = clocks::step_settings(&gpu, &[0, 1, 2], &Choice::Hints(hints), Some(&model));
    assert!(errors.is_empty() && settings.len() == 3, "{errors:?}");
    drop(gpu);
    let (v100, a100, h100) = (settings[0].1, settings[1].1, settings[2].1);
    let h100_limit_mw = h100.power_limit_mw.expect("the H100's setting carries the ladder's limit");
    println!("policy settings: V100 {v100:?}, A100 {a100:?}, H100 {h100:?}");
    assert!(v100.clocks_mhz.graphics_mhz < 1312 && a100.clocks_mhz.graphics_mhz < 1410, "efficiency lowers the clocks");
    assert!((200_000..700_000).contains(&h100_limit_mw), "{h100_limit_mw}");
    let during: Seen = vec![
        (v100.clocks_mhz.graphics_mhz, None, 300_000),
        (1410, Some((210, a100.clocks_mhz.graphics_mhz)), 400_000),
        (1980, None, h100_limit_mw),
    ];

    let plugstack = format!("required {} clock_ledger={} nvml={} data_dir={}\n", slurm_testcluster::require_built("libspank_energy.so").display(), ledger.display(), lib.display(), data.display());
    let cluster = LocalCluster::start(ClusterConfig {
        nodes: 1,
        gpus_per_node: 3,
        with_accounting: false,
        extra_files: vec![("plugstack.conf".to_string(), plugstack)],
        ..ClusterConfig::default()
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    let t0 = Instant::now();
    let job = cluster
        .sbatch(&["--gres=gpu:3", "--energy-policy=efficiency", "--energy-max-slowdown=2.0", "--wrap", "sleep 8"], "")
        .expect("sbatch");
    wait_seen(&fake, &cluster, "batch step: each GPU's policy setting through its control", &during);
    let state = cluster.wait_job_done(job, Duration::from_secs(120)).expect("job done");
    assert_eq!(state, "COMPLETED");
    wait_seen(&fake, &cluster, "job over: every control undone", &rest);
    let log = cluster.slurmd_log("n1");
    for want in ["GPU 0: clock control: application clocks", "GPU 1: clock control: locked clocks", "GPU 2: clock control: power limit"] {
        assert!(log.lines().any(|l| l.contains(&format!("job {job} step batch")) && l.contains(want)), "no '{want}' for job {job}:\n{log}");
    }
    let left = gpu_control::arbiter::Arbiter::open(&ledger).expect("ledger").ledger().expect("read");
    assert!(left.requests.is_empty() && left.gpus.is_empty(), "{left:?}");
    println!("{NAME}: {:.1}s", t0.elapsed().as_secs_f64());
    cluster.stop().expect("stop");
    let _ = std::fs::remove_dir_all(&work);
}
