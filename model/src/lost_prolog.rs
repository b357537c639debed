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
}

/// The rule. `since_restart_s`: seconds since this slurmctld started; `msg_timeout_s`:
/// slurm.conf `MessageTimeout`.
///
/// A batch job whose nodes have all registered and whose first node reported the job has a
/// prolog that is done there. Its completion is lost once slurmd had time to resend any
/// completion it still had to send: [`SLURMD_RESEND_S`] plus `MessageTimeout` after the restart.
/// A job not reported is left waiting: either its prolog still runs (long prologs exist) or its
/// node lost it, which slurmctld's own check of missing batch jobs handles (the job is running,
/// not configuring). Jobs without a batch script (salloc, srun) are left to Slurm: nothing
/// reports them per node before a step starts.
pub fn judge(job: &RecoveredJob, since_restart_s: i64, msg_timeout_s: i64) -> Verdict {
    if !job.running || !job.waits_for_prolog || job.configuring || !job.batch {
        return Verdict::Settled;
    }
    if !job.prolog_nodes_registered || !job.reported_since_restart {
        return Verdict::KeepWaiting;
    }
    if since_restart_s < SLURMD_RESEND_S + msg_timeout_s.max(0) {
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
        assert_eq!(judge(&lost(), 25, 10), Verdict::FinishProlog);
        assert_eq!(judge(&lost(), 600, 10), Verdict::FinishProlog);
    }

    #[test]
    fn a_completion_slurmd_may_still_resend_is_waited_for() {
        assert_eq!(judge(&lost(), 0, 10), Verdict::KeepWaiting);
        assert_eq!(judge(&lost(), 24, 10), Verdict::KeepWaiting);
        // A negative MessageTimeout (unset, garbage) never shortens slurmd's resend period.
        assert_eq!(judge(&lost(), 14, -5), Verdict::KeepWaiting);
    }

    #[test]
    fn a_prolog_that_may_still_run_is_waited_for() {
        let unreported = RecoveredJob { reported_since_restart: false, ..lost() };
        assert_eq!(judge(&unreported, 3_600, 10), Verdict::KeepWaiting);
        let unregistered = RecoveredJob { prolog_nodes_registered: false, ..lost() };
        assert_eq!(judge(&unregistered, 3_600, 10), Verdict::KeepWaiting);
    }

    #[test]
    fn what_slurm_handles_itself_is_left_to_it() {
        for job in [
            RecoveredJob { running: false, ..lost() },
            RecoveredJob { waits_for_prolog: false, ..lost() },
            RecoveredJob { configuring: true, ..lost() },
            RecoveredJob { batch: false, ..lost() },
        ] {
            assert_eq!(judge(&job, 3_600, 10), Verdict::Settled, "{job:?}");
        }
    }
}
