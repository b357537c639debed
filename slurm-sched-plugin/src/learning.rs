//! What sched/energy learns live, and where it keeps it.
//!
//! Each cycle, before planning: finished jobs still in slurmctld's job list teach
//! `model::history` their run time against their limit, their measured GPU energy (the
//! `energy_j=` of their decision record, see [`crate::accounting`]), the clock they ran at and
//! the power that was predicted for them; running jobs teach it, once they ran
//! `early_after_s`, the power measured since they started. The planner predicts with it
//! (`Predictor::runtime`), exactly as in the simulator.
//!
//! The state is kept in `energy-learning.json` in StateSaveLocation (or `[learning]
//! state_file`), written atomically (temporary file, fsync, rename) whenever it changed, and
//! read at start; a file that cannot be parsed is moved aside (`.corrupt-<unix time>`) and
//! logged, and learning starts afresh.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use model::decision::{recorded_clock_mhz, recorded_energy_j, recorded_field};
use model::gpu_use::UseLog;
use model::history::{EarlyRun, FinishedJob, History};
use model::interference::{InterferenceHistory, InterferenceModel, slowdown_from_utilisation};
use serde::{Deserialize, Serialize};
use slurm_bindings::job::TimeLimit;
use slurm_bindings::locks::{LockLevels, SlurmctldLock};
use slurm_bindings::slurm_log;

use crate::LOG;
use crate::accounting::Accounting;
use crate::carbon_feed::CarbonFeed;
use crate::config::Config;
use crate::gpu_use_listener::{Trusted, UseListener};

/// The state file's name in StateSaveLocation.
pub const STATE_FILE: &str = "energy-learning.json";
/// Finished jobs are remembered (not learnt twice) this long after they ended.
const REMEMBER_S: i64 = 7 * 86_400;

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct Saved {
    version: u32,
    history: History,
    /// Finished jobs already learnt from: job id -> end time.
    learnt_jobs: BTreeMap<u32, i64>,
    /// Running jobs whose first minutes were already learnt.
    early_done: BTreeSet<u32>,
    /// Pair slowdowns observed on this cluster (EaCO's history).
    interference: InterferenceHistory,
    /// Running jobs whose solo GPU use was learnt.
    use_done: BTreeSet<u32>,
    /// Running jobs that joined a GPU whose pair slowdown was learnt (or could not be).
    pairs_done: BTreeSet<u32>,
}

#[derive(Debug, Default)]
pub struct Learning {
    path: Option<PathBuf>,
    learnt_jobs: BTreeMap<u32, i64>,
    early_done: BTreeSet<u32>,
    use_done: BTreeSet<u32>,
    pairs_done: BTreeSet<u32>,
    /// GPUs of running jobs, remembered for when they finish (a finished job's GPUs may be gone
    /// from its record).
    gpus: HashMap<u32, u32>,
    dirty: bool,
}

/// Where the state file goes: `[learning] state_file`, else StateSaveLocation's.
pub fn state_path(cfg: &Config, state_save_location: Option<&Path>) -> Option<PathBuf> {
    cfg.learning.state_file.clone().or_else(|| state_save_location.map(|d| d.join(STATE_FILE)))
}

