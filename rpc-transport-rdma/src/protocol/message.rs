//! The slot layout: a 16-byte prefix, then a kind-specific body.
//!
//! ```text
//!  0     1      2          4          8                      16
//!  +-----+------+----------+----------+----------------------+------------------------
//!  |kind |flags | n_tokens | granted  | reposted (u64 LE)    | body
//!  +-----+------+----------+----------+----------------------+------------------------
//!  DATA:        body = one whole rpc frame (header, metadata, payload); with n >= 2
//!               (`n_tokens`), n whole frames back to back (a batch, see `split_batch`)
//!  RENDEZVOUS:  body = offset u64 | len u64 | rkey u32 | pad u32 | token u64 | rpc header (40)
//!               | head (`n_tokens` bytes): the frame is `head` followed by the `len` lent
//!               bytes (a frame whose large field is lent from where it lies, its first
//!               bytes inline); `n_tokens` = 0: the frame is the `len` lent bytes
//!               flag PUSHED: nothing is lent (offset and rkey are 0): the `len` bytes
//!               follow in PIECE messages (a sender that could not pin a buffer)
//!  CONTROL:     body = n_tokens x u64 tokens of finished READs (read-done);
//!               flags: PING / PONG
//!  PIECE:       body = token u64 | bytes: the next bytes of the pushed frame `token`
//!               names (at least one; pieces of one frame go in order)
//! ```
//! `reposted` is the sender's running count of the receiver's messages whose slots it has
//! re-posted: the receiver's credits (see [`Credits`](super::Credits)). `granted` (u32 LE)
//! is how many receive slots the sender has posted for the receiver in all (its ring grows
//! with use; 0 = no news). Flag WANT: the sender ran out of credit (asks for more slots).

use rdmarpc_core::wire::HEADER_LEN;

use super::lie::Lie;

/// Bytes of the prefix.
pub(crate) const PREFIX_LEN: usize = 16;
/// Bytes of a rendezvous body.
pub(crate) const RENDEZVOUS_LEN: usize = 32 + HEADER_LEN;

/// Bytes of a piece's token, before its bytes.
pub(crate) const PIECE_TOKEN_LEN: usize = 8;

/// Frames one DATA message carries at most.
pub(crate) const MAX_BATCH: u16 = 64;

/// What a slot carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A whole frame.
    Data = 1,
    /// A descriptor of a frame to pull with RDMA READ.
    Rendezvous = 2,
    /// Credits, read-done tokens, pings.
    Control = 3,
    /// The next bytes of a pushed rendezvous frame.
    Piece = 4,
}

/// The decoded prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Prefix {
    pub(crate) kind: Kind,
    pub(crate) flags: u8,
    pub(crate) n_tokens: u16,
    pub(crate) granted: u32,
    pub(crate) reposted: u64,
}

impl Prefix {
    /// Control flag: the sender asks for a PONG.
    pub(crate) const PING: u8 = 1;
    /// Control flag: the answer to a PING.
    pub(crate) const PONG: u8 = 2;
    /// Any message: the sender ran out of credit and asks for more receive slots.
    pub(crate) const WANT: u8 = 4;
    /// Rendezvous: the frame is pushed in PIECE messages, not lent.
    pub(crate) const PUSHED: u8 = 8;

    pub(crate) fn encode(&self, out: &mut [u8]) {
        out[0] = self.kind as u8;
        out[1] = self.flags;
        out[2..4].copy_from_slice(&self.n_tokens.to_le_bytes());
        out[4..8].copy_from_slice(&self.granted.to_le_bytes());
        out[8..16].copy_from_slice(&self.reposted.to_le_bytes());
    }

    /// Decodes the prefix of a received slot.
    ///
    /// # Errors
    /// A description of what is wrong (the connection then fails: the peer is broken).
    pub(crate) fn decode(slot: &[u8]) -> Result<Prefix, Lie> {
        if slot.len() < PREFIX_LEN {
            return Err(Lie::ShortMessage { len: slot.len() });
        }
        let kind = match slot[0] {
            1 => Kind::Data,
            2 => Kind::Rendezvous,
            3 => Kind::Control,
            4 => Kind::Piece,
            k => return Err(Lie::UnknownKind(k)),
        };
        let prefix = Prefix {
            kind,
            flags: slot[1],
            n_tokens: u16::from_le_bytes([slot[2], slot[3]]),
            granted: u32::from_le_bytes(slot[4..8].try_into().expect("4 bytes")),
            reposted: u64::from_le_bytes(slot[8..16].try_into().expect("8 bytes")),
        };
        let body = slot.len() - PREFIX_LEN;
        let ok = match kind {
            Kind::Data => true,
            Kind::Rendezvous => body == RENDEZVOUS_LEN + prefix.n_tokens as usize,
            Kind::Control => body == 8 * prefix.n_tokens as usize,
            Kind::Piece => body > PIECE_TOKEN_LEN,
        };
        if !ok {
            return Err(Lie::BodyLength {
                kind: kind as u8,
                body,
            });
        }
        Ok(prefix)
    }
}

