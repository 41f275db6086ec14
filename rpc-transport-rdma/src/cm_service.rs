//! The process's rdma_cm service: one event channel, read by one thread, for every
//! connection's rdma_cm id; a listener per local address a server is reached on; and
//! the tokens of the connections being set up.
//!
//! A server hands each client that asked for RDMA a random token over the side channel
//! (`handshake.rs`, OKAY) and waits for a connect request carrying it in its private
//! data: the request is then given to that handshake, and no other. A request with a
//! token no handshake waits for is rejected by this thread before anything is created
//! for it (no queue pair, no memory), so a peer that floods the rdma_cm port costs a
//! reject each. Tokens wait at most as long as their handshake (their guard removes
//! them), and at most [`MAX_PENDING`] at once.
//!
//! Events of the ids the set-up code holds ([`Routed`]) are queued for them, a few at
//! most each ([`EVENTS_PER_ID`]: a connection sees about five in its life).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

use crate::handshake::{self, Token};
use crate::verbs::{self, Binding, CmEvent, CmEventKind, CmId, EventChannel};

/// Connect requests a listener queues before the service thread takes them.
const BACKLOG: i32 = 1024;
/// Handshakes waiting for their connect request at once, process-wide.
pub(crate) const MAX_PENDING: usize = 4096;
/// Events queued for one id; more are dropped (logged).
const EVENTS_PER_ID: usize = 8;
/// Ports tried, each a fresh rdma_cm id, where the port rdma_cm gave out is a TCP port
/// a host socket holds (iWARP: [`verbs::Error::address_in_use`]). rdma_cm picks ports
/// at random, so a run of collisions this long means the host's ports are nearly all
/// taken.
pub(crate) const PORT_ATTEMPTS: usize = 16;

/// See the module docs.
pub(crate) struct Service {
    channel: Arc<EventChannel>,
    routes: Mutex<HashMap<usize, mpsc::Sender<CmEvent>>>,
    /// By local address, port 0 (with its scope: a link-local IPv6 address is one per
    /// interface).
    listeners: Mutex<HashMap<SocketAddr, CmId>>,
    pending: Mutex<Pending<oneshot::Sender<Routed>>>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("routes", &self.routes.lock().len())
            .field("pending", &self.pending.lock().0.len())
            .finish_non_exhaustive()
    }
}

/// The service, started on first use; an error (kept for no one: the next call tries
/// again) where rdma_cm cannot be opened (no `/dev/infiniband/rdma_cm`).
pub(crate) fn service() -> verbs::Result<&'static Service> {
    static SERVICE: OnceLock<&'static Service> = OnceLock::new();
    static STARTING: Mutex<()> = Mutex::new(());
    if let Some(service) = SERVICE.get() {
        return Ok(service);
    }
    let _one = STARTING.lock();
    if let Some(service) = SERVICE.get() {
        return Ok(service);
    }
    // Before librdmacm opens the devices (it does when an address is bound):
    // `ibv_fork_init(3)` is to come before any other libibverbs call.
    verbs::ensure_fork_safety();
    let service: &'static Service = Box::leak(Box::new(Service {
        channel: EventChannel::new()?,
        routes: Mutex::default(),
        listeners: Mutex::default(),
        pending: Mutex::default(),
    }));
    std::thread::Builder::new()
        .name("rdma-cm".into())
        .spawn(move || service.run())
        .map_err(|e| verbs::Error::Verb {
            verb: "spawning the rdma_cm thread",
            source: e,
        })?;
    let _ = SERVICE.set(service);
    Ok(service)
}

impl Service {
    /// A new id whose events are queued for its holder.
    pub(crate) fn new_id(&'static self) -> verbs::Result<Routed> {
        Ok(self.route(CmId::new(&self.channel)?))
    }

