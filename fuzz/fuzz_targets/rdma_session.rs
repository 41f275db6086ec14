//! libFuzzer entry point of target `rdma_session` (`rpc_fuzz::rdma_session`), for cargo-fuzz; see
//! `fuzz/README.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rpc_fuzz::rdma_session(data));