/// The frames of a DATA message body that carries `n` of them back to back (`n` >= 2:
/// a sender coalesced frames that waited while its earlier sends were in flight), as
/// ranges of `body`, in order.
///
/// # Errors
/// A description of the lie (the connection then fails): a count over [`MAX_BATCH`], a
/// frame header that does not decode, a frame that overruns the body, fewer frames than
/// announced, or bytes after the last one.
pub(crate) fn split_batch(body: &[u8], n: u16) -> Result<Vec<std::ops::Range<usize>>, Lie> {
    if n > MAX_BATCH {
        return Err(Lie::BatchTooLarge { n, max: MAX_BATCH });
    }
    let mut frames = Vec::with_capacity(usize::from(n));
    let mut at = 0usize;
    for i in 0..n {
        let header = match rdmarpc_core::wire::Header::decode(&body[at..]) {
            Ok(Some(header)) => header,
            Ok(None) => return Err(Lie::BatchShort { n, held: i }),
            Err(error) => return Err(Lie::BatchFrame { i, error }),
        };
        let end = at
            .checked_add(header.frame_len())
            .filter(|&end| end <= body.len())
            .ok_or(Lie::BatchOverrun {
                i,
                claims: header.frame_len(),
                left: body.len() - at,
            })?;
        frames.push(at..end);
        at = end;
    }
    if at != body.len() {
        return Err(Lie::BatchTrailing {
            n,
            extra: body.len() - at,
        });
    }
    Ok(frames)
}

/// A rendezvous descriptor: where the frame is and how to name it when done.
///
/// `rkey` is a memory window bound for this transfer only, on the sender's queue pair,
/// and invalidated once the read-done arrives; `offset` is where the frame starts in that
/// window (the lender's regions are addressed from 0: no heap address crosses the wire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rendezvous {
    pub(crate) offset: u64,
    /// Bytes lent (the frame's length less `head`).
    pub(crate) len: u64,
    pub(crate) rkey: u32,
    /// Names the lent buffer in the read-done that releases it.
    pub(crate) token: u64,
    /// The frame's rpc header, so the receiver can refuse an oversized frame unread.
    pub(crate) header: [u8; HEADER_LEN],
    /// The frame's first bytes, carried inline (empty: the whole frame is lent).
    pub(crate) head: Vec<u8>,
}

