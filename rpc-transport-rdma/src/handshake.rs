//! The side-channel handshake: who speaks RDMA, with which limits, and the token that
//! binds the rdma_cm connection to this socket.
//!
//! A client that wants RDMA opens TCP to the server's port and sends HELLO with its
//! limits; the server answers OKAY with its own, the port of its rdma_cm listener on the
//! address the client reached and a random 16-byte token, or NONE with a reason (no
//! device, or a TCP-only server), after which the same socket carries the TCP transport.
//! After OKAY the client connects its queue pair through rdma_cm to that port, with the
//! token in the connect request's private data ([`cm_request`]); the server accepts the
//! request that carries its token and rejects any other ([`CM_REJECT`]). Once its queue
//! pair is in RTS the client sends READY; the server starts once it has both READY and
//! rdma_cm's `Established`. A plain TCP client sends rpc frames at once, which start with
//! `RP`: the server tells them apart by the first 8 bytes.
//!
//! ```text
//!  0       8         12    13    16         24          40        42    48          52          56             60          62      64
//!  +-------+---------+-----+-----+----------+-----------+---------+-----+-----------+-----------+--------------+-----------+-------+
//!  | magic | version |mode | pad | reserved | token (16)| cm_port | pad |recv_slots |slot_size  |rdv_budget_kib| max_loans | flags |
//!  +-------+---------+-----+-----+----------+-----------+---------+-----+-----------+-----------+--------------+-----------+-------+
//! ```
//! NONE carries `reason_len: u32` at offset 8 and the UTF-8 reason after the 64 bytes.
//! HELLO's token and port are zero.
//!
//! `rdv_budget_kib` and `max_loans` are what the sender of the block accepts to be lent
//! at once (bytes of rendezvous frames, in KiB, and descriptors) before it has sent their
//! read-done: the other side lends within them (and its own limits) and is closed if it
//! lends more. `flags` is zero. Version 5: a rendezvous frame may be pushed in pieces
//! (`protocol/message.rs`); version 4 connected queue pairs through rdma_cm (version 3
//! exchanged queue-pair endpoints here); versions do not mix.

use std::io::Read;

pub(crate) use rdmarpc_transport_tcp::rdma_hello::{read_refusal, refuse, BLOCK, HELLO, NONE};
/// Server accepts RDMA.
pub(crate) const OKAY: &[u8; 8] = b"RDMAOKAY";
/// Client's QP is ready.
pub(crate) const READY: &[u8; 8] = b"RDMAREDY";
/// Handshake version.
const VERSION: u32 = 5;

/// The random value that binds an rdma_cm connect request to its side channel.
pub(crate) type Token = [u8; 16];

/// The private data of a client's rdma_cm connect request: `RPCM`, the handshake version
/// (u32, little-endian) and the token.
pub(crate) const CM_REQUEST_LEN: usize = 24;
const CM_MAGIC: &[u8; 4] = b"RPCM";
/// The private data of a server's reject of a request with no valid token.
pub(crate) const CM_REJECT: &[u8; 4] = b"RPCX";

/// A connect request's private data for `token`.
pub(crate) fn cm_request(token: &Token) -> [u8; CM_REQUEST_LEN] {
    let mut b = [0u8; CM_REQUEST_LEN];
    b[..4].copy_from_slice(CM_MAGIC);
    b[4..8].copy_from_slice(&VERSION.to_le_bytes());
    b[8..].copy_from_slice(token);
    b
}

/// The token of a connect request's private data (which fabrics may pad), if it is one
/// of this version's.
pub(crate) fn token_of(data: &[u8]) -> Option<Token> {
    if data.len() < CM_REQUEST_LEN || &data[..4] != CM_MAGIC || data[4..8] != VERSION.to_le_bytes()
    {
        return None;
    }
    data[8..CM_REQUEST_LEN].try_into().ok()
}

/// A new token from the kernel's random source.
///
/// # Errors
/// When `/dev/urandom` cannot be read.
pub(crate) fn new_token() -> std::io::Result<Token> {
    let mut token = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut token)?;
    Ok(token)
}

/// What a client asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// RDMA or an error.
    Rdma = 1,
    /// RDMA if the server can, else TCP on the same socket.
    Auto = 2,
}

/// One side's offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Offer {
    pub(crate) mode: Mode,
    /// OKAY: the port of the server's rdma_cm listener (zero in HELLO).
    pub(crate) cm_port: u16,
    /// OKAY: what the client's connect request must carry (zero in HELLO).
    pub(crate) token: Token,
    pub(crate) recv_slots: u32,
    pub(crate) slot_size: u32,
    /// Bytes of rendezvous frames this side accepts to be lent at once.
    pub(crate) rdv_budget: usize,
    /// Rendezvous descriptors this side accepts to be lent at once.
    pub(crate) max_loans: u16,
}

/// What is wrong with a HELLO or OKAY block: the handshake fails with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadOffer {
    /// A handshake version this build does not speak.
    #[error("unsupported handshake version {0}")]
    Version(u32),
    /// A transport mode other than RDMA or auto.
    #[error("unknown mode {0}")]
    Mode(u8),
    /// A receive ring out of bounds.
    #[error("bad ring geometry {slots} x {slot_size}")]
    Ring {
        /// Receive slots.
        slots: u32,
        /// Bytes per slot.
        slot_size: u32,
    },
    /// Rendezvous limits out of bounds.
    #[error("bad rendezvous limits: {kib} KiB, {loans} loans")]
    Rendezvous {
        /// The lending budget, KiB.
        kib: u32,
        /// Loans at once.
        loans: u16,
    },
    /// Flag bits this version does not define.
    #[error("unknown handshake flags {0:#x}")]
    Flags(u16),
}

