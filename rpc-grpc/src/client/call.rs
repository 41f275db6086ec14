//! One call's task: opens its HTTP/2 stream, sends the channel's request messages as
//! flow control allows, and hands the response back to the channel.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::{RecvStream, SendStream};
use http::{HeaderValue, Request};
use rpc_core::codegen::MethodKind;
use rpc_core::wire::{Flags, Frame, FrameKind, Header};
use rpc_core::{Metadata, Status};
use tokio::sync::mpsc;

use super::status::{format_timeout, status_frame, within_limit};
use super::Shared;
use crate::compress::{Encoding, ACCEPT};
use crate::deframe::{self, Deframer};
use crate::text;

/// One call's task: see the module docs.
pub(super) struct Call {
    pub(super) shared: Arc<Shared>,
    pub(super) call_id: u64,
    pub(super) kind: MethodKind,
    /// Request messages (prefixed) waiting for HTTP/2 flow control, with the window
    /// each took from the channel.
    pub(super) out: VecDeque<(Bytes, usize)>,
    /// The channel half-closed the request stream.
    pub(super) out_done: bool,
    /// The request body was ended on HTTP/2.
    pub(super) out_ended: bool,
    /// Response messages waiting for the channel's window.
    pub(super) queued: VecDeque<Bytes>,
    pub(super) queued_bytes: usize,
    /// The channel's window for response stream messages, in frame bytes.
    pub(super) window: i64,
    /// Response headers' metadata, kept for the final frame of a call with one response.
    pub(super) headers: Metadata,
    /// The one response message of a unary or client-streaming call.
    pub(super) message: Option<Bytes>,
    /// The response headers of a stream, for the channel before its messages.
    pub(super) head: Option<Bytes>,
    /// The final frame, sent once `queued` is empty.
    pub(super) last: Option<Bytes>,
    /// How request messages are compressed, if they are.
    pub(super) request_encoding: Option<Encoding>,
    /// How the server compresses its messages (`grpc-encoding` of the response).
    pub(super) response_encoding: Option<Encoding>,
}

impl Call {
    pub(super) fn new(shared: Arc<Shared>, call_id: u64, kind: MethodKind) -> Call {
        Call {
            shared,
            call_id,
            kind,
            out: VecDeque::new(),
            out_done: false,
            out_ended: false,
            queued: VecDeque::new(),
            queued_bytes: 0,
            window: 0,
            headers: Metadata::new(),
            message: None,
            head: None,
            last: None,
            request_encoding: None,
            response_encoding: None,
        }
    }

    pub(super) async fn run(
        &mut self,
        path: &'static str,
        header: Header,
        request: Bytes,
        mut frames: mpsc::UnboundedReceiver<Bytes>,
    ) {
        if let Err((status, flags)) = self.exchange(path, header, request, &mut frames).await {
            // Headers over the limit are the reason, not a part, of the failure.
            if within_limit(&self.headers, "").is_err() {
                self.headers = Metadata::new();
            }
            let _ = self
                .to_channel(status_frame(self.call_id, &status, flags, &self.headers))
                .await;
        }
    }

