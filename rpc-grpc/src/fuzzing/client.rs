//! Target `grpc_client`: the client's call translator (`client/translate.rs`), fed the
//! channel's frames and HTTP/2's events in any order.
//!
//! A script: byte 0 gives the call's kind (bits 0-1: unary, server-streaming,
//! client-streaming, bidirectional), the channel's initial window (bits 2-3: 0, 1, 100,
//! 64 KiB) and the largest response message (bits 4-5: 0, 100 B, 64 KiB, 1 MiB); then
//! steps of `[op u8][n u16 LE]`, followed by `n` bytes for ops 0, 1, 5 and 6:
//! - 0: a request message from the channel, its payload the `n` bytes;
//! - 1: the `n` bytes as a raw frame from the channel;
//! - 2: a window update of `n` credits from the channel; 3: the channel half-closes; 4:
//!   the channel cancels;
//! - 5: the response headers, from bits of the `n` bytes' first two (bit 0: HTTP status
//!   200 or 503, bit 1: a gRPC content-type, bits 2-3: `grpc-encoding` none, gzip, zstd,
//!   or unknown, bit 4: a `grpc-status` (trailers-only), bits 8-12: its code), then the
//!   rest as a header's value;
//! - 6: the `n` bytes as a chunk of the response body (read only if the translator
//!   wants the body); 7: a well-formed response message of `n` bytes, compressed as
//!   the response headers said;
//! - 8: the body ends, with trailers of code `n % 17` (none if `n` is 17 or more);
//! - 9: HTTP/2 lets `n` bytes of the request body go; 10: the server resets the request
//!   stream; 11: the channel takes every frame it may.
//!
//! At the end (unless the call failed or was cancelled), HTTP/2 lets every request byte
//! go and the channel takes every frame, granting the window they need.

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, StatusCode};
use rdmarpc_core::codegen::MethodKind;
use rdmarpc_core::wire::{Flags, Frame, FrameKind, Header};
use rdmarpc_core::{Code, Metadata};

use crate::client::translate::{Exchange, FromChannel};
use crate::compress::Encoding;
use crate::deframe::{self, Deframer};
use crate::frames::frame;

/// Where the steps start.
const STEPS_AT: usize = 1;

/// Frame bytes of response messages waiting for the channel past which the body is not
/// read.
const LIMIT: usize = 64 * 1024;

/// The request stream's window the translator grants the channel when it opens.
const STREAM_WINDOW: u32 = 64 * 1024;

/// The steps of `script`: where each one's bytes start, its op, and `n`.
pub fn steps(script: &[u8]) -> Vec<(usize, u8, usize)> {
    rdmarpc_core::fuzzing::op_steps_with(script, STEPS_AT, carries)
}

/// Whether a step of `op` carries `n` bytes.
pub fn carries(op: u8) -> bool {
    matches!(op, 0 | 1 | 5 | 6)
}

/// What the script did and what the translator let go, to check one against the other.
struct Model {
    kind: MethodKind,
    /// The request messages the translator took from the channel, each with its frame
    /// length (its window).
    requests: Vec<(Bytes, usize)>,
    /// The channel half-closed (or sent its last message).
    half_closed: bool,
    /// DATA sent on HTTP/2, and whether the body was ended.
    data: BytesMut,
    ended: bool,
    /// The request stream was reset by the server: what went before stands.
    reset: bool,
    /// Window granted back to the channel for request messages.
    granted: usize,
    /// The channel's window for response messages, as the channel counts it.
    window: i64,
    /// Frames the channel took: the response's headers, its messages' payloads, the
    /// final frame.
    headed: bool,
    delivered: Vec<Bytes>,
    last: Option<Bytes>,
    /// The response body the translator read, deframed by a plain deframer, and the
    /// messages it holds: what must reach the channel.
    reference: Deframer,
    expected: Vec<Bytes>,
    /// The largest response message.
    max: usize,
    /// The status the response ended with (trailers, or a trailers-only response).
    status: Option<u8>,
    /// The response encoding the headers said, for op 7.
    encoding: Option<Encoding>,
    /// The call failed (the shell would stop here).
    failed: bool,
}

