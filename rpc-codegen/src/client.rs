//! Emits the `<service>_client` module.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::plan::{docs_or, ServicePlan};

/// `pub mod <service>_client { pub struct <Service>Client<C> { … } }`.
pub(crate) fn generate(
    plan: &ServicePlan,
    codegen: &syn::Path,
    connect_type: Option<&syn::Path>,
) -> TokenStream {
    let module = &plan.client_module;
    let methods_module = &plan.methods_module;
    let client = format_ident!("{}Client", plan.ident);
    let client_name = client.to_string();
    let full_name = &plan.full_name;
    let module_doc = format!(" Generated client of `{full_name}`.");
    let client_doc = plan.docs_or(format!("Client of the `{full_name}` service."));

    let methods = plan.methods.iter().enumerate().map(|(index, method)| {
        let ident = &method.ident;
        let input = &method.input;
        let output = &method.output;
        let docs = docs_or(&method.docs, format!("Calls `{}`.", method.route));
        let descriptor = quote!(&super::#methods_module::METHODS[#index]);
        let errors = quote! {
            ///
            /// # Errors
            ///
            /// The `Status` returned by the server's handler, or the one the channel fails the
            /// call with (e.g. `UNAVAILABLE`, `DEADLINE_EXCEEDED`).
        };
        match (method.client_streaming, method.server_streaming) {
            (false, false) => {
                // Requests with large `bytes` fields send them by gathered write.
                let call = if method.gather_input {
                    quote!(unary_gathered)
                } else {
                    quote!(unary)
                };
                quote! {
                    #docs
                    #errors
                    pub async fn #ident(
                        &self,
                        request: impl #codegen::IntoRequest<#input>,
                    ) -> ::core::result::Result<#codegen::Response<#output>, #codegen::Status> {
                        self.inner
                            .#call(#codegen::IntoRequest::into_request(request), #descriptor)
                            .await
                    }
                }
            }
            (false, true) => quote! {
                #docs
                ///
                /// Resolves with the response headers; the messages come from the returned
                /// `Streaming`, which cancels the call when dropped.
                #errors
                pub async fn #ident(
                    &self,
                    request: impl #codegen::IntoRequest<#input>,
                ) -> ::core::result::Result<
                    #codegen::Response<#codegen::Streaming<#output>>,
                    #codegen::Status,
                > {
                    self.inner
                        .server_streaming(#codegen::IntoRequest::into_request(request), #descriptor)
                        .await
                }
            },
            (true, false) => quote! {
                #docs
                ///
                /// Sends the messages of `request` (a `Stream`, or a `Request` of one) as the
                /// server's window allows, then waits for the response.
                #errors
                pub async fn #ident(
                    &self,
                    request: impl #codegen::IntoStreamingRequest<Message = #input>,
                ) -> ::core::result::Result<#codegen::Response<#output>, #codegen::Status> {
                    self.inner.client_streaming(request, #descriptor).await
                }
            },
            (true, true) => quote! {
                #docs
                ///
                /// Sends the messages of `request` (a `Stream`, or a `Request` of one) while
                /// the responses come from the returned `Streaming`, which cancels the call
                /// when dropped.
                #errors
                pub async fn #ident(
                    &self,
                    request: impl #codegen::IntoStreamingRequest<Message = #input>,
                ) -> ::core::result::Result<
                    #codegen::Response<#codegen::Streaming<#output>>,
                    #codegen::Status,
                > {
                    self.inner.streaming(request, #descriptor).await
                }
            },
        }
    });

    // A service with a method named `connect` or `connect_lazy` keeps its method; the
    // helpers are left out (the client is then made with `new`).
    let clash = plan
        .methods
        .iter()
        .any(|m| m.ident == "connect" || m.ident == "connect_lazy");
    let connect = connect_type.filter(|_| !clash).map(|connection| {
        quote! {
            impl #client<#connection> {
                /// A client of the service at `url` (`tcp://host:port`, `rdma://`,
                /// `auto://`, `grpc://`, or their TLS forms `tcp+tls://`, ...,
                /// `grpcs://`), connected now and again whenever a call finds the
                /// connection failed, with settings from the `RPC_*` environment
                /// variables.
                ///
                /// # Errors
                ///
                /// A URL that is not an endpoint, or the transport's error on the first
                /// dial (refused, unreachable, a failed TLS verification).
                pub async fn connect(
                    url: &str,
                ) -> ::core::result::Result<Self, #codegen::TransportError> {
                    #codegen::Channel::connect(url).await.map(Self::new)
                }

                /// As [`connect`](Self::connect), but dials only on the first call:
                /// creating the client never waits (a service may start before the
                /// ones it calls); a failed dial fails the call that made it with
                /// `UNAVAILABLE`.
                ///
                /// # Errors
                ///
                /// A URL that is not an endpoint, or unusable `RPC_CLIENT_*` settings.
                pub fn connect_lazy(
                    url: &str,
                ) -> ::core::result::Result<Self, #codegen::TransportError> {
                    #codegen::Channel::connect_lazy(url).map(Self::new)
                }
            }
        }
    });

    quote! {
        #[doc = #module_doc]
        pub mod #module {
            #client_doc
            ///
            /// Cloning is cheap: clones share the channel and its connection.
            pub struct #client<C: #codegen::Connection> {
                inner: #codegen::Channel<C>,
            }

            impl<C: #codegen::Connection> #client<C> {
                /// Creates a client that issues its calls on `channel`.
                pub fn new(channel: #codegen::Channel<C>) -> Self {
                    Self { inner: channel }
                }

                /// The channel this client issues its calls on.
                pub fn channel(&self) -> &#codegen::Channel<C> {
                    &self.inner
                }

                /// Gives the channel back.
                pub fn into_channel(self) -> #codegen::Channel<C> {
                    self.inner
                }

                #(#methods)*
            }

            #connect

            impl<C: #codegen::Connection> ::core::clone::Clone for #client<C> {
                fn clone(&self) -> Self {
                    Self {
                        inner: ::core::clone::Clone::clone(&self.inner),
                    }
                }
            }

            impl<C: #codegen::Connection> ::core::fmt::Debug for #client<C> {
                fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    f.debug_struct(#client_name)
                        .field("service", &#full_name)
                        .finish_non_exhaustive()
                }
            }
        }
    }
}
