//! Conformance cases for relay mode's rows (`store::forward`, issue #29),
//! on every backend.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::TimeDelta;

use super::super::forward::{
    ClaimRoom, ForwardAlignment, ForwardAttempt, ForwardBody, ForwardClaim, ForwardEscalation,
    ForwardPolicy, ForwardSettle, Order, ReplayRequest, StreamAlignment,
};
use super::super::seal::Sealed;
use super::super::testdb::{at, event, TestDb};
use super::super::{EventOutcome, NewEvent, Store};
use crate::clock::{Clock, ManualClock};
use hushwatch_core::domain::forward::{Hold, Ladder};

backend_matrix!(
    an_ordered_stream_hands_out_its_oldest_event_only_and_fences_a_lost_lease,
    failures_page_at_each_step_once_and_a_delivery_resolves,
    an_event_past_give_up_after_is_a_dead_letter_until_replayed,
    a_delivery_moves_the_clock_when_told_and_is_pruned_after_retain,
    held_events_leave_their_queue_page_and_are_released_when_the_cause_is_gone,
    per_subject_order_holds_back_only_the_failing_subject_and_keeps_the_run_open,
    a_changed_order_applies_to_queued_events_and_status_names_what_waits,
    an_overdue_revocation_pages_critical_once_and_resolves_when_delivered,
    a_row_stored_before_any_key_is_marked_and_a_later_one_is_not,
    thousands_of_subject_queues_are_claimed_longest_waiting_first,
    a_failing_run_whose_events_were_set_aside_resolves_without_a_delivery,
    a_healed_event_keeps_its_origin_and_shares_the_webhook_channel_s_ids,
    a_held_page_is_followed_up_naming_only_the_events_held_after_it,
    a_stream_at_its_concurrency_leaves_room_for_the_others,
);

/// `true`: one queue per stream (as before the modes); `false`: none.
fn forwarded(stream: &str, id: &str, ms: i64, ordered: bool, moves_clock: bool) -> NewEvent {
    forwarded_as(
        stream,
        id,
        ms,
        Order::from_bool(ordered),
        moves_clock,
        &format!("user_{id}"),
    )
}

fn forwarded_as(
    stream: &str,
    id: &str,
    ms: i64,
    order: Order,
    moves_clock: bool,
    user: &str,
) -> NewEvent {
    let mut e = event(stream, Some(id), "user.deleted", ms);
    e.channel = "webhook";
    e.feeds_clock = !moves_clock;
    e.subject_ids = vec![("user_id".into(), user.to_string())];
    e.forward = Some(ForwardBody {
        sealed: Sealed {
            key_id: None,
            bytes: format!("{{\"id\":\"{id}\"}}").into_bytes(),
        },
        order,
        revocation: true,
        moves_clock,
        origin: None,
        templated: false,
    });
    e
}

fn policy(alert_after: &[u32]) -> ForwardPolicy {
    ForwardPolicy {
        ladder: Ladder {
            retry: vec![TimeDelta::seconds(10); 3],
            give_up_after: TimeDelta::hours(1),
            alert_after: alert_after.to_vec(),
        },
        order: Order::Stream,
        critical_after: TimeDelta::hours(1),
        config_path: "/etc/hushwatch/hushwatch.toml".into(),
        retain: TimeDelta::hours(2),
        dead_letter_retain: TimeDelta::days(1),
        notifiers: vec!["ops".into()],
        audit: true,
    }
}

async fn claim(store: &Store, replica: &str, clock: &ManualClock) -> Vec<ForwardClaim> {
    store
        .claim_forwards(
            replica.into(),
            clock.now(),
            TimeDelta::seconds(60),
            ClaimRoom::uniform(10),
        )
        .await
        .unwrap()
        .0
}

fn settle(
    claim: ForwardClaim,
    attempt: ForwardAttempt,
    clock: &ManualClock,
    p: &ForwardPolicy,
) -> ForwardSettle {
    ForwardSettle {
        claim,
        attempt,
        at: clock.now(),
        policy: p.clone(),
    }
}

fn failed() -> ForwardAttempt {
    ForwardAttempt::Failed {
        error: "http://app:3000 answered HTTP 502".into(),
        status: Some(502),
    }
}

fn ids(claims: &[ForwardClaim]) -> Vec<&str> {
    claims.iter().map(|c| c.delivery_id.as_str()).collect()
}

async fn forward_pages(store: &Store) -> Vec<(String, String, String)> {
    store
        .pending_outbox()
        .await
        .unwrap()
        .rows
        .into_iter()
        .filter(|r| r.alert_kind.as_str().starts_with("forward_"))
        .map(|r| {
            (
                r.alert_kind.as_str().to_string(),
                if r.state == super::super::AlertState::Firing {
                    "firing".to_string()
                } else {
                    "ok".to_string()
                },
                r.severity,
            )
        })
        .collect()
}

