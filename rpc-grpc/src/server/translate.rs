//! A call's response side as a sans-IO translator: the server's frames in; out, the
//! HTTP/2 actions ([`H2`]: response headers, trailers, a trailers-only answer, a
//! refusal), the length-prefixed response messages cut to what HTTP/2 flow control
//! allows, and the window those give back to the server. The call
//! (`responses.rs`) performs the actions on h2 and waits for its capacity. Unit tests in
//! `translate_tests.rs`; fuzz target `grpc_response` (through `crate::fuzzing`).

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue};
use rdmarpc_core::codegen::MethodKind;
use rdmarpc_core::wire::{Flags, Frame, FrameKind};
use rdmarpc_core::{Code, Metadata, Status};

use super::status::status_headers;
use crate::compress::{Encoding, ACCEPT, MIN_COMPRESSED};
use crate::deframe;
use crate::text;

/// What the HTTP/2 shell must do for a call's response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum H2 {
    /// Send the response headers (the stream stays open).
    Headers(HeaderMap),
    /// Send the trailers: the response is over.
    Trailers(HeaderMap),
    /// Answer with headers alone, ending the stream (a status before anything was
    /// sent: gRPC's trailers-only response).
    TrailersOnly(HeaderMap),
    /// Reset the stream with REFUSED_STREAM: the server did not start the call, and
    /// gRPC clients retry a refused stream transparently.
    Refuse,
}

/// A piece of a response message waiting for HTTP/2 flow control: its bytes, the window
/// it took from the server, and what it holds (`P`) until HTTP/2 takes it. A message is
/// one piece (prefixed), or a long one two: its prefix (holding nothing) and its bytes
/// as the server's frame carried them (no copy).
type Outgoing<P> = (Bytes, usize, Option<P>);

/// Messages at least this long go out as the server's frame carried them, after a DATA
/// frame of their own for the prefix; shorter ones are copied behind their prefix, and
/// pieces that go out together are joined into one DATA frame.
const LONG: usize = 16 * 1024;

/// The response side of one call: see the module docs.
#[derive(Debug)]
pub(crate) struct Responder<P> {
    kind: MethodKind,
    /// How the responses' messages are compressed, if they are.
    encoding: Option<Encoding>,
    headers_sent: bool,
    /// Response messages (prefixed) waiting for HTTP/2 flow control.
    out: VecDeque<Outgoing<P>>,
    /// The server's final frame, handled once `out` is empty.
    finished: Option<(Bytes, P)>,
    /// The trailers of a unary or client-streaming call, sent once its response message
    /// went out.
    trailers: Option<HeaderMap>,
    /// The final status went out (or the stream was refused).
    done: bool,
}

impl<P> Responder<P> {
    /// The response side of a call of `kind`, its messages compressed with `encoding`.
    pub(crate) fn new(kind: MethodKind, encoding: Option<Encoding>) -> Responder<P> {
        Responder {
            kind,
            encoding,
            headers_sent: false,
            out: VecDeque::new(),
            finished: None,
            trailers: None,
            done: false,
        }
    }

    /// Whether the final status went out.
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// Whether the response headers went out.
    #[cfg_attr(not(any(test, feature = "unstable-fuzzing")), allow(dead_code))]
    pub(crate) fn headers_sent(&self) -> bool {
        self.headers_sent
    }

    /// Bytes of response messages waiting for HTTP/2 flow control.
    pub(crate) fn waiting(&self) -> usize {
        self.out.iter().map(|(data, _, _)| data.len()).sum()
    }

    /// One frame from the server for this call, holding `held` until HTTP/2 takes its
    /// bytes. Returns the credits of a window update (for the request stream).
    pub(crate) fn on_frame(&mut self, buf: Bytes, held: P, actions: &mut Vec<H2>) -> Option<u32> {
        let Ok(frame) = Frame::parse(&buf) else {
            return None;
        };
        let header = frame.header;
        match header.kind {
            FrameKind::WindowUpdate => return Some(header.credits),
            // Nothing follows the final frame.
            FrameKind::Message
                if !self.done && self.finished.is_none() && self.trailers.is_none() =>
            {
                if !self.headers_sent {
                    self.headers(&Metadata::new(), actions);
                }
                self.queue(&buf, frame.payload, header.frame_len(), held);
            }
            FrameKind::Response if !self.done => {
                if header.flags.contains(Flags::END_STREAM) {
                    // The first final frame counts.
                    if self.finished.is_none() && self.trailers.is_none() {
                        self.finished = Some((buf, held));
                    }
                } else if !self.headers_sent {
                    let metadata = Metadata::decode(frame.metadata).unwrap_or_default();
                    self.headers(&metadata, actions);
                }
            }
            _ => {}
        }
        None
    }

    /// Queues the message `payload` (within the server's frame `buf`), which took
    /// `charged` of the server's window and holds `held`.
    fn queue(&mut self, buf: &Bytes, payload: &[u8], charged: usize, held: P) {
        let compressed = self.encoding.is_some() && payload.len() >= MIN_COMPRESSED;
        if compressed || payload.len() < LONG {
            let data = deframe::frame_with(payload, self.encoding);
            self.out.push_back((data, charged, Some(held)));
            return;
        }
        let prefix = deframe::prefix(payload.len(), false);
        self.out
            .push_back((Bytes::copy_from_slice(&prefix), 0, None));
        self.out
            .push_back((buf.slice_ref(payload), charged, Some(held)));
    }

