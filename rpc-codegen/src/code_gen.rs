//! The emitter: IR in, `proc_macro2::TokenStream` out.

use std::collections::BTreeSet;

use heck::ToUpperCamelCase;
use proc_macro2::{Ident, TokenStream};
use quote::quote;

use crate::ir::{Method, Service};
use crate::syntax::{self, doc_attrs};
use crate::{client, server, Error};

/// The path generated code uses to reach the runtime, unless overridden.
pub(crate) const DEFAULT_CODEGEN_PATH: &str = "rpc_core::codegen";
/// The connection type of the generated `FooClient::connect`, by default.
pub(crate) const DEFAULT_CONNECT_TYPE: &str = "rpc_transport::AnyConnection";

/// Emits the Rust code of one [`Service`]: a `<service>_methods` module with the method
/// descriptors, a `<service>_client` module and a `<service>_server` module.
///
/// Generated code names nothing but `<codegen path>::*`, `core` and `std`, the connect type
/// (`rpc_transport::AnyConnection` unless changed or turned off), plus the message types
/// the IR gives it; every type it mentions is fully qualified, so that a service called `Service`
/// or a method called `clone` cannot clash with it.
///
/// # Examples
///
/// ```
/// use rpc_codegen::{manual, CodeGenBuilder};
///
/// let service = manual::Service::builder()
///     .name("Echo")
///     .package("echo")
///     .method(
///         manual::Method::builder()
///             .name("echo")
///             .input_type("crate::EchoRequest")
///             .output_type("crate::EchoReply")
///             .build(),
///     )
///     .build();
/// let tokens = CodeGenBuilder::new().build_server(false).generate(&service)?;
/// let code = rpc_codegen::format(tokens)?;
/// assert!(code.contains("pub struct EchoClient"));
/// assert!(!code.contains("pub trait Echo"));
/// # Ok::<(), rpc_codegen::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct CodeGenBuilder {
    /// The runtime path; see [`codegen_path`](Self::codegen_path).
    codegen_path: String,
    /// Whether to emit `<service>_client`.
    build_client: bool,
    /// Whether to emit `<service>_server`.
    build_server: bool,
    /// The connection type of `FooClient::connect`, if it is emitted.
    connect_type: Option<String>,
    /// Message types (as methods name them) that implement `SplitLarge`: requests of
    /// them are sent with `unary_gathered`, responses boxed for gathered writes.
    gathered: BTreeSet<String>,
}

impl Default for CodeGenBuilder {
    fn default() -> Self {
        Self {
            codegen_path: DEFAULT_CODEGEN_PATH.to_owned(),
            build_client: true,
            build_server: true,
            connect_type: Some(DEFAULT_CONNECT_TYPE.to_owned()),
            gathered: BTreeSet::new(),
        }
    }
}

impl CodeGenBuilder {
    /// A builder that emits clients and servers against `rpc_core::codegen`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The path of the runtime's codegen module. Default: `rpc_core::codegen`.
    ///
    /// Change it when the user crate renames `rpc-core` or re-exports it from a facade crate.
    pub fn codegen_path(&mut self, path: impl Into<String>) -> &mut Self {
        self.codegen_path = path.into();
        self
    }

    /// Whether to emit the `<service>_client` module. Default: `true`.
    pub fn build_client(&mut self, enable: bool) -> &mut Self {
        self.build_client = enable;
        self
    }

    /// Whether to emit the `<service>_server` module. Default: `true`.
    pub fn build_server(&mut self, enable: bool) -> &mut Self {
        self.build_server = enable;
        self
    }

    /// Whether clients get `FooClient::connect(url)` and `FooClient::connect_lazy(url)`,
    /// over [`connect_type`](Self::connect_type). Default: `true`. Turn it off in a
    /// crate that does not depend on the crate of that type (e.g. a service library
    /// that leaves the transport to its users: they make clients with `FooClient::new`).
    /// A service with a method named `connect` or `connect_lazy` gets neither helper.
    pub fn build_connect(&mut self, enable: bool) -> &mut Self {
        match (enable, &self.connect_type) {
            (false, _) => self.connect_type = None,
            (true, None) => self.connect_type = Some(DEFAULT_CONNECT_TYPE.to_owned()),
            (true, Some(_)) => {}
        }
        self
    }

