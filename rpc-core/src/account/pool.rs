//! [`Pool`]: one counter of an account, an async semaphore whose give-back is an atomic
//! add (a lock only while someone waits), served in arrival order.
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
    pub(super) fn try_take(self: &Arc<Pool>, n: usize) -> Option<Units> {
        if n > 0 && self.waiting.load(Ordering::SeqCst) > 0 {
            return None;
        }
        self.take_available(n).then(|| Units {
            pool: self.clone(),
            n,
        })
    }

    /// Takes `n`, waiting behind those already waiting.
    pub(super) fn take(self: &Arc<Pool>, n: usize) -> Take {
        Take {
            pool: self.clone(),
            n,
            waiter: None,
        }
    }

    fn take_available(&self, n: usize) -> bool {
        self.available
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |a| a.checked_sub(n))
            .is_ok()
    }

    fn give(&self, n: usize) {
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

/// Units taken from a pool, given back when dropped.
#[derive(Debug)]
#[must_use = "units are given back when dropped"]
pub(super) struct Units {
    pool: Arc<Pool>,
    n: usize,
}

impl Units {
    pub(super) fn count(&self) -> usize {
        self.n
    }

    /// Takes `n` of these into units of their own; `None` if they hold fewer.
    pub(super) fn split(&mut self, n: usize) -> Option<Units> {
        self.n = self.n.checked_sub(n)?;
        Some(Units {
            pool: self.pool.clone(),
            n,
        })
    }

    /// Takes all of these into units of their own, leaving none.
    pub(super) fn take_all(&mut self) -> Units {
        Units {
            pool: self.pool.clone(),
            n: std::mem::take(&mut self.n),
        }
    }

    /// Adds `other` (of the same pool) to these.
    pub(super) fn merge(&mut self, mut other: Units) {
        debug_assert!(Arc::ptr_eq(&self.pool, &other.pool), "units of one pool");
        self.n += std::mem::take(&mut other.n);
    }
}

impl Drop for Units {
    fn drop(&mut self) {
        self.pool.give(self.n);
    }
}

/// [`Pool::take`]'s future.
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub(super) struct Take {
    pool: Arc<Pool>,
    n: usize,
    waiter: Option<Arc<Waiter>>,
}

impl Future for Take {
    type Output = Units;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Units> {
        let this = &mut *self;
        let waiter = match &this.waiter {
            None => {
                if let Some(units) = this.pool.try_take(this.n) {
                    return Poll::Ready(units);
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
            return Poll::Ready(Units {
                pool: this.pool.clone(),
                n: this.n,
            });
        }
        Poll::Pending
    }
}

impl Drop for Take {
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

    /// Polls `take` once: its units if it has them now.
    fn poll_once(take: Pin<&mut Take>) -> Option<Units> {
        let mut cx = Context::from_waker(Waker::noop());
        match take.poll(&mut cx) {
            Poll::Ready(units) => Some(units),
            Poll::Pending => None,
        }
    }

    #[test]
    fn units_go_back_when_dropped_split_or_merged() {
        let pool = Arc::new(Pool::new(10));
        let mut a = pool.try_take(6).expect("room");
        assert_eq!(pool.available(), 4);
        assert!(pool.try_take(5).is_none());
        let b = a.split(4).expect("holds 4");
        assert!(a.split(3).is_none(), "a holds 2");
        drop(b);
        assert_eq!(pool.available(), 8);
        let c = pool.try_take(8).expect("room");
        a.merge(c);
        assert_eq!(a.count(), 10);
        let d = a.take_all();
        drop(a);
        assert_eq!(pool.available(), 0);
        drop(d);
        assert_eq!(pool.available(), 10);
    }

    #[test]
    fn waiters_are_served_in_arrival_order_and_nobody_barges() {
        let pool = Arc::new(Pool::new(4));
        let held = pool.try_take(4).expect("room");
        let mut big = pin!(pool.take(3));
        let mut small = pin!(pool.take(1));
        assert!(poll_once(big.as_mut()).is_none());
        assert!(poll_once(small.as_mut()).is_none());
        drop(held);
        // 4 free: the first waiter gets 3, the second 1; a try finds nothing left.
        let big = poll_once(big.as_mut()).expect("served first");
        let small = poll_once(small.as_mut()).expect("served second");
        assert_eq!((big.count(), small.count()), (3, 1));
        assert!(pool.try_take(1).is_none());
        drop((big, small));

        // While someone waits, a try that would fit is refused: the waiter is first.
        let held = pool.try_take(3).expect("room");
        let mut waiter = pin!(pool.take(2));
        assert!(poll_once(waiter.as_mut()).is_none());
        assert!(pool.try_take(1).is_none(), "1 is free but someone waits");
        drop(held);
        assert_eq!(poll_once(waiter.as_mut()).expect("served").count(), 2);
        assert_eq!(pool.available(), 4);
    }

    #[test]
    fn a_waiter_that_gives_up_lets_the_next_in_and_loses_nothing() {
        let pool = Arc::new(Pool::new(4));
        let held = pool.try_take(3).expect("room");
        let mut first = Box::pin(pool.take(4));
        let mut second = pin!(pool.take(1));
        assert!(poll_once(first.as_mut()).is_none());
        assert!(poll_once(second.as_mut()).is_none());
        // The first in line goes: the second fits in what is free.
        drop(first);
        assert_eq!(poll_once(second.as_mut()).expect("served").count(), 1);
        drop(held);
        assert_eq!(pool.available(), 4);

        // Granted, then dropped before it was polled again: the units come back.
        let held = pool.try_take(3).expect("room");
        let mut granted = Box::pin(pool.take(3));
        assert!(poll_once(granted.as_mut()).is_none());
        drop(held);
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
                        let units = if i % 3 == 0 {
                            match pool.try_take(n) {
                                Some(units) => units,
                                None => continue,
                            }
                        } else if i % 7 == 0 {
                            // Some give up while they wait.
                            match tokio::time::timeout(Duration::from_micros(50), pool.take(n))
                                .await
                            {
                                Ok(units) => units,
                                Err(_) => continue,
                            }
                        } else {
                            pool.take(n).await
                        };
                        let now = holding.fetch_add(n, Ordering::SeqCst) + n;
                        assert!(now <= 10, "{now} held of 10");
                        poll_fn(|cx| {
                            cx.waker().wake_by_ref();
                            Poll::Ready(())
                        })
                        .await;
                        holding.fetch_sub(n, Ordering::SeqCst);
                        drop(units);
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
