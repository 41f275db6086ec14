//! [`Lie`]: how an RDMA peer broke the transport's own protocol, with the facts. The
//! sans-IO protocol returns it; the connection closes with it
//! ([`Close::Violation`](crate::protocol::session::Close::Violation)).

use rdmarpc_core::wire::FrameError;

/// How the peer broke the protocol: the connection closes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Lie {
    /// A message shorter than its 16-byte prefix.
    #[error("message of {len} bytes is shorter than the prefix")]
    ShortMessage {
        /// Its length.
        len: usize,
    },
    /// A message of a kind this protocol does not have.
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    /// A message whose body does not have the length its kind and token count make.
    #[error("message of kind {kind} with a body of {body} bytes")]
    BodyLength {
        /// Its kind (1 DATA, 2 RENDEZVOUS, 3 CONTROL).
        kind: u8,
        /// Its body's length.
        body: usize,
    },
    /// A batch of more frames than a message may carry.
    #[error("a batch of {n} frames (at most {max})")]
    BatchTooLarge {
        /// The frames announced.
        n: u16,
        /// The most a batch may hold.
        max: u16,
    },
    /// A batch that holds fewer frames than it announces.
    #[error("a batch announces {n} frames and holds {held}")]
    BatchShort {
        /// The frames announced.
        n: u16,
        /// The frames there.
        held: u16,
    },
    /// A frame of a batch whose header does not decode.
    #[error("frame {i} of a batch: {error}")]
    BatchFrame {
        /// Its place in the batch.
        i: u16,
        /// Why its header does not decode.
        error: FrameError,
    },
    /// A frame of a batch longer than what is left of it.
    #[error("frame {i} of a batch claims {claims} bytes, {left} are left")]
    BatchOverrun {
        /// Its place in the batch.
        i: u16,
        /// The length its header claims.
        claims: usize,
        /// The bytes left in the message.
        left: usize,
    },
    /// Bytes after a batch's last frame.
    #[error("{extra} bytes after the {n} frames of a batch")]
    BatchTrailing {
        /// The frames of the batch.
        n: u16,
        /// The bytes after them.
        extra: usize,
    },
    /// An acknowledgement of more messages than were sent.
    #[error("peer acknowledges {reposted} messages of {sent} sent")]
    OverAcknowledged {
        /// What the peer acknowledges.
        reposted: u64,
        /// What was sent.
        sent: u64,
    },
    /// More receive slots granted than a grant may carry.
    #[error("the peer claims {granted} receive slots")]
    OverGranted {
        /// The slots granted.
        granted: u32,
    },
    /// A frame header that does not decode.
    #[error("malformed frame: {0}")]
    Malformed(FrameError),
    /// A rendezvous descriptor with no frame header.
    #[error("rendezvous descriptor without a frame header")]
    DescriptorWithoutHeader,
    /// A rendezvous descriptor whose length is not its frame's.
    #[error("rendezvous descriptor of {len} bytes for a frame of {frame}")]
    DescriptorLength {
        /// The bytes it describes.
        len: usize,
        /// The length of its frame.
        frame: usize,
    },
    /// A rendezvous descriptor whose offset plus length wraps.
    #[error("rendezvous descriptor wraps")]
    DescriptorWraps,
    /// A rendezvous descriptor whose inline head is not its frame's start, or that lends
    /// nothing beside it.
    #[error(
        "rendezvous descriptor whose inline head is not the frame's start, or that lends nothing"
    )]
    DescriptorHead,
    /// A loan beyond the limits this side announced.
    #[error(
        "the peer lent more than agreed: a frame of {len} bytes beside {loans} frames of \
         {bytes} bytes not yet acknowledged (limit {limit_loans} frames, {limit_bytes} bytes)"
    )]
    OverLent {
        /// The frame lent.
        len: usize,
        /// Loans outstanding.
        loans: usize,
        /// Their bytes.
        bytes: usize,
        /// The loans agreed.
        limit_loans: usize,
        /// The bytes agreed.
        limit_bytes: usize,
    },
    /// More frames held back behind one being read than the peer's slots and loans allow.
    #[error("more than {max} frames wait behind one being read")]
    TooManyWaiting {
        /// The bound.
        max: usize,
    },
    /// A read-done for a token not lent.
    #[error("read-done for token {token}, which is not lent")]
    UnknownToken {
        /// The token.
        token: u64,
    },
    /// A piece for a token no pushed frame of the peer's has, or more bytes than its
    /// descriptor announced.
    #[error("a piece of {len} bytes for token {token}, which has {left} bytes left to push")]
    PieceOverrun {
        /// The token.
        token: u64,
        /// The piece's bytes.
        len: usize,
        /// Bytes the frame still had to come (0: no such frame).
        left: usize,
    },
    /// A pushed descriptor reusing the token of a frame still being pushed.
    #[error("a pushed frame's token {token} is already being pushed")]
    TokenInUse {
        /// The token.
        token: u64,
    },
    /// More messages behind an unfinished pushed frame than an honest pusher sends.
    #[error("more than {max} messages behind a pushed frame whose pieces are still coming")]
    TooManyBehindPush {
        /// The bound.
        max: usize,
    },
    /// A pushed frame's pieces stopped coming.
    #[error("a pushed frame was not whole within the loan timeout ({timeout:?})")]
    PushStalled {
        /// The loan timeout.
        timeout: std::time::Duration,
    },
    /// Bytes on the side channel, where the peer may only close.
    #[error("unexpected bytes on the side channel")]
    SideChannelBytes,
}
