//! The one place "now" comes from. Everything time-dependent takes a
//! `Clock`, so tests can move time by hand instead of sleeping.
//!
//! Timers use the monotonic clock (tokio's) for waiting and the wall clock
//! only to place instants on the calendar: `sleep_until` re-reads the wall
//! clock after each wait and never waits longer than `MAX_WAIT` in one go,
//! so a wall-clock jump forward is noticed within that bound and a jump
//! backward simply leads to another wait (no spurious page).

use chrono::{DateTime, Utc};
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;

/// Longest single wait before the wall clock is consulted again.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

pub type WaitFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;
    /// Resolves once `now() >= deadline`.
    fn sleep_until(&self, deadline: DateTime<Utc>) -> WaitFuture<'_>;
}

/// The real wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn sleep_until(&self, deadline: DateTime<Utc>) -> WaitFuture<'_> {
        Box::pin(async move {
            loop {
                let left = deadline - Utc::now();
                let Ok(left) = left.to_std() else { return };
                if left.is_zero() {
                    return;
                }
                tokio::time::sleep(left.min(MAX_WAIT)).await;
            }
        })
    }
}

/// A clock that only moves when told to. For tests.
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
    changed: watch::Sender<DateTime<Utc>>,
}

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> ManualClock {
        ManualClock {
            now: Mutex::new(start),
            changed: watch::channel(start).0,
        }
    }

    /// Sets the time (forwards or backwards) and wakes every sleeper.
    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(|p| p.into_inner()) = to;
        self.changed.send_replace(to);
    }

    pub fn advance(&self, by: chrono::TimeDelta) {
        self.set(self.now() + by);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sleep_until(&self, deadline: DateTime<Utc>) -> WaitFuture<'_> {
        let mut rx = self.changed.subscribe();
        Box::pin(async move {
            while self.now() < deadline {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    #[tokio::test]
    async fn manual_clock_wakes_sleepers_only_when_due() {
        let start = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let clock = std::sync::Arc::new(ManualClock::new(start));
        let c = clock.clone();
        let waiter =
            tokio::spawn(async move { c.sleep_until(start + TimeDelta::seconds(10)).await });
        clock.advance(TimeDelta::seconds(5));
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        clock.advance(TimeDelta::seconds(5));
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
    }
}
