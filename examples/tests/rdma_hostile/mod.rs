//! Hostile RDMA peers (issue 7, items 10 and 11) against a real `echo-server` process on
//! rxe1, built on the transport's own verbs layer (`rdmarpc_transport_rdma::test_peer`): forged
//! descriptors, reads with other connections' and stale keys, loans never read. Each case
//! asserts that the forger's connection is closed, that a well-behaved client is served
//! meanwhile, that the server's pinned memory stays bounded, and that no peer obtains
//! bytes lent to another connection (on content). Isolation comes from a protection
//! domain per connection (docs/limits.md, "Memory isolation").

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use examples::echo::echo_client::EchoClient;
use examples::echo::{EchoReply, EchoRequest};
use prost::Message as _;
use rdmarpc_core::wire::{Flags, Frame, FrameKind, Header};
use rdmarpc_core::Metadata;
use rdmarpc_transport_rdma::test_peer::{Descriptor, HelloLimits, Message, RawPeer};

use super::{rdma_channel, settings, wait_for_port, BIG, NETWORK, SERVER_IP};

mod pushed;

const ECHO: u32 = rdmarpc_core::codegen::method_id("/echo.Echo/Echo");
/// The raw peers never answer pings: the servers here do not ping within a test.
const NO_PINGS: [(&str, &str); 2] = [
    ("RPC_RDMA_PING_INTERVAL_MS", "60000"),
    ("RPC_RDMA_PING_TIMEOUT_MS", "120000"),
];

/// An echo-server process serving rdma:// on rxe1, killed on drop.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(port: u16, env: &[(&str, &str)]) -> Server {
        let addr = format!("{SERVER_IP}:{port}");
        let child = Command::new(env!("CARGO_BIN_EXE_echo-server"))
            .args(["--addr", &format!("rdma://{addr}")])
            .envs(NO_PINGS.iter().chain(env).copied())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("start echo-server");
        Server { child, addr }
    }

    fn socket(&self) -> SocketAddr {
        self.addr.parse().unwrap()
    }

    /// A field of /proc/PID/status in KiB (VmPin: memory pinned by registrations).
    fn status_kib(&self, field: &str) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A request frame of the echo method.
fn echo_frame(call_id: u64, request: &EchoRequest) -> Vec<u8> {
    let mut header = Header::new(FrameKind::Request, call_id);
    header.flags = Flags::END_STREAM;
    header.method_id = ECHO;
    header.payload_len = request.encoded_len() as u32;
    let mut buf = Vec::new();
    rdmarpc_core::wire::encode_head(&mut header, &Metadata::new(), &mut buf);
    request.encode_raw(&mut buf);
    buf
}

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i ^ seed).wrapping_mul(2_654_435_761).rotate_right(11) as u8)
        .collect()
}

/// A small echo request frame (a 16-byte payload).
fn request(call_id: u64) -> Vec<u8> {
    echo_frame(
        call_id,
        &EchoRequest {
            payload: pattern(call_id as u32, 16).into(),
            ..Default::default()
        },
    )
}

/// A fresh well-behaved rdma:// client makes one echo call, content checked, within 10 s.
async fn good_call(addr: &str) {
    let call = async {
        let client = EchoClient::new(rdma_channel(addr, BIG, &settings(BIG)).await);
        let payload = pattern(7, 1000);
        let reply = client
            .echo(EchoRequest {
                payload: payload.clone().into(),
                ..Default::default()
            })
            .await
            .expect("a good client is served");
        assert_eq!(reply.into_inner().payload, payload);
    };
    tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("good client served within 10 s");
}

/// Runs raw-peer work on a blocking thread.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

fn connect(addr: SocketAddr) -> RawPeer {
    RawPeer::connect(addr, HelloLimits::default()).expect("raw peer connects")
}

