//! After a slurmctld restart: did a recovered batch job's launch ever leave, or did the previous
//! slurmctld die between saving the start and sending the launch?
//!
//! sched/energy saves a start before it launches (so that a crash never starts a job twice); a
//! crash between the two leaves a job the restarted slurmctld has running that no node got.
//! slurmctld's own check of missing batch jobs (`_purge_missing_jobs`, at each node
//! registration) ends only jobs older than `BatchStartTimeout` + min(10 s, `MessageTimeout`) at
//! that registration, and the nodes register at once after a restart: a younger job would hold
//! its nodes until its time limit. The plugin watches each such job from slurmctld's start
//! until its first node registers; the node's registration reports every job it runs.
//!
//! The other way round: a job whose script ended just before the crash, its completion answered
//! by the previous slurmctld and never saved, is recovered as running. Without an extern step
//! its node reports nothing and Slurm's check ends it; with `PrologFlags=Contain` the node
//! reports its extern step, which keeps it "active" for Slurm until its time limit, holding its
//! nodes. The registration also says which steps run: a job reported without its batch step,
//! past the grace, is asked about once more and then ended as missing ([`BatchStep`]).
//!
//! This module only decides; it never touches Slurm (`src/launch.rs` reads the facts and acts).

/// What the plugin read of one watched job (a batch job the previous slurmctld started).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WatchedJob {
    /// Running (not pending, not ended).
    pub running: bool,
    /// Running with none of its nodes left: every node's epilog completion reached this
    /// slurmctld (the previous one had sent the kill and died before saving the end), which
    /// takes each node off the job; with its steps deleted, nothing can ever report it.
    pub no_node_left: bool,
    /// Its first node (the batch host) registered with this slurmctld.
    pub first_node_registered: bool,
    /// That registration reported the job (a step of it runs there).
    pub reported: bool,
    /// Still marked as waiting for its prolog (`PrologFlags=Alloc`).
    pub waits_for_prolog: bool,
    /// Seen waiting for its prolog earlier (when picked, or at an earlier look).
    pub seen_waiting_for_prolog: bool,
    /// Seconds since its start (`start_time`) now.
    pub age_s: i64,
    /// Found younger than Slurm's grace at an earlier look, its node having registered without
    /// it: its launch may have reached the node since, which the node reports only at its next
    /// registration.
    pub waited_for_grace: bool,
    /// Whether the registration that reported the job reported its batch script too.
    pub batch_step: BatchStep,
    /// Its node was asked to register again because it reported the job without its batch
    /// script; `reported` and `batch_step` then tell what that registration said.
    pub asked_for_script: bool,
    /// Seconds since its prolog wait was seen to end (None: never seen waiting, or still waiting).
    pub since_prolog_wait_ended_s: Option<i64>,
}

/// The batch step (the script's slurmstepd) at the registrations since it was last looked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BatchStep {
    /// slurmctld has no batch step record for the job: nothing to tell.
    #[default]
    Unknown,
    /// Reported by its node.
    Reported,
    /// Not reported (the node reported other steps of the job, e.g. its extern step).
    NotReported,
}

/// What to do with it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchVerdict {
    /// Ended (or requeued) by Slurm already: stop watching.
    Settled,
    /// Its first node has not registered yet: look again.
    KeepWatching,
    /// Reported by its node: alive, stop watching.
    Alive,
    /// Its prolog may still run (slurmd reports nothing before the prolog ends): look again;
    /// `model::lost_prolog` judges the wait.
    PrologMayRun,
    /// The prolog wait ended while watched: slurmd sent its completion, so the prolog ran and
    /// slurmd launches the script. Alive as far as the watch can tell; Slurm's own check of
    /// missing batch jobs takes over from now (mark it active now).
    PrologRan,
    /// Younger than Slurm's own grace: it may still be launching (slurmd reports it once its
    /// slurmstepd runs). Look again once the grace has passed.
    WaitForGrace,
    /// Waited for the grace: ask its node to register again; that registration reports the job
    /// if its launch arrived, and slurmctld's own missing-job check ends it if not (it is past
    /// the grace and was not reported since the restart). Stop watching.
    AskNodeAgain,
    /// Its node registered without it, and it is past Slurm's grace: the launch never left.
    /// End it as slurmctld ends a batch job missing from its node.
    EndAsMissing,
    /// Reported by its node without its batch script (only its extern step, `PrologFlags=Contain`),
    /// past Slurm's grace (and past it since its prolog wait ended): ask the node to register
    /// again, forgetting what was reported, and keep watching.
    AskNodeForScript,
    /// Ended on every node (their epilogs completed) while slurmctld still has it running: end
    /// it (not requeued: its nodes ran it to its end), releasing what it holds.
    EndedOnItsNodes,
    /// The registration asked for reported the job again without its batch script: the script
    /// ended and its completion was lost (answered by the previous slurmctld, which died before
    /// saving it), or its slurmstepd died. Slurm's own check never ends such a job (its extern
    /// step keeps it "active"): end it as slurmctld ends a batch job missing from its node, but
    /// not requeued: the script most likely ran to its end (requeueing would run it twice), and
    /// stock, which keeps such a job to its time limit, ends it unrequeued too.
    ScriptGone,
}

