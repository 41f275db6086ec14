//! Call templates in `-d`, as ghz has them: `{{.RequestNumber}}`, `{{.WorkerID}}`,
//! `{{.Timestamp}}`, `{{newUUID}}`, `{{randomString 8}}`, ... rendered into the JSON for
//! every call (and, with `--stream-dynamic-messages`, for every message of a stream).
//!
//! The data is JSON text with `{{ ... }}` actions, rendered as text and then parsed: an
//! action inside a JSON string lands inside the string, an action outside one must render
//! valid JSON (a number, `true`). Supported actions:
//!
//! | action | value |
//! |---|---|
//! | `.RequestNumber` | the call's number in the run, from 0 |
//! | `.WorkerID` | the worker making the call, as ghz names it: `g3c1` (worker 3, on connection 1), prefixed by `NAME:` with `--name` |
//! | `.FullyQualifiedName` | `package.Service.Method` |
//! | `.MethodName`, `.ServiceName` | `Method`, `Service` |
//! | `.InputName`, `.OutputName` | the message types' names (without the package) |
//! | `.IsClientStreaming`, `.IsServerStreaming` | `true` / `false` |
//! | `.Timestamp` | now, RFC 3339 |
//! | `.TimestampUnix`, `.TimestampUnixMilli`, `.TimestampUnixNano` | now since the epoch |
//! | `.UUID` | a random UUID (v4), one per call |
//! | `newUUID` | a fresh random UUID at each use |
//! | `randomString N` | N random letters and digits |
//! | `randomInt MIN MAX` | a random integer in [MIN, MAX) |
//!
//! The functions (`newUUID`, `randomString`, `randomInt`) are refused with
//! `--disable-template-functions`; ghz's sprig functions are not supported.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use rand::Rng;

/// The method facts a template may name, and what makes worker IDs.
#[derive(Debug, Clone, Default)]
pub struct MethodFacts {
    /// `package.Service.Method`.
    pub fully_qualified_name: String,
    /// `Service`, without the package.
    pub service: String,
    /// `Method`.
    pub method: String,
    /// The input message's name, without the package.
    pub input: String,
    /// The output message's name, without the package.
    pub output: String,
    /// Whether the client streams.
    pub client_streaming: bool,
    /// Whether the server streams.
    pub server_streaming: bool,
    /// Prefix of worker IDs: `NAME:` with `--name`, else empty.
    pub worker_prefix: String,
    /// Connections the workers share (worker `w` uses connection `w % connections`).
    pub connections: usize,
}

/// A parsed template: text and actions.
#[derive(Debug, Clone)]
pub struct Template {
    parts: Vec<Part>,
    facts: MethodFacts,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    RequestNumber,
    WorkerId,
    FullyQualifiedName,
    MethodName,
    ServiceName,
    InputName,
    OutputName,
    IsClientStreaming,
    IsServerStreaming,
    Timestamp,
    TimestampUnix,
    TimestampUnixMilli,
    TimestampUnixNano,
    CallUuid,
    NewUuid,
    RandomString(usize),
    RandomInt(i64, i64),
}

/// The most a template may render per call (the bound of JSON text read,
/// [`crate::data::MAX_TEXT_BYTES`]): each `{{randomString N}}` is bounded, but a text
/// full of them would render terabytes.
pub const MAX_RENDERED_BYTES: u64 = crate::data::MAX_TEXT_BYTES;

impl Part {
    /// The most bytes this part renders.
    fn most(&self, facts: &MethodFacts) -> u64 {
        let len = |s: &str| s.len() as u64;
        match self {
            Part::Text(t) => len(t),
            // u64 and usize numbers: 20 digits; u128 nanoseconds: 39.
            Part::RequestNumber | Part::TimestampUnix | Part::TimestampUnixMilli => 20,
            Part::TimestampUnixNano => 39,
            Part::WorkerId => len(&facts.worker_prefix) + 42,
            Part::FullyQualifiedName => len(&facts.fully_qualified_name),
            Part::MethodName => len(&facts.method),
            Part::ServiceName => len(&facts.service),
            Part::InputName => len(&facts.input),
            Part::OutputName => len(&facts.output),
            Part::IsClientStreaming | Part::IsServerStreaming => 5,
            // RFC 3339 with nanoseconds and an offset, with room to spare.
            Part::Timestamp => 64,
            Part::CallUuid | Part::NewUuid => 36,
            Part::RandomString(n) => *n as u64,
            Part::RandomInt(..) => 20,
        }
    }
}

/// What varies from call to call.
#[derive(Debug, Clone, Copy)]
pub struct CallFacts {
    /// The call's number in the run.
    pub request_number: u64,
    /// The worker making it.
    pub worker: usize,
}

