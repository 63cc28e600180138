//! Relay mode's forwarder (issue #29): delivers each stored delivery of a
//! `[streams.X.forward]` stream to the app, and settles the outcome.
//!
//! - Rows are claimed from the store with a lease and a fencing token
//!   (`store::forward`), so on several replicas each is attempted by one
//!   replica at a time, an ordered stream has one event in flight, and a
//!   replica killed mid-send leaves a row another replica sends again once
//!   the lease ends, under the same `webhook-id`.
//! - The app receives the stored body bytes, `webhook-id` = the original
//!   delivery id (its dedup still holds), a fresh `webhook-timestamp`, and
//!   `webhook-signature` with every forward secret (Standard Webhooks),
//!   the same three under `svix-*` names, and the original times in
//!   `hushwatch-received-at` / `hushwatch-event-time` (on a WorkOS stream
//!   `WorkOS-Signature` instead of the three, on an Okta or Auth0 stream
//!   `Authorization: <forward secret>`). The Standard
//!   Webhooks and Svix libraries reject timestamps more than 5 minutes
//!   old, which is why a retry hours later is signed afresh
//!   (<https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md>).
//! - Any 2xx is delivered. Anything else (another status, a timeout, a
//!   reset) is a failure retried on the stream's ladder: a timeout after
//!   the request was sent is an unknown result, so the retry reuses the id
//!   and the app's dedup absorbs a double.
//! - Every attempt is its own task; the worker never waits on the app.
//! - Every attempt carries its number (`hushwatch-attempt`, counted by
//!   the claim, so a re-send after a crash carries a new one) and is
//!   logged with the stream, delivery id and number.
//! - Events hushwatch itself cannot send are **held**, not failed: a body
//!   sealed under a key no longer configured, a row altered at rest (does
//!   not open, or claims plaintext after a key was set), a stream whose
//!   `[forward]` was removed (reload or restart) or that left the config.
//!   They leave the delivery queue at once, so later events of their
//!   subject go on; they page `forward_held` (critical) and stay visible
//!   in `/v1/status` and the metrics. At start and after each reload the
//!   store is aligned with the config (`store::forward::align`): held rows
//!   whose cause is gone go out at once, in order, under their ids; a
//!   changed `ordered` applies to the events already queued.
//! - `critical_after`: each forwarding stream's oldest undelivered
//!   revocation is checked once a second; past it, a critical
//!   `forward_revocation_overdue` page, once per episode.

use super::core::Core;
use super::feed::Mirror;
use crate::config::forward::{ForwardConfig, ForwardKeys, DEFAULT_CONCURRENCY};
use crate::config::Config;
use crate::domain::forward::Hold;
use crate::ingest::providers::workos::sign as workos_sign;
use crate::ingest::signature::sign;
use crate::notify::http::Client;
use crate::notify::Outcome;
use crate::store::forward::{
    ClaimRoom, ForwardAlignment, ForwardAttempt, ForwardClaim, ForwardEscalation, ForwardPolicy,
    ForwardSettle, StreamAlignment,
};
use crate::store::seal::OpenError;
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use hyper::Method;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Attempts in flight at once, across streams: each stream has its own
/// `concurrency` (at most this), and this bounds sockets while apps are slow.
const MAX_IN_FLIGHT: usize = crate::config::forward::MAX_CONCURRENCY;

/// Bodies in flight at once, in bytes: no new claim starts past it, so a
/// stream of 1 MiB events cannot hold 256 MiB (a claim may overshoot it by
/// what one claim takes).
const MAX_IN_FLIGHT_BYTES: usize = 32 * 1024 * 1024;

/// How often a worker looks for rows another replica stored, or whose
/// lease ran out, when nothing woke it (one process: never needed).
const POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// The gap between two claims is twice the last claim's own time, within
/// these bounds. A claim reads every queue's head in one grouped statement
/// that grows with the pending rows (about 40 ms for 200,000 rows in
/// 20,000 subject queues on SQLite, inside the writer), and each settle
/// wakes the worker: so claims take at most a third of the writer during
/// a large backlog, while a small queue is claimed again within a
/// millisecond or two (a fixed 100 ms gap capped delivery at about ten
/// claims a second, issue #46).
const CLAIM_SPACING_MIN: std::time::Duration = std::time::Duration::from_millis(1);
const CLAIM_SPACING_MAX: std::time::Duration = std::time::Duration::from_millis(100);

