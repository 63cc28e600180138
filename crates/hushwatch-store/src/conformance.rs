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
    a_delivery_answers_the_rows_it_moved_as_committed,
    a_svix_acknowledgement_is_audited_when_it_acknowledged,
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
    claims_take_the_oldest_page_of_each_queue_once,
    an_expired_claim_is_retried_under_the_same_key_and_the_old_holder_is_fenced,
    a_claimed_retry_waits_for_its_backoff,
    leader_lease_has_terms_and_a_superseded_holder_cannot_renew,
    heartbeats_list_the_replicas_seen_recently,
    the_change_feed_reports_arrivals_committed_through_another_handle,
    a_silence_holds_the_firing_page_until_it_ends,
    the_resolve_of_a_held_firing_page_is_dropped,
    an_acknowledged_episode_gets_no_reminders,
    maintenance_windows_are_stored_once_and_end_when_removed,
    silences_past_the_cap_are_refused,
    only_the_most_recently_ended_silences_are_kept,
    fallback_pages_share_one_alert_per_notifier_with_their_own_keys,
    the_ladder_count_is_shared_by_handles_and_each_step_is_queued_once,
    the_ladder_recovers_once_and_its_count_survives_reopen,
    a_fenced_attempt_counts_nothing_on_the_ladder,
);

/// Issue #19: the fallback ladder's pages about notifier `hook`, sent to
/// `backup`: each step and the recovery is its own outbox row (own page
/// key), all under one alert id, firing then resolved.
async fn fallback_pages_share_one_alert_per_notifier_with_their_own_keys(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    for (state, ms) in [
        (AlertState::Firing, 1_000),
        (AlertState::Firing, 2_000),
        (AlertState::Ok, 3_000),
    ] {
        let mut t = transition(state, ms, &["backup"]);
        t.reason = format!("step at {ms}");
        store.queue_fallback_pages(t, "hook".into()).await.unwrap();
    }
    let rows = store.pending_outbox().await.unwrap().rows;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.iter().all(|r| r.notifier == "backup"
        && r.alert_kind.as_str() == "hushwatch_fallback"
        && r.alert_id == rows[0].alert_id
        && r.endpoint_id.as_deref() == Some("hook")));
    let keys: std::collections::BTreeSet<_> = rows.iter().map(|r| &r.page_key).collect();
    assert_eq!(keys.len(), 3, "own key per page");
    assert_eq!(rows[2].state, AlertState::Ok);
    assert_eq!(rows[1].reason, "step at 2000");
}

/// Issue #19: a ladder `hook` → `backup` at 1, 5 and 20 failures.
fn ladder_update(error: Option<&str>, ms: i64) -> ladder::LadderUpdate {
    ladder::LadderUpdate {
        notifier: "hook".into(),
        error: error.map(str::to_owned),
        rule: Some(ladder::LadderRule {
            steps: vec![1, 5, 20],
            notify: names(&["backup"]),
        }),
        stream: "a".into(),
        page_created_at: at(1_000),
        at: at(ms),
    }
}

fn retry(ms: i64) -> Attempt {
    Attempt::Retry {
        at: at(ms),
        next: at(ms + 1),
        error: "connection refused".into(),
    }
}

/// The pending fallback pages (to `backup`), oldest first.
async fn fallback_pages(store: &Store) -> Vec<OutboxRow> {
    let rows = store.pending_outbox().await.unwrap().rows;
    rows.into_iter()
        .filter(|r| r.alert_kind.as_str() == "hushwatch_fallback")
        .collect()
}

/// Issue #19: two handles (two replicas) record 25 failed attempts to
/// `hook` at the same time; the count is the deployment's (25, none lost)
/// and each of the steps 1, 5, 20 is queued exactly once.
async fn the_ladder_count_is_shared_by_handles_and_each_step_is_queued_once(db: TestDb) {
    let store = db.open().await;
    let other = db.open_second(&store).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let fire = transition(AlertState::Firing, 1_000, &["hook"]);
    assert!(store.record_transition(fire).await.unwrap());
    let page = store.pending_outbox().await.unwrap().rows.remove(0);
    let mut attempts = tokio::task::JoinSet::new();
    for i in 0..25i64 {
        let handle = if i % 2 == 0 { &store } else { &other }.clone();
        let u = ladder_update(Some("connection refused"), 2_000 + i);
        attempts.spawn(async move {
            handle
                .settle_counted(page.id, None, retry(2_000 + i), u)
                .await
        });
    }
    let outcomes: Vec<_> = attempts
        .join_all()
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(outcomes.iter().all(|o| o.settled));
    let mut counts: Vec<i64> = outcomes.iter().map(|o| o.failures).collect();
    counts.sort_unstable();
    assert_eq!(counts, (1..=25).collect::<Vec<_>>(), "no attempt lost");
    let queued: Vec<&str> = outcomes
        .iter()
        .filter_map(|o| o.queued.as_deref())
        .collect();
    assert_eq!(queued.len(), 3, "{queued:?}");
    let pages = fallback_pages(&store).await;
    assert_eq!(pages.len(), 3, "{pages:?}");
    for (page, n) in pages.iter().zip([1, 5, 20]) {
        assert_eq!(page.notifier, "backup");
        assert_eq!(page.state, AlertState::Firing);
        assert!(
            page.reason.starts_with(
                "hushwatch cannot deliver to hook: connection refused, 1 pages waiting since "
            ) && page
                .reason
                .ends_with(&format!("({n} failed attempts in a row)")),
            "{}",
            page.reason
        );
    }
    assert_eq!(
        other.notifier_failures().await.unwrap(),
        vec![("hook".to_owned(), 25)]
    );
    other.close().await.unwrap();
    store.close().await.unwrap();
}

