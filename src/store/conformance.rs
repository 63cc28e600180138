//! The conformance suite: every behaviour a storage backend must have,
//! written once and run against every backend (a test matrix, as River's
//! `riverdrivertest` runs one suite against each `riverdriver`).
//!
//! Each case is an `async fn(TestDb)`; `backend_matrix!` instantiates it
//! once per engine as `store::conformance::{sqlite,postgres}::CASE`. The
//! PostgreSQL instances need `HUSHWATCH_TEST_PG_URL` (see `testdb`): without
//! it they print a skip line, and with `HUSHWATCH_REQUIRE_PG=1` a missing
//! server fails them.

use std::sync::Arc;

use super::testdb::{at, event, names, on_channel, stream, transition, TestDb};
use super::*;

macro_rules! backend_matrix {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::TestDb::sqlite()).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let Some(db) = super::TestDb::postgres().await else { return };
                    super::$case(db).await;
                }
            )*
        }
    };
}

backend_matrix!(
    accepted_then_duplicate_per_stream,
    duplicates_inside_one_batch_count,
    events_without_delivery_id_are_never_duplicates,
    clock_never_moves_backwards,
    filtered_event_is_stored_but_leaves_clock_alone,
    unwatched_stream_starts_its_watch_at_first_event,
    watch_started_at_survives_rewatch_and_reopen,
    events_streams_and_outbox_survive_reopen,
    transitions_are_idempotent_and_fan_out_to_the_outbox,
    transition_for_unknown_stream_is_an_error,
    prune_seen_forgets_old_deliveries_only,
    old_event_rows_are_pruned_but_the_clock_stays,
    a_silence_resolve_row_says_where_the_silence_began_and_what_ended_it,
    delivery_ids_are_deduplicated_per_channel,
    concurrent_records_are_all_acknowledged_and_stored_once,
    a_fire_evaluated_before_a_newer_arrival_is_withdrawn,
    concurrent_fires_of_one_episode_record_one_transition,
    the_store_stamps_pages_with_its_clock,
    probe_succeeds_repeatedly,
    audit_chain_grows_by_one_entry_per_accepted_event,
    audit_checkpoint_and_prune_keep_the_head,
    templated_streams_are_bounded_and_restart_their_clock,
    reminders_are_queued_once_per_step_and_notifier,
    attempts_settle_rows_and_feed_the_summary,
    delivered_firing_pages_are_active_until_resolved,
    recent_arrivals_are_newest_first_and_capped,
);

async fn accepted_then_duplicate_per_stream(db: TestDb) {
    let store = db.open().await;
    let first = store.record_events(vec![event("a", Some("d1"), "login", 1_000)]);
    assert_eq!(first.await.unwrap(), vec![EventOutcome::Accepted]);
    let again = store.record_events(vec![event("a", Some("d1"), "login", 2_000)]);
    assert_eq!(again.await.unwrap(), vec![EventOutcome::Duplicate]);
    assert_eq!(store.event_count("a").await.unwrap(), 1);
    // A duplicate does not touch the clock either.
    assert_eq!(stream(&store, "a").await.last_arrival_at, Some(at(1_000)));

    let other = store.record_events(vec![event("b", Some("d1"), "login", 3_000)]);
    assert_eq!(other.await.unwrap(), vec![EventOutcome::Accepted]);
    assert_eq!(store.event_count("b").await.unwrap(), 1);
    store.close().await.unwrap();
}

async fn duplicates_inside_one_batch_count(db: TestDb) {
    let store = db.open().await;
    let batch = vec![
        event("a", Some("x"), "login", 1_000),
        event("a", Some("x"), "login", 1_001),
        event("a", Some("y"), "login", 1_002),
    ];
    let outcomes = store.record_events(batch).await.unwrap();
    use EventOutcome::{Accepted, Duplicate};
    assert_eq!(outcomes, vec![Accepted, Duplicate, Accepted]);
    assert_eq!(store.event_count("a").await.unwrap(), 2);
    store.close().await.unwrap();
}

