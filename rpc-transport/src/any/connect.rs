//! Dialling any endpoint: TCP, RDMA (or `auto://`'s choice), gRPC, with or without TLS.

use std::sync::Arc;

use rdmarpc_core::{Endpoint, TransportError, TransportKind};
use rdmarpc_transport_tcp::{Socket, TcpConnection, ALPN_FRAMES, ALPN_H2};
use tokio::net::TcpStream;

use super::{no_rdma, rdma, rdma_available, AnyConnection, TransportSettings};

/// Connects to `endpoint`:
/// - `tcp://`: TCP.
/// - `rdma://`: RDMA, or an error naming why not (no local device, server without RDMA).
/// - `auto://`: RDMA when both ends have a usable device, otherwise TCP over the same
///   socket; says which and why (the device, port and GID, or what is missing) at `info`
///   once per endpoint and again when the choice changes (target `rdmarpc_transport`).
/// - `grpc://`, `grpcs://`: HTTP/2 to a gRPC server (any implementation), over TLS with
///   ALPN `h2` for `grpcs://`.
///
/// With `+tls` (`tcp+tls://`, ...) the TCP connection, or RDMA's side channel (the
/// handshake, and the channel whose end closes the connection), runs under TLS with
/// [`TransportSettings::tls`]; RDMA's data path itself is not encrypted.
///
/// # Errors
/// Connect or handshake failure; under TLS, a server certificate that does not verify.
pub async fn connect(
    endpoint: &Endpoint,
    settings: &TransportSettings,
) -> Result<AnyConnection, TransportError> {
    let address = endpoint.address.as_str();
    if endpoint.kind == TransportKind::Rdma && !rdma_available() {
        return Err(no_rdma(endpoint));
    }
    let grpc = endpoint.kind == TransportKind::Grpc;
    // The connector first: bad TLS settings fail before a socket is opened.
    let tls = match endpoint.tls {
        true if grpc => Some(settings.tls.connector(&[ALPN_H2])?),
        true => Some(settings.tls.connector(&[ALPN_FRAMES])?),
        false => None,
    };
    let stream = TcpStream::connect(address).await?;
    stream.set_nodelay(true)?;
    let socket = match tls {
        Some(tls) => tls.connect(address, stream).await?,
        None => Socket::Plain(stream),
    };
    match endpoint.kind {
        TransportKind::Grpc => {
            let peer = socket.peer_addr().ok();
            let certificates = socket.peer_certificates().map(Arc::from);
            let authority = settings.grpc.authority.as_deref().unwrap_or(address);
            let conn = rdmarpc_grpc::GrpcConnection::connect(
                socket,
                authority,
                endpoint.tls,
                &settings.grpc,
                peer,
            )
            .await?;
            return Ok(AnyConnection::Grpc(
                conn.with_peer_certificates(certificates),
            ));
        }
        TransportKind::Tcp => {
            return Ok(AnyConnection::Tcp(TcpConnection::from_stream(
                socket,
                &settings.tcp,
            )?))
        }
        TransportKind::Auto if !rdma_available() => {
            let text = "no local RDMA device, using TCP";
            super::choice::log(endpoint, text, text);
            return Ok(AnyConnection::Tcp(TcpConnection::from_stream(
                socket,
                &settings.tcp,
            )?));
        }
        _ => {}
    }
    rdma::connect(socket, endpoint, settings).await
}