/// Issue #19: a delivery after a paged step queues one recovery page and
/// resets the count; a second delivery queues nothing; a new run of
/// failures pages step 1 again. The count is in the store, not in the
/// process: it survives closing and reopening.
async fn the_ladder_recovers_once_and_its_count_survives_reopen(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let fire = transition(AlertState::Firing, 1_000, &["hook", "other"]);
    assert!(store.record_transition(fire).await.unwrap());
    let rows = store.pending_outbox().await.unwrap().rows;
    let (hook, other) = (rows[0].clone(), rows[1].clone());
    for i in 0..2 {
        let u = ladder_update(Some("503"), 2_000 + i);
        store
            .settle_counted(hook.id, None, retry(2_000 + i), u)
            .await
            .unwrap();
    }
    store.close().await.unwrap();
    let store = db.open().await;
    assert_eq!(
        store.notifier_failures().await.unwrap(),
        vec![("hook".to_owned(), 2)]
    );
    let delivered = store
        .settle_counted(
            hook.id,
            None,
            Attempt::Delivered { at: at(3_000) },
            ladder_update(None, 3_000),
        )
        .await
        .unwrap();
    assert_eq!((delivered.failures, delivered.queued.is_some()), (0, true));
    let pages = fallback_pages(&store).await;
    assert_eq!(pages.len(), 2, "step 1 and the recovery: {pages:?}");
    assert_eq!(pages[1].state, AlertState::Ok);
    assert_eq!(
        pages[1].reason,
        "hushwatch delivers to hook again (after 2 failed attempts in a row)"
    );
    assert_eq!(pages[0].alert_id, pages[1].alert_id);
    // Another notifier without a ladder: counted, never paged.
    let mut plain = ladder_update(Some("timeout"), 3_500);
    plain.notifier = "other".into();
    plain.rule = None;
    let counted = store
        .settle_counted(other.id, None, retry(3_500), plain)
        .await
        .unwrap();
    assert_eq!((counted.failures, counted.queued), (1, None));
    // A fresh run after the recovery climbs from step 1 again.
    let fire = transition(AlertState::Ok, 4_000, &["hook"]);
    assert!(store.record_transition(fire).await.unwrap());
    let next = store
        .pending_outbox()
        .await
        .unwrap()
        .rows
        .into_iter()
        .find(|r| r.notifier == "hook" && r.state == AlertState::Ok)
        .unwrap();
    let again = store
        .settle_counted(
            next.id,
            None,
            retry(5_000),
            ladder_update(Some("503"), 5_000),
        )
        .await
        .unwrap();
    assert_eq!(again.failures, 1);
    assert!(again.queued.is_some());
    assert_eq!(fallback_pages(&store).await.len(), 3);
    store.close().await.unwrap();
}

/// Issue #19: a replica whose claim was taken over records nothing: not
/// the attempt, not a failure on the ladder, no fallback page.
async fn a_fenced_attempt_counts_nothing_on_the_ladder(db: TestDb) {
    let clock = manual(10_000);
    let store = db.open_with_clock(clock.clone()).await;
    let other = db.open_second_with_clock(&store, clock.clone()).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let fire = transition(AlertState::Firing, 1_000, &["hook"]);
    assert!(store.record_transition(fire).await.unwrap());
    let lease = chrono::TimeDelta::seconds(30);
    let first = store
        .claim_outbox("r1".into(), lease, 1)
        .await
        .unwrap()
        .remove(0);
    clock.set(at(40_000));
    let taken = other
        .claim_outbox("r2".into(), lease, 1)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(taken.row.id, first.row.id);
    let stale = store
        .settle_counted(
            first.row.id,
            Some(first.token),
            retry(40_001),
            ladder_update(Some("late"), 40_001),
        )
        .await
        .unwrap();
    assert!(!stale.settled);
    assert!(fallback_pages(&store).await.is_empty());
    assert!(store.notifier_failures().await.unwrap().is_empty());
    let fresh = other
        .settle_counted(
            taken.row.id,
            Some(taken.token),
            retry(40_002),
            ladder_update(Some("refused"), 40_002),
        )
        .await
        .unwrap();
    assert_eq!((fresh.settled, fresh.failures), (true, 1));
    assert_eq!(fallback_pages(&store).await.len(), 1);
    other.close().await.unwrap();
    store.close().await.unwrap();
}

