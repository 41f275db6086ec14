//! Request messages and metadata from the command line: JSON (`-d`), binary protobuf
//! (`-b`), a generated payload (`--payload-size`) and metadata (`-m`).
//!
//! Messages are built once, before the run, as [`DynamicMessage`]s of the method's input
//! type. When several are given (a JSON array), calls use them round-robin, as ghz does
//! for unary calls: request `i` carries message `i % len`. That is how a bad request can
//! be mixed into a run.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use bytes::Bytes;
use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, Value};

use crate::template::{CallFacts, Template};

/// The request messages of a run, used round-robin: built once, or rendered for each
/// call from a template (`{{.RequestNumber}}` and the like in `-d`). Never empty.
#[derive(Debug, Clone)]
pub struct Messages {
    fixed: Arc<Vec<DynamicMessage>>,
    template: Option<Arc<Rendered>>,
    /// `-m` with template actions, rendered for every call.
    metadata: Option<Arc<Template>>,
}

/// A template and what is done to each rendering.
#[derive(Debug)]
struct Rendered {
    template: Template,
    desc: MessageDescriptor,
    /// `--payload-size`'s field and value, set into every rendered message.
    payload: Option<(FieldDescriptor, Value)>,
    /// `--stream-dynamic-messages`: each message of a stream rendered anew.
    per_message: bool,
}

impl Messages {
    /// Wraps `messages`.
    ///
    /// # Errors
    /// If `messages` is empty.
    pub fn new(messages: Vec<DynamicMessage>) -> anyhow::Result<Messages> {
        if messages.is_empty() {
            bail!("no request message (an empty JSON array?)");
        }
        Ok(Messages {
            fixed: Arc::new(messages),
            template: None,
            metadata: None,
        })
    }

    /// Messages rendered from `template` for each call (and, with `per_message`, for each
    /// message of a request stream), as messages of type `desc` with `payload` set.
    ///
    /// # Errors
    /// A first rendering that is not valid request data.
    pub fn templated(
        template: Template,
        desc: MessageDescriptor,
        payload: Option<(FieldDescriptor, Value)>,
        per_message: bool,
    ) -> anyhow::Result<Messages> {
        let rendered = Rendered {
            template,
            desc,
            payload,
            per_message,
        };
        let first = rendered
            .render(CallFacts {
                request_number: 0,
                worker: 0,
            })
            .map_err(anyhow::Error::msg)?;
        Ok(Messages {
            fixed: Arc::new(first),
            template: Some(Arc::new(rendered)),
            metadata: None,
        })
    }

    /// The same messages, with metadata rendered from `template` for every call.
    ///
    /// # Errors
    /// A first rendering that is not a JSON object of strings.
    pub fn with_metadata_template(mut self, template: Template) -> anyhow::Result<Messages> {
        metadata_from_json(&template.render(CallFacts {
            request_number: 0,
            worker: 0,
        }))?;
        self.metadata = Some(Arc::new(template));
        Ok(self)
    }

    /// The metadata of call `call` when it is rendered per call (`None`: the run's
    /// fixed metadata).
    ///
    /// # Errors
    /// A rendering that is not a JSON object of strings (the call fails with it).
    pub fn metadata_for(&self, call: CallFacts) -> Result<Option<Vec<(String, String)>>, String> {
        match &self.metadata {
            None => Ok(None),
            Some(template) => metadata_from_json(&template.render(call))
                .map(Some)
                .map_err(|e| format!("metadata rendered for call {}: {e:#}", call.request_number)),
        }
    }

    /// The messages of call `call`: the array of `-d`, rendered for it if templated.
    ///
    /// # Errors
    /// A rendering that is not valid request data (the call fails with it).
    pub fn for_call(&self, call: CallFacts) -> Result<Arc<Vec<DynamicMessage>>, String> {
        match &self.template {
            None => Ok(self.fixed.clone()),
            Some(t) => t.render(call).map(Arc::new),
        }
    }

    /// The message of a unary or server-streaming call: element `request_number` of the
    /// array, round-robin.
    ///
    /// # Errors
    /// As [`Messages::for_call`].
    pub fn for_unary(&self, call: CallFacts) -> Result<DynamicMessage, String> {
        let all = self.for_call(call)?;
        Ok(all[(call.request_number % all.len() as u64) as usize].clone())
    }

    /// Whether each message of a request stream is rendered anew
    /// (`--stream-dynamic-messages` with a template).
    pub fn per_message(&self) -> bool {
        self.template.as_ref().is_some_and(|t| t.per_message)
    }

    /// The message of request number `index`, of the messages built once (the first
    /// rendering, for a template).
    pub fn get(&self, index: u64) -> &DynamicMessage {
        &self.fixed[(index % self.fixed.len() as u64) as usize]
    }

    /// The messages built once (the first rendering, for a template), in order.
    pub fn as_slice(&self) -> &[DynamicMessage] {
        &self.fixed
    }
}

impl Rendered {
    fn render(&self, call: CallFacts) -> Result<Vec<DynamicMessage>, String> {
        let text = self.template.render(call);
        let mut messages = messages_from_json(&self.desc, &text).map_err(|e| {
            format!(
                "request data rendered for call {}: {e:#}",
                call.request_number
            )
        })?;
        if messages.is_empty() {
            return Err("no request message (an empty JSON array?)".into());
        }
        if let Some((field, value)) = &self.payload {
            for message in &mut messages {
                message.set_field(field, value.clone());
            }
        }
        Ok(messages)
    }
}

