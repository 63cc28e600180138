//! Reads of the cross-check's state for the places a person looks (issue
//! #45): `/v1/status`, the status page and `hushwatch status` (one
//! [`overview`] of every stream), `hushwatch audit subject` (the findings
//! about one subject, [`subject_findings`]) and `hushwatch crosscheck
//! --dry-run` (which of a poll's findings are already stored, and dropping
//! its scratch snapshot). Nothing here changes what a poll decides.

use chrono::{DateTime, Utc};

use super::crosscheck::{CrosscheckRow, StoredFinding};
use super::db::Db;
use super::StoreError;

/// One stream's cross-check bookkeeping with its open findings counted by
/// direction (`domain::crosscheck::Direction`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CrosscheckOverview {
    pub stream: String,
    pub row: CrosscheckRow,
    pub open_revoke: i64,
    pub open_grant: i64,
    pub open_other: i64,
    /// When the newest open finding was recorded.
    pub newest_open_at: Option<DateTime<Utc>>,
}

impl CrosscheckOverview {
    pub fn open(&self) -> i64 {
        self.open_revoke + self.open_grant + self.open_other
    }
}

type StateCols = (
    String,
    Option<String>,
    i64,
    Option<i64>,
    Option<i64>,
    Option<String>,
    i64,
    i64,
    bool,
);

/// Every stream with a `crosscheck_state` row or a stored finding, by
/// name. Two statements whatever the number of findings: the counts are
/// made by the database (the direction is a field of the stored finding's
/// JSON, which `store::crosscheck` writes with `serde_json`, keys in one
/// fixed spelling).
pub(super) async fn overview<D: Db>(db: &D) -> Result<Vec<CrosscheckOverview>, StoreError> {
    let rows: Vec<StateCols> = db
        .rows(
            "SELECT stream, log_cursor, generation, last_poll_at, last_success_at, last_error, failures, healed,
                    last_refused
             FROM crosscheck_state ORDER BY stream",
            &[],
        )
        .await?;
    let counts: Vec<(String, i64, i64, i64, i64)> = db
        .rows(
            "SELECT stream,
                    SUM(CASE WHEN finding LIKE '%\"direction\":\"revoke\"%' THEN 1 ELSE 0 END),
                    SUM(CASE WHEN finding LIKE '%\"direction\":\"grant\"%' THEN 1 ELSE 0 END),
                    COUNT(*),
                    MAX(found_at)
             FROM crosscheck_findings WHERE state = 'open' GROUP BY stream ORDER BY stream",
            &[],
        )
        .await?;
    let mut out: Vec<CrosscheckOverview> = Vec::with_capacity(rows.len());
    for (
        stream,
        log_cursor,
        generation,
        last_poll,
        last_success,
        last_error,
        failures,
        healed,
        last_refused,
    ) in rows
    {
        out.push(CrosscheckOverview {
            stream,
            row: CrosscheckRow {
                log_cursor,
                generation,
                last_poll_at: last_poll.map(super::stored_time).transpose()?,
                last_success_at: last_success.map(super::stored_time).transpose()?,
                last_error,
                failures,
                healed,
                last_refused,
            },
            ..CrosscheckOverview::default()
        });
    }
    for (stream, revoke, grant, all, newest) in counts {
        let i = match out.binary_search_by(|o| o.stream.as_str().cmp(&stream)) {
            Ok(i) => i,
            Err(i) => {
                // Findings recorded before the poll's end committed (a
                // replica killed in between): open all the same.
                out.insert(
                    i,
                    CrosscheckOverview {
                        stream: stream.clone(),
                        ..CrosscheckOverview::default()
                    },
                );
                i
            }
        };
        let o = &mut out[i];
        o.open_revoke = revoke;
        o.open_grant = grant;
        o.open_other = all - revoke - grant;
        o.newest_open_at = Some(super::stored_time(newest)?);
    }
    Ok(out)
}

