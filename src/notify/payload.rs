//! Pure builders of what each notifier sends. Golden-tested
//! (tests/notify_golden.rs); keep them free of I/O and of "now" except the
//! explicit `sent_at`.

use super::Page;
use crate::config::PagerDutyConfig;
use crate::domain::duration::format_duration;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};
use std::fmt::Write as _;

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `2026-12-04 15:00 JST (Asia/Tokyo) = 2026-12-04 06:00 UTC`
pub fn local_and_utc(page: &Page, t: DateTime<Utc>) -> String {
    let local = t.with_timezone(&page.timezone);
    format!(
        "{} ({}) = {} UTC",
        local.format("%Y-%m-%d %H:%M %Z"),
        page.timezone.name(),
        t.format("%Y-%m-%d %H:%M")
    )
}

fn test_prefix(page: &Page) -> &'static str {
    if page.test {
        "[TEST] "
    } else {
        ""
    }
}

/// Extra facts every structured payload carries under `details`.
pub fn details(page: &Page) -> Value {
    json!({
        "page_key": page.key,
        "page_kind": page.kind.as_str(),
        "silent_since": page.silent_since.map(rfc),
        "threshold": page.threshold_text(),
        "max_silence": page.max_silence.map(format_duration),
        "calendar": page.calendar,
        "timezone": page.timezone.name(),
        "business_hours": page.business_hours,
        "test": page.test,
    })
}

/// `kind = "webhook"`: the documented body.
pub fn webhook_body(page: &Page, sent_at: DateTime<Utc>) -> Value {
    json!({
        "status": if page.firing { "firing" } else { "resolved" },
        "alert": {
            "id": page.alert_id,
            "kind": page.alert_kind,
            "stream": page.stream,
            "severity": page.severity,
            "started_at": rfc(page.started_at),
            "resolved_at": page.resolved_at.map(rfc),
            "summary": format!("{}{}", test_prefix(page), page.summary),
            "details": details(page),
        },
        "sent_at": rfc(sent_at),
    })
}

/// `kind = "pagerduty"`: an Events API v2 event; `dedup_key` is the alert
/// id, so the trigger and the resolve of one episode meet in one incident.
pub fn pagerduty_event(config: &PagerDutyConfig, page: &Page) -> Value {
    if !page.firing {
        return json!({
            "routing_key": config.routing_key.expose(),
            "event_action": "resolve",
            "dedup_key": page.alert_id,
        });
    }
    json!({
        "routing_key": config.routing_key.expose(),
        "event_action": "trigger",
        "dedup_key": page.alert_id,
        "client": "hushwatch",
        "payload": {
            "summary": format!("{}{}: {}", test_prefix(page), page.stream, page.summary),
            "source": "hushwatch",
            "severity": page.severity,
            "timestamp": rfc(page.started_at),
            "component": page.stream,
            "group": "hushwatch",
            "class": page.alert_kind,
            "custom_details": details(page),
        },
    })
}

/// `kind = "slack"`: a readable incoming-webhook message.
pub fn slack_message(page: &Page) -> Value {
    let mut text = String::new();
    let icon = if page.firing {
        ":rotating_light:"
    } else {
        ":white_check_mark:"
    };
    let _ = write!(
        text,
        "{icon} {}*{}* `{}`: {}",
        test_prefix(page),
        page.status_word(),
        page.stream,
        page.summary
    );
    if let Some(since) = page.silent_since {
        let _ = write!(text, "\n• Silent since: {}", local_and_utc(page, since));
    }
    let _ = write!(
        text,
        "\n• Firing since: {}",
        local_and_utc(page, page.started_at)
    );
    if let Some(r) = page.resolved_at {
        let _ = write!(text, "\n• Resolved at: {}", local_and_utc(page, r));
    }
    let _ = write!(
        text,
        "\n• Threshold: {} of business time (calendar `{}`: {})",
        page.threshold_text(),
        page.calendar,
        page.business_hours.join(", ")
    );
    let _ = write!(text, "\n• Alert id: `{}`", page.alert_id);
    json!({ "text": text })
}