async fn an_ordered_stream_hands_out_its_oldest_event_only_and_fences_a_lost_lease(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(1_000_010)));
    let store = db.open_with_clock(clock.clone()).await;
    store
        .record_events(vec![
            forwarded("clerk", "a", 1_000_000, true, false),
            forwarded("clerk", "b", 1_000_001, true, false),
            forwarded("other", "x", 1_000_002, false, false),
            forwarded("other", "y", 1_000_003, false, false),
        ])
        .await
        .unwrap();
    // A duplicate delivery stores no second forward.
    store
        .record_events(vec![forwarded("clerk", "a", 1_000_004, true, false)])
        .await
        .unwrap();
    let first = claim(&store, "r1", &clock).await;
    assert_eq!(
        ids(&first),
        ["a", "x", "y"],
        "the ordered queue's head only"
    );
    let a = first[0].clone();
    assert_eq!(a.body.bytes, b"{\"id\":\"a\"}");
    assert_eq!(a.subject.as_deref(), Some("user_a"));
    let second = db.open_second_with_clock(&store, clock.clone()).await;
    assert!(
        claim(&second, "r2", &clock).await.is_empty(),
        "one event in flight per ordered stream across replicas"
    );
    // The lease runs out: another replica takes the head over, under a new
    // token; the first holder's outcome then changes nothing.
    clock.advance(TimeDelta::seconds(61));
    let taken = claim(&second, "r2", &clock).await;
    assert_eq!(ids(&taken), ["a", "x", "y"]);
    assert!(taken[0].token > a.token);
    let p = policy(&[1]);
    let lost = store
        .settle_forward(settle(
            a,
            ForwardAttempt::Delivered { status: 200 },
            &clock,
            &p,
        ))
        .await
        .unwrap();
    assert!(!lost.settled);
    assert!(
        claim(&store, "r1", &clock).await.is_empty(),
        "b waits behind a"
    );
    // A single process restarting releases every lease at once.
    let held = claim(&store, "r1", &clock).await;
    assert!(held.is_empty(), "b waits behind a, which r2 holds");
    let won = second
        .settle_forward(settle(
            taken[0].clone(),
            ForwardAttempt::Delivered { status: 204 },
            &clock,
            &p,
        ))
        .await
        .unwrap();
    assert!(won.settled);
    let b = claim(&store, "r1", &clock).await;
    assert_eq!(ids(&b), ["b"]);
    assert!(claim(&store, "r3", &clock).await.is_empty(), "b is leased");
    // b, and x and y (claimed, never settled).
    assert_eq!(store.release_forward_leases().await.unwrap(), 3);
    let retaken = claim(&store, "r3", &clock).await;
    assert_eq!(ids(&retaken), ["b", "x", "y"]);
    assert!(
        retaken[0].token > b[0].token,
        "the old holder is fenced off"
    );
}

async fn failures_page_at_each_step_once_and_a_delivery_resolves(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(2_000_000)));
    let store = db.open_with_clock(clock.clone()).await;
    store
        .record_events(vec![
            forwarded("clerk", "a", 2_000_000, true, false),
            forwarded("clerk", "b", 2_000_001, true, false),
        ])
        .await
        .unwrap();
    let p = policy(&[1, 3]);
    for attempt in 1..=3 {
        let c = claim(&store, "r1", &clock).await;
        assert_eq!(
            ids(&c),
            ["a"],
            "attempt {attempt}: the failing head blocks b"
        );
        assert_eq!(c[0].attempts, attempt, "counted when claimed");
        let s = store
            .settle_forward(settle(c[0].clone(), failed(), &clock, &p))
            .await
            .unwrap();
        assert!(s.settled && !s.dead);
        // Not due again before its retry time.
        assert!(claim(&store, "r1", &clock).await.is_empty());
        clock.advance(TimeDelta::seconds(10));
    }
    let status = store.forward_status().await.unwrap();
    let clerk = status.iter().find(|s| s.stream == "clerk").unwrap();
    assert_eq!((clerk.pending, clerk.consecutive_failures), (2, 3));
    assert_eq!(clerk.oldest_pending_at, Some(at(2_000_000)));
    assert!(clerk.last_error.as_deref().unwrap().contains("502"));
    assert_eq!(
        forward_pages(&store).await,
        [
            ("forward_failing".into(), "firing".into(), "warning".into()),
            ("forward_failing".into(), "firing".into(), "critical".into()),
        ],
        "steps 1 and 3 page once each"
    );
    let c = claim(&store, "r1", &clock).await;
    store
        .settle_forward(settle(
            c[0].clone(),
            ForwardAttempt::Delivered { status: 200 },
            &clock,
            &p,
        ))
        .await
        .unwrap();
    let pages = forward_pages(&store).await;
    assert_eq!(pages.len(), 3);
    assert_eq!(pages[2].1, "ok", "the first 2xx resolves the run");
    assert_eq!(
        pages[2].2, "critical",
        "a resolve keeps the severity it fired with"
    );
    let clerk = store
        .forward_status()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.stream == "clerk")
        .unwrap();
    assert_eq!((clerk.pending, clerk.consecutive_failures), (1, 0));
    assert_eq!(clerk.last_delivered_at, Some(clock.now()));
    assert_eq!(
        store
            .forward_fate("clerk".into(), "a".into())
            .await
            .unwrap()
            .unwrap()
            .status,
        Some(200)
    );
}

