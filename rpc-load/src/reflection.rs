//! Descriptors from the server's reflection service, when neither `--proto` nor
//! `--protoset` is given (as ghz does): `grpc.reflection.v1.ServerReflection`, falling
//! back to `v1alpha` when the server does not have v1, over the same transport as the
//! load (any gRPC server over `grpc://` or `grpcs://`, this framework's services over
//! `tcp://`, `rdma://` and `auto://`).
//!
//! The file declaring the service is asked for by symbol, then each import the answers
//! lack, by file name, one request per stream (the well-known types are known without
//! asking). An answer must hold what it was asked for. A server cannot make rpc-load hold
//! more than [`MAX_REFLECTION_BYTES`] of descriptors or [`MAX_REFLECTION_FILES`] files
//! (counting the imports still to ask for; in one answer, whatever their names; a file
//! without a name is an error), answers over [`MAX_REFLECTION_ANSWER`] (the reflection
//! channel's limit), send more than [`MAX_REFLECTION_FILES`] requests, nor make the whole walk last longer than the timeout: past these, the run
//! fails with an error that says so. `--reflect-metadata` goes on every reflection
//! request.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use anyhow::{anyhow, bail, Context};
use prost::Message as _;
use prost_reflect::DescriptorPool;
use prost_types::FileDescriptorProto;
use rdmarpc_core::{Channel, Code, Connection, Metadata, Request};
use rdmarpc_reflection::pb::v1::server_reflection_request::MessageRequest;
use rdmarpc_reflection::pb::v1::server_reflection_response::MessageResponse;
use rdmarpc_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};
use rdmarpc_reflection::pb::{v1, v1alpha};

/// The most descriptor bytes taken from a server's reflection answers.
pub const MAX_REFLECTION_BYTES: usize = 64 << 20;

/// The most files taken from a server's reflection answers (and in one answer), and the
/// most requests sent.
pub const MAX_REFLECTION_FILES: usize = 4096;

/// The largest reflection answer (the reflection channel's message limit, whatever the
/// load's): it decodes into at most 8M entries, each a `Bytes` (32 bytes), before
/// [`MAX_REFLECTION_FILES`] can refuse them.
pub const MAX_REFLECTION_ANSWER: usize = 16 << 20;

/// Which reflection service answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V1alpha,
}

/// A reflection client over a channel: the version that answers, the metadata of every
/// request, the timeout of the whole walk and when it ends, the requests sent.
struct Client<'a, C: Connection> {
    channel: &'a Channel<C>,
    version: Version,
    metadata: Metadata,
    timeout: Duration,
    deadline: Instant,
    requests: usize,
}

/// The descriptors of `service` (`package.Service`) and all it imports, from the
/// reflection service behind `channel`, with `metadata` on each request, all within
/// `timeout`; the well-known types are known without asking.
///
/// # Errors
/// No reflection service, an unknown service, a bad, oversized or incomplete answer,
/// too many requests, a timeout.
pub async fn fetch<C: Connection>(
    channel: &Channel<C>,
    service: &str,
    metadata: &[(String, String)],
    timeout: Duration,
) -> anyhow::Result<DescriptorPool> {
    let mut md = Metadata::new();
    for (key, value) in metadata {
        md.append(key.clone(), value.clone());
    }
    let mut client = Client {
        channel,
        version: Version::V1,
        metadata: md,
        timeout,
        deadline: Instant::now() + timeout,
        requests: 0,
    };
    let first = MessageRequest::FileContainingSymbol(service.to_owned());
    let answer = match client.ask(first.clone()).await {
        Err(e) if e.code == Code::Unimplemented => {
            client.version = Version::V1alpha;
            client.ask(first).await
        }
        other => other,
    }
    .and_then(|files| match files.is_empty() {
        true => Err(Failure {
            code: Code::NotFound,
            message: "the answer holds no file".into(),
        }),
        false => Ok(files),
    })
    .map_err(|e| anyhow!("server reflection: {}", e.message))
    .with_context(|| {
        format!(
            "cannot get the descriptors of {service} by reflection (give --proto or --protoset?)"
        )
    })?;
    let files = client.walk(service, answer).await?;
    let mut pool = DescriptorPool::global();
    pool.add_file_descriptor_protos(files)
        .context("the server's reflection answers do not make a valid set of descriptors")?;
    Ok(pool)
}

/// A reflection request failed: its status.
struct Failure {
    code: Code,
    message: String,
}

