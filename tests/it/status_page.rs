//! The status page in a real browser: headless Chromium loads `GET /` from
//! a server on a manual clock driven through each state (ok in business
//! hours, ok with the clock paused, firing, failed page, Svix endpoint
//! disabled); the rendered DOM must read right in the calendar's zone and
//! carry no secret. Then who is on a firing stream (issue #27): firing,
//! acknowledged and silenced, each at 1280 px and at a phone's 390 px, with
//! what the layout measured asserted (nothing wider than the screen, short
//! identifiers on one line, threshold diamonds whole). A screenshot of each
//! state is saved under target/test-output/status-page/ for a person to
//! look at (not committed).

use crate::common;

use common::*;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const OPS_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const ADMIN: &str = "admin-token-SECRET-1";
const HOOK_SECRET: &str = "whsec_plJ3nmyCDGBKInavdOK15jsl";
const EP: &str = "ep_Kh8oOOL8dKLzdocJ2isAjIhKtJ0";
const SUBJECT: &str = "user_SUBJECT0000000000042";

fn config(hook_url: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[calendars.tokyo]
timezone = "Asia/Tokyo"
weekly = ["mon-fri 09:00-18:00"]

[streams.identity]
calendar = "tokyo"
silence_threshold = "6h"
notify = ["hook"]
[streams.identity.ingest]
webhook_secret = "{SECRET}"
token = "{TOKEN}"

[notifiers.hook]
kind = "webhook"
url = "{hook_url}"
secret = "{HOOK_SECRET}"
timeout = "2s"

[notifiers.stdout]
kind = "log"

[svix.main]
secret = "{OPS_SECRET}"
streams = ["identity"]
notify = ["stdout"]
admin_token = "{ADMIN}"
endpoints = {{ "{EP}" = "identity" }}
"#
    )
}

/// Chromium, or None (with a message) when it is missing and cannot be
/// installed because the test does not run as root.
fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser"].iter().find_map(|name| {
        Command::new("which")
            .arg(name)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
    });
    if found.is_some() {
        return found;
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    assert!(
        !root,
        "chromium is missing; scripts/test-components installs it (apt-get install chromium)"
    );
    eprintln!("SKIP status page browser tests: chromium is not installed and this is not root");
    None
}

