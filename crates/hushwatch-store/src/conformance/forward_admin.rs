//! Conformance cases for the operator's relay actions and the chunked
//! replay (`store::forward_admin`, issue #44), on every backend.

use std::sync::Arc;

use chrono::TimeDelta;

use super::super::forward::{
    ForwardAttempt, ForwardBody, ForwardPolicy, ForwardSettle, ReplayRequest,
};
use super::super::forward_admin::{replay_in_chunks, OperatorAction, ReplayChunk, RetryOutcome};
use super::super::seal::Sealed;
use super::super::testdb::{at, event, TestDb};
use super::super::{AlertState, NewEvent, Store};
use crate::clock::{Clock, ManualClock};
use hushwatch_core::domain::forward::Ladder;
use hushwatch_core::domain::forward_ops::{first_cursor, ReplayScope, Verdict};

backend_matrix!(
    a_replay_in_small_chunks_requeues_the_window_once_and_audits_each_chunk,
    a_replay_cut_off_midway_has_audited_every_chunk_it_requeued,
    removing_a_stream_counts_and_removes_in_one_transaction,
    a_dry_run_counts_without_requeueing_and_caps_the_listing,
    replaying_dead_letters_needs_no_window,
    list_retry_and_skip_act_on_one_event_and_say_why_not,
    deleting_with_force_gives_every_undelivered_event_up,
    a_relay_event_for_a_deleted_templated_stream_is_refused_not_left_behind,
);

fn forwarded(stream: &str, id: &str, ty: &str, ms: i64, ordered: bool) -> NewEvent {
    let mut e = event(stream, Some(id), ty, ms);
    e.channel = "webhook";
    e.subject_ids = vec![("user_id".into(), format!("user_{id}"))];
    e.forward = Some(ForwardBody {
        sealed: Sealed {
            key_id: None,
            bytes: format!("{{\"id\":\"{id}\"}}").into_bytes(),
        },
        order: if ordered {
            hushwatch_core::domain::forward::Order::Stream
        } else {
            hushwatch_core::domain::forward::Order::None
        },
        revocation: ty.ends_with(".deleted"),
        moves_clock: false,
        origin: None,
        templated: false,
    });
    e
}

fn policy() -> ForwardPolicy {
    ForwardPolicy {
        ladder: Ladder {
            retry: vec![TimeDelta::seconds(10); 3],
            give_up_after: TimeDelta::hours(1),
            alert_after: vec![100],
        },
        order: hushwatch_core::domain::forward::Order::None,
        critical_after: TimeDelta::hours(1),
        config_path: hushwatch_core::domain::forward::DEFAULT_CONFIG_PATH.into(),
        retain: TimeDelta::hours(2),
        dead_letter_retain: TimeDelta::days(1),
        notifiers: vec!["ops".into()],
        audit: true,
    }
}

/// Claims and settles every due row of `stream` with `attempt`.
async fn settle_all(store: &Store, clock: &ManualClock, attempt: ForwardAttempt) -> usize {
    let mut n = 0;
    loop {
        let (claims, _) = store
            .claim_forwards(
                "r1".into(),
                clock.now(),
                TimeDelta::seconds(60),
                crate::forward::ClaimRoom::uniform(500),
            )
            .await
            .unwrap();
        if claims.is_empty() {
            return n;
        }
        n += claims.len();
        for claim in claims {
            store
                .settle_forward(ForwardSettle {
                    claim,
                    attempt: attempt.clone(),
                    at: clock.now(),
                    policy: policy(),
                })
                .await
                .unwrap();
        }
        if matches!(attempt, ForwardAttempt::Failed { .. }) {
            return n;
        }
    }
}

fn delivered() -> ForwardAttempt {
    ForwardAttempt::Delivered { status: 200 }
}

fn request(stream: &str, from: i64, to: i64, dry_run: bool, now: i64) -> ReplayRequest {
    ReplayRequest {
        stream: stream.into(),
        from: at(from),
        to: at(to),
        types: Vec::new(),
        dry_run,
        by: "ana".into(),
        now: at(now),
        audit: true,
        notifiers: vec!["ops".into()],
        config_path: "/etc/hushwatch/hushwatch.toml".into(),
    }
}

