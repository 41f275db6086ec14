//! The fixed frame header: a pure codec with no I/O.
//!
//! Every frame on every transport starts with this 40-byte little-endian header:
//!
//! ```text
//!  0      2    3    4     5      6        8         16           24          28         32           36        40
//!  +------+----+----+-----+------+--------+---------+------------+-----------+----------+------------+---------+
//!  |magic |ver |kind|flags|status|reserved| call_id | timeout_us | method_id | meta_len |payload_len | credits |
//!  | u16  | u8 | u8 | u8  |  u8  |  u16=0 |   u64   |    u64     |    u32    |   u32    |    u32     |   u32   |
//!  +------+----+----+-----+------+--------+---------+------------+-----------+----------+------------+---------+
//! ```
//! followed by `meta_len` bytes of [`Metadata`](crate::Metadata) and `payload_len` bytes of
//! protobuf payload. `magic` is the bytes `R` `P`; `timeout_us` is the time the caller still
//! allows, relative so that clocks need not agree (0 = none); `credits` is per-stream flow
//! control: the bytes a [`FrameKind::WindowUpdate`] adds to a stream's window, or, in the
//! request that opens a streaming call, the caller's whole receive window (0 = the
//! protocol's [`INITIAL_STREAM_WINDOW`]); 0 elsewhere.
//!
//! # Streams
//! A call id names a stream. A unary call is one `Request` and one `Response`, both with
//! `END_STREAM`. A streaming call opens with a `Request` (with the one request message and
//! `END_STREAM` when only the server streams; with no message otherwise) and goes on with
//! [`FrameKind::Message`] frames each way; a `Message` with `END_STREAM` and no payload
//! half-closes its sender's side. A `Response` without `END_STREAM` carries the response
//! headers (metadata only); the `Response` with `END_STREAM` ends the call with its
//! status and trailing metadata (and, for a client-streaming call, the response message).
//! Each receiver grants each stream a window in frame bytes: a sender may send a
//! `Message` only while its window is positive, and each one takes its whole frame length
//! from it; the receiver adds back what its application consumed with `WindowUpdate`.
//! The client's receive window is the opening request's `credits`; the server's starts
//! at 0 and is granted by a `WindowUpdate` when the call starts running (a call waiting
//! for a concurrency permit buffers no messages). A half-close needs no window.

use super::error::FrameError;
use crate::metadata::MAX_METADATA_LEN;

/// Length of the fixed header in bytes.
pub const HEADER_LEN: usize = 40;
/// The magic bytes `R` `P` read as a little-endian u16.
pub const MAGIC: u16 = u16::from_le_bytes(*b"RP");
/// The protocol version this crate speaks.
pub const VERSION: u8 = 1;
/// The window of a response stream when the opening request's `credits` is 0, in frame
/// bytes.
pub const INITIAL_STREAM_WINDOW: u32 = 64 * 1024;
/// The largest window a stream may have: a `WindowUpdate` beyond it is a protocol
/// violation (HTTP/2's limit).
pub const MAX_STREAM_WINDOW: i64 = (1 << 31) - 1;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum FrameKind {
    /// A call: `method_id`, `timeout_us`, metadata and the request message.
    Request = 1,
    /// The answer to call `call_id`: `status`, metadata and the response message (or, when
    /// `status` is not OK, the UTF-8 error message as payload).
    Response = 2,
    /// The client gave up on call `call_id`; the server drops its handler.
    Cancel = 3,
    /// Liveness probe; answered by [`FrameKind::Pong`] with the same `call_id`.
    Ping = 4,
    /// Answer to a ping.
    Pong = 5,
    /// The sender is shutting down: no new calls on this connection.
    GoAway = 6,
    /// Transport flow control only (returns credits, acknowledges a rendezvous read).
    Credit = 7,
    /// One message of a stream (either direction); with `END_STREAM` and no payload, the
    /// sender's half-close.
    Message = 8,
    /// Adds `credits` bytes to the window of stream `call_id` (the receiver consumed them).
    WindowUpdate = 9,
}

impl FrameKind {
    fn from_u8(v: u8) -> Option<FrameKind> {
        Some(match v {
            1 => FrameKind::Request,
            2 => FrameKind::Response,
            3 => FrameKind::Cancel,
            4 => FrameKind::Ping,
            5 => FrameKind::Pong,
            6 => FrameKind::GoAway,
            7 => FrameKind::Credit,
            8 => FrameKind::Message,
            9 => FrameKind::WindowUpdate,
            _ => return None,
        })
    }
}

/// Where an encoded header holds its metadata length (u32, little-endian).
const META_LEN_AT: usize = 28;
/// Where an encoded header holds its payload length (u32, little-endian).
pub(crate) const PAYLOAD_LEN_AT: usize = 32;

/// Frame flags (a bit set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(pub u8);