    /// The rdma_cm port of this process's listener on the address `local` (as the side
    /// channel's socket reports it, its port set to 0; created on first use), and the
    /// device, port and GID it is bound to ([`CmId::binding`]).
    ///
    /// # Errors
    /// When rdma_cm cannot listen there: no RDMA device holds the address.
    pub(crate) fn listener(&self, local: SocketAddr) -> verbs::Result<(u16, Binding)> {
        let mut listeners = self.listeners.lock();
        if let Some(id) = listeners.get(&local) {
            return Ok((id.local_port(), id.binding()?));
        }
        let id = listen(&self.channel, local)?;
        let (port, binding) = (id.local_port(), id.binding()?);
        tracing::debug!(%local, port, device = %binding.0, "rdma_cm listening");
        listeners.insert(local, id);
        Ok((port, binding))
    }

    /// Waits for the connect request carrying a new random token (returned with the
    /// guard that waits).
    ///
    /// # Errors
    /// When [`MAX_PENDING`] handshakes already wait, or no randomness can be read.
    pub(crate) fn expect(&'static self) -> Result<Expected, String> {
        let token = handshake::new_token().map_err(|e| format!("no token: {e}"))?;
        let (tx, rx) = oneshot::channel();
        self.pending.lock().wait(token, tx, MAX_PENDING)?;
        Ok(Expected {
            service: self,
            token,
            request: rx,
        })
    }

    fn route(&'static self, id: CmId) -> Routed {
        let (tx, rx) = mpsc::channel(EVENTS_PER_ID);
        self.routes.lock().insert(id.key(), tx);
        Routed {
            id: Some(id),
            events: rx,
            service: self,
        }
    }

