//! What a test asks for (`ClusterConfig`) and the configuration files that follow from it:
//! slurm.conf, gres.conf and slurmdbd.conf, with every path under the cluster's base dir.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What kind of cluster to start. `ClusterConfig::default()` is 3 nodes with 4 fake GPUs each,
/// sched/backfill and accounting through slurmdbd.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// Number of slurmd (nodes `n1`..`nN`), all on this host.
    pub nodes: u32,
    /// Fake GPUs per node (`gres/gpu`); 0 for none.
    pub gpus_per_node: u32,
    /// `gres/shard` per GPU (0: no shards). With shards the nodes offer `shard:<gpus x this>`
    /// beside their GPUs, spread evenly over them.
    pub shards_per_gpu: u32,
    /// gres.conf `AutoDetect=` value: `None` writes `AutoDetect=off` and names the fake GPU
    /// character devices; `Some("nvml")` lets slurmd's GPU plugin find the GPUs itself.
    pub gpu_autodetect: Option<String>,
    /// GRES type of the GPUs in the node lines (`Gres=gpu:<type>:N`), e.g. the type NVML
    /// autodetection reports; `None` leaves them untyped (`Gres=gpu:N`).
    pub gpu_type: Option<String>,
    /// CPUs Slurm believes each node has (`SlurmdParameters=config_overrides` lets it exceed the
    /// real machine).
    pub cpus_per_node: u32,
    /// `RealMemory` of each node, in MB.
    pub mem_mb_per_node: u64,
    /// Directory searched before Slurm's own plugin directory (`PluginDir=<this>:<stock>`).
    pub plugin_dir: Option<PathBuf>,
    /// `SchedulerType`.
    pub sched_type: String,
    /// `SchedulerParameters`, if any.
    pub scheduler_parameters: Option<String>,
    /// Lines appended to slurm.conf after the generated ones.
    pub extra_slurm_conf: Vec<String>,
    /// Files written next to slurm.conf after the generated ones (name, content): e.g.
    /// `plugstack.conf`, the bundle's `energy.toml`; a `gres.conf` here replaces the generated one.
    pub extra_files: Vec<(String, String)>,
    /// Environment added to every Slurm daemon (slurmdbd, slurmctld, slurmd; slurmstepd inherits
    /// slurmd's): e.g. `LD_LIBRARY_PATH` pointing at a fake `libnvidia-ml.so`, or
    /// `FAKE_NVML_STATE_DIR`. For slurmd, `%n` in a value is replaced by the node name, so
    /// that each node of the host can have GPUs of its own (`FAKE_NVML_STATE_DIR=<dir>/%n`).
    pub daemon_env: Vec<(String, String)>,
    /// Run MariaDB and slurmdbd and account jobs (`sacct`). Without it the cluster starts faster
    /// but `sacct` has nothing to show.
    pub with_accounting: bool,
    /// Per-node `Features=` (node name, comma-separated features), for site-like clusters.
    pub node_features: Vec<(String, String)>,
    /// Per-node GPU type (node name, type), overriding `gpu_type`: typed GPUs of several kinds.
    pub node_gpu_types: Vec<(String, String)>,
    /// Partition lines (`PartitionName=...`) replacing the default `debug` partition of all
    /// nodes.
    pub partitions: Vec<String>,
    /// A site's mix of nodes: when not empty, node `n<i+1>` has shape `node_shapes[i]` and
    /// `nodes`, `gpus_per_node`, `cpus_per_node`, `mem_mb_per_node`, `gpu_type`,
    /// `node_gpu_types` and `node_features` are not used for the node lines (`nodes` must
    /// equal the number of shapes).
    pub node_shapes: Vec<NodeShape>,
    /// `SelectTypeParameters` (default `CR_Core`).
    pub select_type_parameters: Option<String>,
    /// `SelectType` (default `select/cons_tres`).
    pub select_type: Option<String>,
    /// How slurmctld and slurmd run: in the foreground (the default) or as sites' systemd
    /// units run them.
    pub daemon_mode: DaemonMode,
}

