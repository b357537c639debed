//! The chosen subset of Slurm's expect tests, each with what it covers. See
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

/// What `test` covers, if it is in the subset.
pub fn covers(test: &str) -> Option<&'static str> {
    SUBSET.iter().find(|e| e.test == test).map(|e| e.covers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_test_is_listed_once_with_a_description() {
        let mut names: Vec<&str> = SUBSET.iter().map(|e| e.test).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), SUBSET.len(), "a test is listed twice");
        assert!(SUBSET.iter().all(|e| e.test.starts_with("test") && !e.covers.is_empty()));
    }
}
