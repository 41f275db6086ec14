//! A service checked and resolved: names, routes and types, ready for the client and
//! server emitters.

use std::collections::BTreeSet;

use heck::ToUpperCamelCase;
use proc_macro2::{Ident, TokenStream};

use crate::ir::{Method, Service};
use crate::syntax::{self, doc_attrs};
use crate::Error;

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
    pub(crate) fn new<S: Service>(service: &S, gathered: &BTreeSet<String>) -> Result<Self, Error> {
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
