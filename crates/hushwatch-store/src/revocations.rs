//! The per-subject revocation index: for each (stream, subject,
//! organization) the newest revoke-class event hushwatch accepted, written
//! in the ingest transaction whatever `[audit] enabled` says. The
//! `revoke_missed` page reads it ("revocation of S received … (delivery …)"),
//! and a grant-class event is checked against it in the same transaction:
//! a grant older than a recorded revocation is recorded as a stale grant
//! and its page queued before the delivery is acknowledged, so a crash
//! cannot lose it. Rows older than `HORIZON_DAYS` are pruned by the leader.
//! Which revocation counts and the stale grant page's wording are decided
//! in `domain::reconcile`; this module reads and writes the rows.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::db::Db;
use super::ops::millis;
use super::reconcile::StaleGrant;
use super::{stored_time, AlertState, NewEvent, StoreError, Transition};
pub use hushwatch_core::domain::reconcile::Revocation;
use hushwatch_core::domain::reconcile::{newer_by, stale_reason};

/// Migration step (SQLite and PostgreSQL alike): the index, the
/// revocation's delivery id on a stale grant (the index has no audit seq;
/// `revoke_seq` is 0 for grants found through it), and an index finding a
/// stream's latest reconciliation report (`/v1/status`).
pub(super) const MIGRATION: &str = "CREATE TABLE revocations (
        stream       TEXT NOT NULL,
        subject      TEXT NOT NULL,
        organization TEXT NOT NULL DEFAULT '',
        event_time   BIGINT,
        received_at  BIGINT NOT NULL,
        delivery_id  TEXT,
        event_type   TEXT NOT NULL,
        PRIMARY KEY (stream, subject, organization)
    );
    CREATE INDEX revocations_received ON revocations (received_at);
    ALTER TABLE stale_grants ADD COLUMN revoke_delivery_id TEXT;
    CREATE INDEX reconciliations_received ON reconciliations (stream, received_at);";

/// How long an indexed revocation is kept (documented in docs/src/operating/reconciliation.md,
/// "Stale grant after revoke"): a reconciliation or a retried grant about a
/// revocation older than this is answered as if none had been received.
pub const HORIZON_DAYS: i64 = 400;

/// What the ingest transaction does for an event about access, decided by
/// the service from the grant/revoke classification (`audit::classify`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessNote {
    /// Index it as the subject's newest revocation (if it is).
    Revoke {
        subject: String,
        organization: Option<String>,
    },
    /// Check it against the index; a stale grant is recorded and paged.
    Grant {
        subject: String,
        organization: Option<String>,
        page: StalePage,
        /// The same (subject, organization) as revocations written earlier
        /// may have stored them: in plaintext before `[store]
        /// encryption_key` was set, veiled under a key since rotated
        /// (`store::veil::Veil::forms`). Empty without a key.
        earlier: Vec<(String, Option<String>)>,
    },
}

/// Where a stale grant's page goes and which zone its times are read in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StalePage {
    pub notifiers: Vec<String>,
    pub zone: Tz,
}

/// The (subject, organization) forms a grant is looked up under: as it is
/// stored now, then as earlier revocations may have stored it.
fn grant_forms<'a>(
    subject: &'a str,
    organization: &'a Option<String>,
    earlier: &'a [(String, Option<String>)],
) -> impl Iterator<Item = (&'a str, &'a Option<String>)> {
    std::iter::once((subject, organization)).chain(earlier.iter().map(|(s, o)| (s.as_str(), o)))
}

pub(super) fn org_key(organization: &Option<String>) -> &str {
    organization.as_deref().unwrap_or("")
}

fn org_from_key(key: String) -> Option<String> {
    (!key.is_empty()).then_some(key)
}

/// The stale grant (with its page) for an accepted grant-class `event`
/// older than `revoke`.
fn stale_grant(
    event: &NewEvent,
    subject: &str,
    page: &StalePage,
    revoke: &Revocation,
) -> Option<StaleGrant> {
    let delivery_id = event.delivery_id.clone()?;
    let grant_time = event.event_time?;
    Some(StaleGrant {
        stream: event.stream.clone(),
        subject: subject.to_owned(),
        grant_event_time: grant_time,
        revoke_seq: 0,
        revoke_delivery_id: revoke.delivery_id.clone(),
        page: Transition {
            stream: event.stream.clone(),
            to: AlertState::Firing,
            at: event.received_at,
            reason: stale_reason(subject, &delivery_id, grant_time, revoke, |t| {
                hushwatch_core::status::format::local_stamp_secs(t, page.zone)
            }),
            notifiers: page.notifiers.clone(),
        },
        delivery_id,
    })
}

/// Which revocation a subject's row keeps: one at least as new by event
/// time (else by arrival) replaces it. A macro so both upserts (this one,
/// and PostgreSQL's set-wise one in `pg::bulk`) are one literal each.
macro_rules! revocation_upsert_rule {
    () => {
        "ON CONFLICT (stream, subject, organization) DO UPDATE SET
        event_time = excluded.event_time, received_at = excluded.received_at,
        delivery_id = excluded.delivery_id, event_type = excluded.event_type
    WHERE coalesce(excluded.event_time, excluded.received_at)
       >= coalesce(revocations.event_time, revocations.received_at)"
    };
}
pub(super) use revocation_upsert_rule;

const UPSERT_SQL: &str = concat!(
    "INSERT INTO revocations
        (stream, subject, organization, event_time, received_at, delivery_id, event_type)
    VALUES ($1, $2, $3, $4, $5, $6, $7) ",
    revocation_upsert_rule!()
);

