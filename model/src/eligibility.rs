//! Where a pending job may run at all, as Slurm decides it: the nodes of each partition (and
//! reservation) it was queued for, after features, `--nodelist`/`--exclude`, GPU type and the
//! like, and the advanced reservations that keep everyone else off their nodes for their window.
//!
//! The plugin computes these from slurmctld's own records and functions; the planner only
//! honours them. An empty [`crate::types::PendingJob::eligible`] means "any node" (the
//! simulator's jobs, and tests), so the planner behaves exactly as before for them.
//!
//! Node sets are interned in the snapshot ([`crate::types::Snapshot::node_sets`]): the queue of
//! a real site has thousands of jobs but few distinct sets (one per partition, plus a few for
//! jobs with constraints), which keeps snapshots small and lets the planner cache failures per
//! (request shape, node set).

use serde::{Deserialize, Serialize};

/// A set of node indices of one snapshot (a bitset).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeSet {
    words: Vec<u64>,
}

impl NodeSet {
    pub fn new() -> NodeSet {
        NodeSet::default()
    }

    /// Every node index below `nodes`.
    pub fn full(nodes: usize) -> NodeSet {
        let mut s = NodeSet { words: vec![u64::MAX; nodes.div_ceil(64)] };
        if !nodes.is_multiple_of(64)
            && let Some(last) = s.words.last_mut()
        {
            *last = (1u64 << (nodes % 64)) - 1;
        }
        s
    }

    pub fn insert(&mut self, node: usize) {
        let (w, b) = (node / 64, node % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << b;
    }

    pub fn remove(&mut self, node: usize) {
        if let Some(word) = self.words.get_mut(node / 64) {
            *word &= !(1 << (node % 64));
        }
    }

    pub fn contains(&self, node: usize) -> bool {
        self.words.get(node / 64).is_some_and(|w| w & (1 << (node % 64)) != 0)
    }

    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// Node indices in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(w, &bits)| {
            (0..64).filter(move |b| bits & (1 << b) != 0).map(move |b| w * 64 + b)
        })
    }

    /// Trailing zero words removed, so that equal sets compare (and hash) equal.
    fn normalised(mut self) -> NodeSet {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
        self
    }
}

impl FromIterator<usize> for NodeSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> NodeSet {
        let mut s = NodeSet::new();
        for n in iter {
            s.insert(n);
        }
        s
    }
}

/// An advanced reservation of slurmctld (`scontrol create reservation`), as far as it keeps
/// jobs off nodes: over `[start_s, end_s)` no job that does not run inside it may use its
/// nodes. Jobs inside it name it in their [`Eligibility::reservation`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdvanceReservation {
    pub name: String,
    /// Index into [`crate::types::Snapshot::node_sets`].
    pub node_set: u32,
    pub start_s: f64,
    pub end_s: f64,
    /// A window Slurm's will-run test gave a pending job: it holds only against the jobs the
    /// planner tests after that one (as sched/backfill reserves it when it reaches the job in
    /// priority order), never against higher-priority jobs. `None`: a Slurm reservation, which
    /// holds against every job outside it.
    #[serde(default)]
    pub held_for: Option<crate::types::JobId>,
}

/// One way a pending job may start: one of Slurm's queue records for it (a partition, and a
/// reservation when it has one or a magnetic reservation attracts it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Eligibility {
    /// Index into [`crate::types::Snapshot::node_sets`]: the nodes this record allows.
    pub node_set: u32,
    /// Index into [`crate::types::Snapshot::reservations`] of the reservation the job runs in
    /// through this record: its window does not keep the job out.
    pub reservation: Option<u32>,
    /// Slurm lets the job start through this record no earlier than this (its reservation's
    /// start, a maintenance window's end, ...).
    pub not_before_s: f64,
    /// The plugin's own tag for the record, handed back in the decision (which partition and
    /// reservation to apply when it starts the job).
    pub route: u32,
}

/// Interns node sets for a snapshot: equal sets get one index.
#[derive(Debug, Default)]
pub struct NodeSetInterner {
    sets: Vec<NodeSet>,
    index: std::collections::HashMap<NodeSet, u32>,
}

impl NodeSetInterner {
    pub fn intern(&mut self, set: NodeSet) -> u32 {
        let set = set.normalised();
        if let Some(&i) = self.index.get(&set) {
            return i;
        }
        let i = self.sets.len() as u32;
        self.sets.push(set.clone());
        self.index.insert(set, i);
        i
    }

    pub fn into_sets(self) -> Vec<NodeSet> {
        self.sets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_set_basics() {
        let mut s: NodeSet = [1, 64, 130].into_iter().collect();
        assert!(s.contains(1) && s.contains(64) && s.contains(130));
        assert!(!s.contains(0) && !s.contains(65) && !s.contains(10_000));
        assert_eq!(s.len(), 3);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![1, 64, 130]);
        s.remove(64);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![1, 130]);
        let full = NodeSet::full(70);
        assert_eq!(full.len(), 70);
        assert!(full.contains(69) && !full.contains(70));
        assert!(NodeSet::new().is_empty());
    }

    #[test]
    fn interning_gives_equal_sets_one_index() {
        let mut i = NodeSetInterner::default();
        let a = i.intern([1, 2].into_iter().collect());
        let mut with_tail: NodeSet = [1, 2, 200].into_iter().collect();
        with_tail.remove(200);
        let b = i.intern(with_tail);
        let c = i.intern([3].into_iter().collect());
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(i.into_sets().len(), 2);
    }
}
