//! Issue #48, Entra ID: `hushwatch serve` cross-checks a stream of Microsoft
//! Graph change notifications against Graph's delta queries, through the
//! real binary, with a local Microsoft identity platform token endpoint and
//! a local Graph answering in the documented shapes:
//! - token: `POST /{tenant}/oauth2/v2.0/token` with the client-credentials
//!   form, answering `{"token_type", "expires_in", "access_token"}` or
//!   `401 {"error": "invalid_client"}`
//!   (learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow);
//! - `GET /v1.0/users/delta` and `/v1.0/groups/delta` with `$select`, pages
//!   of `{"value": [...]}` ending in `@odata.nextLink` or `@odata.deltaLink`,
//!   deleted users as `{"id", "@removed": {"reason": "changed"}}`, disabled
//!   ones with `accountEnabled: false`, and membership changes in
//!   `members@delta` with `@removed` (microsoftgraph/microsoft-graph-docs-contrib:
//!   api-reference/v1.0/api/user-delta.md, api-reference/v1.0/api/group-delta.md,
//!   concepts/delta-query-groups.md);
//! - an expired link: `400 {"error": {"code": "syncStateNotFound"}}`
//!   (devblogs.microsoft.com/microsoft365dev, "Duration of change tracking
//!   tokens for identity and education resources");
//! - throttling: `429` with `Retry-After` (learn.microsoft.com/graph/throttling).
//!
//! Notifications are posted as Graph posts them (`{"value": [changeNotification]}`
//! with the subscription's `clientState`; api-reference/v1.0/resources/changenotification.md).
//! Every wait is on a condition (polls counted in /metrics, pages received).

use crate::common::{get, metric, request, wait_until, Sidecar, Workdir};
use crate::crosscheck::{pages_of, polls_or_zero, query, wait_pages_of, wait_polls};
use crate::support::{run_cli, Receiver};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

const TENANT: &str = "0b4f4c8e-1c4d-4c3a-9a62-3f1e2d5c6b7a";
const CLIENT_ID: &str = "6731de76-14a6-49ae-97bc-6eba6914391e";
const CLIENT_SECRET: &str = "Qx8Q~it.entra.client.secret.never.printed";
const ACCESS_TOKEN: &str = "eyJ0eXAiOiJKV1QiLCJpdF9lbnRyYV9hY2Nlc3NfdG9rZW4iOnRydWV9";
const CLIENT_STATE: &str = "it-entra-client-state";

/// The directory, its change log and how the local servers answer.
#[derive(Default)]
struct Directory {
    users: Vec<(String, bool)>,
    /// (group, members)
    groups: Vec<(String, Vec<String>)>,
    /// (seq, collection, object id, member id, what)
    log: Vec<(u64, &'static str, String, String, &'static str)>,
    seq: u64,
    /// Delta links issued before this seq answer `400 syncStateNotFound`.
    expired_before: u64,
    /// The token endpoint answers `401 invalid_client`.
    refuse_secret: bool,
    /// The next Graph request answers `429 Retry-After: 1`.
    throttle_next: bool,
    throttled: usize,
    /// Token requests' form bodies.
    token_forms: Vec<String>,
    /// (path, authorization) of every Graph request.
    graph_requests: Vec<(String, String)>,
}

impl Directory {
    fn change(&mut self, collection: &'static str, id: &str, member: &str, what: &'static str) {
        self.seq += 1;
        self.log
            .push((self.seq, collection, id.into(), member.into(), what));
        match what {
            "disabled" => self
                .users
                .iter_mut()
                .filter(|u| u.0 == id)
                .for_each(|u| u.1 = false),
            "deleted" => self.users.retain(|u| u.0 != id),
            _ => self
                .groups
                .iter_mut()
                .filter(|g| g.0 == id)
                .for_each(|g| g.1.retain(|m| m != member)),
        }
    }

    /// Forgets every delta link issued so far.
    fn expire_links(&mut self) {
        self.seq += 1;
        self.expired_before = self.seq;
    }
}

struct Graph {
    addr: SocketAddr,
    dir: Arc<Mutex<Directory>>,
}

impl Graph {
    fn start(dir: Directory) -> Graph {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let dir = Arc::new(Mutex::new(dir));
        let shared = Arc::clone(&dir);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || serve(conn, addr, &shared));
            }
        });
        Graph { addr, dir }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Directory) -> T) -> T {
        f(&mut self.dir.lock().unwrap())
    }
}

