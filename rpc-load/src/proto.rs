//! Loading a `.proto` (or a protoset) at run time and finding the method to call.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use prost_reflect::{DescriptorPool, MessageDescriptor};
use rdmarpc_core::codegen::{MethodDescriptor, MethodKind};

/// The unary method under test, resolved from the `.proto` at run time.
#[derive(Debug, Clone)]
pub struct Method {
    /// `package.Service/Method`, as given to `--call` (normalised).
    pub name: String,
    /// The wire descriptor: path `/package.Service/Method` and its method id.
    pub descriptor: MethodDescriptor,
    /// The request message type.
    pub input: MessageDescriptor,
    /// The response message type.
    pub output: MessageDescriptor,
}

/// The largest protoset file read.
pub const MAX_PROTOSET_BYTES: u64 = 64 << 20;

/// Reads a protoset: a `FileDescriptorSet` as `protoc --descriptor_set_out` writes it
/// (with `--include_imports`, or importing only the well-known types).
///
/// # Errors
/// An unreadable or oversized file, or one that is not a valid descriptor set.
pub fn load_protoset(path: &Path) -> anyhow::Result<DescriptorPool> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_PROTOSET_BYTES + 1).read_to_end(&mut bytes))
        .with_context(|| format!("cannot read the protoset {}", path.display()))?;
    if bytes.len() as u64 > MAX_PROTOSET_BYTES {
        bail!(
            "the protoset {} is larger than {MAX_PROTOSET_BYTES} bytes",
            path.display()
        );
    }
    let mut pool = DescriptorPool::global();
    pool.decode_file_descriptor_set(bytes.as_slice())
        .with_context(|| {
            format!(
                "{} is not a valid protoset (FileDescriptorSet)",
                path.display()
            )
        })?;
    Ok(pool)
}

/// Parses `proto` with protox into reflection descriptors. Imports are looked up in
/// `includes`, then (as ghz does) in the directory of `proto` itself and the current
/// directory.
///
/// # Errors
/// A missing file or a parse error, with protox's location.
pub fn load_descriptors(proto: &Path, includes: &[PathBuf]) -> anyhow::Result<DescriptorPool> {
    let file = proto
        .canonicalize()
        .with_context(|| format!("cannot open {}", proto.display()))?;
    let mut paths = Vec::with_capacity(includes.len() + 1);
    // As in ghz, an import path that does not exist is passed over.
    for dir in includes {
        match dir.canonicalize() {
            Ok(dir) => paths.push(dir),
            Err(e) => tracing::warn!(path = %dir.display(), "import path passed over: {e}"),
        }
    }
    paths.extend(file.parent().map(Path::to_path_buf));
    if let Ok(cwd) = std::env::current_dir() {
        if !paths.contains(&cwd) {
            paths.push(cwd);
        }
    }
    let mut compiler = protox::Compiler::new(&paths)?;
    compiler.include_imports(true);
    compiler
        .open_file(&file)
        .with_context(|| format!("cannot compile {}", proto.display()))?;
    Ok(compiler.descriptor_pool())
}

/// The service and method of `call` (`package.Service/Method` or
/// `package.Service.Method`).
///
/// # Errors
/// Neither form.
pub fn split_call(call: &str) -> anyhow::Result<(&str, &str)> {
    match call.split_once('/') {
        Some(parts) => Ok(parts),
        None => call
            .rsplit_once('.')
            .with_context(|| format!("--call {call:?} is not package.Service/Method")),
    }
}

/// The service of `call`, `package.Service`.
///
/// # Errors
/// As [`split_call`].
pub fn service_of(call: &str) -> anyhow::Result<&str> {
    split_call(call).map(|(service, _)| service)
}

/// Finds `call` (`package.Service/Method` or `package.Service.Method`) in `pool`.
///
/// The method path is leaked once (a few bytes for the life of the process) because
/// [`MethodDescriptor`] holds a `&'static str`, as generated code does.
///
/// # Errors
/// An unknown service or method, or a streaming method (only unary calls are supported).
pub fn find_method(pool: &DescriptorPool, call: &str) -> anyhow::Result<Method> {
    let (service, method) = split_call(call)?;
    let Some(service_desc) = pool.get_service_by_name(service) else {
        let known: Vec<String> = pool.services().map(|s| s.full_name().to_owned()).collect();
        bail!(
            "no service {service:?} in the proto (it has: {})",
            known.join(", ")
        );
    };
    let Some(method_desc) = service_desc.methods().find(|m| m.name() == method) else {
        let known: Vec<String> = service_desc
            .methods()
            .map(|m| m.name().to_owned())
            .collect();
        bail!(
            "service {service} has no method {method:?} (it has: {})",
            known.join(", ")
        );
    };
    let kind = match (
        method_desc.is_client_streaming(),
        method_desc.is_server_streaming(),
    ) {
        (false, false) => MethodKind::Unary,
        (false, true) => MethodKind::ServerStreaming,
        (true, false) => MethodKind::ClientStreaming,
        (true, true) => MethodKind::Streaming,
    };
    let path: &'static str = Box::leak(format!("/{service}/{method}").into_boxed_str());
    Ok(Method {
        name: format!("{service}/{method}"),
        descriptor: MethodDescriptor::with_kind(path, kind),
        input: method_desc.input(),
        output: method_desc.output(),
    })
}