fn output_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-output/status-page");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs headless Chromium with the flags it needs on a machine without
/// network, plus `extra`; returns stdout. Bounded: killed after 90 s.
fn run_chromium(browser: &Path, extra: &[String], url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

struct Browser {
    path: PathBuf,
    base: String,
    addr: std::net::SocketAddr,
}

impl Browser {
    /// The DOM Chromium built from `GET /`, and a screenshot named `state`
    /// (desktop width, plus phone width when asked).
    fn look(&self, state: &str, phone: bool) -> String {
        let dom = run_chromium(&self.path, &["--dump-dom".to_string()], &self.base);
        assert!(dom.contains("<h1>hushwatch status</h1>"), "{dom}");
        let dir = output_dir();
        let file = dir.join(format!("{state}.png"));
        let _ = std::fs::remove_file(&file);
        run_chromium(
            &self.path,
            &[
                "--window-size=1280,1600".to_string(),
                format!("--screenshot={}", file.display()),
            ],
            &self.base,
        );
        assert!(
            file.exists(),
            "screenshot {} was not written",
            file.display()
        );
        if phone {
            self.probe(&format!("{state}-phone"), PHONE);
        }
        std::fs::write(dir.join(format!("{state}.html")), &dom).unwrap();
        dom
    }

    /// The page as a person sees it in a viewport `width` px wide: what the
    /// layout measured (see [`PROBE`]), and a screenshot `{name}.png`.
    ///
    /// Headless Chromium never makes its window narrower than 500 px (a
    /// `--window-size=390,…` screenshot is the left 390 px of a 500-px
    /// layout), and the page's policy allows no script. So the page, as
    /// served, goes into the `srcdoc` of a `width`-px iframe in a local
    /// harness file: the same HTML and stylesheet laid out in a true
    /// `width`-px viewport, measured by the harness's script.
    fn probe(&self, name: &str, width: u32) -> serde_json::Value {
        let page = get(self.addr, "/");
        assert_eq!(page.status, 200);
        // The harness must not reload itself while it is looked at.
        let html = page
            .body
            .replace("<meta http-equiv=\"refresh\" content=\"10\">", "");
        let srcdoc = html.replace('&', "&amp;").replace('"', "&quot;");
        let harness = format!(
            "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>body{{margin:0}}iframe{{border:0;display:block}}</style></head>\
             <body><iframe id=\"f\" width=\"{width}\" height=\"3000\" srcdoc=\"{srcdoc}\"></iframe><script>{PROBE}</script></body></html>"
        );
        let dir = output_dir();
        let file = dir.join(format!("{name}.harness.html"));
        std::fs::write(&file, harness).unwrap();
        let url = format!("file://{}", file.display());
        let window = format!("--window-size={width},3000");
        let dom = run_chromium(&self.path, &[window.clone(), "--dump-dom".into()], &url);
        let at = dom
            .find("data-probe=\"")
            .unwrap_or_else(|| panic!("no probe result: {dom}"))
            + 12;
        let end = dom[at..].find('"').unwrap() + at;
        let json = dom[at..end]
            .replace("&quot;", "\"")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&nbsp;", "\u{a0}")
            .replace("&#39;", "'")
            .replace("&amp;", "&");
        let probe: serde_json::Value = serde_json::from_str(&json).expect(&json);
        let shot = dir.join(format!("{name}.png"));
        let _ = std::fs::remove_file(&shot);
        run_chromium(
            &self.path,
            &[window, format!("--screenshot={}", shot.display())],
            &url,
        );
        assert!(
            shot.exists(),
            "screenshot {} was not written",
            shot.display()
        );
        // What any width must give: nothing wider than the screen, no short
        // identifier broken over two lines, no diamond cut by the picture's
        // edge, and the newest diamond inside the visible part of its strip.
        assert!(
            probe["scrollWidth"].as_i64().unwrap() <= i64::from(width),
            "{name}: the page is wider than {width} px: {probe}"
        );
        assert_eq!(probe["clientWidth"], width, "{name}: {probe}");
        assert_eq!(probe["broken"], serde_json::json!([]), "{name}: {probe}");
        assert_eq!(probe["clipped"], 0, "{name}: diamonds cut off: {probe}");
        assert_eq!(probe["hiddenNewest"], 0, "{name}: {probe}");
        probe
    }
}

/// A phone's CSS width.
const PHONE: u32 = 390;

/// Runs in the harness once the page has loaded in its iframe; leaves what
/// it measured as JSON in `data-probe` on the harness body.
const PROBE: &str = r#"
const f = document.getElementById('f');
f.addEventListener('load', () => {
  const d = f.contentDocument, root = d.documentElement;
  const inside = (r, b) => r.left >= b.left - 0.5 && r.right <= b.right + 0.5 && r.top >= b.top - 0.5 && r.bottom <= b.bottom + 0.5;
  const rows = {};
  d.querySelectorAll('#streams tbody tr').forEach(tr => { rows[tr.id] = tr.innerText; });
  const broken = [...d.querySelectorAll('.ident')]
    .filter(c => c.getClientRects().length > 1).map(c => c.textContent);
  let clipped = 0, hiddenNewest = 0, diamonds = 0;
  d.querySelectorAll('svg.timeline').forEach(svg => {
    const box = svg.getBoundingClientRect(), seen = svg.parentElement.getBoundingClientRect();
    const crosses = [...svg.querySelectorAll('path.cross')];
    diamonds += crosses.length;
    crosses.forEach(p => { if (!inside(p.getBoundingClientRect(), box)) clipped++; });
    const newest = crosses[crosses.length - 1];
    if (newest && !inside(newest.getBoundingClientRect(), seen)) hiddenNewest++;
  });
  const howto = d.getElementById('how-to-ack');
  const bottom = e => Math.round(e.getBoundingClientRect().bottom);
  const relays = [...d.querySelectorAll('tr.relayline')]
    .map(tr => ({ id: tr.id, text: tr.innerText, bottom: bottom(tr) }));
  const fix = d.getElementById('how-to-relay');
  const cc = d.getElementById('how-to-crosscheck');
  document.body.setAttribute('data-probe', JSON.stringify({
    scrollWidth: root.scrollWidth, clientWidth: root.clientWidth,
    summary: d.getElementById('summary').innerText,
    howto: howto ? howto.innerText : null,
    rows, broken, clipped, hiddenNewest, diamonds, relays,
    summaryBottom: bottom(d.getElementById('summary')),
    relayHowto: fix ? { text: fix.innerText, bottom: bottom(fix) } : null,
    crosscheckHowto: cc ? { text: cc.innerText, bottom: bottom(cc) } : null,
  }));
});
"#;

/// A webhook receiver on 127.0.0.1 that refuses every page with 404.
fn refusing_receiver() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(Result::ok) {
            // Read the head and the (small) body before answering, so the
            // client sees an answer rather than a reset.
            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = conn.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
                if body_complete(&seen) {
                    break;
                }
            }
            let _ = conn.write_all(
                b"HTTP/1.1 404 Not Found\r\ncontent-length: 12\r\nconnection: close\r\n\r\nno such hook",
            );
        }
    });
    addr
}

fn body_complete(seen: &[u8]) -> bool {
    let text = String::from_utf8_lossy(seen);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    let length = head
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    body.len() >= length
}

