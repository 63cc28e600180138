//! Provider subscriptions that must be renewed (Entra subscriptions, Google channels), on a
//! manual clock with a real HTTP receiver: the expiry is exported, a warning page goes out
//! exactly `expiry_warning` before the expiry, a delivery showing a later expiry resolves
//! it, and Entra's reauthorization notice pages at once.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use support::*;

const START: &str = "2026-12-01T00:00:00Z";
const STATE: &str = "entra-client-state";

fn config(url: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[streams.directory]
calendar = "always"
silence_threshold = "30d"
notify = ["hook"]
[streams.directory.ingest]
provider = "entra"
client_state = "{STATE}"

[streams.workspace]
calendar = "always"
silence_threshold = "30d"
notify = ["hook"]
[streams.workspace.ingest]
provider = "google"
channel_token = "tok"

[notifiers.hook]
kind = "webhook"
url = "{url}"
timeout = "1s"
backoff_initial = "1s"
"#
    )
}

/// One POST over a fresh connection; returns the status code.
fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> u16 {
    let mut conn = TcpStream::connect(addr).unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    conn.write_all(format!("{head}\r\n{body}").as_bytes())
        .unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).unwrap();
    reply
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap()
}

fn entra(addr: SocketAddr, expires: &str, lifecycle: bool) -> u16 {
    let item = if lifecycle {
        format!(
            r#"{{"subscriptionId":"sub-1","subscriptionExpirationDateTime":"{expires}","lifecycleEvent":"reauthorizationRequired","clientState":"{STATE}","tenantId":"t"}}"#
        )
    } else {
        format!(
            r#"{{"subscriptionId":"sub-1","subscriptionExpirationDateTime":"{expires}","changeType":"updated","resource":"Users/u1","resourceData":{{"id":"u1"}},"clientState":"{STATE}","tenantId":"t"}}"#
        )
    };
    post(
        addr,
        "/v1/streams/directory/webhook",
        &[("Content-Type", "application/json")],
        &format!(r#"{{"value":[{item}]}}"#),
    )
}

fn pages(recv: &Receiver) -> Vec<serde_json::Value> {
    recv.delivered().iter().map(Received::json).collect()
}

fn wait_pages(s: &Sidecar, recv: &Receiver, n: usize) -> Vec<serde_json::Value> {
    s.advance_until(1, &format!("{n} pages"), || {
        let got = pages(recv);
        (got.len() >= n).then_some(got)
    })
}

#[test]
fn entra_expiry_warns_before_and_clears_on_renewal() {
    let recv = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let s = Sidecar::start(dir.path(), &config(&recv.url("/hook")), utc(START));

    assert_eq!(entra(s.addr(), "2026-12-03T00:00:00Z", false), 200);
    let series = r#"hushwatch_subscription_expires_timestamp_seconds{stream="directory",subscription="sub-1"}"#;
    let want = format!("{series} {}", utc("2026-12-03T00:00:00Z").timestamp());
    poll("the expiry metric", || {
        let text = s.app().metrics().encode();
        text.lines().any(|l| l == want).then_some(())
    });

    // The default Entra warning is 24 h: nothing a second before it.
    s.clock.set(utc("2026-12-01T23:59:59Z"));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(pages(&recv).is_empty(), "{:?}", pages(&recv));
    s.clock.set(utc("2026-12-02T00:00:00Z"));
    let got = wait_pages(&s, &recv, 1);
    let firing = &got[0];
    let text = firing.to_string();
    assert!(text.contains("subscription_expiring"), "{text}");
    assert!(text.contains("warning"), "{text}");
    assert!(text.contains("sub-1"), "{text}");

    // Graph renews by extending the expiry: the next delivery shows it and clears the alert.
    assert_eq!(entra(s.addr(), "2026-12-10T00:00:00Z", false), 200);
    let got = wait_pages(&s, &recv, 2);
    let resolved = got[1].to_string();
    assert!(resolved.contains("resolved"), "{resolved}");
    assert!(resolved.contains("2026-12-10T00:00:00Z"), "{resolved}");
    assert_eq!(got.len(), 2, "exactly one firing and one resolved page");

    // A reauthorization notice pages at once, without waiting for the expiry window.
    assert_eq!(entra(s.addr(), "2026-12-10T00:00:00Z", true), 200);
    let got = wait_pages(&s, &recv, 3);
    let text = got[2].to_string();
    assert!(
        text.contains("subscription_reauthorization_required"),
        "{text}"
    );
    s.stop();
}

#[test]
fn google_channel_expiry_uses_its_one_hour_default() {
    let recv = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let s = Sidecar::start(dir.path(), &config(&recv.url("/hook")), utc(START));
    let status = post(
        s.addr(),
        "/v1/streams/workspace/webhook",
        &[
            ("X-Goog-Channel-ID", "chan-1"),
            ("X-Goog-Channel-Token", "tok"),
            ("X-Goog-Channel-Expiration", "Tue, 01 Dec 2026 06:00:00 GMT"),
            ("X-Goog-Resource-State", "sync"),
            ("X-Goog-Message-Number", "1"),
        ],
        "",
    );
    assert_eq!(status, 200);
    s.clock.set(utc("2026-12-01T04:59:00Z"));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(pages(&recv).is_empty());
    s.clock.set(utc("2026-12-01T05:00:00Z"));
    let got = wait_pages(&s, &recv, 1);
    assert!(got[0].to_string().contains("chan-1"), "{}", got[0]);
    s.stop();
}
