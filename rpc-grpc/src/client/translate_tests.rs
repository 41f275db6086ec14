//! The client's call translator with no HTTP/2 connection: the channel's frames and
//! HTTP/2's events in, frames for the channel and request DATA out.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use rdmarpc_core::codegen::MethodKind;
use rdmarpc_core::wire::{Flags, Frame, FrameKind, Header, HEADER_LEN};
use rdmarpc_core::{Code, Metadata, MAX_METADATA_LEN};

use super::{Exchange, FromChannel};
use crate::compress::Encoding;
use crate::deframe::{frame as prefixed, frame_with, Deframer};
use crate::frames::frame;

const MAX: usize = 1 << 20;
const LIMIT: usize = 64 * 1024;

fn exchange(kind: MethodKind, credits: u32) -> Exchange {
    let mut header = Header::new(FrameKind::Request, 1);
    header.credits = credits;
    Exchange::new(1, kind, &header, MAX, LIMIT, None)
}

fn grpc_headers(extra: &[(&'static str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    map.insert("content-type", HeaderValue::from_static("application/grpc"));
    for (name, value) in extra {
        map.insert(*name, HeaderValue::from_str(value).unwrap());
    }
    map
}

fn message(payload: &[u8], end: bool) -> Bytes {
    let mut header = Header::new(FrameKind::Message, 1);
    if end {
        header.flags = Flags::END_STREAM;
    }
    frame(header, &Metadata::new(), payload)
}

fn window_update(credits: u32) -> Bytes {
    let mut header = Header::new(FrameKind::WindowUpdate, 1);
    header.credits = credits;
    Bytes::copy_from_slice(&header.encode())
}

/// Every frame the exchange lets go now.
fn drain(ex: &mut Exchange) -> Vec<Bytes> {
    std::iter::from_fn(|| ex.next_for_channel()).collect()
}

fn kinds(frames: &[Bytes]) -> Vec<FrameKind> {
    frames
        .iter()
        .map(|f| Frame::parse(f).unwrap().header.kind)
        .collect()
}

#[test]
fn a_unary_call_ends_with_its_message_headers_and_trailers_in_one_frame() {
    let mut ex = exchange(MethodKind::Unary, 0);
    let data = ex
        .opened(b"ask", 65_535)
        .expect("one message, sent at once");
    assert_eq!(data, prefixed(b"ask"));
    assert_eq!(ex.waiting(), 0);
    assert!(ex.wants_headers() && !ex.wants_body());
    let headers = grpc_headers(&[("x-head", "h")]);
    assert!(ex.on_headers(StatusCode::OK, &headers).unwrap());
    assert!(
        drain(&mut ex).is_empty(),
        "a unary call's headers wait for its end"
    );
    let body = prefixed(b"answer");
    ex.on_data(&body[..3]).unwrap();
    ex.on_data(&body[3..]).unwrap();
    assert!(drain(&mut ex).is_empty());
    ex.on_trailers(Some(&grpc_headers(&[
        ("grpc-status", "0"),
        ("x-tail", "t"),
    ])))
    .unwrap();
    let frames = drain(&mut ex);
    assert_eq!(frames.len(), 1);
    let last = Frame::parse(&frames[0]).unwrap();
    assert!(last.header.flags.contains(Flags::END_STREAM));
    assert_eq!(last.header.status, Code::Ok as u8);
    assert_eq!(last.payload, b"answer");
    let md = Metadata::decode(last.metadata).unwrap();
    assert_eq!(md.get("x-head"), Some("h"));
    assert!(ex.is_done());
    assert!(ex.next_for_channel().is_none(), "nothing after the end");
}

#[test]
fn stream_messages_wait_for_the_channels_window_and_hold_back_the_body() {
    let mut ex = exchange(MethodKind::ServerStreaming, 100);
    assert!(ex.opened(b"", 65_535).is_some());
    assert!(ex.on_headers(StatusCode::OK, &grpc_headers(&[])).unwrap());
    let body: Vec<u8> = (0..3).flat_map(|_| prefixed(&[7; 90]).to_vec()).collect();
    ex.on_data(&body).unwrap();
    // The headers, then one message (the window of 100 lets one of 90 + header go).
    assert_eq!(
        kinds(&drain(&mut ex)),
        [FrameKind::Response, FrameKind::Message]
    );
    assert_eq!(ex.queued_bytes(), 2 * (HEADER_LEN + 90));
    // The window is overdrawn; a grant that brings it back over zero lets one more go.
    let overdrawn = (HEADER_LEN + 90 - 100) as u32;
    ex.on_channel_frame(&window_update(overdrawn));
    assert!(drain(&mut ex).is_empty(), "the window is at zero");
    assert_eq!(ex.on_channel_frame(&window_update(1)), FromChannel::Noted);
    assert_eq!(kinds(&drain(&mut ex)), [FrameKind::Message]);
    ex.on_trailers(Some(&grpc_headers(&[("grpc-status", "0")])))
        .unwrap();
    assert!(drain(&mut ex).is_empty(), "the end waits behind a message");
    ex.on_channel_frame(&window_update(1 << 20));
    assert_eq!(
        kinds(&drain(&mut ex)),
        [FrameKind::Message, FrameKind::Response]
    );
    assert!(ex.is_done());

    // Past the limit of waiting bytes, the body is not read.
    let mut ex = exchange(MethodKind::ServerStreaming, 1);
    ex.on_headers(StatusCode::OK, &grpc_headers(&[])).unwrap();
    assert!(ex.wants_body());
    ex.on_data(&prefixed(&[0; 10])).unwrap();
    ex.on_data(&prefixed(&vec![0; LIMIT])).unwrap();
    let _ = drain(&mut ex);
    assert!(!ex.wants_body(), "{} bytes wait", ex.queued_bytes());
    ex.on_channel_frame(&window_update(1 << 20));
    let _ = drain(&mut ex);
    assert!(ex.wants_body());
}

#[test]
fn request_messages_go_as_capacity_allows_and_give_their_window_back_whole() {
    let mut ex = exchange(MethodKind::ClientStreaming, 0);
    assert!(
        ex.opened(b"", 4096).is_none(),
        "a stream's messages come later"
    );
    let grant = Frame::parse(&drain(&mut ex)[0]).unwrap().header;
    assert_eq!((grant.kind, grant.credits), (FrameKind::WindowUpdate, 4096));
    let (a, b) = (message(&[1; 100], false), message(&[2; 50], true));
    ex.on_channel_frame(&a);
    ex.on_channel_frame(&b);
    assert_eq!(ex.waiting(), 105 + 55);
    let (first, end) = ex.take_data(60);
    assert_eq!((first.len(), end), (60, false));
    assert!(drain(&mut ex).is_empty(), "no message went out whole yet");
    let (rest, end) = ex.take_data(1000);
    assert!(end, "the last message ends the body");
    let grant = Frame::parse(&drain(&mut ex)[0]).unwrap().header;
    assert_eq!(grant.credits as usize, a.len() + b.len());
    let mut d = Deframer::default();
    d.push(&first);
    d.push(&rest);
    assert_eq!(d.next(MAX).unwrap().unwrap(), vec![1; 100]);
    assert_eq!(d.next(MAX).unwrap().unwrap(), vec![2; 50]);
    assert!(!ex.take_end_of_body(), "ended once");
    // Nothing is taken after the end.
    ex.on_channel_frame(&message(b"late", false));
    assert_eq!(ex.waiting(), 0);
}

#[test]
fn a_half_close_with_nothing_queued_ends_the_body_once() {
    let mut ex = exchange(MethodKind::Streaming, 0);
    ex.opened(b"", 4096);
    assert!(!ex.take_end_of_body());
    ex.on_channel_frame(&message(b"", true));
    assert!(ex.take_end_of_body());
    assert!(!ex.take_end_of_body());
}

#[test]
fn a_reset_request_stream_drops_what_waits_and_a_cancel_is_told() {
    let mut ex = exchange(MethodKind::Streaming, 0);
    ex.opened(b"", 4096);
    ex.on_channel_frame(&message(&[0; 10], false));
    ex.request_reset();
    assert_eq!(ex.waiting(), 0);
    ex.on_channel_frame(&message(&[0; 10], false));
    assert_eq!(ex.waiting(), 0, "nothing is queued after a reset");
    let cancel = Bytes::copy_from_slice(&Header::new(FrameKind::Cancel, 1).encode());
    assert_eq!(ex.on_channel_frame(&cancel), FromChannel::Cancel);
}

#[test]
fn a_trailers_only_response_ends_the_call_with_its_status() {
    let mut ex = exchange(MethodKind::ServerStreaming, 0);
    let headers = grpc_headers(&[("grpc-status", "5"), ("grpc-message", "not%20here")]);
    assert!(!ex.on_headers(StatusCode::OK, &headers).unwrap());
    assert!(!ex.wants_body() && !ex.wants_headers());
    let frames = drain(&mut ex);
    assert_eq!(frames.len(), 1);
    let last = Frame::parse(&frames[0]).unwrap();
    assert_eq!(last.header.status, Code::NotFound as u8);
    assert_eq!(last.payload, b"not here");
    assert!(ex.is_done());
}

#[test]
fn responses_that_are_not_grpc_fail_with_the_mapped_status() {
    let code = |status, headers: &HeaderMap| {
        let mut ex = exchange(MethodKind::Unary, 0);
        ex.on_headers(status, headers).unwrap_err().0.code()
    };
    let grpc = grpc_headers(&[]);
    assert_eq!(code(StatusCode::NOT_FOUND, &grpc), Code::Unimplemented);
    assert_eq!(code(StatusCode::BAD_GATEWAY, &grpc), Code::Unavailable);
    let mut html = HeaderMap::new();
    html.insert("content-type", HeaderValue::from_static("text/html"));
    assert_eq!(code(StatusCode::OK, &html), Code::Unknown);
    let odd = grpc_headers(&[("grpc-encoding", "snappy-ish")]);
    assert_eq!(code(StatusCode::OK, &odd), Code::Internal);
}

#[test]
fn bad_bodies_fail_the_call() {
    let headed = |kind| {
        let mut ex = exchange(kind, 0);
        ex.on_headers(StatusCode::OK, &grpc_headers(&[])).unwrap();
        ex
    };
    // A prefix past the limit is refused before its body arrives.
    let mut ex = headed(MethodKind::ServerStreaming);
    let mut lie = vec![0u8];
    lie.extend_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(
        ex.on_data(&lie).unwrap_err().0.code(),
        Code::ResourceExhausted
    );
    // A compressed message with no grpc-encoding.
    let mut ex = headed(MethodKind::Unary);
    let zipped = frame_with(&[1; 4096], Some(Encoding::Gzip));
    assert_eq!(ex.on_data(&zipped).unwrap_err().0.code(), Code::Internal);
    // Two messages where the method returns one.
    let mut ex = headed(MethodKind::Unary);
    let two = [prefixed(b"a").to_vec(), prefixed(b"b").to_vec()].concat();
    assert_eq!(ex.on_data(&two).unwrap_err().0.code(), Code::Internal);
    // The body ends inside a message, or OK with no message.
    let ok = grpc_headers(&[("grpc-status", "0")]);
    let mut ex = headed(MethodKind::Unary);
    ex.on_data(&prefixed(b"half")[..4]).unwrap();
    assert_eq!(
        ex.on_trailers(Some(&ok)).unwrap_err().0.code(),
        Code::Internal
    );
    let mut ex = headed(MethodKind::Unary);
    assert_eq!(
        ex.on_trailers(Some(&ok)).unwrap_err().0.code(),
        Code::Internal
    );
    // No trailers at all.
    let mut ex = headed(MethodKind::ServerStreaming);
    ex.on_trailers(None).unwrap();
    let last = drain(&mut ex).pop().unwrap();
    assert_eq!(
        Frame::parse(&last).unwrap().header.status,
        Code::Internal as u8
    );
}

#[test]
fn compressed_responses_are_inflated() {
    let mut ex = exchange(MethodKind::Unary, 0);
    let headers = grpc_headers(&[("grpc-encoding", "gzip")]);
    ex.on_headers(StatusCode::OK, &headers).unwrap();
    let message = vec![b'x'; 50_000];
    ex.on_data(&frame_with(&message, Some(Encoding::Gzip)))
        .unwrap();
    ex.on_trailers(Some(&grpc_headers(&[("grpc-status", "0")])))
        .unwrap();
    let last = drain(&mut ex).pop().unwrap();
    assert_eq!(Frame::parse(&last).unwrap().payload, message);
}

#[test]
fn headers_past_the_metadata_limit_fail_the_call_without_them() {
    let mut ex = exchange(MethodKind::Unary, 0);
    let big = "v".repeat(MAX_METADATA_LEN);
    let headers = grpc_headers(&[("x-big", &big)]);
    let (status, flags) = ex.on_headers(StatusCode::OK, &headers).unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    let last = ex.failed(&status, flags);
    let last = Frame::parse(&last).unwrap();
    assert!(last.header.flags.contains(Flags::END_STREAM));
    assert!(Metadata::decode(last.metadata).unwrap().is_empty());
    assert!(ex.is_done());
}
