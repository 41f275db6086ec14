//! Load schedules: the rate at which requests are started, and so the time at which
//! request number `i` is due.
//!
//! A paced run does not send "as soon as a worker is free": each request has an intended
//! send time, [`Schedule::send_time`], and its latency is measured from that time, not
//! from when a worker got round to sending it. A server that stalls therefore shows the
//! stall in every request that should have been sent during it (no coordinated omission).
//!
//! The schedules are ghz's `--load-schedule`:
//!
//! ```text
//! const  rate = r                                   (-r r)
//! step   rate = start + step * floor(t / D)         (--load-step-duration D)
//! line   rate = start + step * t   (t in seconds)   (continuous; ghz moves in 1 s steps)
//!
//!        step and line hold their rate once it reaches --load-end, or at
//!        --load-max-duration, whichever comes first:
//!
//!   rate ^            ____________ end            rate ^          __________ end
//!        |        ___|                                 |        /
//!        |    ___|                                     |      /
//!        |___|                                         |    /
//!        +--------------------> t                      +---------------------> t
//!          step                                          line
//! ```
//!
//! Everything here is plain arithmetic on `f64` seconds: no clock, no I/O.

use std::time::Duration;

use anyhow::{bail, ensure};

#[cfg(test)]
mod tests;

/// The rate of a run over time. See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    shape: Shape,
    /// Where a ramp stops changing, if it does.
    hold: Option<Hold>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    /// No pacing: workers send back to back.
    Unpaced,
    /// `rate` requests per second.
    Const { rate: f64 },
    /// `start + step * k` requests per second during the `k`-th interval of `interval` s.
    Step {
        start: f64,
        step: f64,
        interval: f64,
    },
    /// `start + slope * t` requests per second at `t` seconds.
    Line { start: f64, slope: f64 },
}

/// From `at` seconds on, the rate is `rate`; `due` requests were due by `at`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Hold {
    at: f64,
    due: f64,
    rate: f64,
}

/// The parameters of a `step` or `line` schedule, as ghz's `--load-*` flags.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ramp {
    /// Rate at the start, in requests per second (`--load-start`, > 0).
    pub start: f64,
    /// Change of the rate (`--load-step`, non-zero): per step for `step`, per second for
    /// `line`. Negative for a decreasing load.
    pub step: f64,
    /// Rate at which the ramp stops and holds (`--load-end`); 0 for none, which only an
    /// increasing ramp may have.
    pub end: f64,
    /// Length of one step (`--load-step-duration`; `step` only).
    pub step_duration: Duration,
    /// Time after which the rate holds at the value it reached (`--load-max-duration`).
    pub max_duration: Option<Duration>,
}

impl Schedule {
    /// No pacing: each worker sends its next request when its previous one completes, and
    /// latency is measured from the actual send.
    pub fn unpaced() -> Schedule {
        Schedule {
            shape: Shape::Unpaced,
            hold: None,
        }
    }

    /// A constant `rate` in requests per second.
    ///
    /// # Errors
    /// A rate that is not positive and finite.
    pub fn constant(rate: f64) -> anyhow::Result<Schedule> {
        ensure!(
            rate > 0.0 && rate.is_finite(),
            "the rate must be > 0, got {rate}"
        );
        Ok(Schedule {
            shape: Shape::Const { rate },
            hold: None,
        })
    }

    /// A rate that changes by `ramp.step` every `ramp.step_duration`.
    ///
    /// # Errors
    /// Inconsistent parameters (see [`Ramp`]), or a zero step duration.
    pub fn step(ramp: Ramp) -> anyhow::Result<Schedule> {
        check_ramp(&ramp)?;
        let interval = ramp.step_duration.as_secs_f64();
        ensure!(
            interval > 0.0,
            "a step schedule needs --load-step-duration > 0"
        );
        let shape = Shape::Step {
            start: ramp.start,
            step: ramp.step,
            interval,
        };
        let steps_to_end =
            (ramp.end > 0.0).then(|| ((ramp.end - ramp.start) / ramp.step).ceil().max(0.0));
        let steps_to_max = ramp
            .max_duration
            .map(|m| (m.as_secs_f64() / interval).floor());
        let hold = min_option(steps_to_end, steps_to_max).map(|k| {
            let reached = ramp.start + ramp.step * k;
            Hold {
                at: k * interval,
                due: step_due(ramp.start, ramp.step, interval, k),
                rate: clamp_to_end(reached, &ramp),
            }
        });
        Ok(Schedule { shape, hold })
    }

    /// A rate that changes continuously by `ramp.step` per second.
    ///
    /// # Errors
    /// Inconsistent parameters (see [`Ramp`]).
    pub fn line(ramp: Ramp) -> anyhow::Result<Schedule> {
        check_ramp(&ramp)?;
        let shape = Shape::Line {
            start: ramp.start,
            slope: ramp.step,
        };
        let time_to_end = (ramp.end > 0.0).then(|| ((ramp.end - ramp.start) / ramp.step).max(0.0));
        let max = ramp.max_duration.map(|m| m.as_secs_f64());
        let hold = min_option(time_to_end, max).map(|at| Hold {
            at,
            due: ramp.start * at + ramp.step * at * at / 2.0,
            rate: clamp_to_end(ramp.start + ramp.step * at, &ramp),
        });
        Ok(Schedule { shape, hold })
    }

