//! Hostile requests against the real binary: each is answered with the right
//! status, the server stays up, and memory stays bounded. Only 127.0.0.1,
//! bounded loops, no timing asserts (elapsed times are printed for the
//! security review, not checked).

use crate::common;

use common::*;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(30);

/// The tests that open thousands of sockets run one at a time: sharing two
/// cores with each other they could not open their connections before the
/// server's 10 s header timeout starts closing the first ones.
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

fn start() -> (Workdir, Sidecar) {
    let work = Workdir::new(&basic_config(
        "calendar = \"always\"\nsilence_threshold = \"1h\"",
    ));
    let sidecar = Sidecar::start(&work.config_path());
    (work, sidecar)
}

fn assert_alive(addr: SocketAddr) {
    assert_eq!(
        get(addr, "/healthz").status,
        200,
        "server stopped answering"
    );
}

/// Resident memory of a process in KiB, from /proc/PID/status.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// Sockets the process holds open (its listener plus accepted connections).
fn open_sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            std::fs::read_link(e.path())
                .map(|t| t.to_string_lossy().starts_with("socket:"))
                .unwrap_or(false)
        })
        .count()
}

/// Sends raw bytes and reads the reply (or what there is of it) until close.
fn raw_exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(LONG)).unwrap();
    // The server may answer and close before reading everything we send.
    let _ = stream.write_all(bytes);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    String::from_utf8_lossy(&raw).into_owned()
}

fn status_of(reply: &str) -> u16 {
    reply
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {reply:?}"))
}

fn signed_headers(msg_id: &str, body: &[u8]) -> (String, String) {
    let key = hushwatch::ingest::signature::SecretKey::parse(SECRET).unwrap();
    let ts = now_unix();
    (
        ts.to_string(),
        hushwatch::ingest::signature::sign(&key, msg_id, ts, body),
    )
}

/// Largest request head the server accepts (`MAX_HEAD_BUFFER` in src/http).
const HEAD_LIMIT: usize = 32 * 1024;

#[test]
fn huge_header_is_refused_and_the_server_stays_up() {
    let (_work, s) = start();
    // A 16 KiB header is unusual but legitimate: served.
    let ok = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(16 * 1024)
    );
    assert_eq!(status_of(&raw_exchange(s.addr, ok.as_bytes())), 200);
    for size in [200 * 1024, 1024 * 1024, 8 * 1024 * 1024] {
        let head = format!(
            "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
            "a".repeat(size)
        );
        let reply = raw_exchange(s.addr, head.as_bytes());
        let status = status_of(&reply);
        eprintln!("{} KiB header -> {status}", size / 1024);
        assert_eq!(status, 431, "{size}-byte header");
        assert_alive(s.addr);
    }
    // Too many headers: also refused.
    let mut head = String::from("GET /healthz HTTP/1.1\r\nHost: x\r\n");
    for i in 0..500 {
        head.push_str(&format!("X-H{i}: v\r\n"));
    }
    head.push_str("Connection: close\r\n\r\n");
    let status = status_of(&raw_exchange(s.addr, head.as_bytes()));
    eprintln!("500 headers -> {status}");
    assert_eq!(status, 431, "500 headers");
    assert_alive(s.addr);
}

fn webhook_with_signature(addr: SocketAddr, ts: &str, signature: &str, body: &[u8]) -> u16 {
    let started = Instant::now();
    let reply = request(
        addr,
        "POST",
        "/v1/streams/identity/webhook",
        &[
            ("svix-id", "msg_many"),
            ("svix-timestamp", ts),
            ("svix-signature", signature),
        ],
        body,
    );
    eprintln!(
        "{} KiB signature header -> {} in {:?}",
        signature.len() / 1024,
        reply.status,
        started.elapsed()
    );
    reply.status
}

#[test]
fn ten_thousand_signatures_in_one_header_are_refused() {
    let (_work, s) = start();
    let body = br#"{"type":"user.created"}"#;
    let (ts, good) = signed_headers("msg_many", body);
    let wrong = good.replace(&good[3..8], "AAAAA");
    assert_ne!(wrong, good);

    // 10,000 entries do not fit the request-head buffer: 431 before any
    // signature work, short or full-length.
    let short = vec!["v1,AAAA"; 10_000].join(" ");
    assert_eq!(webhook_with_signature(s.addr, &ts, &short, body), 431);
    let full = vec![wrong.as_str(); 10_000].join(" ");
    assert_eq!(webhook_with_signature(s.addr, &ts, &full, body), 431);

    // As many as fit: every entry is parsed, none matches, 401.
    let fit_short = vec!["v1,A"; 6_000].join(" ");
    assert!(fit_short.len() < HEAD_LIMIT - 1024);
    assert_eq!(webhook_with_signature(s.addr, &ts, &fit_short, body), 401);
    let fit_full = vec![wrong.as_str(); 600].join(" ");
    assert!(fit_full.len() < HEAD_LIMIT - 1024);
    assert_eq!(webhook_with_signature(s.addr, &ts, &fit_full, body), 401);

    // The genuine tag hidden among 5,999 decoys still verifies.
    let mut decoys = vec!["v1,A"; 5_999];
    decoys.push(&good);
    assert_eq!(
        webhook_with_signature(s.addr, &ts, &decoys.join(" "), body),
        200
    );
    assert_alive(s.addr);
}

