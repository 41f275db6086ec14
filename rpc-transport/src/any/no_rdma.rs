//! RDMA's side without the `rdma` feature: every RDMA endpoint is refused.

use rdmarpc_core::{Endpoint, TransportError};
use rdmarpc_transport_tcp::rdma_hello::refuse_hello;
use rdmarpc_transport_tcp::{Socket, TcpConnection};

use super::{no_rdma, AnyConnection, TransportSettings};

pub(super) async fn connect(
    _socket: Socket,
    endpoint: &Endpoint,
    _settings: &TransportSettings,
) -> Result<AnyConnection, TransportError> {
    Err(no_rdma(endpoint))
}

pub(super) fn validate(_settings: &TransportSettings) -> Result<(), TransportError> {
    Ok(())
}

pub(super) async fn accept(
    mut socket: Socket,
    settings: &TransportSettings,
    _serves_rdma: bool,
) -> Result<Option<AnyConnection>, String> {
    refuse_hello(&mut socket, "this server was built without RDMA")
        .await
        .map_err(|e| format!("refusing an RDMA hello: {e}"))?;
    TcpConnection::accepted(socket, &settings.tcp, &[])
        .map(|c| Some(AnyConnection::Tcp(c)))
        .map_err(|e| e.to_string())
}
