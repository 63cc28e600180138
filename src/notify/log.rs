//! `kind = "log"`: one JSON line per page on standard output (logs go to
//! stderr, so stdout carries only pages). Never an acknowledge link: a
//! log is not a private channel to the person paged.

use super::payload::{
    full_summary, local_and_utc, minutes_text, operator_hint, rfc, runbook_url, ID_MAX,
};
use super::{text, Attempt, Cause, Kind, Outcome, Page};
use crate::config::LogConfig;
use crate::domain::duration::format_duration;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use std::io::Write;

pub fn line(page: &Page, now: DateTime<Utc>) -> String {
    json_line(page, now).to_string()
}

pub fn send(page: &Page, now: DateTime<Utc>) -> Outcome {
    let text = line(page, now);
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => Outcome::Delivered,
        Err(e) => Outcome::retry(
            Cause::Refused,
            format!("cannot write to stdout: {e}"),
            false,
        ),
    }
}

#[async_trait::async_trait]
impl Kind for LogConfig {
    async fn send(&self, attempt: &Attempt<'_>, page: &Page) -> Outcome {
        send(page, attempt.now)
    }
}

/// The `log` notifier's line: the same facts as the other notifiers, with
/// instants both in the calendar's zone and in UTC.
pub fn json_line(page: &Page, sent_at: DateTime<Utc>) -> Value {
    let mut v = json!({
        "page": page.key,
        "alert_id": page.alert_id,
        "status": if page.firing { "firing" } else { "resolved" },
        "kind": page.kind.as_str(),
        "alert_kind": page.alert_kind.as_str(),
        "severity": page.severity,
        "stream": page.stream,
        "at": rfc(page.at),
        "sent_at": rfc(sent_at),
        "summary": full_summary(page),
        "test": page.test,
        "runbook_url": runbook_url(page),
    });
    if let Some(hint) = operator_hint(page) {
        v["how_to_ack"] = json!(hint);
    }
    // No `ack_url`: a log line is read by whoever reads the logs (and
    // kept by every log pipeline), and a live link acknowledges the alert.
    // Delivery mints none for this kind (`carries_ack_links`); should a
    // page reach here with one, it is still left out.
    if page.is_silence() {
        v["silent_since"] = json!(page.silent_since.map(|t| local_and_utc(page, t)));
        v["fired_at"] = json!(local_and_utc(page, page.started_at));
        v["resolved_at"] = json!(page.resolved_at.map(|t| local_and_utc(page, t)));
        v["resumed_at"] = json!(page.resumed_at.map(|t| local_and_utc(page, t)));
        v["business_silence"] = json!(page.business_silence.map(minutes_text));
        v["threshold"] = json!(format!("{} of business time", page.threshold_text()));
        v["max_silence"] = json!(page.max_silence.map(format_duration));
        v["calendar"] = json!(format!(
            "{} ({}, {})",
            page.calendar,
            page.timezone.name(),
            page.business_hours.join(", ")
        ));
    } else {
        v["source"] = json!(page.source);
        v["endpoint_id"] = json!(page
            .endpoint_id
            .as_deref()
            .map(|e| text::bounded_id(e, ID_MAX)));
    }
    v
}
