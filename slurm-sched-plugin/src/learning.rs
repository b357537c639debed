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
//! state_file`), mode 0600, written atomically (a fresh temporary file never opened through a
//! link, fsync, rename) whenever it changed, and read at start; a file that cannot be parsed is
//! moved aside (`.corrupt-<unix time>`) and logged, and learning starts afresh.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use model::decision::{recorded_clock_mhz, recorded_energy_j, recorded_field};
use model::gpu_use::UseLog;
use model::gpu_use_learning::{RunningJob, UseLearners, UseLesson, learn_gpu_use};
use model::history::{EarlyRun, FinishedJob, History};
use model::interference::{InterferenceHistory, InterferenceModel};
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
        let result = serde_json::to_vec_pretty(&saved).map_err(|e| e.to_string()).and_then(|bytes| write_private(&path, &bytes));
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

impl Learning {
    /// From the nodes' reports, what `model::gpu_use_learning` learns: each job's GPU use
    /// while it had its GPUs to itself, and each shared pair's slowdowns, once. Here: the
    /// bookkeeping of the jobs learnt from (saved with the state) and the log lines.
    fn learn_gpu_use(&mut self, running: &[RunningJob], uses: &UseLog, history: &mut History, interference: &mut InterferenceModel, cfg: &Config, now_unix_s: i64) {
        let into = UseLearners { history, interference, use_done: &mut self.use_done, pairs_done: &mut self.pairs_done };
        let lessons = learn_gpu_use(running, uses, cfg.learning.early_after_s, now_unix_s, into);
        if !lessons.is_empty() {
            self.dirty = true;
        }
        for lesson in &lessons {
            log_lesson(lesson);
        }
    }
}

fn log_lesson(lesson: &UseLesson) {
    match lesson {
        UseLesson::SoloUse { job_id, tag, util_pct, covered_s } => {
            slurm_log!(LOG, verbose, "learning: JobId={job_id} used {util_pct:.1} % of its GPUs alone in its first {covered_s:.0} s (tag {})", tag.as_deref().unwrap_or("-"));
        }
        UseLesson::SoloUnmeasurable { .. } | UseLesson::PartnerGone { .. } => {}
        UseLesson::Pair { newcomer: n, tenant: t, slowdowns } => match (n.tag.as_deref(), t.tag.as_deref(), slowdowns) {
            (Some(fa), Some(fb), Some((sa, sb))) => slurm_log!(
                LOG,
                info,
                "learning: JobId={} ({fa}) shares a GPU with JobId={} ({fb}): GPU use {:.1} % and {:.1} % against {:.1} % and {:.1} % alone: slowdowns {sa:.2} and {sb:.2} observed",
                n.job_id,
                t.job_id,
                n.util_pct,
                t.util_pct,
                n.solo_util_pct.unwrap_or(0.0),
                t.solo_util_pct.unwrap_or(0.0)
            ),
            _ => slurm_log!(
                LOG,
                verbose,
                "learning: JobId={} shares a GPU with JobId={}: pair not learnt (needs both jobs' --energy-tag and their use alone: tags {:?}/{:?}, alone {:?}/{:?} %)",
                n.job_id,
                t.job_id,
                n.tag,
                t.tag,
                n.solo_util_pct,
                t.solo_util_pct
            ),
        },
    }
}

/// Everything sched/energy observes between cycles: the carbon file, the nodes' energy (into
/// the jobs' records) and the jobs' outcomes (into the history the planner predicts with).
#[derive(Default)]
pub struct Observer {
    pub carbon: Option<CarbonFeed>,
    /// The site's power-cap file (`[power_cap] file`).
    pub power_cap: Option<crate::power_cap_feed::PowerCapFeed>,
    pub accounting: Accounting,
    pub learning: Option<Learning>,
    /// The nodes' GPU use reports (`[learning] gpu_use_port`).
    pub gpu_use: Option<UseListener>,
    /// munged's socket (slurm.conf `AuthInfo`) and who may report.
    pub gpu_use_auth: (Option<String>, Option<Trusted>),
}

