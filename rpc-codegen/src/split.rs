//! `SplitLarge` for request and response messages with `bytes::Bytes` fields: which
//! messages qualify, and the code of their impls.
//!
//! A message qualifies when it has at least one top-level `bytes` field that prost
//! generates as `bytes::Bytes` (matched by the builder's `bytes` paths, with prost-build's
//! rules), is not repeated, not in a `oneof` and not proto2 `required` (an emptied field
//! must not be encoded, so that the split encoding keeps the message's length).

use std::collections::BTreeMap;

use heck::ToSnakeCase;
use proc_macro2::TokenStream;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FileDescriptorSet};
use quote::quote;

use crate::Error;

/// A `bytes` field that can be split off.
#[derive(Debug, Clone)]
pub(crate) struct SplitField {
    /// The field number.
    number: u32,
    /// The Rust field name (as prost names it).
    name: String,
    /// Whether prost generates it as `Option<Bytes>`.
    optional: bool,
}

/// A qualifying message: its package and its fields to split.
#[derive(Debug, Clone)]
pub(crate) struct SplitMessage {
    pub(crate) package: String,
    pub(crate) fields: Vec<SplitField>,
}

/// Qualifying messages by fully qualified proto name (`.package.Message`).
pub(crate) type SplitMap = BTreeMap<String, SplitMessage>;

/// The qualifying messages of `fds`, given the builder's `bytes` paths, leaving out
/// those under an extern path (generated, and split or not, by another crate).
pub(crate) fn split_map(
    fds: &FileDescriptorSet,
    bytes_paths: &[String],
    extern_protos: &[String],
) -> SplitMap {
    let mut map = SplitMap::new();
    if bytes_paths.is_empty() {
        return map;
    }
    for file in &fds.file {
        let proto2 = !matches!(file.syntax(), "proto3" | "editions");
        let prefix = if file.package().is_empty() {
            String::new()
        } else {
            format!(".{}", file.package())
        };
        for message in &file.message_type {
            visit(
                message,
                &prefix,
                file.package(),
                proto2,
                bytes_paths,
                &mut map,
            );
        }
    }
    map.retain(|name, _| {
        !extern_protos
            .iter()
            .any(|path| path == "." || name == path || name.starts_with(&format!("{path}.")))
    });
    map
}

fn visit(
    message: &DescriptorProto,
    parent: &str,
    package: &str,
    proto2: bool,
    bytes_paths: &[String],
    map: &mut SplitMap,
) {
    let full_name = format!("{parent}.{}", message.name());
    if message.options.as_ref().is_some_and(|o| o.map_entry()) {
        return;
    }
    let fields: Vec<SplitField> = message
        .field
        .iter()
        .filter(|field| {
            field.r#type() == Type::Bytes
                && !matches!(field.label(), Label::Repeated | Label::Required)
                && (field.oneof_index.is_none() || field.proto3_optional())
                && matches_any(bytes_paths, &format!("{full_name}.{}", field.name()))
        })
        .map(|field| SplitField {
            number: field.number() as u32,
            name: sanitize(&field.name().to_snake_case()),
            optional: field.proto3_optional() || (proto2 && field.label() == Label::Optional),
        })
        .collect();
    if !fields.is_empty() {
        let package = package.to_owned();
        map.insert(full_name.clone(), SplitMessage { package, fields });
    }
    for nested in &message.nested_type {
        visit(nested, &full_name, package, proto2, bytes_paths, map);
    }
}

/// Whether prost-build's path matching selects the field `field` (`.pkg.Msg.field`) for
/// one of `paths` (its `sub_path_iter`): `.` selects everything; a path with a leading
/// dot is fully qualified and selects what it names and everything below; one without
/// selects the fields whose name ends with it, in whole segments.
fn matches_any(paths: &[String], field: &str) -> bool {
    let segments: Vec<&str> = field.trim_start_matches('.').split('.').collect();
    paths.iter().any(|path| {
        if path == "." {
            return true;
        }
        if let Some(qualified) = path.strip_prefix('.') {
            let wanted: Vec<&str> = qualified.split('.').collect();
            return segments.starts_with(&wanted);
        }
        let wanted: Vec<&str> = path.split('.').collect();
        segments.ends_with(&wanted)
    })
}

