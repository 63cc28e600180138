//! SIGTERM with a receiver that never answers: `serve` exits cleanly
//! within `service::SHUTDOWN_WITHIN` (the chart's
//! terminationGracePeriodSeconds minus a margin), not after the 120 s
//! the stuck attempt's own timeout allows, and what was in flight is not
//! lost: the next process sends it again under the same key.

use crate::common::*;
use crate::support::{Answer, Receiver};
use hushwatch::service::SHUTDOWN_WITHIN;
use std::time::{Duration, Instant};

/// SIGTERM, then the exit status and how long the exit took. Waits well
/// past the bound, so a shutdown that overran it fails the assertion below
/// with its figure instead of a timeout here.
fn terminate(s: &mut Sidecar) -> (std::process::ExitStatus, Duration) {
    let asked = Instant::now();
    s.signal("TERM");
    let status = wait_for(SHUTDOWN_WITHIN * 3, "hushwatch to exit", || {
        s.child.try_wait().unwrap()
    });
    (status, asked.elapsed())
}

fn assert_within_the_bound(status: std::process::ExitStatus, took: Duration, s: &Sidecar) {
    assert!(status.success(), "{status}: {}", s.stderr_text());
    // The bound plus the time the process takes to start exiting; the
    // stuck attempt alone would have held it 120 s.
    assert!(
        took < SHUTDOWN_WITHIN + Duration::from_secs(5),
        "shutdown took {took:?}, past its bound of {SHUTDOWN_WITHIN:?}: {}",
        s.stderr_text()
    );
}

#[test]
fn sigterm_with_a_page_stuck_in_its_notifier_exits_within_the_bound_and_the_page_goes_out_after_restart(
) {
    // The first attempt hangs (30 s, silent); every later one is answered 200.
    let recv = Receiver::start(vec![Answer::Hang]);
    let work = Workdir::new(&format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[streams.identity]
calendar = "always"
silence_threshold = "2s"
notify = ["hook"]
[streams.identity.ingest]
token = "{TOKEN}"

[notifiers.hook]
kind = "webhook"
url = "{}"
timeout = "120s"
"#,
        recv.url("/hook")
    ));
    let mut first = Sidecar::start(&work.config_path());
    let stuck = wait_until("the page to reach the stuck notifier", || {
        recv.received().into_iter().next()
    });
    let key = stuck.header("webhook-id").unwrap().to_string();
    let (status, took) = terminate(&mut first);
    assert_within_the_bound(status, took, &first);

    let second = Sidecar::start(&work.config_path());
    let delivered = wait_until("the page to be delivered after the restart", || {
        recv.delivered().into_iter().next()
    });
    assert_eq!(delivered.header("webhook-id"), Some(key.as_str()));
    assert_eq!(delivered.json()["alert"]["kind"], "silence");
    assert!(second.stop().success());
}

#[test]
fn sigterm_with_a_forward_stuck_in_the_app_exits_within_the_bound_and_the_event_is_forwarded_after_restart(
) {
    // The app: the first forward hangs, every later one is answered 200.
    let app = Receiver::start(vec![Answer::Hang]);
    let work = Workdir::new(&format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[streams.identity]
calendar = "always"
silence_threshold = "30d"
notify = ["stdout"]
[streams.identity.ingest]
webhook_secret = "{SECRET}"

[streams.identity.forward]
url = "{}"
secret = "{SECRET}"
timeout = "120s"

[notifiers.stdout]
kind = "log"
"#,
        app.url("/webhooks")
    ));
    let mut first = Sidecar::start(&work.config_path());
    let body = r#"{"type":"user.deleted","data":{"id":"user_1"}}"#;
    let reply = post_webhook(
        first.addr,
        "identity",
        SECRET,
        "msg_stuck",
        now_unix(),
        body,
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    wait_until("the forward to reach the stuck app", || {
        app.received().into_iter().next()
    });
    let (status, took) = terminate(&mut first);
    assert_within_the_bound(status, took, &first);

    let second = Sidecar::start(&work.config_path());
    let delivered = wait_until("the event to be forwarded after the restart", || {
        app.delivered().into_iter().next()
    });
    assert_eq!(delivered.header("webhook-id"), Some("msg_stuck"));
    assert_eq!(delivered.body, body.as_bytes());
    assert!(second.stop().success());
}
