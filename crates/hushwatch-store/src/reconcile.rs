//! Reconciliation reports (`POST /v1/streams/{stream}/reconciliations`):
//! the app's periodic check against the identity provider's API. A report
//! is stored once per (stream, id), joins the audit chain with the drifting
//! subject ids, and moves the stream's "last reconciliation" instant; a
//! report with `revoke_missed` drift queues its critical page in the same
//! transaction. The "reconciliation has not run" alert's state lives in
//! `reconcile_state`, moved by compare-and-set like the subscription alert.
//!
//! Whether that alert moves is decided in `domain::reconcile`
//! (`missing_alert_moves`); this module reads and writes the rows: the
//! stored drift and subject-id JSON, each stream's latest report
//! (`first_per_stream`, over `sql::LATEST_REPORTS`'s order). The statements
//! both engines run are written once in `sql`, and each operation once over
//! `store::db::Db`: it reads rows, calls the decision and writes its outcome.

use chrono::{DateTime, Utc};
use hushwatch_core::domain::alert_kind::AlertKind;

use super::db::Db;
use super::ops::millis;
use super::stored_time;
use super::{audit, core, outbox};
use super::{AlertState, NewEvent, StoreError, Transition};
use hushwatch_core::domain::reconcile::missing_alert_moves;

/// Migration step (SQLite and PostgreSQL alike: only portable types).
pub(super) const MIGRATION: &str = "CREATE TABLE reconciliations (
        stream      TEXT NOT NULL,
        id          TEXT NOT NULL,
        received_at BIGINT NOT NULL,
        started_at  BIGINT NOT NULL,
        finished_at BIGINT NOT NULL,
        checked     BIGINT NOT NULL,
        drift       TEXT NOT NULL,
        PRIMARY KEY (stream, id)
    );
    CREATE TABLE reconcile_state (
        stream         TEXT PRIMARY KEY NOT NULL,
        last_report_at BIGINT,
        alert_state    TEXT NOT NULL DEFAULT 'ok' CHECK (alert_state IN ('ok', 'firing'))
    );";

/// One finding of a report, as sent (subject ids only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    pub subject: String,
    /// `revoke_missed`, `grant_missed` or `other`.
    pub kind: String,
    pub fixed: bool,
    pub detail: Option<String>,
}

#[derive(Debug, Clone)]
pub struct NewReconciliation {
    pub stream: String,
    pub id: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub checked: i64,
    pub drift: Vec<Drift>,
    /// The report's audit entry (appended only when the report is new).
    pub entry: Option<NewEvent>,
    /// The critical page for `revoke_missed` drift (queued only when new).
    pub page: Option<Transition>,
}

/// What the store knows about a stream's reconciliation job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileRow {
    pub stream: String,
    pub last_report_at: Option<DateTime<Utc>>,
    pub state: AlertState,
}

/// A stream's latest stored report (by arrival), for `/v1/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatestReport {
    pub stream: String,
    pub id: String,
    pub finished_at: DateTime<Utc>,
    pub received_at: DateTime<Utc>,
    pub checked: i64,
    /// Findings per drift kind.
    pub drift: std::collections::BTreeMap<String, u64>,
}

/// Findings per kind of a stored drift list.
fn drift_counts(drift: &str) -> std::collections::BTreeMap<String, u64> {
    let mut counts = std::collections::BTreeMap::new();
    if let Ok(serde_json::Value::Array(items)) = serde_json::from_str(drift) {
        for item in items {
            if let Some(kind) = item.get("kind").and_then(|k| k.as_str()) {
                *counts.entry(kind.to_owned()).or_default() += 1;
            }
        }
    }
    counts
}

/// An audit entry that names a subject (for the page wording).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectEntry {
    pub seq: i64,
    pub stream: String,
    pub channel: String,
    pub event_type: String,
    pub delivery_id: Option<String>,
    pub event_time: Option<DateTime<Utc>>,
    pub received_at: DateTime<Utc>,
    /// Every (kind, id) pair the entry names, e.g. ("organization_id", "org_1").
    pub subject_ids: Vec<(String, String)>,
}

