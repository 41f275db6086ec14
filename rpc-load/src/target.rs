//! [`Target`]: one connection to the server under test, as the runner sees it; and
//! [`RpcTarget`], the one for this framework's services over any
//! [`rdmarpc_core::Connection`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use prost_reflect::{
    Cardinality, DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, ReflectMessage, Value,
};
use rdmarpc_core::codegen::{MethodDescriptor, MethodKind, SplitLarge};
use rdmarpc_core::{Channel, Code, Connection, Metadata, Payload, Request, Status};

use crate::data::Messages;
use crate::stats::CallError;
use crate::streams::{drain, request_stream, Moved, StreamOptions};
use crate::template::CallFacts;

/// A call's outcome, and the messages it sent and received on streams (0 and 0 for a
/// unary call).
pub type CallOutcome = (Result<(), CallError>, (u64, u64));

/// One connection that makes calls of the method under test. The runner shares each
/// target between the workers assigned to it, which call it concurrently.
pub trait Target: Send + Sync + 'static {
    /// Makes call `call` (its number and worker) and waits for its outcome: `Ok` once the response (or
    /// the whole response stream) arrived and decoded as the method's output type, the
    /// call's status otherwise (including `DEADLINE_EXCEEDED` when the per-call timeout
    /// passes). A unary or server-streaming call sends `messages.for_unary(call)`; a client or
    /// bidirectional one sends a stream of `messages` (see [`crate::streams`]).
    fn call(
        &self,
        call: CallFacts,
        messages: &Arc<Messages>,
    ) -> impl Future<Output = CallOutcome> + Send;
}

tokio::task_local! {
    /// When the runner sent the call being made on this task (its latency stamp): a
    /// target times the call's deadline from it rather than read the clock again.
    pub(crate) static CALL_STARTED: tokio::time::Instant;
}

/// When the call made on this task started: the runner's stamp, else now.
pub(crate) fn call_started() -> tokio::time::Instant {
    CALL_STARTED
        .try_with(|t| *t)
        .unwrap_or_else(|_| tokio::time::Instant::now())
}

/// How close to the deadline a server's giving up counts as the deadline
/// ([`RpcTarget::at_deadline`]).
const DEADLINE_SLACK: Duration = Duration::from_millis(10);

/// The status a server stream ends with when the client stops reading it early.
pub(crate) fn stopped_early() -> CallError {
    CallError::new(
        Code::Cancelled,
        "the client closed the stream (--stream-call-count or --stream-call-duration)",
    )
}

fn call_error(status: Status) -> CallError {
    CallError::new(status.code(), status.message())
}

/// A call whose request data could not be rendered.
pub(crate) fn bad_data(why: String) -> CallError {
    CallError::new(Code::InvalidArgument, why)
}

/// Calls a method of an rdmarpc-core service over a [`Channel`] on any transport.
#[derive(Debug)]
pub struct RpcTarget<C: Connection> {
    channel: Channel<C>,
    method: MethodDescriptor,
    output: MessageDescriptor,
    metadata: Metadata,
    timeout: Option<Duration>,
    stream: StreamOptions,
    max_send: usize,
    max_recv: usize,
}

/// Metadata from key-value pairs.
fn metadata_of(list: &[(String, String)]) -> Metadata {
    let mut md = Metadata::new();
    for (key, value) in list {
        md.append(key.clone(), value.clone());
    }
    md
}

/// A response decoded as the method's output (and dropped), or, over the receive limit,
/// not decoded: its length.
type Received = Result<(), usize>;

/// Decodes `bytes` as `output` unless they are over `max` bytes.
fn decode_within(
    output: &MessageDescriptor,
    bytes: impl bytes::Buf,
    max: usize,
) -> Result<Received, prost::DecodeError> {
    if bytes.remaining() > max {
        return Ok(Err(bytes.remaining()));
    }
    // From shared bytes, `bytes` fields are slices of them, as tonic's decoder makes
    // them from its buffer; from a borrowed slice they are copies.
    DynamicMessage::decode(output.clone(), bytes).map(|_| Ok(()))
}

/// The status of a response over the receive limit, in grpc-go's words.
fn received_too_large(len: usize, max: usize) -> Status {
    Status::resource_exhausted(format!(
        "grpc: received message larger than max ({len} vs. {max})"
    ))
}

