//! The transport chosen by URL, on real sockets, in whichever build this is (with the
//! `rdma` feature, on a host without a device; or without it: `scripts/test` runs
//! `cargo test -p rdmarpc-transport --no-default-features` too).

use bytes::BufMut;
use rdmarpc_core::wire::{FrameKind, Header};
use rdmarpc_core::{Connection, Endpoint, Listener, TransportKind};
use rdmarpc_transport::{connect, AnyConnection, AnyListener, TransportSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A listener on 127.0.0.1 that echoes every frame back on its connection.
async fn echo_server(url: &str) -> u16 {
    let endpoint: Endpoint = url.parse().unwrap();
    let mut listener = AnyListener::bind(&endpoint, &TransportSettings::default())
        .await
        .unwrap();
    let port = listener.port();
    tokio::spawn(async move {
        while let Ok(conn) = listener.accept().await {
            tokio::spawn(async move {
                while let Ok(Some(frame)) = conn.recv().await {
                    let mut out = conn.alloc(frame.len()).await.unwrap();
                    out.put_slice(&frame);
                    drop(frame);
                    conn.send(out).await.unwrap();
                }
            });
        }
    });
    port
}

/// One request frame of `len` payload bytes there and back.
async fn round_trip(conn: &AnyConnection, id: u64, len: usize) {
    let mut header = Header::new(FrameKind::Request, id);
    header.payload_len = len as u32;
    let mut out = conn.alloc(header.frame_len()).await.unwrap();
    out.put_slice(&header.encode());
    out.put_slice(&vec![id as u8; len]);
    conn.send(out).await.unwrap();
    let back = conn.recv().await.unwrap().expect("a frame back");
    assert_eq!(back.len(), header.frame_len());
    assert!(back[rdmarpc_core::wire::HEADER_LEN..]
        .iter()
        .all(|&b| b == id as u8));
}

#[tokio::test]
async fn tcp_and_auto_clients_are_served_on_one_port() {
    let port = echo_server("auto://127.0.0.1:0").await;
    for scheme in ["tcp", "auto"] {
        let endpoint: Endpoint = format!("{scheme}://127.0.0.1:{port}").parse().unwrap();
        let conn = connect(&endpoint, &TransportSettings::default())
            .await
            .unwrap();
        if !rdmarpc_transport::rdma_available() {
            // No device here (or no RDMA in this build): auto:// is TCP.
            assert_eq!(conn.transport(), TransportKind::Tcp);
        }
        for (id, len) in [(1, 0), (2, 100), (3, 300_000)] {
            round_trip(&conn, id, len).await;
        }
    }
}

/// An RDMA client's hello on a server that does not serve RDMA (no device, or built
/// without RDMA) is refused with a reason, and the same socket then carries TCP frames.
#[tokio::test]
async fn an_rdma_hello_is_refused_and_the_socket_goes_on_as_tcp() {
    use rdmarpc_transport_tcp::rdma_hello::{read_refusal, BLOCK, HELLO, NONE};
    assert_eq!(
        &hello_block()[..8],
        HELLO,
        "the block below starts as RDMA's hello"
    );
    let port = echo_server("tcp://127.0.0.1:0").await;
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut socket = rdmarpc_transport_tcp::Socket::Plain(stream);
    socket.write_all(&hello_block()).await.unwrap();
    let mut block = [0u8; BLOCK];
    socket.read_exact(&mut block).await.unwrap();
    assert_eq!(&block[..8], NONE);
    let reason = read_refusal(&mut socket, &block).await.unwrap();
    assert!(
        reason.contains("TCP only") || reason.contains("without RDMA"),
        "{reason}"
    );
    let conn = AnyConnection::Tcp(
        rdmarpc_transport_tcp::TcpConnection::from_stream(socket, &Default::default()).unwrap(),
    );
    round_trip(&conn, 7, 1000).await;
}

/// A well-formed client offer (version 5, auto mode; the rdma_cm port and token are the
/// server's to give), as
/// `rdmarpc-transport-rdma`'s handshake writes it.
fn hello_block() -> [u8; 64] {
    let mut b = [0u8; 64];
    b[..8].copy_from_slice(b"RDMAHELO");
    b[8..12].copy_from_slice(&5u32.to_le_bytes()); // version
    b[12] = 2; // auto
    b[48..52].copy_from_slice(&64u32.to_le_bytes()); // recv_slots
    b[52..56].copy_from_slice(&8192u32.to_le_bytes()); // slot_size
    b[56..60].copy_from_slice(&(16u32 << 10).to_le_bytes()); // rdv_budget_kib
    b[60..62].copy_from_slice(&128u16.to_le_bytes()); // max_loans
    b
}

#[tokio::test]
async fn rdma_urls_fail_clearly_where_rdma_cannot_be_had() {
    if rdmarpc_transport::rdma_available() {
        return; // a host with a device: the guest suite covers rdma://
    }
    let endpoint: Endpoint = "rdma://127.0.0.1:1".parse().unwrap();
    let err = connect(&endpoint, &TransportSettings::default())
        .await
        .unwrap_err()
        .to_string();
    let expected = if cfg!(feature = "rdma") {
        "no RDMA device"
    } else {
        "built without RDMA"
    };
    assert!(
        err.contains(expected) && err.contains("use tcp://"),
        "{err}"
    );
    let err = AnyListener::bind(&endpoint, &TransportSettings::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(expected), "{err}");
}

/// A listener told to stop accepting closes its socket at once (a new client is refused,
/// as it would be by a restarted server's absence, instead of waiting in a backlog about to
/// be reset) and still yields the connections made before: here one still in the kernel's
/// backlog, with a request sent, which is answered.
#[tokio::test]
async fn a_stopped_listener_refuses_new_sockets_and_yields_the_ones_it_had() {
    let endpoint: Endpoint = "tcp://127.0.0.1:0".parse().unwrap();
    let mut listener = AnyListener::bind(&endpoint, &TransportSettings::default())
        .await
        .unwrap();
    let endpoint: Endpoint = listener.local_addr().parse().unwrap();
    // Connected by the kernel; `accept` has not been called, so it is in the backlog.
    let early = connect(&endpoint, &TransportSettings::default())
        .await
        .unwrap();
    let mut header = Header::new(FrameKind::Request, 7);
    header.payload_len = 3;
    let mut out = early.alloc(header.frame_len()).await.unwrap();
    out.put_slice(&header.encode());
    out.put_slice(b"abc");
    early.send(out).await.unwrap();

    assert!(listener.stop_accepting());
    let refused = connect(&endpoint, &TransportSettings::default()).await;
    assert!(refused.is_err(), "a new socket is refused once stopped");

    let conn = tokio::time::timeout(std::time::Duration::from_secs(10), listener.accept())
        .await
        .expect("the early connection is yielded")
        .unwrap();
    let frame = conn.recv().await.unwrap().expect("its request");
    let mut out = conn.alloc(frame.len()).await.unwrap();
    out.put_slice(&frame);
    drop(frame);
    conn.send(out).await.unwrap();
    let back = early.recv().await.unwrap().expect("the answer");
    assert_eq!(&back[rdmarpc_core::wire::HEADER_LEN..], b"abc");
    assert!(
        matches!(
            listener.accept().await,
            Err(rdmarpc_core::TransportError::Closed)
        ),
        "then the listener is done"
    );
}

/// Hostile: a backlog of sockets that never send a byte, when a shutdown stops the
/// listener, costs at most `max_handshakes` handshakes (the others are closed at once),
/// each ended by `handshake_timeout`: the listener is done within that timeout instead of
/// holding the shutdown for as long as the peers keep their sockets open.
#[tokio::test]
async fn a_silent_backlog_at_the_stop_is_bounded_by_the_handshake_limits() {
    let endpoint: Endpoint = "tcp://127.0.0.1:0".parse().unwrap();
    let mut settings = TransportSettings::default();
    settings.max_handshakes = 4;
    settings.handshake_timeout = std::time::Duration::from_millis(300);
    let mut listener = AnyListener::bind(&endpoint, &settings).await.unwrap();
    let addr = listener.local_addr().replace("tcp://", "");
    let mut silent = Vec::new();
    for _ in 0..32 {
        silent.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    assert!(listener.stop_accepting());
    let start = std::time::Instant::now();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), listener.accept())
        .await
        .expect("the listener is done once the handshakes time out");
    assert!(matches!(ended, Err(rdmarpc_core::TransportError::Closed)));
    let waited = start.elapsed();
    // Closed at once (28) or by the handshake timeout (4): every socket sees its end.
    let mut closed = 0;
    for mut socket in silent {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(std::time::Duration::from_secs(5), socket.read(&mut byte))
            .await
            .expect("every silent socket is closed");
        if matches!(read, Ok(0) | Err(_)) {
            closed += 1;
        }
    }
    assert_eq!(closed, 32);
    eprintln!("listener done {waited:?} after the stop");
}
