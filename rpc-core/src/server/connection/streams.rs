//! Streaming calls: the ends of each open stream, and the driver that sends a handler's
//! response stream as the client's window allows.

use std::collections::HashMap;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures_util::future::AbortHandle;
use parking_lot::Mutex;

use crate::outbound::{send_frame, send_message};
use crate::service::{
    BoxMessage, BoxMessageStream, MethodKind, ServiceFuture, StreamResponse, StreamingFuture,
};
use crate::stream::{Inbox, Outbox};
use crate::transport::Connection;
use crate::wire::{FrameKind, Header, HEADER_LEN, PAYLOAD_LEN_AT};
use crate::{Metadata, Response, Status};

/// Handlers running for one connection, by call id, so that a CANCEL can drop them; with
/// a serial number, so that a finishing task removes its own entry and not that of a
/// later call that reused the id.
pub(super) type Running = Arc<Mutex<HashMap<u64, (u64, AbortHandle)>>>;

/// The open streams of a connection's streaming calls, by call id: where the reader
/// puts the client's messages and window updates.
pub(super) type Streams = Arc<Mutex<HashMap<u64, StreamEnds>>>;

#[derive(Default)]
pub(crate) struct StreamEnds {
    /// Which opening of the call id this is: the task of a cancelled call must not
    /// remove the streams of a later call that reused the id.
    pub(crate) serial: u64,
    /// The client's messages (client-streaming and bidirectional calls).
    pub(crate) inbox: Option<Arc<Inbox>>,
    /// The window for the server's messages (server-streaming and bidirectional calls).
    pub(crate) outbox: Option<Arc<Outbox>>,
}

impl StreamEnds {
    /// The call is over: the handler's request stream fails (if it still reads it) and
    /// its response stream stops.
    pub(super) fn end(self, status: Status) {
        if let Some(inbox) = self.inbox {
            inbox.forget_window();
            inbox.fail(status.clone(), true);
        }
        if let Some(outbox) = self.outbox {
            outbox.close(status);
        }
    }
}

/// The future of a streaming call: runs the handler, then (when the server streams)
/// sends the response headers and each message as the client's window allows; ends with
/// the final response (the one message of a client-streaming call, else the trailers).
pub(super) fn drive<C: Connection>(
    conn: Arc<C>,
    call_id: u64,
    kind: MethodKind,
    outbox: Option<Arc<Outbox>>,
    call: StreamingFuture,
    max_message_size: usize,
) -> ServiceFuture {
    Box::pin(async move {
        let (metadata, body, trailers) = call.await?.into_all_parts();
        let (stream, outbox) = match (body, outbox) {
            (StreamResponse::Message(message), None) => {
                let mut response = Response::from_parts(metadata, message);
                *response.trailers_mut() = trailers;
                return Ok(response);
            }
            (StreamResponse::Stream(stream), Some(outbox)) => (stream, outbox),
            _ => {
                return Err(Status::internal(format!(
                    "the handler answered a {kind:?} method with the wrong kind of response"
                )))
            }
        };
        metadata
            .check()
            .map_err(|e| Status::internal(format!("response metadata: {e}")))?;
        // The response headers: a response frame without END_STREAM.
        send_frame(
            &*conn,
            Header::new(FrameKind::Response, call_id),
            &metadata,
            |_| {},
        )
        .await
        .map_err(Status::from)?;
        let sender = StreamSender::new(conn, call_id, outbox, max_message_size);
        sender.send_all(stream).await?;
        Ok(Response::from_parts(trailers, Box::new(()) as BoxMessage))
    })
}

/// Sends a handler's response stream as the client's window allows.
///
/// Small messages that are ready together go out in one buffer where the transport takes
/// several frames per buffer: one queueing and one write (TCP) or one batch message
/// (RDMA) for a run of them, as HTTP/2 packs messages into DATA frames.
struct StreamSender<C: Connection> {
    conn: Arc<C>,
    call_id: u64,
    outbox: Arc<Outbox>,
    /// The largest message.
    limit: usize,
    /// Frames one buffer may carry (1: no batches).
    max_frames: usize,
    /// Messages whose frames reach this many bytes go alone; 0 without batches.
    batch_max: usize,
}

/// What ended a batch early: the stream's end, or its failure.
type End = Option<Result<(), Status>>;

impl<C: Connection> StreamSender<C> {
    fn new(conn: Arc<C>, call_id: u64, outbox: Arc<Outbox>, max_message_size: usize) -> Self {
        let max_frames = conn.max_frames_per_buffer();
        let batch_max = if max_frames > 1 {
            conn.gather_min().unwrap_or(BATCH_BYTES).min(BATCH_BYTES)
        } else {
            0
        };
        StreamSender {
            conn,
            call_id,
            outbox,
            limit: max_message_size.min(u32::MAX as usize),
            max_frames,
            batch_max,
        }
    }