/// A revocation of the subject newer (by event time) than the grant's, in
/// the grant's organization or in none (a revocation of the whole user).
const NEWER_SQL: &str = "SELECT organization, event_time, received_at, delivery_id,
        event_type
    FROM revocations
    WHERE stream = $1 AND subject = $2 AND event_time > $3
      AND ($4 = '' OR organization = $4 OR organization = '')
    ORDER BY event_time DESC LIMIT 1";

const LATEST_SQL: &str = "SELECT organization, event_time, received_at, delivery_id,
        event_type
    FROM revocations WHERE stream = $1 AND subject = $2
    ORDER BY received_at DESC LIMIT 1";

const PRUNE_SQL: &str = "DELETE FROM revocations WHERE received_at < $1";

/// The columns of [`NEWER_SQL`] and [`LATEST_SQL`].
type RevocationCols = (String, Option<i64>, i64, Option<String>, String);

fn revocation(
    (organization, event_time, received_at, delivery_id, event_type): RevocationCols,
) -> Result<Revocation, StoreError> {
    Ok(Revocation {
        organization: org_from_key(organization),
        event_time: event_time.map(stored_time).transpose()?,
        received_at: stored_time(received_at)?,
        delivery_id,
        event_type,
    })
}

/// The ingest transaction's step for an accepted event: one statement for
/// a revoke-class or grant-class event (plus the record of a stale grant),
/// none for any other.
pub(super) async fn note<D: Db>(db: &D, event: &NewEvent) -> Result<(), StoreError> {
    match &event.access {
        None => Ok(()),
        Some(AccessNote::Revoke {
            subject,
            organization,
        }) => {
            db.exec(
                UPSERT_SQL,
                &[
                    &event.stream,
                    subject,
                    &org_key(organization),
                    &event.event_time.map(millis),
                    &millis(event.received_at),
                    &event.delivery_id,
                    &event.event_type,
                ],
            )
            .await?;
            Ok(())
        }
        Some(AccessNote::Grant {
            subject,
            organization,
            page,
            earlier,
        }) => {
            let Some(grant_time) = event.event_time else {
                return Ok(());
            };
            let mut newer = None;
            for (form, org) in grant_forms(subject, organization, earlier) {
                let found: Option<RevocationCols> = db
                    .opt(
                        NEWER_SQL,
                        &[&event.stream, &form, &millis(grant_time), &org_key(org)],
                    )
                    .await?;
                // The one a grant is checked against: the newer by event
                // time, as `NEWER_SQL` orders.
                let found = found.map(revocation).transpose()?;
                newer = newer_by(newer, found, |r| r.event_time);
            }
            if let Some(g) = newer.and_then(|r| stale_grant(event, subject, page, &r)) {
                super::reconcile::record_stale(db, &g, event.received_at).await?;
            }
            Ok(())
        }
    }
}

pub(super) async fn latest<D: Db>(
    db: &D,
    stream: &str,
    subject: &str,
) -> Result<Option<Revocation>, StoreError> {
    let row: Option<RevocationCols> = db.opt(LATEST_SQL, &[&stream, &subject]).await?;
    row.map(revocation).transpose()
}

pub(super) async fn prune<D: Db>(db: &D, before: DateTime<Utc>) -> Result<usize, StoreError> {
    let n = db.exec(PRUNE_SQL, &[&millis(before)]).await?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// When the stale grant of `(stream, delivery_id)` was recorded, if it was.
pub(super) async fn stale_recorded_at<D: Db>(
    db: &D,
    stream: &str,
    delivery_id: &str,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let row: Option<(i64,)> = db
        .opt(
            "SELECT recorded_at FROM stale_grants WHERE stream = $1 AND delivery_id = $2",
            &[&stream, &delivery_id],
        )
        .await?;
    row.map(|(at,)| stored_time(at)).transpose()
}

/// Replaces each event's subject ids, and the subject and organization of
/// its access note, by their veiled form; a grant also gets the forms
/// earlier revocations may be stored under. Unchanged without a key.
pub fn veil_subjects(veil: &crate::veil::Veil, events: &mut [crate::NewEvent]) {
    if !veil.is_on() {
        return;
    }
    for e in events {
        for (_, v) in e.subject_ids.iter_mut() {
            *v = veil.hide(v);
        }
        match &mut e.access {
            None => {}
            Some(AccessNote::Revoke {
                subject,
                organization,
            }) => {
                *subject = veil.hide(subject);
                *organization = organization.as_deref().map(|o| veil.hide(o));
            }
            Some(AccessNote::Grant {
                subject,
                organization,
                earlier,
                ..
            }) => {
                // forms() is [plaintext, token under each key]; the newest
                // key's token is the one stored now, the rest are earlier.
                let subjects = veil.forms(subject);
                let orgs: Vec<Option<String>> = match organization.as_deref() {
                    Some(o) => veil.forms(o).into_iter().map(Some).collect(),
                    None => vec![None; subjects.len()],
                };
                *subject = veil.hide(subject);
                *organization = organization.as_deref().map(|o| veil.hide(o));
                *earlier = subjects
                    .into_iter()
                    .zip(orgs)
                    .filter(|(s, _)| s != subject)
                    .collect();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_is_looked_up_as_stored_now_then_in_its_earlier_forms() {
        let earlier = vec![
            ("s0".to_string(), None),
            ("s1".to_string(), Some("o1".into())),
        ];
        let org = Some("o2".to_string());
        let forms: Vec<(&str, &Option<String>)> = grant_forms("s2", &org, &earlier).collect();
        assert_eq!(forms[0], ("s2", &org));
        assert_eq!(forms.len(), 3);
    }
}
