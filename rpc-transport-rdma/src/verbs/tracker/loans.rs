//! Buffers lent to the peer for its RDMA READs (rendezvous), held until the peer says it
//! is done or the connection ends.

use std::sync::Arc;

use super::Rings;
use crate::pool::LargeBuf;
use crate::verbs::{Access, Error, RemoteBuf, Result};

/// A buffer lent to the peer (by its own key, valid for this connection's QP only: the
/// connection's own PD), owned by the tracker until the loan ends.
#[derive(Debug)]
pub(super) struct Loan {
    /// Held until the loan ends, so the lent memory stays registered and unchanged.
    #[allow(dead_code, reason = "held while lent, never read")]
    pub(super) buf: LoanBuf,
    pub(super) charge: usize,
}

/// What a loan holds (held, never read: the peer reads it).
#[derive(Debug)]
#[allow(dead_code, reason = "held while lent, never read")]
pub(super) enum LoanBuf {
    /// A rendezvous buffer the frame was encoded into.
    Pool(LargeBuf),
    /// A received frame the application kept and sends on (its `Bytes` keep the buffer
    /// from going back to the pool; nothing writes to it while they live).
    Shared(Arc<LargeBuf>, bytes::Bytes),
    /// A frame pushed in pieces through the send slots (no buffer was pinned): nothing
    /// is lent; the loan holds the frame's lending charge until its read-done.
    Pushed,
}

/// What the peer is told of a loan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lent {
    /// Names the loan in [`Rings::reclaim`].
    pub(crate) key: u32,
    /// Offset 0 in the lent region, and its key.
    pub(crate) remote: RemoteBuf,
}

impl Rings {
    /// Lends `buf[..len]` to the peer by the buffer's own key (an [`Access::Lendable`]
    /// region of the connection's own PD: useless to any other QP); the tracker owns the
    /// buffer until [`Rings::reclaim`]. (Lending per transfer through memory windows is
    /// shown on rxe by the verbs tests, and not used: rxe replays binds on retransmission,
    /// see docs/limits.md, "Memory isolation".)
    ///
    /// # Errors
    /// `len` beyond the buffer, or a buffer registered otherwise; `buf` is given back.
    pub(crate) fn lend(
        &self,
        buf: LargeBuf,
        len: usize,
        charge: usize,
    ) -> std::result::Result<Lent, (LargeBuf, Error)> {
        if let Err(e) = buf.region().check_range(0, len) {
            return Err((buf, e));
        }
        if buf.region().access() != Access::Lendable {
            return Err((
                buf,
                Error::Unsupported {
                    what: "lending a buffer not registered as lendable",
                },
            ));
        }
        let (rkey, base) = (buf.region().rkey(), buf.region().nic_addr());
        let loan = Loan {
            buf: LoanBuf::Pool(buf),
            charge,
        };
        let key = self.loans.lock().insert(loan) as u32;
        Ok(Lent {
            key,
            remote: RemoteBuf { addr: base, rkey },
        })
    }

    /// Lends `buf[offset..offset + len]`, a received frame the application kept (of this
    /// connection's READ targets, [`Access::Lendable`] in its own PD), by the buffer's own
    /// key; `hold` (the application's bytes in it) is held with it until
    /// [`Rings::reclaim`], so the buffer neither returns to its pool nor changes meanwhile.
    ///
    /// # Errors
    /// The range beyond the buffer, or a buffer registered otherwise.
    pub(crate) fn lend_shared(
        &self,
        buf: Arc<LargeBuf>,
        offset: usize,
        len: usize,
        hold: bytes::Bytes,
        charge: usize,
    ) -> Result<Lent> {
        buf.region().check_range(offset, len)?;
        if buf.region().access() != Access::Lendable {
            return Err(Error::Unsupported {
                what: "lending a buffer not registered as lendable",
            });
        }
        let (rkey, base) = (buf.region().rkey(), buf.region().nic_addr());
        let loan = Loan {
            buf: LoanBuf::Shared(buf, hold),
            charge,
        };
        let key = self.loans.lock().insert(loan) as u32;
        Ok(Lent {
            key,
            remote: RemoteBuf {
                addr: base + offset as u64,
                rkey,
            },
        })
    }

    /// Records the loan of a frame pushed in pieces (nothing registered is lent: the
    /// remote address and key are 0), ended by [`Rings::reclaim`] as any other.
    pub(crate) fn lend_pushed(&self, charge: usize) -> Lent {
        let loan = Loan {
            buf: LoanBuf::Pushed,
            charge,
        };
        let key = self.loans.lock().insert(loan) as u32;
        Lent {
            key,
            remote: RemoteBuf { addr: 0, rkey: 0 },
        }
    }

    /// Ends a loan: the buffer goes back to its pool; returns the charge it was lent with.
    ///
    /// # Errors
    /// An unknown or already reclaimed key.
    pub(crate) fn reclaim(&self, key: u32) -> Result<usize> {
        let mut loans = self.loans.lock();
        if !loans.contains(key as usize) {
            return Err(Error::Unsupported {
                what: "reclaiming a loan that is not lent",
            });
        }
        let loan = loans.remove(key as usize);
        drop(loans);
        Ok(loan.charge)
    }
}
