//! The framework's frames built from what HTTP/2 carried (both sides of the bridge), and
//! the watch flags their drivers wait on.

use bytes::{BufMut, Bytes, BytesMut};
use rdmarpc_core::wire::{encode_head, FrameKind, Header, HEADER_LEN};
use rdmarpc_core::Metadata;
use tokio::sync::watch;

/// Resolves once the flag is set (or its sender is gone).
pub(crate) async fn set(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|set| *set).await.map(|_| ());
}

/// A frame with no body.
pub(crate) fn control(kind: FrameKind, call_id: u64) -> Bytes {
    Bytes::copy_from_slice(&Header::new(kind, call_id).encode())
}

/// A frame with `metadata` and `payload`.
pub(crate) fn frame(mut header: Header, metadata: &Metadata, payload: &[u8]) -> Bytes {
    header.payload_len = payload.len() as u32;
    let mut buf = BytesMut::with_capacity(HEADER_LEN + metadata.encoded_len() + payload.len());
    encode_head(&mut header, metadata, &mut buf);
    buf.put_slice(payload);
    buf.freeze()
}
