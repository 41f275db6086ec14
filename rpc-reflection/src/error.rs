//! Why a [`Builder`](crate::Builder) refused its descriptor sets.

/// A descriptor set that cannot be served as registered. Found at start-up, so that a
/// client never sees a pool it cannot build.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A descriptor set, or a file in one, is not a valid encoding.
    #[error("{what} does not decode: {source}")]
    Decode {
        /// Which set or file.
        what: String,
        /// prost's reason.
        source: prost::DecodeError,
    },
    /// Two registered files have one name and different contents (comments aside).
    #[error("two different files are registered as {name:?}")]
    ConflictingFile {
        /// The name both files have.
        name: String,
    },
    /// A file imports one that no registered set holds: clients could not build it.
    #[error("{file:?} imports {dependency:?}, which no registered descriptor set holds")]
    MissingDependency {
        /// The importing file.
        file: String,
        /// The missing import.
        dependency: String,
    },
    /// Two files define the same full name.
    #[error("{symbol:?} is defined by both {first:?} and {second:?}")]
    DuplicateSymbol {
        /// The full name.
        symbol: String,
        /// The file registered first.
        first: String,
        /// The file registered later.
        second: String,
    },
    /// Two files extend the same message with the same field number.
    #[error("extension {number} of {extendee:?} is declared by both {first:?} and {second:?}")]
    DuplicateExtension {
        /// The extended message's full name.
        extendee: String,
        /// The field number.
        number: i32,
        /// The file registered first.
        first: String,
        /// The file registered later.
        second: String,
    },
    /// [`Builder::with_service_name`](crate::Builder::with_service_name) named a
    /// service that no registered file defines.
    #[error("service {name:?} is not defined by any registered file")]
    UnknownService {
        /// The name given.
        name: String,
    },
}