    /// The whole call; `Err` carries the status it failed with, for the channel.
    pub(super) async fn exchange(
        &mut self,
        path: &'static str,
        header: Header,
        request: Bytes,
        frames: &mut mpsc::UnboundedReceiver<Bytes>,
    ) -> Result<(), (Status, Flags)> {
        let frame = Frame::parse(&request)
            .map_err(|e| (Status::internal(e.to_string()), Flags::default()))?;
        let metadata = Metadata::decode(frame.metadata).unwrap_or_default();
        if header.credits > 0 {
            self.window = i64::from(header.credits);
        } else if self.kind.server_streams() {
            self.window = i64::from(rpc_core::wire::INITIAL_STREAM_WINDOW);
        }
        let http = self.http_request(path, &header, &metadata)?;

        let shared = self.shared.clone();
        let unavailable = |e: h2::Error| shared.stream_error(&e);
        let Some((response, mut body_out)) = self.open(http, frame.payload).await? else {
            return Ok(()); // the channel went
        };
        let mut response = std::pin::pin!(response);
        let mut body: Option<RecvStream> = None;
        let mut deframer = Deframer::for_responses();
        let limit = self.shared.config.stream_window as usize;
        loop {
            if let Some(head) = self.head.take() {
                self.to_channel(head)
                    .await
                    .map_err(|()| (Status::cancelled("the channel went"), Flags::default()))?;
            }
            self.deliver().await?;
            if self.last.is_some() && self.queued.is_empty() {
                let last = self.last.take().expect("checked");
                let _ = self.to_channel(last).await;
                return Ok(());
            }
            if self.out_done && self.out.is_empty() && !self.out_ended {
                self.out_ended = true;
                let _ = body_out.send_data(Bytes::new(), true);
            }
            let reading = body.is_some() && self.queued_bytes < limit && self.last.is_none();
            tokio::select! {
                got = frames.recv() => match got {
                    None => return Ok(()),
                    Some(frame) => {
                        if self.on_channel_frame(&frame) {
                            body_out.send_reset(h2::Reason::CANCEL);
                            return Ok(());
                        }
                    }
                },
                headers = &mut response, if body.is_none() && self.last.is_none() => {
                    let response = headers.map_err(unavailable)?;
                    if let Some(ended) = self.on_headers(response, &mut body)? {
                        self.last = Some(ended);
                    }
                }
                chunk = async { body.as_mut().expect("reading").data().await }, if reading => {
                    match chunk {
                        Some(Ok(chunk)) => {
                            let stream = body.as_mut().expect("reading");
                            let _ = stream.flow_control().release_capacity(chunk.len());
                            self.on_data(&chunk, &mut deframer, &mut body_out)?;
                        }
                        Some(Err(e)) => return Err(self.shared.stream_error(&e)),
                        None => {
                            let stream = body.take().expect("reading");
                            self.on_body_end(stream, &deframer).await?;
                        }
                    }
                }
                wait = Self::wait_stream(&mut body_out, &self.out), if !self.out.is_empty() => {
                    self.sent(&mut body_out, wait).await?;
                }
            }
        }
    }

    /// Opens the call's HTTP/2 stream, waiting while the server's limit of concurrent
    /// streams is reached (frames from the channel wait in their queue; a cancel is seen
    /// once the stream is open), and sends a unary or server-streaming call's one message
    /// (`payload`), or grants the channel the request stream's window. `None` when the
    /// channel went meanwhile.
    async fn open(
        &mut self,
        http: Request<()>,
        payload: &[u8],
    ) -> Result<Option<(h2::client::ResponseFuture, SendStream<Bytes>)>, (Status, Flags)> {
        let shared = self.shared.clone();
        let unavailable = |e: h2::Error| shared.stream_error(&e);
        let mut h2 = self.shared.h2.clone().ready().await.map_err(unavailable)?;
        let (response, mut body_out) = h2.send_request(http, false).map_err(unavailable)?;
        if !self.kind.client_streams() {
            body_out
                .send_data(deframe::frame_with(payload, self.request_encoding), true)
                .map_err(unavailable)?;
            self.out_ended = true;
            return Ok(Some((response, body_out)));
        }
        // The request stream's window: the channel may send this much ahead.
        let mut grant = Header::new(FrameKind::WindowUpdate, self.call_id);
        grant.credits = self.shared.config.stream_window;
        match self
            .to_channel(Bytes::copy_from_slice(&grant.encode()))
            .await
        {
            Ok(()) => Ok(Some((response, body_out))),
            Err(()) => Ok(None),
        }
    }

    /// The response body ended: its trailers end the call (a message cut short is an
    /// error).
    async fn on_body_end(
        &mut self,
        mut body: RecvStream,
        deframer: &Deframer,
    ) -> Result<(), (Status, Flags)> {
        let trailers = body
            .trailers()
            .await
            .map_err(|e| self.shared.stream_error(&e))?;
        if deframer.held() > 0 {
            return Err((
                Status::internal("the response ended inside a message"),
                Flags::default(),
            ));
        }
        self.last = Some(self.on_trailers(trailers.unwrap_or_default())?);
        Ok(())
    }

