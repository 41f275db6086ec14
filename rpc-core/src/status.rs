//! [`Status`] and [`Code`]: the outcome of a call, with gRPC's status codes.

use std::fmt;

use bytes::Bytes;

use crate::Metadata;

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

/// The outcome of a failed call: a [`Code`], a human-readable message, and optionally
/// details (bytes, by convention an encoded `google.rpc.Status`, as gRPC's
/// `grpc-status-details-bin`) and metadata (the failed call's trailers).
///
/// Boxed so that `Result<T, Status>` stays one pointer wide on the error side.
#[derive(Clone, PartialEq, Eq)]
pub struct Status(Box<Inner>);

#[derive(Clone, PartialEq, Eq)]
struct Inner {
    code: Code,
    message: String,
    details: Bytes,
    metadata: Metadata,
}

/// The metadata key that carries a status's details, as in gRPC.
pub const STATUS_DETAILS_KEY: &str = "grpc-status-details-bin";

impl Status {
    /// A status with `code` and `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Status {
        Status(Box::new(Inner {
            code,
            message: message.into(),
            details: Bytes::new(),
            metadata: Metadata::new(),
        }))
    }

    /// A status with `code`, `message` and `details` (by convention an encoded
    /// `google.rpc.Status`; see [`Status::details`]).
    pub fn with_details(
        code: Code,
        message: impl Into<String>,
        details: impl Into<Bytes>,
    ) -> Status {
        let mut status = Status::new(code, message);
        status.0.details = details.into();
        status
    }

    /// The status code.
    pub fn code(&self) -> Code {
        self.0.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// The details: opaque bytes the server attached (empty if none). gRPC servers
    /// send an encoded `google.rpc.Status` here (`grpc-status-details-bin`), whose
    /// `details` are `google.protobuf.Any` messages such as those of
    /// `google/rpc/error_details.proto`; decode them with `prost`.
    pub fn details(&self) -> &[u8] {
        &self.0.details
    }

    /// The metadata the failed call ended with (its trailers), without the details'
    /// entry.
    pub fn metadata(&self) -> &Metadata {
        &self.0.metadata
    }

    /// The metadata to send with this status, for a handler to add to.
    pub fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.0.metadata
    }

    /// The metadata a failed response carries: [`Status::metadata`] and, when there are
    /// details, [`STATUS_DETAILS_KEY`] with them (base64). What a transport sends.
    pub fn to_metadata(&self) -> Metadata {
        let mut metadata = self.0.metadata.clone();
        if !self.0.details.is_empty() {
            metadata
                .append_bin(STATUS_DETAILS_KEY, &self.0.details)
                .expect("a -bin key");
        }
        metadata
    }

    /// The status of a failed response with `code`, `message` and `metadata`: the
    /// details are taken out of [`STATUS_DETAILS_KEY`] (dropped if not base64), the rest
    /// is [`Status::metadata`]. What a transport receives.
    pub fn from_metadata(code: Code, message: impl Into<String>, metadata: Metadata) -> Status {
        let mut status = Status::new(code, message);
        if let Ok(Some(details)) = metadata.get_bin(STATUS_DETAILS_KEY) {
            status.0.details = details.into();
        }
        let mut metadata = metadata;
        metadata.remove(STATUS_DETAILS_KEY);
        // A unary response's block may hold headers and trailers: both are the call's.
        let (mut headers, trailers) = metadata.split_trailers();
        headers.append_trailers_flat(&trailers);
        status.0.metadata = headers;
        status
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
    /// [`Code::Unknown`].
    pub fn unknown(message: impl Into<String>) -> Status {
        Status::new(Code::Unknown, message)
    }
    /// [`Code::AlreadyExists`].
    pub fn already_exists(message: impl Into<String>) -> Status {
        Status::new(Code::AlreadyExists, message)
    }
    /// [`Code::PermissionDenied`].
    pub fn permission_denied(message: impl Into<String>) -> Status {
        Status::new(Code::PermissionDenied, message)
    }
    /// [`Code::FailedPrecondition`].
    pub fn failed_precondition(message: impl Into<String>) -> Status {
        Status::new(Code::FailedPrecondition, message)
    }
    /// [`Code::Aborted`].
    pub fn aborted(message: impl Into<String>) -> Status {
        Status::new(Code::Aborted, message)
    }
    /// [`Code::OutOfRange`].
    pub fn out_of_range(message: impl Into<String>) -> Status {
        Status::new(Code::OutOfRange, message)
    }
    /// [`Code::DataLoss`].
    pub fn data_loss(message: impl Into<String>) -> Status {
        Status::new(Code::DataLoss, message)
    }
    /// [`Code::Unauthenticated`].
    pub fn unauthenticated(message: impl Into<String>) -> Status {
        Status::new(Code::Unauthenticated, message)
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Status");
        d.field("code", &self.0.code)
            .field("message", &self.0.message);
        if !self.0.details.is_empty() {
            d.field("details", &self.0.details);
        }
        if !self.0.metadata.is_empty() {
            d.field("metadata", &self.0.metadata);
        }
        d.finish()
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "status: {}, message: {:?}", self.0.code, self.0.message)
    }
}

