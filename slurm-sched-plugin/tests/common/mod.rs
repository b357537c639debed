//! What the live tests of sched/energy share.

use std::path::{Path, PathBuf};

use slurm_testcluster::{ClusterConfig, LocalCluster};

/// A plugin dir holding the freshly built `libsched_energy.so` as `sched_energy.so`.
pub fn plugin_dir() -> tempfile::TempDir {
    let built = slurm_testcluster::require_built("libsched_energy.so");
    let dir = tempfile::Builder::new().prefix("sched-energy-").tempdir().expect("plugin temp dir");
    std::fs::copy(built, dir.path().join("sched_energy.so")).expect("copy the plugin");
    dir
}

/// `libspank_energy.so` as cargo built it (`cargo test -p spank-energy` or a workspace build), if
/// it is there: the tests of hints skip without it.
#[allow(dead_code)] // not every test binary of this crate uses it
pub fn spank_plugin() -> Option<PathBuf> {
    slurm_testcluster::built_artifact("libspank_energy.so")
}

/// The measured data (`$SLURM_ENERGY_DATA`, else `shared/data` next to the checkout), if there.
#[allow(dead_code)]
pub fn data_dir() -> Option<PathBuf> {
    let dir = model::data::default_data_dir();
    (dir.join("zeus").is_dir() && dir.join("gavel").is_dir()).then_some(dir)
}

/// A sched/energy cluster as most live tests here want it: `nodes` nodes (the harness's default
/// shape) loading the plugin from `plugins`, `SchedulerParameters=sched_interval=-1,defer` plus
/// `more_params` (e.g. `,bf_yield_sleep=2000000`), a 1 s cycle (with `debug`, every cycle's line
/// at info level), no accounting. Tests change what they need with `..energy_cluster(..)`.
#[allow(dead_code)]
pub fn energy_cluster(plugins: &Path, nodes: u32, more_params: &str, debug: bool) -> ClusterConfig {
    let toml = format!("[sched]\ninterval_s = 1\n{}", if debug { "debug = true\n" } else { "" });
    ClusterConfig {
        nodes,
        plugin_dir: Some(plugins.to_path_buf()),
        sched_type: "sched/energy".into(),
        scheduler_parameters: Some(format!("sched_interval=-1,defer{more_params}")),
        extra_files: vec![("energy.toml".into(), toml)],
        with_accounting: false,
        ..ClusterConfig::default()
    }
}

