//! The largest and most hostile page hushwatch builds, sent through every
//! notifier to receivers that refuse what the real services refuse
//! (issue #26): a reconciliation report with 10,000 `revoke_missed`
//! subjects, the longest stream name, a 200-character report id and
//! subjects written to inject Slack markup. Each page must be delivered
//! (a 4xx is a permanent failure: the page would be lost) and must not
//! carry the injected markup. And a fallback-ladder page reaches a real
//! Alertmanager under the shipped rule's name, not the catch-all.

use crate::common::*;
use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use support::*;

/// What an enforcing receiver got: path, the status it answered, body,
/// and why it refused (empty when accepted).
#[derive(Clone, Debug)]
struct Got {
    path: String,
    status: u16,
    body: Vec<u8>,
    why: String,
}

impl Got {
    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A real HTTP server that checks every request against the documented
/// limits of the service its path stands for, and answers 400 (as the
/// service does) when one is exceeded:
/// - `/v2/enqueue`, PagerDuty Events API v2
///   (https://developer.pagerduty.com/docs/events-api-v2/trigger-events/):
///   `payload.summary` 1..=1,024 characters, `dedup_key` at most 255,
///   `payload.source` non-empty, the event under 512 KB;
/// - `/services/…`, a Slack incoming webhook: `text` at most 40,000
///   characters (Slack cuts the rest; refused here so a cut is noticed);
/// - `/hook`, a webhook: a body of at most 1 MiB (a proxy's usual limit);
/// - `/refuse`: always 400 (a notifier that fails for good).
struct Enforcer {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<Got>>>,
}

impl Enforcer {
    fn start() -> Enforcer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let g = g.clone();
                std::thread::spawn(move || serve(conn, &g));
            }
        });
        Enforcer { addr, got }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn got(&self, prefix: &str) -> Vec<Got> {
        let all = self.got.lock().unwrap().clone();
        all.into_iter()
            .filter(|g| g.path.starts_with(prefix))
            .collect()
    }

    fn accepted(&self, prefix: &str) -> Vec<Got> {
        self.got(prefix)
            .into_iter()
            .filter(|g| g.status < 300)
            .collect()
    }
}

