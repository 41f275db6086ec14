//! A call's response side: the server's frames for the call turned into HTTP/2 headers,
//! length-prefixed messages sent as flow control allows, and trailers.

use std::collections::VecDeque;
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::SendStream;
use http::{HeaderMap, HeaderValue, Response};
use rpc_core::account::Charge;
use rpc_core::wire::{Flags, Frame, FrameKind, Header};
use rpc_core::{Code, Metadata, Status};
use tokio::sync::mpsc;

use super::call::{Call, Outgoing, Stop, Wait};
use super::status::{refuse, status_headers};
use super::{Held, ToCall};
use crate::compress::ACCEPT;
use crate::deframe;
use crate::text;

impl Call {
    /// After the request: the server's frames until its final one went out.
    pub(super) async fn respond_until_done(
        &mut self,
        frames: &mut mpsc::UnboundedReceiver<ToCall>,
    ) -> Result<(), Stop> {
        loop {
            if self.out.is_empty() && (self.finished.is_some() || self.trailers.is_some()) {
                self.finish()?;
            }
            if self.done {
                return Ok(());
            }
            tokio::select! {
                frame = frames.recv() => {
                    let Some(frame) = frame else { return Err(Stop::ServerGone) };
                    // (Window updates for a request stream that ended: nothing to do.)
                    self.on_server_frames(frame, frames)?;
                }
                wait = Self::wait_stream(&mut self.respond, &mut self.sending, &self.out, &mut self.waiting, self.shared.config.stream_idle_timeout) => {
                    self.sent(wait).await?;
                }
            }
        }
    }

