//! libFuzzer entry point of target `grpc_request` (`rpc_fuzz::grpc_request`), for cargo-fuzz; see
//! `fuzz/README.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rpc_fuzz::grpc_request(data));