async fn events_without_delivery_id_are_never_duplicates(db: TestDb) {
    let store = db.open().await;
    let same = event("a", None, "login", 1_000);
    let outcomes = store.record_events(vec![same.clone(), same.clone()]);
    assert_eq!(outcomes.await.unwrap(), vec![EventOutcome::Accepted; 2]);
    let later = store.record_events(vec![same]).await.unwrap();
    assert_eq!(later, vec![EventOutcome::Accepted]);
    assert_eq!(store.event_count("a").await.unwrap(), 3);
    store.close().await.unwrap();
}

async fn clock_never_moves_backwards(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let mut newer = event("a", Some("n"), "newer", 2_000);
    newer.event_time = Some(at(1_500));
    let mut older = event("a", Some("o"), "older", 1_000);
    older.event_time = Some(at(1_800));
    store.record_events(vec![newer]).await.unwrap();
    store.record_events(vec![older]).await.unwrap();

    let row = stream(&store, "a").await;
    assert_eq!(row.last_arrival_at, Some(at(2_000)));
    assert_eq!(row.last_event_type.as_deref(), Some("newer"));
    assert_eq!(row.last_event_id.as_deref(), Some("n"));
    assert_eq!(row.newest_event_at, Some(at(1_800)));
    assert_eq!(store.event_count("a").await.unwrap(), 2);
    store.close().await.unwrap();
}

async fn filtered_event_is_stored_but_leaves_clock_alone(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let mut filtered = event("a", Some("f"), "noise", 5_000);
    filtered.feeds_clock = false;
    filtered.event_time = Some(at(4_000));
    let outcomes = store.record_events(vec![filtered]).await.unwrap();
    assert_eq!(outcomes, vec![EventOutcome::Accepted]);
    assert_eq!(store.event_count("a").await.unwrap(), 1);

    let row = stream(&store, "a").await;
    assert_eq!(row.last_arrival_at, None);
    assert_eq!(row.newest_event_at, None);
    assert_eq!(row.last_event_type, None);
    assert_eq!(row.last_event_id, None);
    store.close().await.unwrap();
}

async fn unwatched_stream_starts_its_watch_at_first_event(db: TestDb) {
    let store = db.open().await;
    store
        .record_events(vec![event("new", None, "login", 7_000)])
        .await
        .unwrap();
    let row = stream(&store, "new").await;
    assert_eq!(row.watch_started_at, at(7_000));
    assert_eq!(row.alert_state, AlertState::Ok);
    store.close().await.unwrap();
}

async fn watch_started_at_survives_rewatch_and_reopen(db: TestDb) {
    let store = db.open().await;
    let first = store.watch_streams(names(&["b", "a"]), at(1_000)).await;
    let first = first.unwrap();
    assert_eq!(first[0].name, "b");
    assert_eq!(first[1].name, "a");
    assert!(first.iter().all(|r| r.watch_started_at == at(1_000)));
    let again = store.watch_streams(names(&["a", "c"]), at(2_000)).await;
    let again = again.unwrap();
    assert_eq!(again[0].watch_started_at, at(1_000));
    assert_eq!(again[1].watch_started_at, at(2_000));
    let before = store.streams().await.unwrap();
    store.close().await.unwrap();

    let store = db.open().await;
    let reopened = store.watch_streams(names(&["a", "b", "c"]), at(9_000));
    let reopened = reopened.await.unwrap();
    assert_eq!(reopened, before);
    store.close().await.unwrap();
}

async fn events_streams_and_outbox_survive_reopen(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let mut e = event("a", Some("d1"), "login", 1_000);
    e.event_time = Some(at(900));
    store.record_events(vec![e.clone()]).await.unwrap();
    let firing = Transition {
        stream: "a".to_owned(),
        to: AlertState::Firing,
        at: at(5_000),
        reason: "quiet for 4s".to_owned(),
        notifiers: names(&["pager"]),
    };
    assert!(store.record_transition(firing).await.unwrap());
    let rows_before = store.streams().await.unwrap();
    let outbox_before = store.pending_outbox().await.unwrap();
    store.close().await.unwrap();

    let store = db.open().await;
    assert_eq!(store.event_count("a").await.unwrap(), 1);
    assert_eq!(store.streams().await.unwrap(), rows_before);
    assert_eq!(store.pending_outbox().await.unwrap(), outbox_before);
    assert_eq!(outbox_before.len(), 1);
    // Dedup memory is durable too: a redelivery after restart is caught.
    let again = store.record_events(vec![e]).await.unwrap();
    assert_eq!(again, vec![EventOutcome::Duplicate]);
    store.close().await.unwrap();
}

