//! The cross-check's durable state (issue #45): per stream the poll
//! bookkeeping (WorkOS's log cursor, the generation of Clerk's complete
//! snapshot, last success and error, failures in a row), Clerk's snapshots
//! as rows, the unexplained changes waiting for a later poll, and every
//! finding once.
//!
//! - **Snapshots** are written page by page into a new generation
//!   ([`put_snapshot`]) and compared with the previous complete one in SQL
//!   ([`snapshot_changes`]), so neither listing is ever held in memory; a
//!   poll that fails half-way leaves a generation no state row points at,
//!   which the next [`finish_poll`] deletes.
//! - **Findings** are inserted once per (stream, key) ([`record_findings`]
//!   answers which were new): the key is derived from stored facts only
//!   (`domain::crosscheck`), so a restart or a second replica deciding the
//!   same change gets "not new" and pages nothing twice.
//! - [`finish_poll`] is a compare-and-set on the generation and cursor the
//!   poll started from: of two replicas that polled at once, one commits.
//! - **Pages** (`0024_crosscheck_pages`): [`page_missed`] claims every
//!   finding no page named yet (`page_key`, set where still NULL, so a
//!   finding goes to one page whoever claims at once) and queues one
//!   `provider_missed` page for them; [`resolve_settled`] resolves a page
//!   once none of its findings is open, to the notifiers it fired to
//!   (`crosscheck_pages`); [`set_failing`] moves the `crosscheck_failing`
//!   alert (`failing_paged`) to what `domain::crosscheck::poll_health`
//!   decided. A finding recorded by a poll killed before it paged is
//!   claimed by the next one: none is lost, none paged twice.
//!
//! Provider text is stored as JSON (`serde_json` escapes NUL and control
//! characters, which PostgreSQL's TEXT refuses).

use chrono::{DateTime, Utc};

use super::db::Db;
use super::ops::{delivery_hash, millis, KeyedAlert};
use super::seal::Sealed;
use super::{outbox, AlertState, StoreError, Transition};
use hushwatch_core::domain::crosscheck::{Change, Direction, Entry, Finding, Pending, When};

/// Migration step (SQLite and PostgreSQL alike: only portable types).
pub(crate) const MIGRATION: &str = "CREATE TABLE crosscheck_state (
        stream          TEXT PRIMARY KEY NOT NULL,
        log_cursor      TEXT,
        generation      BIGINT NOT NULL DEFAULT 0,
        last_poll_at    BIGINT,
        last_success_at BIGINT,
        last_error      TEXT,
        failures        BIGINT NOT NULL DEFAULT 0,
        healed          BIGINT NOT NULL DEFAULT 0
    );
    CREATE TABLE crosscheck_snapshot (
        stream      TEXT NOT NULL,
        generation  BIGINT NOT NULL,
        entry       TEXT NOT NULL,
        provider_id TEXT,
        PRIMARY KEY (stream, generation, entry)
    );
    CREATE TABLE crosscheck_pending (
        stream      TEXT NOT NULL,
        change      TEXT NOT NULL,
        since       BIGINT NOT NULL,
        seen_at     BIGINT NOT NULL,
        provider_id TEXT,
        PRIMARY KEY (stream, change)
    );
    CREATE TABLE crosscheck_findings (
        stream   TEXT NOT NULL,
        key      TEXT NOT NULL,
        finding  TEXT NOT NULL,
        found_at BIGINT NOT NULL,
        state    TEXT NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'healed', 'acknowledged')),
        PRIMARY KEY (stream, key)
    );";

/// Migration step `0024_crosscheck_pages`: whether the last failure was a
/// refused key (`crosscheck_failing` is critical at once then), which
/// `crosscheck_failing` page is out, and which `provider_missed` page named
/// each finding (a page resolves once all of its findings are settled).
pub(crate) const PAGES_MIGRATION: &str =
    "ALTER TABLE crosscheck_state ADD COLUMN last_refused BOOLEAN NOT NULL DEFAULT FALSE;
    ALTER TABLE crosscheck_state ADD COLUMN failing_paged TEXT;
    ALTER TABLE crosscheck_findings ADD COLUMN page_key TEXT;
    ALTER TABLE crosscheck_findings ADD COLUMN direction TEXT;
    CREATE TABLE crosscheck_pages (
        stream    TEXT NOT NULL,
        page_key  TEXT NOT NULL,
        severity  TEXT NOT NULL,
        notifiers TEXT NOT NULL,
        resolved  BOOLEAN NOT NULL DEFAULT FALSE,
        PRIMARY KEY (stream, page_key)
    );";

