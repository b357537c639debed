//! After a slurmctld restart: did a recovered batch job's launch ever leave, or did the previous
//! slurmctld die between saving the start and sending the launch?
//!
//! sched/energy saves a start before it launches (so that a crash never starts a job twice); a
//! crash between the two leaves a job the restarted slurmctld has running that no node got.
//! slurmctld's own check of missing batch jobs (`_purge_missing_jobs`, at each node
//! registration) ends only jobs older than `BatchStartTimeout` + min(10 s, `MessageTimeout`) at
//! that registration, and the nodes register at once after a restart: a younger job would hold
//! its nodes until its time limit. The plugin watches each such job from slurmctld's start
//! until its first node registers; the node's registration reports every job it runs. This
//! module only decides; it never touches Slurm (`src/launch.rs` reads the facts and acts).

/// What the plugin read of one watched job (a batch job the previous slurmctld started).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WatchedJob {
    /// Running (not pending, not ended).
    pub running: bool,
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
}

/// Slurm's grace for a batch job at its node's registration (`_purge_missing_jobs`):
/// `BatchStartTimeout` + min(10 s, `MessageTimeout`), in seconds. Negative settings count as 0.
pub fn launch_grace_s(batch_start_timeout_s: i64, msg_timeout_s: i64) -> i64 {
    batch_start_timeout_s.max(0) + msg_timeout_s.clamp(0, 10)
}

/// The rule, for a job looked at now with `grace_s` ([`launch_grace_s`]).
pub fn judge(job: &WatchedJob, grace_s: i64) -> LaunchVerdict {
    if !job.running {
        return LaunchVerdict::Settled;
    }
    if !job.first_node_registered {
        return LaunchVerdict::KeepWatching;
    }
    if job.reported {
        return LaunchVerdict::Alive;
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
        return LaunchVerdict::AskNodeAgain;
    }
    LaunchVerdict::EndAsMissing
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job whose node registered without it, long after its start.
    fn missing() -> WatchedJob {
        WatchedJob { running: true, first_node_registered: true, reported: false, waits_for_prolog: false, seen_waiting_for_prolog: false, age_s: 600, waited_for_grace: false }
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
        assert_eq!(judge(&WatchedJob { age_s: 20, waited_for_grace: true, ..missing() }, launch_grace_s(10, 10)), LaunchVerdict::AskNodeAgain);
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