async fn transitions_are_idempotent_and_fan_out_to_the_outbox(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let to_ok = transition(AlertState::Ok, 500, &["slack"]);
    assert!(!store.record_transition(to_ok).await.unwrap());
    assert!(store.pending_outbox().await.unwrap().is_empty());

    let fire = transition(AlertState::Firing, 1_000, &["slack", "pager"]);
    assert!(store.record_transition(fire.clone()).await.unwrap());
    assert!(!store.record_transition(fire).await.unwrap());
    let pending = store.pending_outbox().await.unwrap();
    let notifiers: Vec<&str> = pending.iter().map(|r| r.notifier.as_str()).collect();
    assert_eq!(notifiers, ["slack", "pager"]);
    assert!(pending.iter().all(|r| r.state == AlertState::Firing));
    assert!(pending.iter().all(|r| r.at == at(1_000) && r.stream == "a"));
    let row = stream(&store, "a").await;
    assert_eq!(row.alert_state, AlertState::Firing);
    assert_eq!((row.firing_since, row.cleared_at), (Some(at(1_000)), None));

    let clear = transition(AlertState::Ok, 3_000, &["slack", "pager"]);
    assert!(store.record_transition(clear).await.unwrap());
    let row = stream(&store, "a").await;
    assert_eq!(row.alert_state, AlertState::Ok);
    assert_eq!(row.firing_since, Some(at(1_000)));
    assert_eq!(row.cleared_at, Some(at(3_000)));
    assert_eq!(store.pending_outbox().await.unwrap().len(), 4);

    let first_id = pending[0].id;
    store.mark_outbox_done(first_id, at(4_000)).await.unwrap();
    store.mark_outbox_done(first_id, at(4_001)).await.unwrap();
    let left = store.pending_outbox().await.unwrap();
    assert_eq!(left.len(), 3);
    assert!(left.iter().all(|r| r.id != first_id));
    store.close().await.unwrap();
}

async fn transition_for_unknown_stream_is_an_error(db: TestDb) {
    let store = db.open().await;
    let result = store
        .record_transition(transition(AlertState::Firing, 1, &["x"]))
        .await;
    assert!(matches!(result, Err(StoreError::Sql(_))), "{result:?}");
    assert!(store.pending_outbox().await.unwrap().is_empty());
    store.close().await.unwrap();
}

async fn prune_seen_forgets_old_deliveries_only(db: TestDb) {
    let store = db.open().await;
    let old = event("a", Some("old"), "login", 1_000);
    let new = event("a", Some("new"), "login", 9_000);
    store
        .record_events(vec![old.clone(), new.clone()])
        .await
        .unwrap();
    assert_eq!(store.prune_seen(at(5_000)).await.unwrap(), 1);
    let outcomes = store.record_events(vec![old, new]).await.unwrap();
    use EventOutcome::{Accepted, Duplicate};
    assert_eq!(outcomes, vec![Accepted, Duplicate]);
    store.close().await.unwrap();
}

async fn old_event_rows_are_pruned_but_the_clock_stays(db: TestDb) {
    let store = db.open().await;
    let unaudited = |id: &str, ms: i64| NewEvent {
        audit: false,
        ..event("s", Some(id), "user.created", ms)
    };
    store
        .record_events(vec![unaudited("a", 1_000), unaudited("b", 9_000)])
        .await
        .unwrap();
    assert_eq!(store.prune_events(at(5_000), 10).await.unwrap(), 1);
    assert_eq!(store.event_count("s").await.unwrap(), 1);
    assert_eq!(stream(&store, "s").await.last_arrival_at, Some(at(9_000)));
    store.close().await.unwrap();
}

