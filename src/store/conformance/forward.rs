//! Conformance cases for relay mode's rows (`store::forward`, issue #29),
//! on every backend.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::TimeDelta;

use super::super::forward::{
    ForwardAttempt, ForwardBody, ForwardClaim, ForwardPolicy, ForwardSettle, ReplayRequest,
};
use super::super::seal::Sealed;
use super::super::testdb::{at, event, TestDb};
use super::super::{NewEvent, Store};
use crate::clock::{Clock, ManualClock};
use crate::domain::forward::Ladder;

backend_matrix!(
    an_ordered_stream_hands_out_its_oldest_event_only_and_fences_a_lost_lease,
    failures_page_at_each_step_once_and_a_delivery_resolves,
    an_event_past_give_up_after_is_a_dead_letter_until_replayed,
    a_delivery_moves_the_clock_when_told_and_is_pruned_after_retain,
    events_that_waited_for_forward_are_due_at_once_when_it_is_back,
);

fn forwarded(stream: &str, id: &str, ms: i64, ordered: bool, moves_clock: bool) -> NewEvent {
    let mut e = event(stream, Some(id), "user.deleted", ms);
    e.channel = "webhook";
    e.feeds_clock = !moves_clock;
    e.subject_ids = vec![("user_id".into(), format!("user_{id}"))];
    e.forward = Some(ForwardBody {
        sealed: Sealed {
            key_id: None,
            bytes: format!("{{\"id\":\"{id}\"}}").into_bytes(),
        },
        ordered,
        moves_clock,
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
        ordered: true,
        retain: TimeDelta::hours(2),
        dead_letter_retain: TimeDelta::days(1),
        notifiers: vec!["ops".into()],
        audit: true,
    }
}

async fn claim(store: &Store, replica: &str, clock: &ManualClock) -> Vec<ForwardClaim> {
    store
        .claim_forwards(replica.into(), clock.now(), TimeDelta::seconds(60), 10)
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
        .into_iter()
        .filter(|r| r.alert_kind.starts_with("forward_"))
        .map(|r| {
            (
                r.alert_kind,
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
        assert_eq!(c[0].attempts, attempt - 1);
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
    assert_eq!(again[0].attempts, 0);
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

async fn events_that_waited_for_forward_are_due_at_once_when_it_is_back(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(1_000_010)));
    let store = db.open_with_clock(clock.clone()).await;
    store
        .record_events(vec![
            forwarded("kept", "a", 1_000_000, false, false),
            forwarded("failing", "b", 1_000_001, false, false),
        ])
        .await
        .unwrap();
    let p = policy(&[5]);
    let no_forward = ForwardAttempt::Failed {
        error: crate::store::forward::NO_FORWARD.into(),
        status: None,
    };
    for c in claim(&store, "r1", &clock).await {
        let attempt = if c.stream == "kept" {
            no_forward.clone()
        } else {
            failed()
        };
        store
            .settle_forward(settle(c, attempt, &clock, &p))
            .await
            .unwrap();
    }
    assert!(
        claim(&store, "r1", &clock).await.is_empty(),
        "both wait for their retry"
    );
    let moved = store
        .hurry_forwards(vec!["kept".into(), "failing".into()], clock.now())
        .await
        .unwrap();
    assert_eq!(moved, 1, "only the row that waited for [forward]");
    assert_eq!(ids(&claim(&store, "r1", &clock).await), ["a"]);
    assert_eq!(
        store
            .hurry_forwards(vec!["kept".into()], clock.now())
            .await
            .unwrap(),
        0,
        "a claimed row is not moved again"
    );
}
