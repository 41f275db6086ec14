//! [`Close`]: why a session ended, and what each reason means to the connection's users.

use std::fmt;
use std::time::Duration;

use crate::protocol::Lie;

/// Why a session (and its connection) ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Close {
    /// Closed by this side.
    Local,
    /// The peer closed its side channel: a clean close.
    PeerClosed,
    /// Nothing received from the peer for `silence` (ping timeout `timeout`).
    PeerSilent {
        silence: Duration,
        timeout: Duration,
    },
    /// The peer held a lent buffer unread for longer than the loan timeout.
    LoanTimeout(Duration),
    /// The peer broke the protocol (a lie about lengths, credits or tokens).
    Violation(Lie),
    /// A local operation failed (posting, polling, a completion with an error).
    Failed(String),
}

impl Close {
    /// Whether this is an orderly end rather than a failure.
    pub(crate) fn is_clean(&self) -> bool {
        matches!(self, Close::Local | Close::PeerClosed)
    }
}

impl From<&Close> for rdmarpc_core::TransportError {
    fn from(why: &Close) -> Self {
        use rdmarpc_core::TransportError as E;
        match why {
            Close::Local | Close::PeerClosed => E::Closed,
            Close::PeerSilent { silence, .. } => E::PeerSilent(*silence),
            Close::LoanTimeout(_) => E::Protocol(why.to_string()),
            Close::Violation(lie) => E::Protocol(lie.to_string()),
            Close::Failed(what) => E::Other(what.clone()),
        }
    }
}

impl fmt::Display for Close {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Close::Local => f.write_str("closed"),
            Close::PeerClosed => f.write_str("peer closed the connection"),
            Close::PeerSilent { silence, timeout } => {
                write!(f, "peer silent for {silence:?} (ping timeout {timeout:?})")
            }
            Close::LoanTimeout(t) => write!(
                f,
                "the peer held a rendezvous buffer for more than {t:?} without reading it (loan timeout)"
            ),
            Close::Violation(why) => write!(f, "protocol violation by the peer: {why}"),
            Close::Failed(why) => f.write_str(why),
        }
    }
}
