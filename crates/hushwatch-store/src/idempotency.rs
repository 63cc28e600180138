//! `Idempotency-Key` records for the operator routes (issue #30; the HTTP
//! side is `http::idempotency`).
//!
//! A record is keyed by the SHA-256 of (credential, method + route
//! template, key), so no raw key and no token is ever stored, and holds
//! the SHA-256 of the request it answered (method, path and query, body).
//! Its life: `begin` inserts it as `running` (or finds it), the route runs,
//! then `finish` stores a 2xx answer as `done`, or `release` deletes it
//! (any other answer, so a retry runs again). Everything expires [`TTL`]
//! after it began and is pruned by housekeeping.
//!
//! `begin` is one statement, an upsert on the primary key: of several
//! callers (threads or replicas sharing a PostgreSQL database) presenting
//! the same key at once exactly one gets `Claimed`. PostgreSQL's
//! `INSERT … ON CONFLICT` waits for a concurrent uncommitted insert of the
//! same key and then takes the conflict path ("either inserts or updates,
//! but never both … atomic outcome", <https://www.postgresql.org/docs/current/sql-insert.html#SQL-ON-CONFLICT>);
//! SQLite has one writer.

use chrono::{DateTime, TimeDelta, Utc};

use super::db::Db;
use super::StoreError;
use hushwatch_core::audit::chain::to_hex;

/// How long a record (and so a replay) lives after its call began. Clients
/// retry within minutes; a day covers a retrying job run from a daily cron
/// without growing the table with every call ever made.
pub const TTL: TimeDelta = TimeDelta::hours(24);

/// A `running` record older than this is taken over by the next call with
/// its key: the call that wrote it died (a crash, a lost connection)
/// without finishing. A route runs for at most a few store timeouts (10 s
/// each) once its body is read, so a live call is never overtaken.
pub const LEASE: TimeDelta = TimeDelta::seconds(120);

/// Migration step (SQLite and PostgreSQL alike: only portable types, so
/// `migrate-store` copies it column by column).
pub(crate) const MIGRATION: &str = "CREATE TABLE idempotency_keys (
        key_sha256     TEXT PRIMARY KEY,
        request_sha256 TEXT NOT NULL,
        state          TEXT NOT NULL,
        status         INTEGER,
        content_type   TEXT,
        body           TEXT,
        started_at     BIGINT NOT NULL,
        expires_at     BIGINT NOT NULL
    );
    CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys(expires_at);";

/// One call's identity: hashes only (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdempotencyKey {
    /// SHA-256 of (credential, method + route template, key).
    pub key_sha256: [u8; 32],
    /// SHA-256 of (method, path and query, body).
    pub request_sha256: [u8; 32],
}

/// A stored successful answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAnswer {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

/// What [`super::backend::Operations::idempotency_begin`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begun {
    /// This call owns the key now; run it. The instant is its claim, to
    /// give back to `finish` or `release`.
    Claimed(DateTime<Utc>),
    /// Another call with this key has not finished yet.
    Running,
    /// The key answered a different request.
    Mismatch,
    /// The key's answer, to replay.
    Done(StoredAnswer),
}

/// `$1` key, `$2` request, `$3` now, `$4` expires, `$5` stale before. Takes
/// over an expired record, or a `running` one whose lease ran out.
const BEGIN_SQL: &str = "INSERT INTO idempotency_keys
         (key_sha256, request_sha256, state, status, content_type, body, started_at, expires_at)
     VALUES ($1, $2, 'running', NULL, NULL, NULL, $3, $4)
     ON CONFLICT (key_sha256) DO UPDATE SET
         request_sha256 = excluded.request_sha256, state = 'running', status = NULL,
         content_type = NULL, body = NULL, started_at = excluded.started_at,
         expires_at = excluded.expires_at
     WHERE idempotency_keys.expires_at <= $3
        OR (idempotency_keys.state = 'running' AND idempotency_keys.started_at <= $5)
     RETURNING key_sha256";
