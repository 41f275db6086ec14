//! Requests of one connection waiting for a concurrency permit. Sans-IO: no clock, no
//! tasks; the connection loop feeds it `now` and polls it.
//!
//! A request that arrives while its connection is at its own limit, or the server at the
//! server-wide one, is decoded at once (which gives the transport its receive buffer
//! back) and parked here, in arrival order, until a permit frees. The connection keeps
//! reading meanwhile, so CANCEL, PING and the peer's EOF are seen while calls wait.
//! The queue is bounded in calls and in request bytes; a request that does not fit is
//! refused, never buffered.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// Why a request was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The queue holds its maximum number of calls.
    Calls(usize),
    /// The queue holds its maximum of request bytes.
    Bytes(usize),
}

/// Waiting calls of one connection, in arrival order.
#[derive(Debug)]
pub(crate) struct Admission<T> {
    /// Call ids in arrival order, with the sequence number that keys `entries`. Ids
    /// removed by a cancel are skipped lazily when they reach the front.
    order: VecDeque<(u64, u64)>,
    entries: HashMap<u64, Waiting<T>>,
    next_seq: u64,
    bytes: usize,
    max_calls: usize,
    max_bytes: usize,
}

#[derive(Debug)]
struct Waiting<T> {
    seq: u64,
    bytes: usize,
    deadline: Option<Instant>,
    call: T,
}

/// A call taken off the queue.
#[derive(Debug)]
pub(crate) struct Admitted<T> {
    pub(crate) call_id: u64,
    /// When the call's deadline (counted from its arrival) passes.
    pub(crate) deadline: Option<Instant>,
    pub(crate) call: T,
}

impl<T> Admission<T> {
    /// A queue of at most `max_calls` calls and `max_bytes` request bytes (one call is
    /// always accepted into an empty queue, whatever its size).
    pub(crate) fn new(max_calls: usize, max_bytes: usize) -> Self {
        Admission {
            order: VecDeque::new(),
            entries: HashMap::new(),
            next_seq: 0,
            bytes: 0,
            max_calls,
            max_bytes,
        }
    }

    /// Number of waiting calls.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether call `call_id` is waiting.
    pub(crate) fn contains(&self, call_id: u64) -> bool {
        self.entries.contains_key(&call_id)
    }

