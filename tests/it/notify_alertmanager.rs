//! The Alertmanager notifier against a real `prometheus-alertmanager`
//! (run scripts/test-components first) and, for re-posting and HA, against
//! a real HTTP receiver standing in for cluster members.

use crate::common::*;
use crate::support;

use std::io::{Read, Write};
use support::*;

fn am_notifier(urls: &[String]) -> String {
    let list: Vec<String> = urls.iter().map(|u| format!("{u:?}")).collect();
    format!(
        "[notifiers.am]\nkind = \"alertmanager\"\nurls = [{}]\ntimeout = \"2s\"\nbackoff_initial = \"1s\"\nbackoff_max = \"5s\"\n",
        list.join(", ")
    )
}

fn http_get(port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

/// Alerts named IdentityEventsSilent (the shipped rule's name) that
/// Alertmanager reports.
fn am_alerts(port: u16) -> Vec<serde_json::Value> {
    let text = http_get(
        port,
        "/api/v2/alerts?filter=alertname%3D%22IdentityEventsSilent%22",
    );
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    // Chunked or not, the JSON array is the part between the brackets.
    let (start, end) = (body.find('['), body.rfind(']'));
    match (start, end) {
        (Some(a), Some(b)) => serde_json::from_str(&body[a..=b]).unwrap(),
        _ => Vec::new(),
    }
}

#[test]
fn the_alert_appears_in_a_real_alertmanager_with_its_labels_and_resolves() {
    let dir = tempfile::tempdir().unwrap();
    let (_am, port) = start_alertmanager(dir.path());
    wait_until("alertmanager ready", || {
        http_get(port, "/-/ready").contains("200 OK").then_some(())
    });
    let text = config(
        &["am"],
        "",
        &am_notifier(&[format!("http://127.0.0.1:{port}")]),
    );
    // Real time matters to Alertmanager: watching began 2h ago, so the
    // 1h threshold was crossed an hour ago and the alert fires at once.
    let now = chrono::Utc::now();
    let s = InProcess::start_in(dir.path(), &text, now - chrono::TimeDelta::hours(2));
    s.clock.set(now);
    s.wait_state("firing");
    let alert = wait_until("the alert in Alertmanager", || {
        am_alerts(port).into_iter().next()
    });
    let labels = &alert["labels"];
    assert_eq!(labels["alertname"], "IdentityEventsSilent");
    assert_eq!(labels["stream"], "identity");
    assert_eq!(labels["severity"], "critical");
    assert_eq!(labels["kind"], "silence");
    assert_eq!(alert["status"]["state"], "active");
    assert_eq!(
        alert["annotations"]["summary"],
        "identity: no identity events for 1h of business time"
    );
    assert!(alert["annotations"]["description"]
        .as_str()
        .unwrap()
        .contains("has received no events"));
    let starts = chrono::DateTime::parse_from_rfc3339(alert["startsAt"].as_str().unwrap()).unwrap();
    assert_eq!(
        starts.timestamp(),
        (now - chrono::TimeDelta::hours(1)).timestamp()
    );

    s.clock.set(chrono::Utc::now());
    s.resolve();
    wait_until("the alert to resolve in Alertmanager", || {
        am_alerts(port)
            .iter()
            .all(|a| a["status"]["state"] != "active")
            .then_some(())
    });
    // Alertmanager can show the resolve before hushwatch has recorded the
    // delivery, so wait for the outbox rather than assert it at once.
    wait_until("the resolve page marked delivered", || {
        s.pending().is_empty().then_some(())
    });
    assert_eq!(
        s.metric(r#"hushwatch_notifications_total{notifier="am",outcome="delivered"}"#),
        2.0
    );
}

#[test]
fn firing_alerts_are_reposted_to_every_member_until_resolved() {
    let member = Receiver::start(vec![]);
    // A member that is down: its port stays reserved, so nothing else can
    // answer there (a released port was once taken by the other test's
    // servers, and the two tests then saw each other's posts).
    let down_port = ClosedPort::new();
    let down = format!("http://127.0.0.1:{}", down_port.port());
    let dir = tempfile::tempdir().unwrap();
    // Credentials in the URL become Basic auth (Alertmanager behind a
    // proxy), percent-decoded: `%40` is the `@` of the password.
    let with_auth = format!("http://hw:pa55%40word@{}", member.addr);
    let text = config(&["am"], "", &am_notifier(&[with_auth, down]));
    let s = InProcess::start_in(dir.path(), &text, utc("2026-12-01T00:00:00Z"));
    s.fire();
    // One member down: the page still counts as delivered (members gossip).
    wait_exactly("first post", 1, || member.delivered());
    wait_until("page delivered", || s.pending().is_empty().then_some(()));
    assert_eq!(
        member.delivered().len(),
        1,
        "no re-post right after delivery"
    );
    // While firing, the alert is re-posted before resolve_timeout.
    s.advance_until(30, "a re-post", || {
        (member.delivered().len() >= 2).then_some(())
    });
    let posts = member.delivered();
    for p in &posts {
        assert_eq!(p.path, "/api/v2/alerts");
        assert_eq!(p.header("authorization"), Some("Basic aHc6cGE1NUB3b3Jk"));
        let alerts = p.json();
        assert_eq!(alerts[0]["labels"]["stream"], "identity");
        assert_eq!(alerts[0]["startsAt"], "2026-12-01T01:00:00.000Z");
        assert!(alerts[0].get("endsAt").is_none());
    }
    s.resolve();
    let last = wait_until("the resolving post", || {
        member
            .delivered()
            .into_iter()
            .find(|p| p.json()[0].get("endsAt").is_some())
    });
    assert_eq!(last.json()[0]["labels"], posts[0].json()[0]["labels"]);
    let seen = format!("{} {}", s.notifications(), s.app().status());
    assert!(!seen.contains("pa55"), "{seen}");
}

const EP: &str = "ep_Kh8oOOL8dKLzdocJ2isAjIhKtJ0";

/// `identity` and the Svix source `main` both page through `am`.
fn svix_config(urls: &[String]) -> String {
    let svix = format!(
        "[svix.main]\nsecret = \"{SVIX_OPS_SECRET}\"\nstreams = [\"identity\"]\nnotify = [\"am\"]\nendpoints = {{ \"{EP}\" = \"identity\" }}\n"
    );
    config(&["am"], "", &format!("{}\n{svix}", am_notifier(urls)))
}

#[test]
fn a_manual_disable_reaches_a_real_alertmanager_as_the_rules_warning_and_resolves() {
    let dir = tempfile::tempdir().unwrap();
    let (_am, port) = start_alertmanager(dir.path());
    wait_until("alertmanager ready", || {
        http_get(port, "/-/ready").contains("200 OK").then_some(())
    });
    let now = chrono::Utc::now();
    let s = InProcess::start_in(
        dir.path(),
        &svix_config(&[format!("http://127.0.0.1:{port}")]),
        now,
    );
    let body = svix_endpoint_body("endpoint.disabled", EP, Some("manual"));
    assert_eq!(post_svix_op(s.addr, now.timestamp(), "msg_1", &body), 200);
    let query = "/api/v2/alerts?filter=alertname%3D%22IdentityWebhookEndpointDisabled%22";
    let alerts = |active: bool| {
        let text = http_get(port, query);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
        let json: Vec<serde_json::Value> = match (body.find('['), body.rfind(']')) {
            (Some(a), Some(b)) => serde_json::from_str(&body[a..=b]).unwrap(),
            _ => Vec::new(),
        };
        json.into_iter()
            .filter(|a| (a["status"]["state"] == "active") == active)
            .collect::<Vec<_>>()
    };
    let alert = wait_until("the Svix alert in Alertmanager", || {
        alerts(true).into_iter().next()
    });
    // The labels an inhibit or silence written for the shipped rule matches.
    let labels = &alert["labels"];
    assert_eq!(labels["severity"], "warning");
    assert_eq!(labels["source"], "main");
    assert_eq!(labels["endpoint_id"], EP);
    assert_eq!(labels["kind"], "svix_endpoint_disabled");
    assert_eq!(labels["stream"], "identity");
    assert!(labels.get("threshold").is_none());

    let t = chrono::Utc::now();
    s.clock.set(t);
    let body = svix_endpoint_body("endpoint.enabled", EP, None);
    assert_eq!(post_svix_op(s.addr, t.timestamp(), "msg_2", &body), 200);
    wait_until("the Svix alert to resolve in Alertmanager", || {
        alerts(true).is_empty().then_some(())
    });
    s.stop();
}

#[test]
fn a_firing_svix_alert_is_reposted_until_it_resolves() {
    let member = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let s = InProcess::start_in(
        dir.path(),
        &svix_config(&[format!("http://{}", member.addr)]),
        utc("2026-12-01T00:00:00Z"),
    );
    let body = svix_endpoint_body("endpoint.disabled", EP, Some("automatic"));
    assert_eq!(
        post_svix_op(s.addr, s.now().timestamp(), "msg_1", &body),
        200
    );
    wait_exactly("the Svix page", 1, || member.delivered());
    wait_until("page delivered", || s.pending().is_empty().then_some(()));
    // Alertmanager would end it after resolve_timeout: it is re-posted.
    s.advance_until(30, "a re-post", || {
        (member.delivered().len() >= 2).then_some(())
    });
    for p in member.delivered() {
        let alert = &p.json()[0];
        assert_eq!(
            alert["labels"]["alertname"],
            "IdentityWebhookEndpointDisabled"
        );
        assert_eq!(alert["labels"]["severity"], "critical");
        assert!(alert.get("endsAt").is_none());
    }
    let body = svix_endpoint_body("endpoint.enabled", EP, None);
    assert_eq!(
        post_svix_op(s.addr, s.now().timestamp(), "msg_2", &body),
        200
    );
    wait_until("the resolving post", || {
        member
            .delivered()
            .last()
            .filter(|p| p.json()[0].get("endsAt").is_some())
            .map(|_| ())
    });
    wait_until("resolve delivered", || s.pending().is_empty().then_some(()));
    // Resolved: no more re-posts, however long we wait.
    let posts = member.delivered().len();
    for _ in 0..5 {
        s.advance(61);
        wait_until("the delivery worker to plan past this minute", || {
            s.pending().is_empty().then_some(())
        });
    }
    assert_eq!(member.delivered().len(), posts);
    s.stop();
}
