//! Issue #48: the Auth0 cross-check through the real binary (`serve` and
//! `hushwatch crosscheck`) against a local Auth0 tenant written here, which
//! answers in the shapes Auth0 documents:
//! - `POST /oauth/token` (client credentials; "Get Management API Access
//!   Tokens for Production",
//!   auth0.com/docs/secure/tokens/access-tokens/management-api-access-tokens/get-management-api-access-tokens-for-production):
//!   a form with `grant_type=client_credentials`, `client_id`,
//!   `client_secret`, `audience=<tenant>/api/v2/`; the answer
//!   `{"access_token", "token_type": "Bearer", "expires_in", "scope"}`,
//!   401 `access_denied` for a wrong secret;
//! - `GET /api/v2/logs` ("Retrieve Log Events Using the Management API",
//!   auth0.com/docs/deploy-monitor/logs/retrieve-log-events-using-mgmt-api):
//!   by checkpoint `from`/`take` (logs newer than `from`, by `log_id`, a bare
//!   array, a `Link: <…?from=…&take=…>; rel="next"`; nothing newer is `[]`
//!   with the `next` URL the one asked), and by search (`q=date:[… TO *]`,
//!   `date` a day, "Log Search Query Syntax",
//!   auth0.com/docs/deploy-monitor/logs/log-search-query-syntax;
//!   `sort=date:1`, `per_page`, `page`);
//! - `GET /api/v2/logs/{id}` (auth0.com/docs/api/management/v2/logs/get-logs-by-id):
//!   the log, or 404 "log not found" once retention dropped it;
//! - a 429 with `X-RateLimit-Reset` (Unix seconds) and `Date`, no
//!   `Retry-After` (Auth0's rate limit policy,
//!   auth0.com/docs/troubleshoot/customer-support/operational-policies/rate-limit-policy).
//!
//! A log is the tenant log schema's object (`log_id`, `date`, `type`,
//! `user_id`, `user_name`, `description`, …, auth0.com/docs/tenant-logs);
//! the Log Stream delivers the same object as `data` beside its `log_id`
//! ("Custom log streams", auth0.com/docs/customize/log-streams/custom-log-streams).

use crate::common::{get, request, wait_until, Sidecar, Workdir};
use crate::crosscheck::{pages_of, polls_or_zero, query, wait_pages_of, wait_polls};
use crate::support::Receiver;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

const CLIENT_ID: &str = "m2m_client_it_1";
const CLIENT_SECRET: &str = "m2m_secret_it_never_shown_5d1e";
const API_KEY: &str = "mgmt_token_it_never_shown_77aa";
const STREAM_AUTH: &str = "Bearer log-stream-secret-it";

/// The local tenant's state, changed by the tests.
#[derive(Default)]
struct Tenant {
    /// The logs, in `log_id` order.
    logs: Vec<serde_json::Value>,
    /// Log ids the tenant's retention dropped.
    gone: Vec<String>,
    /// Tokens issued, in order; the last one is the valid one.
    tokens: Vec<String>,
    /// `expires_in` of the tokens issued.
    expires_in: u64,
    /// Answer this many log requests with 429 first.
    throttle: usize,
    /// Every request: (method, target, authorization, body).
    requests: Vec<(String, String, Option<String>, String)>,
}

struct Auth0Api {
    addr: SocketAddr,
    tenant: Arc<Mutex<Tenant>>,
}

impl Auth0Api {
    /// Binds port 0 and keeps the listener for the test's whole life.
    fn start(expires_in: u64) -> Auth0Api {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let tenant = Arc::new(Mutex::new(Tenant {
            expires_in,
            ..Tenant::default()
        }));
        let shared = Arc::clone(&tenant);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || serve(conn, addr, &shared));
            }
        });
        Auth0Api { addr, tenant }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn with<T>(&self, f: impl FnOnce(&mut Tenant) -> T) -> T {
        f(&mut self.tenant.lock().unwrap())
    }

    fn requests(&self) -> Vec<(String, String, Option<String>, String)> {
        self.with(|t| t.requests.clone())
    }
}

