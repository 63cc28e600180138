//! Pure builders of what each notifier sends. Golden-tested
//! (tests/notify_golden.rs); keep them free of I/O and of "now" except the
//! explicit `sent_at`.

use super::kind::AlertKind;
use super::text;
use super::Page;
use crate::config::PagerDutyConfig;
use crate::domain::duration::format_duration;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// The longest a page's full text gets in any body (webhook, `log` line,
/// PagerDuty `custom_details`, Alertmanager description, email body). A
/// summary names at most 20 subjects (`service::reconcile`), so in
/// practice this only cuts a hostile field, such as a Svix endpoint id of
/// a megabyte; it keeps every body far below the receivers' size limits
/// (PagerDuty's 512 KB event, a proxy's usual 1 MiB).
pub const TEXT_MAX: usize = 32 * 1024;
/// Identifiers that came from a request (Svix endpoint ids; stream names
/// are at most 128 characters already): real ones are ~30 characters.
pub const ID_MAX: usize = 255;
/// PagerDuty Events API v2 (https://developer.pagerduty.com/docs/events-api-v2/trigger-events/):
/// `payload.summary` at most 1,024 characters and `dedup_key` at most 255;
/// longer events are refused with 400, which loses the page. The whole
/// event must stay under 512 KB (Alertmanager's own PagerDuty notifier
/// enforces the same: `maxV2SummaryLenRunes = 1024`,
/// `maxEventSize = 512000`).
pub const PD_SUMMARY_MAX: usize = 1024;
pub const PD_DEDUP_KEY_MAX: usize = 255;
/// Slack truncates a message's `text` beyond 40,000 characters
/// (https://api.slack.com/changelog/2018-04-truncating-really-long-messages),
/// cutting off whatever follows (the alert id, how to acknowledge). The
/// summary gets a part of that, so the lines after it always fit.
pub const SLACK_TEXT_MAX: usize = 40_000;
pub const SLACK_SUMMARY_MAX: usize = 12_000;
/// Email subject, in characters. RFC 5322 section 2.1.1 allows 998 per
/// line (78 recommended); mail clients show far fewer, and the body has
/// the full text.
pub const EMAIL_SUBJECT_MAX: usize = 200;
/// Alertmanager sets no limit on annotations, but its own PagerDuty
/// notifier cuts a summary to 1,024 characters and chat receivers show a
/// line: the same bound as PagerDuty's summary.
pub const AM_SUMMARY_MAX: usize = 1024;

/// Where a cut summary's full text is, per notifier.
const IN_DETAILS: &str = "; the full text is in custom_details.summary";
const IN_DESCRIPTION: &str = "; the full text is in the description annotation";
const IN_BODY: &str = "; the full text is in the body";

/// The page's full summary for a structured body, bounded by [`TEXT_MAX`].
fn full_summary(page: &Page) -> String {
    text::bounded(
        &format!("{}{}", test_prefix(page), page.summary),
        TEXT_MAX,
        "",
    )
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `2026-12-04 15:00 JST (Asia/Tokyo) = 2026-12-04 06:00 UTC`; a calendar
/// in UTC gives the UTC time once (`2026-12-04 06:00 UTC`), not three times.
pub fn local_and_utc(page: &Page, t: DateTime<Utc>) -> String {
    if page.timezone == chrono_tz::UTC {
        return format!("{} UTC", t.format("%Y-%m-%d %H:%M"));
    }
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
    // Pages about hushwatch itself (fallback ladder, store) cannot be
    // silenced: a hint would suggest a command the API refuses.
    if AlertKind::parse(&page.alert_kind).is_some_and(|k| !k.silenceable()) {
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

/// The endpoint line of a text page: its label, the endpoint id and, on
/// Svix pages, the source. `None` when the kind names nothing there (or
/// the id is empty). Pre-v8 `svix` rows are Svix pages.
fn endpoint_fact(page: &Page) -> Option<(&'static str, &str, Option<&str>)> {
    let endpoint = page.endpoint_id.as_deref().filter(|e| !e.is_empty())?;
    let (label, svix) = match AlertKind::parse(&page.alert_kind) {
        Some(kind) => (kind.endpoint_label()?, kind.is_svix()),
        None => ("Endpoint", true),
    };
    Some((label, endpoint, page.source.as_deref().filter(|_| svix)))
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
            "endpoint_id": page.endpoint_id.as_deref().map(|e| text::bounded_id(e, ID_MAX)),
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
            "summary": full_summary(page),
            "details": details(page),
        },
        "sent_at": rfc(sent_at),
    })
}

/// `kind = "pagerduty"`: an Events API v2 event; `dedup_key` is the alert
/// id, so the trigger and the resolve of one episode meet in one incident.
pub fn pagerduty_event(config: &PagerDutyConfig, page: &Page) -> Value {
    // The alert id is ours (36 characters); bounded all the same, the
    // same way for the trigger and the resolve so they still meet.
    let dedup_key = text::bounded_id(&page.alert_id, PD_DEDUP_KEY_MAX);
    if !page.firing {
        return json!({
            "routing_key": config.routing_key.expose(),
            "event_action": "resolve",
            "dedup_key": dedup_key,
        });
    }
    let line = format!("{}{}: {}", test_prefix(page), page.stream, page.summary);
    let summary = text::bounded(&line, PD_SUMMARY_MAX, IN_DETAILS);
    let mut details = details(page);
    if summary != line {
        details["summary"] = json!(full_summary(page));
    }
    json!({
        "routing_key": config.routing_key.expose(),
        "event_action": "trigger",
        "dedup_key": dedup_key,
        "client": "hushwatch",
        "payload": {
            "summary": summary,
            "source": "hushwatch",
            "severity": page.severity,
            "timestamp": rfc(page.started_at),
            "component": text::bounded_id(&page.stream, ID_MAX),
            "group": "hushwatch",
            "class": page.alert_kind,
            "custom_details": details,
        },
    })
}

