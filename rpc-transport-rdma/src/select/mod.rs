//! Choosing the transport: what a user configures, apart from the RDMA internals.
//!
//! - `any.rs`: [`connect`] and [`AnyListener`] by URL scheme (`tcp://`, `rdma://`,
//!   `auto://`), [`AnyConnection`] over either transport, and [`TransportSettings`];
//!   the listener tells TCP clients from RDMA handshakes on one port.
//! - `file.rs`: [`FileConfig`], the same settings from a TOML file or the environment,
//!   each declared once in a table per section.

mod any;
mod file;

pub use any::{connect, AnyConnection, AnyListener, TransportSettings};
pub use file::{
    ClientSection, FileConfig, GrpcSection, RdmaSection, ServerSection, TcpSection, TlsSection,
};
