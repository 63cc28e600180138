//! Pages queue per (alert, notifier): a silence page that hangs or keeps
//! failing on a notifier never holds back a Svix page for the same stream
//! through the same notifier, against a real HTTP receiver.

use crate::common::*;
use crate::support;

use support::*;

const EP: &str = "ep_Kh8oOOL8dKLzdocJ2isAjIhKtJ0";
const START: &str = "2026-12-01T00:00:00Z";

/// `identity` and the Svix source `main` both page through `hook`; the
/// notifier's timeout is far longer than any test poll, so a hanging
/// attempt stays in flight for the whole test.
fn start(recv: &Receiver) -> (tempfile::TempDir, InProcess) {
    let dir = tempfile::tempdir().unwrap();
    let notifiers = format!(
        "[notifiers.hook]\nkind = \"webhook\"\nurl = \"{}\"\ntimeout = \"10m\"\nbackoff_initial = \"1h\"\nbackoff_max = \"2h\"\n\n\
         [svix.main]\nsecret = \"{SVIX_OPS_SECRET}\"\nstreams = [\"identity\"]\nnotify = [\"hook\"]\nendpoints = {{ \"{EP}\" = \"identity\" }}\n",
        recv.url("/hook")
    );
    let text = config(&["hook"], "", &notifiers);
    let s = InProcess::start_in(dir.path(), &text, utc(START));
    (dir, s)
}

/// Svix disables the endpoint: one critical page for `identity` via `hook`.
fn disable_endpoint(s: &InProcess) {
    let body = svix_endpoint_body("endpoint.disabled", EP, Some("automatic"));
    let status = post_svix_op(s.addr, s.now().timestamp(), "msg_disable", &body);
    assert_eq!(status, 200);
}

fn kinds(got: &[Received]) -> Vec<String> {
    got.iter()
        .map(|r| r.json()["alert"]["kind"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_hanging_silence_page_does_not_hold_back_a_svix_page() {
    let recv = Receiver::start(vec![Answer::Hang]);
    let (_dir, s) = start(&recv);
    s.fire();
    wait_exactly("the silence page to reach the receiver", 1, || {
        recv.received()
    });
    disable_endpoint(&s);
    // With one queue per (stream, notifier) this waits for the hanging
    // attempt (10 minutes); per (alert, notifier) it goes out at once.
    let delivered = wait_until("the Svix page to be delivered", || {
        let d = recv.delivered();
        (!d.is_empty()).then_some(d)
    });
    assert_eq!(kinds(&delivered), ["svix_endpoint_disabled"]);
    assert_eq!(delivered[0].json()["alert"]["severity"], "critical");
    // The silence page is still in flight, not delivered.
    let got = recv.received();
    assert_eq!(kinds(&got), ["silence", "svix_endpoint_disabled"]);
    assert_eq!(got[0].answered, None);
    // The receiver answers before hushwatch records the delivery, so wait for
    // the record rather than asserting it at once.
    wait_until("only the silence page to stay pending", || {
        let pending: Vec<String> = s
            .pending()
            .iter()
            .map(|r| r.alert_kind.as_str().to_string())
            .collect();
        (pending == ["silence"]).then_some(())
    });
    s.stop();
}

#[test]
fn a_failing_silence_page_does_not_hold_back_a_svix_page() {
    let recv = Receiver::start(vec![Answer::Status(503)]);
    let (_dir, s) = start(&recv);
    s.fire();
    // The 503 schedules a retry an hour from now (on the manual clock).
    wait_until("the silence page to be retried later", || {
        s.pending()
            .first()
            .is_some_and(|r| r.attempts == 1 && r.next_attempt_at.is_some())
            .then_some(())
    });
    disable_endpoint(&s);
    let delivered = wait_until("the Svix page to be delivered", || {
        let d = recv.delivered();
        (!d.is_empty()).then_some(d)
    });
    assert_eq!(kinds(&delivered), ["svix_endpoint_disabled"]);
    wait_until("only the silence page to stay pending", || {
        let pending: Vec<String> = s
            .pending()
            .iter()
            .map(|r| r.alert_kind.as_str().to_string())
            .collect();
        (pending == ["silence"]).then_some(())
    });
    // Its own queue still delivers it once the retry is due.
    let delivered = s.advance_until_at_least(600, "the silence page to be delivered", 2, || {
        recv.delivered()
    });
    assert_eq!(kinds(&delivered), ["svix_endpoint_disabled", "silence"]);
    s.stop();
}
