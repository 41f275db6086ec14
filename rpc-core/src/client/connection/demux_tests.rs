//! The client's demultiplexer with no connection: frames in, calls' outcomes and control
//! frames out.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use parking_lot::Mutex;

use super::{Demux, Heard};
use crate::client::calls::{CallTable, Outcome, Waiter};
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

struct Client {
    calls: Mutex<CallTable<Bytes>>,
    control: Arc<ControlQueue>,
}

impl Client {
    fn new() -> Client {
        Client {
            calls: Mutex::new(CallTable::new()),
            control: Arc::default(),
        }
    }

    fn demux(&self) -> Demux<'_, Bytes, Copies> {
        Demux {
            calls: &self.calls,
            control: &self.control,
            keep: &Copies,
        }
    }

    fn feed(&self, frame: Bytes) -> Result<Heard, Violation> {
        self.demux().frame(frame)
    }

    /// A unary call, sent.
    fn unary(&self) -> (u64, tokio::sync::oneshot::Receiver<Outcome<Bytes>>) {
        let mut calls = self.calls.lock();
        let (id, rx) = calls.insert().expect("admitted");
        let _ = calls.sent();
        (id, rx)
    }

    /// A server-streaming call (with `window` granted), or a bidirectional one with an
    /// outbox of `sends` bytes of window; sent.
    fn stream(&self, window: u32, sends: Option<u32>) -> (u64, Arc<Inbox>, Option<Arc<Outbox>>) {
        let mut calls = self.calls.lock();
        let mut ends = None;
        let id = calls
            .insert_with(|id| {
                let inbox = Arc::new(Inbox::new(id, self.control.clone(), window, window));
                let outbox = sends.map(|w| Arc::new(Outbox::new(w)));
                ends = Some((inbox.clone(), outbox.clone()));
                Waiter::Stream(inbox, outbox)
            })
            .expect("admitted");
        let _ = calls.sent();
        let (inbox, outbox) = ends.expect("made");
        (id, inbox, outbox)
    }

    fn control(&self) -> Vec<(FrameKind, u64, u32)> {
        self.control.take_batch().expect("open")
    }
}

fn frame(kind: FrameKind, call_id: u64, flags: Flags, md: &Metadata, payload: &[u8]) -> Bytes {
    let mut header = Header::new(kind, call_id);
    header.flags = flags;
    header.payload_len = payload.len() as u32;
    let mut out = Vec::new();
    encode_head(&mut header, md, &mut out);
    out.extend_from_slice(payload);
    Bytes::from(out)
}

fn plain(kind: FrameKind, call_id: u64, flags: Flags, payload: &[u8]) -> Bytes {
    frame(kind, call_id, flags, &Metadata::new(), payload)
}

/// Everything the inbox has for its reader now: messages, then the end if it came.
fn drain(inbox: &Inbox) -> (Vec<Bytes>, Option<Result<(), Status>>) {
    inbox.drain_now()
}

#[test]
fn a_unary_response_completes_its_call_once() {
    let client = Client::new();
    let (id, mut rx) = client.unary();
    let response = plain(FrameKind::Response, id, Flags::END_STREAM, b"answer");
    assert_eq!(client.feed(response.clone()), Ok(Heard::Frame));
    assert_eq!(rx.try_recv().expect("answered").expect("ok"), response);
    // A second response (a late duplicate) finds no call: dropped, not a violation.
    assert_eq!(client.feed(response), Ok(Heard::Frame));
    assert_eq!(client.calls.lock().len(), 0);
}

#[test]
fn a_ping_is_answered_and_a_goaway_acknowledged_once() {
    let client = Client::new();
    assert_eq!(
        client.feed(plain(FrameKind::Ping, 5, Flags::default(), b"")),
        Ok(Heard::Frame)
    );
    assert_eq!(client.control(), [(FrameKind::Pong, 5, 0)]);
    let goaway = plain(FrameKind::GoAway, 0, Flags::default(), b"");
    assert_eq!(client.feed(goaway.clone()), Ok(Heard::Draining));
    assert_eq!(client.control(), [(FrameKind::GoAway, 0, 0)]);
    assert_eq!(client.feed(goaway), Ok(Heard::Frame), "draining once");
    assert_eq!(client.control(), []);
}

