//! Issue #48, Okta, end to end through the real `hushwatch serve` binary.
//!
//! - Relay for Okta and Auth0 streams: the test posts as Okta does (an
//!   Event Hook batch, `Authorization` set to the hook's configured value;
//!   shape as on developer.okta.com/docs/concepts/event-hooks/, "Sample
//!   event delivery payload") and as an Auth0 custom-webhook log stream
//!   does (a JSON array of `{log_id, data}` records; auth0.com "Custom
//!   webhook" log streams, "Content Format"); the app is a real HTTP
//!   receiver (`support::Receiver`) that records every request, and the
//!   test checks what it received: one request per event, each carrying
//!   `Authorization: <forward secret>` and never the provider's value.
//!
//! Waits are on what the app received and on `/v1/status`.

use crate::common::{request, wait_for, Sidecar, Workdir};
use crate::support::{Answer, Received, Receiver};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(90);
/// The value Okta (or Auth0) sends hushwatch: the stream's ingest credential.
const PROVIDER_AUTHORIZATION: &str = "okta-hook-value-for-hushwatch";
/// The value hushwatch sends the app: `forward.secret`.
const APP_AUTHORIZATION: &str = "Bearer app-side-hook-value";

/// One relay stream `identity` of `provider`, forwarding to `app`.
fn relay_config(provider: &str, app: &Receiver) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[streams.identity]
calendar = "always"
silence_threshold = "1h"
[streams.identity.ingest]
provider = "{provider}"
authorization = "{PROVIDER_AUTHORIZATION}"

[streams.identity.forward]
url = "{url}"
secret = "{APP_AUTHORIZATION}"
timeout = "2s"
retry = ["1s"]
"#,
        url = app.url("/hooks/identity"),
    )
}

/// A System Log `LogEvent` as an Event Hook carries it (fields as in the
/// LogEvent object of developer.okta.com/docs/reference/api/system-log/;
/// ids invented).
fn log_event(uuid: &str, event_type: &str, user: &str) -> Value {
    json!({
        "uuid": uuid,
        "published": "2026-12-01T10:00:00.000Z",
        "eventType": event_type,
        "version": "0",
        "severity": "INFO",
        "displayMessage": "Deactivate Okta user",
        "actor": {"id": "00uadmin", "type": "User", "alternateId": "admin@example.com"},
        "outcome": {"result": "SUCCESS"},
        "target": [{"id": user, "type": "User", "alternateId": format!("{user}@example.com")}],
    })
}

/// An Event Hook delivery (the envelope of Okta's sample event delivery).
fn hook(event_id: &str, events: &[Value]) -> Value {
    json!({
        "eventType": "com.okta.event_hook",
        "eventTypeVersion": "1.0",
        "cloudEventsVersion": "0.1",
        "source": "https://example.okta.com/api/v1/eventHooks/who8tbqxm1AbCdEfG0h7",
        "eventId": event_id,
        "eventTime": "2026-12-01T10:00:01.000Z",
        "contentType": "application/json",
        "data": {"events": events},
    })
}

fn post_as_provider(addr: SocketAddr, body: &str) -> Value {
    let reply = request(
        addr,
        "POST",
        "/v1/streams/identity/webhook",
        &[
            ("Authorization", PROVIDER_AUTHORIZATION),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()
}

/// What the app received, once it holds at least `n` requests.
fn wait_received(app: &Receiver, n: usize) -> Vec<Received> {
    wait_for(LIMIT, &format!("{n} forwards at the app"), || {
        let got = app.delivered();
        (got.len() >= n).then_some(got)
    })
}

fn assert_authorization_only(r: &Received) {
    assert_eq!(r.header("authorization"), Some(APP_AUTHORIZATION), "{r:?}");
    for other in ["webhook-signature", "svix-signature", "workos-signature"] {
        assert_eq!(r.header(other), None, "{r:?}");
    }
    assert!(
        !String::from_utf8_lossy(&r.body).contains(PROVIDER_AUTHORIZATION),
        "{r:?}"
    );
}

#[test]
fn an_okta_batch_reaches_the_app_one_event_per_request_with_the_forward_authorization() {
    let app = Receiver::start(Vec::<Answer>::new());
    let work = Workdir::new(&relay_config("okta", &app));
    let hw = Sidecar::start(&work.config_path());
    let events = [
        log_event("uuid-okta-relay-1", "user.lifecycle.deactivate", "00u1"),
        log_event("uuid-okta-relay-2", "group.user_membership.remove", "00u2"),
    ];
    let batch = hook("evt-batch-1", &events).to_string();
    post_as_provider(hw.addr, &batch);

    let got = wait_received(&app, 2);
    let mut uuids = Vec::new();
    for r in &got {
        assert_authorization_only(r);
        let body = r.json();
        assert_eq!(body["eventType"], "com.okta.event_hook");
        assert_eq!(body["eventId"], "evt-batch-1");
        let inner = body["data"]["events"].as_array().unwrap();
        assert_eq!(inner.len(), 1, "one LogEvent per forward: {body}");
        let want = events
            .iter()
            .find(|e| e["uuid"] == inner[0]["uuid"])
            .unwrap();
        assert_eq!(&inner[0], want, "the LogEvent as Okta sent it");
        uuids.push(inner[0]["uuid"].as_str().unwrap().to_owned());
    }
    uuids.sort();
    assert_eq!(uuids, ["uuid-okta-relay-1", "uuid-okta-relay-2"]);

    // Okta's retry of the same batch (a new eventId, the same uuids) is
    // recorded once: the app is sent nothing more.
    post_as_provider(hw.addr, &hook("evt-batch-1-retry", &events).to_string());
    wait_for(LIMIT, "the relay drained", || {
        let status = crate::common::get(hw.addr, "/v1/status").json();
        let stream = status["streams"]
            .as_array()?
            .iter()
            .find(|s| s["name"] == "identity")?
            .clone();
        (stream["forward"]["pending"] == 0).then_some(())
    });
    assert_eq!(app.delivered().len(), 2);
    assert!(!hw.stderr_text().contains(APP_AUTHORIZATION));
}

#[test]
fn an_auth0_batch_reaches_the_app_one_record_per_request_with_the_forward_authorization() {
    let app = Receiver::start(Vec::<Answer>::new());
    let work = Workdir::new(&relay_config("auth0", &app));
    let hw = Sidecar::start(&work.config_path());
    // Records as an Auth0 custom-webhook stream sends them with Content
    // Format "JSON Array" (`sdu`: user deleted; Auth0 "Log event type
    // codes"; ids invented).
    let records = json!([
        {"log_id": "90020261201100000000000000000000000000000000000101",
         "data": {"date": "2026-12-01T10:00:00.000Z", "type": "sdu",
                  "description": "User deleted", "user_id": "auth0|relay1"}},
        {"log_id": "90020261201100000000000000000000000000000000000102",
         "data": {"date": "2026-12-01T10:00:01.000Z", "type": "s",
                  "user_id": "auth0|relay2"}},
    ]);
    post_as_provider(hw.addr, &records.to_string());
    let got = wait_received(&app, 2);
    let mut ids = Vec::new();
    for r in &got {
        assert_authorization_only(r);
        let body = r.json();
        let list = body.as_array().unwrap();
        assert_eq!(
            list.len(),
            1,
            "one record per forward, as a JSON array: {body}"
        );
        ids.push(list[0]["log_id"].as_str().unwrap().to_owned());
    }
    ids.sort();
    assert_eq!(
        ids,
        [
            "90020261201100000000000000000000000000000000000101",
            "90020261201100000000000000000000000000000000000102"
        ]
    );
}
