//! gpu_nvml.so in a live local Slurm cluster whose node has one fake V100, one A100 and two
//! H100s, each answering with its generation's support matrix, plus two controls an admin
//! restricted (`NO_PERMISSION`):
//!
//! | GPU | model | answers | control the plugin must pick |
//! |---|---|---|---|
//! | 0 | V100 | locked clocks `NO_PERMISSION` | application clocks |
//! | 1 | A100 | all supported | locked clocks |
//! | 2 | H100 | locked clocks `NO_PERMISSION`, application clocks `NOT_SUPPORTED` | power limit |
//! | 3 | H100 | application clocks `NOT_SUPPORTED` | locked clocks |
//!
//! (a) `srun --gpu-freq=1000`: during the step the fake's state file shows each GPU set through
//!     its control (and nothing else touched), slurmd's log names the control per GPU, and after
//!     the step every GPU is back at its defaults;
//! (b) `--gpu-freq=low` and SIGKILL of the step's slurmstepd: the settings stay; slurmd's next
//!     start undoes each with its own control.
//!
//! Skipped (with a printed reason) only when not root or when Slurm is not installed; fails
//! under `CI=true` instead.

use std::path::Path;
use std::time::{Duration, Instant};

use fake_nvml::{FakeNvml, State};
use slurm_testcluster::{ClusterConfig, LocalCluster, require_built, skip_live_test};

const GPUS: u32 = 4;
const FAKE_CONF: &str = "\
gpu_count = 4
cpu_count = 2
numa_nodes = 2
model.1 = A100
model.2 = H100
model.3 = H100
locked_clocks.0 = no_permission
locked_clocks.2 = no_permission
";

fn mknod_gpus(dir: &Path) {
    std::fs::create_dir_all(dir).expect("dev dir");
    for i in 0..GPUS {
        let path = dir.join(format!("nvidia{i}"));
        let status = std::process::Command::new("mknod").arg(&path).args(["c", "195", &i.to_string()]).status().expect("run mknod");
        assert!(status.success(), "mknod {}", path.display());
    }
}

/// What the test reads of one GPU: (application graphics clock, locked range, power limit).
type Seen = (u32, Option<(u32, u32)>, u32);

fn seen(state: &State) -> Vec<Seen> {
    state.gpus.iter().map(|g| (g.app_graphics_clock_mhz, g.locked_clocks_mhz, g.power_limit_mw)).collect()
}

/// Each GPU at its model's defaults: application clocks default, unlocked, default limit.
fn defaults(fake: &FakeNvml) -> Vec<Seen> {
    (0..GPUS as usize)
        .map(|i| {
            let c = fake.config.for_gpu(i);
            (c.default_graphics_clock_mhz, None, c.power_limit_default_mw)
        })
        .collect()
}

