//! [`Builder`]: the descriptor sets to serve, checked into a [`ReflectionService`].

use std::sync::Arc;

use bytes::Bytes;
use prost::Message as _;

use crate::index::Index;
use crate::{Error, ReflectionService, FILE_DESCRIPTOR_SET};

/// Collects the descriptor sets a [`ReflectionService`] serves.
///
/// Register the encoded `FileDescriptorSet` of every service the server runs: `rdmarpc-codegen`
/// writes one with `file_descriptor_set_path` (imports included, so each set is complete
/// on its own), and [`rdmarpc_health`'s](https://docs.rs/rpc-health) is
/// `rdmarpc_health::FILE_DESCRIPTOR_SET`. Reflection's own set is always registered.
///
/// ```
/// # fn f(my_services_set: &'static [u8]) -> Result<(), Box<dyn std::error::Error>> {
/// let reflection = rdmarpc_reflection::Builder::new()
///     .register_encoded_file_descriptor_set(my_services_set)
///     .with_service_name("echo.Echo")
///     .build()?;
/// let server = rdmarpc_core::Server::builder()
///     .add_service(reflection.v1())?
///     .add_service(reflection.v1alpha())?
///     .build();
/// # drop(server); Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Builder {
    /// Encoded `FileDescriptorSet`s, reflection's own first.
    sets: Vec<Bytes>,
    /// The services to list; `None` lists every service of the sets.
    services: Option<Vec<String>>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            sets: vec![Bytes::from_static(FILE_DESCRIPTOR_SET)],
            services: None,
        }
    }
}

impl Builder {
    /// A builder with reflection's own descriptor set registered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers an encoded `google.protobuf.FileDescriptorSet` (as `rdmarpc-codegen`,
    /// `protoc --descriptor_set_out --include_imports` or protox write it). A file may
    /// be in several sets; it is served once. Not decoded until [`Builder::build`].
    pub fn register_encoded_file_descriptor_set(mut self, set: impl Into<Bytes>) -> Self {
        self.sets.push(set.into());
        self
    }

    /// Registers a decoded descriptor set (e.g. from `protox::compile`).
    ///
    /// Its files are served as prost encodes them: unknown fields, and so custom
    /// options that `prost_types` does not know, are lost; register the encoded set to
    /// serve files byte for byte.
    pub fn register_file_descriptor_set(self, set: prost_types::FileDescriptorSet) -> Self {
        self.register_encoded_file_descriptor_set(set.encode_to_vec())
    }

    /// Lists service `name` (`package.Service`) in answers to `list_services`.
    ///
    /// By default every service of the registered sets is listed; once this is called,
    /// only the services named this way, and reflection's own two. Name the services the
    /// server runs when its sets also describe others (a shared set of several
    /// examples, say). Files, symbols and extensions are found in all sets either way.
    pub fn with_service_name(mut self, name: impl Into<String>) -> Self {
        self.services
            .get_or_insert_with(|| {
                vec![
                    crate::SERVICE_NAME_V1.to_owned(),
                    crate::SERVICE_NAME_V1ALPHA.to_owned(),
                ]
            })
            .push(name.into());
        self
    }

    /// Decodes and indexes the registered sets.
    ///
    /// # Errors
    /// An [`Error`] when the sets cannot be served as they are: a set or file that does
    /// not decode, two different files of one name, a symbol or extension defined twice,
    /// an import that no set holds (clients could not build the file), or a service
    /// named by [`Builder::with_service_name`] that no file defines.
    pub fn build(self) -> Result<ReflectionService, Error> {
        let index = Index::build(&self.sets, self.services.as_deref())?;
        Ok(ReflectionService::new(Arc::new(index)))
    }
}
