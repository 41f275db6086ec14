//! [`Request`] and [`Response`]: a message with its metadata (and, for requests, a
//! timeout, extensions and, on a server, the [`Peer`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::Metadata;

/// A request message with metadata, an optional timeout, extensions (typed values that
/// middleware and handlers pass along; never sent) and, on a server, the peer it came
/// from.
#[derive(Debug, Clone, Default)]
pub struct Request<T> {
    metadata: Metadata,
    message: T,
    timeout: Option<Duration>,
    extensions: http::Extensions,
    peer: Option<Arc<Peer>>,
}

/// Who sent a request, as the server's transport knows it: [`Request::peer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    description: String,
    addr: Option<SocketAddr>,
    certificates: Option<Arc<[Bytes]>>,
}

impl Peer {
    /// A peer described as `description` (a URL such as `tcp+tls://10.0.0.7:51234`), at
    /// `addr`, that presented `certificates` (DER, its own first) in a TLS handshake.
    pub fn new(
        description: impl Into<String>,
        addr: Option<SocketAddr>,
        certificates: Option<Arc<[Bytes]>>,
    ) -> Peer {
        Peer {
            description: description.into(),
            addr,
            certificates,
        }
    }

    /// The peer's socket address (TCP, RDMA's side channel, gRPC), if it has one.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// The transport, as a URL scheme: `tcp`, `tcp+tls`, `rdma`, `rdma+tls`, `grpc`,
    /// `grpcs`, `memory`.
    pub fn transport(&self) -> &str {
        self.description
            .split_once("://")
            .map_or(self.description.as_str(), |(scheme, _)| scheme)
    }

    /// The certificate chain the peer presented under TLS (DER, its own first): a
    /// client's under mutual TLS. `None` without TLS or without a client certificate.
    pub fn certificates(&self) -> Option<&[Bytes]> {
        self.certificates.as_deref()
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.description)
    }
}

impl<T> Request<T> {
    /// Wraps `message` with empty metadata and no timeout of its own (the channel's
    /// default timeout, if any, applies).
    pub fn new(message: T) -> Request<T> {
        Request::from_parts(Metadata::new(), message, None)
    }

    /// Builds a request from its parts (no extensions, no peer).
    pub fn from_parts(metadata: Metadata, message: T, timeout: Option<Duration>) -> Request<T> {
        Request {
            metadata,
            message,
            timeout,
            extensions: http::Extensions::new(),
            peer: None,
        }
    }

    /// The extensions: typed values that code wrapping a service, or the handler itself,
    /// attach to the request (e.g. an authenticated user). They stay in this process.
    pub fn extensions(&self) -> &http::Extensions {
        &self.extensions
    }

    /// The extensions, mutably.
    pub fn extensions_mut(&mut self) -> &mut http::Extensions {
        &mut self.extensions
    }

    /// On a server: who sent the request (address, transport, TLS certificate).
    pub fn peer(&self) -> Option<&Peer> {
        self.peer.as_deref()
    }

    /// Sets the peer (the server does, for each request it receives).
    pub fn set_peer(&mut self, peer: Arc<Peer>) {
        self.peer = Some(peer);
    }

    /// The message.
    pub fn get_ref(&self) -> &T {
        &self.message
    }

    /// The message, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.message
    }

    /// The metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The metadata, mutably.
    pub fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }

    /// Sets the call's timeout: the server sees it as its deadline, and the client fails
    /// the call with `DEADLINE_EXCEEDED` when it passes.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = Some(timeout);
    }

    /// The call's timeout; on the server, the time that was left when the request arrived.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The message, dropping the metadata.
    pub fn into_inner(self) -> T {
        self.message
    }

    /// Metadata, message and timeout (extensions and peer are dropped: see
    /// [`Request::map`] to keep them).
    pub fn into_parts(self) -> (Metadata, T, Option<Duration>) {
        (self.metadata, self.message, self.timeout)
    }

    /// Maps the message, keeping everything else.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Request<U> {
        Request {
            metadata: self.metadata,
            message: f(self.message),
            timeout: self.timeout,
            extensions: self.extensions,
            peer: self.peer,
        }
    }

    /// Maps the message with a function that may fail, keeping everything else.
    ///
    /// # Errors
    /// `f`'s error.
    pub fn try_map<U, E>(self, f: impl FnOnce(T) -> Result<U, E>) -> Result<Request<U>, E> {
        Ok(Request {
            metadata: self.metadata,
            message: f(self.message)?,
            timeout: self.timeout,
            extensions: self.extensions,
            peer: self.peer,
        })
    }
}

