//! [`Session`]: the protocol state of one RDMA connection, sans-IO (in the manner of
//! quinn-proto). It owns credits, lent and borrowed rendezvous buffers, the READs to
//! post and in flight, read-done tokens, the order in which received frames go up,
//! pings, liveness and the loan timeout. It posts nothing and reads no clock: the
//! connection's driver feeds it what happened (messages received, READs completed,
//! frames consumed, the time) and carries out what it asks for (control messages, READs,
//! frames to hand up), all under the connection's one lock.
//!
//! ```text
//!   inputs                                   outputs
//!   handle_message(prefix)                   poll_read()      -> READ to post
//!   classify_eager(frame) / deliver(frame)   poll_control()   -> control message to send
//!   handle_descriptor(rendezvous)            poll_deliver()   -> frame to hand up, in order
//!   handle_read_complete(tag, ..)            poll_timeout()   -> when handle_timeout is due
//!   handle_read_dones(tokens)                closed()         -> why the session ended
//!   frame_consumed(token, len)
//!   handle_reposted() / handle_timeout(now)
//!   send side: try_take_data, try_reserve_lending, lend, advertise
//! ```
//!
//! `tests` drives two sessions against each other over a simulated wire and NIC with
//! seeded random schedules and checks the invariants the transport relies on.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use rpc_core::wire::Header;

use super::{Borrower, Credits, Lender, LoanLimit, Prefix, Rendezvous};

/// Limits and timers of one session, from the configuration and the handshake.
#[derive(Debug, Clone)]
pub(crate) struct SessionConfig {
    /// Receive slots the peer posted (our credits).
    pub(crate) peer_slots: u32,
    /// Receive slots we post at first (the peer's credits); the ring grows when the
    /// peer runs out of credit (it says so: `Prefix::WANT`), doubling up to `max_slots`.
    pub(crate) own_slots: u32,
    pub(crate) max_slots: u32,
    /// Unadvertised re-posts that make an explicit credit message due.
    pub(crate) credit_threshold: u32,
    /// What we may lend the peer at once (the smaller of both sides' figures).
    pub(crate) lend: LoanLimit,
    /// What we accept to borrow at once (what we announced).
    pub(crate) borrow: LoanLimit,
    /// Largest frame accepted.
    pub(crate) max_frame: usize,
    /// Largest payload accepted; larger frames are refused (their header goes up).
    pub(crate) max_message_size: usize,
    /// READ chunk size (a frame is split into at most `MAX_CHUNKS` chunks).
    pub(crate) read_chunk: usize,
    /// READ work requests in flight at most.
    pub(crate) read_wr_budget: usize,
    /// Read-done tokens that fit one control message.
    pub(crate) max_tokens: usize,
    pub(crate) ping_interval: Duration,
    pub(crate) ping_timeout: Duration,
    pub(crate) loan_timeout: Duration,
}

/// Chunks one rendezvous frame is split into at most.
pub(crate) const MAX_CHUNKS: usize = 8;

/// Why a session (and its connection) ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Close {
    /// Closed by this side.
    Local,
    /// The peer closed its side channel: a clean close.
    PeerClosed,
    /// Nothing received from the peer for `silence` (ping timeout `timeout`).
    PeerSilent {
        silence: Duration,
        timeout: Duration,
    },
    /// The peer held a lent buffer unread for longer than the loan timeout.
    LoanTimeout(Duration),
    /// The peer broke the protocol (a lie about lengths, credits or tokens).
    Violation(String),
    /// A local operation failed (posting, polling, a completion with an error).
    Failed(String),
}

impl Close {
    /// Whether this is an orderly end rather than a failure.
    pub(crate) fn is_clean(&self) -> bool {
        matches!(self, Close::Local | Close::PeerClosed)
    }
}

impl From<&Close> for rpc_core::TransportError {
    fn from(why: &Close) -> Self {
        use rpc_core::TransportError as E;
        match why {
            Close::Local | Close::PeerClosed => E::Closed,
            Close::PeerSilent { silence, .. } => E::PeerSilent(*silence),
            Close::LoanTimeout(_) => E::Protocol(why.to_string()),
            Close::Violation(what) => E::Protocol(what.clone()),
            Close::Failed(what) => E::Other(what.clone()),
        }
    }
}