impl Learning {
    /// Reads the state at `path` (none there: nothing learnt yet). Returns the learning
    /// bookkeeping, the history and the observed pair slowdowns for the predictor.
    pub fn load(path: Option<PathBuf>) -> (Learning, History, InterferenceHistory) {
        let mut l = Learning { path, ..Learning::default() };
        let fresh = |l| (l, History::default(), InterferenceHistory::default());
        let Some(path) = l.path.clone() else {
            LOG.error("no StateSaveLocation and no [learning] state_file: what is learnt is lost at each restart");
            return fresh(l);
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                slurm_log!(LOG, info, "learning: no {} yet, starting from the prior", path.display());
                return fresh(l);
            }
            Err(e) => {
                LOG.error(&format!("learning: cannot read {}: {e}; starting from the prior", path.display()));
                return fresh(l);
            }
        };
        match serde_json::from_str::<Saved>(&text) {
            Ok(saved) => {
                slurm_log!(
                    LOG,
                    info,
                    "learning: loaded {} ({} groups, {} finished jobs remembered, {} shared pairs observed)",
                    path.display(),
                    saved.history.groups().len(),
                    saved.learnt_jobs.len(),
                    saved.interference.pairs_observed()
                );
                l.learnt_jobs = saved.learnt_jobs;
                l.early_done = saved.early_done;
                l.use_done = saved.use_done;
                l.pairs_done = saved.pairs_done;
                (l, saved.history, saved.interference)
            }
            Err(e) => {
                let now = unix_now_s();
                let aside = path.with_extension(format!("json.corrupt-{now}"));
                let moved = std::fs::rename(&path, &aside);
                LOG.error(&format!(
                    "learning: {}:{}: {e}; {} and starting from the prior",
                    path.display(),
                    e.line(),
                    match moved {
                        Ok(()) => format!("moved aside to {}", aside.display()),
                        Err(m) => format!("could not move it aside ({m})"),
                    }
                ));
                fresh(l)
            }
        }
    }

    /// Writes the state if it changed: to a temporary file next to it, synced, then renamed.
    pub fn save(&mut self, history: &History, interference: &InterferenceHistory) {
        if !self.dirty {
            return;
        }
        let Some(path) = self.path.clone() else { return };
        let saved = Saved {
            version: 1,
            history: history.clone(),
            learnt_jobs: self.learnt_jobs.clone(),
            early_done: self.early_done.clone(),
            interference: interference.clone(),
            use_done: self.use_done.clone(),
            pairs_done: self.pairs_done.clone(),
        };
        let result = serde_json::to_vec_pretty(&saved).map_err(|e| e.to_string()).and_then(|bytes| {
            let tmp = path.with_extension("json.new");
            let mut f = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
            f.write_all(&bytes).and_then(|()| f.sync_all()).map_err(|e| format!("{}: {e}", tmp.display()))?;
            std::fs::rename(&tmp, &path).map_err(|e| format!("rename to {}: {e}", path.display()))
        });
        match result {
            Ok(()) => self.dirty = false,
            Err(e) => LOG.error(&format!("learning: state not saved: {e}")),
        }
    }

    /// Learns from the job list: finished jobs once, running jobs' first minutes once.
    pub fn learn(&mut self, lock: &SlurmctldLock, learnt: Learnt<'_>, accounting: &Accounting, cfg: &Config, now_unix_s: i64) -> Result<(), String> {
        let Learnt { history, interference, uses } = learnt;
        let jobs = lock.jobs().map_err(|e| e.to_string())?;
        let mut live: BTreeSet<u32> = BTreeSet::new();
        let mut listed: BTreeSet<u32> = BTreeSet::new();
        let mut running: Vec<RunningJob> = Vec::new();
        for job in jobs {
            let id = job.id();
            listed.insert(id);
            let start = job.start_time();
            if job.is_running() {
                live.insert(id);
                let gpus: usize = job.holdings().iter().map(|h| h.gpu_indices.len().max(h.shard_gpu_indices.len())).sum();
                self.gpus.insert(id, gpus as u32);
                if uses.is_some() {
                    let record = job.admin_comment().unwrap_or("");
                    let shares_with = recorded_field(record, "share").map_or_else(Vec::new, |s| s.split('+').filter_map(|j| j.parse().ok()).collect());
                    let hints = crate::hints::from_spank_env(job.spank_env(), &cfg.planner.hints);
                    running.push(RunningJob { id, user: job.user_id(), tag: hints.tag, start_unix_s: start, shares_with, has_record: recorded_field(record, "policy").is_some() });
                }
                if self.early_done.contains(&id) || now_unix_s - start < cfg.learning.early_after_s as i64 {
                    continue;
                }
                let Some(acc) = accounting.job(id) else { continue };
                // Measured over at least half the window (slurmctld may have restarted since).
                if acc.seen_s < cfg.learning.early_after_s / 2.0 || acc.seen_s <= 0.0 {
                    continue;
                }
                let Some(pred_w) = job.admin_comment().and_then(|c| recorded_field(c, "pred_w")).and_then(|v| v.parse::<f64>().ok()) else { continue };
                let hints = crate::hints::from_spank_env(job.spank_env(), &cfg.planner.hints);
                let run = EarlyRun { user: job.user_id(), tag: hints.tag.as_deref(), power_w: acc.seen_j / acc.seen_s, predicted_power_w: pred_w, gpu_util_pct: None };
                history.observe_early(&run);
                slurm_log!(LOG, debug, "learning: JobId={id} ran at {:.0} W (predicted {:.0} W) in its first {:.0} s", run.power_w, pred_w, acc.seen_s);
                self.early_done.insert(id);
                self.dirty = true;
                continue;
            }
            if !job.is_finished() || start <= 0 || job.end_time() < start || self.learnt_jobs.contains_key(&id) {
                continue;
            }
            let limit_s = match job.time_limit() {
                TimeLimit::Minutes(m) => f64::from(m) * 60.0,
                _ => match job.partition_time_limit() {
                    TimeLimit::Minutes(m) => f64::from(m) * 60.0,
                    _ => 0.0,
                },
            };
            let comment = job.admin_comment().unwrap_or("");
            let hints = crate::hints::from_spank_env(job.spank_env(), &cfg.planner.hints);
            let finished = FinishedJob {
                user: job.user_id(),
                tag: hints.tag.as_deref(),
                runtime_s: (job.end_time() - start) as f64,
                time_limit_s: limit_s,
                gpus: self.gpus.get(&id).copied().unwrap_or(0),
                energy_j: recorded_energy_j(comment),
                predicted_power_w: recorded_field(comment, "pred_w").and_then(|v| v.parse().ok()),
                clock_mhz: recorded_clock_mhz(comment),
            };
            history.observe_finished(&finished);
            slurm_log!(LOG, verbose, "learning: JobId={id} user {} tag {} ran {:.0} s of {:.0} s, energy {:?} J", finished.user, finished.tag.unwrap_or("-"), finished.runtime_s, limit_s, finished.energy_j);
            self.learnt_jobs.insert(id, job.end_time());
            self.early_done.remove(&id);
            self.dirty = true;
        }
        if let Some(uses) = uses {
            self.learn_gpu_use(&running, uses, history, interference, cfg, now_unix_s);
            uses.retain(|id| live.contains(&id));
        }
        self.use_done.retain(|id| live.contains(id));
        self.pairs_done.retain(|id| live.contains(id));
        // GPUs are kept for jobs still listed and not learnt yet (a job purged unseen is dropped).
        self.gpus.retain(|id, _| live.contains(id) || (listed.contains(id) && !self.learnt_jobs.contains_key(id)));
        let before = self.learnt_jobs.len() + self.early_done.len();
        self.learnt_jobs.retain(|_, end| *end >= now_unix_s - REMEMBER_S);
        let learnt = &self.learnt_jobs;
        // An early-run mark of a job no longer running and never seen finishing is dropped.
        self.early_done.retain(|id| live.contains(id) || learnt.contains_key(id));
        if self.learnt_jobs.len() + self.early_done.len() != before {
            self.dirty = true;
        }
        Ok(())
    }
}

