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
        }
    }

    /// Registers a new call.
    ///
    /// # Errors
    /// The status the table was closed with.
    pub(crate) fn insert(&mut self) -> Result<(u64, oneshot::Receiver<Outcome<T>>), Status> {
        if let Some(status) = &self.closed {
            return Err(status.clone());
        }
        let (tx, rx) = oneshot::channel();
        self.generation = self.generation.wrapping_add(1);
        let generation = self.generation;
        let key = self.slots.insert(Entry {
            generation,
            waiter: tx,
        });
        Ok((((generation as u64) << 32) | key as u64, rx))
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
        assert_eq!(t.insert().unwrap_err().code(), Code::Unavailable);
    }
}
