//! Target `grpc_request`: a request stream's translator (`server/upload.rs`), fed body
//! chunks, the server's window, the server taking and consuming messages, and the body's
//! end, against a real account.
//!
//! A script: byte 0 gives the encoding (bits 0-1: none, gzip, zstd, none), the account's
//! byte limit (bits 2-3: 1 KiB, 64 KiB, 1 MiB, 16 MiB), the largest message (bits 4-5:
//! 0, 100 B, 64 KiB, 1 MiB) and whether the body is a unary call's (bit 6: one message,
//! taken when the body ends, ops 1 and 2 then do nothing); then steps of `[op u8][n u16 LE]`, followed by `n` bytes for
//! op 0: op 0 is a chunk of the body (read only if the translator wants the body now);
//! op 1 grants `n` bytes of window; op 2 hands the server every message the window lets
//! go; op 3 lets the server consume what it took; op 4 ends the body.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Waker};

use bytes::Bytes;
use rdmarpc_core::account::{Account, Charge, Limit, Limits, Resource, Scope};
use rdmarpc_core::wire::HEADER_LEN;
use rdmarpc_core::Code;

use crate::compress::Encoding;
use crate::deframe::Deframer;
use crate::server::upload::Upload;

/// Where the steps start.
const STEPS_AT: usize = 1;

/// Frame bytes of queued messages past which the body is not read.
const QUEUE_LIMIT: usize = 64 * 1024;

/// The steps of `script`: where each one's bytes start, its op, and `n`.
pub fn steps(script: &[u8]) -> Vec<(usize, u8, usize)> {
    rdmarpc_core::fuzzing::op_steps(script, STEPS_AT)
}

/// An account of its own that holds at most `bytes` of requests (also the unit tests').
pub(crate) fn account(bytes: usize) -> Account {
    let limit = |n| Limit {
        connection: n,
        peer: n,
        server: n,
    };
    Account::standalone(Limits {
        calls: limit(16),
        streams: limit(16),
        bytes: limit(bytes),
        sending: limit(1 << 20),
    })
}

/// Plays `script` against a request stream's translator.
///
/// # Panics
/// When a message is handed over that the body did not carry, or out of order, or past
/// the server's window; when the account holds more than its limit, or anything once
/// every message and the translator are gone; when the call fails for another reason
/// than the body's own (its messages' limits and encoding, or the account's room); or
/// when the translator says it finished with messages unsent.
pub fn grpc_request(script: &[u8]) {
    let Some(&setting) = script.first() else {
        return;
    };
    let (encoding, limit, max, single) = settings(setting);
    let account = account(limit);
    let mut up = if single {
        Upload::single(encoding, account.clone())
    } else {
        Upload::new(encoding, account.clone())
    };
    // The same body, deframed with nothing charged: what must come out.
    let mut reference = Deframer::default();
    reference.set_encoding(encoding);
    let mut expected: Vec<Bytes> = Vec::new();
    let mut handed: Vec<Bytes> = Vec::new();
    let mut taken: Vec<Charge> = Vec::new();
    let mut window = 0i64;
    let mut ended = false;
    for (at, op, n) in steps(script) {
        wait_for_room(&mut up);
        match op {
            0 if !ended && up.wants_body(QUEUE_LIMIT) => {
                let chunk = &script[at..(at + n).min(script.len())];
                if !body_chunk(&mut up, &mut reference, chunk, max, &mut expected) {
                    break;
                }
                if single && expected.len() > 1 {
                    panic!("a unary body of two messages passed");
                }
            }
            1 | 2 if single => {}
            1 => {
                up.grant(n as i64);
                window += n as i64;
            }
            2 => hand_over(&mut up, &mut window, limit, &mut handed, &mut taken),
            3 => taken.clear(),
            4 if single && !ended => {
                up.body_ended();
                ended = true;
                the_one(&mut up, &reference, &expected, &mut taken);
            }
            4 => {
                up.body_ended();
                ended = true;
            }
            _ => {}
        }
        assert!(account.held(Resource::Bytes, Scope::Connection) <= limit.max(1));
        assert!(
            expected.starts_with(&handed),
            "handed over in order, only what came"
        );
        if single && !ended && expected.len() == 1 && reference.held() == 0 {
            // Its one message is here, maybe holding the whole account: the body's end
            // must still be read.
            assert!(
                up.wants_body(QUEUE_LIMIT),
                "a unary body waits for its own room"
            );
        }
        if up.finished() && !single {
            assert_eq!(
                handed.len(),
                expected.len(),
                "finished with messages unsent"
            );
        }
    }
    drop((up, taken));
    assert_eq!(
        account.held(Resource::Bytes, Scope::Connection),
        0,
        "a charge outlived its message"
    );
}

