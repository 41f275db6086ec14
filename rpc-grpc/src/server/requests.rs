//! A call's request side: length-prefixed messages read from the HTTP/2 body (inflated
//! when compressed), charged, and handed to the server as frames.

use std::collections::VecDeque;

use bytes::Bytes;
use rpc_core::account::{Account, Charge, Resource};
use rpc_core::wire::{Flags, FrameKind, Header, HEADER_LEN};
use rpc_core::{Code, Metadata, Status};
use tokio::sync::mpsc;

use super::call::{Call, Stop};
use super::room::Room;
use super::status::stalled;
use super::ToCall;
use crate::deframe::Deframer;
use crate::frames::frame;

/// Charges `n` more bytes of a message's inflated output into `inflated`, refusing when
/// the account has no room; what the call holds (`held`, what is still compressed, and
/// `inflated`) is charged up to the smallest limit at most, as `Call::hold` does.
pub(super) fn inflate(
    account: &Account,
    held: &Charge,
    inflated: &mut Charge,
    n: usize,
) -> Result<(), Status> {
    let room = account
        .limit(Resource::Bytes)
        .saturating_sub(held.amount() + inflated.amount());
    if room > 0 {
        inflated.merge(account.try_charge(Resource::Bytes, n.min(room))?);
    }
    Ok(())
}

impl Call {
    /// The one message of a unary or server-streaming request, read to the end of the
    /// body, with what it holds on the connection's account (what arrived, and what a
    /// compressed message inflated to). `Err(None)`: the client went.
    ///
    /// The whole body must arrive within the body timeout and the call's deadline, both
    /// counted from the request's headers: a body trickled a byte at a time does not
    /// hold the call open past them.
    pub(super) async fn one_request(
        &mut self,
        max: usize,
    ) -> Result<(Bytes, Charge), Option<Status>> {
        let mut deframer = Deframer::default();
        deframer.set_encoding(self.request_encoding);
        let mut message: Option<(Bytes, Charge)> = None;
        // What the deframer holds (the message in progress) on the account.
        let mut held = Charge::none();
        let body_deadline = tokio::time::Instant::now() + self.shared.config.body_timeout;
        let (until, why) = match self.deadline {
            Some(deadline) if deadline < body_deadline => (deadline, Code::DeadlineExceeded),
            _ => (body_deadline, Code::Cancelled),
        };
        let late = || match why {
            Code::DeadlineExceeded => {
                Status::deadline_exceeded("the deadline passed while the request body arrived")
            }
            _ => stalled(),
        };
        loop {
            let chunk = match tokio::time::timeout_at(until, self.body.data()).await {
                Err(_) => return Err(Some(late())),
                Ok(None) => break,
                Ok(Some(chunk)) => chunk.map_err(|_| None)?,
            };
            if tokio::time::timeout_at(until, self.hold(&mut held, chunk.len()))
                .await
                .is_err()
            {
                return Err(Some(late()));
            }
            let _ = self.body.flow_control().release_capacity(chunk.len());
            deframer.push(&chunk);
            loop {
                let account = self.account();
                let mut inflated = Charge::none();
                let next =
                    deframer.next_charged(max, &mut |n| inflate(account, &held, &mut inflated, n));
                match next.map_err(Some)? {
                    Some(next) => {
                        // As received, or as inflated (the compressed bytes are gone).
                        let received = held.split(deframer.take_consumed());
                        let charge = if inflated.amount() > 0 {
                            inflated
                        } else {
                            received
                        };
                        if message.replace((next, charge)).is_some() {
                            return Err(Some(Status::unimplemented(
                                "more than one request message for a method that takes one",
                            )));
                        }
                    }
                    None => break,
                }
            }
        }
        if deframer.held() > 0 {
            return Err(Some(Status::internal("the request ended inside a message")));
        }
        message.ok_or_else(|| Some(Status::unimplemented("no request message")))
    }

    /// Charges `bytes` more (a chunk of the body, read) to the connection's account into
    /// `held`, waiting (the body unread) while the connection, its peer or the server
    /// holds its maximum of requests. What one holder holds is charged up to the
    /// smallest limit at most (a message larger than it fits an account that holds
    /// nothing else, as the whole of it), so that a call never waits for itself.
    pub(super) async fn hold(&self, held: &mut Charge, bytes: usize) {
        let room = self
            .account()
            .limit(Resource::Bytes)
            .saturating_sub(held.amount());
        if room > 0 {
            let more = self
                .account()
                .charge(Resource::Bytes, bytes.min(room))
                .await;
            held.merge(more);
        }
    }

