//! Interceptors: a function that sees every request's head (metadata, deadline,
//! extensions and, on a server, the peer) before it is sent or handled, and may change it
//! or refuse the call, as tonic's are. On a client, [`Channel::with_interceptor`]; on a
//! server, [`InterceptedService`] around a generated `FooServer`.
//!
//! ```
//! use rdmarpc_core::{Request, Status};
//!
//! /// Refuses calls without the right bearer token; tells the handler who called.
//! fn check_token(mut request: Request<()>) -> Result<Request<()>, Status> {
//!     match request.metadata().get("authorization") {
//!         Some("Bearer s3cret") => {
//!             request.extensions_mut().insert(User("ada".into()));
//!             Ok(request)
//!         }
//!         _ => Err(Status::unauthenticated("a valid token is required")),
//!     }
//! }
//! #[derive(Clone)]
//! struct User(String);
//! ```
//!
//! [`Channel::with_interceptor`]: crate::Channel::with_interceptor

use std::fmt;
use std::sync::Arc;

use crate::service::{MethodDescriptor, Service, ServiceFuture, StreamRequest, StreamingFuture};
use crate::{Payload, Request, Status};

/// Sees (and may change) every request's head before it is sent or handled; an `Err`
/// ends the call with that status instead. Implemented by every
/// `Fn(Request<()>) -> Result<Request<()>, Status> + Send + Sync + 'static`.
pub trait Interceptor: Send + Sync + 'static {
    /// Inspects or changes `request` (its message is `()`; metadata, timeout,
    /// extensions and peer are there), or refuses the call.
    ///
    /// # Errors
    /// The status the call ends with, e.g. `UNAUTHENTICATED`.
    fn call(&self, request: Request<()>) -> Result<Request<()>, Status>;
}

impl<F> Interceptor for F
where
    F: Fn(Request<()>) -> Result<Request<()>, Status> + Send + Sync + 'static,
{
    fn call(&self, request: Request<()>) -> Result<Request<()>, Status> {
        self(request)
    }
}

/// Runs `interceptor` on `request`'s head, keeping its message.
pub(crate) fn intercept<T>(
    interceptor: &dyn Interceptor,
    request: Request<T>,
) -> Result<Request<T>, Status> {
    let mut message = None;
    let head = request.map(|m| message = Some(m));
    let head = interceptor.call(head)?;
    Ok(head.map(|()| message.take().expect("the message was kept above")))
}

/// Interceptors run one after the other (the first added first).
pub(crate) struct Chain(pub(crate) Vec<Arc<dyn Interceptor>>);

impl Interceptor for Chain {
    fn call(&self, mut request: Request<()>) -> Result<Request<()>, Status> {
        for interceptor in &self.0 {
            request = interceptor.call(request)?;
        }
        Ok(request)
    }
}

/// A service whose every call passes `interceptor` first: a refused call never reaches
/// the service (its handler is not started, its request not decoded), and whatever the
/// interceptor put in the request's extensions reaches the handler.
///
/// ```text
/// Server::builder().add_service(InterceptedService::new(EchoServer::new(MyEcho), check_token))?
/// ```
pub struct InterceptedService<S, I> {
    inner: S,
    interceptor: I,
}

impl<S: Service, I: Interceptor> InterceptedService<S, I> {
    /// `service`, behind `interceptor`.
    pub fn new(service: S, interceptor: I) -> Self {
        InterceptedService {
            inner: service,
            interceptor,
        }
    }
}

impl<S: fmt::Debug, I> fmt::Debug for InterceptedService<S, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterceptedService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S: Service, I: Interceptor> Service for InterceptedService<S, I> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn methods(&self) -> &'static [MethodDescriptor] {
        self.inner.methods()
    }

    fn call(&self, index: usize, request: Request<Payload<'_>>) -> ServiceFuture {
        match intercept(&self.interceptor, request) {
            Ok(request) => self.inner.call(index, request),
            Err(status) => Box::pin(std::future::ready(Err(status))),
        }
    }

    fn call_streaming(&self, index: usize, request: Request<StreamRequest<'_>>) -> StreamingFuture {
        match intercept(&self.interceptor, request) {
            Ok(request) => self.inner.call_streaming(index, request),
            Err(status) => Box::pin(std::future::ready(Err(status))),
        }
    }
}
