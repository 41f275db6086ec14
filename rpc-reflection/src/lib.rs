//! The standard gRPC server reflection service, `grpc.reflection.v1.ServerReflection`
//! (and `grpc.reflection.v1alpha`, which many tools still ask first), for servers of this
//! framework.
//!
//! Reflection lets a client that has no `.proto` files (grpcurl, Postman, a load
//! generator, a debugger) list a server's services and fetch their descriptors, then
//! build requests at run time. It serves the encoded `FileDescriptorSet`s the services
//! were compiled from, which `rdmarpc-codegen` writes (`file_descriptor_set_path`):
//!
//! ```
//! # fn f() -> Result<(), Box<dyn std::error::Error>> {
//! // build.rs: rdmarpc_codegen::configure()
//! //     .file_descriptor_set_path(out_dir.join("echo_descriptor_set.bin"))
//! //     .compile_protos(&["proto/echo.proto"], &["proto"])?;
//! // lib.rs: pub const FILE_DESCRIPTOR_SET: &[u8] =
//! //     include_bytes!(concat!(env!("OUT_DIR"), "/echo_descriptor_set.bin"));
//! # const FILE_DESCRIPTOR_SET: &[u8] = &[];
//! let reflection = rdmarpc_reflection::Builder::new()
//!     .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
//!     .register_encoded_file_descriptor_set(rdmarpc_health::FILE_DESCRIPTOR_SET)
//!     .build()?;
//! let server = rdmarpc_core::Server::builder()
//!     .add_service(reflection.v1())?
//!     .add_service(reflection.v1alpha())?
//!     .build();
//! # drop(server); Ok(()) }
//! ```
//!
//! A standard gRPC client reaches it over HTTP/2 on the server's port like any service
//! (`rdmarpc-grpc`), and this framework's clients over their own transports.
//!
//! # What it answers
//! - `list_services`: the registered services (or those named by
//!   [`Builder::with_service_name`]) and reflection's own two, sorted.
//! - `file_by_filename`, `file_containing_symbol`: the file, then every file it imports,
//!   directly or not, each once: enough to build a descriptor pool with no `.proto`
//!   file. Symbols are full names of messages, enums, services, methods, fields,
//!   oneofs, extensions and enum values (as `pkg.VALUE`, protobuf's scope, and as
//!   `pkg.Enum.VALUE`), nested types included.
//! - `file_containing_extension`, `all_extension_numbers_of_type`: from the extensions
//!   the registered files declare; `NOT_FOUND` for an unknown extension or message type.
//! - An `error_response` for anything not found (`NOT_FOUND`), a request over
//!   [`MAX_REQUEST_BYTES`] (`INVALID_ARGUMENT`) and a request of no kind it knows
//!   (`UNIMPLEMENTED`); the stream goes on. A request that does not decode ends the
//!   stream with `INVALID_ARGUMENT`.
//!
//! Every answer carries all the files asked for: none is left out for having been sent
//! earlier in the stream (the protocol allows that, and some clients start a new pool
//! per question).
//!
//! # Layout
//! - [`Builder`]: the descriptor sets to serve (`builder.rs`), checked by the index
//!   (`index.rs`: files, symbols and extensions to files; no I/O).
//! - `answer.rs`: one request to its response (the protocol; no I/O).
//! - [`ReflectionService`]: the streams of both versions (`service.rs`).
//! - [`Error`]: sets that cannot be served (`error.rs`).
//! - [`pb`]: the generated packages.
//!
//! # Feature Flags
//! None.

// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature say which one.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

mod answer;
mod builder;
mod error;
mod index;
mod service;

pub use answer::MAX_REQUEST_BYTES;
pub use builder::Builder;
pub use error::Error;
pub use service::{ReflectionService, ServerReflectionV1, ServerReflectionV1alpha};

// The unmodified protos' comments write names as `<package>.<type>`, which rustdoc would
// take for HTML tags.
#[allow(rustdoc::invalid_html_tags)]
pub mod pb {
    //! The generated reflection packages: messages, clients and servers.

    pub mod v1 {
        //! `grpc.reflection.v1`: messages, client and server.
        rdmarpc_core::include_proto!("grpc.reflection.v1");
    }

    pub mod v1alpha {
        //! `grpc.reflection.v1alpha`: its client and server. Its messages are
        //! [`v1`](super::v1)'s: the two packages define the same fields, numbers and
        //! types, so they are one encoding.
        rdmarpc_core::include_proto!("grpc.reflection.v1alpha");
    }
}

/// The full name of the v1 service.
pub const SERVICE_NAME_V1: &str = "grpc.reflection.v1.ServerReflection";

/// The full name of the v1alpha service.
pub const SERVICE_NAME_V1ALPHA: &str = "grpc.reflection.v1alpha.ServerReflection";

/// The encoded `FileDescriptorSet` of reflection's own two `.proto` files (always
/// registered by a [`Builder`]).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/reflection_descriptor_set.bin"));

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests;