fn serve(conn: TcpStream, got: &Mutex<Vec<Got>>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 {
            return;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((n, v)) = h.split_once(':') {
            if n.trim().eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let why = judge(&path, &body).err().unwrap_or_default();
    let status = if why.is_empty() { 202 } else { 400 };
    got.lock().unwrap().push(Got {
        path,
        status,
        body,
        why: why.clone(),
    });
    let answer = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{why}",
        why.len()
    );
    let mut conn = conn;
    let _ = conn.write_all(answer.as_bytes());
}

fn chars(v: &serde_json::Value) -> usize {
    v.as_str().map_or(0, |s| s.chars().count())
}

fn judge(path: &str, body: &[u8]) -> Result<(), String> {
    if path == "/refuse" {
        return Err("refused".into());
    }
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    if path.starts_with("/v2/enqueue") {
        if body.len() >= 512_000 {
            return Err(format!("event of {} bytes", body.len()));
        }
        let dedup = chars(&v["dedup_key"]);
        if !(1..=255).contains(&dedup) {
            return Err(format!("dedup_key of {dedup} characters"));
        }
        if v["event_action"] == "trigger" {
            let n = chars(&v["payload"]["summary"]);
            if !(1..=1024).contains(&n) {
                return Err(format!("payload.summary of {n} characters"));
            }
            if chars(&v["payload"]["source"]) == 0 {
                return Err("payload.source missing".into());
            }
        }
    } else if path.starts_with("/services/") {
        let n = chars(&v["text"]);
        if !(1..=40_000).contains(&n) {
            return Err(format!("text of {n} characters"));
        }
    } else if body.len() > 1024 * 1024 {
        return Err(format!("body of {} bytes", body.len()));
    }
    Ok(())
}

fn http_get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

/// Alerts named `alertname` that a real Alertmanager reports.
fn am_alerts(port: u16, alertname: &str) -> Vec<serde_json::Value> {
    let text = http_get(
        port,
        &format!("/api/v2/alerts?filter=alertname%3D%22{alertname}%22"),
    );
    if !text.starts_with("HTTP/1.1 200") {
        return Vec::new();
    }
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    match (body.find('['), body.rfind(']')) {
        (Some(a), Some(b)) => serde_json::from_str(&body[a..=b]).unwrap_or_default(),
        _ => Vec::new(),
    }
}

fn start_am(dir: &std::path::Path) -> (Proc, u16) {
    let (am, port) = start_alertmanager(dir);
    wait_until("alertmanager ready", || {
        http_get(port, "/-/ready").contains("200 OK").then_some(())
    });
    (am, port)
}

/// The markup an attacker who can put a subject into a reconciliation
/// report (or a report id) would try: a channel-wide mention, a link whose
/// label hides its target, a user mention inside a code span.
const INJECT: &str =
    "<!channel> <https://evil.example/login|Click to re-authenticate> `<@U024BE7LH>` &";

/// `text` padded with `c` to exactly `len` bytes (the parser's limit for
/// ids and subjects is 200 bytes).
fn padded(text: &str, c: char, len: usize) -> String {
    let mut s = text.to_string();
    while s.len() < len {
        s.push(c);
    }
    s
}

#[test]
fn the_largest_hostile_page_reaches_every_receiver_within_its_limits() {
    let dir = tempfile::tempdir().unwrap();
    let enforcer = Enforcer::start();
    let (_am, am_port) = start_am(dir.path());
    let maildir = dir.path().join("maildir");
    let (_smtp, smtp_port) = start_smtp(&maildir, None);
    // The longest stream name the config accepts (64 characters).
    let stream = padded("identity-", 'x', 64);
    let text = format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[streams.{stream}]
calendar = "always"
silence_threshold = "30d"
notify = ["pd", "chat", "hook", "am", "mail"]
[streams.{stream}.reconcile]
every = "1h"
[streams.{stream}.ingest]
token = "{TOKEN}"

[notifiers.pd]
kind = "pagerduty"
routing_key = "R0UT1NG-KEY-0123456789abcdef"
url = "{pd}"
backoff_initial = "1s"
[notifiers.chat]
kind = "slack"
url = "{slack}"
backoff_initial = "1s"
[notifiers.hook]
kind = "webhook"
url = "{hook}"
backoff_initial = "1s"
[notifiers.am]
kind = "alertmanager"
urls = ["http://127.0.0.1:{am_port}"]
backoff_initial = "1s"
[notifiers.mail]
kind = "email"
smtp_url = "smtp://127.0.0.1:{smtp_port}"
from = "hushwatch@example.org"
to = ["oncall@example.org"]
timeout = "5s"
backoff_initial = "1s"
"#,
        pd = enforcer.url("/v2/enqueue"),
        slack = enforcer.url("/services/T000/B000/XoXbSeCrEt"),
        hook = enforcer.url("/hook"),
    );
    let s = InProcess::start_in(dir.path(), &text, chrono::Utc::now());

    // 10,000 revoke_missed subjects (the parser's maximum), the first 20
    // (those a page names) 200 bytes of injected markup each; the report
    // id is 200 bytes of it too. The body stays under the 1 MiB cap.
    let id = padded(&format!("r1 {INJECT}"), 'r', 200);
    let mut drift = Vec::with_capacity(10_000);
    for i in 0..10_000 {
        let subject = if i < 20 {
            padded(&format!("{INJECT} user{i:02} "), 'u', 200)
        } else {
            format!("user_{i}")
        };
        drift
            .push(serde_json::json!({"subject": subject, "kind": "revoke_missed", "fixed": false}));
    }
    let report = serde_json::json!({
        "id": id,
        "started_at": "2026-12-01T00:00:00Z",
        "finished_at": "2026-12-01T00:00:30Z",
        "checked": 10_000,
        "drift": drift,
    })
    .to_string();
    assert!(report.len() < 1024 * 1024, "{}", report.len());
    let auth = format!("Bearer {TOKEN}");
    let reply = request(
        s.addr,
        "POST",
        &format!("/v1/streams/{stream}/reconciliations"),
        &[
            ("content-type", "application/json"),
            ("authorization", &auth),
        ],
        report.as_bytes(),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);

    // Every notifier delivers: a receiver refusing an over-limit field
    // would make this a permanent failure.
    let pd = wait_until("PagerDuty accepted the trigger", || {
        enforcer.accepted("/v2/enqueue").into_iter().next()
    });
    let slack = wait_until("Slack accepted the message", || {
        enforcer.accepted("/services/").into_iter().next()
    });
    let hook = wait_until("the webhook accepted the page", || {
        enforcer.accepted("/hook").into_iter().next()
    });
    let am = wait_until("the alert in Alertmanager", || {
        am_alerts(am_port, "IdentityReconciliationRevokeMissed")
            .into_iter()
            .next()
    });
    let mail = wait_until("the email", || {
        maildir_messages(&maildir).into_iter().next()
    });
    for prefix in ["/v2/enqueue", "/services/", "/hook"] {
        let refused: Vec<String> = enforcer
            .got(prefix)
            .iter()
            .filter(|g| g.status >= 300)
            .map(|g| g.why.clone())
            .collect();
        assert!(refused.is_empty(), "{prefix} refused: {refused:?}");
    }
    wait_until("every page marked delivered", || {
        s.pending().is_empty().then_some(())
    });
    assert_eq!(s.notifications()["failed_total"], 0);

    // PagerDuty: the summary names the count and the first subjects; the
    // full text is in custom_details.
    let event = pd.json();
    let summary = event["payload"]["summary"].as_str().unwrap();
    assert!(summary.contains("10000"), "{summary}");
    assert!(
        summary.ends_with("the full text is in custom_details.summary)"),
        "{summary}"
    );
    let full = event["payload"]["custom_details"]["summary"]
        .as_str()
        .unwrap();
    assert!(full.contains("user19"), "{full}");
    assert!(full.contains("9980 more"), "{full}");

    // Slack: no mention, link or stray code span from the request.
    let text = slack.json()["text"].as_str().unwrap().to_string();
    assert!(!text.contains('<') && !text.contains('>'), "{text}");
    assert!(text.contains("&lt;!channel&gt;"), "{text}");
    assert!(!text.contains("`&lt;@U024BE7LH&gt;`"), "{text}");
    assert!(text.contains("user19"), "{text}");

    // The webhook and Alertmanager carry the text as JSON (escaped by
    // serde), with Alertmanager's summary annotation bounded.
    assert!(hook.json()["alert"]["summary"]
        .as_str()
        .unwrap()
        .contains("user19"));
    assert!(chars(&am["annotations"]["summary"]) <= 1024);
    assert!(am["annotations"]["description"]
        .as_str()
        .unwrap()
        .contains("user19"));

    // Email: a short subject, no header line over RFC 5322's 998, and the
    // full text in the body.
    let subject = mail_header(&mail, "Subject").unwrap();
    assert!(subject.len() <= 600, "{subject}");
    let head = mail.split("\n\n").next().unwrap();
    assert!(head.lines().all(|l| l.len() <= 998), "{head}");
    assert!(mail.contains("user19"), "the body names the subjects");
}