fn serve(conn: TcpStream, addr: SocketAddr, dir: &Mutex<Directory>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let (mut auth, mut length) = (String::new(), 0usize);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim_end().is_empty() {
            break;
        }
        if let Some((name, value)) = h.trim_end().split_once(':') {
            if name.eq_ignore_ascii_case("authorization") {
                auth = value.trim().to_owned();
            } else if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; length];
    let _ = reader.read_exact(&mut body);
    let target = line.split_whitespace().nth(1).unwrap_or("").to_owned();
    let (status, extra, reply) = {
        let mut d = dir.lock().unwrap();
        respond(
            &target,
            &auth,
            &String::from_utf8_lossy(&body),
            addr,
            &mut d,
        )
    };
    let mut conn = conn;
    let _ = write!(
        conn,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{reply}",
        reply.len()
    );
    let _ = conn.flush();
}

fn respond(
    target: &str,
    auth: &str,
    body: &str,
    addr: SocketAddr,
    d: &mut Directory,
) -> (u16, &'static str, String) {
    if target == format!("/{TENANT}/oauth2/v2.0/token") {
        d.token_forms.push(body.to_owned());
        if d.refuse_secret {
            return (
                401,
                "",
                r#"{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID.","error_codes":[7000215]}"#.into(),
            );
        }
        return (
            200,
            "",
            serde_json::json!({"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599,
                               "access_token": ACCESS_TOKEN})
            .to_string(),
        );
    }
    d.graph_requests.push((target.to_owned(), auth.to_owned()));
    if d.throttle_next {
        d.throttle_next = false;
        d.throttled += 1;
        return (
            429,
            "Retry-After: 1\r\n",
            r#"{"error":{"code":"TooManyRequests","message":"Too many requests."}}"#.into(),
        );
    }
    if auth != format!("Bearer {ACCESS_TOKEN}") {
        return (
            401,
            "",
            r#"{"error":{"code":"InvalidAuthenticationToken","message":"Access token is empty."}}"#
                .into(),
        );
    }
    let collection = if target.starts_with("/v1.0/users/delta?") {
        "users"
    } else if target.starts_with("/v1.0/groups/delta?") {
        "groups"
    } else {
        return (404, "", "{}".into());
    };
    // A next link carries only Graph's skip token; this one is
    // "<offset>-<delta token of the round, or empty for a full listing>".
    let round = query(target, "$deltatoken").or_else(|| {
        query(target, "$skiptoken")
            .and_then(|s| s.split_once('-').map(|(_, n)| n.to_owned()))
            .filter(|n| !n.is_empty())
    });
    let objects: Vec<serde_json::Value> = match round.clone() {
        Some(n) => {
            let n: u64 = n.parse().unwrap();
            if n < d.expired_before {
                return (
                    400,
                    "",
                    r#"{"error":{"code":"syncStateNotFound","message":"The sync state generation is not found. The delta token is expired and data must be synchronized again."}}"#.into(),
                );
            }
            d.log
                .iter()
                .filter(|c| c.0 > n && c.1 == collection)
                .map(|(_, _, id, member, what)| match *what {
                    "disabled" => serde_json::json!({"id": id, "displayName": id,
                        "userPrincipalName": format!("{id}@contoso.com"), "accountEnabled": false}),
                    "deleted" => serde_json::json!({"id": id, "@removed": {"reason": "changed"}}),
                    _ => serde_json::json!({"id": id, "displayName": id, "members@delta": [
                        {"@odata.type": "#microsoft.graph.user", "id": member, "@removed": {"reason": "deleted"}}]}),
                })
                .collect()
        }
        None if collection == "users" => {
            // The first request of a round carries the `$select`; its next
            // links carry Graph's skip token instead.
            if query(target, "$skiptoken").is_none() {
                assert_eq!(
                    query(target, "$select").as_deref(),
                    Some("id,displayName,userPrincipalName,accountEnabled")
                );
            }
            d.users
                .iter()
                .map(|(id, on)| {
                    serde_json::json!({"id": id, "displayName": id,
                    "userPrincipalName": format!("{id}@contoso.com"), "accountEnabled": on})
                })
                .collect()
        }
        None => {
            // The first request of a round carries the `$select`; its next
            // links carry Graph's skip token instead.
            if query(target, "$skiptoken").is_none() {
                assert_eq!(
                    query(target, "$select").as_deref(),
                    Some("id,displayName,members")
                );
            }
            d.groups
                .iter()
                .map(|(id, members)| {
                    let members: Vec<serde_json::Value> = members
                        .iter()
                        .map(|m| serde_json::json!({"@odata.type": "#microsoft.graph.user", "id": m}))
                        .collect();
                    serde_json::json!({"id": id, "displayName": id, "members@delta": members})
                })
                .collect()
        }
    };
    // Two objects a page, so every round follows a next link.
    let skip: usize = query(target, "$skiptoken")
        .and_then(|s| s.split('-').next().and_then(|n| n.parse().ok()))
        .unwrap_or(0);
    let page: Vec<serde_json::Value> = objects.iter().skip(skip).take(2).cloned().collect();
    let mut reply = serde_json::json!({
        "@odata.context": format!("https://graph.microsoft.com/v1.0/$metadata#{collection}"),
        "value": page,
    });
    if skip + 2 < objects.len() {
        reply["@odata.nextLink"] = format!(
            "http://{addr}/v1.0/{collection}/delta?$skiptoken={}-{}",
            skip + 2,
            round.unwrap_or_default()
        )
        .into();
    } else {
        reply["@odata.deltaLink"] = format!(
            "http://{addr}/v1.0/{collection}/delta?$deltatoken={}",
            d.seq
        )
        .into();
    }
    (200, "", reply.to_string())
}

