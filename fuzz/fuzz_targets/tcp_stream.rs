//! libFuzzer entry point of target `tcp_stream` (`rpc_fuzz::tcp_stream`), for cargo-fuzz; see
//! `fuzz/README.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rpc_fuzz::tcp_stream(data));
