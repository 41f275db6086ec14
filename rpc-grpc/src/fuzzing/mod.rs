//! Entry points for the fuzz targets only (the `rpc-fuzz` crate in `fuzz/`): the HTTP/2
//! translation's sans-IO cores, which are private, driven by scripts with their
//! invariants checked. Hidden from the docs and not part of the crate's API; nothing else
//! may use them.

mod client;
pub(crate) mod request;
mod response;

pub use self::client::{carries as client_carries, grpc_client, steps as client_steps};
pub use self::request::{grpc_request, steps as request_steps};
pub use self::response::{grpc_response, steps, STEPS_AT};

use rdmarpc_core::codegen::MethodKind;

/// The kind of call bits 0-1 of a script's `setting` byte give: unary, server-streaming,
/// client-streaming, bidirectional.
fn kind(setting: u8) -> MethodKind {
    [
        MethodKind::Unary,
        MethodKind::ServerStreaming,
        MethodKind::ClientStreaming,
        MethodKind::Streaming,
    ][usize::from(setting & 3)]
}
