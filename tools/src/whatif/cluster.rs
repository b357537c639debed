//! The live cluster as the planner sees it, read with Slurm's own commands (`scontrol -o show
//! node / job / partition / reservation`, `scontrol show config`): the same [`Snapshot`] shape
//! sched/energy builds from slurmctld's tables, as far as the commands show it.
//!
//! `scontrol -o` prints one record per line as `Key=value` tokens; a value with spaces (an
//! admin comment holding a decision record) continues until the next token whose key starts
//! with a capital letter, as every key of scontrol's does. Times are read with `TZ=UTC`.
//! `squeue --json` would avoid that heuristic but its layout differs between 22.05 (openapi
//! v0.0.38) and 24.11, while these records read the same on both.

use std::collections::BTreeMap;
use std::process::Command;

use model::eligibility::{AdvanceReservation, Eligibility, NodeSet, NodeSetInterner};
use model::types::{GpuType, Hints, JobId, Node, NodeAllocation, NodeIdx, PendingJob, PowerState, Request, RunningJob, Snapshot, UNLIMITED_TIME_S};

/// One `scontrol -o` record: its `Key=value` pairs in order (keys may repeat: `-d`'s per-node
/// `Nodes=... CPU_IDs=... Mem=... GRES=...`).
pub type Record = Vec<(String, String)>;

pub fn parse_records(text: &str) -> Vec<Record> {
    text.lines().map(parse_record).filter(|r| !r.is_empty()).collect()
}

pub fn parse_record(line: &str) -> Record {
    let mut out: Record = Vec::new();
    for token in line.split_whitespace() {
        let starts_key = token.split_once('=').is_some_and(|(k, _)| k.chars().next().is_some_and(|c| c.is_ascii_uppercase()) && !k.is_empty());
        match (starts_key, out.last_mut()) {
            (true, _) => {
                let (k, v) = token.split_once('=').unwrap_or((token, ""));
                out.push((k.to_string(), v.to_string()));
            }
            (false, Some(last)) => {
                last.1.push(' ');
                last.1.push_str(token);
            }
            (false, None) => {}
        }
    }
    out
}

pub fn field<'a>(r: &'a Record, key: &str) -> Option<&'a str> {
    r.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// `n[1-3,05-06],gpu1` -> n1 n2 n3 n05 n06 gpu1.
pub fn expand_hostlist(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    let bytes = list.as_bytes();
    let mut parts = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'[' => depth += 1,
            b']' => depth -= 1,
            b',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    for part in parts.into_iter().filter(|p| !p.is_empty() && *p != "(null)") {
        match (part.find('['), part.rfind(']')) {
            (Some(open), Some(close)) if open < close => {
                let (prefix, suffix) = (&part[..open], &part[close + 1..]);
                for range in part[open + 1..close].split(',') {
                    let (a, b) = range.split_once('-').unwrap_or((range, range));
                    let width = a.len();
                    if let (Ok(a), Ok(b)) = (a.parse::<u64>(), b.parse::<u64>()) {
                        for n in a..=b.min(a + 100_000) {
                            for expanded in expand_hostlist(&format!("{prefix}{n:0width$}{suffix}")) {
                                out.push(expanded);
                            }
                        }
                    }
                }
            }
            _ => out.push(part.to_string()),
        }
    }
    out
}

/// Count of `0-3,5` (CPU_IDs, IDX) and the indices.
fn index_list(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for r in s.split(',').filter(|r| !r.is_empty()) {
        let (a, b) = r.split_once('-').unwrap_or((r, r));
        if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
            out.extend(a..=b.min(a.saturating_add(4096)));
        }
    }
    out
}

