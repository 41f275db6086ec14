//! Unit tests of the emitter and both front ends. End-to-end compilation of generated code is
//! covered by the `codegen-tests` crate.

use std::fs;
use std::path::Path;

use prost::Message as _;

use crate::{configure, manual, CodeGenBuilder, Error};

const ECHO_PROTO: &str = r#"
syntax = "proto3";
package echo;

// Echoes messages back.
// See [the docs] and https://example.invalid/echo for more.
service Echo {
  // Returns the request's text.
  rpc Echo(EchoRequest) returns (EchoReply);
  rpc GetType(EchoRequest) returns (EchoReply);
}

service Admin {}

message EchoRequest { string text = 1; }
message EchoReply { string text = 1; }
"#;

/// Writes `files` into a fresh directory, compiles them all and returns (directory, error).
fn compile(
    files: &[(&str, &str)],
    tweak: impl FnOnce(crate::Builder) -> crate::Builder,
) -> (tempfile::TempDir, Result<(), Error>) {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        fs::write(dir.path().join(name), text).unwrap();
    }
    let protos: Vec<_> = files
        .iter()
        .map(|(name, _)| dir.path().join(name))
        .collect();
    let builder = configure().out_dir(dir.path()).emit_rerun_if_changed(false);
    let result = tweak(builder).compile_protos(&protos, &[dir.path()]);
    (dir, result)
}

fn read(dir: &Path, name: &str) -> String {
    fs::read_to_string(dir.join(name)).unwrap()
}

fn echo_service() -> manual::Service {
    manual::Service::builder()
        .name("Echo")
        .package("echo")
        .comment("Echoes.")
        .method(
            manual::Method::builder()
                .name("echo")
                .route_name("Echo")
                .input_type("crate::EchoRequest")
                .output_type("crate::EchoReply")
                .build(),
        )
        .build()
}

#[test]
fn streaming_rpcs_generate_each_kind() {
    let proto = "syntax = \"proto3\"; package echo; message Msg {}\n\
         service Echo { rpc Ok(Msg) returns (Msg); rpc Chat(stream Msg) returns (stream Msg);\
         rpc Upload(stream Msg) returns (Msg); rpc Watch(Msg) returns (stream Msg); }";
    let (dir, result) = compile(&[("echo.proto", proto)], |b| b);
    result.unwrap();
    let code = std::fs::read_to_string(dir.path().join("echo.rs")).unwrap();
    // Compared without whitespace (and trailing commas): where rustfmt breaks a line
    // depends on the length of the runtime crate's name, not on what was generated.
    let squeeze = |text: &str| -> String {
        let bare: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        bare.replace(",)", ")").replace(",>", ">")
    };
    let flat = squeeze(&code);
    for expected in [
        "MethodDescriptor::new(\"/echo.Echo/Ok\")",
        "with_kind( \"/echo.Echo/Chat\", rdmarpc_core::codegen::MethodKind::Streaming, )",
        "with_kind( \"/echo.Echo/Upload\", rdmarpc_core::codegen::MethodKind::ClientStreaming, )",
        "with_kind( \"/echo.Echo/Watch\", rdmarpc_core::codegen::MethodKind::ServerStreaming, )",
        "type ChatStream: rdmarpc_core::codegen::Stream<",
        "type WatchStream: rdmarpc_core::codegen::Stream<",
        "request: rdmarpc_core::codegen::Request<rdmarpc_core::codegen::Streaming<super::Msg>>",
        "impl rdmarpc_core::codegen::IntoStreamingRequest<Message = super::Msg>",
        "rdmarpc_core::codegen::Response<rdmarpc_core::codegen::Streaming<super::Msg>>",
        "fn call_streaming(",
    ] {
        assert!(
            flat.contains(&squeeze(expected)),
            "missing {expected:?} in:\n{code}"
        );
    }
    assert!(
        !code.contains("type UploadStream"),
        "only streamed responses get a type"
    );
    assert!(!code.contains("type OkStream"));
}

