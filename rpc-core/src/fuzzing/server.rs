//! Target `server_demux`: the server's demultiplexer on a script of frames against a
//! unary call and calls streaming each way, each frame's outcome checked against the
//! protocol's rules.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use super::script::{self, header, payload, Copies, Reader, CALLS};
use crate::control::ControlQueue;
use crate::server::connection::demux::{Action, Demux};
use crate::server::connection::streams::StreamEnds;
use crate::stream::{Inbox, Outbox};
use crate::violation::Violation;
use crate::wire::{Flags, Frame, FrameKind, Header, MAX_STREAM_WINDOW};
use crate::Code;

/// Largest request message accepted.
const MAX_MESSAGE: usize = 512;

/// Where a request stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    HalfClosed,
    /// Failed (oversized message, cancelled): later messages are dropped.
    Failed,
}

/// One call's streams as the test sees them.
struct Call {
    inbox: Option<(Arc<Inbox>, Reader, Phase)>,
    outbox: Option<(Arc<Outbox>, i64)>,
    /// Frame bytes of messages accepted.
    accepted: usize,
}

/// Plays `script` against the server's demultiplexer.
///
/// # Panics
/// When a frame's outcome breaks the call protocol's rules: a request, ping, cancel or
/// GOAWAY not handed to the shell as itself, a message delivered that was not fed or out
/// of order, a violation reported for a frame that keeps the rules or none for one that
/// breaks them, a window granted wrong.
pub fn server_demux(script: &[u8]) {
    let control = Arc::new(ControlQueue::default());
    let streams = Mutex::new(HashMap::new());
    let window = script::window(script);
    let ids: [u64; CALLS] = [1, 2, 3, 4];
    let mut calls: Vec<Call> = Vec::new();
    for (i, &id) in ids.iter().enumerate() {
        let kind = script::kind(script, i);
        let inbox =
            (kind & 1 == 1).then(|| Arc::new(Inbox::new(id, control.clone(), window, window)));
        let outbox = (kind >= 2).then(|| Arc::new(Outbox::new(0)));
        if kind != 0 {
            let ends = StreamEnds {
                serial: 1,
                inbox: inbox.clone(),
                outbox: outbox.clone(),
            };
            streams.lock().insert(id, ends);
        }
        calls.push(Call {
            inbox: inbox.map(|i| {
                let reader = Reader {
                    checks: true,
                    ..Reader::default()
                };
                (i, reader, Phase::Open)
            }),
            outbox: outbox.map(|o| {
                let window = o.window();
                (o, window)
            }),
            accepted: 0,
        });
    }
    let demux = Demux {
        streams: &streams,
        keep: &Copies,
        max_message_size: MAX_MESSAGE,
    };
    for step in script::steps(script, &ids) {
        if step.is_read() {
            for call in &mut calls {
                if let Some((inbox, reader, _)) = &mut call.inbox {
                    reader.read(inbox);
                }
            }
            continue;
        }
        let frame = Bytes::from(step.bytes);
        let got = demux.frame(frame.clone());
        let Some(h) = header(&frame) else {
            let err = Frame::parse(&frame).expect_err("malformed");
            assert!(matches!(got, Err(Violation::Malformed(e)) if e == err));
            return;
        };
        let call = ids.iter().position(|&id| id == h.call_id);
        let live = call.filter(|_| streams.lock().contains_key(&h.call_id));
        let go_on = check(&h, &frame, got, live.map(|i| &mut calls[i]), window);
        if !go_on {
            return;
        }
    }
}

/// Checks one frame's outcome; whether the connection goes on.
fn check(
    h: &Header,
    frame: &Bytes,
    got: Result<Action<Bytes>, Violation>,
    call: Option<&mut Call>,
    window: u32,
) -> bool {
    match h.kind {
        FrameKind::Request => match got {
            Ok(Action::Request { buf, header }) => {
                assert_eq!((&buf, &header), (frame, h), "the request as it came");
            }
            other => panic!("a request: {other:?}"),
        },
        FrameKind::Response => {
            assert!(matches!(got, Err(Violation::ResponseFromClient)), "{got:?}");
            return false;
        }
        FrameKind::Ping => assert!(matches!(got, Ok(Action::Pong(id)) if id == h.call_id)),
        FrameKind::GoAway => assert!(matches!(got, Ok(Action::GoAway))),
        FrameKind::Cancel => {
            assert!(matches!(got, Ok(Action::Cancelled(id)) if id == h.call_id));
            if let Some(call) = call {
                cancelled(call);
            }
        }
        FrameKind::Message => return message(h, frame, got, call, window),
        FrameKind::WindowUpdate => return grant(h, got, call),
        _ => assert!(matches!(got, Ok(Action::Done)), "{:?}: {got:?}", h.kind),
    }
    true
}

