//! A call's request body as a sans-IO translator: HTTP/2 body chunks in (each read into
//! room taken on the connection's account first); out, the gRPC messages deframed (and
//! inflated), each charged at its size in memory, queued until the server grants window,
//! then handed over in order within it (a request stream), or the one message of a
//! unary or server-streaming call once the body ended ([`Upload::single`]). The call (`requests.rs`) reads the body,
//! waits for room and for the server, and sends what this lets go. Unit tests in
//! `upload_tests.rs`; fuzz target `grpc_request` (through `crate::fuzzing`).

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use rdmarpc_core::account::{Account, Charge, Resource};
use rdmarpc_core::wire::{encode_head, Header, HEADER_LEN};
use rdmarpc_core::{Metadata, Status};

use super::room::Room;
use crate::compress::Encoding;
use crate::deframe::Deframer;

/// A second request message where the method takes one: gRPC answers `UNIMPLEMENTED`.
fn more_than_one() -> Status {
    Status::unimplemented("more than one request message for a method that takes one")
}

/// Charges `n` more bytes of a message's inflated output into `inflated`, refusing when
/// the account has no room; what the call holds (`held`, what is still compressed, and
/// `inflated`) is charged up to the smallest limit at most, as the body's chunks are.
pub(crate) fn inflate(
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

/// A request message in a buffer of its own, with room in front of it for its frame's
/// head: it becomes the server's frame without another copy.
#[derive(Debug)]
pub(crate) struct Message {
    buf: BytesMut,
    headroom: usize,
}

impl Message {
    /// The message's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[self.headroom..]
    }

    /// The message as a frame with `header` and `metadata` (in place when they fill the
    /// room in front of it, as they do when the upload was told their length).
    pub(crate) fn into_frame(mut self, mut header: Header, metadata: &Metadata) -> Bytes {
        header.payload_len = self.bytes().len() as u32;
        if HEADER_LEN + metadata.encoded_len() != self.headroom {
            return crate::frames::frame(header, metadata, self.bytes());
        }
        let mut head = &mut self.buf[..self.headroom];
        encode_head(&mut header, metadata, &mut head);
        debug_assert!(head.is_empty(), "the head fills the room");
        self.buf.freeze()
    }
}

impl PartialEq<Bytes> for Message {
    fn eq(&self, other: &Bytes) -> bool {
        self.bytes() == &other[..]
    }
}

/// A request body's state while its call reads it.
pub(crate) struct Upload {
    account: Account,
    deframer: Deframer,
    /// Messages waiting for the server's window, each with what it holds on the
    /// connection's account (its bytes as received, or as inflated).
    queued: VecDeque<(Message, Charge)>,
    /// Room in front of each message for its frame's head.
    headroom: usize,
    /// Frame bytes of the queued messages.
    queued_bytes: usize,
    /// What the deframer holds (a message in progress) on the account.
    held: Charge,
    /// The room taken on the account for the next chunk.
    pub(crate) room: Room,
    /// What the server granted and the queue has not used.
    window: i64,
    body_done: bool,
    /// The method takes one request message: a second one fails the call as soon as it
    /// starts, before any of it is deframed or inflated.
    single: bool,
}

impl Upload {
    /// A request stream whose messages are compressed with `encoding`, charged to
    /// `account`.
    pub(crate) fn new(encoding: Option<Encoding>, account: Account) -> Upload {
        let mut deframer = Deframer::default();
        deframer.set_encoding(encoding);
        Upload {
            room: Room::new(account.clone()),
            account,
            deframer,
            queued: VecDeque::new(),
            headroom: HEADER_LEN,
            queued_bytes: 0,
            held: Charge::none(),
            window: 0,
            body_done: false,
            single: false,
        }
    }

    /// The body of a unary or server-streaming call: one message, taken with
    /// [`Upload::the_one`] once the body ended.
    pub(crate) fn single(encoding: Option<Encoding>, account: Account) -> Upload {
        Upload {
            single: true,
            ..Upload::new(encoding, account)
        }
    }

    /// The client's frames are up to `frame_size` bytes long (what the server
    /// advertised): the room taken before a read covers one once the stream sent a long
    /// one, and only chunks that long are kept as they came.
    pub(crate) fn frames_up_to(&mut self, frame_size: usize) {
        self.room.chunks_up_to(frame_size);
        self.deframer.keep_from(frame_size);
    }

