//! A request frame: decoded, charged, and admitted to run now or queued for a permit.

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use super::spawn::panicked;
use super::waiting::{slot_of, Pending};
use super::State;
use crate::account::{Charge, Resource};
use crate::payload::Inbound;
use crate::server::admission::{Admitted, Refused};
use crate::server::respond::Reply;
use crate::server::router::Route;
use crate::service::MethodKind;
use crate::transport::Connection;
use crate::violation::Violation;
use crate::wire::{Flags, Frame, Header};
use crate::{Metadata, Request, Status};

impl<C: Connection> State<C> {
    /// A request frame: refused while draining, answered with a status when it cannot
    /// run, else charged, its handler's future made, and admitted (or queued). An error
    /// ends the connection (a malformed frame, a call id in use).
    pub(super) async fn request(
        &mut self,
        inbound: Inbound<C::RecvBuf>,
        draining: bool,
    ) -> Result<(), Violation> {
        let frame = Frame::parse(inbound.bytes())?;
        let header = frame.header;
        let call_id = header.call_id;
        // A stream's entry lives while its call waits or runs, so these two cover it.
        if self.waiting.contains(call_id) || self.running.lock().contains_key(&call_id) {
            return Err(Violation::CallIdInUse { call_id });
        }
        if draining {
            self.refuse(call_id, Status::unavailable("server is shutting down"))
                .await;
            return Ok(());
        }
        let (route, metadata) = match self.route(&frame) {
            Ok(routed) => routed,
            Err(status) => {
                self.reply(Reply::Status(call_id, status, Flags::default()))
                    .await;
                return Ok(());
            }
        };
        let resource = slot_of(route.method.kind);
        let bytes = match self.charge_request(&header) {
            Ok(bytes) => bytes,
            Err(status) => {
                self.reply(Reply::Status(call_id, status, Flags::default()))
                    .await;
                return Ok(());
            }
        };
        let timeout = (header.timeout_us > 0).then(|| Duration::from_micros(header.timeout_us));
        // The deadline runs from the request's arrival, whether it waits for a permit.
        let deadline = timeout.and_then(|t| crate::clock::now().checked_add(t));
        // DEBUG, not INFO: an enabled span costs every call the formatting of its fields
        // by the fmt subscriber (~5 % of a 64 B call's server CPU at c=64, perf-measured);
        // `RUST_LOG=rdmarpc_core=debug` turns it on.
        let span = tracing::debug_span!("rpc", method = route.method.path, call_id);
        // Decodes the request from the borrowed buffer (the buffer is released after
        // this, also for a call that then waits for a permit), or from the kept frame.
        let mut request = Request::from_parts(metadata, inbound.payload(frame.payload), timeout);
        request.set_peer(self.peer.clone());
        let started = if route.method.kind == MethodKind::Unary {
            std::panic::catch_unwind(AssertUnwindSafe(|| {
                route.service.call(route.index, request)
            }))
            .map(|call| (call, None, None))
            .map_err(|_| panicked())
        } else {
            let route = route.clone();
            self.open_stream(&header, &route, request)
                .map(|(call, inbox, serial)| (call, inbox, Some(serial)))
        };
        let (call, inbox, stream) = match started {
            Ok(started) => started,
            Err(status) => {
                self.reply(Reply::Status(call_id, status, Flags::default()))
                    .await;
                return Ok(());
            }
        };
        let pending = Pending {
            call,
            span,
            inbox,
            stream,
            bytes,
            covered: header.frame_len(),
        };
        self.admit(call_id, resource, deadline, pending).await;
        Ok(())
    }

    /// The request's route and metadata; the status to answer instead when its message is
    /// over the limit, its method unknown, or its metadata malformed.
    fn route(&self, frame: &Frame<'_>) -> Result<(&Route, Metadata), Status> {
        let header = &frame.header;
        let max = self.inner.config.max_message_size;
        if frame.is_discarded() || header.payload_len as usize > max {
            return Err(crate::status::discarded(
                "request message",
                header,
                Some(max),
            ));
        }
        let Some(route) = self.inner.router.get(header.method_id) else {
            return Err(Status::unimplemented(format!(
                "unknown method id {:#010x}",
                header.method_id
            )));
        };
        let metadata = Metadata::decode(frame.metadata)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        Ok((route, metadata))
    }

    /// What the peer sent for the request, metadata included (the decoded form is about
    /// as large: strings and bytes fields own what the frame carried), charged before its
    /// message is decoded (unless the transport charged it already); past the
    /// connection's, the peer's or the server's bound, the status that refuses the call.
    fn charge_request(&self, header: &Header) -> Result<Charge, Status> {
        if self.conn.charges_requests() {
            return Ok(Charge::none());
        }
        self.account
            .try_charge(Resource::Bytes, header.frame_len())
            .map_err(|exhausted| {
                tracing::debug!(call_id = header.call_id, "request refused: {exhausted}");
                Status::resource_exhausted(format!(
                    "a request of {} bytes: {exhausted}",
                    header.frame_len()
                ))
            })
    }

    /// Starts the call now if nothing waits before it and its permit or slot is free;
    /// else queues it, or refuses it when the connection's queue is full.
    async fn admit(
        &mut self,
        call_id: u64,
        resource: Resource,
        deadline: Option<Instant>,
        pending: Pending,
    ) {
        if self.waiting.queue(resource).len() == 0 {
            if let Ok(slot) = self.account.try_charge(resource, 1) {
                let admitted = Admitted {
                    call_id,
                    deadline,
                    call: pending,
                };
                self.start(admitted, slot, false).await;
                return;
            }
        }
        let bytes = pending.covered;
        let queue = self.waiting.queue(resource);
        if let Err((refused, _)) = queue.push(call_id, bytes, deadline, pending) {
            self.end_stream(call_id, "refused");
            let why = match refused {
                Refused::Calls(n) => format!("{n} calls already wait on this connection"),
                Refused::Bytes(n) => {
                    format!("{n} bytes of requests already wait on this connection")
                }
            };
            self.refuse(
                call_id,
                Status::resource_exhausted(format!("too many calls in flight: {why}")),
            )
            .await;
        }
    }
}