#[test]
fn non_utf8_bodies_get_the_right_status() {
    let (_work, s) = start();
    let junk: &[u8] = &[0xff, 0xfe, 0x00, 0xc3, 0x28, b'{', 0x80];
    // Unsigned webhook: refused before the body matters.
    let reply = request(
        s.addr,
        "POST",
        "/v1/streams/identity/webhook",
        &[("content-type", "application/json")],
        junk,
    );
    assert_eq!(reply.status, 401);
    // Wrongly signed webhook: 401.
    let (ts, _) = signed_headers("msg_bin", junk);
    let reply = request(
        s.addr,
        "POST",
        "/v1/streams/identity/webhook",
        &[
            ("svix-id", "msg_bin"),
            ("svix-timestamp", &ts),
            (
                "svix-signature",
                "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            ),
        ],
        junk,
    );
    assert_eq!(reply.status, 401);
    // App report with a valid token: 400, naming JSON, not echoing bytes.
    let auth = format!("Bearer {TOKEN}");
    let reply = request(
        s.addr,
        "POST",
        "/v1/streams/identity/events",
        &[("authorization", &auth)],
        junk,
    );
    assert_eq!(reply.status, 400);
    assert!(reply.body.contains("JSON"), "{}", reply.body);
    // Correctly signed binary webhook: the sender proved who it is, so it
    // is an arrival of type `unknown` (refusing would make Svix retry).
    let (ts, sig) = signed_headers("msg_bin_ok", junk);
    let reply = request(
        s.addr,
        "POST",
        "/v1/streams/identity/webhook",
        &[
            ("svix-id", "msg_bin_ok"),
            ("svix-timestamp", &ts),
            ("svix-signature", &sig),
        ],
        junk,
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        stream_status(s.addr, "identity")["last_event_type"],
        "unknown"
    );
    // Non-UTF-8 bytes in a header value: refused, server up.
    let head = b"POST /v1/streams/identity/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}".to_vec();
    let status = status_of(&raw_exchange(s.addr, &head));
    assert_eq!(status, 401, "non-UTF-8 Authorization header");
    assert_alive(s.addr);
}

#[test]
fn json_nesting_bombs_do_not_crash() {
    let (_work, s) = start();
    // ~1 MiB of nesting, just under the body limit.
    let depth = 500_000;
    let array_bomb = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let object_bomb = format!("{}1{}", r#"{"a":"#.repeat(100_000), "}".repeat(100_000));
    let typed_bomb = format!(
        r#"{{"type":"user.created","data":{}1{}}}"#,
        "[".repeat(200_000),
        "]".repeat(200_000)
    );
    for (i, bomb) in [&array_bomb, &object_bomb, &typed_bomb]
        .into_iter()
        .enumerate()
    {
        assert!(
            bomb.len() <= hushwatch::http::MAX_BODY,
            "bomb {i} too large"
        );
        let id = format!("msg_bomb_{i}");
        let (ts, sig) = signed_headers(&id, bomb.as_bytes());
        let reply = request(
            s.addr,
            "POST",
            "/v1/streams/identity/webhook",
            &[
                ("svix-id", &id),
                ("svix-timestamp", &ts),
                ("svix-signature", &sig),
            ],
            bomb.as_bytes(),
        );
        assert_eq!(reply.status, 200, "signed bomb {i}: {}", reply.body);
        assert_eq!(
            stream_status(s.addr, "identity")["last_event_type"],
            "unknown",
            "bomb {i} is recorded as an unknown-type arrival"
        );
        let reply = post_events(s.addr, "identity", TOKEN, bomb);
        assert_eq!(reply.status, 400, "app report bomb {i}: {}", reply.body);
        assert_alive(s.addr);
    }
    // Svix operational route with no source configured: 404, still no crash.
    let reply = request(
        s.addr,
        "POST",
        "/v1/svix/nope/operational",
        &[],
        array_bomb.as_bytes(),
    );
    assert_eq!(reply.status, 404);
    assert_alive(s.addr);
}

#[test]
fn slowloris_is_cut_off_and_others_are_served_meanwhile() {
    let (_work, s) = start();
    let addr = s.addr;
    let slow = std::thread::spawn(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
            .unwrap();
        let started = Instant::now();
        let deadline = started + Duration::from_secs(40);
        let mut buf = [0u8; 1024];
        let mut answer = Vec::new();
        // One header byte every ~100 ms (the read timeout paces us) until
        // the server closes the connection.
        while Instant::now() < deadline {
            if stream.write_all(b"a").is_err() {
                return (started.elapsed(), answer);
            }
            match stream.read(&mut buf) {
                Ok(0) => return (started.elapsed(), answer),
                Ok(n) => answer.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return (started.elapsed(), answer),
            }
        }
        panic!("slowloris connection still open after 40 s");
    });
    let mut served = 0;
    while !slow.is_finished() {
        assert_alive(addr);
        served += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    let (elapsed, answer) = slow.join().unwrap();
    eprintln!(
        "slowloris cut after {elapsed:?} (answer {:?}); {served} other requests served meanwhile",
        String::from_utf8_lossy(&answer).lines().next()
    );
    assert!(served > 0);
    assert_alive(addr);
}

/// How many idle connections to open; `HUSHWATCH_IDLE_CONNECTIONS` raises
/// it, e.g. to 10,000 (needs that many fds here and in the server).
fn idle_target() -> usize {
    std::env::var("HUSHWATCH_IDLE_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

/// The server's connection cap (`MAX_CONNECTIONS` in src/http).
const CONNECTION_CAP: usize = 4_096;

#[test]
fn many_idle_connections_keep_health_answering_in_bounded_memory() {
    let _one_at_a_time = heavy();
    let (_work, s) = start();
    let pid = s.child.id();
    let addr = s.addr;
    let baseline = open_sockets(pid);
    let rss_before = rss_kib(pid);
    let target = idle_target();
    // Opened from other threads, several at once: a connect() whose SYN the
    // kernel dropped (full accept queue, busy machine) waits a whole second
    // before retrying, and the first connections are cut 10 s after accept.
    let openers: Vec<_> = (0..8)
        .map(|i| {
            let share = target / 8 + usize::from(i < target % 8);
            std::thread::spawn(move || {
                let mut idle = Vec::with_capacity(share);
                for _ in 0..share {
                    match TcpStream::connect(addr) {
                        Ok(c) => idle.push(c),
                        Err(e) => {
                            eprintln!("an opener stopped at {} connections: {e}", idle.len());
                            break;
                        }
                    }
                }
                idle
            })
        })
        .collect();
    let opener = std::thread::spawn(move || {
        openers
            .into_iter()
            .flat_map(|o| o.join().unwrap())
            .collect::<Vec<_>>()
    });
    let expect = target.min(CONNECTION_CAP - 16);
    let mut peak = 0;
    // The first connections are cut 10 s after they were accepted, so on a
    // slow or busy machine the count may peak below the target: look until
    // the target is reached, the opener is done, or 9 s passed.
    let deadline = Instant::now() + Duration::from_secs(9);
    while peak < expect && Instant::now() < deadline {
        peak = peak.max(open_sockets(pid).saturating_sub(baseline));
        if opener.is_finished() && peak < expect {
            std::thread::sleep(Duration::from_millis(200));
            peak = peak.max(open_sockets(pid).saturating_sub(baseline));
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        peak >= expect.min(1_000),
        "the server held only {peak} idle connections at once"
    );
    let rss = rss_kib(pid);
    // Health answers: at once below the cap; past it, once the header
    // timeout frees slots (so allow for a wait).
    let started = Instant::now();
    assert_alive(addr);
    let health_after = started.elapsed();
    let held = open_sockets(pid).saturating_sub(baseline);
    peak = peak.max(held);
    eprintln!(
        "{target} idle connections: server held {peak} at most; RSS {} MiB (was {} MiB); /healthz answered after {health_after:?}",
        rss / 1024,
        rss_before / 1024
    );
    assert!(rss < 200 * 1024, "RSS {rss} KiB with idle connections");
    assert!(
        peak <= CONNECTION_CAP + 4,
        "server held {peak} connections, past its cap"
    );

    let mut idle = opener.join().unwrap();
    assert!(
        idle.len() >= 1_000,
        "could open only {} connections",
        idle.len()
    );
    // Idle connections are closed by the header timeout, not kept forever.
    let mut buf = [0u8; 256];
    for c in &mut idle[..100] {
        c.set_read_timeout(Some(LONG)).unwrap();
        // EOF or a reset: either way the server let go.
        assert!(
            !matches!(c.read(&mut buf), Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)),
            "an idle connection outlived the header timeout"
        );
    }
    drop(idle);
    wait_for(LONG, "the server to release the sockets", || {
        (open_sockets(pid) <= baseline + 10).then_some(())
    });
    assert_alive(addr);
}

#[test]
fn half_sent_headers_on_many_connections_stay_in_bounded_memory() {
    let _one_at_a_time = heavy();
    let (_work, s) = start();
    let pid = s.child.id();
    let rss_before = rss_kib(pid);
    // 2,000 connections that each park an unfinished head just under the
    // limit (the most a connection can make the server buffer).
    let chunk = format!(
        "GET /healthz HTTP/1.1\r\nX-Pad: {}",
        "a".repeat(HEAD_LIMIT - 1024)
    );
    let mut parked = Vec::new();
    for _ in 0..2_000 {
        let mut c = TcpStream::connect(s.addr).unwrap();
        c.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        if c.write_all(chunk.as_bytes()).is_ok() {
            parked.push(c);
        }
    }
    assert_alive(s.addr);
    let rss = rss_kib(pid);
    eprintln!(
        "{} connections x 31 KiB unfinished heads: RSS {} MiB (was {} MiB)",
        parked.len(),
        rss / 1024,
        rss_before / 1024
    );
    assert!(rss < 200 * 1024, "RSS {rss} KiB");
    drop(parked);
    assert_alive(s.addr);
}

/// Regression: the listener used to take `TcpListener::bind`'s backlog of
/// 128, so a burst of more connections overflowed the accept queue and the
/// overflow waited a full SYN retransmit (1 s, then 3 s). Reads the
/// listening socket's backlog (`ss` Send-Q); skipped where `ss` is missing.
#[test]
fn listener_backlog_queues_bursts_past_128_connections() {
    let (_work, s) = start();
    let Ok(out) = std::process::Command::new("ss")
        .args(["-ltnH", &format!("sport = :{}", s.addr.port())])
        .output()
    else {
        eprintln!("ss not installed: backlog not checked");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let backlog: u32 = text
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no Send-Q in ss output {text:?}"));
    let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(4096);
    eprintln!("listen backlog {backlog} (somaxconn {somaxconn})");
    assert_eq!(backlog, 1024.min(somaxconn));
}

// ---- Issue #11: heads judged before bodies, bounded bodies, the body
// deadline, per-channel dedup, cheap readiness, tokens, log escaping. ----

const WEBHOOK: &str = "/v1/streams/identity/webhook";
const OPERATIONAL: &str = "/v1/svix/ops/operational";
const REPORT: &str = "/v1/streams/identity/events";

/// The basic config plus `[server] body_timeout` and a Svix source `ops`
/// (same secret as the stream, so one signer serves both routes).
fn config_with_body_timeout(timeout: &str) -> String {
    let base = basic_config("calendar = \"always\"\nsilence_threshold = \"1h\"").replace(
        "data_dir = \"data\"",
        &format!("data_dir = \"data\"\nbody_timeout = \"{timeout}\""),
    );
    format!("{base}\n[svix.ops]\nsecret = \"{SECRET}\"\nstreams = [\"identity\"]\nnotify = [\"stdout\"]\n")
}

fn start_with_body_timeout(timeout: &str) -> (Workdir, Sidecar) {
    let work = Workdir::new(&config_with_body_timeout(timeout));
    let sidecar = Sidecar::start(&work.config_path());
    (work, sidecar)
}

/// Fresh signed-looking headers whose signature is wrong: what an attacker
/// without the secret can send, and enough to pass every check on the head.
fn forged_headers(msg_id: &str) -> Vec<(String, String)> {
    let sig = format!("v1,{}", "A".repeat(43) + "=");
    vec![
        ("svix-id".into(), msg_id.into()),
        ("svix-timestamp".into(), now_unix().to_string()),
        ("svix-signature".into(), sig),
    ]
}

/// Opens a connection and sends only a request head (keep-alive, no body).
fn send_head(
    addr: SocketAddr,
    path: &str,
    headers: &[(String, String)],
    content_length: usize,
) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut head =
        format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {content_length}\r\n");
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream
}

/// Reads one reply (without sending anything more) and then checks the
/// server closed the connection. Returns the status, or None if nothing
/// arrived within `limit`.
fn reply_then_close(stream: &mut TcpStream, limit: Duration) -> Option<(u16, bool)> {
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if raw.is_empty() {
                    return None;
                }
                // A reply but no close within the limit.
                return Some((status_of(&String::from_utf8_lossy(&raw)), false));
            }
            Err(_) => break, // reset: closed
        }
    }
    if raw.is_empty() {
        return None;
    }
    Some((status_of(&String::from_utf8_lossy(&raw)), true))
}

/// 404, 401 and 400 come from the head alone: the client sends a head that
/// announces a body and then nothing, and still gets its answer (before,
/// the server waited for the whole body first). The connection is closed
/// after the answer, since the announced body was never read. A declared
/// size over the cap is 413 before any credential check, on the app-report
/// route as on the signed ones.
#[test]
fn webhook_and_svix_heads_are_refused_before_any_body_byte() {
    let (_work, s) = start_with_body_timeout("10m");
    let fresh = forged_headers("msg_head");
    let stale: Vec<(String, String)> = fresh
        .iter()
        .map(|(n, v)| {
            let v = if n == "svix-timestamp" {
                (now_unix() - 400).to_string()
            } else {
                v.clone()
            };
            (n.clone(), v)
        })
        .collect();
    let garbled: Vec<(String, String)> = fresh
        .iter()
        .map(|(n, v)| {
            let v = if n == "svix-timestamp" {
                "soon".to_string()
            } else {
                v.clone()
            };
            (n.clone(), v)
        })
        .collect();
    type Case<'a> = (&'a str, &'a str, Vec<(String, String)>, usize, u16);
    let cases: Vec<Case> = vec![
        (
            "unknown stream",
            "/v1/streams/nope/webhook",
            fresh.clone(),
            1000,
            404,
        ),
        ("no signature headers", WEBHOOK, Vec::new(), 1000, 401),
        ("stale timestamp", WEBHOOK, stale.clone(), 1000, 400),
        ("unparseable timestamp", WEBHOOK, garbled.clone(), 1000, 400),
        ("declared 2 MiB", WEBHOOK, fresh.clone(), 2 << 20, 413),
        (
            "unknown Svix source",
            "/v1/svix/nope/operational",
            fresh.clone(),
            1000,
            404,
        ),
        (
            "Svix, no signature headers",
            OPERATIONAL,
            Vec::new(),
            1000,
            401,
        ),
        ("Svix, stale timestamp", OPERATIONAL, stale, 1000, 400),
        (
            "Svix, unparseable timestamp",
            OPERATIONAL,
            garbled,
            1000,
            400,
        ),
        ("Svix, declared 2 MiB", OPERATIONAL, fresh, 2 << 20, 413),
        ("app report, no token", REPORT, Vec::new(), 1000, 401),
        (
            "app report, declared 2 MiB",
            REPORT,
            Vec::new(),
            2 << 20,
            413,
        ),
    ];
    for (what, path, headers, length, expected) in cases {
        let started = Instant::now();
        let mut c = send_head(s.addr, path, &headers, length);
        let answer = reply_then_close(&mut c, LONG)
            .unwrap_or_else(|| panic!("{what}: no answer without the body"));
        eprintln!(
            "{what}: {} in {:?} with no body sent",
            answer.0,
            started.elapsed()
        );
        assert_eq!(answer, (expected, true), "{what}: (status, closed)");
    }
    assert_alive(s.addr);
}

/// A body that stops arriving gets 408 once `body_timeout` has passed since
/// the head, and the connection is closed; a slow body that completes in
/// time is served; a chunked body past 1 MiB is 413. On the webhook, the
/// Svix operational and the app-report routes.
#[test]
fn stalled_bodies_get_408_slow_complete_bodies_pass_huge_ones_413() {
    let (_work, s) = start_with_body_timeout("5s");
    let addr = s.addr;
    let auth = vec![("authorization".to_string(), format!("Bearer {TOKEN}"))];
    let stalled: Vec<_> = [
        ("webhook", WEBHOOK, forged_headers("msg_stall_1")),
        (
            "Svix operational",
            OPERATIONAL,
            forged_headers("msg_stall_2"),
        ),
        ("app report", "/v1/streams/identity/events", auth),
    ]
    .into_iter()
    .map(|(what, path, headers)| {
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut c = send_head(addr, path, &headers, 100);
            c.write_all(b"{").unwrap();
            let answer = reply_then_close(&mut c, LONG);
            (what, answer, started.elapsed())
        })
    })
    .collect();

    // Slow but complete and genuinely signed, on the Svix route: ten pieces
    // over about a second, well inside the 5 s deadline.
    let body = br#"{"type":"endpoint.created","data":{"appId":"app_1","endpointId":"ep_slow"}}"#;
    let (ts, sig) = signed_headers("msg_slow", body);
    let headers = vec![
        ("svix-id".to_string(), "msg_slow".to_string()),
        ("svix-timestamp".to_string(), ts),
        ("svix-signature".to_string(), sig),
    ];
    let mut c = send_head(addr, OPERATIONAL, &headers, body.len());
    for piece in body.chunks(body.len().div_ceil(10)) {
        c.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(100)); // the client's pace
    }
    c.set_read_timeout(Some(LONG)).unwrap();
    let mut buf = [0u8; 1024];
    let n = c.read(&mut buf).unwrap();
    assert_eq!(status_of(&String::from_utf8_lossy(&buf[..n])), 200);

    // Chunked past 1 MiB on the Svix route, with a head that passes.
    let mut c = TcpStream::connect(addr).unwrap();
    let mut head =
        format!("POST {OPERATIONAL} HTTP/1.1\r\nHost: {addr}\r\nTransfer-Encoding: chunked\r\n");
    for (n, v) in forged_headers("msg_huge") {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    c.write_all(head.as_bytes()).unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 64 * 1024, "a".repeat(64 * 1024));
    for _ in 0..18 {
        if c.write_all(chunk.as_bytes()).is_err() {
            break; // refused and closed before we finished
        }
    }
    let answer = reply_then_close(&mut c, LONG).expect("an answer to the chunked body");
    assert_eq!(answer.0, 413);

    for t in stalled {
        let (what, answer, elapsed) = t.join().unwrap();
        eprintln!("{what}: stalled body answered {answer:?} after {elapsed:?}");
        assert_eq!(answer, Some((408, true)), "{what}: 408 and closed");
    }
    assert_eq!(
        metric(
            addr,
            r#"hushwatch_events_total{outcome="timeout",stream="identity"}"#
        ),
        2.0
    );
    assert_alive(addr);
}

