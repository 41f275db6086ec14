//! [`Pool`]: one counter of an account, an async semaphore whose give-back is an atomic
//! add (a lock only while someone waits), served in arrival order. It hands out no
//! permits: what is taken is counted by the taker ([`Charge`](super::Charge)), which
//! gives it back.
//!
//! tokio's semaphore takes its waiter lock on every release; an account's counters are
//! taken and given back several times per call on every surface (a call's permit, its
//! request's bytes, its response's sending bytes, each at three levels), so the common
//! case, nobody waiting, is kept to atomics.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

/// A counter of `available` units with waiters in arrival order.
#[derive(Debug)]
pub(super) struct Pool {
    available: AtomicUsize,
    /// Waiters in the queue: a give-back looks at the queue only when there are some.
    waiting: AtomicUsize,
    queue: Mutex<VecDeque<Arc<Waiter>>>,
}

#[derive(Debug)]
struct Waiter {
    need: usize,
    /// Set (under the queue's lock) when the units were taken for it.
    granted: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Pool {
    /// The most a pool may hold.
    pub(super) const MAX: usize = usize::MAX >> 4;

    pub(super) fn new(units: usize) -> Pool {
        Pool {
            available: AtomicUsize::new(units.min(Pool::MAX)),
            waiting: AtomicUsize::new(0),
            queue: Mutex::new(VecDeque::new()),
        }
    }

    /// Units free now.
    pub(super) fn available(&self) -> usize {
        self.available.load(Ordering::SeqCst)
    }

    /// Takes `n` now, or nothing: nothing while anyone waits (they are served first).
    /// What is taken is the caller's to [`give`](Pool::give) back.
    pub(super) fn try_take(&self, n: usize) -> bool {
        if n > 0 && self.waiting.load(Ordering::SeqCst) > 0 {
            return false;
        }
        self.take_available(n)
    }

    /// Takes `n`, waiting behind those already waiting.
    pub(super) fn take(&self, n: usize) -> Take<'_> {
        Take {
            pool: self,
            n,
            waiter: None,
        }
    }

    fn take_available(&self, n: usize) -> bool {
        self.available
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |a| a.checked_sub(n))
            .is_ok()
    }

    /// Gives back `n` taken before, serving whoever waits.
    pub(super) fn give(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.available.fetch_add(n, Ordering::SeqCst);
        // Either this sees the waiter counted, or the waiter (counted before it looks at
        // what is available, under the lock) sees these units: SeqCst orders both.
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.serve(&mut self.queue.lock());
        }
    }

    /// Hands what is available to the waiters at the front of the queue, in order.
    fn serve(&self, queue: &mut VecDeque<Arc<Waiter>>) {
        while let Some(first) = queue.front() {
            if !self.take_available(first.need) {
                return;
            }
            let first = queue.pop_front().expect("a front");
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            first.granted.store(true, Ordering::Release);
            let waker = first.waker.lock().take();
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }
}

/// [`Pool::take`]'s future.
/// Once ready, the `n` units are the caller's to give back; dropped while it waits,
/// it takes nothing.
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub(super) struct Take<'a> {
    pool: &'a Pool,
    n: usize,
    waiter: Option<Arc<Waiter>>,
}

