//! The calls generated clients make: unary, server-, client- and bidirectional streaming.

use super::unary::decode_response;
use super::Channel;
use crate::service::{MethodDescriptor, MethodKind, SplitLarge};
use crate::transport::Connection;
use crate::{IntoStreamingRequest, Payload, Request, Response, Status, Streaming};

impl<C: Connection> Channel<C> {
    /// Makes one unary call of `method`.
    ///
    /// The request is encoded straight into a buffer of the transport. Dropping the
    /// returned future cancels the call: the server is told and drops its handler.
    ///
    /// # Errors
    /// The server's status; `DEADLINE_EXCEEDED` when the request's (or the channel's
    /// default) timeout passes; `RESOURCE_EXHAUSTED` for a request over the configured
    /// maximum; `UNAVAILABLE` when the connection fails; `INTERNAL` for an undecodable
    /// response.
    pub async fn unary<Req, Resp>(
        &self,
        request: Request<Req>,
        method: &MethodDescriptor,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        self.unary_with(request, method, |payload| payload.decode::<Resp>())
            .await
    }

    /// Like [`Channel::unary`], with the response decoded by `decode` instead of
    /// `Resp::decode`: for messages whose type is only known at run time (e.g.
    /// `prost_reflect::DynamicMessage` in a load generator).
    ///
    /// # Errors
    /// As [`Channel::unary`].
    pub async fn unary_with<Req, Resp>(
        &self,
        request: Request<Req>,
        method: &MethodDescriptor,
        decode: impl FnOnce(Payload<'_>) -> Result<Resp, prost::DecodeError>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message,
    {
        self.call(request, method, None, decode).await
    }

    /// Like [`Channel::unary`], for a request type whose large `bytes` fields are sent
    /// from where they lie (a gathered write, on transports that have one) instead of
    /// being copied into the frame; generated clients use it for such requests.
    ///
    /// # Errors
    /// As [`Channel::unary`].
    pub async fn unary_gathered<Req, Resp>(
        &self,
        request: Request<Req>,
        method: &MethodDescriptor,
    ) -> Result<Response<Resp>, Status>
    where
        Req: SplitLarge,
        Resp: prost::Message + Default,
    {
        self.unary_gathered_with(request, method, |payload| payload.decode::<Resp>())
            .await
    }

    /// [`Channel::unary_gathered`] with the response decoded by `decode`, as
    /// [`Channel::unary_with`].
    ///
    /// # Errors
    /// As [`Channel::unary`].
    pub async fn unary_gathered_with<Req, Resp>(
        &self,
        request: Request<Req>,
        method: &MethodDescriptor,
        decode: impl FnOnce(Payload<'_>) -> Result<Resp, prost::DecodeError>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: SplitLarge,
    {
        self.call(request, method, Some(Req::split_large), decode)
            .await
    }

    /// Makes a server-streaming call of `method`: one request, a stream of responses.
    ///
    /// Resolves once the server answered with its response headers (or failed the
    /// call); the messages then come from the returned [`Streaming`]. The request's (or
    /// the channel's default) timeout covers the whole stream. Dropping the
    /// [`Streaming`] (or this future) cancels the call on the server.
    ///
    /// # Errors
    /// As [`Channel::unary`], for the call's start.
    pub async fn server_streaming<Req, Resp>(
        &self,
        request: Request<Req>,
        method: &MethodDescriptor,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default + 'static,
    {
        self.server_streaming_with(request, method, |b| Payload::Shared(b).decode::<Resp>())
            .await
    }

    /// Like [`Channel::server_streaming`], with each response decoded by `decode` (for
    /// messages whose type is only known at run time, as [`Channel::unary_with`]).
    ///
    /// # Errors
    /// As [`Channel::server_streaming`].
    pub async fn server_streaming_with<Req, Resp: 'static>(
        &self,
        request: Request<Req>,
        method: &MethodDescriptor,
        decode: impl Fn(bytes::Bytes) -> Result<Resp, prost::DecodeError> + Send + Sync + 'static,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        Req: prost::Message,
    {
        let (metadata, message, timeout) = self.intercepted(request)?.into_parts();
        let open = self
            .open(
                &metadata,
                Some(&message),
                method,
                timeout,
                MethodKind::ServerStreaming,
            )
            .await?;
        open.streaming(decode).await
    }

    /// Makes a client-streaming call of `method`: the messages of `request`'s stream,
    /// sent as the server's window allows, then its one response.
    ///
    /// # Errors
    /// As [`Channel::unary`].
    pub async fn client_streaming<S, Resp>(
        &self,
        request: S,
        method: &MethodDescriptor,
    ) -> Result<Response<Resp>, Status>
    where
        S: IntoStreamingRequest,
        S::Message: prost::Message + 'static,
        Resp: prost::Message + Default,
    {
        self.client_streaming_with(request, method, |payload| payload.decode::<Resp>())
            .await
    }

    /// Like [`Channel::client_streaming`], with the response decoded by `decode` (as
    /// [`Channel::unary_with`]).
    ///
    /// # Errors
    /// As [`Channel::client_streaming`].
    pub async fn client_streaming_with<S, Resp>(
        &self,
        request: S,
        method: &MethodDescriptor,
        decode: impl FnOnce(Payload<'_>) -> Result<Resp, prost::DecodeError>,
    ) -> Result<Response<Resp>, Status>
    where
        S: IntoStreamingRequest,
        S::Message: prost::Message + 'static,
    {
        let request = self.intercepted(request.into_streaming_request())?;
        let (metadata, stream, timeout) = request.into_parts();
        let open = self
            .open::<S::Message>(
                &metadata,
                None,
                method,
                timeout,
                MethodKind::ClientStreaming,
            )
            .await?;
        let mut open = open.pump(stream, self.inner.config.max_message_size);
        let result = open.response().await?;
        decode_response(&result, self.inner.config.max_message_size, decode)
    }

    /// Makes a bidirectional streaming call of `method`: `request`'s stream is sent as
    /// the server's window allows, while the responses come from the returned
    /// [`Streaming`] (once the server sent its response headers).
    ///
    /// # Errors
    /// As [`Channel::server_streaming`].
    pub async fn streaming<S, Resp>(
        &self,
        request: S,
        method: &MethodDescriptor,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        S: IntoStreamingRequest,
        S::Message: prost::Message + 'static,
        Resp: prost::Message + Default + 'static,
    {
        self.streaming_with(request, method, |b| Payload::Shared(b).decode::<Resp>())
            .await
    }

    /// Like [`Channel::streaming`], with each response decoded by `decode`.
    ///
    /// # Errors
    /// As [`Channel::streaming`].
    pub async fn streaming_with<S, Resp: 'static>(
        &self,
        request: S,
        method: &MethodDescriptor,
        decode: impl Fn(bytes::Bytes) -> Result<Resp, prost::DecodeError> + Send + Sync + 'static,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        S: IntoStreamingRequest,
        S::Message: prost::Message + 'static,
    {
        let request = self.intercepted(request.into_streaming_request())?;
        let (metadata, stream, timeout) = request.into_parts();
        let open = self
            .open::<S::Message>(&metadata, None, method, timeout, MethodKind::Streaming)
            .await?;
        open.pump(stream, self.inner.config.max_message_size)
            .streaming(decode)
            .await
    }
}
