//! libFuzzer entry point of target `grpc_client` (`rpc_fuzz::grpc_client`), for cargo-fuzz; see
//! `fuzz/README.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rpc_fuzz::grpc_client(data));
