//! The server's demultiplexer with no connection: frames in, the streams' messages and
//! the shell's actions out.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use super::super::streams::StreamEnds;
use super::{Action, Demux};
use crate::control::ControlQueue;
use crate::stream::{Inbox, Keep, Outbox};
use crate::violation::Violation;
use crate::wire::{encode_head, Flags, FrameError, FrameKind, Header, MAX_STREAM_WINDOW};
use crate::{Code, Metadata, Status};

/// Copies every payload out (as a transport that keeps nothing).
struct Copies;

impl Keep<Bytes> for Copies {
    fn keep(&self, frame: Bytes) -> Result<Bytes, Bytes> {
        Err(frame)
    }
}

const MAX: usize = 1000;

struct Server {
    streams: Mutex<HashMap<u64, StreamEnds>>,
    control: Arc<ControlQueue>,
}

impl Server {
    fn new() -> Server {
        Server {
            streams: Mutex::default(),
            control: Arc::default(),
        }
    }

    fn feed(&self, frame: Bytes) -> Result<Action<Bytes>, Violation> {
        let demux = Demux {
            streams: &self.streams,
            keep: &Copies,
            max_message_size: MAX,
        };
        demux.frame(frame)
    }

    /// A bidirectional call's streams: `window` bytes granted to the client, `sends`
    /// granted by it.
    fn open(&self, id: u64, window: u32, sends: u32) -> (Arc<Inbox>, Arc<Outbox>) {
        let inbox = Arc::new(Inbox::new(id, self.control.clone(), window, window));
        let outbox = Arc::new(Outbox::new(sends));
        let ends = StreamEnds {
            serial: 1,
            inbox: Some(inbox.clone()),
            outbox: Some(outbox.clone()),
        };
        self.streams.lock().insert(id, ends);
        (inbox, outbox)
    }
}

fn plain(kind: FrameKind, call_id: u64, flags: Flags, payload: &[u8]) -> Bytes {
    let mut header = Header::new(kind, call_id);
    header.flags = flags;
    header.payload_len = payload.len() as u32;
    let mut out = Vec::new();
    encode_head(&mut header, &Metadata::new(), &mut out);
    out.extend_from_slice(payload);
    Bytes::from(out)
}

/// Everything the inbox has for its reader now: messages, then the end if it came.
fn drain(inbox: &Inbox) -> (Vec<Bytes>, Option<Result<(), Status>>) {
    inbox.drain_now()
}

#[test]
fn requests_pings_and_goaways_are_the_shells() {
    let server = Server::new();
    let request = plain(FrameKind::Request, 9, Flags::END_STREAM, b"req");
    match server.feed(request.clone()) {
        Ok(Action::Request { buf, header }) => {
            assert_eq!(buf, request);
            assert_eq!((header.call_id, header.payload_len), (9, 3));
        }
        other => panic!("{other:?}"),
    }
    let ping = plain(FrameKind::Ping, 4, Flags::default(), b"");
    assert!(matches!(server.feed(ping), Ok(Action::Pong(4))));
    let goaway = plain(FrameKind::GoAway, 0, Flags::default(), b"");
    assert!(matches!(server.feed(goaway), Ok(Action::GoAway)));
}

#[test]
fn a_response_from_the_client_is_a_violation() {
    let server = Server::new();
    let response = plain(FrameKind::Response, 1, Flags::END_STREAM, b"");
    assert!(matches!(
        server.feed(response),
        Err(Violation::ResponseFromClient)
    ));
}

#[test]
fn a_cancel_ends_the_calls_streams_and_asks_the_shell_to_stop_it() {
    let server = Server::new();
    let (inbox, outbox) = server.open(3, 1000, 1000);
    let cancel = plain(FrameKind::Cancel, 3, Flags::default(), b"");
    assert!(matches!(
        server.feed(cancel.clone()),
        Ok(Action::Cancelled(3))
    ));
    let (_, end) = drain(&inbox);
    assert_eq!(
        end.expect("ended").expect_err("failed").code(),
        Code::Cancelled
    );
    assert!(outbox.is_closed());
    assert!(server.streams.lock().is_empty());
    // A cancel for a call with no streams (unary, or gone) still reaches the shell.
    assert!(matches!(server.feed(cancel), Ok(Action::Cancelled(3))));
}

