//! A call's request side, the I/O shell of the request translator (`upload.rs`): the
//! one message of a unary or server-streaming call read from the HTTP/2 body; a request
//! stream read into it, waiting for room and for the server's window, handing the
//! server what it lets go.

use rdmarpc_core::account::Charge;
use rdmarpc_core::wire::{Flags, FrameKind, Header};
use rdmarpc_core::{Code, Metadata, Status};
use tokio::sync::mpsc;

use super::call::{Call, Stop};
use super::status::stalled;
use super::upload::{Message, Upload};
use super::ToCall;
use crate::frames::frame;

impl Call {
    /// The one message of a unary or server-streaming request, read to the end of the
    /// body through the request translator (`upload.rs`, which never forwards here), with
    /// what it holds on the connection's account (what arrived, or what a compressed
    /// message inflated to). `Err(None)`: the client went.
    ///
    /// The whole body must arrive within the body timeout and the call's deadline, both
    /// counted from the request's headers: a body trickled a byte at a time, or held back
    /// waiting for room on the account, does not hold the call open past them.
    pub(super) async fn one_request(
        &mut self,
        max: usize,
        metadata: &Metadata,
    ) -> Result<(Message, Charge), Option<Status>> {
        let mut up = Upload::single(self.request_encoding, self.account().clone());
        up.metadata_len(metadata.encoded_len());
        up.frames_up_to(self.shared.config.frame_size() as usize);
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
        while !up.body_done() {
            if !up.wants_body(usize::MAX) {
                // No room on the account for a chunk yet: the body waits unread.
                if tokio::time::timeout_at(until, up.room.granted())
                    .await
                    .is_err()
                {
                    return Err(Some(late()));
                }
                continue;
            }
            match tokio::time::timeout_at(until, self.body.data()).await {
                Err(_) => return Err(Some(late())),
                Ok(None) => up.body_ended(),
                Ok(Some(chunk)) => {
                    let chunk = chunk.map_err(|_| None)?;
                    let _ = self.body.flow_control().release_capacity(chunk.len());
                    up.push_chunk(chunk, max).map_err(Some)?;
                }
            }
        }
        up.the_one().map_err(Some)
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
        up.frames_up_to(self.shared.config.frame_size() as usize);
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
                            if let Err(status) = up.push_chunk(chunk, max) {
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
            self.to_server(message.into_frame(m, &Metadata::new()), charge)
                .await?;
        }
        Ok(())
    }
}
