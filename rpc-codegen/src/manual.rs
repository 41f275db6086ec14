//! The manual front end: services described in Rust instead of a `.proto` file.
//!
//! Useful when the messages are hand-written prost types (or come from another crate) and
//! there is no `.proto` to compile, and in tests of the emitter.
//!
//! ```no_run
//! // build.rs
//! use rdmarpc_codegen::manual;
//!
//! fn main() -> Result<(), rdmarpc_codegen::Error> {
//!     let echo = manual::Service::builder()
//!         .name("Echo")
//!         .package("echo")
//!         .method(
//!             manual::Method::builder()
//!                 .name("echo")
//!                 .route_name("Echo")
//!                 .input_type("crate::EchoRequest")
//!                 .output_type("crate::EchoReply")
//!                 .build(),
//!         )
//!         .build();
//!     // Writes $OUT_DIR/echo.Echo.rs; include it with `rdmarpc_core::include_proto!("echo.Echo")`.
//!     manual::Builder::new().compile(&[echo])
//! }
//! ```

use std::fs;
use std::path::{Path, PathBuf};

use heck::ToUpperCamelCase;

use crate::{ir, syntax, CodeGenBuilder, Error};

/// A service described in Rust; build it with [`Service::builder`].
#[derive(Debug, Clone)]
pub struct Service {
    /// The service name as on the wire, e.g. `Echo`.
    proto_name: String,
    /// [`Self::proto_name`] in `UpperCamelCase`.
    name: String,
    /// The protobuf-style package, possibly empty.
    package: String,
    /// Documentation lines.
    comments: Vec<String>,
    /// The methods in index order.
    methods: Vec<Method>,
}

impl Service {
    /// Starts describing a service.
    pub fn builder() -> ServiceBuilder {
        ServiceBuilder::default()
    }
}

impl ir::Service for Service {
    type Method = Method;

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
        self.comments.clone()
    }

    fn methods(&self) -> &[Method] {
        &self.methods
    }
}

/// Describes a [`Service`].
#[derive(Debug, Default)]
pub struct ServiceBuilder {
    /// Required.
    name: Option<String>,
    /// Default: empty.
    package: String,
    /// Default: none.
    comments: Vec<String>,
    /// Default: none.
    methods: Vec<Method>,
}

impl ServiceBuilder {
    /// The service name as on the wire, e.g. `Echo`; the Rust types are named after its
    /// `UpperCamelCase` form. Required.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The package, e.g. `echo`, making the route `/echo.Echo/Method`. Default: none.
    pub fn package(mut self, package: impl Into<String>) -> Self {
        self.package = package.into();
        self
    }

    /// Adds a documentation line to the generated client and server trait.
    pub fn comment(mut self, line: impl Into<String>) -> Self {
        self.comments.push(line.into());
        self
    }

    /// Adds a method; methods keep the order they are added in.
    pub fn method(mut self, method: Method) -> Self {
        self.methods.push(method);
        self
    }

    /// Finishes the description.
    ///
    /// # Panics
    ///
    /// If no [`name`](Self::name) was given.
    pub fn build(self) -> Service {
        let name = self.name.expect("manual::Service needs a name");
        Service {
            name: name.to_upper_camel_case(),
            proto_name: name,
            package: self.package,
            comments: self.comments,
            methods: self.methods,
        }
    }
}

/// A unary method described in Rust; build it with [`Method::builder`].
#[derive(Debug, Clone)]
pub struct Method {
    /// The Rust name.
    name: String,
    /// The name on the wire.
    route_name: String,
    /// Documentation lines.
    comments: Vec<String>,
    /// The request type.
    input_type: String,
    /// The response type.
    output_type: String,
    /// May be sent again after a failure.
    idempotent: bool,
}

impl Method {
    /// Starts describing a method.
    pub fn builder() -> MethodBuilder {
        MethodBuilder::default()
    }
}

impl ir::Method for Method {
    fn name(&self) -> &str {
        &self.name
    }

    fn proto_name(&self) -> &str {
        &self.route_name
    }

    fn comments(&self) -> Vec<String> {
        self.comments.clone()
    }

    fn input_type(&self) -> &str {
        &self.input_type
    }

    fn output_type(&self) -> &str {
        &self.output_type
    }

    fn idempotent(&self) -> bool {
        self.idempotent
    }
}

/// Describes a [`Method`].
#[derive(Debug, Default)]
pub struct MethodBuilder {
    /// Required.
    name: Option<String>,
    /// Default: `name` in `UpperCamelCase`.
    route_name: Option<String>,
    /// Default: none.
    comments: Vec<String>,
    /// Required.
    input_type: Option<String>,
    /// Required.
    output_type: Option<String>,
    /// Default: false.
    idempotent: bool,
}