async fn an_event_past_give_up_after_is_a_dead_letter_until_replayed(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(3_000_000)));
    let store = db.open_with_clock(clock.clone()).await;
    store
        .record_events(vec![forwarded("clerk", "a", 3_000_000, true, false)])
        .await
        .unwrap();
    let p = policy(&[]);
    clock.advance(TimeDelta::hours(1));
    let c = claim(&store, "r1", &clock).await;
    let s = store
        .settle_forward(settle(c[0].clone(), failed(), &clock, &p))
        .await
        .unwrap();
    assert!(s.settled && s.dead);
    assert!(
        claim(&store, "r1", &clock).await.is_empty(),
        "a dead letter is not retried"
    );
    let clerk = store
        .forward_status()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.stream == "clerk")
        .unwrap();
    assert_eq!((clerk.pending, clerk.dead_letters), (0, 1));
    assert_eq!(
        forward_pages(&store).await,
        [(
            "forward_dead_letter".into(),
            "firing".into(),
            "critical".into()
        )]
    );
    let request = |dry_run: bool| ReplayRequest {
        stream: "clerk".into(),
        from: at(2_000_000),
        to: at(4_000_000),
        types: Vec::new(),
        dry_run,
        by: "ana".into(),
        now: clock.now(),
        audit: true,
        notifiers: vec!["ops".into()],
        config_path: "/etc/hushwatch/hushwatch.toml".into(),
    };
    let dry = store.replay_forwards(request(true)).await.unwrap();
    assert_eq!(dry.count, 1);
    assert_eq!(dry.items[0].delivery_id, "a");
    assert_eq!(dry.items[0].state, "dead");
    assert!(
        claim(&store, "r1", &clock).await.is_empty(),
        "a dry run sends nothing"
    );
    let audit_before = store.audit_summary().await.unwrap().head_seq;
    let done = store.replay_forwards(request(false)).await.unwrap();
    assert_eq!(done.count, 1);
    assert_eq!(
        store.audit_summary().await.unwrap().head_seq,
        audit_before + 1,
        "the replay is audited"
    );
    let again = claim(&store, "r1", &clock).await;
    assert_eq!(ids(&again), ["a"], "under its original id");
    assert_eq!(again[0].attempts, 1, "a replay starts the count again");
    // The replay restarts give_up_after: one failure does not bury it again.
    let failed_once = store
        .settle_forward(settle(again[0].clone(), failed(), &clock, &p))
        .await
        .unwrap();
    assert!(failed_once.settled && !failed_once.dead);
    clock.advance(TimeDelta::seconds(10));
    let again = claim(&store, "r1", &clock).await;
    assert_eq!(ids(&again), ["a"]);
    let pages = forward_pages(&store).await;
    assert_eq!(
        pages.last().unwrap().1,
        "ok",
        "no dead letters left: resolved"
    );
    // Replaying a window whose event is pending again re-queues nothing.
    let twice = store.replay_forwards(request(false)).await.unwrap();
    assert_eq!((twice.count, twice.already_pending), (0, 1));
}

async fn a_delivery_moves_the_clock_when_told_and_is_pruned_after_retain(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(5_000_000)));
    let store = db.open_with_clock(clock.clone()).await;
    store
        .record_events(vec![forwarded("clerk", "a", 5_000_000, true, true)])
        .await
        .unwrap();
    let row = super::super::testdb::stream(&store, "clerk").await;
    assert_eq!(
        row.last_arrival_at, None,
        "clock = delivered: the arrival does not count"
    );
    clock.advance(TimeDelta::seconds(3));
    let c = claim(&store, "r1", &clock).await;
    let p = policy(&[1]);
    let s = store
        .settle_forward(settle(
            c[0].clone(),
            ForwardAttempt::Delivered { status: 200 },
            &clock,
            &p,
        ))
        .await
        .unwrap();
    let moved = s.moved.expect("the app's 2xx moved the clock");
    assert_eq!(moved.last_arrival_at, Some(clock.now()));
    assert_eq!(moved.last_event_type.as_deref(), Some("user.deleted"));
    let none = BTreeMap::new();
    assert_eq!(
        store
            .prune_forwards(clock.now(), none.clone())
            .await
            .unwrap(),
        0
    );
    clock.advance(TimeDelta::hours(2));
    assert_eq!(store.prune_forwards(clock.now(), none).await.unwrap(), 1);
    assert_eq!(
        store
            .forward_fate("clerk".into(), "a".into())
            .await
            .unwrap(),
        None
    );
}

