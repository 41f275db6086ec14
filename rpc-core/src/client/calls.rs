//! The in-flight call table: call ids to waiting callers. Sans-IO.

use std::sync::Arc;

use slab::Slab;
use tokio::sync::oneshot;

use crate::stream::{Inbox, Outbox};
use crate::Status;

/// What a waiting caller receives: the response frame, or why the call failed.
pub(crate) type Outcome<T> = Result<T, Status>;

/// Call ids to waiting callers.
///
/// A call id is `generation << 32 | slab key`: the key makes lookup O(1) without hashing,
/// the generation makes a late response to a call that was already given up (deadline,
/// cancellation) miss instead of reaching the next call that reuses the key.
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

struct Entry<T> {
    generation: u32,
    waiter: Waiter<T>,
}

impl<T> std::fmt::Debug for CallTable<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallTable")
            .field("calls", &self.slots.len())
            .field("closed", &self.closed)
            .field("draining", &self.draining)
            .finish_non_exhaustive()
    }
}

/// Who waits for a call's frames.
pub(crate) enum Waiter<T> {
    /// A unary call: its one response.
    Once(oneshot::Sender<Outcome<T>>),
    /// A client-streaming call: its one response, and the window for its requests.
    Upload(oneshot::Sender<Outcome<T>>, Arc<Outbox>),
    /// A server-streaming or bidirectional call: its responses, and (bidirectional) the
    /// window for its requests.
    Stream(Arc<Inbox>, Option<Arc<Outbox>>),
}

impl<T> Waiter<T> {
    /// The call failed with `status` (a stream's queued messages are still delivered
    /// before it).
    pub(crate) fn fail(self, status: Status) {
        match self {
            Waiter::Once(tx) => {
                let _ = tx.send(Err(status));
            }
            Waiter::Upload(tx, outbox) => {
                outbox.close(status.clone());
                let _ = tx.send(Err(status));
            }
            Waiter::Stream(inbox, outbox) => {
                if let Some(outbox) = outbox {
                    outbox.close(status.clone());
                }
                inbox.fail(status, false);
            }
        }
    }
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
        let (tx, rx) = oneshot::channel();
        let call_id = self.insert_with(|_| Waiter::Once(tx))?;
        Ok((call_id, rx))
    }

    /// Registers a new call whose waiter `make` builds from its call id; counted as
    /// unsent as [`CallTable::insert`].
    ///
    /// # Errors
    /// As [`CallTable::insert`].
    pub(crate) fn insert_with(
        &mut self,
        make: impl FnOnce(u64) -> Waiter<T>,
    ) -> Result<u64, NotAdmitted> {
        if let Some(status) = &self.closed {
            return Err(NotAdmitted::Closed(status.clone()));
        }
        if self.draining {
            return Err(NotAdmitted::Draining);
        }
        self.unsent += 1;
        self.generation = self.generation.wrapping_add(1);
        let generation = self.generation;
        let entry = self.slots.vacant_entry();
        let call_id = ((generation as u64) << 32) | entry.key() as u64;
        entry.insert(Entry {
            generation,
            waiter: make(call_id),
        });
        Ok(call_id)
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
            Some(Waiter::Once(tx)) => {
                // The caller may have just dropped its receiver; that is not an error.
                let _ = tx.send(outcome);
                true
            }
            Some(Waiter::Upload(tx, outbox)) => {
                outbox.close(Status::cancelled("the call ended"));
                let _ = tx.send(outcome);
                true
            }
            Some(waiter @ Waiter::Stream(..)) => {
                waiter.fail(Status::internal("unexpected response"));
                true
            }
            None => false,
        }
    }

    /// Forgets call `call_id`. Returns whether it was still waiting.
    pub(crate) fn remove(&mut self, call_id: u64) -> bool {
        match self.take(call_id) {
            Some(waiter) => {
                waiter.fail(Status::cancelled("the call was cancelled"));
                true
            }
            None => false,
        }
    }

    /// The waiter of call `call_id`, if it still waits.
    pub(crate) fn get(&self, call_id: u64) -> Option<&Waiter<T>> {
        let key = (call_id & 0xffff_ffff) as usize;
        let generation = (call_id >> 32) as u32;
        match self.slots.get(key) {
            Some(entry) if entry.generation == generation => Some(&entry.waiter),
            _ => None,
        }
    }

    /// Removes call `call_id` and returns its waiter.
    pub(crate) fn take(&mut self, call_id: u64) -> Option<Waiter<T>> {
        self.get(call_id)?;
        Some(self.slots.remove((call_id & 0xffff_ffff) as usize).waiter)
    }

    /// Fails every waiting call with `status` and refuses new ones.
    pub(crate) fn close(&mut self, status: Status) {
        for entry in self.slots.drain() {
            entry.waiter.fail(status.clone());
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
