//! One reflection request in, its response out: the protocol, with no I/O.

use prost::Message as _;
use rdmarpc_core::Code;

use crate::index::Index;
use crate::pb::v1::server_reflection_request::MessageRequest;
use crate::pb::v1::server_reflection_response::MessageResponse;
use crate::pb::v1::{
    ErrorResponse, ExtensionNumberResponse, ExtensionRequest, FileDescriptorResponse,
    ListServiceResponse, ServerReflectionRequest, ServerReflectionResponse, ServiceResponse,
};

/// The largest request answered, encoded, in bytes: far above any real name (file paths,
/// full names and host names are short), so that a longer one is a mistake or an attack.
///
/// A longer request gets an `INVALID_ARGUMENT` [`ErrorResponse`] without its
/// `original_request`: echoing it would send the peer's megabytes back. The stream goes
/// on. (What a peer can send at all is bounded earlier, by the server's maximum message
/// size.)
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;

/// The response to `request`, looked up in `index`.
///
/// Every request is answered in the stream, failures included (as an
/// [`ErrorResponse`]): `NOT_FOUND` for an unknown file, symbol, extension or type,
/// `INVALID_ARGUMENT` for a request over [`MAX_REQUEST_BYTES`], and `UNIMPLEMENTED` for
/// one that sets no kind of request this protocol version defines (a newer client's).
pub(crate) fn answer(index: &Index, request: ServerReflectionRequest) -> ServerReflectionResponse {
    let len = request.encoded_len();
    if len > MAX_REQUEST_BYTES {
        return ServerReflectionResponse {
            valid_host: String::new(),
            original_request: None,
            message_response: Some(error(
                Code::InvalidArgument,
                format!("a reflection request of {len} bytes, more than {MAX_REQUEST_BYTES}"),
            )),
        };
    }
    let message_response = match &request.message_request {
        Some(MessageRequest::FileByFilename(name)) => {
            files(index.file_by_name(name), || format!("no file {name:?}"))
        }
        Some(MessageRequest::FileContainingSymbol(symbol)) => {
            files(index.file_containing_symbol(symbol), || {
                format!("no symbol {symbol:?}")
            })
        }
        Some(MessageRequest::FileContainingExtension(ExtensionRequest {
            containing_type,
            extension_number,
        })) => files(
            index.file_containing_extension(containing_type, *extension_number),
            || format!("no extension {extension_number} of {containing_type:?}"),
        ),
        Some(MessageRequest::AllExtensionNumbersOfType(extendee)) => {
            match index.extension_numbers(extendee) {
                Some(numbers) => {
                    MessageResponse::AllExtensionNumbersResponse(ExtensionNumberResponse {
                        base_type_name: extendee.strip_prefix('.').unwrap_or(extendee).to_owned(),
                        extension_number: numbers.to_vec(),
                    })
                }
                None => error(Code::NotFound, format!("no message type {extendee:?}")),
            }
        }
        Some(MessageRequest::ListServices(_)) => {
            MessageResponse::ListServicesResponse(ListServiceResponse {
                service: index
                    .services()
                    .iter()
                    .map(|name| ServiceResponse { name: name.clone() })
                    .collect(),
            })
        }
        None => error(
            Code::Unimplemented,
            "the request sets no kind of reflection request this server knows".into(),
        ),
    };
    ServerReflectionResponse {
        valid_host: request.host.clone(),
        original_request: Some(request),
        message_response: Some(message_response),
    }
}

/// A file descriptor response of `found`, or `NOT_FOUND` with `missing`'s message.
fn files(found: Option<Vec<bytes::Bytes>>, missing: impl FnOnce() -> String) -> MessageResponse {
    match found {
        Some(files) => MessageResponse::FileDescriptorResponse(FileDescriptorResponse {
            file_descriptor_proto: files,
        }),
        None => error(Code::NotFound, missing()),
    }
}

fn error(code: Code, message: String) -> MessageResponse {
    MessageResponse::ErrorResponse(ErrorResponse {
        error_code: code as i32,
        error_message: message,
    })
}
