//! `slurm-energy demo`: a real local Slurm cluster with the bundle's plugins loaded, a small mixed
//! workload with different energy hints, and one line per job of what happened.
//!
//! The steps are separate functions so tests (and later demos) can reuse them:
//! [`prepare_environment`] (root check, `tools/slurm-env.sh`), [`build_plugins`] (cargo),
//! [`DemoCluster::start`] (slurm-testcluster with `sched/energy`, `plugstack.conf` and
//! `energy.toml`; extra plugin files and daemon environment for GPU plugins),
//! [`DemoCluster::run_workload`] and [`print_table`]. [`run_demo`] chains them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use slurm_testcluster::{ClusterConfig, LocalCluster};

/// Nodes and fake GPUs of the demo cluster.
pub const DEMO_NODES: u32 = 3;
pub const DEMO_GPUS_PER_NODE: u32 = 4;

/// The configuration the demo's sched/energy reads: the project's commented `etc/energy.toml`,
/// with a shorter cycle so that a short demo shows several cycles.
const ENERGY_TOML: &str = include_str!("../../etc/energy.toml");
const DEMO_INTERVAL_S: &str = "interval_s = 2";

/// One job of the demo workload.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoJob {
    pub name: String,
    pub gpus: u32,
    pub sleep_s: u32,
    /// `--energy-*` options as given to sbatch, e.g. `--energy-policy=efficiency`.
    pub hints: Vec<String>,
}

impl DemoJob {
    pub fn new(name: &str, gpus: u32, sleep_s: u32, hints: &[&str]) -> DemoJob {
        DemoJob { name: name.into(), gpus, sleep_s, hints: hints.iter().map(|h| h.to_string()).collect() }
    }

    /// The hints in short form (`efficiency slow<=1.5 share=allow`), `-` for none.
    pub fn hints_short(&self) -> String {
        let short: Vec<String> = self
            .hints
            .iter()
            .map(|h| {
                let h = h.trim_start_matches("--energy-");
                if let Some(v) = h.strip_prefix("policy=") {
                    v.to_string()
                } else if let Some(v) = h.strip_prefix("max-slowdown=") {
                    format!("slow<={v}")
                } else {
                    h.to_string()
                }
            })
            .collect();
        if short.is_empty() { "-".into() } else { short.join(" ") }
    }
}

/// The default workload: 10 jobs, 1 to 4 GPUs, 4 to 12 s, every hint at least once, more GPUs
/// than the cluster has at once so that some jobs wait and the planner has choices.
pub fn default_workload() -> Vec<DemoJob> {
    vec![
        DemoJob::new("train-bert", 4, 10, &["--energy-policy=performance"]),
        DemoJob::new("train-resnet", 2, 8, &["--energy-policy=efficiency", "--energy-max-slowdown=1.5"]),
        DemoJob::new("eval-small", 1, 4, &["--energy-policy=efficiency", "--energy-share=allow"]),
        DemoJob::new("eval-small2", 1, 4, &["--energy-policy=efficiency", "--energy-share=allow"]),
        DemoJob::new("finetune", 2, 6, &["--energy-policy=balanced", "--energy-share=deny"]),
        DemoJob::new("sweep-a", 1, 5, &["--energy-max-slowdown=1.2", "--energy-tag=sweep"]),
        DemoJob::new("sweep-b", 1, 5, &["--energy-max-slowdown=1.2", "--energy-tag=sweep"]),
        DemoJob::new("no-hints", 2, 6, &[]),
        DemoJob::new("big-train", 4, 8, &["--energy-policy=balanced"]),
        DemoJob::new("notebook", 1, 12, &["--energy-policy=performance", "--energy-share=deny"]),
    ]
}

/// How the plugins are obtained.
#[derive(Clone, Debug)]
pub enum Plugins {
    /// `cargo build -p slurm-sched-plugin -p spank-energy` in the project (release unless
    /// `debug`), into `target_dir` (default: `$CARGO_TARGET_DIR`, else `<project>/target`).
    Build { release: bool, target_dir: Option<PathBuf> },
    /// Already built: `sched_energy.so` and `spank_energy.so` (or their `lib*.so` names) here.
    Prebuilt(PathBuf),
}

/// Everything [`run_demo`] needs.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// The project's source tree (with `tools/slurm-env.sh` and `etc/energy.toml`).
    pub project_dir: PathBuf,
    /// Run `tools/slurm-env.sh` first (packages + configured Slurm tree). Without it
    /// `$SLURM_SRC_DIR` must already be set when plugins are built.
    pub install: bool,
    pub plugins: Plugins,
    pub workload: Vec<DemoJob>,
    /// Leave the cluster running after the table.
    pub keep: bool,
    /// How long to wait for the whole workload.
    pub timeout: Duration,
    /// Show a progress bar (on a terminal).
    pub progress: bool,
    /// Measured data (zeus/, gavel/, ...) for sched/energy's predictor; none: default clocks.
    pub data_dir: Option<PathBuf>,
}

/// Where the project is: the source tree this binary was built from, else the current directory.
pub fn default_project_dir() -> PathBuf {
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf);
    let is_project = |d: &Path| d.join("tools").join("slurm-env.sh").is_file() && d.join("Cargo.toml").is_file();
    match built_from.filter(|d| is_project(d)) {
        Some(d) => d,
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
    }
}

/// Fails unless the process runs as root (the cluster starts Slurm's daemons and creates device
/// nodes).
pub fn require_root() -> Result<(), String> {
    let uid = std::fs::metadata("/proc/self").map(|m| m.uid()).map_err(|e| format!("cannot tell the user id (/proc/self: {e})"))?;
    if uid != 0 {
        return Err(format!(
            "the demo must run as root (uid {uid}): it installs Slurm's packages, starts munged, MariaDB, slurmdbd, \
             slurmctld and three slurmd, and creates fake GPU device nodes; try `sudo -E` or a root shell"
        ));
    }
    Ok(())
}