/// Conversion into a [`Request`]: implemented for bare messages and for requests, so
/// generated client methods take either.
pub trait IntoRequest<T> {
    /// Wraps `self` in a request (or returns it when it already is one).
    fn into_request(self) -> Request<T>;
}

impl<T: prost::Message> IntoRequest<T> for T {
    fn into_request(self) -> Request<T> {
        Request::new(self)
    }
}

impl<T> IntoRequest<T> for Request<T> {
    fn into_request(self) -> Request<T> {
        self
    }
}

/// A response message with metadata.
///
/// The metadata goes first (the response headers) and the trailers after the last
/// message (on a unary response both arrive with the message, in one block; the client
/// sees each as the server set it).
#[derive(Debug, Clone, Default)]
pub struct Response<T> {
    metadata: Metadata,
    message: T,
    trailers: Metadata,
}

impl<T> Response<T> {
    /// Wraps `message` with empty metadata.
    pub fn new(message: T) -> Response<T> {
        Response {
            metadata: Metadata::new(),
            message,
            trailers: Metadata::new(),
        }
    }

    /// Builds a response from its parts.
    pub fn from_parts(metadata: Metadata, message: T) -> Response<T> {
        Response {
            metadata,
            message,
            trailers: Metadata::new(),
        }
    }

    /// The trailing metadata (server side: sent when the call ends; client side: what the
    /// server sent when the call ended).
    pub fn trailers(&self) -> &Metadata {
        &self.trailers
    }

    /// The trailing metadata, mutably.
    pub fn trailers_mut(&mut self) -> &mut Metadata {
        &mut self.trailers
    }

    /// Metadata, message and trailers.
    pub fn into_all_parts(self) -> (Metadata, T, Metadata) {
        (self.metadata, self.message, self.trailers)
    }

    /// The message.
    pub fn get_ref(&self) -> &T {
        &self.message
    }

    /// The message, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.message
    }

    /// The metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The metadata, mutably.
    pub fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }

    /// The message, dropping the metadata.
    pub fn into_inner(self) -> T {
        self.message
    }

    /// Metadata and message.
    pub fn into_parts(self) -> (Metadata, T) {
        (self.metadata, self.message)
    }

    /// Maps the message, keeping the metadata.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Response<U> {
        Response {
            metadata: self.metadata,
            message: f(self.message),
            trailers: self.trailers,
        }
    }

    /// Converts the message with `f`, which may fail, keeping metadata and trailers.
    ///
    /// # Errors
    /// `f`'s error.
    pub fn try_map<U, E>(self, f: impl FnOnce(T) -> Result<U, E>) -> Result<Response<U>, E> {
        Ok(Response {
            metadata: self.metadata,
            message: f(self.message)?,
            trailers: self.trailers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_and_try_map_keep_extensions_and_peer() {
        let mut request = Request::new(1u32);
        request.extensions_mut().insert("user-7");
        request.set_peer(Arc::new(Peer::new("tcp+tls://10.0.0.7:5000", None, None)));
        let request = request
            .map(|n| n + 1)
            .try_map(|n| Ok::<_, ()>(n * 10))
            .unwrap();
        assert_eq!(*request.get_ref(), 20);
        assert_eq!(request.extensions().get::<&str>(), Some(&"user-7"));
        assert_eq!(request.peer().unwrap().transport(), "tcp+tls");
        assert!(request.peer().unwrap().certificates().is_none());
    }
}
