//! Target `rdma_session`: the RDMA transport's session (`rdmarpc-transport-rdma`'s
//! `protocol/session/`, through `rdmarpc_transport_rdma::fuzzing`), fed by a hostile peer's
//! script of messages (data, batches, rendezvous descriptors lent or pushed, pieces,
//! read-dones) between READs
//! completing, frames consumed, time passing, control messages sent and loans made; the
//! invariants (arrival order, the READ budget, the loan limits, read-dones only for what
//! was lent, only the peer's lies or timers ending it) are checked inside.

use rdmarpc_core::wire::{FrameKind, Header, HEADER_LEN};
use rdmarpc_core::Metadata;
use rdmarpc_transport_rdma::fuzzing::{self, SESSION_STEPS_AT};

use crate::frame::{build, frame_fields};
use crate::grpc_response::step;
use crate::mutate::Field;

/// The session on `data` as a script.
pub fn rdma_session(data: &[u8]) {
    fuzzing::rdma_session(data);
}

/// Where the mutations write: the limits, each step's op and `n`, and in messages the
/// prefix's token count, grant and re-post count, and the frames' fields.
pub fn fields(data: &[u8]) -> Vec<Field> {
    let mut fields = vec![Field::new(
        0,
        1,
        vec![0, 0x15, 0x2a, 0x3f, 0x55, 0xea, 0xff],
    )];
    for (at, op, n) in fuzzing::session_steps(data) {
        fields.push(Field::new(at - 3, 1, (0..8).collect()));
        if op != 0 {
            fields.push(Field::new(at - 2, 2, vec![0, 1, 100, 250, 700, 1500, 4096]));
            continue;
        }
        let real = data.len().saturating_sub(at).min(n) as u64;
        fields.push(Field::length(at - 2, 2, n as u64, real));
        fields.push(Field::new(at, 1, vec![1, 2, 3, 4]));
        fields.push(Field::new(at + 1, 1, vec![0, 4, 8]));
        fields.push(Field::new(at + 2, 2, vec![0, 1, 2, 3, 16, 17]));
        fields.push(Field::new(at + 4, 4, vec![0, 1, 8, 1 << 16, (1 << 16) + 1]));
        fields.push(Field::new(at + 8, 8, vec![0, 1, 2, 100, u64::MAX]));
        if data.get(at) == Some(&1) {
            fields.extend(frame_fields(&data[..(at + n).min(data.len())], at + 16));
        }
    }
    debug_assert!(fields
        .iter()
        .all(|f| f.offset >= SESSION_STEPS_AT || f.offset == 0));
    fields
}

/// A message prefix: `kind`, `flags`, `n_tokens`, slots granted, `reposted`.
fn prefix_bytes(kind: u8, flags: u8, n_tokens: u16, granted: u32, reposted: u64) -> Vec<u8> {
    let mut p = vec![kind, flags];
    p.extend_from_slice(&n_tokens.to_le_bytes());
    p.extend_from_slice(&granted.to_le_bytes());
    p.extend_from_slice(&reposted.to_le_bytes());
    p
}

/// A rendezvous descriptor lending all of `frame` at `offset` under `token`.
fn descriptor_message(frame: &[u8], offset: u64, token: u64) -> Vec<u8> {
    let mut m = prefix_bytes(2, 0, 0, 0, 0);
    m.extend_from_slice(&offset.to_le_bytes());
    m.extend_from_slice(&(frame.len() as u64).to_le_bytes());
    m.extend_from_slice(&0x1234u32.to_le_bytes());
    m.extend_from_slice(&[0; 4]);
    m.extend_from_slice(&token.to_le_bytes());
    m.extend_from_slice(&frame[..HEADER_LEN]);
    m
}

/// A request frame with `payload`.
fn frame(id: u64, payload: &[u8]) -> Vec<u8> {
    build(
        Header::new(FrameKind::Request, id),
        &Metadata::new(),
        payload,
    )
}

/// A DATA message of `frames` (a batch if more than one).
fn data(frames: &[Vec<u8>]) -> Vec<u8> {
    let n = if frames.len() > 1 {
        frames.len() as u16
    } else {
        0
    };
    [prefix_bytes(1, 0, n, 0, 0), frames.concat()].concat()
}

/// A descriptor flagged PUSHED for all of `frame` under `token`.
fn pushed_message(frame: &[u8], token: u64) -> Vec<u8> {
    let mut m = descriptor_message(frame, 0, token);
    m[1] = 8;
    m[PREFIX + 16..PREFIX + 20].fill(0);
    m
}

/// A PIECE of the pushed frame `token`.
fn piece(token: u64, bytes: &[u8]) -> Vec<u8> {
    [
        prefix_bytes(4, 0, 0, 0, 0),
        token.to_le_bytes().to_vec(),
        bytes.to_vec(),
    ]
    .concat()
}

/// Bytes of a message prefix.
const PREFIX: usize = 16;

/// A CONTROL message with the read-dones of `tokens`.
fn read_done(tokens: &[u64]) -> Vec<u8> {
    let body: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    [prefix_bytes(3, 0, tokens.len() as u16, 0, 0), body].concat()
}

/// Sessions that receive eager frames and batches, READ rendezvous frames, return
/// read-dones, lend and get read-dones back, go silent, and are lent past the limit.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let batch = data(&[frame(2, b"a"), frame(3, b"b"), frame(4, &[0; 200])]);
    let eager = vec![
        step(0, 0, &data(&[frame(1, b"one")])),
        step(0, 0, &batch),
        step(3, 0, b""),
        step(7, 0, b""),
        step(5, 0, b""),
    ];
    let rendezvous = vec![
        step(0, 0, &descriptor_message(&frame(9, &[5; 3000]), 0, 7)),
        step(0, 0, &data(&[frame(10, b"after")])),
        step(1, 0, b""),
        step(3, 0, b""),
        step(2, 0, b""),
        step(3, 0, b""),
        step(5, 0, b""),
    ];
    let lend = vec![
        step(6, 5000, b""),
        step(6, 100, b""),
        step(0, 0, &read_done(&[1])),
        step(4, 250, b""),
        step(5, 0, b""),
        step(4, 900, b""),
    ];
    let mut loans: Vec<Vec<u8>> = (1..=6)
        .map(|token| {
            step(
                0,
                0,
                &descriptor_message(&frame(token, &[1; 460]), 0, token),
            )
        })
        .collect();
    loans.extend([1, 2, 3, 5].map(|op| step(op, 0, b"")));
    let big = frame(9, &[5; 2500]);
    let mut pushed = vec![
        step(0, 0, &pushed_message(&big, 7)),
        step(0, 0, &data(&[frame(10, b"after")])),
        step(3, 0, b""),
    ];
    pushed.extend(big.chunks(1000).map(|part| step(0, 0, &piece(7, part))));
    pushed.extend([3, 5].map(|op| step(op, 0, b"")));
    [
        ("eager-and-batch", 0x2a, eager),
        ("rendezvous", 0x6a, rendezvous),
        ("lend-and-time", 0x2a, lend),
        ("loans-past-the-limit", 0x65, loans),
        ("pushed", 0x6a, pushed),
    ]
    .into_iter()
    .map(|(name, setting, steps)| {
        (
            format!("seed-{name}"),
            [vec![setting], steps.concat()].concat(),
        )
    })
    .collect()
}
