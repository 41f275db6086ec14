//! The index and the protocol without I/O, on the test protos of `tests/proto/acme`:
//! `shop.proto` imports `common.proto` and `options.proto`, which imports
//! `google/protobuf/descriptor.proto`.

use bytes::Bytes;
use prost::Message as _;
use prost_types::FileDescriptorProto;
use rdmarpc_core::Code;

use crate::answer::answer;
use crate::index::Index;
use crate::pb::v1::server_reflection_request::MessageRequest;
use crate::pb::v1::server_reflection_response::MessageResponse;
use crate::pb::v1::{ExtensionRequest, ServerReflectionRequest};
use crate::{Builder, Error, MAX_REQUEST_BYTES};

const SHOP_WITH_IMPORTS: [&str; 4] = [
    "acme/shop.proto",
    "acme/common.proto",
    "acme/options.proto",
    "google/protobuf/descriptor.proto",
];

/// The encoded set of `files` (imports included unless `imports` is false).
fn compile(files: &[&str], imports: bool) -> Bytes {
    let mut compiler =
        protox::Compiler::new([concat!(env!("CARGO_MANIFEST_DIR"), "/tests/proto")]).unwrap();
    compiler
        .include_imports(imports)
        .include_source_info(true)
        .open_files(files)
        .unwrap();
    compiler.encode_file_descriptor_set().into()
}

fn shop() -> Index {
    Index::build(&[compile(&["acme/shop.proto"], true)], None).unwrap()
}

fn names(files: &[Bytes]) -> Vec<String> {
    files
        .iter()
        .map(|file| {
            FileDescriptorProto::decode(file.clone())
                .unwrap()
                .name()
                .to_owned()
        })
        .collect()
}

#[test]
fn every_kind_of_symbol_finds_its_file_then_its_imports() {
    let index = shop();
    for symbol in [
        "acme.shop.Shop",
        "acme.shop.Shop.Buy",
        "acme.shop.Shop.Watch",
        "acme.shop.Order",
        ".acme.shop.Order",
        "acme.shop.Order.lines",
        "acme.shop.Order.payment",
        "acme.shop.Order.card",
        "acme.shop.Order.Line",
        "acme.shop.Order.Line.sku",
        "acme.shop.Order.Speed",
        "acme.shop.Order.FAST",
        "acme.shop.Order.Speed.FAST",
        "acme.shop.Receipt.color",
    ] {
        let files = index.file_containing_symbol(symbol);
        assert_eq!(
            names(&files.unwrap_or_default()),
            SHOP_WITH_IMPORTS,
            "{symbol}"
        );
    }
    for (symbol, file) in [
        ("acme.common.RED", "acme/common.proto"),
        ("acme.common.Color.RED", "acme/common.proto"),
        ("acme.common.Money.units", "acme/common.proto"),
        ("acme.options.idempotent", "acme/options.proto"),
        ("acme.options.Holder.count", "acme/options.proto"),
        (
            "google.protobuf.FieldDescriptorProto.TYPE_INT32",
            "google/protobuf/descriptor.proto",
        ),
        (
            "google.protobuf.FieldDescriptorProto.Type.TYPE_INT32",
            "google/protobuf/descriptor.proto",
        ),
    ] {
        let files = index.file_containing_symbol(symbol).unwrap();
        assert_eq!(names(&files)[0], file, "{symbol}");
    }
    let options = index
        .file_containing_symbol("acme.options.Extendable")
        .unwrap();
    assert_eq!(
        names(&options),
        ["acme/options.proto", "google/protobuf/descriptor.proto"]
    );
    for unknown in [
        "",
        "acme",
        "acme.shop",
        "acme.shop.Nope",
        "acme.shop.Shop.Sell",
        "acme.shop.Order.Line.nope",
        "shop.Order",
        "acme.shop.Order.",
    ] {
        assert!(
            index.file_containing_symbol(unknown).is_none(),
            "{unknown:?}"
        );
    }
}

