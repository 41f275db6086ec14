//! libFuzzer entry point of target `handshake` (`rpc_fuzz::handshake`), for cargo-fuzz; see
//! `fuzz/README.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rpc_fuzz::handshake(data));
