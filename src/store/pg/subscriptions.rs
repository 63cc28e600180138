//! `store::subscriptions` on PostgreSQL: the same decisions (the pure functions of
//! `store::subscriptions`) from the same rows, with the same statements
//! (`store::subscriptions::sql`); the alert row is locked for its compare-and-set.

use chrono::{DateTime, Utc};

use super::ops::queue_keyed_pages;
use super::sql::{exec, get, ms, opt, rows, state, state_str, Tx};
use crate::store::db::Columns;
use crate::store::subscriptions::{
    horizon, over_cap, plausible_expiries, sql, subscription_row, transition_move, RowCols,
    SubscriptionRow, SubscriptionTransition, SubscriptionUpdate, MAX_PER_STREAM,
};
use crate::store::StoreError;

pub(super) async fn record(
    tx: &Tx<'_>,
    update: &SubscriptionUpdate,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let seen = update.carried_events.then(|| ms(now));
    for e in plausible_expiries(update, now) {
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
            &update.stream,
            &e.subscription,
            &ms(e.expires_at),
            &seen,
            &ms(now),
            &ms(horizon(now)),
        ];
        exec(tx, sql::RECORD_EXPIRY, &params).await?;
    }
    for notice in &update.lifecycle {
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&update.stream, &notice.subscription, &ms(now)];
        exec(tx, sql::REAUTH, &params).await?;
    }
    if !update.expiries.is_empty() {
        let stored = rows(tx, sql::CAP_ROWS, &[&update.stream])
            .await?
            .iter()
            .map(Columns::pg)
            .collect::<Result<Vec<_>, StoreError>>()?;
        for subscription in over_cap(stored, MAX_PER_STREAM) {
            exec(tx, sql::EVICT, &[&update.stream, &subscription]).await?;
        }
    }
    Ok(())
}

pub(super) async fn all(tx: &Tx<'_>) -> Result<Vec<SubscriptionRow>, StoreError> {
    rows(tx, sql::ALL, &[])
        .await?
        .iter()
        .map(|r| subscription_row(RowCols::pg(r)?, state(get(r, 6)?)?))
        .collect()
}

/// Compare-and-set on the subscription's alert state (row locked: replicas share this
/// database), then one warning page per notifier.
pub(super) async fn transition(
    tx: &Tx<'_>,
    t: &SubscriptionTransition,
) -> Result<bool, StoreError> {
    let locked = format!("{} FOR UPDATE", sql::CURRENT);
    let current = match opt(tx, &locked, &[&t.stream, &t.subscription]).await? {
        Some(r) => Some((state(get(&r, 0)?)?, get(&r, 1)?)),
        None => None,
    };
    let Some(m) = transition_move(current, t) else {
        return Ok(false);
    };
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
        [&t.stream, &t.subscription, &state_str(&t.to), &m.concern];
    exec(tx, sql::SET_STATE, &params).await?;
    queue_keyed_pages(tx, &m.page, t.at, &m.alert()).await?;
    Ok(true)
}
