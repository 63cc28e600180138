//! Conformance cases for the per-subject revocation index and the stale
//! grants it finds inside the ingest transaction (`store::revocations`).

use super::super::revocations::{AccessNote, StalePage};
use super::super::testdb::{at, event, names, TestDb};
use super::super::*;
use super::manual;

backend_matrix!(
    the_newest_revocation_per_subject_and_organization_is_indexed_without_audit,
    a_grant_older_than_an_indexed_revocation_is_recorded_and_paged_with_it,
    old_revocations_are_pruned,
    a_grant_is_checked_against_revocations_stored_under_its_earlier_forms,
);

fn revoke(id: &str, org: Option<&str>, event_ms: i64, received_ms: i64) -> NewEvent {
    let mut e = event("a", Some(id), "organizationMembership.deleted", received_ms);
    e.event_time = Some(at(event_ms));
    e.audit = false;
    e.access = Some(AccessNote::Revoke {
        subject: "user_1".into(),
        organization: org.map(str::to_owned),
    });
    e
}

fn grant(id: &str, org: Option<&str>, event_ms: i64, received_ms: i64) -> NewEvent {
    let mut e = event("a", Some(id), "organizationMembership.created", received_ms);
    e.event_time = Some(at(event_ms));
    e.access = Some(AccessNote::Grant {
        subject: "user_1".into(),
        organization: org.map(str::to_owned),
        page: StalePage {
            notifiers: names(&["p"]),
            zone: chrono_tz::Asia::Tokyo,
        },
        earlier: Vec::new(),
    });
    e
}

async fn the_newest_revocation_per_subject_and_organization_is_indexed_without_audit(db: TestDb) {
    let store = db.open_with_clock(manual(10_000)).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let latest = || store.latest_revocation("a".into(), "user_1".into());
    assert_eq!(latest().await.unwrap(), None);
    store
        .record_events(vec![revoke("r1", Some("org_1"), 2_000, 3_000)])
        .await
        .unwrap();
    // An older revocation arriving later does not replace the newer one.
    store
        .record_events(vec![revoke("r0", Some("org_1"), 1_000, 4_000)])
        .await
        .unwrap();
    let found = latest().await.unwrap().unwrap();
    assert_eq!(found.delivery_id.as_deref(), Some("r1"));
    assert_eq!(found.event_time, Some(at(2_000)));
    assert_eq!(found.organization.as_deref(), Some("org_1"));
    assert_eq!(found.event_type, "organizationMembership.deleted");
    // Another organization is its own row; the latest received answers.
    store
        .record_events(vec![revoke("r2", Some("org_2"), 1_500, 5_000)])
        .await
        .unwrap();
    let found = latest().await.unwrap().unwrap();
    assert_eq!(found.delivery_id.as_deref(), Some("r2"));
    assert_eq!(found.received_at, at(5_000));
    // Nothing about another stream or subject; the audit log stayed empty.
    let other = store.latest_revocation("b".into(), "user_1".into());
    assert_eq!(other.await.unwrap(), None);
    let other = store.latest_revocation("a".into(), "user_2".into());
    assert_eq!(other.await.unwrap(), None);
    assert_eq!(store.audit_summary().await.unwrap().head_seq, 0);
    store.close().await.unwrap();
}

