use std::time::Duration;

use super::*;

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn assert_close(actual: Duration, expected: f64) {
    let diff = (actual.as_secs_f64() - expected).abs();
    assert!(diff < 1e-6, "expected {expected} s, got {actual:?}");
}

fn ramp(start: f64, step: f64, end: f64) -> Ramp {
    Ramp {
        start,
        step,
        end,
        step_duration: Duration::from_secs(1),
        max_duration: None,
    }
}

/// Checks that `send_time` inverts `due_by` over many requests.
fn assert_inverse(schedule: &Schedule, requests: u64) {
    for i in (0..requests).step_by(7) {
        let t = schedule.send_time(i).unwrap();
        let due = schedule.due_by(t).unwrap();
        assert!(
            (due - i as f64).abs() < 1e-6 * (i as f64).max(1.0),
            "request {i}: due {due} at {t:?}"
        );
    }
}

#[test]
fn unpaced_has_no_send_times() {
    let s = Schedule::unpaced();
    assert!(!s.is_paced());
    assert_eq!(s.send_time(5), None);
    assert_eq!(s.rate_at(secs(1.0)), None);
}

#[test]
fn constant_rate() {
    let s = Schedule::constant(100.0).unwrap();
    assert_close(s.send_time(0).unwrap(), 0.0);
    assert_close(s.send_time(1).unwrap(), 0.01);
    assert_close(s.send_time(250).unwrap(), 2.5);
    assert_eq!(s.due_by(secs(2.5)), Some(250.0));
    assert_inverse(&s, 10_000);
    assert!(Schedule::constant(0.0).is_err());
    assert!(Schedule::constant(f64::NAN).is_err());
}

#[test]
fn step_increasing_holds_at_end() {
    // 10 rps during [0,1), 20 during [1,2), then 30 held from t = 2.
    let s = Schedule::step(ramp(10.0, 10.0, 30.0)).unwrap();
    assert_eq!(s.rate_at(secs(0.5)), Some(10.0));
    assert_eq!(s.rate_at(secs(1.5)), Some(20.0));
    assert_eq!(s.rate_at(secs(2.0)), Some(30.0));
    assert_eq!(s.rate_at(secs(100.0)), Some(30.0));
    assert_close(s.send_time(5).unwrap(), 0.5);
    assert_close(s.send_time(10).unwrap(), 1.0);
    assert_close(s.send_time(15).unwrap(), 1.25);
    assert_close(s.send_time(30).unwrap(), 2.0);
    assert_close(s.send_time(60).unwrap(), 3.0);
    assert_close(s.send_time(90).unwrap(), 4.0);
    assert_inverse(&s, 5_000);
}

#[test]
fn step_end_between_steps_is_clamped() {
    // 10, 20, then 25 (not 30) from t = 2.
    let s = Schedule::step(ramp(10.0, 10.0, 25.0)).unwrap();
    assert_eq!(s.rate_at(secs(2.5)), Some(25.0));
    assert_close(s.send_time(30 + 25).unwrap(), 3.0);
}

#[test]
fn step_decreasing() {
    // 100 during [0,1), 70 during [1,2), then 50 (clamped from 40) from t = 2.
    let s = Schedule::step(ramp(100.0, -30.0, 50.0)).unwrap();
    assert_eq!(s.rate_at(secs(1.5)), Some(70.0));
    assert_eq!(s.rate_at(secs(2.5)), Some(50.0));
    assert_close(s.send_time(100).unwrap(), 1.0);
    assert_close(s.send_time(170).unwrap(), 2.0);
    assert_close(s.send_time(220).unwrap(), 3.0);
    assert_inverse(&s, 2_000);
}

#[test]
fn step_without_end_keeps_growing_and_max_duration_holds() {
    let s = Schedule::step(ramp(10.0, 10.0, 0.0)).unwrap();
    assert_eq!(s.rate_at(secs(99.5)), Some(1000.0));
    assert_inverse(&s, 100_000);

    let mut r = ramp(10.0, 10.0, 0.0);
    r.max_duration = Some(secs(1.5));
    let s = Schedule::step(r).unwrap();
    assert_eq!(s.rate_at(secs(50.0)), Some(20.0));
    // 10 in the first second, then 20/s: request 30 at t = 2.
    assert_close(s.send_time(30).unwrap(), 2.0);
}

#[test]
fn step_with_short_steps() {
    let r = Ramp {
        step_duration: Duration::from_millis(10),
        ..ramp(100.0, 50.0, 0.0)
    };
    let s = Schedule::step(r).unwrap();
    // 1 request in the first 10 ms step, 1.5 in the second.
    assert_close(s.send_time(1).unwrap(), 0.01);
    assert_inverse(&s, 200_000);
}

#[test]
fn line_increasing_holds_at_end() {
    // rate = 10 + 10t until t = 2 (rate 30), 40 requests due by then.
    let s = Schedule::line(ramp(10.0, 10.0, 30.0)).unwrap();
    assert_eq!(s.rate_at(secs(1.0)), Some(20.0));
    assert_eq!(s.rate_at(secs(5.0)), Some(30.0));
    // 10t + 5t^2 = 15 at t = 1.
    assert_close(s.send_time(15).unwrap(), 1.0);
    assert_close(s.send_time(40).unwrap(), 2.0);
    assert_close(s.send_time(70).unwrap(), 3.0);
    assert_inverse(&s, 5_000);
}

#[test]
fn line_decreasing() {
    // rate = 100 - 20t until t = 2.5 (rate 50).
    let s = Schedule::line(ramp(100.0, -20.0, 50.0)).unwrap();
    assert_eq!(s.rate_at(secs(1.0)), Some(80.0));
    assert_eq!(s.rate_at(secs(3.0)), Some(50.0));
    // 100t - 10t^2 at t = 1 is 90.
    assert_close(s.send_time(90).unwrap(), 1.0);
    assert_inverse(&s, 2_000);
}

#[test]
fn invalid_ramps_are_refused() {
    assert!(Schedule::step(ramp(0.0, 10.0, 0.0)).is_err(), "start 0");
    assert!(Schedule::step(ramp(10.0, 0.0, 0.0)).is_err(), "step 0");
    assert!(
        Schedule::line(ramp(10.0, -1.0, 0.0)).is_err(),
        "decreasing without end"
    );
    assert!(
        Schedule::line(ramp(10.0, 1.0, 5.0)).is_err(),
        "end below start"
    );
    assert!(
        Schedule::line(ramp(10.0, -1.0, 50.0)).is_err(),
        "end above start"
    );
    let mut r = ramp(10.0, 1.0, 0.0);
    r.step_duration = Duration::ZERO;
    assert!(Schedule::step(r).is_err(), "zero step duration");
}
