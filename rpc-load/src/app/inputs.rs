//! What the run sends and to which method: the descriptors (`--proto`, `--protoset`, or
//! the server's reflection), the request messages (`-d`, `-D`, `-b`, `-B`,
//! `--payload-size`), the metadata (`-m`, `-M`) and the tags (`--tags`).

use anyhow::{bail, Context};
use prost_reflect::{DescriptorPool, DynamicMessage};

use crate::cli::Args;
use crate::data::{self, Messages};
use crate::proto::{load_descriptors, load_protoset, Method};
use crate::template::{MethodFacts, Template};

/// The descriptor pool from `--proto` (which takes precedence) or `--protoset`, if either
/// is given; `None` means reflection.
///
/// # Errors
/// A file that cannot be read or compiled.
pub(super) fn local_descriptors(args: &Args) -> anyhow::Result<Option<DescriptorPool>> {
    match (&args.proto.proto, &args.proto.protoset) {
        (Some(proto), _) => Ok(Some(load_descriptors(proto, &args.proto.import_paths)?)),
        (None, Some(protoset)) => Ok(Some(load_protoset(protoset)?)),
        (None, None) => Ok(None),
    }
}

/// Refuses `--stream-ping-pong` on a method that is not bidirectional: only there does
/// a request message have responses to wait for while the call goes on.
///
/// # Errors
/// `--stream-ping-pong` with a unary, server- or client-streaming method.
pub(super) fn check_stream_flags(args: &Args, method: &Method) -> anyhow::Result<()> {
    let kind = method.descriptor.kind;
    if args.data.stream_ping_pong && !(kind.client_streams() && kind.server_streams()) {
        let what = match (kind.client_streams(), kind.server_streams()) {
            (true, _) => "client-streaming",
            (_, true) => "server-streaming",
            _ => "unary",
        };
        bail!(
            "--stream-ping-pong takes a bidirectional streaming method (stream requests and stream responses); {} is {what}",
            method.name
        );
    }
    Ok(())
}

/// `--reflect-metadata`: a JSON object of strings.
///
/// # Errors
/// Not a JSON object of strings.
pub(super) fn reflect_metadata(args: &Args) -> anyhow::Result<Vec<(String, String)>> {
    match &args.proto.reflect_metadata {
        Some(json) => data::metadata_from_json(json).context("--reflect-metadata"),
        None => Ok(Vec::new()),
    }
}

/// `--tags`: a JSON object of strings.
///
/// # Errors
/// Not a JSON object of strings.
pub(super) fn tags(args: &Args) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    match &args.output.tags {
        Some(json) => Ok(data::metadata_from_json(json)
            .context("--tags")?
            .into_iter()
            .collect()),
        None => Ok(Default::default()),
    }
}

/// The method's facts for templates, and the run's worker IDs.
fn facts(args: &Args, method: &Method) -> MethodFacts {
    let (service, name) = method.name.split_once('/').unwrap_or(("", &method.name));
    MethodFacts {
        fully_qualified_name: format!("{service}.{name}"),
        service: service.rsplit('.').next().unwrap_or(service).to_owned(),
        method: name.to_owned(),
        input: method.input.name().to_owned(),
        output: method.output.name().to_owned(),
        client_streaming: method.descriptor.kind.client_streams(),
        server_streaming: method.descriptor.kind.server_streams(),
        worker_prefix: args
            .output
            .name
            .as_deref()
            .map_or_else(String::new, |n| format!("{n}:")),
        connections: args.connection.connections,
    }
}

/// Whether `text` is rendered per call: it has actions and templates are not disabled.
fn templated(args: &Args, text: &str) -> bool {
    !args.data.disable_template_data && Template::is_template(text)
}

/// Refuses two readers of standard input: `-d @`, `-b` and `-m @` (each where it is
/// used: `-B` before `-b` before `-d`, `-M` before `-m`).
///
/// # Errors
/// More than one of them.
pub(super) fn one_stdin_reader(args: &Args) -> anyhow::Result<()> {
    let data = &args.data;
    let binary = data.binary_file.is_none() && data.binary;
    let readers = [
        ("-b", binary),
        (
            "-d @",
            data.binary_file.is_none() && !binary && data.data.as_deref() == Some("@"),
        ),
        (
            "-m @",
            data.metadata_file.is_none() && data.metadata.as_deref() == Some("@"),
        ),
    ];
    let reading: Vec<&str> = readers
        .iter()
        .filter(|(_, reads)| *reads)
        .map(|(flag, _)| *flag)
        .collect();
    if reading.len() > 1 {
        bail!(
            "{} all read standard input, which can be read once: give all but one a file (-m @FILE or -M, -d @FILE or -D, -B)",
            reading.join(" and ")
        );
    }
    Ok(())
}

