//! Target `grpc_response`: the server's response translator (`server/translate.rs`).
//!
//! A script: byte 0 gives the call's kind (bits 0-1: unary, server-streaming,
//! client-streaming, bidirectional) and the response encoding (bits 2-3: none, gzip,
//! zstd, none); then steps of `[op u8][n u16 LE]`, followed by `n` bytes for op 0: op 0
//! hands the bytes to the translator as a frame from the server; op 1 lets `n` bytes go
//! (HTTP/2 capacity); op 2 asks for the final status; op 3 fails the call with status
//! code `n % 17`. At the end, everything queued is let go and the status asked for.

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use rdmarpc_core::codegen::MethodKind;
use rdmarpc_core::wire::{Flags, Frame, FrameKind};
use rdmarpc_core::{Code, Status};

use crate::compress::Encoding;
use crate::deframe::Deframer;
use crate::server::translate::{Responder, H2};

/// Where the steps start.
pub const STEPS_AT: usize = 1;

/// The steps of `script`: where each one's bytes start, its op, and `n`.
pub fn steps(script: &[u8]) -> Vec<(usize, u8, usize)> {
    rdmarpc_core::fuzzing::op_steps(script, STEPS_AT)
}

/// How the call ended, as the script made it end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// The server's final frame: its status, whether it was a refusal.
    Final(u8, bool),
    /// `fail` with this code.
    Failed(Code),
}

/// What the server sent and what the translator let go.
#[derive(Default)]
struct Model {
    /// Payloads of the messages the translator took, each with the window it takes.
    messages: Vec<(Bytes, usize)>,
    /// The server's final frame, once taken.
    last: Option<Bytes>,
    ending: Option<Ending>,
    data: BytesMut,
    granted: usize,
}

/// Plays `script` against a response translator.
///
/// # Panics
/// When the HTTP/2 actions break gRPC's grammar (headers twice, data before headers,
/// anything after the end, a trailers-only answer or refusal after headers), when the
/// DATA sent does not decode to the messages the server sent, in order, when the window
/// given back differs from what the messages that went out took, or when the status sent
/// is not the one that ended the call.
pub fn grpc_response(script: &[u8]) {
    let Some(&setting) = script.first() else {
        return;
    };
    let kind = super::kind(setting);
    let encodings = [None, Some(Encoding::Gzip), Some(Encoding::Zstd), None];
    let encoding = encodings[usize::from((setting >> 2) & 3)];
    let mut r: Responder<()> = Responder::new(kind, encoding);
    let mut actions = Vec::new();
    let mut model = Model::default();
    for (at, op, n) in steps(script) {
        let before = actions.len();
        match op {
            0 => {
                let frame = Bytes::copy_from_slice(&script[at..(at + n).min(script.len())]);
                server_frame(&mut r, &mut model, frame, &mut actions);
            }
            1 => take(&mut r, &mut model, n),
            2 => finish(&mut r, &mut model, &mut actions),
            3 => {
                let code = Code::from_u8((n % 17) as u8);
                if !r.is_done() {
                    model.ending = Some(Ending::Failed(code));
                }
                r.fail(&Status::new(code, "failed"), &mut actions);
            }
            _ => {}
        }
        check_grammar(&actions, before);
    }
    // Everything queued goes, and the status after it.
    let before = actions.len();
    for _ in 0..3 {
        take(&mut r, &mut model, usize::MAX);
        finish(&mut r, &mut model, &mut actions);
    }
    check_grammar(&actions, before);
    check_end(&r, kind, encoding, &model, &actions);
}

/// A frame from the server: what it adds to what must go out.
fn server_frame(r: &mut Responder<()>, model: &mut Model, frame: Bytes, actions: &mut Vec<H2>) {
    let parsed = Frame::parse(&frame)
        .ok()
        .map(|f| (f.header, Bytes::copy_from_slice(f.payload)));
    let done = r.is_done();
    let credits = r.on_frame(frame.clone(), (), actions);
    let Some((header, payload)) = parsed else {
        assert_eq!(credits, None);
        return;
    };
    match header.kind {
        FrameKind::WindowUpdate => assert_eq!(credits, Some(header.credits)),
        FrameKind::Message if !done && model.last.is_none() => {
            model.messages.push((payload, header.frame_len()));
        }
        FrameKind::Response if header.flags.contains(Flags::END_STREAM) && !done => {
            model.last.get_or_insert(frame);
        }
        _ => assert_eq!(credits, None),
    }
}

