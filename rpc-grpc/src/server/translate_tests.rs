//! The response translator with no HTTP/2 connection: the server's frames in, HTTP/2
//! actions and DATA out.

use bytes::Bytes;
use http::HeaderMap;
use rdmarpc_core::codegen::MethodKind;
use rdmarpc_core::wire::{encode_head, Flags, FrameKind, Header};
use rdmarpc_core::{Code, Metadata, Status};

use super::{Responder, H2};
use crate::compress::Encoding;

fn frame(kind: FrameKind, flags: Flags, status: Code, md: &Metadata, payload: &[u8]) -> Bytes {
    let mut header = Header::new(kind, 1);
    header.flags = flags;
    header.status = status as u8;
    header.payload_len = payload.len() as u32;
    let mut out = Vec::new();
    encode_head(&mut header, md, &mut out);
    out.extend_from_slice(payload);
    Bytes::from(out)
}

fn message(payload: &[u8]) -> Bytes {
    frame(
        FrameKind::Message,
        Flags::default(),
        Code::Ok,
        &Metadata::new(),
        payload,
    )
}

fn end(status: Code, md: &Metadata, payload: &[u8]) -> Bytes {
    frame(FrameKind::Response, Flags::END_STREAM, status, md, payload)
}

fn header<'a>(map: &'a HeaderMap, name: &str) -> Option<&'a str> {
    map.get(name).map(|v| v.to_str().expect("ascii"))
}

/// Everything the responder lets go with unlimited capacity.
fn drain(r: &mut Responder<()>) -> (Bytes, usize) {
    r.take(usize::MAX)
}

#[test]
fn a_unary_response_is_headers_one_message_then_trailers() {
    let mut r = Responder::new(MethodKind::Unary, None);
    let mut md = Metadata::new();
    md.append("x-head", "h");
    let mut actions = Vec::new();
    assert_eq!(
        r.on_frame(end(Code::Ok, &md, b"reply"), (), &mut actions),
        None
    );
    assert!(actions.is_empty(), "nothing before the stream's turn");
    r.finish(&mut actions);
    let [H2::Headers(headers)] = &actions[..] else {
        panic!("{actions:?}")
    };
    assert_eq!(header(headers, "content-type"), Some("application/grpc"));
    assert_eq!(header(headers, "x-head"), Some("h"));
    assert!(headers.get("grpc-status").is_none());
    let (data, granted) = drain(&mut r);
    assert_eq!(&data[..], b"\x00\x00\x00\x00\x05reply");
    assert_eq!(granted, 0, "a final message takes no stream window");
    actions.clear();
    r.finish(&mut actions);
    let [H2::Trailers(trailers)] = &actions[..] else {
        panic!("{actions:?}")
    };
    assert_eq!(header(trailers, "grpc-status"), Some("0"));
    assert!(r.is_done());
}

#[test]
fn a_stream_sends_headers_with_its_first_message_and_gives_the_window_back() {
    let mut r = Responder::new(MethodKind::ServerStreaming, None);
    let mut actions = Vec::new();
    let first = message(b"one");
    let second = message(b"two");
    r.on_frame(first.clone(), (), &mut actions);
    r.on_frame(second.clone(), (), &mut actions);
    assert!(matches!(&actions[..], [H2::Headers(_)]), "{actions:?}");
    assert_eq!(r.waiting(), 16);
    // Flow control lets 10 bytes go: the first message and 2 bytes of the second.
    let (data, granted) = r.take(10);
    assert_eq!(&data[..], b"\x00\x00\x00\x00\x03one\x00\x00");
    assert_eq!(granted, first.len());
    let (data, granted) = r.take(100);
    assert_eq!(&data[..], b"\x00\x00\x03two");
    assert_eq!(granted, second.len());
    let mut trailers = Metadata::new();
    trailers.append("x-tail", "t");
    r.on_frame(end(Code::Ok, &trailers, b""), (), &mut actions);
    actions.clear();
    r.finish(&mut actions);
    let [H2::Trailers(t)] = &actions[..] else {
        panic!("{actions:?}")
    };
    assert_eq!(
        (header(t, "grpc-status"), header(t, "x-tail")),
        (Some("0"), Some("t"))
    );
}

#[test]
fn the_status_waits_for_the_messages_before_it() {
    let mut r = Responder::new(MethodKind::ServerStreaming, None);
    let mut actions = Vec::new();
    r.on_frame(message(b"m"), (), &mut actions);
    r.on_frame(end(Code::Ok, &Metadata::new(), b""), (), &mut actions);
    actions.clear();
    r.finish(&mut actions);
    assert!(actions.is_empty(), "a message is still queued");
    drain(&mut r);
    r.finish(&mut actions);
    assert!(matches!(&actions[..], [H2::Trailers(_)]));
}

