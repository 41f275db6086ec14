//! Sending a call's outcome, and the bounded queue of replies the reader hands off.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::account::{Account, Charge, Resource};
use crate::control::ControlQueue;
use crate::outbound::{send_control, send_control_credits, send_message, send_status_flags};
use crate::service::BoxMessage;
use crate::transport::{Connection, TransportError};
use crate::wire::{Flags, FrameKind, Header};
use crate::{Response, Status};

/// What bounds a unary call's response.
pub(super) struct Limits {
    /// [`ServerConfig::max_message_size`](crate::ServerConfig::max_message_size).
    pub(super) max_message_size: usize,
    /// The connection's account, charged with what the response holds beyond
    /// `covered` until the transport takes it.
    pub(super) account: Account,
    /// The bytes the call's request holds on the account (its frame length): a response
    /// as large is held under the same charge, which the call keeps until the transport
    /// takes the response.
    pub(super) covered: usize,
}

/// A response may exceed its request by this much without a charge of its own (its
/// metadata, a few fields more): at most this per call running, which the call limits
/// bound.
const UNCHARGED_SLACK: usize = 4096;

/// Sends a handler's outcome: the response message, or its status.
///
/// A response that cannot be sent as it is (over `max_message_size`, beyond the header's
/// 32-bit length, metadata over its limit, or refused by the transport as too large) is
/// replaced by a status naming the reason, so that the client never waits for an answer
/// that was dropped. A response larger than its request is charged the difference on
/// the connection's account (bytes held) until the transport takes it; refused there, it
/// is replaced by `RESOURCE_EXHAUSTED`: a peer that does not read its answers cannot make
/// the server hold more of them than its share.
pub(super) async fn respond<C: Connection>(
    conn: &C,
    call_id: u64,
    outcome: Result<Response<BoxMessage>, Status>,
    limits: &Limits,
) {
    let max_message_size = limits.max_message_size;
    let sent = match outcome {
        Ok(response) => {
            let (metadata, message, trailers) = response.into_all_parts();
            // Checked before the trailers are appended: the block then holds the
            // separator, an empty key applications may not use.
            let checked = metadata.check().and_then(|()| trailers.check());
            // One metadata block on this framework's wire: trailers after the separator.
            let mut metadata = metadata;
            metadata.append_trailers(&trailers);
            let len = message.encoded_len();
            let limit = max_message_size.min(u32::MAX as usize);
            if len > limit {
                let status = Status::resource_exhausted(format!(
                    "response message of {len} bytes exceeds the maximum of {limit}"
                ));
                tracing::warn!(call_id, "{}", status.message());
                send_status_flags(conn, call_id, &status, Flags::default()).await
            } else if let Err(e) = checked.and_then(|()| {
                let len = metadata.encoded_len();
                if len > crate::MAX_METADATA_LEN {
                    Err(crate::wire::FrameError::MetadataTooLarge(len))
                } else {
                    Ok(())
                }
            }) {
                let status = Status::internal(format!("response metadata: {e}"));
                tracing::warn!(call_id, "{}", status.message());
                send_status_flags(conn, call_id, &status, Flags::default()).await
            } else {
                match hold(limits, metadata.encoded_len() + len) {
                    Err(status) => {
                        tracing::debug!(call_id, "{}", status.message());
                        send_status_flags(conn, call_id, &status, Flags::default()).await
                    }
                    Ok(held) => send_response(conn, call_id, &metadata, &*message, held).await,
                }
            }
        }
        Err(status) => {
            tracing::debug!(code = %status.code(), "call failed: {}", status.message());
            send_status_flags(conn, call_id, &status, Flags::default()).await
        }
    };
    if let Err(e) = sent {
        tracing::debug!(call_id, "response not sent: {e}");
    }
}

/// Sends a response message, holding `held` until the transport took it.
async fn send_response<C: Connection>(
    conn: &C,
    call_id: u64,
    metadata: &crate::Metadata,
    message: &dyn crate::service::EncodeMessage,
    held: Charge,
) -> Result<(), TransportError> {
    let mut header = Header::new(FrameKind::Response, call_id);
    header.flags = Flags::END_STREAM;
    // Large `bytes` fields go by gathered write where the transport has one.
    let sent = send_message(conn, header, metadata, message).await;
    drop(held);
    match sent {
        Err(TransportError::TooLarge { len, max }) => {
            let status = Status::resource_exhausted(format!(
                "response frame of {len} bytes exceeds the transport's maximum of {max}"
            ));
            tracing::warn!(call_id, "{}", status.message());
            send_status_flags(conn, call_id, &status, Flags::default()).await
        }
        // The connection is gone: nothing can be answered on it.
        Err(
            e @ (TransportError::Closed
            | TransportError::Io(_)
            | TransportError::PeerSilent(_)
            | TransportError::Protocol(_)),
        ) => Err(e),
        // This response only could not be sent (e.g. an RDMA transport at its
        // locked-memory limit, which said why): the call is answered with why, not left
        // to the client's deadline; the connection goes on.
        Err(e) => {
            let status = Status::from(e);
            tracing::debug!(call_id, "response not sent: {}", status.message());
            send_status_flags(conn, call_id, &status, Flags::default()).await
        }
        Ok(()) => Ok(()),
    }
}

/// Charges what a response of `len` bytes (metadata and message) holds beyond what its
/// request's charge covers.
fn hold(limits: &Limits, len: usize) -> Result<Charge, Status> {
    // What the call holds, request and response, is charged up to the smallest limit at
    // most: a response larger than it fits an account that holds nothing else.
    let limit = limits.account.limit(Resource::Bytes);
    let extra = (crate::wire::HEADER_LEN + len)
        .min(limit)
        .saturating_sub(limits.covered);
    if extra <= UNCHARGED_SLACK {
        return Ok(Charge::none());
    }
    limits
        .account
        .try_charge(Resource::Bytes, extra)
        .map_err(|e| Status::resource_exhausted(format!("a response of {len} bytes: {e}")))
}

/// A frame the connection's reader wants sent without waiting for the transport itself.
#[derive(Debug)]
pub(super) enum Reply {
    /// A frame with no body (PONG, GOAWAY).
    Control(FrameKind, u64),
    /// A failed response; `flags` may carry [`Flags::REFUSED`].
    Status(u64, Status, Flags),
}

/// Sends the replies queued by the reader, in order, until the queue closes.
///
/// The queue is bounded ([`ServerConfig::max_queued_replies`](crate::ServerConfig)): when
/// the peer does not read and the transport pushes back, the queue fills and the reader
/// stops reading that connection. One task per connection, not one per reply.
pub(super) async fn responder<C: Connection>(
    conn: Arc<C>,
    mut queue: mpsc::Receiver<Reply>,
    control: Arc<ControlQueue>,
) {
    loop {
        let reply = tokio::select! {
            reply = queue.recv() => match reply {
                Some(reply) => reply,
                None => return,
            },
            Some(batch) = control.next_batch() => {
                for update in batch {
                    if let Err(e) = send_control_credits(&*conn, update).await {
                        tracing::debug!("window update not sent: {e}");
                    }
                }
                continue;
            }
        };
        let sent = match reply {
            Reply::Control(kind, call_id) => send_control(&*conn, kind, call_id).await,
            Reply::Status(call_id, status, flags) => {
                tracing::debug!(call_id, code = %status.code(), "{}", status.message());
                send_status_flags(&*conn, call_id, &status, flags).await
            }
        };
        if let Err(e) = sent {
            tracing::debug!("reply not sent: {e}");
            if matches!(e, TransportError::Closed) {
                return;
            }
        }
    }
}