impl std::error::Error for Status {}

/// Why `what` did not arrive (its frame's `header` flagged
/// [`DISCARDED`](crate::wire::Flags::DISCARDED) by the receiving transport), as the
/// call's status: over `max` (the receiving side's maximum message size; `None`: not
/// known here) or the transport's own maximum.
pub(crate) fn discarded(what: &str, header: &crate::wire::Header, max: Option<usize>) -> Status {
    let len = header.payload_len;
    Status::resource_exhausted(match max {
        Some(max) if len as usize > max => {
            format!("{what} of {len} bytes exceeds the maximum of {max}")
        }
        Some(_) => format!("{what} of {len} bytes exceeds the receiving transport's maximum"),
        None => format!("{what} of {len} bytes exceeds the maximum"),
    })
}

/// A transport's failure as a call's status: `RESOURCE_EXHAUSTED` where this one message
/// was too large or could not be given memory (the connection goes on), `UNAVAILABLE`
/// otherwise.
impl From<crate::TransportError> for Status {
    fn from(err: crate::TransportError) -> Status {
        match err {
            crate::TransportError::TooLarge { .. } | crate::TransportError::LockedMemory { .. } => {
                Status::resource_exhausted(err.to_string())
            }
            err => Status::unavailable(err.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_discarded_message_says_whose_maximum_it_was_over() {
        use crate::wire::{Flags, FrameKind, Header};
        let header = |len, flags| {
            let mut h = Header::new(FrameKind::Request, 1);
            h.payload_len = len;
            h.flags = flags;
            h
        };
        let over = discarded(
            "request message",
            &header(5_000, Flags::DISCARDED),
            Some(4_000),
        );
        assert_eq!(over.code(), Code::ResourceExhausted);
        assert!(
            over.message().contains("exceeds the maximum of 4000"),
            "{over}"
        );
        // Within the runtime's maximum, over the transport's own (set apart).
        let transport = discarded(
            "request message",
            &header(3_000, Flags::DISCARDED),
            Some(4_000),
        );
        assert!(
            transport
                .message()
                .contains("the receiving transport's maximum"),
            "{transport}"
        );
        let unknown = discarded("stream message", &header(3_000, Flags::DISCARDED), None);
        assert!(
            unknown.message().contains("exceeds the maximum"),
            "{unknown}"
        );
        // A transport's failure: this message only, or the connection.
        let locked = crate::TransportError::LockedMemory {
            needed: 4 << 20,
            left: 1 << 20,
            limit: 8 << 20,
        };
        assert_eq!(Status::from(locked).code(), Code::ResourceExhausted);
        let large = crate::TransportError::TooLarge { len: 2, max: 1 };
        assert_eq!(Status::from(large).code(), Code::ResourceExhausted);
        assert_eq!(
            Status::from(crate::TransportError::Closed).code(),
            Code::Unavailable
        );
    }

    #[test]
    fn codes_round_trip_through_u8() {
        for v in 0..=16u8 {
            assert_eq!(Code::from_u8(v) as u8, v);
        }
        assert_eq!(Code::from_u8(200), Code::Unknown);
        assert_eq!(Code::DeadlineExceeded.as_str(), "DEADLINE_EXCEEDED");
    }

    #[test]
    fn details_and_metadata_cross_the_wire_block() {
        let mut status = Status::with_details(Code::Aborted, "no", vec![1u8, 2, 0xff]);
        status.metadata_mut().append("retry-after", "5");
        let block = status.to_metadata();
        assert_eq!(block.get(STATUS_DETAILS_KEY), Some("AQL/"));
        let back = Status::from_metadata(Code::Aborted, "no", block);
        assert_eq!(back, status);
        // Details that are not base64 are dropped, the rest kept.
        let mut bad = Metadata::new();
        bad.append(STATUS_DETAILS_KEY, "*not base64*");
        bad.append("x", "y");
        let back = Status::from_metadata(Code::Internal, "", bad);
        assert!(back.details().is_empty());
        assert_eq!(back.metadata().get("x"), Some("y"));
        assert_eq!(back.metadata().get(STATUS_DETAILS_KEY), None);
    }

    #[test]
    fn status_is_one_pointer() {
        assert_eq!(std::mem::size_of::<Status>(), std::mem::size_of::<usize>());
    }
}