/// The error of a request over the send limit, in grpc-go's words.
pub(crate) fn too_large(len: usize, max: usize) -> CallError {
    CallError::new(
        Code::ResourceExhausted,
        format!("trying to send message larger than max ({len} vs. {max})"),
    )
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
        RpcTarget {
            channel,
            method,
            output,
            metadata: metadata_of(metadata),
            timeout,
            stream: StreamOptions::default(),
            max_send: usize::MAX,
            max_recv: usize::MAX,
        }
    }

    /// The same target, failing a call whose response (or any message of its response
    /// stream) is over `bytes` (`--max-recv-message-size`), with `RESOURCE_EXHAUSTED` as
    /// grpc-go does, whatever larger limit the transport has (the larger of the two).
    pub fn with_max_recv(mut self, bytes: usize) -> RpcTarget<C> {
        self.max_recv = bytes;
        self
    }

    /// The same target, failing a call whose request is over `bytes` before sending it
    /// (`--max-send-message-size`), with `RESOURCE_EXHAUSTED` as grpc-go does.
    pub fn with_max_send(mut self, bytes: usize) -> RpcTarget<C> {
        self.max_send = bytes;
        self
    }

    /// The metadata of call `call`: rendered for it, or the run's.
    fn metadata_for(&self, messages: &Messages, call: CallFacts) -> Result<Metadata, CallError> {
        match messages.metadata_for(call).map_err(bad_data)? {
            Some(list) => Ok(metadata_of(&list)),
            None => Ok(self.metadata.clone()),
        }
    }

    /// The same target, making streaming calls as `options` say.
    pub fn with_stream_options(mut self, options: StreamOptions) -> RpcTarget<C> {
        self.stream = options;
        self
    }

    /// The channel (e.g. to read its peer or transport counters).
    pub fn channel(&self) -> &Channel<C> {
        &self.channel
    }
}

impl<C: Connection> RpcTarget<C> {
    async fn unary(&self, md: Metadata, message: DynamicMessage) -> Result<(), CallError> {
        let len = prost::Message::encoded_len(&message);
        if len > self.max_send {
            return Err(too_large(len, self.max_send));
        }
        let request = Request::from_parts(md, Outgoing(message), self.timeout);
        let (output, max) = (&self.output, self.max_recv);
        let started = call_started();
        self.channel
            .unary_gathered_with(request, &self.method, |payload| match payload {
                Payload::Borrowed(bytes) => decode_within(output, bytes, max),
                Payload::Shared(bytes) => decode_within(output, bytes, max),
            })
            .await
            .and_then(|response| {
                response
                    .into_inner()
                    .map_err(|len| received_too_large(len, max))
            })
            .map_err(|status| self.at_deadline(call_error(status), started.elapsed()))
    }

    /// The client's deadline decides, as in grpc-go: a server told the time left (rounded
    /// down, and counted from later) gives up a moment before the client does, and some
    /// answer CANCELLED then (tonic's "Timeout expired"). An error that ends the call
    /// within `DEADLINE_SLACK` of the deadline is the deadline's.
    fn at_deadline(&self, e: CallError, elapsed: Duration) -> CallError {
        match self.timeout {
            Some(t)
                if matches!(e.code, Code::Cancelled | Code::DeadlineExceeded)
                    && elapsed + DEADLINE_SLACK >= t =>
            {
                CallError::new(
                    Code::DeadlineExceeded,
                    format!("deadline of {t:?} exceeded"),
                )
            }
            _ => e,
        }
    }

    fn stream_decoder(
        &self,
    ) -> impl Fn(bytes::Bytes) -> Result<Received, prost::DecodeError> + Send + Sync + 'static {
        let (output, max) = (self.output.clone(), self.max_recv);
        move |bytes| decode_within(&output, bytes, max)
    }

    /// A response stream's messages, one over the receive limit as an error.
    fn within_limit<S>(&self, responses: S) -> impl futures_util::Stream<Item = Result<(), Status>>
    where
        S: futures_util::Stream<Item = Result<Received, Status>>,
    {
        let max = self.max_recv;
        responses.map(move |item| item.and_then(|r| r.map_err(|len| received_too_large(len, max))))
    }

    async fn server_streaming(
        &self,
        md: Metadata,
        message: DynamicMessage,
        moved: &Moved,
    ) -> Result<(), Status> {
        let request = Request::from_parts(md, Outgoing(message), self.timeout);
        let responses = self
            .channel
            .server_streaming_with(request, &self.method, self.stream_decoder())
            .await?
            .into_inner();
        // Dropping the stream (reading stopped early) cancels the call.
        match drain(self.within_limit(responses), &self.stream, true, moved).await? {
            true => Ok(()),
            false => Err(Status::cancelled(stopped_early().message)),
        }
    }

    async fn client_streaming(
        &self,
        md: Metadata,
        call: CallFacts,
        messages: &Arc<Messages>,
        moved: &Arc<Moved>,
    ) -> Result<(), Status> {
        let stream = request_stream(messages, call, self.stream, moved.clone())
            .map_err(Status::invalid_argument)?
            .map(Outgoing);
        let request = Request::from_parts(md, stream, self.timeout);
        let (output, max) = (&self.output, self.max_recv);
        self.channel
            .client_streaming_with(request, &self.method, |payload| {
                decode_within(output, payload.as_slice(), max)
            })
            .await?
            .into_inner()
            .map_err(|len| received_too_large(len, max))
    }

    async fn bidi_streaming(
        &self,
        md: Metadata,
        call: CallFacts,
        messages: &Arc<Messages>,
        moved: &Arc<Moved>,
    ) -> Result<(), Status> {
        let stream = request_stream(messages, call, self.stream, moved.clone())
            .map_err(Status::invalid_argument)?
            .map(Outgoing);
        let request = Request::from_parts(md, stream, self.timeout);
        let responses = self
            .channel
            .streaming_with(request, &self.method, self.stream_decoder())
            .await?
            .into_inner();
        // The server ends the stream once the requests are done.
        drain(self.within_limit(responses), &self.stream, false, moved)
            .await
            .map(drop)
    }
}

