//! [`ConfigError`]: what is wrong with a configuration file, variable or setting.

use std::path::PathBuf;

/// A configuration that cannot be used: [`FileConfig`](crate::FileConfig)'s loading,
/// parsing and applying. Its message names the file, the variable or the setting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The TOML is malformed, has an unknown field (a typo) or a value of the wrong type.
    #[error("{}{message}", path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default())]
    Parse {
        /// The file, if the text came from one.
        path: Option<PathBuf>,
        /// The parser's message, naming the field.
        message: String,
    },
    /// An environment variable is set to something that is not a value of its type.
    #[error("{name}={value:?} is not a valid {expected}")]
    Variable {
        /// The variable.
        name: String,
        /// Its value.
        value: String,
        /// The type it should have been.
        expected: &'static str,
    },
    /// Settings that are each valid but not together (e.g. RDMA slots too small for the
    /// eager threshold).
    #[error("{0}")]
    Invalid(String),
}