impl Flags {
    /// Last frame of the call (always set on unary frames).
    pub const END_STREAM: Flags = Flags(1);
    /// The payload is a remote descriptor `{addr u64, len u64, rkey u32}` to be pulled with
    /// RDMA READ, not the message itself (RDMA rendezvous; never seen above the transport).
    pub const REMOTE_DESCRIPTOR: Flags = Flags(2);
    /// The receiving transport discarded this frame's body because it exceeded the
    /// configured maximum; only the header arrived. The runtime answers RESOURCE_EXHAUSTED.
    pub const DISCARDED: Flags = Flags(4);
    /// On a failed response: the server did not start this call (it was draining after a
    /// GOAWAY, or the connection's queue of waiting calls was full), so the client may
    /// send it again, on another connection, without running it twice.
    pub const REFUSED: Flags = Flags(8);
    const ALL: u8 = 15;

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the frame is.
    pub kind: FrameKind,
    /// Flag bits.
    pub flags: Flags,
    /// gRPC status code (responses; 0 elsewhere).
    pub status: u8,
    /// The call this frame belongs to.
    pub call_id: u64,
    /// Time the caller still allows, in microseconds; 0 = no deadline.
    pub timeout_us: u64,
    /// Method id (requests): FNV-1a of `/package.Service/Method`.
    pub method_id: u32,
    /// Length of the metadata block.
    pub meta_len: u32,
    /// Length of the payload.
    pub payload_len: u32,
    /// Stream flow control: the bytes a `WindowUpdate` grants, or the caller's receive
    /// window in a streaming call's opening request.
    pub credits: u32,
}

impl Header {
    /// A header of `kind` for `call_id` with every other field zero.
    pub fn new(kind: FrameKind, call_id: u64) -> Header {
        Header {
            kind,
            flags: Flags::default(),
            status: 0,
            call_id,
            timeout_us: 0,
            method_id: 0,
            meta_len: 0,
            payload_len: 0,
            credits: 0,
        }
    }

    /// Length of metadata plus payload.
    pub fn body_len(&self) -> usize {
        self.meta_len as usize + self.payload_len as usize
    }

    /// Length of the whole frame.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.body_len()
    }

    /// Writes the 40 header bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..2].copy_from_slice(&MAGIC.to_le_bytes());
        b[2] = VERSION;
        b[3] = self.kind as u8;
        b[4] = self.flags.0;
        b[5] = self.status;
        // b[6..8] reserved, zero
        b[8..16].copy_from_slice(&self.call_id.to_le_bytes());
        b[16..24].copy_from_slice(&self.timeout_us.to_le_bytes());
        b[24..28].copy_from_slice(&self.method_id.to_le_bytes());
        b[META_LEN_AT..META_LEN_AT + 4].copy_from_slice(&self.meta_len.to_le_bytes());
        b[PAYLOAD_LEN_AT..PAYLOAD_LEN_AT + 4].copy_from_slice(&self.payload_len.to_le_bytes());
        b[36..40].copy_from_slice(&self.credits.to_le_bytes());
        b
    }

    /// The metadata and payload lengths of the frame at the start of `buf`, whose
    /// header was decoded (checked) before: read without checking it again.
    pub(crate) fn lengths_of_checked(buf: &[u8]) -> Option<(usize, usize)> {
        let field = |at: usize| -> Option<usize> {
            let bytes: [u8; 4] = buf.get(at..at + 4)?.try_into().ok()?;
            Some(u32::from_le_bytes(bytes) as usize)
        };
        Some((field(META_LEN_AT)?, field(PAYLOAD_LEN_AT)?))
    }

    /// Decodes a header from the start of `buf`.
    ///
    /// # Returns
    /// `Ok(None)` when `buf` holds fewer than [`HEADER_LEN`] bytes (need more bytes is not
    /// an error).
    ///
    /// # Errors
    /// A [`FrameError`] for a wrong magic, version, kind, flags, a non-zero reserved field
    /// or a metadata block over [`MAX_METADATA_LEN`]. The payload length is not checked
    /// here: it is the transport's to compare with its configured maximum.
    pub fn decode(buf: &[u8]) -> Result<Option<Header>, FrameError> {
        let Some(b) = buf.get(..HEADER_LEN) else {
            return Ok(None);
        };
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let magic = u16::from_le_bytes([b[0], b[1]]);
        if magic != MAGIC {
            return Err(FrameError::BadMagic(magic));
        }
        if b[2] != VERSION {
            return Err(FrameError::UnsupportedVersion(b[2]));
        }
        let kind = FrameKind::from_u8(b[3]).ok_or(FrameError::UnknownKind(b[3]))?;
        if b[4] & !Flags::ALL != 0 {
            return Err(FrameError::UnknownFlags(b[4]));
        }
        if b[6] != 0 || b[7] != 0 {
            return Err(FrameError::ReservedNotZero);
        }
        let meta_len = u32_at(28);
        if meta_len as usize > MAX_METADATA_LEN {
            return Err(FrameError::MetadataTooLarge(meta_len as usize));
        }
        Ok(Some(Header {
            kind,
            flags: Flags(b[4]),
            status: b[5],
            call_id: u64_at(8),
            timeout_us: u64_at(16),
            method_id: u32_at(24),
            meta_len,
            payload_len: u32_at(32),
            credits: u32_at(36),
        }))
    }
}
