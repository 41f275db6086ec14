//! Buffers between the runtime and the TCP and gRPC connections without the `rdma`
//! feature: plain bytes.

use bytes::{Bytes, BytesMut};
use rdmarpc_core::{Connection, TransportError};
use rdmarpc_transport_tcp::{SendReservation, TcpConnection};

pub(super) async fn tcp_alloc(c: &TcpConnection, len: usize) -> Result<BytesMut, TransportError> {
    c.alloc(len).await
}

pub(super) fn heap(len: usize) -> BytesMut {
    BytesMut::with_capacity(len)
}

pub(super) fn heap_bytes(
    frame: BytesMut,
) -> Result<(BytesMut, Option<SendReservation>), TransportError> {
    Ok((frame, None))
}

pub(super) fn received(bytes: Bytes) -> Bytes {
    bytes
}

pub(super) fn received_bytes(frame: Bytes) -> Result<Bytes, Bytes> {
    Ok(frame)
}
