//! [`TransportSettings`]: what a `--config` file or flags fill in for both transports.

use std::time::Duration;

#[cfg(feature = "rdma")]
use rdmarpc_transport_rdma::RdmaConfig;
use rdmarpc_transport_tcp::{TcpConfig, TlsConfig};

/// Settings of both transports; what a `--config` file or flags fill in.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TransportSettings {
    /// TCP settings (also used by `auto://` when it falls back).
    pub tcp: TcpConfig,
    /// RDMA settings.
    #[cfg(feature = "rdma")]
    pub rdma: RdmaConfig,
    /// gRPC (HTTP/2) settings, for standard gRPC clients on a listener's port.
    pub grpc: rdmarpc_grpc::GrpcConfig,
    /// TLS certificates and keys, for `+tls` endpoints (clients and listeners).
    pub tls: TlsConfig,
    /// On a listener: time allowed from the accept until the connection is established
    /// (protocol detection, and the whole RDMA handshake); a socket that has not sent its
    /// first bytes or finished its handshake by then is closed. Default 10 s.
    pub handshake_timeout: Duration,
    /// On a listener: most connections in protocol detection or handshake at once
    /// (counting established ones waiting for the server to take them). A socket
    /// accepted beyond displaces the oldest handshake of the peer holding the most (the
    /// new socket's own peer when that is the heaviest): it is aborted and its socket
    /// closed (logged at debug, and counted in a rate-limited warning), so that sockets
    /// left silent never keep a lighter peer out, and never the newest socket of their
    /// own address either. Default 256.
    pub max_handshakes: usize,
    /// On a listener: most handshakes from one peer at once (an IPv4 address, an IPv6
    /// /64: `rdmarpc_core::account::PeerKey`), a share of `max_handshakes`; a peer's socket
    /// beyond displaces that peer's own oldest handshake. Default 64 (a quarter of the
    /// default `max_handshakes`). Trade-off: smaller keeps one address from filling the
    /// table before the global cap is reached, but clients behind one NAT that open more
    /// connections than this at the same instant see their oldest handshakes closed
    /// (and must retry); larger serves such bursts, at the cost of one address holding
    /// more of the table (it is still the first displaced at the global cap).
    pub max_handshakes_per_peer: usize,
}

impl Default for TransportSettings {
    fn default() -> Self {
        TransportSettings {
            tcp: TcpConfig::default(),
            #[cfg(feature = "rdma")]
            rdma: RdmaConfig::default(),
            grpc: rdmarpc_grpc::GrpcConfig::default(),
            tls: TlsConfig::default(),
            handshake_timeout: Duration::from_secs(10),
            max_handshakes: 256,
            max_handshakes_per_peer: 64,
        }
    }
}

impl TransportSettings {
    /// Sets the largest message on every transport.
    pub fn max_message_size(&mut self, bytes: usize) -> &mut Self {
        self.tcp.max_message_size(bytes);
        #[cfg(feature = "rdma")]
        self.rdma.max_message_size(bytes);
        self.grpc.max_message_size(bytes);
        self
    }
}
