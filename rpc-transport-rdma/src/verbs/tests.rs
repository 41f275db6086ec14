//! Tests on real verbs. They need RDMA devices and skip (with a message) without them:
//! run them in the Soft-RoCE guest, which has rxe0 = 10.77.0.1 and rxe1 = 10.77.0.2:
//!
//! ```text
//! scripts/test-rdma-guest verbs:: --nocapture
//! # or by hand:
//! CARGO_TARGET_DIR=/work/target-rdma cargo test -p rdmarpc-transport-rdma --no-run
//! scripts/softroce-vm -- /work/target-rdma/debug/deps/rdmarpc_transport_rdma-HASH verbs:: --nocapture
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

mod cm;

const IP_A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// The guest's IPv6 addresses on the same wire (rxe0 and rxe1).
const IP6_A: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
const IP6_B: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);

/// [`Context::open`] for `device` (if named) and the local address `ip`.
fn open_at(device: Option<&str>, ip: Option<IpAddr>) -> Result<Context> {
    Context::open(&crate::fabric::Wanted {
        device,
        local: ip,
        ..Default::default()
    })
}

/// The IP address a context's GID holds.
fn ip_of(ctx: &Context) -> IpAddr {
    ctx.choice().gid.gid.to_canonical()
}
const MIB: usize = 1 << 20;
const RING: usize = 64 * 1024;
const SLOT: usize = 8192;
/// Generous: the emulated guest is slow and jittery; tests assert content, not speed.
const WAIT: Duration = Duration::from_secs(60);

/// Opens the devices owning [`IP_A`] and [`IP_B`], or explains why the test is skipped.
fn open_pair_or_skip() -> Option<(Arc<Context>, Arc<Context>)> {
    if !rdma_available() {
        eprintln!("SKIP: no RDMA device on this host (run scripts/test-rdma-guest)");
        return None;
    }
    let open = |ip: Ipv4Addr| match open_at(None, Some(ip.into())) {
        Ok(ctx) => Some(Arc::new(ctx)),
        Err(Error::NoPath(why)) => {
            // Inside the guest (softroce-vm sets SOFTROCE_PROVIDER) a skip would hide a bug.
            assert!(
                std::env::var_os("SOFTROCE_PROVIDER").is_none(),
                "no device owns {ip} in the softroce-vm guest: {why}"
            );
            eprintln!("SKIP: RDMA present but no device owns {ip} (not the softroce-vm guest)");
            None
        }
        Err(e) => panic!("Context::open({ip}): {e}"),
    };
    Some((open(IP_A)?, open(IP_B)?))
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8 ^ seed)
        .collect()
}

/// Busy-polls `cq` until the completion with `wr_id` arrives; other completions are kept
/// in `seen` for later calls.
fn wait_for(cq: &CompletionQueue, seen: &mut Vec<Completion>, wr_id: WrId) -> Completion {
    let mut wcs = wc_buffer(16);
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(i) = seen.iter().position(|c| c.wr_id == wr_id) {
            return seen.swap_remove(i);
        }
        assert!(
            Instant::now() < deadline,
            "no completion for {wr_id:?} within {WAIT:?}"
        );
        if cq.poll_into(&mut wcs, seen).expect("poll") == 0 {
            std::thread::yield_now();
        }
    }
}

