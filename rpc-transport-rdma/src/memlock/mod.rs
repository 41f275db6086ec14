//! The locked-memory account: what this process may pin (`RLIMIT_MEMLOCK`, read once by
//! [`Probe`]), and, within it, what each connection reserved at set-up.
//!
//! Every registration charges the [`Account`] of its protection domain before
//! `ibv_reg_mr` is called (`verbs/mr.rs`), and gives the charge back once deregistered.
//! A connection's account reserves, at set-up, what the connection needs at least (its
//! rings at their full size: [`crate::RdmaConfig::pinned_reserve`]): its own registrations
//! draw from that reserve first and from what the process has left after it. A set-up
//! that cannot reserve is refused there, before a call is made on it, and nothing of the
//! connections already up is taken away. Where no limit applies (`CAP_IPC_LOCK`, or an
//! unlimited `memlock`), the account still counts but never refuses.
//!
//! The kernel counts whole pages: so does the account.
//!
//! Registered buffers kept idle for reuse (the rendezvous pools, `pool.rs`) are given
//! back first when a charge or a reserve finds too little left ([`Idle`]): a cache never
//! refuses a connection or a message the limit would hold without it.

mod probe;

pub(crate) use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

pub(crate) use probe::Probe;

/// The page size the kernel pins by (registrations are page-aligned: `verbs/mr.rs`).
const PAGE: u64 = 4096;

/// Bytes rounded up to whole pages.
pub(crate) fn pages(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE) * PAGE
}

/// What can be pinned by this process: the room the kernel leaves, less what is charged.
#[derive(Debug)]
pub(crate) struct Budget {
    /// What the kernel allowed when the budget was made; `None`: no limit applies.
    probe: Option<Probe>,
    /// Bytes charged so far (reserves and registrations beyond them).
    used: Mutex<u64>,
    /// What holds pinned memory it can give back at once, asked when room runs out.
    idle: Mutex<Vec<Weak<dyn Idle>>>,
}

/// Something that keeps registered memory idle for reuse (a rendezvous pool) and gives
/// it back when the budget runs short.
pub(crate) trait Idle: Send + Sync + std::fmt::Debug {
    /// Bytes registered and idle now whose release would make room in the budget (idle
    /// pages within a connection's reserve make none).
    fn idle_bytes(&self) -> u64;
    /// Deregisters idle memory until at least `want` bytes are given back (or nothing
    /// idle is left); the bytes given back.
    fn release_idle(&self, want: u64) -> u64;
}

/// A charge the budget could not take: what was asked, what is left, and the way out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} needs {need} KiB of locked memory and {left} KiB are left: this process may \
     pin {limit} KiB (RLIMIT_MEMLOCK{before}); raise the limit (`ulimit -l unlimited`, \
     Docker's `--ulimit memlock=-1`, systemd's `LimitMEMLOCK=infinity`, or the \
     `IPC_LOCK` capability) or use tcp://",
    need = .need / 1024,
    left = .left / 1024,
    limit = .limit / 1024,
    before = before(*.pinned_before)
)]
pub(crate) struct Exhausted {
    /// What asked: "an RDMA connection", "a registration".
    pub(crate) what: &'static str,
    /// Bytes asked for.
    pub(crate) need: u64,
    /// Bytes the budget had left.
    pub(crate) left: u64,
    /// The soft limit, bytes.
    pub(crate) limit: u64,
    /// Bytes pinned before this transport pinned any.
    pub(crate) pinned_before: u64,
}

impl Exhausted {
    /// The transport error a set-up refused for it ends in (`rdma://`).
    pub(crate) fn to_transport(&self) -> rdmarpc_core::TransportError {
        rdmarpc_core::TransportError::LockedMemory {
            needed: self.need,
            left: self.left,
            limit: self.limit,
        }
    }

    /// Logs the refusal at WARN the first time `said` is set (one flag per side: a
    /// process may be a client and a server), with the numbers and the way out, then at
    /// DEBUG: `then` says what happens instead.
    pub(crate) fn log_once(&self, then: &str, said: &AtomicBool) {
        crate::warn_once::warn_once(said, format_args!("{self}; {then}"));
    }
}

