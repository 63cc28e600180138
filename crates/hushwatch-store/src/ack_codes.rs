//! Acknowledge links (issue #30): the one-time codes in firing pages, kept
//! only as SHA-256 (the HTTP side is `http::ack_link`, the minting
//! `service::delivery`).
//!
//! A code names one firing episode (stream, `firing_since`) and is valid
//! until `expires_at` (`[server] ack_link_ttl` after it was minted) or
//! until the episode stops being the stream's current one. Every send of
//! a page mints a new code and leaves the earlier ones alone: after an
//! attempt with an unknown result (the mail server took the DATA, then the
//! connection dropped) the first mail may well have arrived, and its link
//! must keep working beside the retry's.
//!
//! The first code used acknowledges the episode (the same store path as
//! `POST /v1/streams/X/acknowledge`, audited, `created_by` = "link") and,
//! in the same transaction, deletes itself and retires every other code
//! of the episode. A retired code acknowledges nothing; it is kept (hash,
//! episode, expiry) only so that opening it says "already acknowledged"
//! instead of the 404 an unknown, expired or used code gets, until it
//! expires like any other. Confirming locks the audit head, then the
//! episode's stream row (PostgreSQL's `FOR UPDATE`, the lock order of
//! every writer), then reads the code again: of two confirmations on two
//! replicas the second waits for the first to commit and then finds its
//! code deleted or retired. On SQLite (one writer, no locks) the delete of
//! the used code must remove exactly one live row, else another use won
//! and this one is refused.
//!
//! Expired codes are deleted whenever a code is minted and by housekeeping,
//! which also deletes the codes of episodes that ended.
//!
//! What a code opens and what confirming it does are decided by
//! `domain::ack_link`; this file mints the codes and reads and writes
//! their rows.

use chrono::{DateTime, Utc};

use super::audit;
use super::db::Db;
use super::ops::millis;
use super::silences::{self, firing_episode, AckOutcome};
use super::StoreError;
use hushwatch_core::audit::chain::to_hex;
pub use hushwatch_core::domain::ack_link::{code_hash, well_formed, LinkState, LinkUse};
use hushwatch_core::domain::ack_link::{
    decide, to_confirm, CodeRow, CODE_BYTES, LINK_AUTHOR, LINK_COMMENT,
};

/// Migration step (SQLite and PostgreSQL alike: only portable types).
pub(crate) const MIGRATION: &str = "CREATE TABLE ack_codes (
        code_sha256 TEXT PRIMARY KEY,
        stream      TEXT NOT NULL,
        started_at  BIGINT NOT NULL,
        created_at  BIGINT NOT NULL,
        expires_at  BIGINT NOT NULL,
        retired_at  BIGINT
    );
    CREATE INDEX ack_codes_by_episode ON ack_codes(stream, started_at);
    CREATE INDEX ack_codes_by_expiry ON ack_codes(expires_at);";

/// A freshly minted code: the text for the link and its hash for the store.
/// No `Debug`: the text must not reach a log by accident.
pub struct NewCode {
    pub text: String,
    pub sha256: [u8; 32],
}

/// A new random code, or `None` when the system generator fails (the page
/// then goes out without a link). The randomness is ring's `SystemRandom`
/// (the OS generator) through the rustls provider already linked for TLS.
pub fn new_code() -> Option<NewCode> {
    use base64::Engine as _;
    let mut bytes = [0u8; CODE_BYTES];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .ok()?;
    let text = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let sha256 = code_hash(&text);
    Some(NewCode { text, sha256 })
}

/// A row of [`sql::FIND`].
pub(crate) fn code_row(
    (sha256, stream, started_at, expires_at, retired_at): (String, String, i64, i64, Option<i64>),
) -> CodeRow {
    CodeRow {
        sha256,
        stream,
        started_at,
        expires_at,
        retired: retired_at.is_some(),
    }
}

/// The statements both engines run, `$N` placeholders (SQLite reads `?N`,
/// `store::db`).
pub(crate) mod sql {
    pub const PRUNE_EXPIRED: &str = "DELETE FROM ack_codes WHERE expires_at <= $1";
    /// Expired codes and those of episodes that are no longer firing.
    pub const PRUNE: &str = "DELETE FROM ack_codes WHERE expires_at <= $1
         OR NOT EXISTS (SELECT 1 FROM streams s WHERE s.name = ack_codes.stream
                        AND s.alert_state = 'firing' AND s.firing_since = ack_codes.started_at)";
    pub const INSERT: &str = "INSERT INTO ack_codes
         (code_sha256, stream, started_at, created_at, expires_at, retired_at)
         VALUES ($1, $2, $3, $4, $5, NULL)";
    pub const FIND: &str = "SELECT code_sha256, stream, started_at, expires_at, retired_at
         FROM ack_codes WHERE code_sha256 = $1";
    /// The used code goes: exactly one live row, or another use won.
    pub const TAKE: &str = "DELETE FROM ack_codes WHERE code_sha256 = $1 AND retired_at IS NULL";
    pub const RETIRE_SIBLINGS: &str = "UPDATE ack_codes SET retired_at = $3
         WHERE stream = $1 AND started_at = $2 AND retired_at IS NULL";
}