async fn a_grant_older_than_an_indexed_revocation_is_recorded_and_paged_with_it(db: TestDb) {
    let store = db.open_with_clock(manual(10_000)).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let recorded = |id: &str| store.stale_grant_recorded_at("a".into(), id.into());
    // Revoked in org_1 at event time 2 s; a grant there at 1 s is stale,
    // and revocation and grant in one delivery count in order.
    let outcomes = store
        .record_events(vec![
            revoke("r1", Some("org_1"), 2_000, 3_000),
            grant("g1", Some("org_1"), 1_000, 3_000),
        ])
        .await
        .unwrap();
    assert_eq!(outcomes, vec![EventOutcome::Accepted; 2]);
    assert_eq!(recorded("g1").await.unwrap(), Some(at(3_000)));
    let pending = store.pending_outbox().await.unwrap().rows;
    assert_eq!(pending.len(), 1);
    let reason = &pending[0].reason;
    assert!(reason.contains("a grant for user_1 arrived after its revocation"));
    assert!(reason.contains("g1") && reason.contains("r1"), "{reason}");
    assert!(reason.contains("1970-01-01 09:00:01 JST"), "{reason}");
    // Not stale: newer than the revocation, or in another organization.
    store
        .record_events(vec![
            grant("g2", Some("org_1"), 2_001, 4_000),
            grant("g3", Some("org_2"), 1_000, 4_000),
        ])
        .await
        .unwrap();
    assert_eq!(recorded("g2").await.unwrap(), None);
    assert_eq!(recorded("g3").await.unwrap(), None);
    // A revocation naming no organization covers every one.
    store
        .record_events(vec![
            revoke("r2", None, 5_000, 6_000),
            grant("g4", Some("org_2"), 4_000, 6_000),
        ])
        .await
        .unwrap();
    assert_eq!(recorded("g4").await.unwrap(), Some(at(6_000)));
    // The same delivery again is a duplicate: no second record or page.
    let again = store
        .record_events(vec![grant("g4", Some("org_2"), 4_000, 7_000)])
        .await
        .unwrap();
    assert_eq!(again, vec![EventOutcome::Duplicate]);
    assert_eq!(recorded("g4").await.unwrap(), Some(at(6_000)));
    assert_eq!(store.pending_outbox().await.unwrap().rows.len(), 2);
    store.close().await.unwrap();
}

async fn old_revocations_are_pruned(db: TestDb) {
    let store = db.open_with_clock(manual(10_000)).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let mut other = revoke("r2", None, 4_000, 5_000);
    other.access = Some(AccessNote::Revoke {
        subject: "user_2".into(),
        organization: None,
    });
    store
        .record_events(vec![revoke("r1", None, 500, 1_000), other])
        .await
        .unwrap();
    assert_eq!(store.prune_revocations(at(3_000)).await.unwrap(), 1);
    let gone = store.latest_revocation("a".into(), "user_1".into());
    assert_eq!(gone.await.unwrap(), None);
    let kept = store.latest_revocation("a".into(), "user_2".into());
    assert!(kept.await.unwrap().is_some());
    store.close().await.unwrap();
}

/// `[store] encryption_key` (`store::veil`): a revocation stored in
/// plaintext, or veiled under a key since rotated, is still found for a
/// grant stored under the newest form, through the forms the grant lists
/// as `earlier` (subject and organization in step).
async fn a_grant_is_checked_against_revocations_stored_under_its_earlier_forms(db: TestDb) {
    let store = db.open_with_clock(manual(10_000)).await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let recorded = |id: &str| store.stale_grant_recorded_at("a".into(), id.into());
    let mut old = revoke("r1", Some("org_old"), 2_000, 3_000);
    old.access = Some(AccessNote::Revoke {
        subject: "user_old".into(),
        organization: Some("org_old".into()),
    });
    store.record_events(vec![old]).await.unwrap();
    let with_earlier = |id: &str, earlier: Vec<(String, Option<String>)>| {
        let mut g = grant(id, Some("org_new"), 1_000, 4_000);
        if let Some(AccessNote::Grant {
            subject,
            organization,
            earlier: e,
            ..
        }) = &mut g.access
        {
            *subject = "user_new".into();
            *organization = Some("org_new".into());
            *e = earlier;
        }
        g
    };
    // Without the earlier forms the revocation is not the grant's.
    store
        .record_events(vec![with_earlier("g1", Vec::new())])
        .await
        .unwrap();
    assert_eq!(recorded("g1").await.unwrap(), None);
    // An earlier form pairs subject and organization: a mismatched pair
    // finds nothing, the matching one finds the revocation.
    let mismatched = vec![("user_old".to_string(), Some("org_other".to_string()))];
    store
        .record_events(vec![with_earlier("g2", mismatched)])
        .await
        .unwrap();
    assert_eq!(recorded("g2").await.unwrap(), None);
    let matching = vec![
        ("user_other".to_string(), None),
        ("user_old".to_string(), Some("org_old".to_string())),
    ];
    store
        .record_events(vec![with_earlier("g3", matching)])
        .await
        .unwrap();
    assert_eq!(recorded("g3").await.unwrap(), Some(at(4_000)));
    // The page names the grant's subject as stored now (the veiled form,
    // which `Page::from_row` reveals).
    let pending = store.pending_outbox().await.unwrap().rows;
    assert_eq!(pending.len(), 1);
    assert!(
        pending[0].reason.contains("a grant for user_new arrived"),
        "{}",
        pending[0].reason
    );
    store.close().await.unwrap();
}
