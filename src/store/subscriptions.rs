//! Provider subscriptions that must be renewed (Entra subscriptions, Google channels):
//! their last known expiry, whether the provider asked for reauthorization, and the warning
//! alert's state. Updated in the same transaction as the delivery that revealed them.

use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension};

use super::{AlertState, StoreError};
use crate::ingest::providers::{LifecycleNotice, SubscriptionExpiry};

/// Migration step: one row per (stream, subscription).
pub(super) const MIGRATION: &str = "CREATE TABLE subscriptions (
        stream           TEXT NOT NULL REFERENCES streams(name),
        subscription     TEXT NOT NULL,
        expires_at       INTEGER NOT NULL,
        seen_at          INTEGER NOT NULL,
        reauth_at        INTEGER,
        alert_state      TEXT NOT NULL DEFAULT 'ok' CHECK (alert_state IN ('ok', 'firing')),
        concern          TEXT,
        PRIMARY KEY (stream, subscription)
    );";

/// Subscriptions kept per stream. Ids come from authenticated deliveries, but a provider
/// re-creating channels every few hours (Google) would otherwise grow the table and the
/// metric's label sets without end. Past the cap, the rows whose last change notification
/// is oldest go first (ties: the earliest expiry): a genuine channel keeps delivering, so
/// ids invented once by a forger, whatever expiry they claimed, are evicted before it.
pub const MAX_PER_STREAM: i64 = 32;

/// What a delivery said about the stream's subscriptions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubscriptionUpdate {
    pub stream: String,
    pub expiries: Vec<SubscriptionExpiry>,
    pub lifecycle: Vec<LifecycleNotice>,
    /// True when the delivery carried change notifications for these subscriptions (proof
    /// that deliveries flow), false for lifecycle notices alone.
    pub carried_events: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionRow {
    pub stream: String,
    pub subscription: String,
    pub expires_at: DateTime<Utc>,
    pub seen_at: DateTime<Utc>,
    pub reauth_at: Option<DateTime<Utc>>,
    pub state: AlertState,
    /// `expiring` or `reauthorization_required` while firing.
    pub concern: Option<String>,
}

fn millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn time(ms: i64) -> rusqlite::Result<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms).ok_or(rusqlite::Error::IntegralValueOutOfRange(0, ms))
}

/// The expiries of `update` worth storing at `now`: those no provider could have sent are
/// dropped (see `domain::subscription::MAX_LIFETIME`). Shared by both backends.
pub(crate) fn plausible_expiries(
    update: &SubscriptionUpdate,
    now: DateTime<Utc>,
) -> impl Iterator<Item = &SubscriptionExpiry> {
    update.expiries.iter().filter(move |e| {
        crate::domain::subscription::is_plausible(
            e.expires_at,
            now,
            crate::domain::subscription::MAX_LIFETIME,
        )
    })
}

/// The latest expiry a stored row may keep at `now`; one past it (stored by an older
/// version that took any value) is replaced by the next plausible one.
pub(crate) fn horizon(now: DateTime<Utc>) -> DateTime<Utc> {
    now.checked_add_signed(
        crate::domain::subscription::MAX_LIFETIME + crate::domain::subscription::EXPIRY_SKEW,
    )
    .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Records one delivery's expiries and lifecycle notices. An expiry only moves forward
/// (deliveries may arrive out of order) among plausible values: one further ahead than
/// any provider allows is never stored, and a stored one that is gives way to the next
/// plausible value. `seen_at` moves only with change notifications, so a lifecycle notice
/// alone never counts as proof that the subscription works.
pub(super) fn record(
    conn: &Connection,
    update: &SubscriptionUpdate,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let seen = update.carried_events.then(|| millis(now));
    for e in plausible_expiries(update, now) {
        conn.prepare_cached(
            "INSERT INTO subscriptions (stream, subscription, expires_at, seen_at)
             VALUES (?1, ?2, ?3, coalesce(?4, ?5))
             ON CONFLICT (stream, subscription) DO UPDATE SET
               expires_at = CASE WHEN expires_at > ?6 THEN excluded.expires_at
                                 ELSE max(expires_at, excluded.expires_at) END,
               seen_at = coalesce(?4, seen_at)",
        )?
        .execute(params![
            update.stream,
            e.subscription,
            millis(e.expires_at),
            seen,
            millis(now),
            millis(horizon(now))
        ])?;
    }
    for notice in &update.lifecycle {
        conn.prepare_cached(
            "UPDATE subscriptions SET reauth_at = ?3 WHERE stream = ?1 AND subscription = ?2",
        )?
        .execute(params![update.stream, notice.subscription, millis(now)])?;
    }
    if !update.expiries.is_empty() {
        conn.prepare_cached(
            "DELETE FROM subscriptions WHERE stream = ?1 AND subscription IN (
               SELECT subscription FROM subscriptions WHERE stream = ?1
               ORDER BY seen_at DESC, expires_at DESC LIMIT -1 OFFSET ?2)",
        )?
        .execute(params![update.stream, MAX_PER_STREAM])?;
    }
    Ok(())
}

