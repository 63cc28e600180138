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

/// A silence resolve's one line: "identity events arrived again at …,
/// after 6h12m of business silence". `None` for other pages, whose stored
/// summary already says what happened.
pub fn resolve_summary(page: &Page) -> Option<String> {
    if page.firing || !page.is_silence() {
        return None;
    }
    let resumed = page.resumed_at?;
    let after = page
        .business_silence
        .map(|d| format!(", after {} of business silence", minutes_text(d)))
        .unwrap_or_default();
    Some(format!(
        "{} events arrived again at {}{after}",
        page.stream,
        local_and_utc(page, resumed)
    ))
}

/// A duration to the minute (seconds only when under a minute): a page
/// reads "6h12m", not "6h12m7s".
fn minutes_text(d: chrono::TimeDelta) -> String {
    if d < chrono::TimeDelta::minutes(1) {
        return format_duration(d);
    }
    format_duration(chrono::TimeDelta::minutes(d.num_minutes()))
}

/// The silence facts of a silence page (`None` on Svix pages, which are
/// not about business time).
fn silence_facts(page: &Page) -> Value {
    let mut v = json!({
        "silent_since": page.silent_since.map(rfc),
        "threshold": page.threshold_text(),
        "max_silence": page.max_silence.map(format_duration),
        "calendar": page.calendar,
        "timezone": page.timezone.name(),
        "business_hours": page.business_hours,
    });
    if page.resumed_at.is_some() {
        v["resumed_at"] = json!(page.resumed_at.map(rfc));
        v["business_silence"] = json!(page.business_silence.map(minutes_text));
    }
    v
}

/// How to acknowledge or silence a firing page from a shell with the
/// admin API in reach: copy-paste commands, never the token (the CLI reads
/// it from `$HUSHWATCH_ADMIN_TOKEN`). A stream's silence alert can be
/// acknowledged; other alerts (Svix, subscriptions) are silenced by their
/// kind. `None` on resolves and test pages.
pub fn operator_hint(page: &Page) -> Option<String> {
    if !page.firing || page.test {
        return None;
    }
    let where_ = "add --url of the admin listener, token in $HUSHWATCH_ADMIN_TOKEN";
    Some(if page.is_silence() {
        format!(
            "hushwatch ack --stream {s} --comment \"...\"  (or: hushwatch silence add --stream {s} --for 2h --comment \"...\"; {where_})",
            s = page.stream
        )
    } else {
        format!(
            "hushwatch silence add --stream {s} --kind {k} --for 2h --comment \"...\"  ({where_})",
            s = page.stream,
            k = page.alert_kind
        )
    })
}

/// The label in front of [`operator_hint`] in text pages.
fn hint_label(page: &Page) -> &'static str {
    if page.is_silence() {
        "To acknowledge"
    } else {
        "To silence"
    }
}

/// Extra facts every structured payload carries under `details`: the
/// silence facts on silence pages, the endpoint on Svix pages.
pub fn details(page: &Page) -> Value {
    let mut v = if page.is_silence() {
        silence_facts(page)
    } else {
        json!({
            "source": page.source,
            "endpoint_id": page.endpoint_id,
        })
    };
    v["page_key"] = json!(page.key);
    v["page_kind"] = json!(page.kind.as_str());
    v["test"] = json!(page.test);
    if let Some(hint) = operator_hint(page) {
        v["how_to_ack"] = json!(hint);
    }
    v
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
        "{icon} {}*{}* ({}) `{}`: {}",
        test_prefix(page),
        page.status_word(),
        page.severity,
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
    if page.is_silence() {
        let _ = write!(
            text,
            "\n• Threshold: {} of business time (calendar `{}`: {})",
            page.threshold_text(),
            page.calendar,
            page.business_hours.join(", ")
        );
    } else if let (Some(source), Some(endpoint)) = (&page.source, &page.endpoint_id) {
        let _ = write!(text, "\n• Endpoint: `{endpoint}` (`{source}`)");
    }
    let _ = write!(text, "\n• Alert id: `{}`", page.alert_id);
    if let Some(hint) = operator_hint(page) {
        let _ = write!(text, "\n• {}: `{hint}`", hint_label(page));
    }
    json!({ "text": text })
}