const FIND_SQL: &str =
    "SELECT request_sha256, state, status, content_type, body FROM idempotency_keys
     WHERE key_sha256 = $1";
const FINISH_SQL: &str = "UPDATE idempotency_keys
     SET state = 'done', status = $1, content_type = $2, body = $3
     WHERE key_sha256 = $4 AND request_sha256 = $5 AND state = 'running' AND started_at = $6";
const RELEASE_SQL: &str = "DELETE FROM idempotency_keys
     WHERE key_sha256 = $1 AND request_sha256 = $2 AND state = 'running' AND started_at = $3";
const PRUNE_SQL: &str = "DELETE FROM idempotency_keys WHERE expires_at <= $1";

/// The stored (hex) forms of a key's two hashes.
fn hex(key: &IdempotencyKey) -> (String, String) {
    (to_hex(&key.key_sha256), to_hex(&key.request_sha256))
}

/// A row of `FIND_SQL`: request, state, status, content type, body.
type FoundRow = (String, String, Option<i32>, Option<String>, Option<String>);

/// The row `FIND_SQL` read, as an answer to `begin` (`None`: no row).
fn found(request: &str, row: Option<FoundRow>) -> Result<Begun, StoreError> {
    let Some((stored_request, state, status, content_type, body)) = row else {
        // Released between the upsert and this read: the other call
        // answered with an error and a retry may run; say "busy, retry".
        return Ok(Begun::Running);
    };
    if stored_request != request {
        return Ok(Begun::Mismatch);
    }
    match (state.as_str(), status, content_type, body) {
        ("running", ..) => Ok(Begun::Running),
        ("done", Some(status), Some(content_type), Some(body)) => Ok(Begun::Done(StoredAnswer {
            status: u16::try_from(status)
                .map_err(|_| StoreError::Sql(format!("stored status {status} out of range")))?,
            content_type,
            body,
        })),
        (state, ..) => Err(StoreError::Sql(format!(
            "idempotency record in unknown state {state:?}"
        ))),
    }
}

/// [`BEGIN_SQL`]'s parameters after the hashes: now, expiry, stale before.
fn begin_times(now: DateTime<Utc>) -> [i64; 3] {
    [now, now + TTL, now - LEASE].map(|t| t.timestamp_millis())
}

pub(super) async fn begin<D: Db>(
    db: &D,
    key: &IdempotencyKey,
    now: DateTime<Utc>,
) -> Result<Begun, StoreError> {
    // Millisecond resolution, as stored: the claim instant must compare
    // equal to what `finish` and `release` match on.
    let now = DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now);
    let (k, r) = hex(key);
    let [at, expires, stale] = begin_times(now);
    let claimed: Option<(String,)> = db.opt(BEGIN_SQL, &[&k, &r, &at, &expires, &stale]).await?;
    if claimed.is_some() {
        return Ok(Begun::Claimed(now));
    }
    found(&r, db.opt(FIND_SQL, &[&k]).await?)
}

pub(super) async fn finish<D: Db>(
    db: &D,
    key: &IdempotencyKey,
    started: DateTime<Utc>,
    answer: &StoredAnswer,
) -> Result<bool, StoreError> {
    let (k, r) = hex(key);
    let n = db
        .exec(
            FINISH_SQL,
            &[
                &i32::from(answer.status),
                &answer.content_type,
                &answer.body,
                &k,
                &r,
                &started.timestamp_millis(),
            ],
        )
        .await?;
    Ok(n == 1)
}

pub(super) async fn release<D: Db>(
    db: &D,
    key: &IdempotencyKey,
    started: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let (k, r) = hex(key);
    let n = db
        .exec(RELEASE_SQL, &[&k, &r, &started.timestamp_millis()])
        .await?;
    Ok(n == 1)
}

pub(super) async fn prune<D: Db>(db: &D, now: DateTime<Utc>) -> Result<usize, StoreError> {
    let n = db.exec(PRUNE_SQL, &[&now.timestamp_millis()]).await?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}