fn alignment(
    clock: &ManualClock,
    streams: &[(&str, Option<Order>)],
    keys: &[&str],
) -> ForwardAlignment {
    ForwardAlignment {
        streams: streams
            .iter()
            .map(|(s, o)| StreamAlignment {
                stream: s.to_string(),
                order: *o,
                notifiers: vec!["ops".into()],
                config_path: "/etc/hushwatch/hushwatch.toml".into(),
            })
            .collect(),
        key_ids: keys.iter().map(|k| k.to_string()).collect(),
        now: clock.now(),
    }
}

async fn status_of(store: &Store, stream: &str) -> crate::forward::ForwardStatus {
    store
        .forward_status()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.stream == stream)
        .unwrap_or_default()
}

async fn held_events_leave_their_queue_page_and_are_released_when_the_cause_is_gone(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(1_000_010)));
    let store = db.open_with_clock(clock.clone()).await;
    // One subject: a (sealed with a key since dropped), then b.
    let mut a = forwarded_as("clerk", "a", 1_000_000, Order::Subject, false, "user_1");
    if let Some(f) = a.forward.as_mut() {
        f.sealed.key_id = Some("0ld0ld".into());
    }
    store
        .record_events(vec![
            a,
            forwarded_as("clerk", "b", 1_000_001, Order::Subject, false, "user_1"),
        ])
        .await
        .unwrap();
    let p = ForwardPolicy {
        order: Order::Subject,
        ..policy(&[1])
    };
    let c = claim(&store, "r1", &clock).await;
    assert_eq!(ids(&c), ["a"]);
    let s = store
        .settle_forward(settle(
            c[0].clone(),
            ForwardAttempt::Held(Hold::UnknownKey("0ld0ld".into())),
            &clock,
            &p,
        ))
        .await
        .unwrap();
    assert!(s.settled && s.held && !s.dead);
    // Out of the queue at once: b, of the same subject, goes on.
    let next = claim(&store, "r1", &clock).await;
    assert_eq!(ids(&next), ["b"]);
    let st = status_of(&store, "clerk").await;
    assert_eq!((st.held, st.pending, st.consecutive_failures), (1, 1, 0));
    assert_eq!(
        forward_pages(&store).await,
        [("forward_held".into(), "firing".into(), "critical".into())],
        "held pages critical, and is no failure of the app"
    );
    let text = store
        .pending_outbox()
        .await
        .unwrap()
        .rows
        .into_iter()
        .find(|r| r.alert_kind.as_str() == "forward_held")
        .unwrap()
        .reason;
    assert!(
        text.contains("key 0ld0ld") && text.contains("delivery a"),
        "{text}"
    );
    assert!(
        text.contains(
            "hushwatch forward skip --config /etc/hushwatch/hushwatch.toml --stream clerk --id a"
        ),
        "{text}"
    );
    // A reload without the key changes nothing; with it, a is due now.
    let still = store
        .align_forwards(alignment(
            &clock,
            &[("clerk", Some(Order::Subject))],
            &["n3wn3w"],
        ))
        .await
        .unwrap();
    assert_eq!(still.released, 0);
    let back = store
        .align_forwards(alignment(
            &clock,
            &[("clerk", Some(Order::Subject))],
            &["n3wn3w", "0ld0ld"],
        ))
        .await
        .unwrap();
    assert_eq!(back.released, 1);
    assert_eq!(status_of(&store, "clerk").await.held, 0);
    let pages = forward_pages(&store).await;
    assert_eq!(
        pages.last().unwrap(),
        &("forward_held".into(), "ok".into(), "critical".into())
    );
    // b is still leased; once it settles, a (released behind it) is the head.
    store
        .settle_forward(settle(
            next[0].clone(),
            ForwardAttempt::Delivered { status: 200 },
            &clock,
            &p,
        ))
        .await
        .unwrap();
    assert_eq!(ids(&claim(&store, "r1", &clock).await), ["a"]);
    // A stream that loses [forward]: its waiting rows are held at once.
    store
        .record_events(vec![forwarded_as(
            "gone",
            "g",
            1_000_002,
            Order::Subject,
            false,
            "user_9",
        )])
        .await
        .unwrap();
    let held = store
        .align_forwards(alignment(
            &clock,
            &[("clerk", Some(Order::Subject)), ("gone", None)],
            &[],
        ))
        .await
        .unwrap();
    assert_eq!(held.held, 1);
    assert_eq!(status_of(&store, "gone").await.held, 1);
    let back = store
        .align_forwards(alignment(&clock, &[("gone", Some(Order::Subject))], &[]))
        .await
        .unwrap();
    assert_eq!(back.released, 1, "[forward] back: released, due now");
    assert!(ids(&claim(&store, "r1", &clock).await).contains(&"g"));
}

