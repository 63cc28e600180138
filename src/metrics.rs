//! Prometheus metrics on a registry of our own. Names are a public
//! interface (dashboards and alert rules depend on them): do not rename.
//!
//! Every known label set is created up front so dashboards show zeros
//! rather than gaps, and labels come from config, never from
//! unauthenticated request input, so a caller cannot grow the series count.
//! Two label sets come from authenticated deliveries and are capped where
//! they are stored: the Svix `endpoint_id` (five families; 100 endpoints per
//! source plus one shared `other`, `domain::svix::MAX_ENDPOINTS_PER_SOURCE`)
//! and the provider subscription id (32 per stream,
//! `domain::subscription::MAX_PER_STREAM`).
//!
//! Per-stream families are not in the registry: they are rendered at scrape
//! time from the stream mirror (a [`Page`]), because the registry
//! costs about a kilobyte per label set and thousands of streams would make
//! it the largest thing in the process (and `gather` copies every label set
//! again on each scrape). A new series that every stream has belongs in
//! [`STREAM_FAMILIES`] (one row, plus a [`StreamSample`] field or a lookup
//! in [`Metrics`]); the registry is for series bounded by configuration or
//! by use (notifiers, calendars, streams that have a `[reconcile]` table).

use chrono::{DateTime, TimeDelta, Utc};
use prometheus::{
    Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// Outcomes of a delivery attempt, as counted in
/// `hushwatch_notifications_total`.
pub const NOTIFY_OUTCOMES: [&str; 3] = ["delivered", "retry", "failed"];

/// Outcomes of an ingest request, as counted in `hushwatch_events_total`.
pub const OUTCOMES: [&str; 8] = [
    "accepted",
    "duplicate",
    "bad_signature",
    "stale",
    "too_large",
    "unauthorized",
    "error",
    "timeout",
];

pub struct Metrics {
    registry: Registry,
    /// Provider subscriptions that must be renewed (Entra, Google), by stream and
    /// subscription id. Ids come from authenticated deliveries and are capped per stream
    /// (`domain::subscription::MAX_PER_STREAM`), so the label sets stay bounded.
    pub subscription_expires: GaugeVec,
    /// `hushwatch_subscriptions_evaluated_timestamp_seconds`: the clock reading of the
    /// subscription watcher's last completed pass ("evaluated up to T"), so a test or an
    /// operator can tell "no warning yet" from "not looked yet".
    pub subscriptions_evaluated: Gauge,
    /// `hushwatch_evaluation_attempted_timestamp_seconds`: the clock reading of the
    /// silence timer's last finished pass, recorded or refused by the store ("evaluated
    /// up to T", also during a storage outage, when `/v1/status` may not answer).
    pub evaluation_attempted: Gauge,
    pub in_business_hours: IntGaugeVec,
    /// `hushwatch_events_total` by stream, one slot per [`OUTCOMES`] entry;
    /// only streams declared here are counted, so a request for a stream
    /// that does not exist cannot add an entry.
    events: Mutex<HashMap<String, [u64; OUTCOMES.len()]>>,
    pub templated_streams_refused: IntCounter,
    pub reload_successful: IntGauge,
    pub reload_timestamp: Gauge,
    pub storage_errors: IntCounter,
    /// `hushwatch_store_read_timeouts_total`: read routes (`/`,
    /// `/v1/status`, the store-backed part of `/metrics`) that stopped
    /// waiting for a stalled store. Separate from `storage_errors`, which
    /// counts failed writes (what `HushwatchStoreDown` alerts on).
    pub store_read_timeouts: IntCounter,
    /// `hushwatch_metrics_stale`: 1 when the page's store-backed series
    /// (Svix endpoint gauges, `hushwatch_stream_silenced`,
    /// `hushwatch_silence_acknowledged`) could not be refreshed from the
    /// store within the scrape budget and show their last known values.
    pub metrics_stale: IntGauge,
    /// `hushwatch_store_queue_depth`: writes waiting for the database
    /// behind the one in progress, read from memory at each scrape (a
    /// saturation signal that needs no store round trip).
    pub store_queue_depth: IntGauge,
    /// The scrape-time store refresh in flight, if any (`Some` once it is
    /// done, with whether it read the store): at most one at a time, however
    /// many scrapes wait on a stall.
    pub refresh_in_flight: Mutex<Option<tokio::sync::watch::Receiver<Option<bool>>>>,
    pub outbox_pending: IntGaugeVec,
    /// `hushwatch_outbox_unreadable`: stored pages the outbox worker's last
    /// round could not read (`store::Unreadable`), each held back alone.
    pub outbox_unreadable: IntGauge,
    pub notifications: IntCounterVec,
    pub notification_latency: HistogramVec,
    pub svix_disabled: IntGaugeVec,
    pub svix_disabled_manually: IntGaugeVec,
    pub svix_failing: IntGaugeVec,
    pub svix_exhausted: IntCounterVec,
    pub svix_lost: IntGaugeVec,
    pub svix_events: IntCounterVec,
    /// Issue #19: `hushwatch_heartbeat_total{outcome}`, `hushwatch_degraded`,
    /// `hushwatch_notifier_consecutive_failures{notifier}`.
    pub watchdog: WatchdogMetrics,
    /// Relay mode (issue #29): `hushwatch_forward_*`, by configured stream.
    pub forward: ForwardMetrics,
    /// The cross-check's series (issue #45), by configured stream.
    pub crosscheck: CrosscheckMetrics,
    /// The streams `hushwatch_stream_silenced` and
    /// `hushwatch_silence_acknowledged` show as 1 (every other stream
    /// shows 0); set at scrape time by `service::silences`.
    stream_flags: Mutex<StreamFlags>,
    /// `hushwatch_reconciliation_last_timestamp_seconds{stream}`: the last
    /// stored reconciliation report (configured streams only).
    pub reconciliation_last: GaugeVec,
    /// `hushwatch_reconciliation_drift_total{stream,kind}`: drift items of
    /// stored reports; `kind` is one of the three the route accepts.
    pub reconciliation_drift: IntCounterVec,
    /// `hushwatch_stale_grants_total{stream}`: grants recorded after a
    /// revocation of the same subject with an older event time. Kept per
    /// stream that has had one and rendered with the page (0 for the
    /// others), not in the registry: a registry series for each of 10,000
    /// streams cost about 6 MB resident.
    stale_grants: Mutex<HashMap<String, u64>>,
    /// `hushwatch_reconciliation_deadline_timestamp_seconds{stream}`: when
    /// the next report is due (last report, or start of watch, plus
    /// `every + grace`); the shipped IdentityReconciliationMissing rule
    /// compares it with `time()`.
    pub reconciliation_deadline: GaugeVec,
}

/// Operational event types counted by name; anything else is `other`, so
/// senders cannot create series at will.
pub const SVIX_TYPES: [&str; 9] = [
    "endpoint.created",
    "endpoint.updated",
    "endpoint.deleted",
    "endpoint.enabled",
    "endpoint.disabled",
    "message.attempt.failing",
    "message.attempt.exhausted",
    "message.attempt.recovered",
    "background_task.finished",
];

fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels)
        .unwrap_or_else(|e| unreachable_metric(name, e));
    register(registry, name, Box::new(c.clone()));
    c
}

