//! [`LargePool`]: registered buffers for rendezvous transfers, reused across calls.
//!
//! Buffers come in power-of-two size classes from [`MIN_CLASS`] up. A class's first use
//! registers a buffer (the only registration after connection set-up); after that buffers
//! are reused, never registered per call. Returned buffers are kept while the pool holds
//! at most its byte budget and deregistered beyond it, so a burst of huge messages does
//! not pin memory forever. Idle buffers are also given back whenever the process's
//! locked-memory budget runs short (`memlock`'s [`Idle`]): a new connection or a message
//! elsewhere goes before this cache.
//!
//! Each connection has two pools, in its own protection domain: one of
//! [`Access::Lendable`] regions (remote read, addressed from 0) for what it lends to its
//! peer, one with local access only for READ targets. A lent buffer only ever holds its
//! own connection's frames.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::memlock::Idle;
use crate::verbs::{Access, MemoryRegion, ProtectionDomain};

/// Smallest buffer class, bytes.
pub(crate) const MIN_CLASS: usize = 64 * 1024;

/// A pool of registered buffers of one access kind.
#[derive(Debug)]
pub(crate) struct LargePool {
    inner: Arc<PoolInner>,
}

#[derive(Debug)]
struct PoolInner {
    pd: Arc<ProtectionDomain>,
    access: Access,
    /// Bytes of idle buffers kept for reuse at most.
    keep_bytes: usize,
    state: Mutex<PoolState>,
}

#[derive(Debug, Default)]
struct PoolState {
    /// Idle buffers by class (index = log2(class / MIN_CLASS)).
    free: Vec<Vec<MemoryRegion>>,
    idle_bytes: usize,
    registered: u64,
}

/// A registered buffer of a pool; goes back to its pool when dropped.
#[derive(Debug)]
pub(crate) struct LargeBuf {
    region: Option<MemoryRegion>,
    pool: Weak<PoolInner>,
}

impl LargePool {
    /// A pool registering in `pd` with `access`, keeping up to `keep_bytes` idle.
    pub(crate) fn new(pd: Arc<ProtectionDomain>, access: Access, keep_bytes: usize) -> LargePool {
        let budget = pd.account().budget();
        let inner = Arc::new(PoolInner {
            pd,
            access,
            keep_bytes,
            state: Mutex::new(PoolState::default()),
        });
        if keep_bytes > 0 {
            let idle: Weak<dyn Idle> = Arc::downgrade(&inner) as Weak<PoolInner>;
            budget.keep_idle(idle);
        }
        LargePool { inner }
    }

    /// A buffer of at least `len` bytes.
    ///
    /// # Errors
    /// Registration failure (e.g. over the memlock limit).
    pub(crate) fn take(&self, len: usize) -> crate::verbs::Result<LargeBuf> {
        let class = class_of(len);
        let reused = {
            let mut state = self.inner.state.lock();
            let idx = class_index(class);
            let found = state.free.get_mut(idx).and_then(Vec::pop);
            if found.is_some() {
                state.idle_bytes -= class;
            }
            found
        };
        let region = match reused {
            Some(region) => region,
            None => {
                let region = MemoryRegion::new(&self.inner.pd, class, self.inner.access)?;
                self.inner.state.lock().registered += 1;
                tracing::debug!(bytes = class, access = ?self.inner.access, "registered a rendezvous buffer");
                region
            }
        };
        Ok(LargeBuf {
            region: Some(region),
            pool: Arc::downgrade(&self.inner),
        })
    }

    /// Buffers registered so far (a measure of registration cost paid).
    pub(crate) fn registrations(&self) -> u64 {
        self.inner.state.lock().registered
    }
}

impl LargeBuf {
    /// The registered memory.
    pub(crate) fn region(&self) -> &MemoryRegion {
        self.region.as_ref().expect("present until drop")
    }

    /// The registered memory, writable.
    pub(crate) fn region_mut(&mut self) -> &mut MemoryRegion {
        self.region.as_mut().expect("present until drop")
    }
}

impl Drop for LargeBuf {
    fn drop(&mut self) {
        let (Some(region), Some(pool)) = (self.region.take(), self.pool.upgrade()) else {
            return;
        };
        let class = region.len();
        let mut state = pool.state.lock();
        if state.idle_bytes + class <= pool.keep_bytes {
            let idx = class_index(class);
            if state.free.len() <= idx {
                state.free.resize_with(idx + 1, Vec::new);
            }
            state.free[idx].push(region);
            state.idle_bytes += class;
        }
        // else: dropped here, deregistered.
    }
}

impl Idle for PoolInner {
    fn idle_bytes(&self) -> u64 {
        let idle = self.state.lock().idle_bytes as u64;
        idle.min(self.pd.account().beyond())
    }

    fn release_idle(&self, want: u64) -> u64 {
        let mut released = Vec::new();
        let mut freed = 0u64;
        {
            let mut state = self.state.lock();
            // The largest buffers first: the fewest deregistrations for the room.
            for class in (0..state.free.len()).rev() {
                while freed < want {
                    let Some(region) = state.free[class].pop() else {
                        break;
                    };
                    state.idle_bytes -= region.len();
                    freed += region.len() as u64;
                    released.push(region);
                }
            }
        }
        // Deregistered here, outside the pool's lock.
        drop(released);
        freed
    }
}

/// The class (buffer size) serving `len` bytes.
pub(crate) fn class_of(len: usize) -> usize {
    len.max(MIN_CLASS).next_power_of_two()
}

fn class_index(class: usize) -> usize {
    (class / MIN_CLASS).trailing_zeros() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_powers_of_two_from_the_minimum() {
        assert_eq!(class_of(0), MIN_CLASS);
        assert_eq!(class_of(MIN_CLASS), MIN_CLASS);
        assert_eq!(class_of(MIN_CLASS + 1), 2 * MIN_CLASS);
        assert_eq!(class_of(16 << 20), 16 << 20);
        assert_eq!(class_index(MIN_CLASS), 0);
        assert_eq!(class_index(4 * MIN_CLASS), 2);
    }
}
