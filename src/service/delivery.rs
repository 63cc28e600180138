//! Delivers pages from the durable outbox.
//!
//! Rules (see issue "Paging"):
//! - A page is marked delivered only after the receiver accepted it, so a
//!   crash in between sends it again on restart, under the same key (at
//!   least once, never lost; receivers collapse duplicates by key).
//! - Per (alert, notifier) only the oldest pending page is attempted, so a
//!   resolve never overtakes its firing page, and a page of one alert (a
//!   Svix endpoint alert) is never held behind another alert's page (the
//!   stream's silence) that is retrying or hanging.
//! - Retryable failures back off exponentially with jitter (`notify::retry`)
//!   on the injectable clock; `give_up_after` past the first attempt, or a
//!   permanent failure, marks the page failed: counted, logged at error
//!   level, and listed in `/v1/status` — never silently dropped.
//! - The worker is its own task; ingest never waits for it. Each attempt
//!   is a task of its own too, so a receiver that hangs until its timeout
//!   delays only its own (alert, notifier) queue.
//! - `repeat_interval` reminders and `escalate` steps are queued here (in
//!   business time of the stream's calendar), once per episode and step.
//! - Alertmanager alerts are re-posted every `REPOST_EVERY` while firing.

use super::core::Core;
use super::replicas::Lead;
use super::silences::Operator;
use crate::config::{Config, NotifierConfig, NotifierKind};
use crate::notify::{alertmanager, retry, Outcome, Page, Sender};
use crate::store::{
    AlertState, Attempt, OutboxRow, OutboxSummary, PageKind, Readable, StoreError, Unreadable,
};
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Pause after a failed store call before trying again.
const STORE_RETRY: chrono::TimeDelta = chrono::TimeDelta::seconds(5);
/// While a stored page cannot be read, how often the outbox is read again
/// to see whether it is still there.
const UNREADABLE_RECHECK: chrono::TimeDelta = chrono::TimeDelta::seconds(5);

/// What the delivery worker needs: the shared handles (`Deref`), the
/// operator's held pages to release when due, and whether this replica
/// leads (reminders, escalations and re-posts are the leader's).
pub struct DeliveryTask {
    pub core: Arc<Core>,
    pub operator: Arc<Operator>,
    pub lead: Lead,
}