/// GPUs and their type in a GRES string (`gpu:v100:4(S:0),shard:8`, `gpu:2`, `gres:gpu:2`,
/// `gres/gpu:v100=2`).
pub fn gpu_count(gres: &str) -> (u32, Option<String>) {
    let mut total = 0;
    let mut gpu_type = None;
    for item in gres.split(',') {
        let item = item.split('(').next().unwrap_or("");
        let item = item.strip_prefix("gres:").or_else(|| item.strip_prefix("gres/")).unwrap_or(item);
        let parts: Vec<&str> = item.split([':', '=']).collect();
        if parts.first() != Some(&"gpu") {
            continue;
        }
        match parts.as_slice() {
            ["gpu"] => total += 1,
            ["gpu", n] if n.parse::<u32>().is_ok() => total += n.parse::<u32>().unwrap_or(0),
            ["gpu", t] => {
                total += 1;
                gpu_type = Some((*t).to_string());
            }
            ["gpu", t, n, ..] => {
                total += n.parse::<u32>().unwrap_or(0);
                gpu_type = Some((*t).to_string());
            }
            _ => {}
        }
    }
    (total, gpu_type)
}

/// Unix seconds of an scontrol time printed under `TZ=UTC` (`None` for Unknown / None).
pub fn unix_s(t: &str) -> Option<f64> {
    model::carbon_source::parse_timestamp(t).map(|s| s as f64)
}

/// Seconds of an scontrol `TimeLimit` / `DefaultTime` / `MaxTime` (`None`: not set).
pub fn limit_s(v: &str) -> Option<f64> {
    match v {
        "UNLIMITED" | "INFINITE" => Some(UNLIMITED_TIME_S),
        "NONE" | "Partition_Limit" | "" => None,
        other => crate::whatif::sbatch::parse_time_limit(other).map(|l| l.map_or(UNLIMITED_TIME_S, |s| s as f64)),
    }
}

/// Memory (MB) of `1000M`, `2G`, `0`.
fn mem_mb(v: &str) -> u64 {
    crate::whatif::sbatch::parse_mem_mb(v).unwrap_or(0)
}

fn uid_of(user_id: &str) -> u32 {
    // `root(0)`
    user_id.rsplit_once('(').and_then(|(_, r)| r.trim_end_matches(')').parse().ok()).unwrap_or(u32::MAX)
}

/// A partition as `scontrol show partition` gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Partition {
    pub name: String,
    pub nodes: Vec<String>,
    pub default: bool,
    pub default_time_s: Option<f64>,
    pub max_time_s: Option<f64>,
    pub up: bool,
}

/// What the commands show, parsed.
#[derive(Debug, Clone, Default)]
pub struct ClusterText {
    pub config: String,
    pub nodes: String,
    pub jobs: String,
    pub partitions: String,
    pub reservations: String,
}

impl ClusterText {
    /// Runs the commands (SLURM_CONF as in the environment).
    pub fn read() -> Result<ClusterText, String> {
        Ok(ClusterText {
            config: scontrol(&["show", "config"])?,
            nodes: scontrol(&["-o", "show", "node"])?,
            jobs: scontrol(&["-o", "-d", "show", "job"])?,
            partitions: scontrol(&["-o", "show", "partition"])?,
            reservations: scontrol(&["-o", "show", "reservation"])?,
        })
    }

    /// `Key = value` of `scontrol show config`.
    pub fn config_value(&self, key: &str) -> Option<String> {
        self.config.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    }
}