fn gauge_vec2(registry: &Registry, name: &str, help: &str) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), &["source", "endpoint_id"])
        .unwrap_or_else(|e| unreachable_metric(name, e));
    register(registry, name, Box::new(g.clone()));
    g
}

fn int_gauge_vec(registry: &Registry, name: &str, help: &str, label: &str) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), &[label])
        .unwrap_or_else(|e| unreachable_metric(name, e));
    register(registry, name, Box::new(g.clone()));
    g
}

fn register(registry: &Registry, name: &str, collector: Box<dyn prometheus::core::Collector>) {
    if let Err(e) = registry.register(collector) {
        unreachable_metric(name, e)
    }
}

/// Metric definitions are constants; a failure here is a programming error
/// caught by the first test that builds `Metrics`.
fn unreachable_metric(name: &str, e: prometheus::Error) -> ! {
    panic!("metric {name} is misdefined: {e}")
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let r = Registry::new();
        let reload_successful = IntGauge::new(
            "hushwatch_config_last_reload_successful",
            "1 if the last config (re)load succeeded.",
        )
        .unwrap_or_else(|e| unreachable_metric("reload_successful", e));
        register(&r, "reload_successful", Box::new(reload_successful.clone()));
        let reload_timestamp = Gauge::new(
            "hushwatch_config_last_reload_timestamp_seconds",
            "When the config was last (re)loaded successfully.",
        )
        .unwrap_or_else(|e| unreachable_metric("reload_timestamp", e));
        register(&r, "reload_timestamp", Box::new(reload_timestamp.clone()));
        let storage_errors = IntCounter::new(
            "hushwatch_storage_errors_total",
            "Writes to the state database that failed (ingest answered 503).",
        )
        .unwrap_or_else(|e| unreachable_metric("storage_errors", e));
        register(&r, "storage_errors", Box::new(storage_errors.clone()));
        let store_read_timeouts = IntCounter::new(
            "hushwatch_store_read_timeouts_total",
            "Read routes (/, /v1/status, the store-backed part of /metrics) that gave up on a stalled store.",
        )
        .unwrap_or_else(|e| unreachable_metric("store_read_timeouts", e));
        register(
            &r,
            "store_read_timeouts",
            Box::new(store_read_timeouts.clone()),
        );
        let metrics_stale = IntGauge::new(
            "hushwatch_metrics_stale",
            "1 when this page's store-backed series (Svix endpoints, stream silenced/acknowledged) show their last known values because the store did not answer in time.",
        )
        .unwrap_or_else(|e| unreachable_metric("metrics_stale", e));
        register(&r, "metrics_stale", Box::new(metrics_stale.clone()));
        let store_queue_depth = IntGauge::new(
            "hushwatch_store_queue_depth",
            "Writes waiting for the database behind the one in progress (SQLite: the writer's queue; PostgreSQL: the ingest queue plus callers waiting for a pooled connection).",
        )
        .unwrap_or_else(|e| unreachable_metric("store_queue_depth", e));
        register(&r, "store_queue_depth", Box::new(store_queue_depth.clone()));
        let outbox_unreadable = IntGauge::new(
            "hushwatch_outbox_unreadable",
            "Stored pages (outbox rows, held pages) this binary cannot read: each is held back alone while every other page goes out.",
        )
        .unwrap_or_else(|e| unreachable_metric("outbox_unreadable", e));
        register(&r, "outbox_unreadable", Box::new(outbox_unreadable.clone()));
        let templated_streams_refused = IntCounter::new(
            "hushwatch_templated_streams_refused_total",
            "Templated streams not created because max_streams exist (answered 429).",
        )
        .unwrap_or_else(|e| unreachable_metric("templated_streams_refused", e));
        register(
            &r,
            "templated_streams_refused",
            Box::new(templated_streams_refused.clone()),
        );
        let notifications = IntCounterVec::new(
            Opts::new(
                "hushwatch_notifications_total",
                "Delivery attempts by notifier, outcome (delivered, retry, failed) and, for those not delivered, reason (timeout, connect, status_4xx, status_5xx, refused, ambiguous).",
            ),
            &["notifier", "outcome", "reason"],
        )
        .unwrap_or_else(|e| unreachable_metric("hushwatch_notifications_total", e));
        register(&r, "notifications", Box::new(notifications.clone()));
        let notification_latency = HistogramVec::new(
            HistogramOpts::new(
                "hushwatch_notification_latency_seconds",
                "From the alert transition to the page being delivered.",
            )
            .buckets(vec![
                0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0,
            ]),
            &["notifier"],
        )
        .unwrap_or_else(|e| unreachable_metric("hushwatch_notification_latency_seconds", e));
        register(
            &r,
            "notification_latency",
            Box::new(notification_latency.clone()),
        );
        Metrics {
            reconciliation_last: {
                let name = "hushwatch_reconciliation_last_timestamp_seconds";
                let g = GaugeVec::new(
                    Opts::new(name, "When the last reconciliation report was stored."),
                    &["stream"],
                )
                .unwrap_or_else(|e| unreachable_metric(name, e));
                register(&r, name, Box::new(g.clone()));
                g
            },
            reconciliation_drift: counter_vec(
                &r,
                "hushwatch_reconciliation_drift_total",
                "Drift items reported by reconciliation reports.",
                &["stream", "kind"],
            ),
            reconciliation_deadline: {
                let name = "hushwatch_reconciliation_deadline_timestamp_seconds";
                let g = GaugeVec::new(
                    Opts::new(
                        name,
                        "When the next reconciliation report is due at the latest.",
                    ),
                    &["stream"],
                )
                .unwrap_or_else(|e| unreachable_metric(name, e));
                register(&r, name, Box::new(g.clone()));
                g
            },
            stale_grants: Mutex::new(HashMap::new()),
            subscription_expires: {
                let name = "hushwatch_subscription_expires_timestamp_seconds";
                let g = GaugeVec::new(
                    Opts::new(
                        name,
                        "When a provider subscription or channel expires unless renewed.",
                    ),
                    &["stream", "subscription"],
                )
                .unwrap_or_else(|e| unreachable_metric(name, e));
                register(&r, name, Box::new(g.clone()));
                g
            },
            subscriptions_evaluated: {
                let name = "hushwatch_subscriptions_evaluated_timestamp_seconds";
                let g = Gauge::with_opts(Opts::new(
                    name,
                    "Clock reading of the subscription watcher's last completed evaluation.",
                ))
                .unwrap_or_else(|e| unreachable_metric(name, e));
                register(&r, name, Box::new(g.clone()));
                g
            },
            evaluation_attempted: {
                let name = "hushwatch_evaluation_attempted_timestamp_seconds";
                let g = Gauge::with_opts(Opts::new(
                    name,
                    "Clock reading of the silence timer's last finished pass, whether or not the store recorded it.",
                ))
                .unwrap_or_else(|e| unreachable_metric(name, e));
                register(&r, name, Box::new(g.clone()));
                g
            },
            in_business_hours: int_gauge_vec(
                &r,
                "hushwatch_in_business_hours",
                "1 while the calendar is inside business hours.",
                "calendar",
            ),
            outbox_pending: int_gauge_vec(
                &r,
                "hushwatch_outbox_pending",
                "Pages waiting to be delivered.",
                "notifier",
            ),
            notifications,
            notification_latency,
            svix_disabled: gauge_vec2(
                &r,
                "hushwatch_svix_endpoint_disabled",
                "1 while Svix reports the endpoint disabled.",
            ),
            svix_disabled_manually: gauge_vec2(
                &r,
                "hushwatch_svix_endpoint_disabled_manually",
                "1 while the endpoint is disabled by hand (a warning, not a page).",
            ),
            svix_failing: gauge_vec2(
                &r,
                "hushwatch_svix_endpoint_failing",
                "1 while a message to the endpoint is failing.",
            ),
            svix_exhausted: counter_vec(
                &r,
                "hushwatch_svix_attempts_exhausted_total",
                "Messages that used up every attempt.",
                &["source", "endpoint_id"],
            ),
            svix_lost: gauge_vec2(
                &r,
                "hushwatch_svix_lost_messages",
                "Exhausted messages not yet acknowledged.",
            ),
            svix_events: counter_vec(
                &r,
                "hushwatch_svix_events_total",
                "Operational webhooks by source, type and outcome.",
                &["source", "type", "outcome"],
            ),
            stream_flags: Mutex::new(StreamFlags::default()),
            watchdog: WatchdogMetrics::new(&r),
            forward: ForwardMetrics::new(&r),
            crosscheck: CrosscheckMetrics::new(&r),
            events: Mutex::new(HashMap::new()),
            templated_streams_refused,
            reload_successful,
            reload_timestamp,
            storage_errors,
            store_read_timeouts,
            metrics_stale,
            store_queue_depth,
            outbox_unreadable,
            refresh_in_flight: Mutex::new(None),
            registry: r,
        }
    }

    /// Creates every label set for the configured calendars and notifiers.
    /// (Per-stream series follow the stream mirror; see [`Page`].)
    pub fn declare(&self, calendars: &[&str], notifiers: &[&str]) {
        self.in_business_hours.reset();
        self.outbox_pending.reset();
        for calendar in calendars {
            self.in_business_hours.with_label_values(&[*calendar]);
        }
        for notifier in notifiers {
            self.outbox_pending.with_label_values(&[*notifier]);
            // Every series an attempt can count, so `increase()` sees the
            // first of each (a series born at 1 reads as no increase):
            // delivered, and retry/failed by each reason. Bounded:
            // 1 + 2 × 6 per notifier.
            for outcome in NOTIFY_OUTCOMES {
                if outcome == "delivered" {
                    self.notifications
                        .with_label_values(&[*notifier, outcome, ""]);
                    continue;
                }
                for cause in crate::domain::notify_cause::Cause::ALL {
                    self.notifications
                        .with_label_values(&[*notifier, outcome, cause.label()]);
                }
            }
            self.notification_latency.with_label_values(&[*notifier]);
        }
    }

    /// Pre-creates the per-notifier failure gauges (and zeroes them).
    pub fn declare_watchdog(&self, notifiers: &[&str]) {
        self.watchdog.consecutive_failures.reset();
        for n in notifiers {
            self.watchdog.consecutive_failures.with_label_values(&[*n]);
        }
    }

    /// Pre-creates the operational-webhook counters of each source.
    pub fn declare_svix(&self, sources: &[&str]) {
        for source in sources {
            for t in SVIX_TYPES.iter().chain(&["other"]) {
                for outcome in ["accepted", "duplicate"] {
                    self.svix_events.with_label_values(&[*source, *t, outcome]);
                }
            }
            for outcome in ["bad_signature", "stale", "too_large", "error", "timeout"] {
                self.svix_events
                    .with_label_values(&[*source, "unverified", outcome]);
            }
        }
    }

    /// A request refused before its signature verified: its type is unknown.
    pub fn count_svix_rejected(&self, source: &str, outcome: &str) {
        self.svix_events
            .with_label_values(&[source, "unverified", outcome])
            .inc();
    }

    pub fn count_svix(&self, source: &str, event_type: &str, outcome: &str) {
        let t = SVIX_TYPES
            .iter()
            .find(|t| **t == event_type.strip_prefix("ingest.").unwrap_or(event_type))
            .copied()
            .unwrap_or("other");
        self.svix_events
            .with_label_values(&[source, t, outcome])
            .inc();
    }

    /// Counts one ingest request of a declared stream; `outcome` is one of
    /// [`OUTCOMES`]. Requests for undeclared names are not counted.
    pub fn count_event(&self, stream: &str, outcome: &str) {
        let Some(slot) = OUTCOMES.iter().position(|o| *o == outcome) else {
            debug_assert!(false, "unknown outcome {outcome}");
            return;
        };
        if let Some(counts) = self.lock_events().get_mut(stream) {
            counts[slot] += 1;
        }
    }

    fn lock_events(&self) -> std::sync::MutexGuard<'_, HashMap<String, [u64; OUTCOMES.len()]>> {
        self.events.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts one stale grant on `stream` (`hushwatch_stale_grants_total`).
    pub fn count_stale_grant(&self, stream: &str) {
        *self
            .lock_stale_grants()
            .entry(stream.to_owned())
            .or_default() += 1;
    }

    fn lock_stale_grants(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.stale_grants.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes `streams` the counted set: new ones start at zero, counts of
    /// those kept are kept.
    pub fn declare_streams(&self, streams: &[&str]) {
        let mut events = self.lock_events();
        let keep: std::collections::HashSet<&str> = streams.iter().copied().collect();
        events.retain(|name, _| keep.contains(name.as_str()));
        for stream in streams {
            if !events.contains_key(*stream) {
                events.insert(stream.to_string(), [0; OUTCOMES.len()]);
            }
        }
    }

    pub fn declare_stream(&self, stream: &str) {
        self.lock_events()
            .entry(stream.to_string())
            .or_insert([0; OUTCOMES.len()]);
    }

    pub fn forget_stream(&self, stream: &str) {
        self.lock_events().remove(stream);
    }

    /// Replaces the per-stream silenced/acknowledged flags.
    pub fn set_stream_flags(&self, flags: StreamFlags) {
        *self.stream_flags.lock().unwrap_or_else(|p| p.into_inner()) = flags;
    }

    /// The text exposition format.
    /// `hushwatch_leader` and `hushwatch_replicas`, registered here and
    /// owned by `service::replicas` (the only writer). Call once per registry.
    pub fn replica_gauges(&self) -> (IntGauge, IntGauge) {
        let leader = IntGauge::new(
            "hushwatch_leader",
            "1 while this replica holds the housekeeping leader lease, else 0.",
        )
        .unwrap_or_else(|e| unreachable_metric("leader", e));
        register(&self.registry, "leader", Box::new(leader.clone()));
        let replicas = IntGauge::new(
            "hushwatch_replicas",
            "Replicas seen alive on the shared database (1 on SQLite).",
        )
        .unwrap_or_else(|e| unreachable_metric("replicas", e));
        register(&self.registry, "replicas", Box::new(replicas.clone()));
        (leader, replicas)
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        self.encode_into(&mut out);
        out
    }

    /// Appends the registry's families in the text format.
    fn encode_into(&self, out: &mut String) {
        // Encoding into a String cannot fail for well-formed metrics.
        let _ = TextEncoder::new().encode_utf8(&self.registry.gather(), out);
    }

    /// The whole `/metrics` page: the registry's families, then the
    /// per-stream ones, which are rendered a chunk at a time as the client
    /// reads ([`Page::next_chunk`]). At 10,000 streams the page is about
    /// 9 MB; built as one string it was the largest allocation of the
    /// process, and glibc keeps such a buffer per thread that built one.
    pub fn page(&self, samples: Vec<StreamSample>, usual: &[(String, [Option<f64>; 4])]) -> Page {
        let mut head = String::new();
        self.encode_into(&mut head);
        render_usual_gaps(&mut head, usual);
        let rows = {
            let flags = self.stream_flags.lock().unwrap_or_else(|p| p.into_inner());
            let events = self.lock_events();
            let stale = self.lock_stale_grants();
            samples
                .into_iter()
                .map(|sample| PageRow {
                    label: match escape(&sample.name) {
                        Cow::Borrowed(_) => None,
                        Cow::Owned(escaped) => Some(escaped),
                    },
                    silenced: flags.silenced.contains(&sample.name),
                    acknowledged: flags.acknowledged.contains(&sample.name),
                    events: events.get(&sample.name).copied().unwrap_or_default(),
                    stale_grants: stale.get(&sample.name).copied().unwrap_or_default(),
                    sample,
                })
                .collect()
        };
        Page::new(head, rows)
    }
}

