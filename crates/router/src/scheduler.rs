//! The lease-deferral scheduler: one binary min-heap of retry deadlines, deduplicated by
//! `(delegation_id, keys)`.
//!
//! An envelope whose events are held by someone else's live claim is parked here until that
//! claim's `expires_at` plus [`RETRY_SKEW_MS`](crate::RETRY_SKEW_MS). Deferring the same
//! `(delegation_id, keys)` again moves its one entry to the new deadline instead of adding a
//! second one: the heap is *indexed* (every key knows its position), so an update or a removal is
//! `O(log n)` and the heap never holds more entries than there are distinct keys.
//!
//! The scheduler only orders deadlines. It never reads a clock and never sleeps: the driver asks
//! [`Scheduler::next_deadline`] how long it may sleep and [`Scheduler::pop_due`] what to
//! re-classify once it wakes.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use hermes_ledger::{DelegationId, EventKey, Timestamp};

/// What a deferred entry is deduplicated by: one delegation and the exact set of its event keys.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeferKey {
    /// The delegation.
    pub delegation_id: DelegationId,
    /// Its keys, sorted and without duplicates.
    keys: Vec<EventKey>,
}

impl DeferKey {
    /// The key for `keys` of `delegation_id` (sorted and deduplicated, so the order they are
    /// given in does not matter).
    pub fn new(delegation_id: DelegationId, keys: impl IntoIterator<Item = EventKey>) -> DeferKey {
        let mut keys: Vec<EventKey> = keys.into_iter().collect();
        keys.sort_unstable();
        keys.dedup();
        DeferKey {
            delegation_id,
            keys,
        }
    }

    /// The event keys, sorted.
    pub fn keys(&self) -> &[EventKey] {
        &self.keys
    }
}

impl fmt::Display for DeferKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/[", self.delegation_id)?;
        for (i, key) in self.keys.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{key}")?;
        }
        f.write_str("]")
    }
}

/// What [`Scheduler::defer`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheduled {
    /// A new entry.
    Added,
    /// The existing entry moved from the deadline it had.
    Moved {
        /// Its deadline before.
        from: Timestamp,
    },
    /// The existing entry already had this deadline.
    Unchanged,
}

#[derive(Clone, Debug)]
struct Node {
    deadline: Timestamp,
    /// Insertion order, so entries with one deadline come out first-deferred first.
    seq: u64,
    /// The entry's slot in `Scheduler::position`.
    slot: usize,
}

impl Node {
    fn before(&self, other: &Node) -> bool {
        (self.deadline, self.seq) < (other.deadline, other.seq)
    }
}

/// Deferred entries ordered by deadline, at most one per [`DeferKey`].
///
/// `slots` maps a key to a slot number once, on insert; the heap's nodes carry their slot and
/// `position[slot]` is the node's index in `heap`, so sifting never hashes a key.
#[derive(Clone, Debug, Default)]
pub struct Scheduler {
    heap: Vec<Node>,
    slots: HashMap<Arc<DeferKey>, usize>,
    /// Per slot: its node's index in `heap`, and its key (`None` while the slot is free).
    position: Vec<(usize, Option<Arc<DeferKey>>)>,
    free: Vec<usize>,
    next_seq: u64,
}

impl Scheduler {
    /// An empty scheduler.
    pub fn new() -> Scheduler {
        Scheduler::default()
    }

    /// Parks `key` until `deadline`; an entry already parked under `key` moves to `deadline`.
    pub fn defer(&mut self, key: DeferKey, deadline: Timestamp) -> Scheduled {
        if let Some(&slot) = self.slots.get(&key) {
            let at = self.position[slot].0;
            let from = self.heap[at].deadline;
            if from == deadline {
                return Scheduled::Unchanged;
            }
            self.heap[at].deadline = deadline;
            if deadline < from {
                self.sift_up(at);
            } else {
                self.sift_down(at);
            }
            return Scheduled::Moved { from };
        }
        let key = Arc::new(key);
        let at = self.heap.len();
        let slot = match self.free.pop() {
            Some(slot) => {
                self.position[slot] = (at, Some(Arc::clone(&key)));
                slot
            }
            None => {
                self.position.push((at, Some(Arc::clone(&key))));
                self.position.len() - 1
            }
        };
        self.heap.push(Node {
            deadline,
            seq: self.next_seq,
            slot,
        });
        self.next_seq += 1;
        self.slots.insert(key, slot);
        self.sift_up(at);
        Scheduled::Added
    }

    /// Removes the entry for `key`, returning its deadline.
    pub fn remove(&mut self, key: &DeferKey) -> Option<Timestamp> {
        let slot = self.slots.remove(key)?;
        let at = self.position[slot].0;
        let (node, _) = self.take(at);
        Some(node.deadline)
    }

