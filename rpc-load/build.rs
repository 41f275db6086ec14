//! Generates the tonic (gRPC) server of `proto/echo.proto` for `grpc-echo-server`, the
//! baseline that the benchmarks compare this framework with. The .proto is parsed by protox
//! (pure Rust, no `protoc`), and its descriptors are handed to tonic-prost-build.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../proto/echo.proto");
    let descriptors = protox::compile(["../proto/echo.proto"], ["../proto"])?;
    tonic_prost_build::configure()
        // `bytes` fields as `bytes::Bytes`, as the framework's examples build them: a
        // repeated reply shares its payload instead of copying it, on both sides.
        .bytes(".")
        .build_client(false)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
