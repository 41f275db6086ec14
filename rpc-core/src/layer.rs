//! tower compatibility: layers around a server's calls
//! ([`ServerBuilder::layer`](crate::ServerBuilder::layer)) and around a channel's unary
//! calls ([`Channel::layer`](crate::Channel::layer)), so that timeouts, rate limits,
//! concurrency limits, load shedding, retries and authentication come from the tower
//! ecosystem.
//!
//! A layer sees a call as a [`Request`] of [`ServerCall`] (server) or [`ClientCall`]
//! (client): its metadata, extensions, peer and deadline, the method, and the encoded
//! message. Errors of layers become statuses: a [`Status`] anywhere in an error's chain
//! is kept; tower's `Elapsed` (a timeout layer) becomes `DEADLINE_EXCEEDED`, `Overloaded`
//! (load shedding) `UNAVAILABLE`, anything else `UNKNOWN` with its text.
//!
//! A streaming call goes through a server's layers until its handler returns the response
//! stream: a concurrency permit or a timeout of a layer covers the call's start, not the
//! stream's body (the server's own limits and the call's deadline cover that).
//!
//! Layers cost an owned copy of each request message (the runtime otherwise decodes
//! requests from the transport's buffer in place, and encodes responses into it): they
//! are opt-in, per server and per channel.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tower::util::BoxCloneSyncService;
use tower::ServiceExt;

use crate::service::{
    BoxMessage, MethodDescriptor, Service, ServiceFuture, StreamRequest, StreamResponse,
    StreamingFuture,
};
use crate::{Code, Payload, Request, Response, Status};

/// The error type of layered services.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A call as a server's tower layers see it (in a [`Request`], with its metadata,
/// extensions, peer and timeout).
pub struct ServerCall {
    method: &'static MethodDescriptor,
    body: ServerBody,
    service: Arc<dyn Service>,
    index: usize,
}

impl std::fmt::Debug for ServerCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerCall")
            .field("method", &self.method.path)
            .field("body", &self.body)
            .finish()
    }
}

impl ServerCall {
    /// The method called.
    pub fn method(&self) -> &'static MethodDescriptor {
        self.method
    }

    /// The request's message or stream.
    pub fn body(&self) -> &ServerBody {
        &self.body
    }
}

/// A [`ServerCall`]'s request.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServerBody {
    /// A unary call's request message, encoded.
    Unary(Bytes),
    /// A streaming call's request: a server-streaming call's one message, or a client
    /// stream.
    Streaming(StreamRequest<'static>),
}

/// What a server's layered service answers.
#[non_exhaustive]
pub enum ServerAnswer {
    /// A unary call's response message.
    Unary(BoxMessage),
    /// A streaming call's response (a message, or a stream of them).
    Streaming(StreamResponse),
}

impl std::fmt::Debug for ServerAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerAnswer::Unary(_) => f.write_str("ServerAnswer::Unary"),
            ServerAnswer::Streaming(s) => write!(f, "ServerAnswer::Streaming({s:?})"),
        }
    }
}

/// The layered service every call of a server with layers goes through.
pub(crate) type ServerStack =
    BoxCloneSyncService<Request<ServerCall>, Response<ServerAnswer>, BoxError>;

/// Wraps the stack built so far in one more layer.
pub(crate) type WrapServer = Box<dyn FnOnce(ServerStack) -> ServerStack + Send + Sync>;

/// The innermost service of a server's layers: runs the call's handler.
#[derive(Debug, Clone, Copy, Default)]
pub struct Handlers;

impl tower::Service<Request<ServerCall>> for Handlers {
    type Response = Response<ServerAnswer>;
    type Error = Status;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Status>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ServerCall>) -> Self::Future {
        let mut service = None;
        let request = request.map(|call| {
            service = Some((call.service, call.index));
            call.body
        });
        let (service, index) = service.expect("set by map");
        if let ServerBody::Unary(_) = request.get_ref() {
            let request = request.map(|body| match body {
                ServerBody::Unary(bytes) => Payload::Shared(bytes),
                ServerBody::Streaming(_) => Payload::Shared(Bytes::new()),
            });
            let call = service.call(index, request);
            return Box::pin(async move { Ok(call.await?.map(ServerAnswer::Unary)) });
        }
        let request = request.map(|body| match body {
            ServerBody::Streaming(body) => body,
            ServerBody::Unary(bytes) => StreamRequest::Message(Payload::Shared(bytes)),
        });
        let call = service.call_streaming(index, request);
        Box::pin(async move { Ok(call.await?.map(ServerAnswer::Streaming)) })
    }
}

/// The bottom of a server's stack.
pub(crate) fn server_bottom() -> ServerStack {
    BoxCloneSyncService::new(Handlers.map_err(BoxError::from))
}

