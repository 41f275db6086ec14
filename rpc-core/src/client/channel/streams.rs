//! Streaming calls: opening one, pumping its request stream, its guard.

use std::sync::Arc;

use std::time::Instant;

use tracing::Instrument;

use futures_util::future::{AbortHandle, Abortable};
use futures_util::StreamExt;

use super::{check_request, Channel};
use crate::client::calls::{NotAdmitted, Outcome, Waiter};
use crate::client::connection::Shared;
use crate::outbound::send_frame;
use crate::payload::{self, Inbound};
use crate::service::{MethodDescriptor, MethodKind};
use crate::stream::{CallHandle, Inbox, Outbox};
use crate::transport::{Connection, TransportError};
use crate::wire::{Flags, Frame, FrameKind, Header, HEADER_LEN};
use crate::{Code, Metadata, Response, Status, Streaming};

/// A streaming call whose opening request was sent.
pub(super) struct OpenStream<C: Connection> {
    guard: StreamGuard<C>,
    inbox: Option<Arc<Inbox>>,
    outbox: Option<Arc<Outbox>>,
    response: Option<tokio::sync::oneshot::Receiver<crate::client::calls::Outcome<C::RecvBuf>>>,
    deadline: Option<Instant>,
}

impl<C: Connection> OpenStream<C> {
    /// Starts sending `stream`'s messages on a task of their own, as the window allows,
    /// then the half-close. The task ends with the call.
    pub(super) fn pump<S>(mut self, stream: S, max_message_size: usize) -> Self
    where
        S: futures_util::Stream + Send + 'static,
        S::Item: prost::Message + 'static,
    {
        let outbox = self.outbox.clone().expect("a client-streaming call");
        let shared = self.guard.shared.clone();
        let call_id = self.guard.call_id;
        let (handle, registration) = AbortHandle::new_pair();
        self.guard.pump = Some(handle);
        let task = async move {
            let max = max_message_size.min(u32::MAX as usize);
            let mut stream = std::pin::pin!(stream);
            while let Some(message) = stream.next().await {
                let len = prost::Message::encoded_len(&message);
                if len > max {
                    // The call fails here; the server is told.
                    let status = Status::resource_exhausted(format!(
                        "request message of {len} bytes exceeds the maximum of {max}"
                    ));
                    let waiter = shared.calls.lock().take(call_id);
                    if let Some(waiter) = waiter {
                        waiter.fail(status);
                        shared.control.cancel_stream(call_id);
                    }
                    return;
                }
                if outbox.reserve(HEADER_LEN + len).await.is_err() {
                    return; // the call is over
                }
                let mut header = Header::new(FrameKind::Message, call_id);
                header.payload_len = len as u32;
                let sent = send_frame(&*shared.conn, header, &Metadata::new(), |buf| {
                    prost::Message::encode_raw(&message, buf)
                })
                .await;
                match sent {
                    Ok(()) => {}
                    // The connection failed: the receive side fails the call.
                    Err(TransportError::Closed) => return,
                    // This frame only (e.g. over the transport's frame limit): the call
                    // fails here and the server is told.
                    Err(e) => {
                        let status = Status::from(e);
                        let waiter = shared.calls.lock().take(call_id);
                        if let Some(waiter) = waiter {
                            waiter.fail(status);
                            shared.control.cancel_stream(call_id);
                        }
                        return;
                    }
                }
            }
            let mut header = Header::new(FrameKind::Message, call_id);
            header.flags = Flags::END_STREAM;
            let _ = send_frame(&*shared.conn, header, &Metadata::new(), |_| {}).await;
        };
        tokio::spawn(
            Abortable::new(task, registration)
                .instrument(tracing::debug_span!("rpc-stream-send", call_id)),
        );
        self
    }

    /// Waits for the response headers and hands out the response stream.
    pub(super) async fn streaming<Resp: 'static>(
        self,
        decode: impl Fn(bytes::Bytes) -> Result<Resp, prost::DecodeError> + Send + Sync + 'static,
    ) -> Result<Response<Streaming<Resp>>, Status> {
        let inbox = self.inbox.clone().expect("a server-streaming call");
        let headers = std::future::poll_fn(|cx| inbox.poll_headers(cx));
        let headers = match self.deadline {
            Some(d) => tokio::time::timeout_at(d.into(), headers)
                .await
                .unwrap_or_else(|_| Err(Status::deadline_exceeded("deadline exceeded"))),
            None => headers.await,
        }?;
        let mut stream = Streaming::raw(inbox, Code::Internal).with_decoder(decode);
        stream.attach(Box::new(self.guard), self.deadline);
        Ok(Response::from_parts(headers, stream))
    }

    /// Waits for a client-streaming call's response frame.
    pub(super) async fn response(&mut self) -> Result<Inbound<C::RecvBuf>, Status> {
        let rx = self.response.take().expect("a client-streaming call");
        let frame = async {
            match rx.await {
                Ok(outcome) => outcome,
                Err(_) => Err(Status::unavailable("connection closed")),
            }
        };
        let frame = match self.deadline {
            Some(d) => tokio::time::timeout_at(d.into(), frame)
                .await
                .unwrap_or_else(|_| Err(Status::deadline_exceeded("deadline exceeded"))),
            None => frame.await,
        }?;
        let shared = &self.guard.shared;
        let keep = Frame::parse(&frame[..]).is_ok_and(|f| {
            f.header.status == Code::Ok as u8 && f.header.payload_len > 0 && !f.is_discarded()
        });
        Ok(if keep {
            payload::keep(&*shared.conn, frame)
        } else {
            Inbound::Held(frame)
        })
    }
}

