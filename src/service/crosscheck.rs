//! One cross-check poll of one stream (issue #45): ask the provider
//! (`crosscheck`, the adapter), decide (`domain::crosscheck`), keep the
//! cursor, snapshot, pending changes and findings (`store::crosscheck`).
//!
//! - **WorkOS** ([`Source::EventLog`]): pages of `GET /events` from the
//!   stored cursor (first poll: from the watch start, at most
//!   [`FIRST_POLL_LOOKBACK`] back), each joined with the ids the stream
//!   received; the cursor moves only over decided events.
//! - **Clerk** ([`Source::State`]): the listing is written page by page
//!   into a new snapshot generation, diffed with the previous one by the
//!   store, and each change no received webhook explains waits in
//!   `crosscheck_pending` until a later poll confirms it. The first poll is
//!   the baseline.
//!
//! A poll either ends in one `finish_poll` commit or fails as a whole: a
//! provider error is recorded as a failure (`crosscheck_failing` is decided
//! from the row), a storage error leaves the previous poll's state as it
//! was. Findings are recorded once per key before the poll's end commits,
//! so a replica killed between the two leaves findings that the next poll
//! decides again under the same keys: recorded as not new, paged once.
//!
//! [`run`] is the scheduled task `serve` starts: every `every`, on the
//! housekeeping leader only, one [`poll_once`] per stream under a
//! whole-poll deadline, then the pages the stored state calls for
//! (`provider_missed` for findings no page named yet, `crosscheck_failing`
//! from `domain::crosscheck::poll_health`) and the metrics.

use super::core::Core;
use super::crosscheck_heal::Ingest;
use super::feed::Mirror;
use super::replicas::Lead;
use crate::audit::classify::{Access, Classifier};
use crate::clock::Clock;
use crate::config::crosscheck::CrosscheckConfig;
use crate::config::Config;
use crate::crosscheck::{EventLog, LogPosition, PollError, Source, StateListing, MAX_PAGES};
use crate::domain::crosscheck::poll_health;
use crate::domain::crosscheck::{
    join_provider_log, Change, Direction, Entry, Finding, LoggedEvent, Pending, Received, Verdict,
};
use crate::store::crosscheck::{PageTarget, PollEnd};
use crate::store::seal::Sealer;
use crate::store::veil::Veil;
use crate::store::{Store, StoreError};
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The first WorkOS poll reads back at most this far: received delivery
/// ids are kept 7 days (`prune_seen`), so an older event could not be
/// joined and would read as missed.
pub const FIRST_POLL_LOOKBACK: TimeDelta = TimeDelta::days(7);
/// Changes read per snapshot comparison, each way. A listing that changes
/// more than this between two polls fails the poll rather than page a
/// partial picture.
pub const MAX_CHANGES: i64 = 100_000;
/// WorkOS findings one poll collects at most (with their logged bodies,
/// kept for a heal); the poll ends at the page that reaches it and the
/// next one goes on from the cursor.
pub const MAX_LOG_FINDINGS: usize = 1_000;
/// Audit entries read per subject when explaining a change.
const EXPLAIN_LOOKUP: i64 = 200;

pub use super::crosscheck_report::{revealed, PollFailure, PollReport};

/// The provider source for a stream's `[crosscheck]` table.
pub fn source(config: &CrosscheckConfig) -> Source {
    crate::crosscheck::source(config)
}

/// Runs one poll of `stream` now. A provider failure is recorded on the
/// stream's row (failures in a row, last error) before it is returned.
// Each argument is a distinct piece the scheduled task and the CLI each
// hold already; a struct bundling them would only be rebuilt per call.
#[allow(clippy::too_many_arguments)]
pub async fn poll_once(
    store: &Store,
    stream: &str,
    config: &CrosscheckConfig,
    source: &Source,
    classifier: &Classifier,
    sealer: &Sealer,
    watch_started_at: DateTime<Utc>,
    clock: &dyn Clock,
) -> Result<PollReport, PollFailure> {
    poll(
        store,
        stream,
        config,
        source,
        classifier,
        sealer,
        watch_started_at,
        clock,
        Mode::Commit,
    )
    .await
}

/// `hushwatch crosscheck --dry-run`: the same poll, decided the same way,
/// that stores and pages nothing: no cursor moved, no generation advanced,
/// no finding, failure or pending change recorded. Clerk's listing is
/// written into a scratch generation (negative, so no poll's generation
/// is ever it) that is deleted before this returns. `new_keys` names the
/// findings no poll has stored yet; `committed` is false.
#[allow(clippy::too_many_arguments)]
pub async fn poll_dry_run(
    store: &Store,
    stream: &str,
    config: &CrosscheckConfig,
    source: &Source,
    classifier: &Classifier,
    sealer: &Sealer,
    watch_started_at: DateTime<Utc>,
    clock: &dyn Clock,
) -> Result<PollReport, PollFailure> {
    let scratch = -clock.now().timestamp_millis().max(1);
    let result = poll(
        store,
        stream,
        config,
        source,
        classifier,
        sealer,
        watch_started_at,
        clock,
        Mode::DryRun { scratch },
    )
    .await;
    if matches!(source, Source::State(_)) {
        store
            .crosscheck_drop_generation(stream.to_owned(), scratch)
            .await?;
    }
    result
}

/// Whether a poll commits its end (`poll_once`) or only reports it
/// (`poll_dry_run`, into snapshot generation `scratch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Commit,
    DryRun { scratch: i64 },
}

#[allow(clippy::too_many_arguments)]
async fn poll(
    store: &Store,
    stream: &str,
    config: &CrosscheckConfig,
    source: &Source,
    classifier: &Classifier,
    sealer: &Sealer,
    watch_started_at: DateTime<Utc>,
    clock: &dyn Clock,
    mode: Mode,
) -> Result<PollReport, PollFailure> {
    let started = store.crosscheck_state(stream.to_owned()).await?;
    let result = match source {
        Source::EventLog(log) => {
            poll_log(
                store,
                stream,
                config,
                log.as_ref(),
                classifier,
                sealer,
                watch_started_at,
                clock,
                started.clone(),
                mode,
            )
            .await
        }
        Source::Delta(feed) => {
            super::crosscheck_delta::poll_delta(
                store,
                stream,
                config,
                feed.as_ref(),
                sealer.veil(),
                clock.now(),
                started.clone(),
                mode == Mode::Commit,
            )
            .await
        }
        Source::State(listing) => {
            poll_state(
                store,
                stream,
                config,
                listing.as_ref(),
                sealer.veil(),
                clock,
                started.clone(),
                mode,
            )
            .await
        }
    };
    if mode != Mode::Commit {
        return result;
    }
    if let Err(PollFailure::Provider(e)) = &result {
        store
            .crosscheck_finish_poll(
                stream.to_owned(),
                started,
                PollEnd::Failure {
                    error: e.to_string(),
                    refused: matches!(e, PollError::Refused { .. }),
                },
            )
            .await?;
    }
    result
}

/// An event-log finding's direction: Okta's and Auth0's types by the
/// domain's tables first, then (every provider) the audit classifier.
fn log_direction(
    provider: crate::domain::crosscheck::Provider,
    classifier: &Classifier,
    event_type: &str,
) -> Direction {
    match provider {
        crate::domain::crosscheck::Provider::Auth0 => {
            crate::domain::crosscheck::auth0_direction(event_type)
                .unwrap_or_else(|| direction(classifier, event_type))
        }
        crate::domain::crosscheck::Provider::Okta => {
            crate::domain::crosscheck::okta_direction(event_type)
                .unwrap_or_else(|| direction(classifier, event_type))
        }
        _ => direction(classifier, event_type),
    }
}

/// Auth0 `sapi` findings take their direction from the request they
/// logged (`domain::crosscheck::auth0_sapi_direction`); one whose request
/// changed no user's access (a client, a connection, metadata) is not a
/// finding at all.
fn auth0_sapi_findings(findings: &mut Vec<Finding>, bodies: &HashMap<String, Vec<u8>>) {
    findings.retain_mut(|f| {
        if f.event_type != "sapi" {
            return true;
        }
        let request = f
            .provider_id
            .as_ref()
            .and_then(|id| bodies.get(id))
            .and_then(|b| crate::crosscheck::auth0::sapi_request_of(b));
        match request
            .as_ref()
            .and_then(crate::domain::crosscheck::auth0_sapi_direction)
        {
            Some((direction, _)) => {
                f.direction = direction;
                true
            }
            None => false,
        }
    });
}

fn direction(classifier: &Classifier, event_type: &str) -> Direction {
    match classifier.classify(event_type) {
        Access::Revoke => Direction::Revoke,
        Access::Grant => Direction::Grant,
        Access::Change | Access::Neutral => Direction::Other,
    }
}