/// The most bytes of JSON text read from one input: `-d @` (standard input), `-d @FILE`,
/// `-D`, `-m @FILE`, `-M` (the default largest message).
pub const MAX_TEXT_BYTES: u64 = 64 << 20;

/// The most bytes of binary data read: `-b` (standard input), `-B`.
pub const MAX_BINARY_BYTES: u64 = 1 << 30;

/// Reads all of `reader`, `what` (the flag and its input, for errors), up to `max` bytes.
///
/// # Errors
/// A read error, or more than `max` bytes.
pub fn read_bounded(reader: impl std::io::Read, max: u64, what: &str) -> anyhow::Result<Vec<u8>> {
    read_up_to(reader, max, 0, what)
}

/// As [`read_bounded`], expecting about `hint` bytes: the buffer starts at `hint` (plus
/// one, to see the end) and doubles from there, but never past `max + 1` bytes (a
/// `read_to_end` of `max + 1` would double past it: 2 GiB for 1 GiB of `-B`).
fn read_up_to(
    mut reader: impl std::io::Read,
    max: u64,
    hint: u64,
    what: &str,
) -> anyhow::Result<Vec<u8>> {
    let limit = max.saturating_add(1);
    let mut bytes = Vec::new();
    let mut want = hint.saturating_add(1).max(8 << 10);
    loop {
        let step = want.min(limit - bytes.len() as u64);
        bytes.reserve_exact(usize::try_from(step).unwrap_or(usize::MAX));
        let read =
            std::io::Read::read_to_end(&mut std::io::Read::take(&mut reader, step), &mut bytes)
                .with_context(|| format!("cannot read {what}"))?;
        // Short of the step: the end of the input (read_to_end reads until it).
        if (read as u64) < step || bytes.len() as u64 >= limit {
            break;
        }
        want = bytes.len() as u64;
    }
    if bytes.len() as u64 > max {
        bail!("{what}: more than {max} bytes");
    }
    Ok(bytes)
}

/// Reads the file at `path` for `flag`, up to `max` bytes.
///
/// # Errors
/// An unreadable file, or more than `max` bytes.
pub fn read_file_bounded(path: &Path, max: u64, flag: &str) -> anyhow::Result<Vec<u8>> {
    let what = format!("{flag} {}", path.display());
    let file = std::fs::File::open(path).with_context(|| format!("cannot read {what}"))?;
    // Sized up front for a regular file (0 for a FIFO or /dev/zero: grown as read).
    let hint = file.metadata().map_or(0, |m| m.len()).min(max);
    read_up_to(file, max, hint, &what)
}

/// Reads the JSON text of the file at `path` for `flag`, up to [`MAX_TEXT_BYTES`].
///
/// # Errors
/// An unreadable or oversized file, or one that is not UTF-8.
pub fn read_text_file(path: &Path, flag: &str) -> anyhow::Result<String> {
    let bytes = read_file_bounded(path, MAX_TEXT_BYTES, flag)?;
    String::from_utf8(bytes).with_context(|| format!("{flag} {}: not UTF-8", path.display()))
}

/// Reads `flag`'s argument (`-d`, `-m`): inline JSON, `@` for the JSON on standard input
/// (as ghz), or `@FILE` for the JSON in FILE; at most [`MAX_TEXT_BYTES`] read.
///
/// # Errors
/// An unreadable file or standard input, or too much of it.
pub fn read_data_arg(arg: &str, flag: &str) -> anyhow::Result<String> {
    match arg.strip_prefix('@') {
        Some("") => {
            let what = format!("{flag} @ (standard input)");
            let bytes = read_bounded(std::io::stdin().lock(), MAX_TEXT_BYTES, &what)?;
            String::from_utf8(bytes).with_context(|| format!("{what}: not UTF-8"))
        }
        Some(path) => read_text_file(Path::new(path), flag),
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

/// Decodes binary data as ghz reads `-b` and `-B`: several messages of type `desc`,
/// each after its length as a varint (protobuf's "delimited" stream), when the bytes are
/// exactly such a sequence; otherwise one message.
///
/// # Errors
/// Bytes that are neither.
pub fn messages_from_binary(
    desc: &MessageDescriptor,
    bytes: &[u8],
) -> anyhow::Result<Vec<DynamicMessage>> {
    if let Some(messages) = delimited(desc, bytes) {
        return Ok(messages);
    }
    Ok(vec![message_from_binary(desc, bytes)?])
}

/// `bytes` as length-delimited messages, if they are exactly that (at least one).
fn delimited(desc: &MessageDescriptor, mut bytes: &[u8]) -> Option<Vec<DynamicMessage>> {
    let mut messages = Vec::new();
    while !bytes.is_empty() {
        let len = prost::encoding::decode_varint(&mut bytes).ok()?;
        let len = usize::try_from(len).ok().filter(|&n| n <= bytes.len())?;
        let (message, rest) = bytes.split_at(len);
        messages.push(DynamicMessage::decode(desc.clone(), message).ok()?);
        bytes = rest;
    }
    (!messages.is_empty()).then_some(messages)
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
    let (field_desc, value) = payload_value(desc, size, field)?;
    for message in messages {
        message.set_field(&field_desc, value.clone());
    }
    Ok(field_desc.name().to_owned())
}

/// The field `--payload-size` fills (`field`, or the first singular `bytes` field) and
/// its value of `size` bytes.
///
/// # Errors
/// As [`set_payload`].
pub fn payload_value(
    desc: &MessageDescriptor,
    size: usize,
    field: Option<&str>,
) -> anyhow::Result<(FieldDescriptor, Value)> {
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
    Ok((field_desc, value))
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
