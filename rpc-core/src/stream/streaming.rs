//! [`Streaming`], the application's view of an inbox, and [`IntoStreamingRequest`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;

use super::inbox::Inbox;
use super::reading::Reading;
use crate::{Code, Metadata, Payload, Request, Status};

/// The call a [`Streaming`] belongs to (client side): dropping it ends the call, telling
/// the server if it still runs.
pub(crate) trait CallHandle: Send + Sync {}

/// A stream of messages received on a streaming call: the responses of a
/// server-streaming or bidirectional call on the client, the requests of a
/// client-streaming or bidirectional call on the server. Like tonic's `Streaming`.
///
/// Messages come in order; `Ok(None)` from [`Streaming::message`] (or the end of the
/// [`Stream`]) is the peer's end of the stream, an `Err` its failure (the call's status
/// on the client). What is received and not yet read is bounded by the stream's window.
/// On the client, dropping it cancels the call, and the call's deadline covers the whole
/// stream: past it, the next read fails with `DEADLINE_EXCEEDED`.
pub struct Streaming<T> {
    inbox: Arc<Inbox>,
    /// The messages taken from the inbox and not read yet.
    reading: Reading,
    decode: Decoder<T>,
    /// The code a message that does not decode fails with.
    decode_error: Code,
    call: Option<Box<dyn CallHandle>>,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Whether the deadline's timer was registered (polled once).
    armed: bool,
    trailers: Option<Metadata>,
    done: bool,
}

impl<T> fmt::Debug for Streaming<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Streaming")
            .field("call_id", &self.inbox.call_id)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

/// How a [`Streaming`] turns payloads into messages.
pub(super) type Decoder<T> = Box<dyn Fn(Bytes) -> Result<T, prost::DecodeError> + Send + Sync>;

pub(super) fn decode_as<T: prost::Message + Default>(
    bytes: Bytes,
) -> Result<T, prost::DecodeError> {
    Payload::Shared(bytes).decode()
}

impl Streaming<Bytes> {
    /// The raw payloads of `inbox`.
    pub(crate) fn raw(inbox: Arc<Inbox>, decode_error: Code) -> Streaming<Bytes> {
        Streaming {
            inbox,
            reading: Reading::default(),
            decode: Box::new(Ok),
            decode_error,
            call: None,
            deadline: None,
            armed: false,
            trailers: None,
            done: false,
        }
    }

    /// The same stream, each message decoded as `T`.
    pub fn decoded<T: prost::Message + Default + 'static>(self) -> Streaming<T> {
        self.with_decoder(decode_as::<T>)
    }

    /// The same stream, each message decoded by `decode` (for types known only at run
    /// time, e.g. `prost_reflect::DynamicMessage`).
    pub fn with_decoder<T: 'static>(
        mut self,
        decode: impl Fn(Bytes) -> Result<T, prost::DecodeError> + Send + Sync + 'static,
    ) -> Streaming<T> {
        // The shell left behind must not abandon the inbox when it drops.
        let done = std::mem::replace(&mut self.done, true);
        Streaming {
            inbox: self.inbox.clone(),
            reading: std::mem::take(&mut self.reading),
            decode: Box::new(decode),
            decode_error: self.decode_error,
            call: self.call.take(),
            deadline: self.deadline.take(),
            armed: self.armed,
            trailers: self.trailers.take(),
            done,
        }
    }
}

impl<T> Streaming<T> {
    /// Client side: the call this stream belongs to, and its deadline.
    pub(crate) fn attach(
        &mut self,
        call: Box<dyn CallHandle>,
        deadline: Option<std::time::Instant>,
    ) {
        self.call = Some(call);
        self.deadline = deadline.map(|d| Box::pin(tokio::time::sleep_until(d.into())));
    }