/// Leaves the server without credit on `peer`'s connection: the peer stops advertising
/// the receive slots it re-posts, then makes calls until their answers stop coming (the
/// server used every slot the peer granted, bar the one it keeps for a control message).
fn exhaust_credit(peer: &mut RawPeer) {
    peer.withhold_credits = true;
    for call in 1..=80 {
        peer.send_frame(&request(call)).expect("a call");
        // An answer, or none within 2 s once the server holds its last credit (63 of
        // the 64 used); before that, a slow guest gets up to 20 s.
        let deadline = Instant::now() + Duration::from_secs(20);
        let answered = loop {
            match peer.recv(Duration::from_secs(2)) {
                Ok(Message::Data(_)) => break true,
                Ok(_) => {}
                Err(_) if peer.received() >= 63 => break false,
                Err(e) => assert!(Instant::now() < deadline, "call {call}: {e}"),
            }
        };
        if !answered {
            return;
        }
    }
    panic!("the server kept answering past the 64 slots it was granted");
}

/// Receives until a rendezvous descriptor arrives (read-done tokens are collected).
fn next_descriptor(peer: &mut RawPeer, tokens: &mut Vec<u64>) -> Descriptor {
    loop {
        match peer.recv(Duration::from_secs(20)).expect("a message") {
            Message::Rendezvous(d) => return d,
            Message::Control { tokens: t, .. } => tokens.extend(t),
            Message::Data(frame) => panic!("unexpected frame {:?}", Header::decode(&frame)),
            m @ (Message::Pushed(_) | Message::Piece { .. }) => panic!("unexpected push {m:?}"),
        }
    }
}

macro_rules! guest_test {
    ($name:ident, $body:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            if super::skip() {
                return;
            }
            let _net = NETWORK.read().await;
            $body.await;
        }
    };
}

guest_test!(
    forged_descriptors_close_the_forgers_connection_only,
    forged_descriptors()
);
guest_test!(
    a_peer_reads_only_what_its_own_connection_was_lent,
    reads_only_its_own_loans()
);
guest_test!(
    loans_never_read_keep_the_server_memory_bounded,
    loans_never_read()
);
guest_test!(
    idle_connections_register_64_kib_and_rings_grow_with_use,
    rings_grow_with_use()
);
guest_test!(
    pushed_frames_are_served_and_forged_pieces_close_the_pushers_connection_only,
    pushed::pushed_frames()
);

/// Forty idle connections cost the server at most 64 KiB of registered memory each (two
/// rings of 4 slots of 8 KiB); one busy connection's rings grow (its calls all answered),
/// and only that connection's.
async fn rings_grow_with_use() {
    const IDLE: usize = 40;
    let server = Server::start(47104, &[]);
    wait_for_port(&server.addr).await;
    good_call(&server.addr).await;
    let pinned_before = server.status_kib("VmPin:");
    let mut channels = Vec::new();
    for _ in 0..IDLE {
        let channel = rdma_channel(&server.addr, BIG, &settings(BIG)).await;
        EchoClient::new(channel.clone())
            .echo(EchoRequest::default())
            .await
            .expect("served");
        channels.push(channel);
    }
    let pinned_idle = server.status_kib("VmPin:");
    let per_connection = (pinned_idle - pinned_before) / IDLE as u64;
    let first = channels[0].connection().unwrap().rdma_counters().unwrap();
    eprintln!(
        "server VmPin {pinned_before} KiB, with {IDLE} more idle connections {pinned_idle} KiB: \
         {per_connection} KiB each; a fresh connection's rings: {} send, {} receive slots",
        first.send_slots, first.recv_slots
    );
    assert!(
        pinned_idle > pinned_before,
        "VmPin is not measured on this kernel"
    );
    assert!(
        per_connection <= 64,
        "{per_connection} KiB per idle connection"
    );
    assert_eq!((first.send_slots, first.recv_slots), (4, 4), "{first:?}");

    // One connection, 48 calls in flight at once: its rings grow, every call is answered.
    let busy = channels[0].clone();
    let callers: Vec<_> = (0..48u32)
        .map(|w| {
            let client = EchoClient::new(busy.clone());
            tokio::spawn(async move {
                for i in 0..20u32 {
                    let payload = pattern(w * 100 + i, 100);
                    let reply = client
                        .echo(EchoRequest {
                            payload: payload.clone().into(),
                            ..Default::default()
                        })
                        .await
                        .expect("answered");
                    assert_eq!(reply.into_inner().payload, payload, "caller {w} call {i}");
                }
            })
        })
        .collect();
    for c in callers {
        c.await.unwrap();
    }
    let grown = busy.connection().unwrap().rdma_counters().unwrap();
    let pinned_busy = server.status_kib("VmPin:");
    eprintln!(
        "after 48 x 20 calls on one connection: its rings {} send, {} receive slots, \
         {} credit stalls; server VmPin {pinned_busy} KiB",
        grown.send_slots, grown.recv_slots, grown.credit_stalls
    );
    // The client ran short of credit, so the server's receive ring grew and granted it
    // more slots, which the client's send ring followed.
    assert!(grown.send_slots > 4, "{grown:?}");
    assert_eq!(grown.errors, 0);
    // At most 64 slots of 8 KiB in each ring of that one connection.
    assert!(
        pinned_busy <= pinned_idle + 2 * 64 * 8,
        "server VmPin {pinned_busy} KiB"
    );
    let other = channels[1].connection().unwrap().rdma_counters().unwrap();
    assert_eq!((other.send_slots, other.recv_slots), (4, 4), "{other:?}");
}

