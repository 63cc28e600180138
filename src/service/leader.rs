//! Housekeeping leader election: one replica at a time holds the lease row
//! on the shared database (`Store::elect`, terms on the database clock) and
//! only it runs audit checkpoints, pruning, the Svix grouping timer,
//! reminder/escalation scheduling and Alertmanager re-posts.
//!
//! A replica acts on a term only while two things hold:
//! - locally, the lease it was granted has not run out on the monotonic
//!   clock (measured from *before* the grant was asked for, minus a
//!   margin). The monotonic clock keeps running while a process is
//!   SIGSTOPped, so a leader resumed past its lease knows its term is over
//!   before any database round trip;
//! - the database still grants it that same term (`confirm`, a renewal
//!   right before each action: a superseded holder cannot renew).
//!
//! The lease is a row with an expiry, not a session advisory lock: a
//! session lock survives a SIGSTOPped holder (its connection stays open)
//! and breaks behind transaction poolers.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::IntGauge;
use tokio::sync::watch;

use crate::store::replica::Leadership as LeaseRow;
use crate::store::Store;

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
    store: Store,
    lease: Duration,
    /// One process per database (SQLite): always the leader, term 1.
    solo: bool,
    held: Mutex<Option<Held>>,
    /// The lease row as the last election round saw it (for the status).
    last: Mutex<Option<LeaseRow>>,
    /// When an election round last ended knowing of a live lease (this
    /// replica's or another's); starts at creation (issue #19).
    led: Mutex<Instant>,
    gauge: IntGauge,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Leadership {
    pub fn new(me: String, store: Store, lease: Duration, solo: bool, gauge: IntGauge) -> Self {
        gauge.set(i64::from(solo));
        Leadership {
            me,
            store,
            lease,
            solo,
            held: Mutex::new(None),
            last: Mutex::new(None),
            led: Mutex::new(Instant::now()),
            gauge,
        }
    }

    /// Issue #19: how long no replica is known to have held the lease, when
    /// that is longer than one lease (a degraded reason: housekeeping,
    /// reminders and re-posts are not running anywhere). `None` on a store
    /// of one process. Judged on the monotonic clock from the last election
    /// round that succeeded, so a round that hangs on the database counts.
    pub fn leaderless_for(&self) -> Option<Duration> {
        if self.solo {
            return None;
        }
        let since = lock(&self.led).elapsed();
        (since > self.lease).then_some(since)
    }

    /// The configured `leader_lease`.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The term this replica may act on right now, judged locally (no
    /// database round trip): `None` when it is not the leader or its lease
    /// ran out on the monotonic clock.
    pub fn term(&self) -> Option<i64> {
        if self.solo {
            return Some(1);
        }
        let held = *lock(&self.held);
        held.filter(|h| Instant::now() < h.until).map(|h| h.term)
    }

    /// The lease row as last seen (holder, term, lease end).
    pub fn last_seen(&self) -> Option<LeaseRow> {
        lock(&self.last).clone()
    }

    /// The fencing check before a housekeeping action: the local lease is
    /// live and the database renews this replica's lease in the same term.
    /// Returns that term.
    pub async fn confirm(&self) -> Option<i64> {
        let term = self.term()?;
        if self.solo {
            return Some(term);
        }
        self.campaign().await;
        // A pause during the round trip may have outlived the lease, and a
        // new term is not the one the caller was about to act on.
        self.term().filter(|t| *t == term)
    }

    /// One election round: renew the lease, take it if it is free, or
    /// learn who holds it.
    pub async fn campaign(&self) {
        if self.solo {
            return;
        }
        let asked = Instant::now();
        let known = lock(&self.held).map(|h| h.term);
        let ttl = chrono::TimeDelta::from_std(self.lease).unwrap_or(chrono::TimeDelta::MAX);
        match self.store.elect(self.me.clone(), known, ttl).await {
            Ok(row) => {
                // `elect` answers only with a live lease: ours, or one it
                // could not take because another replica holds it.
                *lock(&self.led) = Instant::now();
                let (leader, term) = (row.leader, row.term);
                *lock(&self.last) = Some(row);
                if leader {
                    let usable = self.lease - self.lease / MARGIN_DIVISOR;
                    let before = lock(&self.held).replace(Held {
                        term,
                        until: asked + usable,
                    });
                    if before.map(|h| h.term) != Some(term) {
                        tracing::info!(replica = %self.me, term, "this replica is now the housekeeping leader (term {term})");
                    }
                    self.gauge.set(1);
                } else {
                    // Copied out first: `lose` takes the lock again.
                    let held = *lock(&self.held);
                    if let Some(h) = held {
                        self.lose(h.term, "another replica holds the lease");
                    }
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
        let mut held = lock(&self.held);
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
        let held = lock(&self.held).take();
        self.gauge.set(0);
        if let Some(h) = held {
            if let Err(e) = self.store.resign(self.me.clone(), h.term).await {
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
/// Real time, not the sidecar's `Clock`: the lease coordinates separate
/// processes on the database's clock.
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
