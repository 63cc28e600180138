//! Relay mode end to end (issue #29): the real `hushwatch serve` binary
//! between a signed sender (the test, as Clerk/Svix) and a real app,
//! `tests/support/relay_app.py`, which verifies every forward with the
//! official Standard Webhooks library (`standardwebhooks`, on both the
//! `webhook-*` and the `svix-*` headers) and can be told to answer 502
//! (`down`), to hang, or to accept (`up`).
//!
//! The library checks `webhook-timestamp` against the real wall clock
//! (±5 minutes), so every test runs the real binary on the real clock with
//! second-long ladders. Waits are on what a person would look at:
//! `/v1/status` `streams[].forward`, the log notifier's pages on stdout,
//! the app's own record of what it verified. PostgreSQL tests take
//! `HUSHWATCH_TEST_PG_URL` (scripts/test-postgres) and skip without it,
//! unless `HUSHWATCH_REQUIRE_PG=1`.

use crate::common::pg;
use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{get, request, wait_for, wait_until, InProcess, Sidecar, Workdir};
use serde_json::{json, Value};
use support::{post_signed_webhook, wait_listening, Proc};

/// The provider's (Clerk's) endpoint secret: the test signs with it.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The app's own secret: hushwatch signs forwards with it, the app verifies.
const APP_SECRET: &str = "whsec_+zPUtq55XAYZ3Ur7mJIL5Mb+uBY8OctQ";
/// Two `[store] encryption_key`s (32 random bytes each, base64).
const KEY_A: &str = "um2OaoWEF0TddEPJlTk2qckZJQyELZw5v+2C2Q/jcVw=";
const KEY_B: &str = "zVJn/Qhi1v7AvrX3Mgq5tSWH/XZEM3ePiwKYDEPsVyI=";
const ADMIN: &str = "relay-admin-token-1";

/// Every wait; generous, the machine is shared. A lease after a kill -9
/// ends `timeout` + 30 s after the claim, so those tests wait longer.
const LIMIT: Duration = Duration::from_secs(90);
const LEASE_LIMIT: Duration = Duration::from_secs(150);

// ------------------------------------------------------------------- the app

/// One delivery the app verified (both header sets), in arrival order.
#[derive(Debug, Clone)]
struct Delivery {
    id: String,
    body: String,
    attempt: u32,
    /// Answered 2xx (`up`); false: the app hung on it (`hang`).
    answered: bool,
}

struct RelayApp {
    _proc: Proc,
    addr: SocketAddr,
}

impl RelayApp {
    fn start() -> RelayApp {
        let ok = Command::new("python3")
            .args(["-c", "import standardwebhooks"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "standardwebhooks is missing: run scripts/test-components to install the test components"
        );
        let child = Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/support/relay_app.py"
            ))
            .arg(APP_SECRET)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start python3");
        let mut proc = Proc(child, "relay_app.py".into());
        let port = wait_listening(&mut proc);
        RelayApp {
            _proc: proc,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    fn url(&self) -> String {
        format!("http://{}/webhooks", self.addr)
    }

    fn control(&self, body: Value) {
        let reply = request(
            self.addr,
            "POST",
            "/control",
            &[("content-type", "application/json")],
            body.to_string().as_bytes(),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
    }

    fn mode(&self, mode: &str) {
        self.control(json!({ "mode": mode }));
    }

    fn deliveries(&self) -> Vec<Delivery> {
        let reply = get(self.addr, "/deliveries");
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|d| Delivery {
                id: d["id"].as_str().unwrap_or_default().to_owned(),
                body: d["body"].as_str().unwrap_or_default().to_owned(),
                attempt: d["attempt"]
                    .as_str()
                    .and_then(|a| a.parse().ok())
                    .unwrap_or(0),
                answered: d["answered"] == true,
            })
            .collect()
    }

    /// The ids it accepted (2xx), each once, in first-acceptance order.
    fn accepted_ids(&self) -> Vec<String> {
        first_seen(self.deliveries().iter().filter(|d| d.answered))
    }

    /// Waits until every id in `sent` was accepted; returns all deliveries.
    fn wait_accepted(&self, limit: Duration, sent: &[Sent]) -> Vec<Delivery> {
        wait_for(limit, "every sent event accepted by the app", || {
            let all = self.deliveries();
            let accepted: BTreeSet<&str> = all
                .iter()
                .filter(|d| d.answered)
                .map(|d| d.id.as_str())
                .collect();
            sent.iter()
                .all(|s| accepted.contains(s.id.as_str()))
                .then_some(all)
        })
    }
}

/// Ids in order of first appearance.
fn first_seen<'a>(ds: impl Iterator<Item = &'a Delivery>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    ds.filter(|d| seen.insert(d.id.clone()))
        .map(|d| d.id.clone())
        .collect()
}

/// At least once, never under another id: each id the app saw is one we
/// sent, with exactly the bytes we sent under it.
fn assert_ids_match_bodies(all: &[Delivery], sent: &[Sent]) {
    let by_id: BTreeMap<&str, &str> = sent
        .iter()
        .map(|s| (s.id.as_str(), s.body.as_str()))
        .collect();
    for d in all {
        let body = by_id
            .get(d.id.as_str())
            .unwrap_or_else(|| panic!("the app got an id nobody sent: {d:?}"));
        assert_eq!(&d.body, body, "id {} carried another event's body", d.id);
    }
    let ids: BTreeSet<&str> = all.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, by_id.keys().copied().collect(), "ids seen != ids sent");
}

// ---------------------------------------------------------------- the sender

#[derive(Debug, Clone)]
struct Sent {
    id: String,
    body: String,
}

/// A Clerk-shaped event; `user` is the subject id, `email` a field that is
/// not one (the encryption tests look for it on disk).
fn clerk_event(kind: &str, user: &str, email: &str) -> String {
    json!({
        "type": kind,
        "object": "event",
        "timestamp": chrono::Utc::now().timestamp_millis(),
        "data": {
            "object": "user",
            "id": user,
            "email_addresses": [{ "email_address": email }],
        },
    })
    .to_string()
}

/// Posts one signed delivery as Svix does; it must be acknowledged (2xx).
fn send(addr: SocketAddr, id: &str, body: &str) -> Sent {
    let ts = chrono::Utc::now().timestamp();
    let status = post_signed_webhook(addr, "identity", SECRET, id, ts, body);
    assert!(
        (200..300).contains(&status),
        "delivery {id} not acknowledged: {status}"
    );
    Sent {
        id: id.to_owned(),
        body: body.to_owned(),
    }
}

/// `n` events, user.created and user.deleted alternating, ids `{tag}-{i}`.
fn send_many(addrs: &[SocketAddr], tag: &str, n: usize) -> Vec<Sent> {
    (0..n)
        .map(|i| {
            let kind = if i % 2 == 0 {
                "user.created"
            } else {
                "user.deleted"
            };
            let body = clerk_event(kind, &format!("user_{tag}_{i}"), "someone@example.com");
            send(addrs[i % addrs.len()], &format!("msg_{tag}_{i}"), &body)
        })
        .collect()
}

// ---------------------------------------------------------------- hushwatch

/// `n` one-second retry steps (the last one repeats until
/// `give_up_after`).
fn ladder(n: usize) -> String {
    let steps = vec!["\"1s\""; n].join(", ");
    format!("retry = [{steps}]")
}

/// [`ladder`], one event in flight per stream (`ordered = "stream"`, what
/// `true` meant before per-subject order): the tests of arrival order
/// across different users.
fn stream_ordered(n: usize) -> String {
    format!("{}\nordered = \"stream\"", ladder(n))
}

/// One stream `identity` (Standard Webhooks ingest) forwarding to `app`,
/// pages to the log notifier (stdout). `stream` and `forward` are extra
/// lines of those tables; `extra` more tables (e.g. `[store]`).
fn relay_config(app: &RelayApp, stream: &str, forward: &str, extra: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"
admin_token = "{ADMIN}"

[streams.identity]
notify = ["stdout"]
{stream}
[streams.identity.ingest]
webhook_secret = "{SECRET}"

[streams.identity.forward]
url = "{url}"
secret = "{APP_SECRET}"
timeout = "2s"
{forward}

[notifiers.stdout]
kind = "log"

{extra}
"#,
        url = app.url(),
    )
}

const ALWAYS_1H: &str = "calendar = \"always\"\nsilence_threshold = \"1h\"";

/// The stream's `forward` block in `/v1/status`.
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

fn num(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// The log notifier's pages of `kind` (JSON lines on stdout).
fn pages(hw: &Sidecar, kind: &str) -> Vec<Value> {
    hw.stdout_lines()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|p| p["alert_kind"] == kind)
        .collect()
}

fn with_status<'a>(pages: &'a [Value], status: &str) -> Vec<&'a Value> {
    pages.iter().filter(|p| p["status"] == status).collect()
}

