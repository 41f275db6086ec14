//! Generates `grpc.health.v1` from the unmodified health.proto of grpc/grpc-proto.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    rpc_codegen::configure().compile_protos(&["proto/grpc/health/v1/health.proto"], &["proto"])?;
    Ok(())
}