async fn forged_descriptors() {
    // Sixteen receive slots from the start: the forger of too many loans has the credit
    // to send all sixteen while the server, out of credit, cannot return any.
    let mut server = Server::start(
        47101,
        &[
            ("RPC_RDMA_MAX_LOANS", "8"),
            ("RPC_RDMA_INITIAL_RING_SLOTS", "16"),
        ],
    );
    wait_for_port(&server.addr).await;
    good_call(&server.addr).await;
    let addr = server.socket();
    let small = echo_frame(
        1,
        &EchoRequest {
            payload: pattern(1, 20_000).into(),
            ..Default::default()
        },
    );

    // Each case: a fresh forger, one lie, its connection closed, others served.
    type Case = fn(&mut RawPeer, SocketAddr, &[u8]);
    let cases: [(&str, Case); 10] = [
        (
            "an inline head that is not the frame's start",
            |peer, _, frame| {
                let mut d = peer.lend(&frame[100..], 1).unwrap();
                d.header = frame[..rdmarpc_core::wire::HEADER_LEN].try_into().unwrap();
                d.head = frame[..100].to_vec();
                d.head[4] ^= 0xff; // the header inline differs from the one declared
                peer.send_descriptor(d).unwrap();
            },
        ),
        (
            "an inline head and lent bytes that overrun the frame",
            |peer, _, frame| {
                let mut d = peer.lend(frame, 1).unwrap();
                d.head = frame[..100].to_vec(); // and the whole frame lent besides
                peer.send_descriptor(d).unwrap();
            },
        ),
        (
            "a batch announcing more frames than it holds",
            |peer, _, _| {
                let two = [request(1), request(2)].concat();
                peer.send_batch(&two, 3).unwrap();
            },
        ),
        (
            "a batch whose last frame overruns the message",
            |peer, _, _| {
                let mut two = [request(1), request(2)].concat();
                two.truncate(two.len() - 1);
                peer.send_batch(&two, 2).unwrap();
            },
        ),
        ("a batch of more frames than allowed", |peer, _, _| {
            let many: Vec<u8> = (1..=65).flat_map(request).collect();
            peer.send_batch(&many, 65).unwrap();
        }),
        ("a length far beyond its frame header", |peer, _, frame| {
            let mut d = peer.lend(frame, 1).unwrap();
            d.len = 1 << 40;
            peer.send_descriptor(d).unwrap();
        }),
        ("a bogus key and address", |peer, _, frame| {
            let mut d = peer.lend(frame, 1).unwrap();
            d.rkey ^= 0x005a_5a00;
            d.offset = 0x7fff_dead_0000;
            peer.send_descriptor(d).unwrap();
        }),
        (
            "another connection's key and address",
            |peer, addr, frame| {
                let mut other = connect(addr);
                let theirs = other.lend(frame, 1).unwrap();
                peer.send_descriptor(theirs).unwrap();
                // Kept open until the forger is judged.
                std::thread::sleep(Duration::from_millis(500));
                drop(other);
            },
        ),
        ("a read-done for a token never lent", |peer, _, _| {
            peer.send_read_done(&[0xdead_beef]).unwrap();
        }),
        ("more loans at once than the 8 agreed", |peer, _, _| {
            assert_eq!(
                peer.peer_limits.max_loans, 8,
                "the server announced its limit"
            );
            exhaust_credit(peer);
            let big = echo_frame(
                1,
                &EchoRequest {
                    payload: pattern(2, 1 << 20).into(),
                    ..Default::default()
                },
            );
            // The server can no longer send a read-done (at most one, on the credit it
            // keeps for a control message), so loans it has read still count: the ninth
            // or tenth descriptor is over the limit whatever the speed of its READs.
            let loans: Vec<_> = (1..=16u64)
                .map(|token| {
                    let mut frame = big.clone();
                    frame[8..16].copy_from_slice(&token.to_le_bytes()); // call id
                    peer.lend(&frame, token).unwrap()
                })
                .collect();
            for d in loans {
                if peer.send_descriptor(d).is_err() {
                    break; // closed already
                }
            }
        }),
    ];
    for (what, case) in cases {
        let frame = small.clone();
        let started = Instant::now();
        let closed = blocking(move || {
            let mut peer = connect(addr);
            case(&mut peer, addr, &frame);
            peer.closed_by_peer(Duration::from_secs(15))
        })
        .await;
        eprintln!(
            "forged descriptor, {what}: closed = {closed} after {:?}",
            started.elapsed()
        );
        assert!(closed, "{what}: the forger's connection stays open");
        assert!(server.alive(), "{what}: the server died");
        good_call(&server.addr).await;
    }

    // An honest descriptor with the frame's first bytes inline is served, and so is the
    // reply: lent from where the request landed, its own first bytes inline.
    let echoed = blocking(move || {
        let mut peer = connect(addr);
        let mut d = peer.lend(&small[100..], 1).unwrap();
        d.header = small[..rdmarpc_core::wire::HEADER_LEN].try_into().unwrap();
        d.head = small[..100].to_vec();
        peer.send_descriptor(d).unwrap();
        let mut tokens = Vec::new();
        let reply = next_descriptor(&mut peer, &mut tokens);
        let lent = peer
            .read(reply.offset, reply.rkey, reply.len as usize)
            .expect("reads the reply");
        peer.send_read_done(&[reply.token]).unwrap();
        let bytes = [reply.head.clone(), lent].concat();
        let frame = Frame::parse(&bytes).expect("a response frame");
        EchoReply::decode(frame.payload)
            .expect("an echo reply")
            .payload
    })
    .await;
    assert!(
        echoed == pattern(1, 20_000),
        "the inline-head request's echo"
    );

    // An honest batch (three requests in one message) is answered call by call.
    let answered = blocking(move || {
        let mut peer = connect(addr);
        let three = [request(11), request(12), request(13)].concat();
        peer.send_batch(&three, 3).unwrap();
        let mut calls = Vec::new();
        while calls.len() < 3 {
            match peer.recv(Duration::from_secs(10)).expect("answered") {
                Message::Data(frame) => {
                    let frame = Frame::parse(&frame).expect("a response frame");
                    let reply = EchoReply::decode(frame.payload).expect("an echo reply");
                    let call = frame.header.call_id;
                    assert_eq!(reply.payload, pattern(call as u32, 16), "call {call}");
                    calls.push(call);
                }
                Message::Control { .. } => {}
                m => panic!("unexpected {m:?}"),
            }
        }
        calls.sort_unstable();
        (calls, !peer.closed_by_peer(Duration::from_millis(500)))
    })
    .await;
    assert_eq!(answered, (vec![11, 12, 13], true));

    // An honest descriptor of a frame over the size limit is refused unread: the call
    // fails with a status and the loan is released at once; the connection lives on.
    let released = blocking(move || {
        let mut peer = connect(addr);
        let mut frame = echo_frame(9, &EchoRequest::default());
        let mut header = Header::decode(&frame).unwrap().unwrap();
        header.payload_len = 64 << 20;
        frame[..40].copy_from_slice(&header.encode());
        let mut d = peer.lend(&frame, 77).unwrap();
        d.len = header.frame_len() as u64;
        peer.send_descriptor(d).unwrap();
        let mut tokens = Vec::new();
        let mut answered = false;
        while !(answered && tokens.contains(&77)) {
            match peer.recv(Duration::from_secs(10)).expect("answered") {
                Message::Control { tokens: t, .. } => tokens.extend(t),
                Message::Data(frame) => {
                    let header = Header::decode(&frame).unwrap().unwrap();
                    assert_eq!(header.call_id, 9);
                    answered = true;
                }
                m => panic!("unexpected {m:?}"),
            }
        }
        !peer.closed_by_peer(Duration::from_millis(500))
    })
    .await;
    assert!(
        released,
        "an oversized honest frame does not close the connection"
    );
    good_call(&server.addr).await;
}

