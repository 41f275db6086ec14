//! libFuzzer entry point of target `frame` (`rpc_fuzz::frame`), for cargo-fuzz; see
//! `fuzz/README.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rpc_fuzz::frame(data));