#[test]
fn proto_front_end_emits_clients_servers_and_descriptors() {
    let (dir, result) = compile(&[("echo.proto", ECHO_PROTO)], |b| b);
    result.unwrap();
    let code = read(dir.path(), "echo.rs");
    for expected in [
        "pub struct EchoRequest",
        "pub mod echo_methods",
        "pub static METHODS: [rdmarpc_core::codegen::MethodDescriptor; 2usize]",
        "rdmarpc_core::codegen::MethodDescriptor::new(\"/echo.Echo/Echo\")",
        "rdmarpc_core::codegen::MethodDescriptor::new(\"/echo.Echo/GetType\")",
        "pub mod echo_client",
        "pub struct EchoClient<C: rdmarpc_core::codegen::Connection>",
        "pub async fn echo(",
        "pub async fn get_type(",
        "request: impl rdmarpc_core::codegen::IntoRequest<super::EchoRequest>",
        "rdmarpc_core::codegen::Response<super::EchoReply>",
        "&super::echo_methods::METHODS[1usize]",
        "pub mod echo_server",
        "pub trait Echo: ::core::marker::Send + ::core::marker::Sync + 'static",
        "pub struct EchoServer<T>",
        "const NAME: &'static str = \"echo.Echo\";",
        "<T as Echo>::get_type(&inner, request).await",
        "pub struct AdminClient",
        "#[allow(missing_docs)]",
    ] {
        assert!(code.contains(expected), "missing `{expected}` in:\n{code}");
    }
    // Proto comments become docs, escaped like prost escapes message docs.
    assert!(code.contains("/// Echoes messages back."), "{code}");
    assert!(code.contains("\\[the docs\\]"), "{code}");
    assert!(code.contains("<https://example.invalid/echo>"), "{code}");
    assert!(code.contains("/// Returns the request's text."), "{code}");
    // Undocumented RPCs get a generated doc line.
    assert!(code.contains("/// Calls `/echo.Echo/GetType`."), "{code}");
    // A service without methods has no single-arm `match`.
    let admin = &code[code
        .find("impl<T: Admin> rdmarpc_core::codegen::Service")
        .unwrap()..];
    assert!(!admin.contains("match index"), "{admin}");
    assert!(
        admin.contains("::std::format!(\"/echo.Admin/#{}\", index)"),
        "{admin}"
    );
}

#[test]
fn options_select_client_server_and_runtime_path() {
    let (dir, result) = compile(&[("echo.proto", ECHO_PROTO)], |b| {
        b.build_server(false)
            .codegen_path("::my_rt::codegen")
            .allow_undocumented_messages(false)
            .bytes(["."])
            .type_attribute(".echo.EchoRequest", "#[derive(Eq)]")
    });
    result.unwrap();
    let code = read(dir.path(), "echo.rs");
    assert!(code.contains("pub mod echo_client"));
    assert!(!code.contains("echo_server"));
    assert!(code.contains("::my_rt::codegen::Channel<C>"));
    assert!(!code.contains("allow(missing_docs)"));
    assert!(code.contains("#[derive(Eq)]"));

    let (_dir, result) = compile(&[("echo.proto", ECHO_PROTO)], |b| {
        b.codegen_path("not a path")
    });
    assert!(matches!(
        result,
        Err(Error::InvalidSyntax {
            what: "codegen path",
            ..
        })
    ));
}

#[test]
fn cross_package_types_resolve_from_the_generated_modules() {
    let common = "syntax = \"proto3\"; package acme.common; message Money { int64 cents = 1; }";
    let store = "syntax = \"proto3\"; package acme.store; import \"common.proto\";\n\
                 import \"google/protobuf/empty.proto\";\n\
                 service Till { rpc Pay(acme.common.Money) returns (google.protobuf.Empty); }";
    let (dir, result) = compile(&[("common.proto", common), ("store.proto", store)], |b| b);
    result.unwrap();
    let code = read(dir.path(), "acme.store.rs");
    assert!(
        code.contains("IntoRequest<super::super::common::Money>"),
        "{code}"
    );
    assert!(
        code.contains("rdmarpc_core::codegen::Response<()>"),
        "{code}"
    );
    assert!(code.contains("\"/acme.store.Till/Pay\""), "{code}");
    assert!(!dir.path().join("google.protobuf.rs").exists());
}