async fn reads_only_its_own_loans() {
    let server = Server::start(47102, &[]);
    wait_for_port(&server.addr).await;
    let addr = server.socket();
    let secret = pattern(0x5ec7e7, 64 * 1024);
    let expected = secret.clone();
    let outcome = blocking(move || {
        // The victim lends its request (64 KiB: rendezvous); the server reads it, keeps
        // it, and lends the echoed payload back from where it landed (the reply's first
        // bytes inline in the descriptor), by a key valid on the victim's QP only.
        let mut victim = connect(addr);
        let frame = echo_frame(
            1,
            &EchoRequest {
                payload: secret.into(),
                ..Default::default()
            },
        );
        let d = victim.lend(&frame, 1).unwrap();
        victim.send_descriptor(d).unwrap();
        let mut tokens = Vec::new();
        let reply = next_descriptor(&mut victim, &mut tokens);
        // On iWARP lent buffers keep their addresses (Soft-iWARP ignores a region's
        // IOVA: docs/fabrics.md); everywhere else a peer learns offsets only.
        let iwarp = std::env::var("SOFTROCE_PROVIDER").is_ok_and(|p| p == "siw");
        assert!(
            iwarp || reply.offset < 1 << 20,
            "descriptors carry offsets, not addresses: {}",
            reply.offset
        );
        eprintln!(
            "victim's reply lent: {} bytes, rkey {:#x}",
            reply.len, reply.rkey
        );

        // Another connection READs with the victim's key: refused, and closed.
        let mut thief = connect(addr);
        let stolen = thief.read(reply.offset, reply.rkey, reply.len as usize);
        assert!(stolen.is_err(), "another connection read the victim's loan");
        let thief_closed = thief.closed_by_peer(Duration::from_secs(15));
        // Guesses at neighbouring windows (next key byte, next window index).
        let mut guesses = Vec::new();
        for rkey in [reply.rkey.wrapping_add(1), reply.rkey.wrapping_add(0x100)] {
            let mut guesser = connect(addr);
            guesses.push(
                guesser
                    .read(0, rkey, 4096)
                    .map(|b| b.iter().any(|&x| x != 0)),
            );
        }

        // The victim reads its own loan: the secret.
        let lent = victim
            .read(reply.offset, reply.rkey, reply.len as usize)
            .expect("the victim reads its loan");
        let bytes = [reply.head.clone(), lent.clone()].concat();
        let frame = Frame::parse(&bytes).expect("a frame");
        let echoed = EchoReply::decode(frame.payload).expect("a reply").payload;
        // After its read-done the victim may still read the buffer with the key (a
        // protection domain per connection, not a window per transfer): it holds only
        // this connection's own frames (here, still its own reply), never another's.
        victim.send_read_done(&[reply.token]).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let stale = victim
            .read(reply.offset, reply.rkey, 64)
            .map(|b| b == lent[..64]);
        (stolen, thief_closed, guesses, echoed, stale)
    })
    .await;
    let (stolen, thief_closed, guesses, echoed, stale) = outcome;
    eprintln!("thief: {stolen:?}; guesses: {guesses:?}; stale key read own bytes: {stale:?}");
    assert!(echoed == expected, "the victim's reply is its secret");
    assert!(thief_closed, "the thief's connection is closed");
    for guess in &guesses {
        assert!(guess.is_err(), "a guessed key read something: {guesses:?}");
    }
    assert!(
        stale.unwrap_or(true),
        "a stale key read something other than the connection's own frame"
    );
    good_call(&server.addr).await;
}

