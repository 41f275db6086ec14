//! The emitter: IR in, `proc_macro2::TokenStream` out.

use std::collections::BTreeSet;

use proc_macro2::TokenStream;
use quote::quote;

use crate::ir::Service;
use crate::plan::ServicePlan;
use crate::syntax::{self, doc_attrs};
use crate::{client, server, Error};

/// The path generated code uses to reach the runtime, unless overridden.
pub(crate) const DEFAULT_CODEGEN_PATH: &str = "rdmarpc_core::codegen";
/// The connection type of the generated `FooClient::connect`, by default.
pub(crate) const DEFAULT_CONNECT_TYPE: &str = "rdmarpc_transport::AnyConnection";

/// Emits the Rust code of one [`Service`]: a `<service>_methods` module with the method
/// descriptors, a `<service>_client` module and a `<service>_server` module.
///
/// Generated code names nothing but `<codegen path>::*`, `core` and `std`, the connect type
/// (`rdmarpc_transport::AnyConnection` unless changed or turned off), plus the message types
/// the IR gives it; every type it mentions is fully qualified, so that a service called `Service`
/// or a method called `clone` cannot clash with it.
///
/// # Examples
///
/// ```
/// use rdmarpc_codegen::{manual, CodeGenBuilder};
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
/// let code = rdmarpc_codegen::format(tokens)?;
/// assert!(code.contains("pub struct EchoClient"));
/// assert!(!code.contains("pub trait Echo"));
/// # Ok::<(), rdmarpc_codegen::Error>(())
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
    /// A builder that emits clients and servers against `rdmarpc_core::codegen`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The path of the runtime's codegen module. Default: `rdmarpc_core::codegen`.
    ///
    /// Change it when the user crate renames `rdmarpc-core` or re-exports it from a facade crate.
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

    /// The connection type (implementing `rdmarpc_core::Dial`) of the clients' `connect` and
    /// `connect_lazy`. Default: `rdmarpc_transport::AnyConnection`, which dials every scheme
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
