//! A tournament tree over a fixed set of slots (the nodes of a cluster): which slot holds the
//! smallest key, ties to the lowest slot, with a key changed in O(log n) and no allocation.
//!
//! The reservation search keeps every node's earliest fit in one of these per request shape:
//! it takes the earliest node, and re-keys a node whose fit went stale. A tree of slot indices
//! in one flat array does both with a few comparisons in cache, where an ordered set of
//! (key, slot) pairs allocates and chases pointers on every move; the order is the same.

/// Keys per slot and, for each inner vertex, the slot that wins its subtree.
#[derive(Debug, Clone)]
pub struct MinTree {
    keys: Vec<u64>,
    /// `winners[v]` for the inner vertices `1..leaves` (vertex `v` has children `2v`, `2v + 1`;
    /// leaf `leaves + s` is slot `s`); `winners[0]` is unused.
    winners: Vec<u32>,
    /// Slots rounded up to a power of two; the padding slots stay empty.
    leaves: usize,
    present: usize,
}

/// The key of an empty slot: larger than every key the tree is given (`u64::MAX` is refused).
const EMPTY: u64 = u64::MAX;

impl MinTree {
    /// A tree over `slots` slots with the given keys (`None`: an empty slot).
    pub fn new(keys: impl ExactSizeIterator<Item = Option<u64>>) -> MinTree {
        let slots = keys.len();
        let leaves = slots.next_power_of_two().max(1);
        let mut all: Vec<u64> = keys.map(|k| k.map_or(EMPTY, checked)).collect();
        let present = all.iter().filter(|&&k| k != EMPTY).count();
        all.resize(leaves, EMPTY);
        let mut t = MinTree { keys: all, winners: vec![0; leaves], leaves, present };
        for v in (1..leaves).rev() {
            t.winners[v] = t.play(v);
        }
        t
    }

    /// Slots holding a key.
    pub fn len(&self) -> usize {
        self.present
    }

    pub fn is_empty(&self) -> bool {
        self.present == 0
    }

    /// The smallest key and its slot (the lowest slot among equal keys).
    pub fn first(&self) -> Option<(u64, usize)> {
        let s = self.winner(1);
        let k = self.keys[s];
        (k != EMPTY).then_some((k, s))
    }

    /// Give `slot` a new key (`None`: empty it).
    pub fn set(&mut self, slot: usize, key: Option<u64>) {
        let key = key.map_or(EMPTY, checked);
        let old = std::mem::replace(&mut self.keys[slot], key);
        self.present = self.present + usize::from(key != EMPTY) - usize::from(old != EMPTY);
        let mut v = (self.leaves + slot) / 2;
        while v >= 1 {
            self.winners[v] = self.play(v);
            v /= 2;
        }
    }

    /// The slot winning vertex `v` (a leaf is its own slot).
    #[inline]
    fn winner(&self, v: usize) -> usize {
        if v >= self.leaves { v - self.leaves } else { self.winners[v] as usize }
    }

    /// The winner of inner vertex `v` from its children's: the smaller key, the left one (the
    /// lower slots) on a tie.
    #[inline]
    fn play(&self, v: usize) -> u32 {
        let (l, r) = (self.winner(2 * v), self.winner(2 * v + 1));
        (if self.keys[r] < self.keys[l] { r } else { l }) as u32
    }
}

fn checked(k: u64) -> u64 {
    assert!(k != EMPTY, "MinTree: u64::MAX is reserved for empty slots");
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// The tree answers like an ordered set of (key, slot) pairs under the same updates.
        #[test]
        fn agrees_with_an_ordered_set(
            initial in proptest::collection::vec(proptest::option::of(0u64..20), 0..40),
            updates in proptest::collection::vec((0usize..40, proptest::option::of(0u64..20)), 0..60),
        ) {
            let mut tree = MinTree::new(initial.iter().copied());
            let mut set: BTreeSet<(u64, usize)> = initial.iter().enumerate().filter_map(|(s, k)| k.map(|k| (k, s))).collect();
            let mut keys = initial.clone();
            prop_assert_eq!(tree.first(), set.first().copied());
            for (slot, key) in updates {
                if slot >= keys.len() {
                    continue;
                }
                if let Some(old) = keys[slot] {
                    set.remove(&(old, slot));
                }
                if let Some(k) = key {
                    set.insert((k, slot));
                }
                keys[slot] = key;
                tree.set(slot, key);
                prop_assert_eq!(tree.first(), set.first().copied());
                prop_assert_eq!(tree.len(), set.len());
            }
        }
    }

    #[test]
    fn ties_go_to_the_lowest_slot() {
        let mut t = MinTree::new([Some(5), Some(3), Some(3), None].into_iter());
        assert_eq!(t.first(), Some((3, 1)));
        t.set(1, None);
        assert_eq!(t.first(), Some((3, 2)));
        t.set(0, Some(3));
        assert_eq!(t.first(), Some((3, 0)));
        assert_eq!(MinTree::new(std::iter::empty()).first(), None);
    }
}
