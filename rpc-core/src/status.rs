//! [`Status`] and [`Code`]: the outcome of a call, with gRPC's status codes.

use std::fmt;

/// gRPC status codes, with the same numeric values as gRPC so that reports and tools
/// that know gRPC read ours unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum Code {
    /// The call completed successfully.
    Ok = 0,
    /// The call was cancelled, typically by the caller.
    Cancelled = 1,
    /// Unknown error.
    Unknown = 2,
    /// The client sent an argument the server could not accept (e.g. undecodable protobuf).
    InvalidArgument = 3,
    /// The deadline expired before the call completed.
    DeadlineExceeded = 4,
    /// A requested entity was not found.
    NotFound = 5,
    /// The entity that a client attempted to create already exists.
    AlreadyExists = 6,
    /// The caller does not have permission.
    PermissionDenied = 7,
    /// A resource (message size, memory, concurrency) has been exhausted.
    ResourceExhausted = 8,
    /// The system is not in a state required for the operation.
    FailedPrecondition = 9,
    /// The operation was aborted.
    Aborted = 10,
    /// The operation was attempted past the valid range.
    OutOfRange = 11,
    /// The method is not implemented or not known by the server.
    Unimplemented = 12,
    /// An invariant of the system was broken.
    Internal = 13,
    /// The service is unavailable: the connection failed or the peer went away.
    Unavailable = 14,
    /// Unrecoverable data loss or corruption.
    DataLoss = 15,
    /// The request lacks valid authentication credentials.
    Unauthenticated = 16,
}

impl Code {
    /// The code for a wire value; values gRPC does not define map to [`Code::Unknown`].
    pub fn from_u8(value: u8) -> Code {
        use Code::*;
        match value {
            0 => Ok,
            1 => Cancelled,
            3 => InvalidArgument,
            4 => DeadlineExceeded,
            5 => NotFound,
            6 => AlreadyExists,
            7 => PermissionDenied,
            8 => ResourceExhausted,
            9 => FailedPrecondition,
            10 => Aborted,
            11 => OutOfRange,
            12 => Unimplemented,
            13 => Internal,
            14 => Unavailable,
            15 => DataLoss,
            16 => Unauthenticated,
            _ => Unknown,
        }
    }

    /// gRPC's upper-case name of the code, e.g. `"DEADLINE_EXCEEDED"` (as in ghz reports).
    pub fn as_str(self) -> &'static str {
        use Code::*;
        match self {
            Ok => "OK",
            Cancelled => "CANCELLED",
            Unknown => "UNKNOWN",
            InvalidArgument => "INVALID_ARGUMENT",
            DeadlineExceeded => "DEADLINE_EXCEEDED",
            NotFound => "NOT_FOUND",
            AlreadyExists => "ALREADY_EXISTS",
            PermissionDenied => "PERMISSION_DENIED",
            ResourceExhausted => "RESOURCE_EXHAUSTED",
            FailedPrecondition => "FAILED_PRECONDITION",
            Aborted => "ABORTED",
            OutOfRange => "OUT_OF_RANGE",
            Unimplemented => "UNIMPLEMENTED",
            Internal => "INTERNAL",
            Unavailable => "UNAVAILABLE",
            DataLoss => "DATA_LOSS",
            Unauthenticated => "UNAUTHENTICATED",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of a failed call: a [`Code`] and a human-readable message.
///
/// Boxed so that `Result<T, Status>` stays one pointer wide on the error side.
#[derive(Clone, PartialEq, Eq)]
pub struct Status(Box<Inner>);

#[derive(Clone, PartialEq, Eq)]
struct Inner {
    code: Code,
    message: String,
}

impl Status {
    /// A status with `code` and `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Status {
        Status(Box::new(Inner {
            code,
            message: message.into(),
        }))
    }

    /// The status code.
    pub fn code(&self) -> Code {
        self.0.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// [`Code::Cancelled`].
    pub fn cancelled(message: impl Into<String>) -> Status {
        Status::new(Code::Cancelled, message)
    }
    /// [`Code::InvalidArgument`].
    pub fn invalid_argument(message: impl Into<String>) -> Status {
        Status::new(Code::InvalidArgument, message)
    }
    /// [`Code::DeadlineExceeded`].
    pub fn deadline_exceeded(message: impl Into<String>) -> Status {
        Status::new(Code::DeadlineExceeded, message)
    }
    /// [`Code::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Status {
        Status::new(Code::NotFound, message)
    }
    /// [`Code::ResourceExhausted`].
    pub fn resource_exhausted(message: impl Into<String>) -> Status {
        Status::new(Code::ResourceExhausted, message)
    }
    /// [`Code::Unimplemented`].
    pub fn unimplemented(message: impl Into<String>) -> Status {
        Status::new(Code::Unimplemented, message)
    }
    /// [`Code::Internal`].
    pub fn internal(message: impl Into<String>) -> Status {
        Status::new(Code::Internal, message)
    }
    /// [`Code::Unavailable`].
    pub fn unavailable(message: impl Into<String>) -> Status {
        Status::new(Code::Unavailable, message)
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Status")
            .field("code", &self.0.code)
            .field("message", &self.0.message)
            .finish()
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "status: {}, message: {:?}", self.0.code, self.0.message)
    }
}

impl std::error::Error for Status {}

impl From<crate::TransportError> for Status {
    fn from(err: crate::TransportError) -> Status {
        Status::unavailable(err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_u8() {
        for v in 0..=16u8 {
            assert_eq!(Code::from_u8(v) as u8, v);
        }
        assert_eq!(Code::from_u8(200), Code::Unknown);
        assert_eq!(Code::DeadlineExceeded.as_str(), "DEADLINE_EXCEEDED");
    }

    #[test]
    fn status_is_one_pointer() {
        assert_eq!(std::mem::size_of::<Status>(), std::mem::size_of::<usize>());
    }
}