/// A field name as prost-build makes it an identifier (keywords escaped).
fn sanitize(name: &str) -> String {
    match name {
        "as" | "break" | "const" | "continue" | "else" | "enum" | "false" | "fn" | "for" | "if"
        | "impl" | "in" | "let" | "loop" | "match" | "mod" | "move" | "mut" | "pub" | "ref"
        | "return" | "static" | "struct" | "trait" | "true" | "type" | "unsafe" | "use"
        | "where" | "while" | "dyn" | "abstract" | "become" | "box" | "do" | "final" | "macro"
        | "override" | "priv" | "typeof" | "unsized" | "virtual" | "yield" | "async" | "await"
        | "try" | "gen" => format!("r#{name}"),
        "_" | "super" | "self" | "Self" | "extern" | "crate" => format!("{name}_"),
        s if s.starts_with(|c: char| c.is_numeric()) => format!("_{name}"),
        _ => name.to_owned(),
    }
}

/// `impl SplitLarge for <rust_type>`, at the level of the package's module.
pub(crate) fn split_impl(
    rust_type: &str,
    fields: &[SplitField],
    codegen: &syn::Path,
) -> Result<TokenStream, Error> {
    let invalid = |what: &'static str, value: &str, error: syn::Error| Error::InvalidSyntax {
        what,
        value: value.to_owned(),
        context: rust_type.to_owned(),
        reason: error.to_string(),
    };
    let ty: syn::Type =
        syn::parse_str(rust_type).map_err(|e| invalid("message type", rust_type, e))?;
    let mut checks = Vec::new();
    let mut takes = Vec::new();
    for field in fields {
        let ident: syn::Ident =
            syn::parse_str(&field.name).map_err(|e| invalid("field name", &field.name, e))?;
        let number = field.number;
        if field.optional {
            checks.push(quote!(self.#ident.as_ref().is_some_and(|v| v.len() >= min)));
            takes.push(quote! {
                if let ::core::option::Option::Some(v) = rest.#ident.take_if(|v| v.len() >= min) {
                    fields.push((#number, v));
                }
            });
        } else {
            checks.push(quote!(self.#ident.len() >= min));
            takes.push(quote! {
                if rest.#ident.len() >= min {
                    fields.push((#number, ::core::mem::take(&mut rest.#ident)));
                }
            });
        }
    }
    Ok(quote! {
        impl #codegen::SplitLarge for #ty {
            fn split_large(
                &self,
                min: usize,
            ) -> ::core::option::Option<(Self, ::std::vec::Vec<(u32, #codegen::bytes::Bytes)>)> {
                let large = #(#checks)||*;
                if !large {
                    return ::core::option::Option::None;
                }
                let mut rest = ::core::clone::Clone::clone(self);
                let mut fields = ::std::vec::Vec::new();
                #(#takes)*
                ::core::option::Option::Some((rest, fields))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_match_as_prost_build_matches_them() {
        let field = ".acme.store.Item.blob";
        let m = |p: &str| matches_any(&[p.to_owned()], field);
        assert!(m("."));
        assert!(m(".acme"));
        assert!(m(".acme.store.Item"));
        assert!(m(".acme.store.Item.blob"));
        assert!(!m(".acme.stor"));
        assert!(!m(".store"));
        assert!(m("Item.blob"));
        assert!(m("blob"));
        assert!(m("acme.store.Item.blob"));
        assert!(!m("store.Item"), "relative paths match suffixes only");
        assert!(!m("Item"));
        assert!(!m("acme"));
        assert!(!m("Ite"));
    }

    #[test]
    fn keywords_are_escaped_as_prost_does() {
        assert_eq!(sanitize("type"), "r#type");
        assert_eq!(sanitize("self"), "self_");
        assert_eq!(sanitize("payload"), "payload");
    }
}