    fn run(&'static self) {
        loop {
            match self.channel.next(Duration::from_secs(1)) {
                Ok(Some(event)) => self.dispatch(event),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!("rdma_cm events: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    fn dispatch(&'static self, mut event: CmEvent) {
        if let Some(id) = event.request.take() {
            self.request(id, &event.private_data);
            return;
        }
        if event.kind == CmEventKind::DeviceRemoval {
            // A listener on a device that went: the next handshake listens again.
            self.listeners.lock().retain(|_, id| id.key() != event.id);
        }
        let route = self.routes.lock().get(&event.id).cloned();
        match route {
            Some(tx) => {
                if let Err(e) = tx.try_send(event) {
                    tracing::debug!("rdma_cm event dropped: {e}");
                }
            }
            None => tracing::debug!(kind = %event.kind, "rdma_cm event for no one"),
        }
    }

    /// A connect request: handed to the handshake its token names, or rejected.
    fn request(&'static self, id: CmId, data: &[u8]) {
        let waiting = handshake::token_of(data).and_then(|t| self.pending.lock().take(&t));
        let id = match waiting {
            Some(handshake) => match handshake.send(self.route(id)) {
                Ok(()) => return,
                // Its handshake timed out meanwhile.
                Err(mut routed) => {
                    let id = routed.id.take().expect("a routed id");
                    self.routes.lock().remove(&id.key());
                    id
                }
            },
            None => id,
        };
        tracing::debug!("rdma_cm connect request with no valid token rejected");
        if let Err(e) = id.reject(handshake::CM_REJECT) {
            tracing::debug!("rdma_reject: {e}");
        }
    }
}

/// A listening id on `local`, on a port no host TCP socket holds (iWARP listens on a TCP
/// port of the host).
fn listen(channel: &Arc<EventChannel>, local: SocketAddr) -> verbs::Result<CmId> {
    let mut attempt = 1;
    loop {
        let id = CmId::new(channel)?;
        match id.listen(local, BACKLOG) {
            Ok(()) => return Ok(id),
            Err(e) if e.address_in_use() && attempt < PORT_ATTEMPTS => {
                tracing::debug!(%local, port = id.local_port(), "rdma_cm port held by a TCP socket");
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// An rdma_cm id and the queue of its events. Dropping it destroys the id (librdmacm
/// then sends a disconnect if it was connected).
#[derive(Debug)]
pub(crate) struct Routed {
    /// `Some` until dropped.
    id: Option<CmId>,
    events: mpsc::Receiver<CmEvent>,
    service: &'static Service,
}

impl Routed {
    pub(crate) fn id(&self) -> &CmId {
        self.id.as_ref().expect("a routed id")
    }

    /// The id's next event.
    ///
    /// # Errors
    /// Never in practice: the service thread lives as long as the process.
    pub(crate) async fn next(&mut self) -> Result<CmEvent, String> {
        self.events
            .recv()
            .await
            .ok_or_else(|| "the rdma_cm service stopped".to_owned())
    }

    /// The id's events from here on, for a connection that watches for its end (the
    /// id keeps an empty queue).
    pub(crate) fn take_events(&mut self) -> mpsc::Receiver<CmEvent> {
        std::mem::replace(&mut self.events, mpsc::channel(1).1)
    }

    /// The id's next event, which must be one of `kinds`.
    ///
    /// # Errors
    /// Another event (an address, route or connect error, a reject), named.
    pub(crate) async fn expect(&mut self, kinds: &[CmEventKind]) -> Result<CmEvent, String> {
        let event = self.next().await?;
        if kinds.contains(&event.kind) {
            return Ok(event);
        }
        Err(format!(
            "rdma_cm: {} (status {}) where {} was expected",
            event.kind,
            event.status,
            kinds
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" or ")
        ))
    }
}

impl Drop for Routed {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            // Off the routes before the id goes: no event is routed to a destroyed id.
            self.service.routes.lock().remove(&id.key());
            drop(id);
        }
    }
}

/// A handshake waiting for its connect request ([`Service::expect`]); dropping it
/// forgets the token.
#[derive(Debug)]
pub(crate) struct Expected {
    service: &'static Service,
    pub(crate) token: Token,
    request: oneshot::Receiver<Routed>,
}

impl Expected {
    /// The connect request that carried the token.
    ///
    /// # Errors
    /// Never in practice (the service outlives every handshake).
    pub(crate) async fn request(&mut self) -> Result<Routed, String> {
        (&mut self.request)
            .await
            .map_err(|_| "the rdma_cm service stopped".to_owned())
    }
}

impl Drop for Expected {
    fn drop(&mut self) {
        self.service.pending.lock().take(&self.token);
    }
}

/// Handshakes waiting for their connect request, by token, `max` at most.
#[derive(Debug)]
struct Pending<T>(HashMap<Token, T>);

impl<T> Default for Pending<T> {
    fn default() -> Self {
        Pending(HashMap::new())
    }
}

impl<T> Pending<T> {
    /// Registers `token`'s waiter, unless `max` already wait.
    fn wait(&mut self, token: Token, waiter: T, max: usize) -> Result<(), String> {
        if self.0.len() >= max {
            return Err(format!("{max} RDMA connections are being set up already"));
        }
        self.0.insert(token, waiter);
        Ok(())
    }

    /// The waiter of `token`, which waits no more.
    fn take(&mut self, token: &Token) -> Option<T> {
        self.0.remove(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_handshakes_are_bounded_and_each_token_is_taken_once() {
        let mut pending = Pending::default();
        let token = |i: u32| {
            let mut t = [0u8; 16];
            t[..4].copy_from_slice(&i.to_le_bytes());
            t
        };
        for i in 0..MAX_PENDING as u32 {
            pending.wait(token(i), i, MAX_PENDING).unwrap();
        }
        let full = pending.wait(token(u32::MAX), 0, MAX_PENDING).unwrap_err();
        assert!(full.contains("4096"), "{full}");
        assert_eq!(pending.take(&token(7)), Some(7));
        assert_eq!(pending.take(&token(7)), None, "a token is taken once");
        assert_eq!(
            pending.take(&token(u32::MAX)),
            None,
            "refused, never waiting"
        );
        pending.wait(token(u32::MAX), 1, MAX_PENDING).unwrap();
    }
}
