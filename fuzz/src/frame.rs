//! Target `frame`: [`Header::decode`] and [`Frame::parse`] on arbitrary bytes.

use rdmarpc_core::wire::{encode_head, Flags, Frame, FrameError, FrameKind, Header, HEADER_LEN};
use rdmarpc_core::{Metadata, MAX_METADATA_LEN};

use crate::mutate::{read_le, Field};

/// Offset of `meta_len` in the header.
pub const META_LEN_AT: usize = 28;
/// Offset of `payload_len` in the header.
pub const PAYLOAD_LEN_AT: usize = 32;

/// Decodes `data` as a header and as a whole frame and checks what they claim.
///
/// # Panics
/// On any broken invariant (a bug in the decoders): a header that does not re-encode to
/// the same 40 bytes, a frame whose parts do not have the header's lengths or do not
/// tile the buffer, `parse` and `decode` disagreeing, a metadata block that does not
/// round-trip, or a frame that does not rebuild into the same bytes.
pub fn frame(data: &[u8]) {
    let header = Header::decode(data);
    match &header {
        Ok(None) => assert!(data.len() < HEADER_LEN, "Ok(None) from a full header"),
        Ok(Some(h)) => check_header(h, data),
        Err(_) => assert!(data.len() >= HEADER_LEN, "error from a short buffer"),
    }
    match Frame::parse(data) {
        Ok(f) => check_frame(&f, data, header),
        Err(e) => match header {
            Err(decode_error) => assert_eq!(e, decode_error, "parse and decode disagree"),
            Ok(None) => assert!(matches!(e, FrameError::LengthMismatch { .. })),
            Ok(Some(h)) => {
                assert!(
                    !h.flags.contains(Flags::DISCARDED),
                    "discarded frame refused"
                );
                assert_ne!(
                    data.len(),
                    h.frame_len(),
                    "frame of the right length refused"
                );
                assert_eq!(
                    e,
                    FrameError::LengthMismatch {
                        declared: h.frame_len(),
                        actual: data.len()
                    }
                );
            }
        },
    }
}

/// Checks a header that decoded from `data`.
fn check_header(h: &Header, data: &[u8]) {
    assert_eq!(
        h.encode()[..],
        data[..HEADER_LEN],
        "header does not re-encode"
    );
    assert!(
        h.meta_len as usize <= MAX_METADATA_LEN,
        "meta_len over the limit"
    );
    assert_eq!(h.body_len(), h.meta_len as usize + h.payload_len as usize);
    assert_eq!(h.frame_len(), HEADER_LEN + h.body_len());
}

/// Checks a frame that parsed from `data`.
fn check_frame(f: &Frame<'_>, data: &[u8], header: Result<Option<Header>, FrameError>) {
    assert_eq!(header, Ok(Some(f.header)), "parse and decode disagree");
    if f.is_discarded() {
        assert!(
            f.metadata.is_empty() && f.payload.is_empty(),
            "discarded body kept"
        );
        return;
    }
    let h = &f.header;
    assert_eq!(data.len(), h.frame_len(), "frame length");
    assert_eq!(f.metadata.len(), h.meta_len as usize, "metadata length");
    assert_eq!(f.payload.len(), h.payload_len as usize, "payload length");
    let meta_end = HEADER_LEN + f.metadata.len();
    assert!(std::ptr::eq(f.metadata, &data[HEADER_LEN..meta_end]));
    assert!(std::ptr::eq(f.payload, &data[meta_end..]));
    crate::metadata::metadata(f.metadata);
    if let Ok(md) = Metadata::decode(f.metadata) {
        // What a sender with this header, metadata and payload would have written.
        let mut header = f.header;
        let mut rebuilt = Vec::with_capacity(data.len());
        encode_head(&mut header, &md, &mut rebuilt);
        rebuilt.extend_from_slice(f.payload);
        assert_eq!(header, f.header, "encode_head changed meta_len");
        assert_eq!(rebuilt, data, "frame does not rebuild");
    }
}

/// Where the structure-aware mutations write in a frame.
pub fn fields(data: &[u8]) -> Vec<Field> {
    frame_fields(data, 0)
}

