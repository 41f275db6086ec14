//! Generates the acme packages from proto/ and the protoless `ping.Ping` service.

use rdmarpc_codegen::manual;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    rdmarpc_codegen::configure()
        // No rdmarpc-transport here: the tests make clients over the in-memory transport.
        .build_connect(false)
        .bytes([".acme.store.Item.thumbnail"])
        .type_attribute(".acme.common.Currency", "#[doc(alias = \"iso4217\")]")
        .compile_protos(
            &[
                "proto/acme/store/store.proto",
                "proto/acme/common/audit.proto",
            ],
            &["proto"],
        )?;

    let ping = manual::Service::builder()
        .name("Ping")
        .package("ping")
        .comment("Answers pings; described in build.rs, without a .proto file.")
        .method(
            manual::Method::builder()
                .name("ping")
                .route_name("Ping")
                .comment("Echoes the sequence number.")
                .input_type("crate::manual_types::PingRequest")
                .output_type("crate::manual_types::PingReply")
                .build(),
        )
        .build();
    manual::Builder::new()
        .build_connect(false)
        .compile(&[ping])?;
    Ok(())
}
