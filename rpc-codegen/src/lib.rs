//! Build-time code generator: `.proto` files to prost messages, client stubs and server traits
//! for `rdmarpc-core`, used from a `build.rs` like `tonic-build`.
//!
//! ```no_run
//! // build.rs of a user crate; no `protoc` needed, .proto files are parsed by protox
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     rdmarpc_codegen::configure()
//!         .compile_protos(&["../proto/echo.proto", "../proto/kv.proto"], &["../proto"])?;
//!     Ok(())
//! }
//! ```
//!
//! and in the crate, `pub mod echo { rdmarpc_core::include_proto!("echo"); }`. Nest the modules of
//! dotted packages the same way (`acme.store` in `pub mod acme { pub mod store { … } }`) so that
//! prost's relative paths between packages resolve.
//!
//! # Generated code
//!
//! For `service Echo { rpc Echo(EchoRequest) returns (EchoReply); }` in package `echo`:
//!
//! | item | purpose |
//! | --- | --- |
//! | `echo_methods::METHODS` | `static [MethodDescriptor; N]`: path `/echo.Echo/Echo` and its method id, in index order |
//! | `echo_client::EchoClient<C>` | `new(Channel<C>)`, `channel()`, and `async fn echo(&self, impl IntoRequest<EchoRequest>) -> Result<Response<EchoReply>, Status>`; on `EchoClient<rdmarpc_transport::AnyConnection>`, `connect(url)` (dials now) and `connect_lazy(url)` (on the first call), both reconnecting (`build_connect`) |
//! | `echo_server::Echo` | the trait to implement, one `fn echo(&self, Request<EchoRequest>) -> impl Future<…> + Send` per RPC (write it as an `async fn`), and one `type FooStream` per method `Foo` that streams responses |
//! | `echo_server::EchoServer<T>` | `new(T)`, `from_arc(Arc<T>)`; implements `NamedService` (`"echo.Echo"`) and `Service` |
//!
//! Generated code names only `rdmarpc_core::codegen::*` (configurable with `codegen_path`), `core`
//! and `std`, and, for `connect`, `rdmarpc_transport::AnyConnection` (`connect_type`), so a user
//! crate depends on `rdmarpc-core`, `prost` and `rdmarpc-transport` (or, with
//! `build_connect(false)`, on just `rdmarpc-core` and `prost`). Proto comments become doc
//! comments, method names become `snake_case`.
//!
//! Streaming methods follow tonic: a server-streaming method `Watch` gets an associated
//! type `WatchStream` (a `Stream<Item = Result<Reply, Status>> + Send + 'static`) in the
//! trait, which the handler answers with; a client-streaming or bidirectional handler
//! receives `Request<Streaming<Req>>`. The client's methods return
//! `Response<Streaming<Reply>>` for streamed responses and take any
//! `IntoStreamingRequest` (a `Stream` of requests, or a `Request` of one) for streamed
//! requests.
//!
//! # Layout
//!
//! The crate has the three layers of `tonic-build`:
//!
//! - IR: the [`Service`] and [`Method`] traits (`ir.rs`);
//! - emitter: [`CodeGenBuilder`] turns IR into a `proc_macro2::TokenStream` via `quote!`
//!   (`code_gen.rs`, `client.rs`, `server.rs`, helpers in `syntax.rs`), [`format()`] prints it
//!   with `prettyplease`;
//! - front ends: [`configure`]/[`Builder`] for `.proto` files through protox and prost-build
//!   (`proto.rs`), and [`manual`] for services described in Rust.
//!
//! # Feature Flags
//!
//! None.

// docs.rs builds with `--cfg docsrs` on nightly: items behind a feature say which one.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

mod client;
mod code_gen;
mod error;
mod ir;
pub mod manual;
mod plan;
mod proto;
mod server;
mod split;
mod syntax;

#[cfg(test)]
mod tests;

pub use code_gen::CodeGenBuilder;
pub use error::Error;
pub use ir::{Method, Service};
pub use proto::{configure, Builder};
pub use syntax::format;

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