impl<C: Connection> Target for RpcTarget<C> {
    async fn call(&self, call: CallFacts, messages: &Arc<Messages>) -> CallOutcome {
        let md = match self.metadata_for(messages, call) {
            Ok(md) => md,
            Err(e) => return (Err(e), (0, 0)),
        };
        match self.method.kind {
            MethodKind::Unary => match messages.for_unary(call) {
                Ok(message) => (self.unary(md, message).await, (0, 0)),
                Err(why) => (Err(bad_data(why)), (0, 0)),
            },
            MethodKind::ServerStreaming => {
                let message = match messages.for_unary(call) {
                    Ok(message) => message,
                    Err(why) => return (Err(bad_data(why)), (0, 0)),
                };
                let moved = Moved::default();
                let result = self.server_streaming(md, message, &moved).await;
                (result.map_err(call_error), moved.counts())
            }
            MethodKind::ClientStreaming => {
                let moved = Arc::new(Moved::default());
                let result = self.client_streaming(md, call, messages, &moved).await;
                (result.map_err(call_error), moved.counts())
            }
            MethodKind::Streaming => {
                let moved = Arc::new(Moved::default());
                let result = self.bidi_streaming(md, call, messages, &moved).await;
                (result.map_err(call_error), moved.counts())
            }
        }
    }
}

/// A request as rpc-load sends it: its large top-level `bytes` fields go by gathered
/// write where the transport has one ([`SplitLarge`]), as they do from generated clients.
#[derive(Debug, Clone)]
struct Outgoing(DynamicMessage);

impl prost::Message for Outgoing {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut) {
        self.0.encode_raw(buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        self.0.merge_field(tag, wire_type, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.0.encoded_len()
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

impl SplitLarge for Outgoing {
    fn split_large(&self, min: usize) -> Option<(Self, Vec<(u32, bytes::Bytes)>)> {
        // Singular `bytes` fields outside real oneofs and not proto2-required: taken out,
        // they are not encoded at all, so the split encoding keeps the message's length.
        let large: Vec<FieldDescriptor> = self
            .0
            .descriptor()
            .fields()
            .filter(|f| {
                f.kind() == Kind::Bytes
                    && !f.is_list()
                    && !f.is_map()
                    && f.cardinality() != Cardinality::Required
                    && f.containing_oneof().is_none_or(|o| o.is_synthetic())
                    && matches!(&*self.0.get_field(f), Value::Bytes(b) if b.len() >= min)
            })
            .collect();
        if large.is_empty() {
            return None;
        }
        let mut rest = self.0.clone();
        let fields = large
            .iter()
            .filter_map(|f| match rest.take_field(f) {
                Some(Value::Bytes(b)) => Some((f.number(), b)),
                _ => None,
            })
            .collect();
        Some((Outgoing(rest), fields))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use prost::Message;
    use prost_reflect::{DynamicMessage, Value};
    use rdmarpc_core::codegen::SplitLarge;

    use super::Outgoing;

    #[test]
    fn a_split_request_decodes_to_the_same_message_and_is_as_long() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let pool =
            crate::proto::load_descriptors(&root.join("proto/echo.proto"), &[root.join("proto")])
                .unwrap();
        let desc = pool.get_message_by_name("echo.EchoRequest").unwrap();
        let mut message = DynamicMessage::new(desc.clone());
        let payload = bytes::Bytes::from(vec![7u8; 100_000]);
        message.set_field_by_name("payload", Value::Bytes(payload.clone()));
        message.set_field_by_name("delay_ms", Value::U32(3));
        let outgoing = Outgoing(message.clone());
        assert!(
            outgoing.split_large(200_000).is_none(),
            "nothing that large"
        );
        let (rest, fields) = outgoing.split_large(64 << 10).expect("the payload splits");
        assert_eq!(fields.len(), 1);
        assert_eq!(fields[0].0, 1);
        assert_eq!(fields[0].1.as_ptr(), payload.as_ptr(), "taken, not copied");
        // The rest, then the field (key, length, bytes): what rdmarpc-core sends.
        let mut wire = rest.encode_to_vec();
        prost::encoding::bytes::encode(1, &fields[0].1, &mut wire);
        assert_eq!(wire.len(), outgoing.encoded_len());
        assert_eq!(DynamicMessage::decode(desc, &wire[..]).unwrap(), message);
    }
}
