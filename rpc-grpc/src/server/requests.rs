//! A call's request side: the one message of a unary or server-streaming call read from
//! the HTTP/2 body, and the I/O shell of a request stream's translator (`upload.rs`):
//! reading the body into it, waiting for room and for the server's window, handing the
//! server what it lets go.

use bytes::Bytes;
use rpc_core::account::{Charge, Resource};
use rpc_core::wire::{Flags, FrameKind, Header};
use rpc_core::{Code, Metadata, Status};
use tokio::sync::mpsc;

use super::call::{Call, Stop};
use super::status::stalled;
use super::upload::{inflate, Upload};
use super::ToCall;
use crate::deframe::Deframer;
use crate::frames::frame;

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
            if up.finished() {
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
            let reading = up.wants_body(limit);
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
                            if let Err(status) = up.push_chunk(&chunk, max) {
                                // The server's call is told to stop; the client gets the reason.
                                self.cancel_server().await;
                                self.fail(&status);
                                return Err(Stop::ServerGone);
                            }
                        }
                        Some(Err(_)) => return Err(Stop::Cancelled),
                        None => up.body_ended(),
                    }
                }
                () = up.room.granted(), if up.room.is_waiting() => {}
                frame = frames.recv() => {
                    let Some(frame) = frame else { return Err(Stop::ServerGone) };
                    let granted = self.on_server_frames(frame, frames)?;
                    up.grant(granted);
                }
                wait = Self::wait_stream(&mut self.respond, &mut self.sending, self.response.waiting(), &mut self.waiting, self.shared.config.stream_idle_timeout) => {
                    self.sent(wait).await?;
                }
                () = tokio::time::sleep_until(last_chunk + body_timeout), if reading && up.in_message() => {
                    self.cancel_server().await;
                    self.fail(&stalled());
                    return Err(Stop::ServerGone);
                }
            }
        }
    }

    /// Hands the server the queued messages its window allows.
    async fn forward(&mut self, up: &mut Upload) -> Result<(), Stop> {
        while let Some((message, charge)) = up.next_message() {
            let m = Header::new(FrameKind::Message, self.call_id);
            self.to_server(frame(m, &Metadata::new(), &message), charge)
                .await?;
        }
        Ok(())
    }
}
