//! [`RawPeer`]: a hostile RDMA peer for the tests of this project only (`#[doc(hidden)]`).
//!
//! It speaks the side-channel handshake, rdma_cm and the slot protocol by hand, on the crate's
//! verbs layer, so that a test can do what no well-behaved connection does: lie in its
//! hello, send any descriptor or read-done, withhold credits, never read what it was
//! lent, and READ the other side's memory with any key and offset. Each call is
//! synchronous and busy-polls its own completion queue (run it on a blocking thread).
//!
//! It lives in the verbs layer because it posts work requests itself (the crate's only
//! `unsafe` code stays in `verbs/`); `rdmarpc_transport_rdma::test_peer` re-exports it.
//!
//! Not a transport: one send slot, waited for after each send; no flow control beyond
//! not exceeding the credits the other side granted.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdmarpc_core::wire::HEADER_LEN;

use super::{
    wc_buffer, Access, CmEventKind, CmId, Completion, CompletionQueue, ConnParam, EventChannel,
    MemoryRegion, ProtectionDomain, QpConfig, QueuePair, RecvReady, RemoteBuf, Rts, SendOptions,
    WrId, MAX_INITIATOR_DEPTH,
};
use crate::handshake::READY;
use crate::protocol::{Kind, Prefix, Rendezvous, PREFIX_LEN, RENDEZVOUS_LEN};

const RECV_SLOTS: u32 = 64;
const SLOT: u32 = 8192;
const TAG_RECV: u64 = 1 << 40;
const WR_SEND: u64 = 1;
const WR_READ: u64 = 2;
/// Largest READ the peer can do.
const TARGET: usize = 4 << 20;

/// What the raw peer announces in its hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloLimits {
    /// Bytes of rendezvous frames it accepts to be lent at once.
    pub rdv_budget: usize,
    /// Descriptors it accepts to be lent at once.
    pub max_loans: u16,
}

impl Default for HelloLimits {
    fn default() -> Self {
        HelloLimits {
            rdv_budget: 16 << 20,
            max_loans: 128,
        }
    }
}

/// A rendezvous descriptor as it travels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// Where the lent bytes start in the lent memory (an offset, from this crate).
    pub offset: u64,
    /// Bytes lent: the frame's length less `head`.
    pub len: u64,
    /// The key to READ it with.
    pub rkey: u32,
    /// Names the loan in the read-done.
    pub token: u64,
    /// The frame's rpc header.
    pub header: [u8; HEADER_LEN],
    /// The frame's first bytes, inline (empty: the whole frame is lent).
    pub head: Vec<u8>,
}

/// A message received from the other side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A whole frame.
    Data(Vec<u8>),
    /// A frame lent for RDMA READ.
    Rendezvous(Descriptor),
    /// Read-done tokens and ping/pong flags.
    Control {
        /// `1` = PING, `2` = PONG.
        flags: u8,
        /// Tokens of loans the other side finished reading.
        tokens: Vec<u64>,
    },
    /// A frame pushed in pieces (flagged PUSHED: nothing is lent).
    Pushed(Descriptor),
    /// The next bytes of the pushed frame `token`.
    Piece {
        /// The pushed frame's token.
        token: u64,
        /// The bytes.
        bytes: Vec<u8>,
    },
}

/// A connected raw peer. See the module docs.
#[derive(Debug)]
pub struct RawPeer {
    /// Dropped first: destroying the QP retires every posted work request.
    qp: QueuePair<Rts>,
    /// The connection's rdma_cm id, after the QP.
    #[allow(dead_code, reason = "held: dropping it ends the connection")]
    cm: CmId,
    cq: Arc<CompletionQueue>,
    send_ring: MemoryRegion,
    recv_ring: MemoryRegion,
    target: MemoryRegion,
    /// Regions lent to the other side (remote-readable by the whole PD: the raw peer's
    /// own memory, nothing to protect).
    lent: Vec<MemoryRegion>,
    side: TcpStream,
    seen: Vec<Completion>,
    /// Messages received while waiting for credit, for `recv`.
    pending: std::collections::VecDeque<Message>,
    /// The other side's receive slots (our credits) and its rendezvous limits.
    peer_slots: u64,
    /// What the other side announced it accepts to be lent.
    pub peer_limits: HelloLimits,
    sent: u64,
    peer_reposted: u64,
    reposted: u64,
    /// Advertise no more re-posted slots: the other side runs out of credits.
    pub withhold_credits: bool,
    frozen: u64,
    /// Set when a wait timed out with a work request still posted: its buffer may still
    /// be the NIC's, so the QP is moved to the error state and nothing more is posted.
    dead: bool,
}

