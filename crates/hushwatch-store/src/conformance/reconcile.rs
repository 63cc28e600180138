//! Conformance cases for reconciliation reports and their alerts
//! (`store::reconcile`), on every backend.

use super::super::reconcile::{Drift, NewReconciliation, ReconcileTransition};
use super::super::testdb::{at, event, names, TestDb};
use super::super::*;
use super::manual;

backend_matrix!(
    a_report_is_stored_once_and_audited_once,
    a_revoke_missed_page_is_queued_with_a_new_report_only,
    the_missing_reconciliation_alert_moves_by_compare_and_set,
    subject_entries_find_exact_subjects_newest_first,
    a_stale_grant_is_recorded_and_paged_once,
    the_latest_report_per_stream_is_read_with_its_drift_counts,
);

fn report(id: &str, page: bool) -> NewReconciliation {
    let mut entry = event("a", Some(id), "reconciliation", 1_000);
    entry.feeds_clock = false;
    entry.channel = "reconciliation";
    entry.subject_ids = vec![("revoke_missed:0".into(), "user_1".into())];
    NewReconciliation {
        stream: "a".into(),
        id: id.into(),
        started_at: at(500),
        finished_at: at(900),
        checked: 10,
        drift: vec![Drift {
            subject: "user_1".into(),
            kind: "revoke_missed".into(),
            fixed: true,
            detail: None,
        }],
        entry: Some(entry),
        page: page.then(|| Transition {
            stream: "a".into(),
            to: AlertState::Firing,
            at: at(1_000),
            reason: "missed user_1".into(),
            notifiers: names(&["p"]),
        }),
    }
}

async fn a_report_is_stored_once_and_audited_once(db: TestDb) {
    let clock = manual(1_000);
    let store = db.open_with_clock(clock.clone()).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    assert!(store
        .record_reconciliation(report("r1", false))
        .await
        .unwrap());
    assert!(!store
        .record_reconciliation(report("r1", false))
        .await
        .unwrap());
    assert_eq!(store.audit_summary().await.unwrap().head_seq, 1);
    let rows = store.reconcile_states().await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].last_report_at, Some(at(1_000)));
    assert_eq!(rows[0].state, AlertState::Ok);
    // The last report instant only moves forward (a replica whose clock is
    // behind does not move it back).
    for (now, id, last) in [(500, "r2", 1_000), (3_000, "r3", 3_000)] {
        clock.set(at(now));
        let report = report(id, false);
        assert!(store.record_reconciliation(report).await.unwrap());
        let states = store.reconcile_states().await.unwrap();
        assert_eq!(
            states[0].last_report_at,
            Some(at(last)),
            "a report at {now}"
        );
    }
    store.close().await.unwrap();
}

async fn a_revoke_missed_page_is_queued_with_a_new_report_only(db: TestDb) {
    let store = db.open_with_clock(manual(1_000)).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    assert!(store
        .record_reconciliation(report("r1", true))
        .await
        .unwrap());
    assert!(!store
        .record_reconciliation(report("r1", true))
        .await
        .unwrap());
    let pending = store.pending_outbox().await.unwrap().rows;
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].reason, "missed user_1");
    assert!(store
        .record_reconciliation(report("r2", true))
        .await
        .unwrap());
    assert_eq!(
        store.pending_outbox().await.unwrap().rows.len(),
        2,
        "one per report"
    );
    store.close().await.unwrap();
}

async fn the_missing_reconciliation_alert_moves_by_compare_and_set(db: TestDb) {
    let store = db.open_with_clock(manual(1_000)).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let t = |to: AlertState| ReconcileTransition {
        stream: "a".into(),
        to,
        reason: "not run".into(),
        notifiers: names(&["p", "q"]),
        at: at(2_000),
    };
    assert!(!store.reconcile_transition(t(AlertState::Ok)).await.unwrap());
    assert!(store
        .reconcile_transition(t(AlertState::Firing))
        .await
        .unwrap());
    assert!(!store
        .reconcile_transition(t(AlertState::Firing))
        .await
        .unwrap());
    assert_eq!(store.pending_outbox().await.unwrap().rows.len(), 2);
    assert_eq!(
        store.reconcile_states().await.unwrap()[0].state,
        AlertState::Firing
    );
    assert!(store.reconcile_transition(t(AlertState::Ok)).await.unwrap());
    assert_eq!(store.pending_outbox().await.unwrap().rows.len(), 4);
    // The alert made the row without a report: the first report sets it.
    assert_eq!(
        store.reconcile_states().await.unwrap()[0].last_report_at,
        None
    );
    assert!(store
        .record_reconciliation(report("r1", false))
        .await
        .unwrap());
    assert_eq!(
        store.reconcile_states().await.unwrap()[0].last_report_at,
        Some(at(1_000))
    );
    store.close().await.unwrap();
}