fn directory() -> Directory {
    Directory {
        users: ["u1", "u2", "u3", "u4", "u5"]
            .iter()
            .map(|u| ((*u).to_owned(), true))
            .collect(),
        groups: vec![
            ("g1".into(), vec!["u1".into(), "u2".into(), "u3".into()]),
            ("g2".into(), vec!["u4".into()]),
            ("g3".into(), vec!["u5".into()]),
        ],
        ..Directory::default()
    }
}

fn entra_config(graph: &Graph, hook: &Receiver) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[streams.identity]
calendar = "always"
silence_threshold = "30d"
notify = ["hook"]
[streams.identity.ingest]
provider = "entra"
client_state = "{CLIENT_STATE}"
[streams.identity.crosscheck]
provider = "entra"
tenant_id = "{TENANT}"
client_id = "{CLIENT_ID}"
client_secret = "{CLIENT_SECRET}"
token_url = "http://{addr}/{TENANT}/oauth2/v2.0/token"
api_url = "http://{addr}/v1.0"
every = "1s"
grace = "3s"

[notifiers.hook]
kind = "webhook"
url = "{hook}"
timeout = "2s"
backoff_initial = "1s"
"#,
        addr = graph.addr,
        hook = hook.url("/hook"),
    )
}

/// Posts one change notification about `resource` as Graph sends it.
fn notify(addr: SocketAddr, change: &str, resource: &str, id: &str) {
    let body = serde_json::json!({"value": [{
        "subscriptionId": "7f105c7d-2dc5-4530-97cd-4e7ae6534c07",
        "subscriptionExpirationDateTime": (chrono::Utc::now() + chrono::TimeDelta::days(2)).to_rfc3339(),
        "changeType": change,
        "resource": resource,
        "resourceData": {"@odata.type": "#Microsoft.Graph.User", "@odata.id": resource, "id": id},
        "clientState": CLIENT_STATE,
        "tenantId": TENANT,
    }]});
    let reply = request(
        addr,
        "POST",
        "/v1/streams/identity/webhook",
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert!(
        (200..300).contains(&reply.status),
        "notification: {} {}",
        reply.status,
        reply.body
    );
}

/// Neither secret the sidecar holds shows anywhere a person or a scraper
/// looks.
fn assert_no_secret(server: &Sidecar, hook: &Receiver) {
    let seen = [
        server.stderr_text(),
        server.stdout_lines().join("\n"),
        get(server.addr, "/metrics").body,
        get(server.addr, "/v1/status").body,
        get(server.addr, "/").body,
        format!("{:?}", hook.received()),
    ];
    for text in seen {
        assert!(
            !text.contains(CLIENT_SECRET),
            "the client secret leaked: {text}"
        );
        assert!(
            !text.contains(ACCESS_TOKEN),
            "the access token leaked: {text}"
        );
    }
}

#[test]
fn serve_pages_an_entra_revocation_no_notification_reported_naming_user_and_group_once() {
    let graph = Graph::start(directory());
    let hook = Receiver::start(vec![]);
    let work = Workdir::new(&entra_config(&graph, &hook));
    let server = Sidecar::start(&work.config_path());
    // The baseline: the whole directory, nothing paged.
    wait_polls(&server, "ok", 1.0);
    assert!(pages_of(&hook, "provider_missed").is_empty());

    // Notified: u1 leaves g1, u2 is disabled. Not notified: u4 leaves g2,
    // u5 is deleted (and so leaves g3). The notifications go first, so no
    // poll sees a change before its notification arrived.
    notify(server.addr, "updated", "groups/g1", "g1");
    notify(server.addr, "updated", "Users/u2", "u2");
    graph.with(|d| {
        d.change("groups", "g1", "u1", "member-removed");
        d.change("users", "u2", "", "disabled");
        d.change("groups", "g2", "u4", "member-removed");
        d.change("users", "u5", "", "deleted");
        d.change("groups", "g3", "u5", "member-removed");
        // Graph throttles one request; the poll waits it out.
        d.throttle_next = true;
    });

    // One poll may read /users/delta before the changes and /groups/delta
    // after them, so the three findings may come in one page or two.
    let wanted = [
        "Entra ID removed member u4 from group g2",
        "Entra ID deleted user u5",
        "Entra ID removed member u5 from group g3",
    ];
    let firing = wait_until("pages naming the three findings", || {
        let pages = pages_of(&hook, "provider_missed");
        let all: String = pages.iter().map(|p| p.2.as_str()).collect();
        wanted.iter().all(|w| all.contains(w)).then_some(pages)
    });
    let config_path = work.config_path().display().to_string();
    for (status, severity, summary) in &firing {
        assert_eq!(
            (status.as_str(), severity.as_str()),
            ("firing", "critical"),
            "{summary}"
        );
        // (Patterns, not bare ids: the printed config path is random.)
        for absent in ["member u1 ", "user u2 ", "group g1 "] {
            assert!(
                !summary.contains(absent),
                "{absent} was notified: {summary}"
            );
        }
        assert!(
            summary.contains(&format!(
                "`hushwatch crosscheck --config {config_path} --stream identity`"
            )),
            "{summary}"
        );
    }
    assert_eq!(
        metric(
            server.addr,
            "hushwatch_crosscheck_missed_total{direction=\"revoke\",stream=\"identity\"}"
        ),
        3.0
    );
    // Later polls page nothing new: each finding is named once.
    wait_polls(&server, "ok", 3.0);
    let pages = pages_of(&hook, "provider_missed");
    assert_eq!(pages.len(), firing.len(), "{pages:?}");
    for w in wanted {
        let named = pages.iter().filter(|p| p.2.contains(w)).count();
        assert_eq!(named, 1, "{w}: {pages:?}");
    }

    graph.with(|d| {
        assert!(d.throttled >= 1);
        // One client-credentials sign-in, its form as documented; the
        // token is reused while it is valid.
        assert_eq!(d.token_forms.len(), 1, "{:?}", d.token_forms);
        let form: std::collections::HashMap<String, String> =
            url::form_urlencoded::parse(d.token_forms[0].as_bytes())
                .into_owned()
                .collect();
        assert_eq!(form["grant_type"], "client_credentials");
        assert_eq!(form["client_id"], CLIENT_ID);
        assert_eq!(form["client_secret"], CLIENT_SECRET);
        assert_eq!(form["scope"], "https://graph.microsoft.com/.default");
        assert!(d
            .graph_requests
            .iter()
            .all(|(_, auth)| *auth == format!("Bearer {ACCESS_TOKEN}")));
    });
    assert_no_secret(&server, &hook);
}

#[test]
fn an_expired_delta_link_resyncs_from_a_full_listing_with_a_warning_and_no_false_findings() {
    let graph = Graph::start(directory());
    let hook = Receiver::start(vec![]);
    let work = Workdir::new(&entra_config(&graph, &hook));
    let server = Sidecar::start(&work.config_path());
    wait_polls(&server, "ok", 1.0);
    // Changes no notification reported, then every link forgotten: the
    // next poll cannot see them as changes and must not guess.
    graph.with(|d| {
        d.change("users", "u1", "", "deleted");
        d.change("groups", "g1", "u2", "member-removed");
        d.expire_links();
    });
    let firing = wait_pages_of(&hook, "crosscheck_failing", "firing", 1);
    let (_, severity, summary) = &firing[0];
    assert_eq!(severity, "warning", "{summary}");
    assert!(summary.contains("syncStateNotFound"), "{summary}");
    assert!(summary.contains("as a new baseline"), "{summary}");
    // The next ordinary poll resolves it; nothing was paged as missed.
    wait_pages_of(&hook, "crosscheck_failing", "resolved", 1);
    wait_polls(&server, "ok", 2.0);
    assert!(pages_of(&hook, "provider_missed").is_empty());
    // The full listing was asked again from the start.
    graph.with(|d| {
        let fresh = d
            .graph_requests
            .iter()
            .filter(|(p, _)| p.starts_with("/v1.0/users/delta?$select="))
            .count();
        assert!(fresh >= 2, "{:?}", d.graph_requests);
    });
}

#[test]
fn a_refused_client_secret_pages_critical_at_once_and_never_shows_the_secret() {
    let graph = Graph::start(Directory {
        refuse_secret: true,
        ..directory()
    });
    let hook = Receiver::start(vec![]);
    let work = Workdir::new(&entra_config(&graph, &hook));
    let server = Sidecar::start(&work.config_path());
    let firing = wait_pages_of(&hook, "crosscheck_failing", "firing", 1);
    let (_, severity, summary) = &firing[0];
    assert_eq!(severity, "critical", "{summary}");
    assert!(
        summary.contains("the Entra ID API refused the key"),
        "{summary}"
    );
    assert!(summary.contains("client_id and client_secret"), "{summary}");
    wait_polls(&server, "refused", 1.0);
    graph.with(|d| d.refuse_secret = false);
    wait_pages_of(&hook, "crosscheck_failing", "resolved", 1);
    assert_no_secret(&server, &hook);
    // The CLI says the same without the secret.
    graph.with(|d| d.refuse_secret = true);
    server.stop();
    let (code, out, err) = run_cli(
        &["crosscheck", "--stream", "identity", "--dry-run"],
        &work.config_path(),
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("refused"), "{err}");
    assert!(!format!("{out}{err}").contains(CLIENT_SECRET));
}

#[test]
fn a_sidecar_killed_and_restarted_pages_each_entra_finding_once() {
    let graph = Graph::start(directory());
    let hook = Receiver::start(vec![]);
    let work = Workdir::new(&entra_config(&graph, &hook));
    let server = Sidecar::start(&work.config_path());
    wait_polls(&server, "ok", 1.0);
    graph.with(|d| d.change("users", "u3", "", "disabled"));
    // Killed while u3's change waits for its grace.
    wait_polls(&server, "ok", 1.0);
    server.kill9();

    let server = Sidecar::start(&work.config_path());
    let first = wait_pages_of(&hook, "provider_missed", "firing", 1);
    assert!(
        first[0].2.contains("Entra ID disabled user u3"),
        "{first:?}"
    );
    graph.with(|d| d.change("groups", "g1", "u1", "member-removed"));
    let second = wait_until("u1's page", || {
        pages_of(&hook, "provider_missed")
            .into_iter()
            .find(|p| p.2.contains("u1 from group g1"))
    });
    server.kill9();
    let server = Sidecar::start(&work.config_path());
    wait_polls(&server, "ok", 3.0);
    let mut all = pages_of(&hook, "provider_missed");
    // A kill between the notifier's delivery and its record redelivers
    // that same page (notifications are at least once); what must not
    // happen is a finding in a second, different page.
    all.dedup();
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(!all[0].2.contains("member u1 "), "{all:?}");
    assert_eq!(all[1], second);
    drop(server);
}

#[test]
fn check_refuses_an_entra_table_without_its_sign_in_keys_naming_each() {
    let graph = Graph::start(directory());
    let hook = Receiver::start(vec![]);
    let text = entra_config(&graph, &hook)
        .replace(&format!("client_secret = \"{CLIENT_SECRET}\"\n"), "")
        .replace(
            &format!("client_id = \"{CLIENT_ID}\"\n"),
            "api_key = \"k\"\n",
        );
    let work = Workdir::new(&text);
    let (code, out, err) = run_cli(&["check"], &work.config_path());
    assert_eq!(code, 2, "{out}{err}");
    for key in [
        "client_id: is required",
        "client_secret: is required",
        "api_key: is not used",
    ] {
        assert!(
            err.contains(&format!("streams.identity.crosscheck.{key}")),
            "{key}: {err}"
        );
    }
}

#[test]
fn three_replicas_on_postgresql_poll_entra_once_and_page_each_finding_once() {
    let _one = crate::common::pg::CLUSTERS
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let Some(db) = crate::common::pg::PgDb::create("crosscheck_entra_replicas") else {
        return;
    };
    let graph = Graph::start(directory());
    let hook = Receiver::start(vec![]);
    let config = entra_config(&graph, &hook)
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
    wait_until("the baseline poll", || {
        (total_polls(&replicas) >= 1.0).then_some(())
    });
    graph.with(|d| d.change("users", "u1", "", "deleted"));
    wait_pages_of(&hook, "provider_missed", "firing", 1);

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
    let polling: Vec<usize> = (0..3)
        .filter(|i| polls_or_zero(replicas[*i].as_ref().unwrap().addr, "ok") > 0.0)
        .collect();
    assert_eq!(polling, [leader], "only the leader polls");
    // The leader is killed; another takes over from the stored links and
    // finds the next change, and nothing twice.
    graph.with(|d| d.change("groups", "g2", "u4", "member-removed"));
    replicas[leader].take().unwrap().kill9();
    let from = total_polls(&replicas);
    wait_until("u4's page", || {
        pages_of(&hook, "provider_missed")
            .into_iter()
            .find(|p| p.2.contains("member u4 from group g2"))
    });
    wait_until("three more polls", || {
        (total_polls(&replicas) >= from + 3.0).then_some(())
    });
    let mut all = pages_of(&hook, "provider_missed");
    // (The same page redelivered after the kill is at-least-once delivery,
    // not a second page.)
    all.dedup();
    assert_eq!(all.len(), 2, "each finding paged once: {all:?}");
    assert!(all[0].2.contains("Entra ID deleted user u1"), "{all:?}");
    assert!(!all[1].2.contains("user u1 "), "{all:?}");
    // The new leader resumed from the stored delta links: no second
    // baseline (each fresh round starts with a `$select` request).
    graph.with(|d| {
        let fresh = d
            .graph_requests
            .iter()
            .filter(|(p, _)| p.starts_with("/v1.0/users/delta?$select="))
            .count();
        assert_eq!(fresh, 1, "{:?}", d.graph_requests);
    });
    drop(replicas);
    drop(db);
}

#[test]
fn a_reauthorization_required_notice_polls_at_once_whatever_every_says() {
    let graph = Graph::start(directory());
    let hook = Receiver::start(vec![]);
    let text = entra_config(&graph, &hook).replace("every = \"1s\"", "every = \"1h\"");
    let work = Workdir::new(&text);
    let server = Sidecar::start(&work.config_path());
    // The first poll, counted from zero: with `every = "1h"` there is no
    // second one to wait for.
    wait_until("the first poll", || {
        (polls_or_zero(server.addr, "ok") >= 1.0).then_some(())
    });
    graph.with(|d| d.change("users", "u1", "", "deleted"));
    // Graph's lifecycle notice (api-reference/v1.0/resources/changenotification.md,
    // `lifecycleEvent`): notifications may have stopped, so ask Graph now
    // rather than in an hour.
    let body = serde_json::json!({"value": [{
        "subscriptionId": "7f105c7d-2dc5-4530-97cd-4e7ae6534c07",
        "subscriptionExpirationDateTime": (chrono::Utc::now() + chrono::TimeDelta::days(2)).to_rfc3339(),
        "lifecycleEvent": "reauthorizationRequired",
        "clientState": CLIENT_STATE,
        "tenantId": TENANT,
    }]});
    let reply = request(
        server.addr,
        "POST",
        "/v1/streams/identity/webhook",
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert!(
        (200..300).contains(&reply.status),
        "{} {}",
        reply.status,
        reply.body
    );
    wait_until("a poll after the notice", || {
        (polls_or_zero(server.addr, "ok") >= 2.0).then_some(())
    });
    graph.with(|d| {
        assert!(
            d.graph_requests
                .iter()
                .any(|(p, _)| p.starts_with("/v1.0/users/delta?$deltatoken=")),
            "{:?}",
            d.graph_requests
        );
    });
}