async fn a_silence_resolve_row_says_where_the_silence_began_and_what_ended_it(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let fire = transition(AlertState::Firing, 3_600_000, &["pager"]);
    assert!(store.record_transition(fire).await.unwrap());
    store
        .record_events(vec![event("a", Some("e1"), "user.created", 4_000_000)])
        .await
        .unwrap();
    let resolve = transition(AlertState::Ok, 4_001_000, &["pager"]);
    assert!(store.record_transition(resolve).await.unwrap());
    let rows = store.pending_outbox().await.unwrap();
    let facts: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.state.clone(),
                r.alert_kind.as_str(),
                r.severity.as_str(),
                r.silent_since,
                r.resumed_at,
            )
        })
        .collect();
    assert_eq!(
        facts,
        [
            (AlertState::Firing, "silence", "critical", Some(at(0)), None),
            (
                AlertState::Ok,
                "silence",
                "critical",
                Some(at(0)),
                Some(at(4_000_000))
            ),
        ]
    );
    assert_eq!(rows[0].alert_id, rows[1].alert_id);
    store.close().await.unwrap();
}

async fn delivery_ids_are_deduplicated_per_channel(db: TestDb) {
    let store = db.open().await;
    let report = event("identity", Some("msg_X"), "user.updated", 1_000);
    let webhook = on_channel(
        event("identity", Some("msg_X"), "user.deleted", 2_000),
        "webhook",
    );
    // A report first does not make the signed webhook a duplicate ...
    let outcomes = store
        .record_events(vec![report.clone(), webhook.clone()])
        .await
        .unwrap();
    assert_eq!(
        outcomes,
        vec![EventOutcome::Accepted, EventOutcome::Accepted]
    );
    // ... and within each channel a repeat is still a duplicate.
    let again = store.record_events(vec![webhook, report]).await.unwrap();
    assert_eq!(
        again,
        vec![EventOutcome::Duplicate, EventOutcome::Duplicate]
    );
    // The other direction: a webhook id first never shadows a later report.
    let first = on_channel(
        event("identity", Some("msg_Y"), "user.deleted", 3_000),
        "webhook",
    );
    let later = event("identity", Some("msg_Y"), "user.updated", 4_000);
    let outcomes = store.record_events(vec![first, later]).await.unwrap();
    assert_eq!(
        outcomes,
        vec![EventOutcome::Accepted, EventOutcome::Accepted]
    );
    assert_eq!(store.event_count("identity").await.unwrap(), 4);
    store.close().await.unwrap();
}

async fn concurrent_records_are_all_acknowledged_and_stored_once(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    // 8 tasks each send the same 20 ids: every id is accepted exactly once
    // across all of them, whichever commits first.
    let tasks: Vec<_> = (0..8)
        .map(|task| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut accepted = 0;
                for i in 0..20 {
                    let e = event("a", Some(&format!("d{i}")), "login", 1_000 + task * 20 + i);
                    let out = store.record_events(vec![e]).await.expect("record");
                    accepted += usize::from(out == [EventOutcome::Accepted]);
                }
                accepted
            })
        })
        .collect();
    let mut accepted = 0;
    for task in tasks {
        accepted += task.await.unwrap();
    }
    assert_eq!(accepted, 20);
    assert_eq!(store.event_count("a").await.unwrap(), 20);
    assert_eq!(store.audit_summary().await.unwrap().head_seq, 20);
    store.close().await.unwrap();
}

async fn a_fire_evaluated_before_a_newer_arrival_is_withdrawn(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    store
        .record_events(vec![event("a", Some("e1"), "login", 1_000)])
        .await
        .unwrap();
    // Evaluated from the watch start (0), but an arrival at 1_000 committed.
    let fire = transition(AlertState::Firing, 5_000, &["pager"]);
    let outcome = store
        .record_transition_if_silent(fire.clone(), at(0))
        .await
        .unwrap();
    let TransitionOutcome::Stale(row) = outcome else {
        panic!("expected Stale, got {outcome:?}");
    };
    assert_eq!(row.last_arrival_at, Some(at(1_000)));
    assert!(store.pending_outbox().await.unwrap().is_empty());
    assert_eq!(stream(&store, "a").await.alert_state, AlertState::Ok);
    // Evaluated from the stored arrival, the same fire commits.
    let outcome = store
        .record_transition_if_silent(fire.clone(), at(1_000))
        .await
        .unwrap();
    assert_eq!(outcome, TransitionOutcome::Recorded);
    let again = store.record_transition_if_silent(fire, at(1_000)).await;
    assert_eq!(again.unwrap(), TransitionOutcome::Unchanged);
    assert_eq!(store.pending_outbox().await.unwrap().len(), 1);
    store.close().await.unwrap();
}