    /// Waits until HTTP/2 lets the first queued message (or part of it) go, the client
    /// resets the call, or the queued messages waited for the client's window `idle`
    /// since `waiting` (set when a wait with none granted begins: the only clock read).
    pub(super) async fn wait_stream(
        respond: &mut SendResponse<Bytes>,
        sending: &mut Option<SendStream<Bytes>>,
        out: &VecDeque<Outgoing>,
        waiting: &mut Option<tokio::time::Instant>,
        idle: Duration,
    ) -> Wait {
        let mut timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
        std::future::poll_fn(|cx| match sending {
            Some(stream) => {
                if stream.poll_reset(cx).is_ready() {
                    return Poll::Ready(Wait::Reset);
                }
                if !out.is_empty() {
                    stream.reserve_capacity(out.iter().map(|(data, _, _)| data.len()).sum());
                    match stream.poll_capacity(cx) {
                        Poll::Ready(Some(Ok(0))) | Poll::Pending => {}
                        Poll::Ready(Some(Ok(n))) => {
                            *waiting = None;
                            return Poll::Ready(Wait::Capacity(n));
                        }
                        Poll::Ready(_) => return Poll::Ready(Wait::Reset),
                    }
                    let since = *waiting.get_or_insert_with(tokio::time::Instant::now);
                    let timer = timer
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(since + idle)));
                    if std::future::Future::poll(timer.as_mut(), cx).is_ready() {
                        return Poll::Ready(Wait::Idle);
                    }
                }
                Poll::Pending
            }
            None => match respond.poll_reset(cx) {
                Poll::Ready(_) => Poll::Ready(Wait::Reset),
                Poll::Pending => Poll::Pending,
            },
        })
        .await
    }

    /// Sends what HTTP/2 now allows of the queued messages, in one DATA frame (clients
    /// refuse floods of small ones); each message that went out whole gives the server
    /// its window back.
    pub(super) async fn sent(&mut self, wait: Wait) -> Result<(), Stop> {
        let mut capacity = match wait {
            Wait::Capacity(capacity) => capacity,
            Wait::Reset => return Err(Stop::Cancelled),
            Wait::Idle => {
                tracing::debug!("call {}: reset, its response idle", self.call_id);
                if let Some(stream) = self.sending.as_mut() {
                    stream.send_reset(h2::Reason::CANCEL);
                }
                return Err(Stop::Idle);
            }
        };
        let stream = self.sending.as_mut().expect("capacity needs a stream");
        let mut pieces = Vec::new();
        let mut granted = 0usize;
        while capacity > 0 {
            let Some((data, charged, _)) = self.out.front_mut() else {
                break;
            };
            let n = capacity.min(data.len());
            pieces.push(data.split_to(n));
            capacity -= n;
            if data.is_empty() {
                granted += *charged;
                self.out.pop_front();
            }
        }
        let data = match pieces.len() {
            1 => pieces.pop().expect("one"),
            _ => {
                let mut joined = BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
                for piece in &pieces {
                    joined.extend_from_slice(piece);
                }
                joined.freeze()
            }
        };
        if stream.send_data(data, false).is_err() {
            return Err(Stop::Cancelled);
        }
        if granted > 0 {
            let mut grant = Header::new(FrameKind::WindowUpdate, self.call_id);
            grant.credits = granted.min(u32::MAX as usize) as u32;
            self.to_server(Bytes::copy_from_slice(&grant.encode()), Charge::none())
                .await?;
        }
        Ok(())
    }

    /// `first` and the server's frames that came along with it (a run of messages goes
    /// out as one DATA frame); the window they grant the request stream.
    pub(super) fn on_server_frames(
        &mut self,
        first: ToCall,
        frames: &mut mpsc::UnboundedReceiver<ToCall>,
    ) -> Result<i64, Stop> {
        let mut granted = 0;
        let mut next = Some(first);
        while let Some((frame, permit)) = next.take().or_else(|| frames.try_recv().ok()) {
            if let Some(credits) = self.on_server_frame(frame, permit)? {
                granted += i64::from(credits);
            }
        }
        Ok(granted)
    }

    /// One frame from the server for this call. Returns the credits of a window update
    /// (for the request stream).
    pub(super) fn on_server_frame(
        &mut self,
        buf: Bytes,
        permit: Held,
    ) -> Result<Option<u32>, Stop> {
        let Ok(frame) = Frame::parse(&buf) else {
            return Ok(None);
        };
        let header = frame.header;
        match header.kind {
            FrameKind::WindowUpdate => return Ok(Some(header.credits)),
            FrameKind::Message => {
                if !self.headers_sent {
                    self.send_headers(&Metadata::new(), false)?;
                }
                self.out.push_back((
                    deframe::frame_with(frame.payload, self.response_encoding),
                    header.frame_len(),
                    permit,
                ));
            }
            FrameKind::Response if !header.flags.contains(Flags::END_STREAM) => {
                let metadata = Metadata::decode(frame.metadata).unwrap_or_default();
                self.send_headers(&metadata, false)?;
            }
            FrameKind::Response => self.finished = Some((buf, permit)),
            _ => {}
        }
        Ok(None)
    }

    pub(super) fn send_headers(&mut self, metadata: &Metadata, end: bool) -> Result<(), Stop> {
        let mut response = Response::new(());
        let headers = response.headers_mut();
        headers.insert("content-type", HeaderValue::from_static("application/grpc"));
        headers.insert("grpc-accept-encoding", HeaderValue::from_static(ACCEPT));
        if let Some(encoding) = self.response_encoding {
            headers.insert("grpc-encoding", HeaderValue::from_static(encoding.name()));
        }
        text::append_metadata(headers, metadata);
        self.headers_sent = true;
        match self.respond.send_response(response, end) {
            Ok(stream) => {
                self.sending = Some(stream);
                Ok(())
            }
            Err(_) => Err(Stop::Cancelled),
        }
    }

    /// The server's final frame: status and trailers (with the response message of a
    /// unary or client-streaming call, queued first: the trailers follow once it went
    /// out, as HTTP/2 flow control lets it).
    pub(super) fn finish(&mut self) -> Result<(), Stop> {
        if let Some(trailers) = self.trailers.take() {
            self.done = true;
            let stream = self.sending.as_mut().expect("headers sent");
            return stream.send_trailers(trailers).map_err(|_| Stop::Cancelled);
        }
        let (buf, permit) = self.finished.take().expect("finished");
        let Ok(frame) = Frame::parse(&buf) else {
            self.fail(&Status::internal("malformed response"));
            return Ok(());
        };
        let code = Code::from_u8(frame.header.status);
        let metadata = Metadata::decode(frame.metadata).unwrap_or_default();
        if frame.header.flags.contains(Flags::REFUSED) && !self.headers_sent {
            // Not started (the server is draining): HTTP/2's refusal, which gRPC clients
            // retry transparently.
            self.done = true;
            self.respond.send_reset(h2::Reason::REFUSED_STREAM);
            return Ok(());
        }
        if code != Code::Ok {
            let message = String::from_utf8_lossy(frame.payload).into_owned();
            self.fail(&Status::from_metadata(code, message, metadata));
            return Ok(());
        }
        let mut trailers = HeaderMap::new();
        status_headers(&mut trailers, Code::Ok, "");
        if self.kind.server_streams() {
            // A stream's end: its metadata block is the trailers.
            if !self.headers_sent {
                self.send_headers(&Metadata::new(), false)?;
            }
            text::append_metadata(&mut trailers, &metadata);
            self.done = true;
            let stream = self.sending.as_mut().expect("headers sent");
            return stream.send_trailers(trailers).map_err(|_| Stop::Cancelled);
        }
        // The one response message; headers and trailers come in one block here.
        let (metadata, app_trailers) = metadata.split_trailers();
        if !self.headers_sent {
            self.send_headers(&metadata, false)?;
        }
        text::append_metadata(&mut trailers, &app_trailers);
        self.out.push_back((
            deframe::frame_with(frame.payload, self.response_encoding),
            0,
            permit,
        ));
        self.trailers = Some(trailers);
        Ok(())
    }

    /// Ends the call with `status`: trailers-only if nothing was sent yet.
    pub(super) fn fail(&mut self, status: &Status) {
        self.done = true;
        match self.sending.as_mut() {
            Some(stream) => {
                let mut trailers = HeaderMap::new();
                status_headers(&mut trailers, status.code(), status.message());
                text::append_metadata(&mut trailers, &status.to_metadata());
                let _ = stream.send_trailers(trailers);
            }
            None => refuse(&mut self.respond, status),
        }
    }
}
