//! Generates tonic's client and server for the gRPC interop service (`grpc.testing`, the project's
//! copy of the spec's protos), and tonic's server of `proto/echo.proto`, parsed by protox (no
//! `protoc`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../proto/grpc/testing");
    let descriptors = protox::compile(["grpc/testing/test.proto"], ["../proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    // The echo service of `proto/echo.proto`, served by `grpc-echo-server`: the gRPC
    // baseline the benchmarks compare this framework with. `bytes` fields as
    // `bytes::Bytes`, as the framework's examples build them: a repeated reply shares its
    // payload instead of copying it, on both sides.
    println!("cargo:rerun-if-changed=../proto/echo.proto");
    let echo = protox::compile(["echo.proto"], ["../proto"])?;
    tonic_prost_build::configure()
        .bytes(".")
        .build_client(false)
        .build_server(true)
        .compile_fds(echo)?;
    Ok(())
}