#[allow(clippy::too_many_arguments)]
async fn poll_log(
    store: &Store,
    stream: &str,
    config: &CrosscheckConfig,
    log: &dyn EventLog,
    classifier: &Classifier,
    sealer: &Sealer,
    watch_started_at: DateTime<Utc>,
    clock: &dyn Clock,
    started: Option<crate::store::crosscheck::CrosscheckRow>,
    mode: Mode,
) -> Result<PollReport, PollFailure> {
    let veil = sealer.veil();
    let now = clock.now();
    let mut cursor = started.as_ref().and_then(|r| r.log_cursor.clone());
    let lookback = log.retention().min(FIRST_POLL_LOOKBACK);
    let mut position = match &cursor {
        Some(id) => LogPosition::After(id.clone()),
        None => LogPosition::Since(watch_started_at.max(now - lookback)),
    };
    let mut findings = Vec::new();
    let mut bodies = BTreeMap::new();
    let mut ended = false;
    let max_requests = log.max_requests().min(MAX_PAGES);
    for _ in 0..max_requests {
        let page = log.page(&position).await.map_err(PollFailure::Provider)?;
        let ids: Vec<String> = page.events.iter().map(|e| e.event.id.clone()).collect();
        let seen = store
            .crosscheck_received(stream.to_owned(), ids.clone())
            .await?;
        let received: HashSet<&str> = ids
            .iter()
            .zip(&seen)
            .filter(|(_, s)| **s)
            .map(|(id, _)| id.as_str())
            .collect();
        let mut page_bodies: HashMap<String, Vec<u8>> = HashMap::new();
        let logged: Vec<LoggedEvent> = page
            .events
            .into_iter()
            .map(|e| {
                page_bodies.insert(e.event.id.clone(), e.body);
                e.event
            })
            .collect();
        let mut out = join_provider_log(
            config.provider,
            &logged,
            &config.types,
            config.grace,
            now,
            &|id| received.contains(id),
            &|ty| log_direction(config.provider, classifier, ty),
        );
        if config.provider == crate::domain::crosscheck::Provider::Auth0 {
            auth0_sapi_findings(&mut out.findings, &page_bodies);
        }
        for f in &out.findings {
            if let Some(body) = f.provider_id.as_ref().and_then(|id| page_bodies.remove(id)) {
                bodies.insert(f.key.clone(), body);
            }
        }
        findings.extend(out.findings);
        let whole_page = !out.reached_undecided
            && out.decided_through.as_deref() == ids.last().map(String::as_str);
        if let Some(kept) = log.cursor_after(
            &position,
            page.next.as_deref(),
            out.decided_through.as_deref(),
            whole_page,
        ) {
            cursor = Some(kept);
        }
        // A log full of missed events (a stream whose webhooks never
        // arrived) is read over several polls, from the cursor, rather
        // than held whole: findings and their bodies stay bounded.
        // An empty page is the end of the log for now (Okta's polling mode
        // links on from it forever).
        if out.reached_undecided || findings.len() >= MAX_LOG_FINDINGS || ids.is_empty() {
            ended = true;
            break;
        }
        match page.next {
            Some(next) => position = LogPosition::After(next),
            None => {
                ended = true;
                break;
            }
        }
    }
    // A provider that caps its requests per poll (Okta) goes on from the
    // kept cursor next poll; for the others this many pages is a cursor
    // that never ends.
    if !ended && max_requests == MAX_PAGES {
        return Err(PollFailure::Provider(PollError::Failed(format!(
            "GET /events: more than {MAX_PAGES} pages in one poll (an endless cursor?)"
        ))));
    }
    if mode != Mode::Commit {
        return dry_report(store, stream, findings, false, 0).await;
    }
    // Stored under `[store] encryption_key` like every subject id; the
    // report keeps the plaintext for its callers.
    // With each its logged body, sealed under the stream and the event's
    // id (what a heal after a later poll opens it with); a finding whose
    // body cannot be sealed is stored without one and cannot be healed.
    let mut logged = Vec::new();
    let mut unlogged = Vec::new();
    for f in &findings {
        let sealed = match (&f.provider_id, bodies.get(&f.key)) {
            (Some(id), Some(body)) => sealer.seal(stream, id, body).ok(),
            _ => None,
        };
        match sealed {
            Some(body) => logged.push((veiled(veil, f), body)),
            None => unlogged.push(veiled(veil, f)),
        }
    }
    let mut new_keys = store
        .crosscheck_record_logged(stream.to_owned(), logged, now)
        .await?;
    if !unlogged.is_empty() {
        new_keys.extend(
            store
                .crosscheck_record_findings(stream.to_owned(), unlogged, now)
                .await?,
        );
    }
    let generation = started.as_ref().map_or(0, |r| r.generation);
    let committed = store
        .crosscheck_finish_poll(
            stream.to_owned(),
            started,
            PollEnd::Success {
                at: now,
                log_cursor: cursor,
                generation,
                pending: Vec::new(),
            },
        )
        .await?;
    Ok(PollReport {
        findings,
        new_keys,
        baseline: false,
        pending: 0,
        committed,
        bodies,
    })
}

#[allow(clippy::too_many_arguments)]
async fn poll_state(
    store: &Store,
    stream: &str,
    config: &CrosscheckConfig,
    listing: &dyn StateListing,
    veil: &Veil,
    clock: &dyn Clock,
    started: Option<crate::store::crosscheck::CrosscheckRow>,
    mode: Mode,
) -> Result<PollReport, PollFailure> {
    let previous = started.as_ref().map_or(0, |r| r.generation);
    let generation = match mode {
        Mode::Commit => previous + 1,
        Mode::DryRun { scratch } => scratch,
    };
    let mut run = listing.start();
    let mut listed = 0usize;
    while let Some(page) = run.next_page().await.map_err(PollFailure::Provider)? {
        listed += page.len();
        let rows = page
            .into_iter()
            .map(|l| (veil_entry(veil, &l.entry), l.provider_id))
            .collect();
        store
            .crosscheck_put_snapshot(stream.to_owned(), generation, rows)
            .await?;
    }
    let now = clock.now();
    let since = started.as_ref().and_then(|r| r.last_poll_at);
    let (Some(since), true) = (since, previous > 0) else {
        // The baseline: nothing to compare with, nothing paged.
        if mode != Mode::Commit {
            return dry_report(store, stream, Vec::new(), true, 0).await;
        }
        let committed = store
            .crosscheck_finish_poll(
                stream.to_owned(),
                started,
                PollEnd::Success {
                    at: now,
                    log_cursor: None,
                    generation,
                    pending: Vec::new(),
                },
            )
            .await?;
        return Ok(PollReport {
            baseline: true,
            committed,
            ..PollReport::default()
        });
    };
    let changes = store
        .crosscheck_snapshot_changes(stream.to_owned(), previous, generation, MAX_CHANGES)
        .await?;
    let changes = without_rekeyed(veil, changes);
    let removed = changes
        .iter()
        .filter(|(c, _)| matches!(c, Change::Removed(_)))
        .count();
    // An empty listing where there were entries is far likelier a broken
    // answer than everyone removed at once: fail rather than page it.
    if listed == 0 && removed > 0 {
        return Err(PollFailure::Provider(PollError::Failed(format!(
            "the listing came back empty where the last one had {removed} entries; not read as their removal"
        ))));
    }
    if changes.len() as i64 >= MAX_CHANGES {
        return Err(PollFailure::Provider(PollError::Failed(format!(
            "more than {MAX_CHANGES} changes since the last poll; poll more often"
        ))));
    }
    let mut waiting: Vec<Pending> = store.crosscheck_pending(stream.to_owned()).await?;
    // A change undoing a waiting one (a lagging listing that shows the
    // entry again) is no change: the waiting one settles as reverted.
    let known: HashSet<&crate::domain::crosscheck::Entry> =
        waiting.iter().map(|p| p.change.entry()).collect();
    let fresh: Vec<(Change, Option<String>)> = changes
        .into_iter()
        .filter(|(c, _)| !known.contains(c.entry()))
        .collect();
    waiting.extend(fresh.into_iter().map(|(change, provider_id)| Pending {
        change,
        since,
        seen_at: now,
        provider_id,
    }));
    let mut findings = Vec::new();
    let mut keep = Vec::new();
    for p in waiting {
        let listed_now = store
            .crosscheck_snapshot_has(stream.to_owned(), generation, p.change.entry().clone())
            .await?;
        let received = explaining(store, stream, &p, config.grace, veil).await?;
        match p.decide(now, config.grace, listed_now, &received) {
            Verdict::Settled => {}
            Verdict::Wait => keep.push(p),
            Verdict::Missed(f) => findings.push(f),
        }
    }
    // Decided over the stored forms (veiled ids and keys built from them);
    // the report reads in plaintext, keys as stored.
    if mode != Mode::Commit {
        let findings = findings.iter().map(|f| revealed(veil, f)).collect();
        return dry_report(store, stream, findings, false, keep.len()).await;
    }
    let new_keys = store
        .crosscheck_record_findings(stream.to_owned(), findings.clone(), now)
        .await?;
    let findings = findings.iter().map(|f| revealed(veil, f)).collect();
    let pending = keep.len();
    let committed = store
        .crosscheck_finish_poll(
            stream.to_owned(),
            started,
            PollEnd::Success {
                at: now,
                log_cursor: None,
                generation,
                pending: keep,
            },
        )
        .await?;
    Ok(PollReport {
        findings,
        new_keys,
        baseline: false,
        pending,
        committed,
        bodies: BTreeMap::new(),
    })
}

/// A dry run's report: the findings no poll stored yet are its new ones.
async fn dry_report(
    store: &Store,
    stream: &str,
    findings: Vec<Finding>,
    baseline: bool,
    pending: usize,
) -> Result<PollReport, PollFailure> {
    let keys: Vec<String> = findings.iter().map(|f| f.key.clone()).collect();
    let known = store
        .crosscheck_known_findings(stream.to_owned(), keys.clone())
        .await?;
    let new_keys = keys
        .into_iter()
        .zip(known)
        .filter(|(_, k)| !k)
        .map(|(key, _)| key)
        .collect();
    Ok(PollReport {
        findings,
        new_keys,
        baseline,
        pending,
        committed: false,
        bodies: BTreeMap::new(),
    })
}