/// What a script's first byte says: the encoding, the account's byte limit, the largest
/// message, and whether the body is a unary call's (bit 6: one message, taken once the
/// body ended).
fn settings(setting: u8) -> (Option<Encoding>, usize, usize, bool) {
    let encoding =
        [None, Some(Encoding::Gzip), Some(Encoding::Zstd), None][usize::from(setting & 3)];
    let limit = [1 << 10, 64 << 10, 1 << 20, 16 << 20][usize::from((setting >> 2) & 3)];
    let max = [0, 100, 64 << 10, 1 << 20][usize::from((setting >> 4) & 3)];
    (encoding, limit, max, setting & 0x40 != 0)
}

/// The server takes every message the window lets go: each within the window, charged
/// at its size in memory (as received, or as inflated) where the account (`limit`) is
/// large enough not to cap it.
fn hand_over(
    up: &mut Upload,
    window: &mut i64,
    limit: usize,
    handed: &mut Vec<Bytes>,
    taken: &mut Vec<Charge>,
) {
    while let Some((message, charge)) = up.next_message() {
        assert!(*window > 0, "a message past the window");
        if limit >= 16 << 20 {
            assert!(
                charge.amount() >= message.bytes().len(),
                "a message charged short"
            );
        }
        *window -= (HEADER_LEN + message.bytes().len()) as i64;
        handed.push(Bytes::copy_from_slice(message.bytes()));
        taken.push(charge);
    }
}

/// A unary body ended: its one message is the body's, or the call fails as the body
/// alone says (none, or cut short).
fn the_one(up: &mut Upload, reference: &Deframer, expected: &[Bytes], taken: &mut Vec<Charge>) {
    match (up.the_one(), expected) {
        (Ok((message, charge)), [one]) if reference.held() == 0 => {
            assert_eq!(message.bytes(), &one[..], "the unary message is the body's");
            taken.push(charge);
        }
        (Err(status), _) if reference.held() > 0 => assert_eq!(status.code(), Code::Internal),
        (Err(status), []) => assert_eq!(status.code(), Code::Unimplemented),
        (got, _) => panic!(
            "{:?} for a body of {} messages, {} bytes left",
            got.map(|(m, _)| m.bytes().len()),
            expected.len(),
            reference.held()
        ),
    }
}

/// A chunk of the body into the translator and the reference; whether the call goes on.
fn body_chunk(
    up: &mut Upload,
    reference: &mut Deframer,
    chunk: &[u8],
    max: usize,
    expected: &mut Vec<Bytes>,
) -> bool {
    let before = expected.len();
    reference.push(chunk);
    let got = up.push_chunk(Bytes::copy_from_slice(chunk), max);
    let wanted = drain(reference, max, expected);
    if let Err(status) = got {
        // A unary body's second message, refused at its first byte.
        let second =
            before >= 1 || expected.len() > 1 || (expected.len() == 1 && reference.held() > 0);
        if status.code() == Code::Unimplemented && second {
            return false;
        }
        // The body's own fault, or no room on the account to inflate.
        let code = status.code();
        let own = wanted.as_ref().err().map(|s| s.code());
        assert!(
            own == Some(code) || code == Code::ResourceExhausted,
            "failed with {status:?}, the body alone gives {own:?}"
        );
        return false;
    }
    assert!(wanted.is_ok(), "the body is bad ({wanted:?}) and passed");
    true
}

/// Resolves a wait for room on the account if the room is there now.
fn wait_for_room(up: &mut Upload) {
    if up.room.is_waiting() {
        let mut cx = Context::from_waker(Waker::noop());
        let granted = pin!(up.room.granted());
        let _ = granted.poll(&mut cx);
    }
}

/// Every message `reference` completes, into `out`; the first error.
fn drain(
    reference: &mut Deframer,
    max: usize,
    out: &mut Vec<Bytes>,
) -> Result<(), rdmarpc_core::Status> {
    while let Some(message) = reference.next(max)? {
        out.push(message);
    }
    Ok(())
}
