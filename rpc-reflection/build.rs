//! Generates `grpc.reflection.v1` and `grpc.reflection.v1alpha` from the unmodified
//! reflection.proto files of grpc/grpc-proto, and writes their descriptor set (so that
//! reflection describes itself).
//!
//! The two packages have the same messages, field for field; v1alpha's are mapped onto
//! v1's Rust types (`extern_path`), so one handler serves both services.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    rdmarpc_codegen::configure()
        // A library: its users choose the transport (FooClient::new(channel)).
        .build_connect(false)
        // Descriptors go out as `Bytes` clones of the registered set: no copy per answer.
        .bytes([".grpc.reflection.v1.FileDescriptorResponse"])
        .extern_path(".grpc.reflection.v1alpha", "crate::pb::v1")
        .file_descriptor_set_path(out.join("reflection_descriptor_set.bin"))
        .compile_protos(
            &[
                "proto/grpc/reflection/v1/reflection.proto",
                "proto/grpc/reflection/v1alpha/reflection.proto",
            ],
            &["proto"],
        )?;
    Ok(())
}