/// Waits until the channel's fd is readable (with `poll(2)`, as tokio's AsyncFd would).
fn wait_readable(channel: &CompChannel) {
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd {
        fd: channel.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = WAIT.as_millis() as i32;
    // SAFETY: `pfd` is one valid pollfd for the call; the fd is alive (borrowed channel).
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    assert_eq!(n, 1, "completion channel not readable within {WAIT:?}");
}

#[test]
fn probe_and_open_without_device_are_errors_not_panics() {
    if rdma_available() {
        eprintln!("RDMA devices present; checking that open works instead");
        open_at(None, None).expect("open first device");
        return;
    }
    match open_at(None, None) {
        Err(Error::NoDevice { source }) => eprintln!("host without RDMA: NoDevice ({source})"),
        other => panic!("expected NoDevice, got {other:?}"),
    }
    assert!(matches!(
        open_at(Some("rxe0"), Some(IP_A.into())),
        Err(Error::NoDevice { .. })
    ));
}

#[test]
fn open_picks_the_device_that_owns_the_address() {
    let Some((a, b)) = open_pair_or_skip() else {
        return;
    };
    assert_eq!(a.name(), "rxe0");
    assert_eq!(b.name(), "rxe1");
    assert_eq!(ip_of(&a), IpAddr::V4(IP_A));
    assert_eq!(ip_of(&b), IpAddr::V4(IP_B));
    let choice = *a.choice();
    assert_eq!((choice.port, choice.lid), (1, 0));
    assert_eq!(choice.gid.kind, crate::fabric::GidKind::RoceV2);
    eprintln!(
        "rxe0: gid_index {} mtu {}; rxe1: gid_index {}",
        choice.gid.index,
        choice.mtu.bytes(),
        b.choice().gid.index
    );
    // The same wire's IPv6 addresses, by their own RoCE v2 entries.
    for (ip, name) in [(IP6_A, "rxe0"), (IP6_B, "rxe1")] {
        let ctx = open_at(None, Some(ip.into())).expect("open by IPv6 address");
        assert_eq!((ctx.name(), ip_of(&ctx)), (name, IpAddr::V6(ip)));
    }
    // An explicit device name overrides the address-based choice...
    let named = open_at(Some("rxe1"), None).expect("open rxe1 by name");
    assert_eq!(named.name(), "rxe1");
    // ...but it must own the address if one is given; each error names what is missing.
    let err = open_at(Some("rxe1"), Some(IP_A.into())).unwrap_err();
    assert_eq!(
        err.to_string(),
        "port 1 of rxe1 has no RoCE GID for 10.77.0.1"
    );
    let err = open_at(Some("nosuchdev"), None).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("RDMA device \"nosuchdev\" not found (this host has rxe0, rxe1"),
        "{err}"
    );
    let err = open_at(None, Some(Ipv4Addr::new(192, 0, 2, 1).into())).unwrap_err();
    assert!(
        err.to_string()
            .contains("port 1 of rxe0 has no RoCE GID for 192.0.2.1"),
        "{err}"
    );
    let named_port = Context::open(&crate::fabric::Wanted {
        device: Some("rxe0"),
        port: Some(2),
        ..Default::default()
    });
    assert_eq!(
        named_port.unwrap_err().to_string(),
        "RDMA device rxe0 has no port 2 (it has 1)"
    );
}

/// One side of the connection: device, PD, CQ (with channel), rings, a large buffer.
struct Side {
    cq: Arc<CompletionQueue>,
    ring: MemoryRegion,
    big: MemoryRegion,
    seen: Vec<Completion>,
}

impl Side {
    fn new(ctx: &Arc<Context>, big_access: Access) -> (Self, QueuePair<Init>) {
        let pd =
            Arc::new(ProtectionDomain::new(ctx, crate::memlock::Account::unlimited()).expect("pd"));
        let channel = Arc::new(CompChannel::new(ctx).expect("channel"));
        let cq =
            Arc::new(CompletionQueue::new(ctx, DEFAULT_CQ_DEPTH, Some(&channel), 0).expect("cq"));
        assert!(cq.depth() >= DEFAULT_CQ_DEPTH);
        let ring = MemoryRegion::new(&pd, RING, Access::Local).expect("ring mr");
        let big = MemoryRegion::new(&pd, MIB, big_access).expect("big mr");
        assert_eq!(ring.addr() % 4096, 0, "registered memory is page-aligned");
        let qp = QueuePair::new(&pd, &cq, &cq, &QpConfig::default())
            .expect("create qp")
            .into_init()
            .expect("INIT");
        assert_eq!(qp.state().expect("query"), QpState::Init);
        let side = Side {
            cq,
            ring,
            big,
            seen: Vec::new(),
        };
        (side, qp)
    }

    fn wait(&mut self, wr_id: u64) -> Completion {
        let c = wait_for(&self.cq, &mut self.seen, WrId(wr_id));
        assert_eq!(c.status, Ok(()), "completion {c:?}");
        c
    }
}