/// The streams flagged in the per-stream silence families; a stream in
/// neither set renders 0 in both.
#[derive(Default)]
pub struct StreamFlags {
    pub silenced: HashSet<String>,
    pub acknowledged: HashSet<String>,
}

/// One stream's values at scrape time.
pub struct StreamSample {
    pub name: String,
    pub firing: bool,
    pub last_event: Option<DateTime<Utc>>,
    pub business_silence: TimeDelta,
    pub threshold: TimeDelta,
    pub fires_at: Option<DateTime<Utc>>,
    pub lag_ms: i64,
}

/// One per-stream gauge family: rendered with one series per stream.
pub struct StreamFamily {
    pub name: &'static str,
    help: &'static str,
    /// The exposition type: `gauge` or `counter`.
    kind: &'static str,
    value: fn(&PageRow) -> Value,
}

/// A per-stream value. Every one is a whole number of milliseconds or a
/// count, so it is written exactly, without going through `f64`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// Rendered in seconds: `1.5`, `3600`, `-0.25`.
    Millis(i64),
    Count(u64),
}

fn secs(t: Option<DateTime<Utc>>) -> Value {
    Value::Millis(t.map_or(0, |t| t.timestamp_millis()))
}

fn span(d: TimeDelta) -> Value {
    Value::Millis(d.num_milliseconds())
}