    /// The messages' frames carry `metadata_len` bytes of metadata (a unary call's one
    /// message): the room in front of each message.
    pub(crate) fn metadata_len(&mut self, metadata_len: usize) {
        self.headroom = HEADER_LEN + metadata_len;
    }

    /// Whether to read the body now: it goes on, the messages waiting for the server's
    /// window are under `limit` frame bytes, and there is room on the account for a
    /// chunk (if not, a wait for it has started: [`Room::granted`]).
    pub(crate) fn wants_body(&mut self, limit: usize) -> bool {
        if self.single && !self.queued.is_empty() {
            // The one message is here: what follows can only be the body's end (or a
            // second message, refused at its first byte). Read without room: the
            // message may hold the whole account, and must not wait for itself.
            return !self.body_done;
        }
        !self.body_done && self.queued_bytes < limit && self.room.ready(&self.held)
    }

    /// Whether a message is in progress (part of it arrived).
    pub(crate) fn in_message(&self) -> bool {
        self.deframer.held() > 0
    }

    /// A chunk of the body, read into the room taken for it: the messages it completes
    /// are queued with their charges.
    ///
    /// # Errors
    /// A malformed, oversized (past `max`) or over-account message: the status that ends
    /// the call.
    pub(crate) fn push_chunk(&mut self, chunk: Bytes, max: usize) -> Result<(), Status> {
        self.room.take(&mut self.held, chunk.len());
        self.deframer.push_bytes(chunk);
        loop {
            if self.single && !self.queued.is_empty() && self.in_message() {
                return Err(more_than_one());
            }
            let mut inflated = Charge::none();
            let (account, held) = (&self.account, &self.held);
            let next = self
                .deframer
                .next_with_headroom(max, self.headroom, &mut |n| {
                    inflate(account, held, &mut inflated, n)
                })?;
            let Some(buf) = next else {
                return Ok(());
            };
            let message = Message {
                buf,
                headroom: self.headroom,
            };
            // As received, or as inflated (the compressed bytes are gone then).
            let received = self.held.split(self.deframer.take_consumed());
            let charge = if inflated.amount() > 0 {
                inflated
            } else {
                received
            };
            self.queued_bytes += HEADER_LEN + message.bytes().len();
            self.queued.push_back((message, charge));
        }
    }

    /// The body ended.
    pub(crate) fn body_ended(&mut self) {
        self.body_done = true;
    }

    /// Whether the body ended.
    pub(crate) fn body_done(&self) -> bool {
        self.body_done
    }

    /// The one message of a [`Upload::single`] body, once the body ended, with what it
    /// holds on the account.
    ///
    /// # Errors
    /// The body ended inside a message, or with none.
    pub(crate) fn the_one(&mut self) -> Result<(Message, Charge), Status> {
        debug_assert!(self.single && self.queued.len() <= 1);
        if self.in_message() {
            return Err(Status::internal("the request ended inside a message"));
        }
        let (message, charge) = self
            .queued
            .pop_front()
            .ok_or_else(|| Status::unimplemented("no request message"))?;
        self.queued_bytes -= HEADER_LEN + message.bytes().len();
        Ok((message, charge))
    }

    /// Whether everything was handed over: the body ended and nothing waits.
    pub(crate) fn finished(&self) -> bool {
        self.body_done && self.queued.is_empty()
    }

    /// The server granted `credits` more bytes of window.
    pub(crate) fn grant(&mut self, credits: i64) {
        self.window += credits;
    }

    /// The next message the server's window lets go (it may overdraw it, as a sender
    /// does), with what it holds on the account until the server takes it.
    pub(crate) fn next_message(&mut self) -> Option<(Message, Charge)> {
        if self.window <= 0 {
            return None;
        }
        let (message, charge) = self.queued.pop_front()?;
        let frame_len = HEADER_LEN + message.bytes().len();
        self.queued_bytes -= frame_len;
        self.window -= frame_len as i64;
        Some((message, charge))
    }

    /// Frame bytes of the messages waiting for the server's window.
    #[cfg(test)]
    pub(crate) fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }
}

#[cfg(test)]
#[path = "upload_tests.rs"]
mod tests;
