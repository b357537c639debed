//! Comparing the two schedulers' runs: the table (test, what it covers, result under each
//! scheduler, time) as markdown, and the disagreements: a test that passes under sched/backfill
//! and not under sched/energy, or (for tests made of subtests, whatever their verdict) more failed
//! subtests under sched/energy than under sched/backfill.

use std::fmt::Write as _;

use crate::outcome::{TestRun, Verdict};
use crate::run::SchedulerRun;
use crate::scheduler::Cluster;
use crate::subset;

/// A test that did worse under sched/energy than under backfill (see the module doc).
#[derive(Debug)]
pub struct Disagreement<'a> {
    pub backfill: &'a TestRun,
    pub energy: &'a TestRun,
}

impl Disagreement<'_> {
    /// Both outputs' tails and sched/energy's slurmctld lines during the test, for a failure
    /// message.
    pub fn describe(&self) -> String {
        // sched/energy's side first: a long failure message is often cut from the end.
        format!(
            "{test}: backfill {b}, sched/energy {e}{why}\n\
             --- queue under sched/energy when the test ended ---\n{q}\n\
             --- slurmctld (sched/energy) during the test: errors and plugin lines ---\n{ex}\n\
             --- output under sched/energy (tail) ---\n{et}\n\
             --- output under sched/backfill (tail) ---\n{bt}\n",
            q = self.energy.queue_at_end.as_deref().unwrap_or("(not taken)"),
            test = self.energy.test,
            b = self.backfill.verdict.label(),
            e = self.energy.verdict.label(),
            why = self.energy.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default(),
            bt = self.backfill.output_tail,
            et = self.energy.output_tail,
            ex = self.energy.slurmctld_excerpt,
        )
    }
}

/// Every test that did worse in `energy` than in `backfill`.
pub fn disagreements<'a>(backfill: &'a SchedulerRun, energy: &'a SchedulerRun) -> Vec<Disagreement<'a>> {
    backfill
        .runs
        .iter()
        .filter_map(|b| {
            let e = energy.get(&b.test)?;
            does_worse(b, e).then_some(Disagreement { backfill: b, energy: e })
        })
        .collect()
}

fn does_worse(backfill: &TestRun, energy: &TestRun) -> bool {
    let lost_pass = backfill.verdict == Verdict::Pass && energy.verdict != Verdict::Pass;
    let more_failed_subtests = match (backfill.subtests, energy.subtests) {
        (Some(b), Some(e)) => e.failed > b.failed,
        _ => false,
    };
    lost_pass || more_failed_subtests
}

/// The markdown table: one row per test run under backfill, in its order. A test that ran on a
/// variant of the cluster asked for is named with the variant: `test39.5 (site-a100-default)`.
pub fn markdown_table(backfill: &SchedulerRun, energy: &SchedulerRun) -> String {
    let mut s = String::from(
        "| test | covers | sched/backfill | sched/energy | time backfill (s) | time energy (s) |\n\
         |---|---|---|---|---:|---:|\n",
    );
    for b in &backfill.runs {
        let e = energy.get(&b.test);
        let _ = writeln!(
            s,
            "| {test}{variant} | {covers} | {bv} | {ev} | {bt:.0} | {et} |",
            test = b.test,
            variant = if b.cluster == backfill.cluster { String::new() } else { format!(" ({})", b.cluster.short_name()) },
            covers = subset::covers(&b.test).unwrap_or("-"),
            bv = cell(Some(b)),
            ev = cell(e),
            bt = b.elapsed.as_secs_f64(),
            et = e.map_or("-".to_string(), |e| format!("{:.0}", e.elapsed.as_secs_f64())),
        );
    }
    s
}

/// A result cell: the verdict, with the subtest counts and the reason for anything but a pass.
fn cell(run: Option<&TestRun>) -> String {
    let Some(run) = run else { return "not run".into() };
    if run.verdict == Verdict::Pass {
        return run.verdict.label().to_string();
    }
    let counts = run
        .subtests
        .map(|s| format!(" ({} subtests passed, {} failed)", s.passed, s.failed))
        .unwrap_or_default();
    let reason = run.reason.as_deref().map(|r| format!(": {}", r.replace('|', "\\|"))).unwrap_or_default();
    format!("{}{counts}{reason}", run.verdict.label())
}

/// The "last run" section of docs/slurm-regression.md: when, where, the counts, the table and
/// the disagreements.
pub fn markdown_section(backfill: &SchedulerRun, energy: &SchedulerRun) -> String {
    let date = command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let cores = command_line("nproc", &[]);
    // The tests that ran on a variant of the cluster, grouped by variant.
    let mut variants: Vec<(Cluster, Vec<&str>)> = Vec::new();
    for r in backfill.runs.iter().filter(|r| r.cluster != backfill.cluster) {
        match variants.iter_mut().find(|(c, _)| *c == r.cluster) {
            Some((_, tests)) => tests.push(&r.test),
            None => variants.push((r.cluster, vec![&r.test])),
        }
    }
    let variants = if variants.is_empty() {
        String::new()
    } else {
        let parts: Vec<String> = variants.iter().map(|(c, tests)| format!("{} on {}", tests.join(", "), c.describe())).collect();
        format!(" ({})", parts.join("; "))
    };
    let mut s = format!(
        "Run on {date}, {version}, {cores} cores, {cluster}{variants}.\n\n\
         - sched/backfill: {bs}, {bt:.0} s including the {starts} start and stop\n\
         - sched/energy: {es}, {et:.0} s including the {starts} start and stop\n\n{table}",
        version = backfill.slurm_version,
        cluster = backfill.cluster.describe(),
        starts = if variants.is_empty() { "cluster's" } else { "clusters'" },
        bs = summary(backfill),
        bt = backfill.elapsed.as_secs_f64(),
        es = summary(energy),
        et = energy.elapsed.as_secs_f64(),
        table = markdown_table(backfill, energy),
    );
    let found = disagreements(backfill, energy);
    let _ = writeln!(s, "\nDisagreements (sched/energy worse than sched/backfill): {}", found.len());
    for d in found {
        let reason = d.energy.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
        let _ = writeln!(s, "- {}: {}{reason}", d.energy.test, d.energy.verdict.label());
    }
    s
}

