//! Prometheus metrics on a registry of our own. Names are a public
//! interface (dashboards and alert rules depend on them): do not rename.
//!
//! Every known label set is created up front so dashboards show zeros
//! rather than gaps, and labels only ever come from config, never from
//! request input, so a caller cannot grow the series count.

use prometheus::{
    Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

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
    pub silence_alert: IntGaugeVec,
    pub last_event_timestamp: GaugeVec,
    pub business_silence: GaugeVec,
    pub threshold: GaugeVec,
    pub fires_at: GaugeVec,
    pub event_lag: GaugeVec,
    /// Provider subscriptions that must be renewed (Entra, Google), by stream and
    /// subscription id. Ids come from authenticated deliveries and are capped per stream
    /// (`store::subscriptions::MAX_PER_STREAM`), so the label sets stay bounded.
    pub subscription_expires: GaugeVec,
    pub in_business_hours: IntGaugeVec,
    pub events: IntCounterVec,
    pub reload_successful: IntGauge,
    pub reload_timestamp: Gauge,
    pub storage_errors: IntCounter,
    pub outbox_pending: IntGaugeVec,
    pub notifications: IntCounterVec,
    pub notification_latency: HistogramVec,
    pub svix_disabled: IntGaugeVec,
    pub svix_failing: IntGaugeVec,
    pub svix_exhausted: IntCounterVec,
    pub svix_lost: IntGaugeVec,
    pub svix_events: IntCounterVec,
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

fn gauge_vec(registry: &Registry, name: &str, help: &str, label: &str) -> GaugeVec {
    let g = GaugeVec::new(Opts::new(name, help), &[label])
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
        let events = IntCounterVec::new(
            Opts::new(
                "hushwatch_events_total",
                "Ingest requests by stream and outcome.",
            ),
            &["stream", "outcome"],
        )
        .unwrap_or_else(|e| unreachable_metric("hushwatch_events_total", e));
        register(&r, "hushwatch_events_total", Box::new(events.clone()));
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
            silence_alert: int_gauge_vec(
                &r,
                "hushwatch_silence_alert",
                "1 while the stream's silence alert fires, else 0.",
                "stream",
            ),
            last_event_timestamp: gauge_vec(
                &r,
                "hushwatch_last_event_timestamp_seconds",
                "When the stream last received an event (0: never).",
                "stream",
            ),
            business_silence: gauge_vec(
                &r,
                "hushwatch_business_silence_seconds",
                "Business time since the last event (or since watching began).",
                "stream",
            ),
            threshold: gauge_vec(
                &r,
                "hushwatch_silence_threshold_seconds",
                "Business silence that fires the alert.",
                "stream",
            ),
            fires_at: gauge_vec(
                &r,
                "hushwatch_silence_fires_at_timestamp_seconds",
                "When the alert fires if nothing arrives (0: never).",
                "stream",
            ),
            event_lag: gauge_vec(
                &r,
                "hushwatch_event_lag_seconds",
                "Arrival time minus event time of the latest event.",
                "stream",
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
            events,
            reload_successful,
            reload_timestamp,
            storage_errors,
            registry: r,
        }
    }

    /// Creates every label set for the configured streams, calendars and
    /// notifiers, and drops series of streams no longer configured.
    pub fn declare(&self, streams: &[&str], calendars: &[&str], notifiers: &[&str]) {
        let per_stream = [
            &self.last_event_timestamp,
            &self.business_silence,
            &self.threshold,
            &self.fires_at,
            &self.event_lag,
        ];
        for g in per_stream {
            g.reset();
        }
        self.silence_alert.reset();
        self.in_business_hours.reset();
        self.outbox_pending.reset();
        for stream in streams {
            for g in per_stream {
                g.with_label_values(&[*stream]);
            }
            self.silence_alert.with_label_values(&[*stream]);
            for outcome in OUTCOMES {
                self.events.with_label_values(&[*stream, outcome]);
            }
        }
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

    pub fn count_event(&self, stream: &str, outcome: &str) {
        self.events.with_label_values(&[stream, outcome]).inc();
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metrics.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_series_show_zeros() {
        let m = Metrics::new();
        m.declare(&["identity"], &["tokyo"], &["oncall"]);
        let text = m.encode();
        for line in [
            "hushwatch_silence_alert{stream=\"identity\"} 0",
            "hushwatch_events_total{outcome=\"bad_signature\",stream=\"identity\"} 0",
            "hushwatch_in_business_hours{calendar=\"tokyo\"} 0",
            "hushwatch_outbox_pending{notifier=\"oncall\"} 0",
            "hushwatch_notifications_total{notifier=\"oncall\",outcome=\"failed\"} 0",
            "hushwatch_notification_latency_seconds_count{notifier=\"oncall\"} 0",
            "hushwatch_storage_errors_total 0",
        ] {
            assert!(text.contains(line), "missing {line}\n{text}");
        }
        m.declare(&["other"], &[], &[]);
        assert!(!m
            .encode()
            .contains("stream=\"identity\"} 0\nhushwatch_silence"));
        assert!(!m
            .encode()
            .contains("hushwatch_silence_alert{stream=\"identity\"}"));
    }
}
