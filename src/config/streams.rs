//! `[streams.NAME]`: calendar, thresholds, notifiers, event filter,
//! reminders and escalation steps. Templated streams reuse `read_stream`.

use super::ingest::{read_ingest, IngestConfig};
use super::reader::{join, Reader};
use super::ALWAYS;
use crate::domain::event_filter::EventFilter;
use crate::domain::silence::SilencePolicy;
use chrono::TimeDelta;
use toml::Table;

#[derive(Debug, Clone)]
pub struct StreamConfig {
    pub name: String,
    pub calendar: String,
    pub policy: SilencePolicy,
    pub notify: Vec<String>,
    pub ingest: IngestConfig,
    pub event_filter: EventFilter,
    /// Business time between reminders while firing; None: no reminders.
    pub repeat_interval: Option<TimeDelta>,
    pub escalate: Vec<EscalationStep>,
    /// `[[streams.NAME.maintenance]]`: planned windows, silenced like an
    /// operator silence.
    pub maintenance: Vec<super::maintenance::MaintenanceWindow>,
    /// `[streams.NAME.reconcile]`: the reconciliation job's expected cadence.
    pub reconcile: Option<super::reconcile::ReconcileConfig>,
    /// `[streams.NAME.adaptive]`: the "quieter than usual" threshold.
    pub adaptive: Option<crate::domain::adaptive::AdaptivePolicy>,
    /// `[streams.NAME.forward]`: relay mode (forward each delivery to the app).
    pub forward: Option<Box<super::forward::ForwardConfig>>,
    /// `[streams.NAME.crosscheck]`: ask the provider's API what no webhook said.
    pub crosscheck: Option<Box<super::crosscheck::CrosscheckConfig>>,
    /// Made from a `[templates.NAME]` pattern (created by its first
    /// verified request, removable with `DELETE`), not written out in
    /// `[streams]`.
    pub templated: bool,
}

/// One `escalate = [{ after = "2h", notify = [...] }]` step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscalationStep {
    /// Business time after the alert started firing.
    pub after: TimeDelta,
    pub notify: Vec<String>,
}

fn read_escalate(r: &mut Reader<'_>, path: &str, t: &Table) -> Vec<EscalationStep> {
    let key_path = join(path, "escalate");
    let Some(value) = t.get("escalate") else {
        return Vec::new();
    };
    let Some(items) = value.as_array() else {
        r.error(
            &key_path,
            "expected a list of { after = \"2h\", notify = [\"NAME\"] }",
        );
        return Vec::new();
    };
    let mut steps = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let step_path = format!("{key_path}[{i}]");
        let Some(st) = r.table(&step_path, item) else {
            continue;
        };
        r.reject_unknown(&step_path, st, &["after", "notify"]);
        let after = if st.contains_key("after") {
            r.opt_duration(&step_path, st, "after")
        } else {
            r.error(&join(&step_path, "after"), "is required (e.g. \"2h\")");
            None
        };
        if after.is_some_and(|d| d <= TimeDelta::zero()) {
            r.error(&join(&step_path, "after"), "must be longer than zero");
        }
        let notify = r.string_list(&step_path, st, "notify", false);
        if notify.is_empty() {
            r.error(&join(&step_path, "notify"), "needs at least one notifier");
        }
        if let Some(after) = after {
            steps.push(EscalationStep { after, notify });
        }
    }
    steps
}

pub(crate) fn read_stream(
    r: &mut Reader<'_>,
    path: &str,
    name: &str,
    t: &Table,
) -> Option<StreamConfig> {
    r.reject_unknown(
        path,
        t,
        &[
            "calendar",
            "silence_threshold",
            "max_silence",
            "notify",
            "ingest",
            "event_types",
            "repeat_interval",
            "escalate",
            "maintenance",
            "reconcile",
            "adaptive",
            "forward",
            "crosscheck",
        ],
    );
    let calendar = r.req_string(path, t, "calendar");
    let threshold = if t.contains_key("silence_threshold") {
        r.opt_duration(path, t, "silence_threshold")
    } else {
        r.error(
            &join(path, "silence_threshold"),
            "is required (e.g. \"6h\")",
        );
        None
    };
    let max_silence = r.opt_duration(path, t, "max_silence");
    for (key, value) in [
        ("silence_threshold", threshold),
        ("max_silence", max_silence),
    ] {
        if value.is_some_and(|d| d <= TimeDelta::zero()) {
            r.error(&join(path, key), "must be longer than zero");
        }
    }
    let notify = r.string_list(path, t, "notify", false);
    let ingest = read_ingest(r, path, t);
    let event_types = r.string_list(path, t, "event_types", false);
    let repeat_interval = r
        .opt_duration(path, t, "repeat_interval")
        .filter(|d| *d > TimeDelta::zero());
    let escalate = read_escalate(r, path, t);
    let maintenance = super::maintenance::read(r, path, t);
    let reconcile = super::reconcile::read(r, path, t);
    let adaptive = super::adaptive::read(r, path, t);
    let forward = super::forward::read(r, path, t, &ingest.provider);
    let crosscheck =
        super::crosscheck::read(r, path, t, &ingest.provider, t.contains_key("forward"));
    // Placeholders keep the stream in the map after a field error, so its
    // references are still checked; any error discards the whole config.
    Some(StreamConfig {
        name: name.to_string(),
        calendar: calendar.unwrap_or_else(|| ALWAYS.to_string()),
        policy: SilencePolicy {
            threshold: threshold.unwrap_or_else(|| TimeDelta::hours(1)),
            max_silence,
        },
        notify,
        ingest,
        event_filter: EventFilter::new(event_types),
        repeat_interval,
        escalate,
        maintenance,
        reconcile,
        adaptive,
        // Boxed: most streams neither relay nor cross-check, and inline
        // these were most of a `StreamConfig` (528 bytes, 10,000 streams
        // held in the config's map; issue #46).
        forward: forward.map(Box::new),
        crosscheck: crosscheck.map(Box::new),
        templated: false,
    })
}