/// How the harness runs slurmctld and slurmd. slurmdbd runs in the foreground either way, as
/// its unit file does (`slurmdbd -D`); munged and MariaDB are the harness's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DaemonMode {
    /// `-D`: each daemon is the harness's child in the foreground. Hides what a daemon does
    /// when it forks: on 24.11 a reconfigure re-executes slurmctld in place.
    #[default]
    Attached,
    /// As sites run them from their systemd units. A release with `--systemd` (23.11 on):
    /// `slurmctld --systemd`, `slurmd --systemd` (`Type=notify`), with a notify-socket stand-in
    /// as `NOTIFY_SOCKET`; a reconfigure or SIGHUP starts a new process while the old one still
    /// runs, and the harness follows `MAINPID=`. An older release (22.05): daemonised (no
    /// `-D`), followed through its `PidFile`. Either way the daemon's real process is tracked
    /// and signalled by pid (a pidfd), and its log can be rotated with SIGHUP
    /// (`LocalCluster::rotate_log`).
    Systemd,
}

/// One node of a heterogeneous cluster: its CPUs (and how they are laid out), memory, GPUs of
/// one or more types, `Weight` and features.
#[derive(Clone, Debug)]
pub struct NodeShape {
    /// `CPUs=`: logical CPUs (cores x threads).
    pub cpus: u32,
    /// `ThreadsPerCore=` (with `Sockets=1 CoresPerSocket=cpus/threads`); 1 writes `CPUs=` only.
    pub threads_per_core: u32,
    pub mem_mb: u64,
    /// GPUs: (type, count) per entry, `None` for untyped; empty for a CPU-only node. The GPU
    /// device files are numbered across the entries in this order.
    pub gpus: Vec<(Option<String>, u32)>,
    /// `Weight=` (Slurm's default is 1).
    pub weight: u32,
    /// `Features=`, comma-separated, if any.
    pub features: Option<String>,
}

impl NodeShape {
    /// A node with `cpus` CPUs, `mem_mb` of memory and no GPU, weight 1.
    pub fn cpu(cpus: u32, mem_mb: u64) -> NodeShape {
        NodeShape { cpus, threads_per_core: 1, mem_mb, gpus: Vec::new(), weight: 1, features: None }
    }
    /// The same node with `count` GPUs of `gpu_type` added.
    pub fn with_gpus(mut self, gpu_type: &str, count: u32) -> NodeShape {
        self.gpus.push((Some(gpu_type.to_string()), count));
        self
    }
    pub fn weight(mut self, weight: u32) -> NodeShape {
        self.weight = weight;
        self
    }
    pub fn threads_per_core(mut self, threads: u32) -> NodeShape {
        self.threads_per_core = threads.max(1);
        self
    }
    pub fn features(mut self, features: &str) -> NodeShape {
        self.features = Some(features.to_string());
        self
    }
    /// All its GPUs.
    pub fn gpu_count(&self) -> u32 {
        self.gpus.iter().map(|(_, n)| n).sum()
    }
}

impl ClusterConfig {
    /// The most GPUs any node has (device files are made for this many).
    pub fn max_gpus_per_node(&self) -> u32 {
        if self.node_shapes.is_empty() { self.gpus_per_node } else { self.node_shapes.iter().map(NodeShape::gpu_count).max().unwrap_or(0) }
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            nodes: 3,
            gpus_per_node: 4,
            shards_per_gpu: 0,
            gpu_autodetect: None,
            gpu_type: None,
            cpus_per_node: 4,
            mem_mb_per_node: 4096,
            plugin_dir: None,
            sched_type: "sched/backfill".to_string(),
            scheduler_parameters: None,
            extra_slurm_conf: Vec::new(),
            extra_files: Vec::new(),
            daemon_env: Vec::new(),
            with_accounting: true,
            node_features: Vec::new(),
            node_gpu_types: Vec::new(),
            partitions: Vec::new(),
            node_shapes: Vec::new(),
            select_type_parameters: None,
            select_type: None,
            daemon_mode: DaemonMode::Attached,
        }
    }
}