#[test]
fn files_by_name_come_with_their_imports_each_once() {
    let index = shop();
    assert_eq!(
        names(&index.file_by_name("acme/shop.proto").unwrap()),
        SHOP_WITH_IMPORTS
    );
    assert_eq!(
        names(&index.file_by_name("acme/common.proto").unwrap()),
        ["acme/common.proto"]
    );
    assert!(index.file_by_name("shop.proto").is_none());
    assert!(index.file_by_name("").is_none());
    // Files go out as they were registered, byte for byte (custom options included).
    let set = compile(&["acme/shop.proto"], true);
    let registered = prost_types::FileDescriptorSet::decode(set.clone()).unwrap();
    let shop = index.file_by_name("acme/shop.proto").unwrap().remove(0);
    let expected = registered
        .file
        .iter()
        .find(|f| f.name() == "acme/shop.proto");
    assert_eq!(
        FileDescriptorProto::decode(shop.clone()).ok().as_ref(),
        expected
    );
    assert!(
        set.windows(shop.len()).any(|w| w == shop),
        "not the registered bytes"
    );
}

#[test]
fn extensions_by_extendee_and_number() {
    let index = shop();
    for (extendee, number) in [
        ("acme.options.Extendable", 100),
        ("acme.options.Extendable", 101),
        (".acme.options.Extendable", 101),
        ("google.protobuf.MethodOptions", 50001),
    ] {
        let files = index.file_containing_extension(extendee, number).unwrap();
        assert_eq!(
            names(&files)[0],
            "acme/options.proto",
            "{extendee} {number}"
        );
    }
    assert!(index
        .file_containing_extension("acme.options.Extendable", 150)
        .is_none());
    assert!(index
        .file_containing_extension("acme.shop.Order", 1)
        .is_none());
    assert_eq!(
        index.extension_numbers("acme.options.Extendable"),
        Some(&[100, 101][..])
    );
    assert_eq!(
        index.extension_numbers("google.protobuf.MethodOptions"),
        Some(&[50001][..])
    );
    // A message without extensions has none; what is not a message is not found.
    assert_eq!(index.extension_numbers("acme.shop.Order"), Some(&[][..]));
    assert_eq!(index.extension_numbers("acme.shop.Shop"), None);
    assert_eq!(index.extension_numbers("acme.common.Color"), None);
    assert_eq!(index.extension_numbers("acme.shop.Nope"), None);
}

#[test]
fn services_listed_are_the_sets_or_the_named_ones() {
    assert_eq!(shop().services(), ["acme.shop.Shop"]);
    let service = Builder::new()
        .register_encoded_file_descriptor_set(compile(&["acme/shop.proto"], true))
        .build()
        .unwrap();
    let listed = list(&service);
    assert_eq!(
        listed,
        [
            "acme.shop.Shop",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"
        ]
    );
    let service = Builder::new()
        .register_encoded_file_descriptor_set(compile(&["acme/shop.proto"], true))
        .with_service_name("grpc.reflection.v1.ServerReflection")
        .build()
        .unwrap();
    assert_eq!(
        list(&service),
        [
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"
        ]
    );
}

