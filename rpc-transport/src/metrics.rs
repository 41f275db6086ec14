//! The RDMA transport's counters as metrics (see [`publish_rdma_metrics`]).

use std::time::Duration;

/// Publishes the RDMA transport's counters through the `metrics` facade (to whatever
/// recorder the application installed, e.g. a Prometheus exporter), once: for every RDMA
/// connection this process opened (closed ones included), the counters
/// `rpc_rdma_eager_sends_total`, `rpc_rdma_rendezvous_sends_total`,
/// `rpc_rdma_rendezvous_reads_total`, `rpc_rdma_read_bytes_total`,
/// `rpc_rdma_eager_receives_total`, `rpc_rdma_batches_total`,
/// `rpc_rdma_control_sends_total`, `rpc_rdma_credit_stalls_total`,
/// `rpc_rdma_errors_total`, `rpc_rdma_kept_frames_total`, `rpc_rdma_lent_in_place_total`,
/// `rpc_rdma_found_by_spin_total`, `rpc_rdma_bounced_reads_total`, `rpc_rdma_pushed_sends_total`, `rpc_rdma_pushed_receives_total`, and the gauges
/// `rpc_rdma_connections`, `rpc_rdma_locked_bytes` (locked memory the transport holds:
/// reserves and registrations) and `rpc_rdma_locked_limit_bytes` (what the process may
/// lock; not set where no limit applies). [`spawn_rdma_metrics`] does it periodically.
/// Without the `rdma` feature it does nothing.
pub fn publish_rdma_metrics() {
    #[cfg(feature = "rdma")]
    {
        let c = rdmarpc_transport_rdma::process_counters();
        for (name, value) in [
            ("rpc_rdma_eager_sends_total", c.eager_sends),
            ("rpc_rdma_rendezvous_sends_total", c.rendezvous_sends),
            ("rpc_rdma_rendezvous_reads_total", c.rendezvous_reads),
            ("rpc_rdma_read_bytes_total", c.bytes_read),
            ("rpc_rdma_eager_receives_total", c.eager_receives),
            ("rpc_rdma_batches_total", c.batches),
            ("rpc_rdma_control_sends_total", c.control_sends),
            ("rpc_rdma_credit_stalls_total", c.credit_stalls),
            ("rpc_rdma_errors_total", c.errors),
            ("rpc_rdma_kept_frames_total", c.kept_frames),
            ("rpc_rdma_lent_in_place_total", c.lent_in_place),
            ("rpc_rdma_found_by_spin_total", c.found_by_spin),
            ("rpc_rdma_bounced_reads_total", c.bounced_reads),
            ("rpc_rdma_pushed_sends_total", c.pushed_sends),
            ("rpc_rdma_pushed_receives_total", c.pushed_receives),
        ] {
            metrics::counter!(name).absolute(value);
        }
        metrics::gauge!("rpc_rdma_connections").set(c.live_connections as f64);
        metrics::gauge!("rpc_rdma_locked_bytes").set(c.locked_bytes as f64);
        if let Some(limit) = c.locked_limit {
            metrics::gauge!("rpc_rdma_locked_limit_bytes").set(limit as f64);
        }
    }
}

/// Publishes the process's RDMA counters every `every` on a task of the current tokio
/// runtime, until the runtime ends (what an exporter's scrape then shows is at most
/// `every` old). Returns the task, to abort it sooner.
///
/// # Panics
/// Outside a tokio runtime.
pub fn spawn_rdma_metrics(every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        loop {
            ticks.tick().await;
            publish_rdma_metrics();
        }
    })
}
