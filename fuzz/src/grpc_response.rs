//! Target `grpc_response`: the gRPC server's response translator (`rdmarpc-grpc`'s
//! `server/translate.rs`, through `rdmarpc_grpc::fuzzing`), driven by a script of the
//! server's frames, HTTP/2 capacity, final-status requests and failures; the HTTP/2
//! actions are checked against gRPC's grammar, the DATA against the messages sent, the
//! window given back against what the messages took, the status against what ended the
//! call.

use rdmarpc_core::wire::{Flags, FrameKind, Header};
use rdmarpc_core::Metadata;
use rdmarpc_grpc::fuzzing::{self, STEPS_AT};

use crate::frame::{build, frame_fields};
use crate::mutate::Field;

/// The translator on `data` as a script.
pub fn grpc_response(data: &[u8]) {
    fuzzing::grpc_response(data);
}

/// Where the mutations write: the setting, each step's op and `n`, and the fields of
/// each frame.
pub fn fields(data: &[u8]) -> Vec<Field> {
    let mut fields = vec![Field::new(0, 1, (0..16).collect())];
    for (at, op, n) in fuzzing::steps(data) {
        fields.push(Field::new(at - 3, 1, vec![0, 1, 2, 3]));
        if op == 0 {
            let len = n as u64;
            let real = data.len().saturating_sub(at).min(n) as u64;
            fields.push(Field::length(at - 2, 2, len, real));
            fields.extend(frame_fields(&data[..(at + n).min(data.len())], at));
        } else {
            fields.push(Field::new(at - 2, 2, vec![0, 1, 5, 6, 100, 4096, 65535]));
        }
    }
    debug_assert!(fields.iter().all(|f| f.offset >= STEPS_AT || f.offset == 0));
    fields
}

/// A step of an `[op u8][n u16 LE]` script (`rdmarpc_core::fuzzing::op_steps`): `op` with
/// `n`, and for op 0 the bytes (`n` is their length).
pub(crate) fn step(op: u8, n: u16, frame: &[u8]) -> Vec<u8> {
    let n = if op == 0 { frame.len() as u16 } else { n };
    let mut s = vec![op];
    s.extend_from_slice(&n.to_le_bytes());
    s.extend_from_slice(frame);
    s
}

/// Responses of each kind of call: unary, streams, errors, a refusal.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut md = Metadata::new();
    md.append("x-meta", "v");
    let message = |p: &[u8]| build(Header::new(FrameKind::Message, 1), &Metadata::new(), p);
    let end = |status: u8, md: &Metadata, p: &[u8]| {
        let mut h = Header::new(FrameKind::Response, 1);
        h.flags = Flags::END_STREAM;
        h.status = status;
        build(h, md, p)
    };
    let headers = build(Header::new(FrameKind::Response, 1), &md, b"");
    let mut update = Header::new(FrameKind::WindowUpdate, 1);
    update.credits = 1000;
    let update = update.encode();
    let mut refused = Header::new(FrameKind::Response, 1);
    refused.flags = Flags::END_STREAM | Flags::REFUSED;
    refused.status = 14;
    let refused = build(refused, &Metadata::new(), b"draining");
    let seeds = [
        (
            "unary",
            0u8,
            vec![
                step(0, 0, &end(0, &md, b"reply")),
                step(2, 0, b""),
                step(1, 3, b""),
                step(1, 100, b""),
                step(2, 0, b""),
            ],
        ),
        (
            "unary-error",
            0,
            vec![step(0, 0, &end(5, &md, b"not found")), step(2, 0, b"")],
        ),
        (
            "stream",
            1,
            vec![
                step(0, 0, &headers),
                step(0, 0, &message(b"one")),
                step(0, 0, &message(&[7; 300])),
                step(1, 6, b""),
                step(0, 0, &update),
                step(1, 400, b""),
                step(0, 0, &end(0, &md, b"")),
                step(2, 0, b""),
            ],
        ),
        (
            "stream-gzip",
            1 | 4,
            vec![
                step(0, 0, &message(&[b'a'; 2000])),
                step(1, 50, b""),
                step(3, 13, b""),
            ],
        ),
        (
            "bidi-zstd",
            3 | 8,
            vec![
                step(0, 0, &message(&[b'z'; 1000])),
                step(0, 0, &end(0, &Metadata::new(), b"")),
                step(1, 65535, b""),
                step(2, 0, b""),
            ],
        ),
        ("refused", 2, vec![step(0, 0, &refused), step(2, 0, b"")]),
    ];
    seeds
        .into_iter()
        .map(|(name, setting, steps)| {
            (
                format!("seed-{name}"),
                [vec![setting], steps.concat()].concat(),
            )
        })
        .collect()
}