fn cli(args: &[&str], config: &Path) -> (i32, String, String) {
    crate::common::cli(args)
        .config(config)
        .env("HUSHWATCH_ADMIN_TOKEN", ADMIN)
        .run()
}

// --------------------------------------------------------------------- tests

#[test]
fn an_app_down_for_several_retries_gets_every_event_afterwards_in_order_under_its_id() {
    let app = RelayApp::start();
    app.mode("down");
    let work = Workdir::new(&relay_config(&app, ALWAYS_1H, &stream_ordered(60), ""));
    let hw = Sidecar::start(&work.config_path());

    let sent = send_many(&[hw.addr], "down", 6);
    wait_for(LIMIT, "4 failed attempts while the app is down", || {
        let f = forward(hw.addr);
        (num(&f, "consecutive_failures") >= 4).then_some(())
    });
    let f = forward(hw.addr);
    assert_eq!(num(&f, "pending"), 6, "{f}");
    assert!(f["last_delivered_at"].is_null(), "{f}");
    assert!(f["last_error"].as_str().unwrap().contains("502"), "{f}");

    app.mode("up");
    let all = app.wait_accepted(LIMIT, &sent);
    let order: Vec<String> = sent.iter().map(|s| s.id.clone()).collect();
    assert_eq!(app.accepted_ids(), order, "delivered out of arrival order");
    assert_ids_match_bodies(&all, &sent);
    // The head was tried on every step of the outage, under the same id.
    let head = all.iter().find(|d| d.id == order[0]).unwrap();
    assert!(head.attempt >= 5, "{head:?}");
    let f = wait_for(LIMIT, "status to show the backlog delivered", || {
        let f = forward(hw.addr);
        (num(&f, "pending") == 0).then_some(f)
    });
    assert_eq!(num(&f, "consecutive_failures"), 0, "{f}");
    assert!(f["last_delivered_at"].is_string(), "{f}");
}

#[test]
fn consecutive_failures_page_once_at_each_step_then_resolve_once() {
    let app = RelayApp::start();
    app.mode("down");
    let forward_extra = format!("{}\nordered = false\nalert_after = [1, 5, 20]", ladder(60));
    let work = Workdir::new(&relay_config(&app, ALWAYS_1H, &forward_extra, ""));
    let hw = Sidecar::start(&work.config_path());

    let sent = send_many(&[hw.addr], "pages", 5);
    // Past the last step, so a second critical page would have had its chance.
    wait_for(
        LIMIT,
        "25 consecutive failures and the critical page",
        || {
            let failures = num(&forward(hw.addr), "consecutive_failures");
            let critical = with_status(&pages(&hw, "forward_failing"), "firing")
                .iter()
                .any(|p| p["severity"] == "critical");
            (failures >= 25 && critical).then_some(())
        },
    );
    app.mode("up");
    app.wait_accepted(LIMIT, &sent);
    wait_for(LIMIT, "the resolve page", || {
        (!with_status(&pages(&hw, "forward_failing"), "resolved").is_empty()).then_some(())
    });

    let all = pages(&hw, "forward_failing");
    let firing: Vec<&str> = with_status(&all, "firing")
        .iter()
        .map(|p| p["severity"].as_str().unwrap())
        .collect();
    assert_eq!(firing, ["warning", "warning", "critical"], "{all:#?}");
    assert_eq!(with_status(&all, "resolved").len(), 1, "{all:#?}");
    // The page names the app's answer and the oldest undelivered event.
    let first = with_status(&all, "firing")[0]["summary"].to_string();
    assert!(first.contains("502"), "{first}");
    assert!(first.contains("user.created"), "{first}");
}

#[test]
fn a_dead_letter_pages_and_a_replay_delivers_it_under_its_original_id() {
    let app = RelayApp::start();
    app.mode("down");
    let forward_extra = format!("{}\ngive_up_after = \"3s\"", ladder(60));
    let work = Workdir::new(&relay_config(&app, ALWAYS_1H, &forward_extra, ""));
    let hw = Sidecar::start(&work.config_path());
    let from = chrono::Utc::now() - chrono::TimeDelta::minutes(1);

    let body = clerk_event("user.deleted", "user_dead_1", "dead@example.com");
    let sent = vec![send(hw.addr, "msg_dead_1", &body)];
    let page = wait_for(LIMIT, "the dead-letter page", || {
        pages(&hw, "forward_dead_letter")
            .into_iter()
            .find(|p| p["status"] == "firing")
    });
    let summary = page["summary"].as_str().unwrap();
    assert!(
        summary.contains("were never delivered to the app") && summary.contains("user_dead_1"),
        "{summary}"
    );
    assert!(num(&forward(hw.addr), "dead_letters") >= 1);
    app.mode("up");

    let to = chrono::Utc::now() + chrono::TimeDelta::minutes(1);
    let (from, to) = (from.to_rfc3339(), to.to_rfc3339());
    let url = format!("http://{}", hw.addr);
    let replay = |dry: bool| {
        let mut args = vec![
            "replay", "--url", &url, "--stream", "identity", "--from", &from, "--to", &to,
        ];
        if dry {
            args.push("--dry-run");
        }
        let (code, out, err) = cli(&args, &work.config_path());
        assert_eq!(code, 0, "replay: {out}{err}");
        out
    };
    let listed = replay(true);
    assert!(listed.contains("msg_dead_1"), "{listed}");
    // A replay re-queues in the request's own transaction: had the dry run
    // queued anything, the status read after it would show it pending.
    let f = forward(hw.addr);
    assert_eq!(num(&f, "pending"), 0, "{f}");
    assert!(num(&f, "dead_letters") >= 1, "{f}");
    assert!(app.deliveries().is_empty(), "the dry run sent something");

    let done = replay(false);
    assert!(done.contains("msg_dead_1"), "{done}");
    let all = app.wait_accepted(LIMIT, &sent);
    assert_ids_match_bodies(&all, &sent);
    // The replay itself resolves the dead-letter alert ("no dead letters
    // are left"); the app's 2xx is settled (with its audit entry, in one
    // transaction) only after the app answered, so wait for that too.
    wait_for(LIMIT, "the dead-letter resolve page", || {
        (!with_status(&pages(&hw, "forward_dead_letter"), "resolved").is_empty()).then_some(())
    });
    wait_for(LIMIT, "status to show the replayed event delivered", || {
        let f = forward(hw.addr);
        (num(&f, "pending") == 0 && f["last_delivered_at"].is_string()).then_some(())
    });

    // The chain tells the story: received, given up, replayed, delivered.
    let (code, out, err) = cli(
        &["audit", "export", "--stream", "identity"],
        &work.config_path(),
    );
    assert_eq!(code, 0, "{err}");
    let types: Vec<String> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|e| e["event_type"].as_str().unwrap_or_default().to_owned())
        .collect();
    let at = |want: &dyn Fn(&str) -> bool| {
        types
            .iter()
            .position(|t| want(t))
            .unwrap_or_else(|| panic!("no such audit entry in {types:?}"))
    };
    let received = at(&|t| t == "user.deleted");
    let gave_up = at(&|t| t == "gave_up");
    let replayed = at(&|t| t.starts_with("replay by ") && t.contains(": 1 from"));
    let delivered = at(&|t| t == "delivered:200");
    assert!(
        received < gave_up && gave_up < replayed && replayed < delivered,
        "{types:?}"
    );
}

#[test]
fn kill_9_mid_forward_on_sqlite_loses_nothing_and_keeps_every_id() {
    let app = RelayApp::start();
    app.control(json!({ "mode": "hang", "hang_seconds": 60 }));
    let forward_extra = format!("{}\nordered = false\ntimeout = \"10s\"", ladder(60));
    let config = relay_config(&app, ALWAYS_1H, "", "")
        .replace("timeout = \"2s\"\n", &format!("{forward_extra}\n"));
    let work = Workdir::new(&config);
    let hw = Sidecar::start(&work.config_path());

    let sent = send_many(&[hw.addr], "kill", 8);
    // Every event is at the app, unanswered: all eight attempts in flight.
    wait_for(LIMIT, "all attempts in flight", || {
        (first_seen(app.deliveries().iter()).len() >= sent.len()).then_some(())
    });
    hw.kill9();

    app.mode("up");
    let hw = Sidecar::start(&work.config_path());
    // The leases of the killed process end first (timeout + 30 s).
    let all = app.wait_accepted(LEASE_LIMIT, &sent);
    assert_ids_match_bodies(&all, &sent);
    // Issue #44: the re-send after the crash is a new attempt, and says so.
    for s in &sent {
        let attempts: Vec<u32> = of_id(&all, &s.id).iter().map(|d| d.attempt).collect();
        assert!(
            attempts.len() >= 2 && attempts.windows(2).all(|w| w[1] > w[0]),
            "{}: {attempts:?}",
            s.id
        );
    }
    wait_for(LIMIT, "status to show nothing pending", || {
        (num(&forward(hw.addr), "pending") == 0).then_some(())
    });
}

