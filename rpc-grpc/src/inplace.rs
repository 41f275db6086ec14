//! A future that is polled again in place when it wakes itself.
//!
//! The HTTP/2 driver polls its connection and its calls on one task; a call's send wakes
//! the connection's waker, which is that same task. Tokio treats a task woken during its
//! own poll as one that yielded: it goes to the back of the worker's queue and another
//! worker is unparked to steal it (a write to the I/O driver's eventfd and a thread
//! switch, measured at 1.8 per gRPC call at concurrency 1). [`InPlace`] gives the inner
//! future a waker of its own: a wake while the inner future is being polled only marks
//! it, and the poll goes round again; a wake at any other time wakes the task.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// Rounds of one poll before the task yields to the runtime (other tasks of the worker
/// get their turn, as when tokio's budget runs out).
const MAX_ROUNDS: u32 = 32;

/// See the module docs.
pub(crate) struct InPlace<F> {
    inner: Pin<Box<F>>,
    wake: Arc<Marks>,
    waker: Waker,
}

/// What the inner future's waker records.
#[derive(Default)]
struct Marks {
    /// The inner future is being polled: a wake is recorded, not passed on.
    polling: AtomicBool,
    /// A wake came while polling.
    woken: AtomicBool,
    /// The task's waker, from its last poll.
    task: AtomicWaker,
}

impl Wake for Marks {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // SeqCst on both sides: either the poll sees `woken` after it cleared `polling`,
        // or this sees `polling` cleared and wakes the task.
        self.woken.store(true, Ordering::SeqCst);
        if !self.polling.load(Ordering::SeqCst) {
            self.task.wake();
        }
    }
}

impl<F: Future> InPlace<F> {
    pub(crate) fn new(inner: F) -> InPlace<F> {
        let wake = Arc::new(Marks::default());
        InPlace {
            inner: Box::pin(inner),
            waker: Waker::from(wake.clone()),
            wake,
        }
    }
}

impl<F: Future> Future for InPlace<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        this.wake.task.register(cx.waker());
        let mut inner_cx = Context::from_waker(&this.waker);
        for _ in 0..MAX_ROUNDS {
            this.wake.woken.store(false, Ordering::SeqCst);
            this.wake.polling.store(true, Ordering::SeqCst);
            let polled = this.inner.as_mut().poll(&mut inner_cx);
            this.wake.polling.store(false, Ordering::SeqCst);
            if polled.is_ready() {
                return polled;
            }
            if !this.wake.woken.load(Ordering::SeqCst) {
                return Poll::Pending;
            }
        }
        // Still waking itself: the task yields, and comes back.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Wakes itself `n` times, then is ready; counts its polls.
    struct SelfWaking {
        left: u32,
        polls: Arc<AtomicUsize>,
    }

    impl Future for SelfWaking {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.left == 0 {
                return Poll::Ready(());
            }
            self.left -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// Counts the wakes of the task.
    #[derive(Default)]
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A task's waker, and the count of its wakes.
    fn task() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count::default());
        (count.clone(), Waker::from(count))
    }

    fn poll<F: Future>(f: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn a_self_wake_is_polled_again_without_waking_the_task() {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut f = std::pin::pin!(InPlace::new(SelfWaking {
            left: 5,
            polls: polls.clone(),
        }));
        let (count, waker) = task();
        assert!(poll(f.as_mut(), &waker).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 6);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            0,
            "the task was never woken"
        );
    }

    #[test]
    fn a_future_that_keeps_waking_itself_yields_after_the_rounds() {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut f = std::pin::pin!(InPlace::new(SelfWaking {
            left: MAX_ROUNDS + 3,
            polls: polls.clone(),
        }));
        let (count, waker) = task();
        assert!(poll(f.as_mut(), &waker).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), MAX_ROUNDS as usize);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "it yielded: woken once");
        assert!(poll(f.as_mut(), &waker).is_ready());
    }

    #[test]
    fn a_wake_from_elsewhere_between_polls_wakes_the_task() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let inner_waker = Arc::new(parking_lot::Mutex::new(None::<Waker>));
        let stored = inner_waker.clone();
        let mut f = std::pin::pin!(InPlace::new(std::future::poll_fn(move |cx| {
            *stored.lock() = Some(cx.waker().clone());
            match rx.try_recv() {
                Ok(()) => Poll::Ready(()),
                Err(_) => Poll::Pending,
            }
        })));
        let (count, waker) = task();
        assert!(poll(f.as_mut(), &waker).is_pending());
        tx.send(()).unwrap();
        let w = inner_waker.lock().take().expect("registered");
        std::thread::spawn(move || w.wake()).join().unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "the task was woken");
        assert!(poll(f.as_mut(), &waker).is_ready());
    }
}
