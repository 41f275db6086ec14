//! libFuzzer entry point of target `rdma_control` (`rpc_fuzz::rdma_control`), for cargo-fuzz; see
//! `fuzz/README.md`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rpc_fuzz::rdma_control(data));
