//! The reservation search's memory within one planner cycle: every node's earliest fit per
//! request shape (amount per node, duration, earliest start, route), kept across the cycle's
//! reservations and starts, and the search for the earliest nodes of a shape.
//!
//! Within a cycle a node's free amount only shrinks (starts and claims), so a fit computed
//! before a change is a lower bound after it. A node that changed is only written to a log; a
//! shape reads the log when it is searched and marks those nodes stale in a bitmap (a few KB a
//! shape, which stays in cache where a change counter per node and shape would not), and a
//! stale node's fit is computed again only when it comes first (lazily, like a priority queue).
//! Since fits only grow within a cycle, a shape's nodes wait in a monotone queue
//! ([`radix_queue`]): the fits it started with sorted once and taken from the front, a fit
//! computed again appended to a bucket by its highest bit, not moved through a tree.
//! The same bound starts a new shape: a shorter duration's fits (same amount, earliest start
//! and route) are lower bounds of a longer one's, so a new shape copies the nearest shorter
//! one's, all stale, instead of computing every node's fit; only the first shape of an amount
//! computes them all.
//!
//! Whatever the bounds, the search yields the nodes in the order of their true earliest fit
//! (ties to the lowest node), so it answers exactly as computing every fit afresh would.

use std::collections::HashMap;

mod radix_queue;

use crate::min_tree::MinTree;
use radix_queue::RadixQueue;

/// From this many nodes on, a shape's nodes wait in a [`RadixQueue`]; below it, in a
/// [`MinTree`]. The tree moves a node in place, which is the cheapest while every shape's keys
/// stay in cache (1,000 nodes: 8 KB a shape); at 10,000 nodes (80 KB a shape, some fifty
/// shapes) its climbs miss the cache on every refit, and the queue, which appends a refit and
/// reads its buckets in sequence, is the faster. Where between the two it turns is not
/// measured. Both yield the same order, so the choice changes no decision.
const QUEUE_FROM_NODES: usize = 4096;

/// A shape's nodes by fit, ties to the lowest node.
#[derive(Clone)]
enum ByTime {
    Tree(MinTree),
    Queue(RadixQueue),
}

impl ByTime {
    fn len(&self) -> usize {
        match self {
            ByTime::Tree(t) => t.len(),
            ByTime::Queue(q) => q.len(),
        }
    }
}

/// What the earliest fits of a reservation search depend on: the amount per node (GPUs, CPUs,
/// memory), the duration, the earliest start and the route (node set, own reservation); f64s as
/// bits (non-negative times order as their bits do).
pub(crate) type FitKey = (i64, i64, i64, u64, u64, Option<(u32, Option<u32>)>);

/// The duration of a [`FitKey`] (seconds).
fn duration_s(key: &FitKey) -> f64 {
    f64::from_bits(key.3)
}

/// Does `other` differ from `key` in its duration only?
fn same_but_duration(key: &FitKey, other: &FitKey) -> bool {
    (key.0, key.1, key.2, key.4, key.5) == (other.0, other.1, other.2, other.4, other.5)
}

/// Every node's earliest fit (or a lower bound of it) for one shape.
#[derive(Clone)]
struct ShapeFits {
    /// The nodes that can take the shape, by fit (ties to the lowest node).
    by_time: ByTime,
    /// One bit per node: its key in `by_time` is only a lower bound.
    stale: Stale,
    /// How much of the change log this shape has marked.
    log_read: usize,
}

#[derive(Clone)]
struct Stale(Vec<u64>);

impl Stale {
    fn is_stale(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }

    fn mark(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

/// The earliest fits of a cycle's reservation searches, per [`FitKey`].
pub(crate) struct FitIndex {
    nodes: usize,
    /// A new shape's nodes wait in a queue, not a tree (see [`QUEUE_FROM_NODES`]).
    queue: bool,
    shapes: HashMap<FitKey, ShapeFits>,
    /// Nodes whose free resources, releases or claims changed, in order.
    changed: Vec<u32>,
    /// The nodes a search has taken out so far (kept between searches for its memory).
    taken: Vec<(u64, usize)>,
}

impl FitIndex {
    pub(crate) fn new(nodes: usize) -> FitIndex {
        FitIndex::ordered_by(nodes, nodes >= QUEUE_FROM_NODES)
    }

    fn ordered_by(nodes: usize, queue: bool) -> FitIndex {
        FitIndex { nodes, queue, shapes: HashMap::new(), changed: Vec::new(), taken: Vec::new() }
    }

    /// Node `i`'s free resources, releases or claims changed: its fits are lower bounds now.
    pub(crate) fn node_changed(&mut self, i: usize) {
        if i < self.nodes {
            self.changed.push(i as u32);
        }
    }

    /// The earliest moment at which `k` nodes can all hold a job of shape `key`, and those
    /// nodes: the nodes are taken in order of their earliest fit (`fit(i)`, as bits; `None`: the
    /// node cannot take the job), and the first moment at which `k` of those taken so far
    /// `covers(node, moment)` (hold the job over its whole duration from that moment) is it.
    pub(crate) fn earliest(
        &mut self,
        key: FitKey,
        k: usize,
        mut fit: impl FnMut(usize) -> Option<u64>,
        covers: impl FnMut(usize, f64) -> bool,
    ) -> Option<(f64, Vec<usize>)> {
        if !self.shapes.contains_key(&key) {
            let new = self.new_shape(&key, &mut fit);
            self.shapes.insert(key, new);
        }
        let shape = self.shapes.get_mut(&key)?;
        for &n in &self.changed[shape.log_read..] {
            shape.stale.mark(n as usize);
        }
        shape.log_read = self.changed.len();
        if shape.by_time.len() < k {
            return None;
        }
        let stale = &mut shape.stale;
        let taken = &mut self.taken;
        taken.clear();
        match &mut shape.by_time {
            ByTime::Tree(tree) => search(tree, stale, taken, k, fit, covers),
            ByTime::Queue(queue) => search(queue, stale, taken, k, fit, covers),
        }
    }

    /// A shape's fits: the nearest shorter duration's (same amount, start and route) as lower
    /// bounds, all stale; without one, every node's fit computed now.
    fn new_shape(&self, key: &FitKey, fit: &mut impl FnMut(usize) -> Option<u64>) -> ShapeFits {
        let words = self.nodes.div_ceil(64);
        let shorter = self
            .shapes
            .iter()
            .filter(|(other, _)| same_but_duration(key, other) && duration_s(other) <= duration_s(key))
            .max_by(|a, b| duration_s(a.0).total_cmp(&duration_s(b.0)));
        match shorter {
            Some((_, s)) => ShapeFits { by_time: s.by_time.clone(), stale: Stale(vec![u64::MAX; words]), log_read: self.changed.len() },
            None => {
                let by_time = if self.queue {
                    ByTime::Queue(RadixQueue::from_pairs((0..self.nodes).filter_map(|i| fit(i).map(|bits| (bits, i as u32))).collect()))
                } else {
                    ByTime::Tree(MinTree::new((0..self.nodes).map(fit)))
                };
                ShapeFits { by_time, stale: Stale(vec![0; words]), log_read: self.changed.len() }
            }
        }
    }
}

/// What the search needs of a shape's order: take out the first node (its key may be a lower
/// bound), put a node back with a fit computed again (or drop it: `None`, it cannot take the
/// shape), and give back the nodes taken once the answer is found.
trait FitOrder {
    fn take_first(&mut self) -> Option<(u64, usize)>;
    fn put(&mut self, i: usize, key: Option<u64>);
    fn give_back(&mut self, taken: &[(u64, usize)]);
}

/// The tree moves a node in place: taking it out is setting its key to none.
impl FitOrder for MinTree {
    fn take_first(&mut self) -> Option<(u64, usize)> {
        let first = self.first()?;
        self.set(first.1, None);
        Some(first)
    }

    fn put(&mut self, i: usize, key: Option<u64>) {
        self.set(i, key);
    }

    fn give_back(&mut self, taken: &[(u64, usize)]) {
        for &(bits, i) in taken {
            self.set(i, Some(bits));
        }
    }
}

impl FitOrder for RadixQueue {
    fn take_first(&mut self) -> Option<(u64, usize)> {
        self.pop()
    }

    fn put(&mut self, i: usize, key: Option<u64>) {
        if let Some(key) = key {
            self.push(key, i);
        }
    }

    fn give_back(&mut self, taken: &[(u64, usize)]) {
        RadixQueue::give_back(self, taken);
    }
}

/// [`FitIndex::earliest`] over a shape's order: a stale node taken out gets its fit again and
/// goes back in; each node taken with a clean fit is a candidate common start for it and the
/// ones taken before it (`taken` comes empty), and the nodes taken are given back once the
/// answer is found.
fn search(
    order: &mut impl FitOrder,
    stale: &mut Stale,
    taken: &mut Vec<(u64, usize)>,
    k: usize,
    mut fit: impl FnMut(usize) -> Option<u64>,
    mut covers: impl FnMut(usize, f64) -> bool,
) -> Option<(f64, Vec<usize>)> {
    let mut found = None;
    while let Some((bits, i)) = order.take_first() {
        if stale.is_stale(i) {
            stale.clear(i);
            order.put(i, fit(i));
            continue;
        }
        let start = f64::from_bits(bits);
        taken.push((bits, i));
        if k == 1 {
            // Its earliest fit is a start for it alone.
            found = Some((start, vec![i]));
            break;
        }
        let together: Vec<usize> = taken.iter().map(|&(_, n)| n).filter(|&n| covers(n, start)).take(k).collect();
        if together.len() == k {
            found = Some((start, together));
            break;
        }
    }
    order.give_back(taken);
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A toy cluster: per node, busy intervals `[from, to)`; a job of duration `d` fits at the
    /// earliest `t >= 0` whose window meets none. Claims add intervals (fits only grow).
    fn fit_of(busy: &[Vec<(u64, u64)>], i: usize, d: u64) -> Option<u64> {
        let mut t = 0;
        let mut ivs = busy[i].clone();
        ivs.sort();
        for (from, to) in ivs {
            if t + d <= from {
                break;
            }
            t = t.max(to);
        }
        Some(t)
    }

    fn covers(busy: &[Vec<(u64, u64)>], i: usize, t: u64, d: u64) -> bool {
        busy[i].iter().all(|&(from, to)| to <= t || from >= t + d)
    }

    /// The straightforward search: every fit computed afresh, sorted by (fit, node).
    fn by_definition(busy: &[Vec<(u64, u64)>], d: u64, k: usize) -> Option<(f64, Vec<usize>)> {
        let mut fits: Vec<(u64, usize)> = (0..busy.len()).filter_map(|i| fit_of(busy, i, d).map(|t| (t, i))).collect();
        fits.sort();
        for (n, &(t, _)) in fits.iter().enumerate() {
            let together: Vec<usize> = fits[..=n].iter().map(|&(_, i)| i).filter(|&i| covers(busy, i, t, d)).take(k).collect();
            if together.len() == k {
                return Some((t as f64, together));
            }
        }
        None
    }

    fn key(d: u64) -> FitKey {
        (1, 1, 1, (d as f64).to_bits(), 0f64.to_bits(), None)
    }

    proptest! {
        /// Searches over shapes of several durations, with claims in between (each search's
        /// answer claimed, and random claims on random nodes), answer as the straightforward
        /// search does, with the shapes' nodes in a tree or in a queue.
        #[test]
        fn answers_as_computing_every_fit_afresh(
            queue in proptest::bool::ANY,
            initial in proptest::collection::vec(proptest::collection::vec((0u64..50, 1u64..20), 0..3), 1..150),
            steps in proptest::collection::vec((1u64..6, 1usize..3, proptest::option::of((0usize..150, 0u64..80, 1u64..20))), 1..60),
        ) {
            let mut busy: Vec<Vec<(u64, u64)>> = initial.iter().map(|v| v.iter().map(|&(s, l)| (s, s + l)).collect()).collect();
            let n = busy.len();
            let mut index = FitIndex::ordered_by(n, queue);
            for (d10, k, claim) in steps {
                let d = d10 * 10;
                let want = by_definition(&busy, d, k);
                let got = index.earliest(
                    key(d),
                    k,
                    |i| fit_of(&busy, i, d).map(|t| (t as f64).to_bits()),
                    |i, t| covers(&busy, i, t as u64, d),
                );
                prop_assert_eq!(&got, &want);
                if let Some((t, nodes)) = got {
                    for i in nodes {
                        busy[i].push((t as u64, t as u64 + d));
                        index.node_changed(i);
                    }
                }
                if let Some((i, s, l)) = claim && i < n {
                    busy[i].push((s, s + l));
                    index.node_changed(i);
                }
            }
        }
    }
}