pub(crate) const CLUSTER_NAME: &str = "testcluster";
pub(crate) const DB_NAME: &str = "slurm_acct_db";
pub(crate) const DB_USER: &str = "slurm";

/// Where everything of one cluster lives, all under `base`.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub base: PathBuf,
    pub etc: PathBuf,
    pub log: PathBuf,
    pub run: PathBuf,
    pub state: PathBuf,
    pub spool: PathBuf,
    pub dev: PathBuf,
    pub jobs: PathBuf,
    pub munge_dir: PathBuf,
    pub mysql_data: PathBuf,
    pub tmp: PathBuf,
}

impl Layout {
    pub fn new(base: &Path) -> Layout {
        Layout {
            base: base.to_path_buf(),
            etc: base.join("etc"),
            log: base.join("log"),
            run: base.join("run"),
            state: base.join("state"),
            spool: base.join("spool"),
            dev: base.join("dev"),
            jobs: base.join("jobs"),
            munge_dir: base.join("munge"),
            mysql_data: base.join("mysql"),
            tmp: base.join("tmp"),
        }
    }

    pub fn all_dirs(&self) -> [&Path; 10] {
        [
            &self.etc,
            &self.log,
            &self.run,
            &self.state,
            &self.spool,
            &self.dev,
            &self.jobs,
            &self.munge_dir,
            &self.mysql_data,
            &self.tmp,
        ]
    }

