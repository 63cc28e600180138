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

use chrono::{DateTime, TimeDelta, Utc};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::core;
use super::db::Db;
use super::ops::millis;
use super::silences::{self, firing_episode, time, AckOutcome};
use super::{AlertState, StoreError};
use crate::audit::chain::to_hex;

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

/// Random bytes in a code: 128 bits, beyond guessing at any request rate.
pub const CODE_BYTES: usize = 16;
/// Characters of a code in a URL (base64url without padding).
pub const CODE_LEN: usize = 22;

/// The comment of an acknowledgement made through a link (the audit entry
/// and `GET /v1/silences` show it beside `created_by` = [`LINK_AUTHOR`]).
pub const LINK_COMMENT: &str = "acknowledged from the link in a page";
pub const LINK_AUTHOR: &str = "link";

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

/// True for text shaped like a code: anything else is unknown without a
/// store read (a bounded, cheap refusal for junk in the path).
pub fn well_formed(text: &str) -> bool {
    text.len() == CODE_LEN
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// What the store keeps of a code: SHA-256 of its text.
pub fn code_hash(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

/// What a code opens (`GET /ack/{code}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkState {
    /// Unknown, expired, used, or its episode ended: one answer for all.
    Unknown,
    /// The episode can be acknowledged with this code.
    Open {
        stream: String,
        started_at: DateTime<Utc>,
    },
    /// Another link (or the API) acknowledged the episode already.
    AlreadyAcknowledged {
        stream: String,
        started_at: DateTime<Utc>,
    },
}

/// What confirming a code did (`POST /ack/{code}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkUse {
    Unknown,
    Acknowledged {
        stream: String,
        started_at: DateTime<Utc>,
    },
    AlreadyAcknowledged {
        stream: String,
        started_at: DateTime<Utc>,
    },
}

/// A stored code row: hash (hex), stream, episode start, expiry, retired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CodeRow {
    pub sha256: String,
    pub stream: String,
    pub started_at: i64,
    pub expires_at: i64,
    pub retired: bool,
}

