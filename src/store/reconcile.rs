//! Reconciliation reports (`POST /v1/streams/{stream}/reconciliations`):
//! the app's periodic check against the identity provider's API. A report
//! is stored once per (stream, id), joins the audit chain with the drifting
//! subject ids, and moves the stream's "last reconciliation" instant; a
//! report with `revoke_missed` drift queues its critical page in the same
//! transaction. The "reconciliation has not run" alert's state lives in
//! `reconcile_state`, moved by compare-and-set like the subscription alert.

use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension};

use super::{AlertState, NewEvent, Store, StoreError, Transition};

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

/// Alert kinds (see `store::silences::PAGE_KINDS`).
pub const MISSING_KIND: &str = crate::domain::alert_kind::AlertKind::ReconciliationMissing.as_str();
pub const REVOKE_MISSED_KIND: &str =
    crate::domain::alert_kind::AlertKind::ReconciliationRevokeMissed.as_str();

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
pub(super) fn drift_counts(drift: &str) -> std::collections::BTreeMap<String, u64> {
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

/// Each stream's latest report; a tie in arrival keeps the greatest id.
pub(super) const LATEST_REPORTS_SQL: &str = "SELECT r.stream, r.id, r.finished_at, r.received_at,
        r.checked, r.drift
    FROM reconciliations r
    WHERE r.received_at = (SELECT max(x.received_at) FROM reconciliations x
                           WHERE x.stream = r.stream)
    ORDER BY r.stream, r.id DESC";

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

pub const STALE_GRANT_KIND: &str = crate::domain::alert_kind::AlertKind::StaleGrant.as_str();

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

pub(super) fn stale_alert(key: &str) -> super::ops::KeyedAlert<'_> {
    super::ops::KeyedAlert {
        kind: STALE_GRANT_KIND,
        family: "stale-grant",
        key,
        severity: "warning",
        source: "audit",
        endpoint_id: "",
    }
}

/// Records a stale grant once; true (and its page queued) when new.
pub(super) fn record_stale(
    conn: &Connection,
    g: &StaleGrant,
    now: DateTime<Utc>,
) -> rusqlite::Result<bool> {
    let inserted = conn
        .prepare_cached(
            "INSERT INTO stale_grants (stream, delivery_id, subject, grant_event_time,
                                       revoke_seq, recorded_at, revoke_delivery_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (stream, delivery_id) DO NOTHING",
        )?
        .execute(params![
            g.stream,
            g.delivery_id,
            g.subject,
            millis(g.grant_event_time),
            g.revoke_seq,
            millis(now),
            g.revoke_delivery_id
        ])?;
    if inserted == 0 {
        return Ok(false);
    }
    let key = format!("{}/{}", g.stream, g.delivery_id);
    super::ops::queue_keyed_pages(conn, &g.page, now, &stale_alert(&key))?;
    Ok(true)
}

/// The "missing reconciliation" alert moving to `to`.
#[derive(Debug, Clone)]
pub struct ReconcileTransition {
    pub stream: String,
    pub to: AlertState,
    pub reason: String,
    pub notifiers: Vec<String>,
    pub at: DateTime<Utc>,
}

pub(super) fn drift_json(drift: &[Drift]) -> String {
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
pub(super) fn revoke_alert_key(stream: &str, id: &str) -> String {
    format!("{stream}/{id}")
}

fn millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn time(ms: i64) -> rusqlite::Result<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms).ok_or(rusqlite::Error::IntegralValueOutOfRange(0, ms))
}