async fn per_subject_order_holds_back_only_the_failing_subject_and_keeps_the_run_open(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(2_000_010)));
    let store = db.open_with_clock(clock.clone()).await;
    let ev =
        |id: &str, ms: i64, user: &str| forwarded_as("clerk", id, ms, Order::Subject, false, user);
    store
        .record_events(vec![
            ev("p1", 2_000_000, "user_poison"),
            ev("p2", 2_000_001, "user_poison"),
            ev("o1", 2_000_002, "user_ok"),
            ev("o2", 2_000_003, "user_ok"),
        ])
        .await
        .unwrap();
    let p = ForwardPolicy {
        order: Order::Subject,
        ..policy(&[1])
    };
    let first = claim(&store, "r1", &clock).await;
    assert_eq!(ids(&first), ["p1", "o1"], "one head per subject");
    for c in first {
        let outcome = if c.delivery_id == "p1" {
            failed()
        } else {
            ForwardAttempt::Delivered { status: 200 }
        };
        store
            .settle_forward(settle(c, outcome, &clock, &p))
            .await
            .unwrap();
    }
    // The poisoned subject waits for its retry; the other goes on at once.
    assert_eq!(ids(&claim(&store, "r1", &clock).await), ["o2"]);
    let st = status_of(&store, "clerk").await;
    assert_eq!(st.consecutive_failures, 1);
    let fire = store
        .pending_outbox()
        .await
        .unwrap()
        .rows
        .into_iter()
        .find(|r| r.alert_kind.as_str() == "forward_failing")
        .unwrap()
        .reason;
    assert!(fire.contains("1 subject(s) are blocked"), "{fire}");
    // o2 is delivered too, but p1 still fails: the page does not resolve.
    let o2 = claim(&store, "r2", &clock).await;
    assert!(o2.is_empty(), "o2 is leased by r1");
    store.release_forward_leases().await.unwrap();
    let o2 = claim(&store, "r2", &clock).await;
    assert_eq!(ids(&o2), ["o2"]);
    store
        .settle_forward(settle(
            o2[0].clone(),
            ForwardAttempt::Delivered { status: 200 },
            &clock,
            &p,
        ))
        .await
        .unwrap();
    assert!(
        forward_pages(&store)
            .await
            .iter()
            .all(|(_, s, _)| s == "firing"),
        "no resolve while another subject is stuck"
    );
    let st = status_of(&store, "clerk").await;
    assert_eq!(st.consecutive_failures, 1);
    assert_eq!(
        st.next_attempt_at,
        Some(at(2_000_010) + TimeDelta::seconds(10)),
        "the failing head's retry, not p2 waiting behind it"
    );
    // The poisoned head goes through at last: now it resolves.
    clock.advance(TimeDelta::seconds(10));
    let p1 = claim(&store, "r1", &clock).await;
    assert_eq!(ids(&p1), ["p1"]);
    assert_eq!(p1[0].attempts, 2);
    store
        .settle_forward(settle(
            p1[0].clone(),
            ForwardAttempt::Delivered { status: 200 },
            &clock,
            &p,
        ))
        .await
        .unwrap();
    assert_eq!(forward_pages(&store).await.last().unwrap().1, "ok");
    assert_eq!(ids(&claim(&store, "r1", &clock).await), ["p2"]);
}

async fn a_changed_order_applies_to_queued_events_and_status_names_what_waits(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(3_000_010)));
    let store = db.open_with_clock(clock.clone()).await;
    let ev =
        |id: &str, ms: i64, user: &str| forwarded_as("clerk", id, ms, Order::Stream, false, user);
    store
        .record_events(vec![
            ev("a", 3_000_000, "user_1"),
            ev("b", 3_000_001, "user_2"),
        ])
        .await
        .unwrap();
    let st = status_of(&store, "clerk").await;
    let oldest = st.oldest_pending.expect("named");
    assert_eq!(
        (oldest.delivery_id.as_str(), oldest.subject.as_deref()),
        ("a", Some("user_1"))
    );
    assert_eq!(st.oldest_revocation_at, Some(at(3_000_000)));
    assert_eq!(st.next_attempt_at, Some(at(3_000_000)));
    // Stored per stream; the config now says per subject: both are heads.
    let a = store
        .align_forwards(alignment(&clock, &[("clerk", Some(Order::Subject))], &[]))
        .await
        .unwrap();
    assert_eq!(a.requeued, 2);
    assert_eq!(ids(&claim(&store, "r1", &clock).await), ["a", "b"]);
    store.release_forward_leases().await.unwrap();
    let again = store
        .align_forwards(alignment(&clock, &[("clerk", Some(Order::Subject))], &[]))
        .await
        .unwrap();
    assert_eq!(again.requeued, 0, "nothing to rewrite twice");
    // Back to per stream: a blocks b again; none: both on their own.
    store
        .align_forwards(alignment(&clock, &[("clerk", Some(Order::Stream))], &[]))
        .await
        .unwrap();
    assert_eq!(ids(&claim(&store, "r1", &clock).await), ["a"]);
    store.release_forward_leases().await.unwrap();
    store
        .align_forwards(alignment(&clock, &[("clerk", Some(Order::None))], &[]))
        .await
        .unwrap();
    assert_eq!(ids(&claim(&store, "r1", &clock).await), ["a", "b"]);
}