/// The call's streams ended: its request stream fails CANCELLED (queued messages
/// dropped) unless it had ended; its response stream stops.
fn cancelled(call: &mut Call) {
    if let Some((inbox, reader, phase)) = &mut call.inbox {
        let ended_before = *phase == Phase::Failed || reader.end.is_some();
        reader.read(inbox);
        if !ended_before {
            let end = reader.end.as_ref().expect("ended");
            assert_eq!(
                end.as_ref().map_err(|s| s.code()).err(),
                Some(Code::Cancelled)
            );
        }
        *phase = Phase::Failed;
    }
}

/// Checks a message frame's outcome; whether the connection goes on.
fn message(
    h: &Header,
    frame: &Bytes,
    got: Result<Action<Bytes>, Violation>,
    call: Option<&mut Call>,
    window: u32,
) -> bool {
    let id = h.call_id;
    let Some(Call {
        inbox: Some((inbox, reader, phase)),
        accepted,
        ..
    }) = call
    else {
        assert!(
            matches!(got, Ok(Action::Done)),
            "a message for no stream: {got:?}"
        );
        return true;
    };
    let oversized = h.flags.contains(Flags::DISCARDED) || h.payload_len as usize > MAX_MESSAGE;
    let end = h.flags.contains(Flags::END_STREAM);
    let over = *phase == Phase::Failed || reader.end.is_some();
    if oversized {
        assert!(matches!(got, Ok(Action::Done)), "oversized: {got:?}");
        if !over {
            reader.read(inbox);
            let end = reader.end.as_ref().expect("failed");
            let code = end.as_ref().map_err(|s| s.code()).err();
            assert_eq!(code, Some(Code::ResourceExhausted));
            *phase = Phase::Failed;
        }
        return true;
    }
    if end && h.payload_len != 0 {
        assert!(matches!(got, Err(Violation::HalfCloseWithPayload { call_id }) if call_id == id));
        return false;
    }
    if over {
        assert!(matches!(got, Ok(Action::Done)), "after the end: {got:?}");
        return true;
    }
    match (*phase, end) {
        (Phase::HalfClosed, _) => {
            let expected = if end {
                Violation::EndedTwice { call_id: id }
            } else {
                Violation::MessageAfterEnd { call_id: id }
            };
            assert!(matches!(&got, Err(v) if *v == expected), "{got:?}");
            false
        }
        (_, true) => {
            assert!(matches!(got, Ok(Action::Done)), "a half-close: {got:?}");
            *phase = Phase::HalfClosed;
            true
        }
        (_, false) => match got {
            Ok(Action::Done) => {
                reader.fed.push(payload(frame));
                *accepted += h.frame_len();
                true
            }
            Err(Violation::PastWindow { call_id }) if call_id == id => {
                let n = *accepted;
                assert!(
                    n >= window as usize,
                    "past a window of {window} after {n} bytes"
                );
                false
            }
            other => panic!("a message: {other:?}"),
        },
    }
}

/// Checks a window update's outcome; whether the connection goes on.
fn grant(h: &Header, got: Result<Action<Bytes>, Violation>, call: Option<&mut Call>) -> bool {
    let Some((outbox, granted)) = call.and_then(|c| c.outbox.as_mut()) else {
        assert!(
            matches!(got, Ok(Action::Done)),
            "a grant for no stream: {got:?}"
        );
        return true;
    };
    let window = *granted + i64::from(h.credits);
    if window > MAX_STREAM_WINDOW {
        let expected = Violation::WindowOverflow { credits: h.credits };
        assert!(matches!(&got, Err(v) if *v == expected), "{got:?}");
        return false;
    }
    assert!(matches!(got, Ok(Action::Done)), "a grant: {got:?}");
    *granted = window;
    assert_eq!(outbox.window(), window);
    true
}

/// Scripts that exercise each kind of call, as the corpus started.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    use super::script::{frame, step};
    let end = Flags::END_STREAM.0;
    // Calls: 0 unary, 1 client-streaming, 2 server-streaming, 3 bidirectional.
    let kinds = 0b11_10_01_00;
    let streams = [
        step(0, frame(FrameKind::Request, 0, end, b"request")),
        step(1, frame(FrameKind::Message, 0, 0, b"one")),
        step(3, frame(FrameKind::Message, 0, 0, &[2; 100])),
        step(0xff, Vec::new()),
        step(2, frame(FrameKind::WindowUpdate, 0, 0, b"")),
        step(1, frame(FrameKind::Message, 0, end, b"")),
        step(0x80, frame(FrameKind::Ping, 9, 0, b"")),
        step(3, frame(FrameKind::Cancel, 0, 0, b"")),
        step(1, frame(FrameKind::Message, 0, 0, b"late")),
        step(0x80, frame(FrameKind::GoAway, 0, 0, b"")),
    ]
    .concat();
    let mut seeds = vec![("seed-streams".into(), [vec![kinds, 1], streams].concat())];
    let violations = [
        step(3, frame(FrameKind::Message, 0, Flags::DISCARDED.0, b"")),
        step(1, frame(FrameKind::Message, 0, end, b"x")),
    ]
    .concat();
    seeds.push((
        "seed-violation".into(),
        [vec![kinds, 0], violations].concat(),
    ));
    seeds
}