#[test]
fn a_goaway_is_acknowledged_once_no_request_is_half_sent() {
    let client = Client::new();
    let _unsent = client.calls.lock().insert().expect("admitted");
    let goaway = plain(FrameKind::GoAway, 0, Flags::default(), b"");
    assert_eq!(client.feed(goaway), Ok(Heard::Draining));
    assert_eq!(client.control(), [], "a request is still being sent");
    assert!(client.calls.lock().sent(), "due once it is sent");
}

#[test]
fn a_stream_gets_its_headers_messages_and_trailers_in_order() {
    let client = Client::new();
    let (id, inbox, _) = client.stream(1000, None);
    let mut headers = Metadata::new();
    headers.append("h", "1");
    let head = frame(FrameKind::Response, id, Flags::default(), &headers, b"");
    assert_eq!(client.feed(head), Ok(Heard::Frame));
    for m in [b"one", b"two"] {
        let message = plain(FrameKind::Message, id, Flags::default(), m);
        assert_eq!(client.feed(message), Ok(Heard::Frame));
    }
    let end = plain(FrameKind::Response, id, Flags::END_STREAM, b"");
    assert_eq!(client.feed(end), Ok(Heard::Frame));
    let mut cx = Context::from_waker(Waker::noop());
    match inbox.poll_headers(&mut cx) {
        Poll::Ready(Ok(h)) => assert_eq!(h.get("h"), Some("1")),
        other => panic!("headers: {other:?}"),
    }
    let (messages, end) = drain(&inbox);
    assert_eq!(messages, ["one", "two"]);
    assert_eq!(end, Some(Ok(())));
    assert_eq!(client.calls.lock().len(), 0, "the call ended");
}

#[test]
fn a_stream_ended_with_an_error_status_fails_after_its_messages() {
    let client = Client::new();
    let (id, inbox, _) = client.stream(1000, None);
    let queued = client.feed(plain(FrameKind::Message, id, Flags::default(), b"m"));
    assert_eq!(queued, Ok(Heard::Frame));
    let mut end = Header::new(FrameKind::Response, id);
    end.flags = Flags::END_STREAM;
    end.status = Code::NotFound as u8;
    end.payload_len = 4;
    let mut buf = Vec::new();
    encode_head(&mut end, &Metadata::new(), &mut buf);
    buf.extend_from_slice(b"gone");
    assert_eq!(client.feed(Bytes::from(buf)), Ok(Heard::Frame));
    let (messages, end) = drain(&inbox);
    assert_eq!(messages, ["m"]);
    let status = end.expect("ended").expect_err("failed");
    assert_eq!((status.code(), status.message()), (Code::NotFound, "gone"));
}

#[test]
fn a_message_frame_that_ends_a_stream_is_a_violation() {
    let client = Client::new();
    let (id, _inbox, _) = client.stream(1000, None);
    let message = plain(FrameKind::Message, id, Flags::END_STREAM, b"x");
    assert_eq!(
        client.feed(message),
        Err(Violation::MessageEndsStream { call_id: id })
    );
}

#[test]
fn a_server_that_sends_past_the_window_breaks_the_protocol() {
    let client = Client::new();
    let (id, _inbox, _) = client.stream(100, None);
    // The window is 100: the first message (140 frame bytes) overdraws it, the second
    // is past it.
    let message = plain(FrameKind::Message, id, Flags::default(), &[0; 100]);
    assert_eq!(client.feed(message.clone()), Ok(Heard::Frame));
    assert_eq!(
        client.feed(message),
        Err(Violation::PastWindow { call_id: id })
    );
}

