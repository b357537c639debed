//! What the nodes' GPU use reports ([`crate::gpu_use::UseLog`]) teach the planner about the
//! running jobs: each job's use while it had its GPUs to itself, into the [`History`] its
//! group's solo use is predicted from, and each shared pair's slowdowns, into the interference
//! history the planner predicts pairs with (as the simulator's early-stage observations do).
//!
//! Each pair's slowdowns are recorded with their jobs' users, and one user's pairs alone never
//! move a prediction ([`InterferenceModel::observe_by`]).
//!
//! The sched plugin gathers the running jobs, calls [`learn_gpu_use`] once per pass, keeps the
//! sets of jobs already learnt from, and logs the [`UseLesson`]s it gets back. Nothing here
//! reads a clock or a file: the time is an argument.

use std::collections::{BTreeSet, HashMap};

use crate::gpu_use::UseLog;
use crate::history::History;
use crate::interference::{InterferenceModel, slowdown_from_utilisation};

/// A running job, as the GPU-use learning needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningJob {
    pub id: u32,
    pub user: u32,
    pub tag: Option<String>,
    pub start_unix_s: i64,
    /// The jobs whose GPU it joined (its record's `share=`).
    pub shares_with: Vec<u32>,
    /// Started by sched/energy (has a decision record).
    pub has_record: bool,
}

/// What a pass learns into, and the jobs it already learnt from (the caller keeps those
/// between passes: each job's solo use, and each newcomer's pair, is learnt once).
pub struct UseLearners<'a> {
    pub history: &'a mut History,
    pub interference: &'a mut InterferenceModel,
    /// Jobs whose solo use was learnt, or can never be.
    pub use_done: &'a mut BTreeSet<u32>,
    /// Jobs that joined a GPU whose pair slowdown was learnt, or can never be.
    pub pairs_done: &'a mut BTreeSet<u32>,
}

/// One job's side of a shared pair.
#[derive(Debug, Clone, PartialEq)]
pub struct PairSide {
    pub job_id: u32,
    pub tag: Option<String>,
    /// Its GPU use since the newcomer joined (%).
    pub util_pct: f64,
    /// Its kind's GPU use alone, from the history (%), if known.
    pub solo_util_pct: Option<f64>,
}

/// What one pass learnt, in the order it learnt it. Every lesson adds a job to `use_done` or
/// `pairs_done`: none means nothing changed.
#[derive(Debug, Clone, PartialEq)]
pub enum UseLesson {
    /// The job's use alone over its first minutes, added to its group's history.
    SoloUse { job_id: u32, tag: Option<String>, util_pct: f64, covered_s: f64 },
    /// Shared before its first minutes were over: its use alone is not measurable.
    SoloUnmeasurable { job_id: u32 },
    /// The job it joined is not running any more: no pair to learn.
    PartnerGone { job_id: u32 },
    /// A pair that ran its first minutes together. `slowdowns` (newcomer's, tenant's) are set
    /// when they were added to the interference history, which needs both jobs' tags and
    /// their kinds' use alone; `None` when the pair could not be learnt.
    Pair { newcomer: PairSide, tenant: PairSide, slowdowns: Option<(f64, f64)> },
}