/// Cancels a streaming call on the server when dropped while the call still runs, and
/// stops its request stream's task.
pub(super) struct StreamGuard<C: Connection> {
    shared: Arc<Shared<C>>,
    call_id: u64,
    sent: bool,
    pump: Option<AbortHandle>,
}

impl<C: Connection> StreamGuard<C> {
    pub(super) fn mark_sent(&mut self) {
        if !std::mem::replace(&mut self.sent, true) && self.shared.calls.lock().sent() {
            self.shared.control.goaway();
        }
    }
}

impl<C: Connection> CallHandle for StreamGuard<C> {}

impl<C: Connection> Drop for StreamGuard<C> {
    fn drop(&mut self) {
        self.mark_sent();
        if let Some(pump) = self.pump.take() {
            pump.abort();
        }
        let was_running = self.shared.calls.lock().remove(self.call_id);
        if was_running {
            tracing::debug!(
                call_id = self.call_id,
                "stream abandoned; cancelling on the server"
            );
            self.shared.control.cancel_stream(self.call_id);
        }
    }
}

impl<C: Connection> Channel<C> {
    /// Registers a streaming call and sends its opening request (with `message`, for a
    /// server-streaming call).
    pub(super) async fn open<Req: prost::Message>(
        &self,
        metadata: &Metadata,
        message: Option<&Req>,
        method: &MethodDescriptor,
        timeout: Option<std::time::Duration>,
        kind: MethodKind,
    ) -> Result<OpenStream<C>, Status> {
        let config = &self.inner.config;
        let timeout = timeout.or(config.timeout);
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let payload_len = message.map_or(0, |m| m.encoded_len());
        check_request(config, payload_len, metadata)?;
        let window = config
            .stream_window
            .clamp(1, crate::wire::MAX_STREAM_WINDOW as u32);
        let open = async {
            let Registered {
                shared,
                call_id,
                inbox,
                outbox,
                response,
            } = self.register(kind, window).await?;
            let mut guard = StreamGuard {
                shared: shared.clone(),
                call_id,
                sent: false,
                pump: None,
            };
            let mut header = Header::new(FrameKind::Request, call_id);
            header.method_id = method.id;
            // The time left after connecting, as a retried unary call tells it.
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            header.timeout_us = left.map_or(0, |t| t.as_micros().clamp(1, u64::MAX as u128) as u64);
            if kind.server_streams() {
                header.credits = window;
            }
            if message.is_some() {
                header.flags = Flags::END_STREAM;
                header.payload_len = payload_len as u32;
            }
            shared.conn.calling(method);
            let sent = send_frame(&*shared.conn, header, metadata, |buf| {
                if let Some(message) = message {
                    message.encode_raw(buf);
                }
            })
            .await;
            guard.mark_sent();
            sent?;
            Ok(OpenStream {
                guard,
                inbox,
                outbox,
                response,
                deadline,
            })
        };
        match timeout {
            Some(t) => tokio::time::timeout(t, open).await.unwrap_or_else(|_| {
                Err(Status::deadline_exceeded(format!(
                    "deadline of {t:?} exceeded"
                )))
            }),
            None => open.await,
        }
    }

    /// A place for a streaming call of `kind` in the call table of a usable connection,
    /// with its request stream's outbox (its window granted when the call starts) and its
    /// response inbox (of `window`) or one-response waiter.
    async fn register(&self, kind: MethodKind, window: u32) -> Result<Registered<C>, Status> {
        let mut picks = 0;
        loop {
            let shared = self.ready(None).await?;
            let (mut inbox, mut outbox, mut response) = (None, None, None);
            let inserted = shared.calls.lock().insert_with(|call_id| {
                let outgoing = kind
                    .client_streams()
                    .then(|| Arc::new(Outbox::closed_window()));
                outbox.clone_from(&outgoing);
                if kind.server_streams() {
                    let incoming =
                        Arc::new(Inbox::new(call_id, shared.control.clone(), window, window));
                    inbox = Some(incoming.clone());
                    Waiter::Stream(incoming, outgoing)
                } else {
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    response = Some(rx);
                    Waiter::Upload(tx, outgoing.expect("client-streaming"))
                }
            });
            match inserted {
                Ok(call_id) => {
                    return Ok(Registered {
                        shared,
                        call_id,
                        inbox,
                        outbox,
                        response,
                    })
                }
                // Nothing was sent: a channel with other connections picks again.
                Err(_) if self.reconnects() && picks < 3 => picks += 1,
                Err(NotAdmitted::Closed(status)) => return Err(status),
                Err(NotAdmitted::Draining) => {
                    return Err(Status::unavailable("server is shutting down (GOAWAY)"))
                }
            }
        }
    }
}

/// A streaming call registered in a connection's call table, nothing sent yet.
struct Registered<C: Connection> {
    shared: Arc<Shared<C>>,
    call_id: u64,
    inbox: Option<Arc<Inbox>>,
    outbox: Option<Arc<Outbox>>,
    response: Option<tokio::sync::oneshot::Receiver<Outcome<C::RecvBuf>>>,
}