#[test]
fn an_oversized_message_fails_its_stream_and_cancels_it_at_the_server() {
    let client = Client::new();
    let (id, inbox, _) = client.stream(1000, None);
    let mut header = Header::new(FrameKind::Message, id);
    header.flags = Flags::DISCARDED;
    header.payload_len = 1 << 30;
    assert_eq!(
        client.feed(Bytes::copy_from_slice(&header.encode())),
        Ok(Heard::Frame)
    );
    let (messages, end) = drain(&inbox);
    assert!(messages.is_empty());
    let status = end.expect("ended").expect_err("failed");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(client.control(), [(FrameKind::Cancel, id, 0)]);
    assert_eq!(client.calls.lock().len(), 0);
}

#[test]
fn a_stream_answering_a_unary_call_fails_the_call_and_cancels_it() {
    let client = Client::new();
    let (id, mut rx) = client.unary();
    let headers = plain(FrameKind::Response, id, Flags::default(), b"");
    assert_eq!(client.feed(headers), Ok(Heard::Frame));
    let status = rx.try_recv().expect("answered").expect_err("failed");
    assert_eq!(status.code(), Code::Internal);
    assert_eq!(client.control(), [(FrameKind::Cancel, id, 0)]);
}

#[test]
fn window_updates_grant_a_request_stream_up_to_the_maximum() {
    let client = Client::new();
    let (id, _inbox, outbox) = client.stream(1000, Some(10));
    let outbox = outbox.expect("bidirectional");
    let mut update = Header::new(FrameKind::WindowUpdate, id);
    update.credits = 90;
    assert_eq!(
        client.feed(Bytes::copy_from_slice(&update.encode())),
        Ok(Heard::Frame)
    );
    assert_eq!(outbox.window(), 100);
    update.credits = MAX_STREAM_WINDOW as u32;
    assert_eq!(
        client.feed(Bytes::copy_from_slice(&update.encode())),
        Err(Violation::WindowOverflow {
            credits: MAX_STREAM_WINDOW as u32
        })
    );
}

#[test]
fn a_malformed_frame_is_a_violation_and_an_unknown_call_is_not() {
    let client = Client::new();
    let mut bad = plain(FrameKind::Response, 1, Flags::END_STREAM, b"x").to_vec();
    bad[0] ^= 1;
    let err = client.feed(Bytes::from(bad)).expect_err("malformed");
    assert!(
        matches!(err, Violation::Malformed(FrameError::BadMagic(_))),
        "{err:?}"
    );
    for kind in [
        FrameKind::Response,
        FrameKind::Message,
        FrameKind::WindowUpdate,
    ] {
        let stray = plain(kind, 0xdead_0001, Flags::default(), b"");
        assert_eq!(client.feed(stray), Ok(Heard::Frame), "{kind:?}");
    }
}

#[test]
fn a_run_groups_a_streams_messages_and_keeps_every_frame_in_order() {
    let client = Client::new();
    let (a, inbox_a, _) = client.stream(1000, None);
    let (b, inbox_b, _) = client.stream(1000, None);
    let (u, mut rx) = client.unary();
    let message = |id, m: &[u8]| plain(FrameKind::Message, id, Flags::default(), m);
    let mut run = vec![
        message(a, b"a1"),
        message(a, b"a2"),
        plain(FrameKind::GoAway, 0, Flags::default(), b""),
        message(b, b"b1"),
        message(a, b"a3"),
        message(a, b"a4"),
        plain(FrameKind::Response, u, Flags::END_STREAM, b"u"),
    ];
    assert_eq!(client.demux().run(&mut run), Ok(Heard::Draining));
    assert!(run.is_empty());
    assert_eq!(drain(&inbox_a).0, ["a1", "a2", "a3", "a4"]);
    assert_eq!(drain(&inbox_b).0, ["b1"]);
    assert!(rx.try_recv().expect("answered").is_ok());
}

