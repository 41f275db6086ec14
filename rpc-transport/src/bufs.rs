//! The buffers of an [`AnyConnection`](crate::AnyConnection): with the `rdma` feature
//! those of `rdmarpc-transport-rdma` (registered memory, or heap bytes for TCP and gRPC);
//! without it, heap bytes.

#[cfg(feature = "rdma")]
pub use rdmarpc_transport_rdma::MessageBuf;
#[cfg(feature = "rdma")]
pub(crate) use rdmarpc_transport_rdma::{RecvBuf, SendBuf};

#[cfg(not(feature = "rdma"))]
pub use plain::MessageBuf;
#[cfg(not(feature = "rdma"))]
pub(crate) use plain::{RecvBuf, SendBuf};

#[cfg(not(feature = "rdma"))]
mod plain {
    /// Room for one frame (heap bytes).
    pub(crate) type SendBuf = bytes::BytesMut;
    /// A received frame.
    pub(crate) type RecvBuf = bytes::Bytes;

    /// Memory for a large message field. Without the `rdma` feature it is heap memory
    /// (a TCP or gRPC connection writes a large field from where it lies anyway); the
    /// same methods as with it, so code using it builds either way.
    #[derive(Debug)]
    pub struct MessageBuf(Vec<u8>);

    impl MessageBuf {
        /// `len` bytes of heap memory.
        pub fn heap(len: usize) -> MessageBuf {
            MessageBuf(vec![0; len])
        }

        /// Its length.
        pub fn len(&self) -> usize {
            self.0.len()
        }

        /// Whether it is empty.
        pub fn is_empty(&self) -> bool {
            self.0.is_empty()
        }

        /// Whether it is registered RDMA memory: never, without the `rdma` feature.
        pub fn is_registered(&self) -> bool {
            false
        }

        /// Its bytes, to fill.
        pub fn as_mut_slice(&mut self) -> &mut [u8] {
            &mut self.0
        }

        /// The filled buffer, for a `bytes` message field.
        pub fn freeze(self) -> bytes::Bytes {
            self.0.into()
        }
    }
}
