//! libFuzzer entry point of target `metadata` (`rpc_fuzz::metadata`), for cargo-fuzz; see
//! `fuzz/README.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rpc_fuzz::metadata(data));
