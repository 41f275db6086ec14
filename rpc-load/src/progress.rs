//! The progress bar: on standard error, only when it is a terminal (indicatif draws
//! nothing otherwise), updated from the [`Monitor`] ten times a second.

use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinHandle;

use crate::runner::{LoadPlan, Monitor, Phase};

/// Shows the progress of the run that `monitor` observes, until it is done.
pub fn spawn(monitor: Arc<Monitor>, plan: &LoadPlan) -> JoinHandle<()> {
    let warmup = plan.warmup;
    let total = plan.total;
    let duration = plan.duration;
    tokio::spawn(async move {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if bar.is_hidden() {
            return;
        }
        let style =
            ProgressStyle::with_template("{msg:>10} [{elapsed_precise}] {wide_bar} {pos}/{len}")
                .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        let mut ticker = tokio::time::interval(Duration::from_millis(100));
        loop {
            ticker.tick().await;
            match monitor.phase() {
                Phase::Warmup => {
                    bar.set_message("warm-up");
                    bar.set_length(warmup);
                    bar.set_position(monitor.completed());
                }
                Phase::Measuring => match (total, duration) {
                    (Some(n), _) => {
                        bar.set_message("calls");
                        bar.set_length(n);
                        bar.set_position(monitor.completed());
                    }
                    (None, Some(d)) => {
                        bar.set_message("ms");
                        bar.set_length(d.as_millis() as u64);
                        bar.set_position(
                            (monitor.elapsed().as_millis() as u64).min(d.as_millis() as u64),
                        );
                    }
                    (None, None) => bar.set_position(monitor.completed()),
                },
                _ => break,
            }
        }
        bar.finish_and_clear();
    })
}