/// A keep-alive connection that goes quiet after a request is closed by the
/// header timeout (10 s), like one that never sent a head.
#[test]
fn idle_keep_alive_connections_are_closed() {
    let (_work, s) = start();
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", s.addr).as_bytes())
        .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(40))).unwrap();
    let mut buf = [0u8; 1024];
    let n = c.read(&mut buf).unwrap();
    assert_eq!(status_of(&String::from_utf8_lossy(&buf[..n])), 200);
    let idle_since = Instant::now();
    let closed = match c.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    };
    eprintln!(
        "idle keep-alive connection closed after {:?}",
        idle_since.elapsed()
    );
    assert!(closed, "an idle keep-alive connection was kept for 40 s");
}

/// Peak resident memory (high-water mark) of a process in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status")
}

/// The attack from issue #11: heads that pass every check on the head
/// (fresh timestamp, wrong signature, `Content-Length: 1048576`), then the
/// body one byte per TCP segment. It used to cost ~4 KiB of server memory
/// per byte sent (1.18 GB after 30 s with 200 connections). The body
/// deadline is raised to 10 min here so the drip runs its full 15 s.
#[test]
fn dripping_bodies_on_many_connections_stay_in_bounded_memory() {
    let _one_at_a_time = heavy();
    let (_work, s) = start_with_body_timeout("10m");
    let pid = s.child.id();
    let peak_before = peak_rss_kib(pid);
    let connections: Vec<TcpStream> = (0..150)
        .map(|i| {
            let path = if i % 5 == 4 { OPERATIONAL } else { WEBHOOK };
            send_head(
                s.addr,
                path,
                &forged_headers(&format!("msg_drip_{i}")),
                1 << 20,
            )
        })
        .collect();
    let started = Instant::now();
    let mut sent = 0usize;
    let mut rounds = 0;
    while started.elapsed() < Duration::from_secs(15) {
        for mut c in &connections {
            if c.write_all(b"a").is_ok() {
                sent += 1;
            }
        }
        rounds += 1;
        // The attacker's pace: one byte per connection every 20 ms.
        let next = started + Duration::from_millis(20) * rounds;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    assert_alive(s.addr);
    let peak = peak_rss_kib(pid);
    eprintln!(
        "150 connections dripping 1 byte/20 ms for 15 s ({rounds} rounds, {sent} body bytes): \
         peak RSS {} MiB (peak before {} MiB)",
        peak / 1024,
        peak_before / 1024
    );
    assert!(sent > 150 * 100, "only {sent} bytes were sent");
    // Issue #11's target is 64 MB; this debug build idles at ~15 MiB and the
    // drip adds a few MiB, while the old code passed 500 MiB within 15 s.
    assert!(peak < 64 * 1024, "peak RSS {peak} KiB under the drip");
    drop(connections);
    assert_alive(s.addr);
}

/// More connections than the server's cap (4,096) each send a head and one
/// body byte and stall. The body deadline (default 10 s) frees the slots, so
/// a genuine signed webhook queued behind them is served, and so is
/// `/healthz`. The wait is printed (target: within 25 s), not asserted.
#[test]
fn stalled_bodies_past_the_connection_cap_only_delay_genuine_webhooks() {
    let _one_at_a_time = heavy();
    let (_work, s) = start();
    let addr = s.addr;
    let target = 4_200;
    let openers: Vec<_> = (0..8)
        .map(|i| {
            let share = target / 8 + usize::from(i < target % 8);
            std::thread::spawn(move || {
                let mut held = Vec::with_capacity(share);
                for j in 0..share {
                    let headers = forged_headers(&format!("msg_stall_{i}_{j}"));
                    let mut c = send_head(addr, WEBHOOK, &headers, 100);
                    if c.write_all(b"{").is_ok() {
                        held.push(c);
                    }
                }
                held
            })
        })
        .collect();
    let stalled: Vec<TcpStream> = openers
        .into_iter()
        .flat_map(|o| o.join().unwrap())
        .collect();
    assert_eq!(stalled.len(), target, "all stalled connections were opened");
    let started = Instant::now();
    let body = r#"{"type":"user.deleted","data":{"id":"user_1","object":"user"}}"#;
    let reply = post_webhook(addr, "identity", SECRET, "msg_genuine", now_unix(), body);
    let waited = started.elapsed();
    let health_started = Instant::now();
    assert_alive(addr);
    eprintln!(
        "{target} stalled bodies: genuine signed webhook answered {} after {waited:?}; /healthz after {:?}",
        reply.status,
        health_started.elapsed()
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["status"], "accepted");
    drop(stalled);
}

/// Bytes the process caused to be written to storage, from /proc/PID/io.
fn write_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("write_bytes in /proc/PID/io")
}