async fn in_chunks(
    store: &Store,
    r: ReplayRequest,
    scope: ReplayScope,
    rows: usize,
) -> (hushwatch_core::domain::forward::ReplayOutcome, usize) {
    let mut chunks = 0;
    let out = replay_in_chunks(r, scope, rows, |c: ReplayChunk| {
        chunks += 1;
        store.replay_forwards_chunk(c)
    })
    .await
    .unwrap();
    (out, chunks)
}

async fn head(store: &Store) -> i64 {
    store.audit_summary().await.unwrap().head_seq
}

fn action(stream: &str, now: i64, comment: Option<&str>) -> OperatorAction {
    OperatorAction {
        stream: stream.into(),
        by: "ana".into(),
        comment: comment.map(str::to_string),
        now: at(now),
        audit: true,
        notifiers: vec!["ops".into()],
        dead_letter_retain: TimeDelta::days(1),
        config_path: "/etc/hushwatch/hushwatch.toml".into(),
    }
}

async fn dead_letter_pages(store: &Store) -> Vec<AlertState> {
    store
        .pending_outbox()
        .await
        .unwrap()
        .rows
        .into_iter()
        .filter(|r| r.alert_kind.as_str() == "forward_dead_letter")
        .map(|r| r.state)
        .collect()
}

async fn a_replay_in_small_chunks_requeues_the_window_once_and_audits_each_chunk(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(1_000_100)));
    let store = db.open_with_clock(clock.clone()).await;
    // Seven delivered events, two of them sharing one instant (the keyset
    // must not lose or repeat rows that tie on received_at), one outside
    // the window, one still pending.
    let mut events: Vec<NewEvent> = [0, 1, 1, 2, 3, 4, 5]
        .iter()
        .enumerate()
        .map(|(i, ms)| {
            let ty = if i % 2 == 0 {
                "user.deleted"
            } else {
                "user.updated"
            };
            forwarded("clerk", &format!("d{i}"), ty, 1_000_000 + ms, false)
        })
        .collect();
    events.push(forwarded("clerk", "late", "user.deleted", 1_000_050, false));
    store.record_events(events).await.unwrap();
    assert_eq!(settle_all(&store, &clock, delivered()).await, 8);
    store
        .record_events(vec![forwarded(
            "clerk",
            "p",
            "user.deleted",
            1_000_006,
            false,
        )])
        .await
        .unwrap();

    let before = head(&store).await;
    let r = request("clerk", 1_000_000, 1_000_010, false, 1_000_200);
    // Chunks that re-queued rows and were not the last (that one audits
    // the total).
    let partial = std::cell::Cell::new(0_i64);
    let mut chunks = 0;
    let out = replay_in_chunks(r.clone(), ReplayScope::Window, 2, |c: ReplayChunk| {
        chunks += 1;
        let (store, partial) = (&store, &partial);
        async move {
            let step = store.replay_forwards_chunk(c).await?;
            if step.requeued > 0 && step.next.is_some() {
                partial.set(partial.get() + 1);
            }
            Ok::<_, crate::StoreError>(step)
        }
    })
    .await
    .unwrap();
    let audited = partial.get() + 1;
    assert_eq!((out.count, out.already_pending), (7, 1));
    assert!(chunks >= 4, "8 rows in chunks of 2: {chunks} chunks");
    let listed: Vec<&str> = out.items.iter().map(|i| i.delivery_id.as_str()).collect();
    assert_eq!(
        listed,
        ["d0", "d1", "d2", "d3", "d4", "d5", "d6"],
        "in arrival order, each once"
    );
    assert!(out.items.iter().all(|i| i.state == "delivered"));
    // Each chunk that re-queued rows is audited as it commits, the last
    // one with the total: more than one entry, none for a chunk that
    // re-queued nothing.
    assert_eq!(head(&store).await, before + audited, "{audited} entries");
    assert!(audited >= 4, "d0..d6 in chunks of two rows: {audited}");

    // Re-queued: all of them are due again, under their ids.
    clock.set(at(1_000_200));
    let (claims, _) = store
        .claim_forwards(
            "r1".into(),
            clock.now(),
            TimeDelta::seconds(60),
            crate::forward::ClaimRoom::uniform(1000),
        )
        .await
        .unwrap();
    let mut ids: Vec<String> = claims.iter().map(|c| c.delivery_id.clone()).collect();
    ids.sort();
    assert_eq!(ids, ["d0", "d1", "d2", "d3", "d4", "d5", "d6", "p"]);
    assert!(claims.iter().all(|c| c.attempts == 1));

    // Again, with the window's events pending: nothing is re-queued twice.
    let (again, _) = in_chunks(&store, r.clone(), ReplayScope::Window, 3).await;
    assert_eq!((again.count, again.already_pending), (0, 8));

    // A type filter: only that type is counted and re-queued.
    for claim in claims {
        store
            .settle_forward(ForwardSettle {
                claim,
                attempt: delivered(),
                at: clock.now(),
                policy: policy(),
            })
            .await
            .unwrap();
    }
    let mut typed = request("clerk", 1_000_000, 1_000_010, false, 1_000_300);
    typed.types = vec!["user.updated".into(), "user.suspended".into()];
    let (out, _) = in_chunks(&store, typed, ReplayScope::Window, 2).await;
    assert_eq!(out.count, 3);
    assert!(out.items.iter().all(|i| i.event_type == "user.updated"));
    // Through `Store` as the service uses it: one call, the same answer.
    let whole = store
        .replay_forwards(request("clerk", 1_000_000, 1_000_010, true, 1_000_300))
        .await
        .unwrap();
    assert_eq!((whole.count, whole.already_pending), (5, 3));
    store.close().await.unwrap();
}