/// Posts RECVs for all slots of `side`'s ring (wr_id = 1000 + slot).
fn post_ring<S: RecvReady>(qp: &QueuePair<S>, side: &Side) {
    let recvs: Vec<_> = (0..RING / SLOT)
        .map(|s| (WrId(1000 + s as u64), s * SLOT, SLOT))
        .collect();
    // SAFETY: the ring outlives the QPs (dropped at the end of the test, after them), and
    // each slot is read only after its RECV completion was reaped (`wait`).
    unsafe { qp.post_recv_batch(&side.ring, &recvs) }.expect("post recvs");
}

#[test]
fn send_recv_and_rdma_read_between_rxe0_and_rxe1() {
    let Some((ctx_a, ctx_b)) = open_pair_or_skip() else {
        return;
    };
    let (mut a, qa) = Side::new(&ctx_a, Access::RemoteRead);
    let (mut b, qb) = Side::new(&ctx_b, Access::Local);
    // RECVs go up in INIT, before the peer can send.
    post_ring(&qa, &a);
    post_ring(&qb, &b);
    let (ep_a, ep_b) = (qa.endpoint(), qb.endpoint());
    assert_eq!(ep_a.gid, ctx_a.choice().gid.gid.octets());
    let qa = qa
        .into_rtr(&ep_b)
        .expect("A RTR")
        .into_rts()
        .expect("A RTS");
    let qb = qb
        .into_rtr(&ep_a)
        .expect("B RTR")
        .into_rts()
        .expect("B RTS");
    assert_eq!(qa.state().expect("query"), QpState::Rts);
    assert!(qa.max_inline() >= MAX_INLINE);

    // SEND/RECV A -> B of several sizes, one with immediate data, some inline.
    let sizes = [1usize, 7, 64, 1000, 4096, SLOT];
    for (i, &len) in sizes.iter().enumerate() {
        let msg = pattern(i as u8, len);
        let offset = i * SLOT;
        a.ring.write_at(offset, &msg).expect("fill");
        let opts = SendOptions {
            signaled: true,
            inline: len <= qa.max_inline() as usize,
            imm: (i == 2).then_some(0xdead_beef),
        };
        // SAFETY: the slot is not written again until its completion is reaped below.
        unsafe { qa.post_send(WrId(i as u64), &a.ring, offset, len, opts) }.expect("post send");
        a.wait(i as u64);
        let c = b.wait(1000 + i as u64);
        assert_eq!((c.opcode, c.byte_len as usize), (WcOpcode::Recv, len));
        assert_eq!(c.imm, opts.imm);
        assert_eq!(
            b.ring.slice(i * SLOT, len).expect("slot"),
            &msg[..],
            "SEND of {len} bytes"
        );
    }
    eprintln!("SEND/RECV A->B verified for sizes {sizes:?}");

    // B -> A, inline from plain memory, woken through the completion channel.
    a.cq.req_notify(false).expect("arm");
    let msg = pattern(0x5a, 48);
    qb.post_send_inline(WrId(77), &msg, true, None)
        .expect("inline send");
    let channel = Arc::clone(a.cq.channel().expect("channel"));
    wait_readable(&channel);
    assert!(
        a.cq.get_event_and_ack().expect("event"),
        "an event was pending"
    );
    let c = a.wait(1000);
    assert_eq!(
        a.ring.slice(0, c.byte_len as usize).expect("slot"),
        &msg[..]
    );
    b.wait(77);
    assert!(
        !a.cq.get_event_and_ack().expect("no event"),
        "EAGAIN maps to false"
    );
    eprintln!("inline SEND B->A verified, completion channel event seen and acked");

    // 1 MiB RDMA READ by B of A's remote-readable buffer.
    let data = pattern(0xa5, MIB);
    a.big.as_mut_slice().copy_from_slice(&data);
    let remote = RemoteBuf {
        addr: a.big.addr(),
        rkey: a.big.rkey(),
    };
    let t = Instant::now();
    // SAFETY: `b.big` is not touched until the READ completion is reaped.
    unsafe { qb.post_read(WrId(500), &b.big, 0, MIB, remote) }.expect("post read");
    let c = b.wait(500);
    assert_eq!(c.opcode, WcOpcode::RdmaRead);
    assert!(b.big.as_slice() == &data[..], "RDMA READ payload mismatch");
    eprintln!("RDMA READ 1 MiB B<-A verified ({:?})", t.elapsed());

    // Checks done before posting anything.
    // SAFETY: these posts are refused before reaching the NIC.
    unsafe {
        assert!(matches!(
            qa.post_send(WrId(1), &a.ring, RING - 8, 16, SendOptions::default()),
            Err(Error::OutOfBounds { .. })
        ));
        assert!(matches!(
            qa.post_send(WrId(1), &b.ring, 0, 16, SendOptions::default()),
            Err(Error::ForeignRegion)
        ));
    }
    assert!(matches!(
        qa.post_send_inline(WrId(1), &vec![0; qa.max_inline() as usize + 1], true, None),
        Err(Error::TooLarge { .. })
    ));

    // A READ of memory registered without remote access fails as RemAccess and moves
    // the QP to the error state; teardown then flushes the posted RECVs.
    let bad = RemoteBuf {
        addr: a.ring.addr(),
        rkey: a.ring.rkey(),
    };
    // SAFETY: as for the READ above.
    unsafe { qb.post_read(WrId(501), &b.big, 0, 4096, bad) }.expect("post read");
    let c = wait_for(&b.cq, &mut b.seen, WrId(501));
    assert_eq!(c.status, Err(WcStatus::RemAccess), "{c:?}");
    eprintln!("READ without remote access: {}", c.status.unwrap_err());
    assert_eq!(qb.state().expect("query"), QpState::Error);
    qa.modify_to_error().expect("to error");
    let c = wait_for(&a.cq, &mut a.seen, WrId(1001));
    assert_eq!(c.status, Err(WcStatus::WrFlush));
    // QPs drop before CQs, MRs and PDs here and in any order of the `Arc`s: types enforce it.
    drop((qa, qb));
}

