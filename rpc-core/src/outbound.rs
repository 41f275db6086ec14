//! Building outgoing frames straight into transport buffers.

use bytes::{BufMut, Bytes};

use crate::transport::{Connection, TransportError};
use crate::wire::{self, FrameKind, Header, HEADER_LEN};
use crate::{Metadata, Status};

/// Allocates one frame on `conn`, writes `header` and `metadata`, lets `body` write
/// exactly `header.payload_len` bytes, and sends it.
pub(crate) async fn send_frame<C: Connection>(
    conn: &C,
    mut header: Header,
    metadata: &Metadata,
    body: impl FnOnce(&mut C::SendBuf),
) -> Result<(), TransportError> {
    let len = HEADER_LEN + metadata.encoded_len() + header.payload_len as usize;
    let mut buf = conn.alloc(len).await?;
    wire::encode_head(&mut header, metadata, &mut buf);
    body(&mut buf);
    conn.send(buf).await
}

/// Sends a message split by [`SplitLarge`](crate::codegen::SplitLarge): the header, the
/// metadata and `rest` (`rest_len` bytes, written by `encode_rest`) go into a transport
/// buffer, and each of `fields` follows as its key and length and then its bytes, sent
/// from where they lie by the transport's gathered write. The header's payload length is
/// the whole message's.
pub(crate) async fn send_split<C: Connection>(
    conn: &C,
    mut header: Header,
    metadata: &Metadata,
    rest_len: usize,
    encode_rest: impl FnOnce(&mut C::SendBuf),
    fields: Vec<(u32, Bytes)>,
) -> Result<(), TransportError> {
    // Each field's key (field number, length-delimited) and length, as protobuf varints.
    let prefixes: Vec<Vec<u8>> = fields
        .iter()
        .map(|(number, bytes)| {
            let mut prefix = Vec::with_capacity(15);
            prost::encoding::encode_key(
                *number,
                prost::encoding::WireType::LengthDelimited,
                &mut prefix,
            );
            prost::encoding::encode_varint(bytes.len() as u64, &mut prefix);
            prefix
        })
        .collect();
    let payload_len = rest_len
        + prefixes.iter().map(Vec::len).sum::<usize>()
        + fields.iter().map(|(_, b)| b.len()).sum::<usize>();
    header.payload_len = u32::try_from(payload_len).map_err(|_| TransportError::TooLarge {
        len: payload_len,
        max: u32::MAX as usize,
    })?;
    let first = prefixes.first().map_or(0, Vec::len);
    let head_len = HEADER_LEN + metadata.encoded_len() + rest_len + first;
    let mut buf = conn.alloc(head_len).await?;
    wire::encode_head(&mut header, metadata, &mut buf);
    encode_rest(&mut buf);
    let mut tail = Vec::with_capacity(2 * fields.len());
    for (i, ((_, bytes), prefix)) in fields.into_iter().zip(prefixes).enumerate() {
        if i == 0 {
            buf.put_slice(&prefix);
        } else {
            tail.push(Bytes::from(prefix));
        }
        tail.push(bytes);
    }
    conn.send_gathered(buf, tail).await
}

/// Sends a frame with no metadata and no payload.
pub(crate) async fn send_control<C: Connection>(
    conn: &C,
    kind: FrameKind,
    call_id: u64,
) -> Result<(), TransportError> {
    send_frame(conn, Header::new(kind, call_id), &Metadata::new(), |_| {}).await
}

/// Sends a frame with no metadata and no payload, with `credits` (a window update).
pub(crate) async fn send_control_credits<C: Connection>(
    conn: &C,
    (kind, call_id, credits): crate::control::Control,
) -> Result<(), TransportError> {
    let mut header = Header::new(kind, call_id);
    header.credits = credits;
    send_frame(conn, header, &Metadata::new(), |_| {}).await
}

/// Sends `message` in `header` (whose `payload_len` is set here), its large `bytes`
/// fields by gathered write where the transport has one.
pub(crate) async fn send_message<C: Connection>(
    conn: &C,
    mut header: Header,
    metadata: &Metadata,
    message: &dyn crate::service::EncodeMessage,
) -> Result<(), TransportError> {
    header.payload_len = message.encoded_len() as u32;
    let split = conn.gather_min().and_then(|min| message.split(min));
    match split {
        Some((rest, fields)) => {
            let rest_len = rest.encoded_len();
            send_split(
                conn,
                header,
                metadata,
                rest_len,
                |buf| rest.encode_to(buf),
                fields,
            )
            .await
        }
        None => send_frame(conn, header, metadata, |buf| message.encode_to(buf)).await,
    }
}

/// The longest status message sent; longer ones are cut (at a character boundary).
pub(crate) const MAX_STATUS_MESSAGE: usize = 4096;

/// Sends a failed response: the status code in the header, its message (cut to
/// [`MAX_STATUS_MESSAGE`] bytes) as payload, its details and metadata as the metadata
/// block; `flags` are added to `END_STREAM`.
pub(crate) async fn send_status_flags<C: Connection>(
    conn: &C,
    call_id: u64,
    status: &Status,
    flags: wire::Flags,
) -> Result<(), TransportError> {
    let mut header = Header::new(FrameKind::Response, call_id);
    header.flags = wire::Flags::END_STREAM | flags;
    header.status = status.code() as u8;
    let message = truncate(status.message(), MAX_STATUS_MESSAGE).as_bytes();
    header.payload_len = message.len() as u32;
    let mut metadata = status.to_metadata();
    if metadata.encoded_len() > crate::MAX_METADATA_LEN || metadata.check().is_err() {
        tracing::warn!(
            call_id,
            bytes = metadata.encoded_len(),
            "a status's details and metadata are over the limit or malformed: sent without them"
        );
        metadata = Metadata::new();
    }
    send_frame(conn, header, &metadata, |buf| buf.put_slice(message)).await
}

/// `text` cut to at most `max` bytes at a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn truncate_keeps_whole_characters() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("abcdef", 3), "abc");
        assert_eq!(truncate("aé", 2), "a"); // é is two bytes
    }
}