#[test]
fn three_replicas_on_postgres_survive_a_kill_9_mid_forward_in_order() {
    let Some(db) = pg::PgDb::create("three_replicas_on_postgres_survive_a_kill_9_mid_forward")
    else {
        return;
    };
    let app = RelayApp::start();
    app.control(json!({ "mode": "hang", "hang_seconds": 60 }));
    let store = format!(
        "[store]\nurl = \"{}\"\npool_size = 3\nleader_lease = \"2s\"\nencryption_key = \"{KEY_A}\"",
        db.url
    );
    let config = relay_config(&app, ALWAYS_1H, &stream_ordered(60), &store)
        .replace("timeout = \"2s\"", "timeout = \"10s\"");
    let work = Workdir::new(&config);
    let mut replicas: Vec<Option<Sidecar>> = (0..3)
        .map(|_| Some(Sidecar::start(&work.config_path())))
        .collect();
    let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.as_ref().unwrap().addr).collect();

    let mut sent = send_many(&addrs, "pg", 9);
    // The head is at the app, unanswered: one replica holds its lease.
    wait_for(LIMIT, "the head in flight", || {
        (!app.deliveries().is_empty()).then_some(())
    });
    let holder = wait_for(LIMIT, "the lease holder", || {
        db.query(
            "SELECT claimed_by FROM forwards WHERE state = 'pending' AND claimed_by IS NOT NULL",
        )
        .into_iter()
        .next()
    });
    let victim = (0..3)
        .find(|i| {
            let st = get(addrs[*i], "/v1/status").json();
            st["replicas"]["self"].as_str() == Some(holder.as_str())
        })
        .unwrap_or_else(|| panic!("no replica is {holder}"));
    // Ordered: three replicas, yet only the head has reached the app.
    assert_eq!(
        first_seen(app.deliveries().iter()),
        [sent[0].id.clone()],
        "more than one event of an ordered stream in flight"
    );
    replicas[victim].take().unwrap().kill9();

    // More arrive at the survivors meanwhile, and are acknowledged.
    let live: Vec<SocketAddr> = (0..3).filter(|i| *i != victim).map(|i| addrs[i]).collect();
    sent.extend(send_many(&live, "pg-after", 3));
    app.mode("up");

    let all = app.wait_accepted(LEASE_LIMIT, &sent);
    assert_ids_match_bodies(&all, &sent);
    let order: Vec<String> = sent.iter().map(|s| s.id.clone()).collect();
    assert_eq!(
        first_seen(all.iter()),
        order,
        "an ordered stream delivered a later event first"
    );
    assert_eq!(app.accepted_ids(), order);
}

#[test]
fn an_ordered_stream_keeps_arrival_order_while_the_app_flaps() {
    let app = RelayApp::start();
    app.mode("down");
    let work = Workdir::new(&relay_config(&app, ALWAYS_1H, &stream_ordered(60), ""));
    let hw = Sidecar::start(&work.config_path());

    let mut sent = send_many(&[hw.addr], "flap-a", 3);
    wait_for(LIMIT, "2 failed attempts", || {
        (num(&forward(hw.addr), "consecutive_failures") >= 2).then_some(())
    });
    // The app flaps while more events arrive.
    let stop = Arc::new(AtomicBool::new(false));
    let flapper = {
        let stop = Arc::clone(&stop);
        let addr = app.addr;
        std::thread::spawn(move || {
            let mut up = true;
            while !stop.load(Ordering::Relaxed) {
                let mode = if up { "up" } else { "down" };
                let body = json!({ "mode": mode }).to_string();
                request(addr, "POST", "/control", &[], body.as_bytes());
                up = !up;
                std::thread::sleep(Duration::from_millis(700));
            }
        })
    };
    for i in 0..7 {
        sent.extend(send_many(&[hw.addr], &format!("flap-b{i}"), 1));
        std::thread::sleep(Duration::from_millis(300));
    }
    stop.store(true, Ordering::Relaxed);
    flapper.join().unwrap();
    app.mode("up");

    let all = app.wait_accepted(LIMIT, &sent);
    assert_ids_match_bodies(&all, &sent);
    let order: Vec<String> = sent.iter().map(|s| s.id.clone()).collect();
    assert_eq!(
        first_seen(all.iter()),
        order,
        "first deliveries out of order"
    );
    assert_eq!(app.accepted_ids(), order, "acceptances out of order");
}

/// A marker unique to this run, in a body field that is not a subject id
/// (so only the sealed body ever holds it).
/// The whole database as `pg_dump` prints it (schema and table data).
fn pg_dump(url: &str) -> Vec<u8> {
    let dump = Command::new("pg_dump")
        // The test URL's only parameter, `sslmode`, is libpq's own.
        .arg(url)
        .output()
        .expect("pg_dump");
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    dump.stdout
}

fn marker(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("marker-{tag}-{}-{nanos}@example.com", std::process::id())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Every byte under `dir` (the SQLite file, its -wal and -shm, anything).
fn files_contain(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut hits = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            hits.extend(files_contain(&path, needle));
        } else if contains(&std::fs::read(&path).unwrap(), needle) {
            hits.push(path.display().to_string());
        }
    }
    hits
}

/// Sends three events carrying `marker`, waits until the app verified and
/// accepted them (so the bodies are stored and open), returns hushwatch.
fn relay_marked(app: &RelayApp, work: &Workdir, marker: &str, tag: &str) -> Sidecar {
    let hw = Sidecar::start(&work.config_path());
    let sent: Vec<Sent> = (0..3)
        .map(|i| {
            let body = clerk_event("user.updated", &format!("user_{tag}_{i}"), marker);
            send(hw.addr, &format!("msg_{tag}_{i}"), &body)
        })
        .collect();
    let all = app.wait_accepted(LIMIT, &sent);
    let ours: BTreeSet<&str> = sent.iter().map(|s| s.id.as_str()).collect();
    assert!(all
        .iter()
        .filter(|d| ours.contains(d.id.as_str()))
        .all(|d| d.body.contains(marker)));
    hw
}

#[test]
fn sqlite_stores_bodies_sealed_with_a_key_and_in_plaintext_without() {
    let app = RelayApp::start();
    for (key, tag) in [(true, "sealed"), (false, "plain")] {
        let store = if key {
            format!("[store]\nencryption_key = \"{KEY_A}\"")
        } else {
            String::new()
        };
        let work = Workdir::new(&relay_config(&app, ALWAYS_1H, &ladder(5), &store));
        let marker = marker(tag);
        let hw = relay_marked(&app, &work, &marker, tag);
        let hits = files_contain(&work.path().join("data"), marker.as_bytes());
        if key {
            assert!(
                hits.is_empty(),
                "plaintext body on disk despite the key: {hits:?}"
            );
        } else {
            assert!(
                !hits.is_empty(),
                "without a key the body should be on disk as sent"
            );
        }
        drop(hw);
    }
}

#[test]
fn postgres_stores_bodies_sealed_with_a_key_and_in_plaintext_without() {
    // Skips (before starting anything) without a PostgreSQL server.
    let Some(sealed_db) = pg::PgDb::create("postgres_stores_bodies_sealed_with_a_key") else {
        return;
    };
    let plain_db = pg::PgDb::create("postgres_stores_bodies_sealed_with_a_key").unwrap();
    let app = RelayApp::start();
    for (key, tag, db) in [(true, "pgsealed", sealed_db), (false, "pgplain", plain_db)] {
        let mut store = format!("[store]\nurl = \"{}\"\npool_size = 2", db.url);
        if key {
            store.push_str(&format!("\nencryption_key = \"{KEY_A}\""));
        }
        let work = Workdir::new(&relay_config(&app, ALWAYS_1H, &ladder(5), &store));
        let marker = marker(tag);
        let hw = relay_marked(&app, &work, &marker, tag);
        let hex_marker: String = marker.bytes().map(|b| format!("{b:02x}")).collect();
        let dump = String::from_utf8_lossy(&pg_dump(&db.url)).to_lowercase();
        let bodies = db
            .query("SELECT encode(body, 'hex') FROM forwards")
            .join("");
        assert_eq!(db.query("SELECT count(*) FROM forwards"), ["3"]);
        let seen = dump.contains(&marker.to_lowercase())
            || dump.contains(&hex_marker)
            || bodies.contains(&hex_marker);
        assert_eq!(seen, !key, "key: {key}; marker in the dump or the table");
        drop(hw);
    }
}

