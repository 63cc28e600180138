//! PostgreSQL-only behaviour: concurrent migration, several processes' worth
//! of pools on one database, and server-side faults. Every behaviour both
//! backends share is in `store::conformance`. Each test makes its own
//! database (see `store::testdb`) and skips, saying so, without
//! `HUSHWATCH_TEST_PG_URL` (fails instead with `HUSHWATCH_REQUIRE_PG=1`).

use std::sync::Arc;
use std::time::Duration;

use crate::clock::SystemClock;
use crate::testdb::{at, event, names, PgTestDb};
use crate::{EventOutcome, Store, StoreError};

async fn open(db: &PgTestDb) -> Store {
    Store::open_postgres(&db.settings(), 4, Arc::new(SystemClock))
        .await
        .expect("open PostgreSQL store")
}

/// A plain client on the test database, for faults and raw checks.
async fn raw(db: &PgTestDb) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(
        &db.url.replace("sslmode=disable", ""),
        tokio_postgres::NoTls,
    )
    .await
    .expect("raw connection");
    tokio::spawn(conn);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_starting_at_once_migrate_exactly_once() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let opens: Vec<_> = (0..3)
        .map(|_| {
            let settings = db.settings();
            tokio::spawn(
                async move { Store::open_postgres(&settings, 2, Arc::new(SystemClock)).await },
            )
        })
        .collect();
    let mut stores = Vec::new();
    for open in opens {
        stores.push(open.await.unwrap().expect("every replica opens"));
    }
    let client = raw(&db).await;
    let version: i32 = client
        .query_one("SELECT version FROM schema_version", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, super::schema::binary_version());
    let salts: i64 = client
        .query_one("SELECT count(*) FROM meta WHERE key = 'salt'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(salts, 1, "the v1 step ran once");
    for s in stores {
        s.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_from_a_newer_binary_is_refused_untouched() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    open(&db).await.close().await.unwrap();
    let client = raw(&db).await;
    client
        .execute("UPDATE schema_version SET version = 99", &[])
        .await
        .unwrap();
    let err = Store::open_postgres(&db.settings(), 2, Arc::new(SystemClock))
        .await
        .expect_err("too new");
    assert!(matches!(err, StoreError::TooNew { file: 99, .. }), "{err}");
    let version: i32 = client
        .query_one("SELECT version FROM schema_version", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, 99);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_delivery_through_two_replicas_is_stored_once() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (a, b) = (open(&db).await, open(&db).await);
    a.watch_streams(names(&["s"]), at(0)).await.unwrap();
    for round in 0..20 {
        let id = format!("evt_{round}");
        let (ra, rb) = tokio::join!(
            a.record_events(vec![event("s", Some(&id), "user.deleted", 1_000 + round)]),
            b.record_events(vec![event("s", Some(&id), "user.deleted", 1_000 + round)]),
        );
        let mut outcomes = vec![ra.unwrap()[0], rb.unwrap()[0]];
        outcomes.sort_by_key(|o| *o == EventOutcome::Duplicate);
        assert_eq!(outcomes, [EventOutcome::Accepted, EventOutcome::Duplicate]);
    }
    assert_eq!(a.event_count("s".into()).await.unwrap(), 20);
    assert_eq!(b.audit_summary().await.unwrap().head_seq, 20);
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_connections_fail_the_running_call_then_reconnect() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let store = open(&db).await;
    store.watch_streams(names(&["s"]), at(0)).await.unwrap();
    store
        .record_events(vec![event("s", Some("before"), "x", 1_000)])
        .await
        .unwrap();
    // Hold the audit head's lock from outside, so the next ingest is
    // mid-transaction (waiting on it) when every connection is killed.
    let mut holder = raw(&db).await;
    let lock = holder.transaction().await.unwrap();
    lock.execute("SELECT 1 FROM audit_head FOR UPDATE", &[])
        .await
        .unwrap();
    let blocked = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .record_events(vec![event("s", Some("during"), "x", 2_000)])
                .await
        })
    };
    wait_for_lock_waiter(&db).await;
    assert!(db.terminate_connections().await >= 2);
    let during = blocked.await.unwrap();
    // The pool drops the dead connections and opens new ones by itself.
    // No false success: an error stored nothing. A termination is a
    // signal the waiting backend handles at its next interrupt check, so
    // under load it may take the lock the killed holder released and
    // commit first; then the answer is a success and the event is stored.
    let stored = store.event_count("s".into()).await.unwrap();
    assert_eq!(
        stored,
        if during.is_ok() { 2 } else { 1 },
        "stored exactly when answered ok: {during:?}"
    );
    let retry = store
        .record_events(vec![event("s", Some("during"), "x", 3_000)])
        .await
        .unwrap();
    assert_eq!(
        retry,
        [if during.is_ok() {
            EventOutcome::Duplicate
        } else {
            EventOutcome::Accepted
        }],
        "the sender's retry is stored once"
    );
    drop(lock);
    store.close().await.unwrap();
}