impl Rendezvous {
    pub(crate) fn encode(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.offset.to_le_bytes());
        out[8..16].copy_from_slice(&self.len.to_le_bytes());
        out[16..20].copy_from_slice(&self.rkey.to_le_bytes());
        out[20..24].fill(0);
        out[24..32].copy_from_slice(&self.token.to_le_bytes());
        out[32..32 + HEADER_LEN].copy_from_slice(&self.header);
        out[RENDEZVOUS_LEN..RENDEZVOUS_LEN + self.head.len()].copy_from_slice(&self.head);
    }

    /// Decodes a body of [`RENDEZVOUS_LEN`] bytes and the inline head after them (the
    /// prefix checked the length).
    pub(crate) fn decode(body: &[u8]) -> Rendezvous {
        let u64_at = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().expect("8 bytes"));
        Rendezvous {
            offset: u64_at(0),
            len: u64_at(8),
            rkey: u32::from_le_bytes(body[16..20].try_into().expect("4 bytes")),
            token: u64_at(24),
            header: body[32..32 + HEADER_LEN].try_into().expect("header"),
            head: body[RENDEZVOUS_LEN..].to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_exact_bytes_and_round_trip() {
        let p = Prefix {
            kind: Kind::Control,
            flags: Prefix::PING,
            n_tokens: 2,
            granted: 0x40,
            reposted: 0x0102,
        };
        let mut b = [0xffu8; PREFIX_LEN + 16];
        p.encode(&mut b);
        assert_eq!(
            &b[..PREFIX_LEN],
            &[3, 1, 2, 0, 0x40, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(Prefix::decode(&b).unwrap(), p);
    }

    #[test]
    fn malformed_prefixes_are_refused() {
        assert!(Prefix::decode(&[1; 3]).is_err());
        let mut b = [0u8; PREFIX_LEN];
        b[0] = 9;
        assert!(Prefix::decode(&b).is_err());
        b[0] = 2; // rendezvous without its body
        assert!(Prefix::decode(&b).is_err());
        b[0] = 3;
        b[2] = 1; // one token announced, none present
        assert!(Prefix::decode(&b).is_err());
    }

    fn frame(call_id: u64, payload: usize) -> Vec<u8> {
        let mut header =
            rdmarpc_core::wire::Header::new(rdmarpc_core::wire::FrameKind::Request, call_id);
        header.payload_len = payload as u32;
        let mut f = header.encode().to_vec();
        f.resize(HEADER_LEN + payload, call_id as u8);
        f
    }

    #[test]
    fn a_batch_splits_into_its_frames_and_lies_are_refused() {
        let (a, b, c) = (frame(1, 0), frame(2, 100), frame(3, 7));
        let body = [a.clone(), b.clone(), c.clone()].concat();
        let ranges = split_batch(&body, 3).unwrap();
        assert_eq!(ranges, vec![0..40, 40..180, 180..227]);
        assert_eq!(&body[ranges[1].clone()], &b[..]);
        // Fewer frames than announced, more, bytes left over, a frame overrunning the
        // body, a broken header, too many frames.
        assert_eq!(
            split_batch(&body, 4),
            Err(Lie::BatchShort { n: 4, held: 3 })
        );
        assert_eq!(
            split_batch(&body, 2),
            Err(Lie::BatchTrailing { n: 2, extra: 47 })
        );
        assert_eq!(
            split_batch(&body[..220], 3),
            Err(Lie::BatchOverrun {
                i: 2,
                claims: 47,
                left: 40
            })
        );
        assert_eq!(
            split_batch(&body[..200], 3),
            Err(Lie::BatchShort { n: 3, held: 2 })
        );
        let mut broken = body.clone();
        broken[40] = 0;
        assert!(matches!(
            split_batch(&broken, 3),
            Err(Lie::BatchFrame { i: 1, .. })
        ));
        assert_eq!(
            split_batch(&body, MAX_BATCH + 1),
            Err(Lie::BatchTooLarge {
                n: MAX_BATCH + 1,
                max: MAX_BATCH
            })
        );
        // A length near u32::MAX does not wrap.
        let mut huge = a.clone();
        huge[32..36].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(split_batch(&[a, huge].concat(), 2).is_err());
    }

    #[test]
    fn rendezvous_round_trip() {
        let r = Rendezvous {
            offset: 0xdead_beef_0000,
            len: 16 << 20,
            rkey: 0x1234,
            token: 77,
            header: [7; HEADER_LEN],
            head: Vec::new(),
        };
        let mut b = [0u8; RENDEZVOUS_LEN];
        r.encode(&mut b);
        assert_eq!(Rendezvous::decode(&b), r);
        let with_head = Rendezvous {
            head: vec![1, 2, 3],
            ..r
        };
        let mut b = [0u8; RENDEZVOUS_LEN + 3];
        with_head.encode(&mut b);
        assert_eq!(&b[RENDEZVOUS_LEN..], &[1, 2, 3]);
        assert_eq!(Rendezvous::decode(&b), with_head);
    }
}

#[cfg(test)]
mod fuzz {
    use super::*;

    #[test]
    fn slot_decoders_never_panic_on_random_input() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        for _ in 0..100_000 {
            let len = (next() % 200) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if let Some(b) = bytes.first_mut() {
                *b = (*b % 4) + 1; // mostly valid kinds
            }
            if let Ok(p) = Prefix::decode(&bytes) {
                if p.kind == Kind::Rendezvous {
                    let _ = Rendezvous::decode(&bytes[PREFIX_LEN..]);
                }
                if p.kind == Kind::Data && p.n_tokens >= 2 {
                    let _ = split_batch(&bytes[PREFIX_LEN..], p.n_tokens % (MAX_BATCH + 2));
                }
            }
        }
    }
}
