//! The gRPC client transport against a hostile server (raw h2 on 127.0.0.1): a length
//! prefix claiming 4 GiB, a body that stalls, headers that never come, a refused stream,
//! answers that are not gRPC, and a flood of stream messages to a caller that does not
//! read. Each fails only its own call, with a status saying why, and the flood is held
//! back by HTTP/2 flow control, not buffered.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Response, StatusCode};
use rdmarpc_core::codegen::{MethodDescriptor, MethodKind};
use rdmarpc_core::{Channel, ClientConfig, Code, Request};
use rdmarpc_grpc::{GrpcConfig, GrpcConnection};

const UNARY: MethodDescriptor = MethodDescriptor::new("/test.Hostile/Unary");
const STREAM: MethodDescriptor =
    MethodDescriptor::with_kind("/test.Hostile/Stream", MethodKind::ServerStreaming);

/// A raw HTTP/2 server on 127.0.0.1 whose every request is handled by `answer` with the
/// request's path; returns its address.
async fn hostile_server<F, Fut>(answer: F) -> std::net::SocketAddr
where
    F: Fn(String, h2::server::SendResponse<Bytes>) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            let answer = answer.clone();
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(socket).await else {
                    return;
                };
                while let Some(Ok((request, respond))) = connection.accept().await {
                    let path = request.uri().path().to_owned();
                    tokio::spawn(answer.clone()(path, respond));
                }
            });
        }
    });
    addr
}

async fn channel(addr: std::net::SocketAddr) -> Channel<GrpcConnection> {
    let socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut config = GrpcConfig::default();
    config.max_message_size(1 << 20);
    let conn = GrpcConnection::connect(socket, &addr.to_string(), false, &config, Some(addr))
        .await
        .unwrap();
    let mut client = ClientConfig::default();
    client.max_message_size(1 << 20);
    Channel::with_config(conn, client)
}

fn grpc_headers(end: bool) -> Response<()> {
    let mut response = Response::new(());
    response
        .headers_mut()
        .insert("content-type", "application/grpc".parse().unwrap());
    if end {
        response
            .headers_mut()
            .insert("grpc-status", "0".parse().unwrap());
    }
    response
}

fn prefixed(message: &[u8]) -> Bytes {
    let mut out = vec![0];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out.into()
}

async fn unary(channel: &Channel<GrpcConnection>, timeout: Duration) -> rdmarpc_core::Status {
    let mut request = Request::new(b"hi".to_vec());
    request.set_timeout(timeout);
    channel
        .unary::<Vec<u8>, Vec<u8>>(request, &UNARY)
        .await
        .unwrap_err()
}

