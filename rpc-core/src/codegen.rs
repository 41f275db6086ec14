//! What generated code uses. Not for direct use: its contents may change with the generator.

use std::future::Future;

pub use crate::service::{
    method_id, BoxMessage, EncodeMessage, Gathered, MethodDescriptor, NamedService, Service,
    ServiceFuture, SplitLarge,
};
pub use crate::{
    Channel, Code, Connection, IntoRequest, Metadata, Payload, Request, Response, Status,
};
pub use bytes;
pub use prost;

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
    let (metadata, payload, timeout) = request.into_parts();
    match payload.decode::<Req>() {
        Ok(message) => {
            let fut = f(Request::from_parts(metadata, message, timeout));
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
