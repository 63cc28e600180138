//! Golden tests: the exact bytes each notifier sends for a fixed page.
//! Snapshots live in tests/snapshots/; review changes with `cargo insta
//! review` (or delete the file and re-run with INSTA_UPDATE=always).

use chrono::{DateTime, TimeDelta, Utc};
use hushwatch::config::{PagerDutyConfig, WebhookConfig};
use hushwatch::notify::{email, log, payload, webhook, Page};
use hushwatch::store::PageKind;

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn firing() -> Page {
    Page {
        key: "hw-5b1c0e8e-2f7a-4d3c-9a41-0d6e3f2b7c19".into(),
        alert_id: "9c2b7f1e-04d8-4e61-b3a5-7f0c2d9e8a14".into(),
        alert_kind: "silence".into(),
        stream: "identity".into(),
        firing: true,
        kind: PageKind::Page,
        at: t("2026-12-07T01:00:00Z"),
        started_at: t("2026-12-07T01:00:00Z"),
        resolved_at: None,
        silent_since: Some(t("2026-12-04T03:00:00Z")),
        resumed_at: None,
        business_silence: None,
        summary: "no identity events for 6h of business time".into(),
        severity: "critical".into(),
        source: None,
        endpoint_id: None,
        calendar: "tokyo".into(),
        timezone: chrono_tz::Asia::Tokyo,
        business_hours: vec!["mon-fri 09:00-18:00".into()],
        threshold: TimeDelta::hours(6),
        max_silence: Some(TimeDelta::hours(72)),
        test: false,
    }
}

/// The resolve of `firing()`: events arrived again at 11:29:40 JST, after
/// 6h29m40s of business time (Fri 12:00-18:00, Mon 09:00-11:29:40).
fn resolved() -> Page {
    let mut page = Page {
        key: "hw-0a7d3e55-91c2-4b8f-a6e0-3c4d5e6f7a8b".into(),
        firing: false,
        at: t("2026-12-07T02:30:00Z"),
        resolved_at: Some(t("2026-12-07T02:30:00Z")),
        resumed_at: Some(t("2026-12-07T02:29:40Z")),
        business_silence: Some(TimeDelta::seconds(6 * 3600 + 29 * 60 + 40)),
        ..firing()
    };
    page.summary = payload::resolve_summary(&page).unwrap();
    page
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap()
}

const SENT_AT: &str = "2026-12-07T01:00:02.500Z";

#[test]
fn webhook_bodies_and_headers() {
    let sent = t(SENT_AT);
    insta::assert_snapshot!(
        "webhook_firing",
        pretty(&payload::webhook_body(&firing(), sent))
    );
    insta::assert_snapshot!(
        "webhook_resolved",
        pretty(&payload::webhook_body(&resolved(), sent))
    );
    let config = WebhookConfig {
        url: hushwatch::config::secret::SecretString::new("https://example.org/hook".into()),
        secret: Some(
            hushwatch::ingest::signature::SecretKey::parse(
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            )
            .unwrap(),
        ),
    };
    let body = payload::webhook_body(&firing(), sent).to_string();
    let headers: Vec<String> = webhook::headers(&config, &firing(), sent, body.as_bytes())
        .into_iter()
        .map(|(n, v)| format!("{n}: {v}"))
        .collect();
    insta::assert_snapshot!("webhook_headers", headers.join("\n"));
}

#[test]
fn pagerduty_events() {
    let config = PagerDutyConfig {
        routing_key: hushwatch::config::secret::SecretString::new("R0UTING-KEY-golden".into()),
        url: hushwatch::config::PAGERDUTY_URL.into(),
    };
    insta::assert_snapshot!(
        "pagerduty_trigger",
        pretty(&payload::pagerduty_event(&config, &firing()))
    );
    insta::assert_snapshot!(
        "pagerduty_resolve",
        pretty(&payload::pagerduty_event(&config, &resolved()))
    );
}

#[test]
fn slack_messages() {
    insta::assert_snapshot!("slack_firing", pretty(&payload::slack_message(&firing())));
    insta::assert_snapshot!(
        "slack_resolved",
        pretty(&payload::slack_message(&resolved()))
    );
}

#[test]
fn alertmanager_alerts() {
    insta::assert_snapshot!(
        "alertmanager_firing",
        pretty(&payload::alertmanager_alerts(&firing()))
    );
    insta::assert_snapshot!(
        "alertmanager_resolved",
        pretty(&payload::alertmanager_alerts(&resolved()))
    );
}

