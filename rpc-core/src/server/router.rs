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
    pub(crate) fn add(&mut self, service: Arc<dyn Service>) -> Result<(), String> {
        for (index, method) in service.methods().iter().enumerate() {
            if let Some(existing) = self.routes.get(&method.id) {
                return Err(format!(
                    "method id {:#010x} of {} is already taken by {}",
                    method.id, method.path, existing.method.path
                ));
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

    /// The route of `method_id`.
    pub(crate) fn get(&self, method_id: u32) -> Option<&Route> {
        self.routes.get(&method_id)
    }
}
