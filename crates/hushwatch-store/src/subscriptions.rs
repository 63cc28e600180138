//! Provider subscriptions that must be renewed (Entra subscriptions, Google channels):
//! their last known expiry, whether the provider asked for reauthorization, and the warning
//! alert's state. Updated in the same transaction as the delivery that revealed them.
//!
//! Which expiries are kept, which rows the cap evicts and the kind of a warning's pages
//! are decided in `domain::subscription`; what an alert transition writes and pages is
//! decided here (`transition_move`). The statements both engines run are written once
//! in `sql`, and the operations that read rows, call the decisions and write their
//! outcome are written once over `store::db::Db`.

use chrono::{DateTime, Utc};
use hushwatch_core::domain::alert_kind::AlertKind;

use super::db::Db;
use super::ops::{millis, KeyedAlert};
use super::{core, outbox};
use super::{stored_time, AlertState, StoreError, Transition};
pub use hushwatch_core::domain::subscription::MAX_PER_STREAM;
use hushwatch_core::domain::subscription::{
    horizon, is_plausible, over_cap, page_kind, MAX_LIFETIME,
};
use hushwatch_core::ingest::providers::{LifecycleNotice, SubscriptionExpiry};

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

/// The expiries of `update` worth storing at `now`: those no provider could have sent are
/// dropped (see `domain::subscription::MAX_LIFETIME`).
fn plausible_expiries(
    update: &SubscriptionUpdate,
    now: DateTime<Utc>,
) -> impl Iterator<Item = &SubscriptionExpiry> {
    update
        .expiries
        .iter()
        .filter(move |e| is_plausible(e.expires_at, now, MAX_LIFETIME))
}

/// A subscription alert moving to `to`, with the pages it causes, in one transaction.
#[derive(Debug, Clone)]
pub struct SubscriptionTransition {
    pub stream: String,
    pub subscription: String,
    pub to: AlertState,
    /// The alert kind while firing (`subscription_expiring`, …); `None` on a resolve, which
    /// keeps the kind it fired with.
    pub kind: Option<AlertKind>,
    pub reason: String,
    pub notifiers: Vec<String>,
    pub at: DateTime<Utc>,
}

// ---------------------------------------------------------------------------
// What a transition writes (pure, taken once for both engines), and reading
// the rows.
// ---------------------------------------------------------------------------

/// What a subscription transition writes and pages.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Move {
    /// The alert kind of its pages (`domain::subscription::page_kind`; the
    /// kind it fired with is kept as the row's `concern`).
    pub kind: AlertKind,
    /// The row's new `concern`: the kind while firing, none once resolved.
    pub concern: Option<String>,
    /// The page, keyed by stream and subscription so its firing and
    /// resolved pages share an alert id.
    pub page: Transition,
    key: String,
    subscription: String,
}

impl Move {
    pub(super) fn alert(&self) -> KeyedAlert<'_> {
        KeyedAlert {
            kind: self.kind,
            family: "subscription",
            key: &self.key,
            severity: "warning",
            source: "subscription",
            endpoint_id: &self.subscription,
        }
    }
}

/// Compare-and-set on the subscription's alert: `current` is its row's
/// (alert_state, concern), None without a row. None (write nothing) when
/// there is no row or the alert is already at `t.to`, so a repeated
/// evaluation never pages twice.
pub(super) fn transition_move(
    current: Option<(AlertState, Option<String>)>,
    t: &SubscriptionTransition,
) -> Option<Move> {
    let (state, fired_kind) = current?;
    if state == t.to {
        return None;
    }
    let kind = page_kind(t.kind, fired_kind.as_deref());
    Some(Move {
        concern: t.kind.map(|_| kind.as_str().to_owned()),
        kind,
        page: Transition {
            stream: t.stream.clone(),
            to: t.to.clone(),
            at: t.at,
            reason: t.reason.clone(),
            notifiers: t.notifiers.clone(),
        },
        key: format!("{}/{}", t.stream, t.subscription),
        subscription: t.subscription.clone(),
    })
}

/// [`sql::ALL`]'s columns but the state.
pub(super) type RowCols = (String, String, i64, i64, Option<i64>, Option<String>);

