//! `store::ack_codes` on PostgreSQL: the same statements and decision.
//! Confirming locks the audit head, then the episode's stream row
//! (`FOR UPDATE`, the lock order of every writer), then re-reads the code:
//! of two confirmations on two replicas the second waits for the first to
//! commit and then finds its code deleted or retired.

use chrono::{DateTime, Utc};

use super::silences::{acknowledge, acknowledged, lock_head, stream_state};
use super::sql::{exec, get, ms, opt, Tx};
use crate::audit::chain::to_hex;
use crate::store::ack_codes::{
    code_row, decide, sql, to_confirm, use_outcome, CodeRow, LinkState, LinkUse, LINK_AUTHOR,
    LINK_COMMENT,
};
use crate::store::db::Columns;
use crate::store::silences::{firing_episode, sql as silence_sql};
use crate::store::{AlertState, StoreError};

async fn find(tx: &Tx<'_>, hash: &str) -> Result<Option<CodeRow>, StoreError> {
    let row = opt(tx, sql::FIND, &[&hash]).await?;
    Ok(row.as_ref().map(Columns::pg).transpose()?.map(code_row))
}

/// The stream's (state, firing_since) without a lock (for reads).
async fn peek_state(
    tx: &Tx<'_>,
    stream: &str,
) -> Result<Option<(AlertState, Option<i64>)>, StoreError> {
    match opt(tx, silence_sql::STREAM_STATE, &[&stream]).await? {
        Some(s) => Ok(Some((super::sql::state(get(&s, 0)?)?, get(&s, 1)?))),
        None => Ok(None),
    }
}

pub(super) async fn mint(
    tx: &Tx<'_>,
    code: &[u8; 32],
    stream: &str,
    started_at: DateTime<Utc>,
    now: DateTime<Utc>,
    expires_at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    exec(tx, sql::PRUNE_EXPIRED, &[&ms(now)]).await?;
    if firing_episode(peek_state(tx, stream).await?) != Some(ms(started_at)) {
        return Ok(false);
    }
    let hash = to_hex(code);
    exec(
        tx,
        sql::INSERT,
        &[&hash, &stream, &ms(started_at), &ms(now), &ms(expires_at)],
    )
    .await?;
    Ok(true)
}

pub(super) async fn open(
    tx: &Tx<'_>,
    code: &[u8; 32],
    now: DateTime<Utc>,
) -> Result<LinkState, StoreError> {
    let hash = to_hex(code);
    let Some(row) = find(tx, &hash).await? else {
        return Ok(LinkState::Unknown);
    };
    let state = peek_state(tx, &row.stream).await?;
    let acked = acknowledged(tx, &row.stream, row.started_at).await?;
    Ok(decide(&hash, Some(&row), now, state, acked))
}

pub(super) async fn confirm(
    tx: &Tx<'_>,
    code: &[u8; 32],
    now: DateTime<Utc>,
    audit: bool,
) -> Result<LinkUse, StoreError> {
    let hash = to_hex(code);
    let Some(first) = find(tx, &hash).await? else {
        return Ok(LinkUse::Unknown);
    };
    // Lock order: audit head, then the stream row; then read the code
    // again, under the lock, as a concurrent confirmation left it.
    lock_head(tx, audit).await?;
    let state = stream_state(tx, &first.stream).await?;
    let row = find(tx, &hash).await?;
    let acked = acknowledged(tx, &first.stream, first.started_at).await?;
    let (stream, started_at) = match to_confirm(decide(&hash, row.as_ref(), now, state, acked)) {
        Ok(episode) => episode,
        Err(answer) => return Ok(answer),
    };
    if exec(tx, sql::TAKE, &[&hash]).await? != 1 {
        return Ok(LinkUse::AlreadyAcknowledged { stream, started_at });
    }
    exec(
        tx,
        sql::RETIRE_SIBLINGS,
        &[&stream, &ms(started_at), &ms(now)],
    )
    .await?;
    let outcome = acknowledge(tx, &stream, LINK_AUTHOR, LINK_COMMENT, now, audit).await?;
    use_outcome(outcome, stream, started_at)
}

pub(super) async fn prune(tx: &Tx<'_>, now: DateTime<Utc>) -> Result<usize, StoreError> {
    let n = exec(tx, sql::PRUNE, &[&ms(now)]).await?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}
