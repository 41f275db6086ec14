//! A call's response side: headers, length-prefixed messages and trailers turned into
//! the framework's frames for the channel.

use bytes::Bytes;
use h2::RecvStream;
use http::HeaderMap;
use rpc_core::wire::{Flags, FrameKind, Header, HEADER_LEN};
use rpc_core::{Code, Metadata, Status};

use super::call::Call;
use super::status::{http_status, status_of, within_limit};
use crate::compress::Encoding;
use crate::frames::frame;
use crate::text;

impl Call {
    /// The response's headers: the body to read, or (trailers-only) the final frame.
    pub(super) fn on_headers(
        &mut self,
        response: http::Response<RecvStream>,
        body: &mut Option<RecvStream>,
    ) -> Result<Option<Bytes>, (Status, Flags)> {
        let (parts, stream) = response.into_parts();
        if parts.status != http::StatusCode::OK {
            return Err((http_status(parts.status), Flags::default()));
        }
        let grpc = parts
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/grpc"));
        if !grpc {
            return Err((
                Status::new(Code::Unknown, "the response is not gRPC (content-type)"),
                Flags::default(),
            ));
        }
        match Encoding::of_headers(&parts.headers) {
            Ok(encoding) => self.response_encoding = encoding,
            Err(why) => return Err((Status::internal(why), Flags::default())),
        }
        self.headers = text::metadata_from(&parts.headers);
        within_limit(&self.headers, "response headers")?;
        if let Some(status) = status_of(&parts.headers) {
            // Trailers-only: the call ends here, its headers are its trailers.
            let trailers = std::mem::take(&mut self.headers);
            return self.end(status, trailers).map(Some);
        }
        if self.kind.server_streams() {
            // A stream's response headers go first, outside its window.
            let header = Header::new(FrameKind::Response, self.call_id);
            let headers = std::mem::take(&mut self.headers);
            self.head = Some(frame(header, &headers, &[]));
        }
        *body = Some(stream);
        Ok(None)
    }

    /// One response message.
    pub(super) fn on_message(&mut self, message: Bytes) -> Result<(), (Status, Flags)> {
        if self.kind.server_streams() {
            self.queued_bytes += HEADER_LEN + message.len();
            let header = Header::new(FrameKind::Message, self.call_id);
            self.queued
                .push_back(frame(header, &Metadata::new(), &message));
            return Ok(());
        }
        if self.message.replace(message).is_some() {
            return Err((
                Status::internal("more than one response message for a method that returns one"),
                Flags::default(),
            ));
        }
        Ok(())
    }

    /// The trailers: the final frame.
    pub(super) fn on_trailers(&mut self, trailers: HeaderMap) -> Result<Bytes, (Status, Flags)> {
        let status = status_of(&trailers)
            .unwrap_or_else(|| Status::internal("the response ended without grpc-status"));
        let trailers = text::metadata_from(&trailers);
        within_limit(&trailers, "response trailers")?;
        self.end(status, trailers)
    }

    /// The final frame for `status` and `trailers`.
    pub(super) fn end(
        &mut self,
        status: Status,
        trailers: Metadata,
    ) -> Result<Bytes, (Status, Flags)> {
        let mut header = Header::new(FrameKind::Response, self.call_id);
        header.flags = Flags::END_STREAM;
        header.status = status.code() as u8;
        if self.kind.server_streams() {
            // A stream's end: its metadata block is the trailers.
            let payload = if status.code() == Code::Ok {
                &[][..]
            } else {
                status.message().as_bytes()
            };
            return Ok(frame(header, &trailers, payload));
        }
        let mut metadata = std::mem::take(&mut self.headers);
        metadata.append_trailers(&trailers);
        within_limit(&metadata, "response headers and trailers together")?;
        if status.code() != Code::Ok {
            return Ok(frame(header, &metadata, status.message().as_bytes()));
        }
        let Some(message) = self.message.take() else {
            return Err((
                Status::internal("the response ended OK without a message"),
                Flags::default(),
            ));
        };
        Ok(frame(header, &metadata, &message))
    }

    /// Hands the channel the queued response frames its window allows.
    pub(super) async fn deliver(&mut self) -> Result<(), (Status, Flags)> {
        while self.window > 0 {
            let Some(frame) = self.queued.pop_front() else {
                break;
            };
            self.queued_bytes = self.queued_bytes.saturating_sub(frame.len());
            self.window -= frame.len() as i64;
            if self.to_channel(frame).await.is_err() {
                return Err((Status::cancelled("the channel went"), Flags::default()));
            }
        }
        Ok(())
    }
}