/// Migration step `0027_crosscheck_finding_body`: an event-log finding
/// keeps the logged event's body (sealed like a relay body, under the
/// stream and the provider's event id), so a heal that failed after the
/// poll moved its cursor (a storage error, a crash) is tried again on the
/// next poll instead of leaving the finding unhealable.
pub(crate) const BODY_MIGRATION_SQLITE: &str =
    "ALTER TABLE crosscheck_findings ADD COLUMN body_key TEXT;
    ALTER TABLE crosscheck_findings ADD COLUMN body BLOB;";
pub(crate) const BODY_MIGRATION_PG: &str =
    "ALTER TABLE crosscheck_findings ADD COLUMN body_key TEXT;
    ALTER TABLE crosscheck_findings ADD COLUMN body BYTEA;";

/// A stream's cross-check bookkeeping (absent before its first poll).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CrosscheckRow {
    /// WorkOS: the id of the last event decided.
    pub log_cursor: Option<String>,
    /// Clerk: the complete snapshot's generation (0: none yet, the next
    /// listing is the baseline).
    pub generation: i64,
    /// When the last complete poll finished (Clerk: its snapshot's time).
    pub last_poll_at: Option<DateTime<Utc>>,
    pub last_success_at: Option<DateTime<Utc>>,
    /// The last failure's text (never the key), cleared by a success.
    pub last_error: Option<String>,
    /// Failed polls in a row.
    pub failures: i64,
    pub healed: i64,
    /// A failure since the last success was the provider refusing the
    /// key (401/403): sticky until a success, so a 5xx after a refusal
    /// does not resolve the critical page.
    pub last_refused: bool,
}

impl CrosscheckRow {
    /// What `domain::crosscheck::poll_health` decides from.
    pub fn facts(&self) -> hushwatch_core::domain::crosscheck::PollFacts {
        hushwatch_core::domain::crosscheck::PollFacts {
            last_success_at: self.last_success_at,
            failures: self.failures,
            last_error: self.last_error.clone(),
            last_refused: self.last_refused,
        }
    }
}

/// The end of one poll, committed at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollEnd {
    Success {
        at: DateTime<Utc>,
        /// The new cursor (WorkOS), or the current one unchanged.
        log_cursor: Option<String>,
        /// The snapshot generation now complete (Clerk), or the current one.
        generation: i64,
        /// Replaces the stored pending changes (Clerk).
        pending: Vec<Pending>,
    },
    Failure {
        error: String,
        /// The provider refused the key (401/403).
        refused: bool,
    },
    /// An operator's `hushwatch crosscheck --restart` (issue #48): the
    /// event-log checkpoint is forgotten, so the next poll starts again
    /// from the watch start (at most the provider's retention back); used
    /// when the provider no longer keeps the checkpoint. Failures and the
    /// last error stay until a poll succeeds.
    Restart,
}

/// One finding as stored, with its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFinding {
    pub finding: Finding,
    pub found_at: DateTime<Utc>,
    /// `open`, `healed` or `acknowledged`.
    pub state: String,
}

// ------------------------------------------------------------ encodings

fn entry_json(e: &Entry) -> String {
    let v = match e {
        Entry::User { user } => serde_json::json!(["user", user]),
        Entry::Membership { organization, user } => {
            serde_json::json!(["membership", organization, user])
        }
    };
    v.to_string()
}

fn entry_of(text: &str) -> Result<Entry, StoreError> {
    let bad = || StoreError::Sql(format!("unreadable crosscheck entry {text:?}"));
    let v: Vec<String> = serde_json::from_str(text).map_err(|_| bad())?;
    match v.as_slice() {
        [kind, user] if kind == "user" => Ok(Entry::User { user: user.clone() }),
        [kind, organization, user] if kind == "membership" => Ok(Entry::Membership {
            organization: organization.clone(),
            user: user.clone(),
        }),
        _ => Err(bad()),
    }
}

