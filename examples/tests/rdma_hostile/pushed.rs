//! Pushed frames (a sender that could not pin a buffer to lend pushes the frame in PIECE
//! messages): a raw peer's honest push is served and its loan ended by a read-done; forged
//! pieces close the forger's connection, and a well-behaved client is served meanwhile.

use std::time::{Duration, Instant};

use examples::echo::{EchoReply, EchoRequest};
use prost::Message as _;
use rdmarpc_core::wire::{Frame, Header, HEADER_LEN};
use rdmarpc_transport_rdma::test_peer::{Descriptor, Message, RawPeer};

use super::{blocking, echo_frame, good_call, pattern, request as request_frame, Server};

/// Bytes of a piece that fit the server's 8 KiB slots (after the prefix and the token).
const PIECE: usize = 8192 - 16 - 8;

/// A pushed descriptor of all of `frame` under `token` (nothing lent).
fn pushed(frame: &[u8], token: u64) -> Descriptor {
    Descriptor {
        offset: 0,
        len: frame.len() as u64,
        rkey: 0,
        token,
        header: frame[..HEADER_LEN].try_into().unwrap(),
        head: Vec::new(),
    }
}

/// Pushes `frame` honestly under `token`.
fn push(peer: &mut RawPeer, frame: &[u8], token: u64) {
    peer.send_pushed_descriptor(pushed(frame, token)).unwrap();
    for part in frame.chunks(PIECE) {
        peer.send_piece(token, part).unwrap();
    }
}

/// A raw peer, connecting again if the first attempts fail: once in a whole suite's run on
/// siw (38 tests at once), a raw peer's connect right after another raw peer's close was
/// reset (`Connection reset by peer`), while the same test alone passed three runs of
/// three. What is tested here is what follows the connect.
fn connect_again(addr: std::net::SocketAddr) -> RawPeer {
    for attempt in 1.. {
        match RawPeer::connect(
            addr,
            rdmarpc_transport_rdma::test_peer::HelloLimits::default(),
        ) {
            Ok(peer) => return peer,
            Err(e) if attempt < 3 => {
                eprintln!("raw peer connect, attempt {attempt}: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("raw peer connects: {e}"),
        }
    }
    unreachable!("returns or panics")
}

pub(super) async fn pushed_frames() {
    let mut server = Server::start(47106, &[]);
    crate::wait_for_port(&server.addr).await;
    good_call(&server.addr).await;
    let addr = server.socket();
    let request = echo_frame(
        3,
        &EchoRequest {
            payload: pattern(3, 30_000).into(),
            ..Default::default()
        },
    );

    // Honest: the request goes up whole, its echo comes back (lent: the server can pin),
    // and the push's loan ends with a read-done once the server consumed it.
    let frame = request.clone();
    let (echoed, done) = blocking(move || {
        let started = Instant::now();
        let mut peer = connect_again(addr);
        eprintln!("honest push: connected after {:?}", started.elapsed());
        push(&mut peer, &frame, 41);
        eprintln!("honest push: pushed after {:?}", started.elapsed());
        let mut tokens = Vec::new();
        let mut echoed = None;
        // Alone this takes 0.1 s on rxe; the whole suite at once in the emulated guest
        // once left it without a message for 10 s: the waits are generous, and the log
        // says when each message came.
        let deadline = Instant::now() + Duration::from_secs(60);
        while (echoed.is_none() || !tokens.contains(&41)) && Instant::now() < deadline {
            let message = peer.recv(Duration::from_secs(30)).expect("answered");
            eprintln!("honest push: {message:.60?} after {:?}", started.elapsed());
            match message {
                Message::Rendezvous(reply) => {
                    let lent = peer
                        .read(reply.offset, reply.rkey, reply.len as usize)
                        .expect("reads the reply");
                    peer.send_read_done(&[reply.token]).unwrap();
                    let bytes = [reply.head.clone(), lent].concat();
                    let frame = Frame::parse(&bytes).expect("a response frame");
                    let reply = EchoReply::decode(frame.payload).expect("an echo reply");
                    echoed = Some(reply.payload);
                }
                Message::Control { tokens: t, .. } => tokens.extend(t),
                m => panic!("unexpected {m:?}"),
            }
        }
        (echoed, tokens.contains(&41))
    })
    .await;
    assert!(
        echoed.as_deref() == Some(&pattern(3, 30_000)[..]),
        "the pushed request's echo"
    );
    assert!(done, "the push's loan ended by a read-done");

    // Forged: each closes the forger's connection, and only it.
    type Case = fn(&mut RawPeer, &[u8]);
    let cases: [(&str, Case); 5] = [
        ("a piece for a token never pushed", |peer, frame| {
            peer.send_piece(0xdead, &frame[..100]).unwrap();
        }),
        ("more bytes than the descriptor announced", |peer, frame| {
            // A frame of 100 bytes announced, 200 pushed.
            let mut header = Header::decode(frame).unwrap().unwrap();
            header.payload_len = (100 - HEADER_LEN - header.meta_len as usize) as u32;
            let mut d = pushed(frame, 5);
            d.len = 100;
            d.header = header.encode();
            peer.send_pushed_descriptor(d).unwrap();
            peer.send_piece(5, &[0; 200]).unwrap();
        }),
        ("a token pushed twice at once", |peer, frame| {
            peer.send_pushed_descriptor(pushed(frame, 6)).unwrap();
            peer.send_pushed_descriptor(pushed(frame, 6)).unwrap();
        }),
        ("a piece after the frame was whole", |peer, frame| {
            push(peer, frame, 7);
            peer.send_piece(7, &[1]).unwrap();
        }),
        (
            "more messages behind an unfinished push than an honest pusher sends",
            |peer, frame| {
                // Each is copied out and its slot re-posted at once: the server's bound
                // (2 x its 64 ring slots) ends it, not its memory.
                peer.send_pushed_descriptor(pushed(frame, 8)).unwrap();
                for call in 1..=400 {
                    if peer.send_frame(&request_frame(call)).is_err() {
                        break; // closed already
                    }
                }
            },
        ),
    ];
    for (what, case) in cases {
        let frame = request.clone();
        let closed = blocking(move || {
            let mut peer = connect_again(addr);
            case(&mut peer, &frame);
            peer.closed_by_peer(Duration::from_secs(15))
        })
        .await;
        eprintln!("forged push, {what}: closed = {closed}");
        assert!(closed, "{what}: the forger's connection stays open");
        assert!(server.alive(), "{what}: the server died");
        good_call(&server.addr).await;
    }
}
