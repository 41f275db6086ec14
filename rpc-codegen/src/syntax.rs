//! Small helpers that turn IR strings into tokens: identifiers, doc attributes, type paths,
//! routes, and the final pretty-printing.

use heck::{ToSnakeCase, ToUpperCamelCase};
use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, ToTokens};

use crate::Error;

/// Keywords that cannot be raw identifiers; prost-build appends `_` to them, and so do we.
const NOT_RAW: &[&str] = &["self", "super", "crate", "Self"];

/// An identifier for `name` as given, made raw (`r#type`) or suffixed (`self_`) if it is a keyword.
fn ident(name: &str) -> Ident {
    let name = name.strip_prefix("r#").unwrap_or(name);
    if NOT_RAW.contains(&name) {
        Ident::new(&format!("{name}_"), Span::call_site())
    } else if syn::parse_str::<Ident>(name).is_ok() {
        Ident::new(name, Span::call_site())
    } else {
        Ident::new_raw(name, Span::call_site())
    }
}

/// Checks that `name` is made of identifier characters, so that [`ident`] cannot panic.
pub(crate) fn check_name(name: &str, what: &'static str, context: &str) -> Result<(), Error> {
    let bare = name.strip_prefix("r#").unwrap_or(name);
    let mut chars = bare.chars();
    let valid = chars.next().is_some_and(|c| c == '_' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric());
    if valid {
        Ok(())
    } else {
        Err(Error::InvalidSyntax {
            what,
            value: name.to_owned(),
            context: context.to_owned(),
            reason: "not an identifier".to_owned(),
        })
    }
}

/// The Rust identifier of a method: `snake_case`, keyword-escaped.
pub(crate) fn method_ident(name: &str, context: &str) -> Result<Ident, Error> {
    check_name(name, "method name", context)?;
    let bare = name.strip_prefix("r#").unwrap_or(name);
    Ok(ident(&bare.to_snake_case()))
}

/// The Rust identifier of a service type: `UpperCamelCase`, keyword-escaped.
pub(crate) fn type_ident(name: &str, context: &str) -> Result<Ident, Error> {
    check_name(name, "service name", context)?;
    Ok(ident(&name.to_upper_camel_case()))
}

/// The identifier `<service>_<suffix>` of a generated module, e.g. `echo_client`.
pub(crate) fn module_ident(service: &str, suffix: &str) -> Ident {
    ident(&format!("{}_{suffix}", service.to_snake_case()))
}

/// `#[doc = "…"]` attributes, one per line; `prettyplease` prints them as `///` comments.
pub(crate) fn doc_attrs<S: AsRef<str>>(lines: &[S]) -> TokenStream {
    lines
        .iter()
        .map(|line| {
            let line = line.as_ref();
            let line = if line.is_empty() || line.starts_with(' ') {
                line.to_owned()
            } else {
                format!(" {line}")
            };
            quote!(#[doc = #line])
        })
        .collect()
}

/// `package.Service`, or `Service` when the package is empty: the `NamedService::NAME`.
pub(crate) fn qualified_name(package: &str, service: &str) -> String {
    if package.is_empty() {
        service.to_owned()
    } else {
        format!("{package}.{service}")
    }
}

/// Parses a path option such as the codegen path `rdmarpc_core::codegen`.
pub(crate) fn parse_path(path: &str, what: &'static str) -> Result<syn::Path, Error> {
    syn::parse_str(path).map_err(|error| Error::InvalidSyntax {
        what,
        value: path.to_owned(),
        context: "the builder options".to_owned(),
        reason: error.to_string(),
    })
}

/// The tokens of a message type as seen from a module generated one level below the package
/// module (`echo_client`, `echo_server`): relative paths get a `super::` prefix.
pub(crate) fn resolve_type(
    ty: &str,
    what: &'static str,
    context: &str,
) -> Result<TokenStream, Error> {
    let parsed: syn::Type = syn::parse_str(ty).map_err(|error| Error::InvalidSyntax {
        what,
        value: ty.to_owned(),
        context: context.to_owned(),
        reason: error.to_string(),
    })?;
    let relative = match &parsed {
        syn::Type::Path(syn::TypePath { qself: None, path }) => {
            path.leading_colon.is_none()
                && path
                    .segments
                    .first()
                    .is_some_and(|first| first.ident != "crate")
        }
        _ => false,
    };
    Ok(if relative {
        quote!(super::#parsed)
    } else {
        parsed.into_token_stream()
    })
}

/// Pretty-prints a generated item list with `prettyplease`.
///
/// # Errors
///
/// [`Error::InvalidSyntax`] if `tokens` is not a valid Rust file, which would be a bug in the
/// emitter (every user-provided string is validated before it reaches the tokens).
pub fn format(tokens: TokenStream) -> Result<String, Error> {
    let file: syn::File = syn::parse2(tokens).map_err(|error| Error::InvalidSyntax {
        what: "generated code",
        value: String::new(),
        context: "the emitter output".to_owned(),
        reason: error.to_string(),
    })?;
    Ok(prettyplease::unparse(&file))
}
