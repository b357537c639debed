//! A monotone priority queue of `(key, slot)` pairs (a radix heap): the smallest pair comes
//! out first (the lowest slot among equal keys), and a pair pushed is never smaller than the
//! last key taken out, which is how a reservation search's fits behave within a cycle (they
//! only grow). Pairs are kept in buckets by the highest bit in which their key differs from the
//! last key taken out; taking out the smallest moves only the pairs of the lowest non-empty
//! bucket, in one sequential pass. Over the largest centres' ten thousand nodes and some fifty
//! request shapes, a fit computed again is appended to a bucket instead of moving through a
//! tree whose lower levels are out of cache.
//!
//! Pairs taken out and given back unchanged ([`RadixQueue::give_back`], the nodes a search
//! looked at without claiming) are the smallest of the queue: they wait in a short sorted list
//! in front of the buckets.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The queue; `len` counts the pairs in it.
#[derive(Debug, Clone)]
pub(crate) struct RadixQueue {
    /// The last key taken out of the buckets: every key in them is at least this.
    last: u64,
    /// `buckets[0]`: the pairs whose key is `last`, by slot, highest first; `buckets[b]` for
    /// `b >= 1`: the pairs whose key differs from `last` first in bit `b - 1`, in no order.
    buckets: Vec<Vec<(u64, u32)>>,
    /// Bit `b`: `buckets[b]` holds a pair (for `b >= 1`).
    filled: u128,
    /// The smallest pair in the buckets, when known.
    bucketed_min: Option<(u64, u32)>,
    /// The pairs the queue was built with, not taken out yet, sorted, the largest first.
    run: Vec<(u64, u32)>,
    /// Pairs given back, smaller than every other pair of the queue, the largest first.
    front: Vec<(u64, u32)>,
    /// Pairs pushed with a key below `last` (a pair given back, taken again and pushed with a
    /// later key that is still below the buckets').
    below: BinaryHeap<Reverse<(u64, u32)>>,
    len: usize,
}

fn bucket_of(last: u64, key: u64) -> usize {
    64 - (key ^ last).leading_zeros() as usize
}

impl RadixQueue {
    /// A queue holding `pairs` (in any order): sorted once, then taken from the end.
    pub(crate) fn from_pairs(mut pairs: Vec<(u64, u32)>) -> RadixQueue {
        pairs.sort_unstable_by(|a, b| b.cmp(a));
        let len = pairs.len();
        RadixQueue {
            last: 0,
            buckets: vec![Vec::new(); 65],
            filled: 0,
            bucketed_min: None,
            run: pairs,
            front: Vec::new(),
            below: BinaryHeap::new(),
            len,
        }
    }

    /// Pairs in the queue.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Add `slot` with `key`.
    pub(crate) fn push(&mut self, key: u64, slot: usize) {
        let pair = (key, slot as u32);
        self.len += 1;
        if let Some(&largest) = self.front.first()
            && pair < largest
        {
            // Among the pairs given back: in its place, by (key, slot), the largest first.
            let at = self.front.partition_point(|&p| p > pair);
            self.front.insert(at, pair);
            return;
        }
        if key < self.last {
            self.below.push(Reverse(pair));
            return;
        }
        if self.bucketed_min.is_some_and(|m| pair < m) || self.buckets[0].is_empty() && self.filled == 0 {
            self.bucketed_min = Some(pair);
        }
        let b = bucket_of(self.last, key);
        if b == 0 {
            let equal = &mut self.buckets[0];
            let at = equal.partition_point(|p| p.1 > pair.1);
            equal.insert(at, pair);
        } else {
            self.buckets[b].push(pair);
            self.filled |= 1 << b;
        }
    }

    /// Take out the smallest `(key, slot)`.
    pub(crate) fn pop(&mut self) -> Option<(u64, usize)> {
        if let Some((key, slot)) = self.front.pop() {
            self.len -= 1;
            return Some((key, slot as usize));
        }
        let mut least = self.bucketed_first().map(|p| (p, 0));
        for (p, from) in [(self.run.last().copied(), 1), (self.below.peek().map(|r| r.0), 2)] {
            if let Some(p) = p
                && least.is_none_or(|(l, _)| p < l)
            {
                least = Some((p, from));
            }
        }
        let (key, slot) = match least?.1 {
            0 => self.take_bucketed()?,
            1 => self.run.pop()?,
            _ => self.below.pop()?.0,
        };
        self.len -= 1;
        Some((key, slot as usize))
    }