/// Stores the report unless its id was seen; true when it was new.
pub(super) fn record(
    conn: &Connection,
    r: &NewReconciliation,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let inserted = conn
        .prepare_cached(
            "INSERT INTO reconciliations (stream, id, received_at, started_at, finished_at,
                                          checked, drift)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (stream, id) DO NOTHING",
        )?
        .execute(params![
            r.stream,
            r.id,
            millis(now),
            millis(r.started_at),
            millis(r.finished_at),
            r.checked,
            drift_json(&r.drift)
        ])?;
    if inserted == 0 {
        return Ok(false);
    }
    conn.prepare_cached(
        "INSERT INTO reconcile_state (stream, last_report_at) VALUES (?1, ?2)
         ON CONFLICT (stream) DO UPDATE SET
           last_report_at = max(coalesce(last_report_at, 0), excluded.last_report_at)",
    )?
    .execute(params![r.stream, millis(now)])?;
    if let Some(entry) = &r.entry {
        super::audit::append(conn, entry)?;
    }
    if let Some(page) = &r.page {
        let key = revoke_alert_key(&r.stream, &r.id);
        super::ops::queue_keyed_pages(conn, page, now, &revoke_alert(&key, &r.id))?;
    }
    Ok(true)
}

pub(super) fn revoke_alert<'a>(key: &'a str, id: &'a str) -> super::ops::KeyedAlert<'a> {
    super::ops::KeyedAlert {
        kind: REVOKE_MISSED_KIND,
        family: "reconciliation-report",
        key,
        severity: "critical",
        source: "reconciliation",
        endpoint_id: id,
    }
}

pub(super) fn missing_alert(stream: &str) -> super::ops::KeyedAlert<'_> {
    super::ops::KeyedAlert {
        kind: MISSING_KIND,
        family: "reconciliation-missing",
        key: stream,
        severity: "warning",
        source: "reconciliation",
        endpoint_id: "",
    }
}

