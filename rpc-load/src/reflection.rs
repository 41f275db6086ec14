//! Descriptors from the server's reflection service, when neither `--proto` nor
//! `--protoset` is given (as ghz does): `grpc.reflection.v1.ServerReflection`, falling
//! back to `v1alpha` when the server does not have v1, over the same transport as the
//! load (any gRPC server over `grpc://` or `grpcs://`, this framework's services over
//! `tcp://`, `rdma://` and `auto://`).
//!
//! The file declaring the service is asked for by symbol, then each import the answers
//! lack, by file name, one request per stream. A server cannot make rpc-load hold more
//! than [`MAX_REFLECTION_BYTES`] of descriptors or [`MAX_REFLECTION_FILES`] files, nor
//! wait longer than the timeout for any answer: past these, the run fails with an error
//! that says so. `--reflect-metadata` goes on every reflection request.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Duration;

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

/// The most files taken from a server's reflection answers.
pub const MAX_REFLECTION_FILES: usize = 4096;

/// Which reflection service answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V1alpha,
}

/// A reflection client over a channel: the version that answers, the metadata of every
/// request, the timeout of each.
struct Client<'a, C: Connection> {
    channel: &'a Channel<C>,
    version: Version,
    metadata: Metadata,
    timeout: Duration,
}

/// The descriptors of `service` (`package.Service`) and all it imports, from the
/// reflection service behind `channel`, with `metadata` on each request and each answer
/// awaited for at most `timeout`; the well-known types are known without asking.
///
/// # Errors
/// No reflection service, an unknown service, a bad or oversized answer, a timeout.
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
    };
    let first = MessageRequest::FileContainingSymbol(service.to_owned());
    let answer = match client.ask(first.clone()).await {
        Err(e) if e.code == Code::Unimplemented => {
            client.version = Version::V1alpha;
            client.ask(first).await
        }
        other => other,
    }
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
    /// Sends `request` on a stream of its own and returns the answer's files.
    async fn ask(&self, request: MessageRequest) -> Result<Vec<bytes::Bytes>, Failure> {
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(request),
        };
        let stream = futures_util::stream::iter([request]);
        let request = Request::from_parts(self.metadata.clone(), stream, Some(self.timeout));
        let timeout = self.timeout;
        let failure = move |status: rdmarpc_core::Status| Failure {
            code: status.code(),
            message: match status.code() {
                Code::DeadlineExceeded => format!("no answer within {timeout:?}"),
                _ => status.message().to_owned(),
            },
        };
        let answer = tokio::time::timeout(self.timeout, async {
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
            message: format!("no answer within {:?}", self.timeout),
        })??;
        files_of(answer)
    }

    /// Asks for every file `first` (the service's file and maybe more) imports that the
    /// answers lack, within the bounds.
    async fn walk(
        &self,
        service: &str,
        first: Vec<bytes::Bytes>,
    ) -> anyhow::Result<Vec<FileDescriptorProto>> {
        let mut files: HashMap<String, FileDescriptorProto> = HashMap::new();
        let mut asked = BTreeSet::new();
        let mut wanted = VecDeque::new();
        let mut total = 0usize;
        let mut answer = first;
        loop {
            for bytes in answer {
                total += bytes.len();
                if total > MAX_REFLECTION_BYTES {
                    bail!("the server's reflection answers for {service} exceed {MAX_REFLECTION_BYTES} bytes");
                }
                let file = FileDescriptorProto::decode(bytes)
                    .context("the server's reflection answer holds a file that does not decode")?;
                let name = file.name().to_owned();
                for dependency in &file.dependency {
                    if !files.contains_key(dependency) && asked.insert(dependency.clone()) {
                        wanted.push_back(dependency.clone());
                    }
                }
                files.insert(name, file);
                if files.len() > MAX_REFLECTION_FILES {
                    bail!("the server's reflection answers for {service} exceed {MAX_REFLECTION_FILES} files");
                }
            }
            let Some(next) = wanted.iter().position(|name| !files.contains_key(name)) else {
                break;
            };
            let name = wanted.remove(next).unwrap_or_default();
            answer = match self.ask(MessageRequest::FileByFilename(name.clone())).await {
                Ok(answer) => answer,
                // The well-known types are known without the server.
                Err(_) if DescriptorPool::global().get_file_by_name(&name).is_some() => Vec::new(),
                Err(e) => bail!("server reflection: file {name}: {}", e.message),
            };
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