/// A grant that arrived after a revocation of the same subject with an
/// older event time (see `service::stale_grants`).
#[derive(Debug, Clone)]
pub struct StaleGrant {
    pub stream: String,
    pub delivery_id: String,
    pub subject: String,
    pub grant_event_time: DateTime<Utc>,
    /// The audit seq of the revocation it is older than (0 when it was
    /// found in the revocation index, `store::revocations`).
    pub revoke_seq: i64,
    /// The delivery id of that revocation, when it had one.
    pub revoke_delivery_id: Option<String>,
    pub page: Transition,
}

/// Migration step: stale grants, once per (stream, delivery id).
pub(super) const STALE_GRANTS_MIGRATION: &str = "CREATE TABLE stale_grants (
        stream           TEXT NOT NULL,
        delivery_id      TEXT NOT NULL,
        subject          TEXT NOT NULL,
        grant_event_time BIGINT NOT NULL,
        revoke_seq       BIGINT NOT NULL,
        recorded_at      BIGINT NOT NULL,
        PRIMARY KEY (stream, delivery_id)
    );";

fn stale_alert(key: &str) -> super::ops::KeyedAlert<'_> {
    super::ops::KeyedAlert {
        kind: AlertKind::StaleGrant,
        family: "stale-grant",
        key,
        severity: "warning",
        source: "audit",
        endpoint_id: "",
    }
}

/// The "missing reconciliation" alert moving to `to`: the transition its
/// page is queued with.
pub type ReconcileTransition = Transition;

fn drift_json(drift: &[Drift]) -> String {
    serde_json::Value::Array(
        drift
            .iter()
            .map(|d| {
                serde_json::json!({
                    "subject": d.subject, "kind": d.kind, "fixed": d.fixed, "detail": d.detail,
                })
            })
            .collect(),
    )
    .to_string()
}

/// The keyed alert of a report's `revoke_missed` page: one per report.
fn revoke_alert_key(stream: &str, id: &str) -> String {
    format!("{stream}/{id}")
}

fn revoke_alert<'a>(key: &'a str, id: &'a str) -> super::ops::KeyedAlert<'a> {
    super::ops::KeyedAlert {
        kind: AlertKind::ReconciliationRevokeMissed,
        family: "reconciliation-report",
        key,
        severity: "critical",
        source: "reconciliation",
        endpoint_id: id,
    }
}

fn missing_alert(stream: &str) -> super::ops::KeyedAlert<'_> {
    super::ops::KeyedAlert {
        kind: AlertKind::ReconciliationMissing,
        family: "reconciliation-missing",
        key: stream,
        severity: "warning",
        source: "reconciliation",
        endpoint_id: "",
    }
}

fn first_per_stream(rows: Vec<LatestReport>) -> Vec<LatestReport> {
    let mut out: Vec<LatestReport> = Vec::new();
    for r in rows {
        if out.last().is_none_or(|l| l.stream != r.stream) {
            out.push(r);
        }
    }
    out
}

/// The JSON string literal a subject id is stored as, for a substring
/// pre-filter (`subject_entry` then checks the values exactly).
fn subject_needle(subject: &str) -> String {
    serde_json::Value::String(subject.to_owned()).to_string()
}

