//! `grpc://`: driving a standard gRPC (HTTP/2) server through tonic, so the same harness
//! measures gRPC servers. Messages stay [`DynamicMessage`]s: a small tonic [`Codec`]
//! encodes them with prost and decodes responses by reflection.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use prost::Message;
use prost_reflect::{DynamicMessage, MessageDescriptor};
use rdmarpc_core::codegen::MethodKind;
use rdmarpc_core::Code;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue, MetadataMap};
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

use crate::data::Messages;
use crate::stats::CallError;
use crate::streams::{drain, request_stream, Moved, StreamOptions};
use crate::target::{bad_data, stopped_early, CallOutcome, Target};
use crate::template::CallFacts;

/// A tonic codec for messages known only at run time.
#[derive(Debug, Clone)]
pub struct DynamicCodec {
    output: MessageDescriptor,
}

impl DynamicCodec {
    /// A codec whose responses decode as `output`.
    pub fn new(output: MessageDescriptor) -> DynamicCodec {
        DynamicCodec { output }
    }
}

impl Codec for DynamicCodec {
    type Encode = DynamicMessage;
    type Decode = DynamicMessage;
    type Encoder = DynamicEncoder;
    type Decoder = DynamicDecoder;

    fn encoder(&mut self) -> DynamicEncoder {
        DynamicEncoder
    }

    fn decoder(&mut self) -> DynamicDecoder {
        DynamicDecoder(self.output.clone())
    }
}

/// Encodes a [`DynamicMessage`] into tonic's buffer.
#[derive(Debug, Clone, Copy)]
pub struct DynamicEncoder;

impl Encoder for DynamicEncoder {
    type Item = DynamicMessage;
    type Error = Status;

    fn encode(&mut self, item: DynamicMessage, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("cannot encode request: {e}")))
    }
}

/// Decodes tonic's buffer as a [`DynamicMessage`] of the method's output type.
#[derive(Debug, Clone)]
pub struct DynamicDecoder(MessageDescriptor);

impl Decoder for DynamicDecoder {
    type Item = DynamicMessage;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<DynamicMessage>, Status> {
        DynamicMessage::decode(self.0.clone(), src)
            .map(Some)
            .map_err(|e| Status::internal(format!("failed to decode response: {e}")))
    }
}

/// Settings of the gRPC client.
#[derive(Debug, Clone, Default)]
pub struct GrpcSettings {
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// `--keepalive`: HTTP/2 PINGs after this long idle, answered within as long.
    pub keepalive: Option<Duration>,
    /// `--authority`: the requests' `:authority`.
    pub authority: Option<String>,
}

/// An endpoint to `addr` with `settings`.
fn endpoint(addr: &str, settings: &GrpcSettings) -> anyhow::Result<Endpoint> {
    let mut endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .with_context(|| format!("bad gRPC address {addr:?}"))?
        .tcp_nodelay(true)
        .connect_timeout(settings.connect_timeout)
        .http2_adaptive_window(true);
    if let Some(k) = settings.keepalive {
        endpoint = endpoint
            .http2_keep_alive_interval(k)
            .keep_alive_timeout(k)
            .keep_alive_while_idle(false);
    }
    if let Some(authority) = &settings.authority {
        let origin = format!("http://{authority}")
            .parse()
            .with_context(|| format!("bad --authority {authority:?}"))?;
        endpoint = endpoint.origin(origin);
    }
    Ok(endpoint)
}

/// Opens one HTTP/2 connection to `addr` (`host:port`), with `TCP_NODELAY` and adaptive
/// HTTP/2 flow-control windows (so that large messages are not throttled by the 64 KiB
/// default window).
///
/// # Errors
/// A bad address or a failed connect.
pub async fn connect(addr: &str, settings: &GrpcSettings) -> anyhow::Result<Channel> {
    endpoint(addr, settings)?
        .connect()
        .await
        .with_context(|| format!("cannot connect to grpc://{addr}"))
}

/// tonic's balanced channel over `addrs` (each `HOST:PORT`): power of two choices on
/// requests in flight (tower's balancer), connecting in the background.
///
/// # Errors
/// An address that is not a URI authority.
pub fn connect_balanced(addrs: &[String], settings: &GrpcSettings) -> anyhow::Result<Channel> {
    let endpoints = addrs
        .iter()
        .map(|addr| endpoint(addr, settings))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Channel::balance_list(endpoints.into_iter()))
}

/// Calls a unary method of a gRPC server over one HTTP/2 connection.
#[derive(Debug, Clone)]
pub struct GrpcTarget {
    grpc: tonic::client::Grpc<Channel>,
    path: PathAndQuery,
    codec: DynamicCodec,
    metadata: MetadataMap,
    timeout: Option<Duration>,
    kind: MethodKind,
    stream: StreamOptions,
}

impl GrpcTarget {
    /// A target calling `path` (`/package.Service/Method`) over `channel`, decoding
    /// responses as `output`, with `metadata` and `timeout` on every request.
    ///
    /// # Errors
    /// Metadata that is not valid ASCII HTTP/2 header material.
    pub fn new(
        channel: Channel,
        path: &str,
        output: MessageDescriptor,
        metadata: &[(String, String)],
        timeout: Option<Duration>,
        (max_recv, max_send): (usize, usize),
    ) -> anyhow::Result<GrpcTarget> {
        let grpc = tonic::client::Grpc::new(channel)
            .max_decoding_message_size(max_recv)
            .max_encoding_message_size(max_send);
        Ok(GrpcTarget {
            grpc,
            path: PathAndQuery::try_from(path).context("bad method path")?,
            codec: DynamicCodec::new(output),
            metadata: metadata_map(metadata)?,
            timeout,
            kind: MethodKind::Unary,
            stream: StreamOptions::default(),
        })
    }