/// The code row stored under `hash`, if any.
async fn find<D: Db>(db: &D, hash: &str) -> Result<Option<CodeRow>, StoreError> {
    Ok(db.opt(sql::FIND, &[&hash]).await?.map(code_row))
}

pub(super) async fn mint<D: Db>(
    db: &D,
    code: &[u8; 32],
    stream: &str,
    started_at: DateTime<Utc>,
    now: DateTime<Utc>,
    expires_at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    db.exec(sql::PRUNE_EXPIRED, &[&millis(now)]).await?;
    let state = silences::peek_stream_state(db, stream).await?;
    if firing_episode(state) != Some(millis(started_at)) {
        return Ok(false);
    }
    db.exec(
        sql::INSERT,
        &[
            &to_hex(code),
            &stream,
            &millis(started_at),
            &millis(now),
            &millis(expires_at),
        ],
    )
    .await?;
    Ok(true)
}

/// What a code opens; reads without locking anything.
pub(super) async fn open<D: Db>(
    db: &D,
    code: &[u8; 32],
    now: DateTime<Utc>,
) -> Result<LinkState, StoreError> {
    let hash = to_hex(code);
    let Some(row) = find(db, &hash).await? else {
        return Ok(LinkState::Unknown);
    };
    let state = silences::peek_stream_state(db, &row.stream).await?;
    let acked = silences::acknowledged(db, &row.stream, row.started_at).await?;
    Ok(decide(&hash, Some(&row), now, firing_episode(state), acked))
}

pub(super) async fn confirm<D: Db>(
    db: &D,
    code: &[u8; 32],
    now: DateTime<Utc>,
    audit: bool,
) -> Result<LinkUse, StoreError> {
    let hash = to_hex(code);
    let Some(first) = find(db, &hash).await? else {
        return Ok(LinkUse::Unknown);
    };
    // Lock order: audit head, then the stream row; then read the code
    // again, under the lock, as a concurrent confirmation left it. (On
    // SQLite nothing can have changed it in between: the second read
    // returns the first.)
    audit::lock_head(db, audit).await?;
    let state = silences::stream_state(db, &first.stream).await?;
    let row = find(db, &hash).await?;
    let acked = silences::acknowledged(db, &first.stream, first.started_at).await?;
    let link = decide(&hash, row.as_ref(), now, firing_episode(state), acked);
    let (stream, started_at) = match to_confirm(link) {
        Ok(episode) => episode,
        Err(answer) => return Ok(answer),
    };
    if db.exec(sql::TAKE, &[&hash]).await? != 1 {
        // Another use of this code (or a sibling, which retired it) won.
        return Ok(LinkUse::AlreadyAcknowledged { stream, started_at });
    }
    db.exec(
        sql::RETIRE_SIBLINGS,
        &[&stream, &millis(started_at), &millis(now)],
    )
    .await?;
    let outcome = silences::acknowledge(db, &stream, LINK_AUTHOR, LINK_COMMENT, now, audit).await?;
    use_outcome(outcome, stream, started_at)
}

/// The acknowledgement's outcome as a link use: it must name the episode
/// the code did (the stream row was read in the same transaction).
pub(crate) fn use_outcome(
    outcome: AckOutcome,
    stream: String,
    started_at: DateTime<Utc>,
) -> Result<LinkUse, StoreError> {
    match outcome {
        AckOutcome::Acknowledged(at) if at == started_at => {
            Ok(LinkUse::Acknowledged { stream, started_at })
        }
        other => Err(StoreError::Sql(format!(
            "acknowledging through a link found {other:?}, not the episode the link names"
        ))),
    }
}

pub(super) async fn prune<D: Db>(db: &D, now: DateTime<Utc>) -> Result<usize, StoreError> {
    let n = db.exec(sql::PRUNE, &[&millis(now)]).await?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_128_random_bits_in_base64url_and_hashed() {
        let a = new_code().expect("system randomness");
        let b = new_code().expect("system randomness");
        assert_eq!(a.text.len(), hushwatch_core::domain::ack_link::CODE_LEN);
        assert!(well_formed(&a.text), "{}", a.text);
        assert_ne!(a.text, b.text);
        assert_eq!(a.sha256, code_hash(&a.text));
    }

    #[test]
    fn a_stored_code_row_reads_retired_from_its_retirement_time() {
        let row = code_row(("ab".into(), "s".into(), 1, 2, Some(3)));
        assert!(row.retired && row.started_at == 1 && row.expires_at == 2);
    }
}
