//! Buffers between the runtime and the TCP and gRPC connections: with the `rdma`
//! feature the RDMA crate's buffers (which hold heap bytes for them, and TCP's send
//! reservation), without it plain bytes.
//!
//! This is the `rdma` feature's side.

use bytes::{Bytes, BytesMut};
use rdmarpc_core::TransportError;
use rdmarpc_transport_tcp::{SendReservation, TcpConnection};

use crate::bufs::{RecvBuf, SendBuf};

/// A TCP frame's buffer, built only once the send queue has room for it.
pub(super) async fn tcp_alloc(c: &TcpConnection, len: usize) -> Result<SendBuf, TransportError> {
    Ok(SendBuf::bytes(len, c.reserve(len).await?))
}

pub(super) fn heap(len: usize) -> SendBuf {
    SendBuf::heap(len)
}

pub(super) fn heap_bytes(
    frame: SendBuf,
) -> Result<(BytesMut, Option<SendReservation>), TransportError> {
    frame.into_heap().ok_or_else(|| {
        TransportError::Other("an RDMA buffer sent on a TCP or gRPC connection".into())
    })
}

pub(super) fn received(bytes: Bytes) -> RecvBuf {
    RecvBuf::from_bytes(bytes)
}

pub(super) fn received_bytes(frame: RecvBuf) -> Result<Bytes, RecvBuf> {
    frame.into_bytes()
}
