//! [`MessageBuf`]: memory for a large message, registered with the connection's
//! protection domain when the pool has room, so that it is lent without a copy.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::received::Kept;
use super::Inner;

/// Memory for a large message field: registered memory of one RDMA connection (sent
/// from where it lies on that connection), or heap memory. See
/// [`RdmaConnection::message_buf`](crate::RdmaConnection::message_buf). Its initial contents are unspecified.
pub struct MessageBuf(MessageMemory);

pub(super) enum MessageMemory {
    Registered(Kept),
    Heap(Vec<u8>),
}

impl std::fmt::Debug for MessageBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageBuf")
            .field("len", &self.len())
            .field("registered", &self.is_registered())
            .finish()
    }
}

impl MessageBuf {
    /// `len` bytes of heap memory.
    pub fn heap(len: usize) -> MessageBuf {
        MessageBuf(MessageMemory::Heap(vec![0; len]))
    }

    /// `len` bytes of `inner`'s lendable memory, if its budget for held registered
    /// memory has room and registering works.
    pub(super) fn registered(inner: &Arc<Inner>, len: usize) -> Option<MessageBuf> {
        let count = inner.kept.clone();
        let size = crate::pool::class_of(len);
        if !count.reserve(size) {
            return None;
        }
        // A registration of its own, deregistered when dropped, never reused: once lent,
        // its key is known to the peer, so it must never hold anything else.
        let buf = match inner.msg_pool.take(len) {
            Ok(buf) => buf,
            Err(e) => {
                count.held.fetch_sub(size, Ordering::AcqRel);
                tracing::debug!("message buffer of {len} bytes in heap memory: {e}");
                return None;
            }
        };
        debug_assert_eq!(buf.region().len(), size);
        Some(MessageBuf(MessageMemory::Registered(Kept::new(
            buf, len, count,
        ))))
    }

    /// Its length.
    pub fn len(&self) -> usize {
        match &self.0 {
            MessageMemory::Registered(kept) => kept.len,
            MessageMemory::Heap(v) => v.len(),
        }
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether it is registered memory (sent without a copy on its connection).
    pub fn is_registered(&self) -> bool {
        matches!(self.0, MessageMemory::Registered(_))
    }

    /// The bytes, to fill.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.0 {
            MessageMemory::Registered(kept) => {
                let len = kept.len;
                let buf = Arc::get_mut(&mut kept.buf).expect("not shared before freeze");
                &mut buf.region_mut().as_mut_slice()[..len]
            }
            MessageMemory::Heap(v) => v,
        }
    }

    /// The filled buffer as `Bytes`, for a message field. Registered memory goes back
    /// to the connection's pool when the last of them (and the last loan of it) is gone.
    pub fn freeze(self) -> bytes::Bytes {
        match self.0 {
            MessageMemory::Registered(kept) => kept.into_bytes(),
            MessageMemory::Heap(v) => bytes::Bytes::from(v),
        }
    }
}