pub(super) fn all(conn: &Connection) -> Result<Vec<SubscriptionRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT stream, subscription, expires_at, seen_at, reauth_at, alert_state, concern
         FROM subscriptions ORDER BY stream, subscription",
    )?;
    let rows = stmt
        .query_map([], |row| {
            Ok(SubscriptionRow {
                stream: row.get(0)?,
                subscription: row.get(1)?,
                expires_at: time(row.get(2)?)?,
                seen_at: time(row.get(3)?)?,
                reauth_at: row.get::<_, Option<i64>>(4)?.map(time).transpose()?,
                state: row.get(5)?,
                concern: row.get(6)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Moves one subscription's alert to `to` unless it is already there (compare-and-set, so
/// a repeated evaluation never pages twice). Returns whether it moved.
pub(super) fn set_state(
    conn: &Connection,
    stream: &str,
    subscription: &str,
    to: AlertState,
    concern: Option<&str>,
) -> Result<bool, StoreError> {
    let current: Option<AlertState> = conn
        .prepare_cached(
            "SELECT alert_state FROM subscriptions WHERE stream = ?1 AND subscription = ?2",
        )?
        .query_row(params![stream, subscription], |row| row.get(0))
        .optional()?;
    if current.is_none() || current == Some(to.clone()) {
        return Ok(false);
    }
    conn.prepare_cached(
        "UPDATE subscriptions SET alert_state = ?3, concern = ?4
         WHERE stream = ?1 AND subscription = ?2",
    )?
    .execute(params![stream, subscription, to, concern])?;
    Ok(true)
}

/// A subscription alert moving to `to`, with the pages it causes, in one transaction.
#[derive(Debug, Clone)]
pub struct SubscriptionTransition {
    pub stream: String,
    pub subscription: String,
    pub to: AlertState,
    /// The alert kind while firing (`subscription_expiring`, …); `None` on a resolve, which
    /// keeps the kind it fired with.
    pub kind: Option<&'static str>,
    pub reason: String,
    pub notifiers: Vec<String>,
    pub at: DateTime<Utc>,
}

/// Compare-and-set on the subscription's alert state, then one warning page per notifier
/// (keyed by stream and subscription, so its firing and resolved pages share an alert id).
/// Returns false, writing nothing, when the state was already `to`.
pub(super) fn transition(
    conn: &Connection,
    t: &SubscriptionTransition,
) -> Result<bool, StoreError> {
    let fired_kind: Option<String> = conn
        .prepare_cached(
            "SELECT concern FROM subscriptions WHERE stream = ?1 AND subscription = ?2",
        )?
        .query_row(params![t.stream, t.subscription], |row| row.get(0))
        .optional()?
        .flatten();
    let kind = match (t.kind, &fired_kind) {
        (Some(kind), _) => kind.to_owned(),
        (None, Some(kind)) => kind.clone(),
        (None, None) => EXPIRING_KIND.to_owned(),
    };
    let concern = t.kind.map(|_| kind.as_str());
    if !set_state(conn, &t.stream, &t.subscription, t.to.clone(), concern)? {
        return Ok(false);
    }
    let key = format!("{}/{}", t.stream, t.subscription);
    let page = super::Transition {
        stream: t.stream.clone(),
        to: t.to.clone(),
        at: t.at,
        reason: t.reason.clone(),
        notifiers: t.notifiers.clone(),
    };
    super::ops::queue_keyed_pages(
        conn,
        &page,
        t.at,
        &super::ops::KeyedAlert {
            kind: &kind,
            family: "subscription",
            key: &key,
            severity: "warning",
            source: "subscription",
            endpoint_id: &t.subscription,
        },
    )?;
    Ok(true)
}

/// The kind a resolve falls back to when its firing kind was not kept.
pub(super) const EXPIRING_KIND: &str =
    crate::domain::alert_kind::AlertKind::SubscriptionExpiring.as_str();