    /// The next message; `Ok(None)` at the end of the stream.
    ///
    /// # Errors
    /// The stream's failure: on the client the call's status, `DEADLINE_EXCEEDED` past
    /// its deadline, `INTERNAL` for a message that does not decode (the call is then
    /// cancelled); on the server `INVALID_ARGUMENT` for such a message, `CANCELLED` when
    /// the client went away.
    pub async fn message(&mut self) -> Result<Option<T>, Status> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx))
            .await
            .transpose()
    }

    /// Reads the stream to its end and returns the trailing metadata the server ended
    /// the call with (client side; `None` on the server).
    ///
    /// # Errors
    /// As [`Streaming::message`].
    pub async fn trailers(&mut self) -> Result<Option<Metadata>, Status> {
        while self.message().await?.is_some() {}
        Ok(self.trailers.take())
    }

    pub(super) fn finish(&mut self) {
        self.done = true;
        // What it took and will not read is freed now, not when the stream is dropped.
        self.reading = Reading::default();
        self.call = None; // cancels the call if it still runs
        self.deadline = None;
    }
}

impl<T> Stream for Streaming<T> {
    type Item = Result<T, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        // Past the deadline nothing more is read, even what already arrived. The timer
        // is registered on the first read; then a fired timer is an atomic load, not a
        // clock read per message.
        let expired = match &mut this.deadline {
            Some(deadline) if !this.armed => {
                this.armed = true;
                deadline.as_mut().poll(cx).is_ready()
            }
            Some(deadline) => deadline.is_elapsed(),
            None => false,
        };
        if expired {
            let status = Status::deadline_exceeded("deadline exceeded during the stream");
            this.inbox.fail(status.clone(), true);
            this.finish();
            return Poll::Ready(Some(Err(status)));
        }
        // (A consumer that always finds a message ready yields now and then: `Reading`.)
        let next = this.reading.poll_next(&this.inbox, cx);
        match next {
            Poll::Ready(Some(Ok(bytes))) => match (this.decode)(bytes) {
                Ok(message) => Poll::Ready(Some(Ok(message))),
                Err(e) => {
                    let status =
                        Status::new(this.decode_error, format!("failed to decode message: {e}"));
                    this.inbox.fail(status.clone(), true);
                    this.finish();
                    Poll::Ready(Some(Err(status)))
                }
            },
            Poll::Ready(Some(Err(status))) => {
                this.finish();
                Poll::Ready(Some(Err(status)))
            }
            Poll::Ready(None) => {
                this.trailers = this.inbox.take_trailers();
                // The call ended normally: nothing to cancel.
                this.call = None;
                this.finish();
                Poll::Ready(None)
            }
            Poll::Pending => {
                if let Some(deadline) = &mut this.deadline {
                    if deadline.as_mut().poll(cx).is_ready() {
                        let status =
                            Status::deadline_exceeded("deadline exceeded during the stream");
                        this.inbox.fail(status.clone(), true);
                        this.finish();
                        return Poll::Ready(Some(Err(status)));
                    }
                }
                Poll::Pending
            }
        }
    }
}

impl<T> Drop for Streaming<T> {
    fn drop(&mut self) {
        if !self.done {
            self.inbox.abandon();
        }
        // Then `call` drops, which cancels the call if it still runs.
    }
}

/// Conversion into a streaming request: implemented for streams of messages and for
/// [`Request`]s of them, so generated client methods take either (like tonic's).
pub trait IntoStreamingRequest {
    /// The stream of messages.
    type Stream: Stream<Item = Self::Message> + Send + 'static;
    /// The message type.
    type Message;
    /// Wraps `self` in a request (or returns it when it already is one).
    fn into_streaming_request(self) -> Request<Self::Stream>;
}

impl<S> IntoStreamingRequest for S
where
    S: Stream + Send + 'static,
{
    type Stream = S;
    type Message = S::Item;
    fn into_streaming_request(self) -> Request<S> {
        Request::new(self)
    }
}

impl<S> IntoStreamingRequest for Request<S>
where
    S: Stream + Send + 'static,
{
    type Stream = S;
    type Message = S::Item;
    fn into_streaming_request(self) -> Request<S> {
        self
    }
}