#[test]
fn an_error_before_anything_was_sent_is_trailers_only() {
    let mut r = Responder::new(MethodKind::Unary, None);
    let mut actions = Vec::new();
    r.on_frame(
        end(Code::NotFound, &Metadata::new(), b"no such thing"),
        (),
        &mut actions,
    );
    r.finish(&mut actions);
    let [H2::TrailersOnly(headers)] = &actions[..] else {
        panic!("{actions:?}")
    };
    assert_eq!(header(headers, "grpc-status"), Some("5"));
    assert_eq!(header(headers, "grpc-message"), Some("no such thing"));
    assert!(r.is_done());
}

#[test]
fn an_error_after_messages_is_in_the_trailers() {
    let mut r = Responder::new(MethodKind::ServerStreaming, None);
    let mut actions = Vec::new();
    r.on_frame(message(b"m"), (), &mut actions);
    drain(&mut r);
    r.on_frame(
        end(Code::Internal, &Metadata::new(), b"broke"),
        (),
        &mut actions,
    );
    actions.clear();
    r.finish(&mut actions);
    let [H2::Trailers(t)] = &actions[..] else {
        panic!("{actions:?}")
    };
    assert_eq!(header(t, "grpc-status"), Some("13"));
}

#[test]
fn a_call_the_server_refused_is_a_refused_stream() {
    let mut r = Responder::new(MethodKind::Unary, None);
    let mut actions = Vec::new();
    let refused = frame(
        FrameKind::Response,
        Flags::END_STREAM | Flags::REFUSED,
        Code::Unavailable,
        &Metadata::new(),
        b"draining",
    );
    r.on_frame(refused, (), &mut actions);
    r.finish(&mut actions);
    assert_eq!(actions, [H2::Refuse]);
}

#[test]
fn a_failure_ends_the_call_once_and_drops_what_waits() {
    let mut r = Responder::new(MethodKind::ServerStreaming, None);
    let mut actions = Vec::new();
    r.on_frame(message(b"m"), (), &mut actions);
    actions.clear();
    r.fail(&Status::cancelled("stalled"), &mut actions);
    r.fail(&Status::internal("again"), &mut actions);
    let [H2::Trailers(t)] = &actions[..] else {
        panic!("{actions:?}")
    };
    assert_eq!(header(t, "grpc-status"), Some("1"));
    assert_eq!(r.waiting(), 0);
    // Frames after the end are ignored.
    r.on_frame(message(b"late"), (), &mut actions);
    r.on_frame(end(Code::Ok, &Metadata::new(), b""), (), &mut actions);
    r.finish(&mut actions);
    assert_eq!(actions.len(), 1);
}

#[test]
fn responses_are_compressed_when_the_client_accepts_it() {
    let mut r = Responder::new(MethodKind::ServerStreaming, Some(Encoding::Gzip));
    let mut actions = Vec::new();
    let big = vec![b'a'; 4096];
    r.on_frame(message(&big), (), &mut actions);
    let [H2::Headers(headers)] = &actions[..] else {
        panic!("{actions:?}")
    };
    assert_eq!(header(headers, "grpc-encoding"), Some("gzip"));
    let (data, _) = drain(&mut r);
    assert_eq!(data[0], 1, "the compressed flag");
    assert!(
        data.len() < big.len() / 4,
        "compressed: {} bytes",
        data.len()
    );
}

#[test]
fn window_updates_pass_through_and_malformed_frames_are_dropped() {
    let mut r = Responder::<()>::new(MethodKind::Streaming, None);
    let mut actions = Vec::new();
    let mut update = Header::new(FrameKind::WindowUpdate, 1);
    update.credits = 77;
    let update = Bytes::copy_from_slice(&update.encode());
    assert_eq!(r.on_frame(update, (), &mut actions), Some(77));
    assert_eq!(
        r.on_frame(Bytes::from_static(b"junk"), (), &mut actions),
        None
    );
    assert!(actions.is_empty());
}

/// A long message goes out as the server's frame carried it (not copied), after a DATA
/// frame of its prefix; short ones before it are joined into that frame; its window
/// comes back once its last byte went out.
#[test]
fn a_long_message_goes_out_uncopied_after_its_prefix() {
    let mut r = Responder::new(MethodKind::ServerStreaming, None);
    let mut actions = Vec::new();
    let short = message(b"hi");
    let payload = vec![5u8; 40_000];
    let long = message(&payload);
    let at = long.as_ptr_range();
    r.on_frame(short.clone(), (), &mut actions);
    r.on_frame(long.clone(), (), &mut actions);
    let mut frames = Vec::new();
    let granted = r.take_frames(7 + 5 + 30_000, &mut frames);
    assert_eq!(frames.len(), 2, "short pieces joined, the long one apart");
    assert_eq!(
        &frames[0][..],
        b"\x00\x00\x00\x00\x02hi\x00\x00\x00\x9c\x40"
    );
    assert_eq!(frames[1].len(), 30_000);
    assert!(
        at.contains(&frames[1].as_ptr()),
        "a slice of the server's frame"
    );
    assert_eq!(granted, short.len(), "the long message is not out yet");
    frames.clear();
    let granted = r.take_frames(usize::MAX, &mut frames);
    assert_eq!(frames.len(), 1);
    assert_eq!(&frames[0][..], &payload[30_000..]);
    assert_eq!(granted, long.len());
}
