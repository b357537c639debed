//! Per-job energy and carbon, kept in the job's decision record (its admin comment) while it
//! runs, so that the value at the job's end reaches slurmdbd with its completion record
//! (`sacct -o AdminComment`).
//!
//! slurmctld knows each node's energy counter from the acct_gather_energy plugin
//! (`AcctGatherNodeFreq`). Each cycle, every new reading's energy since the previous reading is
//! split over the node's GPUs equally, each GPU's part over the jobs holding it (a GPU shared
//! through `gres/shard` splits equally among its jobs; an idle GPU's part goes to no job) and
//! the part of the interval each job ran; a node without GPUs is split by CPUs. The carbon of a
//! part is its energy times the grid intensity at the middle of the interval; energy for which
//! the carbon source had no value is counted in `carbon_unknown_j=` instead.
//!
//! Only jobs with a decision record (started by sched/energy) are accounted. The energy after
//! the last reading before a job ends (at most one AcctGatherNodeFreq) is not in its record.

use std::collections::HashMap;

use model::decision::{recorded_carbon_g, recorded_energy_j, recorded_field, set_recorded_field};
use slurm_bindings::locks::SlurmctldLock;
use slurm_bindings::slurm_log;

use crate::LOG;
use crate::carbon_feed::CarbonFeed;
use model::energy_split::{Holder, Reading, interval_energy_j, split};

/// What one job accumulated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobAccount {
    pub energy_j: f64,
    pub carbon_g: f64,
    pub carbon_unknown_j: f64,
    /// Energy and seconds seen by this slurmctld (not restored from the record): the job's
    /// measured power for learning.
    pub seen_j: f64,
    pub seen_s: f64,
    written: String,
}

/// The accounting state across cycles.
#[derive(Debug, Default)]
pub struct Accounting {
    nodes: HashMap<String, Reading>,
    /// Nodes whose counter did not move while they drew power (logged once each).
    integrating: std::collections::HashSet<String>,
    jobs: HashMap<u32, JobAccount>,
}

struct RunningCopy {
    id: u32,
    start: i64,
    comment: Option<String>,
    holdings: Vec<slurm_bindings::job::NodeHolding>,
}

impl Accounting {
    pub fn job(&self, id: u32) -> Option<&JobAccount> {
        self.jobs.get(&id)
    }

    /// The nodes' last readings: node name -> (current W, poll time, Unix s).
    pub fn node_power(&self) -> HashMap<String, (f64, i64)> {
        self.nodes.iter().map(|(n, r)| (n.clone(), (f64::from(r.current_w), r.poll_time))).collect()
    }

    /// One pass: new node readings -> the running jobs' records. Needs the job and node write
    /// locks (the scheduler's set). Returns how many records were updated.
    pub fn update(&mut self, lock: &mut SlurmctldLock, carbon: Option<&CarbonFeed>) -> Result<usize, String> {
        let running: Vec<RunningCopy> = lock
            .jobs()
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|j| j.is_running() || j.is_suspended())
            .filter(|j| j.admin_comment().is_some_and(|c| c.trim_start().starts_with("energy:")))
            .map(|j| RunningCopy { id: j.id(), start: j.start_time(), comment: j.admin_comment().map(str::to_string), holdings: j.holdings() })
            .collect();
        // Jobs seen for the first time continue from their record (a restarted slurmctld).
        for r in &running {
            self.jobs.entry(r.id).or_insert_with(|| {
                let c = r.comment.as_deref().unwrap_or("");
                JobAccount {
                    energy_j: recorded_energy_j(c).unwrap_or(0.0),
                    carbon_g: recorded_carbon_g(c).unwrap_or(0.0),
                    carbon_unknown_j: recorded_field(c, "carbon_unknown_j").and_then(|v| v.parse().ok()).unwrap_or(0.0),
                    ..JobAccount::default()
                }
            });
        }
        let running_ids: std::collections::HashSet<u32> = running.iter().map(|r| r.id).collect();
        self.jobs.retain(|id, _| running_ids.contains(id));