/// An entry as the snapshot stores it: ids veiled under `[store]
/// encryption_key` (the same value unchanged without one).
fn veil_entry(veil: &Veil, e: &Entry) -> Entry {
    match e {
        Entry::User { user } => Entry::User {
            user: veil.hide(user),
        },
        Entry::Membership { organization, user } => Entry::Membership {
            organization: veil.hide(organization),
            user: veil.hide(user),
        },
    }
}

/// Drops each removal whose entry comes back as an addition under another
/// token of the same ids: after a key rotation the previous snapshot's
/// tokens are the old key's, and nothing changed at the provider.
fn without_rekeyed(
    veil: &Veil,
    changes: Vec<(Change, Option<String>)>,
) -> Vec<(Change, Option<String>)> {
    if !veil.is_on() {
        return changes;
    }
    let plain = |e: &Entry| match e {
        Entry::User { user } => (None, veil.reveal(user).into_owned()),
        Entry::Membership { organization, user } => (
            Some(veil.reveal(organization).into_owned()),
            veil.reveal(user).into_owned(),
        ),
    };
    let added: HashSet<(Option<String>, String)> = changes
        .iter()
        .filter(|(c, _)| matches!(c, Change::Added(_)))
        .map(|(c, _)| plain(c.entry()))
        .collect();
    let removed: HashSet<(Option<String>, String)> = changes
        .iter()
        .filter(|(c, _)| matches!(c, Change::Removed(_)))
        .map(|(c, _)| plain(c.entry()))
        .collect();
    changes
        .into_iter()
        .filter(|(c, _)| {
            let other = match c {
                Change::Removed(_) => &added,
                Change::Added(_) => &removed,
            };
            !other.contains(&plain(c.entry()))
        })
        .collect()
}

/// A finding as stored: its subject and organization veiled.
fn veiled(veil: &Veil, f: &Finding) -> Finding {
    Finding {
        subject: veil.hide(&f.subject),
        organization: f.organization.as_deref().map(|o| veil.hide(o)),
        ..f.clone()
    }
}

/// The webhooks the stream received in the change's window about its user
/// or organization, read from the audit log (`subject_entries`). With
/// `[store] encryption_key` the log and the snapshot name subjects by
/// veiled tokens (`store::veil`): every stored form of the plaintext is
/// looked up, and the ids read back are put in the snapshot's form (the
/// token under the newest key) before the domain compares them.
async fn explaining(
    store: &Store,
    stream: &str,
    p: &Pending,
    grace: TimeDelta,
    veil: &Veil,
) -> Result<Vec<Received>, StoreError> {
    let (from, _) = p.window(grace);
    let entry = p.change.entry();
    let mut subjects = veil.forms(&veil.reveal(entry.user()));
    if let Some(org) = entry.organization() {
        subjects.extend(veil.forms(&veil.reveal(org)));
    }
    let mut out = Vec::new();
    for subject in subjects {
        let found = store
            .subject_entries(subject, Some((stream.to_owned(), from)), EXPLAIN_LOOKUP)
            .await?;
        for e in found {
            let id_of = |kind: &str| {
                e.subject_ids
                    .iter()
                    .find(|(k, _)| k == kind)
                    .map(|(_, v)| veil.hide(&veil.reveal(v)))
            };
            out.push(Received {
                user: id_of("user_id"),
                organization: id_of("organization_id"),
                event_type: e.event_type.clone(),
                received_at: e.received_at,
            });
        }
    }
    Ok(out)
}

// ------------------------------------------------------------ the task

/// How often the scheduler looks at the configured streams: a reload
/// (SIGHUP) is picked up within this, and a poll starts at most this late.
const TICK: Duration = Duration::from_secs(1);
/// The whole-poll deadline: `every`, but at least this (a Clerk listing of
/// 100,000 members is ~400 requests) ...
const MIN_POLL_DEADLINE: TimeDelta = TimeDelta::minutes(2);
/// ... and at most this, whatever `every` is.
const MAX_POLL_DEADLINE: TimeDelta = TimeDelta::minutes(30);

/// How long one poll of a stream polled every `every` may take in all.
pub fn poll_deadline(every: TimeDelta) -> Duration {
    every
        .clamp(MIN_POLL_DEADLINE, MAX_POLL_DEADLINE)
        .to_std()
        .unwrap_or(Duration::from_secs(120))
}

/// One stream's scheduling state in this process.
#[derive(Default)]
struct Slot {
    /// When the next poll is due (`None`: at once).
    due: Option<DateTime<Utc>>,
    /// The `every` `due` was planned with.
    every: Option<TimeDelta>,
    running: Option<tokio::task::JoinHandle<()>>,
    /// Entra: the newest `reauthorizationRequired` notice acted on.
    reauth_seen: Option<DateTime<Utc>>,
}

/// Runs every `[crosscheck]` stream's poll every `every` until shutdown,
/// on the housekeeping leader only (`replicas::housekeeping_term`), so
/// replicas sharing a PostgreSQL store poll each stream once. Each poll is
/// its own task with a deadline: a slow or hostile API delays nothing else,
/// and a poll that panics is logged, never taken further. The config is
/// read afresh every tick, so a reload adds, changes or stops a stream's
/// polls without restarting anything.
/// What the cross-check needs: the shared handles (`Deref`), the ingest
/// path a heal takes, and whether this replica leads (polls are the
/// leader's).
pub struct CrosscheckTask {
    pub core: Arc<Core>,
    pub intake: Arc<dyn Ingest>,
    /// The stream rows (when each stream's watch started).
    pub mirror: Arc<dyn Mirror>,
    pub lead: Lead,
}

impl std::ops::Deref for CrosscheckTask {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

pub async fn run(task: Arc<CrosscheckTask>, mut shutdown: watch::Receiver<bool>) {
    let mut slots: HashMap<String, Slot> = HashMap::new();
    loop {
        tick(&task, &mut slots).await;
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = shutdown.changed() => break,
        }
    }
    for slot in slots.into_values() {
        if let Some(task) = slot.running {
            task.abort();
        }
    }
}

async fn tick(task: &Arc<CrosscheckTask>, slots: &mut HashMap<String, Slot>) {
    let config = task.config();
    slots.retain(|name, slot| {
        let keep = config
            .streams
            .get(name)
            .is_some_and(|s| s.crosscheck.is_some());
        if !keep {
            if let Some(task) = slot.running.take() {
                task.abort();
            }
        }
        keep
    });
    for s in config.streams.values().filter(|s| s.crosscheck.is_some()) {
        // Zeros from the start on every replica, not gaps.
        task.metrics.crosscheck.declare(&s.name);
    }
    let now = task.clock.now();
    for (name, slot) in slots.iter_mut() {
        // A reload that shortened `every` brings the next poll forward.
        let every = config
            .streams
            .get(name)
            .and_then(|s| s.crosscheck.as_ref())
            .map(|c| c.every);
        if let (Some(new), Some(old), Some(due)) = (every, slot.every, slot.due) {
            if new < old {
                slot.due = Some(due - old + new);
                slot.every = Some(new);
            }
        }
    }
    // Entra: a `reauthorizationRequired` notice means Graph may have
    // stopped sending notifications; poll now rather than at `every`.
    for s in config.streams.values().filter(|s| {
        s.crosscheck
            .as_ref()
            .is_some_and(|c| c.provider == crate::domain::crosscheck::Provider::Entra)
    }) {
        let slot = slots.entry(s.name.clone()).or_default();
        match super::crosscheck_delta::reauthorization_after(&task.store, &s.name, slot.reauth_seen)
            .await
        {
            Ok(Some(at)) => {
                // (Before the first poll is planned, it is due anyway.)
                if slot.due.is_some() {
                    slot.due = Some(now);
                }
                slot.reauth_seen = Some(at);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::error!(stream = %s.name, error = %e, "cross-check: storage error reading subscription lifecycle notices");
            }
        }
    }
    let due: Vec<String> = config
        .streams
        .values()
        .filter(|s| s.crosscheck.is_some())
        .filter(|s| {
            let slot = slots.get(&s.name);
            let idle = slot
                .and_then(|s| s.running.as_ref())
                .is_none_or(|t| t.is_finished());
            idle && slot.and_then(|s| s.due).is_none_or(|d| d <= now)
        })
        .map(|s| s.name.clone())
        .collect();
    if due.is_empty() || task.lead.housekeeping_term().await.is_none() {
        return;
    }
    for name in due {
        let Some(every) = config
            .streams
            .get(&name)
            .and_then(|s| s.crosscheck.as_ref())
            .map(|c| c.every)
        else {
            continue;
        };
        let slot = slots.entry(name.clone()).or_default();
        if let Some(task) = slot.running.take() {
            if let Err(e) = task.await {
                if e.is_panic() {
                    tracing::error!(stream = %name, "a cross-check poll panicked; the next one runs on schedule");
                }
            }
        }
        slot.due = Some(now + every);
        slot.every = Some(every);
        let task = Arc::clone(task);
        slot.running = Some(tokio::spawn(async move {
            poll_and_page(&task, &name).await;
        }));
    }
}

