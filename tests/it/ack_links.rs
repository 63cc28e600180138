//! Acknowledge links in pages (issue #30), end to end: a real SMTP server
//! that takes a page's DATA and then drops the connection before it
//! replies (an unknown result), so hushwatch sends the page again; the
//! links in BOTH delivered mails, opened and confirmed over real HTTP.
//! On SQLite and PostgreSQL with the manual clock (expiry included), and
//! with two real `hushwatch serve` processes on one PostgreSQL database.
//! The confirmation page in real Chromium is in tests/it/status_page.rs.

use crate::common;
use crate::common::pg;

use common::{cli, request, utc, wait_until, InProcess, Reply, Sidecar, Workdir, TOKEN};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);
const PUBLIC: &str = "https://hushwatch.example.com/oncall";
const ACKNOWLEDGED: &str = "<h1 id=\"result\">Acknowledged</h1>";
const ALREADY: &str = "<h1 id=\"result\">Already acknowledged</h1>";
const FORM: &str = "<form method=\"post\">";

// ------------------------------------------------------------------ SMTP

/// What the SMTP server does once a message's DATA is complete.
#[derive(Clone, Copy, Debug)]
enum AfterData {
    /// 250: the sender knows it was delivered.
    Accept,
    /// Close without replying: the message is in the mailbox, but the
    /// sender cannot know (the ambiguous case).
    Drop,
}

/// A small SMTP server: every message whose DATA completed is kept, in
/// order, whatever the reply; the next message's fate is the next entry
/// of the script (then `Accept`).
struct Smtp {
    addr: SocketAddr,
    script: Arc<Mutex<VecDeque<AfterData>>>,
    mails: Arc<Mutex<Vec<String>>>,
}

impl Smtp {
    fn start() -> Smtp {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let script = Arc::new(Mutex::new(VecDeque::new()));
        let mails = Arc::new(Mutex::new(Vec::new()));
        let (s, m) = (Arc::clone(&script), Arc::clone(&mails));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (s, m) = (Arc::clone(&s), Arc::clone(&m));
                std::thread::spawn(move || {
                    let _ = session(conn, &s, &m);
                });
            }
        });
        Smtp {
            addr,
            script,
            mails,
        }
    }

    fn url(&self) -> String {
        format!("smtp://{}", self.addr)
    }

    fn then(&self, what: AfterData) {
        self.script.lock().unwrap().push_back(what);
    }

    fn mails(&self) -> Vec<String> {
        self.mails.lock().unwrap().clone()
    }
}

fn session(
    conn: TcpStream,
    script: &Mutex<VecDeque<AfterData>>,
    mails: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(LIMIT))?;
    let mut out = conn.try_clone()?;
    let mut lines = BufReader::new(conn);
    out.write_all(b"220 test-smtp ESMTP\r\n")?;
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let verb = line.get(..4).unwrap_or("").to_ascii_uppercase();
        match verb.as_str() {
            "EHLO" | "HELO" => out.write_all(b"250 test-smtp\r\n")?,
            "DATA" => {
                out.write_all(b"354 go ahead\r\n")?;
                let mut data = String::new();
                loop {
                    line.clear();
                    if lines.read_line(&mut line)? == 0 {
                        return Ok(());
                    }
                    if line == ".\r\n" {
                        break;
                    }
                    data.push_str(line.strip_prefix('.').unwrap_or(&line));
                }
                mails.lock().unwrap().push(data);
                let next = script.lock().unwrap().pop_front();
                match next.unwrap_or(AfterData::Accept) {
                    AfterData::Accept => out.write_all(b"250 queued\r\n")?,
                    AfterData::Drop => {
                        let _ = out.shutdown(std::net::Shutdown::Both);
                        return Ok(());
                    }
                }
            }
            "QUIT" => {
                out.write_all(b"221 bye\r\n")?;
                return Ok(());
            }
            _ => out.write_all(b"250 ok\r\n")?,
        }
    }
}