/// A command's first line of output, empty if it could not run.
fn command_line(prog: &str, args: &[&str]) -> String {
    std::process::Command::new(prog)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Counts per verdict, e.g. `30 pass, 1 FAIL`.
pub fn summary(run: &SchedulerRun) -> String {
    let count = |v: Verdict| run.runs.iter().filter(|r| r.verdict == v).count();
    [Verdict::Pass, Verdict::Fail, Verdict::Skip, Verdict::Timeout]
        .into_iter()
        .filter(|&v| count(v) > 0)
        .map(|v| format!("{} {}", count(v), v.label()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::outcome::Subtests;
    use crate::scheduler::Scheduler;

    fn run(test: &str, verdict: Verdict, reason: Option<&str>) -> TestRun {
        TestRun {
            test: test.into(),
            cluster: Cluster::ThreeNode,
            verdict,
            elapsed: Duration::from_secs(3),
            output_tail: format!("{test} output"),
            reason: reason.map(str::to_string),
            subtests: None,
            slurmctld_excerpt: String::new(),
            queue_at_end: None,
        }
    }

    fn sched_run(scheduler: Scheduler, runs: Vec<TestRun>) -> SchedulerRun {
        SchedulerRun {
            scheduler,
            cluster: Cluster::ThreeNode,
            runs,
            elapsed: Duration::from_secs(60),
            slurm_version: "slurm 22.05.8".into(),
        }
    }

    #[test]
    fn a_disagreement_shows_sched_energys_queue_before_the_outputs() {
        let b = run("test15.10", Verdict::Pass, None);
        let e = TestRun { queue_at_end: Some("12 sh PENDING Resources".into()), ..run("test15.10", Verdict::Timeout, None) };
        let text = Disagreement { backfill: &b, energy: &e }.describe();
        let queue = text.find("12 sh PENDING Resources").expect("the queue is shown");
        assert!(queue < text.find("test15.10 output").expect("the outputs are shown"));
    }

    #[test]
    fn only_a_backfill_pass_that_energy_does_not_pass_disagrees() {
        let b = sched_run(
            Scheduler::Backfill,
            vec![run("t1", Verdict::Pass, None), run("t2", Verdict::Pass, None), run("t3", Verdict::Fail, Some("x"))],
        );
        let e = sched_run(
            Scheduler::Energy,
            vec![run("t1", Verdict::Pass, None), run("t2", Verdict::Timeout, None), run("t3", Verdict::Fail, Some("x"))],
        );
        let found = disagreements(&b, &e);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].energy.test, "t2");
        assert!(found[0].describe().contains("t2 output"));
    }

    #[test]
    fn more_failed_subtests_disagree_even_when_both_skip() {
        let with = |failed| TestRun { subtests: Some(Subtests { passed: 40, failed }), ..run("t", Verdict::Skip, Some("needs 5 nodes")) };
        let b = sched_run(Scheduler::Backfill, vec![with(0)]);
        assert_eq!(disagreements(&b, &sched_run(Scheduler::Energy, vec![with(0)])).len(), 0);
        assert_eq!(disagreements(&b, &sched_run(Scheduler::Energy, vec![with(1)])).len(), 1);
    }

    #[test]
    fn table_has_a_row_per_test_with_reasons_escaped() {
        let b = sched_run(Scheduler::Backfill, vec![run("t1", Verdict::Pass, None), run("t2", Verdict::Skip, Some("needs a|b"))]);
        let e = sched_run(Scheduler::Energy, vec![run("t1", Verdict::Fail, Some("job never started"))]);
        let table = markdown_table(&b, &e);
        assert!(table.contains("| t1 | - | pass | FAIL: job never started | 3 | 3 |"), "{table}");
        assert!(table.contains("| t2 | - | skip: needs a\\|b | not run | 3 | - |"), "{table}");
        assert_eq!(summary(&b), "1 pass, 1 skip");
    }

    #[test]
    fn a_test_on_a_variant_is_named_with_it() {
        let on = |cluster| TestRun { cluster, ..run("test39.5", Verdict::Pass, None) };
        let site = |scheduler| SchedulerRun {
            cluster: Cluster::Site,
            runs: vec![TestRun { cluster: Cluster::Site, ..run("test2.13", Verdict::Pass, None) }, on(Cluster::SiteA100Default)],
            ..sched_run(scheduler, Vec::new())
        };
        let table = markdown_table(&site(Scheduler::Backfill), &site(Scheduler::Energy));
        assert!(table.contains("| test2.13 | scontrol: "), "{table}");
        assert!(table.contains("| test39.5 (site-a100-default) | gres: "), "{table}");
        let section = markdown_section(&site(Scheduler::Backfill), &site(Scheduler::Energy));
        assert!(section.contains("no accounting) (test39.5 on the site cluster with `a100` as the default partition)."), "{section}");
        assert!(section.contains("including the clusters' start and stop"), "{section}");
    }
}