#[test]
fn a_region_that_cannot_be_allocated_is_an_error_not_an_abort() {
    let Some((ctx, _)) = open_pair_or_skip() else {
        return;
    };
    let pd =
        Arc::new(ProtectionDomain::new(&ctx, crate::memlock::Account::unlimited()).expect("pd"));
    // 1 TiB: more than the machine has, so the allocation fails (it used to abort).
    match MemoryRegion::new(&pd, 1 << 40, Access::RemoteRead) {
        Err(Error::Alloc { len }) => assert_eq!(len, 1 << 40),
        other => panic!("expected an allocation error, got {other:?}"),
    }
    // The PD is still usable.
    MemoryRegion::new(&pd, 4096, Access::Local).expect("a small region");
}

/// The lender's half of a window test: one PD and CQ on rxe0 with a lendable region; the
/// reader's half on rxe1. Connections are made on demand, each a fresh pair of QPs.
struct WindowRig {
    lender_pd: Arc<ProtectionDomain>,
    lender_cq: Arc<CompletionQueue>,
    lender_seen: Vec<Completion>,
    reader_pd: Arc<ProtectionDomain>,
    reader_cq: Arc<CompletionQueue>,
    reader_seen: Vec<Completion>,
    reader_ring: MemoryRegion,
    target: MemoryRegion,
}

impl WindowRig {
    fn new(ctx_a: &Arc<Context>, ctx_b: &Arc<Context>) -> WindowRig {
        let lender_pd = Arc::new(
            ProtectionDomain::new(ctx_a, crate::memlock::Account::unlimited()).expect("pd"),
        );
        let reader_pd = Arc::new(
            ProtectionDomain::new(ctx_b, crate::memlock::Account::unlimited()).expect("pd"),
        );
        let reader_ring = MemoryRegion::new(&reader_pd, RING, Access::Local).expect("ring");
        let target = MemoryRegion::new(&reader_pd, 256 * 1024, Access::Local).expect("target");
        WindowRig {
            lender_cq: Arc::new(
                CompletionQueue::new(ctx_a, DEFAULT_CQ_DEPTH, None, 0).expect("cq"),
            ),
            reader_cq: Arc::new(
                CompletionQueue::new(ctx_b, DEFAULT_CQ_DEPTH, None, 0).expect("cq"),
            ),
            lender_pd,
            reader_pd,
            lender_seen: Vec::new(),
            reader_seen: Vec::new(),
            reader_ring,
            target,
        }
    }