fn change_json(c: &Change) -> String {
    let (verb, e) = match c {
        Change::Removed(e) => ("removed", e),
        Change::Added(e) => ("added", e),
    };
    serde_json::json!([verb, entry_json(e)]).to_string()
}

fn change_of(text: &str) -> Result<Change, StoreError> {
    let bad = || StoreError::Sql(format!("unreadable crosscheck change {text:?}"));
    let v: (String, String) = serde_json::from_str(text).map_err(|_| bad())?;
    let entry = entry_of(&v.1)?;
    match v.0.as_str() {
        "removed" => Ok(Change::Removed(entry)),
        "added" => Ok(Change::Added(entry)),
        _ => Err(bad()),
    }
}

fn finding_json(f: &Finding) -> String {
    let (at, from, until) = match f.when {
        When::At(t) => (Some(millis(t)), None, None),
        When::Between(a, b) => (None, Some(millis(a)), Some(millis(b))),
    };
    serde_json::json!({
        "direction": f.direction.as_str(),
        "event_type": f.event_type,
        "subject": f.subject,
        "organization": f.organization,
        "provider_id": f.provider_id,
        "at": at,
        "from": from,
        "until": until,
    })
    .to_string()
}

pub(super) fn finding_of(key: String, text: &str) -> Result<Finding, StoreError> {
    #[derive(serde::Deserialize)]
    struct Stored {
        direction: String,
        event_type: String,
        subject: String,
        organization: Option<String>,
        provider_id: Option<String>,
        at: Option<i64>,
        from: Option<i64>,
        until: Option<i64>,
    }
    let bad = || StoreError::Sql(format!("unreadable crosscheck finding {key:?}"));
    let s: Stored = serde_json::from_str(text).map_err(|_| bad())?;
    let direction = Direction::ALL
        .into_iter()
        .find(|d| d.as_str() == s.direction)
        .ok_or_else(bad)?;
    let when = match (s.at, s.from, s.until) {
        (Some(at), _, _) => When::At(super::stored_time(at)?),
        (None, Some(a), Some(b)) => When::Between(super::stored_time(a)?, super::stored_time(b)?),
        _ => return Err(bad()),
    };
    Ok(Finding {
        key,
        direction,
        event_type: s.event_type,
        subject: s.subject,
        organization: s.organization,
        provider_id: s.provider_id,
        when,
    })
}

// ----------------------------------------------------------- operations

type StateCols = (
    Option<String>,
    i64,
    Option<i64>,
    Option<i64>,
    Option<String>,
    i64,
    i64,
    bool,
);

pub(super) async fn state<D: Db>(
    db: &D,
    stream: &str,
) -> Result<Option<CrosscheckRow>, StoreError> {
    let row: Option<StateCols> = db
        .opt(
            "SELECT log_cursor, generation, last_poll_at, last_success_at, last_error, failures, healed,
                    last_refused
             FROM crosscheck_state WHERE stream = $1",
            &[&stream],
        )
        .await?;
    row.map(
        |(
            log_cursor,
            generation,
            last_poll,
            last_success,
            last_error,
            failures,
            healed,
            last_refused,
        )| {
            Ok(CrosscheckRow {
                log_cursor,
                generation,
                last_poll_at: last_poll.map(super::stored_time).transpose()?,
                last_success_at: last_success.map(super::stored_time).transpose()?,
                last_error,
                failures,
                healed,
                last_refused,
            })
        },
    )
    .transpose()
}

/// Adds one page of a listing to `generation` (a repeated entry is kept
/// once: a listing that pages by offset may show an entry twice).
pub(super) async fn put_snapshot<D: Db>(
    db: &D,
    stream: &str,
    generation: i64,
    entries: &[(Entry, Option<String>)],
) -> Result<(), StoreError> {
    for (entry, provider_id) in entries {
        db.exec(
            "INSERT INTO crosscheck_snapshot (stream, generation, entry, provider_id)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (stream, generation, entry) DO NOTHING",
            &[&stream, &generation, &entry_json(entry), provider_id],
        )
        .await?;
    }
    Ok(())
}

