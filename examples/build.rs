//! Generates the echo, kv and interop (grpc.testing) services from proto/, with `bytes` fields as `bytes::Bytes`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    rpc_codegen::configure()
        // `bytes` fields as `bytes::Bytes`: a large payload decodes as a slice of the
        // received frame and is sent without a copy (docs/limits.md, "Large messages").
        .bytes(["."])
        .compile_protos(
            &[
                "../proto/echo.proto",
                "../proto/kv.proto",
                "../proto/chat.proto",
                "../proto/grpc/testing/test.proto",
            ],
            &["../proto"],
        )?;
    Ok(())
}
