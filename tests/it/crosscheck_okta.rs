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
//! - The cross-check: a local Okta org ([`OktaApi`], a real HTTP server on
//!   port 0) answering `GET /api/v1/logs` as Okta's System Log API
//!   reference describes polling mode (developer.okta.com/docs/reference/
//!   api/system-log/, "Polling requests": `since` once, `sortOrder=
//!   ASCENDING`, then only the `Link: <…>; rel="next"` URL, which is sent
//!   on every answer, an empty page too; a JSON array of `LogEvent`s), its
//!   429 with `X-Rate-Limit-Reset` (developer.okta.com/docs/reference/
//!   rl-best-practices/) and its 401 for a bad token (`errorCode`
//!   `E0000011`, developer.okta.com/docs/reference/error-codes/).
//!
//! Waits are on what the app received, the pages the notifier got,
//! `/metrics` and `/v1/status`.

use crate::common::{get, metric, request, wait_for, Sidecar, Workdir};
use crate::crosscheck::{pages_of, polls_or_zero, query};
use crate::support::{Answer, Received, Receiver};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
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
fn event_hook(event_id: &str, events: &[Value]) -> Value {
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
    let batch = event_hook("evt-batch-1", &events).to_string();
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
    post_as_provider(
        hw.addr,
        &event_hook("evt-batch-1-retry", &events).to_string(),
    );
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

// ------------------------------------------------------------ cross-check

/// The SSWS API token; it must never leave the process.
const KEY: &str = "00okta_ssws_token_never_printed_4711";

/// The local Okta org's System Log.
#[derive(Default)]
struct OktaState {
    /// LogEvents, oldest first (published ascending).
    events: Vec<Value>,
    /// Events per page (Okta's `limit`, here small to make pages).
    page: usize,
    /// Answer every request with this status (401: a revoked token).
    status: Option<u16>,
    /// Answer the next request 429 with `X-Rate-Limit-Reset` one second
    /// after its `Date`.
    throttle_once: bool,
    /// Every request: (target, Authorization, status answered).
    asked: Vec<(String, String, u16)>,
}

struct OktaApi {
    addr: SocketAddr,
    state: Arc<Mutex<OktaState>>,
}

impl OktaApi {
    fn start(page: usize) -> OktaApi {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(OktaState {
            page,
            ..OktaState::default()
        }));
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || okta_answer(conn, addr, &shared));
            }
        });
        OktaApi { addr, state }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn with<T>(&self, f: impl FnOnce(&mut OktaState) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    fn asked(&self) -> Vec<(String, String, u16)> {
        self.with(|s| s.asked.clone())
    }
}

fn okta_answer(conn: TcpStream, addr: SocketAddr, state: &Mutex<OktaState>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut auth = String::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim_end().is_empty() {
            break;
        }
        if let Some((name, value)) = h.trim_end().split_once(':') {
            if name.eq_ignore_ascii_case("authorization") {
                auth = value.trim().to_owned();
            }
        }
    }
    let target = line.split_whitespace().nth(1).unwrap_or("").to_owned();
    let date = chrono::Utc::now();
    let http_date = date.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
    let (status, headers, body) = {
        let mut s = state.lock().unwrap();
        let answer = okta_respond(&target, addr, &http_date, date.timestamp(), &mut s);
        s.asked.push((target.clone(), auth, answer.0));
        answer
    };
    let mut conn = conn;
    let _ = write!(
        conn,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nDate: {http_date}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.flush();
}

