//! `store::subscriptions` on PostgreSQL: same rules, same SQL decisions.

use chrono::{DateTime, Utc};

use super::ops::queue_keyed_pages;
use super::sql::{exec, get, ms, opt, opt_time, rows, state, state_str, time, Tx};
use crate::store::ops::KeyedAlert;
use crate::store::subscriptions::{
    horizon, plausible_expiries, SubscriptionRow, SubscriptionTransition, SubscriptionUpdate,
    EXPIRING_KIND, MAX_PER_STREAM,
};
use crate::store::{StoreError, Transition};

pub(super) async fn record(
    tx: &Tx<'_>,
    update: &SubscriptionUpdate,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let seen = update.carried_events.then(|| ms(now));
    for e in plausible_expiries(update, now) {
        exec(
            tx,
            "INSERT INTO subscriptions (stream, subscription, expires_at, seen_at)
             VALUES ($1, $2, $3, coalesce($4::BIGINT, $5::BIGINT))
             ON CONFLICT (stream, subscription) DO UPDATE SET
               expires_at = CASE WHEN subscriptions.expires_at > $6::BIGINT
                                 THEN excluded.expires_at
                                 ELSE GREATEST(subscriptions.expires_at, excluded.expires_at)
                            END,
               seen_at = coalesce($4, subscriptions.seen_at)",
            &[
                &update.stream,
                &e.subscription,
                &ms(e.expires_at),
                &seen,
                &ms(now),
                &ms(horizon(now)),
            ],
        )
        .await?;
    }
    for notice in &update.lifecycle {
        exec(
            tx,
            "UPDATE subscriptions SET reauth_at = $3 WHERE stream = $1 AND subscription = $2",
            &[&update.stream, &notice.subscription, &ms(now)],
        )
        .await?;
    }
    if !update.expiries.is_empty() {
        exec(
            tx,
            "DELETE FROM subscriptions WHERE stream = $1 AND subscription IN (
               SELECT subscription FROM subscriptions WHERE stream = $1
               ORDER BY seen_at DESC, expires_at DESC OFFSET $2)",
            &[&update.stream, &MAX_PER_STREAM],
        )
        .await?;
    }
    Ok(())
}

pub(super) async fn all(tx: &Tx<'_>) -> Result<Vec<SubscriptionRow>, StoreError> {
    rows(
        tx,
        "SELECT stream, subscription, expires_at, seen_at, reauth_at, alert_state, concern
         FROM subscriptions ORDER BY stream, subscription",
        &[],
    )
    .await?
    .iter()
    .map(|r| {
        Ok(SubscriptionRow {
            stream: get(r, 0)?,
            subscription: get(r, 1)?,
            expires_at: time(get(r, 2)?)?,
            seen_at: time(get(r, 3)?)?,
            reauth_at: opt_time(get(r, 4)?)?,
            state: state(get(r, 5)?)?,
            concern: get(r, 6)?,
        })
    })
    .collect()
}

/// Compare-and-set on the subscription's alert state (row locked), then
/// one warning page per notifier.
pub(super) async fn transition(
    tx: &Tx<'_>,
    t: &SubscriptionTransition,
) -> Result<bool, StoreError> {
    let Some(row) = opt(
        tx,
        "SELECT alert_state, concern FROM subscriptions
         WHERE stream = $1 AND subscription = $2 FOR UPDATE",
        &[&t.stream, &t.subscription],
    )
    .await?
    else {
        return Ok(false);
    };
    let current = state(get(&row, 0)?)?;
    let fired_kind: Option<String> = get(&row, 1)?;
    if current == t.to {
        return Ok(false);
    }
    let kind = match (t.kind, &fired_kind) {
        (Some(kind), _) => kind.to_owned(),
        (None, Some(kind)) => kind.clone(),
        (None, None) => EXPIRING_KIND.to_owned(),
    };
    let concern = t.kind.map(|_| kind.as_str());
    exec(
        tx,
        "UPDATE subscriptions SET alert_state = $3, concern = $4
         WHERE stream = $1 AND subscription = $2",
        &[&t.stream, &t.subscription, &state_str(&t.to), &concern],
    )
    .await?;
    let key = format!("{}/{}", t.stream, t.subscription);
    let page = Transition {
        stream: t.stream.clone(),
        to: t.to.clone(),
        at: t.at,
        reason: t.reason.clone(),
        notifiers: t.notifiers.clone(),
    };
    let alert = KeyedAlert {
        kind: &kind,
        family: "subscription",
        key: &key,
        severity: "warning",
        source: "subscription",
        endpoint_id: &t.subscription,
    };
    queue_keyed_pages(tx, &page, t.at, &alert).await?;
    Ok(true)
}