/// The changes from generation `previous` to `current`, with the provider
/// id the snapshot that had the entry kept (removals: the previous one).
/// Computed by the database: only the changes come back.
pub(super) async fn snapshot_changes<D: Db>(
    db: &D,
    stream: &str,
    previous: i64,
    current: i64,
    limit: i64,
) -> Result<Vec<(Change, Option<String>)>, StoreError> {
    const ONLY_IN: &str = "SELECT a.entry, a.provider_id FROM crosscheck_snapshot a
         WHERE a.stream = $1 AND a.generation = $2
           AND NOT EXISTS (SELECT 1 FROM crosscheck_snapshot b
                           WHERE b.stream = $1 AND b.generation = $3 AND b.entry = a.entry)
         ORDER BY a.entry LIMIT $4";
    let mut out = Vec::new();
    let removed: Vec<(String, Option<String>)> = db
        .rows(ONLY_IN, &[&stream, &previous, &current, &limit])
        .await?;
    for (entry, id) in removed {
        out.push((Change::Removed(entry_of(&entry)?), id));
    }
    let added: Vec<(String, Option<String>)> = db
        .rows(ONLY_IN, &[&stream, &current, &previous, &limit])
        .await?;
    for (entry, id) in added {
        out.push((Change::Added(entry_of(&entry)?), id));
    }
    Ok(out)
}

/// Whether `generation` lists `entry`.
pub(super) async fn snapshot_has<D: Db>(
    db: &D,
    stream: &str,
    generation: i64,
    entry: &Entry,
) -> Result<bool, StoreError> {
    let found: Option<(i32,)> = db
        .opt(
            "SELECT 1 FROM crosscheck_snapshot WHERE stream = $1 AND generation = $2 AND entry = $3",
            &[&stream, &generation, &entry_json(entry)],
        )
        .await?;
    Ok(found.is_some())
}

/// The stored pending changes of a stream.
pub(super) async fn pending<D: Db>(db: &D, stream: &str) -> Result<Vec<Pending>, StoreError> {
    let rows: Vec<(String, i64, i64, Option<String>)> = db
        .rows(
            "SELECT change, since, seen_at, provider_id FROM crosscheck_pending
             WHERE stream = $1 ORDER BY change",
            &[&stream],
        )
        .await?;
    rows.into_iter()
        .map(|(change, since, seen_at, provider_id)| {
            Ok(Pending {
                change: change_of(&change)?,
                since: super::stored_time(since)?,
                seen_at: super::stored_time(seen_at)?,
                provider_id,
            })
        })
        .collect()
}

/// Which of `ids` the stream received as webhooks (or recorded as healed),
/// in the order asked: the WorkOS join.
pub(super) async fn received<D: Db>(
    db: &D,
    stream: &str,
    ids: &[String],
) -> Result<Vec<bool>, StoreError> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let mut seen = false;
        for channel in ["webhook", "crosscheck"] {
            let found: Option<(i32,)> = db
                .opt(
                    "SELECT 1 FROM seen_deliveries WHERE hash = $1",
                    &[&delivery_hash(channel, stream, id)],
                )
                .await?;
            if found.is_some() {
                seen = true;
                break;
            }
        }
        out.push(seen);
    }
    Ok(out)
}

/// Stores each finding not stored yet; returns the keys that were new (in
/// the order given). Only those are paged.
pub(super) async fn record_findings<D: Db>(
    db: &D,
    stream: &str,
    findings: &[Finding],
    at: DateTime<Utc>,
) -> Result<Vec<String>, StoreError> {
    let mut new = Vec::new();
    for f in findings {
        let inserted = db
            .exec(
                "INSERT INTO crosscheck_findings (stream, key, finding, found_at, direction)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (stream, key) DO NOTHING",
                &[
                    &stream,
                    &f.key,
                    &finding_json(f),
                    &millis(at),
                    &f.direction.as_str(),
                ],
            )
            .await?;
        if inserted == 1 {
            new.push(f.key.clone());
        }
    }
    Ok(new)
}

