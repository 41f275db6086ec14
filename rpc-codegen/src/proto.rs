//! The prost front end: `.proto` files -> protox -> `FileDescriptorSet` -> prost-build, with a
//! [`prost_build::ServiceGenerator`] that hands every service to the emitter.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use prost::Message as _;
use prost_types::FileDescriptorSet;

use crate::{ir, split, syntax, CodeGenBuilder, Error};

/// A [`Builder`] with the default options; the entry point of a `build.rs`.
///
/// # Examples
///
/// ```no_run
/// // build.rs
/// fn main() -> Result<(), Box<dyn std::error::Error>> {
///     rdmarpc_codegen::configure()
///         .bytes(["."])
///         .compile_protos(&["../proto/echo.proto"], &["../proto"])?;
///     Ok(())
/// }
/// ```
pub fn configure() -> Builder {
    Builder::new()
}

/// Compiles `.proto` files into messages (prost), clients and servers; the options of a build.
///
/// Each protobuf package becomes one file `<package>.rs` in the output directory, holding the
/// package's messages and, per service `Foo`, the modules `foo_methods`, `foo_client` and
/// `foo_server`. Include it with `rdmarpc_core::include_proto!("<package>")` in a module whose path
/// mirrors the package (`acme.store` in `acme::store`), so that prost's relative paths between
/// packages resolve.
#[derive(Debug)]
pub struct Builder {
    /// The emitter options.
    codegen: CodeGenBuilder,
    /// prost-build's options, tweakable through [`Builder::prost_config`].
    prost: prost_build::Config,
    /// Where to write; `OUT_DIR` when `None`.
    out_dir: Option<PathBuf>,
    /// Whether to print `cargo:rerun-if-changed`.
    emit_rerun_if_changed: bool,
    /// Where to also write the encoded descriptor set, if anywhere.
    file_descriptor_set_path: Option<PathBuf>,
    /// Whether messages get `#[allow(missing_docs)]`.
    allow_undocumented_messages: bool,
    /// The paths given to [`Builder::bytes`].
    bytes_paths: Vec<String>,
    /// The proto paths given to [`Builder::extern_path`]: their messages are generated
    /// elsewhere (and get their `SplitLarge` there, if at all).
    extern_protos: Vec<String>,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            codegen: CodeGenBuilder::new(),
            prost: prost_build::Config::new(),
            out_dir: None,
            emit_rerun_if_changed: std::env::var_os("CARGO").is_some(),
            file_descriptor_set_path: None,
            allow_undocumented_messages: true,
            bytes_paths: Vec::new(),
            extern_protos: Vec::new(),
        }
    }
}

impl Builder {
    /// The default options; same as [`configure`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The directory the generated files go to. Default: `$OUT_DIR`.
    pub fn out_dir(mut self, out_dir: impl AsRef<Path>) -> Self {
        self.out_dir = Some(out_dir.as_ref().to_owned());
        self
    }

    /// Whether to generate the `<service>_client` modules. Default: `true`.
    pub fn build_client(mut self, enable: bool) -> Self {
        self.codegen.build_client(enable);
        self
    }

    /// Whether to generate the `<service>_server` modules. Default: `true`.
    pub fn build_server(mut self, enable: bool) -> Self {
        self.codegen.build_server(enable);
        self
    }

    /// Whether clients get `FooClient::connect(url)` (connected now) and
    /// `FooClient::connect_lazy(url)` (connected on the first call), both reconnecting,
    /// over [`connect_type`](Self::connect_type). Default: `true`; the crate then
    /// depends on `rdmarpc-transport`. Turn it off in a service library that leaves the
    /// transport to its users (they make clients with `FooClient::new(channel)`).
    pub fn build_connect(mut self, enable: bool) -> Self {
        self.codegen.build_connect(enable);
        self
    }

    /// The connection type (implementing `rdmarpc_core::Dial`) of the clients' `connect`.
    /// Default: `rdmarpc_transport::AnyConnection`.
    pub fn connect_type(mut self, path: impl Into<String>) -> Self {
        self.codegen.connect_type(path);
        self
    }

    /// Whether to print `cargo:rerun-if-changed` for the `.proto` files, every file they import
    /// and the include directories. Default: `true` when run by cargo (`$CARGO` is set).
    pub fn emit_rerun_if_changed(mut self, enable: bool) -> Self {
        self.emit_rerun_if_changed = enable;
        self
    }

    /// The path generated code reaches the runtime by. Default: `rdmarpc_core::codegen`.
    pub fn codegen_path(mut self, path: impl Into<String>) -> Self {
        self.codegen.codegen_path(path);
        self
    }

    /// Also writes the compiled descriptors (imports, comments and custom options included)
    /// as an encoded `FileDescriptorSet` to `path`, for reflection (`rdmarpc-reflection`) or a
    /// load generator. Default: not written.
    pub fn file_descriptor_set_path(mut self, path: impl AsRef<Path>) -> Self {
        self.file_descriptor_set_path = Some(path.as_ref().to_owned());
        self
    }