async fn an_overdue_revocation_pages_critical_once_and_resolves_when_delivered(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(4_000_000)));
    let store = db.open_with_clock(clock.clone()).await;
    store
        .record_events(vec![forwarded("clerk", "a", 4_000_000, true, false)])
        .await
        .unwrap();
    let esc = |clock: &ManualClock| ForwardEscalation {
        stream: "clerk".into(),
        critical_after: TimeDelta::hours(1),
        now: clock.now(),
        notifiers: vec!["ops".into()],
        config_path: "/etc/hushwatch/hushwatch.toml".into(),
    };
    assert_eq!(store.escalate_forwards(esc(&clock)).await.unwrap(), None);
    clock.advance(TimeDelta::hours(1));
    assert_eq!(
        store.escalate_forwards(esc(&clock)).await.unwrap(),
        Some(true)
    );
    assert_eq!(
        store.escalate_forwards(esc(&clock)).await.unwrap(),
        None,
        "once"
    );
    assert_eq!(
        forward_pages(&store).await,
        [(
            "forward_revocation_overdue".into(),
            "firing".into(),
            "critical".into()
        )]
    );
    let c = claim(&store, "r1", &clock).await;
    store
        .settle_forward(settle(
            c[0].clone(),
            ForwardAttempt::Delivered { status: 200 },
            &clock,
            &policy(&[1]),
        ))
        .await
        .unwrap();
    assert_eq!(
        store.escalate_forwards(esc(&clock)).await.unwrap(),
        Some(false)
    );
    assert_eq!(status_of(&store, "clerk").await.oldest_revocation_at, None);
}

async fn a_row_stored_before_any_key_is_marked_and_a_later_one_is_not(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(5_000_000)));
    let store = db.open_with_clock(clock.clone()).await;
    store
        .record_events(vec![forwarded("clerk", "before", 5_000_000, false, false)])
        .await
        .unwrap();
    // A row sealed by a process that has the key, stored before that
    // process's first alignment ran (the forwarder starts after ingest
    // does): sealed, so not "before any key", or relabelling it to
    // plaintext later would get its forged body sent.
    let mut early = forwarded("clerk", "early", 5_000_000, false, false);
    if let Some(f) = early.forward.as_mut() {
        f.sealed.key_id = Some("k3y".into());
    }
    store.record_events(vec![early]).await.unwrap();
    // A key is configured: what is stored so far was stored without one.
    store
        .align_forwards(alignment(&clock, &[("clerk", Some(Order::None))], &["k3y"]))
        .await
        .unwrap();
    store
        .record_events(vec![forwarded("clerk", "after", 5_000_000, false, false)])
        .await
        .unwrap();
    let c = claim(&store, "r1", &clock).await;
    let before: Vec<(&str, bool)> = c
        .iter()
        .map(|c| (c.delivery_id.as_str(), c.before_any_key))
        .collect();
    assert_eq!(
        before,
        [("before", true), ("early", false), ("after", false)]
    );
    assert!(c.iter().all(|c| !c.legacy_aad));
    // A second start with the key keeps the first mark.
    store.release_forward_leases().await.unwrap();
    store
        .align_forwards(alignment(&clock, &[("clerk", Some(Order::None))], &["k3y"]))
        .await
        .unwrap();
    let c = claim(&store, "r1", &clock).await;
    assert!(
        !c.iter()
            .find(|c| c.delivery_id == "after")
            .unwrap()
            .before_any_key
    );
}

async fn thousands_of_subject_queues_are_claimed_longest_waiting_first(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(9_000_000)));
    let store = db.open_with_clock(clock.clone()).await;
    // 2,000 subjects, two events each.
    let events: Vec<NewEvent> = (0..4000)
        .map(|i| {
            let id = format!("e{i}");
            let user = format!("user_{}", i % 2000);
            forwarded_as("clerk", &id, 8_000_000 + i, Order::Subject, false, &user)
        })
        .collect();
    store.record_events(events).await.unwrap();
    let c = claim(&store, "r1", &clock).await;
    assert_eq!(
        ids(&c),
        ["e0", "e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8", "e9"],
        "the limit, oldest heads first"
    );
    // Each subject's second event waits for its first.
    let mut claimed = c.len();
    loop {
        let (more, _) = store
            .claim_forwards(
                "r1".into(),
                clock.now(),
                TimeDelta::seconds(60),
                ClaimRoom::uniform(1000),
            )
            .await
            .unwrap();
        if more.is_empty() {
            break;
        }
        assert!(more
            .iter()
            .all(|c| c.delivery_id[1..].parse::<i64>().unwrap() < 2000));
        claimed += more.len();
    }
    assert_eq!(claimed, 2000, "one in flight per subject");
    assert_eq!(status_of(&store, "clerk").await.pending, 4000);
}

