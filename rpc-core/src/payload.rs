//! [`Payload`]: a received message's encoded bytes, on their way to decoding.
//!
//! A large received frame is *kept*: the transport lets go of it as a [`Bytes`] whose
//! owner is the frame's own memory (the TCP frame buffer, the RDMA READ target), and
//! `bytes` fields generated as `bytes::Bytes` decode as slices of it, without a copy. A
//! small frame is only borrowed for the decode and its fields are copied out, so that an
//! application keeping a message never pins a receive slot. Which frames are kept is the
//! transport's choice ([`Connection::keep`](crate::Connection::keep)); the rule of each
//! transport is in `docs/limits.md`.

use bytes::Bytes;

/// A received message's encoded bytes.
#[derive(Debug, Clone)]
pub enum Payload<'a> {
    /// Borrowed from the transport for the decode only: fields are copied out.
    Borrowed(&'a [u8]),
    /// Owned by the received frame: `bytes::Bytes` fields decoded from it are slices of
    /// the frame's memory, which stays valid (and out of the transport's reuse) until
    /// the last of them is dropped.
    Shared(Bytes),
}

impl Payload<'_> {
    /// Decodes the payload as `M`.
    ///
    /// # Errors
    /// The bytes are not a valid `M`.
    pub fn decode<M: prost::Message + Default>(self) -> Result<M, prost::DecodeError> {
        match self {
            Payload::Borrowed(slice) => M::decode(slice),
            Payload::Shared(bytes) => M::decode(bytes),
        }
    }

    /// The encoded bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Payload::Borrowed(slice) => slice,
            Payload::Shared(bytes) => bytes,
        }
    }
}

/// A received frame as the runtime holds it: still the transport's, or kept.
pub(crate) enum Inbound<B> {
    /// The transport's buffer (a receive slot, a small frame).
    Held(B),
    /// Let go by the transport: the frame's memory, owned by `Bytes`.
    Kept(Bytes),
}

impl<B: std::ops::Deref<Target = [u8]>> Inbound<B> {
    /// The whole frame.
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Inbound::Held(buf) => buf,
            Inbound::Kept(bytes) => bytes,
        }
    }

    /// `part` (a slice of [`Inbound::bytes`]) as a payload: shared when the frame is kept.
    pub(crate) fn payload<'a>(&'a self, part: &'a [u8]) -> Payload<'a> {
        match self {
            Inbound::Held(_) => Payload::Borrowed(part),
            Inbound::Kept(bytes) => Payload::Shared(bytes.slice_ref(part)),
        }
    }
}

/// Takes `frame` from the transport as kept memory if the transport lets it go.
pub(crate) fn keep<C: crate::Connection>(conn: &C, frame: C::RecvBuf) -> Inbound<C::RecvBuf> {
    match conn.keep(frame) {
        Ok(bytes) => Inbound::Kept(bytes),
        Err(frame) => Inbound::Held(frame),
    }
}