mod connect;

use connect::{cm_event, established, hello, resolved};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl RawPeer {
    /// Connects to an RDMA server at `addr`, announcing `limits`.
    ///
    /// # Errors
    /// The server's refusal or any verbs or socket failure, as text.
    pub fn connect(addr: SocketAddr, limits: HelloLimits) -> Result<RawPeer, String> {
        Self::connect_with(addr, limits, |_, _| {})
    }

    /// [`RawPeer::connect`], changing the token the server gave, or where the rdma_cm
    /// connect request goes (the server's rdma_cm address), before the request is made
    /// (`forge`): a server must reject a request whose token it did not give to this
    /// connection, or that comes from another address than the handshake.
    ///
    /// # Errors
    /// As [`RawPeer::connect`]; `rejected` in the text when the server rejected the
    /// rdma_cm request.
    pub fn connect_with(
        addr: SocketAddr,
        limits: HelloLimits,
        forge: impl FnOnce(&mut [u8; 16], &mut SocketAddr),
    ) -> Result<RawPeer, String> {
        let mut side = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).map_err(err)?;
        side.set_read_timeout(Some(Duration::from_secs(20)))
            .map_err(err)?;
        let local = side.local_addr().map_err(err)?;
        let remote = hello(&mut side, limits)?;
        let channel = EventChannel::new().map_err(err)?;
        let mut server = addr;
        server.set_port(remote.cm_port);
        let mut token = remote.token;
        forge(&mut token, &mut server);
        // From the side channel's address, unless the request goes to another family.
        let local = (local.is_ipv4() == server.is_ipv4()).then_some(local);
        let id = resolved(&channel, local, server)?;
        let ctx = Arc::new(id.context().map_err(err)?);
        let pd = Arc::new(
            ProtectionDomain::new(&ctx, crate::memlock::Account::unlimited()).map_err(err)?,
        );
        let cq = Arc::new(CompletionQueue::new(&ctx, 1024, None, 0).map_err(err)?);
        let qp = QueuePair::new(&pd, &cq, &cq, &QpConfig::default())
            .map_err(err)?
            .cm_init(&id)
            .map_err(err)?;
        let send_ring = MemoryRegion::new(&pd, SLOT as usize, Access::Local).map_err(err)?;
        let recv_ring =
            MemoryRegion::new(&pd, (SLOT * RECV_SLOTS) as usize, Access::Local).map_err(err)?;
        let target = MemoryRegion::new(&pd, TARGET, Access::Local).map_err(err)?;
        let recvs: Vec<_> = (0..RECV_SLOTS as usize)
            .map(|i| (WrId(TAG_RECV | i as u64), i * SLOT as usize, SLOT as usize))
            .collect();
        post_recvs(&qp, &recv_ring, &recvs)?;
        let request = crate::handshake::cm_request(&token);
        let param = ConnParam {
            private_data: &request,
            qp_num: qp.qp_num(),
            responder_resources: ctx.max_qp_rd_atom(),
            initiator_depth: ctx.max_qp_init_rd_atom().min(MAX_INITIATOR_DEPTH),
            retry_count: 7,
        };
        let id = connect::request(&channel, id, local, server, &param)?;
        let answer = cm_event(
            &channel,
            &id,
            &[CmEventKind::ConnectResponse, CmEventKind::Established],
        )?;
        let qp = established(qp, &id, answer, server.ip())?;
        side.write_all(READY).map_err(err)?;
        Ok(RawPeer {
            qp,
            cm: id,
            cq,
            send_ring,
            recv_ring,
            target,
            lent: Vec::new(),
            side,
            seen: Vec::new(),
            pending: Default::default(),
            peer_slots: u64::from(remote.recv_slots),
            peer_limits: HelloLimits {
                rdv_budget: remote.rdv_budget,
                max_loans: remote.max_loans,
            },
            sent: 0,
            peer_reposted: 0,
            reposted: 0,
            withhold_credits: false,
            frozen: 0,
            dead: false,
        })
    }

    /// Credits left: messages the other side has a posted receive for.
    pub fn credits(&self) -> u64 {
        self.peer_slots - (self.sent - self.peer_reposted).min(self.peer_slots)
    }

    /// Messages received so far: each took one of the receive slots this peer granted
    /// (64), which it re-posted but, with [`RawPeer::withhold_credits`], never
    /// advertised.
    pub fn received(&self) -> u64 {
        self.reposted
    }

    fn advertised(&mut self) -> u64 {
        if !self.withhold_credits {
            self.frozen = self.reposted;
        }
        self.frozen
    }

    fn send_slot(
        &mut self,
        kind: Kind,
        flags: u8,
        n_tokens: u16,
        body: &[u8],
    ) -> Result<(), String> {
        if self.credits() == 0 {
            // Out of credit: take in what the other side sends (re-posts, and the slots
            // its ring grew by) for a while, keeping the messages for `recv`.
            let deadline = Instant::now() + Duration::from_secs(5);
            while self.credits() == 0 && Instant::now() < deadline {
                if self.recv_one(Duration::from_millis(100)).is_ok() {}
            }
            if self.credits() == 0 {
                return Err("no credit left".into());
            }
        }
        // Low on credit: ask for more slots, as the transport does.
        let flags = if self.credits() <= 2 {
            flags | Prefix::WANT
        } else {
            flags
        };
        let reposted = self.advertised();
        let len = PREFIX_LEN + body.len();
        let slot = self.send_ring.slice_mut(0, len).map_err(err)?;
        Prefix {
            kind,
            flags,
            n_tokens,
            granted: 0,
            reposted,
        }
        .encode(slot);
        slot[PREFIX_LEN..].copy_from_slice(body);
        let opts = SendOptions {
            signaled: true,
            inline: false,
            imm: None,
        };
        // The raw peer waits for this SEND's completion before touching the slot again.
        post_send(&self.qp, &self.send_ring, len, opts)?;
        self.sent += 1;
        let c = self.wait(WrId(WR_SEND), Duration::from_secs(20))?;
        c.status.map_err(|s| format!("send failed: {s}"))
    }

    /// Sends a whole frame (DATA).
    ///
    /// # Errors
    /// No credit, or the send failed.
    pub fn send_frame(&mut self, frame: &[u8]) -> Result<(), String> {
        self.send_slot(Kind::Data, 0, 0, frame)
    }

    /// Sends `frames` (whole frames back to back, or not) as one DATA message that
    /// announces `n` frames (a batch).
    ///
    /// # Errors
    /// No credit, or the send failed.
    pub fn send_batch(&mut self, frames: &[u8], n: u16) -> Result<(), String> {
        self.send_slot(Kind::Data, 0, n, frames)
    }

    /// Sends a descriptor (RENDEZVOUS), true or not.
    ///
    /// # Errors
    /// No credit, or the send failed.
    pub fn send_descriptor(&mut self, d: Descriptor) -> Result<(), String> {
        self.descriptor(d, 0)
    }

    /// Sends a descriptor flagged PUSHED (the frame's bytes to follow in pieces), true
    /// or not.
    ///
    /// # Errors
    /// No credit, or the send failed.
    pub fn send_pushed_descriptor(&mut self, d: Descriptor) -> Result<(), String> {
        self.descriptor(d, Prefix::PUSHED)
    }

    /// Sends a PIECE of the pushed frame `token`, true or not.
    ///
    /// # Errors
    /// No credit, or the send failed.
    pub fn send_piece(&mut self, token: u64, bytes: &[u8]) -> Result<(), String> {
        let mut body = token.to_le_bytes().to_vec();
        body.extend_from_slice(bytes);
        self.send_slot(Kind::Piece, 0, 0, &body)
    }

    fn descriptor(&mut self, d: Descriptor, flags: u8) -> Result<(), String> {
        let mut body = vec![0u8; RENDEZVOUS_LEN + d.head.len()];
        let n = u16::try_from(d.head.len()).map_err(err)?;
        Rendezvous {
            offset: d.offset,
            len: d.len,
            rkey: d.rkey,
            token: d.token,
            header: d.header,
            head: d.head,
        }
        .encode(&mut body);
        self.send_slot(Kind::Rendezvous, flags, n, &body)
    }

    /// Sends read-done `tokens` (CONTROL), known to the other side or not.
    ///
    /// # Errors
    /// No credit, or the send failed.
    pub fn send_read_done(&mut self, tokens: &[u64]) -> Result<(), String> {
        let body: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        self.send_slot(Kind::Control, 0, tokens.len() as u16, &body)
    }

    /// Places `frame` in memory the other side may READ; returns the descriptor to send
    /// (with `token`).
    ///
    /// # Errors
    /// Registration failure.
    pub fn lend(&mut self, frame: &[u8], token: u64) -> Result<Descriptor, String> {
        let mut region =
            MemoryRegion::new(self.qp.pd(), frame.len().max(1), Access::RemoteRead).map_err(err)?;
        region.as_mut_slice()[..frame.len()].copy_from_slice(frame);
        let d = Descriptor {
            offset: region.addr(),
            len: frame.len() as u64,
            rkey: region.rkey(),
            token,
            header: frame[..HEADER_LEN].try_into().map_err(err)?,
            head: Vec::new(),
        };
        self.lent.push(region);
        Ok(d)
    }

    /// The next message from the other side, its receive slot re-posted at once.
    ///
    /// # Errors
    /// Nothing within `within`, a failed receive (the connection is dead), or a message
    /// this peer cannot decode.
    pub fn recv(&mut self, within: Duration) -> Result<Message, String> {
        if self.pending.is_empty() {
            self.recv_one(within)?;
        }
        self.pending
            .pop_front()
            .ok_or_else(|| "an empty batch".to_string())
    }

    /// Receives one message and queues what it carries (several frames for a batch).
    fn recv_one(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        loop {
            self.poll()?;
            if let Some(i) = self.seen.iter().position(|c| c.wr_id.0 & TAG_RECV != 0) {
                let c = self.seen.swap_remove(i);
                c.status.map_err(|s| format!("receive failed: {s}"))?;
                let index = (c.wr_id.0 & !TAG_RECV) as usize;
                let at = index * SLOT as usize;
                let bytes = self
                    .recv_ring
                    .slice(at, c.byte_len as usize)
                    .map_err(err)?
                    .to_vec();
                post_recvs(&self.qp, &self.recv_ring, &[(c.wr_id, at, SLOT as usize)])?;
                self.reposted += 1;
                let prefix = Prefix::decode(&bytes).map_err(|lie| lie.to_string())?;
                self.peer_reposted = self.peer_reposted.max(prefix.reposted);
                self.peer_slots = self.peer_slots.max(u64::from(prefix.granted));
                let body = &bytes[PREFIX_LEN..];
                let message = match prefix.kind {
                    Kind::Data if prefix.n_tokens >= 2 => {
                        let ranges = crate::protocol::split_batch(body, prefix.n_tokens)
                            .map_err(|lie| lie.to_string())?;
                        for range in ranges {
                            self.pending.push_back(Message::Data(body[range].to_vec()));
                        }
                        return Ok(());
                    }
                    Kind::Data => Message::Data(body.to_vec()),
                    Kind::Rendezvous => {
                        let r = Rendezvous::decode(body);
                        let d = Descriptor {
                            offset: r.offset,
                            len: r.len,
                            rkey: r.rkey,
                            token: r.token,
                            header: r.header,
                            head: r.head,
                        };
                        if prefix.flags & Prefix::PUSHED != 0 {
                            Message::Pushed(d)
                        } else {
                            Message::Rendezvous(d)
                        }
                    }
                    Kind::Piece => Message::Piece {
                        token: u64::from_le_bytes(body[..8].try_into().expect("8 bytes")),
                        bytes: body[8..].to_vec(),
                    },
                    Kind::Control => Message::Control {
                        flags: prefix.flags,
                        tokens: body
                            .chunks_exact(8)
                            .map(|t| u64::from_le_bytes(t.try_into().expect("8 bytes")))
                            .collect(),
                    },
                };
                self.pending.push_back(message);
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("nothing received within {within:?}"));
            }
            std::thread::yield_now();
        }
    }

    /// READs `len` bytes at `offset` with `rkey` from the other side's memory.
    ///
    /// # Errors
    /// The READ's completion status (the connection is then dead), or a timeout.
    pub fn read(&mut self, offset: u64, rkey: u32, len: usize) -> Result<Vec<u8>, String> {
        self.alive()?;
        let len = len.min(TARGET);
        self.target.as_mut_slice().fill(0);
        let remote = RemoteBuf { addr: offset, rkey };
        post_read(&self.qp, &self.target, len, remote)?;
        let c = self.wait(WrId(WR_READ), Duration::from_secs(30))?;
        c.status.map_err(|s| format!("READ failed: {s}"))?;
        Ok(self.target.slice(0, len).map_err(err)?.to_vec())
    }

    /// Whether the other side closed the side channel (it ended the connection) within
    /// `within`.
    pub fn closed_by_peer(&mut self, within: Duration) -> bool {
        let _ = self.side.set_read_timeout(Some(within));
        let mut byte = [0u8; 1];
        match self.side.read(&mut byte) {
            Ok(0) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            Ok(_) => false,
        }
    }

    fn alive(&self) -> Result<(), String> {
        if self.dead {
            Err("the raw peer timed out waiting for a completion earlier".into())
        } else {
            Ok(())
        }
    }

    fn poll(&mut self) -> Result<(), String> {
        let mut wcs = wc_buffer(16);
        self.cq.poll_into(&mut wcs, &mut self.seen).map_err(err)?;
        Ok(())
    }

    fn wait(&mut self, wr_id: WrId, within: Duration) -> Result<Completion, String> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(i) = self.seen.iter().position(|c| c.wr_id == wr_id) {
                return Ok(self.seen.swap_remove(i));
            }
            if Instant::now() >= deadline {
                // The work request may still be posted: the QP goes to the error state
                // (flushing it) and this peer posts nothing more.
                self.dead = true;
                let _ = self.qp.modify_to_error();
                return Err(format!("no completion within {within:?}"));
            }
            self.poll()?;
            std::thread::yield_now();
        }
    }
}

fn post_recvs(
    qp: &QueuePair<impl RecvReady>,
    ring: &MemoryRegion,
    recvs: &[(WrId, usize, usize)],
) -> Result<(), String> {
    // SAFETY: the ring lives in the same `RawPeer` as the QP and is dropped after it
    // (field order); a slot is read only after its RECV completion was reaped (`recv`).
    unsafe { qp.post_recv_batch(ring, recvs) }.map_err(err)
}

fn post_send(
    qp: &QueuePair<Rts>,
    ring: &MemoryRegion,
    len: usize,
    opts: SendOptions,
) -> Result<(), String> {
    // SAFETY: the slot is written again only after this SEND's completion is reaped
    // (`send_slot` waits for it); the ring outlives the QP (field order).
    unsafe { qp.post_send(WrId(WR_SEND), ring, 0, len, opts) }.map_err(err)
}

fn post_read(
    qp: &QueuePair<Rts>,
    target: &MemoryRegion,
    len: usize,
    remote: RemoteBuf,
) -> Result<(), String> {
    // SAFETY: the target is read only after this READ's completion is reaped (`read`
    // waits for it); it outlives the QP (field order).
    unsafe { qp.post_read(WrId(WR_READ), target, 0, len, remote) }.map_err(err)
}