/// Plays `script` against a call's translator.
///
/// # Panics
/// When the translator hands the channel a frame for another call, anything after the
/// final frame, a response message before the headers or past the channel's window; when
/// the response messages that reach the channel are not the body's, in order (a stream),
/// or the final frame's status or message is not the response's; when it fails on a good
/// body or passes a bad one (against a plain deframer of the same body); when the DATA
/// it sends does not decode to the channel's request messages in order, is sent after
/// the body ended, ends it before the channel half-closed, or never ends it once all was
/// sent; or when the window it grants back differs from what the messages that went out
/// whole took.
pub fn grpc_client(script: &[u8]) {
    let Some(&setting) = script.first() else {
        return;
    };
    let kind = super::kind(setting);
    let credits = [0, 1, 100, 64 * 1024][usize::from((setting >> 2) & 3)];
    let max = [0, 100, 64 * 1024, 1 << 20][usize::from((setting >> 4) & 3)];
    let mut request = Header::new(FrameKind::Request, 1);
    request.credits = credits;
    let mut ex = Exchange::new(1, kind, &request, max, LIMIT, None);
    let mut model = Model {
        kind,
        requests: Vec::new(),
        half_closed: false,
        data: BytesMut::new(),
        ended: false,
        reset: false,
        granted: 0,
        window: i64::from(credits),
        headed: false,
        delivered: Vec::new(),
        last: None,
        reference: Deframer::for_responses(),
        expected: Vec::new(),
        max,
        status: None,
        encoding: None,
        failed: false,
    };
    if credits == 0 && kind.server_streams() {
        model.window = i64::from(rdmarpc_core::wire::INITIAL_STREAM_WINDOW);
    }
    if let Some(first) = ex.opened(b"first", STREAM_WINDOW) {
        assert!(!kind.client_streams());
        assert_eq!(first, deframe::frame(b"first"));
        model.ended = true;
    }
    for (at, op, n) in steps(script) {
        let bytes = &script[at.min(script.len())..(at + n).min(script.len())];
        if !play(&mut ex, &mut model, op, n, bytes) {
            return; // cancelled
        }
        if model.failed || ex.is_done() {
            break;
        }
    }
    if model.failed || ex.is_done() {
        return; // the shell stops here
    }
    // Everything goes: the request body as HTTP/2 allows, the responses as the channel
    // grants window for them.
    send(&mut ex, &mut model, usize::MAX);
    end_of_body(&mut ex, &mut model);
    take(&mut ex, &mut model);
    let mut grant = Header::new(FrameKind::WindowUpdate, 1);
    grant.credits = u32::MAX;
    channel_frame(
        &mut ex,
        &mut model,
        &Bytes::copy_from_slice(&grant.encode()),
    );
    take(&mut ex, &mut model);
    if model.half_closed && !model.reset && kind.client_streams() {
        assert!(
            model.ended,
            "the channel half-closed, all was sent, the body goes on"
        );
    }
    if model.last.is_none() && model.status.is_some() {
        panic!("the response ended and the channel never got its final frame");
    }
}

/// One step; `false` once the call is over for the shell (cancelled).
fn play(ex: &mut Exchange, model: &mut Model, op: u8, n: usize, bytes: &[u8]) -> bool {
    match op {
        0 => return channel_frame(ex, model, &message(bytes, false)),
        1 => return channel_frame(ex, model, &Bytes::copy_from_slice(bytes)),
        2 => {
            let mut header = Header::new(FrameKind::WindowUpdate, 1);
            header.credits = n as u32;
            return channel_frame(ex, model, &Bytes::copy_from_slice(&header.encode()));
        }
        3 => return channel_frame(ex, model, &message(b"", true)),
        4 => {
            let cancel = Bytes::copy_from_slice(&Header::new(FrameKind::Cancel, 1).encode());
            return channel_frame(ex, model, &cancel);
        }
        5 => headers(ex, model, bytes),
        6 | 7 => {
            let chunk = if op == 6 {
                Bytes::copy_from_slice(bytes)
            } else {
                deframe::frame_with(&vec![7; n], model.encoding)
            };
            if ex.wants_body() {
                body_chunk(ex, model, &chunk);
            }
        }
        8 => {
            let trailers = (n < 17).then(|| {
                let mut map = HeaderMap::new();
                map.insert("grpc-status", HeaderValue::from(n as u16));
                map
            });
            if ex.wants_body() {
                let ended = ex.on_trailers(trailers.as_ref());
                if ended.is_ok() {
                    let code = if n < 17 {
                        n as u8
                    } else {
                        Code::Internal as u8
                    };
                    model.status = Some(code);
                }
                outcome(ex, model, ended);
            }
        }
        9 => send(ex, model, n),
        10 => {
            ex.request_reset();
            model.reset = true;
            assert_eq!(ex.waiting(), 0);
        }
        11 => take(ex, model),
        _ => {}
    }
    end_of_body(ex, model);
    true
}