async fn a_dry_run_counts_without_requeueing_and_caps_the_listing(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(2_000_000)));
    let store = db.open_with_clock(clock.clone()).await;
    let n = hushwatch_core::domain::forward::REPLAY_LISTED + 5;
    let events: Vec<NewEvent> = (0..n)
        .map(|i| {
            forwarded(
                "clerk",
                &format!("e{i}"),
                "user.deleted",
                1_000_000 + i as i64,
                false,
            )
        })
        .collect();
    store.record_events(events).await.unwrap();
    assert_eq!(settle_all(&store, &clock, delivered()).await, n);
    let before = head(&store).await;
    let r = request("clerk", 1_000_000, 2_000_000, true, 2_000_000);
    let (out, chunks) = in_chunks(&store, r, ReplayScope::Window, 400).await;
    assert_eq!(out.count, n as u64, "the exact count");
    assert_eq!(
        out.items.len(),
        hushwatch_core::domain::forward::REPLAY_LISTED,
        "the listing is capped"
    );
    assert!(chunks >= 3);
    assert_eq!(head(&store).await, before, "a dry run is not audited");
    let (claims, _) = store
        .claim_forwards(
            "r1".into(),
            clock.now(),
            TimeDelta::seconds(60),
            crate::forward::ClaimRoom::uniform(10),
        )
        .await
        .unwrap();
    assert!(claims.is_empty(), "a dry run re-queues nothing");
    // The first chunk alone lists only what it looked at.
    let first = store
        .replay_forwards_chunk(ReplayChunk {
            request: request("clerk", 1_000_000, 2_000_000, true, 2_000_000),
            scope: ReplayScope::Window,
            after: first_cursor(1_000_000),
            rows: 10,
            list: 1000,
            requeued_before: 0,
        })
        .await
        .unwrap();
    assert_eq!((first.requeued, first.items.len()), (10, 10));
    assert_eq!(first.next, Some((1_000_009, first.next.unwrap().1)));
    store.close().await.unwrap();
}