/// One System Log answer: `since` places the first page at the first
/// event published at or after it; `after` is this org's opaque position
/// (an index here), only ever read back from a link it sent.
fn okta_respond(
    target: &str,
    addr: SocketAddr,
    http_date: &str,
    now: i64,
    s: &mut OktaState,
) -> (u16, String, String) {
    if let Some(status) = s.status {
        return (
            status,
            String::new(),
            r#"{"errorCode":"E0000011","errorSummary":"Invalid token provided","errorLink":"E0000011","errorId":"oae1","errorCauses":[]}"#.into(),
        );
    }
    if s.throttle_once {
        s.throttle_once = false;
        return (
            429,
            format!(
                "X-Rate-Limit-Limit: 20\r\nX-Rate-Limit-Remaining: 0\r\nX-Rate-Limit-Reset: {}\r\n",
                now + 1
            ),
            r#"{"errorCode":"E0000047","errorSummary":"API call exceeded rate limit due to too many requests."}"#.into(),
        );
    }
    let _ = http_date;
    if !target.starts_with("/api/v1/logs?") {
        return (404, String::new(), "{}".into());
    }
    let start = match query(target, "after") {
        Some(n) => n.parse::<usize>().unwrap_or(usize::MAX),
        None => {
            let since = query(target, "since").unwrap_or_default();
            s.events
                .iter()
                .take_while(|e| e["published"].as_str().unwrap_or("") < since.as_str())
                .count()
        }
    };
    let start = start.min(s.events.len());
    let end = (start + s.page).min(s.events.len());
    let page: Vec<Value> = s.events[start..end].to_vec();
    let base = format!("http://{addr}/api/v1/logs");
    let links = format!(
        "Link: <{base}?{}>; rel=\"self\"\r\nLink: <{base}?limit=1000&sortOrder=ASCENDING&after={end}>; rel=\"next\"\r\n",
        target.split_once('?').map_or("", |(_, q)| q)
    );
    (200, links, Value::from(page).to_string())
}

fn published_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A revocation or grant LogEvent about `user` (and a group), as the
/// System Log reference's LogEvent object shows one (ids invented).
fn okta_log_event(uuid: &str, event_type: &str, user: &str, group: Option<&str>) -> Value {
    let mut target = vec![json!({"id": user, "type": "User",
                                 "alternateId": format!("{user}@example.com"), "displayName": "Some One"})];
    if let Some(g) = group {
        target.push(json!({"id": g, "type": "UserGroup", "alternateId": "unknown", "displayName": "Engineering"}));
    }
    json!({
        "uuid": uuid,
        "published": published_now(),
        "eventType": event_type,
        "version": "0",
        "severity": "INFO",
        "legacyEventType": "core.user.config.user_deactivated",
        "displayMessage": "Deactivate Okta user",
        "actor": {"id": "00uadmin", "type": "User", "alternateId": "admin@example.com", "displayName": "Admin"},
        "client": {"ipAddress": "203.0.113.5"},
        "outcome": {"result": "SUCCESS"},
        "transaction": {"type": "WEB", "id": "trs1"},
        "target": target,
    })
}

fn okta_config(api: &OktaApi, hook: &Receiver, relay_to: Option<&Receiver>) -> String {
    let forward = relay_to.map_or_else(String::new, |app| {
        format!(
            "[streams.identity.forward]\nurl = \"{}\"\nsecret = \"{APP_AUTHORIZATION}\"\ntimeout = \"2s\"\nretry = [\"1s\"]\n",
            app.url("/hooks/okta")
        )
    });
    format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[streams.identity]
calendar = "always"
silence_threshold = "30d"
notify = ["hook"]
[streams.identity.ingest]
provider = "okta"
authorization = "{PROVIDER_AUTHORIZATION}"
[streams.identity.crosscheck]
provider = "okta"
api_url = "{api}"
api_key = "{KEY}"
every = "1s"
grace = "1s"
heal = {heal}
{forward}
[notifiers.hook]
kind = "webhook"
url = "{hook}"
timeout = "2s"
backoff_initial = "1s"
"#,
        api = api.url(),
        hook = hook.url("/hook"),
        heal = relay_to.is_some(),
    )
}

fn wait_polls(server: &Sidecar, outcome: &str, n: f64) {
    let from = polls_or_zero(server.addr, outcome);
    wait_for(LIMIT, &format!("{n} more {outcome} polls"), || {
        (polls_or_zero(server.addr, outcome) >= from + n).then_some(())
    });
}

fn wait_pages_of(
    hook: &Receiver,
    kind: &str,
    status: &str,
    n: usize,
) -> Vec<(String, String, String)> {
    wait_for(LIMIT, &format!("{n} {status} {kind} page(s)"), || {
        let got: Vec<_> = pages_of(hook, kind)
            .into_iter()
            .filter(|p| p.0 == status)
            .collect();
        (got.len() >= n).then_some(got)
    })
}