async fn accepted_then_duplicate_per_stream(db: TestDb) {
    let store = db.open().await;
    let first = store.record_events(vec![event("a", Some("d1"), "login", 1_000)]);
    assert_eq!(first.await.unwrap(), vec![EventOutcome::Accepted]);
    let again = store.record_events(vec![event("a", Some("d1"), "login", 2_000)]);
    assert_eq!(again.await.unwrap(), vec![EventOutcome::Duplicate]);
    assert_eq!(store.event_count("a".into()).await.unwrap(), 1);
    // A duplicate does not touch the clock either.
    assert_eq!(stream(&store, "a").await.last_arrival_at, Some(at(1_000)));

    let other = store.record_events(vec![event("b", Some("d1"), "login", 3_000)]);
    assert_eq!(other.await.unwrap(), vec![EventOutcome::Accepted]);
    assert_eq!(store.event_count("b".into()).await.unwrap(), 1);
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
    assert_eq!(store.event_count("a".into()).await.unwrap(), 2);
    store.close().await.unwrap();
}

async fn events_without_delivery_id_are_never_duplicates(db: TestDb) {
    let store = db.open().await;
    let same = event("a", None, "login", 1_000);
    let outcomes = store.record_events(vec![same.clone(), same.clone()]);
    assert_eq!(outcomes.await.unwrap(), vec![EventOutcome::Accepted; 2]);
    let later = store.record_events(vec![same]).await.unwrap();
    assert_eq!(later, vec![EventOutcome::Accepted]);
    assert_eq!(store.event_count("a".into()).await.unwrap(), 3);
    store.close().await.unwrap();
}

/// `record_delivery_rows`: the rows the service's cache takes are the
/// store's decision (an older arrival does not move the clock back), only
/// for streams an accepted clock-feeding event touched.
async fn a_delivery_answers_the_rows_it_moved_as_committed(db: TestDb) {
    let store = db.open().await;
    store
        .watch_streams(names(&["a", "b", "c"]), at(0))
        .await
        .unwrap();
    let mut filtered = event("c", Some("f"), "noise", 3_000);
    filtered.feeds_clock = false;
    let (outcomes, rows) = store
        .record_delivery_rows(
            vec![
                event("a", Some("n"), "newer", 2_000),
                event("b", Some("x"), "first", 1_000),
                event("a", Some("n2"), "newer2", 2_500),
                filtered,
            ],
            None,
            at(3_000),
        )
        .await
        .unwrap();
    assert_eq!(outcomes, vec![EventOutcome::Accepted; 4]);
    let moved: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.name.as_str(),
                r.last_arrival_at,
                r.last_event_id.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        moved,
        vec![
            ("a", Some(at(2_500)), Some("n2")),
            ("b", Some(at(1_000)), Some("x")),
        ]
    );
    // An older arrival is stored but the committed row keeps the newer one.
    let (_, rows) = store
        .record_delivery_rows(vec![event("a", Some("o"), "older", 1_500)], None, at(3_000))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].last_arrival_at, Some(at(2_500)));
    assert_eq!(rows[0].last_event_id.as_deref(), Some("n2"));
    // A duplicate moves nothing, so no row comes back.
    let (outcomes, rows) = store
        .record_delivery_rows(vec![event("a", Some("o"), "older", 1_600)], None, at(3_000))
        .await
        .unwrap();
    assert_eq!(outcomes, vec![EventOutcome::Duplicate]);
    assert!(rows.is_empty());
    store.close().await.unwrap();
}

