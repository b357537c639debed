//! `--gpu-freq` with `gres/shard`, live: a one-node cluster with one fake GPU split in two
//! shards, `spank_energy.so` in plugstack.conf (clock arbiter on the node, fake NVML) and
//! `CliFilterPlugins=cli_filter/energy` with `cli_filter_energy.so` in the plugin directory.
//!
//! 1. Without the filter (the same cluster, a copy of slurm.conf without the CliFilterPlugins
//!    line for that one client), `sbatch --gres=shard:1 --gpu-freq=1200` is refused.
//! 2. With it, the same sbatch is accepted with the info line, the job carries no TresFreq, and
//!    its SPANK environment has `_SLURM_SPANK_OPTION_energy_energy_gpu_freq=1200` (and no
//!    `SLURM_GPU_FREQ`), and its GPU runs at the clock `--gpu-freq=1200` resolves to, then back
//!    at the default.
//! 3. `sbatch --gres=gpu:1 --gpu-freq=1200` keeps its TresFreq (untouched, no info line).
//! 4. `srun --gres=shard:1 --gpu-freq=1200` inside a shard batch job: the step runs at 1200.
//!
//! Skipped (with a printed reason) when not root or when Slurm is missing.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fake_nvml::FakeNvml;
use gpu_control::gpu_freq::parse_gpu_freq;
use gpu_control::{GpuControl, NvmlGpu};
use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};

const JOB_TIMEOUT: Duration = Duration::from_secs(40);
const CLOCK_TIMEOUT: Duration = Duration::from_secs(30);
const INFO: &str = "cli_filter/energy: --gpu-freq=1200 with gres/shard: applied by spank_energy's clock arbiter (as --energy-gpu-freq)";

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

