//! `rpc-load`: a ghz-like load generator for this framework's services and for gRPC
//! servers.
//!
//! It load-tests any method (unary or streaming) of any service from the service's `.proto`, compiled at
//! run time with protox into reflection descriptors (prost-reflect): requests are
//! [`prost_reflect::DynamicMessage`]s built from JSON (`-d`), binary protobuf (`-b`) or a
//! generated payload (`--payload-size`), so no generated code and no recompilation is
//! needed. The address picks the transport: `tcp://`, `rdma://`, `auto://` (this
//! framework) or `grpc://` (a standard gRPC server, through tonic), so one harness
//! measures both sides of a comparison.
//!
//! ```text
//! rpc-load --proto proto/echo.proto --call echo.Echo/Echo \
//!          -d '{"payload": "aGVsbG8="}' -c 64 -z 10s tcp://127.0.0.1:50051
//! ```
//!
//! Latencies go into an HDR histogram; under a rate limit they are measured from each
//! request's intended send time (no coordinated omission). Reports follow ghz's: a
//! summary, ghz-compatible JSON, CSV, or one self-contained HTML page.
//!
//! # Layout
//! - [`cli`]: the command line ([`cli::Args`]), and the run it describes.
//! - [`app`]: the program: arguments -> descriptors -> messages -> connections -> run ->
//!   report.
//! - [`proto`], [`reflection`], [`data`], [`template`]: the method (from a .proto, a
//!   protoset or the server's reflection) and the request messages, at run time
//!   (`{{.RequestNumber}}`-style templates rendered per call).
//! - [`connect`]: the address URL -> a connection (the one place that names transports);
//!   [`grpc`]: the tonic client for `grpc://`.
//! - [`target`]: [`target::Target`], one connection as the runner sees it;
//!   [`streams`]: what streaming calls send and read (ghz's `--stream-*` flags).
//! - [`schedule`]: when each request is due (const, step, line).
//! - [`runner`]: the workers; [`stats`]: what they record; [`progress`]: the progress bar.
//! - [`report`]: the report and its formats; [`machine`]: machine and CPU-time facts;
//!   [`logging`]: standard error and `--debug`'s file.
//!
//! # Feature Flags
//! `rdma` (on by default): `rdma://` and `auto://` targets through `rdmarpc-transport`,
//! which needs libibverbs and librdmacm; without it, TCP, gRPC and TLS only.

#![forbid(unsafe_code)]

pub mod app;
pub mod cli;
pub mod connect;
pub mod data;
pub mod grpc;
pub mod logging;
pub mod machine;
pub mod progress;
pub mod proto;
pub mod reflection;
pub mod report;
pub mod runner;
pub mod schedule;
pub mod stats;
pub mod streams;
pub mod target;
pub mod template;