impl Offer {
    pub(crate) fn encode(&self, magic: &[u8; 8]) -> [u8; BLOCK] {
        let mut b = [0u8; BLOCK];
        b[0..8].copy_from_slice(magic);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12] = self.mode as u8;
        b[24..40].copy_from_slice(&self.token);
        b[40..42].copy_from_slice(&self.cm_port.to_le_bytes());
        b[48..52].copy_from_slice(&self.recv_slots.to_le_bytes());
        b[52..56].copy_from_slice(&self.slot_size.to_le_bytes());
        let kib = u32::try_from(self.rdv_budget / 1024).unwrap_or(u32::MAX);
        b[56..60].copy_from_slice(&kib.to_le_bytes());
        b[60..62].copy_from_slice(&self.max_loans.to_le_bytes());
        b
    }

    /// Decodes a HELLO or OKAY block (magic already checked by the caller).
    ///
    /// # Errors
    /// The bad field, as a [`BadOffer`].
    pub(crate) fn decode(b: &[u8; BLOCK]) -> Result<Offer, BadOffer> {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        if u32_at(8) != VERSION {
            return Err(BadOffer::Version(u32_at(8)));
        }
        let mode = match b[12] {
            1 => Mode::Rdma,
            2 => Mode::Auto,
            m => return Err(BadOffer::Mode(m)),
        };
        let (recv_slots, slot_size) = (u32_at(48), u32_at(52));
        if !(4..=4096).contains(&recv_slots)
            || !(crate::config::MIN_SLOT_SIZE..=1 << 20).contains(&slot_size)
        {
            return Err(BadOffer::Ring {
                slots: recv_slots,
                slot_size,
            });
        }
        let (rdv_budget_kib, max_loans) = (u32_at(56), u16::from_le_bytes([b[60], b[61]]));
        if rdv_budget_kib < 64 || max_loans == 0 {
            return Err(BadOffer::Rendezvous {
                kib: rdv_budget_kib,
                loans: max_loans,
            });
        }
        if b[62..64] != [0, 0] {
            return Err(BadOffer::Flags(u16::from_le_bytes([b[62], b[63]])));
        }
        Ok(Offer {
            mode,
            cm_port: u16::from_le_bytes([b[40], b[41]]),
            token: b[24..40].try_into().expect("16 bytes"),
            recv_slots,
            slot_size,
            rdv_budget: rdv_budget_kib as usize * 1024,
            max_loans,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offer_round_trip_and_checks() {
        let offer = Offer {
            mode: Mode::Auto,
            cm_port: 0x1234,
            token: [9; 16],
            recv_slots: 64,
            slot_size: 8192,
            rdv_budget: 16 << 20,
            max_loans: 128,
        };
        let b = offer.encode(HELLO);
        assert_eq!(&b[..8], HELLO);
        assert_eq!(Offer::decode(&b).unwrap(), offer);
        let mut bad = b;
        bad[48..52].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(
            Offer::decode(&bad),
            Err(BadOffer::Ring {
                slots: 1,
                slot_size: 8192
            })
        );
        // Version 3 (queue-pair endpoints in the block) is refused.
        let mut bad = b;
        bad[8] = 3;
        assert_eq!(Offer::decode(&bad), Err(BadOffer::Version(3)));
        let mut bad = b;
        bad[8] = 7;
        assert_eq!(Offer::decode(&bad), Err(BadOffer::Version(7)));
        // Version 1 (no rendezvous limits) is refused.
        let mut bad = b;
        bad[8] = 1;
        assert_eq!(Offer::decode(&bad), Err(BadOffer::Version(1)));
        for (at, value, kib, loans) in [(56, 63u32, 63, 128), (60, 0, 16 << 10, 0)] {
            let mut bad = b;
            bad[at..at + 4].copy_from_slice(&value.to_le_bytes());
            assert_eq!(
                Offer::decode(&bad),
                Err(BadOffer::Rendezvous { kib, loans }),
                "{at}"
            );
        }
        let mut bad = b;
        bad[63] = 1;
        assert_eq!(Offer::decode(&bad), Err(BadOffer::Flags(0x100)));
    }

    #[test]
    fn connect_request_data_carries_the_token_and_nothing_else_passes() {
        let token = *b"0123456789abcdef";
        let data = cm_request(&token);
        assert_eq!(token_of(&data), Some(token));
        // RoCE and InfiniBand pad private data to 56 bytes.
        let mut padded = data.to_vec();
        padded.resize(56, 0);
        assert_eq!(token_of(&padded), Some(token));
        assert_eq!(token_of(&data[..23]), None, "short");
        let mut other = data;
        other[0] = b'X';
        assert_eq!(token_of(&other), None, "magic");
        let mut other = data;
        other[4] = 3;
        assert_eq!(token_of(&other), None, "version");
        assert_eq!(token_of(CM_REJECT), None);
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_ne!(a, b, "tokens are random");
    }
}