/// One keep-alive GET; the status.
fn keep_alive_get(reader: &mut std::io::BufReader<TcpStream>, path: &str) -> u16 {
    use std::io::BufRead;
    reader
        .get_mut()
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: hushwatch\r\n\r\n").as_bytes())
        .unwrap();
    let mut status = 0;
    let mut length = 0usize;
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if status == 0 {
            status = status_of(&line);
        } else if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).unwrap();
    status
}

/// `/readyz` used to write and fsync 256 KiB per request; now its answer
/// is reused for 1 s, so a burst of 10,000 writes almost nothing.
#[test]
fn a_readyz_burst_writes_almost_nothing_to_disk() {
    let (_work, s) = start();
    let pid = s.child.id();
    // Write accounting must work on this filesystem, or the figure below
    // would be 0 whatever the server did.
    let before_ingest = write_bytes(pid);
    for i in 0..20 {
        let body = format!(r#"{{"type":"user.updated","id":"acct-{i}"}}"#);
        assert_eq!(post_events(s.addr, "identity", TOKEN, &body).status, 200);
    }
    if write_bytes(pid) == before_ingest {
        eprintln!("SKIPPED: /proc/PID/io write_bytes does not count writes on this filesystem");
        return;
    }
    let before = write_bytes(pid);
    let started = Instant::now();
    let addr = s.addr;
    let statuses: Vec<Vec<u16>> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let stream = TcpStream::connect(addr).unwrap();
                stream.set_read_timeout(Some(LONG)).unwrap();
                let mut reader = std::io::BufReader::new(stream);
                (0..1_250)
                    .map(|_| keep_alive_get(&mut reader, "/readyz"))
                    .collect()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let elapsed = started.elapsed();
    let written = write_bytes(pid) - before;
    let total: usize = statuses.iter().map(Vec::len).sum();
    assert_eq!(total, 10_000);
    assert!(statuses.iter().flatten().all(|s| *s == 200));
    eprintln!("10,000 /readyz in {elapsed:?}: {written} bytes written to disk");
    assert!(
        written < 1_000_000,
        "{written} bytes written by 10,000 probes"
    );
}

/// An app report's id never makes a signed webhook with the same delivery
/// id a duplicate, nor the reverse; repeats within a channel still are.
#[test]
fn app_reports_and_signed_webhooks_never_shadow_each_other() {
    let (_work, s) = start();
    let addr = s.addr;
    let report = |id: &str| {
        post_events(
            addr,
            "identity",
            TOKEN,
            &format!(r#"{{"type":"user.updated","id":"{id}"}}"#),
        )
        .json()["status"]
            .clone()
    };
    let webhook = |id: &str| {
        let body = r#"{"type":"user.deleted","data":{"id":"user_1","object":"user"}}"#;
        post_webhook(addr, "identity", SECRET, id, now_unix(), body).json()["status"].clone()
    };
    // Report first, then the signed revocation with the same id.
    assert_eq!(report("msg_X"), "accepted");
    assert_eq!(webhook("msg_X"), "accepted");
    assert_eq!(
        stream_status(addr, "identity")["last_event_type"],
        "user.deleted"
    );
    // Webhook first, then a report with the same id.
    assert_eq!(webhook("msg_Y"), "accepted");
    assert_eq!(report("msg_Y"), "accepted");
    assert_eq!(
        stream_status(addr, "identity")["last_event_type"],
        "user.updated"
    );
    // Within one channel, a repeat is still a duplicate.
    assert_eq!(webhook("msg_X"), "duplicate");
    assert_eq!(report("msg_X"), "duplicate");
    assert_eq!(webhook("msg_Y"), "duplicate");
    assert_eq!(report("msg_Y"), "duplicate");
}

/// A token read from the environment with a trailing newline works (it
/// used to never match), and `check` says it was trimmed without showing it.
#[test]
fn a_token_with_a_trailing_newline_in_the_environment_works() {
    let config = basic_config("calendar = \"always\"\nsilence_threshold = \"1h\"").replace(
        &format!("token = \"{TOKEN}\""),
        "token = \"${HW_APP_TOKEN}\"",
    );
    let work = Workdir::new(&config);
    let padded = format!("{TOKEN}\n");
    let check = cli(&["check"])
        .config(work.config_path())
        .env("HW_APP_TOKEN", &padded)
        .output();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(check.status.success(), "{said}");
    assert!(
        said.lines().any(
            |l| l.starts_with("WARNING: streams.identity.ingest.token[0]")
                && l.contains("whitespace")
        ),
        "{said}"
    );
    assert!(!said.contains(TOKEN), "check printed the token: {said}");

    let s = Sidecar::start_with_env(&work.config_path(), &[("HW_APP_TOKEN", &padded)]);
    let reply = post_events(s.addr, "identity", TOKEN, r#"{"type":"user.updated"}"#);
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// Bidi overrides and control characters a client puts in the path reach
/// the text log escaped, never raw.
#[test]
fn request_fields_are_escaped_in_the_log() {
    let (_work, s) = start();
    let hostile = [
        "/v1/streams/ev\u{202e}lin\u{2066}/webhook",
        "/v1/svix/o\u{200f}ps\u{202a}/operational",
    ];
    for path in hostile {
        let reply = raw_exchange(
            s.addr,
            format!(
                "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        );
        assert_eq!(status_of(&reply), 404, "{reply}");
    }
    let log = wait_for(LONG, "both rejections in the log", || {
        let log = s.stderr_text();
        (log.contains("\\u{2066}") && log.contains("\\u{202a}")).then_some(log)
    });
    assert!(log.contains("ev\\u{202e}lin\\u{2066}"), "{log}");
    assert!(log.contains("o\\u{200f}ps\\u{202a}"), "{log}");
    for raw in ['\u{202e}', '\u{2066}', '\u{200f}', '\u{202a}', '\u{1b}'] {
        assert!(!log.contains(raw), "raw {raw:?} in the log:\n{log}");
    }
}

/// A client that asks for answers and never reads them (here: thousands of
/// pipelined `GET /metrics`) fills the socket buffers and then stalls the
/// server's write; the write deadline (10 s without progress) closes the
/// connection instead of holding its slot for ever.
#[test]
fn a_client_that_never_reads_its_answers_is_let_go() {
    let (_work, s) = start();
    let pid = s.child.id();
    let baseline = open_sockets(pid);
    let one = get(s.addr, "/metrics").body.len();
    // Far more than loopback socket buffers hold (a few MiB at most).
    let requests = (64 << 20) / one.max(1);
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let pipelined = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(requests);
    let sent_at = Instant::now();
    // The server stops reading requests once its writes stall; the rest
    // may not fit, which is fine.
    let _ = c.write_all(pipelined.as_bytes());
    wait_until("the stalled connection to be closed", || {
        (open_sockets(pid) <= baseline).then_some(())
    });
    eprintln!(
        "{requests} pipelined /metrics ({one} bytes each), never read: connection closed after {:?}",
        sent_at.elapsed()
    );
    assert_alive(s.addr);
    drop(c);
}

/// A `GET /healthz` head of exactly `len` bytes (request line, headers and
/// the blank line), padded with one large header.
fn head_of_length(len: usize) -> Vec<u8> {
    let start = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: ";
    let end = "\r\n\r\n";
    let head = format!("{start}{}{end}", "a".repeat(len - start.len() - end.len()));
    assert_eq!(head.len(), len);
    head.into_bytes()
}

/// Sends `bytes` in `chunk`-byte pieces `pause` apart (each its own TCP
/// segment: nodelay), stops sending once the server answers, and returns
/// the reply.
fn dripped_exchange(addr: SocketAddr, bytes: &[u8], chunk: usize, pause: Duration) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut raw = Vec::new();
    stream.set_nonblocking(true).unwrap();
    for piece in bytes.chunks(chunk) {
        if stream.write_all(piece).is_err() {
            break;
        }
        std::thread::sleep(pause);
        let mut buf = [0u8; 4096];
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                break;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
    stream.set_nonblocking(false).unwrap();
    stream.set_read_timeout(Some(LONG)).unwrap();
    let _ = stream.read_to_end(&mut raw);
    String::from_utf8_lossy(&raw).into_owned()
}

/// Issue #26: the 32 KiB head limit is exact however the head arrives. It
/// used to be only hyper's read-buffer size, and one read may fill more
/// than that: a complete ~40 KB head sent in one write was served (200).
#[test]
fn the_head_limit_is_exact_in_one_write_and_in_a_drip() {
    let (_work, s) = start();
    for len in [40_000, 48 * 1024, HEAD_LIMIT + 1] {
        let reply = raw_exchange(s.addr, &head_of_length(len));
        assert_eq!(status_of(&reply), 431, "{len}-byte head in one write");
        assert_alive(s.addr);
    }
    let reply = raw_exchange(s.addr, &head_of_length(HEAD_LIMIT));
    assert_eq!(status_of(&reply), 200, "a head of exactly 32 KiB");
    let pause = Duration::from_millis(5);
    let reply = dripped_exchange(s.addr, &head_of_length(HEAD_LIMIT + 1), 1024, pause);
    assert_eq!(status_of(&reply), 431, "32 KiB + 1 dripped in 1 KiB pieces");
    let reply = dripped_exchange(s.addr, &head_of_length(40_000), 1024, pause);
    assert_eq!(status_of(&reply), 431, "40 KB dripped in 1 KiB pieces");
    let reply = dripped_exchange(s.addr, &head_of_length(HEAD_LIMIT), 1024, pause);
    assert_eq!(status_of(&reply), 200, "32 KiB dripped in 1 KiB pieces");
    assert_alive(s.addr);
}