/// Lets `n` bytes go.
fn take(r: &mut Responder<()>, model: &mut Model, n: usize) {
    let waiting = r.waiting();
    let (chunk, window) = r.take(n);
    assert_eq!(chunk.len(), n.min(waiting), "what flow control lets go");
    assert!(
        chunk.is_empty() || r.headers_sent(),
        "DATA before the headers"
    );
    model.data.extend_from_slice(&chunk);
    model.granted += window;
}

/// Asks for the final status; notes how the call ended if it did now.
fn finish(r: &mut Responder<()>, model: &mut Model, actions: &mut Vec<H2>) {
    let done = r.is_done();
    r.finish(actions);
    if !done && model.ending.is_none() {
        if let Some(last) = &model.last {
            let header = Frame::parse(last).expect("parsed before").header;
            model.ending = Some(Ending::Final(
                header.status,
                header.flags.contains(Flags::REFUSED),
            ));
        }
    }
}

/// Checks the actions from `new` on against those before them.
fn check_grammar(actions: &[H2], new: usize) {
    for (i, action) in actions.iter().enumerate().skip(new) {
        let before = &actions[..i];
        let ended = before
            .iter()
            .any(|a| matches!(a, H2::Trailers(_) | H2::TrailersOnly(_) | H2::Refuse));
        assert!(!ended, "{action:?} after the end");
        let headers = before.iter().any(|a| matches!(a, H2::Headers(_)));
        match action {
            H2::Headers(h) => {
                assert!(!headers, "headers twice");
                assert!(h.get("grpc-status").is_none(), "a status in the headers");
            }
            H2::Trailers(t) => {
                assert!(headers, "trailers before headers");
                status_of(t);
            }
            H2::TrailersOnly(h) => {
                assert!(!headers, "trailers-only after headers");
                status_of(h);
            }
            H2::Refuse => assert!(!headers, "a refusal after headers"),
        }
    }
}

/// Checks the DATA sent, the window given back and the status against the model.
fn check_end(
    r: &Responder<()>,
    kind: MethodKind,
    encoding: Option<Encoding>,
    model: &Model,
    actions: &[H2],
) {
    let mut deframer = Deframer::for_responses();
    deframer.set_encoding(encoding);
    deframer.push(&model.data);
    let mut sent = Vec::new();
    while let Some(message) = deframer.next(usize::MAX).expect("DATA that decodes") {
        sent.push(message);
    }
    // A failure may cut the message that was going out (its trailers follow at once).
    let cut = deframer.held() > 0;
    assert!(
        !cut || matches!(model.ending, Some(Ending::Failed(_))),
        "a message cut short"
    );
    let sent: Vec<&Bytes> = sent.iter().collect();
    let streamed: Vec<&Bytes> = model.messages.iter().map(|(m, _)| m).collect();
    let window: usize = model.messages.iter().take(sent.len()).map(|(_, w)| w).sum();
    // What a successful end sends: the stream's messages, then a unary or
    // client-streaming call's one response message.
    let last_frame = model
        .last
        .as_ref()
        .map(|f| Frame::parse(f).expect("parsed before"));
    let mut complete = streamed.clone();
    let payload = last_frame
        .as_ref()
        .map(|f| Bytes::copy_from_slice(f.payload));
    if let (Some(f), Some(payload)) = (&last_frame, &payload) {
        if Code::from_u8(f.header.status) == Code::Ok && !kind.server_streams() {
            complete.push(payload);
        }
    }
    let last = actions.last();
    match model.ending {
        None => {
            assert!(!r.is_done(), "ended with no final frame and no failure");
            assert!(last.is_none_or(|a| matches!(a, H2::Headers(_))), "{last:?}");
            assert_eq!(sent, streamed, "every message went");
        }
        Some(Ending::Failed(code)) => {
            assert!(complete.starts_with(&sent), "in order");
            let status = match last {
                Some(H2::Trailers(t) | H2::TrailersOnly(t)) => status_of(t),
                other => panic!("failed with {other:?}"),
            };
            assert_eq!(status, code as u8);
        }
        Some(Ending::Final(_, true)) if !matches!(last, Some(H2::Trailers(_))) => {
            assert_eq!(last, Some(&H2::Refuse));
            assert!(sent.is_empty());
        }
        Some(Ending::Final(status, _)) => {
            let code = Code::from_u8(status);
            let got = match last {
                Some(H2::Trailers(t) | H2::TrailersOnly(t)) => status_of(t),
                other => panic!("ended with {other:?}"),
            };
            assert_eq!(got, code as u8);
            assert_eq!(sent, complete, "the messages");
        }
    }
    assert_eq!(model.granted, window, "the window given back");
}

/// The `grpc-status` of a trailers block.
fn status_of(trailers: &HeaderMap) -> u8 {
    let status = trailers.get("grpc-status").expect("grpc-status");
    status.to_str().expect("ascii").parse().expect("a number")
}