    /// A connected pair: (lender's QP, reader's QP), with the reader's ring posted
    /// (work-request ids `base + slot`: flushed RECVs of failed pairs land on the same CQ).
    fn connect(&self, base: u64) -> (QueuePair<Rts>, QueuePair<Rts>) {
        let lender = QueuePair::new(
            &self.lender_pd,
            &self.lender_cq,
            &self.lender_cq,
            &QpConfig::default(),
        )
        .expect("qp")
        .into_init()
        .expect("INIT");
        let reader = QueuePair::new(
            &self.reader_pd,
            &self.reader_cq,
            &self.reader_cq,
            &QpConfig::default(),
        )
        .expect("qp")
        .into_init()
        .expect("INIT");
        let recvs: Vec<_> = (0..RING / SLOT)
            .map(|s| (WrId(base + s as u64), s * SLOT, SLOT))
            .collect();
        // SAFETY: the ring outlives the QPs (the rig is dropped after them in each test),
        // and a slot is read only after its RECV completion was reaped.
        unsafe { reader.post_recv_batch(&self.reader_ring, &recvs) }.expect("recvs");
        let (ep_l, ep_r) = (lender.endpoint(), reader.endpoint());
        let lender = lender
            .into_rtr(&ep_r)
            .expect("RTR")
            .into_rts()
            .expect("RTS");
        let reader = reader
            .into_rtr(&ep_l)
            .expect("RTR")
            .into_rts()
            .expect("RTS");
        (lender, reader)
    }

    /// READs `len` bytes at `remote` into the target; the completion's status.
    fn read(
        &mut self,
        qp: &QueuePair<Rts>,
        wr_id: u64,
        remote: RemoteBuf,
        len: usize,
    ) -> std::result::Result<(), WcStatus> {
        self.target.as_mut_slice().fill(0);
        // SAFETY: the target is not touched until the completion is reaped below.
        unsafe { qp.post_read(WrId(wr_id), &self.target, 0, len, remote) }.expect("post read");
        wait_for(&self.reader_cq, &mut self.reader_seen, WrId(wr_id)).status
    }
}