    /// Whether requests have intended send times (every schedule but [`Schedule::unpaced`]).
    pub fn is_paced(&self) -> bool {
        self.shape != Shape::Unpaced
    }

    /// The rate at `t` after the start, in requests per second; `None` when unpaced.
    pub fn rate_at(&self, t: Duration) -> Option<f64> {
        let t = t.as_secs_f64();
        if let Some(hold) = self.hold.filter(|h| t >= h.at) {
            return Some(hold.rate);
        }
        match self.shape {
            Shape::Unpaced => None,
            Shape::Const { rate } => Some(rate),
            Shape::Step {
                start,
                step,
                interval,
            } => Some(start + step * (t / interval).floor()),
            Shape::Line { start, slope } => Some(start + slope * t),
        }
    }

    /// How many requests are due by `t` after the start (the integral of the rate, not
    /// rounded); `None` when unpaced.
    pub fn due_by(&self, t: Duration) -> Option<f64> {
        let t = t.as_secs_f64();
        if let Some(hold) = self.hold.filter(|h| t >= h.at) {
            return Some(hold.due + (t - hold.at) * hold.rate);
        }
        match self.shape {
            Shape::Unpaced => None,
            Shape::Const { rate } => Some(rate * t),
            Shape::Step {
                start,
                step,
                interval,
            } => {
                let k = (t / interval).floor();
                let rate = start + step * k;
                Some(step_due(start, step, interval, k) + (t - k * interval) * rate)
            }
            Shape::Line { start, slope } => Some(start * t + slope * t * t / 2.0),
        }
    }

    /// When request number `index` (0-based) is due, as an offset from the start: the
    /// time at which [`Schedule::due_by`] reaches `index`. Request 0 is due at once.
    /// `None` when unpaced.
    pub fn send_time(&self, index: u64) -> Option<Duration> {
        let x = index as f64;
        let seconds = match (self.hold, self.shape) {
            (_, Shape::Unpaced) => return None,
            (Some(hold), _) if x >= hold.due => hold.at + (x - hold.due) / hold.rate,
            (_, Shape::Const { rate }) => x / rate,
            (
                _,
                Shape::Step {
                    start,
                    step,
                    interval,
                },
            ) => step_send_time(start, step, interval, x),
            // start*t + slope*t^2/2 = x, solved in the form that is stable for small
            // slopes and x = 0: t = 2x / (start + sqrt(start^2 + 2*slope*x)).
            (_, Shape::Line { start, slope }) => {
                2.0 * x / (start + (start * start + 2.0 * slope * x).max(0.0).sqrt())
            }
        };
        Some(Duration::from_secs_f64(seconds.max(0.0)))
    }
}

/// Requests due by the start of step `k`: `interval * (k*start + step*k*(k-1)/2)`.
fn step_due(start: f64, step: f64, interval: f64, k: f64) -> f64 {
    interval * (k * start + step * k * (k - 1.0) / 2.0)
}

/// The send time of request `x` of a step schedule before any hold.
fn step_send_time(start: f64, step: f64, interval: f64, x: f64) -> f64 {
    // The step k holding x is the largest with step_due(k) <= x. Solve the quadratic
    // (step/2) k^2 + (start - step/2) k = x / interval in the stable form, then correct
    // the rounding by walking to the exact step.
    let y = x / interval;
    let (a, b) = (step / 2.0, start - step / 2.0);
    let root = if y == 0.0 {
        0.0
    } else {
        2.0 * y / (b + (b * b + 4.0 * a * y).max(0.0).sqrt())
    };
    let mut k = root.floor().max(0.0);
    while step_due(start, step, interval, k + 1.0) <= x {
        k += 1.0;
    }
    while k > 0.0 && step_due(start, step, interval, k) > x {
        k -= 1.0;
    }
    let rate = start + step * k;
    k * interval + (x - step_due(start, step, interval, k)) / rate
}

fn check_ramp(ramp: &Ramp) -> anyhow::Result<()> {
    ensure!(
        ramp.start > 0.0 && ramp.start.is_finite(),
        "--load-start must be > 0 for a step or line schedule"
    );
    ensure!(
        ramp.step != 0.0 && ramp.step.is_finite(),
        "--load-step must be non-zero for a step or line schedule"
    );
    ensure!(ramp.end >= 0.0, "--load-end must not be negative");
    if ramp.step < 0.0 {
        if ramp.end <= 0.0 {
            bail!("a decreasing schedule needs --load-end > 0, so that the rate stays positive");
        }
        ensure!(
            ramp.end <= ramp.start,
            "with --load-step < 0, --load-end must be <= --load-start"
        );
    } else if ramp.end > 0.0 {
        ensure!(
            ramp.end >= ramp.start,
            "with --load-step > 0, --load-end must be >= --load-start"
        );
    }
    Ok(())
}

/// `rate`, not past `ramp.end` in the direction of the ramp.
fn clamp_to_end(rate: f64, ramp: &Ramp) -> f64 {
    match (ramp.end > 0.0, ramp.step > 0.0) {
        (false, _) => rate,
        (true, true) => rate.min(ramp.end),
        (true, false) => rate.max(ramp.end),
    }
}

fn min_option(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