/// The Alertmanager alert for this page. Labels are the same for every
/// replica of hushwatch watching the same stream (no per-database ids), so
/// several replicas posting to one Alertmanager never double-page.
pub fn alertmanager_alerts(page: &Page) -> Value {
    let mut alert = json!({
        "labels": {
            "alertname": alertname(page),
            "stream": page.stream,
            "severity": page.severity,
            "kind": page.alert_kind,
        },
        "annotations": {
            "summary": format!("{}{}: {}", test_prefix(page), page.stream, page.summary),
            "description": description(page),
            "alert_id": page.alert_id,
        },
        "startsAt": rfc(page.started_at),
    });
    if let Some(resolved) = page.resolved_at {
        alert["endsAt"] = json!(rfc(resolved));
    }
    if page.test {
        alert["labels"]["test"] = json!("true");
    }
    json!([alert])
}

/// `HushwatchSilence` for silence alerts, `HushwatchSvix` for Svix ones.
pub fn alertname(page: &Page) -> String {
    let mut kind = page.alert_kind.chars();
    match kind.next() {
        Some(first) => format!("Hushwatch{}{}", first.to_ascii_uppercase(), kind.as_str()),
        None => "Hushwatch".to_string(),
    }
}

fn description(page: &Page) -> String {
    if !page.is_silence() {
        return page.summary.clone();
    }
    let since = page
        .silent_since
        .map(|t| format!(" since {}", local_and_utc(page, t)))
        .unwrap_or_default();
    format!(
        "Stream {} has received no events{since}; threshold {} of business time on calendar {} ({}).",
        page.stream,
        page.threshold_text(),
        page.calendar,
        page.business_hours.join(", ")
    )
}

/// Subject line of the email.
pub fn email_subject(page: &Page) -> String {
    let extra = match page.kind {
        crate::store::PageKind::Page => "",
        crate::store::PageKind::Reminder => " (reminder)",
        crate::store::PageKind::Escalation => " (escalation)",
    };
    format!(
        "{}[{}] {}: {}{extra}",
        test_prefix(page),
        page.status_word(),
        page.stream,
        page.summary
    )
}

/// Plain-text body of the email.
pub fn email_body(page: &Page) -> String {
    let mut b = String::new();
    if page.test {
        b.push_str("THIS IS A TEST PAGE sent by `hushwatch notify-test`. No action is needed.\n\n");
    }
    let _ = writeln!(b, "{} - {}", page.status_word(), page.stream);
    let _ = writeln!(b, "{}", page.summary);
    b.push('\n');
    if !page.is_silence() {
        let _ = writeln!(b, "Kind:            {}", page.alert_kind);
        let _ = writeln!(b, "At:              {}", local_and_utc(page, page.at));
        b.push('\n');
        let _ = writeln!(b, "Alert id: {}", page.alert_id);
        let _ = writeln!(b, "Page key: {}", page.key);
        return b;
    }
    if page.firing {
        let _ = writeln!(
            b,
            "What is silent:  the stream \"{}\" has received no events.",
            page.stream
        );
    } else {
        let _ = writeln!(
            b,
            "What happened:   the stream \"{}\" is receiving events again.",
            page.stream
        );
    }
    if let Some(since) = page.silent_since {
        let _ = writeln!(b, "Silent since:    {}", local_and_utc(page, since));
    }
    let _ = writeln!(
        b,
        "Firing since:    {}",
        local_and_utc(page, page.started_at)
    );
    if let Some(r) = page.resolved_at {
        let _ = writeln!(b, "Resolved at:     {}", local_and_utc(page, r));
    }
    let _ = writeln!(
        b,
        "Threshold:       {} of business time",
        page.threshold_text()
    );
    if let Some(m) = page.max_silence {
        let _ = writeln!(
            b,
            "Backstop:        {} of wall-clock time",
            format_duration(m)
        );
    }
    let _ = writeln!(
        b,
        "Business hours:  {} ({}, calendar \"{}\")",
        page.business_hours.join(", "),
        page.timezone.name(),
        page.calendar
    );
    b.push('\n');
    if page.firing {
        b.push_str(
            "What to check:\n\
             - The identity provider's dashboard: is it up, and is the webhook endpoint still enabled?\n\
             - Svix message attempts for this endpoint: failed or disabled deliveries, error codes.\n\
             - The reconciliation job: did it run, and does it find events that never arrived here?\n\
             - hushwatch itself: GET /v1/status shows the last event it accepted.\n",
        );
        b.push('\n');
    }
    let _ = writeln!(b, "Alert id: {}", page.alert_id);
    let _ = writeln!(b, "Page key: {}", page.key);
    b
}
