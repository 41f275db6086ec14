//! What generated code uses. Not for direct use: its contents may change with the generator.

use std::future::Future;

use futures_util::StreamExt;

pub use crate::service::{
    method_id, BoxMessage, BoxMessageStream, EncodeMessage, Gathered, MethodDescriptor, MethodKind,
    NamedService, Service, ServiceFuture, SplitLarge, StreamRequest, StreamResponse,
    StreamingFuture,
};
pub use crate::{
    Channel, Code, Connection, InterceptedService, Interceptor, IntoRequest, IntoStreamingRequest,
    Metadata, Payload, Request, Response, Status, Streaming, TransportError,
};
pub use bytes;
pub use futures_util::Stream;
pub use prost;

/// Boxes a response message (see [`boxed_gathered`] for ones with large `bytes` fields).
pub fn boxed<M: prost::Message + Sync + 'static>(message: M) -> BoxMessage {
    Box::new(message)
}

/// Boxes a response message whose large `bytes` fields go by gathered write.
pub fn boxed_gathered<M: SplitLarge + Sync + 'static>(message: M) -> BoxMessage {
    Box::new(Gathered(message))
}

/// Runs a server-streaming handler `f` on `request`'s decoded message; its stream's
/// messages are boxed with `boxed` ([`boxed`] or [`boxed_gathered`]).
pub fn server_streaming<Req, Resp, S, F, Fut>(
    request: Request<StreamRequest<'_>>,
    f: F,
    boxed: fn(Resp) -> BoxMessage,
) -> StreamingFuture
where
    Req: prost::Message + Default + 'static,
    Resp: 'static,
    S: Stream<Item = Result<Resp, Status>> + Send + 'static,
    F: FnOnce(Request<Req>) -> Fut,
    Fut: Future<Output = Result<Response<S>, Status>> + Send + 'static,
{
    let request = request.try_map(|body| match body {
        StreamRequest::Message(payload) => payload
            .decode::<Req>()
            .map_err(|e| Status::invalid_argument(format!("failed to decode request: {e}"))),
        StreamRequest::Stream(_) => Err(Status::internal("expected one request message")),
    });
    start(request, f, move |s| box_stream(s, boxed))
}

/// Runs a client-streaming handler `f` on `request`'s stream of `Req`.
pub fn client_streaming<Req, Resp, F, Fut>(
    request: Request<StreamRequest<'_>>,
    f: F,
    boxed: fn(Resp) -> BoxMessage,
) -> StreamingFuture
where
    Req: prost::Message + Default + 'static,
    Resp: 'static,
    F: FnOnce(Request<Streaming<Req>>) -> Fut,
    Fut: Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
{
    start(request_stream(request), f, move |m| {
        StreamResponse::Message(boxed(m))
    })
}

/// Runs a bidirectional streaming handler `f` on `request`'s stream of `Req`.
pub fn streaming<Req, Resp, S, F, Fut>(
    request: Request<StreamRequest<'_>>,
    f: F,
    boxed: fn(Resp) -> BoxMessage,
) -> StreamingFuture
where
    Req: prost::Message + Default + 'static,
    Resp: 'static,
    S: Stream<Item = Result<Resp, Status>> + Send + 'static,
    F: FnOnce(Request<Streaming<Req>>) -> Fut,
    Fut: Future<Output = Result<Response<S>, Status>> + Send + 'static,
{
    start(request_stream(request), f, move |s| box_stream(s, boxed))
}

/// Runs handler `f` on a request that was prepared for it, its response turned into a
/// [`StreamResponse`] by `answer`; a ready failure when the preparation failed.
fn start<Req, T, F, Fut>(
    request: Result<Request<Req>, Status>,
    f: F,
    answer: impl FnOnce(T) -> StreamResponse + Send + 'static,
) -> StreamingFuture
where
    F: FnOnce(Request<Req>) -> Fut,
    Fut: Future<Output = Result<Response<T>, Status>> + Send + 'static,
{
    match request {
        Ok(request) => {
            let fut = f(request);
            Box::pin(async move { Ok(fut.await?.map(answer)) })
        }
        Err(status) => Box::pin(std::future::ready(Err(status))),
    }
}

fn request_stream<Req: prost::Message + Default + 'static>(
    request: Request<StreamRequest<'_>>,
) -> Result<Request<Streaming<Req>>, Status> {
    request.try_map(|body| match body {
        StreamRequest::Stream(stream) => Ok(stream.decoded::<Req>()),
        StreamRequest::Message(_) => Err(Status::internal("expected a request stream")),
    })
}

fn box_stream<Resp: 'static, S>(stream: S, boxed: fn(Resp) -> BoxMessage) -> StreamResponse
where
    S: Stream<Item = Result<Resp, Status>> + Send + 'static,
{
    StreamResponse::Stream(Box::pin(stream.map(move |item| item.map(boxed))))
}

/// Decodes `request`'s payload as `Req` and runs `f` on it.
///
/// # Returns
/// A ready future failing with `INVALID_ARGUMENT` when the payload is not a valid `Req`;
/// otherwise `f`'s future, boxed, with its response message boxed.
pub fn unary<Req, Resp, F, Fut>(request: Request<Payload<'_>>, f: F) -> ServiceFuture
where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + Sync + 'static,
    F: FnOnce(Request<Req>) -> Fut,
    Fut: Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
{
    unary_boxed(request, f, |m| Box::new(m))
}

/// Like [`unary`], for a response type whose large `bytes` fields are sent by gathered
/// write ([`SplitLarge`]).
pub fn unary_gathered<Req, Resp, F, Fut>(request: Request<Payload<'_>>, f: F) -> ServiceFuture
where
    Req: prost::Message + Default + 'static,
    Resp: SplitLarge + Sync + 'static,
    F: FnOnce(Request<Req>) -> Fut,
    Fut: Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
{
    unary_boxed(request, f, |m| Box::new(Gathered(m)))
}

fn unary_boxed<Req, Resp, F, Fut>(
    request: Request<Payload<'_>>,
    f: F,
    boxed: fn(Resp) -> BoxMessage,
) -> ServiceFuture
where
    Req: prost::Message + Default + 'static,
    Resp: Send + 'static,
    F: FnOnce(Request<Req>) -> Fut,
    Fut: Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
{
    match request.try_map(|payload| payload.decode::<Req>()) {
        Ok(request) => {
            let fut = f(request);
            Box::pin(async move {
                let response = fut.await?;
                Ok(response.map(boxed))
            })
        }
        Err(err) => {
            let status = Status::invalid_argument(format!("failed to decode request: {err}"));
            Box::pin(std::future::ready(Err(status)))
        }
    }
}

/// A ready future failing with `UNIMPLEMENTED` for `path`.
pub fn unimplemented(path: &str) -> ServiceFuture {
    let status = Status::unimplemented(format!("method {path} is not implemented"));
    Box::pin(std::future::ready(Err(status)))
}