async fn subject_entries_find_exact_subjects_newest_first(db: TestDb) {
    let store = db.open_with_clock(manual(1_000)).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let mut events = Vec::new();
    for (i, (ty, subject)) in [
        ("organizationMembership.created", "user_1"),
        ("organizationMembership.deleted", "user_1"),
        ("user.deleted", "user_10"),
    ]
    .iter()
    .enumerate()
    {
        let mut e = event("a", Some(&format!("m{i}")), ty, 1_000 + i as i64);
        e.subject_ids = vec![("user_id".into(), (*subject).into())];
        events.push(e);
    }
    store.record_events(events).await.unwrap();
    let found = store
        .subject_entries("user_1".into(), None, 10)
        .await
        .unwrap();
    let types: Vec<&str> = found.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "organizationMembership.deleted",
            "organizationMembership.created"
        ]
    );
    assert_eq!(found[0].delivery_id.as_deref(), Some("m1"));
    assert_eq!(found[0].received_at, at(1_001));
    let limited = store
        .subject_entries("user_1".into(), None, 1)
        .await
        .unwrap();
    assert_eq!(limited.len(), 1);
    let window = |stream: &str, ms: i64| Some((stream.to_owned(), at(ms)));
    let recent = store.subject_entries("user_1".into(), window("a", 1_001), 10);
    assert_eq!(
        recent.await.unwrap().len(),
        1,
        "received at or after 1.001 s"
    );
    let other = store.subject_entries("user_1".into(), window("b", 0), 10);
    assert!(other.await.unwrap().is_empty(), "another stream");
    assert_eq!(
        found[0].subject_ids,
        vec![("user_id".to_owned(), "user_1".to_owned())]
    );
    store.close().await.unwrap();
}

async fn a_stale_grant_is_recorded_and_paged_once(db: TestDb) {
    use super::super::reconcile::StaleGrant;
    let store = db.open_with_clock(manual(1_000)).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let g = StaleGrant {
        stream: "a".into(),
        delivery_id: "msg_grant".into(),
        subject: "user_1".into(),
        grant_event_time: at(500),
        revoke_seq: 1,
        revoke_delivery_id: Some("msg_revoke".into()),
        page: Transition {
            stream: "a".into(),
            to: AlertState::Firing,
            at: at(1_000),
            reason: "stale".into(),
            notifiers: names(&["p"]),
        },
    };
    assert!(store.record_stale_grant(g.clone()).await.unwrap());
    assert!(!store.record_stale_grant(g).await.unwrap());
    let pending = store.pending_outbox().await.unwrap().rows;
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].reason, "stale");
    store.close().await.unwrap();
}

async fn the_latest_report_per_stream_is_read_with_its_drift_counts(db: TestDb) {
    let clock = manual(1_000);
    let store = db.open_with_clock(clock.clone()).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    assert!(store.latest_reconciliations().await.unwrap().is_empty());
    assert!(store
        .record_reconciliation(report("r1", false))
        .await
        .unwrap());
    clock.set(at(2_000));
    let mut second = report("r2", false);
    second.checked = 20;
    second.drift.push(Drift {
        subject: "user_2".into(),
        kind: "grant_missed".into(),
        fixed: false,
        detail: None,
    });
    assert!(store.record_reconciliation(second).await.unwrap());
    let latest = store.latest_reconciliations().await.unwrap();
    assert_eq!(latest.len(), 1);
    assert_eq!(latest[0].id, "r2");
    assert_eq!(latest[0].received_at, at(2_000));
    assert_eq!(latest[0].finished_at, at(900));
    assert_eq!(latest[0].checked, 20);
    let counts: Vec<(&str, u64)> = latest[0]
        .drift
        .iter()
        .map(|(k, n)| (k.as_str(), *n))
        .collect();
    assert_eq!(counts, [("grant_missed", 1), ("revoke_missed", 1)]);
    store.close().await.unwrap();
}