async fn replaying_dead_letters_needs_no_window(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(1_000_000)));
    let store = db.open_with_clock(clock.clone()).await;
    store
        .record_events(vec![
            forwarded("clerk", "a", "user.deleted", 1_000_000, false),
            forwarded("clerk", "b", "user.deleted", 1_000_001, false),
            forwarded("clerk", "c", "user.updated", 1_000_002, false),
            forwarded("other", "o", "user.deleted", 1_000_003, false),
        ])
        .await
        .unwrap();
    for id in ["a", "b", "o"] {
        assert_eq!(
            store
                .skip_forward(
                    action(
                        if id == "o" { "other" } else { "clerk" },
                        1_000_010,
                        Some("test")
                    ),
                    id.into()
                )
                .await
                .unwrap(),
            Verdict::Go
        );
    }
    assert_eq!(
        dead_letter_pages(&store).await,
        [AlertState::Firing, AlertState::Firing]
    );
    let before = head(&store).await;
    let r = request("clerk", 1_000_020, 1_000_020, false, 1_000_020);
    let (out, chunks) = in_chunks(&store, r, ReplayScope::DeadLetters, 1).await;
    assert_eq!(out.count, 2, "only clerk's dead letters");
    assert!(chunks >= 2);
    assert_eq!(
        head(&store).await,
        before + 3,
        "each one-row chunk that re-queued a dead letter, then the total"
    );
    let status = store.forward_status().await.unwrap();
    let clerk = status.iter().find(|s| s.stream == "clerk").unwrap();
    assert_eq!((clerk.dead_letters, clerk.pending), (0, 3));
    let other = status.iter().find(|s| s.stream == "other").unwrap();
    assert_eq!(other.dead_letters, 1, "another stream's dead letters stay");
    assert_eq!(
        dead_letter_pages(&store).await.last(),
        Some(&AlertState::Ok),
        "no dead letters left: the alert resolves"
    );
    store.close().await.unwrap();
}

async fn list_retry_and_skip_act_on_one_event_and_say_why_not(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(1_000_000)));
    let store = db.open_with_clock(clock.clone()).await;
    store
        .record_events(vec![
            forwarded("clerk", "a", "user.deleted", 1_000_000, true),
            forwarded("clerk", "b", "user.deleted", 1_000_001, true),
            forwarded("clerk", "c", "user.updated", 1_000_002, true),
        ])
        .await
        .unwrap();
    // The head fails: it and everything behind it wait 10 s.
    let failed = ForwardAttempt::Failed {
        error: "answered HTTP 400".into(),
        status: Some(400),
    };
    assert_eq!(settle_all(&store, &clock, failed).await, 1);
    let page = store.list_forwards("clerk".into(), None, 2).await.unwrap();
    assert_eq!(page.total, 3, "the count of every open row");
    assert_eq!(page.rows.len(), 2, "the page is capped");
    let a = &page.rows[0];
    assert_eq!(
        (a.delivery_id.as_str(), a.state.as_str(), a.attempts),
        ("a", "pending", 1)
    );
    assert_eq!(a.last_error.as_deref(), Some("answered HTTP 400"));
    assert_eq!(a.last_status, Some(400));
    assert_eq!(a.next_attempt_at, Some(at(1_000_000 + 10_000)));
    assert_eq!(a.subject.as_deref(), Some("user_a"));
    assert!(store
        .list_forwards("clerk".into(), Some("dead".into()), 10)
        .await
        .unwrap()
        .rows
        .is_empty());

    // Retry: due now, audited.
    let before = head(&store).await;
    let retried = store
        .retry_forwards(action("clerk", 1_000_001, None), Some("a".into()))
        .await
        .unwrap();
    assert_eq!(
        retried,
        RetryOutcome::Retried {
            pending: 1,
            held: 0
        }
    );
    assert_eq!(head(&store).await, before + 1);
    let (claims, _) = store
        .claim_forwards(
            "r1".into(),
            at(1_000_001),
            TimeDelta::seconds(60),
            crate::forward::ClaimRoom::uniform(10),
        )
        .await
        .unwrap();
    assert_eq!(claims.len(), 1, "the head is due at once");
    assert_eq!(claims[0].delivery_id, "a");
    assert_eq!(
        store
            .retry_forwards(action("clerk", 1_000_001, None), Some("nope".into()))
            .await
            .unwrap(),
        RetryOutcome::Refused(Verdict::Unknown)
    );
    assert_eq!(
        store
            .retry_forwards(action("clerk", 1_000_001, None), None)
            .await
            .unwrap(),
        RetryOutcome::Retried {
            pending: 3,
            held: 0
        }
    );

    // Skip the head (in flight: its claim is fenced), so b goes on.
    let before = head(&store).await;
    assert_eq!(
        store
            .skip_forward(action("clerk", 1_000_002, Some("poison event")), "a".into())
            .await
            .unwrap(),
        Verdict::Go
    );
    assert_eq!(head(&store).await, before + 1, "audited");
    let late = store
        .settle_forward(ForwardSettle {
            claim: claims[0].clone(),
            attempt: delivered(),
            at: at(1_000_003),
            policy: policy(),
        })
        .await
        .unwrap();
    assert!(
        !late.settled,
        "the skipped event's attempt in flight settles nothing"
    );
    let (claims, _) = store
        .claim_forwards(
            "r1".into(),
            at(1_000_003),
            TimeDelta::seconds(60),
            crate::forward::ClaimRoom::uniform(10),
        )
        .await
        .unwrap();
    assert_eq!(claims[0].delivery_id, "b", "what waited behind it goes on");
    assert_eq!(dead_letter_pages(&store).await, [AlertState::Firing]);
    let dead = store
        .list_forwards("clerk".into(), Some("dead".into()), 10)
        .await
        .unwrap();
    assert_eq!(dead.total, 1);
    let error = dead.rows[0].last_error.clone().unwrap();
    assert!(
        error.contains("skipped by ana") && error.contains("poison event"),
        "{error}"
    );
    assert_eq!(dead.rows[0].next_attempt_at, None);

    assert_eq!(
        store
            .skip_forward(action("clerk", 1_000_004, Some("x")), "a".into())
            .await
            .unwrap(),
        Verdict::Dead
    );
    assert_eq!(
        store
            .skip_forward(action("clerk", 1_000_004, Some("x")), "zz".into())
            .await
            .unwrap(),
        Verdict::Unknown
    );
    store
        .settle_forward(ForwardSettle {
            claim: claims[0].clone(),
            attempt: delivered(),
            at: at(1_000_004),
            policy: policy(),
        })
        .await
        .unwrap();
    let before = head(&store).await;
    assert_eq!(
        store
            .skip_forward(action("clerk", 1_000_005, Some("x")), "b".into())
            .await
            .unwrap(),
        Verdict::Delivered
    );
    assert_eq!(head(&store).await, before, "a refusal changes nothing");
    store.close().await.unwrap();
}