    /// The HTTP/2 request that opens the call: `path`, gRPC's headers, the timeout the
    /// channel's `header` tells, the request encoding, and the call's `metadata`.
    fn http_request(
        &mut self,
        path: &'static str,
        header: &Header,
        metadata: &Metadata,
    ) -> Result<Request<()>, (Status, Flags)> {
        let uri = http::Uri::builder()
            .scheme(self.shared.scheme.clone())
            .authority(self.shared.authority.clone())
            .path_and_query(path)
            .build()
            .map_err(|e| (Status::internal(format!("{path}: {e}")), Flags::default()))?;
        let mut http = Request::builder()
            .method("POST")
            .uri(uri)
            .body(())
            .map_err(|e| (Status::internal(e.to_string()), Flags::default()))?;
        let headers = http.headers_mut();
        headers.insert("content-type", HeaderValue::from_static("application/grpc"));
        headers.insert("te", HeaderValue::from_static("trailers"));
        headers.insert(
            "user-agent",
            HeaderValue::from_static(concat!("rpc-grpc/", env!("CARGO_PKG_VERSION"))),
        );
        headers.insert("grpc-accept-encoding", HeaderValue::from_static(ACCEPT));
        let request_encoding = self.shared.config.send_compression;
        if let Some(encoding) = request_encoding {
            headers.insert("grpc-encoding", HeaderValue::from_static(encoding.name()));
        }
        self.request_encoding = request_encoding;
        if header.timeout_us > 0 {
            let timeout = format_timeout(Duration::from_micros(header.timeout_us));
            headers.insert(
                "grpc-timeout",
                HeaderValue::from_str(&timeout).expect("ASCII"),
            );
        }
        text::append_metadata(headers, metadata);
        Ok(http)
    }

    /// A chunk of the response body: the messages it completes go to the channel's
    /// queue; a malformed or oversized message resets the request stream.
    fn on_data(
        &mut self,
        chunk: &Bytes,
        deframer: &mut Deframer,
        body_out: &mut SendStream<Bytes>,
    ) -> Result<(), (Status, Flags)> {
        let max = self.shared.config.max_message_size;
        deframer.push(chunk);
        deframer.set_encoding(self.response_encoding);
        while let Some(message) = deframer.next(max).map_err(|s| {
            body_out.send_reset(h2::Reason::CANCEL);
            (s, Flags::default())
        })? {
            self.on_message(message)?;
        }
        Ok(())
    }

    /// A frame from the channel for this call; `true` if it cancels the call.
    pub(super) fn on_channel_frame(&mut self, buf: &Bytes) -> bool {
        let Ok(frame) = Frame::parse(buf) else {
            return false;
        };
        let header = frame.header;
        match header.kind {
            FrameKind::Cancel => return true,
            FrameKind::WindowUpdate => self.window += i64::from(header.credits),
            FrameKind::Message
                if header.flags.contains(Flags::END_STREAM) && frame.payload.is_empty() =>
            {
                self.out_done = true;
            }
            FrameKind::Message => {
                if self.out_ended {
                    return false;
                }
                self.out
                    .push_back((deframe::frame(frame.payload), header.frame_len()));
                if header.flags.contains(Flags::END_STREAM) {
                    self.out_done = true;
                }
            }
            _ => {}
        }
        false
    }

    /// Waits until HTTP/2 lets some of the first queued request message go; `None` if
    /// the stream was reset.
    pub(super) async fn wait_stream(
        stream: &mut SendStream<Bytes>,
        out: &VecDeque<(Bytes, usize)>,
    ) -> Option<usize> {
        std::future::poll_fn(|cx| {
            if stream.poll_reset(cx).is_ready() {
                return Poll::Ready(None);
            }
            stream.reserve_capacity(out.iter().map(|(data, _)| data.len()).sum());
            match stream.poll_capacity(cx) {
                Poll::Ready(Some(Ok(0))) | Poll::Pending => Poll::Pending,
                Poll::Ready(Some(Ok(n))) => Poll::Ready(Some(n)),
                Poll::Ready(_) => Poll::Ready(None),
            }
        })
        .await
    }

    /// Sends what HTTP/2 allows (`capacity`) of the queued request messages in one DATA
    /// frame; each message that went out whole gives the channel its window back. `None`:
    /// the server reset the request stream, nothing more is sent.
    pub(super) async fn sent(
        &mut self,
        stream: &mut SendStream<Bytes>,
        capacity: Option<usize>,
    ) -> Result<(), (Status, Flags)> {
        let Some(mut capacity) = capacity else {
            // The server reset the request stream; the response tells why.
            self.out.clear();
            self.out_ended = true;
            return Ok(());
        };
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
        let end = self.out_done && self.out.is_empty();
        stream
            .send_data(data.freeze(), end)
            .map_err(|e| self.shared.stream_error(&e))?;
        if end {
            self.out_ended = true;
        }
        if granted > 0 {
            let mut grant = Header::new(FrameKind::WindowUpdate, self.call_id);
            grant.credits = granted.min(u32::MAX as usize) as u32;
            let _ = self
                .to_channel(Bytes::copy_from_slice(&grant.encode()))
                .await;
        }
        Ok(())
    }

    pub(super) async fn to_channel(&self, frame: Bytes) -> Result<(), ()> {
        self.shared.to_channel.send(frame).await.map_err(|_| ())
    }
}