/// [`sql::ALL`]'s columns: [`RowCols`], then `alert_state`.
type AllCols = (
    String,
    String,
    i64,
    i64,
    Option<i64>,
    Option<String>,
    String,
);

pub(super) fn subscription_row(
    c: RowCols,
    state: AlertState,
) -> Result<SubscriptionRow, StoreError> {
    Ok(SubscriptionRow {
        stream: c.0,
        subscription: c.1,
        expires_at: stored_time(c.2)?,
        seen_at: stored_time(c.3)?,
        reauth_at: c.4.map(stored_time).transpose()?,
        state,
        concern: c.5,
    })
}

/// The statements both engines run, written once with PostgreSQL's `$N`
/// placeholders (`store::db` gives SQLite `?N`). PostgreSQL appends a row
/// lock to [`sql::CURRENT`] (`Db::locked`: replicas share it; SQLite has one
/// writer).
pub(super) mod sql {
    /// An expiry only moves forward (deliveries may arrive out of order)
    /// among plausible values: a stored one past the horizon (`$6`; stored
    /// by an older version that took any value) gives way to the next
    /// plausible one. `seen_at` (`$4`) moves only with change
    /// notifications. The CASTs give PostgreSQL a NULL's type; SQLite
    /// keeps the value. (A CASE, where SQLite would say `max(a, b)` and
    /// PostgreSQL `GREATEST(a, b)`.)
    pub const RECORD_EXPIRY: &str =
        "INSERT INTO subscriptions (stream, subscription, expires_at, seen_at)
         VALUES ($1, $2, $3, coalesce(CAST($4 AS BIGINT), CAST($5 AS BIGINT)))
         ON CONFLICT (stream, subscription) DO UPDATE SET
           expires_at = CASE WHEN subscriptions.expires_at > CAST($6 AS BIGINT)
                               OR excluded.expires_at > subscriptions.expires_at
                             THEN excluded.expires_at ELSE subscriptions.expires_at END,
           seen_at = coalesce(CAST($4 AS BIGINT), subscriptions.seen_at)";
    pub const REAUTH: &str =
        "UPDATE subscriptions SET reauth_at = $3 WHERE stream = $1 AND subscription = $2";
    /// A stream's rows, for `domain::subscription::over_cap`.
    pub const CAP_ROWS: &str =
        "SELECT subscription, seen_at, expires_at FROM subscriptions WHERE stream = $1";
    pub const EVICT: &str = "DELETE FROM subscriptions WHERE stream = $1 AND subscription = $2";
    pub const ALL: &str =
        "SELECT stream, subscription, expires_at, seen_at, reauth_at, concern, alert_state
         FROM subscriptions ORDER BY stream, subscription";
    pub const CURRENT: &str =
        "SELECT alert_state, concern FROM subscriptions WHERE stream = $1 AND subscription = $2";
    pub const SET_STATE: &str = "UPDATE subscriptions SET alert_state = $3, concern = $4
         WHERE stream = $1 AND subscription = $2";
}

// ---------------------------------------------------------------------------
// Rows, on either engine (`store::db`): read them, call the decisions, write
// the outcome.
// ---------------------------------------------------------------------------

/// Records one delivery's expiries and lifecycle notices ([`sql::RECORD_EXPIRY`]; one
/// further ahead than any provider allows is never stored, see [`plausible_expiries`]),
/// then evicts the rows past [`MAX_PER_STREAM`] (`domain::subscription::over_cap`). A lifecycle notice alone
/// never counts as proof that the subscription works.
pub(super) async fn record<D: Db>(
    db: &D,
    update: &SubscriptionUpdate,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let seen = update.carried_events.then(|| millis(now));
    for e in plausible_expiries(update, now) {
        db.exec(
            sql::RECORD_EXPIRY,
            &[
                &update.stream,
                &e.subscription,
                &millis(e.expires_at),
                &seen,
                &millis(now),
                &millis(horizon(now)),
            ],
        )
        .await?;
    }
    for notice in &update.lifecycle {
        db.exec(
            sql::REAUTH,
            &[&update.stream, &notice.subscription, &millis(now)],
        )
        .await?;
    }
    if !update.expiries.is_empty() {
        let rows = db.rows(sql::CAP_ROWS, &[&update.stream]).await?;
        for subscription in over_cap(rows, MAX_PER_STREAM) {
            db.exec(sql::EVICT, &[&update.stream, &subscription])
                .await?;
        }
    }
    Ok(())
}

