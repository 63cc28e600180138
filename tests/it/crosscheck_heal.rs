//! Issue #45, heal: what a cross-check found missed reaches the app through
//! the relay, end to end through the real binary.
//!
//! - Clerk: a local Clerk Backend API answering in the shapes of Clerk's
//!   OpenAPI specification (clerk/openapi-specs, bapi/2025-11-10.yml:
//!   `GET /users` a bare array of `User`, `GET /organization_memberships`
//!   `{"data", "total_count"}`); the app, `tests/support/relay_app.py`,
//!   verifies every forward with the official Standard Webhooks library.
//! - WorkOS: a local WorkOS API answering `GET /events` as WorkOS's API
//!   reference shows it (workos.com/docs/reference/events: `{"object":
//!   "list", "data": [event…], "list_metadata": {"before", "after"}}`); the
//!   app, `tests/support/workos_app.py`, verifies every forward with the
//!   official WorkOS Python SDK (`webhooks.verify_header`).
//!
//! `hushwatch serve` polls every second (`every = "1s"`, `grace = "0s"`),
//! heals after each poll (`heal = true`) and forwards what the heal
//! queued. Both apps check signatures against the real wall clock, so the
//! real binary runs on it. Waits are on what a person would look at: the
//! app's own record of what it verified, `/v1/status` and `/metrics`.

use crate::common::{get, metric, request, wait_for, Sidecar, Workdir};
use crate::crosscheck::{memberships, users};
use crate::support::{run_cli, wait_listening, Answer, Proc, Receiver};
use hushwatch::ingest::providers::workos::{sign as workos_sign, WorkosKey};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(90);
const KEY: &str = "sk_test_heal_never_printed";
/// Clerk's endpoint secret (Standard Webhooks), the stream's ingest secret.
const CLERK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// The app's Standard Webhooks secret: hushwatch signs Clerk forwards.
const APP_SECRET: &str = "whsec_+zPUtq55XAYZ3Ur7mJIL5Mb+uBY8OctQ";
/// WorkOS's endpoint secret (a plain string), the stream's ingest secret.
const WORKOS_SECRET: &str = "workos_endpoint_secret_for_hushwatch";
/// The app's WorkOS secret: hushwatch signs WorkOS forwards with it.
const APP_WORKOS_SECRET: &str = "workos_app_secret_behind_the_relay";

// ------------------------------------------------------------------ the apps

/// A verifying app (a Python script under tests/support) and what it
/// verified.
struct VerifyingApp {
    _proc: Proc,
    addr: SocketAddr,
}