async fn loans_never_read() {
    let mut server = Server::start(
        47103,
        &[
            ("RPC_RDMA_LEND_BUDGET", "2097152"),
            ("RPC_RDMA_MAX_LOANS", "16"),
            // Long enough for the flood below (its rings grow from 4 slots as it goes) and
            // the measurement after it, which must see the loans still held.
            ("RPC_RDMA_LOAN_TIMEOUT_MS", "8000"),
        ],
    );
    wait_for_port(&server.addr).await;
    good_call(&server.addr).await;
    let pinned_before = server.status_kib("VmPin:");
    let addr = server.socket();
    const CALLS: u64 = 160;
    const REPLY: u32 = 256 * 1024;
    // Up to 160 calls asking for 256 KiB replies (40 MiB), never read. The server lends
    // what its budget allows; the calls whose replies wait keep their receive slots, so
    // the peer runs out of credits: backpressure, not memory.
    let (tx, rx) = std::sync::mpsc::channel();
    let flood = tokio::task::spawn_blocking(move || {
        let mut peer = connect(addr);
        let (mut sent, mut lent) = (0, 0);
        let mut quiet_since = Instant::now();
        while sent < CALLS && quiet_since.elapsed() < Duration::from_secs(2) {
            if peer.credits() > 0 {
                let frame = echo_frame(
                    sent + 1,
                    &EchoRequest {
                        reply_size: REPLY,
                        ..Default::default()
                    },
                );
                peer.send_frame(&frame).unwrap();
                sent += 1;
                quiet_since = Instant::now();
            } else if let Ok(message) = peer.recv(Duration::from_millis(200)) {
                if matches!(message, Message::Rendezvous(_)) {
                    lent += 1;
                }
                quiet_since = Instant::now();
            }
        }
        while let Ok(message) = peer.recv(Duration::from_millis(500)) {
            if matches!(message, Message::Rendezvous(_)) {
                lent += 1;
            }
        }
        tx.send((sent, lent)).unwrap();
        let closed_at = Instant::now();
        let closed = peer.closed_by_peer(Duration::from_secs(20));
        (closed, closed_at.elapsed())
    });
    let (sent, lent) = tokio::task::spawn_blocking(move || rx.recv().unwrap())
        .await
        .unwrap();
    let pinned_during = server.status_kib("VmPin:");
    good_call(&server.addr).await;
    let (closed, after) = flood.await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pinned_after = server.status_kib("VmPin:");
    eprintln!(
        "{sent} calls (of {CALLS} tried) for {REPLY}-byte replies never read: {lent} lent (budget 2 MiB, 16 loans); \
         server VmPin {pinned_before} KiB before, {pinned_during} KiB during, {pinned_after} KiB after; \
         closed by the loan timeout (8 s): {closed}, {after:?} after the last loan was seen"
    );
    assert!(
        (1..=8).contains(&lent),
        "{lent} replies lent beyond a 2 MiB budget"
    );
    assert!(pinned_during > 0, "VmPin is not measured on this kernel");
    assert!(
        pinned_during < pinned_before + 8 * 1024,
        "the server pinned {} KiB more for loans never read",
        pinned_during - pinned_before
    );
    assert!(closed, "the loan timeout did not close the connection");
    assert!(server.alive());
    good_call(&server.addr).await;
}

