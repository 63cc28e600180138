//! Golden tests: the exact bytes each notifier sends for a fixed page.
//! Snapshots live in tests/it/snapshots/; review changes with `cargo insta
//! review` (or delete the file and re-run with INSTA_UPDATE=always).

use chrono::{DateTime, TimeDelta, Utc};
use hushwatch::config::{PagerDutyConfig, WebhookConfig};
use hushwatch::notify::kind::AlertKind;
use hushwatch::notify::{email, log, payload, webhook, Page};
use hushwatch::store::PageKind;

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn firing() -> Page {
    Page {
        key: "hw-5b1c0e8e-2f7a-4d3c-9a41-0d6e3f2b7c19".into(),
        alert_id: "9c2b7f1e-04d8-4e61-b3a5-7f0c2d9e8a14".into(),
        alert_kind: AlertKind::Silence,
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
        // Issue #30: a firing stream page carries its acknowledge link; the
        // resolve, test and other-kind pages built from this one must not.
        ack_url: Some("https://hw.example.com/ack/q7Yw0sXk3nB9vLmP2rT4uA".into()),
        runbook_base: hushwatch::config::RunbookUrl::default(),
        config_path: "/etc/hushwatch/hushwatch.toml".into(),
        relay_delivered: false,
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
    insta::assert_snapshot!(
        "email_firing_html",
        payload::email_html_body(&firing()).expect("a firing page with a link has an HTML part")
    );
    assert_eq!(payload::email_html_body(&resolved()), None);
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
        alert_kind: AlertKind::SvixEndpointDisabled,
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

/// Every kind a page can carry maps to an alertname the shipped rules
/// have (so hushwatch's page and the rule's alert meet in Alertmanager),
/// or, for the few kinds no metric can show, to a name the docs' table
/// (docs/src/reference/alerts.md, "Page kinds") documents as hushwatch's own. Nothing reaches Alertmanager as the
/// catch-all `IdentityWebhookAlert` except pre-v8 `svix` rows.
#[test]
fn every_kind_has_the_alertname_the_rules_and_readme_know() {
    let root = env!("CARGO_MANIFEST_DIR");
    let rules =
        std::fs::read_to_string(format!("{root}/charts/hushwatch/rules/hushwatch.rules.yml"))
            .unwrap();
    let readme = std::fs::read_to_string(format!("{root}/docs/src/reference/alerts.md")).unwrap();
    for kind in AlertKind::ALL {
        let page = page_of(kind);
        let name = payload::alertname(&page);
        assert_eq!(name, kind.alertname());
        assert_ne!(name, "IdentityWebhookAlert", "{kind:?}");
        let am = payload::alertmanager_alerts(&page);
        assert_eq!(am[0]["labels"]["alertname"], name);
        assert_eq!(am[0]["labels"]["kind"], kind.as_str());
        let is_rule = rules.contains(&format!("- alert: {name}\n"));
        assert_eq!(
            is_rule,
            kind.has_shipped_rule(),
            "{name}: in hushwatch.rules.yml = {is_rule}"
        );
        // The docs' "Page kinds" table has a row per kind naming its
        // alertname.
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `{}`", kind.as_str())))
            .unwrap_or_else(|| panic!("no docs/src/reference/alerts.md row for {}", kind.as_str()));
        assert!(row.contains(&format!("`{name}`")), "{row}");
    }
    // The rule a fallback page shares its name with is per notifier.
    let fallback = payload::alertmanager_alerts(&page_of(AlertKind::Fallback));
    assert_eq!(fallback[0]["labels"]["notifier"], "pd");
    assert!(rules.contains("sum by (job, instance, notifier)"));
    // Pre-v8 Svix rows keep the catch-all name.
    let old = Page {
        alert_kind: AlertKind::SvixUnrecorded,
        ..firing()
    };
    assert_eq!(payload::alertname(&old), "IdentityWebhookAlert");
}

/// A firing page of `kind` with the fields hushwatch stores for it
/// (`source`/`endpoint_id` as `store::*` queue them).
fn page_of(kind: AlertKind) -> Page {
    let base = firing();
    let (summary, source, endpoint): (&str, Option<&str>, Option<&str>) = match kind {
        AlertKind::Silence => return base,
        AlertKind::SvixEndpointDisabled => (
            "Svix endpoint ep_1 (clerk, feeds stream identity) was DISABLED (automatic trigger).",
            Some("clerk"),
            Some("ep_1"),
        ),
        AlertKind::SvixMessagesExhausted => (
            "Svix gave up on 3 message(s) to endpoint ep_1 (clerk, feeds stream identity).",
            Some("clerk"),
            Some("ep_1"),
        ),
        AlertKind::SvixEndpointFailing => (
            "Svix endpoint ep_1 (clerk, feeds stream identity) is failing.",
            Some("clerk"),
            Some("ep_1"),
        ),
        AlertKind::SvixEndpointDeleted | AlertKind::SvixUnrecorded => (
            "Svix endpoint ep_1 (clerk, feeds stream identity) was deleted.",
            Some("clerk"),
            Some("ep_1"),
        ),
        AlertKind::SubscriptionExpiring => (
            "subscription sub-1 of stream identity expires at 2026-12-08 01:00 UTC",
            Some("subscription"),
            Some("sub-1"),
        ),
        AlertKind::SubscriptionReauthorizationRequired => (
            "Entra asked to reauthorize subscription sub-1 of stream identity",
            Some("subscription"),
            Some("sub-1"),
        ),
        AlertKind::ReconciliationMissing => (
            "no reconciliation report for stream identity since 2026-12-07 00:00 UTC",
            Some("reconciliation"),
            Some(""),
        ),
        AlertKind::ReconciliationRevokeMissed => (
            "reconciliation r1 of stream identity found 1 revocation(s) that were missed: user_1",
            Some("reconciliation"),
            Some("r1"),
        ),
        AlertKind::StaleGrant => (
            "a grant of user_1 arrived after its revocation on stream identity",
            Some("audit"),
            Some(""),
        ),
        AlertKind::ForwardFailing => (
            "the app has refused or missed 5 forward attempt(s) in a row since 2026-12-07T01:00:00Z (last: HTTP 502). 3 event(s) are not delivered; oldest: user.deleted user_1 (delivery msg_1, received 2026-12-07T01:00:00Z)",
            Some("forward"),
            Some("identity"),
        ),
        AlertKind::ForwardDeadLetter => (
            "2 event(s) for stream identity were never delivered to the app (oldest: user.deleted user_1 (delivery msg_1, received 2026-12-07T01:00:00Z)).",
            Some("forward"),
            Some("identity"),
        ),
        AlertKind::ForwardHeld => (
            "1 event(s) of stream identity are held: hushwatch itself cannot send them, so they left the delivery queue (later events go on). user.deleted user_1 (delivery msg_1, received 2026-12-07T01:00:00Z): its body is sealed with key 0a1b2c3d4e5f, which is not in [store] encryption_key any more; to fix: put that key back in [store] encryption_key (after the new one) and reload, or `hushwatch forward skip --config /etc/hushwatch/hushwatch.toml --stream identity --id msg_1 --comment \"why it is skipped\"`.",
            Some("forward"),
            Some("identity"),
        ),
        AlertKind::ForwardRevocationOverdue => (
            "a revocation for stream identity has not reached the app for more than 1h: user.deleted user_1 (delivery msg_1, received 2026-12-07T01:00:00Z). Access it revokes may still be active in the app. Check the app's webhook handler and the relay's last error, then `hushwatch forward retry --config /etc/hushwatch/hushwatch.toml --stream identity`; to see what waits: `hushwatch forward list --config /etc/hushwatch/hushwatch.toml --stream identity --state pending`.",
            Some("forward"),
            Some("identity"),
        ),
        // The texts `domain::crosscheck` words these pages with.
        AlertKind::ProviderMissed => (
            crosscheck_missed_text().leak(),
            Some("crosscheck"),
            Some("identity"),
        ),
        AlertKind::CrosscheckFailing => (
            hushwatch::domain::crosscheck::failing_text(
                hushwatch::domain::crosscheck::Provider::Clerk,
                "identity",
                "/etc/hushwatch/hushwatch.toml",
                "the Clerk API refused the key: the API refused the key (HTTP 401)",
            )
            .leak(),
            Some("crosscheck"),
            Some("identity"),
        ),
        AlertKind::Fallback => (
            "hushwatch cannot deliver to pd: HTTP 503, 3 pages waiting since 2026-12-07T01:00:00Z (5 failed attempts in a row)",
            Some("fallback"),
            Some("pd"),
        ),
        AlertKind::Storage => (
            "hushwatch cannot write its state since 2026-12-07T01:00:00Z: disk full; pages in its outbox may not go out",
            None,
            None,
        ),
    };
    Page {
        alert_kind: kind,
        summary: summary.into(),
        severity: "critical".into(),
        silent_since: None,
        source: source.map(Into::into),
        endpoint_id: endpoint.map(Into::into),
        ..base
    }
}

/// A `provider_missed` page naming one missed Clerk revocation.
fn crosscheck_missed_text() -> String {
    use hushwatch::domain::crosscheck::{page_text, Direction, Finding, Provider, When};
    let finding = Finding {
        key: "clerk:removed:membership:org_9/user_2@1796605200000".into(),
        direction: Direction::Revoke,
        event_type: "organizationMembership.deleted".into(),
        subject: "user_2".into(),
        organization: Some("org_9".into()),
        provider_id: Some("orgmem_2".into()),
        when: When::Between(t(SENT_AT) - chrono::TimeDelta::minutes(15), t(SENT_AT)),
    };
    page_text(
        Provider::Clerk,
        "identity",
        "/etc/hushwatch/hushwatch.toml",
        &[finding],
        1,
    )
}

/// What each notifier shows for a page, in one text (a golden file per
/// kind).
fn every_notifier(page: &Page) -> String {
    let pd = PagerDutyConfig {
        routing_key: hushwatch::config::secret::SecretString::new("R0UTING-KEY-golden".into()),
        url: hushwatch::config::PAGERDUTY_URL.into(),
    };
    format!(
        "== slack\n{}\n== email subject\n{}\n== email body\n{}== pagerduty\n{}\n== alertmanager\n{}\n== webhook\n{}\n== log\n{}\n",
        payload::slack_message(page)["text"].as_str().unwrap(),
        payload::email_subject(page),
        payload::email_body(page),
        pretty(&payload::pagerduty_event(&pd, page)),
        pretty(&payload::alertmanager_alerts(page)),
        pretty(&payload::webhook_body(page, t(SENT_AT))),
        log::line(page, t(SENT_AT)),
    )
}

#[test]
fn every_kind_is_golden_in_every_notifier() {
    for kind in AlertKind::ALL {
        insta::assert_snapshot!(
            format!("kind_{}", kind.as_str()),
            every_notifier(&page_of(kind))
        );
    }
}

/// Text that came from requests, as an attacker would write it: a Slack
/// special mention, a disguised link, a backtick that would close a code
/// span, `&`, a bidi override that shows the rest reversed, and a newline
/// (Svix endpoint ids are not checked for control characters).
const HOSTILE: &str = "<!channel> <https://evil.example/login|Click to re-authenticate> `<@U024BE7LH>` & \u{202E}gnp.exe <!here|here>";

fn hostile() -> Page {
    Page {
        alert_kind: AlertKind::ReconciliationRevokeMissed,
        summary: format!(
            "reconciliation {HOSTILE} of stream identity found 1 revocation(s) that were missed: no revocation for {HOSTILE} was ever received"
        ),
        silent_since: None,
        source: Some("clerk".into()),
        endpoint_id: Some(format!("ep_`{HOSTILE}\n• Alert id: `forged`")),
        ..firing()
    }
}

#[test]
fn hostile_fields_are_escaped_for_every_medium() {
    let page = hostile();
    let slack = payload::slack_message(&page)["text"]
        .as_str()
        .unwrap()
        .to_string();
    insta::assert_snapshot!("hostile_slack", slack);
    // No markup from the request survives: every `<` and `>` in the text
    // is an escape, so no mention or link can be formed; code spans open
    // and close only where hushwatch put them; one line per fact.
    assert!(!slack.contains('<') && !slack.contains('>'), "{slack}");
    assert!(!slack.contains('\u{202E}'), "{slack}");
    assert!(slack.contains("&lt;!channel&gt;"), "{slack}");
    let ours_backticks = slack.matches('`').count();
    let without_hostile = payload::slack_message(&Page {
        summary: "x".into(),
        endpoint_id: Some("ep".into()),
        ..page.clone()
    })["text"]
        .as_str()
        .unwrap()
        .matches('`')
        .count();
    assert_eq!(ours_backticks, without_hostile, "{slack}");
    let plain_lines = payload::slack_message(&Page {
        summary: "x".into(),
        endpoint_id: Some("ep".into()),
        ..page.clone()
    })["text"]
        .as_str()
        .unwrap()
        .lines()
        .count();
    assert_eq!(slack.lines().count(), plain_lines, "{slack}");
    assert!(!slack.contains("forged`"), "{slack}");

    let subject = payload::email_subject(&page);
    let body = payload::email_body(&page);
    insta::assert_snapshot!("hostile_email", format!("{subject}\n\n{body}"));
    assert!(!subject.contains('\u{202E}') && !body.contains('\u{202E}'));
    assert!(!body.lines().any(|l| l.starts_with("• Alert id")), "{body}");
    // The HTML part (a hostile summary on a stream page with a link): the
    // only element with an href is hushwatch's own link.
    let html = payload::email_html_body(&Page {
        alert_kind: AlertKind::Silence,
        ..page.clone()
    })
    .expect("html part");
    assert_eq!(html.matches("href=").count(), 1, "{html}");
    assert!(
        !html.contains("<!channel>") && !html.contains("<https://evil"),
        "{html}"
    );
    assert!(
        html.contains("&lt;https://evil.example/login|Click"),
        "{html}"
    );
    assert!(!html.contains('\u{202E}'), "{html}");

    // JSON bodies carry the text as it came (serde escapes it for JSON),
    // but within each receiver's limits.
    insta::assert_snapshot!(
        "hostile_alertmanager",
        pretty(&payload::alertmanager_alerts(&page))
    );
}

/// The largest page hushwatch builds: a summary far beyond every limit
/// and a Svix endpoint id of half a megabyte. Each notifier keeps each
/// field within its receiver's documented limit.
#[test]
fn the_largest_page_fits_every_receiver() {
    let huge = Page {
        summary: format!("{} {}", "é&<".repeat(40_000), HOSTILE),
        endpoint_id: Some("e".repeat(512 * 1024)),
        ..hostile()
    };
    let pd = PagerDutyConfig {
        routing_key: hushwatch::config::secret::SecretString::new("R0UTING-KEY-golden".into()),
        url: hushwatch::config::PAGERDUTY_URL.into(),
    };
    let event = payload::pagerduty_event(&pd, &huge);
    let summary = event["payload"]["summary"].as_str().unwrap();
    assert!(
        summary.chars().count() <= 1024,
        "{}",
        summary.chars().count()
    );
    assert!(
        summary.ends_with("; the full text is in custom_details.summary)"),
        "{summary}"
    );
    assert!(event["dedup_key"].as_str().unwrap().chars().count() <= 255);
    assert!(
        event.to_string().len() < 512_000,
        "{}",
        event.to_string().len()
    );
    let full = event["payload"]["custom_details"]["summary"]
        .as_str()
        .unwrap();
    assert!(full.starts_with("é&<é&<"), "{}", &full[..20]);

    let slack = payload::slack_message(&huge)["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        slack.chars().count() <= payload::SLACK_TEXT_MAX,
        "{}",
        slack.chars().count()
    );
    assert!(slack.contains("Alert id: `9c2b7f1e-04d8-4e61-b3a5-7f0c2d9e8a14`"));

    let subject = payload::email_subject(&huge);
    assert!(
        subject.chars().count() <= payload::EMAIL_SUBJECT_MAX,
        "{subject}"
    );
    assert!(payload::email_body(&huge).len() < 200_000);

    let am = payload::alertmanager_alerts(&huge);
    assert!(
        am[0]["annotations"]["summary"]
            .as_str()
            .unwrap()
            .chars()
            .count()
            <= 1024
    );
    assert!(
        am[0]["labels"]["endpoint_id"]
            .as_str()
            .unwrap()
            .chars()
            .count()
            <= 255
    );
    assert!(am.to_string().len() < 512_000);

    assert!(payload::webhook_body(&huge, t(SENT_AT)).to_string().len() < 512_000);
    assert!(log::line(&huge, t(SENT_AT)).len() < 512_000);
}

/// Issue #44: every page, in every notifier, links the runbook section of
/// its kind (`[server] runbook_base_url` + `#kind`), and that section is in
/// the book (docs/src/operating/runbooks.md: a `## kind` heading, which is
/// also its anchor) with what it means, what to check and what to run.
#[test]
fn every_kind_links_its_runbook_section_in_every_notifier() {
    let root = env!("CARGO_MANIFEST_DIR");
    let book = std::fs::read_to_string(format!("{root}/docs/src/operating/runbooks.md")).unwrap();
    let pd = PagerDutyConfig {
        routing_key: hushwatch::config::secret::SecretString::new("R0UTING-KEY-golden".into()),
        url: hushwatch::config::PAGERDUTY_URL.into(),
    };
    let mut missing = Vec::new();
    for kind in AlertKind::ALL {
        let heading = format!("## {}", kind.as_str());
        match book
            .split("\n## ")
            .find(|s| format!("## {s}").starts_with(&format!("{heading}\n")))
        {
            None => missing.push(kind.as_str()),
            Some(section) => {
                for part in ["What it means", "What to check", "What to run"] {
                    assert!(section.contains(part), "{heading} has no \"{part}\"");
                }
            }
        }
        let page = page_of(kind);
        let url = format!(
            "{}#{}",
            hushwatch::config::DEFAULT_RUNBOOK_BASE_URL,
            kind.as_str()
        );
        let webhook = payload::webhook_body(&page, t(SENT_AT));
        assert_eq!(webhook["alert"]["details"]["runbook_url"], url.as_str());
        let am = payload::alertmanager_alerts(&page);
        assert_eq!(am[0]["annotations"]["runbook_url"], url.as_str());
        let event = payload::pagerduty_event(&pd, &page);
        assert_eq!(
            event["payload"]["custom_details"]["runbook_url"],
            url.as_str()
        );
        assert!(
            event["links"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["href"] == url.as_str()),
            "{event}"
        );
        let line: serde_json::Value = serde_json::from_str(&log::line(&page, t(SENT_AT))).unwrap();
        assert_eq!(line["runbook_url"], url.as_str());
        assert!(payload::slack_message(&page)["text"]
            .as_str()
            .unwrap()
            .contains(&format!("• Runbook: {url}")));
        assert!(payload::email_body(&page).contains(&format!("Runbook:         {url}\n")));
    }
    assert!(missing.is_empty(), "no runbook section for {missing:?}");
    // A configured base is what pages link to.
    let page = Page {
        runbook_base: hushwatch::config::RunbookUrl::parse("https://wiki.example.com/hw/runbook")
            .unwrap(),
        ..firing()
    };
    assert_eq!(
        payload::webhook_body(&page, t(SENT_AT))["alert"]["details"]["runbook_url"],
        "https://wiki.example.com/hw/runbook#silence"
    );
    // Every shipped alert rule carries its link too.
    let rules =
        std::fs::read_to_string(format!("{root}/charts/hushwatch/rules/hushwatch.rules.yml"))
            .unwrap();
    let alerts = rules.matches("- alert: ").count();
    assert!(alerts > 0);
    assert_eq!(
        rules
            .matches(&format!(
                "runbook_url: {}#",
                hushwatch::config::DEFAULT_RUNBOOK_BASE_URL
            ))
            .count(),
        alerts,
        "one runbook_url annotation per rule, at the default base"
    );
}

/// Issue #44: with `clock = "delivered"` the silence is the app's: the
/// email says so and does not send on-call to the identity provider.
#[test]
fn a_relay_silence_page_points_at_the_app_not_the_provider() {
    let page = Page {
        relay_delivered: true,
        summary: "the app has not accepted identity events for 1m of business time, while hushwatch holds 8 received from the provider (8 pending); the relay's last error: http://app:3000 answered HTTP 400".into(),
        ..firing()
    };
    let body = payload::email_body(&page);
    assert!(!body.contains("identity provider"), "{body}");
    assert!(
        body.contains("the app behind the relay has accepted no \"identity\" events"),
        "{body}"
    );
    assert!(
        body.contains(
            "`hushwatch forward retry --config /etc/hushwatch/hushwatch.toml --stream identity`"
        ),
        "{body}"
    );
    insta::assert_snapshot!("email_relay_delivered", body);
}
