//! The request path at run time: .proto -> descriptors -> method -> JSON/binary/payload ->
//! DynamicMessage -> protobuf bytes that the generated types decode.

use std::path::{Path, PathBuf};

use prost::Message;
use prost_reflect::{DynamicMessage, Value};
use rdmarpc_load::data::{self, Messages};
use rdmarpc_load::proto::{find_method, load_descriptors, Method};

fn proto_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto")
}

fn method(file: &str, call: &str) -> Method {
    let pool = load_descriptors(&proto_dir().join(file), &[proto_dir()]).unwrap();
    find_method(&pool, call).unwrap()
}

#[test]
fn method_lookup() {
    let m = method("echo.proto", "echo.Echo/Echo");
    assert_eq!(m.descriptor.path, "/echo.Echo/Echo");
    assert_eq!(
        m.descriptor.id,
        rdmarpc_core::codegen::method_id("/echo.Echo/Echo")
    );
    assert_eq!(m.input.full_name(), "echo.EchoRequest");
    assert_eq!(m.output.full_name(), "echo.EchoReply");
    // ghz also accepts a dot before the method, and the proto without -I.
    let pool = load_descriptors(&proto_dir().join("kv.proto"), &[]).unwrap();
    assert_eq!(
        find_method(&pool, "kv.Kv.Get").unwrap().descriptor.path,
        "/kv.Kv/Get"
    );
    let err = find_method(&pool, "kv.Kv/Nope").unwrap_err().to_string();
    assert!(
        err.contains("Get") && err.contains("Put"),
        "lists the methods: {err}"
    );
    assert!(find_method(&pool, "kv.Nope/Get").is_err());
    assert!(load_descriptors(Path::new("/nonexistent.proto"), &[]).is_err());
}