    /// Give back pairs taken out with [`RadixQueue::pop`], unchanged, in the order they came
    /// out: no pair of the queue is smaller than they.
    pub(crate) fn give_back(&mut self, pairs: &[(u64, usize)]) {
        for &(key, slot) in pairs.iter().rev() {
            self.front.push((key, slot as u32));
        }
        self.len += pairs.len();
    }

    /// The smallest pair in the buckets.
    fn bucketed_first(&mut self) -> Option<(u64, u32)> {
        if let Some(&p) = self.buckets[0].last() {
            return Some(p);
        }
        if self.bucketed_min.is_none() && self.filled != 0 {
            let b = self.filled.trailing_zeros() as usize;
            self.bucketed_min = self.buckets[b].iter().copied().min();
        }
        self.bucketed_min
    }

    /// Take the smallest pair out of the buckets: its key is the smallest of the queue, so
    /// every key pushed from now on is at least it.
    fn take_bucketed(&mut self) -> Option<(u64, u32)> {
        if self.buckets[0].is_empty() {
            if self.filled == 0 {
                return None;
            }
            let b = self.filled.trailing_zeros() as usize;
            self.filled &= !(1 << b);
            let mut moving = std::mem::take(&mut self.buckets[b]);
            self.last = moving.iter().map(|&(k, _)| k).min().unwrap_or(self.last);
            for &pair in &moving {
                let to = bucket_of(self.last, pair.0);
                self.buckets[to].push(pair);
                self.filled |= 1 << to;
            }
            self.filled &= !1;
            moving.clear();
            self.buckets[b] = moving;
            self.buckets[0].sort_unstable_by_key(|p| std::cmp::Reverse(p.1));
        }
        self.bucketed_min = None;
        self.buckets[0].pop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// The queue answers like an ordered set of (key, slot) pairs under pops, pushes of
        /// keys at least the last popped (and sometimes smaller), and give-backs.
        #[test]
        fn agrees_with_an_ordered_set(
            initial in proptest::collection::vec(proptest::option::of(0u64..64), 0..200),
            steps in proptest::collection::vec((0u8..4, 0u64..40, 0usize..5), 0..300),
        ) {
            // Half the initial pairs given at the start, half pushed.
            let half = initial.len() / 2;
            let given: Vec<(u64, u32)> = initial[..half].iter().enumerate().filter_map(|(s, k)| k.map(|k| (k, s as u32))).collect();
            let mut q = RadixQueue::from_pairs(given.clone());
            let mut set: BTreeSet<(u64, usize)> = given.iter().map(|&(k, s)| (k, s as usize)).collect();
            let mut slot_next = initial.len();
            for (s, k) in initial.iter().enumerate().skip(half) {
                if let Some(k) = k {
                    q.push(*k, s);
                    set.insert((*k, s));
                }
            }
            let mut last = 0u64;
            for (op, d, n) in steps {
                match op {
                    0 | 1 => {
                        let got = q.pop();
                        let want = set.pop_first();
                        prop_assert_eq!(got, want);
                        if let Some((k, s)) = got {
                            last = k;
                            if op == 1 {
                                q.push(k + d, s);
                                set.insert((k + d, s));
                            }
                        }
                    }
                    2 => {
                        let mut taken = Vec::new();
                        for _ in 0..n {
                            if let Some(p) = q.pop() {
                                prop_assert_eq!(Some(p), set.pop_first());
                                taken.push(p);
                            }
                        }
                        q.give_back(&taken);
                        set.extend(taken);
                    }
                    _ => {
                        // A new slot, at or after the last key taken, or before it.
                        let key = if d % 7 == 0 { last.saturating_sub(d) } else { last + d };
                        q.push(key, slot_next);
                        set.insert((key, slot_next));
                        slot_next += 1;
                    }
                }
                prop_assert_eq!(q.len(), set.len());
            }
            let mut rest = Vec::new();
            while let Some(p) = q.pop() {
                rest.push(p);
            }
            prop_assert_eq!(rest, set.into_iter().collect::<Vec<_>>());
        }
    }
}
