//! After a slurmctld restart: is a recovered job's prolog wait real, or did its completion die
//! with the previous slurmctld?
//!
//! With `PrologFlags=Alloc` (set by `Contain`) slurmctld marks a started job as waiting for its
//! prolog (`WAIT_PROLOG`, the nodes in `node_bitmap_pr`) until each node's slurmd sends
//! `REQUEST_COMPLETE_PROLOG`. slurmd resends that RPC every [`SLURMD_RESEND_S`] until slurmctld
//! answers, so a completion sent while slurmctld is down arrives later. A completion the
//! previous slurmctld *answered* is lost when that slurmctld died before writing its state
//! (`prolog_complete()` asks for no state save): the restarted slurmctld recovers the job as
//! still waiting, and no slurmd sends the completion again. Such a job keeps the reason
//! `Prolog` until it ends, and slurmctld defers every signal sent to it and then drops it.
//!
//! The evidence that a node's prolog is done: the node reports the job. slurmd starts the
//! extern step (`Contain`) only after the prolog succeeded, and the batch script only after the
//! prolog; while a prolog still runs, slurmd has no step of the job to report. This module only
//! decides; it never touches Slurm.

/// slurmd's period for resending a prolog completion slurmctld has not answered
/// (`RETRY_DELAY` in slurmd's `req.c`, 15 s in 22.05 and 24.11).
pub const SLURMD_RESEND_S: i64 = 15;

/// What slurmctld knows about a job the previous slurmctld started, as the plugin read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecoveredJob {
    /// Running (not pending, not ended).
    pub running: bool,
    /// Held in CONFIGURING (a `PrologSlurmctld` or nodes booting): slurmctld's own restart path
    /// runs `PrologSlurmctld` again for these; not this module's business.
    pub configuring: bool,
    /// A batch job (its first node's registration reports it).
    pub batch: bool,
    /// Still marked as waiting for its prolog on some node.
    pub waits_for_prolog: bool,
    /// Every node the job waits for has registered with this slurmctld.
    pub prolog_nodes_registered: bool,
    /// The job's first node registered with this slurmctld and reported the job (a step of it).
    pub reported_since_restart: bool,
}

/// What to do with it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing left to judge (ended, prolog done, not a wait this module handles): stop watching.
    Settled,
    /// The prolog may still run, or its completion may still come: look again later.
    KeepWaiting,
    /// The completion was lost with the previous slurmctld: complete the prolog as slurmctld
    /// does when the RPC arrives.
    FinishProlog,
    /// The job's node registered without it and no prolog can still be running there: the
    /// previous slurmctld saved the start but died before the launch (prolog and batch script)
    /// left. End it as slurmctld ends a batch job missing from its node.
    EndAsMissing,
}

/// How long a prolog may run before its batch job counts as missing, in seconds: slurm.conf's
/// `BatchStartTimeout` (Slurm's own limit for a batch job to show up on its node; its
/// documentation asks sites with long prologs to raise it), or the prolog's own timeout
/// (`PrologEpilogTimeout`, `PrologTimeout` from 25.11) when that is longer, since slurmd ends a
/// prolog there.
pub fn prolog_limit_s(batch_start_timeout_s: i64, prolog_timeout_s: Option<i64>) -> i64 {
    batch_start_timeout_s.max(prolog_timeout_s.unwrap_or(0)).max(0)
}