/// [`record_findings`] for an event log: each finding with the logged
/// event's sealed body, in one transaction, so no finding is stored
/// without what heals it. A finding stored already keeps its body.
pub(super) async fn record_logged<D: Db>(
    db: &D,
    stream: &str,
    findings: &[(Finding, Sealed)],
    at: DateTime<Utc>,
) -> Result<Vec<String>, StoreError> {
    let plain: Vec<Finding> = findings.iter().map(|(f, _)| f.clone()).collect();
    let new = record_findings(db, stream, &plain, at).await?;
    for (f, body) in findings {
        db.exec(
            "UPDATE crosscheck_findings SET body_key = $3, body = $4
             WHERE stream = $1 AND key = $2 AND body IS NULL",
            &[&stream, &f.key, &body.key_id, &body.bytes],
        )
        .await?;
    }
    Ok(new)
}

/// Open findings that keep a logged body (what a heal after a later poll
/// delivers), oldest first, at most `limit`.
pub(super) async fn open_logged<D: Db>(
    db: &D,
    stream: &str,
    limit: i64,
) -> Result<Vec<(Finding, Sealed)>, StoreError> {
    let rows: Vec<(String, String, Option<String>, Vec<u8>)> = db
        .rows(
            "SELECT key, finding, body_key, body FROM crosscheck_findings
             WHERE stream = $1 AND state = 'open' AND body IS NOT NULL
             ORDER BY found_at, key LIMIT $2",
            &[&stream, &limit],
        )
        .await?;
    rows.into_iter()
        .map(|(key, text, key_id, bytes)| Ok((finding_of(key, &text)?, Sealed { key_id, bytes })))
        .collect()
}

/// A stream's findings, newest first, at most `limit`; with `open_only`
/// only those neither healed nor acknowledged.
pub(super) async fn findings<D: Db>(
    db: &D,
    stream: &str,
    open_only: bool,
    limit: i64,
) -> Result<Vec<StoredFinding>, StoreError> {
    let rows: Vec<(String, String, i64, String)> = db
        .rows(
            "SELECT key, finding, found_at, state FROM crosscheck_findings
             WHERE stream = $1 AND ($2 = FALSE OR state = 'open')
             ORDER BY found_at DESC, key LIMIT $3",
            &[&stream, &open_only, &limit],
        )
        .await?;
    rows.into_iter()
        .map(|(key, text, found_at, state)| {
            Ok(StoredFinding {
                finding: finding_of(key, &text)?,
                found_at: super::stored_time(found_at)?,
                state,
            })
        })
        .collect()
}

/// Marks an open finding healed or acknowledged; false when it was not
/// open (unknown, or settled already). Healing counts in `healed`. The
/// `provider_missed` page that named it resolves in the same transaction
/// once none of its findings is open ([`resolve_settled`]).
pub(super) async fn settle_finding<D: Db>(
    db: &D,
    stream: &str,
    key: &str,
    healed: bool,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let state = if healed { "healed" } else { "acknowledged" };
    let n = db
        .exec(
            "UPDATE crosscheck_findings SET state = $3
             WHERE stream = $1 AND key = $2 AND state = 'open'",
            &[&stream, &key, &state],
        )
        .await?;
    if n == 1 && healed {
        db.exec(
            "UPDATE crosscheck_state SET healed = healed + 1 WHERE stream = $1",
            &[&stream],
        )
        .await?;
    }
    if n == 1 {
        resolve_settled(db, stream, now).await?;
    }
    Ok(n == 1)
}

// ------------------------------------------------------------------ pages

/// Who a stream's cross-check pages go to, and what they name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageTarget {
    pub stream: String,
    pub provider: hushwatch_core::domain::crosscheck::Provider,
    /// The sidecar's config file, for the commands pages print.
    pub config_path: String,
    pub notifiers: Vec<String>,
}