/// The acknowledge codes a mail links to (text and HTML part, quoted-
/// printable soft breaks undone), each once.
fn codes_in(mail: &str) -> Vec<String> {
    let text = mail.replace("=\r\n", "");
    let marker = format!("{PUBLIC}/ack/");
    let mut codes: Vec<String> = Vec::new();
    for (at, _) in text.match_indices(&marker) {
        let code: String = text[at + marker.len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        assert_eq!(code.len(), 22, "a 128-bit base64url code: {code:?}");
        if !codes.contains(&code) {
            codes.push(code);
        }
    }
    codes
}

// ----------------------------------------------------------------- HTTP

fn open(addr: SocketAddr, code: &str) -> Reply {
    request(addr, "GET", &format!("/ack/{code}"), &[], b"")
}

/// What the confirmation page's form sends.
fn confirm(addr: SocketAddr, code: &str) -> Reply {
    request(
        addr,
        "POST",
        &format!("/ack/{code}"),
        &[("Content-Type", "application/x-www-form-urlencoded")],
        b"",
    )
}

fn acknowledged_by(addr: SocketAddr) -> serde_json::Value {
    common::stream_status(addr, "identity")["acknowledged"].clone()
}

fn state(addr: SocketAddr) -> String {
    common::stream_status(addr, "identity")["state"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn config(smtp: &Smtp, threshold: &str, db: Option<&pg::PgDb>) -> String {
    let mut text = format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"
public_url = "{PUBLIC}/"
ack_link_ttl = "1h"

[streams.identity]
calendar = "always"
silence_threshold = "{threshold}"
notify = ["mail"]
[streams.identity.ingest]
token = "{TOKEN}"

[notifiers.mail]
kind = "email"
smtp_url = "{url}"
from = "hushwatch@example.org"
to = ["oncall@example.org"]
timeout = "5s"
backoff_initial = "1s"
backoff_max = "5s"
"#,
        url = smtp.url()
    );
    if let Some(db) = db {
        text.push_str(&format!("\n[store]\nurl = \"{}\"\npool_size = 4\n", db.url));
    }
    text
}

// -------------------------------------------------- manual-clock scenario

fn advance_until(s: &InProcess, what: &str, mut check: impl FnMut() -> bool) {
    wait_until(what, || {
        if check() {
            return Some(());
        }
        s.clock.advance(chrono::TimeDelta::seconds(2));
        std::thread::sleep(Duration::from_millis(30));
        None
    });
}

/// Fires `identity` (1h threshold) and waits until `firing` firing mails
/// arrived in all; returns the firing mails. Resolve mails carry no link.
fn fire_and_collect(s: &InProcess, smtp: &Smtp, firing: usize) -> Vec<String> {
    s.clock.advance(chrono::TimeDelta::seconds(3601));
    wait_until("identity firing", || {
        (state(s.addr) == "firing").then_some(())
    });
    advance_until(s, &format!("{firing} firing mails"), || {
        firing_mails(smtp).len() >= firing
    });
    for mail in smtp.mails() {
        if mail.contains("Subject: [RESOLVED") {
            assert_eq!(codes_in(&mail), Vec::<String>::new(), "{mail}");
        }
    }
    firing_mails(smtp)
}

fn firing_mails(smtp: &Smtp) -> Vec<String> {
    smtp.mails()
        .into_iter()
        .filter(|m| m.contains("Subject: [FIRING"))
        .collect()
}

/// Posts an event (the alert resolves) and waits for the resolved mail,
/// so the next script entry meets the next firing page, not this one.
fn resolve(s: &InProcess, smtp: &Smtp) {
    let resolved = |smtp: &Smtp| {
        smtp.mails()
            .iter()
            .filter(|m| m.contains("Subject: [RESOLVED"))
            .count()
    };
    let before = resolved(smtp);
    let id = format!("evt-{}", s.clock_millis());
    let body = format!(r#"{{"type":"user.created","id":"{id}"}}"#);
    let reply = common::post_events(s.addr, "identity", TOKEN, &body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    wait_until("identity ok", || (state(s.addr) == "ok").then_some(()));
    advance_until(s, "the resolved mail", || resolved(smtp) > before);
}

trait ClockMillis {
    fn clock_millis(&self) -> i64;
}

impl ClockMillis for InProcess {
    fn clock_millis(&self) -> i64 {
        use hushwatch::clock::Clock;
        self.clock.now().timestamp_millis()
    }
}

/// Everything a user of the links notices, in three episodes; returns
/// every code the mails carried.
fn scenario(s: &InProcess, smtp: &Smtp) -> Vec<String> {
    let unknown = open(s.addr, "AAAAAAAAAAAAAAAAAAAAAA");
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    let mut all = Vec::new();

    // Episode 1: the first send's result is unknown, so it is sent again;
    // both mails arrived, each with its own link.
    smtp.then(AfterData::Drop);
    let mails = fire_and_collect(s, smtp, 2);
    assert_eq!(mails.len(), 2, "sent twice, no more");
    let (first, second) = (codes_in(&mails[0]), codes_in(&mails[1]));
    assert_eq!((first.len(), second.len()), (1, 1), "one link per mail");
    let (a, b) = (first[0].clone(), second[0].clone());
    assert_ne!(a, b, "each send mints its own code");
    all.extend([a.clone(), b.clone()]);
    // Opening either shows the form and acknowledges nothing.
    for code in [&a, &b] {
        let page = open(s.addr, code);
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(page.body.contains(FORM), "{}", page.body);
        assert!(page.body.contains("identity"), "{}", page.body);
        assert_eq!(page.header("cache-control"), Some("no-store"));
        assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
    }
    assert_eq!(acknowledged_by(s.addr), serde_json::Value::Null);
    // The first mail's link (the one hushwatch never heard back about)
    // works; then the second one says it was done already.
    let done = confirm(s.addr, &a);
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(done.body.contains(ACKNOWLEDGED), "{}", done.body);
    assert_eq!(acknowledged_by(s.addr)["by"], "link");
    for reply in [confirm(s.addr, &b), open(s.addr, &b)] {
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(reply.body.contains(ALREADY), "{}", reply.body);
        assert!(!reply.body.contains(FORM), "{}", reply.body);
    }
    // The used code is spent: the same page as a code never issued, or
    // a path that is not a code at all.
    for reply in [
        confirm(s.addr, &a),
        open(s.addr, &a),
        open(s.addr, "not-a-code"),
    ] {
        assert_eq!((reply.status, &reply.body), (404, &unknown.body));
    }

    // Episode 2: two links again, each confirmed several times at once on
    // separate connections: one acknowledgement.
    resolve(s, smtp);
    assert_eq!(acknowledged_by(s.addr), serde_json::Value::Null);
    smtp.then(AfterData::Drop);
    let mails = fire_and_collect(s, smtp, 4);
    let (c, d) = (
        codes_in(&mails[2])[0].clone(),
        codes_in(&mails[3])[0].clone(),
    );
    all.extend([c.clone(), d.clone()]);
    let replies = at_once(&[(s.addr, &c), (s.addr, &d)], 4);
    assert_eq!(
        replies
            .iter()
            .filter(|r| r.body.contains(ACKNOWLEDGED))
            .count(),
        1,
        "{:#?}",
        summary(&replies)
    );
    assert!(replies
        .iter()
        .all(|r| r.body.contains(ACKNOWLEDGED) || r.body.contains(ALREADY) || r.status == 404));
    assert_eq!(acknowledged_by(s.addr)["by"], "link");

    // Episode 3: a link not used within ack_link_ttl (1h) stops working.
    resolve(s, smtp);
    let mails = fire_and_collect(s, smtp, 5);
    let e = codes_in(&mails[4])[0].clone();
    all.push(e.clone());
    assert_eq!(open(s.addr, &e).status, 200);
    s.clock.advance(chrono::TimeDelta::hours(1));
    for reply in [open(s.addr, &e), confirm(s.addr, &e)] {
        assert_eq!((reply.status, &reply.body), (404, &unknown.body));
    }
    assert_eq!(acknowledged_by(s.addr), serde_json::Value::Null);
    all
}

/// Status and result heading of each reply, for a failure message.
fn summary(replies: &[Reply]) -> Vec<(u16, String)> {
    replies
        .iter()
        .map(|r| {
            let h1 = r
                .body
                .split("<h1")
                .nth(1)
                .unwrap_or("")
                .split("</h1>")
                .next();
            (r.status, h1.unwrap_or("").to_string())
        })
        .collect()
}

/// Each (addr, code) confirmed `times` times, all released at once.
fn at_once(targets: &[(SocketAddr, &String)], times: usize) -> Vec<Reply> {
    let barrier = Arc::new(Barrier::new(targets.len() * times));
    let threads: Vec<_> = targets
        .iter()
        .flat_map(|(addr, code)| (0..times).map(move |_| (*addr, (*code).clone())))
        .map(|(addr, code)| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                confirm(addr, &code)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// Every byte of every file under `dir`.
fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(all_bytes(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.extend(bytes);
        }
    }
    out
}

#[test]
fn on_sqlite_both_links_of_an_ambiguous_send_work_until_one_is_used() {
    let smtp = Smtp::start();
    let work = Workdir::new(&config(&smtp, "1h", None));
    let s = InProcess::start(&work, utc("2026-12-01T10:00:00Z"));
    let codes = scenario(&s, &smtp);
    s.stop();
    // Only hashes are stored.
    let stored = all_bytes(work.path());
    for code in &codes {
        assert!(
            !stored.windows(code.len()).any(|w| w == code.as_bytes()),
            "{code} is stored raw"
        );
    }
}

#[test]
fn on_postgresql_both_links_of_an_ambiguous_send_work_until_one_is_used() {
    let Some(db) = pg::PgDb::create("ack_links_pg") else {
        return;
    };
    let smtp = Smtp::start();
    let work = Workdir::new(&config(&smtp, "1h", Some(&db)));
    let s = InProcess::start(&work, utc("2026-12-01T10:00:00Z"));
    let codes = scenario(&s, &smtp);
    s.stop();
    let stored = db.query("SELECT code_sha256 || stream FROM ack_codes");
    for code in &codes {
        assert!(stored.iter().all(|row| !row.contains(code.as_str())));
    }
}

/// Two real `hushwatch serve` processes on one PostgreSQL database and the
/// real clock: the page is claimed and sent by one of them, sent again
/// after the dropped connection, and the two links are confirmed at the
/// same time, one on each replica: one acknowledgement, one audit entry.
#[test]
fn on_postgresql_two_replicas_acknowledge_once_through_either_link() {
    let Some(db) = pg::PgDb::create("ack_links_replicas") else {
        return;
    };
    let smtp = Smtp::start();
    smtp.then(AfterData::Drop);
    let work = Workdir::new(&config(&smtp, "2s", Some(&db)));
    let one = Sidecar::start(&work.config_path());
    let two = Sidecar::start(&work.config_path());
    let mails = wait_until("two mails", || {
        let m = smtp.mails();
        (m.len() >= 2).then_some(m)
    });
    let (a, b) = (
        codes_in(&mails[0])[0].clone(),
        codes_in(&mails[1])[0].clone(),
    );
    assert_ne!(a, b);
    for (addr, code) in [(one.addr, &a), (two.addr, &b), (two.addr, &a)] {
        let page = open(addr, code);
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(page.body.contains(FORM), "{}", page.body);
    }
    assert_eq!(acknowledged_by(one.addr), serde_json::Value::Null);
    let replies = at_once(&[(one.addr, &a), (two.addr, &b)], 3);
    assert_eq!(
        replies
            .iter()
            .filter(|r| r.body.contains(ACKNOWLEDGED))
            .count(),
        1,
        "{:#?}",
        summary(&replies)
    );
    assert_eq!(acknowledged_by(two.addr)["by"], "link");
    assert_eq!(
        db.query("SELECT count(*) FROM acknowledgements WHERE created_by = 'link'"),
        ["1"]
    );
    assert_eq!(
        db.query(
            "SELECT count(*) FROM audit_log WHERE event_type = 'hushwatch.stream.acknowledged'"
        ),
        ["1"]
    );
    // Either replica: the other link now says so.
    for (addr, code) in [(one.addr, &a), (one.addr, &b)] {
        let reply = open(addr, code);
        assert!(
            reply.status == 404 || reply.body.contains(ALREADY),
            "{}",
            reply.body
        );
    }
    // No code in any log line of either process.
    let logs = format!("{}{}", one.stderr_text(), two.stderr_text());
    for code in [&a, &b] {
        assert!(!logs.contains(code.as_str()), "{code} logged:\n{logs}");
    }
    one.stop();
    two.stop();
}

/// `hushwatch check` refuses a `public_url` that would make links nobody
/// can open, naming the key, and accepts a good one (the parser the links
/// are built with: `config::server::PublicUrl`).
#[test]
fn check_accepts_only_an_absolute_http_public_url() {
    let smtp = Smtp::start();
    let good = config(&smtp, "1h", None);
    for (url, ok) in [
        ("https://hushwatch.example.com/oncall/", true),
        ("http://10.0.0.7:9477", true),
        ("hushwatch.example.com", false),
        ("ftp://hushwatch.example.com", false),
        ("https://user:pw@hushwatch.example.com", false),
        ("https://hushwatch.example.com/?next=1", false),
    ] {
        let work = Workdir::new(&good.replace(&format!("{PUBLIC}/"), url));
        let out = cli(&["check"]).config(work.config_path()).output();
        let err = String::from_utf8_lossy(&out.stderr);
        if ok {
            assert_eq!(out.status.code(), Some(0), "{url}: {err}");
        } else {
            assert_eq!(out.status.code(), Some(2), "{url}: {err}");
            assert!(err.contains("server.public_url"), "{url}: {err}");
            assert!(!err.contains("pw@"), "{url}: the password echoed: {err}");
        }
    }
}

/// The route is bounded like every unauthenticated one: a body declared
/// over 1 MiB is 413 from the head, another method is 405, and a path
/// segment that is not a code (too long, other characters) is the one 404
/// page without a store read.
#[test]
fn the_route_refuses_what_is_not_a_confirmation() {
    let smtp = Smtp::start();
    let work = Workdir::new(&config(&smtp, "1h", None));
    let s = InProcess::start(&work, utc("2026-12-01T10:00:00Z"));
    let code = "AAAAAAAAAAAAAAAAAAAAAA";
    let unknown = open(s.addr, code);
    assert_eq!(unknown.status, 404);
    let huge = request(
        s.addr,
        "POST",
        &format!("/ack/{code}"),
        &[],
        &vec![b'x'; 1024 * 1024 + 1],
    );
    assert_eq!(huge.status, 413, "{}", huge.body);
    let put = request(s.addr, "PUT", &format!("/ack/{code}"), &[], b"");
    assert_eq!(put.status, 405);
    assert_eq!(put.header("allow"), Some("GET, POST"));
    for path in [
        format!("/ack/{}", "A".repeat(4000)),
        "/ack/AAAAAAAAAAAAAAAAAAAA%41A".to_string(),
        "/ack/".to_string(),
    ] {
        let reply = open(s.addr, path.trim_start_matches("/ack/"));
        assert_eq!((reply.status, &reply.body), (404, &unknown.body), "{path}");
    }
    s.stop();
}

/// Issue #44: a `kind = "log"` notifier beside the email gets the same
/// firing page, but never a link: the mail carries one that works, while
/// no line on stdout (the log notifier) or stderr (the logs) carries a
/// link or the code of any link.
#[test]
fn the_log_notifier_and_the_logs_never_carry_an_acknowledge_link() {
    let smtp = Smtp::start();
    let text = config(&smtp, "1s", None)
        .replace("notify = [\"mail\"]", "notify = [\"mail\", \"stdout\"]")
        + "\n[notifiers.stdout]\nkind = \"log\"\n";
    let work = Workdir::new(&text);
    let hw = Sidecar::start(&work.config_path());
    let codes = wait_until("a firing mail with a link", || {
        let codes: Vec<String> = smtp.mails().iter().flat_map(|m| codes_in(m)).collect();
        (!codes.is_empty()).then_some(codes)
    });
    let line = wait_until("the firing page on stdout", || {
        hw.stdout_lines()
            .into_iter()
            .find(|l| l.contains("\"status\":\"firing\""))
    });
    let page: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(page["alert_kind"], "silence", "{line}");
    assert!(page.get("ack_url").is_none(), "{line}");
    let out = hw.stdout_lines().join("\n");
    let err = hw.stderr_text();
    for text in [&out, &err] {
        assert!(!text.contains("/ack/"), "a link was printed:\n{text}");
        for code in &codes {
            assert!(!text.contains(code.as_str()), "{code} printed:\n{text}");
        }
    }
    // The mail's link is live: the code was minted for it alone.
    assert_eq!(open(hw.addr, &codes[0]).status, 200);
    hw.stop();
}