#[test]
fn bodies_sealed_under_an_old_key_still_forward_after_the_key_rotates() {
    let app = RelayApp::start();
    app.mode("down");
    let config = |keys: &str| {
        relay_config(
            &app,
            ALWAYS_1H,
            &stream_ordered(60),
            &format!("[store]\nencryption_key = {keys}"),
        )
    };
    let work = Workdir::new(&config(&format!("\"{KEY_A}\"")));
    let hw = Sidecar::start(&work.config_path());
    let mut sent = send_many(&[hw.addr], "rot-a", 3);
    wait_for(LIMIT, "a failed attempt", || {
        (num(&forward(hw.addr), "consecutive_failures") >= 1).then_some(())
    });
    assert!(hw.stop().success());

    // B seals from now on; A still opens what it sealed.
    work.write_config(&config(&format!("[\"{KEY_B}\", \"{KEY_A}\"]")));
    app.mode("up");
    let hw = Sidecar::start(&work.config_path());
    sent.extend(send_many(&[hw.addr], "rot-b", 2));
    let all = app.wait_accepted(LIMIT, &sent);
    assert_ids_match_bodies(&all, &sent);
    let order: Vec<String> = sent.iter().map(|s| s.id.clone()).collect();
    assert_eq!(app.accepted_ids(), order);
}