/// A replica frozen (`SIGSTOP`) inside a transaction holding the leader
/// row must not stall the others' elections forever: the server ends its
/// session once it idles past `IDLE_IN_TRANSACTION_TIMEOUT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_frozen_inside_a_transaction_loses_its_locks() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let store = open(&db).await;
    let frozen_pool = super::pool(&db.settings(), 1).unwrap();
    let mut frozen = frozen_pool.get().await.unwrap();
    let shown: String = frozen
        .query_one("SHOW idle_in_transaction_session_timeout", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(shown, "5s", "every pooled session carries the bound");
    let stalled = frozen.transaction().await.unwrap();
    stalled
        .execute("SELECT 1 FROM leader WHERE id = 1 FOR UPDATE", &[])
        .await
        .unwrap();
    // ... and then sends nothing, as a stopped process would.
    let started = std::time::Instant::now();
    let elected = tokio::time::timeout(
        Duration::from_secs(30),
        store.elect("other".to_owned(), None, chrono::TimeDelta::seconds(2)),
    )
    .await
    .expect("the election is not stalled for ever")
    .unwrap();
    assert!(elected.leader, "{elected:?}");
    assert!(
        started.elapsed() >= super::IDLE_IN_TRANSACTION_TIMEOUT - Duration::from_millis(500),
        "it waited for the bound, not less: {:?}",
        started.elapsed()
    );
    let resumed = stalled.execute("SELECT 1", &[]).await;
    assert!(resumed.is_err(), "the frozen transaction was ended");
    store.close().await.unwrap();
}

/// `audit verify` while replicas prune and append: the reader's anchor,
/// checkpoints and entries come from one snapshot (outside the
/// idle-in-transaction bound, so a slow export may pause).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_reader_reads_one_snapshot_while_the_log_is_pruned_and_appended() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let store = open(&db).await;
    for i in 0..5 {
        let id = format!("e{i}");
        store
            .record_events(vec![event("s", Some(&id), "user.created", 1_000 + i)])
            .await
            .unwrap();
    }
    let settings = db.settings();
    let reader = tokio::task::spawn_blocking(move || {
        let reader = crate::audit::AuditReader::open_postgres(&settings).unwrap();
        let anchor = reader.anchor().unwrap();
        (reader, anchor)
    });
    let (reader, anchor) = reader.await.unwrap();
    assert_eq!(store.audit_prune(at(1_003)).await.unwrap(), 3);
    store
        .record_events(vec![event("s", Some("late"), "user.created", 2_000)])
        .await
        .unwrap();
    let summary = tokio::task::spawn_blocking(move || {
        // Longer than the bound pooled sessions have on idling in a
        // transaction: the reader's snapshot is not ended by it.
        std::thread::sleep(super::IDLE_IN_TRANSACTION_TIMEOUT + Duration::from_secs(1));
        let mut entries = Vec::new();
        reader
            .for_each(&Default::default(), |e| {
                entries.push(e);
                true
            })
            .unwrap();
        assert_eq!(entries.len(), 5, "the entries of the reader's snapshot");
        hushwatch_core::audit::verify::verify(
            anchor,
            entries.into_iter(),
            &reader.checkpoints().unwrap(),
            None,
        )
    })
    .await
    .unwrap()
    .expect("one snapshot verifies");
    assert_eq!(summary.last_seq, Some(5));
    store.close().await.unwrap();
}