async fn concurrent_fires_of_one_episode_record_one_transition(db: TestDb) {
    // Two handles stand for two replicas (on SQLite: one process, two
    // callers); both evaluate the same silence at once.
    let store = db.open().await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let other = db.open_second(&store).await;
    let fires: Vec<_> = (0..6)
        .map(|i| {
            let s = if i % 2 == 0 {
                store.clone()
            } else {
                other.clone()
            };
            tokio::spawn(async move {
                let t = transition(AlertState::Firing, 5_000, &["pager", "mail"]);
                s.record_transition_if_silent(t, at(0)).await.unwrap()
            })
        })
        .collect();
    let mut recorded = 0;
    for f in fires {
        recorded += usize::from(f.await.unwrap() == TransitionOutcome::Recorded);
    }
    assert_eq!(recorded, 1);
    assert_eq!(store.pending_outbox().await.unwrap().len(), 2);
    let resolves: Vec<_> = (0..4)
        .map(|i| {
            let s = if i % 2 == 0 {
                store.clone()
            } else {
                other.clone()
            };
            tokio::spawn(async move {
                let t = transition(AlertState::Ok, 9_000, &["pager", "mail"]);
                s.record_transition_if_silent(t, at(0)).await.unwrap()
            })
        })
        .collect();
    let mut recorded = 0;
    for r in resolves {
        recorded += usize::from(r.await.unwrap() == TransitionOutcome::Recorded);
    }
    assert_eq!(recorded, 1);
    let pages = store.pending_outbox().await.unwrap();
    assert_eq!(pages.len(), 4);
    assert!(pages.iter().all(|p| p.alert_id == pages[0].alert_id));
    other.close().await.unwrap();
    store.close().await.unwrap();
}

/// The store stamps rows from the clock it was given, not the wall clock:
/// with a manual clock set in 2031, a page queued now says 2031.
async fn the_store_stamps_pages_with_its_clock(db: TestDb) {
    let then = at(1_924_992_000_000); // 2031-01-01T00:00:00Z
    let clock = Arc::new(crate::clock::ManualClock::new(then));
    let store = db.open_with_clock(clock.clone()).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    assert!(store
        .record_transition(transition(AlertState::Firing, 5_000, &["pager"]))
        .await
        .unwrap());
    let rows = store.pending_outbox().await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].created_at, then);
    store.close().await.unwrap();
}

async fn probe_succeeds_repeatedly(db: TestDb) {
    let store = db.open().await;
    store.probe().await.unwrap();
    store.probe().await.unwrap();
    store.close().await.unwrap();
}

async fn audit_chain_grows_by_one_entry_per_accepted_event(db: TestDb) {
    let store = db.open().await;
    let empty = store.audit_summary().await.unwrap();
    assert_eq!((empty.head_seq, empty.last_checkpoint), (0, None));
    store
        .record_events(vec![
            event("s", Some("a"), "user.created", 1_000),
            event("s", Some("a"), "user.created", 1_001),
            event("s", Some("b"), "user.deleted", 1_002),
        ])
        .await
        .unwrap();
    assert_eq!(
        store.prune_events(at(5_000), 10).await.unwrap(),
        0,
        "no plain events row to prune"
    );
    assert_eq!(store.event_count("s").await.unwrap(), 2);
    let summary = store.audit_summary().await.unwrap();
    assert_eq!(summary.head_seq, 2, "the duplicate is not chained");
    assert_eq!(summary.head_hash.len(), 64);
    store.close().await.unwrap();
}