/// How often every stream's `critical_after` state is read, overdue or
/// not: a resolve may wait this long, a fire never does.
const ESCALATION_SWEEP: TimeDelta = TimeDelta::seconds(30);

/// Pause after a failed store call.
const STORE_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// A stream's forwarding policy. One that no longer forwards (config
/// reloaded, `f` is None) gets the defaults: its rows are held, and its
/// pages still go to its notifiers.
pub(super) fn policy(config: &Config, stream: &str, f: Option<&ForwardConfig>) -> ForwardPolicy {
    let (ladder, order, retain, dead_letter_retain, critical_after) = match f {
        Some(f) => (
            f.ladder.clone(),
            f.order,
            f.retain,
            f.dead_letter_retain,
            f.critical_after,
        ),
        None => (
            crate::domain::forward::Ladder::default(),
            crate::domain::forward::Order::default(),
            crate::config::forward::DEFAULT_RETAIN,
            crate::config::forward::DEFAULT_DEAD_LETTER_RETAIN,
            crate::config::forward::DEFAULT_CRITICAL_AFTER,
        ),
    };
    ForwardPolicy {
        ladder,
        order,
        critical_after,
        config_path: config_path(config),
        retain,
        dead_letter_retain,
        notifiers: notifiers(config, stream),
        audit: config.audit.enabled,
    }
}

fn notifiers(config: &Config, stream: &str) -> Vec<String> {
    config
        .streams
        .get(stream)
        .map(|s| s.notify.clone())
        .unwrap_or_default()
}

/// The config file pages' commands name.
pub(super) fn config_path(config: &Config) -> String {
    if config.source.is_empty() {
        crate::domain::forward::DEFAULT_CONFIG_PATH.to_string()
    } else {
        config.source.clone()
    }
}

/// What a start or reload tells the store ([`crate::store::forward::align`]).
fn alignment(config: &Config, now: DateTime<Utc>) -> ForwardAlignment {
    ForwardAlignment {
        streams: config
            .streams
            .iter()
            .map(|(name, s)| StreamAlignment {
                stream: name.clone(),
                order: s.forward.as_ref().map(|f| f.order),
                notifiers: s.notify.clone(),
                config_path: config_path(config),
            })
            .collect(),
        key_ids: config.store.sealer.key_ids(),
        now,
    }
}

/// What the worker has in flight, per stream and in body bytes. Each
/// attempt holds a [`Slot`], which gives its share back when the attempt
/// ends however it ends (settled, failed, or aborted at shutdown).
#[derive(Default)]
struct InFlight {
    counts: std::sync::Mutex<InFlightCounts>,
}

#[derive(Default)]
struct InFlightCounts {
    per_stream: std::collections::HashMap<String, usize>,
    bytes: usize,
}

struct Slot {
    owner: Arc<InFlight>,
    stream: String,
    bytes: usize,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.owner.lock();
        c.bytes = c.bytes.saturating_sub(self.bytes);
        if let Some(n) = c.per_stream.get_mut(&self.stream) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.per_stream.remove(&self.stream);
            }
        }
    }
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, InFlightCounts> {
        // The counts stay consistent under a panic elsewhere: each update
        // is a single step.
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn take(self: &Arc<Self>, stream: &str, bytes: usize) -> Slot {
        let mut c = self.lock();
        c.bytes += bytes;
        *c.per_stream.entry(stream.to_owned()).or_insert(0) += 1;
        Slot {
            owner: Arc::clone(self),
            stream: stream.to_owned(),
            bytes,
        }
    }

    fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Room for the next claim: `free` in all, and per stream its
    /// `concurrency` less what it has in flight (a stream without
    /// `[forward]` the default: its rows are claimed only to be held).
    fn room(&self, config: &Config, free: usize) -> ClaimRoom {
        let c = self.lock();
        let busy = |stream: &str| c.per_stream.get(stream).copied().unwrap_or(0);
        let mut per_stream: std::collections::BTreeMap<String, usize> = config
            .streams
            .values()
            .filter_map(|s| {
                let f = s.forward.as_ref()?;
                Some((s.name.clone(), f.concurrency.saturating_sub(busy(&s.name))))
            })
            .collect();
        for (stream, n) in &c.per_stream {
            per_stream
                .entry(stream.clone())
                .or_insert_with(|| DEFAULT_CONCURRENCY.saturating_sub(*n));
        }
        ClaimRoom {
            total: free,
            per_stream,
            otherwise: DEFAULT_CONCURRENCY,
        }
    }
}