fn flag(on: bool) -> Value {
    Value::Count(u64::from(on))
}

/// The per-stream families, in page order (`hushwatch_events_total`, a
/// counter with an outcome label, follows them).
pub const STREAM_FAMILIES: [StreamFamily; 9] = [
    StreamFamily {
        name: "hushwatch_silence_alert",
        help: "1 while the stream's silence alert fires, else 0.",
        kind: "gauge",
        value: |r| flag(r.sample.firing),
    },
    StreamFamily {
        name: "hushwatch_last_event_timestamp_seconds",
        help: "When the stream last received an event (0: never).",
        kind: "gauge",
        value: |r| secs(r.sample.last_event),
    },
    StreamFamily {
        name: "hushwatch_business_silence_seconds",
        help: "Business time since the last event (or since watching began).",
        kind: "gauge",
        value: |r| span(r.sample.business_silence),
    },
    StreamFamily {
        name: "hushwatch_silence_threshold_seconds",
        help: "Business silence that fires the alert.",
        kind: "gauge",
        value: |r| span(r.sample.threshold),
    },
    StreamFamily {
        name: "hushwatch_silence_fires_at_timestamp_seconds",
        help: "When the alert fires if nothing arrives (0: never).",
        kind: "gauge",
        value: |r| secs(r.sample.fires_at),
    },
    StreamFamily {
        name: "hushwatch_event_lag_seconds",
        help: "Arrival time minus event time of the latest event.",
        kind: "gauge",
        value: |r| Value::Millis(r.sample.lag_ms),
    },
    StreamFamily {
        name: "hushwatch_stream_silenced",
        help: "1 while an operator silence or planned maintenance covers the stream (for any page kind).",
        kind: "gauge",
        value: |r| flag(r.silenced),
    },
    StreamFamily {
        name: "hushwatch_silence_acknowledged",
        help: "1 while the stream's firing episode is acknowledged.",
        kind: "gauge",
        value: |r| flag(r.acknowledged),
    },
    StreamFamily {
        name: "hushwatch_stale_grants_total",
        help: "Grants that arrived after a revocation of the same subject, with an older event time.",
        kind: "counter",
        value: |r| Value::Count(r.stale_grants),
    },
];