async fn a_failing_run_whose_events_were_set_aside_resolves_without_a_delivery(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(10_000_000)));
    let store = db.open_with_clock(clock.clone()).await;
    let mut created = forwarded_as("clerk", "c", 10_000_000, Order::Subject, false, "user_c");
    created.event_type = "user.created".into();
    if let Some(f) = created.forward.as_mut() {
        f.revocation = false;
    }
    store.record_events(vec![created]).await.unwrap();
    let p = ForwardPolicy {
        order: Order::Subject,
        ..policy(&[1])
    };
    let esc = |clock: &ManualClock| ForwardEscalation {
        stream: "clerk".into(),
        critical_after: TimeDelta::hours(1),
        now: clock.now(),
        notifiers: vec!["ops".into()],
        config_path: "/etc/hushwatch/hushwatch.toml".into(),
    };
    let c = claim(&store, "r1", &clock).await;
    store
        .settle_forward(settle(c[0].clone(), failed(), &clock, &p))
        .await
        .unwrap();
    assert_eq!(
        store.escalate_forwards(esc(&clock)).await.unwrap(),
        None,
        "still failing: the run goes on"
    );
    // Past give_up_after it becomes a dead letter: nothing fails any more.
    clock.advance(TimeDelta::hours(1));
    let c = claim(&store, "r1", &clock).await;
    let s = store
        .settle_forward(settle(c[0].clone(), failed(), &clock, &p))
        .await
        .unwrap();
    assert!(s.dead);
    assert_eq!(
        store.escalate_forwards(esc(&clock)).await.unwrap(),
        Some(false)
    );
    let failing: Vec<_> = forward_pages(&store)
        .await
        .into_iter()
        .filter(|(k, ..)| k == "forward_failing")
        .collect();
    assert_eq!(failing.last().unwrap().1, "ok", "{failing:?}");
    assert_eq!(status_of(&store, "clerk").await.consecutive_failures, 0);
    assert_eq!(
        store.escalate_forwards(esc(&clock)).await.unwrap(),
        None,
        "once"
    );
}

/// Issue #45 (heal): a row hushwatch built carries its origin to the claim
/// (`Hushwatch-Origin`), and an event healed on channel `crosscheck` is the
/// same delivery as its webhook: whichever comes second is a duplicate and
/// queues nothing.
async fn a_healed_event_keeps_its_origin_and_shares_the_webhook_channel_s_ids(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(1_000_010)));
    let store = db.open_with_clock(clock.clone()).await;
    let mut healed = forwarded("clerk", "msg_healed", 1_000_000, false, false);
    healed.channel = "crosscheck";
    if let Some(f) = healed.forward.as_mut() {
        f.origin = Some("crosscheck".into());
    }
    let webhook = forwarded("clerk", "msg_healed", 1_000_001, false, false);
    let plain = forwarded("clerk", "msg_plain", 1_000_002, false, false);
    let outcomes = store
        .record_events(vec![healed.clone(), webhook, plain])
        .await
        .unwrap();
    assert_eq!(
        outcomes,
        [
            EventOutcome::Accepted,
            EventOutcome::Duplicate,
            EventOutcome::Accepted
        ]
    );
    // Healed again (a crash before the finding was marked): still one row.
    assert_eq!(
        store.record_events(vec![healed]).await.unwrap(),
        [EventOutcome::Duplicate]
    );
    let mut claims = claim(&store, "r1", &clock).await;
    claims.sort_by(|a, b| a.delivery_id.cmp(&b.delivery_id));
    let got: Vec<(&str, Option<&str>)> = claims
        .iter()
        .map(|c| (c.delivery_id.as_str(), c.origin.as_deref()))
        .collect();
    assert_eq!(
        got,
        [("msg_healed", Some("crosscheck")), ("msg_plain", None)]
    );
}

/// The firing held pages queued so far, oldest first.
async fn held_pages(store: &Store) -> Vec<String> {
    store
        .pending_outbox()
        .await
        .unwrap()
        .rows
        .into_iter()
        .filter(|r| {
            r.alert_kind.as_str() == "forward_held" && r.state == super::super::AlertState::Firing
        })
        .map(|r| r.reason)
        .collect()
}

