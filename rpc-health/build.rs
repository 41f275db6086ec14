//! Generates `grpc.health.v1` from the unmodified health.proto of grpc/grpc-proto, and
//! writes its descriptor set (for reflection: `rdmarpc_health::FILE_DESCRIPTOR_SET`).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    rdmarpc_codegen::configure()
        // A library: its users choose the transport (FooClient::new(channel)).
        .build_connect(false)
        .file_descriptor_set_path(out.join("health_descriptor_set.bin"))
        .compile_protos(&["proto/grpc/health/v1/health.proto"], &["proto"])?;
    Ok(())
}