impl VerifyingApp {
    fn start(script: &str, module: &str, secret: &str) -> VerifyingApp {
        let ok = Command::new("python3")
            .args(["-c", &format!("import {module}")])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "{module} is missing: run scripts/test-components to install the test components"
        );
        let child = Command::new("python3")
            .arg(format!(
                "{}/tests/support/{script}",
                env!("CARGO_MANIFEST_DIR")
            ))
            .arg(secret)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start python3");
        let mut proc = Proc(child, script.into());
        let port = wait_listening(&mut proc);
        VerifyingApp {
            _proc: proc,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    fn url(&self) -> String {
        format!("http://{}/webhooks", self.addr)
    }

    /// Every verified delivery, in arrival order.
    fn deliveries(&self) -> Vec<Value> {
        let reply = get(self.addr, "/deliveries");
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json().as_array().unwrap().clone()
    }

    /// Waits until `n` distinct ids were verified; returns every delivery.
    fn wait_ids(&self, n: usize) -> Vec<Value> {
        wait_for(
            LIMIT,
            &format!("{n} distinct events verified by the app"),
            || {
                let all = self.deliveries();
                (ids(&all).len() >= n).then_some(all)
            },
        )
    }
}

fn ids(deliveries: &[Value]) -> BTreeSet<String> {
    deliveries
        .iter()
        .filter_map(|d| d["id"].as_str().map(str::to_owned))
        .collect()
}

/// The stream's relay block in `/v1/status`.
fn forward(addr: SocketAddr) -> Value {
    let status = get(addr, "/v1/status").json();
    status["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "identity")
        .map(|s| s["forward"].clone())
        .unwrap_or_else(|| panic!("no identity stream in {status}"))
}

/// Waits until the relay has nothing left to send.
fn wait_drained(hw: &Sidecar) {
    wait_for(LIMIT, "the relay's queue empty", || {
        (forward(hw.addr)["pending"] == 0).then_some(())
    });
}

/// Waits until this process finished `n` successful polls.
fn wait_polls(hw: &Sidecar, n: f64) {
    wait_for(LIMIT, &format!("{n} successful cross-check polls"), || {
        let ok = metric(
            hw.addr,
            "hushwatch_crosscheck_polls_total{outcome=\"ok\",stream=\"identity\"}",
        );
        (ok >= n).then_some(())
    });
}

fn healed_total(hw: &Sidecar) -> f64 {
    metric(
        hw.addr,
        "hushwatch_crosscheck_healed_total{stream=\"identity\"}",
    )
}

fn config(ingest: &str, app: &VerifyingApp, app_secret: &str, crosscheck: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[streams.identity]
calendar = "always"
silence_threshold = "1h"

[streams.identity.ingest]
{ingest}

[streams.identity.forward]
url = "{url}"
secret = "{app_secret}"
timeout = "2s"
retry = ["1s"]

[streams.identity.crosscheck]
api_key = "{KEY}"
every = "1s"
grace = "0s"
heal = true
{crosscheck}
"#,
        url = app.url(),
    )
}

// --------------------------------------------------------------------- Clerk

#[test]
fn clerk_removals_no_webhook_reported_reach_the_app_as_signed_revocations_once_and_a_grant_never() {
    let app = VerifyingApp::start("relay_app.py", "standardwebhooks", APP_SECRET);
    let before = [("org_9", "user_1"), ("org_9", "user_2")];
    let after = [("org_9", "user_1")];
    // Two requests per poll (users, then memberships). After the baseline,
    // user_2 has left org_9, user_3 is deleted and user_4 signed up, and
    // no webhook says so; every later poll lists the same.
    let mut script = vec![users(&["user_1", "user_2", "user_3"]), memberships(&before)];
    for _ in 0..200 {
        script.push(users(&["user_1", "user_2", "user_4"]));
        script.push(memberships(&after));
    }
    let api = Receiver::start(script);
    let crosscheck = format!("provider = \"clerk\"\napi_url = \"{}\"", api.url("/v1"));
    let ingest = format!("webhook_secret = \"{CLERK_SECRET}\"");
    let work = Workdir::new(&config(&ingest, &app, APP_SECRET, &crosscheck));

    let hw = Sidecar::start(&work.config_path());
    let got = app.wait_ids(2);
    wait_drained(&hw);
    wait_for(LIMIT, "both heals counted", || {
        (healed_total(&hw) >= 2.0).then_some(())
    });
    let got_ids = ids(&got);
    assert_eq!(got_ids.len(), 2, "{got:?}");
    for d in &got {
        assert_eq!(d["origin"], "crosscheck", "{d}");
        assert!(
            d["id"].as_str().unwrap().starts_with("msg_crosscheck_"),
            "{d}"
        );
    }
    let bodies: Vec<Value> = got
        .iter()
        .map(|d| serde_json::from_str(d["body"].as_str().unwrap()).unwrap())
        .collect();
    let membership = bodies
        .iter()
        .find(|b| b["type"] == "organizationMembership.deleted")
        .unwrap_or_else(|| panic!("{bodies:?}"));
    assert_eq!(membership["data"]["object"], "organization_membership");
    assert_eq!(membership["data"]["id"], "orgmem_org_9_user_2");
    assert_eq!(membership["data"]["organization"]["id"], "org_9");
    assert_eq!(membership["data"]["public_user_data"]["user_id"], "user_2");
    let user = bodies
        .iter()
        .find(|b| b["type"] == "user.deleted")
        .unwrap_or_else(|| panic!("{bodies:?}"));
    assert_eq!(
        user["data"],
        json!({"object": "user", "id": "user_3", "deleted": true})
    );
    assert!(
        bodies.iter().all(|b| !b.to_string().contains("user_4")),
        "a missed grant is never made up: {bodies:?}"
    );

    // The heal is in the audit log beside the webhooks.
    let (code, out, err) = run_cli(
        &["audit", "subject", "user_2", "--format", "jsonl"],
        &work.config_path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.contains("\"crosscheck\"") && l.contains("organizationMembership.deleted")),
        "{out}"
    );