/// `kind = "slack"`: a readable incoming-webhook message. Every field is
/// escaped for mrkdwn (`text::slack`): a reconciliation subject such as
/// `<!channel> <https://evil.example|Sign in>` must not ping a channel or
/// show a disguised link; values inside a code span cannot close it.
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
        text::slack(&page.severity, ID_MAX),
        text::slack_code(&page.stream, ID_MAX),
        text::slack(&page.summary, SLACK_SUMMARY_MAX)
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
            text::slack_code(&page.calendar, ID_MAX),
            text::slack(&page.business_hours.join(", "), SLACK_SUMMARY_MAX)
        );
    } else if let Some((label, endpoint, source)) = endpoint_fact(page) {
        let _ = write!(
            text,
            "\n• {label}: `{}`",
            text::slack_code(endpoint, ID_MAX)
        );
        if let Some(source) = source {
            let _ = write!(text, " (`{}`)", text::slack_code(source, ID_MAX));
        }
    }
    let _ = write!(
        text,
        "\n• Alert id: `{}`",
        text::slack_code(&page.alert_id, ID_MAX)
    );
    if let Some(hint) = operator_hint(page) {
        let _ = write!(
            text,
            "\n• {}: `{}`",
            hint_label(page),
            text::slack_code(&hint, SLACK_SUMMARY_MAX)
        );
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
    // Labels name the alert: a value too long is shortened with a digest
    // of the whole (`text::bounded_id`), so two alerts never merge.
    let label = |v: &str| text::bounded_id(v, ID_MAX);
    let line = format!("{}{}: {}", test_prefix(page), page.stream, page.summary);
    let mut alert = json!({
        "labels": {
            "alertname": alertname(page),
            "stream": label(&page.stream),
            "severity": label(&page.severity),
            "kind": label(&page.alert_kind),
        },
        "annotations": {
            "summary": text::bounded(&line, AM_SUMMARY_MAX, IN_DESCRIPTION),
            "description": text::bounded(&description(page), TEXT_MAX, ""),
            "alert_id": page.alert_id,
        },
        "startsAt": rfc(page.started_at),
    });
    if let Some(source) = &page.source {
        alert["labels"]["source"] = json!(label(source));
    }
    if let Some(endpoint) = &page.endpoint_id {
        alert["labels"]["endpoint_id"] = json!(label(endpoint));
        // HushwatchNotificationsFailing (the rule this page shares its
        // name with) is per `notifier`.
        if page.alert_kind == AlertKind::Fallback.as_str() {
            alert["labels"]["notifier"] = json!(label(endpoint));
        }
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

/// The alert's name in Alertmanager (`AlertKind::alertname`): the shipped
/// rule's name where a rule watches the same condition, so both paths
/// group, inhibit and silence together.
pub fn alertname(page: &Page) -> &'static str {
    match AlertKind::parse(&page.alert_kind) {
        Some(kind) => kind.alertname(),
        // Svix pages queued before schema v8 did not record which alert
        // (`alert_kind` = `svix`).
        None => "IdentityWebhookAlert",
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
    let head = format!(
        "{}[{} {}] {}: ",
        test_prefix(page),
        page.status_word(),
        text::one_line(&page.severity),
        text::one_line(&page.stream),
    );
    // The summary gets what the subject has left; the body has all of it.
    let room = EMAIL_SUBJECT_MAX
        .saturating_sub(head.chars().count() + extra.chars().count())
        .max(40);
    format!(
        "{head}{}{extra}",
        text::bounded_line(&page.summary, room, IN_BODY)
    )
}

/// Plain-text body of the email.
pub fn email_body(page: &Page) -> String {
    let mut b = String::new();
    if page.test {
        b.push_str("THIS IS A TEST PAGE sent by `hushwatch notify-test`. No action is needed.\n\n");
    }
    // Plain text (no markup to escape), but one-line fields stay one line:
    // a newline in a summary or endpoint id could fake a line of the page.
    let _ = writeln!(
        b,
        "{} - {}",
        page.status_word(),
        text::one_line(&page.stream)
    );
    let _ = writeln!(b, "{}", text::bounded_line(&page.summary, TEXT_MAX, ""));
    b.push('\n');
    let _ = writeln!(b, "Severity:        {}", page.severity);
    if !page.is_silence() {
        let _ = writeln!(b, "Kind:            {}", page.alert_kind);
        if let Some((label, endpoint, source)) = endpoint_fact(page) {
            let endpoint = text::one_line(&text::bounded_id(endpoint, ID_MAX));
            let label = format!("{label}:");
            match source {
                Some(source) => {
                    let source = text::one_line(source);
                    let _ = writeln!(b, "{label:<17}{endpoint} (svix source \"{source}\")");
                }
                None => {
                    let _ = writeln!(b, "{label:<17}{endpoint}");
                }
            }
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
        "summary": full_summary(page),
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
        v["endpoint_id"] = json!(page
            .endpoint_id
            .as_deref()
            .map(|e| text::bounded_id(e, ID_MAX)));
    }
    v
}
