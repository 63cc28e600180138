//! Conformance cases for acknowledge-link codes (`store::ack_codes`,
//! issue #30), on every backend.

use super::super::ack_codes::{LinkState, LinkUse};
use super::super::testdb::{at, names, transition, TestDb};
use super::super::*;
use super::manual;
use chrono::TimeDelta;

backend_matrix!(
    every_minted_code_works_until_one_is_used_then_the_others_say_acknowledged,
    codes_expire_end_with_their_episode_and_are_pruned,
    concurrent_confirmations_on_two_handles_acknowledge_once,
);

const TTL: TimeDelta = TimeDelta::hours(24);

fn code(n: u8) -> [u8; 32] {
    [n; 32]
}

async fn firing(store: &Store, ms: i64) {
    assert!(store
        .record_transition(transition(AlertState::Firing, ms, &["p"]))
        .await
        .unwrap());
}

fn acks(store_acks: &[silences::AckRow]) -> Vec<(&str, &str)> {
    store_acks
        .iter()
        .map(|a| (a.stream.as_str(), a.created_by.as_str()))
        .collect()
}

async fn every_minted_code_works_until_one_is_used_then_the_others_say_acknowledged(db: TestDb) {
    let clock = manual(1_000);
    let store = db.open_with_clock(clock.clone()).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    // Not firing: nothing to mint for.
    assert!(!store
        .mint_ack_code(code(1), "a".into(), at(5_000), TTL)
        .await
        .unwrap());
    firing(&store, 5_000).await;
    for n in 1..=3 {
        assert!(store
            .mint_ack_code(code(n), "a".into(), at(5_000), TTL)
            .await
            .unwrap());
    }
    // An older episode's start is refused too.
    assert!(!store
        .mint_ack_code(code(9), "a".into(), at(4_000), TTL)
        .await
        .unwrap());
    let open = LinkState::Open {
        stream: "a".into(),
        started_at: at(5_000),
    };
    for n in 1..=3 {
        assert_eq!(store.open_ack_code(code(n)).await.unwrap(), open);
    }
    assert_eq!(
        store.open_ack_code(code(7)).await.unwrap(),
        LinkState::Unknown
    );
    assert!(
        store.current_acks().await.unwrap().is_empty(),
        "opening acknowledges nothing"
    );
    assert_eq!(
        store.confirm_ack_code(code(2), true).await.unwrap(),
        LinkUse::Acknowledged {
            stream: "a".into(),
            started_at: at(5_000)
        }
    );
    assert_eq!(
        acks(&store.current_acks().await.unwrap()),
        vec![("a", "link")]
    );
    assert_eq!(
        store.audit_summary().await.unwrap().head_seq,
        1,
        "audited once"
    );
    // The used code is gone; its siblings say the episode is acknowledged.
    assert_eq!(
        store.open_ack_code(code(2)).await.unwrap(),
        LinkState::Unknown
    );
    assert_eq!(
        store.confirm_ack_code(code(2), true).await.unwrap(),
        LinkUse::Unknown
    );
    let already = LinkUse::AlreadyAcknowledged {
        stream: "a".into(),
        started_at: at(5_000),
    };
    assert_eq!(
        store.confirm_ack_code(code(1), true).await.unwrap(),
        already
    );
    assert_eq!(
        store.confirm_ack_code(code(3), true).await.unwrap(),
        already
    );
    assert_eq!(
        store.audit_summary().await.unwrap().head_seq,
        1,
        "still once"
    );
    // A code minted after the use (a reminder) also says so.
    assert!(store
        .mint_ack_code(code(4), "a".into(), at(5_000), TTL)
        .await
        .unwrap());
    assert_eq!(
        store.confirm_ack_code(code(4), true).await.unwrap(),
        already
    );
    store.close().await.unwrap();
}

async fn codes_expire_end_with_their_episode_and_are_pruned(db: TestDb) {
    let clock = manual(1_000);
    let store = db.open_with_clock(clock.clone()).await;
    store
        .watch_streams(names(&["a", "b"]), at(0))
        .await
        .unwrap();
    firing(&store, 5_000).await;
    assert!(store
        .record_transition({
            let mut t = transition(AlertState::Firing, 5_000, &["p"]);
            t.stream = "b".into();
            t
        })
        .await
        .unwrap());
    let short = TimeDelta::seconds(10);
    assert!(store
        .mint_ack_code(code(1), "a".into(), at(5_000), short)
        .await
        .unwrap());
    assert!(store
        .mint_ack_code(code(2), "b".into(), at(5_000), TTL)
        .await
        .unwrap());
    clock.set(at(11_000));
    assert_eq!(
        store.open_ack_code(code(1)).await.unwrap(),
        LinkState::Unknown,
        "expired exactly at its ttl"
    );
    assert_eq!(
        store.confirm_ack_code(code(1), true).await.unwrap(),
        LinkUse::Unknown
    );
    assert!(store.current_acks().await.unwrap().is_empty());
    // Minting deletes the expired codes (of any episode).
    assert!(store
        .mint_ack_code(code(3), "a".into(), at(5_000), TTL)
        .await
        .unwrap());
    assert_eq!(
        store.prune_ack_codes().await.unwrap(),
        0,
        "minting pruned it"
    );
    // b resolves: its code stops working and housekeeping deletes it.
    assert!(store
        .record_transition({
            let mut t = transition(AlertState::Ok, 12_000, &["p"]);
            t.stream = "b".into();
            t
        })
        .await
        .unwrap());
    assert_eq!(
        store.open_ack_code(code(2)).await.unwrap(),
        LinkState::Unknown
    );
    assert_eq!(store.prune_ack_codes().await.unwrap(), 1);
    assert_eq!(
        store.open_ack_code(code(3)).await.unwrap(),
        LinkState::Open {
            stream: "a".into(),
            started_at: at(5_000)
        }
    );
    clock.set(at(11_000 + TTL.num_milliseconds()));
    assert_eq!(store.prune_ack_codes().await.unwrap(), 1, "expired");
    store.close().await.unwrap();
}

async fn concurrent_confirmations_on_two_handles_acknowledge_once(db: TestDb) {
    let clock = manual(1_000);
    let store = db.open_with_clock(clock.clone()).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    firing(&store, 5_000).await;
    let other = db.open_second_with_clock(&store, clock.clone()).await;
    for n in 1..=4 {
        assert!(store
            .mint_ack_code(code(n), "a".into(), at(5_000), TTL)
            .await
            .unwrap());
    }
    // Each code twice, all at once, half on each handle.
    let uses: Vec<_> = (0..8u8)
        .map(|i| {
            let s = if i % 2 == 0 {
                store.clone()
            } else {
                other.clone()
            };
            tokio::spawn(async move { s.confirm_ack_code(code(i / 2 + 1), true).await.unwrap() })
        })
        .collect();
    let mut acknowledged = 0;
    for u in uses {
        match u.await.unwrap() {
            LinkUse::Acknowledged { .. } => acknowledged += 1,
            LinkUse::AlreadyAcknowledged { .. } | LinkUse::Unknown => {}
        }
    }
    assert_eq!(acknowledged, 1);
    assert_eq!(store.audit_summary().await.unwrap().head_seq, 1);
    assert_eq!(
        acks(&store.current_acks().await.unwrap()),
        vec![("a", "link")]
    );
    other.close().await.unwrap();
    store.close().await.unwrap();
}
