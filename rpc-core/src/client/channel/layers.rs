//! Interceptors and tower layers around a channel's calls; the channel as a tower service.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use std::time::Instant;

use super::Channel;
use crate::interceptor::{intercept, Chain, Interceptor};
use crate::layer::{to_status, BoxError, ClientCall, ClientStack, Encoded};
use crate::transport::Connection;
use crate::{Payload, Request, Response, Status};

/// The deadline of a call sent through a channel's layers (a request extension), so that
/// the time spent in the layers is not told to the server as time it has.
#[derive(Debug, Clone, Copy)]
pub(super) struct LayerDeadline(Instant);

/// A channel is a tower service of unary calls, its message encoded: with
/// `tower::ServiceBuilder` (or [`Channel::layer`]) any tower middleware goes around it.
/// A channel with layers sends the call through them.
impl<C: Connection> tower::Service<Request<ClientCall>> for Channel<C> {
    type Response = Response<bytes::Bytes>;
    type Error = Status;
    type Future = Pin<Box<dyn Future<Output = Result<Response<bytes::Bytes>, Status>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Status>> {
        // The channel bounds its calls itself (connection limits, deadlines).
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ClientCall>) -> Self::Future {
        let channel = self.clone();
        Box::pin(async move {
            if let Some(stack) = &channel.stack {
                let request = channel.intercepted(request)?;
                return channel.through_layers(stack, request).await;
            }
            let method = *request.get_ref().method();
            let mut request = request.map(|call| Encoded(call.message().clone()));
            if let Some(LayerDeadline(deadline)) = request.extensions_mut().remove() {
                request.set_timeout(deadline.saturating_duration_since(Instant::now()));
            }
            channel
                .unary_with(request, &method, |payload| {
                    Ok(match payload {
                        Payload::Borrowed(slice) => bytes::Bytes::copy_from_slice(slice),
                        Payload::Shared(bytes) => bytes,
                    })
                })
                .await
        })
    }
}

impl<C: Connection> Channel<C> {
    /// This channel (sharing its connection with every clone) with `interceptor` run on
    /// every call's request head before it is sent: it may add metadata (a token, a
    /// trace context) or refuse the call with a status, which the call then returns
    /// without reaching the network. Interceptors added one after another run in that
    /// order; clones made before keep theirs.
    ///
    /// ```
    /// # fn f(channel: rdmarpc_core::Channel<rdmarpc_core::memory::MemoryConnection>) {
    /// let authed = channel.with_interceptor(|mut request: rdmarpc_core::Request<()>| {
    ///     request.metadata_mut().insert("authorization", "Bearer s3cret");
    ///     Ok(request)
    /// });
    /// # }
    /// ```
    pub fn with_interceptor(&self, interceptor: impl Interceptor) -> Channel<C> {
        let interceptor: Arc<dyn Interceptor> = match &self.interceptor {
            Some(first) => Arc::new(Chain(vec![first.clone(), Arc::new(interceptor)])),
            None => Arc::new(interceptor),
        };
        Channel {
            stack: self.stack.clone(),
            inner: self.inner.clone(),
            interceptor: Some(interceptor),
        }
    }

    /// This channel (sharing its connection with every clone) with its unary calls run
    /// through `layer`, a tower layer: a timeout, a rate or concurrency limit, a retry
    /// policy, load shedding. The layered service takes a [`Request`] of
    /// [`ClientCall`](crate::layer::ClientCall) (the method and the encoded message) and
    /// answers a [`Response`] of the encoded response; its errors become statuses
    /// ([`layer::to_status`](crate::layer::to_status)). Layers added later wrap those
    /// added before; interceptors run before every layer. Streaming calls do not go
    /// through layers. Generated clients over the returned channel use the layers.
    ///
    /// ```
    /// # fn f(channel: rdmarpc_core::Channel<rdmarpc_core::memory::MemoryConnection>) {
    /// let limited = channel.layer(tower::limit::ConcurrencyLimitLayer::new(8));
    /// # }
    /// ```
    pub fn layer<L>(&self, layer: L) -> Channel<C>
    where
        L: tower::Layer<ClientStack>,
        L::Service: tower::Service<Request<ClientCall>, Response = Response<bytes::Bytes>>
            + Clone
            + Send
            + Sync
            + 'static,
        <L::Service as tower::Service<Request<ClientCall>>>::Error: Into<BoxError>,
        <L::Service as tower::Service<Request<ClientCall>>>::Future: Send + 'static,
    {
        use tower::ServiceExt;
        let inner = self.stack.clone().unwrap_or_else(|| {
            // The bottom: this channel without layers or interceptors (those run first).
            let bottom = Channel {
                inner: self.inner.clone(),
                interceptor: None,
                stack: None,
            };
            tower::util::BoxCloneSyncService::new(bottom.map_err(BoxError::from))
        });
        Channel {
            inner: self.inner.clone(),
            interceptor: self.interceptor.clone(),
            stack: Some(tower::util::BoxCloneSyncService::new(
                layer.layer(inner).map_err(Into::into),
            )),
        }
    }

    /// Sends `request` through the layers `stack`, within the request's timeout (or the
    /// channel's default): time spent waiting in a layer (for a concurrency permit, a
    /// rate limit) counts against the call's deadline.
    pub(super) async fn through_layers(
        &self,
        stack: &ClientStack,
        request: Request<ClientCall>,
    ) -> Result<Response<bytes::Bytes>, Status> {
        use tower::ServiceExt;
        let mut request = request;
        let timeout = request.timeout().or(self.inner.config.timeout);
        // tokio's clock (the timer's; it differs from the system's when paused in tests),
        // or the process's cheap one (`crate::clock`).
        let deadline = timeout.and_then(|t| crate::clock::tokio_now().checked_add(t));
        if let Some(deadline) = deadline {
            // The bottom of the stack tells the server the time left, not the timeout.
            request
                .extensions_mut()
                .insert(LayerDeadline(deadline.into_std()));
        }
        let call = stack.clone().oneshot(request);
        match timeout {
            Some(t) => super::retry::within(t, deadline, call)
                .await
                .map_err(|_| Status::deadline_exceeded(format!("deadline of {t:?} exceeded")))?
                .map_err(to_status),
            None => call.await.map_err(to_status),
        }
    }

    /// The request after this channel's interceptor, if it has one.
    pub(super) fn intercepted<T>(&self, request: Request<T>) -> Result<Request<T>, Status> {
        match &self.interceptor {
            Some(interceptor) => intercept(&**interceptor, request),
            None => Ok(request),
        }
    }
}
