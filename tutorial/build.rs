// build.rs: no protoc needed, the .proto is parsed in Rust
fn main() -> Result<(), Box<dyn std::error::Error>> {
    rdmarpc_codegen::configure().compile_protos(&["proto/hello.proto"], &["proto"])?;
    Ok(())
}