/// `svix_acknowledge_audited`: the entry joins the chain with the
/// acknowledgement that resolved the alert, and not when nothing changed.
async fn a_svix_acknowledgement_is_audited_when_it_acknowledged(db: TestDb) {
    use hushwatch_core::ingest::svix_ops::{AttemptRef, EndpointRef, OpEvent};
    let store = db.open().await;
    store
        .watch_streams(names(&["identity"]), at(0))
        .await
        .unwrap();
    let endpoint = EndpointRef {
        app_id: None,
        endpoint_id: "ep_1".into(),
        endpoint_uid: None,
    };
    let apply = |event: OpEvent| svix::SvixApply {
        source: "main".into(),
        stream: "identity".into(),
        notifiers: vec!["pager".into()],
        event,
        clears_on: Vec::new(),
        event_type: "message.attempt.exhausted".into(),
        mapped: true,
        now: at(1_000),
        endpoint_map: Default::default(),
        join_streams: vec!["identity".into()],
        audit: true,
    };
    let exhausted = OpEvent::AttemptExhausted {
        endpoint: endpoint.clone(),
        attempt: AttemptRef {
            msg_id: "msg_1".into(),
            msg_event_id: None,
            status_code: 0,
            attempt_at: None,
        },
    };
    let mut op = event("svix:main", Some("x1"), "message.attempt.exhausted", 1_000);
    op.feeds_clock = false;
    store.record_svix(op, apply(exhausted)).await.unwrap();
    let head = |s: &Store| {
        let s = s.clone();
        async move { s.audit_summary().await.unwrap().head_seq }
    };
    let before = head(&store).await;
    let entry = |id: &str| {
        let mut e = event("svix:main", Some(id), "hushwatch.svix.acknowledged", 2_000);
        e.feeds_clock = false;
        e.channel = "admin";
        Some(e)
    };
    let (acked, lost, _) = store
        .svix_acknowledge_audited(
            apply(OpEvent::Other),
            "ep_1".into(),
            vec!["msg_x".into()],
            entry("a0"),
        )
        .await
        .unwrap();
    assert_eq!((acked, lost), (0, 1));
    assert_eq!(
        head(&store).await,
        before,
        "nothing acknowledged, nothing audited"
    );
    let (acked, lost, pages) = store
        .svix_acknowledge_audited(
            apply(OpEvent::Other),
            "ep_1".into(),
            vec!["msg_1".into()],
            entry("a1"),
        )
        .await
        .unwrap();
    assert_eq!((acked, lost), (1, 0));
    assert!(
        pages.iter().any(|p| !p.firing),
        "the resolve page: {pages:?}"
    );
    assert_eq!(head(&store).await, before + 1);
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
    assert_eq!(store.event_count("a".into()).await.unwrap(), 2);
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
    assert_eq!(store.event_count("a".into()).await.unwrap(), 1);

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
    let outbox_before = store.pending_outbox().await.unwrap().rows;
    store.close().await.unwrap();

    let store = db.open().await;
    assert_eq!(store.event_count("a".into()).await.unwrap(), 1);
    assert_eq!(store.streams().await.unwrap(), rows_before);
    assert_eq!(store.pending_outbox().await.unwrap().rows, outbox_before);
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
    assert!(store.pending_outbox().await.unwrap().rows.is_empty());

    let fire = transition(AlertState::Firing, 1_000, &["slack", "pager"]);
    assert!(store.record_transition(fire.clone()).await.unwrap());
    assert!(!store.record_transition(fire).await.unwrap());
    let pending = store.pending_outbox().await.unwrap().rows;
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
    assert_eq!(store.pending_outbox().await.unwrap().rows.len(), 4);

    let first_id = pending[0].id;
    store.mark_outbox_done(first_id, at(4_000)).await.unwrap();
    store.mark_outbox_done(first_id, at(4_001)).await.unwrap();
    let left = store.pending_outbox().await.unwrap().rows;
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
    assert!(store.pending_outbox().await.unwrap().rows.is_empty());
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
    assert_eq!(store.event_count("s".into()).await.unwrap(), 1);
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
    let rows = store.pending_outbox().await.unwrap().rows;
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
    assert_eq!(store.event_count("identity".into()).await.unwrap(), 4);
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
    assert_eq!(store.event_count("a".into()).await.unwrap(), 20);
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
    assert!(store.pending_outbox().await.unwrap().rows.is_empty());
    assert_eq!(stream(&store, "a").await.alert_state, AlertState::Ok);
    // Evaluated from the stored arrival, the same fire commits.
    let outcome = store
        .record_transition_if_silent(fire.clone(), at(1_000))
        .await
        .unwrap();
    assert_eq!(outcome, TransitionOutcome::Recorded);
    let again = store.record_transition_if_silent(fire, at(1_000)).await;
    assert_eq!(again.unwrap(), TransitionOutcome::Unchanged);
    assert_eq!(store.pending_outbox().await.unwrap().rows.len(), 1);
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
    assert_eq!(store.pending_outbox().await.unwrap().rows.len(), 2);
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
    let pages = store.pending_outbox().await.unwrap().rows;
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
    assert_eq!(store.now(), then);
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    assert!(store
        .record_transition(transition(AlertState::Firing, 5_000, &["pager"]))
        .await
        .unwrap());
    let rows = store.pending_outbox().await.unwrap().rows;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].created_at, then);
    // The same clock moved is the store's clock moved.
    clock.advance(chrono::TimeDelta::seconds(1));
    assert_eq!(store.now(), then + chrono::TimeDelta::seconds(1));
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
    assert_eq!(store.event_count("s".into()).await.unwrap(), 2);
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
    let rows = store.pending_outbox().await.unwrap().rows;
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
        .rows
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
    let rows = store.pending_outbox().await.unwrap().rows;
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
    let pending = store.pending_outbox().await.unwrap().rows;
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
    assert!(store.active_firing_pages().await.unwrap().rows.is_empty());
    let id = store.pending_outbox().await.unwrap().rows[0].id;
    store.mark_outbox_done(id, at(5_100)).await.unwrap();
    let active = store.active_firing_pages().await.unwrap().rows;
    assert_eq!(active.iter().map(|r| r.id).collect::<Vec<_>>(), [id]);
    let resolve = transition(AlertState::Ok, 6_000, &["am"]);
    assert!(store.record_transition(resolve).await.unwrap());
    assert!(store.active_firing_pages().await.unwrap().rows.is_empty());
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