    /// Whether messages, enums and oneofs get `#[allow(missing_docs)]`. Default: `true`.
    ///
    /// prost-build documents a message only with its `.proto` comment, so a crate with
    /// `missing_docs` would otherwise warn on every uncommented message or field. Services are
    /// always documented and not affected.
    pub fn allow_undocumented_messages(mut self, enable: bool) -> Self {
        self.allow_undocumented_messages = enable;
        self
    }

    /// Adds an attribute to the matching messages, enums and oneofs; see
    /// [`prost_build::Config::type_attribute`].
    pub fn type_attribute(mut self, path: impl AsRef<str>, attribute: impl AsRef<str>) -> Self {
        self.prost.type_attribute(path, attribute);
        self
    }

    /// Adds an attribute to the matching fields; see [`prost_build::Config::field_attribute`].
    pub fn field_attribute(mut self, path: impl AsRef<str>, attribute: impl AsRef<str>) -> Self {
        self.prost.field_attribute(path, attribute);
        self
    }

    /// Generates `bytes::Bytes` instead of `Vec<u8>` for the matching `bytes` fields (`["."]`
    /// for all); see [`prost_build::Config::bytes`].
    ///
    /// Such fields cost no copy for large messages: received, a field is a slice of the
    /// frame that carried it (when the transport keeps the frame); sent, a request or
    /// response message's top-level `Bytes` field goes from where it lies by gathered
    /// write (on transports that have one). Clients and servers of methods whose messages
    /// have such fields use `unary_gathered`, and the messages implement `SplitLarge`.
    pub fn bytes<I, S>(mut self, paths: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let paths: Vec<String> = paths.into_iter().map(|p| p.as_ref().to_owned()).collect();
        // prost-build replaces its paths on each call: so does this record of them.
        self.prost.bytes(&paths);
        self.bytes_paths = paths;
        self
    }

    /// Uses an existing Rust type for a protobuf package or type instead of generating it; see
    /// [`prost_build::Config::extern_path`].
    pub fn extern_path(
        mut self,
        proto_path: impl Into<String>,
        rust_path: impl Into<String>,
    ) -> Self {
        let proto_path = proto_path.into();
        self.extern_protos.push(proto_path.clone());
        self.prost.extern_path(proto_path, rust_path);
        self
    }

    /// Any other prost-build option.
    ///
    /// Set `bytes` and `extern_path` with [`Builder::bytes`] and [`Builder::extern_path`],
    /// not here: the `SplitLarge` impls generated for messages with `Bytes` fields follow
    /// those two, and would not see paths set here.
    ///
    /// Do not set a service generator or an output directory there:
    /// [`compile_fds`](Self::compile_fds) replaces both.
    ///
    /// ```
    /// let builder = rdmarpc_codegen::configure().prost_config(|config| {
    ///     config.btree_map(["."]);
    /// });
    /// # drop(builder);
    /// ```
    pub fn prost_config(mut self, tweak: impl FnOnce(&mut prost_build::Config)) -> Self {
        tweak(&mut self.prost);
        self
    }

