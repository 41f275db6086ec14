//! [`Request`] and [`Response`]: a message with its metadata (and, for requests, a timeout).

use std::time::Duration;

use crate::Metadata;

/// A request message with metadata and an optional timeout.
#[derive(Debug, Clone, Default)]
pub struct Request<T> {
    metadata: Metadata,
    message: T,
    timeout: Option<Duration>,
}

impl<T> Request<T> {
    /// Wraps `message` with empty metadata and no timeout of its own (the channel's
    /// default timeout, if any, applies).
    pub fn new(message: T) -> Request<T> {
        Request {
            metadata: Metadata::new(),
            message,
            timeout: None,
        }
    }

    /// Builds a request from its parts.
    pub fn from_parts(metadata: Metadata, message: T, timeout: Option<Duration>) -> Request<T> {
        Request {
            metadata,
            message,
            timeout,
        }
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

    /// Metadata, message and timeout.
    pub fn into_parts(self) -> (Metadata, T, Option<Duration>) {
        (self.metadata, self.message, self.timeout)
    }

    /// Maps the message, keeping metadata and timeout.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Request<U> {
        Request {
            metadata: self.metadata,
            message: f(self.message),
            timeout: self.timeout,
        }
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
}
