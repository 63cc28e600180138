//! The fallback ladder's shared state (issue #19): consecutive failed
//! attempts per notifier, counted in the store so every replica sees one
//! count and each step is paged once per deployment.
//!
//! - The attempt and the count commit in one transaction, and only for the
//!   claim holder (the fencing token of `store::replica`): a fenced attempt
//!   counts nothing.
//! - A failed attempt adds one; a delivered one resets to zero.
//! - `paged` is the highest step already paged in the current run of
//!   failures. A step is queued only when the new count equals a step
//!   above `paged` (the compare-and-set, under the row's lock), so two
//!   replicas that both see step 5 cannot both page it; a delivery after a
//!   paged step queues one recovery page and sets `paged` back to zero.
//!
//! The count is read and written once for both engines ([`settle_counted`]
//! over `store::db::Db`), under the notifier row's lock on PostgreSQL; the
//! step, the recovery and their pages' words are `domain::fallback`.

use chrono::{DateTime, Utc};

use super::db::Db;
use super::outbox;
use super::Attempt;
use super::{AlertState, StoreError, Transition};
use hushwatch_core::domain::fallback::{self as decide, Decision};
pub use hushwatch_core::domain::fallback::{LadderOutcome, LadderRule, LadderUpdate};

/// Schema step, the same on both engines (BIGINT has INTEGER affinity on
/// SQLite): one row per notifier that was ever attempted.
pub(super) const MIGRATION: &str = "
    CREATE TABLE notifier_failures (
        notifier TEXT PRIMARY KEY NOT NULL,
        failures BIGINT NOT NULL,
        paged    BIGINT NOT NULL DEFAULT 0
    );";

/// The statements both engines run, written once with PostgreSQL's `$N`
/// placeholders (SQLite reads them as `?N`, `store::db`). PostgreSQL
/// locks [`sql::READ`]'s row (`Db::ROW_LOCK`): replicas that record
/// attempts at the same time take turns; SQLite has one writer.
pub(super) mod sql {
    /// The row exists before it is read (and locked), so two first failures
    /// cannot both read "no row".
    pub const ENSURE: &str = "INSERT INTO notifier_failures (notifier, failures, paged)
         VALUES ($1, 0, 0) ON CONFLICT (notifier) DO NOTHING";
    pub const READ: &str = "SELECT failures, paged FROM notifier_failures WHERE notifier = $1";
    pub const WRITE: &str =
        "UPDATE notifier_failures SET failures = $2, paged = $3 WHERE notifier = $1";
    /// The notifier's pending pages and the oldest one's queue time.
    pub const WAITING: &str = "SELECT COUNT(*), MIN(created_at) FROM outbox
         WHERE notifier = $1 AND status = 'pending'";
    pub const FAILURES: &str = "SELECT notifier, failures FROM notifier_failures ORDER BY notifier";
}

/// Records `attempt` on row `id` (under claim `token` when given) and
/// climbs the ladder, in the caller's transaction. A claim taken over
/// meanwhile (the fencing token does not match) records and counts
/// nothing.
pub(super) async fn settle_counted<D: Db>(
    db: &D,
    id: i64,
    token: Option<i64>,
    attempt: &Attempt,
    u: &LadderUpdate,
) -> Result<LadderOutcome, StoreError> {
    let recorded = match token {
        Some(token) => super::replica::settle_claim(db, id, token, attempt).await?,
        None => {
            super::outbox::record_attempt(db, id, attempt).await?;
            true
        }
    };
    if !recorded {
        return Ok(LadderOutcome::default());
    }
    db.exec(sql::ENSURE, &[&u.notifier]).await?;
    let (failures, paged): (i64, i64) = db.one(&D::locked(sql::READ), &[&u.notifier]).await?;
    let (decision, after, paged_after) =
        decide::decide(u.rule.as_ref(), failures, paged, u.error.is_some());
    db.exec(sql::WRITE, &[&u.notifier, &after, &paged_after])
        .await?;
    let (waiting, since): (i64, Option<i64>) = match decision {
        Decision::Step(_) => db.one(sql::WAITING, &[&u.notifier]).await?,
        _ => (0, None),
    };
    let page = decide::page(u, decision, failures, waiting, opt_time(since)?);
    let mut queued = None;
    if let (Some(page), Some(rule)) = (page, &u.rule) {
        let t = Transition {
            stream: u.stream.clone(),
            to: AlertState::from_firing(page.firing),
            at: u.at,
            reason: page.reason,
            notifiers: rule.notify.clone(),
        };
        outbox::queue_fallback_pages(db, &t, &u.notifier).await?;
        queued = Some(t.reason);
    }
    Ok(LadderOutcome {
        settled: true,
        failures: after,
        queued,
    })
}

/// A stored queue time (a value out of range is an error, not "now").
fn opt_time(ms: Option<i64>) -> Result<Option<DateTime<Utc>>, StoreError> {
    ms.map(super::stored_time).transpose()
}

/// Every notifier's shared consecutive-failure count.
pub(super) async fn failures<D: Db>(db: &D) -> Result<Vec<(String, i64)>, StoreError> {
    db.rows(sql::FAILURES, &[]).await
}