/// Runs `tools/slurm-env.sh` (its progress goes to stderr) and returns the Slurm source tree it
/// prints as `SLURM_SRC_DIR=...`.
pub fn prepare_environment(project_dir: &Path) -> Result<PathBuf, String> {
    let script = project_dir.join("tools").join("slurm-env.sh");
    if !script.is_file() {
        return Err(format!("{} not found: pass --project-dir with the project's source tree", script.display()));
    }
    eprintln!("slurm-energy demo: preparing Slurm ({}; the first run installs packages and configures the Slurm source tree)", script.display());
    let mut child = Command::new("bash")
        .arg(&script)
        .current_dir(project_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("run {}: {e}", script.display()))?;
    let mut src_dir = None;
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            match line.strip_prefix("SLURM_SRC_DIR=") {
                Some(dir) => src_dir = Some(PathBuf::from(dir.trim())),
                None => eprintln!("{line}"),
            }
        }
    }
    let status = child.wait().map_err(|e| format!("wait for {}: {e}", script.display()))?;
    if !status.success() {
        return Err(format!("{} failed ({status}); see its messages above", script.display()));
    }
    src_dir.ok_or_else(|| format!("{} printed no SLURM_SRC_DIR= line", script.display()))
}

/// The built plugin files.
#[derive(Clone, Debug)]
pub struct PluginFiles {
    pub sched_energy: PathBuf,
    pub spank_energy: PathBuf,
    /// The node side (GPU plugin, energy plugin, fake NVML), when it was built.
    pub gpu: Option<GpuPluginFiles>,
}

/// The node side of the bundle and the fake NVML the demo's GPUs are simulated by.
#[derive(Clone, Debug)]
pub struct GpuPluginFiles {
    pub gpu_nvml: PathBuf,
    pub acct_gather_energy_nvml: PathBuf,
    /// `libfake_nvml.so`: installed as the demo nodes' `libnvidia-ml.so` (never on a real cluster).
    pub fake_nvml_lib: PathBuf,
    /// `fake-nvml-ctl`: the demo's jobs put load on their GPUs with it.
    pub fake_nvml_ctl: PathBuf,
}

impl GpuPluginFiles {
    /// The four files in `dir` (cargo's output dir), or `None` when the GPU plugin is not there.
    pub fn in_dir(dir: &Path) -> Result<Option<GpuPluginFiles>, String> {
        let gpu_nvml = dir.join("libgpu_nvml.so");
        if !gpu_nvml.is_file() {
            return Ok(None);
        }
        let need = |name: &str| {
            let p = dir.join(name);
            if p.is_file() { Ok(p) } else { Err(format!("{} is missing (libgpu_nvml.so is there): build fake-nvml and acct-gather-energy-nvml too", p.display())) }
        };
        Ok(Some(GpuPluginFiles {
            gpu_nvml,
            acct_gather_energy_nvml: need("libacct_gather_energy_nvml.so")?,
            fake_nvml_lib: need("libfake_nvml.so")?,
            fake_nvml_ctl: need("fake-nvml-ctl")?,
        }))
    }
}

impl PluginFiles {
    /// Finds `sched_energy.so`/`libsched_energy.so` and the same for spank_energy in `dir`.
    pub fn in_dir(dir: &Path) -> Result<PluginFiles, String> {
        let find = |name: &str| {
            [dir.join(format!("{name}.so")), dir.join(format!("lib{name}.so"))]
                .into_iter()
                .find(|p| p.is_file())
                .ok_or_else(|| format!("neither {name}.so nor lib{name}.so in {}", dir.display()))
        };
        Ok(PluginFiles { sched_energy: find("sched_energy")?, spank_energy: find("spank_energy")?, gpu: GpuPluginFiles::in_dir(dir)? })
    }
}

/// What the demo builds: both controller-side plugins, the node side, and the fake NVML.
pub const BUILD_PACKAGES: [&str; 5] = ["slurm-sched-plugin", "spank-energy", "gpu-nvml-plugin", "acct-gather-energy-nvml", "fake-nvml"];

/// Builds `sched_energy.so`, `spank_energy.so`, the GPU and energy plugins and the fake NVML
/// with cargo against the Slurm tree `slurm_src`.
pub fn build_plugins(project_dir: &Path, slurm_src: Option<&Path>, release: bool, target_dir: Option<&Path>) -> Result<PluginFiles, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = match target_dir {
        Some(d) => d.to_path_buf(),
        None => std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| project_dir.join("target")),
    };
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(project_dir).arg("build").args(BUILD_PACKAGES.iter().flat_map(|p| ["-p", p]));
    if release {
        cmd.arg("--release");
    }
    cmd.arg("--target-dir").arg(&target);
    if let Some(src) = slurm_src {
        cmd.env("SLURM_SRC_DIR", src);
    } else if std::env::var_os("SLURM_SRC_DIR").is_none() {
        return Err("SLURM_SRC_DIR is not set and tools/slurm-env.sh was not run: cannot build the plugins".into());
    }
    eprintln!(
        "slurm-energy demo: building the plugins (cargo build{} -p {})",
        if release { " --release" } else { "" },
        BUILD_PACKAGES.join(" -p ")
    );
    let status = cmd.stdin(Stdio::null()).status().map_err(|e| format!("run {}: {e} (is cargo installed?)", cargo.to_string_lossy()))?;
    if !status.success() {
        return Err(format!("building the plugins failed ({status})"));
    }
    PluginFiles::in_dir(&target.join(if release { "release" } else { "debug" }))
}

