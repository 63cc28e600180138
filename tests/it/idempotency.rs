//! `Idempotency-Key` on the operator routes (issue #30), over real HTTP to
//! the sidecar on a real SQLite file or PostgreSQL database, with the
//! manual clock; two real `hushwatch serve` processes on one PostgreSQL
//! database for the replica case.

use crate::common;
use crate::common::pg;

use common::{request, utc, wait_until, InProcess, Reply, Sidecar, Workdir, TOKEN};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

const ADMIN: &str = "admin-token-for-idempotency-tests";
const SVIX_A: &str = "svix-admin-token-a";
const SVIX_B: &str = "svix-admin-token-b";
const OPS_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SILENCE: &str =
    r#"{"streams": ["identity"], "duration": "1h", "comment": "deploy", "created_by": "ci"}"#;

/// Every wait in this file; generous, since the machine is shared.
const LIMIT: Duration = Duration::from_secs(60);

/// `identity` with `[server] admin_token`, three Svix sources (`a` and `c`
/// share a token, `b` has its own) and, with `db`, `[store] url`.
fn ops_config(db: Option<&pg::PgDb>) -> String {
    let mut text = format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"
admin_token = "{ADMIN}"

[streams.identity]
calendar = "always"
silence_threshold = "1h"
notify = ["log"]
[streams.identity.ingest]
token = "{TOKEN}"

[notifiers.log]
kind = "log"
"#
    );
    for (name, token) in [("a", SVIX_A), ("b", SVIX_B), ("c", SVIX_A)] {
        text.push_str(&format!(
            "\n[svix.{name}]\nsecret = \"{OPS_SECRET}\"\nstreams = [\"identity\"]\nnotify = [\"log\"]\nadmin_token = \"{token}\"\n"
        ));
    }
    if let Some(db) = db {
        text.push_str(&format!("\n[store]\nurl = \"{}\"\npool_size = 3\n", db.url));
    }
    text
}

/// One request with `token` and the given extra headers.
fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let auth = format!("Bearer {token}");
    let mut all = vec![
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    all.extend_from_slice(headers);
    request(addr, method, path, &all, body.as_bytes())
}

fn post_silence(addr: SocketAddr, key: &str, body: &str) -> Reply {
    call(
        addr,
        "POST",
        "/v1/silences",
        ADMIN,
        &[("Idempotency-Key", key)],
        body,
    )
}

fn replayed(reply: &Reply) -> bool {
    reply.header("X-Idempotent-Replayed") == Some("true")
}