/// From the nodes' reports: each job's GPU use while it had its GPUs to itself (from its start
/// until a partner joined, once it ran `early_after_s` and the reports cover at least half of
/// that), once; and each shared pair's slowdowns once the pair ran `early_after_s` together:
/// each job's use then against its kind's use alone ([`slowdown_from_utilisation`]).
pub fn learn_gpu_use(running: &[RunningJob], uses: &UseLog, early_after_s: f64, now_unix_s: i64, into: UseLearners<'_>) -> Vec<UseLesson> {
    let UseLearners { history, interference, use_done, pairs_done } = into;
    let early_s = early_after_s;
    let now = now_unix_s as f64;
    let mut lessons = Vec::new();
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
        if use_done.contains(&j.id) {
            continue;
        }
        let start = j.start_unix_s as f64;
        let until = alone_until.get(&j.id).copied().unwrap_or(f64::INFINITY);
        if until - start < early_s {
            // Shared before its first minutes were over: its solo use is not measurable.
            if until.is_finite() {
                use_done.insert(j.id);
                lessons.push(UseLesson::SoloUnmeasurable { job_id: j.id });
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
        use_done.insert(j.id);
        lessons.push(UseLesson::SoloUse { job_id: j.id, tag: j.tag.clone(), util_pct: m.util_pct, covered_s: m.covered_s });
    }
    for newcomer in running.iter().filter(|j| j.has_record && !j.shares_with.is_empty()) {
        if pairs_done.contains(&newcomer.id) {
            continue;
        }
        let since = newcomer.start_unix_s as f64;
        if now - since < early_s {
            continue;
        }
        // A pair: the newcomer and the job it joined (EaCO shares a GPU by two).
        let Some(tenant) = newcomer.shares_with.first().and_then(|t| by_id.get(t)) else {
            pairs_done.insert(newcomer.id);
            lessons.push(UseLesson::PartnerGone { job_id: newcomer.id });
            continue;
        };
        let (Some(use_n), Some(use_t)) = (uses.mean_between(newcomer.id, since, now), uses.mean_between(tenant.id, since, now)) else { continue };
        if use_n.covered_s.min(use_t.covered_s) < early_s / 2.0 {
            continue;
        }
        pairs_done.insert(newcomer.id);
        let solo_n = history.solo_gpu_util_pct(newcomer.user, newcomer.tag.as_deref());
        let solo_t = history.solo_gpu_util_pct(tenant.user, tenant.tag.as_deref());
        let slowdowns = solo_n.zip(solo_t).and_then(|(sn, st)| slowdown_from_utilisation(sn, use_n.util_pct).zip(slowdown_from_utilisation(st, use_t.util_pct)));
        let observed = match (newcomer.tag.as_deref(), tenant.tag.as_deref(), slowdowns) {
            (Some(fa), Some(fb), Some((sa, sb))) => {
                // Each job's slowdown is its own user's testimony (see `crate::interference`).
                interference.observe_by(fa, newcomer.user, fb, tenant.user, sa, sb);
                Some((sa, sb))
            }
            _ => None,
        };
        lessons.push(UseLesson::Pair {
            newcomer: PairSide { job_id: newcomer.id, tag: newcomer.tag.clone(), util_pct: use_n.util_pct, solo_util_pct: solo_n },
            tenant: PairSide { job_id: tenant.id, tag: tenant.tag.clone(), util_pct: use_t.util_pct, solo_util_pct: solo_t },
            slowdowns: observed,
        });
    }
    lessons
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu_use::UseReport;

    #[test]
    fn gpu_use_teaches_solo_use_then_pair_slowdowns() {
        let job = |id: u32, tag: &str, start: i64, shares_with: Vec<u32>| RunningJob { id, user: 1000, tag: Some(tag.into()), start_unix_s: start, shares_with, has_record: true };
        let mut uses = UseLog::default();
        let mut report = |id: u32, from: f64, to: f64, util: f64| uses.add(UseReport { job_id: id, node: "n1".into(), from_unix_s: from, to_unix_s: to, gpus: 1, util_pct: util, power_w: None });
        report(1, 0.0, 10.0, 80.0);
        report(2, 0.0, 10.0, 60.0);
        report(3, 20.0, 30.0, 80.0);
        report(3, 30.0, 45.0, 40.0);
        report(4, 30.0, 45.0, 20.0);
        let running = vec![job(1, "a", 0, vec![]), job(2, "b", 0, vec![]), job(3, "a", 20, vec![]), job(4, "b", 30, vec![3])];
        let early_after_s = 10.0;
        let (mut history, mut interference) = (History::default(), InterferenceModel::default());
        let (mut use_done, mut pairs_done) = (BTreeSet::new(), BTreeSet::new());
        let pass = |now: i64, history: &mut History, interference: &mut InterferenceModel, use_done: &mut BTreeSet<u32>, pairs_done: &mut BTreeSet<u32>| {
            learn_gpu_use(&running, &uses, early_after_s, now, UseLearners { history, interference, use_done, pairs_done })
        };
        // Before the pair ran its first 10 s together only the solo uses are learnt.
        let lessons = pass(35, &mut history, &mut interference, &mut use_done, &mut pairs_done);
        assert_eq!(history.solo_gpu_util_pct(1000, Some("a")), Some(80.0));
        assert_eq!(history.solo_gpu_util_pct(1000, Some("b")), Some(60.0));
        assert_eq!(history.group(1000, Some("a")).map(|g| g.early_gpu_util_pct.n), Some(2), "jobs 1 and 3");
        assert!(use_done.contains(&4), "job 4 shared from its start: no solo use");
        assert!(lessons.contains(&UseLesson::SoloUnmeasurable { job_id: 4 }), "{lessons:?}");
        assert_eq!(interference.history().pairs_observed(), 0.0);
        let lessons = pass(45, &mut history, &mut interference, &mut use_done, &mut pairs_done);
        // Observed 60/20 = 3 for b and 80/40 = 2 for a, recorded with user 1000's name; one
        // user's pairs alone do not move the prediction.
        assert_eq!(interference.history().pairs_observed(), 1.0);
        assert_eq!(interference.predict(Some("b"), Some("a")).describe(), "fallback");
        assert!(matches!(lessons.as_slice(), [UseLesson::Pair { slowdowns: Some((sn, st)), .. }] if (sn - 3.0).abs() < 1e-9 && (st - 2.0).abs() < 1e-9), "{lessons:?}");
        // Learnt once.
        let lessons = pass(60, &mut history, &mut interference, &mut use_done, &mut pairs_done);
        assert!(lessons.is_empty(), "{lessons:?}");
        assert_eq!(interference.history().pairs_observed(), 1.0);
        assert_eq!(history.group(1000, Some("a")).map(|g| g.early_gpu_util_pct.n), Some(2));
        assert!(pairs_done.contains(&4));
    }

    #[test]
    fn a_pair_without_tags_or_solo_use_is_not_learnt_but_not_retried() {
        let mut uses = UseLog::default();
        uses.add(UseReport { job_id: 2, node: "n1".into(), from_unix_s: 0.0, to_unix_s: 20.0, gpus: 1, util_pct: 30.0, power_w: None });
        uses.add(UseReport { job_id: 1, node: "n1".into(), from_unix_s: 0.0, to_unix_s: 20.0, gpus: 1, util_pct: 30.0, power_w: None });
        let running = vec![
            RunningJob { id: 1, user: 1000, tag: None, start_unix_s: -100, shares_with: vec![], has_record: true },
            RunningJob { id: 2, user: 1000, tag: Some("b".into()), start_unix_s: 0, shares_with: vec![1], has_record: true },
            // Joined a job that is gone.
            RunningJob { id: 3, user: 1000, tag: Some("b".into()), start_unix_s: 0, shares_with: vec![9], has_record: true },
        ];
        let (mut history, mut interference) = (History::default(), InterferenceModel::default());
        let (mut use_done, mut pairs_done) = (BTreeSet::new(), BTreeSet::new());
        let lessons = learn_gpu_use(&running, &uses, 10.0, 20, UseLearners { history: &mut history, interference: &mut interference, use_done: &mut use_done, pairs_done: &mut pairs_done });
        assert!(lessons.iter().any(|l| matches!(l, UseLesson::Pair { newcomer, tenant, slowdowns: None } if newcomer.job_id == 2 && tenant.job_id == 1)), "{lessons:?}");
        assert!(lessons.contains(&UseLesson::PartnerGone { job_id: 3 }), "{lessons:?}");
        assert_eq!(interference.history().pairs_observed(), 0.0);
        assert!(pairs_done.contains(&2) && pairs_done.contains(&3));
    }

    #[test]
    fn pairs_of_three_users_move_the_prediction() {
        let mut uses = UseLog::default();
        let mut running = Vec::new();
        for user in [1000, 1001, 1002] {
            let id = |n: u32| 10 * (user - 999) + n;
            let mut report = |n: u32, from: f64, to: f64, util: f64| uses.add(UseReport { job_id: id(n), node: "n1".into(), from_unix_s: from, to_unix_s: to, gpus: 1, util_pct: util, power_w: None });
            report(1, 0.0, 10.0, 80.0);
            report(2, 0.0, 10.0, 60.0);
            report(3, 30.0, 45.0, 40.0);
            report(4, 30.0, 45.0, 20.0);
            let job = |n: u32, tag: &str, start: i64, shares_with: Vec<u32>| RunningJob { id: id(n), user, tag: Some(tag.into()), start_unix_s: start, shares_with, has_record: true };
            running.extend([job(1, "a", 0, vec![]), job(2, "b", 0, vec![]), job(3, "a", 30, vec![]), job(4, "b", 30, vec![id(3)])]);
        }
        let (mut history, mut interference) = (History::default(), InterferenceModel::default());
        let (mut use_done, mut pairs_done) = (BTreeSet::new(), BTreeSet::new());
        learn_gpu_use(&running, &uses, 10.0, 45, UseLearners { history: &mut history, interference: &mut interference, use_done: &mut use_done, pairs_done: &mut pairs_done });
        let p = interference.predict(Some("b"), Some("a"));
        assert_eq!(p.describe(), "history:n=3:users=3");
        // Each user's b slowed down 3 and a 2: the users' median weighs 3 observations against
        // the fallback's 2.0 weighing 2.
        assert!((p.slowdown_a - 13.0 / 5.0).abs() < 1e-9 && (p.slowdown_b - 2.0).abs() < 1e-9, "{p:?}");
    }
}
