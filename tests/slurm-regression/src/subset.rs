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
    entry("test1.2", "srun: task count (-n)"),
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