/// What the demo cluster looks like beyond the defaults. GPU plugins (a `gpu_nvml.so`, a fake
/// `libnvidia-ml.so`) come in through `extra_plugins`, `daemon_env` and `extra_files`.
#[derive(Clone, Debug, Default)]
pub struct DemoSetup {
    pub plugins: Option<PluginFiles>,
    /// More files copied into the plugin dir (source, file name there).
    pub extra_plugins: Vec<(PathBuf, String)>,
    /// Environment of every Slurm daemon (e.g. `LD_LIBRARY_PATH` for a fake NVML).
    pub daemon_env: Vec<(String, String)>,
    /// Files next to slurm.conf beyond energy.toml and plugstack.conf (e.g. a gres.conf).
    pub extra_files: Vec<(String, String)>,
    /// Lines appended to slurm.conf (e.g. `AcctGatherEnergyType=...`).
    pub extra_slurm_conf: Vec<String>,
    /// Measured data for sched/energy's predictor (`[sched] data_dir`); none: default clocks.
    pub data_dir: Option<PathBuf>,
    /// CPUs each node offers (default: the harness's 4); more lets more small jobs run at once.
    pub cpus_per_node: Option<u32>,
    /// `SchedulerType` (default `sched/energy`); `sched/backfill` runs the same cluster with
    /// Slurm's own scheduler, to compare.
    pub sched_type: Option<String>,
    /// `SchedulerParameters` (default `sched_interval=-1,defer`, what sched/energy wants).
    pub scheduler_parameters: Option<String>,
    /// How slurmctld and slurmd run: in the foreground (the default), or as sites run them
    /// from their systemd units (daemonised, `--systemd` where the release has it).
    pub daemon_mode: slurm_testcluster::DaemonMode,
}

/// Product name of the demo's simulated GPUs (the fake NVML's V100 model).
pub const FAKE_GPU_NAME: &str = "Tesla V100-SXM2-32GB";
/// GPU utilisation a demo job puts on each of its GPUs while it runs (%).
pub const DEMO_LOAD_PCT: u32 = 90;

/// The demo's simulated GPUs: the fake `libnvidia-ml.so` on slurmd's library path (so the real
/// `gpu_nvml.so`, energy plugin and SPANK clock code run unchanged), [`DEMO_GPUS_PER_NODE`] V100s
/// per node with state of their own (`<dir>/state/<node>`), `nvidiaN` character devices, and
/// a clock ledger per node. Jobs make load with `fake-nvml-ctl` (see [`Self::job_script`]).
pub struct FakeGpuSite {
    dir: tempfile::TempDir,
    ctl: PathBuf,
    /// GRES type the nodes report (`tesla_v100-sxm2-32gb`).
    pub type_name: String,
}