/// The ids of every stored silence (active or not), over the API.
fn silence_ids(addr: SocketAddr) -> Vec<i64> {
    let reply = call(addr, "GET", "/v1/silences", ADMIN, &[], "");
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()["silences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_i64().unwrap())
        .collect()
}

/// Starts the in-process sidecar (SQLite, or PostgreSQL with `db`).
fn start(work: &Workdir) -> InProcess {
    InProcess::start(work, utc("2026-12-01T10:00:00Z"))
}

fn advance(s: &InProcess, secs: i64) {
    s.clock.advance(chrono::TimeDelta::seconds(secs));
}

/// Every byte of every file under `dir`.
fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(all_bytes(&path));
        } else {
            out.extend(std::fs::read(&path).unwrap_or_default());
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

// ------------------------------------------------------------ the scenarios
// Each runs on SQLite and on PostgreSQL (below).

/// A retry replays the first answer (with the header), also under the
/// `X-Idempotency-Key` name; a successful DELETE's retry is its 200 again,
/// not a 404.
fn retry_replays(s: &InProcess) {
    let first = post_silence(s.addr, "retry-key-1", SILENCE);
    assert_eq!(first.status, 201, "{}", first.body);
    assert!(!replayed(&first), "a first answer is not marked replayed");
    let again = post_silence(s.addr, "retry-key-1", SILENCE);
    assert_eq!(
        (again.status, again.body.as_str()),
        (201, first.body.as_str())
    );
    assert!(replayed(&again), "{:?}", again.headers);
    assert_eq!(again.header("Content-Type"), Some("application/json"));
    let x = call(
        s.addr,
        "POST",
        "/v1/silences",
        ADMIN,
        &[("X-Idempotency-Key", "retry-key-1")],
        SILENCE,
    );
    assert_eq!((x.status, x.body.as_str()), (201, first.body.as_str()));
    assert!(replayed(&x));
    let id = first.json()["id"].as_i64().unwrap();
    assert_eq!(silence_ids(s.addr), vec![id], "one silence for three calls");

    let path = format!("/v1/silences/{id}?created_by=ci");
    let key = [("Idempotency-Key", "delete-key-1")];
    let expired = call(s.addr, "DELETE", &path, ADMIN, &key, "");
    assert_eq!(expired.status, 200, "{}", expired.body);
    let retried = call(s.addr, "DELETE", &path, ADMIN, &key, "");
    assert_eq!(
        (retried.status, retried.body.as_str()),
        (200, expired.body.as_str())
    );
    assert!(replayed(&retried));
    // The same key on another silence is another request: 422, not the
    // first one's answer.
    let other = call(
        s.addr,
        "DELETE",
        "/v1/silences/999?created_by=ci",
        ADMIN,
        &key,
        "",
    );
    assert_eq!(other.status, 422, "{}", other.body);
}

/// The same key with another body is 422 and runs nothing.
fn another_body_is_422(s: &InProcess) {
    let first = post_silence(s.addr, "body-key", SILENCE);
    assert_eq!(first.status, 201, "{}", first.body);
    let before = silence_ids(s.addr);
    let other = SILENCE.replace("deploy", "another deploy");
    let reply = post_silence(s.addr, "body-key", &other);
    assert_eq!(reply.status, 422, "{}", reply.body);
    assert!(!replayed(&reply));
    assert!(reply.json()["error"]
        .as_str()
        .unwrap()
        .contains("different request"));
    assert_eq!(silence_ids(s.addr), before, "the 422 stored nothing");
}

/// 20 requests with one key at once: one silence, every answer its 201
/// (or 409 while it ran).
fn burst_runs_once(addrs: &[SocketAddr], key: &str) {
    let before = silence_ids(addrs[0]).len();
    let replies: Vec<Reply> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..20)
            .map(|i| {
                let addr = addrs[i % addrs.len()];
                scope.spawn(move || post_silence(addr, key, SILENCE))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let created: Vec<&str> = replies
        .iter()
        .filter(|r| r.status == 201)
        .map(|r| r.body.as_str())
        .collect();
    assert!(!created.is_empty(), "at least one ran");
    assert!(created.iter().all(|b| *b == created[0]), "{created:?}");
    for r in &replies {
        assert!(matches!(r.status, 201 | 409), "{} {}", r.status, r.body);
    }
    assert_eq!(
        silence_ids(addrs[0]).len(),
        before + 1,
        "exactly one silence for 20 concurrent calls"
    );
    // Once it finished, every retry is the replay.
    let last = post_silence(addrs[addrs.len() - 1], key, SILENCE);
    assert_eq!((last.status, last.body.as_str()), (201, created[0]));
    assert!(replayed(&last));
}

/// Keys are scoped by the token and by the route.
fn scoped_by_token_and_route(s: &InProcess) {
    let ack = r#"{"endpoint_id": "ep_1", "msg_ids": []}"#;
    let key = [("Idempotency-Key", "shared-key")];
    let a = call(s.addr, "POST", "/v1/svix/a/acknowledge", SVIX_A, &key, ack);
    assert_eq!(a.status, 200, "{}", a.body);
    // Another token, the same key and body: its own call, not a replay and
    // not a 422.
    let b = call(s.addr, "POST", "/v1/svix/b/acknowledge", SVIX_B, &key, ack);
    assert_eq!(b.status, 200, "{}", b.body);
    assert!(!replayed(&b), "another token's key never replays");
    // The same token on the same route template with another path: the
    // key is taken (so the token is what kept `b` apart).
    let c = call(s.addr, "POST", "/v1/svix/c/acknowledge", SVIX_A, &key, ack);
    assert_eq!(c.status, 422, "{}", c.body);
    // The same key on the operator routes (another token, other routes)
    // runs there.
    let silence = post_silence(s.addr, "shared-key", SILENCE);
    assert_eq!(silence.status, 201, "{}", silence.body);
    assert!(!replayed(&silence));
    // And `/v1/silences` never collides with `/acknowledge`: the stream
    // is not firing, and that is what the call answers (it ran).
    let body = r#"{"created_by": "ci", "comment": "on it"}"#;
    let acked = call(
        s.addr,
        "POST",
        "/v1/streams/identity/acknowledge",
        ADMIN,
        &key,
        body,
    );
    assert_eq!(acked.status, 409, "{}", acked.body);
    assert!(acked.body.contains("not firing"), "{}", acked.body);
}

/// A refused call is never stored: its retry runs again, and the key is
/// free for a corrected request.
fn refusals_are_not_replayed(s: &InProcess) {
    let bad = r#"{"streams": ["identity"], "comment": "no end", "created_by": "ci"}"#;
    let first = post_silence(s.addr, "fix-key", bad);
    assert_eq!(first.status, 400, "{}", first.body);
    let second = post_silence(s.addr, "fix-key", bad);
    assert_eq!(second.status, 400, "{}", second.body);
    assert!(!replayed(&second), "a 400 is not replayed");
    let fixed = post_silence(s.addr, "fix-key", SILENCE);
    assert_eq!(fixed.status, 201, "{}", fixed.body);
    assert!(!replayed(&fixed));
}

/// Keys over 255 bytes or outside visible ASCII are 400, after the token.
fn malformed_keys(s: &InProcess) {
    let long = "k".repeat(256);
    let max = "m".repeat(255);
    for key in [long.as_str(), "caf\u{e9}", "has space", ""] {
        let reply = post_silence(s.addr, key, SILENCE);
        assert_eq!(reply.status, 400, "{key:?}: {}", reply.body);
    }
    let both = call(
        s.addr,
        "POST",
        "/v1/silences",
        ADMIN,
        &[("Idempotency-Key", "one"), ("X-Idempotency-Key", "two")],
        SILENCE,
    );
    assert_eq!(both.status, 400, "{}", both.body);
    let reply = post_silence(s.addr, &max, SILENCE);
    assert_eq!(reply.status, 201, "{}", reply.body);
    // The credential is checked first: a wrong token is 401 whatever the key.
    let wrong = call(
        s.addr,
        "POST",
        "/v1/silences",
        "not-the-token",
        &[("Idempotency-Key", long.as_str())],
        SILENCE,
    );
    assert_eq!(wrong.status, 401, "{}", wrong.body);
}

/// A client's own `X-Idempotent-Replayed` changes nothing.
fn forged_header_ignored(s: &InProcess) {
    let before = silence_ids(s.addr).len();
    let forged = [
        ("Idempotency-Key", "forged-key"),
        ("X-Idempotent-Replayed", "true"),
    ];
    let reply = call(s.addr, "POST", "/v1/silences", ADMIN, &forged, SILENCE);
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert!(!replayed(&reply), "never echoed");
    let plain = [("X-Idempotent-Replayed", "true")];
    let reply = call(s.addr, "POST", "/v1/silences", ADMIN, &plain, SILENCE);
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert!(!replayed(&reply));
    assert_eq!(silence_ids(s.addr).len(), before + 2, "both ran");
}

/// A record lives 24 hours: replayed before, pruned (by the housekeeping
/// loop, or by the call it makes) and run anew after. `count` reads how
/// many records the database holds.
fn expires_after_a_day(s: &InProcess, count: &dyn Fn() -> i64, by_housekeeping: bool) {
    let first = post_silence(s.addr, "daily-key", SILENCE);
    assert_eq!(first.status, 201, "{}", first.body);
    advance(s, 23 * 3600);
    let replay = post_silence(s.addr, "daily-key", SILENCE);
    assert!(replayed(&replay), "still replayed after 23 h");
    assert!(count() > 0);
    // Past 24 h (and past the hourly housekeeping): pruned.
    advance(s, 3600 + 60);
    if by_housekeeping {
        // Time moves on in steps; the hourly housekeeping round prunes.
        wait_until("housekeeping to prune the expired keys", || {
            if count() == 0 {
                return Some(());
            }
            advance(s, 600);
            std::thread::sleep(Duration::from_millis(50));
            None
        });
    } else {
        // What housekeeping calls. (On PostgreSQL housekeeping runs only
        // under a live leader lease, and a manual clock jumping hours ends
        // every lease it takes, so the test calls the prune itself.)
        s.block_on(s.app().store().prune_idempotency()).unwrap();
        assert_eq!(count(), 0, "the expired records are gone");
    }
    let anew = post_silence(s.addr, "daily-key", SILENCE);
    assert_eq!(anew.status, 201, "{}", anew.body);
    assert!(!replayed(&anew), "an expired key runs anew");
    assert_ne!(anew.json()["id"], first.json()["id"]);
}

fn all_scenarios(s: &InProcess) {
    retry_replays(s);
    another_body_is_422(s);
    burst_runs_once(&[s.addr], "burst-key");
    scoped_by_token_and_route(s);
    refusals_are_not_replayed(s);
    malformed_keys(s);
    forged_header_ignored(s);
}

// ------------------------------------------------------------------ SQLite

fn sqlite_count(dir: &Path) -> i64 {
    let db = dir.join("data").join(hushwatch::service::STATE_FILE);
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.query_row("SELECT count(*) FROM idempotency_keys", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn on_sqlite_retries_replay_conflicts_refuse_and_keys_are_scoped() {
    let work = Workdir::new(&ops_config(None));
    let s = start(&work);
    all_scenarios(&s);
    s.stop();
    // Neither the raw keys nor the tokens are anywhere in the data files
    // (database, WAL), only their hashes.
    let bytes = all_bytes(&work.path().join("data"));
    assert!(!bytes.is_empty());
    for secret in [
        "retry-key-1",
        "shared-key",
        "forged-key",
        "burst-key",
        ADMIN,
        SVIX_A,
    ] {
        assert!(
            !contains(&bytes, secret.as_bytes()),
            "{secret} is stored raw"
        );
    }
}

#[test]
fn on_sqlite_a_key_expires_after_24_hours() {
    let work = Workdir::new(&ops_config(None));
    let s = start(&work);
    let data = work.path().to_path_buf();
    expires_after_a_day(&s, &|| sqlite_count(&data), true);
    s.stop();
}

// -------------------------------------------------------------- PostgreSQL

#[test]
fn on_postgresql_retries_replay_conflicts_refuse_and_keys_are_scoped() {
    let Some(db) = pg::PgDb::create("idempotency_pg") else {
        return;
    };
    let work = Workdir::new(&ops_config(Some(&db)));
    let s = start(&work);
    all_scenarios(&s);
    s.stop();
    let stored = db.query(
        "SELECT key_sha256 || ' ' || request_sha256 || ' ' || coalesce(body, '') FROM idempotency_keys",
    );
    assert!(!stored.is_empty());
    for row in &stored {
        for secret in [
            "retry-key-1",
            "shared-key",
            "forged-key",
            "burst-key",
            ADMIN,
            SVIX_A,
        ] {
            assert!(!row.contains(secret), "{secret} is stored raw: {row}");
        }
    }
}

#[test]
fn on_postgresql_a_key_expires_after_24_hours() {
    let Some(db) = pg::PgDb::create("idempotency_pg_expiry") else {
        return;
    };
    let work = Workdir::new(&ops_config(Some(&db)));
    let s = start(&work);
    expires_after_a_day(
        &s,
        &|| {
            db.query("SELECT count(*) FROM idempotency_keys")[0]
                .parse()
                .unwrap()
        },
        false,
    );
    s.stop();
}

/// Two `hushwatch serve` processes on one database, 20 requests with one
/// key split between them at once: one silence.
#[test]
fn on_postgresql_two_replicas_run_one_key_once() {
    let Some(db) = pg::PgDb::create("idempotency_replicas") else {
        return;
    };
    let work = Workdir::new(&ops_config(Some(&db)));
    let one = Sidecar::start(&work.config_path());
    let two = Sidecar::start(&work.config_path());
    burst_runs_once(&[one.addr, two.addr], "replica-burst-key");
    // The other replica replays what the first answered, and refuses a
    // different body.
    let created = post_silence(one.addr, "replica-key", SILENCE);
    assert_eq!(created.status, 201, "{}", created.body);
    let replay = post_silence(two.addr, "replica-key", SILENCE);
    assert_eq!(
        (replay.status, replay.body.as_str()),
        (201, created.body.as_str())
    );
    assert!(replayed(&replay));
    let other = post_silence(two.addr, "replica-key", &SILENCE.replace("deploy", "x"));
    assert_eq!(other.status, 422, "{}", other.body);
    one.stop();
    two.stop();
}

// --------------------------------------------------------------------- CLI

/// A one-shot HTTP server that records each request's head and answers 201
/// `{"id": 1}`; the heads, in order.
fn capture(n: usize) -> (SocketAddr, std::thread::JoinHandle<Vec<String>>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = std::thread::spawn(move || {
        let mut heads = Vec::new();
        for _ in 0..n {
            let (mut conn, _) = listener.accept().unwrap();
            conn.set_read_timeout(Some(LIMIT)).unwrap();
            let mut raw = Vec::new();
            let mut buf = [0u8; 4096];
            let head = loop {
                let got = conn.read(&mut buf).unwrap();
                assert!(got > 0, "the client closed before its head ended");
                raw.extend_from_slice(&buf[..got]);
                if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                    break String::from_utf8_lossy(&raw[..end]).into_owned();
                }
            };
            let body = b"{\"id\": 1}";
            let answer = format!(
                "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            conn.write_all(answer.as_bytes()).unwrap();
            conn.write_all(body).unwrap();
            heads.push(head);
        }
        heads
    });
    (addr, heads)
}

fn key_of(head: &str) -> Option<String> {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case("idempotency-key"))
        .map(|(_, v)| v.trim().to_string())
}

#[test]
fn the_cli_sends_a_fresh_key_with_every_change() {
    let (addr, heads) = capture(4);
    let url = format!("http://{addr}");
    let cli = |args: &[&str]| {
        let out = crate::common::cli(args)
            .args(&["--url", url.as_str(), "--token-env", "OPS_TOKEN"])
            .env("OPS_TOKEN", ADMIN)
            .output();
        assert!(out.status.success(), "{args:?}: {out:?}");
    };
    let add = [
        "silence",
        "add",
        "--stream",
        "identity",
        "--for",
        "1h",
        "--comment",
        "x",
    ];
    cli(&add);
    cli(&add);
    cli(&["ack", "--stream", "identity", "--comment", "on it"]);
    cli(&["silence", "list"]);
    let heads = heads.join().unwrap();
    let keys: Vec<Option<String>> = heads.iter().map(|h| key_of(h)).collect();
    for key in keys[..3].iter() {
        let key = key.as_deref().expect("a change carries a key");
        assert_eq!(key.len(), 32, "128 random bits in hex: {key}");
        assert!(key.bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
    }
    assert_ne!(keys[0], keys[1], "each invocation has its own key");
    assert_ne!(keys[1], keys[2]);
    assert_eq!(keys[3], None, "a listing changes nothing and sends no key");
}
