//! Prometheus metrics on a registry of our own. Names are a public
//! interface (dashboards and alert rules depend on them): do not rename.
//!
//! Every known label set is created up front so dashboards show zeros
//! rather than gaps, and labels only ever come from config, never from
//! request input, so a caller cannot grow the series count.
//!
//! Per-stream families are not in the registry: they are rendered at scrape
//! time from the stream mirror ([`render_streams`]), because the registry
//! costs about a kilobyte per label set and thousands of streams would make
//! it the largest thing in the process.

use chrono::{DateTime, TimeDelta, Utc};
use prometheus::{
    Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::collections::HashMap;
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
    /// (`store::subscriptions::MAX_PER_STREAM`), so the label sets stay bounded.
    pub subscription_expires: GaugeVec,
    pub in_business_hours: IntGaugeVec,
    /// `hushwatch_events_total` by stream, one slot per [`OUTCOMES`] entry;
    /// only streams declared here are counted, so a request for a stream
    /// that does not exist cannot add an entry.
    events: Mutex<HashMap<String, [u64; OUTCOMES.len()]>>,
    pub templated_streams_refused: IntCounter,
    pub reload_successful: IntGauge,
    pub reload_timestamp: Gauge,
    pub storage_errors: IntCounter,
    pub outbox_pending: IntGaugeVec,
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
    /// 1 while an operator silence (or planned maintenance) covers the
    /// stream, for any page kind.
    pub stream_silenced: IntGaugeVec,
    /// 1 while the stream's firing episode is acknowledged.
    pub silence_acknowledged: IntGaugeVec,
    /// `hushwatch_reconciliation_last_timestamp_seconds{stream}`: the last
    /// stored reconciliation report (configured streams only).
    pub reconciliation_last: GaugeVec,
    /// `hushwatch_reconciliation_drift_total{stream,kind}`: drift items of
    /// stored reports; `kind` is one of the three the route accepts.
    pub reconciliation_drift: IntCounterVec,
    /// `hushwatch_stale_grants_total{stream}`: grants recorded after a
    /// revocation of the same subject with an older event time.
    pub stale_grants: IntCounterVec,
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
                "Delivery attempts by notifier and outcome (delivered, retry, failed).",
            ),
            &["notifier", "outcome"],
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
                    Opts::new(name, "When the next reconciliation report is due at the latest."),
                    &["stream"],
                )
                .unwrap_or_else(|e| unreachable_metric(name, e));
                register(&r, name, Box::new(g.clone()));
                g
            },
            stale_grants: counter_vec(
                &r,
                "hushwatch_stale_grants_total",
                "Grants that arrived after a revocation of the same subject, with an older event time.",
                &["stream"],
            ),
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
            stream_silenced: int_gauge_vec(
                &r,
                "hushwatch_stream_silenced",
                "1 while an operator silence or planned maintenance covers the stream (for any page kind).",
                "stream",
            ),
            silence_acknowledged: int_gauge_vec(
                &r,
                "hushwatch_silence_acknowledged",
                "1 while the stream's firing episode is acknowledged.",
                "stream",
            ),
            watchdog: WatchdogMetrics::new(&r),
            events: Mutex::new(HashMap::new()),
            templated_streams_refused,
            reload_successful,
            reload_timestamp,
            storage_errors,
            registry: r,
        }
    }

    /// Creates every label set for the configured calendars and notifiers.
    /// (Per-stream series follow the stream mirror; see [`render_streams`].)
    pub fn declare(&self, calendars: &[&str], notifiers: &[&str]) {
        self.in_business_hours.reset();
        self.outbox_pending.reset();
        for calendar in calendars {
            self.in_business_hours.with_label_values(&[*calendar]);
        }
        for notifier in notifiers {
            self.outbox_pending.with_label_values(&[*notifier]);
            for outcome in NOTIFY_OUTCOMES {
                self.notifications.with_label_values(&[*notifier, outcome]);
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
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metrics.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }
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

/// Appends the per-stream families in the text exposition format
/// (<https://prometheus.io/docs/instrumenting/exposition_formats/>), one
/// series per stream (and per outcome for `hushwatch_events_total`).
pub fn render_streams(out: &mut String, streams: &[StreamSample], metrics: &Metrics) {
    use std::fmt::Write;
    let secs = |t: Option<DateTime<Utc>>| t.map_or(0.0, |t| t.timestamp_millis() as f64 / 1000.0);
    let span = |d: TimeDelta| d.num_milliseconds() as f64 / 1000.0;
    type Value<'a> = &'a dyn Fn(&StreamSample) -> f64;
    let families: [(&str, &str, &str, Value); 6] = [
        (
            "hushwatch_silence_alert",
            "1 while the stream's silence alert fires, else 0.",
            "gauge",
            &|s| f64::from(u8::from(s.firing)),
        ),
        (
            "hushwatch_last_event_timestamp_seconds",
            "When the stream last received an event (0: never).",
            "gauge",
            &|s| secs(s.last_event),
        ),
        (
            "hushwatch_business_silence_seconds",
            "Business time since the last event (or since watching began).",
            "gauge",
            &|s| span(s.business_silence),
        ),
        (
            "hushwatch_silence_threshold_seconds",
            "Business silence that fires the alert.",
            "gauge",
            &|s| span(s.threshold),
        ),
        (
            "hushwatch_silence_fires_at_timestamp_seconds",
            "When the alert fires if nothing arrives (0: never).",
            "gauge",
            &|s| secs(s.fires_at),
        ),
        (
            "hushwatch_event_lag_seconds",
            "Arrival time minus event time of the latest event.",
            "gauge",
            &|s| s.lag_ms as f64 / 1000.0,
        ),
    ];
    for (name, help, kind, value) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for s in streams {
            let _ = writeln!(
                out,
                "{name}{{stream=\"{}\"}} {}",
                Escaped(&s.name),
                value(s)
            );
        }
    }
    let name = "hushwatch_events_total";
    let _ = writeln!(
        out,
        "# HELP {name} Ingest requests by stream and outcome.\n# TYPE {name} counter"
    );
    let events = metrics.lock_events();
    for s in streams {
        let counts = events.get(&s.name).copied().unwrap_or_default();
        for (outcome, n) in OUTCOMES.iter().zip(counts) {
            let _ = writeln!(
                out,
                "{name}{{outcome=\"{outcome}\",stream=\"{}\"}} {n}",
                Escaped(&s.name)
            );
        }
    }
}

/// A label value with `\`, `"` and newlines escaped as the text format
/// requires.
struct Escaped<'a>(&'a str);

impl std::fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write;
        for c in self.0.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
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
        WatchdogMetrics {
            heartbeat,
            degraded,
            consecutive_failures: int_gauge_vec(
                r,
                "hushwatch_notifier_consecutive_failures",
                "Delivery attempts to the notifier that failed in a row (retryable or permanent) since its last delivery.",
                "notifier",
            ),
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
                    Escaped(stream)
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
            "hushwatch_notifications_total{notifier=\"oncall\",outcome=\"failed\"} 0",
            "hushwatch_notification_latency_seconds_count{notifier=\"oncall\"} 0",
            "hushwatch_storage_errors_total 0",
        ] {
            assert!(text.contains(line), "missing {line}\n{text}");
        }
        m.declare(&[], &[]);
        assert!(!m.encode().contains("calendar=\"tokyo\""));
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
        let mut text = String::new();
        render_streams(&mut text, &[sample("identity"), sample("a\"b\\c")], &m);
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
        // One HELP/TYPE per family, even with many streams.
        assert_eq!(
            text.matches("# TYPE hushwatch_silence_alert gauge").count(),
            1
        );
    }
}