/// What one learning pass updates.
pub struct Learnt<'a> {
    pub history: &'a mut History,
    pub interference: &'a mut InterferenceModel,
    /// The nodes' GPU use reports (`None`: not received, `[learning] gpu_use_port = 0`).
    pub uses: Option<&'a mut UseLog>,
}

/// A running job, as the GPU-use learning needs it.
#[derive(Debug)]
struct RunningJob {
    id: u32,
    user: u32,
    tag: Option<String>,
    start_unix_s: i64,
    /// The jobs whose GPU it joined (its record's `share=`).
    shares_with: Vec<u32>,
    /// Started by sched/energy (has a decision record).
    has_record: bool,
}

impl Learning {
    /// From the nodes' reports: each job's GPU use while it had its GPUs to itself (from its
    /// start until a partner joined, once it ran `early_after_s` and the reports cover at least
    /// half of that), once; and each shared pair's slowdowns once
    /// the pair ran `early_after_s` together: each job's use then against its kind's use alone
    /// (`model::interference::slowdown_from_utilisation`), into the interference history the
    /// planner predicts pairs with, as the simulator's early-stage observations do.
    fn learn_gpu_use(&mut self, running: &[RunningJob], uses: &UseLog, history: &mut History, interference: &mut InterferenceModel, cfg: &Config, now_unix_s: i64) {
        let early_s = cfg.learning.early_after_s;
        let now = now_unix_s as f64;
        let by_id: HashMap<u32, &RunningJob> = running.iter().map(|j| (j.id, j)).collect();
        // When each job stopped having its GPU to itself: the start of the first job that
        // joined it, or its own start if it joined another.
        let mut alone_until: HashMap<u32, f64> = HashMap::new();
        for j in running.iter().filter(|j| !j.shares_with.is_empty()) {
            alone_until.insert(j.id, j.start_unix_s as f64);
            for t in &j.shares_with {
                let e = alone_until.entry(*t).or_insert(f64::INFINITY);
                *e = e.min(j.start_unix_s as f64);
            }
        }
        for j in running.iter().filter(|j| j.has_record) {
            if self.use_done.contains(&j.id) {
                continue;
            }
            let start = j.start_unix_s as f64;
            let until = alone_until.get(&j.id).copied().unwrap_or(f64::INFINITY);
            if until - start < early_s {
                // Shared before its first minutes were over: its solo use is not measurable.
                if until.is_finite() {
                    self.use_done.insert(j.id);
                    self.dirty = true;
                }
                continue;
            }
            if now - start < early_s {
                continue;
            }
            // Its first minutes of use: up to now, or until a partner joined.
            let Some(m) = uses.mean_between(j.id, start, until.min(now)) else { continue };
            if m.covered_s < early_s / 2.0 {
                continue;
            }
            history.observe_solo_use(j.user, j.tag.as_deref(), m.util_pct);
            slurm_log!(LOG, verbose, "learning: JobId={} used {:.1} % of its GPUs alone in its first {:.0} s (tag {})", j.id, m.util_pct, m.covered_s, j.tag.as_deref().unwrap_or("-"));
            self.use_done.insert(j.id);
            self.dirty = true;
        }
        for newcomer in running.iter().filter(|j| j.has_record && !j.shares_with.is_empty()) {
            if self.pairs_done.contains(&newcomer.id) {
                continue;
            }
            let since = newcomer.start_unix_s as f64;
            if now - since < early_s {
                continue;
            }
            // A pair: the newcomer and the job it joined (EaCO shares a GPU by two).
            let Some(tenant) = newcomer.shares_with.first().and_then(|t| by_id.get(t)) else {
                self.pairs_done.insert(newcomer.id);
                self.dirty = true;
                continue;
            };
            let (Some(use_n), Some(use_t)) = (uses.mean_between(newcomer.id, since, now), uses.mean_between(tenant.id, since, now)) else { continue };
            if use_n.covered_s.min(use_t.covered_s) < early_s / 2.0 {
                continue;
            }
            self.pairs_done.insert(newcomer.id);
            self.dirty = true;
            let solo_n = history.solo_gpu_util_pct(newcomer.user, newcomer.tag.as_deref());
            let solo_t = history.solo_gpu_util_pct(tenant.user, tenant.tag.as_deref());
            let slowdowns = solo_n.zip(solo_t).and_then(|(sn, st)| slowdown_from_utilisation(sn, use_n.util_pct).zip(slowdown_from_utilisation(st, use_t.util_pct)));
            match (newcomer.tag.as_deref(), tenant.tag.as_deref(), slowdowns) {
                (Some(fa), Some(fb), Some((sa, sb))) => {
                    interference.observe(fa, fb, sa, sb);
                    slurm_log!(
                        LOG,
                        info,
                        "learning: JobId={} ({fa}) shares a GPU with JobId={} ({fb}): GPU use {:.1} % and {:.1} % against {:.1} % and {:.1} % alone: slowdowns {sa:.2} and {sb:.2} observed",
                        newcomer.id,
                        tenant.id,
                        use_n.util_pct,
                        use_t.util_pct,
                        solo_n.unwrap_or(0.0),
                        solo_t.unwrap_or(0.0)
                    );
                }
                _ => slurm_log!(
                    LOG,
                    verbose,
                    "learning: JobId={} shares a GPU with JobId={}: pair not learnt (needs both jobs' --energy-tag and their use alone: tags {:?}/{:?}, alone {:?}/{:?} %)",
                    newcomer.id,
                    tenant.id,
                    newcomer.tag,
                    tenant.tag,
                    solo_n,
                    solo_t
                ),
            }
        }
    }
}