/// The decision behind both routes, from the row found by hash, the
/// stream's (state, firing_since) and whether the episode is acknowledged.
/// The stored hash is compared with the presented one in constant time
/// (the lookup by primary key already matched it; this keeps the answer
/// independent of how a hash index compares).
pub(crate) fn decide(
    presented: &str,
    row: Option<&CodeRow>,
    now: DateTime<Utc>,
    stream_state: Option<(AlertState, Option<i64>)>,
    acknowledged: bool,
) -> LinkState {
    let Some(row) = row else {
        return LinkState::Unknown;
    };
    let same: bool = row.sha256.as_bytes().ct_eq(presented.as_bytes()).into();
    if !same || row.expires_at <= millis(now) {
        return LinkState::Unknown;
    }
    // Valid only while its episode is the stream's current firing one.
    if firing_episode(stream_state) != Some(row.started_at) {
        return LinkState::Unknown;
    }
    let (stream, started_at) = (row.stream.clone(), time(row.started_at));
    if row.retired || acknowledged {
        LinkState::AlreadyAcknowledged { stream, started_at }
    } else {
        LinkState::Open { stream, started_at }
    }
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

/// What confirming a code does with what it opens: `Ok` names the episode
/// to acknowledge (take the code, retire its siblings), `Err` is the
/// answer without writing anything.
pub(crate) fn to_confirm(state: LinkState) -> Result<(String, DateTime<Utc>), LinkUse> {
    match state {
        LinkState::Open { stream, started_at } => Ok((stream, started_at)),
        LinkState::AlreadyAcknowledged { stream, started_at } => {
            Err(LinkUse::AlreadyAcknowledged { stream, started_at })
        }
        // Unknown, or (PostgreSQL) deleted under us by a concurrent use of
        // this very code: to this request it is a used code, like a replay.
        LinkState::Unknown => Err(LinkUse::Unknown),
    }
}

/// The expiry of a code minted at `now`.
pub(crate) fn expiry(now: DateTime<Utc>, ttl: TimeDelta) -> DateTime<Utc> {
    now.checked_add_signed(ttl)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
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
    Ok(decide(&hash, Some(&row), now, state, acked))
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
    core::lock_head(db, audit).await?;
    let state = silences::stream_state(db, &first.stream).await?;
    let row = find(db, &hash).await?;
    let acked = silences::acknowledged(db, &first.stream, first.started_at).await?;
    let (stream, started_at) = match to_confirm(decide(&hash, row.as_ref(), now, state, acked)) {
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

impl super::Store {
    /// Stores a new code for the episode of `stream` that started at
    /// `started_at`, valid for `ttl`; deletes expired codes. False (nothing
    /// stored) when that episode is no longer the stream's firing one.
    pub async fn mint_ack_code(
        &self,
        code: [u8; 32],
        stream: String,
        started_at: DateTime<Utc>,
        ttl: TimeDelta,
    ) -> Result<bool, StoreError> {
        let now = self.clock.now();
        self.backend
            .mint_ack_code(code, stream, started_at, now, expiry(now, ttl))
            .await
    }

    /// What the code (by its hash) opens; changes nothing.
    pub async fn open_ack_code(&self, code: [u8; 32]) -> Result<LinkState, StoreError> {
        let now = self.clock.now();
        self.backend.open_ack_code(code, now).await
    }

    /// Acknowledges the code's episode and retires its other codes (see
    /// the module documentation).
    pub async fn confirm_ack_code(
        &self,
        code: [u8; 32],
        audit: bool,
    ) -> Result<LinkUse, StoreError> {
        let now = self.clock.now();
        self.backend.confirm_ack_code(code, now, audit).await
    }

    /// Deletes expired codes and those of ended episodes; how many went.
    pub async fn prune_ack_codes(&self) -> Result<usize, StoreError> {
        let now = self.clock.now();
        self.backend.prune_ack_codes(now).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(retired: bool) -> CodeRow {
        CodeRow {
            sha256: "ab".repeat(32),
            stream: "s".into(),
            started_at: 5_000,
            expires_at: 10_000,
            retired,
        }
    }

    fn at(ms: i64) -> DateTime<Utc> {
        time(ms)
    }

    const FIRING: Option<(AlertState, Option<i64>)> = Some((AlertState::Firing, Some(5_000)));

    #[test]
    fn a_code_opens_only_its_live_unexpired_current_episode() {
        let hash = "ab".repeat(32);
        let open = LinkState::Open {
            stream: "s".into(),
            started_at: at(5_000),
        };
        let acked = LinkState::AlreadyAcknowledged {
            stream: "s".into(),
            started_at: at(5_000),
        };
        assert_eq!(
            decide(&hash, Some(&row(false)), at(9_999), FIRING, false),
            open
        );
        assert_eq!(
            decide(&hash, None, at(1), FIRING, false),
            LinkState::Unknown
        );
        // Expired, or another hash (never returned by the lookup, but the
        // comparison decides, not the index).
        assert_eq!(
            decide(&hash, Some(&row(false)), at(10_000), FIRING, false),
            LinkState::Unknown
        );
        assert_eq!(
            decide(&"cd".repeat(32), Some(&row(false)), at(1), FIRING, false),
            LinkState::Unknown
        );
        // The episode resolved, or a new one started.
        for state in [
            Some((AlertState::Ok, None)),
            Some((AlertState::Firing, Some(6_000))),
            None,
        ] {
            assert_eq!(
                decide(&hash, Some(&row(false)), at(1), state, false),
                LinkState::Unknown
            );
        }
        // Retired by a sibling's use, or acknowledged through the API.
        assert_eq!(decide(&hash, Some(&row(true)), at(1), FIRING, false), acked);
        assert_eq!(decide(&hash, Some(&row(false)), at(1), FIRING, true), acked);
        // An expired retired code is unknown like any other.
        assert_eq!(
            decide(&hash, Some(&row(true)), at(10_000), FIRING, false),
            LinkState::Unknown
        );
    }

    #[test]
    fn only_an_open_code_is_taken_the_rest_answer_without_writing() {
        let (stream, started_at) = ("s".to_string(), at(5_000));
        let open = LinkState::Open {
            stream: stream.clone(),
            started_at,
        };
        assert_eq!(to_confirm(open), Ok((stream.clone(), started_at)));
        let acked = LinkState::AlreadyAcknowledged {
            stream: stream.clone(),
            started_at,
        };
        let answer = LinkUse::AlreadyAcknowledged { stream, started_at };
        assert_eq!(to_confirm(acked), Err(answer));
        assert_eq!(to_confirm(LinkState::Unknown), Err(LinkUse::Unknown));
        let row = code_row(("ab".into(), "s".into(), 1, 2, Some(3)));
        assert!(row.retired && row.started_at == 1 && row.expires_at == 2);
    }

    #[test]
    fn codes_are_128_random_bits_in_base64url_and_hashed() {
        let a = new_code().expect("system randomness");
        let b = new_code().expect("system randomness");
        assert_eq!(a.text.len(), CODE_LEN);
        assert!(well_formed(&a.text), "{}", a.text);
        assert_ne!(a.text, b.text);
        assert_eq!(a.sha256, code_hash(&a.text));
        assert!(!well_formed("short"));
        assert!(!well_formed(&"a".repeat(CODE_LEN + 1)));
        assert!(!well_formed(&format!("{}=", "a".repeat(CODE_LEN - 1))));
        assert!(!well_formed(&format!("{}%", "a".repeat(CODE_LEN - 1))));
    }

    #[test]
    fn the_expiry_saturates() {
        assert_eq!(expiry(at(1_000), TimeDelta::seconds(1)), at(2_000));
        assert_eq!(
            expiry(DateTime::<Utc>::MAX_UTC, TimeDelta::seconds(1)),
            DateTime::<Utc>::MAX_UTC
        );
    }
}