/// One stream's line values, taken when the scrape began.
pub struct PageRow {
    sample: StreamSample,
    /// The stream name escaped for a label value, when that differs from
    /// the name (rarely: no copy of every name per scrape).
    label: Option<String>,
    silenced: bool,
    acknowledged: bool,
    events: [u64; OUTCOMES.len()],
    stale_grants: u64,
}

/// Chunks end at the first line end past this many bytes.
const CHUNK_BYTES: usize = 64 * 1024;

/// A `/metrics` page being written: the registry's text, then the
/// per-stream families in the text exposition format
/// (<https://prometheus.io/docs/instrumenting/exposition_formats/>), one
/// series per stream (and per outcome for `hushwatch_events_total`), from
/// values taken when the scrape began. Lines are assembled with `push_str`
/// rather than `write!`: at 10,000 streams there are 160,000 of them, and
/// the formatting machinery was the larger part of a scrape's CPU time.
pub struct Page {
    rows: Vec<PageRow>,
    /// Rendered and not yet taken.
    pending: Option<String>,
    /// Index into [`STREAM_FAMILIES`]; one past it is `hushwatch_events_total`.
    family: usize,
    /// The next row of `family`; its header is written when `row` is 0.
    row: usize,
    /// The page's length, known when it fits in the first chunk.
    exact_len: Option<usize>,
}

impl Page {
    fn new(head: String, rows: Vec<PageRow>) -> Page {
        let mut page = Page {
            rows,
            pending: None,
            family: 0,
            row: 0,
            exact_len: None,
        };
        let mut first = head;
        page.render(&mut first);
        if page.finished() {
            page.exact_len = Some(first.len());
        }
        page.pending = Some(first);
        page
    }

    /// The next part of the page, or `None` once all of it was taken.
    pub fn next_chunk(&mut self) -> Option<String> {
        if let Some(pending) = self.pending.take() {
            return Some(pending);
        }
        if self.finished() {
            return None;
        }
        let mut out = String::with_capacity(CHUNK_BYTES + 1024);
        self.render(&mut out);
        Some(out)
    }

    /// Whether every part of the page has been taken.
    pub fn is_end(&self) -> bool {
        self.pending.is_none() && self.finished()
    }

    /// The page's length in bytes when it is a single chunk (small pages
    /// then go out with a `Content-Length`).
    pub fn exact_len(&self) -> Option<usize> {
        self.exact_len
    }

    fn finished(&self) -> bool {
        self.family > STREAM_FAMILIES.len()
    }

    /// Appends lines until `out` holds at least [`CHUNK_BYTES`] or the page
    /// is complete.
    fn render(&mut self, out: &mut String) {
        while !self.finished() && out.len() < CHUNK_BYTES {
            let gauge = STREAM_FAMILIES.get(self.family);
            if self.row == 0 {
                match gauge {
                    Some(f) => header(out, f.name, f.help, f.kind),
                    None => header(out, EVENTS, EVENTS_HELP, "counter"),
                }
            }
            // At least one line per pass, so a header is never repeated.
            loop {
                let Some(r) = self.rows.get(self.row) else {
                    self.family += 1;
                    self.row = 0;
                    break;
                };
                let label = r.label.as_deref().unwrap_or(&r.sample.name);
                match gauge {
                    Some(f) => line(out, f.name, None, label, (f.value)(r)),
                    None => {
                        for (outcome, n) in OUTCOMES.iter().zip(r.events) {
                            line(out, EVENTS, Some(outcome), label, Value::Count(n));
                        }
                    }
                }
                self.row += 1;
                if out.len() >= CHUNK_BYTES {
                    break;
                }
            }
        }
    }
}