pub(super) fn states(conn: &Connection) -> Result<Vec<ReconcileRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT stream, last_report_at, alert_state FROM reconcile_state ORDER BY stream",
    )?;
    let rows = stmt
        .query_map([], |row| {
            Ok(ReconcileRow {
                stream: row.get(0)?,
                last_report_at: row.get::<_, Option<i64>>(1)?.map(time).transpose()?,
                state: row.get(2)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

pub(super) fn latest_reports(conn: &Connection) -> Result<Vec<LatestReport>, StoreError> {
    let mut stmt = conn.prepare_cached(LATEST_REPORTS_SQL)?;
    let rows = stmt
        .query_map([], |row| {
            Ok(LatestReport {
                stream: row.get(0)?,
                id: row.get(1)?,
                finished_at: time(row.get(2)?)?,
                received_at: time(row.get(3)?)?,
                checked: row.get(4)?,
                drift: drift_counts(&row.get::<_, String>(5)?),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(first_per_stream(rows))
}

pub(super) fn first_per_stream(rows: Vec<LatestReport>) -> Vec<LatestReport> {
    let mut out: Vec<LatestReport> = Vec::new();
    for r in rows {
        if out.last().is_none_or(|l| l.stream != r.stream) {
            out.push(r);
        }
    }
    out
}

/// Compare-and-set on the stream's reconciliation alert, then its pages.
pub(super) fn transition(conn: &Connection, t: &ReconcileTransition) -> Result<bool, StoreError> {
    let current: Option<AlertState> = conn
        .prepare_cached("SELECT alert_state FROM reconcile_state WHERE stream = ?1")?
        .query_row([&t.stream], |row| row.get(0))
        .optional()?;
    if current.clone().unwrap_or(AlertState::Ok) == t.to {
        return Ok(false);
    }
    conn.prepare_cached(
        "INSERT INTO reconcile_state (stream, alert_state) VALUES (?1, ?2)
         ON CONFLICT (stream) DO UPDATE SET alert_state = excluded.alert_state",
    )?
    .execute(params![t.stream, t.to])?;
    let page = Transition {
        stream: t.stream.clone(),
        to: t.to.clone(),
        at: t.at,
        reason: t.reason.clone(),
        notifiers: t.notifiers.clone(),
    };
    super::ops::queue_keyed_pages(conn, &page, t.at, &missing_alert(&t.stream))?;
    Ok(true)
}

/// The newest audit entries (at most `limit`) naming `subject` as one of
/// their subject ids, newest first.
pub(super) fn subject_entries(
    conn: &Connection,
    subject: &str,
    window: Option<&(String, DateTime<Utc>)>,
    limit: i64,
) -> Result<Vec<SubjectEntry>, StoreError> {
    let needle = subject_needle(subject);
    // With a window, the (source, received_at) index bounds the scan.
    let (sql, source, since) = match window {
        Some((stream, since)) => (WINDOWED_SQL, Some(stream.as_str()), millis(*since)),
        None => (ALL_SQL, None, 0),
    };
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt
        .query_map(params![needle, limit, source, since], |row| {
            Ok((
                SubjectEntry {
                    seq: row.get(0)?,
                    stream: row.get(1)?,
                    channel: row.get(2)?,
                    event_type: row.get(3)?,
                    delivery_id: row.get(4)?,
                    event_time: row.get::<_, Option<i64>>(5)?.map(time).transpose()?,
                    received_at: time(row.get(6)?)?,
                    subject_ids: Vec::new(),
                },
                row.get::<_, String>(7)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows
        .into_iter()
        .filter(|(_, ids)| names_subject(ids, subject))
        .map(|(mut e, ids)| {
            e.subject_ids = subject_pairs(&ids);
            e
        })
        .collect())
}

const ALL_SQL: &str = "SELECT seq, source, channel, event_type, delivery_id, event_time,
        received_at, subject_ids
    FROM audit_log WHERE instr(subject_ids, ?1) > 0 AND ?3 IS NULL AND ?4 = 0
    ORDER BY seq DESC LIMIT ?2";

const WINDOWED_SQL: &str = "SELECT seq, source, channel, event_type, delivery_id, event_time,
        received_at, subject_ids
    FROM audit_log WHERE source = ?3 AND received_at >= ?4 AND instr(subject_ids, ?1) > 0
    ORDER BY seq DESC LIMIT ?2";

/// The JSON string literal a subject id is stored as, for a substring
/// pre-filter (`names_subject` then checks the values exactly).
pub(super) fn subject_needle(subject: &str) -> String {
    serde_json::Value::String(subject.to_owned()).to_string()
}

/// The stored subject ids as (kind, id) pairs.
pub(super) fn subject_pairs(subject_ids: &str) -> Vec<(String, String)> {
    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(subject_ids)
        .map(|m| {
            m.into_iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k, v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// True when one of the stored subject ids equals `subject`.
pub(super) fn names_subject(subject_ids: &str, subject: &str) -> bool {
    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(subject_ids)
        .map(|m| m.values().any(|v| v.as_str() == Some(subject)))
        .unwrap_or(false)
}

impl Store {
    /// Stores a reconciliation report (with its audit entry and, when new,
    /// its `revoke_missed` page); `Ok(false)` for an id already stored.
    pub async fn record_reconciliation(&self, r: NewReconciliation) -> Result<bool, StoreError> {
        let now = self.clock.now();
        self.backend.record_reconciliation(r, now).await
    }

    /// Each stream's latest reconciliation report (by arrival).
    pub async fn latest_reconciliations(&self) -> Result<Vec<LatestReport>, StoreError> {
        self.backend.latest_reconciliations().await
    }

    pub async fn reconcile_states(&self) -> Result<Vec<ReconcileRow>, StoreError> {
        self.backend.reconcile_states().await
    }

    pub async fn reconcile_transition(&self, t: ReconcileTransition) -> Result<bool, StoreError> {
        self.backend.reconcile_transition(t).await
    }

    /// Records a stale grant (and queues its page) once per delivery.
    pub async fn record_stale_grant(&self, g: StaleGrant) -> Result<bool, StoreError> {
        let now = self.clock.now();
        self.backend.record_stale_grant(g, now).await
    }

    /// The newest audit entries naming `subject`, newest first; with a
    /// window, only those of that stream received since that instant
    /// (an index range, where the whole log would be a scan).
    pub async fn subject_entries(
        &self,
        subject: String,
        window: Option<(String, DateTime<Utc>)>,
        limit: i64,
    ) -> Result<Vec<SubjectEntry>, StoreError> {
        self.backend.subject_entries(subject, window, limit).await
    }
}