/// A fallback-ladder page reaches a real Alertmanager as the shipped
/// rule's `HushwatchNotificationsFailing` with the `notifier` label the
/// rule groups by, not as the catch-all `IdentityWebhookAlert`.
#[test]
fn a_fallback_page_reaches_alertmanager_under_the_rules_name() {
    let dir = tempfile::tempdir().unwrap();
    let enforcer = Enforcer::start();
    let (_am, am_port) = start_am(dir.path());
    let notifiers = format!(
        "[notifiers.hook]\nkind = \"webhook\"\nurl = \"{}\"\nfallback = [\"am\"]\nfallback_after = [1]\n[notifiers.am]\nkind = \"alertmanager\"\nurls = [\"http://127.0.0.1:{am_port}\"]\nbackoff_initial = \"1s\"\n",
        enforcer.url("/refuse")
    );
    let now = chrono::Utc::now();
    let s = InProcess::start_in(
        dir.path(),
        &config(&["hook"], "", &notifiers),
        now - chrono::TimeDelta::hours(2),
    );
    s.clock.set(now);
    s.wait_state("firing");
    let alert = wait_until("the fallback page in Alertmanager", || {
        am_alerts(am_port, "HushwatchNotificationsFailing")
            .into_iter()
            .next()
    });
    assert_eq!(alert["labels"]["notifier"], "hook");
    assert_eq!(alert["labels"]["kind"], "hushwatch_fallback");
    assert_eq!(alert["labels"]["severity"], "critical");
    assert!(
        am_alerts(am_port, "IdentityWebhookAlert").is_empty(),
        "nothing under the catch-all name"
    );
}