impl Template {
    /// Whether `text` has template actions at all (otherwise it is parsed once).
    pub fn is_template(text: &str) -> bool {
        text.contains("{{")
    }

    /// Parses `text`; with `functions` false, template functions are refused.
    ///
    /// # Errors
    /// An unclosed `{{`, an action this implementation does not know, or a function
    /// when they are disabled.
    pub fn parse(text: &str, facts: MethodFacts, functions: bool) -> anyhow::Result<Template> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find("{{") {
            if start > 0 {
                parts.push(Part::Text(rest[..start].to_owned()));
            }
            let after = &rest[start + 2..];
            let end = after
                .find("}}")
                .with_context(|| format!("unclosed {{{{ in the data at {:?}", truncate(after)))?;
            let part = action(after[..end].trim())?;
            if !functions
                && matches!(
                    part,
                    Part::NewUuid | Part::RandomString(_) | Part::RandomInt(..)
                )
            {
                bail!(
                    "template functions are disabled (--disable-template-functions), but the data uses {{{{{}}}}}",
                    after[..end].trim()
                );
            }
            parts.push(part);
            rest = &after[end + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        let most = parts
            .iter()
            .fold(0u64, |sum, part| sum.saturating_add(part.most(&facts)));
        if most > MAX_RENDERED_BYTES {
            bail!(
                "the template renders up to {most} bytes per call, more than {MAX_RENDERED_BYTES}"
            );
        }
        Ok(Template { parts, facts })
    }

    /// The text for one call.
    pub fn render(&self, call: CallFacts) -> String {
        let mut out = String::new();
        let mut rng = rand::thread_rng();
        let mut call_uuid = None;
        let now = || {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
        };
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::RequestNumber => {
                    let _ = write!(out, "{}", call.request_number);
                }
                Part::WorkerId => {
                    let connection = call.worker % self.facts.connections.max(1);
                    let _ = write!(
                        out,
                        "{}g{}c{connection}",
                        self.facts.worker_prefix, call.worker
                    );
                }
                Part::FullyQualifiedName => out.push_str(&self.facts.fully_qualified_name),
                Part::MethodName => out.push_str(&self.facts.method),
                Part::ServiceName => out.push_str(&self.facts.service),
                Part::InputName => out.push_str(&self.facts.input),
                Part::OutputName => out.push_str(&self.facts.output),
                Part::IsClientStreaming => {
                    let _ = write!(out, "{}", self.facts.client_streaming);
                }
                Part::IsServerStreaming => {
                    let _ = write!(out, "{}", self.facts.server_streaming);
                }
                Part::Timestamp => out.push_str(&crate::machine::rfc3339(SystemTime::now())),
                Part::TimestampUnix => {
                    let _ = write!(out, "{}", now().as_secs());
                }
                Part::TimestampUnixMilli => {
                    let _ = write!(out, "{}", now().as_millis());
                }
                Part::TimestampUnixNano => {
                    let _ = write!(out, "{}", now().as_nanos());
                }
                Part::CallUuid => {
                    let id = call_uuid.get_or_insert_with(|| uuid(&mut rng));
                    out.push_str(id);
                }
                Part::NewUuid => out.push_str(&uuid(&mut rng)),
                Part::RandomString(n) => {
                    const CHARS: &[u8] =
                        b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
                    for _ in 0..*n {
                        out.push(CHARS[rng.gen_range(0..CHARS.len())] as char);
                    }
                }
                Part::RandomInt(min, max) => {
                    let _ = write!(out, "{}", rng.gen_range(*min..*max));
                }
            }
        }
        out
    }
}