impl fmt::Display for Close {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Close::Local => f.write_str("closed"),
            Close::PeerClosed => f.write_str("peer closed the connection"),
            Close::PeerSilent { silence, timeout } => {
                write!(f, "peer silent for {silence:?} (ping timeout {timeout:?})")
            }
            Close::LoanTimeout(t) => write!(
                f,
                "the peer held a rendezvous buffer for more than {t:?} without reading it (loan timeout)"
            ),
            Close::Violation(why) => write!(f, "protocol violation by the peer: {why}"),
            Close::Failed(why) => f.write_str(why),
        }
    }
}

/// A READ the driver is to post: write `head` at the start of a buffer, then pull `len`
/// bytes at `offset` under `rkey` after it, in chunks of `chunk`, tagged `tag` (given
/// back to [`Session::handle_read_complete`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Read {
    pub(crate) tag: u64,
    pub(crate) offset: u64,
    pub(crate) rkey: u32,
    pub(crate) len: usize,
    pub(crate) chunk: usize,
    /// The frame's first bytes, carried inline by the descriptor (often empty).
    pub(crate) head: Vec<u8>,
}

/// A control message the driver is to send (a send slot and a credit are taken).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Control {
    pub(crate) tokens: Vec<u64>,
    pub(crate) advert: Advert,
}

/// What every outgoing message's prefix carries besides its kind and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Advert {
    pub(crate) flags: u8,
    pub(crate) granted: u32,
    pub(crate) reposted: u64,
}

impl Advert {
    /// The prefix of a message of `kind` carrying this advert.
    pub(crate) fn prefix(self, kind: super::Kind, n_tokens: u16) -> Prefix {
        Prefix {
            kind,
            flags: self.flags,
            n_tokens,
            granted: self.granted,
            reposted: self.reposted,
        }
    }
}

/// Receive slots a peer may claim to have posted at most.
const MAX_GRANT: u32 = 1 << 16;

/// A place in the arrival order of received frames.
#[derive(Debug)]
enum InOrder<F> {
    /// Received, waiting for an earlier frame's READ.
    Ready(F),
    /// A frame being READ under this tag.
    Reading(u64),
}

#[derive(Debug)]
struct Loan {
    /// The loan's key in the verbs layer (which owns the buffer).
    key: u32,
    at: Instant,
}

#[derive(Debug)]
struct Reading {
    token: u64,
    /// The frame's length (inline head and lent bytes).
    frame_len: usize,
    /// Bytes lent (what the borrower counts for the loan).
    lent: usize,
    chunks: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Open,
    /// A graceful close started: no new frames, what is under way finishes.
    Closing,
    Closed(Close),
}

/// The protocol state of one connection. `F` is a received frame as the driver hands it
/// up (the transport's `RecvBuf`; tests use plain values).
#[derive(Debug)]
pub(crate) struct Session<F> {
    cfg: SessionConfig,
    credits: Credits,
    lender: Lender,
    borrower: Borrower,
    next_token: u64,
    lent: HashMap<u64, Loan>,
    /// Loans finished here (read and consumed, or refused unread), to acknowledge, with
    /// the bytes the borrower counted for each.
    done: Vec<(u64, usize)>,
    /// Descriptors waiting for READ budget, with their tags.
    pending_reads: VecDeque<(u64, Rendezvous)>,
    reading: HashMap<u64, Reading>,
    next_tag: u64,
    read_wrs: usize,
    /// Frames held back behind a frame still being READ.
    in_order: VecDeque<InOrder<F>>,
    /// Frames to hand up, in order.
    ready: VecDeque<F>,
    /// Frames that will not go up (they arrived after the close, or broke a bound), for
    /// the driver to drop outside its lock (dropping a frame re-enters the connection).
    discarded: Vec<F>,
    ping_due: bool,
    /// We ran out of data credit: the next message asks for more slots.
    want: bool,
    /// The peer asked for more slots and the ring may still grow.
    grow_due: bool,
    /// Own receive slots the peer was last told of.
    granted_advertised: u32,
    /// When a ping was last asked for: at most one per ping interval.
    pinged: Option<Instant>,
    pong_due: bool,
    /// When a message was last seen to have arrived, as of the last `handle_timeout`.
    last_heard: Instant,
    /// Messages received in all, and as of the last `handle_timeout`: the receive path
    /// only counts (no clock read per message; liveness is judged at timer resolution,
    /// which only ever makes the measured silence shorter than the real one).
    heard: u64,
    heard_seen: u64,
    phase: Phase,
}