    /// A client-streaming or bidirectional call: the opening request, then the body's
    /// messages as the server grants its window, while answering the server's frames.
    pub(super) async fn stream_requests(
        &mut self,
        mut header: Header,
        metadata: &Metadata,
        frames: &mut mpsc::UnboundedReceiver<ToCall>,
        max: usize,
    ) -> Result<(), Stop> {
        if self.kind.server_streams() {
            header.credits = self.shared.config.stream_window;
        }
        self.to_server(frame(header, metadata, &[]), Charge::none())
            .await?;
        let mut up = Upload::new(self.request_encoding, self.account().clone());
        // When the last chunk came: a message in progress may stall only so long.
        let mut last_chunk = tokio::time::Instant::now();
        let mut was_reading = true;
        let body_timeout = self.shared.config.body_timeout;
        let limit = self.shared.config.stream_window as usize;
        loop {
            self.forward(&mut up).await?;
            if up.body_done && up.queued.is_empty() {
                let mut end = Header::new(FrameKind::Message, self.call_id);
                end.flags = Flags::END_STREAM;
                self.to_server(frame(end, &Metadata::new(), &[]), Charge::none())
                    .await?;
                return Ok(());
            }
            // The server may end the call before the client finished sending.
            self.finish()?;
            if self.response.is_done() {
                return Ok(());
            }
            // The body is read while the messages waiting for the server's window are
            // under the limit (a message in progress is read to its end whatever its
            // size: its prefix was checked). Only while reading does a stalled message
            // count against the client. A chunk is read once there is room on the account
            // for it, waited for as a branch of its own: the call goes on forwarding its
            // queued messages (which frees room) meanwhile.
            let reading = !up.body_done && up.queued_bytes < limit && up.room.ready(&up.held);
            if reading && !was_reading {
                last_chunk = tokio::time::Instant::now();
            }
            was_reading = reading;
            tokio::select! {
                chunk = self.body.data(), if reading => {
                    match chunk {
                        Some(Ok(chunk)) => {
                            last_chunk = tokio::time::Instant::now();
                            let _ = self.body.flow_control().release_capacity(chunk.len());
                            if let Err(status) = up.push_chunk(&chunk, self.account(), max) {
                                // The server's call is told to stop; the client gets the reason.
                                self.cancel_server().await;
                                self.fail(&status);
                                return Err(Stop::ServerGone);
                            }
                        }
                        Some(Err(_)) => return Err(Stop::Cancelled),
                        None => up.body_done = true,
                    }
                }
                () = up.room.granted(), if up.room.is_waiting() => {}
                frame = frames.recv() => {
                    let Some(frame) = frame else { return Err(Stop::ServerGone) };
                    up.window += self.on_server_frames(frame, frames)?;
                }
                wait = Self::wait_stream(&mut self.respond, &mut self.sending, self.response.waiting(), &mut self.waiting, self.shared.config.stream_idle_timeout) => {
                    self.sent(wait).await?;
                }
                () = tokio::time::sleep_until(last_chunk + body_timeout), if reading && up.deframer.held() > 0 => {
                    self.cancel_server().await;
                    self.fail(&stalled());
                    return Err(Stop::ServerGone);
                }
            }
        }
    }

    /// Hands the server the queued messages its window allows.
    async fn forward(&mut self, up: &mut Upload) -> Result<(), Stop> {
        while up.window > 0 {
            let Some((message, charge)) = up.queued.pop_front() else {
                break;
            };
            up.queued_bytes -= HEADER_LEN + message.len();
            up.window -= (HEADER_LEN + message.len()) as i64;
            let m = Header::new(FrameKind::Message, self.call_id);
            self.to_server(frame(m, &Metadata::new(), &message), charge)
                .await?;
        }
        Ok(())
    }
}

/// A request stream's state while its call forwards it to the server.
struct Upload {
    deframer: Deframer,
    /// Messages waiting for the server's window, each with what it holds on the
    /// connection's account (its bytes as received, or as inflated).
    queued: VecDeque<(Bytes, Charge)>,
    queued_bytes: usize,
    /// What the deframer holds (a message in progress) on the account.
    held: Charge,
    /// The room taken on the account for the next chunk.
    room: Room,
    /// What the server granted and the queue has not used.
    window: i64,
    body_done: bool,
}

impl Upload {
    fn new(encoding: Option<crate::compress::Encoding>, account: Account) -> Upload {
        let mut deframer = Deframer::default();
        deframer.set_encoding(encoding);
        Upload {
            deframer,
            queued: VecDeque::new(),
            queued_bytes: 0,
            held: Charge::none(),
            room: Room::new(account),
            window: 0,
            body_done: false,
        }
    }

    /// A chunk of the body, read into the room taken for it: the messages it completes
    /// are queued with their charges; a malformed, oversized or over-account message is
    /// the status that ends the call.
    fn push_chunk(&mut self, chunk: &Bytes, account: &Account, max: usize) -> Result<(), Status> {
        self.room.take(&mut self.held, chunk.len());
        self.deframer.push(chunk);
        loop {
            let mut inflated = Charge::none();
            let held = &self.held;
            let next = self
                .deframer
                .next_charged(max, &mut |n| inflate(account, held, &mut inflated, n))?;
            let Some(message) = next else {
                return Ok(());
            };
            // As received, or as inflated (the compressed bytes are gone then).
            let received = self.held.split(self.deframer.take_consumed());
            let charge = if inflated.amount() > 0 {
                inflated
            } else {
                received
            };
            self.queued_bytes += HEADER_LEN + message.len();
            self.queued.push_back((message, charge));
        }
    }
}
