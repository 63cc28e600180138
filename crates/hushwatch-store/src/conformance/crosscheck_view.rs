//! Conformance cases for the cross-check's read views
//! (`store::crosscheck_view`, issue #45), on every backend.

use super::super::crosscheck::{CrosscheckRow, PollEnd};
use super::super::testdb::{at, TestDb};
use hushwatch_core::domain::crosscheck::{Direction, Entry, Finding, When};

backend_matrix!(
    the_overview_counts_open_findings_by_direction_per_stream,
    findings_are_found_by_subject_or_organization_exactly_and_in_order,
    a_dry_run_asks_which_findings_are_known_and_drops_only_its_scratch_generation,
);

fn finding(key: &str, direction: Direction, subject: &str, org: Option<&str>) -> Finding {
    Finding {
        key: key.into(),
        direction,
        event_type: "organizationMembership.deleted".into(),
        subject: subject.into(),
        organization: org.map(Into::into),
        provider_id: None,
        when: When::Between(at(1_000), at(2_000)),
    }
}

async fn the_overview_counts_open_findings_by_direction_per_stream(db: TestDb) {
    let store = db.open().await;
    assert!(store.crosscheck_overview().await.unwrap().is_empty());
    let s = "identity".to_string();
    store
        .crosscheck_finish_poll(
            s.clone(),
            None,
            PollEnd::Success {
                at: at(5_000),
                log_cursor: None,
                generation: 1,
                pending: Vec::new(),
            },
        )
        .await
        .unwrap();
    store
        .crosscheck_record_findings(
            s.clone(),
            vec![
                finding("k1", Direction::Revoke, "user_1", Some("org_9")),
                finding("k2", Direction::Revoke, "user_2", Some("org_9")),
                finding("k3", Direction::Grant, "user_3", None),
                finding("k4", Direction::Other, "user_4", None),
            ],
            at(6_000),
        )
        .await
        .unwrap();
    // Findings of a stream whose poll end never committed still count.
    store
        .crosscheck_record_findings(
            "workforce".into(),
            vec![finding("w1", Direction::Revoke, "directory_user_1", None)],
            at(7_000),
        )
        .await
        .unwrap();
    assert!(store
        .crosscheck_settle_finding(s.clone(), "k2".into(), true)
        .await
        .unwrap());
    let all = store.crosscheck_overview().await.unwrap();
    let names: Vec<&str> = all.iter().map(|o| o.stream.as_str()).collect();
    assert_eq!(names, ["identity", "workforce"]);
    let o = &all[0];
    assert_eq!(
        (o.open_revoke, o.open_grant, o.open_other, o.open()),
        (1, 1, 1, 3)
    );
    assert_eq!(o.newest_open_at, Some(at(6_000)));
    assert_eq!(
        (o.row.generation, o.row.healed, o.row.last_success_at),
        (1, 1, Some(at(5_000)))
    );
    let w = &all[1];
    assert_eq!(
        (w.open_revoke, w.row.clone()),
        (1, CrosscheckRow::default())
    );
    store.close().await.unwrap();
}

async fn findings_are_found_by_subject_or_organization_exactly_and_in_order(db: TestDb) {
    let store = db.open().await;
    store
        .crosscheck_record_findings(
            "identity".into(),
            vec![
                finding("k1", Direction::Revoke, "user_1", Some("org_9")),
                // `_` and `%` are LIKE's wildcards; case differs.
                finding("k2", Direction::Revoke, "userX1", Some("org_9")),
                finding("k3", Direction::Grant, "USER_1", None),
                finding("k4", Direction::Revoke, "user_1%", None),
                finding("k5", Direction::Revoke, "user_\"1\\", None),
            ],
            at(6_000),
        )
        .await
        .unwrap();
    store
        .crosscheck_record_findings(
            "other".into(),
            vec![finding("o1", Direction::Revoke, "user_1", None)],
            at(5_000),
        )
        .await
        .unwrap();
    let keys = |v: Vec<(String, super::super::crosscheck::StoredFinding)>| {
        v.into_iter()
            .map(|(s, f)| format!("{s}/{}", f.finding.key))
            .collect::<Vec<_>>()
    };
    let found = store
        .crosscheck_subject_findings(vec!["user_1".into()], 10)
        .await
        .unwrap();
    assert_eq!(keys(found), ["other/o1", "identity/k1"]);
    let by_org = store
        .crosscheck_subject_findings(vec!["org_9".into()], 10)
        .await
        .unwrap();
    assert_eq!(keys(by_org), ["identity/k1", "identity/k2"]);
    let odd = store
        .crosscheck_subject_findings(vec!["user_\"1\\".into(), "nobody".into()], 10)
        .await
        .unwrap();
    assert_eq!(keys(odd), ["identity/k5"]);
    let capped = store
        .crosscheck_subject_findings(vec!["org_9".into()], 1)
        .await
        .unwrap();
    assert_eq!(capped.len(), 1);
    store.close().await.unwrap();
}

async fn a_dry_run_asks_which_findings_are_known_and_drops_only_its_scratch_generation(db: TestDb) {
    let store = db.open().await;
    let s = "identity".to_string();
    store
        .crosscheck_record_findings(
            s.clone(),
            vec![finding("k1", Direction::Revoke, "user_1", None)],
            at(6_000),
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .crosscheck_known_findings(s.clone(), vec!["k2".into(), "k1".into()])
            .await
            .unwrap(),
        [false, true]
    );
    assert_eq!(
        store
            .crosscheck_known_findings("other".into(), vec!["k1".into()])
            .await
            .unwrap(),
        [false]
    );
    let user = |u: &str| Entry::User { user: u.into() };
    store
        .crosscheck_put_snapshot(s.clone(), 1, vec![(user("u1"), None)])
        .await
        .unwrap();
    store
        .crosscheck_finish_poll(
            s.clone(),
            None,
            PollEnd::Success {
                at: at(5_000),
                log_cursor: None,
                generation: 1,
                pending: Vec::new(),
            },
        )
        .await
        .unwrap();
    store
        .crosscheck_put_snapshot(s.clone(), -7, vec![(user("u1"), None), (user("u2"), None)])
        .await
        .unwrap();
    assert_eq!(
        store
            .crosscheck_drop_generation(s.clone(), -7)
            .await
            .unwrap(),
        2
    );
    assert!(!store
        .crosscheck_snapshot_has(s.clone(), -7, user("u2"))
        .await
        .unwrap());
    // The generation the state points at is never dropped.
    assert_eq!(
        store
            .crosscheck_drop_generation(s.clone(), 1)
            .await
            .unwrap(),
        0
    );
    assert!(store
        .crosscheck_snapshot_has(s.clone(), 1, user("u1"))
        .await
        .unwrap());
    store.close().await.unwrap();
}