fn manual(ms: i64) -> Arc<crate::clock::ManualClock> {
    Arc::new(crate::clock::ManualClock::new(at(ms)))
}

/// A firing then a resolve on two notifiers: four pages in two queues.
async fn two_queues(store: &Store) {
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let fire = transition(AlertState::Firing, 1_000, &["p", "q"]);
    assert!(store.record_transition(fire).await.unwrap());
    let resolve = transition(AlertState::Ok, 2_000, &["p", "q"]);
    assert!(store.record_transition(resolve).await.unwrap());
}

async fn claims_take_the_oldest_page_of_each_queue_once(db: TestDb) {
    let clock = manual(10_000);
    let store = db.open_with_clock(clock.clone()).await;
    let other = db.open_second_with_clock(&store, clock.clone()).await;
    two_queues(&store).await;
    let lease = chrono::TimeDelta::seconds(30);
    let (mine, theirs) = tokio::join!(
        store.claim_outbox("r1".into(), lease, 10),
        other.claim_outbox("r2".into(), lease, 10)
    );
    let (mine, theirs) = (mine.unwrap(), theirs.unwrap());
    let mut claimed: Vec<_> = mine.iter().chain(&theirs).map(|c| c.row.clone()).collect();
    claimed.sort_by_key(|r| r.id);
    // Only the firing pages: each resolve waits behind its queue's firing page.
    assert_eq!(claimed.len(), 2, "{claimed:?}");
    assert!(claimed.iter().all(|r| r.state == AlertState::Firing));
    assert_eq!(claimed[0].notifier, "p");
    assert_eq!(claimed[1].notifier, "q");
    assert!(store
        .claim_outbox("r3".into(), lease, 10)
        .await
        .unwrap()
        .is_empty());
    // Settling the firing page of p makes p's resolve claimable.
    let p = mine
        .iter()
        .chain(&theirs)
        .find(|c| c.row.notifier == "p")
        .unwrap();
    let delivered = Attempt::Delivered { at: at(10_500) };
    assert!(store
        .settle_claim(p.row.id, p.token, delivered)
        .await
        .unwrap());
    let next = store.claim_outbox("r3".into(), lease, 10).await.unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(
        (next[0].row.notifier.as_str(), &next[0].row.state),
        ("p", &AlertState::Ok)
    );
    other.close().await.unwrap();
    store.close().await.unwrap();
}

async fn an_expired_claim_is_retried_under_the_same_key_and_the_old_holder_is_fenced(db: TestDb) {
    let clock = manual(10_000);
    let store = db.open_with_clock(clock.clone()).await;
    let other = db.open_second_with_clock(&store, clock.clone()).await;
    two_queues(&store).await;
    let lease = chrono::TimeDelta::seconds(30);
    let first = store
        .claim_outbox("r1".into(), lease, 1)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(first.lease_until, at(40_000));
    // r1 dies mid-send; before the lease ends nobody else may take the row.
    clock.set(at(39_999));
    assert!(other
        .claim_outbox("r2".into(), lease, 10)
        .await
        .unwrap()
        .iter()
        .all(|c| c.row.id != first.row.id));
    clock.set(at(40_000));
    let again = other.claim_outbox("r2".into(), lease, 10).await.unwrap();
    let taken = again
        .iter()
        .find(|c| c.row.id == first.row.id)
        .expect("retaken");
    assert_eq!(
        taken.row.page_key, first.row.page_key,
        "same idempotency key"
    );
    assert_eq!(taken.row.alert_id, first.row.alert_id);
    assert!(taken.token > first.token);
    // The old holder comes back: its result is refused, nothing written.
    let stale = Attempt::Delivered { at: at(40_001) };
    assert!(!store
        .settle_claim(first.row.id, first.token, stale)
        .await
        .unwrap());
    let row = store.pending_outbox().await.unwrap().rows;
    assert!(row.iter().any(|r| r.id == first.row.id && r.attempts == 0));
    let done = Attempt::Delivered { at: at(40_002) };
    assert!(other
        .settle_claim(taken.row.id, taken.token, done)
        .await
        .unwrap());
    let settled_twice = Attempt::Delivered { at: at(40_003) };
    assert!(!other
        .settle_claim(taken.row.id, taken.token, settled_twice)
        .await
        .unwrap());
    assert!(store
        .pending_outbox()
        .await
        .unwrap()
        .rows
        .iter()
        .all(|r| r.id != first.row.id));
    other.close().await.unwrap();
    store.close().await.unwrap();
}

