//! The chosen subsets of Slurm's expect tests, each test with what it covers: [`SUBSET`] on the
//! three-node cluster, [`SITE_SUBSET`] on the heterogeneous site cluster. See
//! docs/slurm-regression.md for why these.

/// One test of the subset.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// The script's name in `testsuite/expect`.
    pub test: &'static str,
    /// What it covers, in a few words.
    pub covers: &'static str,
}

const fn entry(test: &'static str, covers: &'static str) -> Entry {
    Entry { test, covers }
}

/// The subset, in the order it runs.
pub const SUBSET: &[Entry] = &[
    // srun and salloc: allocation, task layout, exit codes, GPUs.
    entry("test1.2", "srun: task count (-n, --overcommit)"),
    entry("test1.13", "srun: --immediate allocation"),
    entry("test1.15", "srun: --wait after the first task ends"),
    entry("test1.33", "srun: exit code reporting"),
    entry("test1.43", "srun: --test-only (slurm_job_will_run)"),
    entry("test1.58", "srun --jobid into an salloc allocation"),
    entry("test1.81", "srun: node count (-N)"),
    entry("test1.82", "srun: --nodelist and --exclude"),
    entry("test1.84", "srun: --cpus-per-task"),
    entry("test1.62", "srun: gres/gpu, CUDA_VISIBLE_DEVICES"),
    entry("test15.7", "salloc: --mincpus/--mem/--tmp; a priority 0 job is not started"),
    entry("test15.10", "salloc: task count (--ntasks)"),
    // scontrol on jobs.
    entry("test2.8", "scontrol: show jobs and steps"),
    entry("test2.14", "scontrol: shrink a running job"),
    entry("test2.21", "scontrol: requeue a completed or failed job"),
    entry("test2.26", "scontrol top: priority order of pending jobs"),
    entry("test3.4", "scontrol: update a pending job"),
    // Reservations.
    entry("test3.11", "reservations: create, update, delete, jobs in them"),
    entry("test3.14", "reservations: the REPLACE flag"),
    // squeue and scancel.
    entry("test5.4", "squeue: formats, steps"),
    entry("test5.6", "squeue: filters (jobs, nodes, states, steps)"),
    entry("test6.8", "scancel: --state and --name filters"),
    entry("test6.9", "scancel: individual job steps"),
    // sbatch.
    entry("test17.4", "sbatch: runs as the submitting user and group"),
    entry("test17.6", "sbatch: task count (--ntasks)"),
    entry("test17.8", "sbatch: time limit (--time)"),
    entry("test17.10", "sbatch: --mincpus/--mem/--tmp; a priority 0 job is not started"),
    entry("test17.11", "sbatch: --oversubscribe, --contiguous, --hold"),
    entry("test17.17", "sbatch: node sharing (--nodelist, --oversubscribe)"),
    entry("test17.18", "sbatch: --dependency and --begin"),
    // Job arrays.
    entry("test28.1", "job arrays: sbatch --array submits and runs them"),
    entry("test28.2", "job arrays: SLURM_ARRAY_* environment"),
    entry("test28.4", "job arrays: scontrol update by job id and array index"),
    entry("test28.5", "job arrays: hold and release a whole array"),
    entry("test28.7", "job arrays: dependencies"),
    entry("test28.10", "job arrays: changing the maximum running task count"),
    // GPUs (gres/gpu).
    entry("test39.1", "gres: sbatch --gpus* options, scontrol show job"),
    entry("test39.3", "gres: srun --gpus* options, scontrol show step"),
    entry("test39.7", "gres: --cpus-per-gpu"),
    entry("test39.23", "gres: --gpus-per-task with an implicit task count"),
];

/// The second subset, on the heterogeneous site cluster (`slurm_testcluster::site_cluster()`),
/// in the order it runs: the tests the three-node cluster could not run whole (test3.11) or
/// left out for time, and short tests of [`SUBSET`] whose placement the site's mix of nodes
/// changes. The tests that assume alike nodes run on a variant of the site cluster
/// ([`crate::scheduler::Cluster::for_test`]): test39.5, test39.7 and test39.23 with `a100` as the
/// default partition, test3.11 with every node laid out alike and a default partition of all
/// nodes; they come last, grouped by variant, so that each variant starts once.
pub const SITE_SUBSET: &[Entry] = &[
    // On the site cluster as it is: from SUBSET, placement on unlike nodes.
    entry("test1.2", "srun: task count (-n, --overcommit)"),
    entry("test1.81", "srun: node count (-N)"),
    entry("test1.82", "srun: --nodelist and --exclude"),
    entry("test1.84", "srun: --cpus-per-task"),
    entry("test1.62", "srun: gres/gpu, CUDA_VISIBLE_DEVICES"),
    entry("test15.7", "salloc: --mincpus/--mem/--tmp; a priority 0 job is not started"),
    entry("test17.10", "sbatch: --mincpus/--mem/--tmp; a priority 0 job is not started"),
    entry("test2.14", "scontrol: shrink a running job"),
    entry("test39.1", "gres: sbatch --gpus* options, scontrol show job"),
    entry("test39.3", "gres: srun --gpus* options, scontrol show step"),
    // On the site cluster as it is: left out of SUBSET for time.
    entry("test2.13", "scontrol: update a running step's time limit, enforced"),
    entry("test3.7", "scontrol suspend/resume: two jobs on one node"),
    entry("test17.5", "sbatch: --output/--error file names (%j, %u, %%, none)"),
    entry("test17.39", "sbatch: --dependency afterok with ? (OR)"),
    entry("test17.42", "sbatch --wait: returns when the job is complete"),
    entry("test17.44", "job arrays: --dependency=aftercorr, a limit of 2 running tasks"),
    entry("test28.9", "job arrays: at most 2 tasks running (--array=0-3%2)"),
    // With `a100` as the default partition (alike GPU nodes).
    entry("test39.5", "gres: --gpus, --gpus-per-node/-socket/-task, with -c"),
    entry("test39.7", "gres: --cpus-per-gpu"),
    entry("test39.23", "gres: --gpus-per-task with an implicit task count"),
    // With alike nodes and a default partition of all 6: test3.11 whole, part 9 included.
    entry("test3.11", "reservations: create, update, delete, jobs in them"),
];

/// What `test` covers, if it is in a subset.
pub fn covers(test: &str) -> Option<&'static str> {
    SUBSET.iter().chain(SITE_SUBSET).find(|e| e.test == test).map(|e| e.covers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_test_is_listed_once_with_a_description() {
        for subset in [SUBSET, SITE_SUBSET] {
            let mut names: Vec<&str> = subset.iter().map(|e| e.test).collect();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), subset.len(), "a test is listed twice");
            assert!(subset.iter().all(|e| e.test.starts_with("test") && !e.covers.is_empty()));
        }
    }

    #[test]
    fn each_site_variant_is_one_run_of_consecutive_tests() {
        use crate::scheduler::Cluster;
        let clusters: Vec<Cluster> = SITE_SUBSET.iter().map(|e| Cluster::Site.for_test(e.test)).collect();
        let mut runs = clusters.clone();
        runs.dedup();
        let mut distinct = runs.clone();
        distinct.sort_by_key(|c| c.short_name());
        distinct.dedup();
        assert_eq!(runs.len(), distinct.len(), "a cluster variant would start twice: {runs:?}");
    }

    #[test]
    fn a_test_in_both_subsets_covers_the_same() {
        for e in SITE_SUBSET {
            if let Some(three) = SUBSET.iter().find(|t| t.test == e.test) {
                assert_eq!(three.covers, e.covers, "{}", e.test);
            }
        }
    }
}
