//! The server-side service abstraction that generated code implements.

use std::future::Future;
use std::pin::Pin;

use bytes::BufMut;

use crate::{Payload, Request, Response, Status};

/// A method as routed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodDescriptor {
    /// `/package.Service/Method`.
    pub path: &'static str,
    /// The method id sent in request headers: [`method_id`] of `path`.
    pub id: u32,
}

impl MethodDescriptor {
    /// The descriptor of `path` (`/package.Service/Method`).
    pub const fn new(path: &'static str) -> MethodDescriptor {
        MethodDescriptor {
            path,
            id: method_id(path),
        }
    }
}

/// The wire id of a method: 32-bit FNV-1a of its path `/package.Service/Method`.
///
/// Servers refuse to register two methods whose ids collide, so a collision is found at
/// start-up, never as a misrouted call.
pub const fn method_id(path: &str) -> u32 {
    let bytes = path.as_bytes();
    let mut hash: u32 = 0x811c_9dc5;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u32;
        hash = hash.wrapping_mul(0x0100_0193);
        i += 1;
    }
    hash
}

/// A message the server can encode into a transport buffer without knowing its type.
pub trait EncodeMessage: Send + Sync + 'static {
    /// Encoded length in bytes.
    fn encoded_len(&self) -> usize;
    /// Writes exactly [`EncodeMessage::encoded_len`] bytes.
    fn encode_to(&self, buf: &mut dyn BufMut);
}

impl<M: prost::Message + Sync + 'static> EncodeMessage for M {
    fn encoded_len(&self) -> usize {
        prost::Message::encoded_len(self)
    }
    fn encode_to(&self, mut buf: &mut dyn BufMut) {
        self.encode_raw(&mut buf);
    }
}

/// A response whose message type is erased.
pub type BoxMessage = Box<dyn EncodeMessage>;

/// The future a service returns for one call.
pub type ServiceFuture = Pin<Box<dyn Future<Output = Result<Response<BoxMessage>, Status>> + Send>>;

/// A service's fully qualified name, `package.Service`.
pub trait NamedService {
    /// `package.Service`.
    const NAME: &'static str;
}

/// A routable service: what `FooServer<T>` of generated code implements.
pub trait Service: Send + Sync + 'static {
    /// `package.Service`.
    fn name(&self) -> &'static str;
    /// Every method of the service; [`Service::call`] takes an index into this slice.
    fn methods(&self) -> &'static [MethodDescriptor];
    /// Starts the call of method `index`. A [`Payload::Borrowed`] request is borrowed
    /// from the transport: implementations decode it before returning and never keep the
    /// borrow; a [`Payload::Shared`] one may be kept.
    fn call(&self, index: usize, request: Request<Payload<'_>>) -> ServiceFuture;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_known_values() {
        // Reference values of 32-bit FNV-1a.
        assert_eq!(method_id(""), 0x811c_9dc5);
        assert_eq!(method_id("a"), 0xe40c_292c);
        assert_eq!(method_id("foobar"), 0xbf9c_f968);
        const ID: u32 = method_id("/echo.Echo/Echo");
        assert_eq!(MethodDescriptor::new("/echo.Echo/Echo").id, ID);
    }
}