guest_test!(
    long_lived_streams_hold_stream_slots_not_call_permits,
    streams_hold_slots()
);
guest_test!(
    loans_of_one_peer_are_charged_to_its_sending_share,
    loans_charged_per_peer()
);

/// Four connections of one peer ask for 256 KiB replies (rendezvous frames) and never
/// read them. Each connection alone may lend up to its budget (16 MiB); what they lend
/// together is charged to the peer's share of the server's sending bytes, here 2 MiB:
/// at most 7 such frames over the four connections (8 would be 2 MiB and 368 bytes).
/// Before the charge, each connection lent as many as its calls and credits allowed.
async fn loans_charged_per_peer() {
    let server = Server::start(
        47106,
        &[
            ("RPC_SERVER_MAX_SENDING_BYTES_PER_PEER", "2097152"),
            ("RPC_RDMA_LOAN_TIMEOUT_MS", "20000"),
        ],
    );
    wait_for_port(&server.addr).await;
    good_call(&server.addr).await;
    let addr = server.socket();
    const CALLS: u64 = 24;
    let floods: Vec<_> = (0..4)
        .map(|_| {
            tokio::task::spawn_blocking(move || {
                let mut peer = connect(addr);
                let (mut sent, mut lent) = (0, 0);
                let started = Instant::now();
                while started.elapsed() < Duration::from_secs(6) {
                    if sent < CALLS && peer.credits() > 0 {
                        let request = EchoRequest {
                            reply_size: 256 * 1024,
                            ..Default::default()
                        };
                        peer.send_frame(&echo_frame(sent + 1, &request)).unwrap();
                        sent += 1;
                    } else if let Ok(message) = peer.recv(Duration::from_millis(200)) {
                        if matches!(message, Message::Rendezvous(_)) {
                            lent += 1;
                        }
                    }
                }
                (sent, lent, peer)
            })
        })
        .collect();
    let mut results = Vec::new();
    for flood in floods {
        results.push(flood.await.unwrap());
    }
    let sent: u64 = results.iter().map(|r| r.0).sum();
    let lent: u64 = results.iter().map(|r| r.1).sum();
    eprintln!(
        "4 connections of one peer, {sent} calls for 256 KiB replies never read: {lent} lent (the peer's sending share: 2 MiB)"
    );
    assert!(sent >= 16, "only {sent} calls went");
    assert!(
        (1..=7).contains(&lent),
        "{lent} replies lent beyond the peer's 2 MiB"
    );
    // Small replies are eager (the ring, not the account): a client is served.
    good_call(&server.addr).await;
    drop(results);
}

