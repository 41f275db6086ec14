//! The in-flight call table: call ids to waiting callers. Sans-IO.

use slab::Slab;
use tokio::sync::oneshot;

use crate::Status;

/// What a waiting caller receives: the response frame, or why the call failed.
pub(crate) type Outcome<T> = Result<T, Status>;

/// Call ids to waiting callers.
///
/// A call id is `generation << 32 | slab key`: the key makes lookup O(1) without hashing,
/// the generation makes a late response to a call that was already given up (deadline,
/// cancellation) miss instead of reaching the next call that reuses the key.
#[derive(Debug)]
pub(crate) struct CallTable<T> {
    slots: Slab<Entry<T>>,
    generation: u32,
    /// Set once the connection is gone: no more calls are admitted.
    closed: Option<Status>,
    /// Set once the server said GOAWAY: no more calls start here.
    draining: bool,
    /// Calls inserted whose request is not yet handed to the transport. The client
    /// acknowledges a GOAWAY (promises no more requests) only once this is zero.
    unsent: usize,
    /// Whether the acknowledgement is due or was given.
    acknowledged: bool,
}

/// Why [`CallTable::insert`] did not register a call.
#[derive(Debug)]
pub(crate) enum NotAdmitted {
    /// The connection is gone, with this status.
    Closed(Status),
    /// The server is draining this connection: use another one.
    Draining,
}

#[derive(Debug)]
struct Entry<T> {
    generation: u32,
    waiter: oneshot::Sender<Outcome<T>>,
}

impl<T> CallTable<T> {
    pub(crate) fn new() -> Self {
        CallTable {
            slots: Slab::new(),
            generation: 0,
            closed: None,
            draining: false,
            unsent: 0,
            acknowledged: false,
        }
    }

    /// Registers a new call, counted as unsent until [`CallTable::sent`].
    ///
    /// # Errors
    /// The status the table was closed with, or [`NotAdmitted::Draining`].
    pub(crate) fn insert(&mut self) -> Result<(u64, oneshot::Receiver<Outcome<T>>), NotAdmitted> {
        if let Some(status) = &self.closed {
            return Err(NotAdmitted::Closed(status.clone()));
        }
        if self.draining {
            return Err(NotAdmitted::Draining);
        }
        self.unsent += 1;
        let (tx, rx) = oneshot::channel();
        self.generation = self.generation.wrapping_add(1);
        let generation = self.generation;
        let key = self.slots.insert(Entry {
            generation,
            waiter: tx,
        });
        Ok((((generation as u64) << 32) | key as u64, rx))
    }

    /// One call inserted before has been handed to the transport, or gave up before.
    ///
    /// # Returns
    /// Whether the GOAWAY acknowledgement is now due (send it once).
    #[must_use]
    pub(crate) fn sent(&mut self) -> bool {
        self.unsent = self.unsent.saturating_sub(1);
        self.acknowledgement_due()
    }

    /// The server said GOAWAY: refuse new calls from now on.
    ///
    /// # Returns
    /// Whether the acknowledgement is due now (no request is half-sent).
    #[must_use]
    pub(crate) fn drain(&mut self) -> bool {
        self.draining = true;
        self.acknowledgement_due()
    }

    fn acknowledgement_due(&mut self) -> bool {
        if self.draining && self.unsent == 0 && !self.acknowledged {
            self.acknowledged = true;
            return true;
        }
        false
    }

    /// Whether the server is draining this connection.
    pub(crate) fn is_draining(&self) -> bool {
        self.draining
    }

    /// Hands `outcome` to call `call_id`. Returns false when no such call waits (it was
    /// given up, or the id is bogus).
    pub(crate) fn complete(&mut self, call_id: u64, outcome: Outcome<T>) -> bool {
        match self.take(call_id) {
            Some(waiter) => {
                // The caller may have just dropped its receiver; that is not an error.
                let _ = waiter.send(outcome);
                true
            }
            None => false,
        }
    }

    /// Forgets call `call_id`. Returns whether it was still waiting.
    pub(crate) fn remove(&mut self, call_id: u64) -> bool {
        self.take(call_id).is_some()
    }

    fn take(&mut self, call_id: u64) -> Option<oneshot::Sender<Outcome<T>>> {
        let key = (call_id & 0xffff_ffff) as usize;
        let generation = (call_id >> 32) as u32;
        match self.slots.get(key) {
            Some(entry) if entry.generation == generation => Some(self.slots.remove(key).waiter),
            _ => None,
        }
    }

    /// Fails every waiting call with `status` and refuses new ones.
    pub(crate) fn close(&mut self, status: Status) {
        for entry in self.slots.drain() {
            let _ = entry.waiter.send(Err(status.clone()));
        }
        self.closed = Some(status);
    }

    /// Whether the table was closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.is_some()
    }

    /// Number of waiting calls.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Code;

    #[test]
    fn complete_reaches_the_right_caller() {
        let mut t = CallTable::<u32>::new();
        let (a, mut ra) = t.insert().unwrap();
        let (b, mut rb) = t.insert().unwrap();
        assert_ne!(a, b);
        assert!(t.complete(b, Ok(2)));
        assert!(t.complete(a, Ok(1)));
        assert_eq!(ra.try_recv().unwrap().unwrap(), 1);
        assert_eq!(rb.try_recv().unwrap().unwrap(), 2);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn stale_id_misses_a_reused_slot() {
        let mut t = CallTable::<u32>::new();
        let (a, _ra) = t.insert().unwrap();
        assert!(t.remove(a));
        let (b, mut rb) = t.insert().unwrap();
        assert_eq!(a & 0xffff_ffff, b & 0xffff_ffff, "slot reused");
        assert!(!t.complete(a, Ok(9)), "late response to a given-up call");
        assert!(t.complete(b, Ok(3)));
        assert_eq!(rb.try_recv().unwrap().unwrap(), 3);
        assert!(!t.complete(12345, Ok(0)));
    }

    #[test]
    fn close_fails_waiters_and_refuses_new_calls() {
        let mut t = CallTable::<u32>::new();
        let (_, mut r) = t.insert().unwrap();
        t.close(Status::unavailable("gone"));
        assert_eq!(r.try_recv().unwrap().unwrap_err().code(), Code::Unavailable);
        assert!(t.is_closed());
        assert!(matches!(t.insert(), Err(NotAdmitted::Closed(s)) if s.code() == Code::Unavailable));
    }

    #[test]
    fn goaway_is_acknowledged_once_no_request_is_half_sent() {
        let mut t = CallTable::<u32>::new();
        let (a, _ra) = t.insert().unwrap();
        let (_b, _rb) = t.insert().unwrap();
        assert!(!t.sent(), "no GOAWAY yet");
        assert!(!t.drain(), "one request is still being sent");
        assert!(matches!(t.insert(), Err(NotAdmitted::Draining)));
        assert!(t.sent(), "the last one is out: acknowledge now");
        assert!(!t.sent() && !t.drain(), "only once");
        assert!(t.complete(a, Ok(1)), "calls sent before still get answers");
        let mut idle = CallTable::<u32>::new();
        assert!(idle.drain(), "nothing in flight: acknowledge at once");
    }
}
