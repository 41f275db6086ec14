//! One call's task, the I/O shell of the call's translator (`translate.rs`): opens its
//! HTTP/2 stream, reads the response and writes the request body as h2 allows, and
//! hands the channel what the translator lets go.

use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use h2::client::ResponseFuture;
use h2::{RecvStream, SendStream};
use http::{HeaderValue, Request};
use rdmarpc_core::codegen::MethodKind;
use rdmarpc_core::wire::{Flags, Frame, Header};
use rdmarpc_core::{Metadata, Status};
use tokio::sync::mpsc;

use super::status::format_timeout;
use super::translate::{Exchange, Failure, FromChannel};
use super::Shared;
use crate::compress::ACCEPT;
use crate::text;

/// One call's task: see the module docs.
pub(super) struct Call {
    pub(super) shared: Arc<Shared>,
    pub(super) call_id: u64,
    pub(super) kind: MethodKind,
}

impl Call {
    pub(super) fn new(shared: Arc<Shared>, call_id: u64, kind: MethodKind) -> Call {
        Call {
            shared,
            call_id,
            kind,
        }
    }

    pub(super) async fn run(
        &mut self,
        path: &'static str,
        header: Header,
        request: Bytes,
        mut frames: mpsc::UnboundedReceiver<Bytes>,
    ) {
        let config = &self.shared.config;
        let mut ex = Exchange::new(
            self.call_id,
            self.kind,
            &header,
            config.max_message_size,
            config.stream_window as usize,
            config.send_compression,
        );
        if let Err((status, flags)) = self
            .exchange(&mut ex, path, header, request, &mut frames)
            .await
        {
            if !ex.is_done() {
                let _ = self.to_channel(ex.failed(&status, flags)).await;
            }
        }
    }

    /// The whole call; `Err` carries the status it failed with, for the channel.
    async fn exchange(
        &mut self,
        ex: &mut Exchange,
        path: &'static str,
        header: Header,
        request: Bytes,
        frames: &mut mpsc::UnboundedReceiver<Bytes>,
    ) -> Result<(), Failure> {
        let (response, mut body_out) = self.open(ex, path, &header, &request).await?;
        let shared = self.shared.clone();
        let unavailable = |e: h2::Error| shared.stream_error(&e);
        let mut response = std::pin::pin!(response);
        let mut body: Option<RecvStream> = None;
        loop {
            while let Some(frame) = ex.next_for_channel() {
                self.to_channel(frame)
                    .await
                    .map_err(|()| (Status::cancelled("the channel went"), Flags::default()))?;
            }
            if ex.is_done() {
                return Ok(());
            }
            if ex.take_end_of_body() {
                let _ = body_out.send_data(Bytes::new(), true);
            }
            let reading = body.is_some() && ex.wants_body();
            let waiting = ex.waiting();
            tokio::select! {
                got = frames.recv() => match got {
                    None => return Ok(()),
                    Some(frame) => {
                        if ex.on_channel_frame(&frame) == FromChannel::Cancel {
                            body_out.send_reset(h2::Reason::CANCEL);
                            return Ok(());
                        }
                    }
                },
                headers = &mut response, if body.is_none() && ex.wants_headers() => {
                    let (parts, stream) = headers.map_err(unavailable)?.into_parts();
                    if ex.on_headers(parts.status, &parts.headers)? {
                        body = Some(stream);
                    }
                }
                chunk = async { body.as_mut().expect("reading").data().await }, if reading => {
                    match chunk {
                        Some(Ok(chunk)) => {
                            let stream = body.as_mut().expect("reading");
                            let _ = stream.flow_control().release_capacity(chunk.len());
                            ex.on_data(&chunk).inspect_err(|_| body_out.send_reset(h2::Reason::CANCEL))?;
                        }
                        Some(Err(e)) => return Err(self.shared.stream_error(&e)),
                        None => {
                            let mut stream = body.take().expect("reading");
                            let trailers = stream
                                .trailers()
                                .await
                                .map_err(|e| self.shared.stream_error(&e))?;
                            ex.on_trailers(trailers.as_ref())?;
                        }
                    }
                }
                capacity = Self::wait_stream(&mut body_out, waiting), if waiting > 0 => {
                    match capacity {
                        // The server reset the request stream; the response tells why.
                        None => ex.request_reset(),
                        Some(n) => {
                            let (data, end) = ex.take_data(n);
                            body_out.send_data(data, end).map_err(|e| self.shared.stream_error(&e))?;
                        }
                    }
                }
            }
        }
    }

    /// Opens the call's HTTP/2 stream for the channel's `request` (its `header` parsed),
    /// waiting while the server's limit of concurrent streams is reached (frames from
    /// the channel wait in their queue meanwhile), and sends a unary or server-streaming
    /// call's one message.
    async fn open(
        &self,
        ex: &mut Exchange,
        path: &'static str,
        header: &Header,
        request: &Bytes,
    ) -> Result<(ResponseFuture, SendStream<Bytes>), Failure> {
        let frame = Frame::parse(request)
            .map_err(|e| (Status::internal(e.to_string()), Flags::default()))?;
        let metadata = Metadata::decode(frame.metadata).unwrap_or_default();
        let http = self.http_request(path, header, &metadata)?;
        let unavailable = |e: h2::Error| self.shared.stream_error(&e);
        let mut h2 = self.shared.h2.clone().ready().await.map_err(unavailable)?;
        let (response, mut body_out) = h2.send_request(http, false).map_err(unavailable)?;
        if let Some(data) = ex.opened(frame.payload, self.shared.config.stream_window) {
            body_out.send_data(data, true).map_err(unavailable)?;
        }
        Ok((response, body_out))
    }

    /// The HTTP/2 request that opens the call: `path`, gRPC's headers, the timeout the
    /// channel's `header` tells, the request encoding, and the call's `metadata`.
    fn http_request(
        &self,
        path: &'static str,
        header: &Header,
        metadata: &Metadata,
    ) -> Result<Request<()>, Failure> {
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

    /// Waits until HTTP/2 lets some of the `waiting` request bytes go; `None` if the
    /// stream was reset.
    async fn wait_stream(stream: &mut SendStream<Bytes>, waiting: usize) -> Option<usize> {
        std::future::poll_fn(|cx| {
            if stream.poll_reset(cx).is_ready() {
                return Poll::Ready(None);
            }
            stream.reserve_capacity(waiting);
            match stream.poll_capacity(cx) {
                Poll::Ready(Some(Ok(0))) | Poll::Pending => Poll::Pending,
                Poll::Ready(Some(Ok(n))) => Poll::Ready(Some(n)),
                Poll::Ready(_) => Poll::Ready(None),
            }
        })
        .await
    }

    async fn to_channel(&self, frame: Bytes) -> Result<(), ()> {
        self.shared.to_channel.send(frame).await.map_err(|_| ())
    }
}