impl Observer {
    /// The cluster power cap to plan under now (W; 0: none): the power-cap file's, where it
    /// says something about now, else energy.toml's `power_cap_w`.
    pub fn power_cap_w(&mut self, cfg: &Config) -> f64 {
        match self.power_cap.as_mut() {
            Some(feed) => {
                feed.refresh();
                feed.cap_w(cfg.planner.power_cap_w, unix_now_s())
            }
            None => cfg.planner.power_cap_w,
        }
    }

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
        let trusted = trusted.unwrap_or(Trusted { slurmd_user_id: 0 });
        self.gpu_use = Some(UseListener::start(port, socket, trusted)?);
        Ok(())
    }
}

/// Writes `bytes` to `path` as Slurm writes its state files: mode 0600, through a fresh
/// temporary file next to it (whatever was left under that name, a planted link included, is
/// removed first, and `O_NOFOLLOW` refuses one planted in between), synced, renamed over
/// `path`, and the directory synced.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("json.new");
    let at = |e: std::io::Error| format!("{}: {e}", tmp.display());
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(at(e)),
        _ => {}
    }
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .map_err(at)
        .and_then(|()| std::fs::rename(&tmp, path).map_err(|e| format!("rename to {}: {e}", path.display())));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    // The rename itself, durable (a failure here loses nothing but the guarantee).
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    Ok(())
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

    /// The rule itself is tested in `model::gpu_use_learning`; here, what the plugin adds: the
    /// configured window is passed on, and what was learnt is marked for the state file.
    #[test]
    fn gpu_use_lessons_are_kept_for_the_state_file() {
        use model::gpu_use::UseReport;
        let job = |id: u32, start: i64, shares_with: Vec<u32>| RunningJob { id, user: 1000, tag: Some("a".into()), start_unix_s: start, shares_with, has_record: true };
        let mut uses = UseLog::default();
        uses.add(UseReport { job_id: 1, node: "n1".into(), from_unix_s: 0.0, to_unix_s: 30.0, gpus: 1, util_pct: 40.0, power_w: None });
        uses.add(UseReport { job_id: 2, node: "n1".into(), from_unix_s: 0.0, to_unix_s: 30.0, gpus: 1, util_pct: 40.0, power_w: None });
        let running = vec![job(1, 0, vec![]), job(2, 0, vec![1])];
        let cfg = |early_after_s| Config { learning: crate::config::LearningSettings { early_after_s, ..Default::default() }, ..Config::default() };
        let (mut l, mut history, mut interference) = (Learning::default(), History::default(), InterferenceModel::default());
        // [learning] early_after_s = 60: the pair has not run that long at t = 30. Job 2
        // joined job 1 at its start, so neither has a solo use to learn, and that is kept.
        l.learn_gpu_use(&running, &uses, &mut history, &mut interference, &cfg(60.0), 30);
        assert_eq!(history.solo_gpu_util_pct(1000, Some("a")), None);
        assert!(l.dirty && l.use_done.contains(&1) && l.use_done.contains(&2), "{l:?}");
        assert!(l.pairs_done.is_empty(), "{l:?}");
        // With 10 s the pair ran its first minutes together and is done with (not learnt: no
        // solo use).
        l.dirty = false;
        l.learn_gpu_use(&running, &uses, &mut history, &mut interference, &cfg(10.0), 30);
        assert!(l.dirty && l.pairs_done.contains(&2), "{l:?}");
        // Nothing new: nothing to save.
        l.dirty = false;
        l.learn_gpu_use(&running, &uses, &mut history, &mut interference, &cfg(10.0), 40);
        assert!(!l.dirty, "{l:?}");
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

    /// What sched/energy learnt is per user (uids, tags, habits): 0600 like Slurm's own state,
    /// and a link someone left under the temporary name is replaced, never written through.
    #[test]
    fn state_is_private_and_never_written_through_a_planted_link() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(STATE_FILE);
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "slurmctld's own state").expect("victim");
        std::os::unix::fs::symlink(&victim, path.with_extension("json.new")).expect("plant a link");
        let (mut l, mut h, pairs) = Learning::load(Some(path.clone()));
        h.observe(1000, 60.0, 600.0);
        l.dirty = true;
        l.save(&h, &pairs);
        assert!(!l.dirty, "saved");
        assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "slurmctld's own state", "written through the link");
        let meta = std::fs::symlink_metadata(&path).expect("state file");
        assert!(meta.file_type().is_file(), "{meta:?}");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert!(std::fs::symlink_metadata(path.with_extension("json.new")).is_err(), "the temporary name is gone");
        assert_eq!(Learning::load(Some(path)).1, h);
    }
}