/// One scheduled poll of `stream`, then its pages and metrics. Errors are
/// logged (never the key: no error text here can carry it).
pub async fn poll_and_page(task: &CrosscheckTask, stream: &str) {
    let config = task.config();
    let Some(settings) = config.streams.get(stream) else {
        return;
    };
    let Some(cc) = settings.crosscheck.as_deref() else {
        return;
    };
    let watch_started_at = task
        .mirror
        .stream_rows()
        .into_iter()
        .find(|r| r.name == stream)
        .map_or_else(|| task.clock.now(), |r| r.watch_started_at);
    let source = source(cc);
    let deadline = poll_deadline(cc.every);
    let polled = tokio::time::timeout(
        deadline,
        poll_once(
            &task.store,
            stream,
            cc,
            &source,
            &config.audit.classifier,
            &config.store.sealer,
            watch_started_at,
            &*task.clock,
        ),
    )
    .await;
    let outcome = match &polled {
        Ok(Ok(report)) => {
            tracing::debug!(
                stream,
                findings = report.findings.len(),
                new = report.new_keys.len(),
                "cross-check poll done"
            );
            Some("ok")
        }
        Ok(Err(PollFailure::Provider(e))) => {
            tracing::warn!(stream, provider = cc.provider.name(), error = %e, "cross-check poll failed");
            Some(e.outcome())
        }
        Ok(Err(PollFailure::Store(e))) => {
            tracing::error!(stream, error = %e, "cross-check poll: storage error; nothing of it was committed");
            None
        }
        Err(_) => {
            let error = format!(
                "the poll did not finish within {}",
                crate::domain::duration::format_duration(
                    TimeDelta::from_std(deadline).unwrap_or_default()
                )
            );
            tracing::warn!(stream, provider = cc.provider.name(), error = %error, "cross-check poll failed");
            if let Err(e) = record_timeout(task, stream, error).await {
                tracing::error!(stream, error = %e, "cross-check poll: storage error recording its deadline");
            }
            Some("error")
        }
    };
    if let Some(outcome) = outcome {
        task.metrics
            .crosscheck
            .polls
            .with_label_values(&[stream, outcome])
            .inc();
    }
    if let Ok(Ok(report)) = &polled {
        let new: HashSet<&str> = report.new_keys.iter().map(String::as_str).collect();
        for f in report
            .findings
            .iter()
            .filter(|f| new.contains(f.key.as_str()))
        {
            task.metrics
                .crosscheck
                .missed
                .with_label_values(&[stream, f.direction.as_str()])
                .inc();
        }
    }
    if cc.heal {
        if let Err(e) = heal_after_poll(task, task.intake.as_ref(), stream, cc).await {
            tracing::error!(stream, error = %e, "cross-check heal: storage error; the findings stay open and are healed after the next poll");
        }
    }
    if let Err(e) = page(task, &config, stream, cc, watch_started_at).await {
        tracing::error!(stream, error = %e, "cross-check pages: storage error; tried again after the next poll");
    }
}

/// `heal = true`: delivers every open finding it can to the app
/// (`crosscheck_heal`), after each poll, so one a crash or a storage error
/// left unhealed after an earlier poll is healed after the next. WorkOS
/// findings go with the logged bodies stored beside them; Clerk's are
/// built from the stored finding.
pub(super) async fn heal_after_poll(
    core: &Core,
    intake: &dyn Ingest,
    stream: &str,
    cc: &CrosscheckConfig,
) -> Result<(), StoreError> {
    use super::crosscheck_heal::{heal, HealItem};
    let items: Vec<HealItem> = match cc.provider {
        // Entra streams do not relay (issue #48): nothing to deliver.
        crate::domain::crosscheck::Provider::Entra => Vec::new(),
        crate::domain::crosscheck::Provider::Clerk => core
            .store
            .crosscheck_findings(stream.to_owned(), true, HEAL_AT_MOST)
            .await?
            .into_iter()
            .filter(|s| s.finding.direction == Direction::Revoke)
            .map(|s| HealItem {
                finding: s.finding,
                body: None,
            })
            .collect(),
        // An event log (WorkOS, Okta): the logged bodies stored with
        // the findings.
        _ => {
            let config = core.config();
            let sealer = &config.store.sealer;
            let mut items = Vec::new();
            for (stored, sealed) in core
                .store
                .crosscheck_open_logged(stream.to_owned(), HEAL_AT_MOST)
                .await?
            {
                let finding = revealed(sealer.veil(), &stored);
                let row = crate::store::seal::Row {
                    stream,
                    delivery_id: finding.provider_id.as_deref().unwrap_or_default(),
                    legacy_aad: false,
                    before_any_key: false,
                };
                // A body that no longer opens (its key was removed, the
                // row was altered) is not sent: the finding stays open
                // and paged, for a person.
                let body = sealer.open(row, &sealed).ok();
                items.push(HealItem { finding, body });
            }
            items
        }
    };
    if !items.is_empty() {
        heal(core, intake, stream, &items).await?;
    }
    Ok(())
}

/// Open findings one poll heals at most (Clerk); the rest follow on the
/// next polls.
const HEAL_AT_MOST: i64 = 1_000;

/// A poll cut off by its deadline counts as a failed poll.
async fn record_timeout(
    task: &CrosscheckTask,
    stream: &str,
    error: String,
) -> Result<(), StoreError> {
    let row = task.store.crosscheck_state(stream.to_owned()).await?;
    task.store
        .crosscheck_finish_poll(
            stream.to_owned(),
            row,
            PollEnd::Failure {
                error,
                refused: false,
            },
        )
        .await?;
    Ok(())
}

