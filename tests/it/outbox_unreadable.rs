//! A stored page this binary cannot read (a kind queued by a newer
//! version mid-rollout, or a row altered at rest), through the running
//! sidecar: it holds back only itself, every other page goes out, health
//! says which row and why (`/v1/status`, `hushwatch status`'s exit code,
//! `/metrics`), `emergency_notify` is paged directly once it has lasted
//! `store_alarm_after`, and all of it clears once the row reads again.

use crate::common::*;
use crate::support;

use support::*;

const START: &str = "2026-12-01T00:00:00Z";

fn sql(dir: &std::path::Path, statement: &str) {
    let conn = rusqlite::Connection::open(dir.join("data/hushwatch.sqlite3")).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    conn.execute_batch(statement).unwrap();
}

fn outbox_id(dir: &std::path::Path, stream: &str) -> i64 {
    let conn = rusqlite::Connection::open(dir.join("data/hushwatch.sqlite3")).unwrap();
    conn.query_row("SELECT id FROM outbox WHERE stream = ?1", [stream], |r| {
        r.get(0)
    })
    .unwrap()
}

fn body(r: &Received) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

#[test]
fn an_unreadable_page_holds_back_only_itself_and_pages_emergency_directly() {
    // Both streams' first attempts are refused, so both pages are still
    // queued when one of them is altered.
    let hook = Receiver::start(vec![Answer::Status(503), Answer::Status(503)]);
    let emerg = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let notifiers = format!(
        "[notifiers.hook]\nkind = \"webhook\"\nurl = \"{}\"\ntimeout = \"2s\"\n\
         [notifiers.emerg]\nkind = \"webhook\"\nurl = \"{}\"\ntimeout = \"2s\"\n\
         [streams.billing]\ncalendar = \"always\"\nsilence_threshold = \"1h\"\nnotify = [\"hook\"]\n\
         [streams.billing.ingest]\ntoken = \"{TOKEN}\"\n",
        hook.url("/hook"),
        emerg.url("/emergency"),
    );
    let text = config(&["hook"], "", &notifiers).replace(
        "data_dir = \"data\"",
        "data_dir = \"data\"\nstore_alarm_after = \"1m\"\nemergency_notify = [\"emerg\"]",
    );
    let s = InProcess::start_in(dir.path(), &text, utc(START));
    // Neither stream ever received anything: both fire after an hour.
    s.advance_until(600, "both first attempts", || {
        (hook.received().len() >= 2).then_some(())
    });
    let altered = outbox_id(dir.path(), "identity");
    sql(
        dir.path(),
        &format!("UPDATE outbox SET alert_kind = 'from_a_newer_version' WHERE id = {altered}"),
    );

    // Both streams hear from their provider again: each queues a resolve,
    // identity's behind its unreadable firing page (its own queue).
    for stream in ["identity", "billing"] {
        let reply = post_events(
            s.addr,
            stream,
            TOKEN,
            r#"{"type":"user.created","id":"e1"}"#,
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    wait_until("both streams ok", || {
        let status = s.app().status();
        let streams = status["streams"].as_array()?.clone();
        streams.iter().all(|x| x["state"] == "ok").then_some(())
    });

    // Billing's firing page and resolve go out on the retry; nothing of
    // identity's is sent, and its resolve does not overtake its firing page.
    s.advance_until(5, "billing's two pages delivered", || {
        let billing = hook
            .delivered_json()
            .into_iter()
            .filter(|p| p.to_string().contains("billing"))
            .count();
        (billing >= 2).then_some(())
    });
    let why = format!("outbox row {altered}: unknown alert_kind \"from_a_newer_version\"");
    // The watchdog checks on the service clock: step it a second at a time.
    let reasons = s.advance_until(1, "the status to name the row", || {
        let status = s.http_status();
        let reasons = status["degraded_reasons"][0].as_str()?.to_owned();
        (status["degraded"] == true && reasons.contains(&why)).then_some(reasons)
    });
    assert!(reasons.contains("every other page goes out"), "{reasons}");
    assert!(
        hook.delivered_json()
            .iter()
            .all(|p| !p.to_string().contains("\"identity\"")),
        "the unreadable page is held, never sent as something else"
    );
    let page = get(s.addr, "/");
    assert!(
        page.body
            .contains(&format!("outbox row {altered}: unknown alert_kind")),
        "the status page's banner names it"
    );
    assert_eq!(s.metric("hushwatch_outbox_unreadable"), 1.0);
    assert_eq!(s.metric("hushwatch_degraded"), 1.0);
    let url = format!("http://{}", s.addr);
    // Every stream is fine: only the held page makes `status` fail.
    let out = cli(&["status", "--url", &url]).run();
    assert_eq!(
        out.0, 1,
        "hushwatch status fails while a page is held: {}",
        out.1
    );
    assert!(out.1.contains(&why), "{}", out.1);

    // Past store_alarm_after: emergency_notify is paged directly, naming it.
    let page = s.advance_until(5, "emergency page", || emerg.received().first().cloned());
    let text = body(&page);
    assert!(text.contains("cannot read 1 stored page"), "{text}");
    assert!(text.contains(&why.replace('"', "\\\"")), "{text}");
    assert!(text.contains("hushwatch_storage"), "{text}");

    // Mended (or sent by the newer replica): the page goes out, health
    // clears, and the emergency page resolves once.
    sql(
        dir.path(),
        &format!("UPDATE outbox SET alert_kind = 'silence' WHERE id = {altered}"),
    );
    let identity = s.advance_until(5, "identity's two pages delivered", || {
        let got: Vec<_> = hook
            .delivered_json()
            .into_iter()
            .filter(|p| p.to_string().contains("\"identity\""))
            .collect();
        (got.len() >= 2).then_some(got)
    });
    assert_eq!(identity[0]["status"], "firing", "{identity:?}");
    assert_eq!(identity[1]["status"], "resolved", "{identity:?}");
    let resolved = s.advance_until(5, "emergency resolve", || emerg.received().get(1).cloned());
    assert!(
        body(&resolved).contains("reads every stored page again"),
        "{}",
        body(&resolved)
    );
    wait_until("health to clear", || {
        (s.http_status()["degraded"] == false).then_some(())
    });
    assert_eq!(s.metric("hushwatch_outbox_unreadable"), 0.0);
    let out = cli(&["status", "--url", &url]).run();
    assert_eq!(out.0, 0, "{}", out.1);
    s.stop();
}
