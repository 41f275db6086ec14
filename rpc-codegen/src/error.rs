//! The error type of code generation.

use std::io;

/// Why code generation failed.
///
/// A build script usually just propagates it (`?` into `Box<dyn std::error::Error>` or, through
/// the `From` impl, into [`io::Error`]); cargo then prints the message and fails the build.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A `.proto` file could not be found, read or parsed, or it does not type-check.
    #[error("failed to compile .proto files: {0}")]
    Proto(#[from] protox::Error),

    /// A name or a Rust type given by a front end does not parse as Rust.
    #[error("invalid {what} `{value}` in {context}: {reason}")]
    InvalidSyntax {
        /// What was being parsed: "input type", "codegen path", ...
        what: &'static str,
        /// The offending text.
        value: String,
        /// Where it came from: the method as `package.Service/Method`, or the builder option.
        context: String,
        /// The parser's message.
        reason: String,
    },

    /// Writing the generated files (or the descriptor set) failed, or prost-build failed.
    #[error("failed to generate code: {0}")]
    Io(#[from] io::Error),
}

impl From<Error> for io::Error {
    fn from(error: Error) -> Self {
        match error {
            Error::Io(error) => error,
            other => io::Error::other(other),
        }
    }
}
