//! [`Target`]: one connection to the server under test, as the runner sees it; and
//! [`RpcTarget`], the one for this framework's services over any
//! [`rpc_core::Connection`].

use std::future::Future;
use std::time::Duration;

use prost_reflect::{DynamicMessage, MessageDescriptor};
use rpc_core::codegen::MethodDescriptor;
use rpc_core::{Channel, Connection, Metadata, Payload, Request};

use crate::stats::CallError;

/// One connection that makes calls of the method under test. The runner shares each
/// target between the workers assigned to it, which call it concurrently.
pub trait Target: Send + Sync + 'static {
    /// Makes one call with `message` and waits for its outcome: `Ok` once a response
    /// arrived and decoded as the method's output type, the call's status otherwise
    /// (including `DEADLINE_EXCEEDED` when the per-call timeout passes).
    fn call(&self, message: DynamicMessage) -> impl Future<Output = Result<(), CallError>> + Send;
}

/// Calls a method of an rpc-core service over a [`Channel`] on any transport.
#[derive(Debug)]
pub struct RpcTarget<C: Connection> {
    channel: Channel<C>,
    method: MethodDescriptor,
    output: MessageDescriptor,
    metadata: Metadata,
    timeout: Option<Duration>,
}

impl<C: Connection> RpcTarget<C> {
    /// A target calling `method` over `channel`, decoding responses as `output`, with
    /// `metadata` and `timeout` (if any) on every request.
    pub fn new(
        channel: Channel<C>,
        method: MethodDescriptor,
        output: MessageDescriptor,
        metadata: &[(String, String)],
        timeout: Option<Duration>,
    ) -> RpcTarget<C> {
        let mut md = Metadata::new();
        for (key, value) in metadata {
            md.append(key.clone(), value.clone());
        }
        RpcTarget {
            channel,
            method,
            output,
            metadata: md,
            timeout,
        }
    }

    /// The channel (e.g. to read its peer or transport counters).
    pub fn channel(&self) -> &Channel<C> {
        &self.channel
    }
}

impl<C: Connection> Target for RpcTarget<C> {
    async fn call(&self, message: DynamicMessage) -> Result<(), CallError> {
        let request = Request::from_parts(self.metadata.clone(), message, self.timeout);
        let output = &self.output;
        self.channel
            .unary_with(request, &self.method, |payload| match payload {
                Payload::Borrowed(bytes) => DynamicMessage::decode(output.clone(), bytes),
                Payload::Shared(bytes) => DynamicMessage::decode(output.clone(), bytes),
            })
            .await
            .map(drop)
            .map_err(|status| CallError::new(status.code(), status.message()))
    }
}