    /// Parks a call of `bytes` request bytes whose deadline is `deadline`.
    ///
    /// # Errors
    /// [`Refused`] when it does not fit; the caller answers the request.
    pub(crate) fn push(
        &mut self,
        call_id: u64,
        bytes: usize,
        deadline: Option<Instant>,
        call: T,
    ) -> Result<(), (Refused, T)> {
        debug_assert!(
            !self.contains(call_id),
            "duplicates are the caller's to refuse"
        );
        if self.entries.len() >= self.max_calls {
            return Err((Refused::Calls(self.max_calls), call));
        }
        if !self.entries.is_empty() && self.bytes + bytes > self.max_bytes {
            return Err((Refused::Bytes(self.max_bytes), call));
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.order.push_back((call_id, seq));
        self.bytes += bytes;
        self.entries.insert(
            call_id,
            Waiting {
                seq,
                bytes,
                deadline,
                call,
            },
        );
        Ok(())
    }

    /// Removes a waiting call (the client cancelled it). Returns whether it was waiting.
    pub(crate) fn cancel(&mut self, call_id: u64) -> bool {
        let Some(w) = self.entries.remove(&call_id) else {
            return false;
        };
        self.bytes -= w.bytes;
        self.compact();
        true
    }

    /// Removed ids stay in `order` until they reach the front; drop them once they
    /// outnumber the live ones, so that a peer whose calls are cancelled or expire in a
    /// loop while no permit frees cannot grow it.
    fn compact(&mut self) {
        if self.order.len() > 2 * self.entries.len() + 16 {
            let entries = &self.entries;
            self.order
                .retain(|(id, seq)| entries.get(id).is_some_and(|w| w.seq == *seq));
        }
    }

    /// The oldest waiting call, removed from the queue.
    pub(crate) fn pop(&mut self) -> Option<Admitted<T>> {
        while let Some((call_id, seq)) = self.order.pop_front() {
            // An entry whose sequence differs was cancelled, and its id reused later.
            if self.entries.get(&call_id).is_some_and(|w| w.seq == seq) {
                let w = self.entries.remove(&call_id).expect("checked");
                self.bytes -= w.bytes;
                return Some(Admitted {
                    call_id,
                    deadline: w.deadline,
                    call: w.call,
                });
            }
        }
        None
    }

    /// Removes and returns every waiting call whose deadline is at or before `now`.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<Admitted<T>> {
        let expired: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, w)| w.deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| *id)
            .collect();
        let expired = expired
            .into_iter()
            .map(|call_id| {
                let w = self.entries.remove(&call_id).expect("listed");
                self.bytes -= w.bytes;
                Admitted {
                    call_id,
                    deadline: w.deadline,
                    call: w.call,
                }
            })
            .collect();
        self.compact();
        expired
    }

    /// The earliest deadline of a waiting call.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.entries.values().filter_map(|w| w.deadline).min()
    }

    /// Removes every waiting call.
    pub(crate) fn drain(&mut self) -> Vec<Admitted<T>> {
        let mut all = Vec::with_capacity(self.entries.len());
        while let Some(a) = self.pop() {
            all.push(a);
        }
        self.order.clear();
        self.bytes = 0;
        all
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn keeps_arrival_order_and_skips_cancelled_calls() {
        let mut q = Admission::new(10, 1000);
        for id in [5u64, 3, 9] {
            q.push(id, 10, None, id).unwrap();
        }
        assert!(q.cancel(3));
        assert!(!q.cancel(3));
        // The id of a cancelled call may come again; it queues at the back.
        q.push(3, 10, None, 33).unwrap();
        let order: Vec<u64> = std::iter::from_fn(|| q.pop().map(|a| a.call)).collect();
        assert_eq!(order, [5, 9, 33]);
        assert_eq!(q.len(), 0);
        assert_eq!(q.bytes, 0);
    }

    #[test]
    fn bounded_in_calls_and_bytes() {
        let mut q = Admission::new(2, 100);
        // One call always fits an empty queue, however large.
        q.push(1, 500, None, ()).unwrap();
        assert_eq!(q.push(2, 1, None, ()).unwrap_err().0, Refused::Bytes(100));
        q.pop().unwrap();
        q.push(2, 60, None, ()).unwrap();
        q.push(3, 40, None, ()).unwrap();
        assert_eq!(q.push(4, 0, None, ()).unwrap_err().0, Refused::Calls(2));
        assert!(q.cancel(3));
        assert_eq!(q.push(4, 41, None, ()).unwrap_err().0, Refused::Bytes(100));
        q.push(4, 40, None, ()).unwrap();
    }

    #[test]
    fn cancelling_in_a_loop_does_not_grow_the_queue() {
        let mut q = Admission::new(10, 1000);
        q.push(0, 1, None, ()).unwrap();
        for id in 1..10_000u64 {
            q.push(id, 1, None, ()).unwrap();
            assert!(q.cancel(id));
        }
        assert!(
            q.order.len() <= 2 * q.entries.len() + 17,
            "{}",
            q.order.len()
        );
        assert_eq!(q.pop().unwrap().call_id, 0);
        assert!(q.pop().is_none());
    }

    #[test]
    fn expiring_in_a_loop_does_not_grow_the_queue() {
        let t0 = Instant::now();
        let mut q = Admission::new(10, 1000);
        q.push(0, 1, None, ()).unwrap();
        for id in 1..10_000u64 {
            q.push(id, 1, Some(t0), ()).unwrap();
            assert_eq!(q.expire(t0).len(), 1);
        }
        assert!(
            q.order.len() <= 2 * q.entries.len() + 17,
            "{}",
            q.order.len()
        );
    }

    #[test]
    fn deadlines_expire_from_arrival() {
        let t0 = Instant::now();
        let mut q = Admission::new(10, 1000);
        q.push(1, 1, Some(t0 + Duration::from_millis(50)), 1)
            .unwrap();
        q.push(2, 1, None, 2).unwrap();
        q.push(3, 1, Some(t0 + Duration::from_millis(10)), 3)
            .unwrap();
        assert_eq!(q.next_deadline(), Some(t0 + Duration::from_millis(10)));
        assert!(q.expire(t0).is_empty());
        let gone: Vec<u64> = q
            .expire(t0 + Duration::from_millis(10))
            .into_iter()
            .map(|a| a.call_id)
            .collect();
        assert_eq!(gone, [3]);
        assert_eq!(q.next_deadline(), Some(t0 + Duration::from_millis(50)));
        assert_eq!(q.pop().unwrap().call, 1);
        assert_eq!(q.drain().len(), 1);
        assert_eq!(q.next_deadline(), None);
    }
}
