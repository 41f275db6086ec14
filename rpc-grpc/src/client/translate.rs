//! A call's exchange as a sans-IO translator: in, the channel's frames for the call and
//! what HTTP/2 brought (response headers, body chunks, trailers, send capacity); out,
//! the frames for the channel (the response's headers, messages within the channel's
//! window, the final frame, window granted back for request messages that went out) and
//! the request body's DATA cut to what HTTP/2 flow control allows. The call's task
//! (`call.rs`) opens the stream, reads and writes h2, and waits. Unit tests in
//! `translate_tests.rs`; fuzz target `grpc_client` (through `crate::fuzzing`).

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, StatusCode};
use rdmarpc_core::codegen::MethodKind;
use rdmarpc_core::wire::{Flags, Frame, FrameKind, Header, HEADER_LEN, INITIAL_STREAM_WINDOW};
use rdmarpc_core::{Code, Metadata, Status};

use super::status::{http_status, status_frame, status_of, within_limit};
use crate::compress::Encoding;
use crate::deframe::{self, Deframer};
use crate::frames::frame;
use crate::text;

/// Why a call ends early: the status for the channel, and the flags of its final frame
/// (`REFUSED`: the server never saw the call, the channel may send it again).
pub(crate) type Failure = (Status, Flags);

/// What a frame from the channel asks of the shell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FromChannel {
    /// Nothing more than what the translator now holds.
    Noted,
    /// The caller cancelled: reset the stream (CANCEL) and end the call.
    Cancel,
}

/// One call's exchange: see the module docs.
#[derive(Debug)]
pub(crate) struct Exchange {
    call_id: u64,
    kind: MethodKind,
    /// The largest response message.
    max_message: usize,
    /// Frame bytes of response messages waiting for the channel's window past which the
    /// body is not read (HTTP/2 flow control then holds the server back).
    limit: usize,
    /// Request messages (prefixed) waiting for HTTP/2 flow control, with the window
    /// each took from the channel.
    out: VecDeque<(Bytes, usize)>,
    /// The channel half-closed the request stream.
    out_done: bool,
    /// The request body was ended on HTTP/2 (or can no longer be sent).
    out_ended: bool,
    /// Frames for the channel, in order, ahead of `queued`.
    for_channel: VecDeque<Bytes>,
    /// Response messages (as frames) waiting for the channel's window.
    queued: VecDeque<Bytes>,
    queued_bytes: usize,
    /// The channel's window for response stream messages, in frame bytes.
    window: i64,
    /// Response headers' metadata, kept for the final frame of a call with one response.
    headers: Metadata,
    /// The one response message of a unary or client-streaming call.
    message: Option<Bytes>,
    /// The response headers arrived.
    headed: bool,
    /// The final frame, handed to the channel once `queued` is empty.
    last: Option<Bytes>,
    /// The final frame went to the channel.
    done: bool,
    deframer: Deframer,
    /// How request messages are compressed, if they are.
    request_encoding: Option<Encoding>,
}

impl Exchange {
    /// The exchange of call `call_id` of `kind`, opened by the channel's `request`
    /// header: response messages up to `max_message` bytes, at most `limit` frame bytes
    /// of them waiting for the channel; request messages compressed with `encoding`.
    pub(crate) fn new(
        call_id: u64,
        kind: MethodKind,
        request: &Header,
        max_message: usize,
        limit: usize,
        encoding: Option<Encoding>,
    ) -> Exchange {
        let window = if request.credits > 0 {
            i64::from(request.credits)
        } else if kind.server_streams() {
            i64::from(INITIAL_STREAM_WINDOW)
        } else {
            0
        };
        Exchange {
            call_id,
            kind,
            max_message,
            limit,
            out: VecDeque::new(),
            out_done: false,
            out_ended: false,
            for_channel: VecDeque::new(),
            queued: VecDeque::new(),
            queued_bytes: 0,
            window,
            headers: Metadata::new(),
            message: None,
            headed: false,
            last: None,
            done: false,
            deframer: Deframer::for_responses(),
            request_encoding: encoding,
        }
    }

    /// The stream is open. A unary or server-streaming call's one request message
    /// (`payload`) is returned, prefixed, to send with END_STREAM; a request stream's
    /// window is granted to the channel instead.
    pub(crate) fn opened(&mut self, payload: &[u8], stream_window: u32) -> Option<Bytes> {
        if !self.kind.client_streams() {
            self.out_ended = true;
            return Some(deframe::frame_with(payload, self.request_encoding));
        }
        self.grant(stream_window as usize);
        None
    }

