//! `repeat_interval` reminders and `escalate` steps, both counted in
//! business time of the stream's calendar, against real HTTP receivers.

use crate::common::*;
use crate::support;

use support::*;

fn webhook(name: &str, url: &str) -> String {
    format!("[notifiers.{name}]\nkind = \"webhook\"\nurl = \"{url}\"\nbackoff_initial = \"1s\"\nbackoff_max = \"5s\"\n")
}

#[test]
fn reminders_and_escalations_follow_business_time_and_share_the_alert_id() {
    let team = Receiver::start(vec![]);
    let boss = Receiver::start(vec![]);
    let notifiers = format!(
        "{}{}",
        webhook("team", &team.url("/team")),
        webhook("boss", &boss.url("/boss"))
    );
    let text = config(
        &["team"],
        "repeat_interval = \"2h\"\nescalate = [{ after = \"3h\", notify = [\"boss\"] }]",
        &notifiers,
    )
    .replace("calendar = \"always\"", "calendar = \"tokyo\"");
    let dir = tempfile::tempdir().unwrap();
    // Friday 16:00 JST; 1h of business silence fires at 17:00 JST.
    let s = InProcess::start_in(dir.path(), &text, utc("2026-12-04T16:00:00+09:00"));
    s.clock.set(utc("2026-12-04T17:00:00+09:00"));
    s.wait_state("firing");
    wait_until("the page", || (team.delivered().len() == 1).then_some(()));

    // 2h of business time after firing: 17-18 Friday + 09-10 Monday.
    s.clock.set(utc("2026-12-07T10:00:00+09:00"));
    wait_until("the reminder", || {
        (team.delivered().len() == 2).then_some(())
    });
    let (page, reminder) = (team.delivered()[0].json(), team.delivered()[1].json());
    assert_eq!(reminder["status"], "firing");
    assert_eq!(reminder["alert"]["details"]["page_kind"], "reminder");
    assert_eq!(reminder["sent_at"], "2026-12-07T01:00:00.000Z");
    assert_eq!(reminder["alert"]["id"], page["alert"]["id"]);
    assert_eq!(reminder["alert"]["summary"], page["alert"]["summary"]);
    assert_ne!(
        team.delivered()[0].header("webhook-id"),
        team.delivered()[1].header("webhook-id")
    );
    assert!(boss.received().is_empty(), "not escalated before 3h");

    // 3h of business time: escalate to boss.
    s.clock.set(utc("2026-12-07T11:00:00+09:00"));
    wait_until("the escalation", || {
        (boss.delivered().len() == 1).then_some(())
    });
    let escalation = boss.delivered()[0].json();
    assert_eq!(escalation["alert"]["details"]["page_kind"], "escalation");
    assert_eq!(escalation["alert"]["id"], page["alert"]["id"]);

    // Resolving tells both the team and whoever it was escalated to.
    s.resolve();
    wait_until("team resolved", || {
        (team.delivered().len() == 3).then_some(())
    });
    wait_until("boss resolved", || {
        (boss.delivered().len() == 2).then_some(())
    });
    assert_eq!(team.delivered()[2].json()["status"], "resolved");
    assert_eq!(boss.delivered()[1].json()["status"], "resolved");
    assert_eq!(
        boss.delivered()[1].json()["alert"]["id"],
        page["alert"]["id"]
    );
    // The receivers see the last pages before hushwatch records them.
    wait_until("the outbox to empty", || {
        s.pending().is_empty().then_some(())
    });
    assert_eq!(
        team.received().len(),
        3,
        "exactly one page per transition or step"
    );
}
