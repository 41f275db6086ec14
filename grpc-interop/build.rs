//! Generates tonic's client and server for the gRPC interop service (`grpc.testing`, the project's
//! copy of the spec's protos), parsed by protox (no `protoc`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../proto/grpc/testing");
    let descriptors = protox::compile(["grpc/testing/test.proto"], ["../proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