fn scontrol(args: &[&str]) -> Result<String, String> {
    let out = Command::new("scontrol").args(args).env("TZ", "UTC").output().map_err(|e| format!("scontrol: {e} (is Slurm's client installed?)"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        // "No reservations in the system" is not an error.
        if stdout.contains("No ") || stderr.contains("No reservations") {
            return Ok(String::new());
        }
        return Err(format!("scontrol {}: {}", args.join(" "), stderr.trim()));
    }
    Ok(stdout)
}

/// The snapshot, the partitions, and what was left out.
pub struct Built {
    pub snapshot: Snapshot,
    pub partitions: Vec<Partition>,
    /// Node names by snapshot index.
    pub names: Vec<String>,
    /// Each node's GRES GPU type (`gpu` when untyped), by snapshot index.
    pub gres_types: Vec<String>,
    /// Memory is a consumable resource (SelectTypeParameters with MEMORY).
    pub mem_consumable: bool,
    pub notes: Vec<String>,
}

/// Pending reasons of jobs the planner may start (others wait for something else: a
/// dependency, a hold, a limit).
fn runnable_reason(reason: &str) -> bool {
    matches!(reason, "None" | "Priority" | "Resources" | "") || reason.starts_with("sched/energy") || reason.starts_with("ReqNodeNotAvail")
}

/// Builds the snapshot as sched/energy's snapshot does: nodes in Slurm's preference order
/// (Weight, then table order), running jobs with their allocations and recorded clocks,
/// runnable pending jobs in priority order (with the site's default hints: their `--energy-*`
/// options are not shown to other users), and advanced reservations.
pub fn build(text: &ClusterText, gpu_type_of: &dyn Fn(&str) -> GpuType, default_hints: &Hints, now_s: f64) -> Built {
    let mut notes = Vec::new();
    let mem_consumable = text.config_value("SelectTypeParameters").is_some_and(|v| v.to_ascii_uppercase().contains("MEMORY"));
    let mut node_recs: Vec<(u32, usize, Record)> = parse_records(&text.nodes)
        .into_iter()
        .enumerate()
        .map(|(i, r)| (field(&r, "Weight").and_then(|w| w.parse().ok()).unwrap_or(1), i, r))
        .collect();
    node_recs.sort_by_key(|(w, i, _)| (*w, *i));
    let mut gpu_types: Vec<GpuType> = Vec::new();
    let mut type_index: BTreeMap<String, usize> = BTreeMap::new();
    let mut nodes = Vec::new();
    let mut names = Vec::new();
    let mut gres_types = Vec::new();
    for (_, _, r) in &node_recs {
        let Some(name) = field(r, "NodeName") else { continue };
        let (gpus, t) = gpu_count(field(r, "Gres").unwrap_or(""));
        let type_name = t.unwrap_or_else(|| "gpu".into());
        let gpu_type = *type_index.entry(type_name.clone()).or_insert_with(|| {
            gpu_types.push(gpu_type_of(&type_name));
            gpu_types.len() - 1
        });
        let state = field(r, "State").unwrap_or("").to_ascii_uppercase();
        let power = if state.contains("POWERED_DOWN") || state.contains("POWERING_DOWN") {
            PowerState::Suspended
        } else if state.contains("POWERING_UP") {
            PowerState::Resuming { ready_at_s: now_s + model::predictor::NodePower::default().resume_s }
        } else {
            PowerState::On
        };
        let unusable = ["DOWN", "DRAIN", "FAIL", "MAINT", "FUTURE", "INVAL", "*"].iter().any(|s| state.contains(s));
        names.push(name.to_string());
        gres_types.push(type_name);
        nodes.push(Node {
            name: name.to_string(),
            gpu_type,
            gpus,
            cpus: field(r, "CPUTot").and_then(|c| c.parse().ok()).unwrap_or(1),
            mem_mb: if mem_consumable { field(r, "RealMemory").and_then(|m| m.parse().ok()).unwrap_or(0) } else { 0 },
            power,
            available: !unusable,
        });
    }
    let index: BTreeMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
    let set_of = |hosts: &[String]| -> NodeSet { hosts.iter().filter_map(|h| index.get(h.as_str()).copied()).collect() };

    let partitions: Vec<Partition> = parse_records(&text.partitions)
        .iter()
        .filter_map(|r| {
            let nodes = match field(r, "Nodes") {
                Some("ALL") => names.clone(),
                Some(list) => expand_hostlist(list),
                None => Vec::new(),
            };
            Some(Partition {
                name: field(r, "PartitionName")?.to_string(),
                nodes,
                default: field(r, "Default") == Some("YES"),
                default_time_s: field(r, "DefaultTime").and_then(limit_s),
                max_time_s: field(r, "MaxTime").and_then(limit_s),
                up: field(r, "State").is_none_or(|s| s == "UP"),
            })
        })
        .collect();

    let mut sets = NodeSetInterner::default();
    let mut reservations = Vec::new();
    for r in parse_records(&text.reservations) {
        let (Some(name), Some(start), Some(end)) = (field(&r, "ReservationName"), field(&r, "StartTime").and_then(unix_s), field(&r, "EndTime").and_then(unix_s)) else { continue };
        if end <= now_s {
            continue;
        }
        let node_set = sets.intern(set_of(&expand_hostlist(field(&r, "Nodes").unwrap_or(""))));
        reservations.push(AdvanceReservation { name: name.to_string(), node_set, start_s: start, end_s: end, held_for: None });
    }

    let mut running = Vec::new();
    let mut pending: Vec<(u32, f64, PendingJob)> = Vec::new();
    let mut skipped = 0;
    for r in parse_records(&text.jobs) {
        let Some(id) = field(&r, "JobId").and_then(|j| j.parse::<u32>().ok()) else { continue };
        let state = field(&r, "JobState").unwrap_or("");
        let user = uid_of(field(&r, "UserId").unwrap_or(""));
        let record = field(&r, "AdminComment").unwrap_or("");
        let tag = model::decision::recorded_field(record, "tag").map(str::to_string);
        let hints = Hints { tag, ..default_hints.clone() };
        match state {
            "RUNNING" | "SUSPENDED" | "COMPLETING" => {
                let mut allocations = Vec::new();
                // -d: per node group `Nodes=... CPU_IDs=... Mem=... GRES=...`.
                let mut k = 0;
                while k < r.len() {
                    if r[k].0 == "Nodes" {
                        let hosts = expand_hostlist(&r[k].1);
                        let mut cpus = 0;
                        let mut mem = 0;
                        let mut gpus = Vec::new();
                        for (key, v) in r[k + 1..].iter().take_while(|(key, _)| key != "Nodes") {
                            match key.as_str() {
                                "CPU_IDs" => cpus = index_list(v).len() as u32,
                                "Mem" => mem = v.parse().unwrap_or(0),
                                "GRES" | "GRES_IDX" => {
                                    if let Some(idx) = v.split("IDX:").nth(1) {
                                        gpus = index_list(idx.split(')').next().unwrap_or(""));
                                    }
                                }
                                _ => {}
                            }
                        }
                        for h in hosts {
                            if let Some(&n) = index.get(h.as_str()) {
                                allocations.push(NodeAllocation {
                                    node: NodeIdx(n as u32),
                                    gpu_indices: gpus.iter().filter_map(|&g| u8::try_from(g).ok()).collect(),
                                    cpus: if state == "SUSPENDED" { 0 } else { cpus },
                                    mem_mb: if mem_consumable { mem } else { 0 },
                                });
                            }
                        }
                    }
                    k += 1;
                }
                if allocations.is_empty() {
                    continue;
                }
                let end = if state == "COMPLETING" { now_s } else { field(&r, "EndTime").and_then(unix_s).map_or(now_s + UNLIMITED_TIME_S, |e| e.max(now_s + 1.0)) };
                let clock_mhz = model::decision::recorded_clock_mhz(record)
                    .unwrap_or_else(|| allocations.first().and_then(|a| nodes.get(a.node.0 as usize)).and_then(|n| gpu_types.get(n.gpu_type)).map_or(0, |g| g.default_clock_mhz));
                running.push(RunningJob { id: JobId(id), user, start_time_s: field(&r, "StartTime").and_then(unix_s).unwrap_or(now_s), end_time_s: end, allocations, clock_mhz, hints, shared: false });
            }
            "PENDING" => {
                if !runnable_reason(field(&r, "Reason").unwrap_or("")) {
                    skipped += 1;
                    continue;
                }
                let nodes_n: u32 = field(&r, "NumNodes").and_then(|n| n.split('-').next()?.parse().ok()).unwrap_or(1).max(1);
                let cpus: u32 = field(&r, "NumCPUs").and_then(|n| n.split('-').next()?.parse().ok()).unwrap_or(1);
                let per_node = field(&r, "TresPerNode").map_or(0, |t| gpu_count(t).0);
                let per_job = field(&r, "TresPerJob").map_or(0, |t| gpu_count(t).0);
                let gpus_per_node = if per_node > 0 { per_node } else { per_job.div_ceil(nodes_n) };
                let mem = field(&r, "MinMemoryNode").map(mem_mb).or_else(|| field(&r, "MinMemoryCPU").map(|m| mem_mb(m) * u64::from(cpus.div_ceil(nodes_n)))).unwrap_or(0);
                let partition = field(&r, "Partition").unwrap_or("").split(',').next().unwrap_or("");
                let part = partitions.iter().find(|p| p.name == partition);
                let limit = field(&r, "TimeLimit").and_then(limit_s).or_else(|| part.and_then(|p| p.default_time_s.or(p.max_time_s))).unwrap_or(UNLIMITED_TIME_S);
                let eligible = part.map(|p| vec![Eligibility { node_set: sets.intern(set_of(&p.nodes)), reservation: None, not_before_s: 0.0, route: 0 }]).unwrap_or_default();
                let priority: u32 = field(&r, "Priority").and_then(|p| p.parse().ok()).unwrap_or(0);
                let submit = field(&r, "SubmitTime").and_then(unix_s).unwrap_or(now_s);
                pending.push((
                    priority,
                    submit,
                    PendingJob {
                        id: JobId(id),
                        user,
                        priority,
                        submit_time_s: submit,
                        request: Request { nodes: nodes_n, gpus_per_node, cpus_per_node: cpus.div_ceil(nodes_n), mem_mb_per_node: if mem_consumable { mem } else { 0 } },
                        time_limit_s: limit,
                        hints,
                        cpus_range: None,
                        eligible,
                        placed_by_slurm: false,
                        alternative: false,
                        no_reservation: false,
                        slurm_may_spread: false,
                    },
                ));
            }
            _ => {}
        }
    }
    // Slurm's order: priority, then submission.
    pending.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.total_cmp(&b.1)));
    if skipped > 0 {
        notes.push(format!("{skipped} pending job(s) wait for something else (dependency, hold, limit) and are left out, as sched/energy leaves them out"));
    }
    let pending: Vec<PendingJob> = pending.into_iter().map(|(_, _, j)| j).collect();
    if !pending.is_empty() {
        notes.push(format!("{} pending job(s) ahead are planned with the site's default hints (their --energy-* options are not visible)", pending.len()));
    }
    Built {
        snapshot: Snapshot { now_s, gpu_types, nodes, running, pending, node_sets: sets.into_sets(), reservations },
        partitions,
        names,
        gres_types,
        mem_consumable,
        notes,
    }
}

