//! Emits the `<service>_server` module.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::plan::{docs_or, ServicePlan};

/// `pub mod <service>_server { pub trait <Service> { … } pub struct <Service>Server<T> { … } }`.
pub(crate) fn generate(plan: &ServicePlan, codegen: &syn::Path) -> TokenStream {
    let module = &plan.server_module;
    let methods_module = &plan.methods_module;
    let service = &plan.ident;
    let server = format_ident!("{}Server", plan.ident);
    let server_name = server.to_string();
    let full_name = &plan.full_name;
    let module_doc = format!(" Generated server of `{full_name}`.");
    let trait_doc = plan.docs_or(format!("The handlers of the `{full_name}` service."));
    let trait_doc_tail = format!(
        " Implement it with `async fn`s and serve it by wrapping the value in [`{server_name}`]."
    );
    let server_doc =
        format!(" Routes calls of `{full_name}` to an implementation of [`{service}`].");

    let trait_methods = plan.methods.iter().map(|method| {
        let ident = &method.ident;
        let input = &method.input;
        let output = &method.output;
        let docs = docs_or(&method.docs, format!("Handles `{}`.", method.route));
        let request = if method.client_streaming {
            quote!(#codegen::Request<#codegen::Streaming<#input>>)
        } else {
            quote!(#codegen::Request<#input>)
        };
        if method.server_streaming {
            let stream = &method.stream_type;
            let stream_doc = format!(" The stream of responses of `{}`.", method.route);
            quote! {
                #[doc = #stream_doc]
                type #stream: #codegen::Stream<
                        Item = ::core::result::Result<#output, #codegen::Status>,
                    > + ::core::marker::Send
                    + 'static;

                #docs
                fn #ident(
                    &self,
                    request: #request,
                ) -> impl ::core::future::Future<
                    Output = ::core::result::Result<
                        #codegen::Response<Self::#stream>,
                        #codegen::Status,
                    >,
                > + ::core::marker::Send;
            }
        } else {
            quote! {
                #docs
                fn #ident(
                    &self,
                    request: #request,
                ) -> impl ::core::future::Future<
                    Output = ::core::result::Result<#codegen::Response<#output>, #codegen::Status>,
                > + ::core::marker::Send;
            }
        }
    });

    let unary_arms = plan
        .methods
        .iter()
        .enumerate()
        .filter(|(_, method)| !method.client_streaming && !method.server_streaming)
        .map(|(index, method)| {
            let ident = &method.ident;
            let input = &method.input;
            // Responses with large `bytes` fields send them by gathered write.
            let unary = if method.gather_output {
                quote!(unary_gathered)
            } else {
                quote!(unary)
            };
            quote! {
                #index => {
                    let inner = ::std::sync::Arc::clone(&self.inner);
                    #codegen::#unary(request, move |request: #codegen::Request<#input>| async move {
                        <T as #service>::#ident(&inner, request).await
                    })
                }
            }
        })
        .collect::<Vec<_>>();
    let streaming_arms = plan
        .methods
        .iter()
        .enumerate()
        .filter(|(_, method)| method.client_streaming || method.server_streaming)
        .map(|(index, method)| {
            let ident = &method.ident;
            let input = &method.input;
            let boxed = if method.gather_output {
                quote!(#codegen::boxed_gathered)
            } else {
                quote!(#codegen::boxed)
            };
            let (helper, request) = match (method.client_streaming, method.server_streaming) {
                (false, _) => (quote!(server_streaming), quote!(#codegen::Request<#input>)),
                (true, false) => (
                    quote!(client_streaming),
                    quote!(#codegen::Request<#codegen::Streaming<#input>>),
                ),
                (true, true) => (
                    quote!(streaming),
                    quote!(#codegen::Request<#codegen::Streaming<#input>>),
                ),
            };
            quote! {
                #index => {
                    let inner = ::std::sync::Arc::clone(&self.inner);
                    #codegen::#helper(
                        request,
                        move |request: #request| async move {
                            <T as #service>::#ident(&inner, request).await
                        },
                        #boxed,
                    )
                }
            }
        })
        .collect::<Vec<_>>();
    // Out-of-range indexes do not come from the router, which only uses `methods()`; the path
    // in the error names the index anyway.
    let unknown = format!("/{full_name}/#{{}}");
    // A `match` with only the wildcard arm would trip `clippy::match_single_binding`.
    let call_body = if unary_arms.is_empty() {
        quote! {
            let _ = request;
            #codegen::unimplemented(&::std::format!(#unknown, index))
        }
    } else {
        quote! {
            match index {
                #(#unary_arms)*
                _ => #codegen::unimplemented(&::std::format!(#unknown, index)),
            }
        }
    };
    let call_streaming = if streaming_arms.is_empty() {
        quote!()
    } else {
        quote! {
            fn call_streaming(
                &self,
                index: usize,
                request: #codegen::Request<#codegen::StreamRequest<'_>>,
            ) -> #codegen::StreamingFuture {
                match index {
                    #(#streaming_arms)*
                    _ => ::std::boxed::Box::pin(::core::future::ready(::core::result::Result::Err(
                        #codegen::Status::unimplemented(::std::format!(#unknown, index)),
                    ))),
                }
            }
        }
    };

    quote! {
        #[doc = #module_doc]
        pub mod #module {
            #trait_doc
            ///
            #[doc = #trait_doc_tail]
            pub trait #service: ::core::marker::Send + ::core::marker::Sync + 'static {
                #(#trait_methods)*
            }

            #[doc = #server_doc]
            ///
            /// Cloning is cheap: clones share the implementation.
            pub struct #server<T> {
                inner: ::std::sync::Arc<T>,
            }

            impl<T> #server<T> {
                /// Serves `inner`.
                pub fn new(inner: T) -> Self {
                    Self::from_arc(::std::sync::Arc::new(inner))
                }

                /// Serves an implementation that is shared with other code.
                pub fn from_arc(inner: ::std::sync::Arc<T>) -> Self {
                    Self { inner }
                }

                /// The implementation this server routes to.
                pub fn get_ref(&self) -> &T {
                    &self.inner
                }
            }

            impl<T: #service> #server<T> {
                /// Serves `inner` behind `interceptor`, which sees every call's request
                /// head first and may refuse the call (see `rdmarpc_core::Interceptor`).
                pub fn with_interceptor<I: #codegen::Interceptor>(
                    inner: T,
                    interceptor: I,
                ) -> #codegen::InterceptedService<Self, I> {
                    #codegen::InterceptedService::new(Self::new(inner), interceptor)
                }
            }

            impl<T> ::core::clone::Clone for #server<T> {
                fn clone(&self) -> Self {
                    Self {
                        inner: ::std::sync::Arc::clone(&self.inner),
                    }
                }
            }

            impl<T> ::core::fmt::Debug for #server<T> {
                fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    f.debug_struct(#server_name)
                        .field("service", &#full_name)
                        .finish_non_exhaustive()
                }
            }

            impl<T: #service> #codegen::NamedService for #server<T> {
                const NAME: &'static str = #full_name;
            }

            impl<T: #service> #codegen::Service for #server<T> {
                fn name(&self) -> &'static str {
                    #full_name
                }

                fn methods(&self) -> &'static [#codegen::MethodDescriptor] {
                    &super::#methods_module::METHODS
                }

                fn call(
                    &self,
                    index: usize,
                    request: #codegen::Request<#codegen::Payload<'_>>,
                ) -> #codegen::ServiceFuture {
                    #call_body
                }

                #call_streaming
            }
        }
    }
}
