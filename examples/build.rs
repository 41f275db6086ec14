//! Generates the echo and kv services from proto/.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    rpc_codegen::configure()
        .compile_protos(&["../proto/echo.proto", "../proto/kv.proto"], &["../proto"])?;
    Ok(())
}
