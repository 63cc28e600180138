//! Provider subscriptions that must be renewed (Entra subscriptions, Google channels), on a
//! manual clock with a real HTTP receiver: the expiry is exported, a warning page goes out
//! exactly `expiry_warning` before the expiry, a delivery showing a later expiry resolves
//! it, and Entra's reauthorization notice pages at once.

use crate::common::pg;
use crate::common::*;
use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use support::*;

const START: &str = "2026-12-01T00:00:00Z";
const STATE: &str = "entra-client-state";

fn config(url: &str) -> String {
    config_on(url, "")
}

/// `store` is extra config for the store (`[store] url = …` for PostgreSQL), or empty.
fn config_on(url: &str, store: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"
{store}

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

/// One Google push message on `workspace`; returns the status code.
fn google(addr: SocketAddr, channel: &str, expiration: &str, state: &str, number: u32) -> u16 {
    post(
        addr,
        "/v1/streams/workspace/webhook",
        &[
            ("X-Goog-Channel-ID", channel),
            ("X-Goog-Channel-Token", "tok"),
            ("X-Goog-Channel-Expiration", expiration),
            ("X-Goog-Resource-State", state),
            ("X-Goog-Message-Number", &number.to_string()),
        ],
        "",
    )
}

/// Makes the subscription watcher evaluate at the clock's current reading and waits until
/// it has: any recorded expiry wakes it (here a `sync` of a probe channel far from its own
/// warning), and it publishes the clock reading of each completed pass. After this, "no
/// page" means the watcher looked at this instant and decided none was due, not that it
/// had not looked yet.
fn evaluated_now(s: &InProcess) {
    static PROBES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let number = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let now = s.now();
    let expires = (now + chrono::TimeDelta::days(2)).to_rfc2822();
    assert_eq!(google(s.addr, "probe", &expires, "sync", number), 200);
    let want = now.timestamp() as f64;
    wait_until(
        "the subscription watcher to evaluate at the current time",
        || (s.metric("hushwatch_subscriptions_evaluated_timestamp_seconds ") >= want).then_some(()),
    );
}

/// What the store holds for `subscription`: its expiry and alert state.
fn stored(s: &InProcess, subscription: &str) -> Option<(String, String)> {
    s.block_on(s.app().store().subscriptions())
        .unwrap()
        .into_iter()
        .find(|r| r.subscription == subscription)
        .map(|r| (r.expires_at.to_rfc3339(), format!("{:?}", r.state)))
}

fn pages(recv: &Receiver) -> Vec<serde_json::Value> {
    recv.delivered().iter().map(Received::json).collect()
}

fn wait_pages(s: &InProcess, recv: &Receiver, n: usize) -> Vec<serde_json::Value> {
    s.advance_until(1, &format!("{n} pages"), || {
        let got = pages(recv);
        (got.len() >= n).then_some(got)
    })
}

#[test]
fn entra_expiry_warns_before_and_clears_on_renewal() {
    let recv = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let s = InProcess::start_in(dir.path(), &config(&recv.url("/hook")), utc(START));

    assert_eq!(entra(s.addr, "2026-12-03T00:00:00Z", false), 200);
    let series = r#"hushwatch_subscription_expires_timestamp_seconds{stream="directory",subscription="sub-1"}"#;
    let want = format!("{series} {}", utc("2026-12-03T00:00:00Z").timestamp());
    wait_until("the expiry metric", || {
        let text = s.app().metrics().encode();
        text.lines().any(|l| l == want).then_some(())
    });

    // The default Entra warning is 24 h: nothing a second before it.
    s.clock.set(utc("2026-12-01T23:59:59Z"));
    evaluated_now(&s);
    assert!(pages(&recv).is_empty(), "{:?}", pages(&recv));
    assert_eq!(s.pending().len(), 0, "nothing queued at 23:59:59");
    s.clock.set(utc("2026-12-02T00:00:00Z"));
    let got = wait_pages(&s, &recv, 1);
    let firing = &got[0];
    let text = firing.to_string();
    assert!(text.contains("subscription_expiring"), "{text}");
    assert!(text.contains("warning"), "{text}");
    assert!(text.contains("sub-1"), "{text}");

    // Graph renews by extending the expiry: the next delivery shows it and clears the alert.
    assert_eq!(entra(s.addr, "2026-12-10T00:00:00Z", false), 200);
    let got = wait_pages(&s, &recv, 2);
    let resolved = got[1].to_string();
    assert!(resolved.contains("resolved"), "{resolved}");
    assert!(resolved.contains("2026-12-10T00:00:00Z"), "{resolved}");
    assert_eq!(got.len(), 2, "exactly one firing and one resolved page");

    // A reauthorization notice pages at once, without waiting for the expiry window.
    assert_eq!(entra(s.addr, "2026-12-10T00:00:00Z", true), 200);
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
    let s = InProcess::start_in(dir.path(), &config(&recv.url("/hook")), utc(START));
    let status = post(
        s.addr,
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
    evaluated_now(&s);
    assert!(pages(&recv).is_empty());
    assert_eq!(s.pending().len(), 0, "nothing queued at 04:59");
    s.clock.set(utc("2026-12-01T05:00:00Z"));
    let got = wait_pages(&s, &recv, 1);
    assert!(got[0].to_string().contains("chan-1"), "{}", got[0]);
    s.stop();
}

/// Issue 26: one forged `X-Goog-Channel-Expiration: … 9999` (or the same on 32 forged
/// channel ids) used to pin `subscription_expiring` off for good, since the stored expiry
/// only moves forward and the longest-lived rows were kept. Now an expiry further ahead than
/// any channel lives is not stored, and past the per-stream cap the channels that delivered
/// least recently go first: the genuine channel still warns on time. Both backends.
fn forged_far_future_expiries_cannot_silence_the_warning(store: &str) {
    let recv = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let s = InProcess::start_in(
        dir.path(),
        &config_on(&recv.url("/hook"), store),
        utc(START),
    );
    let genuine = "Tue, 01 Dec 2026 06:00:00 GMT";
    let forged = "Fri, 31 Dec 9999 23:59:59 GMT";
    assert_eq!(google(s.addr, "chan-1", genuine, "CREATE_USER", 1), 200);
    // The forged expiry on the genuine channel: the message is an arrival like any other,
    // but its expiry is not believed.
    assert_eq!(google(s.addr, "chan-1", forged, "CREATE_USER", 2), 200);
    // 32 forged channels, first with impossible expiries, then with plausible ones (a
    // week ahead) that did fill the cap; the genuine channel delivers after them.
    for n in 0..32 {
        let id = format!("forged-{n}");
        assert_eq!(google(s.addr, &id, forged, "CREATE_USER", 1), 200);
    }
    assert_eq!(
        stored(&s, "forged-0"),
        None,
        "an impossible expiry is not stored"
    );
    s.clock.set(utc("2026-12-01T00:10:00Z"));
    for n in 0..32 {
        let id = format!("forged-{n}");
        let week = "Tue, 08 Dec 2026 00:00:00 GMT";
        assert_eq!(google(s.addr, &id, week, "CREATE_USER", 2), 200);
    }
    // The genuine channel keeps delivering (with its genuine expiry, as Google sends it):
    // it is the most recent to deliver, so a forged row goes instead.
    s.clock.set(utc("2026-12-01T00:20:00Z"));
    assert_eq!(google(s.addr, "chan-1", genuine, "CREATE_USER", 3), 200);
    assert_eq!(
        stored(&s, "chan-1").map(|r| r.0),
        Some("2026-12-01T06:00:00+00:00".to_owned()),
        "the genuine channel keeps its genuine expiry and its row"
    );

    s.clock.set(utc("2026-12-01T05:00:00Z"));
    let got = s.advance_until(1, "the genuine channel's warning", || {
        pages(&recv)
            .into_iter()
            .find(|p| p.to_string().contains("chan-1"))
    });
    assert!(got.to_string().contains("subscription_expiring"), "{got}");
    s.stop();
}

#[test]
fn forged_far_future_expiries_cannot_silence_the_warning_sqlite() {
    forged_far_future_expiries_cannot_silence_the_warning("");
}

#[test]
fn forged_far_future_expiries_cannot_silence_the_warning_postgres() {
    let Some(db) = pg::PgDb::create("forged_far_future_expiries_postgres") else {
        return;
    };
    forged_far_future_expiries_cannot_silence_the_warning(&format!(
        "[store]\nurl = \"{}\"\n",
        db.url
    ));
}