    /// One frame from the channel for this call.
    pub(crate) fn on_channel_frame(&mut self, buf: &Bytes) -> FromChannel {
        let Ok(frame) = Frame::parse(buf) else {
            return FromChannel::Noted;
        };
        let header = frame.header;
        match header.kind {
            FrameKind::Cancel => return FromChannel::Cancel,
            FrameKind::WindowUpdate => self.window += i64::from(header.credits),
            FrameKind::Message
                if header.flags.contains(Flags::END_STREAM) && frame.payload.is_empty() =>
            {
                self.out_done = true;
            }
            FrameKind::Message if !self.out_ended && !self.out_done => {
                self.out
                    .push_back((deframe::frame(frame.payload), header.frame_len()));
                if header.flags.contains(Flags::END_STREAM) {
                    self.out_done = true;
                }
            }
            _ => {}
        }
        FromChannel::Noted
    }

    /// Bytes of request messages waiting for HTTP/2 flow control.
    pub(crate) fn waiting(&self) -> usize {
        self.out.iter().map(|(data, _)| data.len()).sum()
    }

    /// HTTP/2 lets `capacity` bytes of the request body go: the DATA to send, and
    /// whether it ends the body. Each message that went out whole gives the channel its
    /// window back.
    pub(crate) fn take_data(&mut self, mut capacity: usize) -> (Bytes, bool) {
        let mut data = BytesMut::new();
        let mut granted = 0usize;
        while capacity > 0 {
            let Some((message, charged)) = self.out.front_mut() else {
                break;
            };
            let n = capacity.min(message.len());
            data.extend_from_slice(&message.split_to(n));
            capacity -= n;
            if message.is_empty() {
                granted += *charged;
                self.out.pop_front();
            }
        }
        let end = self.out_done && self.out.is_empty() && !self.out_ended;
        if end {
            self.out_ended = true;
        }
        self.grant(granted);
        (data.freeze(), end)
    }

    /// Whether the shell must end the request body now with an empty DATA frame (the
    /// channel half-closed with nothing left to send); once.
    pub(crate) fn take_end_of_body(&mut self) -> bool {
        let end = self.out_done && self.out.is_empty() && !self.out_ended;
        if end {
            self.out_ended = true;
        }
        end
    }

    /// The server reset the request stream: nothing more is sent (the response tells
    /// why).
    pub(crate) fn request_reset(&mut self) {
        self.out.clear();
        self.out_ended = true;
    }

    /// Whether the response headers are still awaited.
    pub(crate) fn wants_headers(&self) -> bool {
        !self.headed && self.last.is_none()
    }

    /// Whether to read the response body now: its messages waiting for the channel's
    /// window are under the limit and the call has not ended.
    pub(crate) fn wants_body(&self) -> bool {
        self.headed && self.last.is_none() && self.queued_bytes < self.limit
    }