fn wait_for(fake: &FakeNvml, _what: &str, within: Duration, want: &[Seen]) -> Vec<Seen> {
    let deadline = Instant::now() + within;
    let mut last = Vec::new();
    while Instant::now() < deadline {
        if let Ok(s) = fake.state() {
            last = seen(&s);
            if last == want {
                return last;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    last
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn v100_a100_h100_each_get_their_control_and_get_it_back() {
    if skip_live_test("v100_a100_h100_each_get_their_control_and_get_it_back") {
        return;
    }
    let t0 = Instant::now();
    let work = tempfile::Builder::new().prefix("gres-generations-").tempdir().expect("temp dir");
    let plugins = work.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(require_built("libgpu_nvml.so"), plugins.join("gpu_nvml.so")).expect("copy gpu_nvml.so");
    let nvml_dir = work.path().join("nvml");
    fake_nvml::install_library(&require_built(fake_nvml::BUILT_LIBRARY_NAME), &nvml_dir).expect("install the fake NVML");
    std::fs::write(nvml_dir.join("fake-nvml.conf"), FAKE_CONF).unwrap();
    let dev = work.path().join("dev");
    mknod_gpus(&dev);
    let ledger = work.path().join("ledger");
    let fake = FakeNvml::for_library_dir(&nvml_dir).expect("fake NVML state");
    let mut cluster = LocalCluster::start(ClusterConfig {
        nodes: 1,
        gpus_per_node: GPUS,
        // Our gpu/nvml is what slurmd loads for AutoDetect=nvml; the node's GPUs are of three
        // types, so slurm.conf names them untyped.
        gpu_autodetect: Some("nvml".into()),
        plugin_dir: Some(plugins.clone()),
        daemon_env: vec![
            ("LD_LIBRARY_PATH".into(), nvml_dir.display().to_string()),
            ("SLURM_ENERGY_NVIDIA_DEV_DIR".into(), dev.display().to_string()),
            ("SLURM_ENERGY_CLOCK_LEDGER".into(), ledger.display().to_string()),
        ],
        ..ClusterConfig::default()
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    println!("cluster up after {:.1} s", t0.elapsed().as_secs_f64());
    let rest = defaults(&fake);
    assert_eq!(seen(&fake.state().expect("state")), rest, "the fake starts at each model's defaults");

    // (a) --gpu-freq=1000: 1005 MHz on each (the next supported clock up on all three models).
    let job = cluster.sbatch(&["--gres=gpu:4", "--wrap", "srun --gres=gpu:4 --gpu-freq=1000,verbose sleep 6"], "").expect("sbatch");
    let during_want: Vec<Seen> = vec![
        (1005, None, 300_000),          // V100: application clocks
        (1410, Some((210, 1005)), 400_000), // A100: locked from its lowest clock up to 1005
        (1980, None, 355_303),          // H100: power limit 700 W x 1005 / 1980
        (1980, Some((345, 1005)), 700_000), // H100: locked clocks
    ];
    let during = wait_for(&fake, "during", Duration::from_secs(60), &during_want);
    let state = cluster.wait_job_done(job, Duration::from_secs(60)).expect("job");
    let after = wait_for(&fake, "after", Duration::from_secs(10), &rest);
    let log = cluster.slurmd_log("n1");
    let control_lines: Vec<&str> = log.lines().filter(|l| l.contains(&format!("{job}.0")) && l.contains("clock control:")).collect();
    println!("(a) job {job} {state}\n  during: {during:?}\n  after:  {after:?}\n  {}", control_lines.join("\n  "));
    assert_eq!(state, "COMPLETED");
    assert_eq!(during, during_want, "each GPU through its control:\n{}", log);
    assert_eq!(after, rest, "every GPU back at its defaults");
    for (gpu, control) in [(0, "application clocks"), (1, "locked clocks"), (2, "power limit"), (3, "locked clocks")] {
        let want = format!("GPU {gpu}: clock control: {control}");
        assert!(control_lines.iter().any(|l| l.contains(&want)), "no '{want}' for job {job} in slurmd's log:\n{log}");
    }
    assert!(control_lines.iter().any(|l| l.contains("GPU 2: clock control: power limit (skipped nvmlDeviceSetGpuLockedClocks")), "{control_lines:?}");

    // (b) --gpu-freq=low, then SIGKILL of the step's slurmstepd: slurmd's start repairs.
    let job = cluster.sbatch(&["--gres=gpu:4", "--wrap", "srun --gres=gpu:4 --gpu-freq=low sleep 120"], "").expect("sbatch");
    let low_want: Vec<Seen> = vec![
        (135, None, 300_000),
        (1410, Some((210, 210)), 400_000),
        // 700 W x 345 / 1980 = 122 W, below the H100's 200 W floor.
        (1980, None, 200_000),
        (1980, Some((345, 345)), 700_000),
    ];
    let low = wait_for(&fake, "low", Duration::from_secs(60), &low_want);
    assert_eq!(low, low_want, "--gpu-freq=low through each control:\n{}", cluster.slurmd_log("n1"));
    let stepd = cluster.stepd_pid(&format!("{job}.0")).expect("slurmstepd of the step");
    // SAFETY: kill(2) of the one slurmstepd this test's cluster started for this step.
    assert_eq!(unsafe { libc::kill(stepd as i32, libc::SIGKILL) }, 0, "kill slurmstepd {stepd}");
    let _ = cluster.command("scancel").arg(job.to_string()).status();
    let _ = cluster.wait_job_done(job, Duration::from_secs(60));
    let stuck = seen(&fake.state().expect("state"));
    cluster.restart_slurmd("n1").expect("restart slurmd");
    let repaired = wait_for(&fake, "repaired", Duration::from_secs(30), &rest);
    println!("(b) job {job}: after SIGKILL of slurmstepd {stepd}: {stuck:?}\n  after slurmd restarted: {repaired:?}");
    assert_eq!(stuck, low_want, "the killed step's settings stay until a repair");
    assert_eq!(repaired, rest, "slurmd's start undoes each GPU's control:\n{}", cluster.slurmd_log("n1"));

    cluster.stop().expect("stop");
    println!("live generations test took {:.1} s", t0.elapsed().as_secs_f64());
}