impl<F> Session<F> {
    pub(crate) fn new(cfg: SessionConfig, now: Instant) -> Session<F> {
        Session {
            credits: Credits::new(cfg.peer_slots, cfg.own_slots, cfg.credit_threshold),
            lender: Lender::new(cfg.lend),
            borrower: Borrower::new(cfg.borrow),
            cfg,
            next_token: 1,
            lent: HashMap::new(),
            done: Vec::new(),
            pending_reads: VecDeque::new(),
            reading: HashMap::new(),
            next_tag: 1,
            read_wrs: 0,
            in_order: VecDeque::new(),
            ready: VecDeque::new(),
            discarded: Vec::new(),
            ping_due: false,
            want: false,
            grow_due: false,
            granted_advertised: 0,
            pinged: None,
            pong_due: false,
            last_heard: now,
            heard: 0,
            heard_seen: 0,
            phase: Phase::Open,
        }
    }

    // ---- state -------------------------------------------------------------------

    /// Why the session ended, once it has.
    #[cfg(test)]
    pub(crate) fn closed(&self) -> Option<&Close> {
        match &self.phase {
            Phase::Closed(why) => Some(why),
            _ => None,
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed(_))
    }

    /// Open for new frames: neither closing nor closed.
    pub(crate) fn is_open(&self) -> bool {
        self.phase == Phase::Open
    }

    /// Starts a graceful close; false if one already started or the session ended.
    pub(crate) fn start_closing(&mut self) -> bool {
        let open = self.is_open();
        if open {
            self.phase = Phase::Closing;
        }
        open
    }

    /// Ends the session. Returns the frames it held (to drop outside the lock, since
    /// dropping a frame re-enters the connection), or `None` if it had already ended.
    /// After a clean close, frames already in order stay for [`Session::poll_deliver`]
    /// (what the peer sent before it closed is still received); after a failure they go.
    pub(crate) fn close(&mut self, why: Close) -> Option<Vec<F>> {
        if self.is_closed() {
            return None;
        }
        let clean = why.is_clean();
        self.phase = Phase::Closed(why);
        let mut held = std::mem::take(&mut self.discarded);
        if !clean {
            held.extend(self.ready.drain(..));
        }
        held.extend(self.in_order.drain(..).filter_map(|place| match place {
            InOrder::Ready(frame) => Some(frame),
            InOrder::Reading(_) => None,
        }));
        self.pending_reads.clear();
        self.done.clear();
        Some(held)
    }

    /// Loans this side has outstanding (lent, or reserved for frames being built).
    pub(crate) fn loans(&self) -> usize {
        self.lender.loans()
    }

    // ---- sending -----------------------------------------------------------------

    /// Takes a credit for a data message (keeping the reserve for control).
    #[must_use]
    pub(crate) fn try_take_data(&mut self) -> bool {
        let taken = self.credits.try_take_data();
        self.want |= !taken;
        taken
    }

    /// Gives back a credit taken for a message that was never posted.
    pub(crate) fn untake(&mut self) {
        self.credits.untake();
    }

    /// Reserves room in the lending limit for a frame of `len` bytes.
    #[must_use]
    pub(crate) fn try_reserve_lending(&mut self, len: usize) -> bool {
        self.lender.try_reserve(len)
    }

    /// Gives back a reservation (a frame never sent, or a loan that ended).
    pub(crate) fn release_lending(&mut self, len: usize) {
        self.lender.release(len);
    }

