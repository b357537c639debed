//! A tournament tree over a fixed set of slots (the nodes of a cluster): which slot holds the
//! smallest key, ties to the lowest slot, with a key changed in O(log n) and no allocation.
//!
//! The reservation search keeps every node's earliest fit in one of these per request shape:
//! it takes the earliest node, and re-keys a node whose fit went stale. Over the largest
//! centres' 10,000 nodes and some fifty shapes, what a change costs is the memory it touches,
//! not the comparisons: so the slots are grouped in blocks of [`BLOCK`] contiguous keys (one
//! short scan, two cache lines), and the tournament is played between the blocks' winners,
//! each vertex holding its winner's key and slot side by side (one cache line a level, in a
//! tree of 1,024 leaves that stays in cache). A change that moves no winner stops at once, and
//! a climb stops at the first vertex whose winner stays the same. The order is that of an
//! ordered set of `(key, slot)` pairs.

/// Slots per block: the keys scanned again when a block's winner gets a later key.
const BLOCK: usize = 16;

/// Keys per slot, each block's winner, and the tournament between the blocks.
#[derive(Debug, Clone)]
pub struct MinTree {
    /// The slots' keys, padded with empty slots to whole blocks.
    keys: Vec<u64>,
    /// `top[leaves + b]`: the winner of block `b`; `top[v]` for the inner vertices `1..leaves`
    /// (children `2v`, `2v + 1`): the smaller of its children's; `top[0]` is unused. A winner is
    /// packed as `key << 64 | slot`, so the smaller number is the smaller key, then the lower slot.
    top: Vec<u128>,
    /// Blocks rounded up to a power of two; the padding leaves stay empty.
    leaves: usize,
    present: usize,
}

/// The key of an empty slot: larger than every key the tree is given (`u64::MAX` is refused).
const EMPTY: u64 = u64::MAX;

#[inline]
fn pack(key: u64, slot: usize) -> u128 {
    (u128::from(key) << 64) | slot as u128
}

impl MinTree {
    /// A tree over `slots` slots with the given keys (`None`: an empty slot).
    pub fn new(keys: impl ExactSizeIterator<Item = Option<u64>>) -> MinTree {
        let slots = keys.len();
        let blocks = slots.div_ceil(BLOCK).max(1);
        let leaves = blocks.next_power_of_two();
        let mut all: Vec<u64> = Vec::with_capacity(blocks * BLOCK);
        all.extend(keys.map(|k| k.map_or(EMPTY, checked)));
        let present = all.iter().filter(|&&k| k != EMPTY).count();
        all.resize(blocks * BLOCK, EMPTY);
        let mut t = MinTree { keys: all, top: vec![pack(EMPTY, 0); 2 * leaves], leaves, present };
        for b in 0..blocks {
            t.top[leaves + b] = t.block_winner(b);
        }
        for v in (1..leaves).rev() {
            t.top[v] = t.top[2 * v].min(t.top[2 * v + 1]);
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
        let w = self.top[1];
        let k = (w >> 64) as u64;
        (k != EMPTY).then_some((k, w as u64 as usize))
    }

    /// Give `slot` a new key (`None`: empty it).
    pub fn set(&mut self, slot: usize, key: Option<u64>) {
        let key = key.map_or(EMPTY, checked);
        let old = std::mem::replace(&mut self.keys[slot], key);
        if old == key {
            return;
        }
        self.present = self.present + usize::from(key != EMPTY) - usize::from(old != EMPTY);
        let b = slot / BLOCK;
        let leaf = self.leaves + b;
        let held = self.top[leaf];
        let mine = pack(key, slot);
        let winner = if mine < held {
            mine
        } else if held as u64 as usize == slot {
            // The block's winner got a later key: another slot of the block may win now.
            self.block_winner(b)
        } else {
            return;
        };
        self.top[leaf] = winner;
        let mut v = leaf / 2;
        while v >= 1 {
            let w = self.top[2 * v].min(self.top[2 * v + 1]);
            if self.top[v] == w {
                break;
            }
            self.top[v] = w;
            v /= 2;
        }
    }

    /// The smallest `(key, slot)` of block `b`.
    #[inline]
    fn block_winner(&self, b: usize) -> u128 {
        let base = b * BLOCK;
        self.keys[base..base + BLOCK].iter().enumerate().map(|(i, &k)| pack(k, base + i)).min().unwrap_or(pack(EMPTY, base))
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
            initial in proptest::collection::vec(proptest::option::of(0u64..20), 0..120),
            updates in proptest::collection::vec((0usize..120, proptest::option::of(0u64..20)), 0..200),
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

    proptest! {
        /// The reservation search's pattern: the first slot gets a later key (or leaves), over
        /// and over, across many blocks.
        #[test]
        fn the_first_moved_on_agrees_with_an_ordered_set(
            initial in proptest::collection::vec(proptest::option::of(0u64..1000), 1..400),
            steps in proptest::collection::vec(proptest::option::of(0u64..200), 0..400),
        ) {
            let mut tree = MinTree::new(initial.iter().copied());
            let mut set: BTreeSet<(u64, usize)> = initial.iter().enumerate().filter_map(|(s, k)| k.map(|k| (k, s))).collect();
            for later in steps {
                let Some((k, s)) = set.pop_first() else { break };
                prop_assert_eq!(tree.first(), Some((k, s)));
                let key = later.map(|d| k + d);
                if let Some(key) = key {
                    set.insert((key, s));
                }
                tree.set(s, key);
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