async fn deleting_with_force_gives_every_undelivered_event_up(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(1_000_000)));
    let store = db.open_with_clock(clock.clone()).await;
    let events: Vec<NewEvent> = (0..5)
        .map(|i| {
            forwarded(
                "acme",
                &format!("e{i}"),
                "user.deleted",
                1_000_000 + i,
                true,
            )
        })
        .collect();
    store.record_events(events).await.unwrap();
    assert_eq!(store.undelivered_forwards("acme".into()).await.unwrap(), 5);
    assert_eq!(store.undelivered_forwards("other".into()).await.unwrap(), 0);
    let before = head(&store).await;
    let mut total = 0;
    loop {
        let n = store
            .give_up_forwards(action("acme", 1_000_010, None), 2)
            .await
            .unwrap();
        if n == 0 {
            break;
        }
        assert!(n <= 2, "at most the limit per call");
        total += n;
    }
    assert_eq!(total, 5);
    assert_eq!(store.undelivered_forwards("acme".into()).await.unwrap(), 0);
    assert_eq!(
        head(&store).await,
        before + 3,
        "each call that gave events up is audited"
    );
    assert_eq!(
        dead_letter_pages(&store).await,
        [AlertState::Firing],
        "paged once"
    );
    store.close().await.unwrap();
}

/// A relay event of a templated stream is stored while the stream stands
/// and refused (the sender retries) once a `DELETE` removed it, so no
/// row waits under a stream that is gone.
async fn a_relay_event_for_a_deleted_templated_stream_is_refused_not_left_behind(db: TestDb) {
    use super::super::forward_admin::StreamRemoval;
    let clock = Arc::new(ManualClock::new(at(1_000_000)));
    let store = db.open_with_clock(clock.clone()).await;
    let templated = |id: &str| {
        let mut e = forwarded("tenant-a", id, "user.deleted", 1_000_000, false);
        e.forward.as_mut().unwrap().templated = true;
        e
    };
    store
        .add_templated_stream("tenant-a".into(), at(1_000_000), 10)
        .await
        .unwrap();
    store.record_events(vec![templated("t1")]).await.unwrap();
    assert_eq!(
        store
            .remove_templated_stream_settled(action("tenant-a", 1_000_010, None), false)
            .await
            .unwrap(),
        StreamRemoval::Undelivered(1)
    );
    store
        .remove_templated_stream_settled(action("tenant-a", 1_000_010, None), true)
        .await
        .unwrap();
    let refused = store.record_events(vec![templated("t2")]).await;
    assert!(
        matches!(refused, Err(crate::StoreError::Gone(_))),
        "refused, as gone rather than as a storage fault: {refused:?}"
    );
    assert_eq!(
        store.undelivered_forwards("tenant-a".into()).await.unwrap(),
        0
    );
    store
        .add_templated_stream("tenant-a".into(), at(1_000_020), 10)
        .await
        .unwrap();
    store.record_events(vec![templated("t2")]).await.unwrap();
    assert_eq!(
        store.undelivered_forwards("tenant-a".into()).await.unwrap(),
        1
    );
    store.close().await.unwrap();
}