async fn audit_checkpoint_and_prune_keep_the_head(db: TestDb) {
    let store = db.open().await;
    assert_eq!(store.audit_checkpoint(at(5), None).await.unwrap(), None);
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    store
        .record_events(vec![event("a", Some("e1"), "x", 10)])
        .await
        .unwrap();
    let c = store.audit_checkpoint(at(20), None).await.unwrap().unwrap();
    assert_eq!((c.seq, c.created_at_ms, c.mac), (1, 20, None));
    store
        .record_events(vec![event("a", Some("e2"), "x", 30)])
        .await
        .unwrap();
    let signed = store
        .audit_checkpoint(at(40), Some(b"key".to_vec()))
        .await
        .unwrap()
        .unwrap();
    assert!(signed.mac.is_some());
    let head = store.audit_summary().await.unwrap();
    assert_eq!(head.head_seq, 2);
    let last = head.last_checkpoint.unwrap();
    assert_eq!((last.seq, last.at, last.signed), (2, at(40), true));
    // Pruning everything keeps the head as the anchor: the next entry
    // continues the sequence.
    assert_eq!(store.audit_prune(at(100)).await.unwrap(), 2);
    let pruned = store.audit_summary().await.unwrap();
    assert_eq!((pruned.head_seq, &pruned.head_hash), (2, &head.head_hash));
    store
        .record_events(vec![event("a", Some("e3"), "x", 200)])
        .await
        .unwrap();
    assert_eq!(store.audit_summary().await.unwrap().head_seq, 3);
    store.close().await.unwrap();
}

async fn templated_streams_are_bounded_and_restart_their_clock(db: TestDb) {
    let store = db.open().await;
    let made = store
        .add_templated_stream("org:a".into(), at(1_000), 2)
        .await
        .unwrap();
    assert!(matches!(made, TemplatedOutcome::Created(ref r) if r.watch_started_at == at(1_000)));
    let again = store
        .add_templated_stream("org:a".into(), at(2_000), 2)
        .await
        .unwrap();
    assert!(matches!(again, TemplatedOutcome::Exists(ref r) if r.watch_started_at == at(1_000)));
    store
        .add_templated_stream("org:b".into(), at(2_000), 2)
        .await
        .unwrap();
    let full = store
        .add_templated_stream("org:c".into(), at(2_000), 2)
        .await
        .unwrap();
    assert!(matches!(full, TemplatedOutcome::Full));
    assert_eq!(
        store.templated_streams().await.unwrap(),
        names(&["org:a", "org:b"])
    );
    store
        .record_events(vec![event("org:a", Some("x"), "t", 3_000)])
        .await
        .unwrap();
    assert!(store.remove_templated_stream("org:a".into()).await.unwrap());
    assert!(!store.remove_templated_stream("org:a".into()).await.unwrap());
    let fresh = store
        .add_templated_stream("org:a".into(), at(9_000), 2)
        .await
        .unwrap();
    let TemplatedOutcome::Created(row) = fresh else {
        panic!("created again");
    };
    assert_eq!(
        (row.watch_started_at, row.last_arrival_at),
        (at(9_000), None)
    );
    store.close().await.unwrap();
}

async fn reminders_are_queued_once_per_step_and_notifier(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let remind = || {
        let store = store.clone();
        async move {
            store
                .enqueue_extra(
                    "a".into(),
                    PageKind::Reminder,
                    1,
                    names(&["p", "q"]),
                    at(9_000),
                )
                .await
        }
    };
    assert_eq!(remind().await.unwrap(), 0, "not firing: nothing");
    let fire = transition(AlertState::Firing, 5_000, &["p"]);
    assert!(store.record_transition(fire).await.unwrap());
    assert_eq!(remind().await.unwrap(), 2);
    assert_eq!(remind().await.unwrap(), 0, "once per step");
    let step2 = store
        .enqueue_extra(
            "a".into(),
            PageKind::Escalation,
            2,
            names(&["boss"]),
            at(9_500),
        )
        .await
        .unwrap();
    assert_eq!(step2, 1);
    let rows = store.pending_outbox().await.unwrap();
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| r.alert_id == rows[0].alert_id));
    assert_eq!(rows[1].kind, PageKind::Reminder);
    assert_eq!(rows[1].reason, rows[0].reason);
    // Whoever an escalation paged hears the resolve too.
    let resolve = transition(AlertState::Ok, 10_000, &["p"]);
    assert!(store.record_transition(resolve).await.unwrap());
    let resolved: Vec<String> = store
        .pending_outbox()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.state == AlertState::Ok)
        .map(|r| r.notifier)
        .collect();
    assert_eq!(resolved, names(&["p", "boss"]));
    store.close().await.unwrap();
}