#[test]
fn a_run_stops_at_the_first_violation() {
    let client = Client::new();
    let (a, inbox, _) = client.stream(1000, None);
    let message = |m: &[u8], flags| plain(FrameKind::Message, a, flags, m);
    let mut run = vec![
        message(b"1", Flags::default()),
        message(b"2", Flags::END_STREAM),
        message(b"3", Flags::default()),
    ];
    assert_eq!(
        client.demux().run(&mut run),
        Err(Violation::MessageEndsStream { call_id: a })
    );
    assert_eq!(drain(&inbox).0, ["1"]);
}

/// Frames back to back in one buffer, as a byte stream's read buffer holds them.
fn concat(frames: &[Bytes]) -> Vec<u8> {
    frames.iter().flat_map(|f| f.iter().copied()).collect()
}

#[test]
fn a_run_of_messages_in_one_buffer_reaches_each_stream_in_order() {
    let client = Client::new();
    let (a, inbox_a, _) = client.stream(1 << 20, None);
    let (b, inbox_b, _) = client.stream(1 << 20, None);
    let (gone, inbox_gone, _) = client.stream(1 << 20, None);
    client.calls.lock().take(gone);
    let message = |id, payload: &[u8]| plain(FrameKind::Message, id, Flags::default(), payload);
    let run = concat(&[
        message(a, b"a1"),
        message(a, b"a2"),
        message(b, b"b1"),
        message(gone, b"lost"),
        message(a, b"a3"),
    ]);
    assert_eq!(client.demux().messages(&run), Ok(Heard::Frame));
    let (messages, end) = drain(&inbox_a);
    assert_eq!(messages, ["a1", "a2", "a3"]);
    assert!(end.is_none());
    // Copied out: a queued message never keeps the transport's read buffer alive.
    let read_buffer = run.as_ptr_range();
    assert!(messages.iter().all(|m| !read_buffer.contains(&m.as_ptr())));
    assert_eq!(drain(&inbox_b).0, ["b1"]);
    assert!(drain(&inbox_gone).0.is_empty(), "a stream no longer open");
    // Each message is charged its frame, as one by one.
    let (c, inbox_c, _) = client.stream(1 << 20, None);
    let frames = [message(c, b"x"), message(c, b"yy")];
    assert_eq!(client.demux().messages(&concat(&frames)), Ok(Heard::Frame));
    assert_eq!(inbox_c.buffered(), frames[0].len() + frames[1].len());
}

fn meta() -> Metadata {
    let mut md = Metadata::new();
    md.append("k", "v");
    md
}

#[test]
fn a_run_past_a_streams_window_queues_what_the_window_allowed_then_is_a_violation() {
    let client = Client::new();
    let (id, inbox, _) = client.stream(100, None);
    let message = plain(FrameKind::Message, id, Flags::default(), &[7; 40]);
    // 80 bytes a frame: the second is sent at 20 left (allowed), the third at -60.
    let run = concat(&[message.clone(), message.clone(), message]);
    assert_eq!(
        client.demux().messages(&run),
        Err(Violation::PastWindow { call_id: id })
    );
    assert_eq!(drain(&inbox).0.len(), 2);
}

#[test]
fn a_run_that_is_not_whole_plain_messages_is_a_violation() {
    let client = Client::new();
    let (id, inbox, _) = client.stream(1 << 20, None);
    let message = plain(FrameKind::Message, id, Flags::default(), b"m");
    for bad in [
        concat(&[
            message.clone(),
            plain(FrameKind::Response, id, Flags::END_STREAM, b""),
        ]),
        concat(&[
            message.clone(),
            plain(FrameKind::Message, id, Flags::END_STREAM, b""),
        ]),
        concat(&[message.clone(), message.slice(..message.len() - 1)]),
        concat(&[
            message.clone(),
            frame(FrameKind::Message, id, Flags::default(), &meta(), b""),
        ]),
        b"not a frame".to_vec(),
    ] {
        assert!(
            matches!(client.demux().messages(&bad), Err(Violation::Malformed(_))),
            "{bad:?}"
        );
    }
    // What came before the bad frame was delivered.
    assert_eq!(drain(&inbox).0.len(), 4);
}