#[tokio::test]
async fn lies_stalls_and_refusals_fail_their_own_calls_clearly() {
    let addr = hostile_server(|path, mut respond| async move {
        match path.as_str() {
            "/test.Hostile/Unary" => {
                let mut body = respond.send_response(grpc_headers(false), false).unwrap();
                body.send_data(Bytes::from_static(&[0, 0xff, 0xff, 0xff, 0xff]), false)
                    .unwrap();
                std::future::pending::<()>().await;
            }
            _ => respond.send_reset(h2::Reason::REFUSED_STREAM),
        }
    })
    .await;
    let channel = channel(addr).await;
    // A prefix claiming 4 GiB: refused as soon as the prefix is here.
    let started = Instant::now();
    let status = unary(&channel, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status}");
    assert!(status.message().contains("response message"), "{status}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // A refused stream: UNAVAILABLE, which callers may retry.
    let mut request = Request::new(b"x".to_vec());
    request.set_timeout(Duration::from_secs(10));
    let refused = channel
        .unary::<Vec<u8>, Vec<u8>>(request, &MethodDescriptor::new("/test.Hostile/Refused"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused}");
}

#[tokio::test]
async fn stalled_bodies_and_missing_headers_end_at_the_deadline() {
    let addr = hostile_server(|path, mut respond| async move {
        if path == "/test.Hostile/Unary" {
            // Headers, half a message, then nothing.
            let mut body = respond.send_response(grpc_headers(false), false).unwrap();
            let message = prefixed(b"half of this");
            body.send_data(message.slice(..8), false).unwrap();
        }
        // Other paths: no headers ever.
        std::future::pending::<()>().await;
    })
    .await;
    let channel = channel(addr).await;
    let started = Instant::now();
    let status = unary(&channel, Duration::from_millis(300)).await;
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status}");
    let mut request = Request::new(b"x".to_vec());
    request.set_timeout(Duration::from_millis(300));
    let silent = channel
        .unary::<Vec<u8>, Vec<u8>>(request, &MethodDescriptor::new("/test.Hostile/Silent"))
        .await
        .unwrap_err();
    assert_eq!(silent.code(), Code::DeadlineExceeded, "{silent}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The connection still carries calls.
    assert_eq!(
        unary(&channel, Duration::from_millis(300)).await.code(),
        Code::DeadlineExceeded
    );
}

#[tokio::test]
async fn answers_that_are_not_grpc_get_the_specs_statuses() {
    let addr = hostile_server(|path, mut respond| async move {
        let mut response = Response::new(());
        match path.as_str() {
            "/test.Hostile/Unary" => *response.status_mut() = StatusCode::NOT_FOUND,
            _ => {
                response
                    .headers_mut()
                    .insert("content-type", "text/html".parse().unwrap());
            }
        }
        let _ = respond.send_response(response, true);
    })
    .await;
    let channel = channel(addr).await;
    let status = unary(&channel, Duration::from_secs(5)).await;
    assert_eq!(status.code(), Code::Unimplemented, "{status}");
    let mut request = Request::new(b"x".to_vec());
    request.set_timeout(Duration::from_secs(5));
    let html = channel
        .unary::<Vec<u8>, Vec<u8>>(request, &MethodDescriptor::new("/test.Hostile/Html"))
        .await
        .unwrap_err();
    assert_eq!(html.code(), Code::Unknown, "{html}");
}

#[tokio::test]
async fn a_flood_to_a_caller_that_does_not_read_is_held_back_by_flow_control() {
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    let addr = hostile_server(move |_path, mut respond| {
        let counter = counter.clone();
        async move {
            let mut body = respond.send_response(grpc_headers(false), false).unwrap();
            let message = prefixed(&prost::Message::encode_to_vec(&vec![7u8; 16 * 1024]));
            // Sends as fast as HTTP/2 flow control lets it, counting what it let go.
            loop {
                body.reserve_capacity(message.len());
                let Some(Ok(capacity)) = std::future::poll_fn(|cx| body.poll_capacity(cx)).await
                else {
                    return;
                };
                if capacity < message.len() {
                    continue;
                }
                if body.send_data(message.clone(), false).is_err() {
                    return;
                }
                counter.fetch_add(message.len(), Ordering::Relaxed);
            }
        }
    })
    .await;
    let channel = channel(addr).await;
    let mut stream = channel
        .server_streaming::<Vec<u8>, Vec<u8>>(Request::new(b"go".to_vec()), &STREAM)
        .await
        .unwrap()
        .into_inner();
    // Read one message, then stop reading.
    assert_eq!(stream.message().await.unwrap().unwrap().len(), 16 * 1024);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = accepted.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        accepted.load(Ordering::Relaxed),
        held,
        "the server kept sending to a caller that does not read"
    );
    // The channel's window (64 KiB) + the transport's queue (a window) + HTTP/2's
    // windows (1 MiB stream window): a few MiB at most, not unbounded.
    assert!(held < 4 << 20, "{held} bytes let go");
    // Reading again lets it go on.
    for _ in 0..200 {
        assert!(stream.message().await.unwrap().is_some());
    }
    assert!(accepted.load(Ordering::Relaxed) > held);
}

/// A server whose response headers (or trailers) are a header list larger than a frame's
/// metadata block may be (HTTP/2 takes them: its limit is the metadata limit plus
/// 16 KiB): that call fails with RESOURCE_EXHAUSTED, and the connection serves the next
/// call (before, the oversized block became a frame the channel took as malformed, and
/// it closed the connection with every call on it).
#[tokio::test]
async fn a_header_list_over_the_metadata_limit_fails_its_call_not_the_connection() {
    let addr = hostile_server(|path, mut respond| async move {
        let mut big = grpc_headers(false);
        for i in 0..14 {
            let value = "v".repeat(5000);
            big.headers_mut().insert(
                format!("x-big-{i}").parse::<http::HeaderName>().unwrap(),
                value.parse().unwrap(),
            );
        }
        match path.as_str() {
            "/test.Hostile/Unary" => {
                let _ = respond.send_response(big, false);
                std::future::pending::<()>().await;
            }
            "/test.Hostile/Trailers" => {
                let mut body = respond.send_response(grpc_headers(false), false).unwrap();
                body.send_data(prefixed(b"ok"), false).unwrap();
                let mut trailers = big.headers().clone();
                trailers.insert("grpc-status", "0".parse().unwrap());
                let _ = body.send_trailers(trailers);
            }
            _ => {
                let mut body = respond.send_response(grpc_headers(false), false).unwrap();
                body.send_data(
                    prefixed(&prost::Message::encode_to_vec(&b"fine".to_vec())),
                    false,
                )
                .unwrap();
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", "0".parse().unwrap());
                let _ = body.send_trailers(trailers);
            }
        }
    })
    .await;
    let channel = channel(addr).await;
    let status = unary(&channel, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status}");
    assert!(status.message().contains("metadata limit"), "{status}");
    let mut request = Request::new(b"x".to_vec());
    request.set_timeout(Duration::from_secs(10));
    let status = channel
        .unary::<Vec<u8>, Vec<u8>>(request, &MethodDescriptor::new("/test.Hostile/Trailers"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status}");
    // The same connection serves the next call.
    let mut request = Request::new(b"x".to_vec());
    request.set_timeout(Duration::from_secs(10));
    let reply = channel
        .unary::<Vec<u8>, Vec<u8>>(request, &MethodDescriptor::new("/test.Hostile/Fine"))
        .await
        .expect("the connection still serves calls");
    assert_eq!(reply.into_inner(), b"fine");
}