fn before(pinned: u64) -> String {
    if pinned == 0 {
        String::new()
    } else {
        format!(", of which {} KiB were pinned before", pinned / 1024)
    }
}

impl Budget {
    /// A budget for what `probe` read; `None`: nothing known, no limit enforced (the
    /// kernel still refuses what it must).
    pub(crate) fn new(probe: Option<Probe>) -> Budget {
        Budget {
            probe: probe.filter(|p| p.room().is_some()),
            used: Mutex::new(0),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Asks `idle` to give back what it keeps whenever room runs short, for as long as
    /// it lives.
    pub(crate) fn keep_idle(&self, idle: Weak<dyn Idle>) {
        if self.probe.is_none() {
            return; // nothing is ever refused: nothing to reclaim for
        }
        let mut list = self.idle.lock();
        list.retain(|i| i.strong_count() > 0);
        list.push(idle);
    }

    /// The live [`Idle`] holders.
    fn idle(&self) -> Vec<Arc<dyn Idle>> {
        self.idle.lock().iter().filter_map(Weak::upgrade).collect()
    }

    /// Bytes kept idle by every [`Idle`] (room that giving them back would make).
    fn idle_bytes(&self) -> u64 {
        self.idle().iter().map(|i| i.idle_bytes()).sum()
    }

    /// Gives back idle memory until at least `want` bytes are freed; the bytes freed.
    /// Called with no lock of the budget's or an account's held (what is deregistered
    /// gives its charge back).
    fn reclaim(&self, want: u64) -> u64 {
        let mut freed = 0;
        for idle in self.idle() {
            if freed >= want {
                break;
            }
            freed += idle.release_idle(want - freed);
        }
        if freed > 0 {
            tracing::debug!(bytes = freed, "gave back idle registered buffers for room");
        }
        freed
    }

    /// `attempt`, and once more after idle buffers were given back if it found too
    /// little room and the idle memory could make it up (only the shortfall is given
    /// back: the caches of other connections are not emptied for a request that cannot
    /// fit anyway).
    fn or_reclaim<T>(
        &self,
        mut attempt: impl FnMut() -> Result<T, Exhausted>,
    ) -> Result<T, Exhausted> {
        match attempt() {
            Err(e) if self.probe.is_some() => {
                let short = e.need.saturating_sub(e.left);
                if self.idle_bytes() < short || self.reclaim(short) == 0 {
                    return Err(e);
                }
                attempt()
            }
            result => result,
        }
    }

    /// The process's budget, read from `/proc/self` on first use. Changing the limit
    /// afterwards (`prlimit`) is not seen.
    pub(crate) fn process() -> &'static Budget {
        static BUDGET: OnceLock<Budget> = OnceLock::new();
        BUDGET.get_or_init(|| {
            let probe = Probe::read()
                .map_err(|e| tracing::debug!("locked-memory limit unknown: {e}"))
                .ok();
            if let Some(p) = probe {
                tracing::debug!(limit = ?p.limit, pinned = p.pinned, ipc_lock = p.ipc_lock, "locked-memory limit");
            }
            Budget::new(probe)
        })
    }

    /// Bytes charged now (reserves, and registrations beyond them).
    pub(crate) fn used(&self) -> u64 {
        *self.used.lock()
    }

    /// What may be charged in all (the limit less what was pinned before); `None`: no
    /// limit applies.
    pub(crate) fn room(&self) -> Option<u64> {
        self.probe?.room()
    }

    /// Bytes left to charge; `None`: no limit.
    #[cfg(test)]
    pub(crate) fn left(&self) -> Option<u64> {
        let room = self.probe?.room()?;
        Some(room.saturating_sub(*self.used.lock()))
    }

    /// Whether `bytes` could be taken now, or why not (nothing is taken: a check ahead
    /// of a reservation made later). Idle buffers count as room here, and are not given
    /// back: a check (a peer's offer, not yet authenticated) frees nothing; the reserve
    /// made later does.
    ///
    /// # Errors
    /// [`Exhausted`] when less is left.
    pub(crate) fn check(&self, bytes: u64, what: &'static str) -> Result<(), Exhausted> {
        match self.fits(*self.used.lock(), pages(bytes), what) {
            Err(e) if e.need.saturating_sub(e.left) <= self.idle_bytes() => Ok(()),
            result => result,
        }
    }

    /// Takes `bytes` (whole pages) or says why not.
    fn take(&self, bytes: u64, what: &'static str) -> Result<(), Exhausted> {
        let mut used = self.used.lock();
        self.fits(*used, bytes, what)?;
        *used = used.saturating_add(bytes);
        Ok(())
    }

    /// Whether `bytes` more fit beside `used`, or why not.
    fn fits(&self, used: u64, bytes: u64, what: &'static str) -> Result<(), Exhausted> {
        let Some(probe) = self.probe else {
            return Ok(());
        };
        let left = probe.room().unwrap_or(u64::MAX).saturating_sub(used);
        if bytes > left {
            return Err(Exhausted {
                what,
                need: bytes,
                left,
                limit: probe.limit.unwrap_or(u64::MAX),
                pinned_before: probe.pinned,
            });
        }
        Ok(())
    }

    fn give_back(&self, bytes: u64) {
        let mut used = self.used.lock();
        *used = used.saturating_sub(bytes);
    }
}

/// One protection domain's (so one connection's) share of a [`Budget`]: a reserve taken
/// at once, and what its registrations use of it and beyond it.
#[derive(Debug)]
pub(crate) struct Account {
    budget: &'static Budget,
    reserved: u64,
    used: Mutex<u64>,
}

impl Account {
    /// Reserves `bytes` (rounded up to pages) of `budget` for one connection.
    ///
    /// # Errors
    /// [`Exhausted`] when the budget has less left.
    pub(crate) fn reserve(budget: &'static Budget, bytes: u64) -> Result<Arc<Account>, Exhausted> {
        let reserved = pages(bytes);
        budget.or_reclaim(|| budget.take(reserved, "an RDMA connection"))?;
        Ok(Arc::new(Account {
            budget,
            reserved,
            used: Mutex::new(0),
        }))
    }

