//! libFuzzer entry point of target `server_demux` (`rpc_fuzz::server_demux`), for cargo-fuzz; see
//! `fuzz/README.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rpc_fuzz::server_demux(data));
