//! The records waiting for the watermark, smallest (time, position) first.
//!
//! Most streams arrive nearly in event-time order, so most records are no
//! earlier than the one before them. Those go to the back of a sorted run
//! (a `VecDeque`: push and pop in O(1), no comparisons beyond the one that
//! placed it); only a record earlier than the run's last goes to a binary
//! heap. The smallest waiting record is at the front of the run or the top
//! of the heap. (time, position) is a total order — positions are unique —
//! so records leave in exactly the order a heap of them all would give:
//! the split changes the cost, never the order.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::{Waiting, shrink_target};

#[derive(Clone, Debug)]
pub(super) struct WaitQueue<T> {
    /// Records in (time, position) order, each pushed no earlier than the one before.
    run: VecDeque<Waiting<T>>,
    /// The records that arrived earlier than the run's last.
    heap: BinaryHeap<Reverse<Waiting<T>>>,
}

impl<T> WaitQueue<T> {
    pub(super) fn push(&mut self, record: Waiting<T>) {
        match self.run.back() {
            Some(last) if record < *last => self.heap.push(Reverse(record)),
            _ => self.run.push_back(record),
        }
    }

    /// The smallest waiting record.
    pub(super) fn peek(&self) -> Option<&Waiting<T>> {
        match (self.run.front(), self.heap.peek()) {
            (Some(r), Some(Reverse(h))) => Some(if h < r { h } else { r }),
            (r, h) => r.or(h.map(|h| &h.0)),
        }
    }

    /// Takes the smallest waiting record.
    pub(super) fn pop(&mut self) -> Option<Waiting<T>> {
        let from_heap = match (self.run.front(), self.heap.peek()) {
            (Some(r), Some(Reverse(h))) => h < r,
            (None, _) => true,
            (Some(_), None) => false,
        };
        if from_heap { self.heap.pop().map(|h| h.0) } else { self.run.pop_front() }
    }

    pub(super) fn len(&self) -> usize {
        self.run.len() + self.heap.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.run.is_empty() && self.heap.is_empty()
    }

    /// The records it has room for without growing.
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.run.capacity() + self.heap.capacity()
    }

    /// Every waiting record, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Waiting<T>> {
        self.run.iter().chain(self.heap.iter().map(|h| &h.0))
    }

    /// Gives back the room a backlog left (see [`shrink_target`]).
    pub(super) fn shrink_spare(&mut self) {
        if let Some(to) = shrink_target(self.run.len(), self.run.capacity()) {
            self.run.shrink_to(to);
        }
        if let Some(to) = shrink_target(self.heap.len(), self.heap.capacity()) {
            self.heap.shrink_to(to);
        }
    }
}

impl<T> Default for WaitQueue<T> {
    fn default() -> Self {
        WaitQueue { run: VecDeque::new(), heap: BinaryHeap::new() }
    }
}

/// The records of a restored buffer, sorted into one run.
impl<T> FromIterator<Waiting<T>> for WaitQueue<T> {
    fn from_iter<I: IntoIterator<Item = Waiting<T>>>(records: I) -> Self {
        let mut run: Vec<Waiting<T>> = records.into_iter().collect();
        run.sort_unstable();
        WaitQueue { run: run.into(), heap: BinaryHeap::new() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(time_ms: u64, position: u64) -> Waiting<u64> {
        Waiting { time_ms, position, item: position }
    }

    /// Pushes `times` (positions in arrival order), popping after every
    /// `pop_every`-th push, then everything: the order records leave in.
    fn order_of(
        queue: &mut impl FnMut(Option<Waiting<u64>>) -> Option<u64>,
        times: &[u64],
        pop_every: usize,
    ) -> Vec<u64> {
        let mut out = Vec::new();
        for (position, &time) in times.iter().enumerate() {
            queue(Some(waiting(time, position as u64)));
            if (position + 1) % pop_every == 0 {
                out.extend(queue(None));
            }
        }
        while let Some(p) = queue(None) {
            out.push(p);
        }
        out
    }

    #[test]
    fn records_leave_in_the_order_of_one_heap_of_them_all() {
        // A nearly ordered stream with late ones, ties in time, and a jump back.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut times = Vec::new();
        for i in 0..5_000u64 {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let jitter = (state >> 33) % 40;
            times.push(if state % 7 == 0 { (i * 10).saturating_sub(jitter * 20) } else { i * 10 / 3 });
        }
        times.extend([0, 0, 5, 5, 1]);
        for pop_every in [1, 2, 3, 17, 1_000_000] {
            let mut queue = WaitQueue::default();
            let mut split = |r: Option<Waiting<u64>>| match r {
                Some(r) => {
                    queue.push(r);
                    None
                }
                None => {
                    let peeked = queue.peek().map(|w| w.item);
                    let popped = queue.pop().map(|w| w.item);
                    assert_eq!(peeked, popped);
                    popped
                }
            };
            let got = order_of(&mut split, &times, pop_every);
            let mut heap = BinaryHeap::new();
            let mut one_heap = |r: Option<Waiting<u64>>| match r {
                Some(r) => {
                    heap.push(Reverse(r));
                    None
                }
                None => heap.pop().map(|w| w.0.item),
            };
            assert_eq!(got, order_of(&mut one_heap, &times, pop_every), "popping every {pop_every}");
            assert_eq!(got.len(), times.len());
        }
    }

    #[test]
    fn a_restored_queue_holds_its_records_sorted() {
        let mut queue: WaitQueue<u64> = [waiting(5, 1), waiting(3, 2), waiting(5, 0)].into_iter().collect();
        assert_eq!(queue.len(), 3);
        queue.push(waiting(4, 3));
        let order: Vec<u64> = std::iter::from_fn(|| queue.pop().map(|w| w.item)).collect();
        assert_eq!(order, [2, 3, 0, 1]);
        assert!(queue.is_empty());
    }
}