/// The clock tests: the provider keeps sending every ~second, the app
/// refuses everything after the first event. Returns hushwatch.
fn keep_sending_while_the_app_refuses(
    clock: &str,
    mut until: impl FnMut(&Sidecar, Value) -> bool,
) -> Sidecar {
    let app = RelayApp::start();
    let stream = "calendar = \"always\"\nsilence_threshold = \"4s\"";
    let forward_extra = format!("{}\nclock = \"{clock}\"", ladder(120));
    let work = Workdir::new(&relay_config(&app, stream, &forward_extra, ""));
    let hw = Sidecar::start(&work.config_path());
    // One event the app accepts: both clocks start from it.
    let first = vec![send(
        hw.addr,
        "msg_clock_0",
        &clerk_event("user.created", "user_c0", "c@example.com"),
    )];
    app.wait_accepted(LIMIT, &first);
    app.mode("down");
    let deadline = Instant::now() + LIMIT;
    let mut i = 1;
    loop {
        let body = clerk_event("user.updated", &format!("user_c{i}"), "c@example.com");
        send(hw.addr, &format!("msg_clock_{i}"), &body);
        i += 1;
        let status = get(hw.addr, "/v1/status").json();
        if until(&hw, status) {
            return hw;
        }
        assert!(Instant::now() < deadline, "timed out sending ({clock})");
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn identity_state(status: &Value) -> String {
    status["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "identity")
        .map(|s| s["state"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default()
}

#[test]
fn clock_delivered_fires_while_the_provider_keeps_sending_to_a_refusing_app() {
    let hw = keep_sending_while_the_app_refuses("delivered", |hw, status| {
        identity_state(&status) == "firing" && !pages(hw, "silence").is_empty()
    });
    let page = &pages(&hw, "silence")[0];
    assert_eq!(page["status"], "firing", "{page}");
}

#[test]
fn clock_received_does_not_fire_while_the_provider_keeps_sending() {
    let started = chrono::Utc::now();
    // Three thresholds of steady traffic to a refusing app, with the timer
    // seen to have evaluated past them.
    let past = started + chrono::TimeDelta::seconds(12);
    let hw = keep_sending_while_the_app_refuses("received", |_, status| {
        assert_ne!(identity_state(&status), "firing", "{status}");
        status["evaluated_at"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .is_some_and(|t| t > past)
    });
    assert!(pages(&hw, "silence").is_empty(), "{:?}", hw.stdout_lines());
    // The app did refuse meanwhile: this is not a quiet app.
    assert!(num(&forward(hw.addr), "consecutive_failures") >= 3);
}

// ------------------------------------------------- did we act on it (#29)

/// Posts a reconciliation report that finds `user` still active after a
/// revocation; answers the `reconciliation_revoke_missed` page's text.
fn report_missed(hw: &Sidecar, id: &str, user: &str) -> String {
    let body = json!({
        "id": id,
        "started_at": chrono::Utc::now().to_rfc3339(),
        "finished_at": chrono::Utc::now().to_rfc3339(),
        "checked": 10,
        "drift": [{
            "subject": user,
            "kind": "revoke_missed",
            "fixed": false,
            "detail": format!("{user} still has a session"),
        }],
    })
    .to_string();
    let reply = request(
        hw.addr,
        "POST",
        "/v1/streams/identity/reconciliations",
        &[
            ("content-type", "application/json"),
            ("authorization", "Bearer relay-report-token"),
        ],
        body.as_bytes(),
    );
    assert!((200..300).contains(&reply.status), "{}", reply.body);
    wait_for(LIMIT, "the revoke_missed page", || {
        pages(hw, "reconciliation_revoke_missed")
            .iter()
            .find(|p| p["summary"].as_str().is_some_and(|s| s.contains(id)))
            .map(|p| p["summary"].as_str().unwrap_or_default().to_owned())
    })
}

/// A reconciliation's `revoke_missed` page tells apart a revocation the app
/// has not been given yet (it is failing) from one it accepted and did not
/// act on.
#[test]
fn a_missed_revocation_page_says_whether_the_app_was_given_it() {
    let app = RelayApp::start();
    app.mode("down");
    let config = relay_config(&app, ALWAYS_1H, &ladder(60), "").replace(
        &format!("webhook_secret = \"{SECRET}\"\n"),
        &format!("webhook_secret = \"{SECRET}\"\ntoken = \"relay-report-token\"\n"),
    );
    let work = Workdir::new(&config);
    let hw = Sidecar::start(&work.config_path());

    send(
        hw.addr,
        "msg_revoke_1",
        &clerk_event("user.deleted", "user_gone", "x@example.com"),
    );
    wait_for(LIMIT, "a failed forward", || {
        (num(&forward(hw.addr), "consecutive_failures") >= 1).then_some(())
    });
    let pending = report_missed(&hw, "rec-pending", "user_gone");
    assert!(
        pending.contains("not yet delivered: the app has failed since"),
        "{pending}"
    );

    app.mode("up");
    wait_for(LIMIT, "the revocation delivered", || {
        (num(&forward(hw.addr), "pending") == 0).then_some(())
    });
    let delivered = report_missed(&hw, "rec-delivered", "user_gone");
    assert!(
        delivered.contains("delivered to the app at")
            && delivered.contains("(200) but access was still active"),
        "{delivered}"
    );
}

/// A relay config whose stream also takes reconciliation reports (token
/// `relay-report-token`), with `forward` and `extra` as in `relay_config`.
fn reporting_config(app: &RelayApp, forward: &str, extra: &str) -> String {
    relay_config(app, ALWAYS_1H, forward, extra).replace(
        &format!("webhook_secret = \"{SECRET}\"\n"),
        &format!("webhook_secret = \"{SECRET}\"\ntoken = \"relay-report-token\"\n"),
    )
}

/// The third wording of a `revoke_missed` page: the revocation was given
/// up on (`give_up_after`), so the app never had it.
#[test]
fn a_missed_revocation_page_says_when_the_revocation_is_a_dead_letter() {
    let app = RelayApp::start();
    app.mode("down");
    let forward_extra = format!("{}\ngive_up_after = \"3s\"", ladder(60));
    let work = Workdir::new(&reporting_config(&app, &forward_extra, ""));
    let hw = Sidecar::start(&work.config_path());
    send(
        hw.addr,
        "msg_revoke_dead",
        &clerk_event("user.deleted", "user_never_told", "x@example.com"),
    );
    wait_for(LIMIT, "the dead-letter page", || {
        pages(&hw, "forward_dead_letter")
            .into_iter()
            .find(|p| p["status"] == "firing")
    });
    let text = report_missed(&hw, "rec-dead", "user_never_told");
    assert!(
        text.contains(
            "revocation of user_never_told (delivery msg_revoke_dead, user.deleted) was received"
        ) && text.contains("never delivered: it is a dead letter (replay it)"),
        "{text}"
    );
}

/// A subject id unique to this run.
fn unique_subject(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("user_{tag}{}x{nanos}", std::process::id())
}

/// A Clerk organization-membership event for `user` in `org` at event
/// time `ts_ms` (`created` is grant-class, `deleted` revoke-class).
fn membership_event(kind: &str, user: &str, org: &str, ts_ms: i64, email: &str) -> String {
    json!({
        "type": format!("organizationMembership.{kind}"),
        "object": "event",
        "timestamp": ts_ms,
        "data": {
            "object": "organization_membership",
            "id": "orgmem_1",
            "organization": { "id": org },
            "public_user_data": { "user_id": user, "identifier": email },
        },
    })
    .to_string()
}

/// Everything that can carry a subject id, with `[store] encryption_key`
/// on `store` (SQLite or PostgreSQL): a revocation and an older grant of
/// one subject (a stale grant page), an app that fails (forward_failing
/// pages), gives up (a dead letter and its page), a reconciliation that
/// finds the subject still active (revoke_missed page and drift), a replay
/// over HTTP with an Idempotency-Key (its stored answer), and the audit
/// log (`audit subject` still finds everything). Pages read with the
/// subject id as without a key. Returns the subject, the org, the body-only
/// marker and the workdir, hushwatch stopped, for the caller to search the
/// bytes at rest.
fn relay_every_subject_path(store: &str) -> (String, String, String, Workdir) {
    let app = RelayApp::start();
    app.mode("down");
    let subject = unique_subject("s");
    let org = unique_subject("org_");
    let marker = marker("subj");
    let forward_extra = format!("{}\ngive_up_after = \"4s\"", ladder(60));
    let work = Workdir::new(&reporting_config(&app, &forward_extra, store));
    let hw = Sidecar::start(&work.config_path());

    let now_ms = chrono::Utc::now().timestamp_millis();
    // The user's deletion (the head of the queue: pages name its subject),
    // then a membership grant older than it (a stale grant), then the
    // membership's own revocation (indexed with its organization).
    let user_gone = clerk_event("user.deleted", &subject, &marker);
    let grant = membership_event("created", &subject, &org, now_ms - 60_000, &marker);
    let revoke = membership_event("deleted", &subject, &org, now_ms + 1_000, &marker);
    let sent = vec![
        send(hw.addr, "msg_subj_user", &user_gone),
        send(hw.addr, "msg_subj_grant", &grant),
        send(hw.addr, "msg_subj_revoke", &revoke),
    ];
    let firing = |kind: &str| {
        wait_for(LIMIT, kind, || {
            pages(&hw, kind)
                .into_iter()
                .find(|p| p["status"] == "firing")
                .and_then(|p| p["summary"].as_str().map(str::to_owned))
        })
    };
    // Every page that names the subject reads as it would without a key.
    let stale = firing("stale_grant");
    assert!(
        stale.contains(&format!(
            "a grant for {subject} arrived after its revocation"
        )),
        "{stale}"
    );
    let failing = firing("forward_failing");
    assert!(
        failing.contains("502") && failing.contains(&format!("user.deleted {subject}")),
        "{failing}"
    );
    let dead = firing("forward_dead_letter");
    assert!(
        dead.contains("were never delivered to the app") && dead.contains(&subject),
        "{dead}"
    );
    let missed = report_missed(&hw, "rec-subj", &subject);
    assert!(
        missed.contains(&format!(
            "revocation of {subject} (delivery msg_subj_revoke"
        )),
        "{missed}"
    );

    // Replay over HTTP with an Idempotency-Key: its answer is stored. It
    // re-sends dead letters: wait until all three are (the dead-letter
    // page fires at the first; on a loaded machine the others may still
    // be waiting for their last attempt, and one claimed while the replay
    // runs is not re-queued by it, then dies after it).
    wait_for(LIMIT, "all three events dead letters", || {
        (num(&forward(hw.addr), "dead_letters") >= 3).then_some(())
    });
    app.mode("up");
    let body = json!({
        "from": (chrono::Utc::now() - chrono::TimeDelta::minutes(5)).to_rfc3339(),
        "to": (chrono::Utc::now() + chrono::TimeDelta::minutes(1)).to_rfc3339(),
    })
    .to_string();
    let replay = || {
        request(
            hw.addr,
            "POST",
            "/v1/streams/identity/replay",
            &[
                ("content-type", "application/json"),
                ("authorization", &format!("Bearer {ADMIN}")),
                ("idempotency-key", "replay-subj-1"),
            ],
            body.as_bytes(),
        )
    };
    let first = replay();
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(replay().body, first.body, "the stored answer is replayed");
    app.wait_accepted(LIMIT, &sent);
    wait_for(LIMIT, "every event delivered", || {
        (num(&forward(hw.addr), "pending") == 0).then_some(())
    });

    // The audit log still answers by subject id (and still verifies).
    let (code, out, err) = cli(&["audit", "subject", &subject], &work.config_path());
    assert_eq!(code, 0, "{err}");
    let entries: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: BTreeSet<&str> = entries
        .iter()
        .filter_map(|e| e["delivery_id"].as_str())
        .collect();
    for id in [
        "msg_subj_revoke",
        "msg_subj_grant",
        "msg_subj_user",
        "rec-subj",
    ] {
        assert!(ids.contains(id), "audit subject lacks {id}: {out}");
    }
    assert!(
        entries.iter().any(|e| e["finding"] == "revoke_missed"),
        "{out}"
    );
    let (code, _, err) = cli(&["audit", "verify"], &work.config_path());
    assert_eq!(code, 0, "{err}");
    assert!(hw.stop().success());
    (subject, org, marker, work)
}

fn assert_absent(haystack: &[u8], needles: &[&str], what: &str) {
    for n in needles {
        let hex: String = n.bytes().map(|b| format!("{b:02x}")).collect();
        assert!(
            !contains(haystack, n.as_bytes()) && !contains(haystack, hex.as_bytes()),
            "{n:?} is readable in {what}"
        );
    }
}

#[test]
fn sqlite_with_a_key_keeps_subject_ids_off_the_disk_and_pages_still_name_them() {
    let store = format!("[store]\nencryption_key = \"{KEY_A}\"");
    let (subject, org, marker, work) = relay_every_subject_path(&store);
    // Read after the process stopped: the database, -wal, -shm, anything.
    let dir = work.path().join("data");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            files += 1;
            let bytes = std::fs::read(&path).unwrap();
            assert_absent(
                &bytes,
                &[&subject, &org, &marker],
                &path.display().to_string(),
            );
        }
    }
    assert!(files >= 1, "no database file under {}", dir.display());
}

#[test]
fn postgres_with_a_key_keeps_subject_ids_out_of_the_dump_and_pages_still_name_them() {
    // Skips (before starting anything) without a PostgreSQL server.
    let Some(db) = pg::PgDb::create("postgres_with_a_key_keeps_subject_ids_out") else {
        return;
    };
    let store = format!(
        "[store]\nurl = \"{}\"\npool_size = 2\nencryption_key = \"{KEY_A}\"",
        db.url
    );
    let (subject, org, marker, _work) = relay_every_subject_path(&store);
    let dump = pg_dump(&db.url);
    assert!(
        contains(&dump, b"COPY public.audit_log"),
        "the dump has no table data"
    );
    assert_absent(&dump, &[&subject, &org, &marker], "pg_dump");
}

/// `audit subject` finds entries written in plaintext (before a key),
/// under the old key, and under the new one after a rotation.
#[test]
fn audit_subject_finds_entries_from_before_a_key_and_across_a_rotation() {
    let app = RelayApp::start();
    let subject = unique_subject("rot");
    let config = |store: &str| relay_config(&app, ALWAYS_1H, &ladder(5), store);
    let work = Workdir::new(&config(""));
    let phases = [
        ("msg_rot_plain", String::new()),
        (
            "msg_rot_a",
            format!("[store]\nencryption_key = \"{KEY_A}\""),
        ),
        (
            "msg_rot_b",
            format!("[store]\nencryption_key = [\"{KEY_B}\", \"{KEY_A}\"]"),
        ),
    ];
    let mut sent = Vec::new();
    for (id, store) in &phases {
        work.write_config(&config(store));
        let hw = Sidecar::start(&work.config_path());
        sent.push(send(
            hw.addr,
            id,
            &clerk_event("user.updated", &subject, "rot@example.com"),
        ));
        app.wait_accepted(LIMIT, &sent);
        assert!(hw.stop().success());
    }
    let (code, out, err) = cli(&["audit", "subject", &subject], &work.config_path());
    assert_eq!(code, 0, "{err}");
    let received: Vec<String> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter_map(|e| e["delivery_id"].as_str().map(str::to_owned))
        .collect();
    for (id, _) in &phases {
        assert!(received.iter().any(|r| r == id), "{id} not found: {out}");
    }
    let (code, _, err) = cli(&["audit", "verify"], &work.config_path());
    assert_eq!(code, 0, "{err}");
    // Only the newest key: entries under A are no longer recognised, the
    // plaintext one still is (nothing hides it).
    work.write_config(&config(&format!("[store]\nencryption_key = \"{KEY_B}\"")));
    let (code, out, err) = cli(&["audit", "subject", &subject], &work.config_path());
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("msg_rot_plain") && out.contains("msg_rot_b"),
        "{out}"
    );
    assert!(!out.contains("msg_rot_a"), "{out}");
}

// ------------------------------------------- a stream that stops forwarding

/// One stream `identity` whose pages go to `hook` (a webhook receiver the
/// test reads), with `[streams.identity.forward]` to `app` (and `forward`
/// as extra lines) or, with `None`, without it; with `other`, a second
/// stream that always forwards to `app` (else none forwards then).
fn stopping_config(
    app: &RelayApp,
    hook: &support::Receiver,
    forward: Option<&str>,
    other: bool,
) -> String {
    let forward = forward.map_or_else(String::new, |extra| {
        format!(
            "[streams.identity.forward]\nurl = \"{}\"\nsecret = \"{APP_SECRET}\"\ntimeout = \"2s\"\n{extra}\n",
            app.url()
        )
    });
    let other = if other {
        format!(
            "[streams.other]\ncalendar = \"always\"\nsilence_threshold = \"30d\"\nnotify = [\"hook\"]\n\
             [streams.other.ingest]\nwebhook_secret = \"{SECRET}\"\n\
             [streams.other.forward]\nurl = \"{}\"\nsecret = \"{APP_SECRET}\"\n",
            app.url()
        )
    } else {
        String::new()
    };
    format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"
admin_token = "{ADMIN}"

{other}
[streams.identity]
calendar = "always"
silence_threshold = "30d"
notify = ["hook"]
[streams.identity.ingest]
webhook_secret = "{SECRET}"

{forward}
[notifiers.hook]
kind = "webhook"
url = "{url}"
timeout = "2s"
backoff_initial = "1s"
"#,
        url = hook.url("/pages"),
    )
}

/// Writes `text` as the config and reloads the running service from it,
/// as SIGHUP does.
fn reload(hw: &InProcess, work: &Workdir, text: &str) {
    work.write_config(text);
    let config = hushwatch::config::load(&work.config_path()).unwrap_or_else(|e| panic!("{e}"));
    hw.block_on(hw.app().reload(config)).expect("reload");
}

/// Two Clerk events signed and received at the test clock's time; both
/// acknowledged.
fn send_two_at(hw: &InProcess, tag: &str) -> Vec<Sent> {
    (0..2)
        .map(|i| {
            let kind = if i == 0 {
                "user.created"
            } else {
                "user.deleted"
            };
            let body = json!({
                "type": kind,
                "object": "event",
                "timestamp": hw.now().timestamp_millis(),
                "data": { "object": "user", "id": format!("user_{tag}_{i}") },
            })
            .to_string();
            let id = format!("msg_{tag}_{i}");
            let status = post_signed_webhook(
                hw.addr,
                "identity",
                SECRET,
                &id,
                hw.now().timestamp(),
                &body,
            );
            assert!((200..300).contains(&status), "delivery {id}: {status}");
            Sent { id, body }
        })
        .collect()
}

/// The relay pages `hook` received: (alert kind, status, severity, summary).
fn relay_pages(hook: &support::Receiver) -> Vec<(String, String, String, String)> {
    hook.delivered_json()
        .iter()
        .map(|p| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (
                s(&p["alert"]["kind"]),
                s(&p["status"]),
                s(&p["alert"]["severity"]),
                s(&p["alert"]["summary"]),
            )
        })
        .filter(|(kind, ..)| kind.starts_with("forward_"))
        .collect()
}

/// Phase one of both tests: the stream forwards to an app that refuses,
/// so its first attempt fails and pages (warning); nothing is delivered.
fn forward_to_a_refusing_app(
    t0: chrono::DateTime<chrono::Utc>,
    tag: &str,
    other: bool,
) -> Stopping {
    let app = RelayApp::start();
    app.mode("down");
    let hook = support::Receiver::start(vec![]);
    let work = Workdir::new(&stopping_config(&app, &hook, Some(&ladder(60)), other));
    let hw = InProcess::start(&work, t0);
    let sent = send_two_at(&hw, tag);
    wait_until("the first failure's page", || {
        relay_pages(&hook)
            .iter()
            .any(|(k, s, sev, _)| k == "forward_failing" && s == "firing" && sev == "warning")
            .then_some(())
    });
    let f = forward(hw.addr);
    assert_eq!(f["configured"], true, "{f}");
    assert_eq!(num(&f, "pending"), 2, "{f}");
    Stopping {
        app,
        hook,
        work,
        hw,
        sent,
        other,
    }
}

struct Stopping {
    app: RelayApp,
    hook: support::Receiver,
    work: Workdir,
    hw: InProcess,
    sent: Vec<Sent>,
    other: bool,
}

impl Stopping {
    /// Reloads with `identity` forwarding (`Some`: with these extra lines)
    /// or not.
    fn reload(&self, forward: Option<&str>) {
        let text = stopping_config(&self.app, &self.hook, forward, self.other);
        reload(&self.hw, &self.work, &text);
    }
}

/// The app has every event, each under its original id, in arrival order.
fn assert_delivered_in_order(app: &RelayApp, sent: &[Sent]) {
    let all = app.wait_accepted(LIMIT, sent);
    let order: Vec<String> = sent.iter().map(|s| s.id.clone()).collect();
    assert_eq!(app.accepted_ids(), order, "delivered out of arrival order");
    assert_ids_match_bodies(&all, sent);
}

/// Issue #29 follow-up, as issue #44 changed it: `[forward]` removed (here
/// by a reload; a restart reads the same config) while events are stored
/// and no other stream forwards. hushwatch cannot send them, so they are
/// **held** at once (not failed on a ladder): `/v1/status` and the metrics
/// still show them (`configured: false`, `hushwatch_forward_held`), a
/// critical `forward_held` page says which and what to run, and once
/// `[forward]` is back they go to the app at once, under their ids, in
/// order, and the pages resolve.
#[test]
fn events_of_a_stream_that_stops_forwarding_are_kept_until_it_forwards_again() {
    kept_until_it_forwards_again(false);
}

/// The same while another stream still forwards.
#[test]
fn events_of_a_stream_that_stops_forwarding_beside_one_that_forwards_are_kept_the_same() {
    kept_until_it_forwards_again(true);
}

fn kept_until_it_forwards_again(other: bool) {
    use chrono::{TimeDelta, Utc};
    let t0 = Utc::now() - TimeDelta::minutes(1);
    let stopping = forward_to_a_refusing_app(t0, "kept", other);
    let Stopping {
        app,
        hook,
        hw,
        sent,
        work,
        ..
    } = &stopping;

    stopping.reload(None);
    let f = wait_until("the stored events held without [forward]", || {
        // The gauges follow the store once a (test clock) second.
        hw.advance(1);
        let f = forward(hw.addr);
        (f["configured"] == false
            && hw.metric(r#"hushwatch_forward_held{stream="identity"}"#) == 2.0)
            .then_some(f)
    });
    assert_eq!(num(&f, "pending"), 0, "held, not pending: {f}");
    assert!(f.get("app").is_none(), "no app is configured: {f}");
    let held = wait_until("the held page", || {
        relay_pages(hook)
            .into_iter()
            .find(|(k, s, ..)| k == "forward_held" && s == "firing")
    });
    assert_eq!(held.2, "critical", "{held:?}");
    assert!(held.3.contains("no [forward]"), "{held:?}");
    let config = std::fs::canonicalize(work.config_path()).unwrap();
    assert!(
        held.3.contains(&format!(
            "hushwatch forward skip --config {} --stream identity --id msg_kept_",
            config.display(),
        )),
        "{held:?}"
    );
    // The page may fire before the second is held (it was in flight at the
    // reload): it names what was held then, each with its skip command.
    assert!(sent.iter().any(|s| held.3.contains(&s.id)), "{held:?}");
    // Held rows are not attempts: time passing makes no failure and no
    // dead letter.
    hw.advance(3600);
    let f = forward(hw.addr);
    assert_eq!(num(&f, "dead_letters"), 0, "{f}");

    app.mode("up");
    // Near real time again (the app checks the signature's timestamp).
    hw.set_time(Utc::now());
    stopping.reload(Some(&stream_ordered(60)));
    // Released at once, in order, under their ids.
    assert_delivered_in_order(app, sent);
    let f = wait_until("status to show the backlog delivered", || {
        let f = forward(hw.addr);
        (num(&f, "pending") == 0 && f["last_delivered_at"].is_string()).then_some(f)
    });
    assert_eq!(f["configured"], true, "{f}");
    assert_eq!(num(&f, "consecutive_failures"), 0, "{f}");
    wait_until("the held and failing alerts' resolve pages", || {
        let pages = relay_pages(hook);
        let resolved = |kind: &str| pages.iter().any(|(k, s, ..)| k == kind && s == "resolved");
        (resolved("forward_held") && resolved("forward_failing")).then_some(())
    });
    wait_until("the held gauge back at 0", || {
        hw.advance(1);
        (hw.metric(r#"hushwatch_forward_held{stream="identity"}"#) == 0.0).then_some(())
    });
}

/// The same removal left in place for longer than `give_up_after`: held
/// events are not dead-lettered (nothing was tried), stay visible and
/// paged, and the held user.deleted pages `forward_revocation_overdue`
/// (critical) once `critical_after` has passed.
#[test]
fn events_of_a_stream_that_stops_forwarding_stay_held_past_give_up_after_and_escalate() {
    use chrono::{TimeDelta, Utc};
    let t0 = Utc::now() - TimeDelta::days(8);
    let stopping = forward_to_a_refusing_app(t0, "dead", false);
    let Stopping { hook, hw, .. } = &stopping;

    stopping.reload(None);
    wait_until("the stored events held", || {
        hw.advance(1);
        (hw.metric(r#"hushwatch_forward_held{stream="identity"}"#) == 2.0).then_some(())
    });
    hw.advance(8 * 24 * 3600);
    let pages = wait_until("the revocation's critical page", || {
        let pages = relay_pages(hook);
        pages
            .iter()
            .any(|(k, s, ..)| k == "forward_revocation_overdue" && s == "firing")
            .then_some(pages)
    });
    let overdue = pages
        .iter()
        .find(|(k, s, ..)| k == "forward_revocation_overdue" && s == "firing")
        .unwrap();
    assert_eq!(overdue.2, "critical", "{pages:#?}");
    assert!(overdue.3.contains("user.deleted user_dead_1"), "{pages:#?}");
    let f = forward(hw.addr);
    assert_eq!(num(&f, "dead_letters"), 0, "{f}");
    assert_eq!(num(&f, "pending"), 0, "{f}");
    assert_eq!(
        hw.metric(r#"hushwatch_forward_held{stream="identity"}"#),
        2.0
    );
    assert!(
        !pages.iter().any(|(k, ..)| k == "forward_dead_letter"),
        "{pages:#?}"
    );
}

/// The same through a restart of the real binary, the way most operators
/// change the config: stored with `[forward]`, started again without it
/// (and no other stream forwarding). At start the stored events are held,
/// shown and paged.
#[test]
fn events_of_a_stream_restarted_without_forward_are_held_and_shown_at_start() {
    let app = RelayApp::start();
    app.mode("down");
    let with = relay_config(&app, ALWAYS_1H, &ladder(60), "");
    let work = Workdir::new(&with);
    let hw = Sidecar::start(&work.config_path());
    send_many(&[hw.addr], "restart", 2);
    wait_for(LIMIT, "a failed attempt while the app is down", || {
        (num(&forward(hw.addr), "consecutive_failures") >= 1).then_some(())
    });
    hw.stop();

    let (head, rest) = with.split_once("[streams.identity.forward]").unwrap();
    let (_, tail) = rest.split_once("[notifiers.stdout]").unwrap();
    work.write_config(&format!("{head}[notifiers.stdout]{tail}"));
    let hw = Sidecar::start(&work.config_path());
    wait_for(LIMIT, "the stored events held at start", || {
        let f = forward(hw.addr);
        (f["configured"] == false && f["pending"] == 0).then_some(())
    });
    wait_for(LIMIT, "the held gauge after the restart", || {
        (crate::common::metric(hw.addr, r#"hushwatch_forward_held{stream="identity"}"#) == 2.0)
            .then_some(())
    });
    let f = forward(hw.addr);
    assert_eq!(f["configured"], false, "{f}");
    assert_eq!(num(&f, "pending"), 0, "{f}");
    assert!(f.get("app").is_none(), "{f}");
    let held = wait_for(LIMIT, "the held page on stdout", || {
        pages(&hw, "forward_held").into_iter().next()
    });
    assert_eq!(held["severity"], "critical", "{held}");
}

// ------------------------------------------------------- issue #44: order,
// held events, sealed rows, the ladder, critical_after

/// A Clerk `organizationMembership.deleted`: the membership, its user and
/// its organization (the page names the user and the organization).
fn membership_deleted(user: &str, org: &str) -> String {
    json!({
        "type": "organizationMembership.deleted",
        "object": "event",
        "timestamp": chrono::Utc::now().timestamp_millis(),
        "data": {
            "object": "organization_membership",
            "id": format!("orgmem_{user}"),
            "organization": { "id": org, "object": "organization" },
            "public_user_data": { "user_id": user },
        },
    })
    .to_string()
}

/// The app's deliveries of one id, in arrival order.
fn of_id(all: &[Delivery], id: &str) -> Vec<Delivery> {
    all.iter().filter(|d| d.id == id).cloned().collect()
}

/// Issue #44: the app refuses every event about one user (a poison
/// subject). With the default per-subject order only that user's events
/// wait; another user's deletion reaches the app within seconds. The
/// failing page names the membership's user and organization and the
/// blocked subject, and does not resolve while the poison is stuck; the
/// stuck revocation pages critical after `critical_after`; every attempt
/// carries a new number. Once the app takes it, everything drains in order
/// and the pages resolve.
#[test]
fn a_poison_event_holds_back_only_its_subject_while_another_users_deletion_arrives() {
    let app = RelayApp::start();
    app.control(json!({ "refuse": ["user_poison"] }));
    let forward_lines = format!("{}\ncritical_after = \"3s\"", ladder(60));
    let work = Workdir::new(&relay_config(&app, ALWAYS_1H, &forward_lines, ""));
    let hw = Sidecar::start(&work.config_path());

    let poison = send(
        hw.addr,
        "msg_poison_0",
        &membership_deleted("user_poison", "org_1"),
    );
    let behind = send(
        hw.addr,
        "msg_poison_1",
        &clerk_event("user.created", "user_poison", "p@example.com"),
    );
    wait_for(LIMIT, "the poison refused twice", || {
        (of_id(&app.deliveries(), &poison.id).len() >= 2).then_some(())
    });
    let started = Instant::now();
    let other = send(
        hw.addr,
        "msg_other_0",
        &clerk_event("user.deleted", "user_other", "o@example.com"),
    );
    app.wait_accepted(LIMIT, std::slice::from_ref(&other));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "another user's deletion waited {:?} behind the poison",
        started.elapsed()
    );
    let all = app.deliveries();
    assert!(
        of_id(&all, &behind.id).is_empty(),
        "an event behind the poison of its own subject went out: {all:?}"
    );
    // A new number on every attempt.
    let attempts: Vec<u32> = of_id(&all, &poison.id).iter().map(|d| d.attempt).collect();
    assert!(
        attempts.windows(2).all(|w| w[1] == w[0] + 1) && attempts[0] == 1,
        "{attempts:?}"
    );

    let failing = wait_for(LIMIT, "the failing page", || {
        pages(&hw, "forward_failing")
            .into_iter()
            .find(|p| p["status"] == "firing")
    });
    let summary = failing["summary"].as_str().unwrap();
    assert!(
        summary.contains("organizationMembership.deleted user_poison (organization org_1)"),
        "{summary}"
    );
    assert!(summary.contains("1 subject(s) are blocked"), "{summary}");
    let config = std::fs::canonicalize(work.config_path()).unwrap();
    assert!(
        summary.contains(&format!(
            "`hushwatch forward retry --config {} --stream identity`",
            config.display()
        )),
        "{summary}"
    );
    let overdue = wait_for(LIMIT, "the critical_after page", || {
        pages(&hw, "forward_revocation_overdue")
            .into_iter()
            .find(|p| p["status"] == "firing")
    });
    assert_eq!(overdue["severity"], "critical", "{overdue}");
    assert!(
        overdue["summary"].as_str().unwrap().contains("user_poison"),
        "{overdue}"
    );
    assert!(
        with_status(&pages(&hw, "forward_failing"), "resolved").is_empty(),
        "the failing page resolved while a revocation is stuck"
    );

    app.control(json!({ "refuse": [] }));
    app.wait_accepted(LIMIT, &[poison.clone(), behind.clone()]);
    let accepted = app.accepted_ids();
    let at = |id: &str| accepted.iter().position(|a| a == id).unwrap();
    assert!(at(&poison.id) < at(&behind.id), "{accepted:?}");
    wait_for(LIMIT, "the failing and overdue pages resolved", || {
        (!with_status(&pages(&hw, "forward_failing"), "resolved").is_empty()
            && !with_status(&pages(&hw, "forward_revocation_overdue"), "resolved").is_empty())
        .then_some(())
    });
}

/// `ordered = "stream"` keeps the old behaviour: a refused head blocks
/// every later event of the stream, whoever it is about; a reload to
/// per-subject order frees the events already queued.
#[test]
fn ordered_stream_still_blocks_the_whole_stream_behind_a_poison_event() {
    let app = RelayApp::start();
    app.control(json!({ "refuse": ["user_poison"] }));
    let work = Workdir::new(&relay_config(&app, ALWAYS_1H, &stream_ordered(60), ""));
    let hw = Sidecar::start(&work.config_path());
    let poison = send(
        hw.addr,
        "msg_sp_0",
        &clerk_event("user.deleted", "user_poison", "p@example.com"),
    );
    let other = send(
        hw.addr,
        "msg_sp_1",
        &clerk_event("user.deleted", "user_other", "o@example.com"),
    );
    wait_for(LIMIT, "the poison refused three times", || {
        (of_id(&app.deliveries(), &poison.id).len() >= 3).then_some(())
    });
    assert!(
        of_id(&app.deliveries(), &other.id).is_empty(),
        "the stream's later event passed its refused head"
    );
    let summary = wait_for(LIMIT, "the failing page", || {
        pages(&hw, "forward_failing").into_iter().next()
    })["summary"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(summary.contains("blocks the ones behind it"), "{summary}");
    // Each attempt is logged with its delivery id and number.
    let log = hw.stderr_text();
    assert!(
        log.lines()
            .any(|l| l.contains("sending an event to the app") && l.contains(&poison.id)),
        "{log}"
    );
    // Back to per-subject order by a reload: it applies to the events
    // already queued, so the other user's event goes while the poison
    // is still refused.
    work.write_config(&relay_config(&app, ALWAYS_1H, &ladder(60), ""));
    hw.signal("HUP");
    app.wait_accepted(LIMIT, std::slice::from_ref(&other));
    app.control(json!({ "refuse": [] }));
    app.wait_accepted(LIMIT, &[poison.clone(), other.clone()]);
    assert_eq!(app.accepted_ids(), [other.id, poison.id]);
}

/// An outage with the default ladder's shape scaled down (1 s, 2 s, 4 s,
/// the last repeating): once the app is back, the backlog arrives within
/// the step the ladder is on, with nobody acting.
#[test]
fn an_outage_drains_within_one_ladder_step_of_the_apps_return() {
    let app = RelayApp::start();
    app.mode("down");
    let work = Workdir::new(&relay_config(
        &app,
        ALWAYS_1H,
        "retry = [\"1s\", \"2s\", \"4s\"]",
        "",
    ));
    let hw = Sidecar::start(&work.config_path());
    let sent = send_many(&[hw.addr], "outage", 6);
    // Down for 10 s: past the ladder, its last step repeats.
    std::thread::sleep(Duration::from_secs(10));
    let f = forward(hw.addr);
    assert_eq!(num(&f, "pending"), 6, "{f}");
    let back = Instant::now();
    app.mode("up");
    app.wait_accepted(LIMIT, &sent);
    assert!(
        back.elapsed() < Duration::from_secs(4 + 6),
        "the backlog took {:?} after the app came back",
        back.elapsed()
    );
}

/// Issue #44: a body sealed with a key that is no longer configured is
/// held (not retried for days at the head of its queue): the page says
/// which event, why and what fixes it, a later event of another subject
/// goes on, and putting the key back releases it.
#[test]
fn an_undecryptable_event_is_held_and_paged_and_released_when_its_key_comes_back() {
    let app = RelayApp::start();
    app.mode("down");
    let config = |keys: &str| {
        relay_config(
            &app,
            ALWAYS_1H,
            &ladder(60),
            &format!("[store]\nencryption_key = {keys}"),
        )
    };
    let work = Workdir::new(&config(&format!("\"{KEY_A}\"")));
    let hw = Sidecar::start(&work.config_path());
    let old = send(
        hw.addr,
        "msg_key_0",
        &clerk_event("user.deleted", "user_k0", "k0@example.com"),
    );
    wait_for(LIMIT, "a failed attempt", || {
        (num(&forward(hw.addr), "consecutive_failures") >= 1).then_some(())
    });
    assert!(hw.stop().success());

    // The key is regenerated: A is gone.
    work.write_config(&config(&format!("\"{KEY_B}\"")));
    app.mode("up");
    let hw = Sidecar::start(&work.config_path());
    let held = wait_for(LIMIT, "the held page", || {
        pages(&hw, "forward_held")
            .into_iter()
            .find(|p| p["status"] == "firing")
    });
    assert_eq!(held["severity"], "critical", "{held}");
    let summary = held["summary"].as_str().unwrap();
    assert!(summary.contains(&old.id), "{summary}");
    assert!(
        summary.contains("not in [store] encryption_key"),
        "{summary}"
    );
    assert!(
        summary.contains("hushwatch forward skip --config"),
        "{summary}"
    );
    wait_for(LIMIT, "the held gauge", || {
        (crate::common::metric(hw.addr, r#"hushwatch_forward_held{stream="identity"}"#) == 1.0)
            .then_some(())
    });
    let new = send(
        hw.addr,
        "msg_key_1",
        &clerk_event("user.deleted", "user_k1", "k1@example.com"),
    );
    app.wait_accepted(LIMIT, std::slice::from_ref(&new));
    assert!(of_id(&app.deliveries(), &old.id).is_empty());
    assert!(hw.stop().success());

    // The old key back (after the new one): released, delivered.
    work.write_config(&config(&format!("[\"{KEY_B}\", \"{KEY_A}\"]")));
    let hw = Sidecar::start(&work.config_path());
    app.wait_accepted(LIMIT, std::slice::from_ref(&old));
    wait_for(LIMIT, "the held page resolved", || {
        (!with_status(&pages(&hw, "forward_held"), "resolved").is_empty()).then_some(())
    });
}

/// Issue #44: someone with write access to the SQLite file turns a sealed
/// row into plaintext (key id NULL, a forged body). hushwatch holds it
/// rather than signing and forwarding the forged body.
#[test]
fn a_row_relabelled_to_plaintext_in_sqlite_is_held_not_forwarded() {
    let app = RelayApp::start();
    app.mode("down");
    let work = Workdir::new(&relay_config(
        &app,
        ALWAYS_1H,
        &ladder(60),
        &format!("[store]\nencryption_key = \"{KEY_A}\""),
    ));
    let hw = Sidecar::start(&work.config_path());
    let sent = send(
        hw.addr,
        "msg_relabel_0",
        &clerk_event("user.deleted", "user_r0", "r0@example.com"),
    );
    wait_for(LIMIT, "a failed attempt", || {
        (num(&forward(hw.addr), "consecutive_failures") >= 1).then_some(())
    });
    assert!(hw.stop().success());
    let forged = clerk_event("user.created", "user_attacker", "evil@example.com");
    let db = rusqlite::Connection::open(work.path().join("data/hushwatch.sqlite3")).unwrap();
    let n = db
        .execute(
            "UPDATE forwards SET key_id = NULL, body = ?1 WHERE delivery_id = ?2",
            rusqlite::params![forged.as_bytes(), sent.id],
        )
        .unwrap();
    assert_eq!(n, 1);
    drop(db);

    app.mode("up");
    let hw = Sidecar::start(&work.config_path());
    // Not `wait_for`: when the page does not come (2 of 3 runs of the
    // relay suite on a loaded machine, issue #44 leftovers), the failure
    // says what the relay and the log showed.
    let deadline = Instant::now() + LIMIT;
    let held = loop {
        if let Some(p) = pages(&hw, "forward_held")
            .into_iter()
            .find(|p| p["status"] == "firing")
        {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "no held page within {LIMIT:?}; relay: {}\npages: {:?}\nlog:\n{}",
            forward(hw.addr),
            hw.stdout_lines(),
            hw.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        held["summary"]
            .as_str()
            .unwrap()
            .contains("claims a plaintext body"),
        "{held}"
    );
    // A later event goes out; the forged body never does.
    let later = send(
        hw.addr,
        "msg_relabel_1",
        &clerk_event("user.deleted", "user_r1", "r1@example.com"),
    );
    app.wait_accepted(LIMIT, std::slice::from_ref(&later));
    assert!(
        app.deliveries()
            .iter()
            .all(|d| !d.body.contains("user_attacker")),
        "the forged body was forwarded"
    );
}

/// `hushwatch check` prints each relaying stream's schedule as the
/// forwarder will run it: the steps, then the last one repeating until
/// `give_up_after`, the order and `critical_after`.
#[test]
fn check_prints_the_ladder_that_repeats_its_last_step_the_order_and_critical_after() {
    let app = RelayApp::start();
    let forward_lines = "retry = [\"5s\", \"30s\"]\ncritical_after = \"30m\"";
    let work = Workdir::new(&relay_config(&app, ALWAYS_1H, forward_lines, ""));
    let (code, out, err) = cli(&["check"], &work.config_path());
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("ordered per subject")
            && out.contains("retries after [5s, 30s] then every 30s until it gives up after 7d")
            && out.contains("critical when a revocation waits 30m"),
        "{out}"
    );
    let bad = relay_config(&app, ALWAYS_1H, "ordered = \"user\"\nretry = []", "");
    work.write_config(&bad);
    let (code, out, err) = cli(&["check"], &work.config_path());
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("streams.identity.forward.ordered: must be \"subject\"")
            && err.contains("streams.identity.forward.retry: needs at least one step"),
        "{err}"
    );
}