impl Future for Take<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let waiter = match &this.waiter {
            None => {
                if this.pool.try_take(this.n) {
                    return Poll::Ready(());
                }
                let waiter = Arc::new(Waiter {
                    need: this.n,
                    granted: AtomicBool::new(false),
                    waker: Mutex::new(Some(cx.waker().clone())),
                });
                let mut queue = this.pool.queue.lock();
                queue.push_back(waiter.clone());
                this.pool.waiting.fetch_add(1, Ordering::SeqCst);
                this.pool.serve(&mut queue);
                drop(queue);
                this.waiter.insert(waiter)
            }
            Some(waiter) => {
                let mut slot = waiter.waker.lock();
                if !slot.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *slot = Some(cx.waker().clone());
                }
                waiter
            }
        };
        if waiter.granted.load(Ordering::Acquire) {
            this.waiter = None;
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl Drop for Take<'_> {
    fn drop(&mut self) {
        let Some(waiter) = self.waiter.take() else {
            return;
        };
        let mut queue = self.pool.queue.lock();
        if waiter.granted.load(Ordering::Acquire) {
            // Granted, never taken: back to the pool (and to whoever waits next).
            drop(queue);
            self.pool.give(self.n);
            return;
        }
        if let Some(at) = queue.iter().position(|w| Arc::ptr_eq(w, &waiter)) {
            queue.remove(at);
            self.pool.waiting.fetch_sub(1, Ordering::SeqCst);
        }
        // The first in line may have been what held the others back.
        self.pool.serve(&mut queue);
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::pin::pin;
    use std::time::Duration;

    use super::*;

    /// Polls `take` once: whether it has its units now.
    fn ready(take: Pin<&mut Take<'_>>) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        take.poll(&mut cx).is_ready()
    }

    #[test]
    fn what_is_taken_is_there_again_when_given_back() {
        let pool = Pool::new(10);
        assert!(pool.try_take(6));
        assert_eq!(pool.available(), 4);
        assert!(!pool.try_take(5));
        assert!(pool.try_take(0));
        pool.give(6);
        assert_eq!(pool.available(), 10);
    }

    #[test]
    fn waiters_are_served_in_arrival_order_and_nobody_barges() {
        let pool = Pool::new(4);
        assert!(pool.try_take(4));
        let mut big = pin!(pool.take(3));
        let mut small = pin!(pool.take(1));
        assert!(!ready(big.as_mut()));
        assert!(!ready(small.as_mut()));
        pool.give(4);
        // 4 free: the first waiter gets 3, the second 1; a try finds nothing left.
        assert!(ready(big.as_mut()), "served first");
        assert!(ready(small.as_mut()), "served second");
        assert!(!pool.try_take(1));
        pool.give(4);

        // While someone waits, a try that would fit is refused: the waiter is first.
        assert!(pool.try_take(3));
        let mut waiter = pin!(pool.take(2));
        assert!(!ready(waiter.as_mut()));
        assert!(!pool.try_take(1), "1 is free but someone waits");
        pool.give(3);
        assert!(ready(waiter.as_mut()));
        assert_eq!(pool.available(), 2);
    }

    #[test]
    fn a_waiter_that_gives_up_lets_the_next_in_and_loses_nothing() {
        let pool = Pool::new(4);
        assert!(pool.try_take(3));
        let mut first = Box::pin(pool.take(4));
        let mut second = pin!(pool.take(1));
        assert!(!ready(first.as_mut()));
        assert!(!ready(second.as_mut()));
        // The first in line goes: the second fits in what is free.
        drop(first);
        assert!(ready(second.as_mut()));
        pool.give(1);
        pool.give(3);
        assert_eq!(pool.available(), 4);

        // Granted, then dropped before it was polled again: the units come back.
        assert!(pool.try_take(3));
        let mut granted = Box::pin(pool.take(3));
        assert!(!ready(granted.as_mut()));
        pool.give(3);
        assert_eq!(pool.available(), 1, "3 handed to the waiter");
        drop(granted);
        assert_eq!(pool.available(), 4);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn many_tasks_never_hold_more_than_the_pool() {
        let pool = Arc::new(Pool::new(10));
        let holding = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..16)
            .map(|t| {
                let (pool, holding) = (pool.clone(), holding.clone());
                tokio::spawn(async move {
                    for i in 0..2000 {
                        let n = 1 + (t + i) % 4;
                        if i % 3 == 0 {
                            if !pool.try_take(n) {
                                continue;
                            }
                        } else if i % 7 == 0 {
                            // Some give up while they wait.
                            let take = pool.take(n);
                            if tokio::time::timeout(Duration::from_micros(50), take)
                                .await
                                .is_err()
                            {
                                continue;
                            }
                        } else {
                            pool.take(n).await;
                        }
                        let now = holding.fetch_add(n, Ordering::SeqCst) + n;
                        assert!(now <= 10, "{now} held of 10");
                        poll_fn(|cx| {
                            cx.waker().wake_by_ref();
                            Poll::Ready(())
                        })
                        .await;
                        holding.fetch_sub(n, Ordering::SeqCst);
                        pool.give(n);
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("no task panicked");
        }
        assert_eq!(pool.available(), 10);
        assert_eq!(pool.waiting.load(Ordering::SeqCst), 0);
    }
}