const EVENTS: &str = "hushwatch_events_total";
const EVENTS_HELP: &str = "Ingest requests by stream and outcome.";

fn line(out: &mut String, name: &str, outcome: Option<&str>, label: &str, value: Value) {
    out.push_str(name);
    out.push('{');
    if let Some(outcome) = outcome {
        out.push_str("outcome=\"");
        out.push_str(outcome);
        out.push_str("\",");
    }
    out.push_str("stream=\"");
    out.push_str(label);
    out.push_str("\"} ");
    write_value(out, value);
    out.push('\n');
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    for part in [
        "# HELP ",
        name,
        " ",
        help,
        "\n# TYPE ",
        name,
        " ",
        kind,
        "\n",
    ] {
        out.push_str(part);
    }
}

fn write_value(out: &mut String, value: Value) {
    let mut digits = itoa::Buffer::new();
    match value {
        Value::Count(n) => out.push_str(digits.format(n)),
        Value::Millis(ms) => {
            if ms < 0 {
                out.push('-');
            }
            let ms = ms.unsigned_abs();
            out.push_str(digits.format(ms / 1000));
            let frac = ms % 1000;
            if frac != 0 {
                // Three digits, trailing zeros dropped: 1.5, 1.05, 1.005.
                let padded = [
                    b'0' + (frac / 100) as u8,
                    b'0' + (frac / 10 % 10) as u8,
                    b'0' + (frac % 10) as u8,
                ];
                let len = if frac % 100 == 0 {
                    1
                } else if frac % 10 == 0 {
                    2
                } else {
                    3
                };
                out.push('.');
                for &d in &padded[..len] {
                    out.push(char::from(d));
                }
            }
        }
    }
}

/// A label value with `\`, `"` and newlines escaped as the text format
/// requires.
fn escape(value: &str) -> Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Outcomes of one heartbeat ping, as counted in `hushwatch_heartbeat_total`:
/// `ok` (the healthy URL answered 2xx), `fail` (the fail URL answered 2xx:
/// hushwatch is degraded), `error` (the ping itself failed).
pub const HEARTBEAT_OUTCOMES: [&str; 3] = ["ok", "fail", "error"];

/// The watchdog's own series (issue #19).
pub struct WatchdogMetrics {
    pub heartbeat: IntCounterVec,
    pub degraded: IntGauge,
    pub consecutive_failures: IntGaugeVec,
    /// `hushwatch_watchdog_checked_timestamp_seconds`: the clock reading of
    /// the watchdog's last finished check ("checked up to T").
    pub checked: Gauge,
    /// `hushwatch_emergency_pages_total`: emergency pages decided (each
    /// goes to every `emergency_notify` notifier), counted when decided, so
    /// a page still on its way is already counted.
    pub emergency_pages: IntCounter,
}

impl WatchdogMetrics {
    fn new(r: &Registry) -> WatchdogMetrics {
        let heartbeat = counter_vec(
            r,
            "hushwatch_heartbeat_total",
            "Outbound heartbeat pings by outcome (ok, fail = degraded ping delivered, error = ping not delivered).",
            &["outcome"],
        );
        for outcome in HEARTBEAT_OUTCOMES {
            heartbeat.with_label_values(&[outcome]);
        }
        let degraded = IntGauge::new(
            "hushwatch_degraded",
            "1 while hushwatch is degraded (storage failing, a page failed, config reload failed); the reason is in /v1/status.",
        )
        .unwrap_or_else(|e| unreachable_metric("hushwatch_degraded", e));
        register(r, "hushwatch_degraded", Box::new(degraded.clone()));
        let name = "hushwatch_watchdog_checked_timestamp_seconds";
        let checked = Gauge::with_opts(Opts::new(
            name,
            "Clock reading of the watchdog's last finished check (storage, emergency page, heartbeat).",
        ))
        .unwrap_or_else(|e| unreachable_metric(name, e));
        register(r, name, Box::new(checked.clone()));
        let name = "hushwatch_emergency_pages_total";
        let emergency_pages = IntCounter::new(
            name,
            "Emergency pages about the store decided (broken, then recovered), each sent to every emergency_notify notifier.",
        )
        .unwrap_or_else(|e| unreachable_metric(name, e));
        register(r, name, Box::new(emergency_pages.clone()));
        WatchdogMetrics {
            heartbeat,
            degraded,
            checked,
            emergency_pages,
            consecutive_failures: int_gauge_vec(
                r,
                "hushwatch_notifier_consecutive_failures",
                "Delivery attempts to the notifier that failed in a row (retryable or permanent) since its last delivery.",
                "notifier",
            ),
        }
    }
}

/// Outcomes of one forward attempt (`hushwatch_forward_attempts_total`).
pub const FORWARD_OUTCOMES: [&str; 4] = ["delivered", "failed", "dead_letter", "held"];

/// The cross-check's series (issue #45). Labels are configured stream
/// names and the fixed `outcome`/`direction` values only.
pub struct CrosscheckMetrics {
    /// `hushwatch_crosscheck_last_success_timestamp_seconds{stream}`.
    pub last_success: GaugeVec,
    /// `hushwatch_crosscheck_polls_total{stream,outcome}`: `ok`, `refused`,
    /// `rate_limited` or `error` (`crate::crosscheck::PollError::outcome`).
    pub polls: IntCounterVec,
    /// `hushwatch_crosscheck_missed_total{stream,direction}`: findings
    /// paged, by `domain::crosscheck::Direction`.
    pub missed: IntCounterVec,
    /// `hushwatch_crosscheck_healed_total{stream}`: findings healed.
    pub healed: IntCounterVec,
}