    pub fn slurm_conf(&self) -> PathBuf {
        self.etc.join("slurm.conf")
    }
    pub fn munge_socket(&self) -> PathBuf {
        self.munge_dir.join("munge.socket")
    }
    pub fn munge_key(&self) -> PathBuf {
        self.munge_dir.join("munge.key")
    }
    pub fn db_socket(&self) -> PathBuf {
        self.run.join("mysqld.sock")
    }
    pub fn gpu_device(&self, index: u32) -> PathBuf {
        self.dev.join(format!("nvidia{index}"))
    }
    pub fn slurmctld_log(&self) -> PathBuf {
        self.log.join("slurmctld.log")
    }
    pub fn slurmd_log(&self, node: &str) -> PathBuf {
        self.log.join(format!("slurmd-{node}.log"))
    }
    pub fn slurmdbd_log(&self) -> PathBuf {
        self.log.join("slurmdbd.log")
    }
    pub fn mariadb_log(&self) -> PathBuf {
        self.log.join("mariadb.log")
    }
    /// Named for munged's `--log-file`, which it only writes when it runs in the background.
    pub fn munged_log(&self) -> PathBuf {
        self.log.join("munged.log")
    }
    /// Where a daemon's stdout and stderr go.
    pub fn console(&self, daemon: &str) -> PathBuf {
        self.log.join(format!("{daemon}.console"))
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Ports {
    pub slurmctld: u16,
    pub slurmdbd: u16,
    pub mysql: u16,
    pub slurmd: Vec<u16>,
}

pub(crate) fn node_names(nodes: u32) -> Vec<String> {
    (1..=nodes).map(|i| format!("n{i}")).collect()
}

pub(crate) struct SlurmConfInput<'a> {
    pub cfg: &'a ClusterConfig,
    pub layout: &'a Layout,
    pub ports: &'a Ports,
    pub hostname: &'a str,
    pub stock_plugin_dir: &'a Path,
}

pub(crate) fn slurm_conf(input: &SlurmConfInput<'_>) -> String {
    let SlurmConfInput {
        cfg,
        layout: l,
        ports,
        hostname,
        stock_plugin_dir,
    } = *input;
    let munge = l.munge_socket();
    let plugin_dir = match &cfg.plugin_dir {
        Some(dir) => format!("{}:{}", dir.display(), stock_plugin_dir.display()),
        None => stock_plugin_dir.display().to_string(),
    };
    let mut s = String::new();
    let mut line = |text: String| {
        s.push_str(&text);
        s.push('\n');
    };
    line("# Generated by slurm-testcluster.".into());
    line(format!("ClusterName={CLUSTER_NAME}"));
    line(format!("SlurmctldHost={hostname}(127.0.0.1)"));
    line(format!("SlurmctldPort={}", ports.slurmctld));
    line("SlurmUser=root".into());
    line("SlurmdUser=root".into());
    line("AuthType=auth/munge".into());
    line("CredType=cred/munge".into());
    line(format!("AuthInfo=socket={}", munge.display()));
    line(format!("PluginDir={plugin_dir}"));
    line(format!("StateSaveLocation={}", l.state.display()));
    line(format!("SlurmdSpoolDir={}/%n", l.spool.display()));
    line(format!(
        "SlurmctldPidFile={}/slurmctld.pid",
        l.run.display()
    ));
    line(format!("SlurmdPidFile={}/slurmd-%n.pid", l.run.display()));
    line(format!("SlurmctldLogFile={}", l.slurmctld_log().display()));
    line(format!("SlurmdLogFile={}/slurmd-%n.log", l.log.display()));
    line("SlurmctldDebug=info".into());
    line("SlurmdDebug=info".into());
    line("ProctrackType=proctrack/linuxproc".into());
    line("TaskPlugin=task/none".into());
    line("SwitchType=switch/none".into());
    line("MpiDefault=none".into());
    line(format!("SelectType={}", cfg.select_type.as_deref().unwrap_or("select/cons_tres")));
    line(format!("SelectTypeParameters={}", cfg.select_type_parameters.as_deref().unwrap_or("CR_Core")));
    line(format!("SchedulerType={}", cfg.sched_type));
    // 22.05's default, written out: 23.11 made priority/multifactor the default, which without
    // weights gives every job priority 1 (no submit order, no --nice).
    line("PriorityType=priority/basic".into());
    if let Some(params) = &cfg.scheduler_parameters {
        line(format!("SchedulerParameters={params}"));
    }
    // Nodes may claim more CPUs and memory than this machine has without being drained.
    line("SlurmdParameters=config_overrides".into());
    line("ReturnToService=2".into());
    line("MailProg=/bin/true".into());
    line("KillWait=5".into());
    line("InactiveLimit=0".into());
    // Gathering without storing only makes slurmctld complain.
    if cfg.with_accounting {
        line("JobAcctGatherType=jobacct_gather/linux".into());
    }
    line("JobCompType=jobcomp/none".into());
    let any_gpus = cfg.max_gpus_per_node() > 0;
    if any_gpus && cfg.shards_per_gpu > 0 {
        line("GresTypes=gpu,shard".into());
    } else if any_gpus {
        line("GresTypes=gpu".into());
    }
    if cfg.with_accounting {
        line("AccountingStorageType=accounting_storage/slurmdbd".into());
        line("AccountingStorageHost=127.0.0.1".into());
        line(format!("AccountingStoragePort={}", ports.slurmdbd));
        // sacctmgr and sacct find the munge socket here, not in AuthInfo.
        line(format!("AccountingStoragePass={}", munge.display()));
        if any_gpus && cfg.shards_per_gpu > 0 {
            line("AccountingStorageTRES=gres/gpu,gres/shard".into());
        } else if any_gpus {
            line("AccountingStorageTRES=gres/gpu".into());
        }
        line("AccountingStoreFlags=job_comment".into());
    }
    for ((name, port), shape) in node_names(cfg.nodes).iter().zip(&ports.slurmd).zip(&cfg.node_shapes) {
        let gres: Vec<String> = shape.gpus.iter().map(|(t, n)| t.as_ref().map_or(format!("gpu:{n}"), |t| format!("gpu:{t}:{n}"))).collect();
        let gres = if gres.is_empty() { String::new() } else { format!(" Gres={}", gres.join(",")) };
        let layout = if shape.threads_per_core > 1 {
            format!(" Sockets=1 CoresPerSocket={} ThreadsPerCore={}", shape.cpus / shape.threads_per_core, shape.threads_per_core)
        } else {
            String::new()
        };
        let features = shape.features.as_ref().map(|f| format!(" Features={f}")).unwrap_or_default();
        line(format!(
            "NodeName={name} NodeHostname={hostname} NodeAddr=127.0.0.1 Port={port} CPUs={}{layout} RealMemory={} Weight={}{gres}{features} State=UNKNOWN",
            shape.cpus, shape.mem_mb, shape.weight
        ));
    }
    for (name, port) in node_names(cfg.nodes).iter().zip(&ports.slurmd).filter(|_| cfg.node_shapes.is_empty()) {
        let gpu_type = node_gpu_type(cfg, name).map(|t| format!("{t}:")).unwrap_or_default();
        let gres = if cfg.gpus_per_node > 0 && cfg.shards_per_gpu > 0 {
            format!(" Gres=gpu:{gpu_type}{},shard:{}", cfg.gpus_per_node, cfg.gpus_per_node * cfg.shards_per_gpu)
        } else if cfg.gpus_per_node > 0 {
            format!(" Gres=gpu:{gpu_type}{}", cfg.gpus_per_node)
        } else {
            String::new()
        };
        let features = cfg.node_features.iter().find(|(n, _)| n == name).map(|(_, f)| format!(" Features={f}")).unwrap_or_default();
        line(format!(
            "NodeName={name} NodeHostname={hostname} NodeAddr=127.0.0.1 Port={port} CPUs={} RealMemory={}{gres}{features} State=UNKNOWN",
            cfg.cpus_per_node, cfg.mem_mb_per_node
        ));
    }
    if cfg.partitions.is_empty() {
        line("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP".into());
    }
    for p in &cfg.partitions {
        line(p.clone());
    }
    for extra in &cfg.extra_slurm_conf {
        line(extra.clone());
    }
    s
}

pub(crate) fn gres_conf(cfg: &ClusterConfig, layout: &Layout) -> String {
    let mut s = String::from("# Generated by slurm-testcluster: fake GPUs, shared by every slurmd of this host.\n");
    if let Some(mode) = &cfg.gpu_autodetect {
        let _ = writeln!(s, "AutoDetect={mode}");
        if cfg.shards_per_gpu > 0 {
            let _ = writeln!(s, "Name=shard Count={}", cfg.gpus_per_node * cfg.shards_per_gpu);
        }
        return s;
    }
    s.push_str("AutoDetect=off\n");
    if !cfg.node_shapes.is_empty() {
        // One line per node and GPU type, device files numbered across the node's types.
        for (name, shape) in node_names(cfg.nodes).iter().zip(&cfg.node_shapes) {
            let mut first = 0;
            for (ty, count) in &shape.gpus {
                let files = match count {
                    0 => continue,
                    1 => layout.gpu_device(first).display().to_string(),
                    n => format!("{}/nvidia[{}-{}]", layout.dev.display(), first, first + n - 1),
                };
                let ty = ty.as_ref().map(|t| format!(" Type={t}")).unwrap_or_default();
                let _ = writeln!(s, "NodeName={name} Name=gpu{ty} File={files}");
                first += count;
            }
        }
        return s;
    }
    if cfg.gpus_per_node > 0 {
        let files = match cfg.gpus_per_node {
            1 => layout.gpu_device(0).display().to_string(),
            n => format!("{}/nvidia[0-{}]", layout.dev.display(), n - 1),
        };
        if !cfg.node_gpu_types.is_empty() {
            // One line per node: GPU types differ between nodes.
            for name in node_names(cfg.nodes) {
                let ty = node_gpu_type(cfg, &name).map(|t| format!(" Type={t}")).unwrap_or_default();
                let _ = writeln!(s, "NodeName={name} Name=gpu{ty} File={files}");
            }
            return s;
        }
        let _ = writeln!(s, "Name=gpu File={files}");
        if cfg.shards_per_gpu > 0 {
            let _ = writeln!(s, "Name=shard Count={} File={files}", cfg.gpus_per_node * cfg.shards_per_gpu);
        }
    }
    s
}

/// The GPU type of node `name`: its override, else the cluster's `gpu_type`.
fn node_gpu_type<'c>(cfg: &'c ClusterConfig, name: &str) -> Option<&'c str> {
    cfg.node_gpu_types.iter().find(|(n, _)| n == name).map(|(_, t)| t.as_str()).or(cfg.gpu_type.as_deref())
}