    fn too_large(&self, len: usize) -> Status {
        Status::resource_exhausted(format!(
            "response message of {len} bytes exceeds the maximum of {}",
            self.limit
        ))
    }

    /// Sends every message of `stream`, then returns; its first error ends the call.
    async fn send_all(&self, mut stream: BoxMessageStream) -> Result<(), Status> {
        use futures_util::StreamExt;
        // A message pulled for a batch that it did not fit: the next one's first.
        let mut carry: Option<(BoxMessage, usize)> = None;
        // Where a batch is encoded before it is copied into the transport's buffer.
        let mut scratch = Vec::new();
        loop {
            let (message, len) = match carry.take() {
                Some(carried) => carried,
                None => match stream.next().await {
                    Some(item) => {
                        let message = item?;
                        let len = message.encoded_len();
                        if len > self.limit {
                            return Err(self.too_large(len));
                        }
                        (message, len)
                    }
                    None => return Ok(()),
                },
            };
            self.outbox.reserve(HEADER_LEN + len).await?;
            if HEADER_LEN + len >= self.batch_max {
                let header = Header::new(FrameKind::Message, self.call_id);
                send_message(&*self.conn, header, &Metadata::new(), &*message)
                    .await
                    .map_err(Status::from)?;
                continue;
            }
            let mut batch = vec![(message, len)];
            let (bytes, end) = self.gather(&mut stream, &mut batch, &mut carry);
            self.send_batch(&batch, bytes, &mut scratch).await?;
            match end {
                Some(Ok(())) => return Ok(()),
                Some(Err(status)) => return Err(status),
                None => {}
            }
        }
    }

    /// Adds to `batch` whatever the stream has ready now, while the window and the batch
    /// allow (the window read once, what the batch takes subtracted once); a message
    /// that does not fit is left in `carry`. The batch's bytes, and the stream's end if
    /// it came.
    fn gather(
        &self,
        stream: &mut BoxMessageStream,
        batch: &mut Vec<(BoxMessage, usize)>,
        carry: &mut Option<(BoxMessage, usize)>,
    ) -> (usize, End) {
        let mut bytes: usize = batch.iter().map(|(_, len)| HEADER_LEN + len).sum();
        let mut window = self.outbox.window();
        let mut taken = 0;
        let mut end = None;
        while batch.len() < self.max_frames && window > 0 {
            let mut cx = Context::from_waker(Waker::noop());
            match stream.as_mut().poll_next(&mut cx) {
                Poll::Ready(Some(Ok(next))) => {
                    let len = next.encoded_len();
                    if len > self.limit {
                        end = Some(Err(self.too_large(len)));
                        break;
                    }
                    if bytes + HEADER_LEN + len >= self.batch_max {
                        *carry = Some((next, len));
                        break;
                    }
                    window -= (HEADER_LEN + len) as i64;
                    taken += HEADER_LEN + len;
                    bytes += HEADER_LEN + len;
                    batch.push((next, len));
                }
                Poll::Ready(Some(Err(status))) => {
                    end = Some(Err(status));
                    break;
                }
                Poll::Ready(None) => {
                    end = Some(Ok(()));
                    break;
                }
                Poll::Pending => break,
            }
        }
        self.outbox.take(taken);
        (bytes, end)
    }

    /// Sends `batch` (of `bytes` in frames) in one buffer: encoded into `scratch`, where
    /// each message is written without a dynamic call per byte, then copied in at once.
    async fn send_batch(
        &self,
        batch: &[(BoxMessage, usize)],
        bytes: usize,
        scratch: &mut Vec<u8>,
    ) -> Result<(), Status> {
        use bytes::BufMut;
        let mut buf = self.conn.alloc(bytes).await.map_err(Status::from)?;
        // Written over, not cleared: what the last batch left is overwritten.
        if scratch.len() < bytes {
            scratch.resize(bytes, 0);
        }
        // Every frame's header is this one but for its payload length.
        let template = Header::new(FrameKind::Message, self.call_id).encode();
        let mut at = 0;
        for (message, len) in batch {
            scratch[at..at + HEADER_LEN].copy_from_slice(&template);
            let payload_len = at + PAYLOAD_LEN_AT..at + PAYLOAD_LEN_AT + 4;
            scratch[payload_len].copy_from_slice(&(*len as u32).to_le_bytes());
            at += HEADER_LEN;
            message.encode_to_slice(&mut scratch[at..at + len]);
            at += len;
        }
        buf.put_slice(&scratch[..at]);
        self.conn.send(buf).await.map_err(Status::from)
    }
}

/// The largest run of small stream messages sent in one buffer.
pub(super) const BATCH_BYTES: usize = 32 * 1024;
