//! Who watches the watcher (issue #19): every tick the watchdog checks the
//! store the way `/readyz` does, decides whether hushwatch is degraded
//! (and why), pings the `[heartbeat]` URL (or its fail URL), and pages
//! `[server] emergency_notify` directly when the store has not been
//! writable for `store_alarm_after`.
//!
//! It is a task of its own: a ping or an emergency page never holds up
//! ingest or the outbox worker, and each exchange has a short deadline.
//! Every replica runs it (each pings; the external check sees one
//! deployment when all use one URL). The emergency page is per replica by
//! design: it is sent exactly when the shared store cannot be trusted to
//! decide anything.

use super::core::Core;
use super::replicas::Lead;
use crate::config::watchdog::{HeartbeatConfig, HeartbeatMethod};
use crate::config::Config;
use crate::http::api::Api;
use crate::notify::{self, Outcome, Page, Sender};
use crate::store::PageKind;
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use serde_json::json;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Longest pause between two health checks (shorter when the heartbeat
/// interval is).
const CHECK_EVERY: TimeDelta = TimeDelta::seconds(5);
/// Deadline of one heartbeat ping (shorter when the interval is).
const PING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// An ongoing storage outage is paged again at most this often.
const EMERGENCY_REPEAT: TimeDelta = TimeDelta::hours(1);

/// Why hushwatch is degraded, as shown in `/v1/status` and sent to the fail URL.
#[derive(Default)]
struct State {
    /// The current reasons; empty when healthy.
    reasons: Vec<String>,
    /// Failed pages counted when the previous ping went out.
    failed_seen: Option<u64>,
    next_ping: Option<DateTime<Utc>>,
    /// Outcome of the last ping, to log only changes.
    last_ping: Option<&'static str>,
    /// The storage check failing.
    store: Alarm,
    /// Stored pages this binary cannot read (`Core::unreadable`).
    unreadable: Alarm,
    /// The clock reading of the last finished check (`/v1/status`'s
    /// `watchdog_checked_at`): every ping and emergency page due by then
    /// has been decided (an emergency page may still be on its way; it is
    /// counted in `hushwatch_emergency_pages_total` when decided).
    checked: Option<DateTime<Utc>>,
}

/// A condition the watchdog pages `emergency_notify` about directly: since
/// when it holds, and when it was last paged.
#[derive(Default)]
struct Alarm {
    since: Option<DateTime<Utc>>,
    sent: Option<DateTime<Utc>>,
}

/// What one check decides for an [`Alarm`].
#[derive(Debug, Clone, Copy, PartialEq)]
enum AlarmStep {
    Quiet,
    /// The condition began (logged, not paged yet).
    Began,
    /// Page it: held for `after` since `since` (again at most hourly).
    Fire {
        since: DateTime<Utc>,
    },
    /// It ended after a page went out: one resolve.
    Resolve {
        since: DateTime<Utc>,
    },
    /// It ended before anything was paged.
    Ended {
        since: DateTime<Utc>,
    },
}

impl Alarm {
    fn step(&mut self, holds: bool, after: TimeDelta, now: DateTime<Utc>) -> AlarmStep {
        match (holds, self.since) {
            (true, None) => {
                self.since = Some(now);
                AlarmStep::Began
            }
            (true, Some(since)) => {
                let due =
                    now - since >= after && self.sent.is_none_or(|t| now - t >= EMERGENCY_REPEAT);
                if due {
                    self.sent = Some(now);
                    AlarmStep::Fire { since }
                } else {
                    AlarmStep::Quiet
                }
            }
            (false, Some(since)) => {
                self.since = None;
                match self.sent.take() {
                    Some(_) => AlarmStep::Resolve { since },
                    None => AlarmStep::Ended { since },
                }
            }
            (false, None) => AlarmStep::Quiet,
        }
    }
}

/// The watchdog's state-facing side (`/v1/status`'s `degraded`).
pub struct Watchdog {
    core: Arc<Core>,
    state: Mutex<State>,
}

impl Watchdog {
    pub(super) fn new(core: Arc<Core>) -> Watchdog {
        Watchdog {
            core,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The reasons hushwatch is degraded (empty when healthy).
    pub fn reasons(&self) -> Vec<String> {
        self.lock().reasons.clone()
    }

    /// The clock reading of the last finished check (None: none yet).
    pub fn checked_at(&self) -> Option<DateTime<Utc>> {
        self.lock().checked
    }

    /// Pages that failed for good, over the configured notifiers and
    /// every reason.
    fn failed_pages(&self, config: &Config) -> u64 {
        let notifications = &self.core.metrics.notifications;
        config
            .notifiers
            .keys()
            .flat_map(|n| {
                crate::domain::notify_cause::Cause::ALL.map(|cause| {
                    notifications
                        .with_label_values(&[n.as_str(), "failed", cause.label()])
                        .get()
                })
            })
            .sum()
    }
}

/// What the watchdog needs: the shared handles (`Deref`), its own state,
/// the readiness check `/readyz` runs (through the routes' `Api`), and this
/// replica's leadership (a follower without a leader is degraded).
pub struct WatchdogTask {
    pub core: Arc<Core>,
    pub watchdog: Arc<Watchdog>,
    pub health: Arc<dyn Api>,
    pub lead: Lead,
    /// This replica's id when it shares the store with others.
    pub replica: Option<String>,
}

impl std::ops::Deref for WatchdogTask {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

pub async fn run(task: Arc<WatchdogTask>, mut shutdown: watch::Receiver<bool>) {
    let sender = Arc::new(Sender::new());
    let http = crate::notify::http::Client::new();
    loop {
        if *shutdown.borrow() {
            break;
        }
        let next = tick(&task, &sender, &http).await;
        tokio::select! {
            _ = task.clock.sleep_until(next) => {}
            _ = shutdown.changed() => break,
        }
    }
}

/// One check: returns when the next one is due.
async fn tick(
    task: &Arc<WatchdogTask>,
    sender: &Arc<Sender>,
    http: &notify::http::Client,
) -> DateTime<Utc> {
    let config = task.config();
    let storage = crate::http::storage_health(task.health.as_ref()).await;
    let now = task.clock.now();
    let watchdog = &task.watchdog;
    task.core.set_storage_ok(storage.is_ok());
    store_alarm(task, &config, sender, storage.as_ref().err(), now);
    let unreadable = task.core.unreadable();
    unreadable_alarm(task, &config, sender, &unreadable, now);
    if storage.is_ok() {
        super::fallback::refresh_gauges(&task.core, &config).await;
    }
    let failed = watchdog.failed_pages(&config);
    let heartbeat = config.watchdog.heartbeat.as_ref();
    let (reasons, ping_due) = {
        let mut s = watchdog.lock();
        let mut reasons = Vec::new();
        if let Err(e) = &storage {
            reasons.push(format!("storage failing: {e}"));
        }
        if !unreadable.is_empty() {
            reasons.push(format!(
                "stored pages this binary cannot read, each held back while every other page goes out: {}",
                name_unreadable(&unreadable)
            ));
        }
        if s.failed_seen.is_some_and(|seen| failed > seen) {
            reasons.push("a page failed permanently in the last interval".to_string());
        }
        if task.metrics.reload_successful.get() == 0 {
            reasons.push("the last config reload failed".to_string());
        }
        if let Some(l) = task.lead.leadership() {
            if l.leaderless_for().is_some() {
                reasons.push(format!(
                    "no leader for longer than a lease ({}): no replica holds the leader lease",
                    crate::domain::duration::format_duration(
                        TimeDelta::from_std(l.lease()).unwrap_or(TimeDelta::MAX)
                    )
                ));
            }
        }
        s.reasons.clone_from(&reasons);
        let due = heartbeat.is_some() && s.next_ping.is_none_or(|t| t <= now);
        if due || heartbeat.is_none() {
            s.failed_seen = Some(failed);
        }
        (reasons, due)
    };
    task.metrics
        .watchdog
        .degraded
        .set(i64::from(!reasons.is_empty()));
    if let (Some(h), true) = (heartbeat, ping_due) {
        let outcome = ping(http, h, &reasons, now).await;
        task.metrics
            .watchdog
            .heartbeat
            .with_label_values(&[outcome])
            .inc();
        let mut s = watchdog.lock();
        if s.last_ping != Some(outcome) {
            match outcome {
                "ok" => tracing::info!("heartbeat: pinging the healthy URL"),
                "fail" => {
                    tracing::warn!(reason = %reasons.join("; "), "heartbeat: hushwatch is degraded; pinging the fail URL")
                }
                _ => tracing::error!("heartbeat: the ping could not be delivered; the external check will alert when it misses pings"),
            }
            s.last_ping = Some(outcome);
        }
        s.next_ping = Some(now + h.interval);
    }
    let mut next = now + CHECK_EVERY;
    let mut s = watchdog.lock();
    if let Some(t) = s.next_ping.filter(|_| heartbeat.is_some()) {
        next = next.min(t);
    }
    // Published last, once everything due at `now` is decided: "checked up
    // to T" lets a reader (or a test) trust that nothing more was due. Only
    // forward, like the clock it follows.
    if s.checked.is_none_or(|t| t <= now) {
        s.checked = Some(now);
        task.metrics
            .watchdog
            .checked
            .set(now.timestamp_millis() as f64 / 1000.0);
    }
    next
}

/// Sends one ping: to `url` when healthy, else `fail_url` with the reason.
/// The URLs are never logged (they carry the check's token).
async fn ping(
    http: &notify::http::Client,
    h: &HeartbeatConfig,
    reasons: &[String],
    now: DateTime<Utc>,
) -> &'static str {
    let healthy = reasons.is_empty();
    let url = if healthy { &h.url } else { &h.fail_url };
    let (method, body) = match h.method {
        HeartbeatMethod::Get => (hyper::Method::GET, Vec::new()),
        HeartbeatMethod::Post => (
            hyper::Method::POST,
            json!({
                "status": if healthy { "ok" } else { "degraded" },
                "reason": reasons.join("; "),
                "at": now.to_rfc3339_opts(SecondsFormat::Secs, true),
                "version": env!("CARGO_PKG_VERSION"),
            })
            .to_string()
            .into_bytes(),
        ),
    };
    let timeout = PING_TIMEOUT.min(h.interval.to_std().unwrap_or(PING_TIMEOUT));
    match http.request(method, url, &[], body, timeout).await {
        Outcome::Delivered if healthy => "ok",
        Outcome::Delivered => "fail",
        _ => "error",
    }
}

/// Pages `emergency_notify` directly once the store has failed for
/// `store_alarm_after`, again at most hourly, and once when it recovers.
fn store_alarm(
    task: &Arc<WatchdogTask>,
    config: &Arc<Config>,
    sender: &Arc<Sender>,
    failure: Option<&String>,
    now: DateTime<Utc>,
) {
    // Each replica pages on its own (see the module doc): say which one.
    let from = from(task.replica.as_deref());
    let step =
        task.watchdog
            .lock()
            .store
            .step(failure.is_some(), config.watchdog.store_alarm_after, now);
    let page = match (step, failure) {
        (AlarmStep::Began, Some(e)) => {
            tracing::error!(error = %e, "storage check failed: hushwatch cannot write its state");
            None
        }
        (AlarmStep::Fire { since }, Some(e)) => {
            tracing::error!(error = %e, since = %since, "STORAGE BROKEN: hushwatch cannot write its state; the outbox cannot be trusted; paging server.emergency_notify directly");
            let summary = format!(
                "hushwatch{from} cannot write its state since {}: {e}; pages in its outbox may not go out",
                secs(since)
            );
            Some((since, summary, true))
        }
        (AlarmStep::Resolve { since }, _) => {
            tracing::info!(since = %since, "storage recovered: hushwatch can write its state again");
            let summary = format!(
                "hushwatch{from} storage recovered (it failed from {})",
                secs(since)
            );
            Some((since, summary, false))
        }
        (AlarmStep::Ended { since }, _) => {
            tracing::info!(since = %since, "storage recovered: hushwatch can write its state again");
            None
        }
        _ => None,
    };
    send_emergency(task, config, sender, "hushwatch-store", page, now);
}

/// Stored pages named at most in a reason or page (the count is exact).
const UNREADABLE_NAMED: usize = 3;

/// "outbox row 12: unknown alert_kind \"x\"; …, and 4 more".
fn name_unreadable(rows: &[crate::store::Unreadable]) -> String {
    let mut named = rows
        .iter()
        .take(UNREADABLE_NAMED)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if rows.len() > UNREADABLE_NAMED {
        named.push_str(&format!(", and {} more", rows.len() - UNREADABLE_NAMED));
    }
    named
}

/// Pages `emergency_notify` directly once stored pages have been
/// unreadable for `store_alarm_after` (a rollout's newer replica sends
/// them well within that), again at most hourly, and once when none is
/// left. Directly, not through the outbox: the outbox is what cannot be
/// read.
fn unreadable_alarm(
    task: &Arc<WatchdogTask>,
    config: &Arc<Config>,
    sender: &Arc<Sender>,
    rows: &[crate::store::Unreadable],
    now: DateTime<Utc>,
) {
    let from = from(task.replica.as_deref());
    let step = task.watchdog.lock().unreadable.step(
        !rows.is_empty(),
        config.watchdog.store_alarm_after,
        now,
    );
    let page = match step {
        AlarmStep::Fire { since } => {
            tracing::error!(rows = %name_unreadable(rows), since = %since, "stored pages cannot be read by this binary; paging server.emergency_notify directly");
            let summary = format!(
                "hushwatch{from} cannot read {} stored page(s) since {}: {}. Each is held back; every other page goes out. If a replica runs an older version than the one that queued them, finish the rollout; otherwise the rows were altered at rest (runbook: hushwatch_storage)",
                rows.len(),
                secs(since),
                name_unreadable(rows)
            );
            Some((since, summary, true))
        }
        AlarmStep::Resolve { since } => {
            tracing::info!(since = %since, "every stored page reads again");
            let summary = format!(
                "hushwatch{from} reads every stored page again (some could not be read from {})",
                secs(since)
            );
            Some((since, summary, false))
        }
        _ => None,
    };
    send_emergency(task, config, sender, "hushwatch-outbox", page, now);
}

/// A time in an emergency page's summary.
fn secs(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// " (replica X)" when this replica shares the store with others.
fn from(replica: Option<&str>) -> String {
    replica.map_or_else(String::new, |r| format!(" (replica {r})"))
}

/// Sends the emergency page an alarm decided, if any (when its condition
/// began, the summary, firing or resolved; `family` names the condition),
/// to each `emergency_notify` notifier, each on its own task: a slow
/// notifier must not delay the heartbeat.
fn send_emergency(
    task: &Arc<WatchdogTask>,
    config: &Arc<Config>,
    sender: &Arc<Sender>,
    family: &str,
    decided: Option<(DateTime<Utc>, String, bool)>,
    now: DateTime<Utc>,
) {
    let Some((since, summary, firing)) = decided else {
        return;
    };
    let page = emergency_page(config, family, since, now, summary, firing);
    task.metrics.watchdog.emergency_pages.inc();
    for name in &config.watchdog.emergency_notify {
        let Some(notifier) = config.notifiers.get(name).cloned() else {
            continue;
        };
        let (sender, page, name) = (Arc::clone(sender), page.clone(), name.clone());
        tokio::spawn(async move {
            match sender.send(&notifier, &page, now).await {
                Outcome::Delivered => {
                    tracing::info!(notifier = %name, page = %page.key, "emergency page delivered")
                }
                other => {
                    tracing::error!(notifier = %name, page = %page.key, outcome = ?other, "emergency page not delivered")
                }
            }
        });
    }
}

/// A direct page about the store (`family`: what about it), one alert per
/// episode from `since`: firing while it holds, resolved once.
fn emergency_page(
    config: &Config,
    family: &str,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
    summary: String,
    firing: bool,
) -> Page {
    let id = format!("{family}-{}", since.timestamp_millis());
    let (calendar, timezone, business_hours) = notify::calendar_facts(config, None);
    Page {
        key: format!("{id}-{}", now.timestamp_millis()),
        alert_id: id,
        alert_kind: notify::kind::AlertKind::Storage,
        stream: "hushwatch".to_string(),
        firing,
        kind: PageKind::Page,
        at: now,
        started_at: since,
        resolved_at: (!firing).then_some(now),
        silent_since: None,
        resumed_at: None,
        business_silence: None,
        summary,
        severity: notify::SEVERITY.to_string(),
        source: None,
        endpoint_id: None,
        calendar,
        timezone,
        business_hours,
        threshold: TimeDelta::zero(),
        max_silence: None,
        test: false,
        ack_url: None,
        runbook_base: config.server.runbook_base_url.clone(),
        config_path: config.path_for_commands(),
        relay_delivered: false,
    }
}

#[cfg(test)]
mod alarm_tests {
    use super::{Alarm, AlarmStep};
    use chrono::{DateTime, TimeDelta, Utc};

    fn t(mins: i64) -> DateTime<Utc> {
        DateTime::UNIX_EPOCH + TimeDelta::minutes(mins)
    }

    /// Paged once the condition has held for `after`, again at most
    /// hourly, resolved once; one that ends before `after` pages nothing.
    #[test]
    fn an_alarm_fires_after_its_delay_repeats_hourly_and_resolves_once() {
        let after = TimeDelta::minutes(1);
        let mut a = Alarm::default();
        assert_eq!(a.step(true, after, t(0)), AlarmStep::Began);
        assert_eq!(a.step(true, after, t(0)), AlarmStep::Quiet);
        assert_eq!(a.step(true, after, t(1)), AlarmStep::Fire { since: t(0) });
        assert_eq!(a.step(true, after, t(30)), AlarmStep::Quiet);
        assert_eq!(a.step(true, after, t(61)), AlarmStep::Fire { since: t(0) });
        assert_eq!(
            a.step(false, after, t(62)),
            AlarmStep::Resolve { since: t(0) }
        );
        assert_eq!(a.step(false, after, t(63)), AlarmStep::Quiet);
        assert_eq!(a.step(true, after, t(70)), AlarmStep::Began);
        assert_eq!(
            a.step(false, after, t(70)),
            AlarmStep::Ended { since: t(70) }
        );
    }
}