impl std::ops::Deref for DeliveryTask {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

pub async fn run(task: Arc<DeliveryTask>, mut shutdown: watch::Receiver<bool>) {
    let worker = Arc::new(Worker::new());
    // Every attempt (and Alertmanager re-post) runs as its own task, so a
    // receiver that hangs until its timeout holds up only its own
    // (alert, notifier) queue. At shutdown the tasks are aborted: their
    // pages stay pending and go out after restart under the same key.
    let mut attempts: JoinSet<()> = JoinSet::new();
    loop {
        if *shutdown.borrow() {
            break;
        }
        let next = match worker.round(&task, &mut attempts).await {
            Ok(next) => next,
            Err(e) => {
                tracing::error!(error = %e, "outbox delivery could not read or update the outbox; retrying");
                Some(task.clock.now() + STORE_RETRY)
            }
        };
        let sleep = async {
            match next {
                Some(t) => task.clock.sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = task.outbox_wake.notified() => {}
            _ = sleep => {}
            // An attempt finished: its queue may have a next page.
            Some(_) = attempts.join_next(), if !attempts.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    attempts.abort_all();
    while attempts.join_next().await.is_some() {}
}

struct Worker {
    sender: Sender,
    /// Outbox rows with an attempt in flight.
    in_flight: Mutex<BTreeSet<i64>>,
    /// (alert id, notifier) pairs with an Alertmanager re-post in flight.
    reposting: Mutex<BTreeSet<(String, String)>>,
    /// Last Alertmanager post per (alert id, notifier), on the app clock.
    reposted: Mutex<BTreeMap<(String, String), DateTime<Utc>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Worker {
    fn new() -> Worker {
        Worker {
            sender: Sender::new(),
            in_flight: Mutex::new(BTreeSet::new()),
            reposting: Mutex::new(BTreeSet::new()),
            reposted: Mutex::new(BTreeMap::new()),
        }
    }

    /// Starts an attempt for every due page that is first in its (alert,
    /// notifier) queue and not already in flight; returns when the next
    /// page (or reminder, or re-post) is due.
    async fn round(
        self: &Arc<Self>,
        task: &Arc<DeliveryTask>,
        attempts: &mut JoinSet<()>,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        let config = task.config();
        let (held_due, mut unreadable) = task.operator.release_held_pages().await?;
        let extras_due = queue_extras(task, &config).await?;
        // Several replicas: attempt only pages claimed here (before the
        // snapshot, so every claimed row is in it).
        let claimed = task.lead.claim_due(&task.store, &config).await?;
        let now = task.clock.now();
        // Pages in flight before the snapshot is read may finish (and be
        // marked delivered) while it is read, so the snapshot can show them
        // pending after they left `in_flight`: attempting them again would
        // send a delivered page twice. They wait for the next round, which
        // their task's end wakes.
        let busy_before = lock(&self.in_flight).clone();
        let Readable {
            rows: pending,
            unreadable: unread_pending,
        } = task.store.pending_outbox().await?;
        unreadable.extend(unread_pending);
        set_pending_gauges(task, &config, &pending);
        let heads = heads(&pending, &unreadable);
        let mut next: Option<DateTime<Utc>> = None;
        for row in heads {
            let Some(notifier) = config.notifiers.get(&row.notifier) else {
                tracing::error!(
                    notifier = %row.notifier,
                    stream = %row.stream,
                    page = %row.page_key,
                    "a page is waiting for a notifier that is no longer configured; it stays in the outbox"
                );
                continue;
            };
            if busy_before.contains(&row.id) || lock(&self.in_flight).contains(&row.id) {
                continue;
            }
            // A re-post of the firing alert still in flight must land
            // before this page: a resolve overtaken by a late firing
            // re-post would reopen the alert in Alertmanager. Its task
            // finishing wakes the loop.
            if lock(&self.reposting).contains(&(row.stream.clone(), row.notifier.clone())) {
                continue;
            }
            match row.next_attempt_at {
                Some(t) if t > now => next = Some(next.map_or(t, |n| n.min(t))),
                _ => {
                    let token = match &claimed {
                        None => None,
                        Some(claimed) => match claimed.get(&row.id) {
                            Some(token) => Some(*token),
                            None => {
                                // Another replica is sending it; look again
                                // soon, in case its claim lapses (it died).
                                let t = now + chrono::TimeDelta::seconds(1);
                                next = Some(next.map_or(t, |n| n.min(t)));
                                continue;
                            }
                        },
                    };
                    lock(&self.in_flight).insert(row.id);
                    let (worker, task) = (Arc::clone(self), Arc::clone(task));
                    let (config, notifier, row) =
                        (Arc::clone(&config), notifier.clone(), row.clone());
                    attempts.spawn(async move {
                        if let Err(e) = worker.attempt(&task, &config, &notifier, &row, token).await {
                            tracing::error!(error = %e, page = %row.page_key, "could not record a delivery attempt; the page stays pending and is sent again under the same key");
                        }
                        lock(&worker.in_flight).remove(&row.id);
                    });
                }
            }
        }
        let reposts_due = self
            .repost_alertmanager(task, &config, attempts, &mut unreadable)
            .await?;
        // One bad row never blocks the rest: the rows this round could not
        // read were left out above; the watchdog names and pages them.
        // Looked at again soon while any is held, so a row another replica
        // sent, or an operator removed, stops paging without a wake-up.
        let recheck = (!unreadable.is_empty()).then(|| now + UNREADABLE_RECHECK);
        task.core.set_unreadable(unreadable);
        for t in [reposts_due, extras_due, held_due, recheck]
            .into_iter()
            .flatten()
        {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        Ok(next)
    }

    async fn attempt(
        &self,
        task: &DeliveryTask,
        config: &Config,
        notifier: &NotifierConfig,
        row: &OutboxRow,
        token: Option<i64>,
    ) -> Result<(), StoreError> {
        let mut page = Page::from_row(row, config);
        // Every send mints its own link, a retry after an unknown result
        // included; the links of earlier sends stay valid (issue #30). None
        // for a `log` line (issue #44: logs are not the person paged).
        if crate::notify::carries_ack_links(&notifier.kind) {
            page.ack_url = mint_ack_link(task, config, row).await;
        }
        let started = task.clock.now();
        let outcome = self.sender.send(notifier, &page, started).await;
        let now = task.clock.now();
        let name = row.notifier.as_str();
        let attempts = row.attempts.saturating_add(1);
        let first = row.first_attempt_at.unwrap_or(started);
        let cause = outcome.cause_label();
        let (attempt, label) = match outcome {
            Outcome::Delivered => {
                let latency = (now - row.at).num_milliseconds().max(0) as f64 / 1000.0;
                task.metrics
                    .notification_latency
                    .with_label_values(&[name])
                    .observe(latency);
                tracing::info!(notifier = name, stream = %row.stream, page = %row.page_key, attempts, "page delivered");
                if matches!(notifier.kind, NotifierKind::Alertmanager(_)) {
                    // Counts as the latest post of this alert.
                    lock(&self.reposted).insert((row.alert_id.clone(), row.notifier.clone()), now);
                }
                (Attempt::Delivered { at: now }, "delivered")
            }
            Outcome::Retry {
                reason,
                retry_after,
                ambiguous,
                ..
            } if !retry::gave_up(&notifier.policy, first, now) => {
                let next = retry::next_attempt(
                    &notifier.policy,
                    &row.page_key,
                    attempts,
                    retry_after,
                    now,
                );
                tracing::warn!(notifier = name, stream = %row.stream, page = %row.page_key, attempts, ambiguous, next = %next, error = %reason, "page not delivered yet; will retry under the same key");
                (
                    Attempt::Retry {
                        at: now,
                        next,
                        error: reason,
                    },
                    "retry",
                )
            }
            Outcome::Retry { reason, .. } => {
                let error = format!(
                    "gave up after {attempts} attempts over {}: {reason}",
                    crate::domain::duration::format_duration(notifier.policy.give_up_after)
                );
                log_failed(name, row, &error);
                (Attempt::Failed { at: now, error }, "failed")
            }
            Outcome::Permanent { reason, .. } => {
                log_failed(name, row, &reason);
                (
                    Attempt::Failed {
                        at: now,
                        error: reason,
                    },
                    "failed",
                )
            }
        };
        task.metrics
            .notifications
            .with_label_values(&[name, label, cause])
            .inc();
        // The attempt, the shared consecutive-failure count and any fallback
        // page it reaches commit together (issue #19).
        super::fallback::record(&task.core, config, row, token, attempt, now).await
    }

    /// Re-posts firing alerts to Alertmanagers before their
    /// `resolve_timeout` runs out; returns when the next re-post is due.
    async fn repost_alertmanager(
        self: &Arc<Self>,
        task: &Arc<DeliveryTask>,
        config: &Arc<Config>,
        tasks: &mut JoinSet<()>,
        unreadable: &mut Vec<Unreadable>,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        let has_am = config
            .notifiers
            .values()
            .any(|n| matches!(n.kind, NotifierKind::Alertmanager(_)));
        if !has_am {
            return Ok(None);
        }
        // Re-posting is housekeeping: one replica (the leader) does it.
        if task.lead.housekeeping_term().await.is_none() {
            return Ok(Some(task.clock.now() + chrono::TimeDelta::seconds(2)));
        }
        let Readable {
            rows: active,
            unreadable: unread_active,
        } = task.store.active_firing_pages().await?;
        unreadable.extend(unread_active);
        let now = task.clock.now();
        let mut next: Option<DateTime<Utc>> = None;
        let mut seen = BTreeSet::new();
        for row in active {
            let Some(n) = config.notifiers.get(&row.notifier) else {
                continue;
            };
            if !matches!(n.kind, NotifierKind::Alertmanager(_)) {
                continue;
            }
            let key = (row.alert_id.clone(), row.notifier.clone());
            seen.insert(key.clone());
            let last = lock(&self.reposted).get(&key).copied();
            let due = last.map_or(now, |t| t + alertmanager::REPOST_EVERY);
            if due > now {
                next = Some(next.map_or(due, |n| n.min(due)));
                continue;
            }
            if !lock(&self.reposting).insert(key.clone()) {
                continue;
            }
            lock(&self.reposted).insert(key.clone(), now);
            let t = now + alertmanager::REPOST_EVERY;
            next = Some(next.map_or(t, |n| n.min(t)));
            let (worker, config, notifier) = (Arc::clone(self), Arc::clone(config), n.clone());
            let task = Arc::clone(task);
            tasks.spawn(async move {
                let mut page = Page::from_row(&row, &config);
                page.ack_url = mint_ack_link(&task, &config, &row).await;
                let outcome = worker.sender.send(&notifier, &page, now).await;
                if outcome != Outcome::Delivered {
                    tracing::warn!(notifier = %row.notifier, stream = %row.stream, outcome = ?outcome, "re-posting a firing alert to Alertmanager failed; trying again at the next re-post");
                }
                lock(&worker.reposting).remove(&key);
            });
        }
        // Forget alerts that are no longer active, but not one posted in
        // the last REPOST_EVERY: its delivery may not be recorded in the
        // outbox yet (the attempt notes the post before it records the
        // outcome), and forgetting it would re-post it at once.
        let recent = now - alertmanager::REPOST_EVERY;
        lock(&self.reposted).retain(|k, t| seen.contains(k) || *t > recent);
        Ok(next)
    }
}

/// Queues due `repeat_interval` reminders and `escalate` steps of firing
/// streams (both counted in business time of the stream's calendar since
/// the alert started firing) and returns when the next one is due. Queuing
/// is idempotent per episode and step, so calling this often is harmless,
/// and after a restart only the latest missed reminder is sent.
async fn queue_extras(
    task: &DeliveryTask,
    config: &Config,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let wanted = config
        .streams
        .values()
        .any(|s| s.repeat_interval.is_some() || !s.escalate.is_empty());
    if !wanted {
        return Ok(None);
    }
    let now = task.clock.now();
    // Scheduling reminders and escalations is housekeeping: the leader's
    // alone. Others look again in a while, in case they become leader.
    if task.lead.housekeeping_term().await.is_none() {
        return Ok(Some(now + chrono::TimeDelta::seconds(2)));
    }
    let mut next: Option<DateTime<Utc>> = None;
    let mut later = |t: Option<DateTime<Utc>>| {
        if let Some(t) = t {
            next = Some(next.map_or(t, |n: DateTime<Utc>| n.min(t)));
        }
    };
    for row in task.store.streams().await? {
        let (Some(stream), Some(started)) = (config.streams.get(&row.name), row.firing_since)
        else {
            continue;
        };
        if row.alert_state != AlertState::Firing {
            continue;
        }
        let calendar = config.calendar_of(stream);
        let elapsed = calendar.business_time(started, now);
        if let Some(every) = stream.repeat_interval {
            let n = elapsed.num_milliseconds() / every.num_milliseconds().max(1);
            if n >= 1 && !stream.notify.is_empty() {
                let due = calendar.fires_at(started, every * n as i32).unwrap_or(now);
                task.store
                    .enqueue_extra(
                        stream.name.clone(),
                        PageKind::Reminder,
                        n,
                        stream.notify.clone(),
                        due,
                    )
                    .await?;
            }
            let after = every.checked_mul((n + 1) as i32);
            later(after.and_then(|a| calendar.fires_at(started, a)));
        }
        for (i, step) in stream.escalate.iter().enumerate() {
            if elapsed >= step.after {
                let due = calendar.fires_at(started, step.after).unwrap_or(now);
                task.store
                    .enqueue_extra(
                        stream.name.clone(),
                        PageKind::Escalation,
                        i as i64,
                        step.notify.clone(),
                        due,
                    )
                    .await?;
            } else {
                later(calendar.fires_at(started, step.after));
            }
        }
    }
    if next.is_some_and(|t| t <= now) {
        next = Some(now + chrono::TimeDelta::seconds(1));
    }
    Ok(next)
}

/// A new acknowledge link for this send of a firing stream page, when
/// `[server] public_url` is set (issue #30): a fresh code, stored as its
/// SHA-256 for the page's episode. `None` for other pages, for an episode
/// that ended meanwhile (its resolve follows), and when the code cannot be
/// stored: the page then goes out without a link rather than not at all.
/// The code itself is never logged.
async fn mint_ack_link(task: &DeliveryTask, config: &Config, row: &OutboxRow) -> Option<String> {
    let base = config.server.public_url.as_ref()?;
    let started = row.started_at?;
    if row.state != AlertState::Firing
        || row.alert_kind != crate::domain::alert_kind::AlertKind::Silence
    {
        return None;
    }
    let Some(code) = crate::store::ack_codes::new_code() else {
        tracing::error!(stream = %row.stream, page = %row.page_key, "no system randomness for an acknowledge link; the page goes out without one");
        return None;
    };
    let ttl = config.server.ack_link_ttl;
    match task
        .store
        .mint_ack_code(code.sha256, row.stream.clone(), started, ttl)
        .await
    {
        Ok(true) => Some(base.ack_link(&code.text)),
        Ok(false) => None,
        Err(e) => {
            tracing::warn!(stream = %row.stream, page = %row.page_key, error = %e, "could not store an acknowledge link; the page goes out without one");
            None
        }
    }
}

fn log_failed(notifier: &str, row: &OutboxRow, error: &str) {
    tracing::error!(
        notifier,
        stream = %row.stream,
        page = %row.page_key,
        alert_id = %row.alert_id,
        error,
        "PAGE FAILED: this page will not be delivered; see /v1/status and hushwatch_notifications_total{{outcome=\"failed\"}}"
    );
}

/// The oldest pending page per (alert, notifier): the only one that may
/// be attempted, so pages of one alert go out in order while other alerts
/// (even on the same stream) do not wait for it. Reminders and
/// escalations share their episode's alert id, so they queue behind its
/// firing page.
///
/// A page behind one this binary cannot read (`unreadable`) in its queue
/// is no head: it keeps waiting, as on a shared store, where the claim
/// query sees every row. A page ahead of it still goes.
fn heads<'a>(pending: &'a [OutboxRow], unreadable: &[Unreadable]) -> Vec<&'a OutboxRow> {
    let mut blocked: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for place in unreadable.iter().filter_map(|u| u.queue.as_ref()) {
        let first = blocked
            .entry((place.alert_id.as_str(), place.notifier.as_str()))
            .or_insert(place.id);
        *first = (*first).min(place.id);
    }
    let mut seen = BTreeSet::new();
    pending
        .iter()
        .filter(|r| seen.insert((r.alert_id.as_str(), r.notifier.as_str())))
        .filter(|r| {
            blocked
                .get(&(r.alert_id.as_str(), r.notifier.as_str()))
                .is_none_or(|first| r.id < *first)
        })
        .collect()
}

fn set_pending_gauges(task: &DeliveryTask, config: &Config, pending: &[OutboxRow]) {
    for n in config.notifiers.keys() {
        let count = pending.iter().filter(|p| &p.notifier == n).count();
        task.metrics
            .outbox_pending
            .with_label_values(&[n.as_str()])
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The delivery concern's state-facing side: the `notifications` section of
/// `/v1/status` (the worker itself is `run`).
pub struct Delivery {
    core: Arc<Core>,
}

impl Delivery {
    pub(super) fn new(core: Arc<Core>) -> Delivery {
        Delivery { core }
    }

    /// The `notifications` section of `/v1/status`: per-notifier counts and
    /// the newest failed pages with their (redacted) reasons.
    pub async fn notifications_status(&self) -> Result<Value, StoreError> {
        let summary: OutboxSummary = self.core.store.outbox_summary().await?;
        let config = self.core.config();
        let notifiers: BTreeMap<&str, Value> = config
            .notifiers
            .iter()
            .map(|(name, n)| {
                let c = summary.by_notifier.get(name).cloned().unwrap_or_default();
                (
                    name.as_str(),
                    json!({
                        "kind": n.kind.name(),
                        "pending": c.pending,
                        "delivered": c.delivered,
                        "failed": c.failed,
                    }),
                )
            })
            .collect();
        let failed: Vec<Value> = summary
            .recent_failures
            .iter()
            .map(|r| {
                json!({
                    "page": r.page_key,
                    "alert_id": r.alert_id,
                    "stream": r.stream,
                    "notifier": r.notifier,
                    "status": if r.state == AlertState::Firing { "firing" } else { "resolved" },
                    "kind": r.kind.as_str(),
                    "at": rfc(r.at),
                    "attempts": r.attempts,
                    "error": r.last_error,
                })
            })
            .collect();
        let failed_total: u64 = summary.by_notifier.values().map(|c| c.failed).sum();
        Ok(json!({
            "notifiers": notifiers,
            "failed_total": failed_total,
            "recent_failures": failed,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::heads;
    use crate::domain::alert_kind::AlertKind;
    use crate::store::{AlertState, OutboxRow, PageKind, QueuePlace, Unreadable};

    fn row(id: i64, alert: &str) -> OutboxRow {
        let at = chrono::DateTime::UNIX_EPOCH;
        OutboxRow {
            id,
            page_key: format!("k{id}"),
            stream: "a".into(),
            notifier: "hook".into(),
            state: AlertState::Firing,
            at,
            reason: String::new(),
            created_at: at,
            kind: PageKind::Page,
            alert_id: alert.into(),
            started_at: None,
            silent_since: None,
            attempts: 0,
            first_attempt_at: None,
            next_attempt_at: None,
            last_error: None,
            alert_kind: AlertKind::Silence,
            severity: "critical".into(),
            source: None,
            endpoint_id: None,
            resumed_at: None,
        }
    }

    fn unreadable(id: i64, alert: &str) -> Unreadable {
        Unreadable {
            what: format!("outbox row {id}"),
            why: "unknown alert_kind \"x\"".into(),
            queue: Some(QueuePlace {
                id,
                alert_id: alert.into(),
                notifier: "hook".into(),
            }),
        }
    }

    /// Queue order holds around a page this binary cannot read: what is
    /// behind it waits, what is ahead of it goes, other queues go.
    #[test]
    fn an_unreadable_page_holds_back_only_what_queues_behind_it() {
        let pending = [row(1, "x"), row(3, "x"), row(4, "y"), row(6, "z")];
        let blocked = [unreadable(2, "x"), unreadable(5, "y")];
        let ids: Vec<i64> = heads(&pending, &blocked).iter().map(|r| r.id).collect();
        assert_eq!(ids, [1, 4, 6]);
        let ids: Vec<i64> = heads(&pending[1..], &blocked)
            .iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, [4, 6], "3 waits behind unreadable 2");
    }
}
