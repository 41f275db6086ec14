//! RDMA's side: the client's and the server's handshake on an open socket.

use rdmarpc_core::{Endpoint, TransportError, TransportKind};
use rdmarpc_transport_rdma::{handshake_client, handshake_server, Negotiated};
use rdmarpc_transport_tcp::{Socket, TcpConnection};

use super::{AnyConnection, TransportSettings};

/// Offers RDMA on `socket` (`rdma://`, or `auto://` with a local device).
pub(super) async fn connect(
    socket: Socket,
    endpoint: &Endpoint,
    settings: &TransportSettings,
) -> Result<AnyConnection, TransportError> {
    let fallback = endpoint.kind != TransportKind::Rdma;
    match handshake_client(socket, &settings.rdma, fallback).await? {
        Negotiated::Rdma(conn) => {
            if fallback {
                let text = format!("using RDMA on {}", conn.route());
                super::choice::log(endpoint, &text, &text);
            }
            Ok(AnyConnection::Rdma(conn))
        }
        Negotiated::Tcp(socket, reason) => {
            // The server's reason is its text: the kind is this side's own words.
            super::choice::log(endpoint, "tcp", &format!("using TCP ({reason})"));
            Ok(AnyConnection::Tcp(TcpConnection::from_stream(
                socket,
                &settings.tcp,
            )?))
        }
        other => Err(TransportError::Other(format!(
            "{endpoint}: unexpected RDMA handshake outcome {other:?}"
        ))),
    }
}

/// The RDMA settings a listener serving RDMA will use, checked before it binds.
pub(super) fn validate(settings: &TransportSettings) -> Result<(), TransportError> {
    settings.rdma.validate().map_err(TransportError::Other)
}

/// Answers an RDMA hello (its first 8 bytes read): RDMA when this listener serves
/// it, else a refusal, after which the socket carries TCP.
pub(super) async fn accept(
    socket: Socket,
    settings: &TransportSettings,
    serves_rdma: bool,
) -> Result<Option<AnyConnection>, String> {
    let rdma = serves_rdma.then_some(&settings.rdma);
    match handshake_server(socket, rdma).await? {
        Ok(conn) => Ok(Some(AnyConnection::Rdma(conn))),
        Err(socket) => TcpConnection::accepted(socket, &settings.tcp, &[])
            .map(|c| Some(AnyConnection::Tcp(c)))
            .map_err(|e| e.to_string()),
    }
}
