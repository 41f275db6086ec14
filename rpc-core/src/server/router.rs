//! Method ids to services.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::service::{MethodDescriptor, Service};

/// Routes a request's method id to a service and the method's index in it.
#[derive(Default)]
pub(crate) struct Router {
    routes: HashMap<u32, Route>,
}

/// One routable method.
#[derive(Clone)]
pub(crate) struct Route {
    pub(crate) service: Arc<dyn Service>,
    pub(crate) index: usize,
    pub(crate) method: &'static MethodDescriptor,
}

impl fmt::Debug for Router {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut paths: Vec<_> = self.routes.values().map(|r| r.method.path).collect();
        paths.sort_unstable();
        f.debug_struct("Router").field("methods", &paths).finish()
    }
}

impl Router {
    /// Registers every method of `service`.
    ///
    /// # Errors
    /// When a method id is already taken.
    pub(crate) fn add(&mut self, service: Arc<dyn Service>) -> Result<(), RegisterError> {
        for (index, method) in service.methods().iter().enumerate() {
            if let Some(existing) = self.routes.get(&method.id) {
                return Err(RegisterError {
                    id: method.id,
                    path: method.path,
                    taken_by: existing.method.path,
                });
            }
            self.routes.insert(
                method.id,
                Route {
                    service: service.clone(),
                    index,
                    method,
                },
            );
        }
        Ok(())
    }

    /// Replaces every route's service with `wrap` of it (one wrapper per service).
    pub(crate) fn wrap(&mut self, wrap: impl Fn(Arc<dyn Service>) -> Arc<dyn Service>) {
        let mut wrapped: Vec<(Arc<dyn Service>, Arc<dyn Service>)> = Vec::new();
        for route in self.routes.values_mut() {
            let existing = wrapped
                .iter()
                .find(|(original, _)| Arc::ptr_eq(original, &route.service))
                .map(|(_, wrapper)| wrapper.clone());
            let wrapper = existing.unwrap_or_else(|| {
                let wrapper = wrap(route.service.clone());
                wrapped.push((route.service.clone(), wrapper.clone()));
                wrapper
            });
            route.service = wrapper;
        }
    }

    /// The route of `method_id`.
    pub(crate) fn get(&self, method_id: u32) -> Option<&Route> {
        self.routes.get(&method_id)
    }
}

/// A service that cannot be registered: one of its methods' ids is taken, by another
/// method whose path hashes to the same id or by the same method registered twice
/// ([`ServerBuilder::add_service`](crate::ServerBuilder::add_service)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("method id {id:#010x} of {path} is already taken by {taken_by}")]
pub struct RegisterError {
    /// The id both methods have.
    pub id: u32,
    /// The method that could not be registered.
    pub path: &'static str,
    /// The method registered before with the same id.
    pub taken_by: &'static str,
}