fn assert_key_never_shown(server: &Sidecar, hook: &Receiver, api: &OktaApi) {
    let seen = [
        server.stderr_text(),
        server.stdout_lines().join("\n"),
        get(server.addr, "/metrics").body,
        get(server.addr, "/v1/status").body,
        get(server.addr, "/").body,
        format!("{:?}", hook.received()),
    ];
    for text in seen {
        assert!(!text.contains(KEY), "the key leaked: {text}");
    }
    // It went to the API, and only there, as `SSWS <token>`.
    assert!(api
        .asked()
        .iter()
        .all(|(_, auth, _)| auth == &format!("SSWS {KEY}")));
}

#[test]
fn serve_pages_an_okta_event_no_hook_brought_once_with_its_subject_across_a_kill_9() {
    let api = OktaApi::start(2);
    let hook = Receiver::start(vec![]);
    let work = Workdir::new(&okta_config(&api, &hook, None));
    let server = Sidecar::start(&work.config_path());
    // Caught up on an empty log: each poll asks once and gets an empty page
    // with a next link, forever.
    wait_polls(&server, "ok", 3.0);

    let delivered = okta_log_event(
        "uuid-okta-delivered",
        "user.lifecycle.deactivate",
        "00uDELIVERED",
        None,
    );
    let lost = okta_log_event(
        "uuid-okta-lost",
        "group.user_membership.remove",
        "00uLOST",
        Some("00gENG"),
    );
    let noise = okta_log_event("uuid-okta-login", "user.session.start", "00uNOISE", None);
    // The delivered one's Event Hook arrives; the lost one's never does.
    post_as_provider(
        server.addr,
        &event_hook("evt-hook-1", std::slice::from_ref(&delivered)).to_string(),
    );
    api.with(|s| s.events.extend([delivered, noise, lost]));

    let firing = wait_pages_of(&hook, "provider_missed", "firing", 1);
    let (_, severity, summary) = &firing[0];
    assert_eq!(severity, "critical", "{summary}");
    assert!(
        summary.contains("Okta logged group.user_membership.remove uuid-okta-lost for user 00uLOST in group Engineering (00gENG)"),
        "{summary}"
    );
    assert!(
        !summary.contains("DELIVERED") && !summary.contains("NOISE"),
        "{summary}"
    );

    // Killed and restarted: the stored link goes on; nothing is paged again.
    // (One more poll first: a page is sent at least once, and a kill between
    // its delivery and the outbox's record of it would send it again.)
    wait_polls(&server, "ok", 1.0);
    server.kill9();
    let server = Sidecar::start(&work.config_path());
    wait_polls(&server, "ok", 3.0);
    assert_eq!(pages_of(&hook, "provider_missed").len(), 1, "paged once");
    // One more lost after the restart: paged too, none lost.
    let later = okta_log_event(
        "uuid-okta-later",
        "user.lifecycle.suspend",
        "00uLATER",
        None,
    );
    api.with(|s| s.events.push(later));
    let all = wait_for(LIMIT, "the later finding paged", || {
        let all = pages_of(&hook, "provider_missed");
        all.iter()
            .any(|p| p.2.contains("uuid-okta-later"))
            .then_some(all)
    });
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(!all[1].2.contains("uuid-okta-lost"), "{all:?}");

    // Polling mode: `since` once (the first poll), never `until`, then
    // only the links the org sent.
    let asked = api.asked();
    let since: Vec<_> = asked.iter().filter(|a| a.0.contains("since=")).collect();
    assert_eq!(since.len(), 1, "{asked:?}");
    assert!(since[0].0.contains("sortOrder=ASCENDING") && since[0].0.contains("limit=1000"));
    // The checked types only (a SCIM filter; this org ignores it, so the
    // join still skips the sign-in).
    assert_eq!(
        query(&since[0].0, "filter").as_deref(),
        Some(
            "eventType eq \"user.lifecycle.deactivate\" or eventType eq \"user.lifecycle.suspend\" or eventType eq \"application.user_membership.remove\" or eventType eq \"group.user_membership.remove\" or eventType eq \"user.lifecycle.activate\" or eventType eq \"user.lifecycle.unsuspend\" or eventType eq \"application.user_membership.add\" or eventType eq \"group.user_membership.add\""
        )
    );
    assert!(asked.iter().all(|a| !a.0.contains("until=")));
    assert!(
        asked.iter().skip(1).all(|a| a.0.contains("after=")),
        "{asked:?}"
    );
    assert_key_never_shown(&server, &hook, &api);
}