    /// What HTTP/2 now lets go (`capacity` bytes) of the queued messages, as DATA frames
    /// into `frames`: one for short pieces together (clients refuse floods of small
    /// ones), one for each long piece (not copied). Returns the window the messages that
    /// went out whole give back to the server.
    pub(crate) fn take_frames(&mut self, mut capacity: usize, frames: &mut Vec<Bytes>) -> usize {
        let mut granted = 0usize;
        let mut short = Vec::new();
        while capacity > 0 {
            let Some((data, charged, _)) = self.out.front_mut() else {
                break;
            };
            let n = capacity.min(data.len());
            let piece = data.split_to(n);
            capacity -= n;
            if data.is_empty() {
                granted += *charged;
                self.out.pop_front();
            }
            if piece.len() >= LONG {
                frames.extend(join(&mut short));
                frames.push(piece);
            } else {
                short.push(piece);
            }
        }
        frames.extend(join(&mut short));
        granted
    }

    /// [`Responder::take_frames`], the frames joined into one.
    #[cfg(any(test, feature = "unstable-fuzzing"))]
    pub(crate) fn take(&mut self, capacity: usize) -> (Bytes, usize) {
        let mut frames = Vec::new();
        let granted = self.take_frames(capacity, &mut frames);
        (join(&mut frames).unwrap_or_default(), granted)
    }

    /// Once every queued message went out: the final status (and with a unary or
    /// client-streaming call, its one response message first, queued; the trailers
    /// follow once it went out).
    pub(crate) fn finish(&mut self, actions: &mut Vec<H2>) {
        if !self.out.is_empty() || self.done {
            return;
        }
        if let Some(trailers) = self.trailers.take() {
            self.done = true;
            actions.push(H2::Trailers(trailers));
            return;
        }
        let Some((buf, held)) = self.finished.take() else {
            return;
        };
        let Ok(frame) = Frame::parse(&buf) else {
            return self.fail(&Status::internal("malformed response"), actions);
        };
        let code = Code::from_u8(frame.header.status);
        let metadata = Metadata::decode(frame.metadata).unwrap_or_default();
        if frame.header.flags.contains(Flags::REFUSED) && !self.headers_sent {
            self.done = true;
            actions.push(H2::Refuse);
            return;
        }
        if code != Code::Ok {
            let message = String::from_utf8_lossy(frame.payload).into_owned();
            return self.fail(&Status::from_metadata(code, message, metadata), actions);
        }
        let mut trailers = HeaderMap::new();
        status_headers(&mut trailers, Code::Ok, "");
        if self.kind.server_streams() {
            // A stream's end: its metadata block is the trailers.
            if !self.headers_sent {
                self.headers(&Metadata::new(), actions);
            }
            text::append_metadata(&mut trailers, &metadata);
            self.done = true;
            actions.push(H2::Trailers(trailers));
            return;
        }
        // The one response message; headers and trailers come in one block here.
        let (metadata, app_trailers) = metadata.split_trailers();
        if !self.headers_sent {
            self.headers(&metadata, actions);
        }
        text::append_metadata(&mut trailers, &app_trailers);
        self.queue(&buf, frame.payload, 0, held);
        self.trailers = Some(trailers);
    }

    /// Ends the call with `status`: trailers-only if nothing was sent yet.
    pub(crate) fn fail(&mut self, status: &Status, actions: &mut Vec<H2>) {
        if self.done {
            return;
        }
        self.done = true;
        self.out.clear();
        let mut headers = HeaderMap::new();
        if self.headers_sent {
            status_headers(&mut headers, status.code(), status.message());
            text::append_metadata(&mut headers, &status.to_metadata());
            actions.push(H2::Trailers(headers));
        } else {
            headers.insert("content-type", HeaderValue::from_static("application/grpc"));
            status_headers(&mut headers, status.code(), status.message());
            text::append_metadata(&mut headers, &status.to_metadata());
            actions.push(H2::TrailersOnly(headers));
        }
    }

    /// The response headers, with `metadata`.
    fn headers(&mut self, metadata: &Metadata, actions: &mut Vec<H2>) {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/grpc"));
        headers.insert("grpc-accept-encoding", HeaderValue::from_static(ACCEPT));
        if let Some(encoding) = self.encoding {
            headers.insert("grpc-encoding", HeaderValue::from_static(encoding.name()));
        }
        text::append_metadata(&mut headers, metadata);
        self.headers_sent = true;
        actions.push(H2::Headers(headers));
    }
}

/// `pieces` as one buffer (copied together if there are several), emptied; none if
/// there were none.
fn join(pieces: &mut Vec<Bytes>) -> Option<Bytes> {
    match pieces.len() {
        0 => None,
        1 => pieces.pop(),
        _ => {
            let mut joined = BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
            for piece in pieces.drain(..) {
                joined.extend_from_slice(&piece);
            }
            Some(joined.freeze())
        }
    }
}

#[cfg(test)]
#[path = "translate_tests.rs"]
mod tests;