impl CrosscheckMetrics {
    /// The `outcome` values of `hushwatch_crosscheck_polls_total`.
    pub const OUTCOMES: [&'static str; 4] = ["ok", "refused", "rate_limited", "error"];

    fn new(r: &Registry) -> CrosscheckMetrics {
        let last_success = {
            let name = "hushwatch_crosscheck_last_success_timestamp_seconds";
            let g = GaugeVec::new(
                Opts::new(
                    name,
                    "When the last cross-check poll of the provider's API succeeded.",
                ),
                &["stream"],
            )
            .unwrap_or_else(|e| unreachable_metric(name, e));
            register(r, name, Box::new(g.clone()));
            g
        };
        CrosscheckMetrics {
            last_success,
            polls: counter_vec(
                r,
                "hushwatch_crosscheck_polls_total",
                "Cross-check polls of the provider's API, by outcome.",
                &["stream", "outcome"],
            ),
            missed: counter_vec(
                r,
                "hushwatch_crosscheck_missed_total",
                "Changes the provider's API showed that no webhook reported, by direction.",
                &["stream", "direction"],
            ),
            healed: counter_vec(
                r,
                "hushwatch_crosscheck_healed_total",
                "Cross-check findings healed (delivered to the app by hushwatch).",
                &["stream"],
            ),
        }
    }

    /// Creates a cross-checked stream's series at zero, so rules and
    /// dashboards see them before the first poll.
    pub fn declare(&self, stream: &str) {
        for outcome in Self::OUTCOMES {
            self.polls.with_label_values(&[stream, outcome]);
        }
        for d in crate::domain::crosscheck::Direction::ALL {
            self.missed.with_label_values(&[stream, d.as_str()]);
        }
        self.healed.with_label_values(&[stream]);
    }

    /// Counts `n` findings of `stream` healed (`service::crosscheck_heal`).
    pub fn count_healed(&self, stream: &str, n: u64) {
        self.healed.with_label_values(&[stream]).inc_by(n);
    }
}

/// Relay mode's series. Labels are configured stream names only (the
/// stream of a stored delivery is always one hushwatch accepted for).
pub struct ForwardMetrics {
    pub pending: IntGaugeVec,
    pub oldest_pending: GaugeVec,
    pub attempts: IntCounterVec,
    pub dead_letters: IntGaugeVec,
    /// Events hushwatch itself cannot send, out of the delivery queue.
    pub held: IntGaugeVec,
    /// Received → the app's 2xx.
    pub latency: prometheus::Histogram,
}

impl ForwardMetrics {
    fn new(r: &Registry) -> ForwardMetrics {
        let oldest_pending = {
            let name = "hushwatch_forward_oldest_pending_seconds";
            let g = GaugeVec::new(
                Opts::new(
                    name,
                    "Age of the oldest event not yet delivered to the app (0 when none).",
                ),
                &["stream"],
            )
            .unwrap_or_else(|e| unreachable_metric(name, e));
            register(r, name, Box::new(g.clone()));
            g
        };
        let latency = {
            let name = "hushwatch_forward_latency_seconds";
            let h = prometheus::Histogram::with_opts(
                HistogramOpts::new(name, "From receiving an event to the app's 2xx for it.")
                    .buckets(vec![
                        0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 10.0, 60.0, 600.0, 3600.0,
                        21600.0, 86400.0, 604800.0,
                    ]),
            )
            .unwrap_or_else(|e| unreachable_metric(name, e));
            register(r, name, Box::new(h.clone()));
            h
        };
        ForwardMetrics {
            pending: int_gauge_vec(
                r,
                "hushwatch_forward_pending",
                "Events received but not yet delivered to the app (dead letters excluded).",
                "stream",
            ),
            oldest_pending,
            attempts: counter_vec(
                r,
                "hushwatch_forward_attempts_total",
                "Forward attempts to the app by outcome (delivered, failed, dead_letter).",
                &["stream", "outcome"],
            ),
            dead_letters: int_gauge_vec(
                r,
                "hushwatch_forward_dead_letters",
                "Events given up after give_up_after and kept for replay.",
                "stream",
            ),
            held: int_gauge_vec(
                r,
                "hushwatch_forward_held",
                "Events held out of the delivery queue: hushwatch itself cannot send them (seal key gone, altered at rest, no [forward]).",
                "stream",
            ),
            latency,
        }
    }