/// The `<tr>` of a stream in the dumped DOM.
fn stream_row<'a>(dom: &'a str, name: &str) -> &'a str {
    let start = dom
        .find(&format!("<tr id=\"stream-{name}\""))
        .unwrap_or_else(|| panic!("no row for {name}: {dom}"));
    let end = dom[start..].find("</tr>").unwrap() + start;
    &dom[start..end]
}

/// The fill width of the silence bar, in percent.
fn bar_width(row: &str) -> f64 {
    let at = row.find("class=\"fill").expect("bar fill");
    let rest = &row[at..];
    let w = rest.find("width=\"").unwrap() + 7;
    let end = rest[w..].find('%').unwrap() + w;
    rest[w..end].parse().unwrap()
}

fn assert_no_secrets(dom: &str) {
    for secret in [
        SECRET,
        TOKEN,
        OPS_SECRET,
        ADMIN,
        HOOK_SECRET,
        SUBJECT,
        "SEKRIT",
        "whsec_",
    ] {
        assert!(!dom.contains(secret), "the page shows {secret}");
    }
}

fn signed_event(s: &InProcess, id: &str, event_type: &str) {
    let ts = s.clock_now().timestamp();
    let body = format!(
        r#"{{"type":"{event_type}","timestamp":{},"data":{{"user_id":"{SUBJECT}"}}}}"#,
        (ts - 2) * 1000
    );
    let r = post_webhook(s.addr, "identity", SECRET, id, ts, &body);
    assert_eq!(r.status, 200, "{}", r.body);
}

trait ClockNow {
    fn clock_now(&self) -> chrono::DateTime<chrono::Utc>;
}

impl ClockNow for InProcess {
    fn clock_now(&self) -> chrono::DateTime<chrono::Utc> {
        use hushwatch::clock::Clock;
        self.clock.now()
    }
}