impl FakeGpuSite {
    pub fn create(files: &GpuPluginFiles) -> Result<FakeGpuSite, String> {
        let dir = tempfile::Builder::new().prefix("slurm-energy-demo-gpus-").tempdir().map_err(|e| format!("create the fake GPU dir: {e}"))?;
        let base = dir.path();
        let nvml = base.join("nvml");
        let out = Command::new(&files.fake_nvml_ctl)
            .arg("install")
            .arg(&nvml)
            .arg("--lib")
            .arg(&files.fake_nvml_lib)
            .output()
            .map_err(|e| format!("run {}: {e}", files.fake_nvml_ctl.display()))?;
        if !out.status.success() {
            return Err(format!("fake-nvml-ctl install: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let config = format!(
            "# slurm-energy demo: {DEMO_GPUS_PER_NODE} simulated GPUs per node\ngpu_count = {DEMO_GPUS_PER_NODE}\nname = {FAKE_GPU_NAME}\ncpu_count = {cpus}\nnuma_nodes = 1\n"
        );
        std::fs::write(nvml.join("fake-nvml.conf"), config).map_err(|e| format!("write fake-nvml.conf: {e}"))?;
        let dev = base.join("dev");
        std::fs::create_dir_all(&dev).map_err(|e| format!("create {}: {e}", dev.display()))?;
        for i in 0..DEMO_GPUS_PER_NODE {
            let path = dev.join(format!("nvidia{i}"));
            let status = Command::new("mknod")
                .arg(&path)
                .args(["c", "195", &i.to_string()])
                .status()
                .map_err(|e| format!("run mknod: {e}"))?;
            if !status.success() {
                return Err(format!("mknod {} failed ({status})", path.display()));
            }
        }
        for sub in ["state", "ledger"] {
            std::fs::create_dir_all(base.join(sub)).map_err(|e| format!("create {sub} dir: {e}"))?;
        }
        Ok(FakeGpuSite { dir, ctl: files.fake_nvml_ctl.clone(), type_name: gpu_control::gres_type::slurm_type_name(FAKE_GPU_NAME) })
    }

    /// The fake NVML's configuration (what `fake-nvml-ctl --config` takes).
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("nvml").join("fake-nvml.conf")
    }

    /// The fake GPU state of one node (what `fake-nvml-ctl --state-dir` takes).
    pub fn state_dir(&self, node: &str) -> PathBuf {
        self.dir.path().join("state").join(node)
    }

    /// The clock ledger directory of one node (`SLURM_ENERGY_CLOCK_LEDGER` of its slurmd).
    pub fn ledger_dir(&self, node: &str) -> PathBuf {
        self.dir.path().join("ledger").join(node)
    }

    /// `fake-nvml-ctl` on one node's GPUs; add the command (`show`, `fail RULE`, ...).
    pub fn ctl(&self, node: &str) -> Command {
        let mut cmd = Command::new(&self.ctl);
        cmd.arg("--config").arg(self.dir.path().join("nvml").join("fake-nvml.conf")).arg("--state-dir").arg(self.state_dir(node));
        cmd
    }

    /// Environment of the Slurm daemons (slurmd's `%n` is its node name: one GPU state and one
    /// clock ledger per node, as on separate machines).
    pub fn daemon_env(&self) -> Vec<(String, String)> {
        let base = self.dir.path();
        vec![
            ("LD_LIBRARY_PATH".into(), base.join("nvml").display().to_string()),
            ("FAKE_NVML_CONFIG".into(), base.join("nvml").join("fake-nvml.conf").display().to_string()),
            ("FAKE_NVML_STATE_DIR".into(), format!("{}/%n", base.join("state").display())),
            ("SLURM_ENERGY_NVIDIA_DEV_DIR".into(), base.join("dev").display().to_string()),
            ("SLURM_ENERGY_CLOCK_LEDGER".into(), format!("{}/%n", base.join("ledger").display())),
        ]
    }

    /// slurm.conf lines: the bundle's energy plugin, polled often enough for a short demo.
    pub fn slurm_conf_lines() -> Vec<String> {
        vec![
            "AcctGatherEnergyType=acct_gather_energy/nvml".into(),
            "AcctGatherNodeFreq=30".into(),
            "JobAcctGatherFrequency=task=5".into(),
            // The batch step's energy then shows on the job's own sacct line.
            "PrologFlags=Contain".into(),
        ]
    }

    /// A demo job's batch script: put [`DEMO_LOAD_PCT`] % load on the job's GPUs, print the
    /// fake's line for its first GPU (with the application clock spank_energy set before the
    /// script started; see [`parse_app_clock_mhz`]), work for `sleep_s`, take the load off.
    pub fn job_script(&self, sleep_s: u32) -> String {
        let nvml = self.dir.path().join("nvml");
        let script = r#"#!/bin/sh
ctl="@CTL@ --config @CONF@ --state-dir @STATE@/$SLURMD_NODENAME"
gpus=$(echo "$SLURM_JOB_GPUS" | tr , ' ')
for g in $gpus; do $ctl set-util "$g" @LOAD@; done
echo "GPUs $gpus on $SLURMD_NODENAME"
first=${gpus%% *}
$ctl show | grep "^gpu $first:"
sleep @SLEEP@
for g in $gpus; do $ctl set-util "$g" 0; done
"#;
        script
            .replace("@CTL@", &self.ctl.display().to_string())
            .replace("@CONF@", &nvml.join("fake-nvml.conf").display().to_string())
            .replace("@STATE@", &self.dir.path().join("state").display().to_string())
            .replace("@LOAD@", &DEMO_LOAD_PCT.to_string())
            .replace("@SLEEP@", &sleep_s.to_string())
    }
}

/// The graphics clock a busy GPU targets in a `fake-nvml-ctl show` line: the top of the locked
/// range (`... locked 135-1057 ...`, the V100's first clock control) if clocks are locked, else
/// the application clock (`... app 877/1312 MHz ...`).
pub fn parse_app_clock_mhz(output: &str) -> Option<u32> {
    output.lines().filter(|l| l.starts_with("gpu ")).find_map(|l| {
        let locked = l.split(" locked ").nth(1).and_then(|r| r.split_whitespace().next()).and_then(|r| r.split_once('-')).and_then(|(_, hi)| hi.parse().ok());
        if locked.is_some() {
            return locked;
        }
        let after = l.split(" app ").nth(1)?;
        let pair = after.split_whitespace().next()?;
        pair.split('/').nth(1)?.parse().ok()
    })
}

/// The local cluster of the demo, with the plugin dir it loads from.
pub struct DemoCluster {
    pub cluster: LocalCluster,
    plugin_dir: tempfile::TempDir,
    /// The simulated GPUs, when the node-side plugins are loaded.
    gpus: Option<FakeGpuSite>,
}

/// One finished job, as `sacct` recorded it.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoRow {
    pub job_id: u32,
    pub job: DemoJob,
    pub nodes: String,
    pub state: String,
    pub elapsed: String,
    /// sched/energy's decision record (the job's AdminComment), in full.
    pub decision: String,
    /// `ConsumedEnergyRaw` (J): the GPU energy acct_gather_energy/nvml counted over the job's
    /// own GPUs (none without the node-side plugins).
    pub energy_j: Option<f64>,
    /// Application clock of the job's first GPU while its script ran (MHz), as the fake NVML
    /// showed it: what spank_energy applied.
    pub gpu_clock_mhz: Option<u32>,
}

impl DemoRow {
    /// The decision record without its prefix, the nodes (shown apart) and the score breakdown.
    pub fn decision_short(&self) -> String {
        if self.decision.is_empty() {
            return "-".into();
        }
        let fields: BTreeMap<&str, &str> =
            self.decision.trim_start_matches("energy:").split_whitespace().filter_map(|kv| kv.split_once('=')).collect();
        let mut s = String::new();
        for key in ["policy", "clock", "share", "slow", "pred_kwh"] {
            if let Some(v) = fields.get(key) {
                let _ = write!(s, "{}{key}={v}", if s.is_empty() { "" } else { " " });
            }
        }
        if s.is_empty() { self.decision.clone() } else { s }
    }
}