#[test]
fn json_object_becomes_the_generated_message() {
    let m = method("kv.proto", "kv.Kv/Put");
    // bytes as base64, per protobuf's JSON mapping.
    let msgs = data::messages_from_json(&m.input, r#"{"key": "k1", "value": "aGVsbG8="}"#).unwrap();
    assert_eq!(msgs.len(), 1);
    let decoded = examples::kv::PutRequest::decode(msgs[0].encode_to_vec().as_slice()).unwrap();
    assert_eq!(decoded.key, "k1");
    assert_eq!(decoded.value, &b"hello"[..]);
}

#[test]
fn json_field_names_in_either_case() {
    let m = method("echo.proto", "echo.Echo/Echo");
    for json in [r#"{"delay_ms": 7}"#, r#"{"delayMs": 7}"#] {
        let msgs = data::messages_from_json(&m.input, json).unwrap();
        let decoded =
            examples::echo::EchoRequest::decode(msgs[0].encode_to_vec().as_slice()).unwrap();
        assert_eq!(decoded.delay_ms, 7, "{json}");
    }
}

#[test]
fn json_array_is_used_round_robin() {
    let m = method("kv.proto", "kv.Kv/Get");
    let msgs = data::messages_from_json(&m.input, r#"[{"key": "a"}, {"key": "b"}, {"key": "c"}]"#)
        .unwrap();
    let messages = Messages::new(msgs).unwrap();
    let key = |i| match messages
        .get(i)
        .get_field_by_name("key")
        .unwrap()
        .into_owned()
    {
        Value::String(s) => s,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        [key(0), key(1), key(2), key(3), key(7)],
        ["a", "b", "c", "a", "b"]
    );
    assert!(Messages::new(Vec::new()).is_err());
}

#[test]
fn bad_json_is_refused_with_a_reason() {
    let m = method("kv.proto", "kv.Kv/Put");
    let err = |json: &str| {
        format!(
            "{:#}",
            data::messages_from_json(&m.input, json).unwrap_err()
        )
    };
    assert!(err("{").contains("not JSON"));
    assert!(
        err(r#"{"nope": 1}"#).contains("nope"),
        "{}",
        err(r#"{"nope": 1}"#)
    );
    assert!(err(r#"{"key": 5}"#).contains("kv.PutRequest"));
    assert!(err(r#"[{"key": "a"}, {"value": "!!"}]"#).contains("element 1"));
}

#[test]
fn binary_data_round_trips() {
    let m = method("kv.proto", "kv.Kv/Put");
    let generated = examples::kv::PutRequest {
        key: "bin".into(),
        value: vec![1, 2, 3].into(),
    };
    let msg = data::message_from_binary(&m.input, &generated.encode_to_vec()).unwrap();
    assert_eq!(msg.encode_to_vec(), generated.encode_to_vec());
    assert!(data::message_from_binary(&m.input, &[0xff, 0xff, 0xff]).is_err());
}

#[test]
fn payload_size_fills_the_first_bytes_field_or_a_named_one() {
    let m = method("echo.proto", "echo.Echo/Echo");
    let mut msgs = vec![DynamicMessage::new(m.input.clone())];
    let field = data::set_payload(&mut msgs, &m.input, 16 << 10, None).unwrap();
    assert_eq!(field, "payload");
    let decoded = examples::echo::EchoRequest::decode(msgs[0].encode_to_vec().as_slice()).unwrap();
    assert_eq!(decoded.payload.len(), 16 << 10);

    let kv = method("kv.proto", "kv.Kv/Put");
    let mut msgs = data::messages_from_json(&kv.input, r#"[{"key": "a"}, {"key": "b"}]"#).unwrap();
    assert_eq!(
        data::set_payload(&mut msgs, &kv.input, 100, None).unwrap(),
        "value"
    );
    assert_eq!(
        data::set_payload(&mut msgs, &kv.input, 3, Some("key")).unwrap(),
        "key"
    );
    let decoded = examples::kv::PutRequest::decode(msgs[1].encode_to_vec().as_slice()).unwrap();
    assert_eq!((decoded.key.as_str(), decoded.value.len()), ("xxx", 100));

    let get = method("kv.proto", "kv.Kv/Scan");
    let mut msgs = vec![DynamicMessage::new(get.input.clone())];
    assert!(
        data::set_payload(&mut msgs, &get.input, 1, None).is_err(),
        "no bytes field"
    );
    assert!(
        data::set_payload(&mut msgs, &get.input, 1, Some("limit")).is_err(),
        "not bytes"
    );
}

#[test]
fn data_and_metadata_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data.json");
    std::fs::write(&file, r#"{"key": "from-file"}"#).unwrap();
    let arg = format!("@{}", file.display());
    assert_eq!(
        data::read_data_arg(&arg, "-d").unwrap(),
        r#"{"key": "from-file"}"#
    );
    assert_eq!(data::read_data_arg("{}", "-d").unwrap(), "{}");
    assert!(data::read_data_arg("@/nonexistent", "-d").is_err());

    let md = data::metadata_from_json(r#"{"x-b": "2", "x-a": "1"}"#).unwrap();
    assert_eq!(
        md,
        vec![("x-a".into(), "1".into()), ("x-b".into(), "2".into())]
    );
    assert!(data::metadata_from_json(r#"{"x": 1}"#).is_err());
    assert!(data::metadata_from_json(r#"["x"]"#).is_err());
}

/// A reader that hands out at most 1000 bytes per read, `left` in all.
struct Trickle {
    left: usize,
}

impl std::io::Read for Trickle {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.left).min(1000);
        buf[..n].fill(b'x');
        self.left -= n;
        Ok(n)
    }
}

/// The input bounds hold no more than they may read: a buffer of at most `max + 1`
/// bytes (a `read_to_end` doubled past it: 16 MiB for 10 MiB, 2 GiB for 1 GiB of -B),
/// and a file's size up front.
#[test]
fn bounded_reads_allocate_at_most_the_bound() {
    let max = 10 << 20;
    for len in [max, max - 1, 5 << 20, 1, 0] {
        let bytes = data::read_bounded(Trickle { left: len }, max as u64, "-b").unwrap();
        assert_eq!(bytes.len(), len);
        assert!(bytes.capacity() <= max + 1, "{len}: {}", bytes.capacity());
    }
    let e = data::read_bounded(Trickle { left: max + 1 }, max as u64, "-b").unwrap_err();
    assert!(
        e.to_string().contains("-b: more than 10485760 bytes"),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.bin");
    std::fs::write(&path, vec![7u8; 3 << 20]).unwrap();
    let bytes = data::read_file_bounded(&path, max as u64, "-B").unwrap();
    assert_eq!(bytes.len(), 3 << 20);
    assert_eq!(bytes.capacity(), (3 << 20) + 1, "sized from the file");
    let e = data::read_file_bounded(&path, 1 << 20, "-B").unwrap_err();
    assert!(e.to_string().contains("more than 1048576 bytes"), "{e}");
}