/// The rule. `since_restart_s`: seconds since this slurmctld started; `msg_timeout_s`:
/// slurm.conf `MessageTimeout`; `prolog_limit_s`: [`prolog_limit_s`].
///
/// A batch job whose nodes have all registered and whose first node reported the job has a
/// prolog that is done there. Its completion is lost once slurmd had time to resend any
/// completion it still had to send: [`SLURMD_RESEND_S`] plus `MessageTimeout` after the restart.
///
/// A job its registered node did not report either has a prolog that still runs or was never
/// launched there (the previous slurmctld saved its start and died before the launch left).
/// A prolog that still runs sends its completion when it ends (slurmd resends it until
/// answered), which ends the wait; so once the prolog limit has passed as well, with the resend
/// period after it, nothing can still come and the job is missing from its node. Slurm's own
/// check of missing batch jobs skips it (it runs only when a node registers, and the node
/// registered at once after the restart), which left such jobs holding their nodes until their
/// time limit. Jobs without a batch script (salloc, srun) are left to Slurm: nothing reports
/// them per node before a step starts.
pub fn judge(job: &RecoveredJob, since_restart_s: i64, msg_timeout_s: i64, prolog_limit_s: i64) -> Verdict {
    if !job.running || !job.waits_for_prolog || job.configuring || !job.batch {
        return Verdict::Settled;
    }
    if !job.prolog_nodes_registered {
        return Verdict::KeepWaiting;
    }
    let resend_s = SLURMD_RESEND_S + msg_timeout_s.max(0);
    if !job.reported_since_restart {
        return if since_restart_s < prolog_limit_s.max(0) + resend_s { Verdict::KeepWaiting } else { Verdict::EndAsMissing };
    }
    if since_restart_s < resend_s {
        return Verdict::KeepWaiting;
    }
    Verdict::FinishProlog
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost() -> RecoveredJob {
        RecoveredJob { running: true, configuring: false, batch: true, waits_for_prolog: true, prolog_nodes_registered: true, reported_since_restart: true }
    }

    #[test]
    fn a_reported_job_still_waiting_after_the_resend_period_had_its_completion_lost() {
        assert_eq!(judge(&lost(), 25, 10, 10), Verdict::FinishProlog);
        assert_eq!(judge(&lost(), 600, 10, 10), Verdict::FinishProlog);
    }

    #[test]
    fn a_completion_slurmd_may_still_resend_is_waited_for() {
        assert_eq!(judge(&lost(), 0, 10, 10), Verdict::KeepWaiting);
        assert_eq!(judge(&lost(), 24, 10, 10), Verdict::KeepWaiting);
        // A negative MessageTimeout (unset, garbage) never shortens slurmd's resend period.
        assert_eq!(judge(&lost(), 14, -5, 10), Verdict::KeepWaiting);
    }

    #[test]
    fn a_prolog_that_may_still_run_is_waited_for() {
        let unreported = RecoveredJob { reported_since_restart: false, ..lost() };
        // BatchStartTimeout 10 s, MessageTimeout 10 s: a prolog may run 10 s, and its completion
        // may take slurmd's resend period and a message timeout after that.
        assert_eq!(judge(&unreported, 34, 10, 10), Verdict::KeepWaiting);
        // A long prolog the site allowed for (PrologEpilogTimeout 300 s) is waited for.
        assert_eq!(judge(&unreported, 324, 10, prolog_limit_s(10, Some(300))), Verdict::KeepWaiting);
        let unregistered = RecoveredJob { prolog_nodes_registered: false, ..lost() };
        assert_eq!(judge(&unregistered, 3_600, 10, 10), Verdict::KeepWaiting);
    }

    #[test]
    fn a_job_its_node_never_got_is_missing_once_no_prolog_can_still_run() {
        // Seen in the soak: starts saved, slurmctld SIGKILLed before the launches left; the
        // jobs waited for a prolog no node ran until their time limit.
        let never_launched = RecoveredJob { reported_since_restart: false, ..lost() };
        assert_eq!(judge(&never_launched, 35, 10, 10), Verdict::EndAsMissing);
        assert_eq!(judge(&never_launched, 325, 10, prolog_limit_s(10, Some(300))), Verdict::EndAsMissing);
        assert_eq!(prolog_limit_s(120, Some(30)), 120, "BatchStartTimeout longer than the prolog timeout");
        assert_eq!(prolog_limit_s(10, None), 10);
    }

    #[test]
    fn what_slurm_handles_itself_is_left_to_it() {
        for job in [
            RecoveredJob { running: false, ..lost() },
            RecoveredJob { waits_for_prolog: false, ..lost() },
            RecoveredJob { configuring: true, ..lost() },
            RecoveredJob { batch: false, ..lost() },
        ] {
            assert_eq!(judge(&job, 3_600, 10, 10), Verdict::Settled, "{job:?}");
        }
    }
}