        let nodes = lock.nodes().map_err(|e| e.to_string())?;
        for node in nodes {
            let Some(e) = node.energy() else { continue };
            let now = Reading { consumed_j: e.consumed_j, current_w: e.current_w, poll_time: e.poll_time };
            let prev = self.nodes.insert(node.name().to_string(), now);
            if prev != Some(now) {
                slurm_log!(LOG, debug, "node {}: {} J at {} ({} W)", node.name(), e.consumed_j, e.poll_time, e.current_w);
            }
            let Some(prev) = prev else { continue };
            if now.poll_time <= prev.poll_time {
                if now.poll_time < prev.poll_time {
                    self.nodes.insert(node.name().to_string(), prev);
                }
                continue;
            }
            let Some((delta_j, integrated)) = interval_energy_j(prev, now) else {
                slurm_log!(LOG, verbose, "node {}: energy counter went back ({} -> {} J): restarted from there", node.name(), prev.consumed_j, now.consumed_j);
                continue;
            };
            if integrated && self.integrating.insert(node.name().to_string()) {
                slurm_log!(LOG, info, "node {}: its energy counter does not advance (ConsumedEnergy {} J at {} W): job energy is integrated from CurrentWatts instead", node.name(), now.consumed_j, now.current_w);
            }
            let holders: Vec<Holder> = running
                .iter()
                .filter_map(|r| {
                    let h = r.holdings.iter().find(|h| h.node == node.index())?;
                    let mut gpus = h.gpu_indices.clone();
                    gpus.extend(h.shard_gpu_indices.iter().filter(|g| !h.gpu_indices.contains(g)));
                    Some(Holder { job: r.id, start_unix_s: r.start, gpus, cpus: h.cpus })
                })
                .collect();
            let mid = prev.poll_time + (now.poll_time - prev.poll_time) / 2;
            let g_per_kwh = carbon.and_then(|c| c.intensity_at(mid));
            for (job, j, ran_s) in split(delta_j, prev.poll_time, now.poll_time, node.gpus(), node.cpus(), &holders) {
                let Some(acc) = self.jobs.get_mut(&job) else { continue };
                acc.energy_j += j;
                acc.seen_j += j;
                acc.seen_s += ran_s / holders_nodes(&running, job) as f64;
                match g_per_kwh {
                    Some(g) => acc.carbon_g += j / 3.6e6 * g,
                    None => acc.carbon_unknown_j += j,
                }
            }
        }

        let mut updated = 0;
        for r in &running {
            let Some(acc) = self.jobs.get_mut(&r.id) else { continue };
            if acc.energy_j <= 0.0 {
                continue;
            }
            let Some(comment) = r.comment.as_deref() else { continue };
            let mut text = set_recorded_field(comment, "energy_j", &format!("{:.0}", acc.energy_j));
            if carbon.is_some() || acc.carbon_g > 0.0 {
                text = set_recorded_field(&text, "carbon_g", &format!("{:.3}", acc.carbon_g));
            }
            if acc.carbon_unknown_j >= 0.5 && (carbon.is_some() || acc.carbon_g > 0.0) {
                text = set_recorded_field(&text, "carbon_unknown_j", &format!("{:.0}", acc.carbon_unknown_j));
            }
            if text != comment && text != acc.written {
                match lock.set_admin_comment(r.id, &text) {
                    Ok(true) => {
                        acc.written = text;
                        updated += 1;
                    }
                    Ok(false) => {}
                    Err(e) => slurm_log!(LOG, debug, "JobId={}: energy record not updated: {e}", r.id),
                }
            }
        }
        Ok(updated)
    }
}

/// Nodes a job runs on (its seen seconds add up over nodes; the power is per job).
fn holders_nodes(running: &[RunningCopy], job: u32) -> usize {
    running.iter().find(|r| r.id == job).map_or(1, |r| r.holdings.len().max(1))
}