    /// The connection type (implementing `rpc_core::Dial`) of the clients' `connect` and
    /// `connect_lazy`. Default: `rpc_transport::AnyConnection`, which dials every scheme
    /// (`tcp://`, `rdma://`, `auto://`, `grpc://`, and their TLS forms).
    pub fn connect_type(&mut self, path: impl Into<String>) -> &mut Self {
        self.connect_type = Some(path.into());
        self
    }

    /// Sets the message types (as methods name them) that implement `SplitLarge`.
    pub(crate) fn set_gathered(&mut self, types: BTreeSet<String>) {
        self.gathered = types;
    }

    /// The configured codegen path, unparsed.
    pub(crate) fn codegen_path_str(&self) -> &str {
        &self.codegen_path
    }

    /// Emits the code of `service`. The result is a list of items; pass it to
    /// [`format()`](crate::format()) for readable text.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSyntax`] if a name, a type or the codegen path does not parse as Rust.
    pub fn generate<S: Service>(&self, service: &S) -> Result<TokenStream, Error> {
        if !self.build_client && !self.build_server {
            return Ok(TokenStream::new());
        }
        let codegen = syntax::parse_path(&self.codegen_path, "codegen path")?;
        let plan = ServicePlan::new(service, &self.gathered)?;
        let methods = methods_module(&plan, &codegen);
        let connect_type = match &self.connect_type {
            Some(path) => Some(syntax::parse_path(path, "connect type")?),
            None => None,
        };
        let client = if self.build_client {
            client::generate(&plan, &codegen, connect_type.as_ref())
        } else {
            TokenStream::new()
        };
        let server = if self.build_server {
            server::generate(&plan, &codegen)
        } else {
            TokenStream::new()
        };
        Ok(quote! { #methods #client #server })
    }
}

/// A validated service, ready to be turned into tokens by the client and server emitters.
pub(crate) struct ServicePlan {
    /// `package.Service`: the `NamedService::NAME`.
    pub(crate) full_name: String,
    /// The trait name, e.g. `Echo`.
    pub(crate) ident: Ident,
    /// Documentation lines from the front end.
    pub(crate) docs: Vec<String>,
    /// `echo_methods`.
    pub(crate) methods_module: Ident,
    /// `echo_client`.
    pub(crate) client_module: Ident,
    /// `echo_server`.
    pub(crate) server_module: Ident,
    /// The methods in index order.
    pub(crate) methods: Vec<MethodPlan>,
}

/// A validated method.
pub(crate) struct MethodPlan {
    /// The `snake_case` Rust name.
    pub(crate) ident: Ident,
    /// The wire path `/package.Service/Method`.
    pub(crate) route: String,
    /// Documentation lines from the front end.
    pub(crate) docs: Vec<String>,
    /// The request type as seen from `<service>_client` / `<service>_server`.
    pub(crate) input: TokenStream,
    /// The response type as seen from `<service>_client` / `<service>_server`.
    pub(crate) output: TokenStream,
    /// Whether the request type implements `SplitLarge`.
    pub(crate) gather_input: bool,
    /// Whether the response type implements `SplitLarge`.
    pub(crate) gather_output: bool,
    /// Whether the client sends a stream.
    pub(crate) client_streaming: bool,
    /// Whether the server answers with a stream.
    pub(crate) server_streaming: bool,
    /// Whether the method is marked idempotent.
    pub(crate) idempotent: bool,
    /// The server trait's associated type for the response stream: `WatchStream`.
    pub(crate) stream_type: Ident,
}

impl MethodPlan {
    /// The `MethodKind` variant of this method.
    pub(crate) fn kind(&self) -> Ident {
        let kind = match (self.client_streaming, self.server_streaming) {
            (false, false) => "Unary",
            (false, true) => "ServerStreaming",
            (true, false) => "ClientStreaming",
            (true, true) => "Streaming",
        };
        Ident::new(kind, proc_macro2::Span::call_site())
    }
}

impl ServicePlan {
    /// Validates `service` and resolves its names and types.
    fn new<S: Service>(service: &S, gathered: &BTreeSet<String>) -> Result<Self, Error> {
        let full_name = syntax::qualified_name(service.package(), service.proto_name());
        syntax::check_name(service.proto_name(), "service name", &full_name)?;
        if !service.package().is_empty() {
            for segment in service.package().split('.') {
                syntax::check_name(segment, "package", &full_name)?;
            }
        }
        let ident = syntax::type_ident(service.name(), &full_name)?;
        let methods = service
            .methods()
            .iter()
            .map(|method| {
                let context = format!("{full_name}/{}", method.proto_name());
                syntax::check_name(method.proto_name(), "method name", &context)?;
                let stream_type = syntax::type_ident(
                    &format!("{}Stream", method.proto_name().to_upper_camel_case()),
                    &context,
                )?;
                Ok(MethodPlan {
                    ident: syntax::method_ident(method.name(), &context)?,
                    route: format!("/{context}"),
                    docs: method.comments(),
                    input: syntax::resolve_type(method.input_type(), "input type", &context)?,
                    output: syntax::resolve_type(method.output_type(), "output type", &context)?,
                    gather_input: gathered.contains(method.input_type()),
                    gather_output: gathered.contains(method.output_type()),
                    client_streaming: method.client_streaming(),
                    server_streaming: method.server_streaming(),
                    idempotent: method.idempotent(),
                    stream_type,
                })
            })
            .collect::<Result<_, Error>>()?;
        Ok(Self {
            methods_module: syntax::module_ident(service.name(), "methods"),
            client_module: syntax::module_ident(service.name(), "client"),
            server_module: syntax::module_ident(service.name(), "server"),
            full_name,
            ident,
            docs: service.comments(),
            methods,
        })
    }

    /// The service docs, or `fallback` when the front end has none.
    pub(crate) fn docs_or(&self, fallback: String) -> TokenStream {
        docs_or(&self.docs, fallback)
    }
}

/// `docs` as attributes, or `fallback` as a one-line doc when `docs` is empty.
pub(crate) fn docs_or(docs: &[String], fallback: String) -> TokenStream {
    if docs.is_empty() {
        doc_attrs(&[fallback])
    } else {
        doc_attrs(docs)
    }
}

/// `pub mod <service>_methods { pub static METHODS: [MethodDescriptor; N] = [...]; }`.
fn methods_module(plan: &ServicePlan, codegen: &syn::Path) -> TokenStream {
    let module = &plan.methods_module;
    let module_doc = format!(
        " Method descriptors of `{}`, shared by its generated client and server.",
        plan.full_name
    );
    let count = plan.methods.len();
    let descriptors = plan.methods.iter().map(|method| {
        let route = &method.route;
        let descriptor = if method.client_streaming || method.server_streaming {
            let kind = method.kind();
            quote!(#codegen::MethodDescriptor::with_kind(#route, #codegen::MethodKind::#kind))
        } else {
            quote!(#codegen::MethodDescriptor::new(#route))
        };
        if method.idempotent {
            quote!(#descriptor.idempotent())
        } else {
            descriptor
        }
    });
    let mut static_doc = vec![
        format!(
            "The methods of `{}`; an index into this table is what `Service::call` receives.",
            plan.full_name
        ),
        String::new(),
    ];
    static_doc.extend(
        plan.methods
            .iter()
            .enumerate()
            .map(|(index, method)| format!("- {index}: `{}`", method.route)),
    );
    let static_doc = doc_attrs(&static_doc);
    quote! {
        #[doc = #module_doc]
        pub mod #module {
            #static_doc
            pub static METHODS: [#codegen::MethodDescriptor; #count] = [
                #(#descriptors,)*
            ];
        }
    }
}