pub(crate) fn slurmdbd_conf(
    layout: &Layout,
    ports: &Ports,
    hostname: &str,
    db_password: &str,
) -> String {
    let l = layout;
    format!(
        "# Generated by slurm-testcluster.\n\
         AuthType=auth/munge\n\
         AuthInfo=socket={munge}\n\
         DbdHost={hostname}\n\
         DbdAddr=127.0.0.1\n\
         DbdPort={dbd_port}\n\
         SlurmUser=root\n\
         DebugLevel=info\n\
         LogFile={log}\n\
         PidFile={run}/slurmdbd.pid\n\
         StorageType=accounting_storage/mysql\n\
         StorageHost=127.0.0.1\n\
         StoragePort={db_port}\n\
         StorageUser={DB_USER}\n\
         StoragePass={db_password}\n\
         StorageLoc={DB_NAME}\n",
        munge = l.munge_socket().display(),
        dbd_port = ports.slurmdbd,
        log = l.slurmdbd_log().display(),
        run = l.run.display(),
        db_port = ports.mysql,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input_fixture() -> (ClusterConfig, Layout, Ports) {
        let cfg = ClusterConfig {
            plugin_dir: Some("/opt/energy".into()),
            ..ClusterConfig::default()
        };
        let layout = Layout::new(Path::new("/tmp/base"));
        let ports = Ports {
            slurmctld: 1000,
            slurmdbd: 1001,
            mysql: 1002,
            slurmd: vec![2001, 2002, 2003],
        };
        (cfg, layout, ports)
    }

    #[test]
    fn slurm_conf_has_one_line_per_node_and_our_plugin_dir_first() {
        let (cfg, layout, ports) = input_fixture();
        let conf = slurm_conf(&SlurmConfInput {
            cfg: &cfg,
            layout: &layout,
            ports: &ports,
            hostname: "vm",
            stock_plugin_dir: Path::new("/usr/lib/slurm"),
        });
        assert!(conf.contains("PluginDir=/opt/energy:/usr/lib/slurm\n"));
        assert!(conf.contains("SlurmctldHost=vm(127.0.0.1)\n"));
        assert!(conf.contains("NodeName=n3 NodeHostname=vm NodeAddr=127.0.0.1 Port=2003 CPUs=4 RealMemory=4096 Gres=gpu:4"));
        assert_eq!(conf.matches("NodeName=").count(), 3);
        assert!(conf.contains("AccountingStoragePort=1001\n"));
    }

    #[test]
    fn no_accounting_and_no_gpus_leave_their_lines_out() {
        let (mut cfg, layout, ports) = input_fixture();
        cfg.with_accounting = false;
        cfg.gpus_per_node = 0;
        let conf = slurm_conf(&SlurmConfInput {
            cfg: &cfg,
            layout: &layout,
            ports: &ports,
            hostname: "vm",
            stock_plugin_dir: Path::new("/usr/lib/slurm"),
        });
        assert!(!conf.contains("AccountingStorage"));
        assert!(!conf.contains("Gres"));
    }

    #[test]
    fn gres_conf_names_character_devices_by_range() {
        let (cfg, layout, _) = input_fixture();
        assert!(gres_conf(&cfg, &layout).contains("Name=gpu File=/tmp/base/dev/nvidia[0-3]\n"));
        let one = ClusterConfig {
            gpus_per_node: 1,
            ..cfg
        };
        assert!(gres_conf(&one, &layout).contains("Name=gpu File=/tmp/base/dev/nvidia0\n"));
    }
}