struct Rig {
    dir: PathBuf,
    fake: FakeNvml,
    cluster: Option<LocalCluster>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(c) = self.cluster.take() {
            let _ = c.stop();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Rig {
    fn cluster(&self) -> &LocalCluster {
        self.cluster.as_ref().expect("cluster started")
    }

    fn clocks_mhz(&self) -> Vec<u32> {
        self.fake
            .state()
            .expect("fake state")
            .gpus
            .iter()
            .map(|g| g.target_graphics_clock_mhz())
            .collect()
    }

    fn wait_clock(&self, what: &str, want_mhz: u32) {
        let start = Instant::now();
        loop {
            let c = self.clocks_mhz();
            if c[0] == want_mhz {
                println!(
                    "  {what}: GPU 0 at {want_mhz} MHz after {:.1}s",
                    start.elapsed().as_secs_f64()
                );
                return;
            }
            if start.elapsed() > CLOCK_TIMEOUT {
                panic!(
                    "{what}: clocks {c:?}, want {want_mhz} MHz\nslurmd log tail:\n{}",
                    tail(&self.cluster().slurmd_log("n1"), 40)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// sbatch with `args`; (job id if accepted, stderr).
    fn sbatch(&self, conf: Option<&PathBuf>, args: &[&str]) -> (Option<u32>, String) {
        let mut cmd = self.cluster().command("sbatch");
        if let Some(conf) = conf {
            cmd.env("SLURM_CONF", conf);
        }
        let out = cmd
            .arg("--parsable")
            .args(args)
            .output()
            .expect("run sbatch");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let id = out
            .status
            .success()
            .then(|| {
                String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .split(';')
                    .next()
                    .and_then(|s| s.parse().ok())
            })
            .flatten();
        (id, stderr)
    }

    fn show_job(&self, job: u32) -> String {
        let out = self
            .cluster()
            .command("scontrol")
            .args(["show", "job", &job.to_string()])
            .output()
            .expect("scontrol");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn wait_completed(&self, job: u32) -> String {
        let state = self
            .cluster()
            .wait_job_done(job, JOB_TIMEOUT)
            .expect("job done");
        let out = self.cluster().job_output(job).unwrap_or_default();
        assert_eq!(
            state,
            "COMPLETED",
            "job {job}: {state}\n{out}\n{}",
            tail(&self.cluster().slurmd_log("n1"), 40)
        );
        out
    }
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn gpu_freq_with_shards_goes_to_the_clock_arbiter() {
    if skip_live_test("gpu_freq_with_shards_goes_to_the_clock_arbiter") {
        return;
    }
    let t0 = Instant::now();
    let dir = std::env::temp_dir()
        .join("cli-filter-energy")
        .join(std::process::id().to_string());
    let _ = std::fs::remove_dir_all(&dir);
    let lib_dir = dir.join("lib");
    let plugin_dir = dir.join("plugins");
    std::fs::create_dir_all(&lib_dir).expect("lib dir");
    std::fs::create_dir_all(&plugin_dir).expect("plugin dir");
    std::fs::copy(
        slurm_testcluster::require_built("libcli_filter_energy.so"),
        plugin_dir.join("cli_filter_energy.so"),
    )
    .expect("install cli_filter_energy.so");
    std::fs::write(lib_dir.join("fake-nvml.conf"), "gpu_count = 1\n").expect("fake conf");
    let fake_built =
        fake_nvml::find_built_library().expect("libfake_nvml.so next to the test binary");
    let nvml_lib = fake_nvml::install_library(&fake_built, &lib_dir).expect("install fake NVML");
    let fake = FakeNvml::for_library_dir(&lib_dir).expect("fake state");
    let mut rig = Rig {
        dir: dir.clone(),
        fake,
        cluster: None,
    };

    let gpu = NvmlGpu::open(&nvml_lib).expect("open fake NVML");
    let default_mhz = gpu
        .default_application_clocks_mhz(0)
        .expect("defaults")
        .graphics_mhz;
    let want_mhz =
        spank_energy::clocks::explicit_clocks(&gpu, 0, &parse_gpu_freq("1200").expect("spec"))
            .expect("resolve 1200")
            .graphics_mhz;
    assert_ne!(
        want_mhz, default_mhz,
        "1200 must differ from the default clock for the test to mean something"
    );

    let mut plugstack = format!(
        "required {} clock_ledger={} nvml={}",
        slurm_testcluster::require_built("libspank_energy.so").display(),
        dir.join("ledger").display(),
        nvml_lib.display()
    );
    let data = model::data::default_data_dir();
    if data.is_dir() {
        plugstack.push_str(&format!(" data_dir={}", data.display()));
    }
    plugstack.push('\n');
    let cluster = LocalCluster::start(ClusterConfig {
        nodes: 1,
        gpus_per_node: 1,
        shards_per_gpu: 2,
        with_accounting: false,
        plugin_dir: Some(plugin_dir),
        extra_slurm_conf: vec!["CliFilterPlugins=cli_filter/energy".to_string()],
        extra_files: vec![("plugstack.conf".to_string(), plugstack)],
        ..ClusterConfig::default()
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    rig.cluster = Some(cluster);
    println!("  cluster up after {:.1}s", t0.elapsed().as_secs_f64());

    // (1) Stock behaviour: the same cluster's slurm.conf without the CliFilterPlugins line.
    let conf = std::fs::read_to_string(rig.cluster().conf_path()).expect("slurm.conf");
    assert!(conf.contains("CliFilterPlugins=cli_filter/energy"));
    let stock: String = conf
        .lines()
        .filter(|l| !l.starts_with("CliFilterPlugins"))
        .map(|l| format!("{l}\n"))
        .collect();
    let stock_conf = rig.cluster().conf_dir().join("slurm-no-cli-filter.conf");
    std::fs::write(&stock_conf, stock).expect("write stock conf");
    let (id, err) = rig.sbatch(
        Some(&stock_conf),
        &["--gres=shard:1", "--gpu-freq=1200", "--wrap", "true"],
    );
    println!("  (1) without the filter: {}", err.trim());
    assert_eq!(id, None, "stock sbatch accepted --gpu-freq with a shard");

    // (2) With the filter: accepted, info line, no TresFreq, the step's GPU at 1200.
    let stop = rig.cluster().job_dir().join("stop-2");
    // sbatch exports the job's SPANK environment as SLURM_SPANK_<name>=<value>.
    let script = format!(
        "echo spank_env=$SLURM_SPANK__SLURM_SPANK_OPTION_energy_energy_gpu_freq gpu_freq=$SLURM_GPU_FREQ; for i in $(seq 150); do [ -e {} ] && break; sleep 0.2; done",
        stop.display()
    );
    let (id, err) = rig.sbatch(
        None,
        &["--gres=shard:1", "--gpu-freq=1200", "--wrap", &script],
    );
    println!("  (2) with the filter: {}", err.trim());
    let job = id.unwrap_or_else(|| panic!("sbatch with the filter refused: {err}"));
    assert!(err.contains(INFO), "no info line in {err:?}");
    let shown = rig.show_job(job);
    assert!(
        !shown.contains("TresFreq="),
        "job {job} still has a TresFreq:\n{shown}"
    );
    rig.wait_clock("(2) shard batch job with --gpu-freq=1200", want_mhz);
    std::fs::write(&stop, "").expect("marker");
    let out = rig.wait_completed(job);
    println!("  (2) job output: {}", out.trim());
    assert!(
        out.contains("spank_env=1200 gpu_freq="),
        "job {job} did not get --energy-gpu-freq=1200 alone: {out:?}"
    );
    rig.wait_clock("(2) job ended: default", default_mhz);

    // (3) No shard: --gpu-freq untouched.
    let (id, err) = rig.sbatch(
        None,
        &[
            "--hold",
            "--gres=gpu:1",
            "--gpu-freq=1200",
            "--wrap",
            "true",
        ],
    );
    let job = id.unwrap_or_else(|| panic!("sbatch --gres=gpu:1 --gpu-freq=1200 refused: {err}"));
    assert!(
        !err.contains("cli_filter/energy"),
        "filter spoke for a job without shards: {err}"
    );
    let shown = rig.show_job(job);
    let tres_freq = shown
        .split_whitespace()
        .find(|w| w.starts_with("TresFreq="))
        .unwrap_or("");
    println!("  (3) --gres=gpu:1 job {job}: {tres_freq}");
    assert_eq!(tres_freq, "TresFreq=gpu:1200", "job {job}:\n{shown}");
    let _ = rig
        .cluster()
        .command("scancel")
        .arg(job.to_string())
        .status();

    // (4) srun inside a shard batch job (the batch step itself asks for no clock).
    let (id, err) = rig.sbatch(
        None,
        &[
            "--gres=shard:1",
            "--wrap",
            "srun --gres=shard:1 --gpu-freq=1200 sleep 4",
        ],
    );
    let job = id.unwrap_or_else(|| panic!("sbatch for the srun case refused: {err}"));
    rig.wait_clock("(4) srun --gres=shard:1 --gpu-freq=1200 step", want_mhz);
    let out = rig.wait_completed(job);
    println!("  (4) job output: {}", out.trim());
    assert!(out.contains(INFO), "srun printed no info line: {out:?}");
    rig.wait_clock("(4) job ended: default", default_mhz);
    println!(
        "gpu_freq_with_shards_goes_to_the_clock_arbiter: {:.1}s",
        t0.elapsed().as_secs_f64()
    );
}