/// Everything sched/energy observes between cycles: the carbon file, the nodes' energy (into
/// the jobs' records) and the jobs' outcomes (into the history the planner predicts with).
#[derive(Default)]
pub struct Observer {
    pub carbon: Option<CarbonFeed>,
    pub accounting: Accounting,
    pub learning: Option<Learning>,
    /// The nodes' GPU use reports (`[learning] gpu_use_port`).
    pub gpu_use: Option<UseListener>,
    /// munged's socket (slurm.conf `AuthInfo`) and who may report.
    pub gpu_use_auth: (Option<String>, Option<Trusted>),
}

impl Observer {
    /// One pass before a cycle; updates the predictor's carbon signal and history.
    pub fn observe(&mut self, cfg: &Config, predictor: &mut model::predictor::Predictor) {
        let now = unix_now_s();
        predictor.carbon = match self.carbon.as_mut() {
            Some(feed) => {
                feed.refresh();
                feed.signal_at(now)
            }
            None => None,
        };
        let Ok(mut lock) = SlurmctldLock::acquire(LockLevels::SCHEDULER) else { return };
        match self.accounting.update(&mut lock, self.carbon.as_ref()) {
            Ok(n) if n > 0 => slurm_log!(LOG, debug, "energy/carbon records of {n} running job(s) updated"),
            Ok(_) => {}
            Err(e) => LOG.error(&format!("per-job energy not updated: {e}")),
        }
        let mut reports = self.gpu_use.as_ref().map(UseListener::reports);
        if cfg.learning.enabled
            && let Some(l) = self.learning.as_mut()
        {
            let learnt = Learnt { history: &mut predictor.runtime, interference: &mut predictor.interference, uses: reports.as_deref_mut() };
            if let Err(e) = l.learn(&lock, learnt, &self.accounting, cfg, now) {
                LOG.error(&format!("learning: {e}"));
            }
        }
        drop(reports);
        drop(lock);
        if let Some(l) = self.learning.as_mut() {
            l.save(&predictor.runtime, predictor.interference.history());
        }
    }