/// Pages what the stored state says, whoever stored it: the findings no
/// page named yet (this poll's, or ones a killed poll or the CLI left) and
/// the `crosscheck_failing` alert from [`poll_health`]; resolves pages
/// whose findings are all settled. Also sets the last-success gauge.
async fn page(
    task: &CrosscheckTask,
    config: &Config,
    stream: &str,
    cc: &CrosscheckConfig,
    watch_started_at: DateTime<Utc>,
) -> Result<(), StoreError> {
    let settings = config.streams.get(stream);
    let target = PageTarget {
        stream: stream.to_owned(),
        provider: cc.provider,
        config_path: super::forward::config_path(config),
        notifiers: settings.map(|s| s.notify.clone()).unwrap_or_default(),
    };
    let now = task.clock.now();
    let row = task
        .store
        .crosscheck_state(stream.to_owned())
        .await?
        .unwrap_or_default();
    if let Some(at) = row.last_success_at {
        task.metrics
            .crosscheck
            .last_success
            .with_label_values(&[stream])
            .set(at.timestamp_millis() as f64 / 1000.0);
    }
    let health = poll_health(&row.facts(), cc.provider, cc.every, watch_started_at, now);
    let health = super::crosscheck_delta::with_resync_warning(cc, &row, health);
    let mut queued = task
        .store
        .crosscheck_set_failing(target.clone(), health, now)
        .await?;
    let (_, total) = task.store.crosscheck_page_missed(target, now).await?;
    queued |= total > 0;
    queued |= task
        .store
        .crosscheck_resolve_settled(stream.to_owned(), now)
        .await?
        > 0;
    if queued {
        task.outbox_wake.notify_one();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Whole polls against local Clerk and WorkOS APIs (`crosscheck::fake`,
    //! answering in the documented shapes) over a real SQLite store.
    use super::*;
    use crate::clock::ManualClock;
    use crate::config::secret::SecretString;
    use crate::crosscheck::fake::{query, Answer, FakeApi};
    use crate::domain::crosscheck::{Provider, When};
    use crate::store::testdb::{event, TestDb};
    use std::sync::{Arc, Mutex};

    const KEY: &str = "sk_test_crosscheck_never_shown";

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn config(provider: Provider, api_url: &str) -> CrosscheckConfig {
        CrosscheckConfig {
            provider,
            api_url: api_url.to_owned(),
            api_key: SecretString::new(KEY.into()),
            every: TimeDelta::minutes(15),
            grace: TimeDelta::minutes(10),
            heal: false,
            types: crate::domain::crosscheck::WORKOS_DEFAULT_TYPES
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            entra: None,
            client_id: None,
            client_secret: None,
        }
    }

    #[derive(Default)]
    struct ClerkState {
        users: Vec<String>,
        /// (organization, user)
        memberships: Vec<(String, String)>,
        status: Option<u16>,
    }

    /// Clerk's Backend API as bapi/2025-11-10.yml (clerk/openapi-specs)
    /// describes it: `GET /v1/users` a bare array paged by `starting_after`,
    /// `GET /v1/organization_memberships` `{data, total_count}` by offset.
    fn clerk_api(state: Arc<Mutex<ClerkState>>) -> Answer {
        Arc::new(move |target: &str| {
            let s = state.lock().unwrap();
            if let Some(status) = s.status {
                return (status, r#"{"errors":[{"message":"Unauthorized"}]}"#.into());
            }
            let limit: usize = query(target, "limit")[0].parse().unwrap();
            if target.starts_with("/v1/users?") {
                let after = query(target, "starting_after");
                let start = after
                    .first()
                    .map_or(0, |a| s.users.iter().position(|u| u == a).unwrap() + 1);
                let page: Vec<serde_json::Value> = s.users[start..]
                    .iter()
                    .take(limit)
                    .map(|u| serde_json::json!({"id": u, "object": "user", "banned": false}))
                    .collect();
                (200, serde_json::Value::from(page).to_string())
            } else if target.starts_with("/v1/organization_memberships?") {
                let offset: usize = query(target, "offset")[0].parse().unwrap();
                let page: Vec<serde_json::Value> = s
                    .memberships
                    .iter()
                    .enumerate()
                    .skip(offset)
                    .take(limit)
                    .map(|(i, (o, u))| {
                        serde_json::json!({
                            "object": "organization_membership", "id": format!("orgmem_{i}_{u}"),
                            "role": "org:member", "permissions": [], "public_metadata": {},
                            "created_at": 1, "updated_at": 1,
                            "organization": {"object": "organization", "id": o},
                            "public_user_data": {"user_id": u, "first_name": null, "last_name": null,
                                                 "profile_image_url": "", "image_url": "", "has_image": false}
                        })
                    })
                    .collect();
                (
                    200,
                    serde_json::json!({"data": page, "total_count": s.memberships.len()})
                        .to_string(),
                )
            } else {
                (404, "{}".into())
            }
        })
    }

    async fn webhook(
        store: &Store,
        id: &str,
        ty: &str,
        user: &str,
        org: Option<&str>,
        at: DateTime<Utc>,
    ) {
        let mut e = event("identity", Some(id), ty, at.timestamp_millis());
        e.channel = "webhook";
        e.subject_ids = vec![("user_id".into(), user.into())];
        if let Some(org) = org {
            e.subject_ids.push(("organization_id".into(), org.into()));
        }
        store.record_events(vec![e]).await.unwrap();
    }

    struct Rig {
        sealer: Sealer,
        store: Store,
        clock: Arc<ManualClock>,
        source: Source,
        config: CrosscheckConfig,
        api: FakeApi,
        _db: TestDb,
    }

    impl Rig {
        async fn poll(&self) -> Result<PollReport, PollFailure> {
            poll_once(
                &self.store,
                "identity",
                &self.config,
                &self.source,
                &Classifier::default(),
                &self.sealer,
                t0() - TimeDelta::days(60),
                self.clock.as_ref(),
            )
            .await
        }
    }

    async fn rig(provider: Provider, answer: Answer) -> Rig {
        let db = TestDb::sqlite();
        let clock = Arc::new(ManualClock::new(t0()));
        let store = db.open_with_clock(clock.clone()).await;
        let api = FakeApi::start(answer).await;
        let url = match provider {
            Provider::Clerk => format!("{}/v1", api.base),
            Provider::Workos | Provider::Okta | Provider::Auth0 => api.base.clone(),
            Provider::Entra => format!("{}/v1.0", api.base),
        };
        let mut config = config(provider, &url);
        if provider == Provider::Auth0 {
            config.types = crate::domain::crosscheck::AUTH0_DEFAULT_TYPES
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
        }
        let source = crate::crosscheck::source(&config);
        Rig {
            sealer: Sealer::new(Vec::new()),
            store,
            clock,
            source,
            config,
            api,
            _db: db,
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(o, u)| ((*o).to_owned(), (*u).to_owned()))
            .collect()
    }

    #[tokio::test]
    async fn clerk_pages_an_unexplained_removal_once_and_not_one_a_webhook_reported_nor_a_lagging_listing(
    ) {
        let state = Arc::new(Mutex::new(ClerkState {
            users: names(&["user_1", "user_2", "user_3"]),
            memberships: pairs(&[
                ("org_9", "user_1"),
                ("org_9", "user_2"),
                ("org_9", "user_3"),
            ]),
            status: None,
        }));
        let r = rig(Provider::Clerk, clerk_api(state.clone())).await;
        let baseline = r.poll().await.unwrap();
        assert!(baseline.baseline && baseline.findings.is_empty());

        // user_1 removed with its webhook, user_2 without, user_3's row
        // missing from a lagging listing; user_4 added without a webhook.
        {
            let mut s = state.lock().unwrap();
            s.memberships.clear();
            s.users.push("user_4".into());
        }
        r.clock.advance(TimeDelta::minutes(10));
        webhook(
            &r.store,
            "msg_1",
            "organizationMembership.deleted",
            "user_1",
            Some("org_9"),
            r.clock.now(),
        )
        .await;
        r.clock.advance(TimeDelta::minutes(5));
        let second = r.poll().await.unwrap();
        assert!(second.findings.is_empty(), "{second:?}");
        assert_eq!(
            second.pending, 3,
            "user_2's and user_3's removals and user_4 wait"
        );

        state.lock().unwrap().memberships = pairs(&[("org_9", "user_3")]);
        r.clock.advance(TimeDelta::minutes(15));
        let third = r.poll().await.unwrap();
        let mut found: Vec<(String, Direction, Option<String>)> = third
            .findings
            .iter()
            .map(|f| (f.subject.clone(), f.direction, f.organization.clone()))
            .collect();
        found.sort();
        assert_eq!(
            found,
            [
                (
                    "user_2".to_owned(),
                    Direction::Revoke,
                    Some("org_9".to_owned())
                ),
                ("user_4".to_owned(), Direction::Grant, None),
            ]
        );
        assert_eq!(third.new_keys.len(), 2);
        let revoke = third
            .findings
            .iter()
            .find(|f| f.direction == Direction::Revoke)
            .unwrap();
        assert_eq!(revoke.event_type, "organizationMembership.deleted");
        assert_eq!(
            revoke.when,
            When::Between(t0(), t0() + TimeDelta::minutes(15))
        );
        assert!(revoke
            .provider_id
            .as_deref()
            .is_some_and(|id| id.starts_with("orgmem_")));

        r.clock.advance(TimeDelta::minutes(15));
        let fourth = r.poll().await.unwrap();
        assert!(
            fourth.findings.is_empty() && fourth.new_keys.is_empty(),
            "{fourth:?}"
        );
        assert_eq!(
            r.store
                .crosscheck_findings("identity".into(), true, 10)
                .await
                .unwrap()
                .len(),
            2
        );
        assert!(r.api.requests() >= 8);
    }

    #[tokio::test]
    async fn with_an_encryption_key_a_webhook_stored_under_veiled_ids_still_explains_a_removal() {
        let state = Arc::new(Mutex::new(ClerkState {
            users: names(&["user_1"]),
            memberships: pairs(&[("org_9", "user_1")]),
            status: None,
        }));
        let mut r = rig(Provider::Clerk, clerk_api(state.clone())).await;
        // 32 bytes of base64, as `[store] encryption_key` takes it.
        let sealer = crate::store::seal::Sealer::new(vec![crate::store::seal::SealKey::parse(
            "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
        )
        .unwrap()]);
        r.sealer = sealer;
        r.poll().await.unwrap();
        state.lock().unwrap().memberships.clear();
        r.clock.advance(TimeDelta::minutes(5));
        // What `App` stores for such a webhook: veiled subject ids.
        let mut e = event(
            "identity",
            Some("msg_1"),
            "organizationMembership.deleted",
            r.clock.now().timestamp_millis(),
        );
        e.channel = "webhook";
        e.subject_ids = vec![
            ("user_id".into(), r.sealer.veil().hide("user_1")),
            ("organization_id".into(), r.sealer.veil().hide("org_9")),
        ];
        r.store.record_events(vec![e]).await.unwrap();
        r.clock.advance(TimeDelta::minutes(10));
        let second = r.poll().await.unwrap();
        assert_eq!(second.pending, 0, "explained at once: {second:?}");
        r.clock.advance(TimeDelta::minutes(15));
        assert!(r.poll().await.unwrap().findings.is_empty());
    }

    fn sealer(keys: &[&str]) -> crate::store::seal::Sealer {
        crate::store::seal::Sealer::new(
            keys.iter()
                .map(|k| crate::store::seal::SealKey::parse(k).unwrap())
                .collect(),
        )
    }

    const KEY_A: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    const KEY_B: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

    #[tokio::test]
    async fn with_an_encryption_key_snapshots_and_findings_are_stored_veiled_and_reported_in_plaintext(
    ) {
        let state = Arc::new(Mutex::new(ClerkState {
            users: names(&["user_1", "user_2"]),
            memberships: pairs(&[("org_9", "user_1"), ("org_9", "user_2")]),
            status: None,
        }));
        let mut r = rig(Provider::Clerk, clerk_api(state.clone())).await;
        r.sealer = sealer(&[KEY_A]);
        r.poll().await.unwrap();
        // A rotation (the new key first, the old one kept) changes every
        // token of the next snapshot, and nothing at the provider.
        r.sealer = sealer(&[KEY_B, KEY_A]);
        r.clock.advance(TimeDelta::minutes(15));
        let rotated = r.poll().await.unwrap();
        assert_eq!(rotated.pending, 0, "a new key is no change: {rotated:?}");
        // user_2 leaves org_9 without a webhook.
        state.lock().unwrap().memberships = pairs(&[("org_9", "user_1")]);
        r.clock.advance(TimeDelta::minutes(15));
        assert_eq!(r.poll().await.unwrap().pending, 1);
        r.clock.advance(TimeDelta::minutes(15));
        let found = r.poll().await.unwrap();
        assert_eq!(found.findings.len(), 1, "{found:?}");
        assert_eq!(found.findings[0].subject, "user_2");
        assert_eq!(found.findings[0].organization.as_deref(), Some("org_9"));
        assert_eq!(found.new_keys, [found.findings[0].key.clone()]);
        let stored = r
            .store
            .crosscheck_findings("identity".into(), false, 10)
            .await
            .unwrap();
        // (The fake's membership ids embed the user; Clerk's are opaque.)
        let f = &stored[0].finding;
        let text = format!("{} {} {:?}", f.key, f.subject, f.organization);
        assert!(
            !text.contains("user_2") && !text.contains("org_9"),
            "{text}"
        );
        assert_eq!(r.sealer.veil().reveal(&stored[0].finding.subject), "user_2");
        assert!(!stored[0].finding.key.contains("user_2"));
        assert!(!r
            .store
            .crosscheck_snapshot_has(
                "identity".into(),
                r.store
                    .crosscheck_state("identity".into())
                    .await
                    .unwrap()
                    .unwrap()
                    .generation,
                Entry::User {
                    user: "user_1".into()
                },
            )
            .await
            .unwrap());
        assert!(r
            .store
            .crosscheck_snapshot_has(
                "identity".into(),
                r.store
                    .crosscheck_state("identity".into())
                    .await
                    .unwrap()
                    .unwrap()
                    .generation,
                Entry::User {
                    user: r.sealer.veil().hide("user_1")
                },
            )
            .await
            .unwrap());
    }

    #[tokio::test]
    async fn clerk_refusing_the_key_or_answering_an_empty_listing_fails_the_poll_without_findings()
    {
        let state = Arc::new(Mutex::new(ClerkState {
            users: names(&["user_1"]),
            memberships: pairs(&[("org_9", "user_1")]),
            status: None,
        }));
        let r = rig(Provider::Clerk, clerk_api(state.clone())).await;
        r.poll().await.unwrap();
        state.lock().unwrap().status = Some(401);
        r.clock.advance(TimeDelta::minutes(15));
        let Err(PollFailure::Provider(e)) = r.poll().await else {
            panic!("refused");
        };
        assert_eq!(e.outcome(), "refused");
        let row = r
            .store
            .crosscheck_state("identity".into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.failures, 1);
        assert!(!row.last_error.unwrap().contains(KEY));

        {
            let mut s = state.lock().unwrap();
            s.status = None;
            s.users.clear();
            s.memberships.clear();
        }
        r.clock.advance(TimeDelta::minutes(15));
        let Err(PollFailure::Provider(e)) = r.poll().await else {
            panic!("an empty listing is not everyone removed");
        };
        assert!(e.to_string().contains("came back empty"), "{e}");
        r.clock.advance(TimeDelta::minutes(15));
        assert!(r.poll().await.is_err());
        assert!(r
            .store
            .crosscheck_findings("identity".into(), false, 10)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(
            r.store
                .crosscheck_state("identity".into())
                .await
                .unwrap()
                .unwrap()
                .failures,
            3
        );
    }

    /// The fake WorkOS log: (id, type, created_at), oldest first.
    type Log = Arc<Mutex<Vec<(String, String, DateTime<Utc>)>>>;

    /// WorkOS's `GET /events` as workos.com/docs/reference/events shows it:
    /// `{"object":"list","data":[…],"list_metadata":{"before","after"}}`,
    /// `order=asc`, `after` an event id.
    fn workos_api(events: Log) -> Answer {
        Arc::new(move |target: &str| {
            if !target.starts_with("/events?") {
                return (404, "{}".into());
            }
            assert_eq!(query(target, "order"), ["asc"]);
            assert!(!query(target, "events[]").is_empty());
            let all = events.lock().unwrap();
            let limit: usize = query(target, "limit")[0].parse().unwrap();
            let start = match query(target, "after").first() {
                Some(a) => all.iter().position(|e| e.0 == *a).unwrap() + 1,
                None => 0,
            };
            let page: Vec<serde_json::Value> = all[start..]
                .iter()
                .take(limit)
                .map(|(id, ty, at)| {
                    serde_json::json!({
                        "object": "event", "id": id, "event": ty,
                        "data": {"object": "directory_user", "id": format!("directory_user_{id}"), "state": "inactive"},
                        "created_at": at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                    })
                })
                .collect();
            let after = page.last().map(|e| e["id"].clone());
            (
                200,
                serde_json::json!({"object": "list", "data": page, "list_metadata": {"before": null, "after": after}})
                    .to_string(),
            )
        })
    }

    #[tokio::test]
    async fn workos_pages_an_event_the_log_has_and_the_stream_never_received_once_after_its_grace()
    {
        let t = |m: i64| t0() + TimeDelta::minutes(m);
        let log = Arc::new(Mutex::new(vec![
            ("event_1".to_owned(), "dsync.user.deleted".to_owned(), t(0)),
            ("event_2".to_owned(), "dsync.user.deleted".to_owned(), t(1)),
            ("event_3".to_owned(), "dsync.user.created".to_owned(), t(25)),
        ]));
        let r = rig(Provider::Workos, workos_api(log.clone())).await;
        let mut e = event(
            "identity",
            Some("event_1"),
            "dsync.user.deleted",
            t(0).timestamp_millis(),
        );
        e.channel = "webhook";
        r.store.record_events(vec![e]).await.unwrap();
        r.clock.set(t(30));
        let first = r.poll().await.unwrap();
        let keys: Vec<&str> = first.findings.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(keys, ["workos:event_2"]);
        assert_eq!(first.findings[0].direction, Direction::Revoke);
        assert_eq!(first.findings[0].subject, "directory_user_event_2");
        assert_eq!(first.new_keys, ["workos:event_2"]);
        // The logged body of each finding, for a heal; no other event's.
        assert_eq!(first.bodies.keys().collect::<Vec<_>>(), ["workos:event_2"]);
        let body: serde_json::Value =
            serde_json::from_slice(&first.bodies["workos:event_2"]).unwrap();
        assert_eq!(body["id"], "event_2");
        assert_eq!(body["event"], "dsync.user.deleted");
        // event_3 is within its grace: the cursor stops before it.
        let row = r
            .store
            .crosscheck_state("identity".into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.log_cursor.as_deref(), Some("event_2"));

        r.clock.set(t(40));
        let second = r.poll().await.unwrap();
        let keys: Vec<&str> = second.findings.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(keys, ["workos:event_3"]);
        assert_eq!(second.findings[0].direction, Direction::Grant);
        r.clock.set(t(55));
        let third = r.poll().await.unwrap();
        assert!(third.findings.is_empty() && third.new_keys.is_empty());
    }

    #[tokio::test]
    async fn workos_a_log_full_of_missed_events_is_read_over_several_polls_with_bounded_findings() {
        let t = |m: i64| t0() + TimeDelta::minutes(m);
        let n = 2_500;
        let log: Log = Arc::new(Mutex::new(
            (0..n)
                .map(|i| {
                    (
                        format!("event_{i:05}"),
                        "dsync.user.deleted".to_owned(),
                        t(0),
                    )
                })
                .collect(),
        ));
        let r = rig(Provider::Workos, workos_api(log)).await;
        r.clock.set(t(30));
        let mut seen = HashSet::new();
        let mut polls = 0;
        while seen.len() < n {
            let report = r.poll().await.unwrap();
            polls += 1;
            assert!(
                report.findings.len() < MAX_LOG_FINDINGS + 100,
                "one page past the bound at most: {}",
                report.findings.len()
            );
            assert_eq!(report.bodies.len(), report.findings.len());
            for f in report.findings {
                assert!(seen.insert(f.key), "a finding decided twice");
            }
            assert!(polls <= 3, "{} of {n} after {polls} polls", seen.len());
        }
        assert_eq!(polls, 3);
        assert!(r.poll().await.unwrap().findings.is_empty());
    }

    #[tokio::test]
    async fn workos_an_endless_cursor_fails_the_poll_at_the_page_cap_and_moves_nothing() {
        let n = Arc::new(AtomicCounter::default());
        let answer: Answer = {
            let n = n.clone();
            Arc::new(move |_target: &str| {
                let i = n.next();
                let body = serde_json::json!({"object": "list", "data": [{
                    "object": "event", "id": format!("event_{i}"), "event": "dsync.user.updated",
                    "data": {}, "created_at": "2020-01-01T00:00:00.000Z"}],
                    "list_metadata": {"before": null, "after": format!("event_{i}")}});
                (200, body.to_string())
            })
        };
        let r = rig(Provider::Workos, answer).await;
        let Err(PollFailure::Provider(e)) = r.poll().await else {
            panic!("endless");
        };
        assert!(e.to_string().contains("endless cursor"), "{e}");
        let row = r
            .store
            .crosscheck_state("identity".into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((row.log_cursor, row.failures), (None, 1));
    }

    #[derive(Default)]
    struct AtomicCounter(std::sync::atomic::AtomicUsize);
    impl AtomicCounter {
        fn next(&self) -> usize {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        }
    }

    impl Rig {
        async fn dry_run(&self) -> Result<PollReport, PollFailure> {
            poll_dry_run(
                &self.store,
                "identity",
                &self.config,
                &self.source,
                &Classifier::default(),
                &self.sealer,
                t0() - TimeDelta::days(60),
                self.clock.as_ref(),
            )
            .await
        }
    }

    #[tokio::test]
    async fn a_dry_run_decides_like_a_poll_and_moves_no_cursor_records_no_finding_nor_failure() {
        let t = |m: i64| t0() + TimeDelta::minutes(m);
        let log = Arc::new(Mutex::new(vec![(
            "event_2".to_owned(),
            "dsync.user.deleted".to_owned(),
            t(1),
        )]));
        let r = rig(Provider::Workos, workos_api(log)).await;
        r.clock.set(t(30));
        for _ in 0..2 {
            let dry = r.dry_run().await.unwrap();
            assert_eq!(dry.new_keys, ["workos:event_2"], "{dry:?}");
            assert!(!dry.committed);
        }
        assert_eq!(
            r.store.crosscheck_state("identity".into()).await.unwrap(),
            None
        );
        let real = r.poll().await.unwrap();
        assert_eq!(
            real.new_keys,
            ["workos:event_2"],
            "the dry runs recorded nothing"
        );
        let again = r.dry_run().await.unwrap();
        assert!(
            again.findings.is_empty(),
            "the cursor moved past it: {again:?}"
        );

        // Clerk: the dry run lists into a scratch generation it drops, and
        // a refused key is not counted as a failure.
        let state = Arc::new(Mutex::new(ClerkState {
            users: names(&["user_1"]),
            memberships: pairs(&[("org_9", "user_1")]),
            status: None,
        }));
        let r = rig(Provider::Clerk, clerk_api(state.clone())).await;
        assert!(r.dry_run().await.unwrap().baseline);
        assert_eq!(
            r.store.crosscheck_state("identity".into()).await.unwrap(),
            None
        );
        r.poll().await.unwrap();
        let before = r.store.crosscheck_state("identity".into()).await.unwrap();
        state.lock().unwrap().memberships.clear();
        r.clock.advance(TimeDelta::minutes(15));
        let dry = r.dry_run().await.unwrap();
        assert_eq!((dry.pending, dry.committed), (1, false), "{dry:?}");
        state.lock().unwrap().status = Some(401);
        assert!(r.dry_run().await.is_err());
        assert_eq!(
            r.store.crosscheck_state("identity".into()).await.unwrap(),
            before
        );
        assert!(r
            .store
            .crosscheck_pending("identity".into())
            .await
            .unwrap()
            .is_empty());
        let gen = before.unwrap().generation;
        assert!(r
            .store
            .crosscheck_snapshot_has(
                "identity".into(),
                gen,
                crate::domain::crosscheck::Entry::Membership {
                    organization: "org_9".into(),
                    user: "user_1".into()
                }
            )
            .await
            .unwrap());
    }

    // ------------------------------------------------------------ Okta

    /// The local System Log: events (uuid, eventType, published, user,
    /// group), oldest first; pages of `page` events; the next link is
    /// `<base>/api/v1/logs?after=<n>` (n = events read), present on every
    /// answer, an empty one too, as Okta's polling mode sends it
    /// (developer.okta.com/docs/reference/api/system-log/, "Polling
    /// requests"). `hostile` links elsewhere instead.
    /// (uuid, eventType, published, user, group)
    type OktaEvent = (String, String, DateTime<Utc>, String, Option<String>);

    #[derive(Default)]
    struct OktaLog {
        events: Vec<OktaEvent>,
        page: usize,
        status: Option<u16>,
        hostile: bool,
        asked: Vec<String>,
    }

    fn okta_api(
        log: Arc<Mutex<OktaLog>>,
        base: Arc<std::sync::OnceLock<String>>,
    ) -> crate::crosscheck::fake::HeadedAnswer {
        Arc::new(move |target: &str| {
            let mut log = log.lock().unwrap();
            log.asked.push(target.to_owned());
            if let Some(status) = log.status {
                return (
                    status,
                    Vec::new(),
                    r#"{"errorCode":"E0000011","errorSummary":"Invalid token provided"}"#.into(),
                );
            }
            assert!(target.starts_with("/api/v1/logs?"), "{target}");
            let start = match query(target, "after").first() {
                Some(n) => n.parse::<usize>().unwrap(),
                None => {
                    assert_eq!(query(target, "sortOrder"), ["ASCENDING"]);
                    assert!(query(target, "until").is_empty());
                    let since = DateTime::parse_from_rfc3339(&query(target, "since")[0]).unwrap();
                    log.events.iter().take_while(|e| e.2 < since).count()
                }
            };
            let end = (start + log.page.max(1)).min(log.events.len());
            let page: Vec<serde_json::Value> = log.events[start.min(end)..end]
                .iter()
                .map(|(uuid, ty, at, user, group)| {
                    let mut target = vec![serde_json::json!({"id": user, "type": "User", "alternateId": format!("{user}@example.com")})];
                    if let Some(g) = group {
                        target.push(serde_json::json!({"id": g, "type": "UserGroup", "displayName": "Engineering"}));
                    }
                    serde_json::json!({
                        "uuid": uuid, "eventType": ty, "version": "0", "severity": "INFO",
                        "published": at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                        "outcome": {"result": "SUCCESS"}, "target": target,
                    })
                })
                .collect();
            let host = if log.hostile {
                "http://127.0.0.1:9".to_owned()
            } else {
                base.get().unwrap().clone()
            };
            let next = format!("{host}/api/v1/logs?after={end}&limit=1000&sortOrder=ASCENDING");
            (
                200,
                vec![("link".into(), format!("<{next}>; rel=\"next\""))],
                serde_json::Value::from(page).to_string(),
            )
        })
    }

    async fn okta_rig(log: Arc<Mutex<OktaLog>>) -> Rig {
        let db = TestDb::sqlite();
        let clock = Arc::new(ManualClock::new(t0()));
        let store = db.open_with_clock(clock.clone()).await;
        let base = Arc::new(std::sync::OnceLock::new());
        let api = FakeApi::start_with_headers(okta_api(log, base.clone())).await;
        base.set(api.base.clone()).unwrap();
        let mut config = config(Provider::Okta, &api.base);
        config.types = crate::domain::crosscheck::OKTA_DEFAULT_TYPES
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let source = crate::crosscheck::source(&config);
        Rig {
            sealer: Sealer::new(Vec::new()),
            store,
            clock,
            source,
            config,
            api,
            _db: db,
        }
    }

    async fn okta_cursor(r: &Rig) -> Option<String> {
        r.store
            .crosscheck_state("identity".into())
            .await
            .unwrap()
            .and_then(|row| row.log_cursor)
    }

    #[tokio::test]
    async fn okta_follows_only_next_links_pages_a_never_hooked_event_and_keeps_the_link_of_an_empty_page(
    ) {
        let t = |m: i64| t0() + TimeDelta::minutes(m);
        let ev = |uuid: &str, ty: &str, at, user: &str, group: Option<&str>| {
            (
                uuid.to_owned(),
                ty.to_owned(),
                at,
                user.to_owned(),
                group.map(str::to_owned),
            )
        };
        let log = Arc::new(Mutex::new(OktaLog {
            events: vec![
                ev("uuid-1", "user.lifecycle.deactivate", t(0), "00u1", None),
                ev(
                    "uuid-2",
                    "group.user_membership.remove",
                    t(1),
                    "00u2",
                    Some("00g1"),
                ),
                ev("uuid-x", "user.session.start", t(2), "00u3", None),
                ev(
                    "uuid-3",
                    "group.user_membership.add",
                    t(25),
                    "00u4",
                    Some("00g1"),
                ),
            ],
            page: 4,
            ..OktaLog::default()
        }));
        let r = okta_rig(log.clone()).await;
        // uuid-1's Event Hook arrived (recorded under its uuid, as
        // ingest::providers::okta does); uuid-2's never did.
        webhook(
            &r.store,
            "uuid-1",
            "user.lifecycle.deactivate",
            "00u1",
            None,
            t(0),
        )
        .await;
        r.clock.set(t(30));
        let first = r.poll().await.unwrap();
        let keys: Vec<&str> = first.findings.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(keys, ["okta:uuid-2"]);
        let f = &first.findings[0];
        assert_eq!(f.direction, Direction::Revoke);
        assert_eq!(f.subject, "00u2");
        assert_eq!(f.organization.as_deref(), Some("group Engineering (00g1)"));
        let text = crate::domain::crosscheck::describe(Provider::Okta, f);
        assert!(
            text.contains("Okta logged group.user_membership.remove uuid-2 for user 00u2 in group Engineering (00g1)"),
            "{text}"
        );
        // The logged LogEvent, for a heal.
        let body: serde_json::Value = serde_json::from_slice(&first.bodies["okta:uuid-2"]).unwrap();
        assert_eq!(body["uuid"], "uuid-2");
        // The first page ended inside its grace window: the kept position is
        // that page's link and the last decided uuid.
        let kept = okta_cursor(&r).await.unwrap();
        assert!(
            kept.contains("/api/v1/logs?since=") && kept.ends_with(" uuid-x"),
            "{kept}"
        );

        r.clock.set(t(40));
        let second = r.poll().await.unwrap();
        let keys: Vec<&str> = second.findings.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(keys, ["okta:uuid-3"]);
        assert_eq!(second.findings[0].direction, Direction::Grant);
        // Read to the empty page; its next link is the cursor.
        let kept = okta_cursor(&r).await.unwrap();
        assert!(
            kept.ends_with("/api/v1/logs?after=4&limit=1000&sortOrder=ASCENDING"),
            "{kept}"
        );

        // Caught up: the log links on forever; each poll asks once.
        for m in [50, 60, 70] {
            let before = r.api.requests();
            r.clock.set(t(m));
            let again = r.poll().await.unwrap();
            assert!(again.findings.is_empty() && again.new_keys.is_empty());
            assert_eq!(r.api.requests(), before + 1);
        }
        let asked = log.lock().unwrap().asked.clone();
        assert_eq!(
            asked.iter().filter(|a| a.contains("since=")).count(),
            2,
            "since once, and the page re-read from its kept position: {asked:?}"
        );
        assert!(asked.iter().all(|a| query(a, "until").is_empty()));
    }

    #[tokio::test]
    async fn okta_reads_a_long_log_over_several_polls_at_most_ten_requests_each() {
        let t = |m: i64| t0() + TimeDelta::minutes(m);
        let events = (0..25)
            .map(|i| {
                (
                    format!("uuid-{i}"),
                    "user.session.start".to_owned(),
                    t(0),
                    "00u".to_owned(),
                    None,
                )
            })
            .collect();
        let log = Arc::new(Mutex::new(OktaLog {
            events,
            page: 2,
            ..OktaLog::default()
        }));
        let r = okta_rig(log).await;
        r.clock.set(t(30));
        r.poll().await.unwrap();
        assert_eq!(r.api.requests(), 10);
        assert!(okta_cursor(&r).await.unwrap().contains("after=20&"));
        r.poll().await.unwrap();
        // 2 more pages (5 events, the last page short), then the empty page.
        assert_eq!(r.api.requests(), 14);
        assert!(okta_cursor(&r).await.unwrap().contains("after=25&"));
    }

    #[tokio::test]
    async fn okta_refuses_a_next_link_off_the_origin_and_a_refused_token_without_moving_the_cursor()
    {
        let t = |m: i64| t0() + TimeDelta::minutes(m);
        let log = Arc::new(Mutex::new(OktaLog {
            events: vec![(
                "uuid-1".into(),
                "user.lifecycle.suspend".into(),
                t(0),
                "00u1".into(),
                None,
            )],
            page: 5,
            hostile: true,
            ..OktaLog::default()
        }));
        let r = okta_rig(log.clone()).await;
        r.clock.set(t(30));
        let e = r.poll().await.unwrap_err();
        assert!(e.to_string().contains("leaves api_url's origin"), "{e}");
        assert_eq!(r.api.requests(), 1, "the hostile link is never requested");
        assert_eq!(okta_cursor(&r).await, None);
        log.lock().unwrap().status = Some(401);
        let e = r.poll().await.unwrap_err();
        assert!(
            matches!(e, PollFailure::Provider(PollError::Refused { status: 401 })),
            "{e}"
        );
        assert!(!e.to_string().contains(KEY));
        assert_eq!(okta_cursor(&r).await, None);
    }

    /// The fake Auth0 log: (log_id, type, date, extra fields), in log_id
    /// order; `gone`: log ids the tenant no longer keeps.
    type Auth0Log = Arc<Mutex<(Vec<serde_json::Value>, Vec<String>)>>;

    /// Auth0's `GET /api/v2/logs` as "Retrieve Log Events Using the
    /// Management API" (auth0.com/docs/deploy-monitor/logs/retrieve-log-events-using-mgmt-api)
    /// describes it: a bare array; by checkpoint `from`/`take` (logs newer
    /// than `from`), or the first poll's search (`q=date:[… TO *]`,
    /// `sort=date:1`, `per_page`); `GET /api/v2/logs/{id}` 404 for a log
    /// no longer kept. (This fake sends no `Link`; the integration tests'
    /// server does.)
    fn auth0_api(log: Auth0Log) -> Answer {
        Arc::new(move |target: &str| {
            let (all, gone) = &*log.lock().unwrap();
            if let Some(id) = target
                .strip_prefix("/api/v2/logs/")
                .map(|rest| rest.split('?').next().unwrap_or_default().to_owned())
            {
                if gone.contains(&id) {
                    return (
                        404,
                        r#"{"statusCode":404,"error":"Not Found","message":"log not found"}"#
                            .into(),
                    );
                }
                return match all.iter().find(|l| l["log_id"] == id.as_str()) {
                    Some(l) => (200, l.to_string()),
                    None => (404, "{}".into()),
                };
            }
            if !target.starts_with("/api/v2/logs?") {
                return (404, "{}".into());
            }
            let page: Vec<serde_json::Value> = if let Some(from) = query(target, "from").first() {
                let take: usize = query(target, "take")[0].parse().unwrap();
                all.iter()
                    .filter(|l| l["log_id"].as_str().unwrap() > from.as_str())
                    .take(take)
                    .cloned()
                    .collect()
            } else {
                assert_eq!(query(target, "sort"), ["date:1"]);
                let q = &query(target, "q")[0];
                let since = q
                    .trim_start_matches("date:[")
                    .split(' ')
                    .next()
                    .unwrap()
                    .to_owned();
                all.iter()
                    .filter(|l| l["date"].as_str().unwrap() >= since.as_str())
                    .take(1)
                    .cloned()
                    .collect()
            };
            (200, serde_json::Value::from(page).to_string())
        })
    }

    fn auth0_log(
        n: u32,
        ty: &str,
        at: DateTime<Utc>,
        extra: serde_json::Value,
    ) -> serde_json::Value {
        let mut log = serde_json::json!({
            "log_id": format!("9002026120110{n:041}"),
            "date": at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "type": ty, "description": "", "client_id": "cli_1", "ip": "203.0.113.9",
            "user_id": format!("auth0|u{n}"), "user_name": format!("user{n}@example.com"),
        });
        for (k, v) in extra.as_object().unwrap() {
            log[k] = v.clone();
        }
        log
    }

    #[tokio::test]
    async fn auth0_pages_a_checked_log_the_stream_never_received_reads_sapi_requests_and_fails_on_a_dropped_checkpoint(
    ) {
        let t = |m: i64| t0() + TimeDelta::minutes(m);
        let block = |path: &str, blocked: Option<bool>| {
            let mut request = serde_json::json!({"method": "patch", "path": path, "body": {}});
            if let Some(b) = blocked {
                request["body"]["blocked"] = serde_json::Value::from(b);
            }
            serde_json::json!({"user_id": "", "user_name": "", "details": {"request": request}})
        };
        let log: Auth0Log = Arc::new(Mutex::new((
            vec![
                auth0_log(1, "sdu", t(0), serde_json::json!({})),
                auth0_log(2, "sdu", t(1), serde_json::json!({})),
                auth0_log(3, "s", t(2), serde_json::json!({})),
                auth0_log(
                    4,
                    "sapi",
                    t(3),
                    block("/api/v2/users/auth0%7Cu9", Some(true)),
                ),
                auth0_log(5, "sapi", t(4), block("/api/v2/clients/cli_2", None)),
                auth0_log(6, "ss", t(25), serde_json::json!({})),
            ],
            Vec::new(),
        )));
        let r = rig(Provider::Auth0, auth0_api(log.clone())).await;
        let delivered = log.lock().unwrap().0[0]["log_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let mut e = event("identity", Some(&delivered), "sdu", t(0).timestamp_millis());
        e.channel = "webhook";
        r.store.record_events(vec![e]).await.unwrap();
        r.clock.set(t(30));
        let first = r.poll().await.unwrap();
        let found: Vec<(&str, Direction, &str)> = first
            .findings
            .iter()
            .map(|f| (f.event_type.as_str(), f.direction, f.subject.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                ("sdu", Direction::Revoke, "auth0|u2"),
                ("sapi", Direction::Revoke, "auth0|u9"),
            ],
            "{first:?}"
        );
        assert!(first.findings[0].key.starts_with("auth0:900"));
        let record: serde_json::Value =
            serde_json::from_slice(&first.bodies[&first.findings[0].key]).unwrap();
        assert_eq!(record["data"]["type"], "sdu");
        assert_eq!(
            record["log_id"],
            first.findings[0].provider_id.clone().unwrap()
        );
        let text = crate::domain::crosscheck::describe(Provider::Auth0, &first.findings[0]);
        assert!(
            text.contains("for user auth0|u2") && text.contains("user deleted"),
            "{text}"
        );
        // The `ss` is within its grace: the checkpoint stops before it.
        let row = r
            .store
            .crosscheck_state("identity".into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            row.log_cursor.as_deref(),
            log.lock().unwrap().0[4]["log_id"].as_str()
        );

        r.clock.set(t(40));
        let second = r.poll().await.unwrap();
        assert_eq!(second.findings.len(), 1);
        assert_eq!(second.findings[0].direction, Direction::Grant);

        // The tenant's retention drops the checkpoint: the poll fails and
        // says so, and nothing moves.
        let cursor = r
            .store
            .crosscheck_state("identity".into())
            .await
            .unwrap()
            .unwrap()
            .log_cursor
            .unwrap();
        log.lock().unwrap().1.push(cursor.clone());
        r.clock.set(t(55));
        let Err(PollFailure::Provider(e)) = r.poll().await else {
            panic!("a dropped checkpoint fails the poll");
        };
        assert!(
            e.to_string()
                .contains(&format!("no longer keeps log {cursor}")),
            "{e}"
        );
        let row = r
            .store
            .crosscheck_state("identity".into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (row.log_cursor.as_deref(), row.failures),
            (Some(cursor.as_str()), 1)
        );
    }
}
