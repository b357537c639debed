//! What one expect test did: its verdict (from its exit status, which Slurm's `globals` sets:
//! 0 pass, 1 fail, 255 skip), how long it took, and the end of its output.

use std::time::Duration;

use crate::scheduler::Cluster;

/// The verdict of one expect test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail,
    /// The test found a precondition missing (`skip` in the script: exit status 255).
    Skip,
    /// Killed by us after the per-test time limit.
    Timeout,
}

impl Verdict {
    /// From the exit status of `expect <test>`; `None` when killed by a signal.
    pub fn from_exit_code(code: Option<i32>) -> Verdict {
        match code {
            Some(0) => Verdict::Pass,
            Some(255) => Verdict::Skip,
            _ => Verdict::Fail,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "skip",
            Verdict::Timeout => "TIMEOUT",
        }
    }
}

/// One test run under one scheduler.
#[derive(Clone, Debug)]
pub struct TestRun {
    pub test: String,
    /// The cluster it ran on.
    pub cluster: Cluster,
    pub verdict: Verdict,
    pub elapsed: Duration,
    /// The last lines of the test's output (stdout and stderr together).
    pub output_tail: String,
    /// Why it failed or skipped, as the script said it (its last `Fatal`/`Warning` line), if any.
    pub reason: Option<String>,
    /// The subtest counts, for a test made of subtests.
    pub subtests: Option<Subtests>,
    /// slurmctld's log lines written while the test ran that mention an error or our plugin.
    pub slurmctld_excerpt: String,
    /// The queue as `squeue` showed it when a test that did not pass ended (for a timeout: just
    /// before it was killed), so a failure seen only in CI says what its jobs were waiting for.
    pub queue_at_end: Option<String>,
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The reason a test gives when it fails or skips, without the log prefix: the message of its
/// last `Fatal` line (a failure that ended it), else of its first failed subtest, else of its
/// first skipped subtest, else of its last `Warning` line (a skip of the whole test).
pub fn reason_of(output: &str) -> Option<String> {
    let with = |level: &str, first: bool| {
        let mut lines = output.lines().filter(|l| l.contains(level));
        let line = if first { lines.next() } else { lines.next_back() };
        line.map(|l| strip_log_prefix(l, level))
    };
    with("] Fatal", false)
        .or_else(|| with("] Error   Subtest", true).map(|m| format!("Subtest {m}")))
        .or_else(|| with("] Warning Subtest", true).map(|m| format!("Subtest {m}")))
        .or_else(|| with("] Warning", false))
}

/// The subtest counts of the test's summary (`Subtests failed : N`, `Subtests passed : N`), for
/// tests made of subtests; `None` for the others.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Subtests {
    pub passed: u32,
    pub failed: u32,
}

pub fn subtests_of(output: &str) -> Option<Subtests> {
    let count = |label: &str| {
        output.lines().find_map(|l| {
            let rest = l.trim_start().strip_prefix(label)?.trim_start().strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<u32>().ok()
        })
    };
    Some(Subtests { passed: count("Subtests passed")?, failed: count("Subtests failed")? })
}

/// `[2026-11-24 14:30:00.123] Fatal   message (backtrace)` -> `message`.
fn strip_log_prefix(line: &str, level: &str) -> String {
    let after = line.split_once(level).map_or(line, |(_, rest)| rest).trim_start();
    let message = match after.rfind(" (") {
        Some(i) if after.ends_with(')') => &after[..i],
        _ => after,
    };
    message.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_map_to_verdicts_as_globals_sets_them() {
        assert_eq!(Verdict::from_exit_code(Some(0)), Verdict::Pass);
        assert_eq!(Verdict::from_exit_code(Some(1)), Verdict::Fail);
        assert_eq!(Verdict::from_exit_code(Some(255)), Verdict::Skip);
        assert_eq!(Verdict::from_exit_code(Some(2)), Verdict::Fail);
        assert_eq!(Verdict::from_exit_code(None), Verdict::Fail);
    }

    #[test]
    fn reason_is_the_last_fatal_message_else_the_last_warning() {
        let out = "[2026-11-24 14:30:00.100] Warning This test can't be run without gres\n\
                   [2026-11-24 14:30:00.200] Fatal   Job did not start (fail@globals:10)\n\
                   FAILURE : test1.1";
        assert_eq!(reason_of(out).as_deref(), Some("Job did not start"));
        let skipped = "[2026-11-24 14:30:00.100] Warning This test needs 2 nodes (skip@test:3)\n";
        assert_eq!(reason_of(skipped).as_deref(), Some("This test needs 2 nodes"));
        assert_eq!(reason_of("SUCCESS : test1.1"), None);
        let subtest = "[2026-11-24 14:31:57.700] Warning Test needs CR_*MEMORY (skip@x:1)\n\
                       [2026-11-24 14:31:57.728] Error   Subtest 16 failed  : Verify mem=100 (subfail@globals:596)\n\
                       [2026-11-24 14:31:57.737] Error   Subtest 19 failed  : Verify mem=200 (subfail@globals:596)\n";
        assert_eq!(reason_of(subtest).as_deref(), Some("Subtest 16 failed  : Verify mem=100"));
        let subskip = "[2026-11-24 14:40:54.641] Warning Subtest 43 skipped : Needs 5 nodes (subskip@globals:658)\n\
                       [2026-11-24 14:40:55.000] Warning create_res: error from scontrol\n";
        assert_eq!(reason_of(subskip).as_deref(), Some("Subtest 43 skipped : Needs 5 nodes"));
    }

    #[test]
    fn subtest_counts_come_from_the_summary() {
        let out = "SUCCESS : test3.11\n  Subtests failed   :   2 ( 4%)\n  Subtests skipped  :   1 (  2%)\n  Subtests passed   :  44 ( 97%)\n";
        assert_eq!(subtests_of(out), Some(Subtests { passed: 44, failed: 2 }));
        assert_eq!(subtests_of("SUCCESS : test1.2\n"), None);
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
