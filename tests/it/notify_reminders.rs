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
    wait_exactly("the page", 1, || team.delivered());

    // 2h of business time after firing: 17-18 Friday + 09-10 Monday.
    s.clock.set(utc("2026-12-07T10:00:00+09:00"));
    let got = wait_exactly("the reminder", 2, || team.delivered());
    let (page, reminder) = (got[0].json(), got[1].json());
    assert_eq!(reminder["status"], "firing");
    assert_eq!(reminder["alert"]["details"]["page_kind"], "reminder");
    assert_eq!(reminder["sent_at"], "2026-12-07T01:00:00.000Z");
    assert_eq!(reminder["alert"]["id"], page["alert"]["id"]);
    assert_eq!(reminder["alert"]["summary"], page["alert"]["summary"]);
    assert_ne!(got[0].header("webhook-id"), got[1].header("webhook-id"));
    // The delivery round that queued the reminder queued any escalation
    // due at 10:00 with it; an empty outbox means every page of that round
    // has been sent (and the receivers recorded it) before we look.
    wait_until("the reminder's round to settle", || {
        s.pending().is_empty().then_some(())
    });
    assert!(
        boss.received().is_empty(),
        "not escalated before 3h: {:#?}",
        boss.received()
    );
    assert_exactly("the reminder", 2, &team.received());

    // 3h of business time: escalate to boss.
    s.clock.set(utc("2026-12-07T11:00:00+09:00"));
    let escalation = wait_exactly("the escalation", 1, || boss.delivered())[0].json();
    assert_eq!(escalation["alert"]["details"]["page_kind"], "escalation");
    assert_eq!(escalation["alert"]["id"], page["alert"]["id"]);

    // Resolving tells both the team and whoever it was escalated to.
    s.resolve();
    let to_team = wait_exactly("team resolved", 3, || team.delivered());
    let to_boss = wait_exactly("boss resolved", 2, || boss.delivered());
    assert_eq!(to_team[2].json()["status"], "resolved");
    assert_eq!(to_boss[1].json()["status"], "resolved");
    assert_eq!(to_boss[1].json()["alert"]["id"], page["alert"]["id"]);
    // The receivers see the last pages before hushwatch records them.
    wait_until("the outbox to empty", || {
        s.pending().is_empty().then_some(())
    });
    assert_exactly(
        "one page per transition or step to the team",
        3,
        &team.received(),
    );
    assert_exactly(
        "the escalation and its resolve to the boss",
        2,
        &boss.received(),
    );
}