#[test]
fn serve_pages_a_refused_okta_token_critical_and_waits_out_a_429_s_rate_limit_reset() {
    let api = OktaApi::start(10);
    api.with(|s| s.status = Some(401));
    let hook = Receiver::start(vec![]);
    let work = Workdir::new(&okta_config(&api, &hook, None));
    let server = Sidecar::start(&work.config_path());
    let firing = wait_pages_of(&hook, "crosscheck_failing", "firing", 1);
    let (_, severity, summary) = &firing[0];
    assert_eq!(severity, "critical");
    assert!(
        summary.contains("the Okta API refused the key"),
        "{summary}"
    );
    assert!(summary.contains("HTTP 401"), "{summary}");

    // The token is fixed; Okta then throttles once: the poll waits until
    // X-Rate-Limit-Reset and succeeds.
    api.with(|s| {
        s.status = None;
        s.throttle_once = true;
    });
    wait_pages_of(&hook, "crosscheck_failing", "resolved", 1);
    let asked = api.asked();
    let throttled = asked
        .iter()
        .position(|a| a.2 == 429)
        .expect("a 429 was answered");
    assert_eq!(
        asked.get(throttled + 1).map(|a| a.2),
        Some(200),
        "{asked:?}"
    );
    assert_eq!(
        polls_or_zero(server.addr, "rate_limited"),
        0.0,
        "waited out, not failed"
    );
    assert_key_never_shown(&server, &hook, &api);
}

#[test]
fn heal_sends_the_app_a_never_hooked_okta_event_once_in_an_event_hook_envelope_with_the_forward_authorization(
) {
    let api = OktaApi::start(5);
    let hook = Receiver::start(vec![]);
    let app = Receiver::start(Vec::<Answer>::new());
    let work = Workdir::new(&okta_config(&api, &hook, Some(&app)));
    let server = Sidecar::start(&work.config_path());
    wait_polls(&server, "ok", 1.0);

    let delivered = okta_log_event(
        "uuid-heal-delivered",
        "user.lifecycle.deactivate",
        "00uD",
        None,
    );
    let lost = okta_log_event("uuid-heal-lost", "user.lifecycle.deactivate", "00uL", None);
    post_as_provider(
        server.addr,
        &event_hook("evt-heal-1", std::slice::from_ref(&delivered)).to_string(),
    );
    // Relayed as Okta sent it (a batch of one: the body as it came).
    let got = wait_received(&app, 1);
    assert_eq!(
        got[0].json()["data"]["events"][0]["uuid"],
        "uuid-heal-delivered"
    );
    assert_eq!(got[0].header("hushwatch-origin"), None);
    api.with(|s| s.events.extend([delivered, lost.clone()]));

    let got = wait_received(&app, 2);
    let healed: Vec<&Received> = got
        .iter()
        .filter(|r| r.json()["data"]["events"][0]["uuid"] == "uuid-heal-lost")
        .collect();
    assert_eq!(healed.len(), 1, "{got:?}");
    let r = healed[0];
    assert_authorization_only(r);
    assert_eq!(r.header("hushwatch-origin"), Some("crosscheck"));
    let body = r.json();
    assert_eq!(body["eventType"], "com.okta.event_hook");
    assert_eq!(body["eventTypeVersion"], "1.0");
    assert_eq!(body["contentType"], "application/json");
    assert!(body["eventId"].is_string());
    assert_eq!(body["eventTime"], lost["published"]);
    assert_eq!(
        body["data"]["events"],
        json!([lost]),
        "the LogEvent as logged"
    );
    // The finding is marked healed (the app has it).
    wait_for(LIMIT, "the heal counted", || {
        (metric(
            server.addr,
            "hushwatch_crosscheck_healed_total{stream=\"identity\"}",
        ) >= 1.0)
            .then_some(())
    });

    // Okta's hook for it arrives late after all: a duplicate, not resent;
    // restarted, later polls heal nothing more.
    let late = event_hook("evt-heal-late", &[lost]).to_string();
    assert_eq!(post_as_provider(server.addr, &late)["status"], "duplicate");
    server.kill9();
    let server = Sidecar::start(&work.config_path());
    wait_polls(&server, "ok", 3.0);
    assert_eq!(app.delivered().len(), 2, "{:?}", app.delivered());
    assert_key_never_shown(&server, &hook, &api);
}