/// Runs a Slurm command of the cluster; panics with its stderr when it fails. Its stdout,
/// trimmed.
#[allow(dead_code)]
pub fn run(cluster: &LocalCluster, prog: &str, args: &[&str]) -> String {
    let out = cluster.command(prog).args(args).output().unwrap_or_else(|e| panic!("{prog}: {e}"));
    assert!(out.status.success(), "{prog} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A `squeue` field of one job (`%T`, `%N`, `%R`), empty once it left the queue.
#[allow(dead_code)]
pub fn squeue_field(cluster: &LocalCluster, job: u32, format: &str) -> String {
    let out = cluster.command("squeue").args(["-h", "-j", &job.to_string(), "-o", format]).output().expect("run squeue");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Waits until the job runs; the nodes it runs on.
#[allow(dead_code)]
pub fn wait_running_on(cluster: &LocalCluster, job: u32, timeout: std::time::Duration) -> String {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if squeue_field(cluster, job, "%T") == "RUNNING" {
            return squeue_field(cluster, job, "%N");
        }
        assert!(std::time::Instant::now() < deadline, "job {job} not running after {timeout:?} ({}):\n{}", squeue_field(cluster, job, "%T %R"), cluster.slurmctld_log());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// The job's `AdminComment=` (sched/energy's decision record).
#[allow(dead_code)]
pub fn admin_comment(cluster: &LocalCluster, job: u32) -> String {
    let out = cluster.command("scontrol").args(["show", "job", &job.to_string()]).output().expect("run scontrol");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().find_map(|l| l.trim().strip_prefix("AdminComment=")).unwrap_or("").to_string()
}

/// How long the learning tests wait for what they poll.
#[allow(dead_code)]
pub const LEARNING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// What the fake GPU reports: these PIDs at these SM utilisations.
#[allow(dead_code)] // not every test binary of this crate uses it
pub fn set_load(fake: &fake_nvml::FakeNvml, loads: &[(u32, u32)]) {
    let processes = loads.iter().map(|&(pid, pct)| fake_nvml::GpuProcess { pid, used_memory_bytes: 1 << 30, sm_util_pct: Some(pct) }).collect();
    let busy = loads.iter().map(|l| l.1).sum::<u32>().min(100);
    fake.update(|s| {
        s.gpus[0].util_gpu_pct = busy;
        s.gpus[0].processes = processes;
    })
    .expect("fake load");
}

/// Polls `energy-learning.json` until `pick` finds something in it.
#[allow(dead_code)] // not every test binary of this crate uses it
pub fn wait_learnt<T>(cluster: &LocalCluster, what: &str, pick: impl Fn(&serde_json::Value) -> Option<T>) -> T {
    let path = cluster.base_dir().join("state").join("energy-learning.json");
    let deadline = std::time::Instant::now() + LEARNING_TIMEOUT;
    loop {
        if let Some(v) = std::fs::read_to_string(&path).ok().and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            && let Some(x) = pick(&v)
        {
            return x;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} not learnt in {LEARNING_TIMEOUT:?}: {}\nslurmctld:\n{}\nslurmd:\n{}",
            std::fs::read_to_string(&path).unwrap_or_default(),
            cluster.slurmctld_log(),
            cluster.slurmd_log("n1")
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

/// A character device like an NVIDIA GPU's (`nvidia0`, major 195) in `dir`.
#[allow(dead_code)] // not every test binary of this crate uses it
pub fn mknod_gpu(dir: &Path) {
    std::fs::create_dir_all(dir).expect("dev dir");
    let path = dir.join("nvidia0");
    let status = std::process::Command::new("mknod").arg(&path).args(["c", "195", "0"]).status().expect("run mknod");
    assert!(status.success(), "mknod {}", path.display());
}

/// A UDP port free on loopback now.
#[allow(dead_code)] // not every test binary of this crate uses it
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr()).expect("a free UDP port").port()
}

/// `prog` of the cluster (its environment, its binary) run as the unprivileged user `nobody`
/// through runuser, as any user would run it.
#[allow(dead_code)]
pub fn as_nobody(cluster: &LocalCluster, prog: &str) -> std::process::Command {
    let own = cluster.command(prog);
    let mut cmd = std::process::Command::new("runuser");
    cmd.args(["-u", "nobody", "--", "env"]);
    for (k, v) in own.get_envs() {
        if let Some(v) = v {
            cmd.arg(format!("{}={}", k.to_string_lossy(), v.to_string_lossy()));
        }
    }
    cmd.arg(own.get_program());
    cmd
}

/// A user's own SPANK plugin in their own `sbatch`: clients read the slurm.conf `SLURM_CONF`
/// names, which the user sets, so a user can copy the cluster's slurm.conf, point its
/// `PlugStackConfig` at a plugstack of their own and load a plugin that puts any entry into the
/// job's SPANK environment (`spank_job_control_setenv`), as a program calling libslurm's submit
/// API directly could. The plugin (C, built here with `cc` against Slurm's `spank.h`) sets each
/// of `entries`; `also_load` are loaded before it (e.g. the bundle's own SPANK plugin, for its
/// options). Returns the user's slurm.conf, for `SLURM_CONF`.
#[allow(dead_code)]
pub fn users_own_spank_env(cluster: &LocalCluster, dir: &Path, entries: &[(&str, &str)], also_load: &[&Path]) -> PathBuf {
    std::fs::create_dir_all(dir).expect("user's dir");
    let sets: String = entries
        .iter()
        .map(|(k, v)| format!("    spank_job_control_setenv(sp, \"{k}\", \"{v}\", 1);\n"))
        .collect();
    let source = format!(
        "#include <slurm/spank.h>\nSPANK_PLUGIN(users_own, 1);\nint slurm_spank_init_post_opt(spank_t sp, int ac, char **av)\n{{\n    if (spank_remote(sp))\n        return 0;\n{sets}    return 0;\n}}\n"
    );
    let c = dir.join("users_own.c");
    let so = dir.join("users_own.so");
    std::fs::write(&c, source).expect("write the user's plugin");
    let mut cc = std::process::Command::new("cc");
    cc.args(["-shared", "-fPIC", "-o"]).arg(&so).arg(&c);
    // The headers of the release the tests were built for; else the installed ones.
    if let Some(src) = option_env!("SLURM_SRC_DIR") {
        cc.arg(format!("-I{src}"));
    }
    let out = cc.output().expect("run cc");
    assert!(out.status.success(), "cc users_own.c: {}", String::from_utf8_lossy(&out.stderr));
    let mut plugstack: String = also_load.iter().map(|p| format!("required {}\n", p.display())).collect();
    plugstack.push_str(&format!("required {}\n", so.display()));
    let plugstack_path = dir.join("plugstack.conf");
    std::fs::write(&plugstack_path, plugstack).expect("write the user's plugstack.conf");
    let conf = std::fs::read_to_string(cluster.conf_dir().join("slurm.conf")).expect("read slurm.conf");
    let mut own: String = conf.lines().filter(|l| !l.trim_start().starts_with("PlugStackConfig")).map(|l| format!("{l}\n")).collect();
    own.push_str(&format!("PlugStackConfig={}\n", plugstack_path.display()));
    let conf_path = dir.join("slurm.conf");
    std::fs::write(&conf_path, own).expect("write the user's slurm.conf");
    // Files next to slurm.conf that clients read (gres.conf, energy.toml, ...): the same.
    for entry in std::fs::read_dir(cluster.conf_dir()).expect("conf dir").flatten() {
        let name = entry.file_name();
        if name != "slurm.conf" && name != "plugstack.conf" && entry.path().is_file() {
            let _ = std::fs::copy(entry.path(), dir.join(&name));
        }
    }
    conf_path
}

/// One node of fake NVML GPUs (the GPU plugins see them as NVIDIA GPUs): the fake library in
/// `<work>/nvml` with its configuration, a device file per GPU in `<work>/dev`, the clock ledger
/// in `<work>/ledger`, and the GPU plugins (`gpu/nvml`, `acct_gather_energy/nvml`) copied into
/// the plugin dir.
#[allow(dead_code)]
pub struct FakeGpuNode {
    pub nvml_dir: PathBuf,
    pub dev: PathBuf,
    pub ledger: PathBuf,
    pub fake: fake_nvml::FakeNvml,
    /// The GRES type Slurm gives the fake's GPUs (`nvml` autodetection).
    pub gpu_type: String,
    pub gpus: u32,
}

/// Sets up a [`FakeGpuNode`] of `gpus` GPUs under `work`, the fake configured by `fake_conf`
/// (`model = H100`, `cpu_count = 2`, ...; `gpu_count` is added), the GPU plugins copied into
/// `plugins`.
#[allow(dead_code)]
pub fn fake_gpu_node(work: &Path, plugins: &Path, gpus: u32, fake_conf: &str) -> FakeGpuNode {
    for lib in ["gpu_nvml", "acct_gather_energy_nvml"] {
        std::fs::copy(slurm_testcluster::require_built(&format!("lib{lib}.so")), plugins.join(format!("{lib}.so"))).expect("copy a GPU plugin");
    }
    let nvml_dir = work.join("nvml");
    fake_nvml::install_library(&slurm_testcluster::require_built(fake_nvml::BUILT_LIBRARY_NAME), &nvml_dir).expect("install the fake NVML");
    std::fs::write(nvml_dir.join("fake-nvml.conf"), format!("gpu_count = {gpus}\n{fake_conf}")).expect("fake conf");
    let fake = fake_nvml::FakeNvml::for_library_dir(&nvml_dir).expect("fake NVML state");
    let dev = work.join("dev");
    std::fs::create_dir_all(&dev).expect("dev dir");
    for i in 0..gpus {
        let status = std::process::Command::new("mknod").arg(dev.join(format!("nvidia{i}"))).args(["c", "195", &i.to_string()]).status().expect("run mknod");
        assert!(status.success(), "mknod nvidia{i}");
    }
    let gpu_type = gpu_control::gres_type::slurm_type_name(&fake.config.gpus[0].name);
    FakeGpuNode { nvml_dir, dev, ledger: work.join("ledger"), fake, gpu_type, gpus }
}

impl FakeGpuNode {
    /// A one-node sched/energy cluster of this node (GPUs autodetected through NVML) with the
    /// plugins of `plugins`, `energy_toml`, a plugstack.conf loading `spank`, GPU energy
    /// accounting (`acct_gather_energy/nvml`, task sampling every second) and
    /// `PrologFlags=Contain`. Tests change what they need with `..node.cluster(..)`.
    #[allow(dead_code)]
    pub fn cluster(&self, plugins: &Path, energy_toml: String, spank: &Path) -> ClusterConfig {
        ClusterConfig {
            nodes: 1,
            gpus_per_node: self.gpus,
            gpu_autodetect: Some("nvml".into()),
            gpu_type: Some(self.gpu_type.clone()),
            plugin_dir: Some(plugins.to_path_buf()),
            sched_type: "sched/energy".into(),
            scheduler_parameters: Some("sched_interval=-1,defer".into()),
            extra_files: vec![("energy.toml".into(), energy_toml), ("plugstack.conf".into(), format!("required {}\n", spank.display()))],
            extra_slurm_conf: vec![
                "AcctGatherEnergyType=acct_gather_energy/nvml".into(),
                "JobAcctGatherFrequency=task=1".into(),
                "PrologFlags=Contain".into(),
            ],
            daemon_env: vec![
                ("LD_LIBRARY_PATH".into(), self.nvml_dir.display().to_string()),
                ("SLURM_ENERGY_NVIDIA_DEV_DIR".into(), self.dev.display().to_string()),
                ("SLURM_ENERGY_CLOCK_LEDGER".into(), self.ledger.display().to_string()),
            ],
            ..ClusterConfig::default()
        }
    }
}