/// Polls `pg_stat_activity` until a backend of the test database waits on
/// a lock (the blocked call is mid-transaction).
async fn wait_for_lock_waiter(db: &PgTestDb) {
    let client = raw(db).await;
    let waiting = async {
        loop {
            let n: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            if n > 0 {
                return;
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the ingest call waits on the lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_fails_calls_until_it_is_back() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let store = open(&db).await;
    store.watch_streams(names(&["s"]), at(0)).await.unwrap();
    db.set_allow_connections(false).await;
    db.terminate_connections().await;
    let down = store
        .record_events(vec![event("s", Some("e1"), "x", 1_000)])
        .await;
    assert!(matches!(down, Err(StoreError::Sql(_))), "{down:?}");
    assert!(store.probe().await.is_err());
    db.set_allow_connections(true).await;
    let up = store
        .record_events(vec![event("s", Some("e1"), "x", 2_000)])
        .await
        .unwrap();
    assert_eq!(up, [EventOutcome::Accepted]);
    store.probe().await.unwrap();
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_an_open_error_that_does_not_echo_it() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_password(Some("Wr0ng-Pa55word")).unwrap();
    let settings = super::settings::parse(url.as_str(), std::path::Path::new(".")).unwrap();
    let err = Store::open_postgres(&settings, 1, Arc::new(SystemClock))
        .await
        .expect_err("authentication fails");
    let text = err.to_string();
    assert!(matches!(err, StoreError::Open(_)), "{text}");
    assert!(!text.contains("Wr0ng-Pa55word"), "{text}");
    assert!(!format!("{settings:?}").contains("Wr0ng-Pa55word"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_require_encrypts_and_verify_full_refuses_an_unknown_ca() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let client = raw(&db).await;
    let ssl: String = client.query_one("SHOW ssl", &[]).await.unwrap().get(0);
    if ssl != "on" {
        println!("skipped: the test server has ssl = {ssl}");
        return;
    }
    let with_mode = |mode: &str| {
        let mut url = url::Url::parse(&db.url).unwrap();
        url.set_query(Some(&format!("sslmode={mode}")));
        super::settings::parse(url.as_str(), std::path::Path::new(".")).unwrap()
    };
    let store = Store::open_postgres(&with_mode("require"), 1, Arc::new(SystemClock))
        .await
        .expect("require connects over TLS");
    store.probe().await.unwrap();
    // Every hushwatch connection to this database (pool and LISTEN) is TLS.
    let row = client
        .query_one(
            "SELECT count(*), coalesce(bool_and(s.ssl), false)
             FROM pg_stat_ssl s JOIN pg_stat_activity a ON a.pid = s.pid
             WHERE a.application_name = 'hushwatch' AND a.datname = current_database()",
            &[],
        )
        .await
        .unwrap();
    let (connections, all_tls): (i64, bool) = (row.get(0), row.get(1));
    assert!(connections >= 1, "the store is connected");
    assert!(all_tls, "{connections} connections, not all TLS");
    store.close().await.unwrap();
    // The server's certificate is self-signed (Debian's snakeoil): not a
    // Mozilla root, so verify-full must refuse it.
    let refused = Store::open_postgres(&with_mode("verify-full"), 1, Arc::new(SystemClock)).await;
    assert!(matches!(refused, Err(StoreError::Open(_))), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_delivery_rolls_back_alone_in_its_ingest_batch() {
    use crate::subscriptions::SubscriptionUpdate;
    use hushwatch_core::ingest::providers::SubscriptionExpiry;
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let store = open(&db).await;
    store.watch_streams(names(&["s"]), at(0)).await.unwrap();
    // A subscription row for a stream that does not exist breaks a foreign
    // key: that delivery fails, with its event and dedup entry undone.
    let bad_update = SubscriptionUpdate {
        stream: "no-such-stream".into(),
        expiries: vec![SubscriptionExpiry {
            subscription: "sub".into(),
            expires_at: at(9_000),
        }],
        lifecycle: Vec::new(),
        carried_events: true,
    };
    let mut calls = Vec::new();
    for i in 0..40 {
        let store = store.clone();
        let update = (i == 20).then(|| bad_update.clone());
        calls.push(tokio::spawn(async move {
            let e = event("s", Some(&format!("e{i}")), "x", 1_000 + i);
            store.record_delivery_rows(vec![e], update, at(1_000)).await
        }));
    }
    for (i, call) in calls.into_iter().enumerate() {
        let result = call.await.unwrap();
        assert_eq!(result.is_err(), i == 20, "call {i}: {result:?}");
        // A batch holding the bad delivery ran twice (bare, then under a
        // savepoint each, `pg::batch`): the others answer from the
        // committed run, not as duplicates of their rolled-back first one.
        if let Ok((outcomes, _)) = result {
            assert_eq!(outcomes, [EventOutcome::Accepted], "call {i}");
        }
    }
    assert_eq!(store.event_count("s".into()).await.unwrap(), 39);
    assert_eq!(
        store.audit_summary().await.unwrap().head_seq,
        39,
        "no gap in the chain"
    );
    let retry = store
        .record_events(vec![event("s", Some("e20"), "x", 5_000)])
        .await
        .unwrap();
    assert_eq!(
        retry,
        [EventOutcome::Accepted],
        "its dedup entry was undone"
    );
    store.close().await.unwrap();
}

/// The set-wise batch (`bulk`) against what one-by-one recording means:
/// two stores (two replicas' worth of group commits) record deliveries of
/// several events each, with repeated delivery ids (inside one batch and
/// across replicas) and arrivals out of order; every id is stored once, the
/// one chain verifies, and each stream row holds its latest arrival.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_batches_dedup_chain_and_clock_as_one_by_one_would() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (a, b) = (open(&db).await, open(&db).await);
    a.watch_streams(names(&["s", "t"]), at(0)).await.unwrap();
    let mut calls = Vec::new();
    for i in 0..300_i64 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        // 100 distinct ids, each sent three times; received times wander
        // so that a later delivery often carries an older arrival.
        let id = i % 100;
        let received = 10_000 + (id * 37) % 1_000;
        calls.push(tokio::spawn(async move {
            let events = vec![
                event("s", Some(&format!("s{id}")), &format!("type{id}"), received),
                event("t", Some(&format!("t{id}")), "x", received + 1),
            ];
            store.record_events(events).await
        }));
    }
    let mut accepted = 0;
    for call in calls {
        let outcomes = call.await.unwrap().unwrap();
        accepted += outcomes
            .iter()
            .filter(|o| **o == EventOutcome::Accepted)
            .count();
    }
    assert_eq!(accepted, 200, "each of the 200 ids accepted exactly once");
    assert_eq!(a.event_count("s".into()).await.unwrap(), 100);
    assert_eq!(b.event_count("t".into()).await.unwrap(), 100);
    assert_eq!(a.audit_summary().await.unwrap().head_seq, 200);

    // Latest arrival: id 27 has the largest (27 * 37) % 1000 = 999.
    let rows = a.streams().await.unwrap();
    let s = rows.iter().find(|r| r.name == "s").unwrap();
    assert_eq!(s.last_arrival_at, Some(at(10_999)));
    assert_eq!(s.last_event_type.as_deref(), Some("type27"));
    assert_eq!(s.last_event_id.as_deref(), Some("s27"));

    let settings = db.settings();
    let verified = tokio::task::spawn_blocking(move || {
        let reader = crate::audit::AuditReader::open_postgres(&settings).unwrap();
        let mut entries = Vec::new();
        reader
            .for_each(&Default::default(), |e| {
                entries.push(e);
                true
            })
            .unwrap();
        hushwatch_core::audit::verify::verify(
            reader.anchor().unwrap(),
            entries.into_iter(),
            &reader.checkpoints().unwrap(),
            None,
        )
    })
    .await
    .unwrap();
    assert!(verified.is_ok(), "{verified:?}");
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// A delivery carrying subscription expiries commits with them (the
/// parameters' types are spelled out: PostgreSQL would otherwise infer
/// `coalesce($4, $5)` as TEXT and refuse every such delivery).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_with_subscription_expiries_is_recorded() {
    use crate::subscriptions::SubscriptionUpdate;
    use hushwatch_core::ingest::providers::SubscriptionExpiry;
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let store = open(&db).await;
    store.watch_streams(names(&["s"]), at(0)).await.unwrap();
    let update = SubscriptionUpdate {
        stream: "s".into(),
        expiries: vec![SubscriptionExpiry {
            subscription: "sub".into(),
            expires_at: at(9_000),
        }],
        lifecycle: Vec::new(),
        carried_events: true,
    };
    let (outcomes, _) = store
        .record_delivery_rows(
            vec![event("s", Some("e1"), "x", 1_000)],
            Some(update),
            at(1_000),
        )
        .await
        .unwrap();
    assert_eq!(outcomes, [EventOutcome::Accepted]);
    let subs = store.subscriptions().await.unwrap();
    assert_eq!(subs.len(), 1, "{subs:?}");
    store.close().await.unwrap();
}

/// The change cursor misses no commit: a change made by a transaction
/// that was still open during one read, and committed after a later
/// change was already read, is returned by the next read. (How few rows a
/// quiet read returns depends on every transaction open in the cluster, so
/// that is measured in `stream_reread_at_10k_streams`, not asserted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_rows_are_read_once_in_any_commit_order() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let store = open(&db).await;
    store
        .watch_streams(names(&["a", "b", "c"]), at(0))
        .await
        .unwrap();
    let (all, cursor) = store.streams_changed(None).await.unwrap();
    assert_eq!(all.len(), 3);
    assert!(cursor.is_some());

    // A slow writer takes its transaction id first...
    let mut slow = raw(&db).await;
    let slow_tx = slow.transaction().await.unwrap();
    slow_tx
        .execute(
            "UPDATE streams SET last_arrival_at = 5000 WHERE name = 'a'",
            &[],
        )
        .await
        .unwrap();
    // ...a later one commits first and is read.
    store
        .record_events(vec![event("b", Some("e1"), "x", 2_000)])
        .await
        .unwrap();
    let (seen, cursor) = store.streams_changed(cursor).await.unwrap();
    let b = seen
        .iter()
        .find(|r| r.name == "b")
        .expect("b's change is read");
    assert_eq!(b.last_arrival_at, Some(at(2_000)));
    let a = seen.iter().find(|r| r.name == "a");
    assert!(a.is_none_or(|a| a.last_arrival_at.is_none()), "{a:?}");
    slow_tx.commit().await.unwrap();
    let (seen, _) = store.streams_changed(cursor).await.unwrap();
    let a = seen
        .iter()
        .find(|r| r.name == "a")
        .expect("the late commit is read");
    assert_eq!(a.last_arrival_at, Some(at(5_000)));
    store.close().await.unwrap();
}

/// Benchmark (run by hand): the feed's re-read at 10,000 streams, every
/// row versus only the changed ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; prints the time of a full and an incremental re-read"]
async fn stream_reread_at_10k_streams() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let store = open(&db).await;
    let all: Vec<String> = (0..10_000).map(|i| format!("stream-{i:05}")).collect();
    for chunk in all.chunks(1_000) {
        store.watch_streams(chunk.to_vec(), at(0)).await.unwrap();
    }
    let (_, mut cursor) = store.streams_changed(None).await.unwrap();
    let rounds = 40;
    let started = std::time::Instant::now();
    for _ in 0..rounds {
        assert_eq!(store.streams().await.unwrap().len(), 10_000);
    }
    let full = started.elapsed() / rounds;
    let started = std::time::Instant::now();
    for i in 0..rounds {
        // Each round, as under steady traffic: 20 streams heard an event.
        let events = (0..20)
            .map(|j| {
                let n = (i * 20 + j) as usize % all.len();
                event(&all[n], None, "x", 1_000 + i64::from(i))
            })
            .collect();
        store.record_events(events).await.unwrap();
        let (rows, next) = store.streams_changed(cursor).await.unwrap();
        assert!(rows.len() >= 20, "{}", rows.len());
        cursor = next;
    }
    let incremental = started.elapsed() / rounds;
    println!(
        "10,000 streams: full re-read {full:?}, incremental re-read with 20 changed rows \
         (including recording them) {incremental:?}"
    );
    store.close().await.unwrap();
}

/// A statement of the set-wise batch failing (PostgreSQL refuses a NUL
/// byte in TEXT) rolls the batch back; it is then recorded job by job and
/// only the bad delivery fails. The connection is clean afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_statement_in_a_set_wise_batch_fails_only_its_delivery() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let store = open(&db).await;
    store.watch_streams(names(&["s"]), at(0)).await.unwrap();
    for round in 0..3_i64 {
        let mut calls = Vec::new();
        for i in 0..40_i64 {
            let store = store.clone();
            calls.push(tokio::spawn(async move {
                let kind = if i == 20 { "bad\0type" } else { "x" };
                let e = event("s", Some(&format!("r{round}e{i}")), kind, 1_000 + i);
                store.record_events(vec![e]).await
            }));
        }
        for (i, call) in calls.into_iter().enumerate() {
            let result = call.await.unwrap();
            assert_eq!(
                result.is_err(),
                i == 20,
                "round {round} call {i}: {result:?}"
            );
        }
    }
    assert_eq!(store.event_count("s".into()).await.unwrap(), 3 * 39);
    assert_eq!(store.audit_summary().await.unwrap().head_seq, 3 * 39);
    store.close().await.unwrap();
}

/// Revokes are noted set-wise (`bulk::note_revocations`) and end as one by
/// one would: in one delivery, several of one subject fold to the last of
/// the newest by event time (a tie goes to the later), one without an event
/// time counts by arrival, and a stored newer revocation stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revokes_noted_set_wise_index_what_one_by_one_would() {
    use crate::revocations::AccessNote;
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let store = open(&db).await;
    store.watch_streams(names(&["s"]), at(0)).await.unwrap();
    let revoke = |id: &str, subject: &str, event_ms: Option<i64>, received_ms: i64| {
        let mut e = event("s", Some(id), "user.deleted", received_ms);
        e.event_time = event_ms.map(at);
        e.access = Some(AccessNote::Revoke {
            subject: subject.into(),
            organization: None,
        });
        e
    };
    store
        .record_events(vec![
            revoke("stored-u1", "u1", Some(9_000), 1_000),
            revoke("stored-u2", "u2", Some(6_000), 1_000),
        ])
        .await
        .unwrap();
    let outcomes = store
        .record_events(vec![
            revoke("a", "u0", Some(300), 7_000),
            revoke("b", "u0", Some(500), 7_000),
            revoke("c", "u0", Some(400), 7_000),
            revoke("d", "u0", Some(500), 7_000),
            revoke("e", "u1", Some(8_000), 7_000),
            revoke("f", "u2", None, 7_000),
            revoke("a", "u3", Some(9_999), 7_000),
        ])
        .await
        .unwrap();
    assert_eq!(
        outcomes.last(),
        Some(&EventOutcome::Duplicate),
        "a repeated delivery id notes nothing"
    );
    let latest = |subject: &str| store.latest_revocation("s".into(), subject.into());
    let id = |r: Option<crate::revocations::Revocation>| r.unwrap().delivery_id.unwrap();
    assert_eq!(id(latest("u0").await.unwrap()), "d", "last of the newest");
    assert_eq!(
        id(latest("u1").await.unwrap()),
        "stored-u1",
        "a stored newer one stays"
    );
    assert_eq!(
        id(latest("u2").await.unwrap()),
        "f",
        "no event time: its arrival counts"
    );
    assert_eq!(
        latest("u3").await.unwrap(),
        None,
        "a duplicate is not noted"
    );
    store.close().await.unwrap();
}
