//! Request messages and metadata from the command line: JSON (`-d`), binary protobuf
//! (`-b`), a generated payload (`--payload-size`) and metadata (`-m`).
//!
//! Messages are built once, before the run, as [`DynamicMessage`]s of the method's input
//! type. When several are given (a JSON array), calls use them round-robin, as ghz does
//! for unary calls: request `i` carries message `i % len`. That is how a bad request can
//! be mixed into a run.

use anyhow::{bail, Context};
use bytes::Bytes;
use prost_reflect::{DynamicMessage, Kind, MessageDescriptor, Value};

/// The request messages of a run, used round-robin. Never empty.
#[derive(Debug, Clone)]
pub struct Messages(Vec<DynamicMessage>);

impl Messages {
    /// Wraps `messages`.
    ///
    /// # Errors
    /// If `messages` is empty.
    pub fn new(messages: Vec<DynamicMessage>) -> anyhow::Result<Messages> {
        if messages.is_empty() {
            bail!("no request message (an empty JSON array?)");
        }
        Ok(Messages(messages))
    }

    /// The message of request number `index`.
    pub fn get(&self, index: u64) -> &DynamicMessage {
        &self.0[(index % self.0.len() as u64) as usize]
    }

    /// All messages, in order.
    pub fn as_slice(&self) -> &[DynamicMessage] {
        &self.0
    }
}

/// Reads `-d`'s argument: inline JSON, or `@FILE` for the JSON in FILE.
///
/// # Errors
/// An unreadable file.
pub fn read_data_arg(arg: &str) -> anyhow::Result<String> {
    match arg.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("cannot read {path}")),
        None => Ok(arg.to_owned()),
    }
}

/// Turns JSON into messages of type `desc` with protobuf's JSON mapping (`bytes` as base64,
/// field names in lowerCamelCase or as declared). An object is one message; an array is
/// several, used round-robin.
///
/// # Errors
/// Invalid JSON, an unknown field, or a value of the wrong type, naming the element.
pub fn messages_from_json(
    desc: &MessageDescriptor,
    json: &str,
) -> anyhow::Result<Vec<DynamicMessage>> {
    let value: serde_json::Value =
        serde_json::from_str(json).context("request data is not JSON")?;
    let parse = |v: serde_json::Value, what: &str| {
        DynamicMessage::deserialize(desc.clone(), v)
            .with_context(|| format!("{what} is not a valid {}", desc.full_name()))
    };
    match value {
        serde_json::Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| parse(v, &format!("request data element {i}")))
            .collect(),
        other => Ok(vec![parse(other, "request data")?]),
    }
}

/// Decodes a binary (serialized protobuf) message of type `desc`.
///
/// # Errors
/// Bytes that are not a valid encoding of `desc`.
pub fn message_from_binary(
    desc: &MessageDescriptor,
    bytes: &[u8],
) -> anyhow::Result<DynamicMessage> {
    DynamicMessage::decode(desc.clone(), bytes)
        .with_context(|| format!("binary data is not a valid {}", desc.full_name()))
}

/// Sets a payload of `size` bytes into each message: into field `field` (a `bytes` or
/// `string` field) if named, otherwise into the first singular `bytes` field of the type.
///
/// # Returns
/// The name of the field filled.
///
/// # Errors
/// No such field, or a field that is not a singular `bytes`/`string`.
pub fn set_payload(
    messages: &mut [DynamicMessage],
    desc: &MessageDescriptor,
    size: usize,
    field: Option<&str>,
) -> anyhow::Result<String> {
    let field_desc = match field {
        Some(name) => desc
            .get_field_by_name(name)
            .with_context(|| format!("{} has no field {name:?}", desc.full_name()))?,
        None => desc
            .fields()
            .find(|f| f.kind() == Kind::Bytes && !f.is_list())
            .with_context(|| {
                format!(
                    "{} has no bytes field for --payload-size; name one with --payload-field",
                    desc.full_name()
                )
            })?,
    };
    let value = match field_desc.kind() {
        _ if field_desc.is_list() || field_desc.is_map() => {
            bail!("--payload-field {} is repeated", field_desc.name())
        }
        Kind::Bytes => Value::Bytes(Bytes::from(payload_bytes(size))),
        Kind::String => Value::String("x".repeat(size)),
        other => bail!(
            "--payload-field {} is of type {other:?}, not bytes or string",
            field_desc.name()
        ),
    };
    for message in messages {
        message.set_field(&field_desc, value.clone());
    }
    Ok(field_desc.name().to_owned())
}

/// `size` bytes of a fixed, non-constant pattern.
fn payload_bytes(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i % 251) as u8).collect()
}

/// Parses `-m`'s JSON object of strings into metadata entries (sorted by key).
///
/// # Errors
/// Not an object, or a value that is not a string.
pub fn metadata_from_json(json: &str) -> anyhow::Result<Vec<(String, String)>> {
    let value: serde_json::Value = serde_json::from_str(json).context("metadata is not JSON")?;
    let serde_json::Value::Object(map) = value else {
        bail!("metadata must be a JSON object of strings, like {{\"key\": \"value\"}}");
    };
    map.into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => Ok((k, s)),
            other => bail!("metadata value of {k:?} is {other}, not a string"),
        })
        .collect()
}