    /// The same target, compressing requests with gzip (`-e`) and accepting gzipped
    /// responses.
    pub fn with_gzip(mut self) -> GrpcTarget {
        use tonic::codec::CompressionEncoding::Gzip;
        self.grpc = self.grpc.send_compressed(Gzip).accept_compressed(Gzip);
        self
    }

    /// The same target for a method of `kind`, making streaming calls as `options` say.
    pub fn with_kind(mut self, kind: MethodKind, options: StreamOptions) -> GrpcTarget {
        self.kind = kind;
        self.stream = options;
        self
    }

    fn request<T>(&self, metadata: &MetadataMap, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        *request.metadata_mut() = metadata.clone();
        if let Some(timeout) = self.timeout {
            // Tells the server (grpc-timeout); the client side is enforced in `call`.
            request.set_timeout(timeout);
        }
        request
    }

    /// One call of the method's kind, without the client-side deadline.
    async fn call_once(
        &self,
        call: CallFacts,
        messages: &Arc<Messages>,
        moved: &Arc<Moved>,
    ) -> Result<(), CallError> {
        let mut grpc = self.grpc.clone();
        grpc.ready()
            .await
            .map_err(|e| CallError::new(Code::Unavailable, e.to_string()))?;
        let status =
            |status: Status| CallError::new(Code::from_u8(status.code() as u8), status.message());
        let path = self.path.clone();
        let codec = self.codec.clone();
        let rendered = match messages.metadata_for(call).map_err(bad_data)? {
            Some(list) => Some(metadata_map(&list).map_err(|e| bad_data(format!("{e:#}")))?),
            None => None,
        };
        let md = rendered.as_ref().unwrap_or(&self.metadata);
        match self.kind {
            MethodKind::Unary => {
                let request = self.request(md, messages.for_unary(call).map_err(bad_data)?);
                grpc.unary(request, path, codec)
                    .await
                    .map(drop)
                    .map_err(status)
            }
            MethodKind::ServerStreaming => {
                let request = self.request(md, messages.for_unary(call).map_err(bad_data)?);
                let responses = grpc
                    .server_streaming(request, path, codec)
                    .await
                    .map_err(status)?
                    .into_inner();
                match drain(responses, &self.stream, true, moved).await {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(stopped_early()),
                    Err(e) => Err(status(e)),
                }
            }
            MethodKind::ClientStreaming => {
                let stream =
                    request_stream(messages, call, self.stream, moved.clone()).map_err(bad_data)?;
                grpc.client_streaming(self.request(md, stream), path, codec)
                    .await
                    .map(drop)
                    .map_err(status)
            }
            MethodKind::Streaming => {
                let stream =
                    request_stream(messages, call, self.stream, moved.clone()).map_err(bad_data)?;
                let responses = grpc
                    .streaming(self.request(md, stream), path, codec)
                    .await
                    .map_err(status)?
                    .into_inner();
                drain(responses, &self.stream, false, moved)
                    .await
                    .map(drop)
                    .map_err(status)
            }
        }
    }
}

impl Target for GrpcTarget {
    async fn call(&self, call: CallFacts, messages: &Arc<Messages>) -> CallOutcome {
        let moved = Arc::new(Moved::default());
        let call = self.call_once(call, messages, &moved);
        let Some(timeout) = self.timeout else {
            return (call.await, moved.counts());
        };
        let started = crate::target::call_started();
        let deadline_exceeded = || {
            CallError::new(
                Code::DeadlineExceeded,
                format!("deadline of {timeout:?} exceeded"),
            )
        };
        let result = match tokio::time::timeout(timeout, call).await {
            // The client's deadline decides, as in grpc-go: a server that enforces the same
            // deadline may answer first, and tonic's own timer (it enforces the
            // grpc-timeout it sends, and may fire a tick before ours) answers CANCELLED
            // "Timeout expired".
            Ok(Err(e)) if started.elapsed() >= timeout || tonic_timeout(&e) => {
                Err(deadline_exceeded())
            }
            Ok(result) => result,
            Err(_) => Err(deadline_exceeded()),
        };
        (result, moved.counts())
    }
}

/// `metadata` as tonic's map.
///
/// # Errors
/// A key or value that is not valid ASCII HTTP/2 header material.
fn metadata_map(metadata: &[(String, String)]) -> anyhow::Result<MetadataMap> {
    let mut map = MetadataMap::new();
    for (key, value) in metadata {
        let k: AsciiMetadataKey = key
            .to_ascii_lowercase()
            .parse()
            .with_context(|| format!("metadata key {key:?} is not a valid gRPC header name"))?;
        let v: AsciiMetadataValue = value
            .parse()
            .with_context(|| format!("metadata value of {key:?} is not valid ASCII"))?;
        map.append(k, v);
    }
    Ok(map)
}

/// tonic's client gave up at the call's grpc-timeout (its `TimeoutExpired`).
fn tonic_timeout(e: &CallError) -> bool {
    e.code == Code::Cancelled && e.message == "Timeout expired"
}