/// What the relay forwarder needs: the shared handles (`Deref`), the
/// stream mirror a delivery settles into (a relay-mode stream's clock
/// moves when the app accepts), and this replica's id for its claims.
pub struct ForwardTask {
    pub core: Arc<Core>,
    pub mirror: Arc<dyn Mirror>,
    /// "local" for a sidecar of one process.
    pub replica: String,
}

impl std::ops::Deref for ForwardTask {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

pub async fn run(task: Arc<ForwardTask>, mut shutdown: watch::Receiver<bool>) {
    // One keep-alive pool for every app URL (hyper keys it by scheme, host
    // and port), as large as the most that can be in flight.
    let client = Arc::new(Client::keep_alive(MAX_IN_FLIGHT));
    let in_flight = Arc::new(InFlight::default());
    let mut attempts: JoinSet<()> = JoinSet::new();
    let mut refreshed: Option<DateTime<Utc>> = None;
    // When every stream's `critical_after` state was last read (one past
    // it is read each second; the others every ESCALATION_SWEEP, to resolve
    // a page another replica fired).
    let mut swept: Option<DateTime<Utc>> = None;
    let mut claim_gate = Box::pin(tokio::time::sleep(std::time::Duration::ZERO));
    let mut overdue_before = std::collections::BTreeSet::new();
    let replica = task.replica.clone();
    // One process owns a SQLite file: every lease in it is a dead
    // predecessor's (kill -9), so its forwards go out now rather than
    // after the lease (timeout + 30 s). Replicas on PostgreSQL keep theirs.
    if task.store.engine() == "sqlite" {
        if let Err(e) = task.store.release_forward_leases().await {
            tracing::error!(error = %e, "relay: could not release the previous process's leases; they end on their own");
        }
    }
    // Whether the store held pending or held rows, or an undelivered
    // revocation, at the last look (a failed look counts as yes). With no
    // stream forwarding nothing new is stored, but rows stored before
    // `[forward]` was removed still are, and must be held, shown and aged
    // (`critical_after`) rather than sit unseen: so the worker always
    // claims, and polls only while there is something to poll for.
    let mut stored_pending = true;
    // The config the store was last aligned with: at start and after each
    // reload, held rows whose cause is gone go out now, rows of streams
    // without `[forward]` are held, and a changed `ordered` applies to the
    // rows already queued (a failed alignment is retried on the next turn).
    let mut aligned: Option<Arc<crate::config::Config>> = None;
    loop {
        if *shutdown.borrow() {
            break;
        }
        let config = task.config();
        let forwarding = config.streams.values().any(|s| s.forward.is_some());
        if aligned.as_ref().is_none_or(|h| !Arc::ptr_eq(h, &config)) {
            match task
                .store
                .align_forwards(alignment(&config, task.store.now()))
                .await
            {
                Ok(a) => {
                    if a.requeued + a.released + a.held > 0 {
                        tracing::info!(
                            requeued = a.requeued,
                            released = a.released,
                            held = a.held,
                            "relay: stored events follow the config"
                        );
                    }
                    aligned = Some(Arc::clone(&config));
                    task.outbox_wake.notify_one();
                }
                Err(e) => {
                    tracing::error!(error = %e, "relay: could not apply the config to the stored events; retrying")
                }
            }
        }
        let mut next: Option<DateTime<Utc>> = None;
        let mut failed = false;
        let free = MAX_IN_FLIGHT.saturating_sub(attempts.len());
        if free > 0 && in_flight.bytes() < MAX_IN_FLIGHT_BYTES {
            claim_gate.as_mut().await;
            let claim_started = std::time::Instant::now();
            let lease = lease(&config);
            match task
                .store
                .claim_forwards(
                    replica.clone(),
                    task.store.now(),
                    lease,
                    in_flight.room(&config, free),
                )
                .await
            {
                Ok((claims, due)) => {
                    next = due;
                    for claim in claims {
                        let slot = in_flight.take(&claim.stream, claim.body.bytes.len());
                        let task = Arc::clone(&task);
                        let client = Arc::clone(&client);
                        attempts.spawn(async move { attempt(&task, &client, claim, slot).await });
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "relay: could not claim forwards; retrying");
                    failed = true;
                }
            }
            let spacing = (claim_started.elapsed() * 2).clamp(CLAIM_SPACING_MIN, CLAIM_SPACING_MAX);
            claim_gate.set(tokio::time::sleep(spacing));
        }
        // At most once a second: a status read scans the open rows.
        let now = task.clock.now();
        if refreshed.is_none_or(|t| now - t >= TimeDelta::seconds(1) || now < t) {
            let rows = task.store.forward_status().await.ok();
            stored_pending = rows.as_ref().is_none_or(|rows| {
                rows.iter()
                    .any(|r| r.pending > 0 || r.held > 0 || r.oldest_revocation_at.is_some())
            });
            if let Some(rows) = &rows {
                refresh_gauges(&task, &config, rows);
                let sweep = swept.is_none_or(|t| now - t >= ESCALATION_SWEEP || now < t);
                if sweep {
                    swept = Some(now);
                }
                escalate(&task, &config, rows, sweep, &mut overdue_before).await;
            }
            refreshed = Some(now);
        }
        let poll = should_poll(forwarding, stored_pending);
        let wait = async {
            if failed {
                tokio::time::sleep(STORE_RETRY).await;
                return;
            }
            let poll = async {
                if poll {
                    tokio::time::sleep(POLL).await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            match next {
                Some(t) => {
                    tokio::select! {
                        _ = task.clock.sleep_until(t) => {}
                        _ = poll => {}
                    }
                }
                None => poll.await,
            }
        };
        tokio::select! {
            _ = task.forward_wake.notified() => {}
            _ = wait => {}
            Some(_) = attempts.join_next(), if !attempts.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    // Unsettled rows keep their lease until it ends, then any replica (or
    // this one after a restart) sends them again under the same id.
    attempts.abort_all();
    while attempts.join_next().await.is_some() {}
}

/// Longer than the slowest attempt, so a live attempt is never taken over.
fn lease(config: &Config) -> TimeDelta {
    let slowest = config
        .streams
        .values()
        .filter_map(|s| s.forward.as_ref().map(|f| f.timeout))
        .max()
        .unwrap_or_default();
    TimeDelta::from_std(slowest + std::time::Duration::from_secs(30))
        .unwrap_or(TimeDelta::minutes(3))
}

/// The headers of one attempt: the signature in the provider's scheme
/// (Standard Webhooks and the same under Svix's names, or WorkOS's), the
/// original times, and what made the event when the provider did not.
pub fn headers(
    f: &ForwardConfig,
    claim: &ForwardClaim,
    now: DateTime<Utc>,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    let mut h = match &f.secrets {
        ForwardKeys::Standard(keys) => {
            let ts = now.timestamp();
            let signature = keys
                .iter()
                .map(|k| sign(k, &claim.delivery_id, ts, body))
                .collect::<Vec<_>>()
                .join(" ");
            vec![
                ("webhook-id", claim.delivery_id.clone()),
                ("webhook-timestamp", ts.to_string()),
                ("webhook-signature", signature.clone()),
                ("svix-id", claim.delivery_id.clone()),
                ("svix-timestamp", ts.to_string()),
                ("svix-signature", signature),
            ]
        }
        // `WorkOS-Signature: t=<unix ms>, v1=<hex HMAC-SHA256 of "<t>.<body>">`
        // keyed with the secret string as given, as WorkOS signs its own
        // deliveries (https://workos.com/docs/sso/webhooks, "Process the
        // request"; workos-python `webhooks/_verification.py` 10.8.0). The SDKs accept 180 s of age, so a
        // retry is signed afresh like every other; `check` allows one
        // secret, as the SDKs read one `v1=`.
        ForwardKeys::Workos(keys) => keys
            .first()
            .map(|k| {
                vec![(
                    "workos-signature",
                    workos_sign(k, now.timestamp_millis(), body),
                )]
            })
            .unwrap_or_default(),
        // Okta Event Hooks and Auth0 Log Streams send the `Authorization`
        // value configured with the hook or stream, unchanged, and sign
        // nothing (https://developer.okta.com/docs/reference/hooks-best-practices/,
        // "Secure your hook endpoint"; Auth0 "Custom webhook" log streams,
        // https://auth0.com/docs/extensions/loggly, "Authorization Token: the
        // value in the Authorization header"), so the app compares that value.
        ForwardKeys::Authorization(values) => values
            .first()
            .map(|v| vec![("authorization", v.expose().to_owned())])
            .unwrap_or_default(),
    };
    h.extend([
        (
            "hushwatch-received-at",
            claim
                .received_at
                .to_rfc3339_opts(SecondsFormat::Millis, true),
        ),
        ("hushwatch-attempt", claim.attempts.to_string()),
    ]);
    if let Some(origin) = &claim.origin {
        h.push(("hushwatch-origin", origin.clone()));
    }
    if let Some(t) = claim.event_time {
        h.push((
            "hushwatch-event-time",
            t.to_rfc3339_opts(SecondsFormat::Millis, true),
        ));
    }
    h
}

/// One delivery and its settle. The stream's slot (its `concurrency`) is
/// given back once the app has answered, not after the settle: the
/// settle waits for the store's writer, which under heavy ingest takes
/// longer than the delivery itself, and counting it would let the writer,
/// not the app, set how many deliveries are in flight.
async fn attempt(task: &ForwardTask, client: &Client, claim: ForwardClaim, slot: Slot) {
    let config = task.config();
    let forward = config
        .streams
        .get(&claim.stream)
        .and_then(|s| s.forward.clone());
    if !config.streams.contains_key(&claim.stream) {
        // No notify list to page through and no status entry: the log is
        // the one place left that says so (docs/src/relay.md).
        tracing::error!(stream = %claim.stream, delivery_id = %claim.delivery_id, "relay: a stream removed from the config still has stored events; they are held and cannot page: add the stream back with [forward] to deliver them");
    }
    let (policy, result) = match &forward {
        None => (
            policy(&config, &claim.stream, None),
            ForwardAttempt::Held(Hold::NoForward),
        ),
        Some(f) => (
            policy(&config, &claim.stream, Some(f)),
            send(task, client, &config, f, &claim).await,
        ),
    };
    drop(slot);
    let outcome = match &result {
        ForwardAttempt::Delivered { .. } => "delivered",
        ForwardAttempt::Failed { .. } => "failed",
        ForwardAttempt::Held(_) => "held",
    };
    let at = task.store.now();
    let received_at = claim.received_at;
    let stream = claim.stream.clone();
    match &result {
        ForwardAttempt::Failed { error, .. } => {
            tracing::warn!(stream = %stream, delivery_id = %claim.delivery_id, attempt = claim.attempts, error = %error, "relay: the app did not accept a forwarded event");
        }
        ForwardAttempt::Held(hold) => {
            tracing::error!(stream = %stream, delivery_id = %claim.delivery_id, reason = hold.code(), "relay: held a stored event hushwatch cannot send: {}", hold.words());
        }
        ForwardAttempt::Delivered { .. } => {}
    }
    let settled = task
        .store
        .settle_forward(ForwardSettle {
            claim,
            attempt: result,
            at,
            policy,
        })
        .await;
    task.note_storage(&settled);
    match settled {
        Ok(s) if s.settled => {
            let m = &task.metrics.forward;
            m.attempts.with_label_values(&[&stream, outcome]).inc();
            if s.dead {
                m.attempts
                    .with_label_values(&[&stream, "dead_letter"])
                    .inc();
            }
            if outcome == "delivered" {
                m.latency
                    .observe((at - received_at).num_milliseconds().max(0) as f64 / 1000.0);
            }
            if let Some(row) = s.moved {
                task.mirror.absorb_stored(vec![row]);
            }
            task.outbox_wake.notify_one();
        }
        Ok(_) => {
            tracing::info!(stream = %stream, "relay: another replica took this forward over; its outcome was not recorded here")
        }
        Err(e) => {
            tracing::error!(stream = %stream, error = %e, "relay: could not record a forward's outcome; it will be sent again under the same id")
        }
    }
}

async fn send(
    task: &ForwardTask,
    client: &Client,
    config: &Config,
    f: &ForwardConfig,
    claim: &ForwardClaim,
) -> ForwardAttempt {
    if f.secrets.is_empty() {
        return ForwardAttempt::Failed {
            error: "forward.secret is empty: not sent (the app could not verify it)".into(),
            status: None,
        };
    }
    let body = match config.store.sealer.open(claim.row(), &claim.body) {
        Ok(b) => b,
        Err(OpenError::UnknownKey(id)) => return ForwardAttempt::Held(Hold::UnknownKey(id)),
        Err(OpenError::Corrupt) => return ForwardAttempt::Held(Hold::Corrupt),
        Err(OpenError::Plaintext) => return ForwardAttempt::Held(Hold::Plaintext),
    };
    let now = task.clock.now();
    let headers = headers(f, claim, now, &body);
    tracing::info!(stream = %claim.stream, delivery_id = %claim.delivery_id, attempt = claim.attempts, "relay: sending an event to the app");
    let (outcome, status) = client
        .request_status(Method::POST, f.url.expose(), &headers, body, f.timeout)
        .await;
    match outcome {
        Outcome::Delivered => ForwardAttempt::Delivered {
            status: status.unwrap_or(200),
        },
        Outcome::Retry { reason, .. } | Outcome::Permanent { reason, .. } => {
            ForwardAttempt::Failed {
                error: reason,
                status,
            }
        }
    }
}

/// The `critical_after` check of each configured stream that forwards or
/// has stored relay rows (held ones of a stream without `[forward]` age
/// too, on the default): the store pages once per episode; replicas agree
/// through its mark. A stream whose oldest undelivered revocation is past
/// it is checked now; the rest only on a `sweep` (to resolve), so a quiet
/// relay costs no store call per stream per second.
async fn escalate(
    task: &ForwardTask,
    config: &Config,
    rows: &[crate::store::forward::ForwardStatus],
    sweep: bool,
    overdue_before: &mut std::collections::BTreeSet<String>,
) {
    let now = task.store.now();
    for (name, s) in &config.streams {
        let row = rows.iter().find(|r| &r.stream == name);
        if s.forward.is_none() && row.is_none() {
            continue;
        }
        let critical_after = s
            .forward
            .as_ref()
            .map_or(crate::config::forward::DEFAULT_CRITICAL_AFTER, |f| {
                f.critical_after
            });
        let overdue = crate::domain::forward::revocation_overdue(
            row.and_then(|r| r.oldest_revocation_at),
            critical_after,
            now,
        );
        // One this replica saw overdue is read again at once when it no
        // longer is, so its resolve does not wait for the sweep.
        let was = if overdue {
            !overdue_before.insert(name.clone())
        } else {
            overdue_before.remove(name)
        };
        if !overdue && !was && !sweep {
            continue;
        }
        let e = ForwardEscalation {
            stream: name.clone(),
            critical_after,
            now,
            notifiers: s.notify.clone(),
            config_path: config_path(config),
        };
        match task.store.escalate_forwards(e).await {
            Ok(Some(_)) => task.outbox_wake.notify_one(),
            Ok(None) => {}
            Err(e) => {
                tracing::error!(stream = %name, error = %e, "relay: could not check the age of undelivered revocations; retrying")
            }
        }
    }
}

/// `hushwatch_forward_pending` and friends, from the store, for every
/// configured stream that forwards or still has stored relay state (one
/// whose `[forward]` was removed keeps its series while its rows wait).
/// Names outside the config get none: labels stay bounded by the config.
fn refresh_gauges(
    task: &ForwardTask,
    config: &Config,
    rows: &[crate::store::forward::ForwardStatus],
) {
    let now = task.clock.now();
    let m = &task.metrics.forward;
    for (name, stream) in &config.streams {
        let row = rows.iter().find(|r| &r.stream == name);
        if stream.forward.is_none() && row.is_none() {
            continue;
        }
        m.declare(name);
        let pending = row.map_or(0, |r| r.pending);
        m.pending
            .with_label_values(&[name])
            .set(i64::try_from(pending).unwrap_or(i64::MAX));
        m.dead_letters
            .with_label_values(&[name])
            .set(i64::try_from(row.map_or(0, |r| r.dead_letters)).unwrap_or(i64::MAX));
        m.held
            .with_label_values(&[name])
            .set(i64::try_from(row.map_or(0, |r| r.held)).unwrap_or(i64::MAX));
        let age = row
            .and_then(|r| r.oldest_pending_at)
            .map_or(0.0, |t| (now - t).num_milliseconds().max(0) as f64 / 1000.0);
        m.oldest_pending.with_label_values(&[name]).set(age);
    }
}

/// Whether the worker looks again every [`POLL`] besides its wakes (an
/// ingest or replay here, a reload, an attempt settled, the next row
/// falling due): while a stream forwards, to find rows other replicas
/// stored; while pending rows are stored, to find leases that ended
/// (another replica's, killed mid-send). With neither there is nothing a
/// poll could find, so the worker sleeps until woken rather than spin.
fn should_poll(forwarding: bool, stored_pending: bool) -> bool {
    forwarding || stored_pending
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_polls_only_while_a_stream_forwards_or_rows_are_pending() {
        assert!(should_poll(true, false));
        assert!(should_poll(true, true));
        // [forward] removed with rows still stored: they must be found.
        assert!(should_poll(false, true));
        // Nothing forwards and nothing is pending: sleep until woken.
        assert!(!should_poll(false, false));
    }

    #[test]
    fn a_workos_stream_s_forward_carries_a_workos_signature_the_provider_s_verifier_accepts() {
        let text = "[streams.w]\ncalendar = \"always\"\nsilence_threshold = \"6h\"\n\
            [streams.w.ingest]\nprovider = \"workos\"\nwebhook_secret = \"wk_provider\"\n\
            [streams.w.forward]\nurl = \"http://127.0.0.1:3000/hook\"\nsecret = \"app_plain_secret\"\n";
        let config = crate::config::parse(text, std::path::Path::new("."), &|_| None).unwrap();
        let f = config.streams["w"].forward.as_ref().unwrap();
        let now = DateTime::from_timestamp_millis(1_800_000_000_123).unwrap();
        let claim = ForwardClaim {
            id: 1,
            token: 1,
            stream: "w".into(),
            delivery_id: "event_1".into(),
            event_type: "dsync.user.deleted".into(),
            subject: None,
            event_time: None,
            received_at: now,
            give_up_from: now,
            attempts: 1,
            body: crate::store::seal::Sealed {
                key_id: None,
                bytes: Vec::new(),
            },
            legacy_aad: false,
            before_any_key: false,
            origin: Some("crosscheck".into()),
        };
        let body = br#"{"id":"event_1","event":"dsync.user.deleted","data":{},"created_at":"2027-01-15T08:00:00.000Z"}"#;
        let h = headers(f, &claim, now, body);
        let get = |name: &str| h.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str());
        let signature = get("workos-signature").unwrap();
        assert!(signature.starts_with("t=1800000000123, v1="), "{signature}");
        let header = crate::ingest::providers::workos::check_header(Some(signature), now).unwrap();
        let key = crate::ingest::providers::workos::WorkosKey::parse("app_plain_secret").unwrap();
        crate::ingest::providers::workos::verify(&header, &[key], body).unwrap();
        assert_eq!(get("webhook-signature"), None, "one scheme per stream");
        assert_eq!(get("hushwatch-origin"), Some("crosscheck"));
    }

    #[test]
    fn an_okta_or_auth0_stream_s_forward_carries_the_configured_authorization_value_alone() {
        for provider in ["okta", "auth0"] {
            let text = format!(
                "[streams.i]\ncalendar = \"always\"\nsilence_threshold = \"6h\"\n\
                [streams.i.ingest]\nprovider = \"{provider}\"\nauthorization = \"from-the-provider\"\n\
                [streams.i.forward]\nurl = \"http://127.0.0.1:3000/hook\"\nsecret = \"Basic YXBwOnNpZGU=\"\n"
            );
            let config = crate::config::parse(&text, std::path::Path::new("."), &|_| None).unwrap();
            let f = config.streams["i"].forward.as_ref().unwrap();
            let now = DateTime::from_timestamp_millis(1_800_000_000_123).unwrap();
            let claim = ForwardClaim {
                id: 1,
                token: 1,
                stream: "i".into(),
                delivery_id: "uuid-1".into(),
                event_type: "user.lifecycle.deactivate".into(),
                subject: None,
                event_time: None,
                received_at: now,
                give_up_from: now,
                attempts: 2,
                body: crate::store::seal::Sealed {
                    key_id: None,
                    bytes: Vec::new(),
                },
                legacy_aad: false,
                before_any_key: false,
                origin: None,
            };
            let h = headers(f, &claim, now, b"{}");
            let get = |name: &str| h.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str());
            assert_eq!(
                get("authorization"),
                Some("Basic YXBwOnNpZGU="),
                "{provider}"
            );
            assert_eq!(h.iter().filter(|(n, _)| *n == "authorization").count(), 1);
            for other in ["webhook-signature", "svix-signature", "workos-signature"] {
                assert_eq!(get(other), None, "{provider}: one scheme per stream");
            }
            assert_eq!(get("hushwatch-attempt"), Some("2"));
        }
    }
}