impl DemoCluster {
    /// Starts 3 nodes x 4 fake GPUs with accounting, `SchedulerType=sched/energy`, the SPANK
    /// plugin in plugstack.conf and the project's energy.toml; with `gpus`, also `gpu_nvml.so`
    /// (`AutoDetect=nvml`) and `acct_gather_energy_nvml.so` over the fake NVML.
    pub fn start(project_energy_toml: &str, setup: &DemoSetup, gpus: Option<FakeGpuSite>) -> Result<DemoCluster, String> {
        let plugins = setup.plugins.as_ref().ok_or("no plugins given")?;
        let plugin_dir = tempfile::Builder::new()
            .prefix("slurm-energy-demo-plugins-")
            .tempdir()
            .map_err(|e| format!("create the plugin dir: {e}"))?;
        let mut files = vec![(plugins.sched_energy.clone(), "sched_energy.so".to_string()), (plugins.spank_energy.clone(), "spank_energy.so".to_string())];
        files.extend(setup.extra_plugins.iter().cloned());
        let mut daemon_env = setup.daemon_env.clone();
        let mut extra_slurm_conf = setup.extra_slurm_conf.clone();
        if let (Some(site), Some(gpu_files)) = (&gpus, &plugins.gpu) {
            files.push((gpu_files.gpu_nvml.clone(), "gpu_nvml.so".into()));
            files.push((gpu_files.acct_gather_energy_nvml.clone(), "acct_gather_energy_nvml.so".into()));
            daemon_env.extend(site.daemon_env());
            extra_slurm_conf.extend(FakeGpuSite::slurm_conf_lines());
        }
        for (src, name) in &files {
            std::fs::copy(src, plugin_dir.path().join(name)).map_err(|e| format!("copy {} into the plugin dir: {e}", src.display()))?;
        }
        let plugstack = format!("required {} max_defer=12h max_slowdown=3.0\n", plugin_dir.path().join("spank_energy.so").display());
        let gpu_type = gpus.as_ref().map(|g| g.type_name.clone());
        let energy_toml = demo_energy_toml(project_energy_toml, setup.data_dir.as_deref(), gpu_type.as_deref());
        let mut extra_files = vec![("energy.toml".to_string(), energy_toml), ("plugstack.conf".to_string(), plugstack)];
        extra_files.extend(setup.extra_files.iter().cloned());
        let cfg = ClusterConfig {
            nodes: DEMO_NODES,
            gpus_per_node: DEMO_GPUS_PER_NODE,
            plugin_dir: Some(plugin_dir.path().to_path_buf()),
            sched_type: setup.sched_type.clone().unwrap_or_else(|| "sched/energy".into()),
            scheduler_parameters: Some(setup.scheduler_parameters.clone().unwrap_or_else(|| "sched_interval=-1,defer".into())),
            extra_files,
            extra_slurm_conf,
            daemon_env,
            gpu_autodetect: gpu_type.as_ref().map(|_| "nvml".to_string()),
            gpu_type,
            with_accounting: true,
            cpus_per_node: setup.cpus_per_node.unwrap_or(ClusterConfig::default().cpus_per_node),
            daemon_mode: setup.daemon_mode,
            ..ClusterConfig::default()
        };
        let cluster = LocalCluster::start(cfg).map_err(|e| format!("the local cluster did not start: {e}"))?;
        Ok(DemoCluster { cluster, plugin_dir, gpus })
    }

    /// Submits the workload, waits for every job to end (with a progress bar when `progress`),
    /// and returns one row per job from `sacct`.
    pub fn run_workload(&self, workload: &[DemoJob], timeout: Duration, progress: bool) -> Result<Vec<DemoRow>, String> {
        let mut ids = Vec::with_capacity(workload.len());
        for job in workload {
            let mut args = vec!["-J".to_string(), job.name.clone(), format!("--gres=gpu:{}", job.gpus), "-t".into(), "5".into()];
            args.extend(job.hints.iter().cloned());
            let script = match &self.gpus {
                Some(site) => site.job_script(job.sleep_s),
                None => {
                    args.extend(["--wrap".to_string(), format!("echo GPUs $CUDA_VISIBLE_DEVICES on $SLURMD_NODENAME; sleep {}", job.sleep_s)]);
                    String::new()
                }
            };
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let id = self.cluster.sbatch(&refs, &script).map_err(|e| format!("sbatch {}: {e}", job.name))?;
            ids.push(id);
        }
        self.wait_all(&ids, timeout, progress)?;
        let mut rows = Vec::with_capacity(ids.len());
        for (&id, job) in ids.iter().zip(workload) {
            self.cluster.wait_accounted(id, Duration::from_secs(60)).map_err(|e| e.to_string())?;
            let line = self
                .cluster
                .sacct(id, "NodeList,State,Elapsed,ConsumedEnergyRaw,AdminComment")
                .map_err(|e| format!("sacct for job {id}: {e}"))?;
            // AdminComment is last and may hold anything but a newline.
            let mut f = line.lines().next().unwrap_or_default().splitn(5, '|');
            let mut next = || f.next().unwrap_or_default().trim().to_string();
            let (nodes, state, elapsed, energy, decision) = (next(), next(), next(), next(), next());
            let gpu_clock_mhz = self.cluster.job_output(id).ok().as_deref().and_then(parse_app_clock_mhz);
            rows.push(DemoRow { job_id: id, job: job.clone(), nodes, state, elapsed, decision, energy_j: energy.parse().ok(), gpu_clock_mhz });
        }
        Ok(rows)
    }