#[test]
fn parse_errors_are_reported_not_panicked() {
    let (_dir, result) = compile(&[("bad.proto", "syntax = \"proto3\"; message {")], |b| b);
    assert!(matches!(result, Err(Error::Proto(_))), "{result:?}");
    let (_dir, result) = compile(
        &[(
            "bad.proto",
            "syntax = \"proto3\"; import \"missing.proto\";",
        )],
        |b| b,
    );
    let error = result.unwrap_err();
    assert!(error.to_string().contains("missing.proto"), "{error}");
    let io: std::io::Error = error.into();
    assert!(io.to_string().contains("missing.proto"));
}

#[test]
fn descriptor_set_is_written_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let fds_path = dir.path().join("echo.fds");
    let (_proto_dir, result) = compile(&[("echo.proto", ECHO_PROTO)], |b| {
        b.file_descriptor_set_path(&fds_path)
    });
    result.unwrap();
    let fds = prost_types::FileDescriptorSet::decode(&*fs::read(&fds_path).unwrap()).unwrap();
    assert_eq!(fds.file[0].service[0].name(), "Echo");
}

/// Just enough of descriptor.proto to reach a method's options as bytes.
mod raw {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Set {
        #[prost(message, repeated, tag = "1")]
        pub(super) file: Vec<File>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct File {
        #[prost(string, tag = "1")]
        pub(super) name: String,
        #[prost(message, repeated, tag = "6")]
        pub(super) service: Vec<Service>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Service {
        #[prost(message, repeated, tag = "2")]
        pub(super) method: Vec<Method>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Method {
        #[prost(bytes = "vec", tag = "4")]
        pub(super) options: Vec<u8>,
    }
}

#[test]
fn descriptor_set_keeps_custom_options() {
    let dir = tempfile::tempdir().unwrap();
    let fds_path = dir.path().join("shop.fds");
    let shop = r#"
        syntax = "proto3";
        package shop;
        import "google/protobuf/descriptor.proto";
        extend google.protobuf.MethodOptions { bool idempotent = 50001; }
        service Shop { rpc Buy(Order) returns (Order) { option (idempotent) = true; } }
        message Order {}
    "#;
    let (_proto_dir, result) = compile(&[("shop.proto", shop)], |b| {
        b.file_descriptor_set_path(&fds_path)
    });
    result.unwrap();
    let set = raw::Set::decode(&*fs::read(&fds_path).unwrap()).unwrap();
    let file = set.file.iter().find(|f| f.name == "shop.proto").unwrap();
    // Field 50001, varint, true: what reflection clients read the option from.
    assert_eq!(file.service[0].method[0].options, [0x88, 0xb5, 0x18, 0x01]);
}

#[test]
fn manual_builder_generates_and_writes_one_file_per_service() {
    let code = crate::format(CodeGenBuilder::new().generate(&echo_service()).unwrap()).unwrap();
    assert!(code.contains("pub struct EchoClient"), "{code}");
    assert!(code.contains("pub trait Echo"), "{code}");
    assert!(code.contains("/// Echoes."), "{code}");
    // Absolute types are kept as they are.
    assert!(code.contains("IntoRequest<crate::EchoRequest>"), "{code}");
    assert!(
        code.contains("MethodDescriptor::new(\"/echo.Echo/Echo\")"),
        "{code}"
    );

    let dir = tempfile::tempdir().unwrap();
    let unpackaged = manual::Service::builder()
        .name("ping_pong")
        .method(
            manual::Method::builder()
                .name("Ping")
                .input_type("()")
                .output_type("Pong")
                .build(),
        )
        .build();
    manual::Builder::new()
        .out_dir(dir.path())
        .build_client(false)
        .compile(&[echo_service(), unpackaged])
        .unwrap();
    let echo = read(dir.path(), "echo.Echo.rs");
    assert!(echo.starts_with("// This file is @generated by rdmarpc-codegen."));
    assert!(!echo.contains("echo_client"));
    let ping = read(dir.path(), "ping_pong.rs");
    assert!(ping.contains("pub trait PingPong"), "{ping}");
    assert!(ping.contains("pub struct PingPongServer<T>"), "{ping}");
    assert!(ping.contains("\"/ping_pong/Ping\""), "{ping}");
    assert!(ping.contains("fn ping("), "{ping}");
    assert!(
        ping.contains("rdmarpc_core::codegen::Request<()>"),
        "{ping}"
    );
    assert!(
        ping.contains("rdmarpc_core::codegen::Response<super::Pong>"),
        "{ping}"
    );
}

#[test]
fn method_names_are_snake_case_and_keyword_safe() {
    let method = |name: &str| {
        manual::Method::builder()
            .name(name)
            .input_type("A")
            .output_type("B")
            .build()
    };
    let service = manual::Service::builder()
        .name("Kw")
        .method(method("type"))
        .method(method("self"))
        .method(method("GetHTTPStatus"))
        .method(method("r#async"))
        .build();
    let code = crate::format(CodeGenBuilder::new().generate(&service).unwrap()).unwrap();
    for expected in [
        "fn r#type(",
        "fn self_(",
        "fn get_http_status(",
        "fn r#async(",
        "\"/Kw/Type\"",
        "\"/Kw/GetHttpStatus\"",
    ] {
        assert!(code.contains(expected), "missing `{expected}` in:\n{code}");
    }
}

#[test]
fn clients_get_connect_unless_turned_off_or_taken_by_a_method() {
    let generate = |builder: &CodeGenBuilder, service: &manual::Service| {
        crate::format(builder.generate(service).unwrap()).unwrap()
    };
    let code = generate(&CodeGenBuilder::new(), &echo_service());
    assert!(
        code.contains("impl EchoClient<rdmarpc_transport::AnyConnection>"),
        "{code}"
    );
    assert!(code.contains("pub async fn connect(") && code.contains("pub fn connect_lazy("));
    let code = generate(CodeGenBuilder::new().build_connect(false), &echo_service());
    assert!(
        !code.contains("fn connect") && !code.contains("AnyConnection"),
        "{code}"
    );
    let code = generate(
        CodeGenBuilder::new().connect_type("my::Conn"),
        &echo_service(),
    );
    assert!(code.contains("impl EchoClient<my::Conn>"), "{code}");
    // A method called `connect` keeps its name; the helpers are left out.
    let service = manual::Service::builder()
        .name("Link")
        .method(
            manual::Method::builder()
                .name("connect")
                .input_type("A")
                .output_type("B")
                .build(),
        )
        .build();
    let code = generate(&CodeGenBuilder::new(), &service);
    assert!(
        code.contains("pub async fn connect(") && code.contains("IntoRequest<super::A>"),
        "{code}"
    );
    assert!(
        !code.contains("connect_lazy") && !code.contains("AnyConnection"),
        "{code}"
    );
}

#[test]
fn invalid_names_and_types_name_the_method() {
    let service = manual::Service::builder()
        .name("Echo")
        .package("echo")
        .method(
            manual::Method::builder()
                .name("echo")
                .input_type("Vec<")
                .output_type("B")
                .build(),
        )
        .build();
    let error = CodeGenBuilder::new().generate(&service).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("input type `Vec<` in echo.Echo/Echo"),
        "{error}"
    );

    let service = manual::Service::builder()
        .name("Ok")
        .package("a.{b}")
        .build();
    let error = CodeGenBuilder::new()
        .generate(&service)
        .map(drop)
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::InvalidSyntax {
                what: "package",
                ..
            }
        ),
        "{error}"
    );

    let service = manual::Service::builder().name("Bad-Name").build();
    let error = CodeGenBuilder::new()
        .generate(&service)
        .map(drop)
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::InvalidSyntax {
                what: "service name",
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn nothing_is_emitted_without_client_and_server() {
    let tokens = CodeGenBuilder::new()
        .build_client(false)
        .build_server(false)
        .generate(&echo_service())
        .unwrap();
    assert!(tokens.is_empty());
}