#[test]
fn email_text() {
    for (name, page) in [("email_firing", firing()), ("email_resolved", resolved())] {
        let text = format!(
            "Subject: {}\nMessage-ID: {}\nReferences: {}\n\n{}",
            payload::email_subject(&page),
            email::message_id(&page),
            email::thread_id(&page),
            payload::email_body(&page)
        );
        insta::assert_snapshot!(name, text);
    }
    let reminder = Page {
        kind: PageKind::Reminder,
        ..firing()
    };
    insta::assert_snapshot!("email_reminder_subject", payload::email_subject(&reminder));
    let test = Page {
        test: true,
        ..firing()
    };
    insta::assert_snapshot!(
        "email_test_page",
        format!(
            "{}\n\n{}",
            payload::email_subject(&test),
            payload::email_body(&test)
        )
    );
}

#[test]
fn log_lines() {
    insta::assert_snapshot!("log_firing", log::line(&firing(), t(SENT_AT)));
    insta::assert_snapshot!("log_resolved", log::line(&resolved(), t(SENT_AT)));
}

fn svix_disabled(severity: &str, summary: &str) -> Page {
    Page {
        alert_kind: "svix_endpoint_disabled".into(),
        summary: summary.into(),
        severity: severity.into(),
        silent_since: None,
        source: Some("clerk".into()),
        endpoint_id: Some("ep_1".into()),
        ..firing()
    }
}

#[test]
fn svix_pages_are_not_silence_alerts() {
    let page = svix_disabled(
        "critical",
        "Svix endpoint ep_1 (clerk, feeds stream identity) was DISABLED (automatic trigger).",
    );
    let page = &page;
    let am = payload::alertmanager_alerts(page);
    assert_eq!(
        am[0]["labels"]["alertname"],
        "IdentityWebhookEndpointDisabled"
    );
    assert_eq!(am[0]["labels"]["kind"], "svix_endpoint_disabled");
    assert_eq!(am[0]["labels"]["source"], "clerk");
    assert_eq!(am[0]["labels"]["endpoint_id"], "ep_1");
    insta::assert_snapshot!("svix_email", payload::email_body(page));
    insta::assert_snapshot!("svix_slack", pretty(&payload::slack_message(page)));
    insta::assert_snapshot!(
        "svix_webhook",
        pretty(&payload::webhook_body(page, t(SENT_AT)))
    );
    insta::assert_snapshot!("svix_log", log::line(page, t(SENT_AT)));
    // No silence facts anywhere on a Svix page.
    let rendered = [
        payload::email_body(page),
        payload::slack_message(page).to_string(),
        payload::webhook_body(page, t(SENT_AT)).to_string(),
        log::line(page, t(SENT_AT)),
        payload::alertmanager_alerts(page).to_string(),
    ];
    for text in &rendered {
        for silence_word in [
            "Threshold",
            "threshold",
            "business time",
            "silent_since",
            "Silent since",
        ] {
            assert!(!text.contains(silence_word), "{silence_word:?} in {text}");
        }
    }
}

#[test]
fn every_notifier_shows_the_stored_severity() {
    let page = svix_disabled(
        "warning",
        "Svix endpoint ep_1 (clerk, feeds stream identity) was DISABLED (manual trigger).",
    );
    let pd = PagerDutyConfig {
        routing_key: hushwatch::config::secret::SecretString::new("R0UTING-KEY-golden".into()),
        url: hushwatch::config::PAGERDUTY_URL.into(),
    };
    assert_eq!(
        payload::pagerduty_event(&pd, &page)["payload"]["severity"],
        "warning"
    );
    assert_eq!(
        payload::alertmanager_alerts(&page)[0]["labels"]["severity"],
        "warning"
    );
    assert_eq!(
        payload::webhook_body(&page, t(SENT_AT))["alert"]["severity"],
        "warning"
    );
    assert!(payload::slack_message(&page)["text"]
        .as_str()
        .unwrap()
        .starts_with(":rotating_light: *FIRING* (warning)"));
    assert!(payload::email_subject(&page).starts_with("[FIRING warning] "));
    let log: serde_json::Value = serde_json::from_str(&log::line(&page, t(SENT_AT))).unwrap();
    assert_eq!(log["severity"], "warning");
}

#[test]
fn alertnames_are_the_shipped_rule_names() {
    let rules = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/hushwatch/rules/hushwatch.rules.yml"
    ))
    .unwrap();
    for (kind, name) in [
        ("silence", "IdentityEventsSilent"),
        ("svix_endpoint_disabled", "IdentityWebhookEndpointDisabled"),
        (
            "svix_messages_exhausted",
            "IdentityWebhookMessagesExhausted",
        ),
        ("subscription_expiring", "IdentitySubscriptionExpiring"),
    ] {
        let page = Page {
            alert_kind: kind.into(),
            ..firing()
        };
        assert_eq!(payload::alertname(&page), name);
        assert!(
            rules.contains(&format!("- alert: {name}\n")),
            "{name} is not a rule in hushwatch.rules.yml"
        );
    }
}