/// The stored subject ids as (kind, id) pairs.
fn subject_pairs(subject_ids: &str) -> Vec<(String, String)> {
    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(subject_ids)
        .map(|m| {
            m.into_iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k, v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// The key of a stale grant's page: one per (stream, delivery).
fn stale_key(g: &StaleGrant) -> String {
    format!("{}/{}", g.stream, g.delivery_id)
}

fn reconcile_row(
    stream: String,
    last_report_at: Option<i64>,
    state: &str,
) -> Result<ReconcileRow, StoreError> {
    Ok(ReconcileRow {
        stream,
        last_report_at: last_report_at.map(stored_time).transpose()?,
        state: core::alert_state(state)?,
    })
}

/// [`sql::LATEST_REPORTS`]'s columns.
type ReportCols = (String, String, i64, i64, i64, String);

fn latest_report(c: ReportCols) -> Result<LatestReport, StoreError> {
    Ok(LatestReport {
        stream: c.0,
        id: c.1,
        finished_at: stored_time(c.2)?,
        received_at: stored_time(c.3)?,
        checked: c.4,
        drift: drift_counts(&c.5),
    })
}

/// The columns of [`sql::SUBJECTS_LITE`] and its kin.
type SubjectCols = (
    i64,
    String,
    String,
    String,
    Option<String>,
    Option<i64>,
    i64,
    String,
);

/// The entry a row found by the substring pre-filter stands for, when one
/// of its subject ids really is `subject`.
fn subject_entry(c: SubjectCols, subject: &str) -> Result<Option<SubjectEntry>, StoreError> {
    let subject_ids = subject_pairs(&c.7);
    if !subject_ids.iter().any(|(_, id)| id == subject) {
        return Ok(None);
    }
    Ok(Some(SubjectEntry {
        seq: c.0,
        stream: c.1,
        channel: c.2,
        event_type: c.3,
        delivery_id: c.4,
        event_time: c.5.map(stored_time).transpose()?,
        received_at: stored_time(c.6)?,
        subject_ids,
    }))
}

/// The statements both engines run, written once with PostgreSQL's `$N`
/// placeholders (`store::db`).
pub(super) mod sql {
    pub const RECORD: &str = "INSERT INTO reconciliations
           (stream, id, received_at, started_at, finished_at, checked, drift)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (stream, id) DO NOTHING";
    /// The last report instant only moves forward. (A CASE, where SQLite
    /// would say `max(a, b)` and PostgreSQL `GREATEST(a, b)`.)
    pub const LAST_REPORT: &str = "INSERT INTO reconcile_state (stream, last_report_at)
         VALUES ($1, $2)
         ON CONFLICT (stream) DO UPDATE SET last_report_at = CASE
           WHEN coalesce(reconcile_state.last_report_at, 0) > excluded.last_report_at
           THEN coalesce(reconcile_state.last_report_at, 0)
           ELSE excluded.last_report_at END";
    pub const STATES: &str =
        "SELECT stream, last_report_at, alert_state FROM reconcile_state ORDER BY stream";
    /// Each stream's latest report; a tie in arrival keeps the greatest id
    /// (`first_per_stream`).
    pub const LATEST_REPORTS: &str = "SELECT r.stream, r.id, r.finished_at, r.received_at,
            r.checked, r.drift
        FROM reconciliations r
        WHERE r.received_at = (SELECT max(x.received_at) FROM reconciliations x
                               WHERE x.stream = r.stream)
        ORDER BY r.stream, r.id DESC";
    /// The alert's state (PostgreSQL locks the row it creates first).
    pub const STATE: &str = "SELECT alert_state FROM reconcile_state WHERE stream = $1";
    pub const ENSURE: &str =
        "INSERT INTO reconcile_state (stream) VALUES ($1) ON CONFLICT (stream) DO NOTHING";
    pub const SET_STATE: &str = "INSERT INTO reconcile_state (stream, alert_state) VALUES ($1, $2)
         ON CONFLICT (stream) DO UPDATE SET alert_state = excluded.alert_state";
    pub const STALE: &str = "INSERT INTO stale_grants
           (stream, delivery_id, subject, grant_event_time, revoke_seq, recorded_at,
            revoke_delivery_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (stream, delivery_id) DO NOTHING";

    /// The newest audit entries whose stored subject ids contain `$1` (a
    /// JSON string), at most `$2`; windowed: of stream `$3` received since
    /// `$4` (the (source, received_at) index bounds the scan). Written per
    /// dialect only for the substring search: SQLite's `instr` is
    /// PostgreSQL's `strpos` (same argument order), and `LIKE` would read
    /// `%` and `_` in a subject id as wildcards.
    macro_rules! subjects {
        ($find:literal, $window:literal) => {
            concat!(
                "SELECT seq, source, channel, event_type, delivery_id, event_time, received_at,
                        subject_ids
                 FROM audit_log WHERE ",
                $window,
                $find,
                "(subject_ids, $1) > 0 ORDER BY seq DESC LIMIT $2"
            )
        };
    }
    pub const SUBJECTS_LITE: &str = subjects!("instr", "");
    pub const SUBJECTS_PG: &str = subjects!("strpos", "");
    pub const WINDOWED_SUBJECTS_LITE: &str =
        subjects!("instr", "source = $3 AND received_at >= $4 AND ");
    pub const WINDOWED_SUBJECTS_PG: &str =
        subjects!("strpos", "source = $3 AND received_at >= $4 AND ");
}

// ---------------------------------------------------------------------------
// Rows, on either engine (`store::db`): read them, call the decisions,
// write the outcome.
// ---------------------------------------------------------------------------

/// Stores the report unless its id was seen; true when it was new. Takes
/// the audit head's lock first when the report may append (the ingest
/// lock order, see `audit::lock_head`).
pub(super) async fn record<D: Db>(
    db: &D,
    r: &NewReconciliation,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    audit::lock_audit_head(db, r.entry.as_slice()).await?;
    let inserted = db
        .exec(
            sql::RECORD,
            &[
                &r.stream,
                &r.id,
                &millis(now),
                &millis(r.started_at),
                &millis(r.finished_at),
                &r.checked,
                &drift_json(&r.drift),
            ],
        )
        .await?;
    if inserted == 0 {
        return Ok(false);
    }
    db.exec(sql::LAST_REPORT, &[&r.stream, &millis(now)])
        .await?;
    if let Some(entry) = &r.entry {
        audit::append_audit(db, entry).await?;
    }
    if let Some(page) = &r.page {
        let key = revoke_alert_key(&r.stream, &r.id);
        outbox::queue_keyed_pages(db, page, now, &revoke_alert(&key, &r.id)).await?;
    }
    Ok(true)
}

/// Records a stale grant once; true (and its page queued) when new.
pub(super) async fn record_stale<D: Db>(
    db: &D,
    g: &StaleGrant,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let inserted = db
        .exec(
            sql::STALE,
            &[
                &g.stream,
                &g.delivery_id,
                &g.subject,
                &millis(g.grant_event_time),
                &g.revoke_seq,
                &millis(now),
                &g.revoke_delivery_id,
            ],
        )
        .await?;
    if inserted == 0 {
        return Ok(false);
    }
    outbox::queue_keyed_pages(db, &g.page, now, &stale_alert(&stale_key(g))).await?;
    Ok(true)
}

pub(super) async fn states<D: Db>(db: &D) -> Result<Vec<ReconcileRow>, StoreError> {
    let rows: Vec<(String, Option<i64>, String)> = db.rows(sql::STATES, &[]).await?;
    rows.into_iter()
        .map(|(stream, last, state)| reconcile_row(stream, last, &state))
        .collect()
}

pub(super) async fn latest_reports<D: Db>(db: &D) -> Result<Vec<LatestReport>, StoreError> {
    let rows: Vec<ReportCols> = db.rows(sql::LATEST_REPORTS, &[]).await?;
    let reports = rows
        .into_iter()
        .map(latest_report)
        .collect::<Result<_, _>>()?;
    Ok(first_per_stream(reports))
}

/// Compare-and-set on the stream's reconciliation alert, then its pages.
/// On PostgreSQL the row is created first so that it can be locked (`FOR
/// UPDATE`): replicas share the database, and two of them evaluating the
/// same stream take turns. SQLite's one writer needs neither, and a stream
/// gets no row there until its alert first moves.
pub(super) async fn transition<D: Db>(db: &D, t: &ReconcileTransition) -> Result<bool, StoreError> {
    if !D::ROW_LOCK.is_empty() {
        db.exec(sql::ENSURE, &[&t.stream]).await?;
    }
    let current: Option<(String,)> = db.opt(&D::locked(sql::STATE), &[&t.stream]).await?;
    let current = current.map(|(s,)| core::alert_state(&s)).transpose()?;
    if !missing_alert_moves(current.as_ref().map(AlertState::status), t.to.status()) {
        return Ok(false);
    }
    db.exec(sql::SET_STATE, &[&t.stream, &core::state_str(&t.to)])
        .await?;
    outbox::queue_keyed_pages(db, t, t.at, &missing_alert(&t.stream)).await?;
    Ok(true)
}

/// The newest audit entries (at most `limit`) naming `subject` as one of
/// their subject ids, newest first.
pub(super) async fn subject_entries<D: Db>(
    db: &D,
    subject: &str,
    window: Option<&(String, DateTime<Utc>)>,
    limit: i64,
) -> Result<Vec<SubjectEntry>, StoreError> {
    let needle = subject_needle(subject);
    // The dialects differ in the substring function only (see `sql`).
    let lite = D::ROW_LOCK.is_empty();
    let found: Vec<SubjectCols> = match window {
        Some((stream, since)) => {
            let statement = if lite {
                sql::WINDOWED_SUBJECTS_LITE
            } else {
                sql::WINDOWED_SUBJECTS_PG
            };
            db.rows(statement, &[&needle, &limit, stream, &millis(*since)])
                .await?
        }
        None => {
            let statement = if lite {
                sql::SUBJECTS_LITE
            } else {
                sql::SUBJECTS_PG
            };
            db.rows(statement, &[&needle, &limit]).await?
        }
    };
    let mut out = Vec::new();
    for c in found {
        out.extend(subject_entry(c, subject)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    //! The decisions both engines call (`store::conformance::reconcile` runs
    //! them through both).
    use super::*;

    #[test]
    fn only_rows_naming_the_subject_exactly_are_entries() {
        let cols = |ids: &str| -> SubjectCols {
            (
                7,
                "s".into(),
                "webhook".into(),
                "user.deleted".into(),
                None,
                Some(5),
                9,
                ids.into(),
            )
        };
        let found = subject_entry(cols(r#"{"user_id":"u_1","org":"o"}"#), "u_1")
            .unwrap()
            .unwrap();
        assert_eq!(found.seq, 7);
        assert_eq!(found.event_time, DateTime::from_timestamp_millis(5));
        assert_eq!(found.subject_ids.len(), 2);
        // The substring pre-filter matched, but no id equals the subject.
        assert_eq!(
            subject_entry(cols(r#"{"user_id":"u_10"}"#), "u_1").unwrap(),
            None
        );
        assert_eq!(subject_entry(cols("not json"), "u_1").unwrap(), None);
    }

    #[test]
    fn stored_rows_read_back_with_drift_counts() {
        let report = latest_report((
            "s".into(),
            "r1".into(),
            3,
            4,
            10,
            r#"[{"kind":"revoke_missed"},{"kind":"revoke_missed"},{"kind":"other"}]"#.into(),
        ))
        .unwrap();
        assert_eq!(report.drift.get("revoke_missed"), Some(&2));
        assert_eq!(report.drift.get("other"), Some(&1));
        assert!(latest_report(("s".into(), "r".into(), i64::MAX, 0, 0, "[]".into())).is_err());
        let row = reconcile_row("s".into(), None, "ok").unwrap();
        assert_eq!((row.last_report_at, row.state), (None, AlertState::Ok));
        assert!(reconcile_row("s".into(), None, "maybe").is_err());
    }

    #[test]
    fn the_latest_report_per_stream_is_the_first_row_of_each() {
        let r = |stream: &str, id: &str| {
            latest_report((stream.into(), id.into(), 0, 0, 0, "[]".into())).unwrap()
        };
        let kept = first_per_stream(vec![r("a", "r2"), r("a", "r1"), r("b", "r9")]);
        let ids: Vec<_> = kept.iter().map(|k| k.id.as_str()).collect();
        assert_eq!(ids, ["r2", "r9"]);
    }

    #[test]
    fn the_subject_search_differs_by_dialect_only_in_its_function() {
        assert_eq!(
            sql::SUBJECTS_LITE.replace("instr(", "strpos("),
            sql::SUBJECTS_PG
        );
        assert_eq!(
            sql::WINDOWED_SUBJECTS_LITE.replace("instr(", "strpos("),
            sql::WINDOWED_SUBJECTS_PG
        );
    }
}