    /// Parses `protos` (looking up imports in `includes`) with protox and generates their code.
    ///
    /// # Errors
    ///
    /// - [`Error::Proto`] if a file cannot be found, read, parsed or type-checked;
    /// - [`Error::Io`] if the output cannot be written.
    pub fn compile_protos(
        self,
        protos: &[impl AsRef<Path>],
        includes: &[impl AsRef<Path>],
    ) -> Result<(), Error> {
        let mut rerun: BTreeSet<PathBuf> = protos
            .iter()
            .map(|path| path.as_ref().to_owned())
            .chain(includes.iter().map(|path| path.as_ref().to_owned()))
            .collect();
        if self.emit_rerun_if_changed {
            // Printed before parsing so that a fix of a broken file triggers a rebuild as well.
            for path in &rerun {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
        let mut compiler = protox::Compiler::new(includes)?;
        compiler
            .include_imports(true)
            .include_source_info(true)
            .open_files(protos)?;
        if self.emit_rerun_if_changed {
            for path in compiler.files().filter_map(|file| file.path()) {
                if rerun.insert(path.to_owned()) {
                    println!("cargo:rerun-if-changed={}", path.display());
                }
            }
        }
        // Encoded by protox, not from `prost_types`: that keeps custom options (extensions
        // of descriptor.proto's options), which `prost_types` would drop.
        let encoded = self
            .file_descriptor_set_path
            .is_some()
            .then(|| compiler.encode_file_descriptor_set());
        self.generate(compiler.file_descriptor_set(), encoded)
    }

    /// Generates the code of an already compiled descriptor set (every file in it).
    ///
    /// The set written by [`Builder::file_descriptor_set_path`] is then `fds` encoded by
    /// prost, without custom options (`prost_types` keeps none); [`Builder::compile_protos`]
    /// writes them.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSyntax`] if the codegen path is not a path, [`Error::Io`] if
    /// prost-build or writing fails.
    pub fn compile_fds(self, fds: FileDescriptorSet) -> Result<(), Error> {
        self.generate(fds, None)
    }

    /// Generates the code of `fds`; writes `encoded` (or `fds` encoded) to the descriptor
    /// set path, if one is set.
    fn generate(mut self, fds: FileDescriptorSet, encoded: Option<Vec<u8>>) -> Result<(), Error> {
        syntax::parse_path(self.codegen.codegen_path_str(), "codegen path")?;
        if let Some(path) = &self.file_descriptor_set_path {
            fs::write(path, encoded.unwrap_or_else(|| fds.encode_to_vec()))?;
        }
        if self.allow_undocumented_messages {
            self.prost.type_attribute(".", "#[allow(missing_docs)]");
        }
        if let Some(out_dir) = &self.out_dir {
            self.prost.out_dir(out_dir);
        }
        let failure = Rc::new(RefCell::new(None));
        self.prost.service_generator(Box::new(Generator {
            codegen: self.codegen,
            failure: Rc::clone(&failure),
            split: split::split_map(&fds, &self.bytes_paths, &self.extern_protos),
            split_done: BTreeSet::new(),
        }));
        self.prost.compile_fds(fds)?;
        match failure.take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

/// The `prost_build::ServiceGenerator`: runs the emitter and appends its formatted output to the
/// package's file. prost-build cannot take an error back, so the first one is parked in
/// `failure` and returned by [`Builder::compile_fds`] once prost-build is done.
struct Generator {
    /// The emitter options.
    codegen: CodeGenBuilder,
    /// The first error, shared with `compile_fds`.
    failure: Rc<RefCell<Option<Error>>>,
    /// Messages that can be split for gathered writes.
    split: split::SplitMap,
    /// Those whose `SplitLarge` impl was emitted (next to the first service using them).
    split_done: BTreeSet<String>,
}

impl Generator {
    /// The service's code, and `SplitLarge` for its messages that can split and have no
    /// impl yet.
    fn code(&mut self, service: &prost_build::Service) -> Result<String, Error> {
        let mut gathered = BTreeSet::new();
        let mut impls = proc_macro2::TokenStream::new();
        let codegen = syntax::parse_path(self.codegen.codegen_path_str(), "codegen path")?;
        for method in &service.methods {
            for (proto, rust) in [
                (&method.input_proto_type, &method.input_type),
                (&method.output_proto_type, &method.output_type),
            ] {
                // Only messages of the service's own package: their impl goes into that
                // package's file, which every user of the service includes. (A message of
                // another package is sent as it always was, copied.)
                let Some(message) = self
                    .split
                    .get(proto)
                    .filter(|m| m.package == service.package)
                else {
                    continue;
                };
                gathered.insert(rust.clone());
                if self.split_done.insert(proto.clone()) {
                    impls.extend(split::split_impl(rust, &message.fields, &codegen)?);
                }
            }
        }
        self.codegen.set_gathered(gathered);
        let mut code = self.codegen.generate(service)?;
        code.extend(impls);
        crate::syntax::format(code)
    }
}

impl prost_build::ServiceGenerator for Generator {
    fn generate(&mut self, service: prost_build::Service, buf: &mut String) {
        match self.code(&service) {
            Ok(code) => buf.push_str(&code),
            Err(error) => {
                self.failure.borrow_mut().get_or_insert(error);
            }
        }
    }
}

/// prost's comments as doc lines, escaped the way prost-build escapes message docs (URLs in
/// `<>`, brackets that are not links); detached comments are not documentation.
fn doc_lines(comments: &prost_build::Comments) -> Vec<String> {
    let attached = prost_build::Comments {
        leading_detached: Vec::new(),
        ..comments.clone()
    };
    let mut text = String::new();
    attached.append_with_indent(0, &mut text);
    text.lines()
        .map(|line| line.strip_prefix("///").unwrap_or(line).to_owned())
        .collect()
}

impl ir::Service for prost_build::Service {
    type Method = prost_build::Method;

    fn name(&self) -> &str {
        &self.name
    }

    fn proto_name(&self) -> &str {
        &self.proto_name
    }

    fn package(&self) -> &str {
        &self.package
    }

    fn comments(&self) -> Vec<String> {
        doc_lines(&self.comments)
    }

    fn methods(&self) -> &[prost_build::Method] {
        &self.methods
    }
}

impl ir::Method for prost_build::Method {
    fn name(&self) -> &str {
        &self.name
    }

    fn proto_name(&self) -> &str {
        &self.proto_name
    }

    fn comments(&self) -> Vec<String> {
        doc_lines(&self.comments)
    }

    fn input_type(&self) -> &str {
        &self.input_type
    }

    fn output_type(&self) -> &str {
        &self.output_type
    }

    fn client_streaming(&self) -> bool {
        self.client_streaming
    }

    fn server_streaming(&self) -> bool {
        self.server_streaming
    }

    fn idempotent(&self) -> bool {
        use prost_types::method_options::IdempotencyLevel;
        matches!(
            self.options.idempotency_level(),
            IdempotencyLevel::Idempotent | IdempotencyLevel::NoSideEffects
        )
    }
}
