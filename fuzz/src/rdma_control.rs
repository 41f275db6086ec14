//! Target `rdma_control`: the RDMA transport's decoder of a received ring slot (prefix,
//! then a frame, a rendezvous descriptor or read-done tokens), through
//! [`rdmarpc_transport_rdma::fuzzing::decode_control`].
//!
//! ```text
//!  0     1      2          4          8                      16
//!  |kind |flags | n_tokens | reserved | reposted (u64 LE)    | body
//!  DATA (1):       body = one rpc frame
//!  RENDEZVOUS (2): body = offset u64 | len u64 | rkey u32 | pad u32 | token u64 | header (40)
//!  CONTROL (3):    body = n_tokens x u64
//! ```

use rdmarpc_core::wire::{Flags, FrameKind, Header, HEADER_LEN};
use rdmarpc_core::Metadata;
use rdmarpc_transport_rdma::fuzzing::{decode_control, ControlBody};

use crate::frame::frame_fields;
use crate::mutate::{read_le, Field};

/// Bytes of the prefix.
pub const PREFIX_LEN: usize = 16;
/// Bytes of a rendezvous body.
pub const RENDEZVOUS_LEN: usize = 32 + HEADER_LEN;

/// Decodes `data` as a received message and checks it against the layout.
///
/// # Panics
/// On any broken invariant: a message that does not re-encode to its input (reserved
/// bytes aside), a body whose length does not fit its kind, a token count that does not
/// match the tokens, or a broken invariant of the `frame` target on a DATA body.
pub fn rdma_control(data: &[u8]) {
    let Ok(m) = decode_control(data) else {
        return;
    };
    assert!(
        data.len() >= PREFIX_LEN,
        "message shorter than the prefix accepted"
    );
    let mut expected = data.to_vec();
    let body_len = data.len() - PREFIX_LEN;
    match &m.body {
        ControlBody::Data { frame, header } => {
            assert_eq!(data[0], 1);
            assert_eq!(frame[..], data[PREFIX_LEN..]);
            assert_eq!(*header, Header::decode(frame));
            // The driver hands the slot to the runtime, which parses it as a frame.
            crate::frame::frame(frame);
        }
        ControlBody::Batch { frames } => {
            assert_eq!(data[0], 1);
            assert!(m.n_tokens >= 2, "a batch of fewer than two frames");
            if let Ok(frames) = frames {
                // Exactly the body, cut into the announced number of whole frames.
                assert_eq!(frames.len(), usize::from(m.n_tokens), "batch frame count");
                assert_eq!(frames.concat(), data[PREFIX_LEN..], "batch frames");
                for frame in frames {
                    let header = Header::decode(frame).expect("a batch frame's header");
                    assert_eq!(header.map(|h| h.frame_len()), Some(frame.len()));
                    crate::frame::frame(frame);
                }
            }
        }
        ControlBody::Rendezvous {
            len, header, head, ..
        } => {
            assert_eq!(data[0], 2);
            assert_eq!(
                body_len,
                RENDEZVOUS_LEN + usize::from(m.n_tokens),
                "rendezvous body length"
            );
            assert_eq!(head[..], data[PREFIX_LEN + RENDEZVOUS_LEN..], "inline head");
            assert_eq!(*len, read_le(data, PREFIX_LEN + 8, 8).expect("in the body"));
            let embedded = &data[PREFIX_LEN + 32..PREFIX_LEN + RENDEZVOUS_LEN];
            assert_eq!(*header, Header::decode(embedded));
            expected[PREFIX_LEN + 20..PREFIX_LEN + 24].fill(0);
            crate::frame::frame(embedded);
        }
        ControlBody::Control { tokens } => {
            assert_eq!(data[0], 3);
            assert_eq!(tokens.len(), usize::from(m.n_tokens), "token count");
            assert_eq!(body_len, 8 * tokens.len(), "control body length");
        }
        ControlBody::Piece { token, bytes } => {
            assert_eq!(data[0], 4);
            assert!(!bytes.is_empty(), "an empty piece accepted");
            assert_eq!(*token, read_le(data, PREFIX_LEN, 8).expect("in the body"));
            assert_eq!(bytes[..], data[PREFIX_LEN + 8..], "piece bytes");
        }
        // A kind added later: only the prefix checks below apply until it is covered here.
        _ => {}
    }
    assert_eq!(m.flags, data[1]);
    assert_eq!(
        u64::from(m.n_tokens),
        read_le(data, 2, 2).expect("in the prefix")
    );
    assert_eq!(
        u64::from(m.granted),
        read_le(data, 4, 4).expect("in the prefix")
    );
    assert_eq!(m.reposted, read_le(data, 8, 8).expect("in the prefix"));
    assert_eq!(m.reencoded, expected, "message does not re-encode");
}

