//! End to end over TCP on 127.0.0.1: the shared suite, plus what only a socket can do
//! (hostile byte streams, a peer that vanishes, graceful shutdown of a listener).

mod suite;

use std::sync::atomic::Ordering;
use std::time::Duration;

use examples::echo::echo_client::EchoClient;
use examples::echo::EchoRequest;
use rand::{Rng, SeedableRng};
use rdmarpc_core::{Channel, ClientConfig, Code, Server};
use rdmarpc_transport_tcp::{TcpConfig, TcpConnection, TcpListener};
use suite::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

struct Tcp;

fn tcp_config(max: usize) -> TcpConfig {
    let mut config = TcpConfig::default();
    config.max_message_size(max);
    config
}

impl Harness for Tcp {
    type Conn = TcpConnection;

    async fn start(&self, server: Server) -> String {
        let listener = TcpListener::bind("127.0.0.1:0", tcp_config(BIG))
            .await
            .unwrap();
        let addr = listener.local_socket_addr().unwrap().to_string();
        tokio::spawn(async move { server.serve(listener).await });
        addr
    }

    async fn connect(&self, addr: &str, max_message_size: usize) -> Channel<TcpConnection> {
        let conn = TcpConnection::connect(addr, &tcp_config(max_message_size))
            .await
            .unwrap();
        let mut config = ClientConfig::default();
        config.max_message_size(max_message_size);
        Channel::with_config(conn, config)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_concurrent_calls() {
    thousand_concurrent_calls_on_one_connection(Tcp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_32_mib_value_round_trip() {
    large_value_put_then_get(Tcp, 32 << 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_exceeded() {
    deadline_fails_one_call_not_the_others(Tcp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_reaches_the_handler() {
    dropping_the_call_cancels_the_handler(Tcp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_method_oversized_and_garbage_protobuf() {
    bad_requests_get_their_status(Tcp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limit() {
    concurrency_limit_is_respected(Tcp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_payloads_are_not_copied_and_stay_valid_while_held() {
    // 1 MiB: read into recycled buffers of their own, sent by gathered write.
    large_payloads_are_slices_of_the_frames_and_stay_valid_while_held(Tcp, 1 << 20, 8, true).await;
    // Just over the size kept (32 KiB), and a small one, copied out.
    large_payloads_are_slices_of_the_frames_and_stay_valid_while_held(Tcp, 40 << 10, 4, true).await;
    large_payloads_are_slices_of_the_frames_and_stay_valid_while_held(Tcp, 1 << 10, 4, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_byte_strings_do_not_stop_the_server() {
    let addr = Tcp.start(server_with(Probe::default(), big_config())).await;
    // A well-behaved client connected before the garbage, and one after.
    let before = EchoClient::new(Tcp.connect(&addr, BIG).await);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let mut garbage = Vec::new();
    for i in 0..1000 {
        let len = rng.gen_range(1..4096);
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        // Some strings start with a valid magic and version so that they get past the
        // first check and exercise the deeper ones (lengths, kinds, flags).
        if i % 4 == 0 && bytes.len() >= 4 {
            bytes[..3].copy_from_slice(&[b'R', b'P', 1]);
        }
        garbage.push(bytes);
    }
    let writers: Vec<_> = garbage
        .chunks(50)
        .map(|chunk| {
            let chunk = chunk.to_vec();
            let addr = addr.clone();
            tokio::spawn(async move {
                for bytes in chunk {
                    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
                    let _ = s.write_all(&bytes).await;
                    let _ = s.shutdown().await;
                    // The server closes a hostile connection; drain until it does.
                    let mut sink = [0u8; 1024];
                    let _ = tokio::time::timeout(Duration::from_secs(5), async {
                        while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
                    })
                    .await;
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let after = EchoClient::new(Tcp.connect(&addr, BIG).await);
    for client in [&before, &after] {
        let reply = client
            .echo(EchoRequest {
                payload: b"still here".to_vec().into(),
                delay_ms: 0,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(reply.into_inner().payload, &b"still here"[..]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_server_fails_calls_with_unavailable() {
    // A "server" that accepts, reads the request, then drops the socket without answering.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 64];
        let _ = s.read(&mut buf).await;
        drop(s);
    });
    let client = EchoClient::new(Tcp.connect(&addr, BIG).await);
    let status = tokio::time::timeout(
        Duration::from_secs(10),
        client.echo(EchoRequest {
            payload: b"hello".to_vec().into(),
            delay_ms: 0,
            ..Default::default()
        }),
    )
    .await
    .expect("call hung after the peer vanished")
    .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status}");
    let again = client.echo(EchoRequest::default()).await.unwrap_err();
    assert_eq!(again.code(), Code::Unavailable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_client_gets_its_handlers_dropped() {
    let (tx, mut dropped) = tokio::sync::mpsc::unbounded_channel();
    let probe = Probe {
        dropped: Some(tx),
        ..Probe::default()
    };
    let running = probe.running.clone();
    let addr = Tcp.start(server_with(probe, big_config())).await;
    let client = EchoClient::new(Tcp.connect(&addr, BIG).await);
    let call = tokio::spawn(async move {
        client
            .echo(EchoRequest {
                payload: b"orphan".to_vec().into(),
                delay_ms: 60_000,
                ..Default::default()
            })
            .await
    });
    while running.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    call.abort(); // drops the only client, and with it the connection
    let tag = tokio::time::timeout(Duration::from_secs(10), dropped.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(tag, b"orphan");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_lets_in_flight_calls_finish() {
    let listener = TcpListener::bind("127.0.0.1:0", tcp_config(BIG))
        .await
        .unwrap();
    let addr = listener.local_socket_addr().unwrap().to_string();
    let probe = Probe::default();
    let running = probe.running.clone();
    let server = server_with(probe, big_config());
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = tokio::spawn(async move {
        server
            .serve_with_shutdown(listener, async {
                let _ = stopped.await;
            })
            .await
    });
    let client = EchoClient::new(Tcp.connect(&addr, BIG).await);
    let slow = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .echo(EchoRequest {
                    payload: b"finish me".to_vec().into(),
                    delay_ms: 500,
                    ..Default::default()
                })
                .await
        }
    });
    // Shut down once the call is really in flight: its handler is running.
    tokio::time::timeout(Duration::from_secs(10), async {
        while running.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the handler never started");
    stop.send(()).unwrap();
    let reply = slow
        .await
        .unwrap()
        .expect("in-flight call was not allowed to finish");
    assert_eq!(reply.into_inner().payload, &b"finish me"[..]);
    tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // The listener is closed now.
    assert!(tokio::net::TcpStream::connect(&addr).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_channel_reaches_a_restarted_server() {
    let listener = TcpListener::bind("127.0.0.1:0", tcp_config(BIG))
        .await
        .unwrap();
    let addr = listener.local_socket_addr().unwrap().to_string();
    let (stop, stopped) = oneshot::channel::<()>();
    let first = tokio::spawn(async move {
        server_with(Probe::default(), big_config())
            .serve_with_shutdown(listener, async {
                let _ = stopped.await;
            })
            .await
    });
    let dial_addr = addr.clone();
    let channel = Channel::with_reconnect(ClientConfig::default(), move || {
        let addr = dial_addr.clone();
        async move { TcpConnection::connect(addr.as_str(), &tcp_config(BIG)).await }
    })
    .await
    .unwrap();
    let client = EchoClient::new(channel.clone());
    client
        .echo(EchoRequest {
            payload: b"one".to_vec().into(),
            delay_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap();
    stop.send(()).unwrap();
    first.await.unwrap().unwrap();
    // The old connection is gone and nothing listens: calls fail (on the dead connection,
    // then because the dial is refused, then at once within the back-off).
    for _ in 0..3 {
        let status = client.echo(EchoRequest::default()).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status}");
    }
    let listener = TcpListener::bind(addr.as_str(), tcp_config(BIG))
        .await
        .unwrap();
    tokio::spawn(async move {
        server_with(Probe::default(), big_config())
            .serve(listener)
            .await
    });
    // Once the back-off (with its jitter of at most 20 %) has passed, the next call dials
    // the restarted server.
    tokio::time::sleep(rdmarpc_core::REDIAL_BACKOFF.mul_f64(1.25)).await;
    let reply = client
        .echo(EchoRequest {
            payload: b"two".to_vec().into(),
            delay_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(reply.into_inner().payload, &b"two"[..]);
}

#[tokio::test]
async fn interop_cases() {
    interop_cases_pass(Tcp).await;
}

#[tokio::test]
async fn slow_stream_reader() {
    a_slow_reader_does_not_stall_other_streams(Tcp).await;
}

#[tokio::test]
async fn cancelled_streams() {
    cancelled_streams_release_their_handlers(Tcp).await;
}

#[tokio::test]
async fn stream_deadline() {
    a_stream_past_its_deadline_ends_on_both_sides(Tcp).await;
}

#[tokio::test]
async fn kv_watch() {
    kv_watch_streams_changes_under_a_prefix(Tcp).await;
}

#[tokio::test]
async fn chat_room() {
    chat_members_see_each_others_posts(Tcp).await;
}

#[tokio::test]
async fn echo_chat() {
    echo_chat_answers_each_message_in_order(Tcp).await;
}

/// A handler's status details and error metadata reach the caller (over tcp://), details
/// as bytes and the metadata without the details' entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_details_and_error_metadata_reach_the_caller() {
    let server = Server::builder()
        .add_service(examples::echo::echo_server::EchoServer::new(
            examples::EchoService,
        ))
        .unwrap()
        .build();
    let addr = Tcp.start(server).await;
    let client = EchoClient::new(Tcp.connect(&addr, BIG).await);
    let details = vec![0u8, 1, 2, 0xfe, 0xff];
    let status = client
        .echo(EchoRequest {
            payload: details.clone().into(),
            fail_code: Code::FailedPrecondition as u32,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(status.message(), "failed as requested");
    assert_eq!(status.details(), &details[..]);
    assert_eq!(status.metadata().get("x-failed"), Some("yes"));
    assert_eq!(
        status.metadata().get(rdmarpc_core::STATUS_DETAILS_KEY),
        None
    );
}

/// The generated `EchoClient::connect` / `connect_lazy` (over `rdmarpc_transport`): a bad URL
/// is a typed error at once; a lazy client dials on its first call, which fails with
/// UNAVAILABLE while nothing listens, and the same client reaches the server once it is
/// up (after the back-off); `connect` to a closed port fails at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_connect_and_connect_lazy() {
    use rdmarpc_core::{ParseEndpointError, TransportError};
    let err = EchoClient::connect("http://127.0.0.1:1").await.unwrap_err();
    assert!(
        matches!(
            err,
            TransportError::Endpoint(ParseEndpointError::UnknownTransport(_))
        ),
        "{err:?}"
    );
    assert!(matches!(
        EchoClient::connect_lazy("tcp://127.0.0.1"),
        Err(TransportError::Endpoint(ParseEndpointError::BadAddress(_)))
    ));

    // A port nothing listens on (yet).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("tcp://127.0.0.1:{port}");
    assert!(EchoClient::connect(&url).await.is_err());
    let client = EchoClient::connect_lazy(&url).unwrap();
    assert!(client.channel().connection().is_none());
    let status = client.echo(EchoRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert!(status.message().contains("connecting failed"), "{status:?}");

    let endpoint: rdmarpc_core::Endpoint = url.parse().unwrap();
    let listener = rdmarpc_transport::AnyListener::bind(&endpoint, &Default::default())
        .await
        .unwrap();
    let server = Server::builder()
        .add_service(examples::echo::echo_server::EchoServer::new(
            examples::EchoService,
        ))
        .unwrap()
        .build();
    tokio::spawn(async move { server.serve(listener).await });
    tokio::time::sleep(rdmarpc_core::REDIAL_BACKOFF * 2).await;
    let request = EchoRequest {
        payload: b"late".to_vec().into(),
        ..Default::default()
    };
    let reply = client.echo(request).await.unwrap();
    assert_eq!(&reply.into_inner().payload[..], b"late");
    assert!(client.channel().connection().is_some());
    // And an eager client now connects at once.
    let eager = EchoClient::connect(&url).await.unwrap();
    assert_eq!(eager.channel().peer(), format!("tcp://127.0.0.1:{port}"));
}

/// Registering the same service twice is a typed error naming both methods.
#[test]
fn registering_a_method_twice_is_a_register_error() {
    let echo = || examples::echo::echo_server::EchoServer::new(examples::EchoService);
    let err = Server::builder()
        .add_service(echo())
        .unwrap()
        .add_service(echo())
        .unwrap_err();
    assert_eq!(err.path, "/echo.Echo/Echo");
    assert_eq!(err.taken_by, "/echo.Echo/Echo");
    let err: anyhow::Error = err.into();
    assert!(err.to_string().contains("already taken"), "{err}");
}

#[tokio::test]
async fn interceptor_requires_a_token() {
    an_interceptor_requires_a_token(Tcp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tower_layers() {
    tower_layers_hold(Tcp).await;
}
