//! Housekeeping leader election: one replica at a time holds a lease row
//! on the shared database (`store::coordination`) and only it runs audit
//! checkpoints, pruning, the Svix grouping timer and reminder/escalation
//! scheduling.
//!
//! A replica acts on a term only while two things hold:
//! - locally, the lease it was granted has not run out on the monotonic
//!   clock (measured from *before* the grant was asked for, minus a
//!   margin). The monotonic clock keeps running while a process is
//!   SIGSTOPped, so a leader resumed past its lease knows at once that its
//!   term is over, before any database round trip;
//! - the database still names it holder of that term (`confirm`, the
//!   fencing check right before each action).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::IntGauge;
use tokio::sync::watch;

use crate::store::coordination::Coordination;

/// How much of a granted lease is never used locally, so a small rate
/// difference between this host's clock and the database's cannot make
/// both the old and the new holder act.
const MARGIN_DIVISOR: u32 = 10;

#[derive(Clone, Copy)]
struct Held {
    term: i64,
    until: Instant,
}

pub struct Leadership {
    me: String,
    coordination: Arc<dyn Coordination>,
    lease: Duration,
    /// One process per database (SQLite): always the leader, term 1.
    solo: bool,
    held: Mutex<Option<Held>>,
    gauge: IntGauge,
}

impl Leadership {
    pub fn new(
        me: String,
        coordination: Arc<dyn Coordination>,
        lease: Duration,
        solo: bool,
        gauge: IntGauge,
    ) -> Leadership {
        gauge.set(i64::from(solo));
        Leadership {
            me,
            coordination,
            lease,
            solo,
            held: Mutex::new(None),
            gauge,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The term this replica may act on right now, judged locally (no
    /// database round trip): `None` when it is not the leader or its lease
    /// ran out on the monotonic clock.
    pub fn term(&self) -> Option<i64> {
        if self.solo {
            return Some(1);
        }
        let held = *self.lock();
        held.filter(|h| Instant::now() < h.until).map(|h| h.term)
    }

    /// The fencing check before a housekeeping action: the local lease is
    /// live and the database still names this replica holder of the same
    /// term. Returns that term.
    pub async fn confirm(&self) -> Option<i64> {
        let term = self.term()?;
        if self.solo {
            return Some(term);
        }
        match self.coordination.holds(&self.me, term).await {
            // A pause during the query may have outlived the lease.
            Ok(true) => self.term().filter(|t| *t == term),
            Ok(false) => {
                self.lose(term, "another replica holds the lease");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, term, "cannot confirm the leader lease; skipping housekeeping this time");
                None
            }
        }
    }

    /// One election round: take or renew the lease.
    pub async fn campaign(&self) {
        if self.solo {
            return;
        }
        let asked = Instant::now();
        match self
            .coordination
            .acquire_or_renew(&self.me, self.lease)
            .await
        {
            Ok(Some(lease)) => {
                let usable = lease.remaining - lease.remaining / MARGIN_DIVISOR;
                let until = asked + usable;
                let before = self.lock().replace(Held {
                    term: lease.term,
                    until,
                });
                if before.map(|h| h.term) != Some(lease.term) {
                    tracing::info!(
                        replica = %self.me,
                        term = lease.term,
                        "this replica is now the housekeeping leader (term {})",
                        lease.term
                    );
                }
                self.gauge.set(1);
            }
            Ok(None) => {
                // Copied out first: `lose` takes the lock again.
                let held = *self.lock();
                if let Some(h) = held {
                    self.lose(h.term, "another replica holds the lease");
                }
            }
            Err(e) => {
                // Keep what we hold: it runs out on its own (`term`).
                tracing::warn!(error = %e, "leader election could not reach the database");
                if self.term().is_none() {
                    self.gauge.set(0);
                }
            }
        }
    }

    fn lose(&self, term: i64, why: &str) {
        let mut held = self.lock();
        if held.is_some_and(|h| h.term == term) {
            *held = None;
            drop(held);
            self.gauge.set(0);
            tracing::warn!(replica = %self.me, term, "no longer the housekeeping leader (term {term}): {why}");
        }
    }

    /// Gives the lease up, so another replica takes over at once.
    pub async fn resign(&self) {
        if self.solo {
            return;
        }
        let held = self.lock().take();
        self.gauge.set(0);
        if let Some(h) = held {
            if let Err(e) = self.coordination.resign(&self.me, h.term).await {
                tracing::warn!(error = %e, "could not resign the leader lease; it lapses on its own");
            }
        }
    }

    /// How often to campaign: three times per lease, so one lost round
    /// trip does not lose the lease.
    pub fn every(&self) -> Duration {
        self.lease / 3
    }
}

/// Campaigns until shutdown. Resigning is left to the caller, after the
/// housekeeping tasks stopped (a last checkpoint may still need the lease).
pub async fn run(leadership: Arc<Leadership>, mut shutdown: watch::Receiver<bool>) {
    if leadership.solo {
        return;
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(leadership.every()) => {}
            _ = shutdown.changed() => return,
        }
        leadership.campaign().await;
    }
}