fn truncate(s: &str) -> &str {
    let mut end = s.len().min(20);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn action(text: &str) -> anyhow::Result<Part> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let number = |i: usize| -> anyhow::Result<i64> {
        words
            .get(i)
            .with_context(|| format!("{{{{{text}}}}} needs {i} argument(s)"))?
            .parse::<i64>()
            .with_context(|| format!("{{{{{text}}}}}: {:?} is not an integer", words[i]))
    };
    Ok(match words.as_slice() {
        [".RequestNumber"] => Part::RequestNumber,
        [".WorkerID"] => Part::WorkerId,
        [".FullyQualifiedName"] => Part::FullyQualifiedName,
        [".MethodName"] => Part::MethodName,
        [".ServiceName"] => Part::ServiceName,
        [".InputName"] => Part::InputName,
        [".OutputName"] => Part::OutputName,
        [".IsClientStreaming"] => Part::IsClientStreaming,
        [".IsServerStreaming"] => Part::IsServerStreaming,
        [".Timestamp"] => Part::Timestamp,
        [".TimestampUnix"] => Part::TimestampUnix,
        [".TimestampUnixMilli"] => Part::TimestampUnixMilli,
        [".TimestampUnixNano"] => Part::TimestampUnixNano,
        [".UUID"] => Part::CallUuid,
        ["newUUID"] => Part::NewUuid,
        ["randomString", _] => {
            let n = number(1)?;
            if !(0..=1 << 20).contains(&n) {
                bail!("{{{{{text}}}}}: the length must be between 0 and 1048576");
            }
            Part::RandomString(n as usize)
        }
        ["randomInt", _, _] => {
            let (min, max) = (number(1)?, number(2)?);
            if min >= max {
                bail!("{{{{{text}}}}}: MIN must be below MAX");
            }
            Part::RandomInt(min, max)
        }
        _ => bail!("unknown template action {{{{{text}}}}} in the data"),
    })
}

/// A random version-4 UUID, hyphenated.
fn uuid(rng: &mut impl Rng) -> String {
    let mut b: [u8; 16] = rng.gen();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> MethodFacts {
        MethodFacts {
            fully_qualified_name: "echo.Echo.Echo".into(),
            service: "Echo".into(),
            method: "Echo".into(),
            input: "EchoRequest".into(),
            output: "EchoReply".into(),
            client_streaming: false,
            server_streaming: true,
            worker_prefix: "run:".into(),
            connections: 2,
        }
    }

    #[test]
    fn actions_render_per_call() {
        let t = Template::parse(
            r#"{"n": {{.RequestNumber}}, "w": "{{ .WorkerID }}", "m": "{{.FullyQualifiedName}}", "s": {{.IsServerStreaming}}}"#,
            facts(),
            true,
        )
        .unwrap();
        let call = CallFacts {
            request_number: 41,
            worker: 3,
        };
        assert_eq!(
            t.render(call),
            r#"{"n": 41, "w": "run:g3c1", "m": "echo.Echo.Echo", "s": true}"#
        );
    }

    #[test]
    fn random_values_are_fresh_and_in_range() {
        let t = Template::parse(
            r#"["{{.UUID}}", "{{.UUID}}", "{{newUUID}}", "{{randomString 12}}", {{randomInt 5 7}}]"#,
            facts(),
            true,
        )
        .unwrap();
        let call = CallFacts {
            request_number: 0,
            worker: 0,
        };
        let v: Vec<serde_json::Value> = serde_json::from_str(&t.render(call)).unwrap();
        assert_eq!(v[0], v[1], "one .UUID per call");
        assert_ne!(v[0], v[2], "newUUID is fresh");
        assert_eq!(v[0].as_str().unwrap().len(), 36);
        assert_eq!(&v[0].as_str().unwrap()[14..15], "4", "version 4");
        assert_eq!(v[3].as_str().unwrap().len(), 12);
        assert!((5..7).contains(&v[4].as_i64().unwrap()));
        let again: Vec<serde_json::Value> = serde_json::from_str(&t.render(call)).unwrap();
        assert_ne!(v[0], again[0], "a new call, a new .UUID");
    }

    #[test]
    fn unknown_actions_and_unclosed_braces_are_errors() {
        for bad in [
            "{{.Nope}}",
            "{{randomInt 5 2}}",
            "{{randomString x}}",
            "{\"a\": {{.RequestNumber}",
        ] {
            assert!(Template::parse(bad, facts(), true).is_err(), "{bad}");
        }
        let disabled = Template::parse(r#"{"id": "{{newUUID}}"}"#, facts(), false);
        assert!(disabled.unwrap_err().to_string().contains("disabled"));
        assert!(Template::parse(r#"{"n": {{.RequestNumber}}}"#, facts(), false).is_ok());
        assert!(!Template::is_template(r#"{"a": "{ not }"}"#));
    }

    /// Each randomString is bounded, and so is what they render together: 65 of 1 MiB
    /// are refused at parse time (64 MiB of them rendered terabytes per call).
    #[test]
    fn what_a_template_renders_in_all_is_bounded() {
        let many = |n: usize| format!("[{}]", r#""{{randomString 1048576}}","#.repeat(n));
        let e = Template::parse(&many(65), facts(), true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than 67108864"), "{e}");
        assert!(Template::parse(&many(63), facts(), true).is_ok());
        // Fixed text counts too.
        let text = format!("\"{}{{{{.RequestNumber}}}}\"", "x".repeat(64 << 20));
        assert!(Template::parse(&text, facts(), true).is_err());
    }
}