/// Slurm's grace for a batch job at its node's registration (`_purge_missing_jobs`):
/// `BatchStartTimeout` + min(10 s, `MessageTimeout`), in seconds. Negative settings count as 0.
pub fn launch_grace_s(batch_start_timeout_s: i64, msg_timeout_s: i64) -> i64 {
    batch_start_timeout_s.max(0) + msg_timeout_s.clamp(0, 10)
}

/// Does slurmctld's missing-job check, at a node registration now, judge a batch job `age_s`
/// old? It ends only a job strictly older than the grace (`start_time < now - grace`, whole
/// seconds), so a registration asked at exactly the grace leaves a job whose launch never left
/// running to its time limit (seen in CI on 26.05.3: asked at 20 s with a grace of 20 s).
/// Asked past it, the registration arrives later still.
pub fn registration_judges(age_s: i64, grace_s: i64) -> bool {
    age_s > grace_s
}

/// The rule, for a job looked at now with `grace_s` ([`launch_grace_s`]).
pub fn judge(job: &WatchedJob, grace_s: i64) -> LaunchVerdict {
    if !job.running {
        return LaunchVerdict::Settled;
    }
    if job.no_node_left {
        return LaunchVerdict::EndedOnItsNodes;
    }
    if !job.first_node_registered {
        return LaunchVerdict::KeepWatching;
    }
    if job.reported {
        return match job.batch_step {
            BatchStep::Unknown | BatchStep::Reported => LaunchVerdict::Alive,
            BatchStep::NotReported if job.asked_for_script => LaunchVerdict::ScriptGone,
            // The script is launched once the prolog ends.
            BatchStep::NotReported if job.waits_for_prolog => LaunchVerdict::PrologMayRun,
            BatchStep::NotReported => {
                let waited = job.age_s >= grace_s && job.since_prolog_wait_ended_s.is_none_or(|s| s >= grace_s);
                if waited { LaunchVerdict::AskNodeForScript } else { LaunchVerdict::KeepWatching }
            }
        };
    }
    if job.asked_for_script {
        // The registration asked for has not come yet (one that does not report the job at
        // all is Slurm's own missing-job check's to judge).
        return LaunchVerdict::KeepWatching;
    }
    if job.waits_for_prolog {
        return LaunchVerdict::PrologMayRun;
    }
    if job.seen_waiting_for_prolog {
        return LaunchVerdict::PrologRan;
    }
    // Seen in CI: a job launched 8 s before its node registered, mid-launch, was ended and
    // requeued before this grace existed.
    if job.age_s < grace_s {
        return LaunchVerdict::WaitForGrace;
    }
    if job.waited_for_grace {
        return if registration_judges(job.age_s, grace_s) { LaunchVerdict::AskNodeAgain } else { LaunchVerdict::WaitForGrace };
    }
    LaunchVerdict::EndAsMissing
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job whose node registered without it, long after its start.
    fn missing() -> WatchedJob {
        WatchedJob { running: true, first_node_registered: true, age_s: 600, ..WatchedJob::default() }
    }

    /// Reported by its node with only its extern step (its script's completion lost).
    fn script_not_reported() -> WatchedJob {
        WatchedJob { reported: true, batch_step: BatchStep::NotReported, ..missing() }
    }

    #[test]
    fn a_job_reported_without_its_script_is_asked_about_again_then_ended() {
        let grace = launch_grace_s(10, 10);
        assert_eq!(judge(&script_not_reported(), grace), LaunchVerdict::AskNodeForScript);
        // The asked registration: not in yet, then reported without the script, or with it.
        assert_eq!(judge(&WatchedJob { reported: false, asked_for_script: true, ..script_not_reported() }, grace), LaunchVerdict::KeepWatching);
        assert_eq!(judge(&WatchedJob { asked_for_script: true, ..script_not_reported() }, grace), LaunchVerdict::ScriptGone);
        assert_eq!(judge(&WatchedJob { asked_for_script: true, batch_step: BatchStep::Reported, ..script_not_reported() }, grace), LaunchVerdict::Alive);
        // Ended by Slurm meanwhile.
        assert_eq!(judge(&WatchedJob { running: false, asked_for_script: true, ..script_not_reported() }, grace), LaunchVerdict::Settled);
    }

    #[test]
    fn a_script_may_still_be_launching_within_the_grace_and_after_the_prolog() {
        let grace = launch_grace_s(10, 10);
        assert_eq!(judge(&WatchedJob { age_s: 19, ..script_not_reported() }, grace), LaunchVerdict::KeepWatching);
        assert_eq!(judge(&WatchedJob { age_s: 20, ..script_not_reported() }, grace), LaunchVerdict::AskNodeForScript);
        // Its launch follows its prolog.
        assert_eq!(judge(&WatchedJob { waits_for_prolog: true, ..script_not_reported() }, grace), LaunchVerdict::PrologMayRun);
        assert_eq!(judge(&WatchedJob { seen_waiting_for_prolog: true, since_prolog_wait_ended_s: Some(5), ..script_not_reported() }, grace), LaunchVerdict::KeepWatching);
        assert_eq!(judge(&WatchedJob { seen_waiting_for_prolog: true, since_prolog_wait_ended_s: Some(20), ..script_not_reported() }, grace), LaunchVerdict::AskNodeForScript);
    }

    #[test]
    fn a_running_job_none_of_whose_nodes_is_left_is_ended() {
        let grace = launch_grace_s(10, 10);
        // Whatever else is known (its node gone from the job, nothing registered for it).
        assert_eq!(judge(&WatchedJob { no_node_left: true, first_node_registered: false, age_s: 1, ..missing() }, grace), LaunchVerdict::EndedOnItsNodes);
        assert_eq!(judge(&WatchedJob { no_node_left: true, waits_for_prolog: true, ..missing() }, grace), LaunchVerdict::EndedOnItsNodes);
        assert_eq!(judge(&WatchedJob { no_node_left: true, running: false, ..missing() }, grace), LaunchVerdict::Settled);
    }

    #[test]
    fn a_job_reported_with_its_script_or_without_a_batch_step_record_is_alive() {
        let grace = launch_grace_s(10, 10);
        assert_eq!(judge(&WatchedJob { batch_step: BatchStep::Reported, ..script_not_reported() }, grace), LaunchVerdict::Alive);
        assert_eq!(judge(&WatchedJob { batch_step: BatchStep::Unknown, ..script_not_reported() }, grace), LaunchVerdict::Alive);
    }

    #[test]
    fn a_job_its_registered_node_did_not_report_is_missing_past_slurms_grace() {
        assert_eq!(judge(&missing(), launch_grace_s(10, 10)), LaunchVerdict::EndAsMissing);
        assert_eq!(judge(&WatchedJob { age_s: 20, ..missing() }, launch_grace_s(10, 10)), LaunchVerdict::EndAsMissing);
    }

    #[test]
    fn a_job_younger_than_slurms_grace_is_waited_for_then_its_node_asked_again() {
        // BatchStartTimeout 10 s, MessageTimeout 10 s: Slurm waits 20 s.
        assert_eq!(launch_grace_s(10, 10), 20);
        assert_eq!(judge(&WatchedJob { age_s: 8, ..missing() }, launch_grace_s(10, 10)), LaunchVerdict::WaitForGrace);
        assert_eq!(judge(&WatchedJob { age_s: 19, waited_for_grace: true, ..missing() }, launch_grace_s(10, 10)), LaunchVerdict::WaitForGrace);
        // Seen in CI (live_restart_sched_energy): a job started just before a slurmctld restart
        // whose launch never left, left to Slurm at its node's registration, ran to its time
        // limit (Slurm checks again only at the node's next registration, minutes later). Now
        // its node is asked to register again once the grace has passed; a launch that did
        // arrive meanwhile is reported there, so the watch never ends such a job on its own.
        // Not at the grace itself: Slurm's check judges only a job strictly older.
        assert_eq!(judge(&WatchedJob { age_s: 20, waited_for_grace: true, ..missing() }, launch_grace_s(10, 10)), LaunchVerdict::WaitForGrace);
        assert_eq!(judge(&WatchedJob { age_s: 21, waited_for_grace: true, ..missing() }, launch_grace_s(10, 10)), LaunchVerdict::AskNodeAgain);
        assert!(!registration_judges(20, 20) && registration_judges(21, 20));
        // Slurm adds at most 10 s of MessageTimeout (the default 10 s; sites raise it to 100).
        assert_eq!(launch_grace_s(10, 100), 20);
        assert_eq!(launch_grace_s(120, 5), 125);
        // Garbage settings never make the grace negative.
        assert_eq!(launch_grace_s(-1, -1), 0);
    }

    #[test]
    fn a_reported_or_unregistered_or_ended_job_is_not_ended() {
        let grace = launch_grace_s(10, 10);
        assert_eq!(judge(&WatchedJob { reported: true, ..missing() }, grace), LaunchVerdict::Alive);
        assert_eq!(judge(&WatchedJob { first_node_registered: false, ..missing() }, grace), LaunchVerdict::KeepWatching);
        assert_eq!(judge(&WatchedJob { running: false, ..missing() }, grace), LaunchVerdict::Settled);
    }

    #[test]
    fn a_prolog_wait_is_never_a_missing_launch() {
        let grace = launch_grace_s(10, 10);
        assert_eq!(judge(&WatchedJob { waits_for_prolog: true, ..missing() }, grace), LaunchVerdict::PrologMayRun);
        assert_eq!(judge(&WatchedJob { waits_for_prolog: true, seen_waiting_for_prolog: true, ..missing() }, grace), LaunchVerdict::PrologMayRun);
        // The wait ended while watched: slurmd ran the prolog.
        assert_eq!(judge(&WatchedJob { seen_waiting_for_prolog: true, ..missing() }, grace), LaunchVerdict::PrologRan);
    }
}