/// The shell ends the request body when the translator says so.
fn end_of_body(ex: &mut Exchange, model: &mut Model) {
    if !model.failed && ex.take_end_of_body() {
        assert!(!model.ended, "the body ended twice");
        assert!(
            model.half_closed,
            "the body ended before the channel half-closed"
        );
        model.ended = true;
    }
}

/// A request message frame from the channel.
fn message(payload: &[u8], end: bool) -> Bytes {
    let mut header = Header::new(FrameKind::Message, 1);
    if end {
        header.flags = Flags::END_STREAM;
    }
    frame(header, &Metadata::new(), payload)
}

/// A chunk of the response body into the translator and the reference deframer: the
/// translator fails exactly when the body is bad (or carries a second message where
/// the method returns one).
fn body_chunk(ex: &mut Exchange, model: &mut Model, chunk: &[u8]) {
    model.reference.push(chunk);
    let mut wanted = Ok(());
    while wanted.is_ok() {
        match model.reference.next(model.max) {
            Ok(Some(message)) => model.expected.push(message),
            Ok(None) => break,
            Err(status) => wanted = Err(status),
        }
    }
    let got = ex.on_data(chunk);
    let one_too_many = !model.kind.server_streams() && model.expected.len() > 1;
    match (&got, &wanted) {
        // A second message where the method returns one fails the call when it is cut,
        // whatever follows it.
        (Err((status, _)), _) if one_too_many => assert_eq!(status.code(), Code::Internal),
        (Ok(()), Ok(())) => assert!(!one_too_many, "a second response message passed"),
        (Err(_), Ok(())) => panic!("failed on a good body: {got:?}"),
        (Err((status, _)), Err(own)) => assert_eq!(status.code(), own.code()),
        (Ok(()), Err(own)) => panic!("a bad body passed: {own:?}"),
    }
    outcome(ex, model, got);
}

/// A frame from the channel: what it adds to what must go out. `false`: it cancelled
/// the call.
fn channel_frame(ex: &mut Exchange, model: &mut Model, frame: &Bytes) -> bool {
    let before = ex.waiting();
    let open = !model.ended && !model.half_closed && !model.reset;
    let told = ex.on_channel_frame(frame);
    let Ok(parsed) = Frame::parse(frame) else {
        assert_eq!(told, FromChannel::Noted);
        assert_eq!(ex.waiting(), before, "a malformed frame queued something");
        return true;
    };
    let header = parsed.header;
    match header.kind {
        FrameKind::Cancel => {
            assert_eq!(told, FromChannel::Cancel);
            return false;
        }
        FrameKind::WindowUpdate => model.window += i64::from(header.credits),
        FrameKind::Message => {
            let end = header.flags.contains(Flags::END_STREAM);
            if end && parsed.payload.is_empty() {
                model.half_closed = true;
            } else if open {
                let prefixed = deframe::frame(parsed.payload);
                assert_eq!(ex.waiting(), before + prefixed.len());
                model
                    .requests
                    .push((Bytes::copy_from_slice(parsed.payload), header.frame_len()));
                model.half_closed |= end;
            } else {
                assert_eq!(ex.waiting(), before, "a message queued after the end");
            }
        }
        _ => assert_eq!(ex.waiting(), before),
    }
    assert_eq!(told, FromChannel::Noted);
    end_of_body(ex, model);
    true
}

