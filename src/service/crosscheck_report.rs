//! What one cross-check poll reports, whichever shape the provider has
//! (`service::crosscheck` for listings and event logs,
//! `service::crosscheck_delta` for delta feeds), and how a finding is
//! shown: both pollers build these, so they live below both.

use crate::crosscheck::PollError;
use crate::domain::crosscheck::Finding;
use crate::store::veil::Veil;
use crate::store::StoreError;
use std::collections::BTreeMap;
use std::fmt;

/// What one poll found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PollReport {
    /// Every finding decided by this poll.
    pub findings: Vec<Finding>,
    /// Their keys that no earlier poll (here or on another replica)
    /// recorded: the ones to page.
    pub new_keys: Vec<String>,
    /// Clerk: this poll was the baseline (nothing compared).
    pub baseline: bool,
    /// Clerk: unexplained changes waiting for a later poll.
    pub pending: usize,
    /// False when another poll committed first (its answer stands).
    pub committed: bool,
    /// WorkOS: the logged event body (`LogEntry::body`, byte for byte what
    /// its webhook carries) of each finding of this poll, by finding key,
    /// so a heal can deliver it. Only findings' bodies are kept.
    pub bodies: BTreeMap<String, Vec<u8>>,
}

#[derive(Debug)]
pub enum PollFailure {
    /// The provider's answer; recorded as a failed poll.
    Provider(PollError),
    /// The store; nothing of this poll's end was committed.
    Store(StoreError),
}

impl fmt::Display for PollFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PollFailure::Provider(e) => write!(f, "{e}"),
            PollFailure::Store(e) => write!(f, "storage: {e}"),
        }
    }
}

impl From<StoreError> for PollFailure {
    fn from(e: StoreError) -> Self {
        PollFailure::Store(e)
    }
}

/// A stored finding as a person reads it (its key stays as stored).
pub fn revealed(veil: &Veil, f: &Finding) -> Finding {
    Finding {
        subject: veil.reveal(&f.subject).into_owned(),
        organization: f
            .organization
            .as_deref()
            .map(|o| veil.reveal(o).into_owned()),
        ..f.clone()
    }
}