/// Issue #44: events held later in the same episode are named by a
/// follow-up page (in whatever order they are held), and no event is
/// paged twice; a new episode names everything again.
async fn a_held_page_is_followed_up_naming_only_the_events_held_after_it(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(1_000_010)));
    let store = db.open_with_clock(clock.clone()).await;
    let sealed_old = |id: &str, ms: i64| {
        let mut e = forwarded_as(
            "clerk",
            id,
            ms,
            Order::Subject,
            false,
            &format!("user_{id}"),
        );
        if let Some(f) = e.forward.as_mut() {
            f.sealed.key_id = Some("0ld0ld".into());
        }
        e
    };
    store
        .record_events(vec![
            sealed_old("ha", 1_000_000),
            sealed_old("hb", 1_000_001),
            sealed_old("hc", 1_000_002),
        ])
        .await
        .unwrap();
    let p = ForwardPolicy {
        order: Order::Subject,
        ..policy(&[1])
    };
    let mut c = claim(&store, "r1", &clock).await;
    c.sort_by(|x, y| x.delivery_id.cmp(&y.delivery_id));
    assert_eq!(ids(&c), ["ha", "hb", "hc"]);
    let hold = |claim: &ForwardClaim| {
        settle(
            claim.clone(),
            ForwardAttempt::Held(Hold::UnknownKey("0ld0ld".into())),
            &clock,
            &p,
        )
    };
    store.settle_forward(hold(&c[0])).await.unwrap();
    assert_eq!(held_pages(&store).await.len(), 1);
    // Held out of id order: hc, then hb; each is named once, by its own page.
    store.settle_forward(hold(&c[2])).await.unwrap();
    store.settle_forward(hold(&c[1])).await.unwrap();
    let pages = held_pages(&store).await;
    assert_eq!(pages.len(), 3, "{pages:#?}");
    assert!(pages[0].contains("delivery ha"), "{}", pages[0]);
    for (page, new, old) in [
        (&pages[1], "hc", ["ha", "hb"]),
        (&pages[2], "hb", ["ha", "hc"]),
    ] {
        assert!(
            page.starts_with("more events of stream clerk were held since the last page"),
            "{page}"
        );
        assert!(page.contains(&format!("delivery {new}")), "{page}");
        assert!(
            page.contains(&format!("--id {new} ")),
            "the follow-up's skip command: {page}"
        );
        for o in old {
            assert!(
                !page.contains(&format!("delivery {o}")),
                "{o} paged twice: {page}"
            );
        }
    }
    assert!(pages[2].contains("(3 held in all)"), "{}", pages[2]);
    // A reload that releases nothing sends nothing new.
    store
        .align_forwards(alignment(&clock, &[("clerk", Some(Order::Subject))], &[]))
        .await
        .unwrap();
    assert_eq!(held_pages(&store).await.len(), 3);
    // The key back: all released, the alert resolves; held again later, a
    // new episode's page names them all.
    let back = store
        .align_forwards(alignment(
            &clock,
            &[("clerk", Some(Order::Subject))],
            &["0ld0ld"],
        ))
        .await
        .unwrap();
    assert_eq!(back.released, 3);
    let mut again = claim(&store, "r1", &clock).await;
    again.sort_by(|x, y| x.delivery_id.cmp(&y.delivery_id));
    assert_eq!(ids(&again), ["ha", "hb", "hc"]);
    for c in &again {
        store.settle_forward(hold(c)).await.unwrap();
    }
    let pages = held_pages(&store).await;
    assert_eq!(pages.len(), 6, "a new page and two follow-ups: {pages:#?}");
    assert!(
        pages[3].contains("delivery ha") && !pages[3].starts_with("more events"),
        "{}",
        pages[3]
    );
    assert!(pages[4].contains("delivery hb") && pages[5].contains("delivery hc"));
}

async fn a_stream_at_its_concurrency_leaves_room_for_the_others(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(11_000_000)));
    let store = db.open_with_clock(clock.clone()).await;
    // A busy unordered stream stored first (its rows are the oldest), a
    // per-subject one, and a quiet unordered one.
    let mut events: Vec<NewEvent> = (0..50)
        .map(|i| forwarded("busy", &format!("b{i}"), 10_000_000 + i, false, false))
        .collect();
    events.extend((0..5).map(|i| {
        let id = format!("s{i}");
        forwarded_as("subjects", &id, 10_100_000 + i, Order::Subject, false, &id)
    }));
    events
        .extend((0..5).map(|i| forwarded("quiet", &format!("q{i}"), 10_200_000 + i, false, false)));
    store.record_events(events).await.unwrap();
    let room = ClaimRoom {
        total: 20,
        per_stream: [("busy".to_string(), 4), ("subjects".to_string(), 3)]
            .into_iter()
            .collect(),
        otherwise: 16,
    };
    let (c, _) = store
        .claim_forwards("r1".into(), clock.now(), TimeDelta::seconds(60), room)
        .await
        .unwrap();
    let of = |prefix: char| {
        c.iter()
            .filter(|c| c.delivery_id.starts_with(prefix))
            .count()
    };
    assert_eq!(
        (of('b'), of('s'), of('q')),
        (4, 3, 5),
        "each stream within its room, the quiet one not starved by the busy one's older rows"
    );
    // Nothing left of the busy stream's room: only what others may start.
    let room = ClaimRoom {
        total: 20,
        per_stream: [("busy".to_string(), 0), ("subjects".to_string(), 0)]
            .into_iter()
            .collect(),
        otherwise: 16,
    };
    let (c, _) = store
        .claim_forwards("r1".into(), clock.now(), TimeDelta::seconds(60), room)
        .await
        .unwrap();
    assert!(c.is_empty(), "{:?}", ids(&c));
}
