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
//! over `store::db::Db`), under the notifier row's lock on PostgreSQL.

use chrono::{DateTime, SecondsFormat, Utc};

use super::core;
use super::db::Db;
use super::Attempt;
use super::{AlertState, StoreError, Transition};

/// Schema step, the same on both engines (BIGINT has INTEGER affinity on
/// SQLite): one row per notifier that was ever attempted.
pub(super) const MIGRATION: &str = "
    CREATE TABLE notifier_failures (
        notifier TEXT PRIMARY KEY NOT NULL,
        failures BIGINT NOT NULL,
        paged    BIGINT NOT NULL DEFAULT 0
    );";

/// What an attempt means for its notifier's ladder.
#[derive(Debug, Clone, PartialEq)]
pub struct LadderUpdate {
    pub notifier: String,
    /// The failed attempt's reason; `None` when it was delivered.
    pub error: Option<String>,
    /// The ladder to climb, `None` for a page that never climbs one (a
    /// page *to* a fallback, or a notifier without `fallback`).
    pub rule: Option<LadderRule>,
    /// The page's stream and when it was queued (for the step's message).
    pub stream: String,
    pub page_created_at: DateTime<Utc>,
    /// Instant of the attempt; fallback pages are queued at it.
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LadderRule {
    /// `fallback_after`, ascending.
    pub steps: Vec<i64>,
    /// `fallback`: the notifiers paged.
    pub notify: Vec<String>,
}

/// What recording an attempt did.
#[derive(Debug, Clone, PartialEq)]
pub struct LadderOutcome {
    /// False when the claim had been taken over: nothing was written.
    pub settled: bool,
    /// The notifier's shared consecutive-failure count afterwards.
    pub failures: i64,
    /// The reason of the fallback page this attempt queued, if any.
    pub queued: Option<String>,
}

impl LadderOutcome {
    pub(super) fn fenced() -> LadderOutcome {
        LadderOutcome {
            settled: false,
            failures: 0,
            queued: None,
        }
    }
}

/// The ladder's decision for one attempt (pure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// Page the fallbacks: the count reached this step.
    Step(i64),
    /// Page the recovery: delivered after a step was paged.
    Recover,
    Nothing,
}

/// `failures`/`paged` are the row before the attempt; returns the decision
/// and the row after it.
pub(super) fn decide(
    rule: Option<&LadderRule>,
    failures: i64,
    paged: i64,
    failed: bool,
) -> (Decision, i64, i64) {
    if !failed {
        let decision = if paged > 0 && rule.is_some() {
            Decision::Recover
        } else {
            Decision::Nothing
        };
        return (decision, 0, 0);
    }
    let after = failures.saturating_add(1);
    match rule {
        Some(r) if after > paged && r.steps.contains(&after) => {
            (Decision::Step(after), after, after)
        }
        _ => (Decision::Nothing, after, paged),
    }
}

/// The fallback pages a decision queues, as a transition to `rule.notify`.
/// `waiting`/`since`: the notifier's pending pages and the oldest one's
/// queue time, read in the same transaction.
pub(super) fn transition(
    u: &LadderUpdate,
    decision: Decision,
    failures_before: i64,
    waiting: i64,
    since: Option<DateTime<Utc>>,
) -> Option<Transition> {
    let rule = u.rule.as_ref()?;
    let (to, reason) = match decision {
        Decision::Step(n) => {
            let since = since
                .unwrap_or(u.page_created_at)
                .to_rfc3339_opts(SecondsFormat::Secs, true);
            (
                AlertState::Firing,
                format!(
                    "hushwatch cannot deliver to {}: {}, {} pages waiting since {since} ({n} failed attempts in a row)",
                    u.notifier,
                    u.error.as_deref().unwrap_or("failed"),
                    waiting.max(1),
                ),
            )
        }
        Decision::Recover => (
            AlertState::Ok,
            format!(
                "hushwatch delivers to {} again (after {failures_before} failed attempts in a row)",
                u.notifier
            ),
        ),
        Decision::Nothing => return None,
    };
    Some(Transition {
        stream: u.stream.clone(),
        to,
        at: u.at,
        reason,
        notifiers: rule.notify.clone(),
    })
}

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
            super::core::record_attempt(db, id, attempt).await?;
            true
        }
    };
    if !recorded {
        return Ok(LadderOutcome::fenced());
    }
    db.exec(sql::ENSURE, &[&u.notifier]).await?;
    let (failures, paged): (i64, i64) = db.one(&D::locked(sql::READ), &[&u.notifier]).await?;
    let (decision, after, paged_after) =
        decide(u.rule.as_ref(), failures, paged, u.error.is_some());
    db.exec(sql::WRITE, &[&u.notifier, &after, &paged_after])
        .await?;
    let (waiting, since): (i64, Option<i64>) = match decision {
        Decision::Step(_) => db.one(sql::WAITING, &[&u.notifier]).await?,
        _ => (0, None),
    };
    let mut queued = None;
    if let Some(t) = transition(u, decision, failures, waiting, opt_time(since)?) {
        let alert = super::ops::fallback_alert(&u.notifier);
        for notifier in &t.notifiers {
            core::insert_keyed_page(db, &t, notifier, t.at, &alert).await?;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> LadderRule {
        LadderRule {
            steps: vec![1, 5, 20],
            notify: vec!["backup".into()],
        }
    }

    #[test]
    fn steps_are_paged_once_per_run_and_recovery_only_after_a_step() {
        let r = rule();
        assert_eq!(decide(Some(&r), 0, 0, true), (Decision::Step(1), 1, 1));
        assert_eq!(decide(Some(&r), 1, 1, true), (Decision::Nothing, 2, 1));
        assert_eq!(decide(Some(&r), 4, 1, true), (Decision::Step(5), 5, 5));
        // Another replica already paged step 5 of this run.
        assert_eq!(decide(Some(&r), 4, 5, true), (Decision::Nothing, 5, 5));
        assert_eq!(decide(Some(&r), 7, 5, false), (Decision::Recover, 0, 0));
        assert_eq!(decide(Some(&r), 0, 0, false), (Decision::Nothing, 0, 0));
        // No ladder: counted, never paged.
        assert_eq!(decide(None, 0, 0, true), (Decision::Nothing, 1, 0));
    }
}
