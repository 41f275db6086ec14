//! Generates the echo, kv, interop (grpc.testing) and ghz's example services (greeter,
//! route guide, wrapped, bytes) from proto/, with `bytes` fields as `bytes::Bytes`,
//! and writes their descriptor set (for reflection: `examples::FILE_DESCRIPTOR_SET`).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    rdmarpc_codegen::configure()
        .file_descriptor_set_path(out.join("examples_descriptor_set.bin"))
        // `bytes` fields as `bytes::Bytes`: a large payload decodes as a slice of the
        // received frame and is sent without a copy (docs/limits.md, "Large messages").
        .bytes(["."])
        .compile_protos(
            &[
                "../proto/echo.proto",
                "../proto/kv.proto",
                "../proto/gateway.proto",
                "../proto/chat.proto",
                "../proto/grpc/testing/test.proto",
                "../proto/greeter.proto",
                "../proto/route_guide.proto",
                "../proto/wrapped.proto",
                "../proto/bytes.proto",
            ],
            &["../proto"],
        )?;
    Ok(())
}