fn missed_alert<'a>(key: &'a str, severity: &'a str, stream: &'a str) -> KeyedAlert<'a> {
    KeyedAlert {
        kind: hushwatch_core::domain::alert_kind::AlertKind::ProviderMissed,
        family: "crosscheck-missed",
        key,
        severity,
        source: "crosscheck",
        endpoint_id: stream,
    }
}

fn failing_alert<'a>(stream: &'a str, severity: &'a str) -> KeyedAlert<'a> {
    KeyedAlert {
        kind: hushwatch_core::domain::alert_kind::AlertKind::CrosscheckFailing,
        family: "crosscheck-failing",
        key: stream,
        severity,
        source: "crosscheck",
        endpoint_id: stream,
    }
}

fn transition(
    stream: &str,
    firing: bool,
    at: DateTime<Utc>,
    reason: String,
    notifiers: Vec<String>,
) -> Transition {
    Transition {
        stream: stream.to_owned(),
        to: AlertState::from_firing(firing),
        at,
        reason,
        notifiers,
    }
}

/// Pages every recorded finding of the stream that no page named yet (the
/// ones this poll recorded, and any a killed poll or the CLI left), as one
/// `provider_missed` page: critical when one of them is a missed
/// revocation. The findings are claimed first (`page_key` set where it is
/// still NULL), so of two callers at once each finding goes to one page.
/// Returns the findings the page named (at most `PAGE_NAMES_AT_MOST`) and
/// how many it counted; `(vec![], 0)` when there was nothing to page.
pub(super) async fn page_missed<D: Db>(
    db: &D,
    target: &PageTarget,
    now: DateTime<Utc>,
) -> Result<(Vec<Finding>, usize), StoreError> {
    use hushwatch_core::domain::crosscheck::{page_text, PAGE_NAMES_AT_MOST};
    let stream = target.stream.as_str();
    // A page key not used yet for the stream (two pages in one millisecond
    // take the next one).
    let mut at = millis(now);
    let page_key = loop {
        let key = format!("{at:013}");
        let used: Option<(String,)> = db
            .opt(
                "SELECT page_key FROM crosscheck_pages WHERE stream = $1 AND page_key = $2",
                &[&stream, &key],
            )
            .await?;
        if used.is_none() {
            break key;
        }
        at += 1;
    };
    let claimed = db
        .exec(
            "UPDATE crosscheck_findings SET page_key = $2
             WHERE stream = $1 AND page_key IS NULL AND state = 'open'",
            &[&stream, &page_key],
        )
        .await?;
    if claimed == 0 {
        return Ok((Vec::new(), 0));
    }
    let total = super::ops::count(claimed);
    let revocations: Option<(String,)> = db
        .opt(
            "SELECT key FROM crosscheck_findings
             WHERE stream = $1 AND page_key = $2 AND direction = 'revoke' LIMIT 1",
            &[&stream, &page_key],
        )
        .await?;
    let severity = if revocations.is_some() {
        "critical"
    } else {
        "warning"
    };
    let limit = PAGE_NAMES_AT_MOST as i64;
    // Revocations first: the page names what matters most when it has to
    // leave some out.
    let rows: Vec<(String, String)> = db
        .rows(
            "SELECT key, finding FROM crosscheck_findings WHERE stream = $1 AND page_key = $2
             ORDER BY CASE WHEN direction = 'revoke' THEN 0 ELSE 1 END, found_at, key LIMIT $3",
            &[&stream, &page_key, &limit],
        )
        .await?;
    let named = rows
        .into_iter()
        .map(|(key, text)| finding_of(key, &text))
        .collect::<Result<Vec<_>, _>>()?;
    let notifiers = serde_json::to_string(&target.notifiers)
        .map_err(|e| StoreError::Sql(format!("notifiers: {e}")))?;
    db.exec(
        "INSERT INTO crosscheck_pages (stream, page_key, severity, notifiers) VALUES ($1, $2, $3, $4)",
        &[&stream, &page_key, &severity, &notifiers],
    )
    .await?;
    let text = page_text(target.provider, stream, &target.config_path, &named, total);
    let t = transition(stream, true, now, text, target.notifiers.clone());
    let key = format!("{stream}/{page_key}");
    outbox::queue_keyed_pages(db, &t, now, &missed_alert(&key, severity, stream)).await?;
    Ok((named, total))
}