impl MethodBuilder {
    /// The Rust method name, e.g. `get_item` (converted to `snake_case`). Required.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The method name on the wire, e.g. `GetItem`. Default: [`name`](Self::name) in
    /// `UpperCamelCase`.
    pub fn route_name(mut self, route_name: impl Into<String>) -> Self {
        self.route_name = Some(route_name.into());
        self
    }

    /// Adds a documentation line to the generated client method and trait method.
    pub fn comment(mut self, line: impl Into<String>) -> Self {
        self.comments.push(line.into());
        self
    }

    /// The request type, a `prost::Message + Default`: absolute (`crate::EchoRequest`) or
    /// relative to the module that includes the generated file. Required.
    pub fn input_type(mut self, ty: impl Into<String>) -> Self {
        self.input_type = Some(ty.into());
        self
    }

    /// The response type; resolved like [`input_type`](Self::input_type). Required.
    pub fn output_type(mut self, ty: impl Into<String>) -> Self {
        self.output_type = Some(ty.into());
        self
    }

    /// Marks the method idempotent, as `option idempotency_level = IDEMPOTENT` does in a
    /// `.proto`: a client's retry policy may send it again after a failure.
    pub fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// Finishes the description.
    ///
    /// # Panics
    ///
    /// If the name, the input type or the output type is missing.
    pub fn build(self) -> Method {
        let name = self.name.expect("manual::Method needs a name");
        Method {
            route_name: self
                .route_name
                .unwrap_or_else(|| name.to_upper_camel_case()),
            input_type: self
                .input_type
                .unwrap_or_else(|| panic!("manual::Method {name} needs an input_type")),
            output_type: self
                .output_type
                .unwrap_or_else(|| panic!("manual::Method {name} needs an output_type")),
            comments: self.comments,
            idempotent: self.idempotent,
            name,
        }
    }
}

/// Writes the code of manual services, one file per service: `<package>.<Service>.rs` (or
/// `<Service>.rs` without a package), so it never collides with a prost-generated `<package>.rs`.
#[derive(Debug, Clone, Default)]
pub struct Builder {
    /// The emitter options.
    codegen: CodeGenBuilder,
    /// Where to write; `OUT_DIR` when `None`.
    out_dir: Option<PathBuf>,
}

impl Builder {
    /// The default options: client and server, into `$OUT_DIR`.
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

    /// The path generated code reaches the runtime by. Default: `rdmarpc_core::codegen`.
    pub fn codegen_path(mut self, path: impl Into<String>) -> Self {
        self.codegen.codegen_path(path);
        self
    }

    /// Whether clients get `connect` and `connect_lazy`; see
    /// [`CodeGenBuilder::build_connect`]. Default: `true`.
    pub fn build_connect(mut self, enable: bool) -> Self {
        self.codegen.build_connect(enable);
        self
    }

    /// The connection type of the clients' `connect`; see
    /// [`CodeGenBuilder::connect_type`].
    pub fn connect_type(mut self, path: impl Into<String>) -> Self {
        self.codegen.connect_type(path);
        self
    }

    /// Generates and writes the code of every service (a file is rewritten only if it changed,
    /// so that cargo does not rebuild needlessly).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSyntax`] if a name or type does not parse as Rust; [`Error::Io`] if
    /// `OUT_DIR` is unset (and no [`out_dir`](Self::out_dir) was given) or writing fails.
    pub fn compile(&self, services: &[Service]) -> Result<(), Error> {
        let out_dir = match &self.out_dir {
            Some(out_dir) => out_dir.clone(),
            None => std::env::var_os("OUT_DIR")
                .map(PathBuf::from)
                .ok_or_else(|| {
                    std::io::Error::other("OUT_DIR is not set and no out_dir was given")
                })?,
        };
        for service in services {
            let code = syntax::format(self.codegen.generate(service)?)?;
            let code = format!("// This file is @generated by rdmarpc-codegen.\n{code}");
            let file_name = format!(
                "{}.rs",
                syntax::qualified_name(&service.package, &service.proto_name)
            );
            write_if_changed(&out_dir.join(file_name), &code)?;
        }
        Ok(())
    }
}

/// Writes `contents` unless the file already holds exactly that.
fn write_if_changed(path: &Path, contents: &str) -> std::io::Result<()> {
    if fs::read(path).is_ok_and(|old| old == contents.as_bytes()) {
        return Ok(());
    }
    fs::write(path, contents)
}