fn list(service: &crate::ReflectionService) -> Vec<String> {
    let response = service.answer_for_test(request(MessageRequest::ListServices(String::new())));
    match response.message_response {
        Some(MessageResponse::ListServicesResponse(list)) => {
            list.service.into_iter().map(|s| s.name).collect()
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn sets_that_cannot_be_served_are_refused_at_build() {
    let shop = compile(&["acme/shop.proto"], true);
    // The same files in two sets are served once.
    let twice = Builder::new()
        .register_encoded_file_descriptor_set(shop.clone())
        .register_encoded_file_descriptor_set(compile(&["acme/common.proto"], true))
        .build();
    assert!(twice.is_ok(), "{twice:?}");
    let refused = |builder: Builder| builder.build().unwrap_err();
    let base = || Builder::new().register_encoded_file_descriptor_set(shop.clone());

    let without_imports = refused(
        Builder::new().register_encoded_file_descriptor_set(compile(&["acme/shop.proto"], false)),
    );
    assert!(
        matches!(&without_imports, Error::MissingDependency { file, .. } if file == "acme/shop.proto"),
        "{without_imports}"
    );
    let garbage = refused(base().register_encoded_file_descriptor_set(&b"\x0a\xff\xff"[..]));
    assert!(matches!(garbage, Error::Decode { .. }), "{garbage}");

    // Another file of the same name, and another file defining the same names.
    let mut other = prost_types::FileDescriptorProto::decode(
        prost_types::FileDescriptorSet::decode(compile(&["acme/common.proto"], false))
            .unwrap()
            .file[0]
            .encode_to_vec()
            .as_slice(),
    )
    .unwrap();
    other.enum_type.clear();
    let conflicting = refused(base().register_file_descriptor_set(
        prost_types::FileDescriptorSet {
            file: vec![other.clone()],
        },
    ));
    assert!(
        matches!(conflicting, Error::ConflictingFile { .. }),
        "{conflicting}"
    );
    other.name = Some("acme/common_copy.proto".into());
    let duplicate = refused(
        base().register_file_descriptor_set(prost_types::FileDescriptorSet { file: vec![other] }),
    );
    assert!(
        matches!(&duplicate, Error::DuplicateSymbol { symbol, .. } if symbol.starts_with("acme.common.")),
        "{duplicate}"
    );
    let unknown = refused(base().with_service_name("acme.shop.Shopp"));
    assert!(matches!(unknown, Error::UnknownService { .. }), "{unknown}");
    let not_a_service = refused(base().with_service_name("acme.shop.Order"));
    assert!(
        matches!(not_a_service, Error::UnknownService { .. }),
        "{not_a_service}"
    );
}

fn request(message: MessageRequest) -> ServerReflectionRequest {
    ServerReflectionRequest {
        host: "localhost".into(),
        message_request: Some(message),
    }
}

fn error_of(response: &crate::pb::v1::ServerReflectionResponse) -> (Code, &str) {
    match &response.message_response {
        Some(MessageResponse::ErrorResponse(e)) => {
            (Code::from_u8(e.error_code as u8), e.error_message.as_str())
        }
        other => panic!("not an error: {other:?}"),
    }
}

#[test]
fn answers_echo_the_request_and_name_what_was_not_found() {
    let index = shop();
    let asked = request(MessageRequest::FileContainingSymbol(
        "acme.shop.Nope".into(),
    ));
    let response = answer(&index, asked.clone());
    assert_eq!(error_of(&response).0, Code::NotFound);
    assert!(error_of(&response).1.contains("acme.shop.Nope"));
    assert_eq!(response.original_request.as_ref(), Some(&asked));
    assert_eq!(response.valid_host, "localhost");

    for missing in [
        MessageRequest::FileByFilename("nope.proto".into()),
        MessageRequest::FileContainingExtension(ExtensionRequest {
            containing_type: "acme.options.Extendable".into(),
            extension_number: 199,
        }),
        MessageRequest::AllExtensionNumbersOfType("acme.shop.Nope".into()),
    ] {
        let response = answer(&index, request(missing.clone()));
        assert_eq!(error_of(&response).0, Code::NotFound, "{missing:?}");
    }
    let response = answer(
        &index,
        request(MessageRequest::AllExtensionNumbersOfType(
            "acme.options.Extendable".into(),
        )),
    );
    match response.message_response {
        Some(MessageResponse::AllExtensionNumbersResponse(numbers)) => {
            assert_eq!(numbers.base_type_name, "acme.options.Extendable");
            assert_eq!(numbers.extension_number, [100, 101]);
        }
        other => panic!("{other:?}"),
    }
    let none = answer(
        &index,
        ServerReflectionRequest {
            host: String::new(),
            message_request: None,
        },
    );
    assert_eq!(error_of(&none).0, Code::Unimplemented);
}

#[test]
fn requests_over_the_limit_get_an_error_without_the_echo() {
    let index = shop();
    let at_limit = "a".repeat(MAX_REQUEST_BYTES - 100);
    let response = answer(
        &index,
        request(MessageRequest::FileContainingSymbol(at_limit)),
    );
    assert_eq!(error_of(&response).0, Code::NotFound);
    let huge = "a".repeat(1 << 20);
    let response = answer(&index, request(MessageRequest::FileContainingSymbol(huge)));
    let (code, message) = error_of(&response);
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("more than 8192"), "{message}");
    assert!(response.original_request.is_none());
    assert!(response.encoded_len() < 200, "{}", response.encoded_len());
}