#[test]
fn a_memory_window_lends_one_region_to_one_peer_until_invalidated() {
    let Some((ctx_a, ctx_b)) = open_pair_or_skip() else {
        return;
    };
    let mut rig = WindowRig::new(&ctx_a, &ctx_b);
    const LEN: usize = 128 * 1024;
    let secret = pattern(0x3c, LEN);
    let mut lent = MemoryRegion::new(&rig.lender_pd, LEN, Access::Windowed).expect("windowed");
    lent.as_mut_slice().copy_from_slice(&secret);
    assert_eq!(lent.nic_addr(), 0, "lendable regions are addressed from 0");
    let mut window = MemoryWindow::new(&rig.lender_pd).expect("type-2 window");
    let unbound_key = window.rkey();

    // Bind (unsignaled) and SEND the descriptor at once, without waiting for the bind:
    // the reader READs as soon as the SEND arrives, so the bind must take effect first.
    let (lender, reader) = rig.connect(1000);
    // SAFETY: `lent` is neither written nor dropped until after the invalidation below
    // completed (and the QPs are dropped at the end of the test, before it).
    let rkey =
        unsafe { lender.post_bind_mw(WrId(1), &mut window, &lent, 0, LEN, false) }.expect("bind");
    assert_ne!(rkey, unbound_key);
    assert_eq!(
        rkey >> 8,
        unbound_key >> 8,
        "a bind changes only the key byte"
    );
    let descriptor = [rkey.to_le_bytes(), (LEN as u32).to_le_bytes()].concat();
    lender
        .post_send_inline(WrId(2), &descriptor, true, None)
        .expect("descriptor");
    let c = wait_for(&rig.reader_cq, &mut rig.reader_seen, WrId(1000));
    assert_eq!(c.status, Ok(()));
    let got = rig.reader_ring.slice(0, 8).expect("slot");
    let remote = RemoteBuf {
        addr: 0,
        rkey: u32::from_le_bytes(got[..4].try_into().unwrap()),
    };
    assert_eq!(
        rig.read(&reader, 10, remote, LEN),
        Ok(()),
        "READ through the window"
    );
    assert!(
        rig.target.slice(0, LEN).unwrap() == &secret[..],
        "window content"
    );
    // An offset inside the window.
    let inside = RemoteBuf { addr: 4096, rkey };
    assert_eq!(rig.read(&reader, 11, inside, 4096), Ok(()));
    assert_eq!(rig.target.slice(0, 4096).unwrap(), &secret[4096..8192]);
    eprintln!("window bound without waiting, read by its peer: {LEN} bytes match");

    // Another connection (same PDs, other QPs) cannot use the window.
    let (_other_lender, other_reader) = rig.connect(2000);
    assert_eq!(
        rig.read(&other_reader, 20, remote, 64),
        Err(WcStatus::RemAccess),
        "a type-2 window is bound to one QP"
    );
    // The region's own rkey grants nothing.
    let (_third_lender, third_reader) = rig.connect(3000);
    let own = RemoteBuf {
        addr: 0,
        rkey: lent.rkey(),
    };
    assert_eq!(
        rig.read(&third_reader, 30, own, 64),
        Err(WcStatus::RemAccess)
    );
    eprintln!("other connection's READ with the window key, and the region's key: RemAccess");

    // After LOCAL_INV the key is stale.
    lender
        .post_local_inv(WrId(3), rkey, true)
        .expect("local inv");
    let c = wait_for(&rig.lender_cq, &mut rig.lender_seen, WrId(3));
    assert_eq!(c.status, Ok(()), "{c:?}");
    assert_eq!(rig.read(&reader, 12, remote, 64), Err(WcStatus::RemAccess));
    eprintln!("stale key after invalidation: RemAccess");

    // The transport keeps a connection's windows for its next loans: bind, invalidate and
    // bind again on one QP; each bind has a new key and the old one stays dead.
    let (lender2, reader2) = rig.connect(4000);
    let mut window2 = MemoryWindow::new(&rig.lender_pd).expect("window");
    let mut keys = Vec::new();
    for round in 0..3u64 {
        // SAFETY: as for the first bind; `lent` outlives both QPs.
        let key =
            unsafe { lender2.post_bind_mw(WrId(100 + round), &mut window2, &lent, 0, LEN, false) }
                .expect("bind");
        lender2
            .post_send_inline(WrId(200 + round), &[0; 8], true, None)
            .expect("send");
        let c = wait_for(&rig.reader_cq, &mut rig.reader_seen, WrId(4000 + round));
        assert_eq!(
            c.status,
            Ok(()),
            "round {round}: {c:?} (lender: {:?})",
            rig.lender_seen
        );
        let at = RemoteBuf { addr: 0, rkey: key };
        assert_eq!(
            rig.read(&reader2, 300 + round, at, 256),
            Ok(()),
            "round {round}"
        );
        assert_eq!(rig.target.slice(0, 256).unwrap(), &secret[..256]);
        lender2
            .post_local_inv(WrId(400 + round), key, true)
            .expect("local inv");
        let c = wait_for(&rig.lender_cq, &mut rig.lender_seen, WrId(400 + round));
        assert_eq!(c.status, Ok(()), "{c:?}");
        keys.push(key);
    }
    keys.dedup();
    assert_eq!(keys.len(), 3, "every bind has its own key: {keys:x?}");
    let stale = RemoteBuf {
        addr: 0,
        rkey: keys[1],
    };
    assert_eq!(rig.read(&reader2, 41, stale, 64), Err(WcStatus::RemAccess));
    eprintln!("one window bound, read, invalidated 3 times on one QP; a stale key fails");
    // Binding over a region without MW_BIND is refused before posting.
    let plain = MemoryRegion::new(&rig.lender_pd, 4096, Access::Local).expect("plain");
    let mut w2 = MemoryWindow::new(&rig.lender_pd).expect("window");
    // SAFETY: refused before anything is posted.
    let refused = unsafe { lender2.post_bind_mw(WrId(6), &mut w2, &plain, 0, 4096, false) };
    assert!(
        matches!(refused, Err(Error::Unsupported { .. })),
        "{refused:?}"
    );
    drop((lender, reader, lender2, reader2));
}