/// A registered service whose calls go through the server's layers.
pub(crate) struct Layered {
    pub(crate) inner: Arc<dyn Service>,
    pub(crate) stack: ServerStack,
}

impl Layered {
    fn run(
        &self,
        call: Request<ServerCall>,
    ) -> impl Future<Output = Result<Response<ServerAnswer>, Status>> + Send + 'static {
        let stack = self.stack.clone();
        async move {
            let response = stack.oneshot(call).await.map_err(to_status)?;
            Ok(response)
        }
    }

    fn call_of<T>(
        &self,
        index: usize,
        request: Request<T>,
        body: ServerBody,
    ) -> Request<ServerCall> {
        let method = &self.inner.methods()[index];
        let service = self.inner.clone();
        request.map(|_| ServerCall {
            method,
            body,
            service,
            index,
        })
    }
}

impl Service for Layered {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn methods(&self) -> &'static [MethodDescriptor] {
        self.inner.methods()
    }

    fn call(&self, index: usize, request: Request<Payload<'_>>) -> ServiceFuture {
        // Owned from here on: layers may hold the call past the transport's buffer.
        let bytes = match request.get_ref() {
            Payload::Borrowed(slice) => Bytes::copy_from_slice(slice),
            Payload::Shared(bytes) => bytes.clone(),
        };
        let call = self.call_of(index, request, ServerBody::Unary(bytes));
        let run = self.run(call);
        Box::pin(async move {
            run.await?.try_map(|answer| match answer {
                ServerAnswer::Unary(message) => Ok(message),
                ServerAnswer::Streaming(_) => Err(Status::internal(
                    "a layer answered a unary call with a streaming response",
                )),
            })
        })
    }

    fn call_streaming(&self, index: usize, request: Request<StreamRequest<'_>>) -> StreamingFuture {
        let mut owned = None;
        let request = request.map(|body| {
            owned = Some(match body {
                StreamRequest::Message(Payload::Borrowed(slice)) => {
                    StreamRequest::Message(Payload::Shared(Bytes::copy_from_slice(slice)))
                }
                StreamRequest::Message(Payload::Shared(bytes)) => {
                    StreamRequest::Message(Payload::Shared(bytes))
                }
                StreamRequest::Stream(stream) => StreamRequest::Stream(stream),
            });
        });
        let body = ServerBody::Streaming(owned.expect("set by map"));
        let call = self.call_of(index, request, body);
        let run = self.run(call);
        Box::pin(async move {
            run.await?.try_map(|answer| match answer {
                ServerAnswer::Streaming(response) => Ok(response),
                ServerAnswer::Unary(_) => Err(Status::internal(
                    "a layer answered a streaming call with a unary response",
                )),
            })
        })
    }
}

/// The status an error of a layer stands for.
pub fn to_status(error: BoxError) -> Status {
    to_status_ref(&*error)
}

/// [`to_status`] of a borrowed error.
pub fn to_status_ref(error: &(dyn std::error::Error + Send + Sync + 'static)) -> Status {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(status) = e.downcast_ref::<Status>() {
            return status.clone();
        }
        if e.is::<tower::timeout::error::Elapsed>() {
            return Status::deadline_exceeded("timed out in a layer (tower timeout)");
        }
        if e.is::<tower::load_shed::error::Overloaded>() {
            return Status::unavailable("overloaded: the call was shed (tower load shed)");
        }
        source = e.source();
    }
    Status::new(Code::Unknown, error.to_string())
}

/// A unary call as a channel's tower layers see it (in a [`Request`], with its metadata,
/// extensions and timeout): the method and the encoded request message. Cheap to clone,
/// so retry layers can send it again.
#[derive(Debug, Clone)]
pub struct ClientCall {
    method: MethodDescriptor,
    message: Bytes,
}

impl ClientCall {
    /// A call of `method` with `message`, encoded.
    pub fn new(method: MethodDescriptor, message: Bytes) -> ClientCall {
        ClientCall { method, message }
    }

    /// A call of `method` with `message`, which it encodes.
    pub fn encode(method: MethodDescriptor, message: &impl prost::Message) -> ClientCall {
        ClientCall::new(method, message.encode_to_vec().into())
    }

    /// The method called.
    pub fn method(&self) -> &MethodDescriptor {
        &self.method
    }

    /// The encoded request message.
    pub fn message(&self) -> &Bytes {
        &self.message
    }
}

/// A message already encoded: sent as its bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Encoded(pub(crate) Bytes);

impl prost::Message for Encoded {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut) {
        buf.put_slice(&self.0);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0 = Bytes::new();
    }
}

/// The layered service of a channel's unary calls.
pub(crate) type ClientStack = BoxCloneSyncService<Request<ClientCall>, Response<Bytes>, BoxError>;
