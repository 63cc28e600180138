//! `hushwatch notify-test` through the real binary and a real receiver.

use crate::support;

use support::*;

fn notify_test(config: &std::path::Path, notifier: &str) -> (i32, String) {
    let (code, out, err) = crate::common::cli(&["notify-test"])
        .config(config)
        .args(&["--notifier", notifier])
        .run();
    (code, out + &err)
}

#[test]
fn notify_test_sends_a_labelled_page_and_reports_the_result() {
    let recv = Receiver::start(vec![
        Answer::Status(200),
        Answer::StatusBody(404, "gone".into()),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let url = recv.url("/hook/s3cr3t-path");
    let text = config(
        &["hook"],
        "",
        &format!("[notifiers.hook]\nkind = \"webhook\"\nurl = \"{url}\"\n"),
    );
    let path = dir.path().join("hushwatch.toml");
    std::fs::write(&path, text).unwrap();

    let (code, out) = notify_test(&path, "hook");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("hook (webhook): delivered test page hw-test-"),
        "{out}"
    );
    let got = recv.received();
    assert_eq!(got.len(), 1);
    let body = got[0].json();
    assert_eq!(body["status"], "firing");
    assert_eq!(body["alert"]["details"]["test"], true);
    assert_eq!(body["alert"]["stream"], "identity");
    assert!(body["alert"]["summary"]
        .as_str()
        .unwrap()
        .starts_with("[TEST] "));
    assert!(got[0].header("webhook-id").unwrap().starts_with("hw-test-"));

    let (code, out) = notify_test(&path, "hook");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("NOT delivered (permanent failure)"), "{out}");
    assert!(out.contains("HTTP 404"), "{out}");
    assert!(!out.contains("s3cr3t-path"), "{out}");
    // Two runs, two distinct keys: a test page never reuses a key.
    let ids: Vec<_> = recv
        .received()
        .iter()
        .map(|r| r.header("webhook-id").unwrap().to_string())
        .collect();
    assert_ne!(ids[0], ids[1]);

    let (code, out) = notify_test(&path, "nope");
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("no notifier named \"nope\" (defined: hook)"),
        "{out}"
    );
}