/// The metadata text: `-M`'s file, else `-m` (`@FILE` read).
///
/// # Errors
/// An unreadable or oversized file.
pub(super) fn metadata_text(args: &Args) -> anyhow::Result<Option<String>> {
    match (&args.data.metadata_file, &args.data.metadata) {
        (Some(path), _) => Ok(Some(data::read_text_file(path, "-M")?)),
        (None, Some(text)) => Ok(Some(data::read_data_arg(text, "-m")?)),
        (None, None) => Ok(None),
    }
}

/// The run's fixed metadata (empty when it is rendered per call).
///
/// # Errors
/// Metadata that is not a JSON object of strings.
pub(super) fn fixed_metadata(
    args: &Args,
    text: Option<&str>,
) -> anyhow::Result<Vec<(String, String)>> {
    match text {
        Some(text) if !templated(args, text) => data::metadata_from_json(text),
        _ => Ok(Vec::new()),
    }
}

/// The request data as ghz chooses it: `-B`'s file, else `-b`'s standard input (binary),
/// else `-d @` (standard input), `-D`'s file, `-d`.
enum Source {
    Binary(Vec<u8>),
    Json(String),
    None,
}

fn source(args: &Args) -> anyhow::Result<Source> {
    let data = &args.data;
    if let Some(path) = &data.binary_file {
        let bytes = data::read_file_bounded(path, data::MAX_BINARY_BYTES, "-B")?;
        return Ok(Source::Binary(bytes));
    }
    if data.binary {
        let what = "-b (standard input)";
        let bytes = data::read_bounded(std::io::stdin().lock(), data::MAX_BINARY_BYTES, what)?;
        return Ok(Source::Binary(bytes));
    }
    match (data.data.as_deref(), &data.data_file) {
        (Some("@"), _) => Ok(Source::Json(data::read_data_arg("@", "-d")?)),
        (_, Some(path)) => Ok(Source::Json(data::read_text_file(path, "-D")?)),
        (Some(text), None) => Ok(Source::Json(data::read_data_arg(text, "-d")?)),
        (None, None) => Ok(Source::None),
    }
}

/// The messages to send (every call's, or a template rendered per call), the payload
/// field `--payload-size` fills if any, and the data's JSON text (for the report).
///
/// # Errors
/// Unreadable or invalid data, a bad template, a bad payload field.
pub(super) fn messages_of(
    args: &Args,
    method: &Method,
    metadata: Option<&str>,
) -> anyhow::Result<(Messages, Option<String>, Option<String>)> {
    let functions = !args.data.disable_template_functions && !args.data.disable_template_data;
    let (messages, field, text) = match source(args)? {
        Source::Json(text) if templated(args, &text) => {
            let flag = match (args.data.data.as_deref(), &args.data.data_file) {
                (Some("@"), _) | (_, None) => "-d",
                (_, Some(_)) => "-D",
            };
            let template = Template::parse(&text, facts(args, method), functions)
                .with_context(|| format!("the data of {flag}"))?;
            let payload = args
                .data
                .payload_size
                .map(|size| {
                    data::payload_value(&method.input, size, args.data.payload_field.as_deref())
                })
                .transpose()?;
            let field = payload.as_ref().map(|(f, _)| f.name().to_owned());
            let messages = Messages::templated(
                template,
                method.input.clone(),
                payload,
                args.data.stream_dynamic_messages,
            )?;
            (messages, field, Some(text))
        }
        source => {
            let (mut messages, text) = match source {
                Source::Json(text) => (data::messages_from_json(&method.input, &text)?, Some(text)),
                Source::Binary(bytes) => (data::messages_from_binary(&method.input, &bytes)?, None),
                Source::None => (vec![DynamicMessage::new(method.input.clone())], None),
            };
            let field = args
                .data
                .payload_size
                .map(|size| {
                    data::set_payload(
                        &mut messages,
                        &method.input,
                        size,
                        args.data.payload_field.as_deref(),
                    )
                })
                .transpose()?;
            (Messages::new(messages)?, field, text)
        }
    };
    let messages = match metadata {
        Some(md) if templated(args, md) => {
            let flag = if args.data.metadata_file.is_some() {
                "-M"
            } else {
                "-m"
            };
            let template = Template::parse(md, facts(args, method), functions)
                .with_context(|| format!("the metadata of {flag}"))?;
            messages.with_metadata_template(template)?
        }
        _ => messages,
    };
    Ok((messages, field, text))
}