async fn a_claimed_retry_waits_for_its_backoff(db: TestDb) {
    let clock = manual(10_000);
    let store = db.open_with_clock(clock.clone()).await;
    two_queues(&store).await;
    let lease = chrono::TimeDelta::seconds(30);
    let claim = store
        .claim_outbox("r1".into(), lease, 1)
        .await
        .unwrap()
        .remove(0);
    let retry = Attempt::Retry {
        at: at(10_100),
        next: at(70_000),
        error: "503".into(),
    };
    assert!(store
        .settle_claim(claim.row.id, claim.token, retry)
        .await
        .unwrap());
    let ids = |c: Vec<crate::replica::Claim>| c.iter().map(|c| c.row.id).collect::<Vec<_>>();
    let now = ids(store.claim_outbox("r1".into(), lease, 10).await.unwrap());
    assert!(!now.contains(&claim.row.id), "released, but backing off");
    clock.set(at(70_000));
    let later = store.claim_outbox("r2".into(), lease, 10).await.unwrap();
    let again = later
        .iter()
        .find(|c| c.row.id == claim.row.id)
        .expect("due again");
    assert_eq!(again.row.attempts, 1);
    store.close().await.unwrap();
}

async fn leader_lease_has_terms_and_a_superseded_holder_cannot_renew(db: TestDb) {
    let clock = manual(0);
    let store = db.open_with_clock(clock.clone()).await;
    let other = db.open_second_with_clock(&store, clock.clone()).await;
    let ttl = chrono::TimeDelta::seconds(15);
    let a = store.elect("a".into(), None, ttl).await.unwrap();
    assert!(a.leader);
    assert_eq!((a.term, a.lease_until), (1, Some(at(15_000))));
    let b = other.elect("b".into(), None, ttl).await.unwrap();
    assert!(!b.leader);
    assert_eq!((b.holder.as_deref(), b.term), (Some("a"), 1));
    clock.set(at(10_000));
    let renewed = store.elect("a".into(), Some(1), ttl).await.unwrap();
    assert!(renewed.leader && renewed.term == 1);
    assert_eq!(renewed.lease_until, Some(at(25_000)));
    // a stops renewing (SIGSTOP); its lease runs out and b takes term 2.
    clock.set(at(25_000));
    let b = other.elect("b".into(), None, ttl).await.unwrap();
    assert!(b.leader);
    assert_eq!(b.term, 2);
    // a wakes up still believing in term 1: it cannot renew it.
    let a = store.elect("a".into(), Some(1), ttl).await.unwrap();
    assert!(!a.leader);
    assert_eq!((a.holder.as_deref(), a.term), (Some("b"), 2));
    assert!(
        !store.resign("a".into(), 1).await.unwrap(),
        "not a's to give up"
    );
    assert!(other.resign("b".into(), 2).await.unwrap());
    let a = store.elect("a".into(), Some(1), ttl).await.unwrap();
    assert!(a.leader);
    assert_eq!(a.term, 3, "a new term, never the old one");
    other.close().await.unwrap();
    store.close().await.unwrap();
}

async fn heartbeats_list_the_replicas_seen_recently(db: TestDb) {
    let clock = manual(0);
    let store = db.open_with_clock(clock.clone()).await;
    store.heartbeat("r1".into()).await.unwrap();
    clock.set(at(5_000));
    store.heartbeat("r2".into()).await.unwrap();
    clock.set(at(9_000));
    store.heartbeat("r2".into()).await.unwrap();
    let seen = store.replicas(at(1_000)).await.unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].id.as_str(), seen[0].started_at, seen[0].seen_at),
        ("r2", at(5_000), at(9_000))
    );
    assert_eq!(store.replicas(at(0)).await.unwrap().len(), 2);
    store.close().await.unwrap();
}

async fn the_change_feed_reports_arrivals_committed_through_another_handle(db: TestDb) {
    let store = db.open().await;
    let other = db.open_second(&store).await;
    store
        .watch_streams(names(&["a", "b"]), at(0))
        .await
        .unwrap();
    let mut feed = store.changes();
    // PostgreSQL: the LISTEN connection may still be starting; an arrival
    // committed before it listens is covered by its first Resync, so send
    // until one is seen.
    let mut filtered = event("b", None, "noise", 1_000);
    filtered.feeds_clock = false;
    other.record_events(vec![filtered]).await.unwrap();
    let mut got = None;
    for i in 0..50 {
        other
            .record_events(vec![event("a", Some(&format!("e{i}")), "x", 2_000 + i)])
            .await
            .unwrap();
        let wait = std::time::Duration::from_millis(200);
        if let Ok(s) = tokio::time::timeout(wait, next_arrival(&mut feed)).await {
            got = Some(s);
            break;
        }
    }
    assert_eq!(
        got.as_deref(),
        Some("a"),
        "filtered events are not arrivals"
    );
    other.close().await.unwrap();
    store.close().await.unwrap();
}

