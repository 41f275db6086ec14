//! Entry points for the fuzz targets only (the `rpc-fuzz` crate in `fuzz/`): the
//! decoders of what an RDMA peer sends, which are private, behind wrappers that take a
//! byte slice and return plain public views. Hidden from the docs and not part of the
//! crate's API; nothing else may use them.

mod session;

pub use self::session::{rdma_session, steps as session_steps, STEPS_AT as SESSION_STEPS_AT};

use rdmarpc_core::wire::{FrameError, Header};

use crate::handshake::{Offer, BLOCK, HELLO, NONE, OKAY};
use crate::protocol::{Kind, Prefix, Rendezvous, PREFIX_LEN};

/// A received ring slot decoded the way the completion driver decodes it (`driver.rs`,
/// `received`), for the fuzz targets only.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ControlMessage {
    /// The prefix's flag bits (PING = 1, PONG = 2 on control messages).
    pub flags: u8,
    /// The prefix's token count.
    pub n_tokens: u16,
    /// The prefix's count of receive slots granted (0 = no news).
    pub granted: u32,
    /// The prefix's running count of re-posted receives (the peer's credits).
    pub reposted: u64,
    /// The body, by kind.
    pub body: ControlBody,
    /// The message encoded again with the transport's own encoders: equal to the input
    /// except for the reserved bytes, which the encoders write as zero.
    pub reencoded: Vec<u8>,
}

/// The body of a [`ControlMessage`], for the fuzz targets only.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ControlBody {
    /// A whole rpc frame, and its header as the driver decodes it before delivering it.
    Data {
        /// The frame bytes after the prefix.
        frame: Vec<u8>,
        /// `Header::decode` of those bytes.
        header: Result<Option<Header>, FrameError>,
    },
    /// A DATA message carrying several frames back to back (its token count, 2 or more,
    /// is the number of frames): the frames as the driver splits them, or why it refuses
    /// the message.
    Batch {
        /// Each frame's bytes, in order.
        frames: Result<Vec<Vec<u8>>, String>,
    },
    /// A rendezvous descriptor, and its embedded header as the driver decodes it.
    Rendezvous {
        /// Where the frame starts in the lent memory window.
        offset: u64,
        /// Length of the frame to read.
        len: u64,
        /// Remote key of the lent buffer.
        rkey: u32,
        /// Names the buffer in the read-done that releases it.
        token: u64,
        /// `Header::decode` of the embedded rpc header.
        header: Result<Option<Header>, FrameError>,
        /// The frame's first bytes, inline (the prefix's token count is their length).
        head: Vec<u8>,
    },
    /// Read-done tokens (the flags carry PING and PONG).
    Control {
        /// The tokens, in order.
        tokens: Vec<u64>,
    },
    /// A piece of a pushed frame.
    Piece {
        /// The pushed frame's token.
        token: u64,
        /// The piece's bytes.
        bytes: Vec<u8>,
    },
}