    /// Frame bytes of response messages waiting for the channel's window.
    #[cfg(test)]
    pub(crate) fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// The response's headers. `Ok(true)`: a body follows, to be read; `Ok(false)`: a
    /// trailers-only response, the call's end (or headers no longer awaited, ignored).
    ///
    /// # Errors
    /// Not a gRPC response (HTTP status, content-type), an unknown encoding, or headers
    /// past the metadata limit: the call fails with the status.
    pub(crate) fn on_headers(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Result<bool, Failure> {
        let fail = |status: Status| Err((status, Flags::default()));
        if !self.wants_headers() {
            return Ok(false);
        }
        if status != StatusCode::OK {
            return fail(http_status(status));
        }
        let grpc = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/grpc"));
        if !grpc {
            return fail(Status::new(
                Code::Unknown,
                "the response is not gRPC (content-type)",
            ));
        }
        match Encoding::of_headers(headers) {
            Ok(encoding) => self.deframer.set_encoding(encoding),
            Err(why) => return fail(Status::internal(why)),
        }
        self.headed = true;
        self.headers = text::metadata_from(headers);
        within_limit(&self.headers, "response headers")?;
        if let Some(status) = status_of(headers) {
            // Trailers-only: the call ends here, its headers are its trailers.
            let trailers = std::mem::take(&mut self.headers);
            self.last = Some(self.end(status, trailers)?);
            return Ok(false);
        }
        if self.kind.server_streams() {
            // A stream's response headers go first, outside its window.
            let header = Header::new(FrameKind::Response, self.call_id);
            let headers = std::mem::take(&mut self.headers);
            self.for_channel.push_back(frame(header, &headers, &[]));
        }
        Ok(true)
    }

    /// A chunk of the response body: the messages it completes are queued for the
    /// channel.
    ///
    /// # Errors
    /// A malformed, oversized or undecodable message, or a second message where the
    /// method returns one: the shell resets the stream (CANCEL) and the call fails.
    pub(crate) fn on_data(&mut self, chunk: &[u8]) -> Result<(), Failure> {
        self.deframer.push(chunk);
        while let Some(message) = self
            .deframer
            .next(self.max_message)
            .map_err(|s| (s, Flags::default()))?
        {
            self.on_message(message)?;
        }
        Ok(())
    }

    fn on_message(&mut self, message: Bytes) -> Result<(), Failure> {
        if self.kind.server_streams() {
            self.queued_bytes += HEADER_LEN + message.len();
            let header = Header::new(FrameKind::Message, self.call_id);
            self.queued
                .push_back(frame(header, &Metadata::new(), &message));
            return Ok(());
        }
        if self.message.replace(message).is_some() {
            return Err((
                Status::internal("more than one response message for a method that returns one"),
                Flags::default(),
            ));
        }
        Ok(())
    }

    /// The body ended with `trailers` (`None`: none came): the call's final frame.
    ///
    /// # Errors
    /// The body ended inside a message, trailers past the metadata limit, or a unary
    /// response OK without its message.
    pub(crate) fn on_trailers(&mut self, trailers: Option<&HeaderMap>) -> Result<(), Failure> {
        if self.last.is_some() {
            return Ok(());
        }
        if self.deframer.held() > 0 {
            return Err((
                Status::internal("the response ended inside a message"),
                Flags::default(),
            ));
        }
        let empty = HeaderMap::new();
        let trailers = trailers.unwrap_or(&empty);
        let status = status_of(trailers)
            .unwrap_or_else(|| Status::internal("the response ended without grpc-status"));
        let trailers = text::metadata_from(trailers);
        within_limit(&trailers, "response trailers")?;
        self.last = Some(self.end(status, trailers)?);
        Ok(())
    }

    /// The final frame for `status` and `trailers`.
    fn end(&mut self, status: Status, trailers: Metadata) -> Result<Bytes, Failure> {
        let mut header = Header::new(FrameKind::Response, self.call_id);
        header.flags = Flags::END_STREAM;
        header.status = status.code() as u8;
        if self.kind.server_streams() {
            // A stream's end: its metadata block is the trailers.
            let payload = if status.code() == Code::Ok {
                &[][..]
            } else {
                status.message().as_bytes()
            };
            return Ok(frame(header, &trailers, payload));
        }
        let mut metadata = std::mem::take(&mut self.headers);
        metadata.append_trailers(&trailers);
        within_limit(&metadata, "response headers and trailers together")?;
        if status.code() != Code::Ok {
            return Ok(frame(header, &metadata, status.message().as_bytes()));
        }
        let Some(message) = self.message.take() else {
            return Err((
                Status::internal("the response ended OK without a message"),
                Flags::default(),
            ));
        };
        Ok(frame(header, &metadata, &message))
    }

    /// The next frame for the channel, if one may go now: queued frames first, then
    /// response messages within the channel's window (the last one may overdraw it), then
    /// the final frame once nothing else waits.
    pub(crate) fn next_for_channel(&mut self) -> Option<Bytes> {
        if let Some(frame) = self.for_channel.pop_front() {
            return Some(frame);
        }
        if self.window > 0 {
            if let Some(frame) = self.queued.pop_front() {
                self.queued_bytes -= frame.len();
                self.window -= frame.len() as i64;
                return Some(frame);
            }
        }
        if self.queued.is_empty() {
            if let Some(last) = self.last.take() {
                self.done = true;
                return Some(last);
            }
        }
        None
    }

    /// Whether the final frame went to the channel: the call is over.
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// The call failed with `status`: its final frame for the channel (with the
    /// response headers' metadata, unless they are the reason it failed).
    pub(crate) fn failed(&mut self, status: &Status, flags: Flags) -> Bytes {
        self.done = true;
        let headers = if within_limit(&self.headers, "").is_ok() {
            std::mem::take(&mut self.headers)
        } else {
            Metadata::new()
        };
        status_frame(self.call_id, status, flags, &headers)
    }

    /// Grants the channel `bytes` more of the request stream's window.
    fn grant(&mut self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let mut grant = Header::new(FrameKind::WindowUpdate, self.call_id);
        grant.credits = bytes.min(u32::MAX as usize) as u32;
        self.for_channel
            .push_back(Bytes::copy_from_slice(&grant.encode()));
    }
}

#[cfg(test)]
#[path = "translate_tests.rs"]
mod tests;