const WATCH: u32 = rdmarpc_core::codegen::method_id("/grpc.health.v1.Health/Watch");

/// A `grpc.health.v1.Health/Watch` request frame (an empty request: every service).
fn watch_frame(call_id: u64) -> Vec<u8> {
    let mut header = Header::new(FrameKind::Request, call_id);
    header.flags = Flags::END_STREAM;
    header.method_id = WATCH;
    let mut buf = Vec::new();
    rdmarpc_core::wire::encode_head(&mut header, &Metadata::new(), &mut buf);
    buf
}

/// Forty `Watch` streams opened over rdma:// by a raw peer and left open, on a server
/// that runs at most 16 calls at once: when open streams held call permits (before the
/// accounts of `rdmarpc_core::account`), they took all 16 and every unary call waited (the
/// TCP twin, `hostile_accounts.rs`, measured it). They hold stream slots now: the raw
/// peer's own unary call and a well-behaved client's calls are served while they stay
/// open.
async fn streams_hold_slots() {
    let mut server = Server::start(47105, &[("RPC_SERVER_MAX_CONCURRENT_CALLS", "16")]);
    wait_for_port(&server.addr).await;
    good_call(&server.addr).await;
    let addr = server.socket();
    let (opened_tx, opened_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let holder = tokio::task::spawn_blocking(move || {
        let mut peer = connect(addr);
        let watches: Vec<u8> = (1..=40u64).flat_map(watch_frame).collect();
        peer.send_batch(&watches, 40).unwrap();
        peer.send_frame(&request(100)).unwrap();
        // Its own unary call is answered among the streams' first messages.
        let deadline = Instant::now() + Duration::from_secs(10);
        let (mut own, mut stream_messages) = (None, 0);
        while own.is_none() && Instant::now() < deadline {
            let Ok(Message::Data(bytes)) = peer.recv(Duration::from_secs(1)) else {
                continue;
            };
            // A message may hold several frames back to back.
            let mut at = 0;
            while let Ok(frame) = Frame::parse(&bytes[at..]) {
                at += frame.header.frame_len();
                match frame.header.call_id {
                    100 => own = Some(frame.header.status),
                    _ => stream_messages += 1,
                }
                if at >= bytes.len() {
                    break;
                }
            }
        }
        opened_tx.send((own, stream_messages)).unwrap();
        // The streams stay open until the good client is done.
        let _ = done_rx.recv_timeout(Duration::from_secs(60));
        drop(peer);
    });
    let (own, stream_messages) = blocking(move || opened_rx.recv().unwrap()).await;
    let started = Instant::now();
    for _ in 0..5 {
        good_call(&server.addr).await;
    }
    eprintln!(
        "40 Watch streams held open over rdma:// (16 call permits): the holder's own unary \
         call answered {own:?}, {stream_messages} stream frames seen; 5 good calls in {:?}",
        started.elapsed()
    );
    assert_eq!(own, Some(0), "the holder's own unary call is served (OK)");
    assert!(server.alive());
    done_tx.send(()).unwrap();
    holder.await.unwrap();
}