    /// Every series of a forwarding stream at zero, so rules see it from
    /// the start.
    pub fn declare(&self, stream: &str) {
        self.pending.with_label_values(&[stream]);
        self.oldest_pending.with_label_values(&[stream]);
        self.dead_letters.with_label_values(&[stream]);
        self.held.with_label_values(&[stream]);
        for outcome in FORWARD_OUTCOMES {
            self.attempts.with_label_values(&[stream, outcome]);
        }
    }
}

/// Appends `hushwatch_usual_gap_seconds{stream,quantile}`: the learned
/// gaps between arrivals (business time) of streams with `[adaptive]`
/// only, one series per exported quantile that is known, so streams
/// without the rule add no series.
pub fn render_usual_gaps(out: &mut String, streams: &[(String, [Option<f64>; 4])]) {
    use std::fmt::Write;
    let name = "hushwatch_usual_gap_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Learned gap between arrivals in business time, by quantile (streams with [adaptive]).\n# TYPE {name} gauge"
    );
    for (stream, points) in streams {
        for ((label, _), value) in crate::domain::adaptive::EXPORTED_QUANTILES
            .iter()
            .zip(points)
        {
            if let Some(v) = value {
                let _ = writeln!(
                    out,
                    "{name}{{stream=\"{}\",quantile=\"{label}\"}} {v}",
                    escape(stream)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_series_show_zeros() {
        let m = Metrics::new();
        m.declare(&["tokyo"], &["oncall"]);
        let text = m.encode();
        for line in [
            "hushwatch_in_business_hours{calendar=\"tokyo\"} 0",
            "hushwatch_outbox_pending{notifier=\"oncall\"} 0",
            "hushwatch_notifications_total{notifier=\"oncall\",outcome=\"failed\",reason=\"status_5xx\"} 0",
            "hushwatch_notifications_total{notifier=\"oncall\",outcome=\"delivered\",reason=\"\"} 0",
            "hushwatch_notification_latency_seconds_count{notifier=\"oncall\"} 0",
            "hushwatch_storage_errors_total 0",
        ] {
            assert!(text.contains(line), "missing {line}\n{text}");
        }
        m.declare(&[], &[]);
        assert!(!m.encode().contains("calendar=\"tokyo\""));
    }

    /// Every chunk of the page, joined.
    fn whole(mut page: Page) -> String {
        let mut text = String::new();
        while let Some(chunk) = page.next_chunk() {
            text.push_str(&chunk);
        }
        assert!(page.is_end());
        text
    }

    fn sample(name: &str) -> StreamSample {
        StreamSample {
            name: name.into(),
            firing: true,
            last_event: None,
            business_silence: TimeDelta::milliseconds(1500),
            threshold: TimeDelta::hours(1),
            fires_at: None,
            lag_ms: 0,
        }
    }

    #[test]
    fn stream_families_render_every_stream_with_escaped_labels() {
        let m = Metrics::new();
        m.declare_streams(&["identity"]);
        m.count_event("identity", "accepted");
        m.count_event("undeclared", "accepted");
        m.count_event("identity", "accepted");
        let text = whole(m.page(vec![sample("identity"), sample("a\"b\\c")], &[]));
        for line in [
            "hushwatch_silence_alert{stream=\"identity\"} 1",
            "hushwatch_business_silence_seconds{stream=\"identity\"} 1.5",
            "hushwatch_silence_threshold_seconds{stream=\"identity\"} 3600",
            "hushwatch_events_total{outcome=\"accepted\",stream=\"identity\"} 2",
            "hushwatch_events_total{outcome=\"timeout\",stream=\"identity\"} 0",
            "hushwatch_silence_alert{stream=\"a\\\"b\\\\c\"} 1",
        ] {
            assert!(text.contains(line), "missing {line}\n{text}");
        }
        assert!(!m.lock_events().contains_key("undeclared"));
        assert!(!text.contains("undeclared"));
        // One HELP/TYPE per family, even with many streams.
        assert_eq!(
            text.matches("# TYPE hushwatch_silence_alert gauge").count(),
            1
        );
    }

    #[test]
    fn values_are_exact_seconds() {
        for (value, text) in [
            (Value::Millis(1500), "1.5"),
            (Value::Millis(1050), "1.05"),
            (Value::Millis(1005), "1.005"),
            (Value::Millis(3_600_000), "3600"),
            (Value::Millis(0), "0"),
            (Value::Millis(-250), "-0.25"),
            (Value::Millis(1_764_553_200_123), "1764553200.123"),
            (Value::Count(u64::MAX), "18446744073709551615"),
        ] {
            let mut out = String::new();
            write_value(&mut out, value);
            assert_eq!(out, text);
        }
    }

    #[test]
    fn silence_flags_show_one_only_for_flagged_streams() {
        let m = Metrics::new();
        m.set_stream_flags(StreamFlags {
            silenced: ["a".to_string()].into(),
            acknowledged: ["b".to_string()].into(),
        });
        let page = whole(m.page(vec![sample("a"), sample("b")], &[]));
        for line in [
            "hushwatch_stream_silenced{stream=\"a\"} 1",
            "hushwatch_stream_silenced{stream=\"b\"} 0",
            "hushwatch_silence_acknowledged{stream=\"a\"} 0",
            "hushwatch_silence_acknowledged{stream=\"b\"} 1",
            // The registry's families are on the same page.
            "hushwatch_storage_errors_total 0",
        ] {
            assert!(page.contains(line), "missing {line}\n{page}");
        }
    }

    /// A large page goes out in chunks of whole lines (so memory does not
    /// grow with the page), each family's header exactly once; a small one
    /// is a single chunk of known length.
    #[test]
    fn large_pages_come_in_chunks_of_whole_lines() {
        let m = Metrics::new();
        let names: Vec<String> = (0..3000).map(|i| format!("org:{i:05}")).collect();
        m.declare_streams(&names.iter().map(String::as_str).collect::<Vec<_>>());
        m.count_event("org:02999", "stale");
        let mut page = m.page(names.iter().map(|n| sample(n)).collect(), &[]);
        assert_eq!(page.exact_len(), None);
        let mut chunks = Vec::new();
        while let Some(chunk) = page.next_chunk() {
            assert!(chunk.ends_with('\n'), "a chunk ends mid-line");
            assert!(chunk.len() < 2 * CHUNK_BYTES);
            chunks.push(chunk);
        }
        assert!(chunks.len() > 10, "{} chunks", chunks.len());
        let text = chunks.concat();
        for family in STREAM_FAMILIES.iter().map(|f| f.name).chain([EVENTS]) {
            assert_eq!(text.matches(&format!("# TYPE {family} ")).count(), 1);
            let series = text
                .lines()
                .filter(|l| l.starts_with(&format!("{family}{{")))
                .count();
            let per_stream = if family == EVENTS { OUTCOMES.len() } else { 1 };
            assert_eq!(series, names.len() * per_stream, "{family}");
        }
        assert!(text.contains("hushwatch_events_total{outcome=\"stale\",stream=\"org:02999\"} 1\n"));

        let small = m.page(vec![sample("identity")], &[]);
        let len = small.exact_len().expect("one chunk");
        assert_eq!(whole(small).len(), len);
        // Without streams, every family still has its header.
        let empty = whole(m.page(Vec::new(), &[]));
        assert!(empty.contains("# TYPE hushwatch_silence_alert gauge\n"));
        assert!(empty.contains("# TYPE hushwatch_events_total counter\n"));
    }
}
