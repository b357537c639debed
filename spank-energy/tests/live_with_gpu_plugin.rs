//! Both node plugins on one ledger, live: `gpu_nvml.so` (the bundle's GPU plugin, which alone
//! sees a bare `srun --gpu-freq`) and `spank_energy.so` (the policy clock of every step), with the
//! fake NVML on slurmd's library path, `AutoDetect=nvml`, and `SLURM_ENERGY_CLOCK_LEDGER` in
//! slurmd's environment (both plugins' default ledger location).
//!
//! - a batch job with `--energy-policy=efficiency` whose script runs `srun --gpu-freq=1200`:
//!   policy clock, then 1200 during the srun step (the job's explicit request beats its policy),
//!   then the policy clock again, then the default;
//! - a bare `srun --gpu-freq=1200 --energy-policy=efficiency`: 1200 during, the default after.
//!
//! Skipped (with a printed reason) when not root, when Slurm or the model's data is missing, or
//! when `libgpu_nvml.so` was not built in this target directory (`cargo test --workspace` builds
//! it for `gres-energy-plugin`'s tests; `cargo test -p spank-energy` alone does not).

use std::path::Path;
use std::time::{Duration, Instant};

use fake_nvml::FakeNvml;
use gpu_control::gpu_freq::parse_gpu_freq;
use gpu_control::{GpuControl, NvmlGpu};
use model::config::HintDefaults;
use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};
use spank_energy::clocks::{self, ClockArgs, PolicyModel};

const GPUS: u32 = 2;
const TIMEOUT: Duration = Duration::from_secs(60);

fn mknod_gpus(dir: &Path) {
    std::fs::create_dir_all(dir).expect("dev dir");
    for i in 0..GPUS {
        let path = dir.join(format!("nvidia{i}"));
        let status = std::process::Command::new("mknod").arg(&path).args(["c", "195", &i.to_string()]).status().expect("mknod");
        assert!(status.success(), "mknod {}", path.display());
    }
}