    fn wait_all(&self, ids: &[u32], timeout: Duration, progress: bool) -> Result<(), String> {
        let bar = if progress { ProgressBar::new(ids.len() as u64) } else { ProgressBar::hidden() };
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} jobs done  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        let deadline = Instant::now() + timeout;
        loop {
            let states = self.job_states()?;
            let (mut done, mut running, mut pending) = (0, 0, 0);
            for id in ids {
                match states.get(id).map(String::as_str) {
                    None => done += 1, // slurmctld forgot it: long over
                    Some("PENDING") => pending += 1,
                    Some("RUNNING" | "CONFIGURING" | "COMPLETING") => running += 1,
                    Some(_) => done += 1,
                }
            }
            bar.set_position(done);
            bar.set_message(format!("{running} running, {pending} pending"));
            if done as usize == ids.len() {
                bar.finish_and_clear();
                return Ok(());
            }
            if Instant::now() >= deadline {
                bar.abandon();
                return Err(format!(
                    "{} of {} jobs still not done after {} s ({running} running, {pending} pending); slurmctld log: {}",
                    ids.len() - done as usize,
                    ids.len(),
                    timeout.as_secs(),
                    self.cluster.base_dir().join("log").join("slurmctld.log").display()
                ));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Job id -> state for every job slurmctld still knows.
    fn job_states(&self) -> Result<BTreeMap<u32, String>, String> {
        let out = self.cluster.command("squeue").args(["-h", "-t", "all", "-o", "%i|%T"]).output().map_err(|e| format!("squeue: {e}"))?;
        if !out.status.success() {
            return Err(format!("squeue failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let (id, state) = l.split_once('|')?;
                Some((id.trim().parse().ok()?, state.trim().to_string()))
            })
            .collect())
    }

    /// The simulated GPUs, when the node-side plugins are loaded.
    pub fn gpus(&self) -> Option<&FakeGpuSite> {
        self.gpus.as_ref()
    }

    /// Leaves every daemon running and the files in place; returns how to use and stop it.
    pub fn keep_running(self) -> String {
        let DemoCluster { cluster, plugin_dir, gpus } = self;
        let mut created = vec![plugin_dir.keep()];
        // The fake NVML the kept daemons load stays too (and goes with the rest at cleanup).
        if let Some(site) = gpus {
            created.push(site.dir.keep());
        }
        let text = keep_text(&cluster, &created);
        // Not dropped: dropping would stop the daemons and remove the base dir.
        std::mem::forget(cluster);
        text
    }

    /// Stops every daemon (by pid) and removes the cluster's files.
    pub fn stop(self) -> Result<(), String> {
        self.cluster.stop().map_err(|e| format!("stopping the cluster: {e}"))
    }
}

/// How to use a cluster left running, and how to stop it by its daemons' pids and remove what
/// the demo created: the cluster's base dir and the `created` dirs (plugins, fake GPUs).
pub fn keep_text(cluster: &LocalCluster, created: &[PathBuf]) -> String {
    keep_instructions(&cluster.conf_path(), cluster.base_dir(), &cluster.pids(), created)
}

/// [`keep_text`] from the cluster's slurm.conf, base dir and daemons.
pub fn keep_instructions(conf: &Path, base: &Path, pids: &[(String, u32)], created: &[PathBuf]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "The cluster keeps running (--keep). Use it with:");
    let _ = writeln!(s, "  export SLURM_CONF={}", shell_quote(conf));
    let _ = writeln!(s, "  sinfo; squeue");
    let _ = writeln!(s, "  sbatch --gres=gpu:2 --energy-policy=efficiency --energy-share=allow --wrap 'sleep 30'");
    let _ = writeln!(s, "  sacct -X -o JobID,JobName,State,NodeList,AdminComment%100");
    let _ = writeln!(s, "Logs: {}/log (slurmctld.log: sched/energy's decisions and cycle statistics)", base.display());
    let _ = writeln!(s, "Daemons (pid):");
    for (name, pid) in pids {
        let _ = writeln!(s, "  {name:<12} {pid}");
    }
    let reversed: Vec<String> = pids.iter().rev().map(|(_, pid)| pid.to_string()).collect();
    let _ = writeln!(s, "Stop it (slurmd first, munged last), then remove its files:");
    let _ = writeln!(s, "  for pid in {}; do kill $pid; while kill -0 $pid 2>/dev/null; do sleep 0.2; done; done", reversed.join(" "));
    let dirs: Vec<String> = std::iter::once(base).chain(created.iter().map(PathBuf::as_path)).map(shell_quote).collect();
    let _ = writeln!(s, "  rm -rf -- {}", dirs.join(" "));
    s
}

/// `path` as one shell word (single-quoted when it holds anything but plain path characters).
fn shell_quote(path: &Path) -> String {
    let text = path.display().to_string();
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+:,=@".contains(c)) {
        text
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// The project's energy.toml with the demo's cycle interval (2 s instead of 5 s) and, when
/// given, the measured data the predictor is fitted to (so that clocks are chosen per job).
pub fn demo_energy_toml(project: &str, data_dir: Option<&Path>, gpu_type: Option<&str>) -> String {
    let mut added = String::from(DEMO_INTERVAL_S);
    added.push_str("   # the demo's: cycles every 2 s");
    if let Some(dir) = data_dir {
        // A TOML basic string: escape backslashes and quotes.
        let quoted = dir.display().to_string().replace('\\', "\\\\").replace('"', "\\\"");
        let _ = write!(added, "\ndata_dir = \"{quoted}\"   # the demo's: measured data");
    }
    let mut lines: Vec<String> = project.lines().map(str::to_string).collect();
    if let Some(i) = lines.iter().position(|l| l.trim_start().starts_with("interval_s")) {
        lines[i] = added;
    } else if let Some(i) = lines.iter().position(|l| l.trim() == "[sched]") {
        lines.insert(i + 1, added);
    } else {
        lines.insert(0, format!("[sched]\n{added}"));
    }
    if data_dir.is_some() {
        // The demo's GPUs (untyped `gpu`, or the type NVML autodetection gives the fake V100s):
        // predict them as V100s, which the data covers.
        lines.push(String::new());
        let table = gpu_type.map_or("gpu".to_string(), |t| format!("\"{t}\""));
        lines.push(format!("[gpu_types.{table}]   # the demo's: fake GPUs predicted as measured V100s"));
        lines.push("model = \"v100\"".into());
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// A column of the job table: header and the cell of a row.
type Column = (&'static str, fn(&DemoRow) -> String);

fn columns() -> Vec<Column> {
    vec![
        ("JOBID", |r| r.job_id.to_string()),
        ("NAME", |r| r.job.name.clone()),
        ("GPUS", |r| r.job.gpus.to_string()),
        ("HINTS", |r| r.job.hints_short()),
        ("NODES", |r| r.nodes.clone()),
        ("STATE", |r| r.state.clone()),
        ("ELAPSED", |r| r.elapsed.clone()),
        ("CLOCK_MHZ", |r| r.gpu_clock_mhz.map_or("-".into(), |c| c.to_string())),
        ("GPU_ENERGY_J", |r| r.energy_j.map_or("-".into(), |j| format!("{j:.0}"))),
        ("DECISION (sched/energy)", |r| r.decision_short()),
    ]
}

/// The job table, one line per job, columns aligned.
pub fn format_table(rows: &[DemoRow]) -> String {
    let cols = columns();
    let cells: Vec<Vec<String>> = rows.iter().map(|r| cols.iter().map(|(_, f)| f(r)).collect()).collect();
    let widths: Vec<usize> =
        cols.iter().enumerate().map(|(i, (h, _))| cells.iter().map(|c| c[i].len()).chain([h.len()]).max().unwrap_or(0)).collect();
    let mut s = String::new();
    let line = |s: &mut String, items: Vec<&str>| {
        let last = items.len().saturating_sub(1);
        for (i, item) in items.iter().enumerate() {
            if i == last {
                let _ = write!(s, "{item}");
            } else {
                let _ = write!(s, "{item:<w$}  ", w = widths[i]);
            }
        }
        s.push('\n');
    };
    line(&mut s, cols.iter().map(|(h, _)| *h).collect());
    for row in &cells {
        line(&mut s, row.iter().map(String::as_str).collect());
    }
    s
}

pub fn print_table(rows: &[DemoRow]) {
    print!("{}", format_table(rows));
}

/// What [`run_demo`] did.
pub struct DemoReport {
    pub rows: Vec<DemoRow>,
    /// With `keep`: how to use and stop the cluster.
    pub kept: Option<String>,
}

/// The whole demo: prepare, build, start, run the workload, print the table, stop (or keep).
pub fn run_demo(opts: &DemoOptions) -> Result<DemoReport, String> {
    require_root()?;
    let slurm_src = if opts.install { Some(prepare_environment(&opts.project_dir)?) } else { None };
    let plugins = match &opts.plugins {
        Plugins::Build { release, target_dir } => build_plugins(&opts.project_dir, slurm_src.as_deref(), *release, target_dir.as_deref())?,
        Plugins::Prebuilt(dir) => PluginFiles::in_dir(dir)?,
    };
    let energy_toml_path = opts.project_dir.join("etc").join("energy.toml");
    let energy_toml = std::fs::read_to_string(&energy_toml_path).unwrap_or_else(|_| ENERGY_TOML.to_string());
    eprintln!(
        "slurm-energy demo: starting a local cluster ({DEMO_NODES} nodes x {DEMO_GPUS_PER_NODE} simulated GPUs, sched/energy, spank_energy, gpu_nvml, acct_gather_energy/nvml, accounting)"
    );
    let t0 = Instant::now();
    let data_dir = opts.data_dir.as_deref().filter(|d| d.join("zeus").is_dir()).map(|d| std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf()));
    if let Some(dir) = &data_dir {
        eprintln!("slurm-energy demo: sched/energy predicts clocks and power from {}", dir.display());
    }
    let gpus = match &plugins.gpu {
        Some(files) => Some(FakeGpuSite::create(files)?),
        None => {
            eprintln!("slurm-energy demo: no gpu_nvml.so built: GPU energy and clocks are not shown");
            None
        }
    };
    let demo = DemoCluster::start(&energy_toml, &DemoSetup { plugins: Some(plugins), data_dir, ..DemoSetup::default() }, gpus)?;
    eprintln!(
        "slurm-energy demo: cluster up in {:.1} s ({}); submitting {} jobs",
        t0.elapsed().as_secs_f64(),
        demo.cluster.base_dir().display(),
        opts.workload.len()
    );
    let rows = match demo.run_workload(&opts.workload, opts.timeout, opts.progress) {
        Ok(rows) => rows,
        Err(e) => {
            // Dropping `demo` stops the daemons unless the user wants to look at the cluster.
            if opts.keep {
                eprintln!("{}", demo.keep_running());
            }
            return Err(e);
        }
    };
    let kept = if opts.keep {
        Some(demo.keep_running())
    } else {
        demo.stop()?;
        None
    };
    Ok(DemoReport { rows, kept })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(decision: &str) -> DemoRow {
        DemoRow {
            job_id: 7,
            job: DemoJob::new("a", 2, 1, &["--energy-policy=efficiency", "--energy-max-slowdown=1.5", "--energy-share=allow"]),
            nodes: "n1".into(),
            state: "COMPLETED".into(),
            elapsed: "00:00:05".into(),
            decision: decision.into(),
            energy_j: Some(0.0),
            gpu_clock_mhz: Some(1057),
        }
    }

    #[test]
    fn hints_and_decision_are_shortened() {
        let r = row("energy:policy=efficiency nodes=n1 clock=1200MHz share=none slow=1.100 pred_w=180 pred_kwh=0.001 score=e1.00/i0.00/f0.10/c0.00/o0.01");
        assert_eq!(r.job.hints_short(), "efficiency slow<=1.5 share=allow");
        assert_eq!(r.decision_short(), "policy=efficiency clock=1200MHz share=none slow=1.100 pred_kwh=0.001");
        assert_eq!(row("").decision_short(), "-");
        assert_eq!(DemoJob::new("b", 1, 1, &[]).hints_short(), "-");
    }

    #[test]
    fn table_has_a_header_and_one_aligned_line_per_job() {
        let rows = vec![row("energy:policy=balanced nodes=n2 clock=1380MHz"), DemoRow { job_id: 12345, ..row("") }];
        let t = format_table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].starts_with("JOBID"), "{t}");
        let col = lines[0].find("NAME").expect("NAME header");
        assert_eq!(&lines[1][col..col + 1], "a", "{t}");
        assert_eq!(&lines[2][col..col + 1], "a", "{t}");
        assert!(lines[1].ends_with("policy=balanced clock=1380MHz"), "{t}");
    }

    #[test]
    fn demo_energy_toml_shortens_the_interval_once() {
        let t = demo_energy_toml("[sched]\n# c\ninterval_s = 5\n[planner]\n", None, None);
        assert!(t.contains("interval_s = 2"), "{t}");
        assert!(!t.contains("interval_s = 5"), "{t}");
        let parsed: toml::Value = toml::from_str(&demo_energy_toml(ENERGY_TOML, Some(Path::new("/d/a \"b\"")), Some("tesla_v100-sxm2-32gb")))
            .expect("valid TOML");
        assert_eq!(parsed["sched"]["interval_s"].as_integer(), Some(2));
        assert_eq!(parsed["sched"]["data_dir"].as_str(), Some("/d/a \"b\""));
        assert_eq!(parsed["gpu_types"]["tesla_v100-sxm2-32gb"]["model"].as_str(), Some("v100"));
        let untyped: toml::Value = toml::from_str(&demo_energy_toml(ENERGY_TOML, Some(Path::new("/d")), None)).expect("valid TOML");
        assert_eq!(untyped["gpu_types"]["gpu"]["model"].as_str(), Some("v100"));
        let bare = demo_energy_toml("[planner]\n", None, None);
        assert!(bare.starts_with("[sched]\ninterval_s = 2 "), "{bare}");
        let no_interval = demo_energy_toml("[sched]\ndebug = true\n", None, None);
        let parsed: toml::Value = toml::from_str(&no_interval).expect("one [sched] table");
        assert_eq!(parsed["sched"]["interval_s"].as_integer(), Some(2), "{no_interval}");
    }

    #[test]
    fn app_clock_is_read_from_the_fake_nvml_line() {
        let out = "GPUs 2 3 on n1\ngpu 2: util  90%/ 10%  app 877/1057 MHz  locked -  clock 1057 MHz  power 120.3 W  energy 5.000 J\n";
        assert_eq!(parse_app_clock_mhz(out), Some(1057));
        assert_eq!(parse_app_clock_mhz("GPUs on n1\n"), None);
        assert_eq!(parse_app_clock_mhz("gpu 0: app x/y MHz"), None);
        let locked = "gpu 1: util  90%/ 10%  app 877/1312 MHz  locked 135-945  clock 945 MHz  power 120.3 W  energy 5.000 J\n";
        assert_eq!(parse_app_clock_mhz(locked), Some(945), "locked clocks are what the GPU runs at");
    }

    #[test]
    fn default_workload_uses_every_hint_and_overfills_the_cluster() {
        let w = default_workload();
        let all: String = w.iter().flat_map(|j| j.hints.clone()).collect::<Vec<_>>().join(" ");
        for hint in ["--energy-policy=performance", "--energy-policy=efficiency", "--energy-policy=balanced", "--energy-share=allow", "--energy-share=deny", "--energy-max-slowdown=", "--energy-tag="] {
            assert!(all.contains(hint), "no {hint} in the workload");
        }
        assert!(w.iter().any(|j| j.hints.is_empty()));
        assert!(w.iter().map(|j| j.gpus).sum::<u32>() > DEMO_NODES * DEMO_GPUS_PER_NODE);
        assert!(w.iter().all(|j| j.gpus <= DEMO_GPUS_PER_NODE));
    }

    /// `--keep`'s cleanup line removes the cluster's dir, the plugin dir and the fake GPU dir
    /// the demo created, and nothing beside them.
    #[test]
    fn the_kept_clusters_cleanup_removes_what_the_demo_created_and_only_that() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let made = |name: &str| {
            let dir = tmp.path().join(name);
            std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
            std::fs::write(dir.join("sub/file"), "x").expect("write");
            dir
        };
        let base = made("slurm-tc-x");
        let plugins = made("slurm-energy-demo-plugins-x");
        let gpus = made("slurm-energy-demo-gpus-x it's");
        let other = made("slurm-energy-demo-gpus-other");
        let text = keep_instructions(&base.join("etc/slurm.conf"), &base, &[("slurmctld".into(), 1)], &[plugins.clone(), gpus.clone()]);
        let rm = text.lines().find(|l| l.trim_start().starts_with("rm -rf")).expect("a cleanup line");
        let status = Command::new("sh").arg("-c").arg(rm).status().expect("sh");
        assert!(status.success(), "{rm}");
        for gone in [&base, &plugins, &gpus] {
            assert!(!gone.exists(), "{} left behind by: {rm}", gone.display());
        }
        assert!(other.join("sub/file").exists(), "{rm} removed more than the demo's dirs");
    }

}