    /// Records a buffer lent under verbs key `key`; returns the token for its descriptor.
    pub(crate) fn lend(&mut self, key: u32, now: Instant) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        self.lent.insert(token, Loan { key, at: now });
        token
    }

    /// What to put on an outgoing message: re-posts, slots granted, whether we want
    /// more (marks them advertised).
    pub(crate) fn advertise(&mut self) -> Advert {
        self.granted_advertised = self.cfg.own_slots;
        Advert {
            flags: if std::mem::take(&mut self.want) {
                Prefix::WANT
            } else {
                0
            },
            granted: self.cfg.own_slots,
            reposted: self.credits.advertise(),
        }
    }

    /// Receive slots the peer has posted for us, as far as we know.
    pub(crate) fn peer_slots(&self) -> u64 {
        self.credits.peer_slots()
    }

    /// Whether either ring is to grow: the peer asked for slots, or granted more than
    /// `send_slots` while the send ring may still grow (both rings grow to `max_slots`;
    /// the driver then runs its growth, which takes the flags).
    pub(crate) fn growth_due(&self, send_slots: u32) -> bool {
        let send_short =
            self.peer_slots() > u64::from(send_slots) && send_slots < self.cfg.max_slots;
        (self.grow_due || send_short) && !self.is_closed()
    }

    /// Whether the receive ring is to grow now (the peer asked); clears it.
    pub(crate) fn take_grow(&mut self) -> bool {
        std::mem::take(&mut self.grow_due) && !self.is_closed()
    }

    /// The receive ring grew by `n` posted slots: the peer is told on the next message.
    pub(crate) fn grown(&mut self, n: u32) {
        self.cfg.own_slots += n;
        self.credits.grow_own(u64::from(self.cfg.own_slots));
    }

    // ---- receiving ---------------------------------------------------------------

    /// A message arrived (any kind): the peer is alive and returns credit.
    ///
    /// # Errors
    /// The peer acknowledged messages never sent.
    pub(crate) fn handle_message(&mut self, prefix: &Prefix) -> Result<(), Close> {
        self.heard += 1;
        self.credits
            .handle_peer_reposted(prefix.reposted)
            .map_err(Close::Violation)?;
        if prefix.granted > MAX_GRANT {
            return Err(Close::Violation(format!(
                "the peer claims {} receive slots",
                prefix.granted
            )));
        }
        if prefix.granted != 0 {
            self.credits.grow_peer(u64::from(prefix.granted));
        }
        if prefix.flags & Prefix::WANT != 0 && self.cfg.own_slots < self.cfg.max_slots {
            self.grow_due = true;
        }
        if prefix.flags & Prefix::PING != 0 {
            self.pong_due = true;
        }
        Ok(())
    }

    /// Looks at an eager frame: `Ok(Some(header))` if its payload is over the limit (hand
    /// up [`refused`] instead and re-post the slot at once), `Ok(None)` to hand it up.
    ///
    /// # Errors
    /// A malformed frame header.
    pub(crate) fn classify_eager(&mut self, frame: &[u8]) -> Result<Option<Header>, Close> {
        match Header::decode(frame) {
            Ok(Some(header)) if header.payload_len as usize > self.cfg.max_message_size => {
                Ok(Some(header))
            }
            Ok(_) => Ok(None),
            Err(e) => Err(Close::Violation(format!("malformed frame: {e}"))),
        }
    }

    /// A rendezvous descriptor arrived. `Ok(Some(header))`: refused unread for its size
    /// (hand up [`refused`]; its read-done is due at once). `Ok(None)`: queued for READ
    /// (see [`Session::poll_read`]).
    ///
    /// # Errors
    /// A lie (a length other than its header's), a malformed header, or a loan beyond
    /// what this side announced.
    pub(crate) fn handle_descriptor(&mut self, d: Rendezvous) -> Result<Option<Header>, Close> {
        let lent = usize::try_from(d.len).unwrap_or(usize::MAX);
        let len = lent.saturating_add(d.head.len());
        let header = match Header::decode(&d.header) {
            Ok(Some(header)) => header,
            Ok(None) => {
                return Err(Close::Violation(
                    "rendezvous descriptor without a frame header".into(),
                ))
            }
            Err(e) => return Err(Close::Violation(format!("malformed frame: {e}"))),
        };
        if header.frame_len() != len {
            return Err(Close::Violation(format!(
                "rendezvous descriptor of {len} bytes for a frame of {}",
                header.frame_len()
            )));
        }
        if d.offset.checked_add(d.len).is_none() {
            return Err(Close::Violation("rendezvous descriptor wraps".into()));
        }
        if !d.head.is_empty()
            && (lent == 0 || d.head.get(..rpc_core::wire::HEADER_LEN) != Some(&d.header[..]))
        {
            return Err(Close::Violation(
                "rendezvous descriptor whose inline head is not the frame's start, or that lends nothing"
                    .into(),
            ));
        }
        if header.payload_len as usize > self.cfg.max_message_size || len > self.cfg.max_frame {
            self.borrower
                .accept(lent, false)
                .map_err(Close::Violation)?;
            self.done.push((d.token, 0));
            return Ok(Some(header));
        }
        self.borrower.accept(lent, true).map_err(Close::Violation)?;
        let tag = self.next_tag;
        self.next_tag += 1;
        self.in_order.push_back(InOrder::Reading(tag));
        self.pending_reads.push_back((tag, d));
        Ok(None)
    }

    /// READ work requests a frame of `len` bytes is split into, and their size.
    fn chunking(&self, len: usize) -> (usize, usize) {
        let chunk = self.cfg.read_chunk.max(len.div_ceil(MAX_CHUNKS)).max(1);
        (len.div_ceil(chunk).max(1), chunk)
    }

    /// The next READ to post, if the READ budget allows.
    pub(crate) fn poll_read(&mut self) -> Option<Read> {
        if self.is_closed() {
            return None;
        }
        let (_, next) = self.pending_reads.front()?;
        let (chunks, chunk) = self.chunking(next.len as usize);
        if self.read_wrs + chunks > self.cfg.read_wr_budget {
            return None;
        }
        let (tag, d) = self.pending_reads.pop_front().expect("checked");
        self.read_wrs += chunks;
        let len = d.len as usize;
        self.reading.insert(
            tag,
            Reading {
                token: d.token,
                frame_len: d.head.len() + len,
                lent: len,
                chunks,
            },
        );
        Some(Read {
            tag,
            offset: d.offset,
            rkey: d.rkey,
            len,
            chunk,
            head: d.head,
        })
    }

    /// The READ tagged `tag` completed; `frame(token, frame_len, lent)` makes the frame
    /// it filled (`lent`: the bytes to acknowledge in [`Session::frame_consumed`]), which
    /// takes its place in the arrival order.
    ///
    /// # Errors
    /// A completion for a READ not posted.
    pub(crate) fn handle_read_complete(
        &mut self,
        tag: u64,
        frame: impl FnOnce(u64, usize, usize) -> F,
    ) -> Result<(), Close> {
        let Some(reading) = self.reading.remove(&tag) else {
            return Err(Close::Failed(format!(
                "completion of an unknown rendezvous read ({tag})"
            )));
        };
        self.read_wrs -= reading.chunks.min(self.read_wrs);
        let frame = frame(reading.token, reading.frame_len, reading.lent);
        if self.is_closed() {
            self.discarded.push(frame);
            return Ok(());
        }
        if let Some(place) = self
            .in_order
            .iter_mut()
            .find(|place| matches!(place, InOrder::Reading(t) if *t == tag))
        {
            *place = InOrder::Ready(frame);
        }
        while let Some(InOrder::Ready(_)) = self.in_order.front() {
            if let Some(InOrder::Ready(frame)) = self.in_order.pop_front() {
                self.ready.push_back(frame);
            }
        }
        Ok(())
    }

    /// A received frame (eager, or a refused header) takes its place in the arrival order.
    ///
    /// # Errors
    /// Too many frames held behind one being READ: each holds a receive slot (or a share
    /// of one: a batch) or a loan, except refused headers, which a peer could send
    /// without end.
    pub(crate) fn deliver(&mut self, frame: F) -> Result<(), Close> {
        if self.is_closed() {
            self.discarded.push(frame);
            return Ok(());
        }
        if self.in_order.is_empty() {
            self.ready.push_back(frame);
            return Ok(());
        }
        // A message may carry a batch of frames, each holding a share of its slot.
        let max = 2
            * (self.cfg.own_slots as usize * usize::from(super::MAX_BATCH) + self.cfg.borrow.loans);
        if self.in_order.len() >= max {
            self.discarded.push(frame);
            return Err(Close::Violation(format!(
                "more than {max} frames wait behind one being read"
            )));
        }
        self.in_order.push_back(InOrder::Ready(frame));
        Ok(())
    }

    /// The next frame to hand up, in the order the peer sent them.
    pub(crate) fn poll_deliver(&mut self) -> Option<F> {
        self.ready.pop_front()
    }

    /// Whether frames wait for [`Session::poll_deliver`].
    pub(crate) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Every frame waiting to go up, taken (the receiver is gone, or they go to a sink).
    pub(crate) fn take_ready(&mut self) -> VecDeque<F> {
        std::mem::take(&mut self.ready)
    }

    /// Frames the session will not hand up, to drop outside the connection's lock.
    pub(crate) fn take_discarded(&mut self) -> Vec<F> {
        std::mem::take(&mut self.discarded)
    }

    /// A frame READ with `token` (`len` bytes) was consumed: its read-done is due.
    pub(crate) fn frame_consumed(&mut self, token: u64, len: usize) {
        if !self.is_closed() {
            self.done.push((token, len));
        }
    }

    /// The peer read (or refused) the frames lent with `tokens`: the verbs keys of the
    /// loans that end (the caller reclaims them and releases their charge).
    ///
    /// # Errors
    /// A read-done for a token not lent.
    pub(crate) fn handle_read_dones(
        &mut self,
        tokens: impl IntoIterator<Item = u64>,
    ) -> Result<Vec<u32>, Close> {
        let mut keys = Vec::new();
        for token in tokens {
            match self.lent.remove(&token) {
                Some(loan) => keys.push(loan.key),
                None => {
                    return Err(Close::Violation(format!(
                        "read-done for token {token}, which is not lent"
                    )))
                }
            }
        }
        Ok(keys)
    }

    /// A receive slot was re-posted.
    pub(crate) fn handle_reposted(&mut self) {
        self.credits.handle_reposted();
    }

    // ---- control and time ----------------------------------------------------------

    /// Whether a control message is due (credits, read-dones, ping or pong).
    pub(crate) fn control_due(&self) -> bool {
        !self.is_closed()
            && (!self.done.is_empty()
                || self.pong_due
                || self.ping_due
                || self.granted_advertised < self.cfg.own_slots
                || self.credits.should_return())
    }

    /// The control message to send now, if one is due and credit allows; the caller
    /// holds a free send slot for it.
    pub(crate) fn poll_control(&mut self) -> Option<Control> {
        let grants = self.granted_advertised < self.cfg.own_slots;
        if !self.control_due() || !self.credits.try_take_control_granting(grants) {
            return None;
        }
        let n = self.done.len().min(self.cfg.max_tokens);
        let mut tokens = Vec::with_capacity(n);
        for (token, counted) in self.done.drain(..n) {
            // From here the loan is the peer's to end (see loans.rs).
            self.borrower.acknowledged(counted);
            tokens.push(token);
        }
        let mut advert = self.advertise();
        if std::mem::take(&mut self.pong_due) {
            advert.flags |= Prefix::PONG;
        }
        if std::mem::take(&mut self.ping_due) {
            advert.flags |= Prefix::PING;
        }
        Some(Control { tokens, advert })
    }

    /// Runs the timers: the loan timeout, pings after silence, the ping timeout.
    ///
    /// # Errors
    /// Why the session must end (the caller closes it).
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> Result<(), Close> {
        if self.is_closed() {
            return Ok(());
        }
        if let Some(oldest) = self.lent.values().map(|loan| loan.at).min() {
            if now.saturating_duration_since(oldest) > self.cfg.loan_timeout {
                return Err(Close::LoanTimeout(self.cfg.loan_timeout));
            }
        }
        if self.heard != self.heard_seen {
            self.heard_seen = self.heard;
            self.last_heard = now;
        }
        if self.ping_due && !self.credits.can_ping() {
            // The peer holds every credit but the reserve, which a ping may not spend:
            // we cannot ask, so its silence proves nothing (the runtime's keepalive,
            // whose PING waits for credit under its own timeout, covers a peer that is
            // really gone).
            self.last_heard = now;
        }
        let silence = now.saturating_duration_since(self.last_heard);
        if silence >= self.cfg.ping_timeout {
            return Err(Close::PeerSilent {
                silence,
                timeout: self.cfg.ping_timeout,
            });
        }
        let pinged_recently = self
            .pinged
            .is_some_and(|at| now.saturating_duration_since(at) < self.cfg.ping_interval);
        if silence >= self.cfg.ping_interval && !pinged_recently {
            self.ping_due = true;
            self.pinged = Some(now);
        }
        Ok(())
    }

    /// When [`Session::handle_timeout`] must run next.
    pub(crate) fn poll_timeout(&self) -> Instant {
        let mut next_ping = self.last_heard + self.cfg.ping_interval;
        if let Some(at) = self.pinged {
            next_ping = next_ping.max(at + self.cfg.ping_interval);
        }
        let ping = next_ping.min(self.last_heard + self.cfg.ping_timeout);
        match self.lent.values().map(|loan| loan.at).min() {
            Some(oldest) => ping.min(oldest + self.cfg.loan_timeout + Duration::from_millis(1)),
            None => ping,
        }
    }
}

/// The header of a frame refused for its size, as it goes up: flagged
/// [`DISCARDED`](rpc_core::wire::Flags::DISCARDED), without metadata or payload.
pub(crate) fn refused(header: Header) -> [u8; rpc_core::wire::HEADER_LEN] {
    let mut h = header;
    h.flags = h.flags | rpc_core::wire::Flags::DISCARDED;
    h.meta_len = 0;
    h.encode()
}

#[cfg(test)]
mod tests;