async fn attempts_settle_rows_and_feed_the_summary(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let fire = transition(AlertState::Firing, 5_000, &["p", "q", "r"]);
    assert!(store.record_transition(fire).await.unwrap());
    let rows = store.pending_outbox().await.unwrap();
    let (p, q, r) = (rows[0].id, rows[1].id, rows[2].id);
    let keys: std::collections::BTreeSet<_> = rows.iter().map(|r| r.page_key.clone()).collect();
    assert_eq!(keys.len(), 3, "one key per page");
    let retry = Attempt::Retry {
        at: at(6_000),
        next: at(7_000),
        error: "503".into(),
    };
    store.record_attempt(q, retry).await.unwrap();
    store
        .record_attempt(p, Attempt::Delivered { at: at(6_500) })
        .await
        .unwrap();
    let failed = Attempt::Failed {
        at: at(8_000),
        error: "400".into(),
    };
    store.record_attempt(r, failed).await.unwrap();
    // A settled row ignores later attempts.
    store
        .record_attempt(p, Attempt::Delivered { at: at(9_999) })
        .await
        .unwrap();
    let pending = store.pending_outbox().await.unwrap();
    assert_eq!(pending.len(), 1);
    let q_row = &pending[0];
    assert_eq!((q_row.id, q_row.attempts), (q, 1));
    assert_eq!(q_row.first_attempt_at, Some(at(6_000)));
    assert_eq!(q_row.next_attempt_at, Some(at(7_000)));
    assert_eq!(q_row.last_error.as_deref(), Some("503"));
    assert_eq!(q_row.page_key, rows[1].page_key, "same key on retry");
    let summary = store.outbox_summary().await.unwrap();
    let counts = |n: &str| summary.by_notifier[n].clone();
    assert_eq!(counts("p").delivered, 1);
    assert_eq!(counts("q").pending, 1);
    assert_eq!(counts("r").failed, 1);
    assert_eq!(summary.recent_failures.len(), 1);
    assert_eq!(
        summary.recent_failures[0].last_error.as_deref(),
        Some("400")
    );
    store.close().await.unwrap();
}

async fn delivered_firing_pages_are_active_until_resolved(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let fire = transition(AlertState::Firing, 5_000, &["am"]);
    assert!(store.record_transition(fire).await.unwrap());
    assert!(store.active_firing_pages().await.unwrap().is_empty());
    let id = store.pending_outbox().await.unwrap()[0].id;
    store.mark_outbox_done(id, at(5_100)).await.unwrap();
    let active = store.active_firing_pages().await.unwrap();
    assert_eq!(active.iter().map(|r| r.id).collect::<Vec<_>>(), [id]);
    let resolve = transition(AlertState::Ok, 6_000, &["am"]);
    assert!(store.record_transition(resolve).await.unwrap());
    assert!(store.active_firing_pages().await.unwrap().is_empty());
    store.close().await.unwrap();
}

async fn recent_arrivals_are_newest_first_and_capped(db: TestDb) {
    let store = db.open().await;
    let streams = names(&["a", "b"]);
    store.watch_streams(streams.clone(), at(0)).await.unwrap();
    let e = |stream: &str, id: &str, ms: i64, audit: bool, channel: &'static str| NewEvent {
        audit,
        event_type: format!("type.{id}"),
        ..on_channel(event(stream, Some(id), "x", ms), channel)
    };
    let events = vec![
        e("a", "old", 50_000, true, "report"),
        e("a", "e1", 100_000, false, "report"),
        e("a", "e2", 200_000, true, "webhook"),
        e("a", "e3", 300_000, true, "report"),
        e("a", "e4", 400_000, false, "report"),
        e("b", "svix", 250_000, true, "svix"),
        e("b", "b1", 150_000, true, "report"),
    ];
    store.record_events(events).await.unwrap();
    let got = store
        .recent_arrivals(streams, at(100_000), 3)
        .await
        .unwrap();
    let times =
        |i: usize| -> Vec<i64> { got[i].1.iter().map(|a| a.at.timestamp_millis()).collect() };
    assert_eq!(got[0].0, "a");
    assert_eq!(times(0), [400_000, 300_000, 200_000]);
    assert_eq!(got[0].1[0].event_type, "type.e4");
    assert_eq!(times(1), [150_000]);
    store.close().await.unwrap();
}
