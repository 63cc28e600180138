//! The core row operations the others build on (the audit append, an
//! event's record, the stream clock, keyed pages), callable from any
//! operation written over [`Db`].
//!
//! Each still runs its engine's own implementation (`Db::core_*`) until it
//! is folded here (issue #28); callers are already written once.

use chrono::{DateTime, Utc};

use super::db::Db;
use super::ops::KeyedAlert;
use super::{EventOutcome, NewEvent, StoreError, StreamRow, Transition};

/// Appends `event` to the audit chain in the caller's transaction.
pub(super) async fn append_audit<D: Db>(db: &D, event: &NewEvent) -> Result<(), StoreError> {
    db.core_append_audit(event).await
}

/// Takes the audit head's row lock when the transaction will append,
/// before any other row lock, so every appending transaction locks
/// head → rows and queues on the same first lock. (SQLite's one writer
/// needs no lock.)
pub(super) async fn lock_head<D: Db>(db: &D, audit: bool) -> Result<(), StoreError> {
    if audit && !D::ROW_LOCK.is_empty() {
        let _: (i64,) = db
            .one(&D::locked("SELECT seq FROM audit_head WHERE id = 1"), &[])
            .await?;
    }
    Ok(())
}

/// [`lock_head`] for a batch: when any of `events` is chained.
pub(super) async fn lock_audit_head<D: Db>(db: &D, events: &[NewEvent]) -> Result<(), StoreError> {
    lock_head(db, events.iter().any(|e| e.audit)).await
}

/// Records one event as ingest does (dedup, stream clock, audit).
pub(super) async fn record_event<D: Db>(
    db: &D,
    event: &NewEvent,
) -> Result<EventOutcome, StoreError> {
    db.core_record_event(event).await
}

/// Moves the stream's arrival clock to `event` if it is newer.
pub(super) async fn advance_clock<D: Db>(db: &D, event: &NewEvent) -> Result<(), StoreError> {
    db.core_advance_clock(event).await
}

pub(super) async fn stream_row<D: Db>(db: &D, name: &str) -> Result<Option<StreamRow>, StoreError> {
    db.core_stream_row(name).await
}

pub(super) async fn keyed_alert_id<D: Db>(
    db: &D,
    alert: &KeyedAlert<'_>,
) -> Result<String, StoreError> {
    db.core_keyed_alert_id(alert).await
}

/// Queues a keyed alert's pages unless a silence holds them; whether any
/// page was queued.
pub(super) async fn queue_keyed_pages<D: Db>(
    db: &D,
    t: &Transition,
    created_at: DateTime<Utc>,
    alert: &KeyedAlert<'_>,
) -> Result<bool, StoreError> {
    db.core_queue_keyed_pages(t, created_at, alert).await
}

pub(super) async fn insert_keyed_page<D: Db>(
    db: &D,
    t: &Transition,
    notifier: &str,
    created_at: DateTime<Utc>,
    alert: &KeyedAlert<'_>,
) -> Result<(), StoreError> {
    db.core_insert_keyed_page(t, notifier, created_at, alert)
        .await
}

pub(super) async fn insert_silence_page<D: Db>(
    db: &D,
    t: &Transition,
    notifier: &str,
    created_at: DateTime<Utc>,
) -> Result<(), StoreError> {
    db.core_insert_silence_page(t, notifier, created_at).await
}
