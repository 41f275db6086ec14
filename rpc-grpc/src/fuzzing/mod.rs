//! Entry points for the fuzz targets only (the `rpc-fuzz` crate in `fuzz/`): the HTTP/2
//! translation's sans-IO cores, which are private, driven by scripts with their
//! invariants checked. Hidden from the docs and not part of the crate's API; nothing else
//! may use them.

pub(crate) mod request;
mod response;

pub use self::request::{grpc_request, steps as request_steps};
pub use self::response::{grpc_response, steps, STEPS_AT};