fn wait_clocks(fake: &FakeNvml, cluster: &LocalCluster, what: &str, pred: impl Fn(&[u32]) -> bool) {
    let start = Instant::now();
    loop {
        let c: Vec<u32> = fake.state().expect("state").gpus.iter().map(|g| g.target_graphics_clock_mhz()).collect();
        if pred(&c) {
            println!("  {what}: {c:?} after {:.1}s", start.elapsed().as_secs_f64());
            return;
        }
        if start.elapsed() > TIMEOUT {
            let log = cluster.slurmd_log("n1");
            let tail: Vec<&str> = log.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
            panic!("{what}: clocks still {c:?}\n{}", tail.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn explicit_srun_gpu_freq_through_gpu_nvml_beats_the_policy() {
    const NAME: &str = "explicit_srun_gpu_freq_through_gpu_nvml_beats_the_policy";
    if skip_live_test(NAME) {
        return;
    }
    let data = model::data::default_data_dir();
    if !data.join("zeus").is_dir() {
        return slurm_testcluster::skip_for(NAME, &format!("no model data at {}", data.display()));
    }
    let Some(gpu_plugin) = slurm_testcluster::built_artifact("libgpu_nvml.so") else {
        return slurm_testcluster::skip_for(NAME, "libgpu_nvml.so not built here (run the workspace's tests)");
    };
    let spank = slurm_testcluster::require_built("libspank_energy.so");
    let fake_lib = slurm_testcluster::require_built(fake_nvml::BUILT_LIBRARY_NAME);

    let work = std::env::temp_dir().join("spank-energy-clocks").join(format!("{}-gpu-plugin", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let plugins = work.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(&gpu_plugin, plugins.join("gpu_nvml.so")).expect("copy gpu_nvml.so");
    let nvml_dir = work.join("nvml");
    let lib = fake_nvml::install_library(&fake_lib, &nvml_dir).expect("install fake");
    std::fs::write(nvml_dir.join("fake-nvml.conf"), format!("gpu_count = {GPUS}\ncpu_count = 2\nnuma_nodes = 2\n")).unwrap();
    let dev = work.join("dev");
    mknod_gpus(&dev);
    let ledger = work.join("ledger");
    let fake = FakeNvml::for_library_dir(&nvml_dir).expect("fake");
    let gpu = NvmlGpu::open(&lib).expect("open fake");
    let default_mhz = gpu.default_application_clocks_mhz(0).expect("defaults").graphics_mhz;
    let explicit = clocks::explicit_clocks(&gpu, 0, &parse_gpu_freq("1200").expect("spec")).expect("resolve").graphics_mhz;
    let model = PolicyModel::load(&ClockArgs { data_dir: Some(data.clone()), ..ClockArgs::default() }).expect("model");
    let values = [("policy".to_string(), "efficiency".to_string()), ("max_slowdown".to_string(), "2.0".to_string())].into();
    let hints = clocks::hints_from_values(&values, &HintDefaults::default());
    let gt = clocks::gpu_type_of(&gpu, 0).expect("gpu type");
    let policy = clocks::policy_clocks(&gpu, 0, model.clock_mhz(&hints, &gt, 1)).expect("policy").graphics_mhz;
    assert!(policy < explicit && explicit < default_mhz, "{policy} {explicit} {default_mhz}");
    // Slurm's type name for the fake's model, as stock gpu/nvml derives it.
    let gpu_type: String = gpu.name(0).expect("name").trim().chars().map(|c| if c == ' ' { '_' } else { c.to_ascii_lowercase() }).collect();
    drop(gpu);

    // No clock_ledger= and no nvml=: both plugins find the ledger in SLURM_ENERGY_CLOCK_LEDGER
    // and libnvidia-ml.so on slurmd's library path.
    let plugstack = format!("required {} data_dir={}\n", spank.display(), data.display());
    let cluster = LocalCluster::start(ClusterConfig {
        nodes: 1,
        gpus_per_node: GPUS,
        gpu_autodetect: Some("nvml".into()),
        gpu_type: Some(gpu_type),
        plugin_dir: Some(plugins),
        with_accounting: false,
        extra_files: vec![("plugstack.conf".to_string(), plugstack)],
        daemon_env: vec![
            ("LD_LIBRARY_PATH".into(), nvml_dir.display().to_string()),
            ("SLURM_ENERGY_NVIDIA_DEV_DIR".into(), dev.display().to_string()),
            ("SLURM_ENERGY_CLOCK_LEDGER".into(), ledger.display().to_string()),
        ],
        ..ClusterConfig::default()
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    let t0 = Instant::now();

    // The script moves on when the test has seen each phase (marker files; bounded loops).
    let go = cluster.job_dir().join("go");
    let done = cluster.job_dir().join("done");
    let wait_for = |f: &Path| format!("for i in $(seq 600); do [ -e {} ] && break; sleep 0.2; done", f.display());
    let script = format!("{}; srun --gpu-freq=1200 sleep 5; {}", wait_for(&go), wait_for(&done));
    let job = cluster
        .sbatch(&["--gres=gpu:1", "--energy-policy=efficiency", "--energy-max-slowdown=2.0", "--wrap", &script], "")
        .expect("sbatch");
    wait_clocks(&fake, &cluster, "batch step: policy", |c| c[0] == policy);
    std::fs::write(&go, "").expect("marker");
    wait_clocks(&fake, &cluster, "srun --gpu-freq inside: explicit beats the job's policy", |c| c[0] == explicit);
    wait_clocks(&fake, &cluster, "srun step over: the batch step's policy again", |c| c[0] == policy);
    std::fs::write(&done, "").expect("marker");
    let state = cluster.wait_job_done(job, Duration::from_secs(120)).expect("job done");
    assert_eq!(state, "COMPLETED");
    wait_clocks(&fake, &cluster, "job over: default", |c| c[0] == default_mhz);

    let mut srun = cluster
        .command("srun")
        .args(["--gres=gpu:1", "--energy-policy=efficiency", "--energy-max-slowdown=2.0", "--gpu-freq=1200", "sleep", "5"])
        .spawn()
        .expect("srun");
    wait_clocks(&fake, &cluster, "bare srun --gpu-freq: explicit", |c| c.contains(&explicit));
    assert!(srun.wait().expect("wait srun").success());
    wait_clocks(&fake, &cluster, "bare srun over: default", |c| c.iter().all(|&m| m == default_mhz));
    let left = gpu_control::arbiter::Arbiter::open(&ledger).expect("ledger").ledger().expect("read").requests;
    assert!(left.is_empty(), "{left:?}");
    println!("{NAME}: {:.1}s", t0.elapsed().as_secs_f64());
    cluster.stop().expect("stop");
    let _ = std::fs::remove_dir_all(&work);
}
