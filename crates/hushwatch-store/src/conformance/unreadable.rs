//! Conformance cases for outbox rows this binary cannot read (an
//! `alert_kind` it does not know: queued by a newer
//! version mid-rollout, or altered at rest). Each is named in the read's
//! `unreadable` and held back alone: the pages beside it are read,
//! claimed and re-posted as usual, and no read fails as a whole.

use super::super::testdb::{at, names, transition, TestDb};
use super::super::*;
use super::manual;

backend_matrix!(
    an_unreadable_outbox_row_holds_back_only_its_own_queue,
    an_unreadable_firing_page_is_named_not_re_posted,
);

/// The id of stream `a`'s page to `notifier` in `state`.
fn id_of(rows: &[OutboxRow], notifier: &str, state: AlertState) -> i64 {
    rows.iter()
        .find(|r| r.notifier == notifier && r.state == state)
        .map(|r| r.id)
        .expect("that page is queued")
}

async fn an_unreadable_outbox_row_holds_back_only_its_own_queue(db: TestDb) {
    let clock = manual(10_000);
    let store = db.open_with_clock(clock.clone()).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    for to in [(AlertState::Firing, 1_000), (AlertState::Ok, 2_000)] {
        let t = transition(to.0, to.1, &["p", "q"]);
        assert!(store.record_transition(t).await.unwrap());
    }
    let all = store.pending_outbox().await.unwrap();
    assert!(all.unreadable.is_empty());
    let fire_p = id_of(&all.rows, "p", AlertState::Firing);
    let fire_q = id_of(&all.rows, "q", AlertState::Firing);
    let resolve_p = id_of(&all.rows, "p", AlertState::Ok);
    let resolve_q = id_of(&all.rows, "q", AlertState::Ok);
    let alert = all.rows[0].alert_id.clone();
    let queue = |id: i64, notifier: &str| {
        Some(QueuePlace {
            id,
            alert_id: alert.clone(),
            notifier: notifier.to_owned(),
        })
    };
    // q's firing page names a kind from a newer version (long enough to be
    // clipped), and so does p's resolve. (`page_kind` and `alert_state`
    // have CHECK constraints: no row can hold another value.)
    let newer = "from_a_newer_version_".repeat(20);
    db.alter_at_rest(&format!(
        "UPDATE outbox SET alert_kind = '{newer}' WHERE id = {fire_q};
         UPDATE outbox SET alert_kind = 'nudge' WHERE id = {resolve_p};"
    ))
    .await;

    let read = store.pending_outbox().await.unwrap();
    let ids: Vec<i64> = read.rows.iter().map(|r| r.id).collect();
    assert_eq!(ids, [fire_p, resolve_q], "the rest are read");
    let clipped: String = newer.chars().take(64).collect();
    assert_eq!(
        read.unreadable,
        [
            Unreadable {
                what: format!("outbox row {fire_q}"),
                why: format!("unknown alert_kind \"{clipped}…\""),
                queue: queue(fire_q, "q"),
            },
            Unreadable {
                what: format!("outbox row {resolve_p}"),
                why: "unknown alert_kind \"nudge\"".into(),
                queue: queue(resolve_p, "p"),
            },
        ]
    );

    // Claims: p's firing page goes out; q's queue waits behind its
    // unreadable head (its own alert only), which is let go again.
    let lease = chrono::TimeDelta::seconds(30);
    let mine = store.claim_outbox("r1".into(), lease, 10).await.unwrap();
    let claimed: Vec<i64> = mine.iter().map(|c| c.row.id).collect();
    assert_eq!(claimed, [fire_p]);
    let again = store.claim_outbox("r2".into(), lease, 10).await.unwrap();
    assert!(again.is_empty(), "{again:?}");

    // Delivering p's firing page makes its (unreadable) resolve the head:
    // still nothing else blocks, and the counts still read.
    let settled = store
        .settle_claim(
            mine[0].row.id,
            mine[0].token,
            Attempt::Delivered { at: at(10_000) },
        )
        .await
        .unwrap();
    assert!(settled);
    let read = store.pending_outbox().await.unwrap();
    assert_eq!(
        read.rows.iter().map(|r| r.id).collect::<Vec<_>>(),
        [resolve_q]
    );
    assert_eq!(read.unreadable.len(), 2);
    let summary = store.outbox_summary().await.unwrap();
    assert_eq!(
        summary.by_notifier["q"].pending, 2,
        "counted, though unreadable"
    );

    // Mended at rest (or sent by the newer replica): it reads again.
    db.alter_at_rest(&format!(
        "UPDATE outbox SET alert_kind = 'silence' WHERE id = {fire_q};"
    ))
    .await;
    let read = store.pending_outbox().await.unwrap();
    assert_eq!(read.unreadable.len(), 1);
    assert!(read.rows.iter().any(|r| r.id == fire_q));
    store.close().await.unwrap();
}

async fn an_unreadable_firing_page_is_named_not_re_posted(db: TestDb) {
    let store = db.open_with_clock(manual(10_000)).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let fire = transition(AlertState::Firing, 1_000, &["p", "q"]);
    assert!(store.record_transition(fire).await.unwrap());
    let rows = store.pending_outbox().await.unwrap().rows;
    for row in &rows {
        store.mark_outbox_done(row.id, at(2_000)).await.unwrap();
    }
    let fire_q = id_of(&rows, "q", AlertState::Firing);
    db.alter_at_rest(&format!(
        "UPDATE outbox SET alert_kind = 'from_a_newer_version' WHERE id = {fire_q};"
    ))
    .await;
    let active = store.active_firing_pages().await.unwrap();
    assert_eq!(
        active
            .rows
            .iter()
            .map(|r| r.notifier.as_str())
            .collect::<Vec<_>>(),
        ["p"]
    );
    assert_eq!(active.unreadable.len(), 1);
    assert_eq!(active.unreadable[0].what, format!("outbox row {fire_q}"));
    store.close().await.unwrap();
}
