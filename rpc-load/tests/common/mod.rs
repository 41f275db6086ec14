//! Shared by the end-to-end tests: servers on 127.0.0.1:0 and argument building.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};

use clap::Parser;
use examples::echo::echo_server::EchoServer;
use examples::grpc_testing::test_service_server::TestServiceServer;
use examples::interop::InteropService;
use examples::kv::kv_server::KvServer;
use examples::{EchoService, KvStore};
use rdmarpc_core::{Server, ServerConfig};
use rdmarpc_load::cli::Args;
use rdmarpc_transport_tcp::{TcpConfig, TcpListener};

/// The largest message the test server accepts: a 2 MiB request is "oversized".
pub const SERVER_MAX: usize = 1 << 20;

pub fn proto_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto")
}

/// Starts the examples' echo, kv and interop (`grpc.testing`) services over TCP on 127.0.0.1:0; returns its URL.
pub async fn start_rpc_server() -> String {
    let mut tcp = TcpConfig::default();
    tcp.max_message_size(SERVER_MAX);
    let listener = TcpListener::bind("127.0.0.1:0", tcp).await.unwrap();
    let addr = listener.local_socket_addr().unwrap();
    let mut config = ServerConfig::default();
    config.max_message_size(SERVER_MAX);
    let server = Server::builder()
        .add_service(EchoServer::new(EchoService))
        .unwrap()
        .add_service(KvServer::new(KvStore::default()))
        .unwrap()
        .add_service(TestServiceServer::new(InteropService::default()))
        .unwrap()
        .config(config)
        .build();
    tokio::spawn(async move { server.serve(listener).await });
    format!("tcp://{addr}")
}

/// `rpc-load --proto ../proto/FILE -I ../proto ARGS...`.
pub fn args(file: &str, rest: &[&str]) -> Args {
    let proto = proto_dir().join(file);
    let dir = proto_dir();
    let mut argv = vec![
        "rpc-load".to_owned(),
        "--proto".to_owned(),
        proto.display().to_string(),
        "-I".to_owned(),
        dir.display().to_string(),
    ];
    argv.extend(rest.iter().map(|s| (*s).to_owned()));
    Args::try_parse_from(argv).unwrap()
}