/// The fields of a frame that starts at `base` in `data`: the kind, the flags, the two
/// lengths (against what really follows), and those inside its metadata block.
pub fn frame_fields(data: &[u8], base: usize) -> Vec<Field> {
    let Some(body) = data.len().checked_sub(base + HEADER_LEN) else {
        return Vec::new();
    };
    let body = body as u64;
    let meta_len = read_le(data, base + META_LEN_AT, 4).expect("in the header");
    let payload_len = read_le(data, base + PAYLOAD_LEN_AT, 4).expect("in the header");
    let mut meta = Field::length(base + META_LEN_AT, 4, meta_len, body.min(meta_len));
    meta.values
        .extend([MAX_METADATA_LEN as u64, MAX_METADATA_LEN as u64 + 1]);
    let mut fields = vec![
        Field::new(base + 3, 1, (0..=8).chain([0xff]).collect()),
        Field::new(base + 4, 1, vec![0, 1, 2, 3, 4, 5, 7, 8, 0x80]),
        Field::new(base + 6, 2, vec![0, 1, 0x100]),
        meta,
        Field::length(
            base + PAYLOAD_LEN_AT,
            4,
            payload_len,
            body.saturating_sub(meta_len),
        ),
    ];
    let meta_start = base + HEADER_LEN;
    let meta_end = data.len().min(meta_start.saturating_add(meta_len as usize));
    for mut f in crate::metadata::fields(&data[meta_start..meta_end]) {
        f.offset += meta_start;
        fields.push(f);
    }
    fields
}

/// Valid frames of every kind and flag, built with the crate's own encoder, and a few
/// inputs at the edges of the header's checks.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut md = Metadata::new();
    md.append("authorization", "Bearer x");
    md.append("trace-id", "0af7651916cd43dd8448eb211c80319c");
    let kinds = [
        FrameKind::Request,
        FrameKind::Response,
        FrameKind::Cancel,
        FrameKind::Ping,
        FrameKind::Pong,
        FrameKind::GoAway,
        FrameKind::Credit,
        FrameKind::Message,
        FrameKind::WindowUpdate,
    ];
    let mut seeds = Vec::new();
    for (i, kind) in kinds.into_iter().enumerate() {
        let mut h = Header::new(kind, 1 + i as u64);
        h.flags = Flags::END_STREAM;
        let (md, payload): (Metadata, &[u8]) = match kind {
            FrameKind::Request => (md.clone(), b"\x0a\x05hello\x10\x07"),
            FrameKind::Response => (Metadata::new(), b"\x0a\x05hello"),
            _ => (Metadata::new(), b""),
        };
        if kind == FrameKind::Request {
            h.method_id = 0x811c_9dc5;
            h.timeout_us = 1_000_000;
        }
        seeds.push((
            format!("seed-{kind:?}").to_lowercase(),
            build(h, &md, payload),
        ));
    }
    let mut h = Header::new(FrameKind::Response, 9);
    h.status = 5;
    h.flags = Flags::END_STREAM;
    seeds.push(("seed-error".into(), build(h, &md, b"not found")));
    let mut refused = Header::new(FrameKind::Response, 11);
    refused.status = 14;
    refused.flags = Flags::END_STREAM | Flags::REFUSED;
    seeds.push((
        "seed-refused".into(),
        build(refused, &Metadata::new(), b"server is shutting down"),
    ));
    h.flags = Flags::END_STREAM | Flags::DISCARDED;
    h.payload_len = u32::MAX;
    seeds.push(("seed-discarded".into(), h.encode().to_vec()));
    let mut h = Header::new(FrameKind::Request, 10);
    h.flags = Flags::REMOTE_DESCRIPTOR | Flags::END_STREAM;
    h.credits = 7;
    seeds.push((
        "seed-descriptor".into(),
        build(h, &Metadata::new(), &[0xab; 20]),
    ));
    seeds.push((
        "seed-short".into(),
        build(h, &md, b"")[..HEADER_LEN - 1].to_vec(),
    ));
    seeds
}

/// A frame built the way the runtime builds one.
pub fn build(mut header: Header, md: &Metadata, payload: &[u8]) -> Vec<u8> {
    header.payload_len = payload.len() as u32;
    let mut out = Vec::new();
    encode_head(&mut header, md, &mut out);
    out.extend_from_slice(payload);
    out
}
