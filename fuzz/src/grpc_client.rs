//! Target `grpc_client`: the gRPC client's call translator (`rdmarpc-grpc`'s
//! `client/translate.rs`, through `rdmarpc_grpc::fuzzing`), driven by a script of the
//! channel's frames (request messages, window updates, half-close, cancel) and HTTP/2's
//! events (response headers, body chunks, trailers, send capacity, a reset): the frames
//! for the channel are checked against the call protocol (one call, headers before
//! messages, messages within the window, nothing after the final frame), the DATA sent
//! against the channel's request messages, the window given back against what the
//! messages that went out took.

use rdmarpc_core::wire::{Flags, FrameKind, Header};
use rdmarpc_core::Metadata;
use rdmarpc_grpc::fuzzing;

use crate::frame::{build, frame_fields};
use crate::mutate::Field;

/// The translator on `data` as a script.
pub fn grpc_client(data: &[u8]) {
    fuzzing::grpc_client(data);
}

/// Where the mutations write: the setting, each step's op and `n` (for the steps that
/// carry bytes, their length), the fields of a raw frame, the bits of response headers,
/// and the gRPC prefix of a body chunk.
pub fn fields(data: &[u8]) -> Vec<Field> {
    let mut fields = vec![Field::new(0, 1, (0..64).collect())];
    for (at, op, n) in fuzzing::client_steps(data) {
        fields.push(Field::new(at - 3, 1, (0..12).collect()));
        if !fuzzing::client_carries(op) {
            fields.push(Field::new(
                at - 2,
                2,
                vec![0, 1, 5, 16, 60, 100, 4096, 65535],
            ));
            continue;
        }
        let real = data.len().saturating_sub(at).min(n) as u64;
        fields.push(Field::length(at - 2, 2, n as u64, real));
        let end = (at + n).min(data.len());
        match op {
            1 => fields.extend(frame_fields(&data[..end], at)),
            5 if end >= at + 2 => {
                fields.push(Field::new(
                    at,
                    1,
                    vec![0x02, 0x03, 0x06, 0x0a, 0x0e, 0x12, 0x13],
                ));
                fields.push(Field::new(at + 1, 1, (0..20).collect()));
            }
            6 if end >= at + 5 => {
                fields.push(Field::new(at, 1, vec![0, 1, 2]));
                let len = u32::from_be_bytes(data[at + 1..at + 5].try_into().expect("4 bytes"));
                let mut values =
                    crate::mutate::length_values(u64::from(len), real.saturating_sub(5));
                values.retain(|&v| v <= u64::from(u32::MAX));
                let swapped = values
                    .iter()
                    .map(|&v| u64::from((v as u32).swap_bytes()))
                    .collect();
                fields.push(Field::new(at + 1, 4, swapped));
            }
            _ => {}
        }
    }
    fields
}

/// A step: `op` with `n`, or with `bytes` (`n` their length) for the ops that carry them.
fn step(op: u8, n: u16, bytes: &[u8]) -> Vec<u8> {
    let n = if fuzzing::client_carries(op) {
        bytes.len() as u16
    } else {
        n
    };
    let mut s = vec![op];
    s.extend_from_slice(&n.to_le_bytes());
    s.extend_from_slice(bytes);
    s
}

/// A gRPC message: its prefix (flag 0) and bytes.
fn prefixed(bytes: &[u8]) -> Vec<u8> {
    let mut m = vec![0];
    m.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    m.extend_from_slice(bytes);
    m
}

/// Calls of each kind: answered, streamed both ways, trailers-only, failed, cancelled.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let ok_headers = step(5, 0, &[0x02, 0x00]);
    let ok_trailers = step(8, 0, b"");
    let body = [prefixed(b"reply"), prefixed(&[3; 200])].concat();
    let (a, b) = body.split_at(7);
    let unary = [
        ok_headers.clone(),
        step(6, 0, &prefixed(b"answer")),
        ok_trailers.clone(),
        step(11, 0, b""),
    ]
    .concat();
    let server_stream = [
        ok_headers.clone(),
        step(6, 0, a),
        step(11, 0, b""),
        step(6, 0, b),
        step(7, 300, b""),
        step(11, 0, b""),
        step(2, 4096, b""),
        step(11, 0, b""),
        step(8, 0, b""),
        step(11, 0, b""),
    ]
    .concat();
    let (client_stream, bidi) = stream_seeds();
    // A message of 60 bytes (100 with its header) spends a window of 100 exactly.
    let window_to_zero = [
        ok_headers.clone(),
        step(7, 60, b""),
        step(7, 1, b""),
        step(11, 0, b""),
        step(2, 1, b""),
        step(11, 0, b""),
        step(8, 0, b""),
        step(11, 0, b""),
    ]
    .concat();
    let trailers_only = [step(5, 0, &[0x12, 0x05]), step(11, 0, b"")].concat();
    let cancelled = [ok_headers, step(0, 0, b"x"), step(4, 0, b"")].concat();
    let lie = [
        step(5, 0, &[0x02, 0]),
        step(6, 0, &[0, 0xff, 0xff, 0xff, 0xff]),
    ]
    .concat();
    vec![
        ("seed-unary".into(), [vec![0x30], unary].concat()),
        (
            "seed-server-stream".into(),
            [vec![0x29], server_stream].concat(),
        ),
        (
            "seed-client-stream".into(),
            [vec![0x22], client_stream].concat(),
        ),
        ("seed-bidi".into(), [vec![0x2f], bidi].concat()),
        (
            "seed-window-to-zero".into(),
            [vec![0x29], window_to_zero].concat(),
        ),
        (
            "seed-trailers-only".into(),
            [vec![0x21], trailers_only].concat(),
        ),
        ("seed-cancelled".into(), [vec![0x23], cancelled].concat()),
        ("seed-lie".into(), [vec![0x11], lie].concat()),
    ]
}

/// Request streams: messages cut by flow control, a raw frame that ends the stream, a
/// half-close, a reset.
fn stream_seeds() -> (Vec<u8>, Vec<u8>) {
    let ok_headers = step(5, 0, &[0x02, 0x00]);
    let gzip_headers = step(5, 0, &[0x06, 0x00, b'v']);
    let ok_trailers = step(8, 0, b"");
    let raw = build(Header::new(FrameKind::Message, 1), &Metadata::new(), b"raw");
    let mut end = Header::new(FrameKind::Message, 1);
    end.flags = Flags::END_STREAM;
    let raw_end = build(end, &Metadata::new(), b"last");
    let client_stream = [
        step(11, 0, b""),
        step(0, 0, b"one"),
        step(0, 0, &[2; 300]),
        step(9, 10, b""),
        step(11, 0, b""),
        step(1, 0, &raw),
        step(9, 65535, b""),
        step(1, 0, &raw_end),
        step(9, 65535, b""),
        gzip_headers,
        step(7, 100, b""),
        ok_trailers.clone(),
        step(11, 0, b""),
    ]
    .concat();
    let bidi = [
        step(0, 0, b"ping"),
        ok_headers.clone(),
        step(9, 100, b""),
        step(7, 10, b""),
        step(11, 0, b""),
        step(3, 0, b""),
        step(10, 0, b""),
        step(8, 3, b""),
        step(11, 0, b""),
    ]
    .concat();
    (client_stream, bidi)
}