#[test]
fn each_state_reads_right_in_a_real_browser() {
    let Some(path) = chromium() else { return };
    // The webhook notifier's URL carries a secret path; the receiver
    // refuses the page (404), so the page ends up failed.
    let hook = refusing_receiver();
    let work = Workdir::new(&config(&format!("http://{hook}/hooks/SEKRIT-PATH")));
    // Monday 09:00 in Tokyo, when watching starts.
    let s = InProcess::start(&work, utc("2026-11-30T09:00:00+09:00"));
    let browser = Browser {
        path,
        base: format!("http://{}/", s.addr),
        addr: s.addr,
    };

    // 1. OK in business hours: an event at 10:00, looked at 12:13.
    s.set_time(utc("2026-11-30T10:00:00+09:00"));
    signed_event(&s, "msg_1", "user.<b>created</b>");
    s.set_time(utc("2026-11-30T12:13:00+09:00"));
    let dom = browser.look("1-ok-in-hours", true);
    let row = stream_row(&dom, "identity");
    assert!(row.contains("data-state=\"ok\""), "{row}");
    assert!(row.contains(">OK</span>"), "{row}");
    assert!(
        row.contains(
            "silent for 2h13m of business time, fires in 3h47m (Mon 16:00 Asia/Tokyo · 07:00 UTC)"
        ),
        "{row}"
    );
    assert!((bar_width(row) - 100.0 * (2.0 * 60.0 + 13.0) / 360.0).abs() < 0.01);
    assert!(row.contains("running (in business hours)"), "{row}");
    // The event type came from a request body: shown as text, not markup.
    assert!(row.contains("user.&lt;b&gt;created&lt;/b&gt;"), "{row}");
    assert!(row.contains("Mon 10:00 Asia/Tokyo · 01:00 UTC"), "{row}");
    assert!(row.contains("lag 2s"), "{row}");
    assert!(dom.contains("OK: all 1 streams within their thresholds"));
    assert!(
        dom.contains("data-arrivals=\"1\""),
        "one tick on the timeline"
    );
    assert_no_secrets(&dom);

    // 2. OK, clock paused: a new event at 15:00, looked at 19:00.
    s.set_time(utc("2026-11-30T15:00:00+09:00"));
    signed_event(&s, "msg_2", "session.created");
    s.set_time(utc("2026-11-30T19:00:00+09:00"));
    let dom = browser.look("2-ok-paused", false);
    let row = stream_row(&dom, "identity");
    assert!(row.contains(">OK</span>"), "{row}");
    assert!(
        row.contains("paused until Tue 09:00 Asia/Tokyo (outside business hours)"),
        "{row}"
    );
    assert!(
        row.contains(
            "silent for 3h of business time, fires in 17h (Tue 12:00 Asia/Tokyo · 03:00 UTC)"
        ),
        "{row}"
    );
    assert!((bar_width(row) - 50.0).abs() < 0.01);
    assert!(dom.contains("data-arrivals=\"2\""));
    assert_no_secrets(&dom);

    // 3. Firing since Tuesday 12:00 Tokyo, looked at 13:05; the hook
    // refuses the page, which is then failed.
    s.set_time(utc("2026-12-01T13:05:00+09:00"));
    wait_until("the page to fail", || {
        let n = get(s.addr, "/v1/status").json();
        (n["notifications"]["failed_total"] == 1).then_some(())
    });
    let dom = browser.look("3-firing-page-failed", true);
    let row = stream_row(&dom, "identity");
    assert!(row.contains("data-state=\"firing\""), "{row}");
    assert!(
        row.contains("FIRING since Tue 12:00 Asia/Tokyo · 03:00 UTC"),
        "{row}"
    );
    assert!(row.contains("FIRING for 1h05m"), "{row}");
    assert!((bar_width(row) - 100.0).abs() < 0.01);
    assert!(dom.contains("FIRING: identity \u{2014} 1 of 1 streams silent too long"));
    assert!(
        dom.contains("data-crossings=\"1\""),
        "threshold crossing marked"
    );
    assert!(dom.contains("threshold reached Tue 12:00 Asia/Tokyo"));
    let hook_row_at = dom.find("<tr data-failed=\"1\"><th scope=\"row\">hook</th>");
    let hook_row = &dom[hook_row_at.expect("hook row shows a failure")..];
    let hook_row = &hook_row[..hook_row.find("</tr>").unwrap()];
    assert!(hook_row.contains("FAILED"), "{hook_row}");
    assert!(hook_row.contains("404"), "last error shown: {hook_row}");
    assert_no_secrets(&dom);

    // 4. A Svix endpoint disabled.
    let ts = s.clock_now().timestamp();
    let body = format!(
        r#"{{"type":"endpoint.disabled","data":{{"appId":"app_1","appUid":"acme","endpointId":"{EP}","endpointUid":"identity-sidecar","failSince":"2026-12-01T00:12:44Z","trigger":"automatic"}}}}"#
    );
    let key = hushwatch::ingest::signature::SecretKey::parse(OPS_SECRET).unwrap();
    let sig = hushwatch::ingest::signature::sign(&key, "op_1", ts, body.as_bytes());
    let ts = ts.to_string();
    let r = request(
        s.addr,
        "POST",
        "/v1/svix/main/operational",
        &[
            ("svix-id", "op_1"),
            ("svix-timestamp", &ts),
            ("svix-signature", &sig),
        ],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let dom = browser.look("4-svix-disabled", false);
    assert!(dom.contains("<h2 id=\"svix-h\">Svix endpoints</h2>"));
    assert!(
        dom.contains("<tr data-state=\"disabled\"><th scope=\"row\"><code>identity-sidecar</code>")
    );
    assert!(dom.contains("DISABLED (automatic)"), "{dom}");
    assert!(dom.contains("1 Svix endpoint(s) need attention"));
    assert_no_secrets(&dom);
    s.stop();
}

/// Issue #27: a second responder must see at a glance that someone is on
/// a firing stream. Firing, then acknowledged, then silenced, each looked
/// at in a 1280-px and a 390-px (phone) viewport: the banner names the
/// stream and who took it, the row says who and until when, the "how to
/// acknowledge" line shows until someone does, `user.deleted` stays on one
/// line, nothing is wider than the phone, and the threshold diamond is whole.
#[test]
fn who_is_on_a_firing_stream_reads_at_desktop_and_phone_width() {
    let Some(path) = chromium() else { return };
    let text = config("http://127.0.0.1:9/unused").replace(
        "data_dir = \"data\"",
        "data_dir = \"data\"\nadmin_token = \"admin-token-for-ack\"",
    );
    let work = Workdir::new(&text);
    let s = InProcess::start(&work, utc("2026-11-30T09:00:00+09:00"));
    let browser = Browser {
        path,
        base: format!("http://{}/", s.addr),
        addr: s.addr,
    };
    let admin = [("Authorization", "Bearer admin-token-for-ack")];
    s.set_time(utc("2026-11-30T10:00:00+09:00"));
    signed_event(&s, "msg_1", "user.deleted");
    // 6 h of business time end at 16:00 Tokyo; looked at 17:05.
    s.set_time(utc("2026-11-30T17:05:00+09:00"));
    wait_until("firing", || {
        (stream_status(s.addr, "identity")["state"] == "firing").then_some(())
    });

    for width in [1280, PHONE] {
        let p = browser.probe(&format!("5-firing-{width}"), width);
        let summary = p["summary"].as_str().unwrap();
        assert!(
            summary.starts_with("FIRING: identity \u{2014} 1 of 1 streams"),
            "{p}"
        );
        let howto = p["howto"].as_str().expect("how to acknowledge is shown");
        assert!(
            howto.contains("hushwatch ack --stream identity --comment \"looking into it\""),
            "{p}"
        );
        assert!(
            howto.contains("POST /v1/streams/identity/acknowledge"),
            "{p}"
        );
        let row = p["rows"]["stream-identity"].as_str().unwrap();
        assert!(row.contains("FIRING since Mon 16:00 Asia/Tokyo"), "{p}");
        assert!(row.contains("user.deleted"), "{p}");
        assert!(!row.contains("ACKNOWLEDGED"), "{p}");
        assert!(
            p["diamonds"].as_i64().unwrap() >= 2,
            "week and last 24 h: {p}"
        );
    }

    s.set_time(utc("2026-11-30T17:10:00+09:00"));
    let r = request(
        s.addr,
        "POST",
        "/v1/streams/identity/acknowledge",
        &admin,
        br#"{"created_by": "ana", "comment": "on it: IdP console"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let status = stream_status(s.addr, "identity");
    assert_eq!(status["acknowledged"]["by"], "ana", "{status}");
    assert_eq!(status["silenced"], serde_json::Value::Null, "{status}");
    for width in [1280, PHONE] {
        let p = browser.probe(&format!("6-acknowledged-{width}"), width);
        assert!(
            p["summary"]
                .as_str()
                .unwrap()
                .starts_with("FIRING: identity (acknowledged by ana) \u{2014} 1 of 1"),
            "{p}"
        );
        assert_eq!(p["howto"], serde_json::Value::Null, "{p}");
        let row = p["rows"]["stream-identity"].as_str().unwrap();
        assert!(row.contains("ACKNOWLEDGED"), "{p}");
        assert!(
            row.contains("acknowledged by ana at Mon 17:10 Asia/Tokyo · 08:10 UTC: \u{201c}on it: IdP console\u{201d}"),
            "{p}"
        );
    }

    let r = request(
        s.addr,
        "POST",
        "/v1/silences",
        &admin,
        br#"{"streams": ["identity"], "duration": "2h", "comment": "IdP migration", "created_by": "bob"}"#,
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let status = stream_status(s.addr, "identity");
    assert_eq!(status["silenced"]["by"], "bob", "{status}");
    assert_eq!(status["silenced"]["quiet_page"], true, "{status}");
    for width in [1280, PHONE] {
        let p = browser.probe(&format!("7-silenced-{width}"), width);
        assert!(
            p["summary"].as_str().unwrap().starts_with(
                "FIRING: identity (acknowledged by ana, silenced until Mon 19:10 Asia/Tokyo by bob)"
            ),
            "{p}"
        );
        let row = p["rows"]["stream-identity"].as_str().unwrap();
        assert!(row.contains("SILENCED"), "{p}");
        assert!(
            row.contains("silenced until Mon 19:10 Asia/Tokyo · 10:10 UTC by bob: \u{201c}IdP migration\u{201d}"),
            "{p}"
        );
    }
    s.stop();
}

#[test]
fn the_page_is_served_under_a_strict_content_security_policy() {
    let work = Workdir::new(&config("http://127.0.0.1:9/unused"));
    let s = InProcess::start(&work, utc("2026-11-30T09:00:00+09:00"));
    let page = get(s.addr, "/");
    assert_eq!(page.status, 200);
    let csp = page.header("content-security-policy").expect("CSP header");
    assert!(
        csp.starts_with("default-src 'none'; style-src 'sha256-"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe"), "{csp}");
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert!(page
        .body
        .contains("<meta http-equiv=\"refresh\" content=\"10\">"));
    // Self-contained: nothing is loaded from anywhere.
    for external in ["src=", "href=", "@import", "url("] {
        assert!(!page.body.contains(external), "page references {external}");
    }
    s.stop();
}

/// Issue #26: bidi controls and other invisible format characters from a
/// request (an event type, a silence's comment and author) never reach the
/// status page raw: U+202E would reorder the text around it ("Trojan
/// Source"). They are dropped, as `hushwatch status` drops them; the
/// visible text stays.
#[test]
fn bidi_controls_from_requests_never_reach_the_page() {
    const HIDDEN: [char; 9] = [
        '\u{202e}',
        '\u{202a}',
        '\u{2066}',
        '\u{2067}',
        '\u{2069}',
        '\u{200f}',
        '\u{061c}',
        '\u{feff}',
        '\u{e0041}',
    ];
    let text = config("http://127.0.0.1:9/unused").replace(
        "data_dir = \"data\"",
        "data_dir = \"data\"\nadmin_token = \"admin-token-for-bidi\"",
    );
    let work = Workdir::new(&text);
    let s = Sidecar::start(&work.config_path());
    let ts = now_unix();
    let body = format!(
        r#"{{"type":"user.\u202edeleted\u2066x\u2069\u200f\u061c\ufeff\udb40\udc41.ok","timestamp":{}}}"#,
        ts * 1000
    );
    let r = post_webhook(s.addr, "identity", SECRET, "msg_bidi", ts, &body);
    assert_eq!(r.status, 200, "{}", r.body);
    let r = request(
        s.addr,
        "POST",
        "/v1/silences",
        &[("Authorization", "Bearer admin-token-for-bidi")],
        "{\"streams\": [\"identity\"], \"duration\": \"2h\", \"comment\": \"IdP \u{202a}migration\u{2067}\", \"created_by\": \"a\u{202e}na\"}".as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let page = get(s.addr, "/");
    assert_eq!(page.status, 200);
    for c in HIDDEN {
        assert!(
            !page.body.contains(c),
            "U+{:04X} reaches the page raw",
            c as u32
        );
    }
    assert!(page.body.contains("user.deletedx.ok"), "{}", page.body);
    assert!(page.body.contains("IdP migration"), "{}", page.body);
    assert!(page.body.contains(">ana<"), "{}", page.body);
}

/// Issue #30: an acknowledge link's pages in real Chromium. Opening the
/// link (a plain GET, as a person or a link scanner does) renders the
/// confirmation form and acknowledges nothing; pressing the form's button
/// POSTs to the same URL (under the page's own CSP, `form-action 'self'`)
/// and the episode is acknowledged by "link". Screenshots of both pages
/// are saved under target/test-output/ack-link/.
#[test]
fn the_acknowledge_link_confirms_in_a_real_browser() {
    let Some(path) = chromium() else { return };
    let text = config("http://127.0.0.1:9/unused").replace(
        "data_dir = \"data\"",
        "data_dir = \"data\"\npublic_url = \"https://hushwatch.example.com\"",
    );
    let work = Workdir::new(&text);
    // Monday 09:00 Tokyo + 6h of business time: firing.
    let s = InProcess::start(&work, utc("2026-11-30T09:00:00+09:00"));
    s.clock.advance(chrono::TimeDelta::seconds(6 * 3600 + 1));
    wait_until("firing", || {
        (stream_status(s.addr, "identity")["state"] == "firing").then_some(())
    });
    // The code a page would carry (the pages' own links are tested
    // end to end in tests/it/ack_links.rs).
    let store = s.app().store();
    let started = s
        .block_on(store.streams())
        .unwrap()
        .into_iter()
        .find(|r| r.name == "identity")
        .and_then(|r| r.firing_since)
        .expect("firing since");
    let code = hushwatch::store::ack_codes::new_code().unwrap();
    assert!(s
        .block_on(store.mint_ack_code(
            code.sha256,
            "identity".into(),
            started,
            chrono::TimeDelta::hours(1)
        ))
        .unwrap());
    let url = format!("http://{}/ack/{}", s.addr, code.text);

    let dom = run_chromium(&path, &["--dump-dom".to_string()], &url);
    assert!(dom.contains("<form method=\"post\">"), "{dom}");
    assert!(dom.contains("id=\"confirm\""), "{dom}");
    assert_eq!(
        stream_status(s.addr, "identity")["acknowledged"],
        serde_json::Value::Null,
        "opening the link acknowledged"
    );

    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-output/ack-link");
    std::fs::create_dir_all(&shots).unwrap();
    for name in ["before.png", "after.png"] {
        let _ = std::fs::remove_file(shots.join(name));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/cdp_click.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(&path)
        .arg(&url)
        .arg("confirm")
        .arg(&shots)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report");
    let before = &report["before"];
    assert!(
        before["text"]
            .as_str()
            .unwrap()
            .contains("Acknowledge the alert on stream identity?"),
        "{report}"
    );
    assert_eq!(before["title"], "Acknowledge alert - hushwatch", "{report}");
    assert_eq!(
        before["forms"],
        serde_json::json!([{ "method": "post", "action": url }]),
        "{report}"
    );
    assert_eq!(report["after"]["result"], "Acknowledged", "{report}");
    assert_eq!(report["after"]["url"], url.as_str(), "{report}");
    for name in ["before.png", "after.png"] {
        assert!(shots.join(name).exists(), "no screenshot {name}");
    }
    assert_eq!(
        stream_status(s.addr, "identity")["acknowledged"]["by"],
        "link"
    );
    // The same link again, in the browser: the one page for spent codes.
    let spent = run_chromium(&path, &["--dump-dom".to_string()], &url);
    assert!(spent.contains("This link is not valid"), "{spent}");
    assert!(!spent.contains("<form"), "{spent}");
    s.stop();
}

/// Issue #44: a relay that pages shows on the first screen. Driven through
/// the binary (an app answering 400) into ok, then failing (`identity`)
/// and given up (`billing`); in each state the page at 1280×800 is
/// screenshot and measured: the banner's colour and words, the command to
/// run under it, and each relay line within the first 800 px.
#[test]
fn each_relay_state_shows_on_the_first_screen_at_1280_by_800() {
    let Some(path) = chromium() else { return };
    let hw = crate::status_cli::through_each_relay_state(|state, hw| {
        let browser = Browser {
            path: path.clone(),
            base: format!("http://{}/", hw.addr),
            addr: hw.addr,
        };
        let name = format!("relay-{state}");
        let shot = output_dir().join(format!("{name}-1280x800.png"));
        let _ = std::fs::remove_file(&shot);
        run_chromium(
            &path,
            &[
                "--window-size=1280,800".to_string(),
                format!("--screenshot={}", shot.display()),
            ],
            &browser.base,
        );
        assert!(
            shot.exists(),
            "screenshot {} was not written",
            shot.display()
        );
        let probe = browser.probe(&name, 1280);
        let summary = probe["summary"].as_str().unwrap();
        let relays = probe["relays"].as_array().unwrap();
        assert_eq!(relays.len(), 2, "{probe}");
        for r in relays {
            assert!(
                r["bottom"].as_i64().unwrap() <= 800,
                "{name}: relay line below the first screen: {probe}"
            );
        }
        let line = |id: &str| {
            relays
                .iter()
                .find(|r| r["id"] == id)
                .and_then(|r| r["text"].as_str())
                .unwrap_or_else(|| panic!("no {id}: {probe}"))
                .to_string()
        };
        let page = get(hw.addr, "/").body;
        match state {
            "ok" => {
                assert!(summary.starts_with("OK: all 2 streams"), "{probe}");
                assert!(probe["relayHowto"].is_null(), "{probe}");
                assert!(
                    line("relay-identity").starts_with("relay ok: nothing waiting, last delivered")
                );
            }
            _ => {
                assert!(
                    page.contains("<p class=\"summary bad\""),
                    "the banner is not green"
                );
                assert!(
                    summary.contains("RELAY NOT OK: billing (relay gave up events (dead letters)), identity (relay failing)"),
                    "{probe}"
                );
                let howto = &probe["relayHowto"];
                assert!(howto["bottom"].as_i64().unwrap() <= 800, "{probe}");
                let text = howto["text"].as_str().unwrap();
                assert!(
                    text.contains("hushwatch forward retry --stream identity"),
                    "{text}"
                );
                assert!(
                    text.contains("hushwatch replay --stream billing --dead-letters"),
                    "{text}"
                );
                let identity = line("relay-identity");
                assert!(
                    identity.starts_with("relay failing: 1 pending, oldest "),
                    "{identity}"
                );
                assert!(identity.contains("answered HTTP 400"), "{identity}");
                assert!(
                    identity.ends_with("(hushwatch forward retry --stream identity)"),
                    "{identity}"
                );
                assert!(
                    line("relay-billing").contains("1 dead letter(s)"),
                    "{probe}"
                );
                let row = stream_row(&page, "identity");
                assert!(row.contains(">RELAY FAILING</span>"), "{row}");
            }
        }
    });
    hw.stop();
}

/// Issue #45: a cross-check that found a missed revocation, then whose key
/// the provider refuses, shows on the first screen. Driven through the
/// binary (`hushwatch crosscheck` against a local Clerk API) into open
/// findings, then failing; in each state the page at 1280×800 is
/// screenshot and measured: the banner's words, what to do under it, and
/// the stream's cross-check line within the first 800 px.
#[test]
fn a_cross_check_with_findings_then_failing_shows_on_the_first_screen_at_1280_by_800() {
    let Some(path) = chromium() else { return };
    let (api, work) = crate::crosscheck_view::a_missed_revocation(0);
    let running = InProcess::start(&work, chrono::Utc::now());
    let browser = Browser {
        path: path.clone(),
        base: format!("http://{}/", running.addr),
        addr: running.addr,
    };
    let look = |state: &str| {
        let name = format!("crosscheck-{state}");
        let shot = output_dir().join(format!("{name}-1280x800.png"));
        let _ = std::fs::remove_file(&shot);
        run_chromium(
            &path,
            &[
                "--window-size=1280,800".to_string(),
                format!("--screenshot={}", shot.display()),
            ],
            &browser.base,
        );
        assert!(
            shot.exists(),
            "screenshot {} was not written",
            shot.display()
        );
        let probe = browser.probe(&name, 1280);
        let line = probe["relays"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == "crosscheck-identity")
            .unwrap_or_else(|| panic!("no cross-check line: {probe}"))
            .clone();
        assert!(
            line["bottom"].as_i64().unwrap() <= 800,
            "{name}: below the first screen: {probe}"
        );
        let howto = probe["crosscheckHowto"].clone();
        assert!(howto["bottom"].as_i64().unwrap() <= 800, "{name}: {probe}");
        (
            probe,
            line["text"].as_str().unwrap().to_owned(),
            howto["text"].as_str().unwrap().to_owned(),
        )
    };

    let (probe, line, howto) = look("findings");
    assert!(
        probe["summary"]
            .as_str()
            .unwrap()
            .contains("CROSS-CHECK NOT OK: identity (1 missed revocation (Clerk))"),
        "{probe}"
    );
    assert!(
        line.starts_with("cross-check: 1 missed revocation (Clerk): user_2 in org_9; last poll "),
        "{line}"
    );
    assert!(line.contains("hushwatch audit subject --config "), "{line}");
    assert!(howto.contains("the app was probably never told"), "{howto}");
    let page = get(running.addr, "/").body;
    assert!(stream_row(&page, "identity").contains(">CROSS-CHECK FINDINGS</span>"));

    // Clerk now refuses the key: one failed poll is critical at once.
    api.push(vec![
        crate::support::Answer::StatusBody(
            401,
            r#"{"errors":[{"message":"Invalid authentication"}]}"#.into()
        );
        4
    ]);
    let (code, out, err) =
        crate::support::run_cli(&["crosscheck", "--stream", "identity"], &work.config_path());
    assert_eq!(code, 1, "{out}{err}");
    let (probe, line, howto) = look("failing");
    assert!(
        probe["summary"]
            .as_str()
            .unwrap()
            .contains("identity (cross-check with Clerk failing)"),
        "{probe}"
    );
    assert!(
        line.starts_with("cross-check failing: the Clerk API refused the key"),
        "{line}"
    );
    assert!(line.contains("also 1 missed revocation open"), "{line}");
    assert!(line.ends_with("--stream identity --dry-run)"), "{line}");
    assert!(
        howto.contains("give [crosscheck] api_key a Clerk key"),
        "{howto}"
    );
    assert!(!page.contains("sk_test_"), "the key never reaches the page");
    running.stop();
}

/// Issue #44: a relay holding events it cannot send, and one with a
/// revocation undelivered past `critical_after`, show on the first screen
/// too (driven through the binary by `status_cli`'s driver): the banner is
/// not green and names both, the command to run is under it, and each
/// relay line is within the first 800 px.
#[test]
fn held_and_overdue_relays_show_on_the_first_screen_at_1280_by_800() {
    let Some(path) = chromium() else { return };
    let hw = crate::status_cli::through_held_and_overdue_relay_states(|state, hw| {
        let browser = Browser {
            path: path.clone(),
            base: format!("http://{}/", hw.addr),
            addr: hw.addr,
        };
        let name = format!("relay-{state}");
        let shot = output_dir().join(format!("{name}-1280x800.png"));
        let _ = std::fs::remove_file(&shot);
        run_chromium(
            &path,
            &[
                "--window-size=1280,800".to_string(),
                format!("--screenshot={}", shot.display()),
            ],
            &browser.base,
        );
        assert!(
            shot.exists(),
            "screenshot {} was not written",
            shot.display()
        );
        let probe = browser.probe(&name, 1280);
        let summary = probe["summary"].as_str().unwrap();
        let relays = probe["relays"].as_array().unwrap();
        assert_eq!(relays.len(), 2, "{probe}");
        for r in relays {
            assert!(
                r["bottom"].as_i64().unwrap() <= 800,
                "{name}: relay line below the first screen: {probe}"
            );
        }
        let line = |id: &str| {
            relays
                .iter()
                .find(|r| r["id"] == id)
                .and_then(|r| r["text"].as_str())
                .unwrap_or_else(|| panic!("no {id}: {probe}"))
                .to_string()
        };
        let page = get(hw.addr, "/").body;
        assert!(
            page.contains("<p class=\"summary bad\""),
            "the banner is not green"
        );
        for want in [
            "billing (relay holds events it cannot send)",
            "identity (revocation undelivered too long)",
        ] {
            assert!(summary.contains(want), "{want}: {probe}");
        }
        let howto = &probe["relayHowto"];
        assert!(howto["bottom"].as_i64().unwrap() <= 800, "{probe}");
        let text = howto["text"].as_str().unwrap();
        assert!(
            text.contains("hushwatch forward list --stream billing --state held"),
            "{text}"
        );
        assert!(
            text.contains("hushwatch forward retry --stream identity"),
            "{text}"
        );
        let billing = line("relay-billing");
        assert!(
            billing.starts_with("relay holds events it cannot send: 1 held"),
            "{billing}"
        );
        let identity = line("relay-identity");
        assert!(
            identity.starts_with(
                "revocation undelivered too long: 1 pending, oldest user.deleted user_5"
            ),
            "{identity}"
        );
        assert!(identity.contains(" undelivered for "), "{identity}");
    });
    hw.stop();
}
