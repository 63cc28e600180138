//! Conformance cases for `Idempotency-Key` records (`store::idempotency`,
//! issue #30), on every backend.

use std::sync::Arc;

use super::super::idempotency::{Begun, IdempotencyKey, StoredAnswer, LEASE, TTL};
use super::super::testdb::{at, TestDb};
use crate::clock::ManualClock;

backend_matrix!(
    a_key_is_claimed_once_then_replayed_or_refused,
    a_released_key_runs_again_and_a_stale_claim_is_taken_over,
    concurrent_begins_on_two_handles_claim_once,
    expired_records_are_claimable_and_pruned,
);

fn key(k: u8, request: u8) -> IdempotencyKey {
    IdempotencyKey {
        key_sha256: [k; 32],
        request_sha256: [request; 32],
    }
}

fn created() -> StoredAnswer {
    StoredAnswer {
        status: 201,
        content_type: "application/json".into(),
        body: r#"{"id":7}"#.into(),
    }
}

async fn a_key_is_claimed_once_then_replayed_or_refused(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(1_000_000)));
    let store = db.open_with_clock(clock.clone()).await;
    let Begun::Claimed(started) = store.idempotency_begin(key(1, 1)).await.unwrap() else {
        panic!("a new key is claimed");
    };
    assert_eq!(started, at(1_000_000));
    // While it runs: the same request waits, another request is refused.
    assert_eq!(
        store.idempotency_begin(key(1, 1)).await.unwrap(),
        Begun::Running
    );
    assert_eq!(
        store.idempotency_begin(key(1, 2)).await.unwrap(),
        Begun::Mismatch
    );
    assert!(store
        .idempotency_finish(key(1, 1), started, created())
        .await
        .unwrap());
    // Finishing twice, or releasing a finished record, changes nothing.
    assert!(!store
        .idempotency_finish(key(1, 1), started, created())
        .await
        .unwrap());
    assert!(!store.idempotency_release(key(1, 1), started).await.unwrap());
    let second = db.open_second_with_clock(&store, clock.clone()).await;
    assert_eq!(
        second.idempotency_begin(key(1, 1)).await.unwrap(),
        Begun::Done(created())
    );
    assert_eq!(
        second.idempotency_begin(key(1, 2)).await.unwrap(),
        Begun::Mismatch
    );
    // Another key is its own record.
    assert!(matches!(
        second.idempotency_begin(key(2, 1)).await.unwrap(),
        Begun::Claimed(_)
    ));
    second.close().await.unwrap();
    store.close().await.unwrap();
}

async fn a_released_key_runs_again_and_a_stale_claim_is_taken_over(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(5_000_000)));
    let store = db.open_with_clock(clock.clone()).await;
    let Begun::Claimed(first) = store.idempotency_begin(key(3, 1)).await.unwrap() else {
        panic!("claimed");
    };
    assert!(store.idempotency_release(key(3, 1), first).await.unwrap());
    // Released: the retry runs, even with another body.
    let Begun::Claimed(second) = store.idempotency_begin(key(3, 2)).await.unwrap() else {
        panic!("a released key is claimed again");
    };
    // A claim whose caller died is taken over once its lease ran out...
    clock.advance(LEASE - chrono::TimeDelta::milliseconds(1));
    assert_eq!(
        store.idempotency_begin(key(3, 2)).await.unwrap(),
        Begun::Running
    );
    clock.advance(chrono::TimeDelta::milliseconds(1));
    let Begun::Claimed(third) = store.idempotency_begin(key(3, 2)).await.unwrap() else {
        panic!("a stale claim is taken over");
    };
    assert_ne!(second, third);
    // ...and the overtaken caller can neither store its answer nor delete
    // the new claim.
    assert!(!store
        .idempotency_finish(key(3, 2), second, created())
        .await
        .unwrap());
    assert!(!store.idempotency_release(key(3, 2), second).await.unwrap());
    assert!(store
        .idempotency_finish(key(3, 2), third, created())
        .await
        .unwrap());
    // A finished record is never taken over within its TTL.
    clock.advance(LEASE * 10);
    assert_eq!(
        store.idempotency_begin(key(3, 2)).await.unwrap(),
        Begun::Done(created())
    );
    store.close().await.unwrap();
}

async fn concurrent_begins_on_two_handles_claim_once(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(9_000_000)));
    let first = db.open_with_clock(clock.clone()).await;
    let second = db.open_second_with_clock(&first, clock.clone()).await;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let store = if i % 2 == 0 {
            first.clone()
        } else {
            second.clone()
        };
        tasks.push(tokio::spawn(async move {
            store.idempotency_begin(key(4, 1)).await.unwrap()
        }));
    }
    let mut claimed = 0;
    for t in tasks {
        match t.await.unwrap() {
            Begun::Claimed(_) => claimed += 1,
            Begun::Running => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(claimed, 1, "exactly one of 20 concurrent calls runs");
    second.close().await.unwrap();
    first.close().await.unwrap();
}

async fn expired_records_are_claimable_and_pruned(db: TestDb) {
    let clock = Arc::new(ManualClock::new(at(20_000_000)));
    let store = db.open_with_clock(clock.clone()).await;
    for k in [5, 6] {
        let Begun::Claimed(started) = store.idempotency_begin(key(k, 1)).await.unwrap() else {
            panic!("claimed");
        };
        assert!(store
            .idempotency_finish(key(k, 1), started, created())
            .await
            .unwrap());
    }
    clock.advance(TTL - chrono::TimeDelta::milliseconds(1));
    assert_eq!(store.prune_idempotency().await.unwrap(), 0);
    assert_eq!(
        store.idempotency_begin(key(5, 1)).await.unwrap(),
        Begun::Done(created())
    );
    clock.advance(chrono::TimeDelta::milliseconds(1));
    // Expired but not yet pruned: the key runs anew, even with another body.
    assert!(matches!(
        store.idempotency_begin(key(5, 2)).await.unwrap(),
        Begun::Claimed(_)
    ));
    // Pruned: only the expired one (key 5 was just claimed again).
    assert_eq!(store.prune_idempotency().await.unwrap(), 1);
    assert_eq!(store.prune_idempotency().await.unwrap(), 0);
    assert!(matches!(
        store.idempotency_begin(key(6, 1)).await.unwrap(),
        Begun::Claimed(_)
    ));
    store.close().await.unwrap();
}