    /// Starts, moves or stops the GPU use listener as `[learning]` says.
    pub fn listen_for_gpu_use(&mut self, cfg: &Config) -> Result<(), String> {
        let port = if cfg.learning.enabled { cfg.learning.gpu_use_port } else { 0 };
        if self.gpu_use.as_ref().map(UseListener::port) == Some(port) {
            return Ok(());
        }
        self.gpu_use = None;
        if port == 0 {
            slurm_log!(LOG, info, "learning: GPU use of running jobs is not learnt ([learning] gpu_use_port is 0)");
            return Ok(());
        }
        let (socket, trusted) = self.gpu_use_auth.clone();
        let trusted = trusted.unwrap_or(Trusted { slurm_user_id: 0 });
        self.gpu_use = Some(UseListener::start(port, socket, trusted)?);
        Ok(())
    }
}

fn unix_now_s() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_survives_a_save_and_a_load() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(STATE_FILE);
        let (mut l, mut h, pairs) = Learning::load(Some(path.clone()));
        assert!(h.groups().is_empty());
        assert_eq!(pairs.pairs_observed(), 0.0);
        h.observe(1000, 60.0, 600.0);
        let mut m = InterferenceModel::default();
        m.observe("resnet18", "vgg16", 2.0, 1.5);
        l.learnt_jobs.insert(42, 1_700_000_000);
        l.pairs_done.insert(43);
        l.dirty = true;
        l.save(&h, m.history());
        assert!(path.is_file());
        assert!(!path.with_extension("json.new").exists(), "the temporary file was renamed");
        let (l2, h2, pairs2) = Learning::load(Some(path));
        assert_eq!(h2, h);
        assert_eq!(&pairs2, m.history());
        assert_eq!(l2.learnt_jobs.get(&42), Some(&1_700_000_000));
        assert!(l2.pairs_done.contains(&43));
    }

    #[test]
    fn gpu_use_teaches_solo_use_then_pair_slowdowns() {
        use model::gpu_use::UseReport;
        let job = |id: u32, tag: &str, start: i64, shares_with: Vec<u32>| RunningJob { id, user: 1000, tag: Some(tag.into()), start_unix_s: start, shares_with, has_record: true };
        let mut uses = UseLog::default();
        let mut report = |id: u32, from: f64, to: f64, util: f64| uses.add(UseReport { job_id: id, node: "n1".into(), from_unix_s: from, to_unix_s: to, gpus: 1, util_pct: util });
        report(1, 0.0, 10.0, 80.0);
        report(2, 0.0, 10.0, 60.0);
        report(3, 20.0, 30.0, 80.0);
        report(3, 30.0, 45.0, 40.0);
        report(4, 30.0, 45.0, 20.0);
        let running = vec![job(1, "a", 0, vec![]), job(2, "b", 0, vec![]), job(3, "a", 20, vec![]), job(4, "b", 30, vec![3])];
        let cfg = Config { learning: crate::config::LearningSettings { early_after_s: 10.0, ..Default::default() }, ..Config::default() };
        let (mut l, mut history, mut interference) = (Learning::default(), History::default(), InterferenceModel::default());
        // Before the pair ran its first 10 s together only the solo uses are learnt.
        l.learn_gpu_use(&running, &uses, &mut history, &mut interference, &cfg, 35);
        assert_eq!(history.solo_gpu_util_pct(1000, Some("a")), Some(80.0));
        assert_eq!(history.solo_gpu_util_pct(1000, Some("b")), Some(60.0));
        assert_eq!(history.group(1000, Some("a")).map(|g| g.early_gpu_util_pct.n), Some(2), "jobs 1 and 3");
        assert!(l.use_done.contains(&4), "job 4 shared from its start: no solo use");
        assert_eq!(interference.history().pairs_observed(), 0.0);
        l.learn_gpu_use(&running, &uses, &mut history, &mut interference, &cfg, 45);
        let p = interference.predict(Some("b"), Some("a"));
        assert_eq!(p.describe(), "history:n=1");
        // Observed 60/20 = 3 for b and 80/40 = 2 for a, each against the fallback's 2.0 prior
        // weighing 2 observations.
        assert!((p.slowdown_a - 7.0 / 3.0).abs() < 1e-9 && (p.slowdown_b - 2.0).abs() < 1e-9, "{p:?}");
        // Learnt once.
        l.learn_gpu_use(&running, &uses, &mut history, &mut interference, &cfg, 60);
        assert_eq!(interference.history().pairs_observed(), 1.0);
        assert_eq!(history.group(1000, Some("a")).map(|g| g.early_gpu_util_pct.n), Some(2));
    }

    #[test]
    fn a_corrupt_file_is_moved_aside_not_fatal() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(STATE_FILE);
        std::fs::write(&path, "{\"history\": [1, 2").expect("write");
        let (_, h, _) = Learning::load(Some(path.clone()));
        assert!(h.groups().is_empty());
        assert!(!path.exists());
        let aside: Vec<_> = std::fs::read_dir(dir.path()).expect("dir").flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        assert!(aside.iter().any(|n| n.starts_with("energy-learning.json.corrupt-")), "{aside:?}");
    }
}