#[test]
fn three_replicas_on_postgresql_poll_okta_once_go_on_from_the_kept_link_and_page_each_finding_once()
{
    let _one = crate::common::pg::CLUSTERS
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let Some(db) = crate::common::pg::PgDb::create("crosscheck_okta_replicas") else {
        return;
    };
    let api = OktaApi::start(3);
    let hook = Receiver::start(vec![]);
    let config = okta_config(&api, &hook, None)
        + &format!(
            "\n[store]\nurl = \"{}\"\npool_size = 3\nleader_lease = \"2s\"\n",
            db.url
        );
    let work = Workdir::new(&config);
    let mut replicas: Vec<Option<Sidecar>> = (0..3)
        .map(|_| Some(Sidecar::start(&work.config_path())))
        .collect();
    let total_polls = |replicas: &[Option<Sidecar>]| -> f64 {
        replicas
            .iter()
            .flatten()
            .map(|r| polls_or_zero(r.addr, "ok"))
            .sum()
    };
    wait_for(LIMIT, "a first poll", || {
        (total_polls(&replicas) >= 1.0).then_some(())
    });
    let first = okta_log_event("uuid-rep-1", "user.lifecycle.deactivate", "00uREP1", None);
    api.with(|s| s.events.push(first));
    wait_pages_of(&hook, "provider_missed", "firing", 1);

    let leader = wait_for(LIMIT, "one leader", || {
        let leading: Vec<usize> = (0..3)
            .filter(|i| {
                replicas[*i].as_ref().is_some_and(|r| {
                    get(r.addr, "/v1/status").json()["replicas"]["is_leader"] == true
                })
            })
            .collect();
        (leading.len() == 1).then(|| leading[0])
    });
    let polling: Vec<usize> = (0..3)
        .filter(|i| polls_or_zero(replicas[*i].as_ref().unwrap().addr, "ok") > 0.0)
        .collect();
    assert_eq!(polling, [leader], "only the leader polls");
    // One more poll (the page recorded as sent), then the leader is killed;
    // another takes over from the stored link and finds the next one.
    let from = total_polls(&replicas);
    wait_for(LIMIT, "one more poll", || {
        (total_polls(&replicas) >= from + 1.0).then_some(())
    });
    let second = okta_log_event(
        "uuid-rep-2",
        "application.user_membership.remove",
        "00uREP2",
        None,
    );
    api.with(|s| s.events.push(second));
    replicas[leader].take().unwrap().kill9();
    let from = total_polls(&replicas);
    wait_pages_of(&hook, "provider_missed", "firing", 2);
    wait_for(LIMIT, "three more polls", || {
        (total_polls(&replicas) >= from + 3.0).then_some(())
    });
    let all = pages_of(&hook, "provider_missed");
    assert_eq!(all.len(), 2, "each finding paged once: {all:?}");
    assert!(all[0].2.contains("uuid-rep-1"), "{all:?}");
    assert!(
        all[1].2.contains("uuid-rep-2") && !all[1].2.contains("uuid-rep-1"),
        "{all:?}"
    );
    let asked = api.asked();
    assert_eq!(
        asked.iter().filter(|a| a.0.contains("since=")).count(),
        1,
        "since once across replicas: {asked:?}"
    );
    drop(replicas);
    drop(db);
}