/// A replay that stops after its second chunk (a crash, the store
/// timeout): the two chunks it committed re-queued four events, and the
/// audit log has an entry for each of them.
async fn a_replay_cut_off_midway_has_audited_every_chunk_it_requeued(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(1_000_100)));
    let store = db.open_with_clock(clock.clone()).await;
    let events: Vec<NewEvent> = (0..6)
        .map(|i| {
            forwarded(
                "clerk",
                &format!("c{i}"),
                "user.deleted",
                1_000_000 + i,
                false,
            )
        })
        .collect();
    store.record_events(events).await.unwrap();
    assert_eq!(settle_all(&store, &clock, delivered()).await, 6);
    let before = head(&store).await;
    let mut chunks = 0;
    let cut: Result<_, &str> = replay_in_chunks(
        request("clerk", 1_000_000, 1_000_010, false, 1_000_200),
        ReplayScope::Window,
        2,
        |c: ReplayChunk| {
            chunks += 1;
            let store = &store;
            let n = chunks;
            async move {
                if n > 2 {
                    return Err("cut off");
                }
                Ok(store.replay_forwards_chunk(c).await.unwrap())
            }
        },
    )
    .await;
    assert_eq!(cut.err(), Some("cut off"));
    clock.set(at(1_000_200));
    let (claims, _) = store
        .claim_forwards(
            "r1".into(),
            clock.now(),
            TimeDelta::seconds(60),
            crate::forward::ClaimRoom::uniform(1000),
        )
        .await
        .unwrap();
    assert_eq!(claims.len(), 4, "two chunks of two re-queued");
    assert_eq!(
        head(&store).await,
        before + 2,
        "each committed chunk is in the audit log"
    );
    store.close().await.unwrap();
}

/// `DELETE` of a templated relaying stream decides on the count of the
/// transaction that removes it: refused while events are undelivered,
/// with force they become dead letters together with the removal.
async fn removing_a_stream_counts_and_removes_in_one_transaction(db: TestDb) {
    use super::super::forward_admin::StreamRemoval;
    let clock = Arc::new(ManualClock::new(at(1_000_000)));
    let store = db.open_with_clock(clock.clone()).await;
    store
        .add_templated_stream("org:a".into(), at(1_000_000), 10)
        .await
        .unwrap();
    store
        .record_events(vec![forwarded(
            "org:a",
            "o1",
            "user.deleted",
            1_000_001,
            true,
        )])
        .await
        .unwrap();
    let remove =
        |force| store.remove_templated_stream_settled(action("org:a", 1_000_010, None), force);
    assert_eq!(remove(false).await.unwrap(), StreamRemoval::Undelivered(1));
    assert_eq!(
        store.templated_streams().await.unwrap(),
        ["org:a".to_string()],
        "refused: the stream stays"
    );
    let before = head(&store).await;
    assert_eq!(
        remove(true).await.unwrap(),
        StreamRemoval::Removed { gave_up: 1 }
    );
    assert!(store.templated_streams().await.unwrap().is_empty());
    assert_eq!(store.undelivered_forwards("org:a".into()).await.unwrap(), 0);
    assert_eq!(head(&store).await, before + 1, "the give-up is audited");
    assert_eq!(dead_letter_pages(&store).await, [AlertState::Firing]);
    assert_eq!(remove(true).await.unwrap(), StreamRemoval::NotFound);
    store.close().await.unwrap();
}