pub(super) async fn all<D: Db>(db: &D) -> Result<Vec<SubscriptionRow>, StoreError> {
    let rows: Vec<AllCols> = db.rows(sql::ALL, &[]).await?;
    rows.into_iter()
        .map(|(st, sub, expires, seen, reauth, concern, state)| {
            subscription_row(
                (st, sub, expires, seen, reauth, concern),
                core::alert_state(&state)?,
            )
        })
        .collect()
}

/// Compare-and-set on the subscription's alert state (the row locked on
/// PostgreSQL: replicas share that database), then one warning page per
/// notifier ([`transition_move`]). Returns false, writing nothing, when the
/// state was already `to`.
pub(super) async fn transition<D: Db>(
    db: &D,
    t: &SubscriptionTransition,
) -> Result<bool, StoreError> {
    let current: Option<(String, Option<String>)> = db
        .opt(&D::locked(sql::CURRENT), &[&t.stream, &t.subscription])
        .await?;
    let current = match current {
        Some((state, concern)) => Some((core::alert_state(&state)?, concern)),
        None => None,
    };
    let Some(m) = transition_move(current, t) else {
        return Ok(false);
    };
    db.exec(
        sql::SET_STATE,
        &[
            &t.stream,
            &t.subscription,
            &core::state_str(&t.to),
            &m.concern,
        ],
    )
    .await?;
    outbox::queue_keyed_pages(db, &m.page, t.at, &m.alert()).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    //! The decisions both engines call (`store::conformance::subscription_alerts` runs
    //! them through both).
    use super::*;

    fn t(to: AlertState, kind: Option<AlertKind>) -> SubscriptionTransition {
        SubscriptionTransition {
            stream: "entra".into(),
            subscription: "sub-1".into(),
            to,
            kind,
            reason: "expires soon".into(),
            notifiers: vec!["pager".into()],
            at: DateTime::from_timestamp_millis(5).unwrap(),
        }
    }

    #[test]
    fn a_transition_moves_only_an_existing_row_that_is_elsewhere() {
        let firing = t(AlertState::Firing, Some(AlertKind::SubscriptionExpiring));
        assert_eq!(transition_move(None, &firing), None, "no row");
        assert_eq!(
            transition_move(Some((AlertState::Firing, None)), &firing),
            None,
            "already there"
        );
        let m = transition_move(Some((AlertState::Ok, None)), &firing).unwrap();
        assert_eq!(m.kind, AlertKind::SubscriptionExpiring);
        assert_eq!(m.concern.as_deref(), Some("subscription_expiring"));
        assert_eq!(m.page.to, AlertState::Firing);
        let alert = m.alert();
        assert_eq!(
            (alert.key, alert.endpoint_id, alert.severity, alert.family),
            ("entra/sub-1", "sub-1", "warning", "subscription")
        );
    }

    #[test]
    fn a_resolve_keeps_the_kind_it_fired_with() {
        let ok = t(AlertState::Ok, None);
        let fired = Some("subscription_reauthorization_required".to_string());
        let m = transition_move(Some((AlertState::Firing, fired.clone())), &ok).unwrap();
        assert_eq!(Some(m.kind.as_str().to_string()), fired);
        assert_eq!(m.concern, None, "cleared once resolved");
        let m = transition_move(Some((AlertState::Firing, None)), &ok).unwrap();
        assert_eq!(
            m.kind,
            AlertKind::SubscriptionExpiring,
            "kind not kept: the expiring alert"
        );
    }

    #[test]
    fn stored_rows_read_back_or_fail_when_out_of_range() {
        let cols = ("s".to_string(), "x".to_string(), 10, 5, Some(7), None);
        let row = subscription_row(cols.clone(), AlertState::Ok).unwrap();
        assert_eq!(row.reauth_at, DateTime::from_timestamp_millis(7));
        let broken = (cols.0, cols.1, i64::MAX, 5, None, None);
        assert!(subscription_row(broken, AlertState::Ok).is_err());
    }
}