async fn next_arrival(
    feed: &mut tokio::sync::broadcast::Receiver<crate::replica::Change>,
) -> String {
    loop {
        match feed.recv().await.expect("feed open") {
            crate::replica::Change::Arrival(s) => return s,
            crate::replica::Change::Resync => continue,
        }
    }
}

fn silence(streams: &[&str], kinds: &[&str], from_ms: i64, until_ms: i64) -> silences::NewSilence {
    silences::NewSilence {
        streams: names(streams),
        kinds: names(kinds),
        starts_at: at(from_ms),
        ends_at: at(until_ms),
        comment: "deploy".into(),
        created_by: "ops".into(),
    }
}

async fn a_silence_holds_the_firing_page_until_it_ends(db: TestDb) {
    let clock = manual(1_000);
    let store = db.open_with_clock(clock.clone()).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let id = store
        .add_silence(silence(&["a"], &["*"], 0, 10_000), 10, true)
        .await
        .unwrap();
    assert!(id.is_some());
    assert_eq!(store.audit_summary().await.unwrap().head_seq, 1, "audited");
    let fire = transition(AlertState::Firing, 5_000, &["p"]);
    assert!(store.record_transition(fire).await.unwrap());
    assert_eq!(stream(&store, "a").await.alert_state, AlertState::Firing);
    assert!(
        store.pending_outbox().await.unwrap().rows.is_empty(),
        "held"
    );
    clock.set(at(9_999));
    assert_eq!(
        store.release_held().await.unwrap().paged,
        0,
        "still silenced"
    );
    clock.set(at(10_000));
    assert_eq!(store.release_held().await.unwrap().paged, 1);
    let pages = store.pending_outbox().await.unwrap().rows;
    assert_eq!(pages.len(), 1);
    assert_eq!(
        (pages[0].state.clone(), pages[0].at),
        (AlertState::Firing, at(10_000))
    );
    assert_eq!(
        store.release_held().await.unwrap().paged,
        0,
        "released once"
    );
    let listed = store.silences(at(0)).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].matches("a", "silence"));
    store.close().await.unwrap();
}

async fn the_resolve_of_a_held_firing_page_is_dropped(db: TestDb) {
    let clock = manual(1_000);
    let store = db.open_with_clock(clock.clone()).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    store
        .add_silence(silence(&["*"], &["silence"], 0, 10_000), 10, false)
        .await
        .unwrap();
    assert!(store
        .record_transition(transition(AlertState::Firing, 5_000, &["p"]))
        .await
        .unwrap());
    assert!(store
        .record_transition(transition(AlertState::Ok, 6_000, &["p"]))
        .await
        .unwrap());
    clock.set(at(20_000));
    assert_eq!(store.release_held().await.unwrap().paged, 0);
    assert!(
        store.pending_outbox().await.unwrap().rows.is_empty(),
        "nobody was told it fired"
    );
    store.close().await.unwrap();
}

async fn an_acknowledged_episode_gets_no_reminders(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let ack = |store: Store| async move {
        store
            .acknowledge("a".into(), "ops".into(), "on it".into(), true)
            .await
            .unwrap()
    };
    assert_eq!(ack(store.clone()).await, silences::AckOutcome::NotFiring);
    assert!(store
        .record_transition(transition(AlertState::Firing, 5_000, &["p"]))
        .await
        .unwrap());
    assert_eq!(
        ack(store.clone()).await,
        silences::AckOutcome::Acknowledged(at(5_000))
    );
    assert_eq!(
        ack(store.clone()).await,
        silences::AckOutcome::Acknowledged(at(5_000))
    );
    assert_eq!(
        store.audit_summary().await.unwrap().head_seq,
        1,
        "audited once"
    );
    let acks = store.current_acks().await.unwrap();
    assert_eq!(acks.len(), 1);
    assert_eq!(
        (acks[0].stream.as_str(), acks[0].started_at),
        ("a", at(5_000))
    );
    let reminders = store
        .enqueue_extra("a".into(), PageKind::Reminder, 1, names(&["p"]), at(9_000))
        .await
        .unwrap();
    assert_eq!(reminders, 0);
    store.close().await.unwrap();
}