/// Decodes one received message (prefix, then the body by kind), for the fuzz targets only.
///
/// # Errors
/// The prefix decoder's description of a malformed message.
pub fn decode_control(data: &[u8]) -> Result<ControlMessage, String> {
    let prefix = Prefix::decode(data).map_err(|lie| lie.to_string())?;
    let body = &data[PREFIX_LEN..];
    let mut reencoded = vec![0u8; data.len()];
    prefix.encode(&mut reencoded);
    let decoded = match prefix.kind {
        Kind::Data if prefix.n_tokens >= 2 => {
            reencoded[PREFIX_LEN..].copy_from_slice(body);
            ControlBody::Batch {
                frames: crate::protocol::split_batch(body, prefix.n_tokens)
                    .map(|ranges| ranges.into_iter().map(|r| body[r].to_vec()).collect())
                    .map_err(|lie| lie.to_string()),
            }
        }
        Kind::Data => {
            reencoded[PREFIX_LEN..].copy_from_slice(body);
            ControlBody::Data {
                frame: body.to_vec(),
                header: Header::decode(body),
            }
        }
        Kind::Rendezvous => {
            let descriptor = Rendezvous::decode(body);
            descriptor.encode(&mut reencoded[PREFIX_LEN..]);
            ControlBody::Rendezvous {
                offset: descriptor.offset,
                len: descriptor.len,
                rkey: descriptor.rkey,
                token: descriptor.token,
                header: Header::decode(&descriptor.header),
                head: descriptor.head,
            }
        }
        Kind::Control => {
            let tokens: Vec<u64> = body
                .chunks_exact(8)
                .map(|t| u64::from_le_bytes(t.try_into().expect("8 bytes")))
                .collect();
            for (i, token) in tokens.iter().enumerate() {
                let at = PREFIX_LEN + 8 * i;
                reencoded[at..at + 8].copy_from_slice(&token.to_le_bytes());
            }
            ControlBody::Control { tokens }
        }
        Kind::Piece => {
            reencoded[PREFIX_LEN..].copy_from_slice(body);
            ControlBody::Piece {
                token: u64::from_le_bytes(body[..8].try_into().expect("8 bytes")),
                bytes: body[8..].to_vec(),
            }
        }
    };
    Ok(ControlMessage {
        flags: prefix.flags,
        n_tokens: prefix.n_tokens,
        granted: prefix.granted,
        reposted: prefix.reposted,
        body: decoded,
        reencoded,
    })
}

/// A handshake block decoded the way `setup/` decodes it, for the fuzz targets only.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Hello {
    /// A HELLO (client) or OKAY (server) block: the peer's offer.
    Offer {
        /// Whether the magic was OKAY (else HELLO).
        okay: bool,
        /// The requested mode (1 = RDMA, 2 = auto).
        mode: u8,
        /// OKAY: the server's rdma_cm port.
        cm_port: u16,
        /// OKAY: the token the client's rdma_cm connect request carries.
        token: [u8; 16],
        /// The peer's receive slots.
        recv_slots: u32,
        /// The peer's slot size.
        slot_size: u32,
        /// Bytes of rendezvous frames the peer accepts to be lent at once.
        rdv_budget: usize,
        /// Rendezvous descriptors the peer accepts to be lent at once.
        max_loans: u16,
        /// The offer encoded again with the same magic: equal to the input's first
        /// [`HELLO_LEN`] bytes except for the padding, which the encoder writes as zero.
        reencoded: [u8; BLOCK],
    },
    /// A NONE block: the server refuses RDMA; a reason of `reason_len` bytes follows.
    Refusal {
        /// The reason's declared length (the reader caps it).
        reason_len: u32,
    },
}

/// Length of a HELLO, OKAY or NONE block.
pub const HELLO_LEN: usize = BLOCK;

/// Decodes the first [`HELLO_LEN`] bytes of `data` as a peer's handshake block, for the
/// fuzz targets only: HELLO and OKAY go through the offer decoder, NONE is recognised.
///
/// # Errors
/// Too few bytes, an unknown magic, or the offer decoder's description of a bad field.
pub fn decode_hello(data: &[u8]) -> Result<Hello, String> {
    let block: &[u8; BLOCK] = data
        .get(..BLOCK)
        .ok_or_else(|| format!("{} bytes, a handshake block has {BLOCK}", data.len()))?
        .try_into()
        .expect("BLOCK bytes");
    let magic: &[u8; 8] = block[..8].try_into().expect("8 bytes");
    if magic == NONE {
        let reason_len = u32::from_le_bytes(block[8..12].try_into().expect("4 bytes"));
        return Ok(Hello::Refusal { reason_len });
    }
    if magic != HELLO && magic != OKAY {
        return Err("not a handshake block".into());
    }
    let offer = Offer::decode(block).map_err(|e| e.to_string())?;
    Ok(Hello::Offer {
        okay: magic == OKAY,
        mode: offer.mode as u8,
        cm_port: offer.cm_port,
        token: offer.token,
        recv_slots: offer.recv_slots,
        slot_size: offer.slot_size,
        rdv_budget: offer.rdv_budget,
        max_loans: offer.max_loans,
        reencoded: offer.encode(magic),
    })
}