/// Rows read per statement while looking for a subject's findings.
const SUBJECT_CHUNK: i64 = 500;
/// Rows looked at in all for one subject: bounds the command's work on a
/// store with very many findings.
const SUBJECT_SCAN: usize = 100_000;

/// The findings (any stream, any state) whose subject or organization is
/// one of `forms` (a subject's stored forms: `store::veil`), oldest first,
/// at most `limit`. The database narrows by text (`LIKE`, whose case rules
/// differ between the engines); the exact comparison is made here on the
/// parsed finding, so both engines give the same answer.
pub(super) async fn subject_findings<D: Db>(
    db: &D,
    forms: &[String],
    limit: usize,
) -> Result<Vec<(String, StoredFinding)>, StoreError> {
    let mut out = Vec::new();
    for form in forms {
        // The finding's JSON holds the id as a JSON string; `LIKE`'s own
        // wildcards in it are escaped.
        let quoted =
            serde_json::to_string(form).map_err(|e| StoreError::Sql(format!("subject id: {e}")))?;
        let escaped = quoted
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        let pattern = format!("%{escaped}%");
        let mut after: (i64, String, String) = (i64::MIN, String::new(), String::new());
        let mut scanned = 0usize;
        loop {
            let rows: Vec<(String, String, String, i64, String)> = db
                .rows(
                    "SELECT stream, key, finding, found_at, state FROM crosscheck_findings
                     WHERE finding LIKE $1 ESCAPE '\\'
                       AND (found_at > $2 OR (found_at = $2 AND (stream > $3 OR (stream = $3 AND key > $4))))
                     ORDER BY found_at, stream, key LIMIT $5",
                    &[&pattern, &after.0, &after.1, &after.2, &SUBJECT_CHUNK],
                )
                .await?;
            let n = rows.len();
            for (stream, key, text, found_at, state) in rows {
                after = (found_at, stream.clone(), key.clone());
                let finding = super::crosscheck::finding_of(key, &text)?;
                let about = finding.subject == *form
                    || finding.organization.as_deref() == Some(form.as_str());
                if about
                    && !out.iter().any(|(s, f): &(String, StoredFinding)| {
                        *s == stream && f.finding.key == finding.key
                    })
                {
                    out.push((
                        stream,
                        StoredFinding {
                            finding,
                            found_at: super::stored_time(found_at)?,
                            state,
                        },
                    ));
                }
            }
            scanned += n;
            if (n as i64) < SUBJECT_CHUNK || out.len() >= limit || scanned >= SUBJECT_SCAN {
                break;
            }
        }
    }
    out.sort_by(|a, b| {
        (a.1.found_at, &a.0, &a.1.finding.key).cmp(&(b.1.found_at, &b.0, &b.1.finding.key))
    });
    out.truncate(limit);
    Ok(out)
}

/// Which of `keys` the stream has stored as findings, in the order asked:
/// a dry run's "new" column, without recording anything.
pub(super) async fn known_findings<D: Db>(
    db: &D,
    stream: &str,
    keys: &[String],
) -> Result<Vec<bool>, StoreError> {
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        let found: Option<(i32,)> = db
            .opt(
                "SELECT 1 FROM crosscheck_findings WHERE stream = $1 AND key = $2",
                &[&stream, key],
            )
            .await?;
        out.push(found.is_some());
    }
    Ok(out)
}

/// Deletes one snapshot generation of a stream, unless it is the one the
/// stream's state points at: a dry run's scratch listing. Returns the rows
/// deleted.
pub(super) async fn drop_generation<D: Db>(
    db: &D,
    stream: &str,
    generation: i64,
) -> Result<u64, StoreError> {
    let n = db
        .exec(
            "DELETE FROM crosscheck_snapshot WHERE stream = $1 AND generation = $2
               AND NOT EXISTS (SELECT 1 FROM crosscheck_state s
                               WHERE s.stream = $1 AND s.generation = $2)",
            &[&stream, &generation],
        )
        .await?;
    Ok(n)
}