/// Adds `set` to the snapshot's node sets (for the what-if job's own eligibility); its index.
pub fn add_set(snapshot: &mut Snapshot, set: NodeSet) -> u32 {
    snapshot.node_sets.push(set);
    (snapshot.node_sets.len() - 1) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=2 CPUTot=8 CPULoad=0.0 AvailableFeatures=(null) Gres=gpu:v100:4(S:0) NodeAddr=127.0.0.1 RealMemory=16000 State=MIXED ThreadsPerCore=1 Weight=5 Partitions=gpu\n\
NodeName=n2 CPUTot=8 Gres=gpu:v100:4 RealMemory=16000 State=IDLE+DRAIN Weight=1 Partitions=gpu\n\
NodeName=n3 CPUTot=8 Gres=gpu:v100:4 RealMemory=16000 State=IDLE+POWERED_DOWN Weight=1 Partitions=gpu\n";
    const JOBS: &str = "JobId=11 JobName=a b UserId=alice(1001) GroupId=g(1) Priority=100 JobState=RUNNING Reason=None TimeLimit=01:00:00 SubmitTime=2026-11-27T10:00:00 StartTime=2026-11-27T10:00:00 EndTime=2026-11-27T11:00:00 Partition=gpu NodeList=n1 NumNodes=1 NumCPUs=2 AdminComment=energy:policy=efficiency nodes=n1 clock=1005MHz share=none tag=bert Nodes=n1 CPU_IDs=0-1 Mem=1000 GRES=gpu:v100:2(IDX:1-2) TresPerNode=gres:gpu:2\n\
JobId=12 UserId=bob(1002) Priority=50 JobState=PENDING Reason=Resources TimeLimit=00:30:00 SubmitTime=2026-11-27T10:05:00 Partition=gpu NumNodes=1-1 NumCPUs=4 TresPerNode=gres:gpu:3 MinMemoryNode=2G\n\
JobId=13 UserId=bob(1002) Priority=900 JobState=PENDING Reason=Dependency TimeLimit=00:30:00 Partition=gpu NumNodes=1 NumCPUs=1\n\
JobId=14 UserId=carol(1003) Priority=70 JobState=PENDING Reason=Priority TimeLimit=Partition_Limit SubmitTime=2026-11-27T10:06:00 Partition=gpu NumNodes=2 NumCPUs=2 TresPerJob=gres:gpu:4\n";
    const PARTS: &str = "PartitionName=gpu AllowGroups=ALL Default=YES DefaultTime=00:20:00 MaxTime=1-00:00:00 Nodes=n[1-3] State=UP\n";
    const RES: &str = "ReservationName=maint StartTime=2026-11-27T12:00:00 EndTime=2026-11-27T13:00:00 Duration=01:00:00 Nodes=n[2-3] NodeCnt=2 Flags=MAINT\n";

    fn gpu(name: &str) -> GpuType {
        GpuType { name: name.into(), default_clock_mhz: 1312, min_clock_mhz: 510, max_clock_mhz: 1530, idle_power_w: 40.0, max_power_w: 300.0 }
    }

    #[test]
    fn records_hostlists_and_gres() {
        let r = parse_record("JobId=1 JobName=x AdminComment=energy:policy=balanced nodes=n1 clock=900MHz Partition=gpu");
        assert_eq!(field(&r, "AdminComment"), Some("energy:policy=balanced nodes=n1 clock=900MHz"));
        assert_eq!(field(&r, "Partition"), Some("gpu"));
        assert_eq!(expand_hostlist("n[1-3,05-06],gpu1"), ["n1", "n2", "n3", "n05", "n06", "gpu1"]);
        assert_eq!(gpu_count("gpu:v100:4(S:0),shard:8"), (4, Some("v100".into())));
        assert_eq!(gpu_count("gres:gpu:2"), (2, None));
        assert_eq!(gpu_count("gres/gpu=3"), (3, None));
        assert_eq!(gpu_count("(null)"), (0, None));
        assert_eq!(limit_s("1-00:00:00"), Some(86_400.0));
        assert_eq!(limit_s("UNLIMITED"), Some(UNLIMITED_TIME_S));
    }

    #[test]
    fn the_snapshot_of_a_small_cluster() {
        let text = ClusterText { config: "SelectTypeParameters    = CR_CORE_MEMORY\n".into(), nodes: NODES.into(), jobs: JOBS.into(), partitions: PARTS.into(), reservations: RES.into() };
        let now = unix_s("2026-11-27T10:30:00").unwrap();
        let b = build(&text, &gpu, &Hints::default(), now);
        let s = &b.snapshot;
        // Weight 1 first (n2, n3), then n1.
        assert_eq!(b.names, ["n2", "n3", "n1"]);
        assert!(!s.nodes[0].available, "drained");
        assert_eq!(s.nodes[1].power, PowerState::Suspended);
        assert_eq!((s.nodes[2].gpus, s.nodes[2].cpus, s.nodes[2].mem_mb), (4, 8, 16000));
        assert_eq!(s.running.len(), 1);
        let r = &s.running[0];
        assert_eq!((r.user, r.clock_mhz, r.hints.tag.as_deref()), (1001, 1005, Some("bert")));
        assert_eq!(r.allocations, [NodeAllocation { node: NodeIdx(2), gpu_indices: vec![1, 2], cpus: 2, mem_mb: 1000 }]);
        assert_eq!(r.end_time_s, unix_s("2026-11-27T11:00:00").unwrap());
        // 13 waits on a dependency; 14 (priority 70) before 12 (50).
        let ids: Vec<u32> = s.pending.iter().map(|p| p.id.0).collect();
        assert_eq!(ids, [14, 12]);
        assert_eq!(s.pending[1].request, Request { nodes: 1, gpus_per_node: 3, cpus_per_node: 4, mem_mb_per_node: 2048 });
        assert_eq!(s.pending[0].request.gpus_per_node, 2, "--gpus=4 over 2 nodes");
        assert_eq!(s.pending[0].time_limit_s, 1200.0, "the partition's DefaultTime");
        assert_eq!(s.reservations.len(), 1);
        assert_eq!(s.node_sets[s.reservations[0].node_set as usize].iter().collect::<Vec<_>>(), [0, 1]);
        assert_eq!(b.partitions[0].nodes, ["n1", "n2", "n3"]);
        assert!(b.notes.iter().any(|n| n.contains("1 pending job(s) wait")), "{:?}", b.notes);
    }
}