    /// An account with no reserve and no limit (the verbs tests, the raw test peer:
    /// they test registration itself, whatever this process's limit).
    #[cfg(any(test, feature = "unstable-test-peer"))]
    pub(crate) fn unlimited() -> Arc<Account> {
        static UNLIMITED: OnceLock<Budget> = OnceLock::new();
        Arc::new(Account {
            budget: UNLIMITED.get_or_init(|| Budget::new(None)),
            reserved: 0,
            used: Mutex::new(0),
        })
    }

    /// Charges `bytes` (rounded up to pages): from the reserve while it lasts, from the
    /// budget beyond it.
    ///
    /// # Errors
    /// [`Exhausted`] when neither has room; nothing is charged then.
    pub(crate) fn charge(self: &Arc<Self>, bytes: usize) -> Result<Charge, Exhausted> {
        let bytes = pages(bytes as u64);
        // The account's lock is not held while idle buffers are given back (their
        // charges may be this account's).
        self.budget.or_reclaim(|| {
            let mut used = self.used.lock();
            let beyond = (*used + bytes).saturating_sub(self.reserved.max(*used));
            self.budget.take(beyond, "a registration")?;
            *used = used.saturating_add(bytes);
            Ok(())
        })?;
        Ok(Charge {
            account: self.clone(),
            bytes,
        })
    }

    /// The budget this account draws from.
    pub(crate) fn budget(&self) -> &'static Budget {
        self.budget
    }

    /// Bytes charged beyond the reserve now (what giving back this account's memory
    /// could return to the budget at most).
    pub(crate) fn beyond(&self) -> u64 {
        self.used.lock().saturating_sub(self.reserved)
    }

    /// Bytes charged and not given back.
    #[cfg(test)]
    pub(crate) fn used(&self) -> u64 {
        *self.used.lock()
    }

