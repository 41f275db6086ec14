//! One gRPC call (a future its connection's driver polls): translates its HTTP/2 stream into the server's frames and the
//! server's frames into the HTTP/2 response.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::{HeaderValue, Request, Response, StatusCode};
use rdmarpc_core::account::{Account, Charge};
use rdmarpc_core::codegen::MethodKind;
use rdmarpc_core::wire::{Flags, FrameKind, Header};
use rdmarpc_core::Metadata;
use tokio::sync::mpsc;

use super::status::{refuse, status_headers};
use super::translate::Responder;
use super::{Held, Shared, ToCall, ToServer};
use crate::compress::{Encoding, ACCEPT};
use crate::frames::control;

use super::head::{read_head, Refusal};

/// One gRPC call: see the module docs.
pub(super) async fn call(
    shared: Arc<Shared>,
    tx: mpsc::Sender<ToServer>,
    call_id: u64,
    request: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
) {
    let (parts, body) = request.into_parts();
    let methods = shared.methods.get().map(|m| &**m);
    let head = match read_head(&parts, shared.config.send_compression, methods) {
        Ok(head) => head,
        Err(refusal) => return answer(&mut respond, refusal),
    };
    let timeout = head.timeout;
    let (frames_tx, frames) = mpsc::unbounded_channel();
    shared.calls.lock().insert(call_id, frames_tx);
    let mut call = Call {
        shared: shared.clone(),
        tx,
        call_id,
        kind: head.kind,
        body,
        respond,
        sending: None,
        response: Responder::new(head.kind, head.response_encoding),
        request_encoding: head.request_encoding,
        deadline: timeout.and_then(|t| tokio::time::Instant::now().checked_add(t)),
        request_bytes: Charge::none(),
        waiting: None,
    };
    let mut header = Header::new(FrameKind::Request, call_id);
    header.method_id = head.method_id;
    header.timeout_us = timeout.map_or(0, |t| t.as_micros().clamp(1, u64::MAX.into()) as u64);
    call.run(header, &head.metadata, frames).await;
    shared.calls.lock().remove(&call_id);
}

/// Answers a request refused before its call started.
fn answer(respond: &mut SendResponse<Bytes>, refusal: Refusal) {
    match refusal {
        Refusal::NotGrpc => {
            let mut response = Response::new(());
            *response.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
            let _ = respond.send_response(response, true);
        }
        Refusal::Encoding(status) => {
            let mut response = Response::new(());
            let headers = response.headers_mut();
            headers.insert("content-type", HeaderValue::from_static("application/grpc"));
            headers.insert("grpc-accept-encoding", HeaderValue::from_static(ACCEPT));
            status_headers(headers, status.code(), status.message());
            let _ = respond.send_response(response, true);
        }
        Refusal::Status(status) => refuse(respond, &status),
    }
}

pub(super) struct Call {
    pub(super) shared: Arc<Shared>,
    pub(super) tx: mpsc::Sender<ToServer>,
    pub(super) call_id: u64,
    pub(super) kind: MethodKind,
    pub(super) body: RecvStream,
    pub(super) respond: SendResponse<Bytes>,
    /// The response body, once the headers went out.
    pub(super) sending: Option<SendStream<Bytes>>,
    /// The response side's translator: the server's frames to HTTP/2, each response
    /// message holding its share of the response buffer until HTTP/2 takes it.
    pub(super) response: Responder<Held>,
    /// How the client compresses its messages (`grpc-encoding`).
    pub(super) request_encoding: Option<Encoding>,
    /// The call's deadline (`grpc-timeout`), from the arrival of its headers.
    pub(super) deadline: Option<tokio::time::Instant>,
    /// What the request message holds on the connection's account, given back when the
    /// call ends (its final response went out, or it was reset).
    pub(super) request_bytes: Charge,
    /// Since when response data waits for the client's window with none granted.
    pub(super) waiting: Option<tokio::time::Instant>,
}

/// What a call's HTTP/2 stream did.
pub(super) enum Wait {
    /// This many bytes may be sent.
    Capacity(usize),
    /// The client reset the call (or the connection went).
    Reset,
    /// The response waited for the client's window past the stream idle timeout.
    Idle,
}

/// Why a call stops early.
pub(super) enum Stop {
    /// The client reset the call or the connection went: the server is told (CANCEL).
    Cancelled,
    /// The server stopped reading this connection for good.
    ServerGone,
    /// The response waited for the client's window past the stream idle timeout: the
    /// call was reset, the server is told (CANCEL).
    Idle,
}

impl Call {
    pub(super) async fn run(
        &mut self,
        mut header: Header,
        metadata: &Metadata,
        mut frames: mpsc::UnboundedReceiver<ToCall>,
    ) {
        let max = self.shared.config.max_message_size;
        let window = self.shared.config.stream_window;
        if self.kind.server_streams() {
            header.credits = window;
        }
        let result = if self.kind.client_streams() {
            self.stream_requests(header, metadata, &mut frames, max)
                .await
        } else {
            match self.one_request(max, metadata).await {
                Ok((message, held)) => {
                    header.flags = Flags::END_STREAM;
                    // The deadline ran from the request's headers: the server gets what
                    // is left of it.
                    if let Some(deadline) = self.deadline {
                        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                        header.timeout_us = left.as_micros().clamp(1, u64::MAX.into()) as u64;
                    }
                    // Held by this call until it ends (the transport charges requests
                    // for the server: `Connection::charges_requests`).
                    self.request_bytes = held;
                    self.to_server(message.into_frame(header, metadata), Charge::none())
                        .await
                }
                Err(Some(status)) => {
                    refuse(&mut self.respond, &status);
                    return;
                }
                Err(None) => {
                    // Reset before the request was complete.
                    self.client_reset();
                    return;
                }
            }
        };
        let result = match result {
            Ok(()) => self.respond_until_done(&mut frames).await,
            Err(stop) => Err(stop),
        };
        match result {
            Err(Stop::Cancelled) => {
                self.client_reset();
                self.cancel_server().await;
            }
            Err(Stop::Idle) => self.cancel_server().await,
            _ => {}
        }
    }

    /// The client reset the call: counted toward the rapid-reset budget unless its
    /// deadline (`grpc-timeout`) had passed, which is a client giving up on a call, as
    /// gRPC clients do at their deadline, not an abuse.
    pub(super) fn client_reset(&self) {
        let expired = self
            .deadline
            .is_some_and(|d| d <= tokio::time::Instant::now() + Duration::from_millis(20));
        if !expired {
            self.shared.reset_by_client();
        }
    }

    /// Tells the server the call is over (CANCEL).
    pub(super) async fn cancel_server(&self) {
        let cancel = control(FrameKind::Cancel, self.call_id);
        let _ = self.tx.send((cancel, Charge::none())).await;
    }

    /// The connection's account (set before any call starts: the driver waits for it).
    pub(super) fn account(&self) -> &Account {
        self.shared
            .account
            .get()
            .expect("set before calls are accepted")
    }

    /// Queues `frame` for the server, with what it holds on the connection's account
    /// (given back when the server takes it).
    pub(super) async fn to_server(&self, frame: Bytes, held: Charge) -> Result<(), Stop> {
        self.tx
            .send((frame, held))
            .await
            .map_err(|_| Stop::ServerGone)
    }
}