/// The response headers from the script's bytes.
fn headers(ex: &mut Exchange, model: &mut Model, bytes: &[u8]) {
    let bits = u16::from_le_bytes([
        bytes.first().copied().unwrap_or(0),
        bytes.get(1).copied().unwrap_or(0),
    ]);
    let status = if bits & 1 == 0 {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut map = HeaderMap::new();
    if bits & 2 != 0 {
        map.insert("content-type", HeaderValue::from_static("application/grpc"));
    }
    let encoding = ["", "gzip", "zstd", "snappy"][usize::from((bits >> 2) & 3)];
    if !encoding.is_empty() {
        map.insert("grpc-encoding", HeaderValue::from_static(encoding));
    }
    if bits & 16 != 0 {
        map.insert("grpc-status", HeaderValue::from((bits >> 8) & 31));
    }
    if let Ok(value) = HeaderValue::from_bytes(bytes.get(2..).unwrap_or_default()) {
        map.insert("x-fuzz", value);
    }
    let wanted = ex.wants_headers();
    let got = ex.on_headers(status, &map);
    if wanted && got.is_ok() {
        model.encoding = Encoding::of_headers(&map).ok().flatten();
        model.reference.set_encoding(model.encoding);
        if got == Ok(false) {
            // Trailers-only: the headers' status ends the call.
            model.status = Some(Code::from_u8(((bits >> 8) & 31) as u8) as u8);
        }
    }
    outcome(ex, model, got.map(|_| ()));
}

/// A step that may fail the call: its final frame is then what the channel gets.
fn outcome(
    ex: &mut Exchange,
    model: &mut Model,
    got: Result<(), crate::client::translate::Failure>,
) {
    if let Err((status, flags)) = got {
        assert_ne!(status.code(), Code::Ok, "failed with OK");
        if model.last.is_some() {
            return;
        }
        let last = ex.failed(&status, flags);
        let parsed = Frame::parse(&last).expect("the failure's frame parses");
        assert!(parsed.header.flags.contains(Flags::END_STREAM));
        assert_eq!(parsed.header.status, status.code() as u8);
        model.last = Some(last);
        model.failed = true;
        check_requests(model, false);
    }
}

/// HTTP/2 lets `n` bytes of the request body go.
fn send(ex: &mut Exchange, model: &mut Model, n: usize) {
    let waiting = ex.waiting();
    if waiting == 0 {
        return; // the shell waits for capacity only with bytes to send
    }
    let (data, end) = ex.take_data(n);
    assert_eq!(data.len(), n.min(waiting), "what flow control lets go");
    assert!(!model.ended || data.is_empty(), "DATA after the body ended");
    if end {
        assert!(!model.ended, "the body ended twice");
        assert!(
            model.half_closed,
            "the body ended before the channel half-closed"
        );
        model.ended = true;
    }
    model.data.extend_from_slice(&data);
}

/// The channel takes every frame the translator lets go.
fn take(ex: &mut Exchange, model: &mut Model) {
    while let Some(frame) = ex.next_for_channel() {
        let parsed = Frame::parse(&frame).expect("frames for the channel parse");
        let header = parsed.header;
        assert_eq!(header.call_id, 1, "a frame for another call");
        assert!(model.last.is_none(), "a frame after the final frame");
        match header.kind {
            FrameKind::WindowUpdate => {
                assert!(
                    model.kind.client_streams(),
                    "a request window for no stream"
                );
                model.granted += header.credits as usize;
            }
            FrameKind::Response if header.flags.contains(Flags::END_STREAM) => {
                model.last = Some(frame.clone());
                assert!(ex.is_done());
                check_end(model, header.status, parsed.payload);
            }
            FrameKind::Response => {
                assert!(
                    model.kind.server_streams(),
                    "stream headers for one response"
                );
                assert!(!model.headed, "response headers twice");
                model.headed = true;
            }
            FrameKind::Message => {
                assert!(
                    model.kind.server_streams(),
                    "a message frame for one response"
                );
                assert!(model.headed, "a response message before the headers");
                assert!(model.window > 0, "a message past the channel's window");
                model.window -= frame.len() as i64;
                model.delivered.push(Bytes::copy_from_slice(parsed.payload));
            }
            other => panic!("a {other:?} frame for the channel"),
        }
    }
    check_requests(model, true);
}

/// The final frame of a call that did not fail: the status the response ended with,
/// after every response message of a stream, or with the one message of a unary call.
fn check_end(model: &Model, status: u8, payload: &[u8]) {
    let want = model
        .status
        .expect("a final frame before the response ended");
    assert_eq!(status, want, "the final frame's status");
    if model.kind.server_streams() {
        assert_eq!(
            model.delivered, model.expected,
            "every response message, in order"
        );
    } else if status == Code::Ok as u8 {
        assert_eq!(model.expected.len(), 1);
        assert_eq!(
            payload,
            &model.expected[0][..],
            "the unary response's message"
        );
    }
}

/// The DATA sent decodes to the request messages, in order, and once the channel took
/// every frame (`drained`), the window granted back is the stream's first grant and what
/// the messages that went out whole took.
fn check_requests(model: &Model, drained: bool) {
    if !model.kind.client_streams() {
        assert!(
            model.data.is_empty(),
            "request stream DATA for a single request"
        );
        return;
    }
    let mut d = Deframer::default();
    d.push(&model.data);
    let mut whole = 0;
    let mut sent = 0;
    while let Some(message) = d.next(usize::MAX).expect("the DATA sent deframes") {
        let (expected, charged) = &model.requests[sent];
        assert_eq!(&message, expected, "request message {sent}");
        whole += charged;
        sent += 1;
    }
    if model.ended && !model.reset {
        assert_eq!(
            sent,
            model.requests.len(),
            "the body ended with messages unsent"
        );
        assert_eq!(d.held(), 0);
    }
    if drained {
        assert_eq!(
            model.granted,
            STREAM_WINDOW as usize + whole,
            "window given back"
        );
    }
}