    fn give_back(&self, bytes: u64) {
        let mut used = self.used.lock();
        let beyond_before = used.saturating_sub(self.reserved);
        *used = used.saturating_sub(bytes);
        self.budget
            .give_back(beyond_before - used.saturating_sub(self.reserved));
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        // Charges hold the account: none is left.
        self.budget.give_back(self.reserved);
    }
}

/// Pinned bytes charged to an [`Account`], given back on drop (a memory region drops its
/// charge after it is deregistered).
#[derive(Debug)]
pub(crate) struct Charge {
    account: Arc<Account>,
    bytes: u64,
}

impl Charge {
    /// Keeps the bytes charged to the process for good (their pages stay pinned: a region
    /// that could not be deregistered), and lets the account go.
    pub(crate) fn leak(self) {
        let mut used = self.account.budget.used.lock();
        *used = used.saturating_add(self.bytes);
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.account.give_back(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A budget of `room` bytes that lives as long as the test binary (accounts hold
    /// `&'static`).
    fn budget(limit: u64, pinned: u64) -> &'static Budget {
        Box::leak(Box::new(Budget::new(Some(Probe {
            limit: Some(limit),
            pinned,
            ipc_lock: false,
        }))))
    }

    #[test]
    fn charges_come_from_the_reserve_first_then_from_the_budget() {
        let budget = budget(1 << 20, 0);
        let account = Account::reserve(budget, 256 << 10).unwrap();
        assert_eq!(budget.left(), Some(768 << 10));
        let a = account.charge(100 << 10).unwrap();
        let b = account.charge(100 << 10).unwrap();
        assert_eq!(budget.left(), Some(768 << 10), "within the reserve");
        let c = account.charge(100 << 10).unwrap();
        // 3 x 100 KiB (25 pages each) = 300 KiB: 44 KiB beyond the reserve.
        assert_eq!(budget.left(), Some((768 - 44) << 10));
        drop(a);
        assert_eq!(budget.left(), Some(768 << 10), "back within the reserve");
        drop((b, c));
        assert_eq!(account.used(), 0);
        drop(account);
        assert_eq!(
            budget.left(),
            Some(1 << 20),
            "the reserve goes back with the account"
        );
    }

    #[test]
    fn a_reserve_or_a_charge_over_what_is_left_is_refused_and_takes_nothing() {
        let budget = budget(1 << 20, 256 << 10);
        let first = Account::reserve(budget, 512 << 10).unwrap();
        let refused = Account::reserve(budget, 512 << 10).unwrap_err();
        assert_eq!(
            refused,
            Exhausted {
                what: "an RDMA connection",
                need: 512 << 10,
                left: 256 << 10,
                limit: 1 << 20,
                pinned_before: 256 << 10,
            }
        );
        let text = refused.to_string();
        for part in [
            "512 KiB",
            "256 KiB are left",
            "1024 KiB",
            "ulimit -l",
            "memlock=-1",
            "LimitMEMLOCK",
            "IPC_LOCK",
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
        let kept = first.charge(512 << 10).unwrap();
        assert!(
            first.charge(257 << 10).is_err(),
            "256 KiB left beyond the reserve"
        );
        assert_eq!(first.used(), 512 << 10, "a refused charge takes nothing");
        assert_eq!(budget.left(), Some(256 << 10));
        let more = first.charge(256 << 10).unwrap();
        assert_eq!(budget.left(), Some(0));
        drop((kept, more));
        assert_eq!(budget.left(), Some(256 << 10));
    }

    #[test]
    fn a_check_takes_nothing_and_a_leaked_charge_stays() {
        let budget = budget(1 << 20, 0);
        assert!(budget.check(1 << 20, "an RDMA connection").is_ok());
        assert!(budget.check((1 << 20) + 1, "an RDMA connection").is_err());
        assert_eq!(budget.left(), Some(1 << 20));
        let account = Account::reserve(budget, 256 << 10).unwrap();
        account.charge(300 << 10).unwrap().leak();
        drop(account);
        assert_eq!(budget.left(), Some(724 << 10), "300 KiB stay pinned");
    }

    /// Charges kept idle, given back when asked (as a pool's idle buffers are).
    #[derive(Debug, Default)]
    struct Kept(Mutex<Vec<Charge>>);

    impl Idle for Kept {
        fn idle_bytes(&self) -> u64 {
            self.0.lock().iter().map(|c| c.bytes).sum()
        }

        fn release_idle(&self, want: u64) -> u64 {
            let mut kept = self.0.lock();
            let mut freed = 0;
            while freed < want {
                let Some(charge) = kept.pop() else { break };
                freed += charge.bytes;
                drop(charge);
            }
            freed
        }
    }

    #[test]
    fn idle_charges_are_given_back_before_a_charge_or_a_reserve_is_refused() {
        let budget = budget(1 << 20, 0);
        let a = Account::reserve(budget, 256 << 10).unwrap();
        let kept = Arc::new(Kept::default());
        let weak: Weak<dyn Idle> = Arc::downgrade(&(kept.clone() as Arc<dyn Idle>));
        budget.keep_idle(weak);
        // 256 KiB reserved, 512 KiB kept idle beyond it (one connection's cache).
        kept.0.lock().push(a.charge(768 << 10).unwrap());
        assert_eq!(budget.left(), Some(256 << 10));
        // A check counts idle memory as room and gives nothing back; one that idle memory
        // cannot make up gives nothing back either.
        assert!(budget.check(512 << 10, "an RDMA connection").is_ok());
        assert!(budget
            .check((1 << 20) + 4096, "an RDMA connection")
            .is_err());
        assert!(Account::reserve(budget, (1 << 20) + 4096).is_err());
        assert_eq!(kept.0.lock().len(), 1, "nothing was given back");
        // Another connection's reserve: room once the idle charge is given back.
        let b = Account::reserve(budget, 512 << 10).unwrap();
        assert!(kept.0.lock().is_empty(), "the idle charge went back");
        assert_eq!(budget.left(), Some(256 << 10));
        // A charge of the same account whose idle memory goes back (its lock is not
        // held meanwhile: this would deadlock otherwise).
        kept.0.lock().push(a.charge(256 << 10).unwrap());
        kept.0.lock().push(a.charge(256 << 10).unwrap());
        assert_eq!(budget.left(), Some(0));
        let big = a.charge(512 << 10).unwrap();
        assert_eq!(budget.left(), Some(0));
        assert!(
            budget.check(4096, "an RDMA connection").is_err(),
            "nothing idle is left"
        );
        // What cannot fit even with everything idle given back is refused, taking nothing
        // and giving back nothing (the caches are not emptied for it).
        drop(big);
        kept.0.lock().push(a.charge(512 << 10).unwrap());
        assert!(a.charge(1 << 20).is_err());
        assert_eq!(a.used(), 512 << 10, "the refused charge took nothing");
        assert_eq!(kept.0.lock().len(), 1, "the idle charge stayed");
        assert_eq!(budget.left(), Some(0));
        kept.0.lock().clear();
        assert_eq!(budget.left(), Some(256 << 10));
        drop((a, b));
        assert_eq!(budget.left(), Some(1 << 20));
    }

    #[test]
    fn charges_are_whole_pages() {
        let budget = budget(64 << 10, 0);
        let account = Account::reserve(budget, 1).unwrap();
        assert_eq!(budget.left(), Some(60 << 10), "one page reserved");
        let _one = account.charge(1).unwrap();
        let _two = account.charge(4097).unwrap();
        assert_eq!(account.used(), 3 * 4096);
        assert_eq!(
            budget.left(),
            Some(52 << 10),
            "two pages beyond the reserve"
        );
    }

    #[test]
    fn without_a_limit_nothing_is_refused() {
        let unlimited: &'static Budget = Box::leak(Box::new(Budget::new(Some(Probe {
            limit: Some(64 << 10),
            pinned: 0,
            ipc_lock: true,
        }))));
        assert_eq!(unlimited.left(), None);
        let account = Account::reserve(unlimited, 1 << 30).unwrap();
        let _big = account.charge(4 << 30).unwrap();
        let unknown: &'static Budget = Box::leak(Box::new(Budget::new(None)));
        assert!(Account::reserve(unknown, u64::MAX / 2).is_ok());
    }
}