    // Killed and restarted: later polls find and heal nothing new, and
    // the relay sends nothing more.
    hw.kill9();
    let hw = Sidecar::start(&work.config_path());
    wait_polls(&hw, 3.0);
    wait_drained(&hw);
    assert_eq!(healed_total(&hw), 0.0);
    assert_eq!(ids(&app.deliveries()), got_ids);
    assert!(!hw.stderr_text().contains(KEY));
}

// -------------------------------------------------------------------- WorkOS

/// A WorkOS event as its webhook and its log entry carry it.
fn workos_event(id: &str, event: &str, user: &str, at: chrono::DateTime<chrono::Utc>) -> Value {
    json!({
        "object": "event",
        "id": id,
        "event": event,
        "data": {"object": "organization_membership", "id": format!("om_{user}"),
                 "user_id": user, "organization_id": "org_01", "status": "inactive"},
        "created_at": at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    })
}

/// Posts `event` as WorkOS does, signed with the stream's secret now.
fn workos_post(addr: SocketAddr, event: &Value) -> Value {
    let body = event.to_string();
    let header = workos_sign(
        &WorkosKey::parse(WORKOS_SECRET).unwrap(),
        chrono::Utc::now().timestamp_millis(),
        body.as_bytes(),
    );
    let reply = request(
        addr,
        "POST",
        "/v1/streams/identity/webhook",
        &[
            ("WorkOS-Signature", header.as_str()),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()
}

#[test]
fn a_workos_event_the_log_has_and_the_stream_never_received_reaches_the_app_under_its_own_id_once()
{
    let app = VerifyingApp::start("workos_app.py", "workos", APP_WORKOS_SECRET);
    // No answer scripted yet: the polls before the log is set fail (a 200
    // without a body), which moves nothing.
    let api = Receiver::start(Vec::new());
    let crosscheck = format!("provider = \"workos\"\napi_url = \"{}\"", api.url(""));
    let ingest = format!("provider = \"workos\"\nwebhook_secret = \"{WORKOS_SECRET}\"");
    let work = Workdir::new(&config(&ingest, &app, APP_WORKOS_SECRET, &crosscheck));

    // event_1's webhook arrives and is relayed (verified by the SDK);
    // event_2's never does.
    let hw = Sidecar::start(&work.config_path());
    let now = chrono::Utc::now();
    let delivered = workos_event(
        "event_01DELIVERED",
        "organization_membership.deleted",
        "user_1",
        now,
    );
    let missed = workos_event(
        "event_02MISSED",
        "organization_membership.deleted",
        "user_2",
        now,
    );
    assert_eq!(workos_post(hw.addr, &delivered)["status"], "accepted");
    let relayed = app.wait_ids(1);
    assert_eq!(relayed[0]["id"], "event_01DELIVERED");
    assert_eq!(relayed[0]["origin"], Value::Null);

    // WorkOS's log has both; after them it is empty.
    let empty = json!({"object": "list", "data": [],
                       "list_metadata": {"before": null, "after": null}})
    .to_string();
    let mut script = vec![Answer::StatusBody(
        200,
        json!({"object": "list", "data": [delivered, missed],
               "list_metadata": {"before": null, "after": "event_02MISSED"}})
        .to_string(),
    )];
    script.extend((0..200).map(|_| Answer::StatusBody(200, empty.clone())));
    api.push(script);
    let got = app.wait_ids(2);
    let healed: Vec<&Value> = got.iter().filter(|d| d["id"] == "event_02MISSED").collect();
    let body: Value = serde_json::from_str(healed[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(body, missed, "the logged event, as WorkOS keeps it");
    assert_eq!(healed[0]["origin"], Value::Null, "the provider's own event");
    wait_for(LIMIT, "the heal counted", || {
        (healed_total(&hw) >= 1.0).then_some(())
    });
    assert_eq!(healed_total(&hw), 1.0, "event_1 arrived: nothing to heal");
    // WorkOS retries the webhook after all: the stream has it already.
    assert_eq!(workos_post(hw.addr, &missed)["status"], "duplicate");
    wait_drained(&hw);

    // Restarted: later polls heal nothing, and nothing is sent again.
    hw.kill9();
    let hw = Sidecar::start(&work.config_path());
    wait_polls(&hw, 3.0);
    wait_drained(&hw);
    assert_eq!(healed_total(&hw), 0.0);
    assert_eq!(
        ids(&app.deliveries()),
        BTreeSet::from(["event_01DELIVERED".to_owned(), "event_02MISSED".to_owned()])
    );
    assert!(!hw.stderr_text().contains(KEY));
}