    /// The deadline parked under `key`.
    pub fn deadline_of(&self, key: &DeferKey) -> Option<Timestamp> {
        self.slots
            .get(key)
            .map(|&slot| self.heap[self.position[slot].0].deadline)
    }

    /// The earliest deadline: the driver may sleep until then.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.heap.first().map(|node| node.deadline)
    }

    /// Removes and returns every entry due at `now` (deadline at or before it), earliest first.
    pub fn pop_due(&mut self, now: Timestamp) -> Vec<(DeferKey, Timestamp)> {
        let mut due = Vec::new();
        while self.heap.first().is_some_and(|node| node.deadline <= now) {
            let (node, key) = self.take(0);
            if let Some(key) = key {
                self.slots.remove(&*key);
                due.push((Arc::unwrap_or_clone(key), node.deadline));
            }
        }
        due
    }

    /// Keeps only the entries for which `keep` is true (`O(n)`: one pass, then a heapify if
    /// anything went).
    pub fn retain(&mut self, mut keep: impl FnMut(&DeferKey, Timestamp) -> bool) {
        let before = self.heap.len();
        let mut kept = Vec::with_capacity(before);
        for node in std::mem::take(&mut self.heap) {
            let entry = &mut self.position[node.slot].1;
            if entry.as_deref().is_some_and(|key| keep(key, node.deadline)) {
                kept.push(node);
            } else {
                if let Some(key) = entry.take() {
                    self.slots.remove(&*key);
                }
                self.free.push(node.slot);
            }
        }
        self.heap = kept;
        if self.heap.len() == before {
            return;
        }
        for at in 0..self.heap.len() {
            self.position[self.heap[at].slot].0 = at;
        }
        for at in (0..self.heap.len() / 2).rev() {
            self.sift_down(at);
        }
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.heap.clear();
        self.slots.clear();
        self.position.clear();
        self.free.clear();
    }

    /// How many entries are parked (one per distinct key).
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is parked.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Every entry with its deadline, earliest first.
    pub fn entries(&self) -> Vec<(DeferKey, Timestamp)> {
        let mut nodes: Vec<&Node> = self.heap.iter().collect();
        nodes.sort_by_key(|node| (node.deadline, node.seq));
        nodes
            .into_iter()
            .filter_map(|node| {
                let key = self.position[node.slot].1.as_deref()?;
                Some((key.clone(), node.deadline))
            })
            .collect()
    }

    /// Removes the node at `at` from the heap, frees its slot (the caller removes it from
    /// `slots`) and restores the heap order. Returns the node and its key.
    fn take(&mut self, at: usize) -> (Node, Option<Arc<DeferKey>>) {
        let node = self.heap.swap_remove(at);
        if at < self.heap.len() {
            let moved = self.heap[at].slot;
            self.position[moved].0 = at;
            self.sift_down(at);
            self.sift_up(at);
        }
        let key = self.position[node.slot].1.take();
        self.free.push(node.slot);
        (node, key)
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.position[self.heap[a].slot].0 = a;
        self.position[self.heap[b].slot].0 = b;
    }

    fn sift_up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if !self.heap[at].before(&self.heap[parent]) {
                break;
            }
            self.swap(at, parent);
            at = parent;
        }
    }

    fn sift_down(&mut self, mut at: usize) {
        loop {
            let left = 2 * at + 1;
            let right = left + 1;
            let mut first = at;
            if left < self.heap.len() && self.heap[left].before(&self.heap[first]) {
                first = left;
            }
            if right < self.heap.len() && self.heap[right].before(&self.heap[first]) {
                first = right;
            }
            if first == at {
                break;
            }
            self.swap(at, first);
            at = first;
        }
    }

    /// Checks the heap order and the slot index (tests only).
    #[cfg(test)]
    fn check(&self) {
        assert_eq!(self.heap.len(), self.slots.len());
        for (at, node) in self.heap.iter().enumerate() {
            let (position, key) = &self.position[node.slot];
            assert_eq!(*position, at, "position of slot {}", node.slot);
            let key = key.as_ref().expect("a live slot has its key");
            assert_eq!(self.slots.get(&**key), Some(&node.slot), "slot of {key}");
            if at > 0 {
                assert!(!node.before(&self.heap[(at - 1) / 2]), "heap order at {at}");
            }
        }
        assert_eq!(self.position.len(), self.heap.len() + self.free.len());
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn key(unit: u64, tasks: &[u32]) -> DeferKey {
        DeferKey::new(
            DelegationId::from_bits(unit),
            tasks.iter().map(|&n| EventKey::Task(n)),
        )
    }

    #[test]
    fn one_entry_per_key_however_often_it_is_deferred() {
        let mut scheduler = Scheduler::new();
        assert_eq!(
            scheduler.defer(key(1, &[0, 1]), Timestamp(500)),
            Scheduled::Added
        );
        for i in 0..1_000u64 {
            // The same keys in another order are the same entry.
            scheduler.defer(key(1, &[1, 0]), Timestamp(1_000 + i * 7 % 300));
            assert_eq!(scheduler.len(), 1);
        }
        assert_eq!(
            scheduler.defer(key(1, &[0, 1]), Timestamp(42)),
            Scheduled::Moved {
                from: Timestamp(1_000 + 999 * 7 % 300)
            }
        );
        assert_eq!(
            scheduler.defer(key(1, &[0, 1]), Timestamp(42)),
            Scheduled::Unchanged
        );
        assert_eq!(scheduler.next_deadline(), Some(Timestamp(42)));
        // Another key set of the same delegation is another entry.
        scheduler.defer(key(1, &[0]), Timestamp(43));
        assert_eq!(scheduler.len(), 2);
        scheduler.check();
    }

    #[test]
    fn pops_only_what_is_due_earliest_first() {
        let mut scheduler = Scheduler::new();
        scheduler.defer(key(3, &[0]), Timestamp(300));
        scheduler.defer(key(1, &[0]), Timestamp(100));
        scheduler.defer(key(2, &[0]), Timestamp(200));
        assert!(scheduler.pop_due(Timestamp(99)).is_empty());
        let due = scheduler.pop_due(Timestamp(200));
        assert_eq!(
            due,
            vec![
                (key(1, &[0]), Timestamp(100)),
                (key(2, &[0]), Timestamp(200))
            ]
        );
        assert_eq!(scheduler.next_deadline(), Some(Timestamp(300)));
        assert_eq!(scheduler.remove(&key(3, &[0])), Some(Timestamp(300)));
        assert_eq!(scheduler.next_deadline(), None);
        scheduler.check();
    }

    #[test]
    fn moving_an_entry_later_lets_the_next_one_first() {
        let mut scheduler = Scheduler::new();
        scheduler.defer(key(1, &[0]), Timestamp(100));
        scheduler.defer(key(2, &[0]), Timestamp(200));
        scheduler.defer(key(1, &[0]), Timestamp(900));
        assert_eq!(scheduler.next_deadline(), Some(Timestamp(200)));
        assert_eq!(scheduler.pop_due(Timestamp(899)).len(), 1);
        assert_eq!(scheduler.deadline_of(&key(1, &[0])), Some(Timestamp(900)));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Defer(u64, u32, u64),
        Remove(u64, u32),
        PopDue(u64),
        RetainEven,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..20u64, 0..3u32, 0..1_000u64).prop_map(|(u, t, d)| Op::Defer(u, t, d)),
            1 => (0..20u64, 0..3u32).prop_map(|(u, t)| Op::Remove(u, t)),
            1 => (0..1_000u64).prop_map(Op::PopDue),
            1 => Just(Op::RetainEven),
        ]
    }

    proptest! {
        /// The indexed heap behaves like a map from key to deadline.
        #[test]
        fn matches_a_map_of_deadlines(ops in proptest::collection::vec(op(), 1..200)) {
            let mut scheduler = Scheduler::new();
            let mut model: BTreeMap<DeferKey, Timestamp> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Defer(u, t, d) => {
                        scheduler.defer(key(u, &[t]), Timestamp(d));
                        model.insert(key(u, &[t]), Timestamp(d));
                    }
                    Op::Remove(u, t) => {
                        prop_assert_eq!(scheduler.remove(&key(u, &[t])), model.remove(&key(u, &[t])));
                    }
                    Op::PopDue(now) => {
                        let mut due: Vec<_> = scheduler.pop_due(Timestamp(now));
                        prop_assert!(due.windows(2).all(|w| w[0].1 <= w[1].1));
                        let mut expected: Vec<_> = model
                            .iter()
                            .filter(|(_, d)| d.0 <= now)
                            .map(|(k, d)| (k.clone(), *d))
                            .collect();
                        model.retain(|_, d| d.0 > now);
                        due.sort();
                        expected.sort();
                        prop_assert_eq!(due, expected);
                    }
                    Op::RetainEven => {
                        scheduler.retain(|_, d| d.0 % 2 == 0);
                        model.retain(|_, d| d.0 % 2 == 0);
                    }
                }
                scheduler.check();
                prop_assert_eq!(scheduler.len(), model.len());
                prop_assert_eq!(scheduler.next_deadline(), model.values().min().copied());
            }
        }
    }
}
