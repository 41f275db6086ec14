//! libFuzzer entry point of target `client_demux` (`rpc_fuzz::client_demux`), for cargo-fuzz; see
//! `fuzz/README.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rpc_fuzz::client_demux(data));
