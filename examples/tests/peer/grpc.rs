//! A raw HTTP/2 gRPC client (the `h2` crate) from a chosen source address: what the
//! hostile suites speak when they need to break gRPC's rules, or to watch frames (a
//! GOAWAY, a reset) that a gRPC library hides.

use std::net::IpAddr;
use std::time::Duration;

use bytes::Bytes;
use examples::echo::EchoRequest;
use http::Request;
use prost::Message;
use tokio::net::TcpStream;

use super::ServerProcess;

/// A TCP connection to the server from `source`.
pub(crate) async fn connect_from(server: &ServerProcess, source: IpAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((source, 0).into()).unwrap();
    socket
        .connect(server.addr().parse().unwrap())
        .await
        .unwrap()
}

/// An HTTP/2 client connection from `source` (1 MiB stream windows); its connection
/// task runs until the connection ends, and says how it ended.
pub(crate) async fn h2_watched(
    server: &ServerProcess,
    source: IpAddr,
) -> (
    h2::client::SendRequest<Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tcp = connect_from(server, source).await;
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .handshake(tcp)
        .await
        .unwrap();
    (client, tokio::spawn(connection))
}

/// [`h2_watched`], the connection's end not watched.
pub(crate) async fn h2_from(
    server: &ServerProcess,
    source: IpAddr,
) -> h2::client::SendRequest<Bytes> {
    h2_watched(server, source).await.0
}

/// The headers of a gRPC call to `path`.
pub(crate) fn grpc_request(path: &str) -> Request<()> {
    Request::builder()
        .method("POST")
        .uri(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

/// `message` with gRPC's 5-byte prefix (not compressed).
pub(crate) fn prefixed(message: &[u8]) -> Bytes {
    let mut out = vec![0];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out.into()
}

/// An echo request as a gRPC message.
pub(crate) fn prefixed_echo(request: &EchoRequest) -> Bytes {
    prefixed(&request.encode_to_vec())
}

/// The call's `grpc-status` (from the headers of a trailers-only response, or the
/// trailers), reading and releasing its body; `None` if the call did not end within
/// `within` or was reset.
pub(crate) async fn grpc_status_within(
    response: h2::client::ResponseFuture,
    within: Duration,
) -> Option<u32> {
    let call = async {
        let response = response.await.ok()?;
        let code = |headers: &http::HeaderMap| {
            headers
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
        };
        if let Some(code) = code(response.headers()) {
            return Some(code);
        }
        let mut body = response.into_body();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.ok()?;
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        body.trailers().await.ok().flatten().and_then(|t| code(&t))
    };
    tokio::time::timeout(within, call).await.ok().flatten()
}

/// [`grpc_status_within`] 10 s.
pub(crate) async fn grpc_status(response: h2::client::ResponseFuture) -> Option<u32> {
    grpc_status_within(response, Duration::from_secs(10)).await
}