/// The prefix's kind, flags, token count and credits, and by kind the DATA frame's
/// fields or the rendezvous length and embedded header's fields.
pub fn fields(data: &[u8]) -> Vec<Field> {
    let Some(n_tokens) = read_le(data, 2, 2) else {
        return Vec::new();
    };
    let body = data.len().saturating_sub(PREFIX_LEN) as u64;
    let mut fields = vec![
        Field::new(0, 1, vec![0, 1, 2, 3, 4, 0xff]),
        Field::new(1, 1, vec![0, 1, 2, 3, 0xff]),
        Field::length(2, 2, n_tokens, body / 8),
        Field::new(
            4,
            4,
            vec![0, 1, 4, 64, 1 << 16, (1 << 16) + 1, u32::MAX.into()],
        ),
        Field::new(
            8,
            8,
            vec![0, 1, u32::MAX.into(), 1 << 32, u64::MAX - 1, u64::MAX],
        ),
    ];
    match data[0] {
        1 => fields.extend(frame_fields(data, PREFIX_LEN)),
        2 => {
            if let Some(len) = read_le(data, PREFIX_LEN + 8, 8) {
                let declared = read_le(data, PREFIX_LEN + 32 + 28, 4)
                    .zip(read_le(data, PREFIX_LEN + 32 + 32, 4))
                    .map_or(0, |(m, p)| HEADER_LEN as u64 + m + p);
                fields.push(Field::length(PREFIX_LEN + 8, 8, len, declared));
            }
            // The embedded header is the body's tail: its "body" is empty on purpose.
            let end = data.len().min(PREFIX_LEN + RENDEZVOUS_LEN);
            fields.extend(frame_fields(&data[..end], PREFIX_LEN + 32));
        }
        _ => {}
    }
    fields
}

/// Messages of each kind, as the transport sends them: DATA slots with a request and a
/// response frame, a rendezvous descriptor for a 1 MiB request, credit-only, read-done,
/// ping and pong control messages; and a few just past the decoder's checks.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut md = Metadata::new();
    md.append("k", "v");
    let mut request = Header::new(FrameKind::Request, 1);
    request.flags = Flags::END_STREAM;
    request.method_id = 0x1234_5678;
    let mut response = Header::new(FrameKind::Response, 1);
    response.flags = Flags::END_STREAM;
    response.credits = 3;

    let mut data = prefix(1, 0, 0, 5);
    data.extend(crate::frame::build(request, &md, b"\x0a\x02hi"));
    let mut data_response = prefix(1, 0, 0, 0);
    data_response.extend(crate::frame::build(
        response,
        &Metadata::new(),
        b"\x0a\x02hi",
    ));

    // Three response frames coalesced into one DATA message.
    let mut batch = prefix(1, 0, 3, 4);
    for call_id in 1..=3 {
        let mut h = response;
        h.call_id = call_id;
        batch.extend(crate::frame::build(h, &Metadata::new(), b"\x0a\x02hi"));
    }

    let rendezvous = rendezvous_seed(request);
    let with_head = rendezvous_with_head(request, &md);

    let mut read_done = prefix(3, 0, 3, 17);
    for token in [1u64, 2, u64::MAX] {
        read_done.extend_from_slice(&token.to_le_bytes());
    }
    let mut short_rendezvous = rendezvous.clone();
    short_rendezvous.pop();
    let mut missing_token = prefix(3, 0, 2, 0);
    missing_token.extend_from_slice(&7u64.to_le_bytes());
    vec![
        ("seed-data-request".into(), data),
        ("seed-data-response".into(), data_response),
        ("seed-batch".into(), batch),
        ("seed-rendezvous".into(), rendezvous),
        ("seed-rendezvous-head".into(), with_head),
        ("seed-credits".into(), prefix(3, 0, 0, 64)),
        ("seed-read-done".into(), read_done),
        ("seed-ping".into(), prefix(3, 1, 0, 1)),
        ("seed-pong".into(), prefix(3, 2, 0, 2)),
        ("seed-short-rendezvous".into(), short_rendezvous),
        ("seed-missing-token".into(), missing_token),
        (
            "seed-short-prefix".into(),
            prefix(3, 0, 0, 0)[..15].to_vec(),
        ),
    ]
}

/// A message prefix: `kind`, `flags`, `n_tokens`, a reserved word, `reposted`.
fn prefix(kind: u8, flags: u8, n_tokens: u16, reposted: u64) -> Vec<u8> {
    let mut p = vec![kind, flags];
    p.extend_from_slice(&n_tokens.to_le_bytes());
    p.extend_from_slice(&[0; 4]);
    p.extend_from_slice(&reposted.to_le_bytes());
    p
}

/// A rendezvous descriptor for a 1 MiB `request`.
fn rendezvous_seed(request: Header) -> Vec<u8> {
    let mut rendezvous = prefix(2, 0, 0, 9);
    let mut big = request;
    big.payload_len = 1 << 20;
    big.flags = big.flags | Flags::REMOTE_DESCRIPTOR;
    rendezvous.extend_from_slice(&0x7f00_dead_0000u64.to_le_bytes());
    rendezvous.extend_from_slice(&(big.frame_len() as u64).to_le_bytes());
    rendezvous.extend_from_slice(&0x1234u32.to_le_bytes());
    rendezvous.extend_from_slice(&[0; 4]);
    rendezvous.extend_from_slice(&42u64.to_le_bytes());
    rendezvous.extend_from_slice(&big.encode());
    rendezvous
}

/// A descriptor with the frame's first 64 bytes inline (a field lent in place).
fn rendezvous_with_head(request: Header, md: &Metadata) -> Vec<u8> {
    let mut head = crate::frame::build(request, md, &[0x0a; 64]);
    head.truncate(64);
    let mut big_head = request;
    big_head.payload_len = 1 << 20;
    let mut with_head = prefix(2, 0, head.len() as u16, 9);
    with_head.extend_from_slice(&128u64.to_le_bytes());
    with_head.extend_from_slice(&((big_head.frame_len() - head.len()) as u64).to_le_bytes());
    with_head.extend_from_slice(&0x1234u32.to_le_bytes());
    with_head.extend_from_slice(&[0; 4]);
    with_head.extend_from_slice(&43u64.to_le_bytes());
    with_head.extend_from_slice(&big_head.encode());
    head[..HEADER_LEN].copy_from_slice(&big_head.encode());
    with_head.extend_from_slice(&head);
    with_head
}