async fn maintenance_windows_are_stored_once_and_end_when_removed(db: TestDb) {
    let clock = manual(1_000);
    let store = db.open_with_clock(clock.clone()).await;
    let window = vec![("a".to_string(), at(2_000), at(9_000), "patch".to_string())];
    store.sync_maintenance(window.clone(), true).await.unwrap();
    store.sync_maintenance(window, true).await.unwrap();
    let stored = store.silences(at(0)).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].created_by, silences::CONFIG_AUTHOR);
    clock.set(at(3_000));
    store.sync_maintenance(Vec::new(), true).await.unwrap();
    assert!(
        store.silences(at(3_000)).await.unwrap().is_empty(),
        "ended now"
    );
    assert_eq!(
        store.audit_summary().await.unwrap().head_seq,
        2,
        "created, expired"
    );
    store.close().await.unwrap();
}

async fn silences_past_the_cap_are_refused(db: TestDb) {
    let store = db.open_with_clock(manual(1_000)).await;
    let first = store.add_silence(silence(&["a"], &["*"], 0, 5_000), 1, false);
    assert!(first.await.unwrap().is_some());
    let second = store.add_silence(silence(&["b"], &["*"], 0, 5_000), 1, false);
    assert_eq!(second.await.unwrap(), None);
    let id = store.silences(at(0)).await.unwrap()[0].id;
    assert!(store
        .expire_silence(id, "ops".into(), None, false)
        .await
        .unwrap());
    assert!(!store
        .expire_silence(id + 100, "ops".into(), None, false)
        .await
        .unwrap());
    let third = store.add_silence(silence(&["b"], &["*"], 0, 5_000), 1, false);
    assert!(
        third.await.unwrap().is_some(),
        "an expired silence frees its slot"
    );
    store.close().await.unwrap();
}

/// Issue #26: churn (add, then end) keeps at most `MAX_ENDED_KEPT` ended
/// silences, the most recently ended ones, and every one not ended.
async fn only_the_most_recently_ended_silences_are_kept(db: TestDb) {
    let clock = manual(1_000);
    let store = db.open_with_clock(clock.clone()).await;
    let keep = store
        .add_silence(silence(&["a"], &["*"], 0, 10_000_000), 10, false)
        .await
        .unwrap()
        .unwrap();
    let mut ended = Vec::new();
    for i in 0..150 {
        clock.set(at(2_000 + i * 10));
        let id = store
            .add_silence(silence(&["b"], &["*"], 0, 10_000_000), 10, false)
            .await
            .unwrap()
            .unwrap();
        clock.set(at(2_005 + i * 10));
        assert!(store
            .expire_silence(id, "ops".into(), None, false)
            .await
            .unwrap());
        ended.push(id);
    }
    // The next add prunes; the listing reads everything not yet pruned.
    store
        .add_silence(silence(&["c"], &["*"], 0, 10_000_000), 10, false)
        .await
        .unwrap()
        .unwrap();
    let stored = store.silences(at(0)).await.unwrap();
    let now = at(2_005 + 149 * 10);
    let kept: Vec<i64> = stored
        .iter()
        .filter(|s| s.ends_at <= now)
        .map(|s| s.id)
        .collect();
    assert_eq!(kept, ended[150 - silences::MAX_ENDED_KEPT..].to_vec());
    assert!(stored.iter().any(|s| s.id == keep && s.ends_at > now));
    assert_eq!(stored.len(), silences::MAX_ENDED_KEPT + 2);
    store.close().await.unwrap();
}

/// Reconciliation reports and their alerts (`store::reconcile`).
mod reconcile;

/// The learned gaps between arrivals (`store::gaps`).
mod gaps;

/// The per-subject revocation index and stale grants (`store::revocations`).
mod revocations;

/// Provider text holding NUL, encoded once before either backend.
mod nul;

/// Svix endpoint state: grouped exhausted pages, acknowledgements and the
/// shared `other` row past the per-source cap (`store::svix`).
mod svix_endpoints;

/// Provider subscriptions and their warning alert (`store::subscriptions`).
mod subscription_alerts;

/// Keyed alerts held by an operator silence of their kind
/// (`store::silences`).
mod keyed_silences;

/// The engine's name, counters and queue depth, and the replica feed's
/// changed-row cursor (`Backend::streams_changed`).
mod engine;

/// Issue #28: a test that fails when a `Backend` method has no case here.
mod coverage;

/// `Idempotency-Key` records of the operator routes (`store::idempotency`).
mod idempotency;

/// Relay mode's stored deliveries, claims, failure runs, dead letters and
/// replays (`store::forward`).
mod forward;

/// Acknowledge-link codes (`store::ack_codes`, issue #30).
mod ack_codes;

/// The operator's relay actions and the chunked replay
/// (`store::forward_admin`, issue #44).
mod forward_admin;

/// The cross-check's cursor, snapshots, pending changes and findings
/// (`store::crosscheck`, issue #45).
mod crosscheck;

/// The cross-check's read views for status, audit and dry runs
/// (`store::crosscheck_view`, issue #45).
mod crosscheck_view;

/// Stored pages this binary cannot read (a kind from a newer version, a
/// row altered at rest): each holds back only itself.
mod unreadable;