/// Resolves each `provider_missed` page of the stream none of whose
/// findings is still open (all healed or acknowledged), to the notifiers
/// it fired to. Returns how many resolved.
pub(super) async fn resolve_settled<D: Db>(
    db: &D,
    stream: &str,
    now: DateTime<Utc>,
) -> Result<usize, StoreError> {
    let done: Vec<(String, String, String)> = db
        .rows(
            "SELECT p.page_key, p.severity, p.notifiers FROM crosscheck_pages p
             WHERE p.stream = $1 AND p.resolved = FALSE
               AND NOT EXISTS (SELECT 1 FROM crosscheck_findings f
                               WHERE f.stream = p.stream AND f.page_key = p.page_key
                                 AND f.state = 'open')
             ORDER BY p.page_key",
            &[&stream],
        )
        .await?;
    let mut resolved = 0;
    for (page_key, severity, notifiers) in done {
        let flipped = db
            .exec(
                "UPDATE crosscheck_pages SET resolved = TRUE
                 WHERE stream = $1 AND page_key = $2 AND resolved = FALSE",
                &[&stream, &page_key],
            )
            .await?;
        if flipped == 0 {
            continue;
        }
        let notifiers: Vec<String> = serde_json::from_str(&notifiers)
            .map_err(|_| StoreError::Sql(format!("unreadable crosscheck page {page_key:?}")))?;
        let t = transition(
            stream,
            false,
            now,
            format!(
                "every change this page named on stream {stream} is now healed or acknowledged"
            ),
            notifiers,
        );
        let key = format!("{stream}/{page_key}");
        outbox::queue_keyed_pages(db, &t, now, &missed_alert(&key, &severity, stream)).await?;
        resolved += 1;
    }
    Ok(resolved)
}

/// Acknowledges every open finding a page named on the stream (what
/// acknowledging the stream does to its `provider_missed` pages), and
/// resolves those pages. Returns how many findings it settled.
pub(super) async fn acknowledge_paged<D: Db>(
    db: &D,
    stream: &str,
    now: DateTime<Utc>,
) -> Result<usize, StoreError> {
    let n = db
        .exec(
            "UPDATE crosscheck_findings SET state = 'acknowledged'
             WHERE stream = $1 AND state = 'open' AND page_key IS NOT NULL",
            &[&stream],
        )
        .await?;
    if n > 0 {
        resolve_settled(db, stream, now).await?;
    }
    Ok(super::ops::count(n))
}

/// Moves the stream's `crosscheck_failing` alert to what `health` says
/// (firing with its severity, or resolved), queuing its page when it
/// moves: once when it starts, again only when its severity changes, and a
/// resolve when the poll works again. Returns whether a page was queued.
pub(super) async fn set_failing<D: Db>(
    db: &D,
    target: &PageTarget,
    health: &hushwatch_core::domain::crosscheck::PollHealth,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    use hushwatch_core::domain::crosscheck::{failing_text, PollHealth};
    let stream = target.stream.as_str();
    db.exec(
        "INSERT INTO crosscheck_state (stream) VALUES ($1) ON CONFLICT (stream) DO NOTHING",
        &[&stream],
    )
    .await?;
    let row: Option<(Option<String>,)> = db
        .opt(
            &D::locked("SELECT failing_paged FROM crosscheck_state WHERE stream = $1"),
            &[&stream],
        )
        .await?;
    let paged = row.and_then(|(p,)| p);
    let (want, reason) = match health {
        PollHealth::Ok => (None, String::new()),
        PollHealth::Failing { critical, reason } => (
            Some(if *critical { "critical" } else { "warning" }),
            reason.clone(),
        ),
    };
    if want == paged.as_deref() {
        return Ok(false);
    }
    db.exec(
        "UPDATE crosscheck_state SET failing_paged = $2 WHERE stream = $1",
        &[&stream, &want],
    )
    .await?;
    let (firing, severity, text) = match want {
        Some(severity) => (
            true,
            severity,
            failing_text(target.provider, stream, &target.config_path, &reason),
        ),
        None => (
            false,
            paged.as_deref().unwrap_or("warning"),
            format!(
                "the cross-check of stream {stream} reads the {} API again",
                target.provider.title()
            ),
        ),
    };
    let t = transition(stream, firing, now, text, target.notifiers.clone());
    outbox::queue_keyed_pages(db, &t, now, &failing_alert(stream, severity)).await?;
    Ok(true)
}