impl<C: Connection> Client<'_, C> {
    /// Sends `request` on a stream of its own and returns the answer's files, within
    /// what is left of the walk's time and requests.
    async fn ask(&mut self, request: MessageRequest) -> Result<Vec<bytes::Bytes>, Failure> {
        self.requests += 1;
        if self.requests > MAX_REFLECTION_FILES {
            return Err(Failure {
                code: Code::ResourceExhausted,
                message: format!("more than {MAX_REFLECTION_FILES} requests"),
            });
        }
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(request),
        };
        let stream = futures_util::stream::iter([request]);
        let left = self.deadline.saturating_duration_since(Instant::now());
        let request = Request::from_parts(self.metadata.clone(), stream, Some(left));
        let timeout = self.timeout;
        let late = move || format!("no complete answer within {timeout:?} (--connect-timeout)");
        let failure = move |status: rdmarpc_core::Status| Failure {
            code: status.code(),
            message: match status.code() {
                Code::DeadlineExceeded => late(),
                _ => status.message().to_owned(),
            },
        };
        let answer = tokio::time::timeout_at(self.deadline, async {
            let mut responses = match self.version {
                Version::V1 => {
                    v1::server_reflection_client::ServerReflectionClient::new(self.channel.clone())
                        .server_reflection_info(request)
                        .await
                }
                Version::V1alpha => {
                    v1alpha::server_reflection_client::ServerReflectionClient::new(
                        self.channel.clone(),
                    )
                    .server_reflection_info(request)
                    .await
                }
            }
            .map_err(failure)?
            .into_inner();
            responses.message().await.map_err(failure)
        })
        .await
        .map_err(|_| Failure {
            code: Code::DeadlineExceeded,
            message: late(),
        })??;
        files_of(answer)
    }

    /// Asks for every file `first` (the service's file and maybe more) imports that the
    /// answers lack and the well-known types do not have, within the bounds.
    async fn walk(
        &mut self,
        service: &str,
        first: Vec<bytes::Bytes>,
    ) -> anyhow::Result<Vec<FileDescriptorProto>> {
        let known = DescriptorPool::global();
        let mut files: HashMap<String, FileDescriptorProto> = HashMap::new();
        let mut asked = BTreeSet::new();
        let mut wanted = VecDeque::new();
        let mut total = 0usize;
        let (mut answer, mut asked_for) = (first, None::<String>);
        loop {
            let mut found = asked_for.is_none();
            if answer.len() > MAX_REFLECTION_FILES {
                bail!(
                    "a reflection answer for {service} holds {} files, more than {MAX_REFLECTION_FILES}",
                    answer.len()
                );
            }
            for bytes in answer {
                total += bytes.len();
                if total > MAX_REFLECTION_BYTES {
                    bail!("the server's reflection answers for {service} exceed {MAX_REFLECTION_BYTES} bytes");
                }
                let file = FileDescriptorProto::decode(bytes)
                    .context("the server's reflection answer holds a file that does not decode")?;
                if file.name().is_empty() {
                    bail!(
                        "the server's reflection answer for {service} holds a file without a name"
                    );
                }
                for dependency in &file.dependency {
                    if !files.contains_key(dependency)
                        && known.get_file_by_name(dependency).is_none()
                        && asked.insert(dependency.clone())
                    {
                        wanted.push_back(dependency.clone());
                    }
                }
                found |= asked_for.as_deref() == Some(file.name());
                files.insert(file.name().to_owned(), file);
                if files.len() + wanted.len() > MAX_REFLECTION_FILES {
                    bail!("the server's reflection answers for {service} exceed {MAX_REFLECTION_FILES} files (with the imports still to ask for)");
                }
            }
            if let (false, Some(name)) = (found, &asked_for) {
                bail!("server reflection: the answer for file {name} does not hold it");
            }
            // Each name is wanted once; an earlier answer may have brought it along.
            let Some(name) = wanted.pop_front() else {
                break;
            };
            if files.contains_key(&name) {
                (answer, asked_for) = (Vec::new(), None);
                continue;
            }
            answer = self
                .ask(MessageRequest::FileByFilename(name.clone()))
                .await
                .map_err(|e| anyhow!("server reflection: file {name}: {}", e.message))?;
            asked_for = Some(name);
        }
        Ok(files.into_values().collect())
    }
}

/// The files of a reflection answer; an error answer as a failure.
fn files_of(answer: Option<ServerReflectionResponse>) -> Result<Vec<bytes::Bytes>, Failure> {
    match answer.and_then(|a| a.message_response) {
        Some(MessageResponse::FileDescriptorResponse(files)) => Ok(files.file_descriptor_proto),
        Some(MessageResponse::ErrorResponse(e)) => Err(Failure {
            code: Code::from_u8(u8::try_from(e.error_code).unwrap_or(2)),
            message: e.error_message,
        }),
        Some(_) => Err(Failure {
            code: Code::Internal,
            message: "the reflection service answered with something else than files".into(),
        }),
        None => Err(Failure {
            code: Code::Internal,
            message: "the reflection service ended the stream without an answer".into(),
        }),
    }
}