#[test]
fn a_request_stream_queues_messages_until_its_half_close() {
    let server = Server::new();
    let (inbox, _) = server.open(5, 1000, 0);
    for m in [&b"one"[..], b"two"] {
        let message = plain(FrameKind::Message, 5, Flags::default(), m);
        assert!(matches!(server.feed(message), Ok(Action::Done)));
    }
    let half_close = plain(FrameKind::Message, 5, Flags::END_STREAM, b"");
    assert!(matches!(server.feed(half_close.clone()), Ok(Action::Done)));
    // Nothing may follow the half-close.
    assert_eq!(
        server
            .feed(plain(FrameKind::Message, 5, Flags::default(), b"x"))
            .err(),
        Some(Violation::MessageAfterEnd { call_id: 5 })
    );
    assert_eq!(
        server.feed(half_close).err(),
        Some(Violation::EndedTwice { call_id: 5 })
    );
    assert_eq!(
        drain(&inbox),
        (vec![Bytes::from("one"), Bytes::from("two")], Some(Ok(())))
    );
}

#[test]
fn a_half_close_with_a_payload_is_a_violation() {
    let server = Server::new();
    server.open(5, 1000, 0);
    let half_close = plain(FrameKind::Message, 5, Flags::END_STREAM, b"x");
    assert_eq!(
        server.feed(half_close).err(),
        Some(Violation::HalfCloseWithPayload { call_id: 5 })
    );
}

#[test]
fn a_client_past_its_window_breaks_the_protocol() {
    let server = Server::new();
    server.open(5, 100, 0);
    let message = plain(FrameKind::Message, 5, Flags::default(), &[1; 100]);
    assert!(matches!(server.feed(message.clone()), Ok(Action::Done)));
    assert_eq!(
        server.feed(message).err(),
        Some(Violation::PastWindow { call_id: 5 })
    );
}

#[test]
fn an_oversized_message_fails_its_stream_not_the_connection() {
    for discarded in [false, true] {
        let server = Server::new();
        let (inbox, _) = server.open(5, 1 << 20, 0);
        let mut header = Header::new(FrameKind::Message, 5);
        header.payload_len = MAX as u32 + 1;
        let frame = if discarded {
            header.flags = Flags::DISCARDED;
            Bytes::copy_from_slice(&header.encode())
        } else {
            plain(FrameKind::Message, 5, Flags::default(), &[0; MAX + 1])
        };
        assert!(matches!(server.feed(frame), Ok(Action::Done)));
        let (messages, end) = drain(&inbox);
        assert!(messages.is_empty());
        let status = end.expect("ended").expect_err("failed");
        assert_eq!(
            status.code(),
            Code::ResourceExhausted,
            "discarded: {discarded}"
        );
    }
}

#[test]
fn window_updates_grant_a_response_stream_up_to_the_maximum() {
    let server = Server::new();
    let (_, outbox) = server.open(5, 1000, 10);
    let mut update = Header::new(FrameKind::WindowUpdate, 5);
    update.credits = 90;
    let frame = Bytes::copy_from_slice(&update.encode());
    assert!(matches!(server.feed(frame), Ok(Action::Done)));
    assert_eq!(outbox.window(), 100);
    update.credits = MAX_STREAM_WINDOW as u32;
    assert_eq!(
        server.feed(Bytes::copy_from_slice(&update.encode())).err(),
        Some(Violation::WindowOverflow {
            credits: MAX_STREAM_WINDOW as u32
        })
    );
}

#[test]
fn frames_for_streams_no_longer_open_are_dropped_and_malformed_ones_are_not() {
    let server = Server::new();
    for kind in [FrameKind::Message, FrameKind::WindowUpdate] {
        let stray = plain(kind, 77, Flags::default(), b"x");
        assert!(matches!(server.feed(stray), Ok(Action::Done)), "{kind:?}");
    }
    let mut bad = plain(FrameKind::Message, 77, Flags::default(), b"x").to_vec();
    bad[3] = 0xee;
    assert_eq!(
        server.feed(Bytes::from(bad)).err(),
        Some(Violation::Malformed(FrameError::UnknownKind(0xee)))
    );
}