/// The Alertmanager alert for this page. Labels are the same for every
/// replica of hushwatch watching the same stream (no per-database ids), so
/// several replicas posting to one Alertmanager never double-page. The
/// alertname and the labels are those of the shipped Prometheus rules
/// (charts/hushwatch/rules/hushwatch.rules.yml), so both paths group,
/// inhibit and silence together.
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
    if let Some(source) = &page.source {
        alert["labels"]["source"] = json!(source);
    }
    if let Some(endpoint) = &page.endpoint_id {
        alert["labels"]["endpoint_id"] = json!(endpoint);
    }
    if let Some(resolved) = page.resolved_at {
        alert["endsAt"] = json!(rfc(resolved));
    }
    if page.test {
        alert["labels"]["test"] = json!("true");
    }
    // An annotation, not a label: labels name the alert, and this text
    // must not split one alert into two.
    if let Some(hint) = operator_hint(page) {
        alert["annotations"]["how_to_ack"] = json!(hint);
    }
    json!([alert])
}

/// The alert's name in Alertmanager: the shipped rule's name for the
/// alerts that have one.
pub fn alertname(page: &Page) -> &'static str {
    match page.alert_kind.as_str() {
        super::ALERT_KIND => "IdentityEventsSilent",
        "svix_endpoint_disabled" => "IdentityWebhookEndpointDisabled",
        "svix_messages_exhausted" => "IdentityWebhookMessagesExhausted",
        "svix_endpoint_failing" => "IdentityWebhookEndpointFailing",
        "svix_endpoint_deleted" => "IdentityWebhookEndpointDeleted",
        "subscription_expiring" => "IdentitySubscriptionExpiring",
        "subscription_reauthorization_required" => "IdentitySubscriptionReauthorizationRequired",
        // hushwatch's own pages only: no shipped Prometheus rule has these.
        "reconciliation_missing" => "IdentityReconciliationMissing",
        "reconciliation_revoke_missed" => "IdentityReconciliationRevokeMissed",
        "stale_grant" => "IdentityStaleGrant",
        // Svix pages queued before schema v8 did not record which alert.
        _ => "IdentityWebhookAlert",
    }
}

fn description(page: &Page) -> String {
    if !page.is_silence() {
        return page.summary.clone();
    }
    if let Some(text) = resolve_summary(page) {
        return format!("Stream {}: {text}.", page.stream);
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
        "{}[{} {}] {}: {}{extra}",
        test_prefix(page),
        page.status_word(),
        page.severity,
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
    let _ = writeln!(b, "Severity:        {}", page.severity);
    if !page.is_silence() {
        let _ = writeln!(b, "Kind:            {}", page.alert_kind);
        if let (Some(source), Some(endpoint)) = (&page.source, &page.endpoint_id) {
            let _ = writeln!(b, "Endpoint:        {endpoint} (svix source \"{source}\")");
        }
        let _ = writeln!(b, "At:              {}", local_and_utc(page, page.at));
        b.push('\n');
        if let Some(hint) = operator_hint(page) {
            let _ = writeln!(b, "{}: {hint}", hint_label(page));
            b.push('\n');
        }
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
    }
    if let Some(since) = page.silent_since {
        let _ = writeln!(b, "Silent since:    {}", local_and_utc(page, since));
    }
    if let Some(resumed) = page.resumed_at {
        let _ = writeln!(b, "Arrived again:   {}", local_and_utc(page, resumed));
    }
    if let Some(d) = page.business_silence {
        let _ = writeln!(b, "Silence:         {} of business time", minutes_text(d));
    }
    let _ = writeln!(
        b,
        "Fired at:        {}",
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
    if let Some(hint) = operator_hint(page) {
        let _ = writeln!(b, "{}: {hint}", hint_label(page));
        b.push('\n');
    }
    let _ = writeln!(b, "Alert id: {}", page.alert_id);
    let _ = writeln!(b, "Page key: {}", page.key);
    b
}

/// The `log` notifier's line: the same facts as the other notifiers, with
/// instants both in the calendar's zone and in UTC.
pub fn log_line(page: &Page, sent_at: DateTime<Utc>) -> Value {
    let mut v = json!({
        "page": page.key,
        "alert_id": page.alert_id,
        "status": if page.firing { "firing" } else { "resolved" },
        "kind": page.kind.as_str(),
        "alert_kind": page.alert_kind,
        "severity": page.severity,
        "stream": page.stream,
        "at": rfc(page.at),
        "sent_at": rfc(sent_at),
        "summary": format!("{}{}", test_prefix(page), page.summary),
        "test": page.test,
    });
    if let Some(hint) = operator_hint(page) {
        v["how_to_ack"] = json!(hint);
    }
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
        v["endpoint_id"] = json!(page.endpoint_id);
    }
    v
}