/// Commits the end of a poll that started from `started` (the row as it
/// read it; `None`: no row yet). A success sets cursor, generation and
/// pending changes and deletes every other snapshot generation; a failure
/// counts one more in a row. Returns false, changing nothing, when another
/// poll committed since `started` (its answer stands).
pub(super) async fn finish_poll<D: Db>(
    db: &D,
    stream: &str,
    started: Option<&CrosscheckRow>,
    end: &PollEnd,
) -> Result<bool, StoreError> {
    db.exec(
        "INSERT INTO crosscheck_state (stream) VALUES ($1) ON CONFLICT (stream) DO NOTHING",
        &[&stream],
    )
    .await?;
    let current = state(db, stream).await?.unwrap_or_default();
    let started = started.cloned().unwrap_or_default();
    if current.generation != started.generation || current.log_cursor != started.log_cursor {
        return Ok(false);
    }
    match end {
        PollEnd::Success {
            at,
            log_cursor,
            generation,
            pending,
        } => {
            db.exec(
                "UPDATE crosscheck_state SET log_cursor = $2, generation = $3, last_poll_at = $4,
                        last_success_at = $4, last_error = NULL, failures = 0,
                        last_refused = FALSE
                 WHERE stream = $1",
                &[&stream, log_cursor, generation, &millis(*at)],
            )
            .await?;
            db.exec(
                "DELETE FROM crosscheck_snapshot WHERE stream = $1 AND generation <> $2",
                &[&stream, generation],
            )
            .await?;
            db.exec(
                "DELETE FROM crosscheck_pending WHERE stream = $1",
                &[&stream],
            )
            .await?;
            for p in pending {
                db.exec(
                    "INSERT INTO crosscheck_pending (stream, change, since, seen_at, provider_id)
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (stream, change) DO NOTHING",
                    &[
                        &stream,
                        &change_json(&p.change),
                        &millis(p.since),
                        &millis(p.seen_at),
                        &p.provider_id,
                    ],
                )
                .await?;
            }
        }
        PollEnd::Restart => {
            db.exec(
                "UPDATE crosscheck_state SET log_cursor = NULL WHERE stream = $1",
                &[&stream],
            )
            .await?;
        }
        PollEnd::Failure { error, refused } => {
            db.exec(
                "UPDATE crosscheck_state SET last_error = $2, failures = failures + 1,
                        last_refused = last_refused OR $3
                 WHERE stream = $1",
                &[&stream, error, refused],
            )
            .await?;
            // A failed listing's partial generation is never read again.
            db.exec(
                "DELETE FROM crosscheck_snapshot WHERE stream = $1 AND generation > $2",
                &[&stream, &current.generation],
            )
            .await?;
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_changes_and_findings_round_trip_through_their_stored_text() {
        let m = Entry::Membership {
            organization: "org_\"9\0".into(),
            user: "user\n1".into(),
        };
        assert_eq!(entry_of(&entry_json(&m)).unwrap(), m);
        assert!(!entry_json(&m).contains('\0'));
        let c = Change::Removed(m.clone());
        assert_eq!(change_of(&change_json(&c)).unwrap(), c);
        let f = Finding {
            key: "k".into(),
            direction: Direction::Revoke,
            event_type: "organizationMembership.deleted".into(),
            subject: "user\n1".into(),
            organization: Some("org_9".into()),
            provider_id: None,
            when: When::Between(
                DateTime::from_timestamp_millis(1_000).unwrap(),
                DateTime::from_timestamp_millis(2_000).unwrap(),
            ),
        };
        assert_eq!(finding_of("k".into(), &finding_json(&f)).unwrap(), f);
        assert!(entry_of("[\"group\",\"x\"]").is_err());
    }
}