fn serve(conn: TcpStream, base: SocketAddr, tenant: &Mutex<Tenant>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let (mut auth, mut length) = (None, 0usize);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim_end().is_empty() {
            break;
        }
        if let Some((name, value)) = h.trim_end().split_once(':') {
            if name.eq_ignore_ascii_case("authorization") {
                auth = Some(value.trim().to_owned());
            } else if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; length.min(64 * 1024)];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_owned();
    let target = parts.next().unwrap_or("").to_owned();
    let body = String::from_utf8_lossy(&body).into_owned();
    let (status, headers, reply) = {
        let mut t = tenant.lock().unwrap();
        t.requests
            .push((method.clone(), target.clone(), auth.clone(), body.clone()));
        respond(&method, &target, auth.as_deref(), &body, base, &mut t)
    };
    let mut conn = conn;
    let mut head = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let _ = write!(conn, "{head}\r\n{reply}");
    let _ = conn.flush();
}

fn unauthorized() -> (u16, Vec<(String, String)>, String) {
    (
        401,
        Vec::new(),
        r#"{"statusCode":401,"error":"Unauthorized","message":"Invalid token"}"#.into(),
    )
}

fn respond(
    method: &str,
    target: &str,
    auth: Option<&str>,
    body: &str,
    base: SocketAddr,
    t: &mut Tenant,
) -> (u16, Vec<(String, String)>, String) {
    if method == "POST" && target == "/oauth/token" {
        let form: std::collections::HashMap<String, String> =
            url::form_urlencoded::parse(body.as_bytes())
                .into_owned()
                .collect();
        let wanted_audience = format!("http://{base}/api/v2/");
        let ok = form.get("grant_type").map(String::as_str) == Some("client_credentials")
            && form.get("client_id").map(String::as_str) == Some(CLIENT_ID)
            && form.get("client_secret").map(String::as_str) == Some(CLIENT_SECRET)
            && form.get("audience") == Some(&wanted_audience);
        if !ok {
            return (
                401,
                Vec::new(),
                r#"{"error":"access_denied","error_description":"Unauthorized"}"#.into(),
            );
        }
        let token = format!("eyJ.it_token_{}", t.tokens.len());
        t.tokens.push(token.clone());
        let reply = serde_json::json!({"access_token": token, "token_type": "Bearer",
                                       "expires_in": t.expires_in, "scope": "read:logs"});
        return (200, Vec::new(), reply.to_string());
    }
    // Either the configured Management API token or the last token issued.
    let valid = match auth {
        Some(a) if a == format!("Bearer {API_KEY}") => true,
        Some(a) => t
            .tokens
            .last()
            .is_some_and(|tok| a == format!("Bearer {tok}")),
        None => false,
    };
    if !valid {
        return unauthorized();
    }
    if let Some(id) = target
        .strip_prefix("/api/v2/logs/")
        .map(|r| r.split('?').next().unwrap_or_default().to_owned())
    {
        let id = url::form_urlencoded::parse(format!("i={id}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
        if t.gone.contains(&id) {
            return (
                404,
                Vec::new(),
                r#"{"statusCode":404,"error":"Not Found","message":"log not found","errorCode":"inexistent_log"}"#.into(),
            );
        }
        return match t.logs.iter().find(|l| l["log_id"] == id.as_str()) {
            Some(l) => (200, Vec::new(), l.to_string()),
            None => (404, Vec::new(), r#"{"statusCode":404}"#.into()),
        };
    }
    if !target.starts_with("/api/v2/logs?") {
        return (404, Vec::new(), "{}".into());
    }
    if t.throttle > 0 {
        t.throttle -= 1;
        let now = chrono::Utc::now();
        return (
            429,
            vec![
                ("Date".into(), now.format("%a, %d %b %Y %H:%M:%S GMT").to_string()),
                ("X-RateLimit-Limit".into(), "2".into()),
                ("X-RateLimit-Remaining".into(), "0".into()),
                ("X-RateLimit-Reset".into(), (now.timestamp() + 1).to_string()),
            ],
            r#"{"statusCode":429,"error":"Too Many Requests","message":"Global limit has been reached"}"#.into(),
        );
    }
    let kept: Vec<&serde_json::Value> = t
        .logs
        .iter()
        .filter(|l| !t.gone.iter().any(|g| l["log_id"] == g.as_str()))
        .collect();
    if let Some(from) = query(target, "from") {
        let take: usize = query(target, "take")
            .and_then(|n| n.parse().ok())
            .unwrap_or(50);
        let page: Vec<&serde_json::Value> = kept
            .iter()
            .copied()
            .filter(|l| l["log_id"].as_str().unwrap() > from.as_str())
            .take(take)
            .collect();
        let next_from = page
            .last()
            .map_or(from.clone(), |l| l["log_id"].as_str().unwrap().to_owned());
        let link =
            format!("<http://{base}/api/v2/logs?from={next_from}&take={take}>; rel=\"next\"");
        let reply = serde_json::to_string(&page).unwrap();
        return (200, vec![("Link".into(), link)], reply);
    }
    // The first poll's search: the logs dated on or after the day of
    // `date:[YYYY-MM-DD TO *]`, in date order, `per_page` from `page`.
    assert_eq!(query(target, "sort").as_deref(), Some("date:1"), "{target}");
    let q = query(target, "q").unwrap_or_default();
    let since = q
        .strip_prefix("date:[")
        .and_then(|r| r.split(' ').next())
        .unwrap_or_default()
        .to_owned();
    let per_page: usize = query(target, "per_page")
        .and_then(|n| n.parse().ok())
        .unwrap_or(50);
    assert_eq!(since.len(), 10, "a day: {q}");
    let page_no: usize = query(target, "page")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let page: Vec<&serde_json::Value> = kept
        .iter()
        .copied()
        .filter(|l| l["date"].as_str().unwrap() >= since.as_str())
        .skip(page_no * per_page)
        .take(per_page)
        .collect();
    (200, Vec::new(), serde_json::to_string(&page).unwrap())
}

/// A tenant log entry of code `ty` about user `n`, logged now: Auth0's
/// ids are 56 decimal digits that grow with time.
fn log(seq: u32, ty: &str, user: u32) -> serde_json::Value {
    let now = chrono::Utc::now();
    serde_json::json!({
        "log_id": format!("900{}{seq:039}", now.format("%Y%m%d%H%M%S")),
        "date": now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "type": ty,
        "description": if ty == "sdu" { "User deleted" } else { "" },
        "client_id": "cli_dashboard", "client_name": "", "ip": "203.0.113.9",
        "user_id": format!("auth0|u{user}"), "user_name": format!("user{user}@example.com"),
        "hostname": "acme.auth0.com", "tenant_name": "acme",
    })
}

/// The config: `credentials` are the `[crosscheck]` credential lines.
fn auth0_config(api: &Auth0Api, hook: &Receiver, credentials: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[streams.identity]
calendar = "always"
silence_threshold = "30d"
notify = ["hook"]
[streams.identity.ingest]
provider = "auth0"
authorization = "{STREAM_AUTH}"
[streams.identity.crosscheck]
provider = "auth0"
api_url = "{api}"
{credentials}
every = "1s"
grace = "1s"

[notifiers.hook]
kind = "webhook"
url = "{hook}"
timeout = "2s"
backoff_initial = "1s"
"#,
        api = api.url(),
        hook = hook.url("/hook"),
    )
}

fn client_credentials() -> String {
    format!("client_id = \"{CLIENT_ID}\"\nclient_secret = \"{CLIENT_SECRET}\"")
}

/// Posts `record` to the stream as the Log Stream would.
fn stream_record(addr: SocketAddr, log: &serde_json::Value) {
    let record = serde_json::json!({"log_id": log["log_id"], "data": log});
    let reply = request(
        addr,
        "POST",
        "/v1/streams/identity/webhook",
        &[
            ("authorization", STREAM_AUTH),
            ("content-type", "application/json"),
        ],
        record.to_string().as_bytes(),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// No secret of the config, nor a token the tenant issued, anywhere a
/// person or a scraper looks.
fn assert_no_secret(server: &Sidecar, hook: &Receiver, api: &Auth0Api) {
    let tokens = api.with(|t| t.tokens.clone());
    let places = [
        ("stderr", server.stderr_text()),
        ("stdout", server.stdout_lines().join("\n")),
        ("metrics", get(server.addr, "/metrics").body),
        ("status", get(server.addr, "/v1/status").body),
        (
            "pages",
            hook.delivered_json()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
        ),
    ];
    for (place, text) in &places {
        for secret in [CLIENT_SECRET, API_KEY] {
            assert!(!text.contains(secret), "{secret} in {place}");
        }
        for token in &tokens {
            assert!(!text.contains(token.as_str()), "a token in {place}");
        }
    }
}

#[test]
fn serve_pages_a_log_the_stream_never_delivered_critical_with_its_user_and_not_the_delivered_one() {
    // Tokens live 62 s: renewed 60 s before, so each is used ~2 s.
    let api = Auth0Api::start(62);
    let hook = Receiver::start(vec![]);
    let work = Workdir::new(&auth0_config(&api, &hook, &client_credentials()));
    let server = Sidecar::start(&work.config_path());
    // The first poll finds no log after the watch start yet.
    wait_polls(&server, "ok", 1.0);

    // Two users deleted: the Log Stream delivers u1's record, never u2's.
    let delivered = log(1, "sdu", 1);
    let lost = log(2, "sdu", 2);
    stream_record(server.addr, &delivered);
    api.with(|t| {
        t.logs.push(delivered.clone());
        t.logs.push(lost.clone());
    });

    let firing = wait_pages_of(&hook, "provider_missed", "firing", 1);
    let (_, severity, summary) = &firing[0];
    assert_eq!(severity, "critical", "{summary}");
    assert!(
        summary.starts_with("1 change on stream identity"),
        "{summary}"
    );
    assert!(
        summary.contains(&format!(
            "Auth0 logged sdu (user deleted) {} for user auth0|u2 at ",
            lost["log_id"].as_str().unwrap()
        )),
        "{summary}"
    );
    assert!(!summary.contains("auth0|u1"), "{summary}");

    // Later polls: the empty page (`[]`, Link next to the same place) ends
    // each; nothing is paged again, and the token is renewed on expiry.
    wait_polls(&server, "ok", 4.0);
    assert_eq!(pages_of(&hook, "provider_missed").len(), 1, "paged once");
    let requests = api.requests();
    let last_id = lost["log_id"].as_str().unwrap();
    let from_last = requests
        .iter()
        .filter(|r| r.1 == format!("/api/v2/logs?from={last_id}&take=100"))
        .count();
    assert!(from_last >= 2, "{requests:?}");
    let token_requests: Vec<_> = requests.iter().filter(|r| r.1 == "/oauth/token").collect();
    assert!(token_requests.len() >= 2, "renewed: {token_requests:?}");
    let log_requests = requests
        .iter()
        .filter(|r| r.1.starts_with("/api/v2/logs"))
        .count();
    assert!(
        token_requests.len() < log_requests,
        "cached across polls: {requests:?}"
    );
    assert!(token_requests[0]
        .3
        .contains("grant_type=client_credentials"));
    assert!(requests
        .iter()
        .filter(|r| r.1.starts_with("/api/v2/logs"))
        .all(|r| r
            .2
            .as_deref()
            .is_some_and(|a| a.starts_with("Bearer eyJ.it_token_"))));
    assert_eq!(polls_or_zero(server.addr, "refused"), 0.0);
    assert_no_secret(&server, &hook, &api);
}

#[test]
fn a_refused_token_pages_critical_at_once_and_a_429_is_waited_out() {
    let api = Auth0Api::start(86_400);
    let hook = Receiver::start(vec![]);
    let work = Workdir::new(&auth0_config(
        &api,
        &hook,
        &format!("api_key = \"{API_KEY}\""),
    ));
    // The first log request is throttled (X-RateLimit-Reset, no
    // Retry-After): the poll waits it out and succeeds.
    api.with(|t| t.throttle = 1);
    let server = Sidecar::start(&work.config_path());
    wait_polls(&server, "ok", 1.0);
    assert_eq!(polls_or_zero(server.addr, "rate_limited"), 0.0);
    let answered_429 = api
        .requests()
        .iter()
        .filter(|r| r.1.starts_with("/api/v2/logs?"))
        .count();
    assert!(answered_429 >= 2, "the 429 and the retry");
    assert!(api
        .requests()
        .iter()
        .all(|r| r.2.as_deref() == Some(format!("Bearer {API_KEY}").as_str())));

    // The Management API token is revoked: critical at once.
    drop(server);
    let work = Workdir::new(&auth0_config(
        &api,
        &hook,
        "api_key = \"mgmt_token_revoked\"",
    ));
    let server = Sidecar::start(&work.config_path());
    let firing = wait_pages_of(&hook, "crosscheck_failing", "firing", 1);
    let (_, severity, summary) = &firing[0];
    assert_eq!(severity, "critical", "{summary}");
    assert!(
        summary.contains("the Auth0 API refused the key"),
        "{summary}"
    );
    assert_no_secret(&server, &hook, &api);
}

#[test]
fn a_checkpoint_the_retention_dropped_pages_critical_saying_so_and_restart_goes_on() {
    let api = Auth0Api::start(86_400);
    let hook = Receiver::start(vec![]);
    let work = Workdir::new(&auth0_config(&api, &hook, &client_credentials()));
    let server = Sidecar::start(&work.config_path());
    wait_polls(&server, "ok", 1.0);
    let first = log(1, "s", 1);
    stream_record(server.addr, &first);
    api.with(|t| t.logs.push(first.clone()));
    // A poll reads it, then the checkpoint is its id.
    wait_until("the checkpoint", || {
        api.requests()
            .iter()
            .any(|r| {
                r.1.contains(&format!("from={}", first["log_id"].as_str().unwrap()))
            })
            .then_some(())
    });
    // The poll that asked from it committed it.
    wait_polls(&server, "ok", 1.0);
    drop(server);

    // While the sidecar is down, Auth0's retention drops that log.
    let checkpoint = first["log_id"].as_str().unwrap().to_owned();
    api.with(|t| t.gone.push(checkpoint.clone()));
    let server = Sidecar::start(&work.config_path());
    let firing = wait_pages_of(&hook, "crosscheck_failing", "firing", 1);
    let (_, severity, summary) = &firing[0];
    assert_eq!(severity, "critical", "{summary}");
    assert!(
        summary.contains(&format!("Auth0 no longer keeps log {checkpoint}")),
        "{summary}"
    );
    assert!(summary.contains("retention"), "{summary}");
    let status = crate::common::stream_status(server.addr, "identity");
    let command = status["crosscheck"]["command"].as_str().unwrap_or_default();
    assert!(command.ends_with("--stream identity --restart"), "{status}");
    // Never a silent restart: the checkpoint stays, every poll fails.
    wait_polls(&server, "error", 2.0);
    assert_eq!(polls_or_zero(server.addr, "ok"), 0.0);
    assert!(pages_of(&hook, "provider_missed").is_empty());
    drop(server);

    // The command the page prints runs as printed, and the next poll goes
    // on from the oldest log kept.
    let printed = summary
        .split('`')
        .find(|part| part.starts_with("hushwatch crosscheck "))
        .unwrap_or_else(|| panic!("no command in {summary}"))
        .to_owned();
    assert!(printed.ends_with("--restart"), "{printed}");
    let out = std::process::Command::new("bash")
        .args([
            "-c",
            &printed.replacen("hushwatch", env!("CARGO_BIN_EXE_hushwatch"), 1),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{printed}: {err}");
    assert!(err.contains("checkpoint is cleared"), "{err}");
    let server = Sidecar::start(&work.config_path());
    let resolved = wait_pages_of(&hook, "crosscheck_failing", "resolved", 1);
    assert_eq!(resolved.len(), 1);
    assert_no_secret(&server, &hook, &api);
}

#[test]
fn a_sidecar_killed_and_restarted_pages_each_auth0_finding_once() {
    let api = Auth0Api::start(86_400);
    let hook = Receiver::start(vec![]);
    let work = Workdir::new(&auth0_config(&api, &hook, &client_credentials()));
    let server = Sidecar::start(&work.config_path());
    wait_polls(&server, "ok", 1.0);
    api.with(|t| t.logs.push(log(1, "sdu", 1)));
    wait_pages_of(&hook, "provider_missed", "firing", 1);
    server.kill9();

    let server = Sidecar::start(&work.config_path());
    api.with(|t| t.logs.push(log(2, "limit_wc", 2)));
    let second = wait_until("u2's page", || {
        pages_of(&hook, "provider_missed")
            .into_iter()
            .find(|p| p.2.contains("auth0|u2"))
    });
    server.kill9();
    let server = Sidecar::start(&work.config_path());
    wait_polls(&server, "ok", 3.0);
    let all = pages_of(&hook, "provider_missed");
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(
        all[0].2.contains("auth0|u1") && !all[0].2.contains("auth0|u2"),
        "{all:?}"
    );
    assert_eq!(all[1], second);
    assert!(second.2.contains("limit_wc (account blocked"), "{second:?}");
    assert_no_secret(&server, &hook, &api);
}

#[test]
fn three_replicas_on_postgresql_page_each_auth0_finding_once() {
    let _one = crate::common::pg::CLUSTERS
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let Some(db) = crate::common::pg::PgDb::create("crosscheck_auth0_replicas") else {
        return;
    };
    let api = Auth0Api::start(86_400);
    let hook = Receiver::start(vec![]);
    let config = auth0_config(&api, &hook, &client_credentials())
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
    wait_until("a first poll", || {
        (total_polls(&replicas) >= 1.0).then_some(())
    });
    // u1's record reaches one replica; u2's never arrives.
    let delivered = log(1, "sdu", 1);
    stream_record(replicas[2].as_ref().unwrap().addr, &delivered);
    api.with(|t| {
        t.logs.push(delivered.clone());
        t.logs.push(log(2, "sdu", 2));
    });
    wait_pages_of(&hook, "provider_missed", "firing", 1);

    // The leader is killed; another takes over and finds the next one.
    let leader = wait_until("one leader", || {
        let leading: Vec<usize> = (0..3)
            .filter(|i| {
                replicas[*i].as_ref().is_some_and(|r| {
                    get(r.addr, "/v1/status").json()["replicas"]["is_leader"] == true
                })
            })
            .collect();
        (leading.len() == 1).then(|| leading[0])
    });
    api.with(|t| t.logs.push(log(3, "limit_wc", 3)));
    replicas[leader].take().unwrap().kill9();
    let from = total_polls(&replicas);
    wait_pages_of(&hook, "provider_missed", "firing", 2);
    wait_until("three more polls", || {
        (total_polls(&replicas) >= from + 3.0).then_some(())
    });
    let all = pages_of(&hook, "provider_missed");
    assert_eq!(all.len(), 2, "each finding paged once: {all:?}");
    assert!(
        all[0].2.contains("auth0|u2") && !all[0].2.contains("auth0|u1"),
        "{all:?}"
    );
    assert!(
        all[1].2.contains("auth0|u3") && !all[1].2.contains("auth0|u2"),
        "{all:?}"
    );
    drop(replicas);
    drop(db);
}

/// The app's Authorization value: what the relay sends as Auth0's Log
/// Stream would send its configured token.
const APP_AUTH: &str = "Bearer app-side-log-stream-token-it";

#[test]
fn heal_sends_the_app_the_log_stream_record_never_streamed_with_the_forward_authorization_once() {
    let api = Auth0Api::start(86_400);
    let hook = Receiver::start(vec![]);
    let app = Receiver::start(vec![]);
    let config = auth0_config(
        &api,
        &hook,
        &format!("{}\nheal = true", client_credentials()),
    ) + &format!(
        "\n[streams.identity.forward]\nurl = \"{}\"\nsecret = \"{APP_AUTH}\"\ntimeout = \"2s\"\nretry = [\"1s\"]\n",
        app.url("/auth0")
    );
    let work = Workdir::new(&config);
    let server = Sidecar::start(&work.config_path());
    wait_polls(&server, "ok", 1.0);

    // u1's record arrives on the Log Stream and is relayed; u2's never does.
    let delivered = log(1, "sdu", 1);
    let lost = log(2, "sdu", 2);
    stream_record(server.addr, &delivered);
    api.with(|t| {
        t.logs.push(delivered.clone());
        t.logs.push(lost.clone());
    });
    let got = wait_until("the relayed and the healed record", || {
        let got = app.delivered();
        (got.len() >= 2).then_some(got)
    });
    for d in &got {
        assert_eq!(d.header("authorization"), Some(APP_AUTH), "{d:?}");
    }
    let by_id = |id: &serde_json::Value| -> Vec<crate::support::Received> {
        got.iter()
            .filter(|d| d.json()["log_id"] == *id)
            .cloned()
            .collect()
    };
    let relayed = by_id(&delivered["log_id"]);
    assert_eq!(relayed.len(), 1, "{got:?}");
    assert_eq!(relayed[0].header("hushwatch-origin"), None);
    let healed = by_id(&lost["log_id"]);
    assert_eq!(healed.len(), 1, "{got:?}");
    assert_eq!(
        healed[0].json(),
        serde_json::json!({"log_id": lost["log_id"], "data": lost}),
        "the Log Stream record of the logged entry"
    );
    assert_eq!(healed[0].header("hushwatch-origin"), Some("crosscheck"));
    wait_until("the heal counted", || {
        (crate::common::metric(
            server.addr,
            "hushwatch_crosscheck_healed_total{stream=\"identity\"}",
        ) >= 1.0)
            .then_some(())
    });

    // The Log Stream catches up after all: a duplicate, never sent again.
    stream_record(server.addr, &lost);
    wait_polls(&server, "ok", 3.0);
    let log_ids: Vec<serde_json::Value> = app
        .delivered()
        .iter()
        .map(|d| d.json()["log_id"].clone())
        .collect();
    assert_eq!(log_ids.len(), 2, "{log_ids:?}");
    assert_no_secret(&server, &hook, &api);
    assert!(!server.stderr_text().contains(APP_AUTH));
}
