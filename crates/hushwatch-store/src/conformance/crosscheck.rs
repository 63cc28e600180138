//! Conformance cases for the cross-check's state (`store::crosscheck`,
//! issue #45), on every backend.

use super::super::crosscheck::{CrosscheckRow, PageTarget, PollEnd};
use super::super::testdb::{at, event, TestDb};
use hushwatch_core::domain::crosscheck::{Change, Direction, Entry, Finding, Pending, When};
use hushwatch_core::domain::crosscheck::{PollHealth, Provider};

backend_matrix!(
    snapshots_are_compared_by_the_database_and_only_the_complete_generation_is_kept,
    a_poll_commits_once_and_a_concurrent_one_is_refused,
    findings_are_stored_once_across_handles_and_settle_once,
    the_join_sees_ids_received_on_the_webhook_channel_only_of_its_stream,
    findings_are_paged_once_across_handles_and_their_page_resolves_when_all_are_settled,
    the_failing_alert_pages_when_it_starts_or_changes_severity_and_resolves_once,
    a_logged_finding_keeps_its_first_body_until_it_is_settled,
);

fn user(u: &str) -> Entry {
    Entry::User { user: u.into() }
}

fn member(o: &str, u: &str) -> Entry {
    Entry::Membership {
        organization: o.into(),
        user: u.into(),
    }
}

async fn snapshots_are_compared_by_the_database_and_only_the_complete_generation_is_kept(
    db: TestDb,
) {
    let store = db.open().await;
    let s = "identity".to_string();
    store
        .crosscheck_put_snapshot(
            s.clone(),
            1,
            vec![
                (user("u1"), None),
                (member("org_9", "u1"), Some("orgmem_1".into())),
                (member("org_9", "u2\0"), Some("orgmem_2".into())),
            ],
        )
        .await
        .unwrap();
    // Pages of the next listing; an entry listed twice is kept once.
    store
        .crosscheck_put_snapshot(s.clone(), 2, vec![(user("u1"), None), (user("u3"), None)])
        .await
        .unwrap();
    store
        .crosscheck_put_snapshot(
            s.clone(),
            2,
            vec![
                (member("org_9", "u1"), Some("orgmem_1".into())),
                (user("u3"), None),
            ],
        )
        .await
        .unwrap();
    let mut changes = store
        .crosscheck_snapshot_changes(s.clone(), 1, 2, 1000)
        .await
        .unwrap();
    changes.sort();
    assert_eq!(
        changes,
        vec![
            (
                Change::Removed(member("org_9", "u2\0")),
                Some("orgmem_2".into())
            ),
            (Change::Added(user("u3")), None),
        ]
    );
    assert!(store
        .crosscheck_snapshot_has(s.clone(), 2, user("u3"))
        .await
        .unwrap());
    assert!(!store
        .crosscheck_snapshot_has(s.clone(), 2, member("org_9", "u2\0"))
        .await
        .unwrap());
    // Committing generation 2 drops generation 1.
    let pending = vec![Pending {
        change: Change::Removed(member("org_9", "u2\0")),
        since: at(1_000),
        seen_at: at(2_000),
        provider_id: Some("orgmem_2".into()),
    }];
    assert!(store
        .crosscheck_finish_poll(
            s.clone(),
            None,
            PollEnd::Success {
                at: at(2_000),
                log_cursor: None,
                generation: 2,
                pending: pending.clone(),
            },
        )
        .await
        .unwrap());
    assert!(!store
        .crosscheck_snapshot_has(s.clone(), 1, user("u1"))
        .await
        .unwrap());
    assert_eq!(store.crosscheck_pending(s.clone()).await.unwrap(), pending);
    let row = store.crosscheck_state(s.clone()).await.unwrap().unwrap();
    assert_eq!(row.generation, 2);
    assert_eq!(row.last_success_at, Some(at(2_000)));
    // A failed listing's partial generation is deleted, the complete one kept.
    store
        .crosscheck_put_snapshot(s.clone(), 3, vec![(user("u9"), None)])
        .await
        .unwrap();
    assert!(store
        .crosscheck_finish_poll(
            s.clone(),
            Some(row.clone()),
            PollEnd::Failure {
                error: "GET /users answered HTTP 503".into(),
                refused: false,
            },
        )
        .await
        .unwrap());
    assert!(!store
        .crosscheck_snapshot_has(s.clone(), 3, user("u9"))
        .await
        .unwrap());
    assert!(store
        .crosscheck_snapshot_has(s.clone(), 2, user("u3"))
        .await
        .unwrap());
    store.close().await.unwrap();
}

async fn a_poll_commits_once_and_a_concurrent_one_is_refused(db: TestDb) {
    let first = db.open().await;
    let second = db.open_second(&first).await;
    let s = "workos".to_string();
    assert_eq!(first.crosscheck_state(s.clone()).await.unwrap(), None);
    let success = |cursor: &str| PollEnd::Success {
        at: at(5_000),
        log_cursor: Some(cursor.into()),
        generation: 0,
        pending: Vec::new(),
    };
    // Both read "no row", both polled; the first to commit wins.
    assert!(first
        .crosscheck_finish_poll(s.clone(), None, success("event_2"))
        .await
        .unwrap());
    assert!(!second
        .crosscheck_finish_poll(s.clone(), None, success("event_1"))
        .await
        .unwrap());
    let row = second.crosscheck_state(s.clone()).await.unwrap().unwrap();
    assert_eq!(row.log_cursor.as_deref(), Some("event_2"));
    // Failures count in a row and a success clears them.
    for n in 1..=3 {
        let before = first.crosscheck_state(s.clone()).await.unwrap();
        assert!(first
            .crosscheck_finish_poll(
                s.clone(),
                before,
                PollEnd::Failure {
                    error: "the API refused the key (HTTP 401)".into(),
                    refused: true,
                },
            )
            .await
            .unwrap());
        let row = first.crosscheck_state(s.clone()).await.unwrap().unwrap();
        assert_eq!(row.failures, n);
        assert!(row.last_refused);
        assert_eq!(row.last_success_at, Some(at(5_000)));
    }
    // A 5xx after the refusals does not clear it: only a success does.
    let before = first.crosscheck_state(s.clone()).await.unwrap();
    assert!(first
        .crosscheck_finish_poll(
            s.clone(),
            before,
            PollEnd::Failure {
                error: "HTTP 503".into(),
                refused: false,
            },
        )
        .await
        .unwrap());
    let row = first.crosscheck_state(s.clone()).await.unwrap().unwrap();
    assert!(row.last_refused && row.failures == 4);
    let before = first.crosscheck_state(s.clone()).await.unwrap();
    assert!(first
        .crosscheck_finish_poll(s.clone(), before, success("event_3"))
        .await
        .unwrap());
    let row = first.crosscheck_state(s.clone()).await.unwrap().unwrap();
    assert_eq!(
        (
            row.failures,
            row.last_error.as_deref(),
            row.log_cursor.as_deref()
        ),
        (0, None, Some("event_3"))
    );
    assert!(!row.last_refused, "a success clears it");
    // An operator's restart forgets the checkpoint and nothing else.
    let before = first.crosscheck_state(s.clone()).await.unwrap();
    assert!(first
        .crosscheck_finish_poll(s.clone(), before.clone(), PollEnd::Restart)
        .await
        .unwrap());
    let row = first.crosscheck_state(s.clone()).await.unwrap().unwrap();
    assert_eq!(row.log_cursor, None);
    assert_eq!(
        (row.last_success_at, row.generation),
        (
            before.as_ref().unwrap().last_success_at,
            before.unwrap().generation
        )
    );
    first.close().await.unwrap();
    second.close().await.unwrap();
}

fn finding(key: &str, direction: Direction) -> Finding {
    Finding {
        key: key.into(),
        direction,
        event_type: "dsync.user.deleted".into(),
        subject: "directory_user_1".into(),
        organization: None,
        provider_id: Some(key.trim_start_matches("workos:").into()),
        when: When::At(at(1_000)),
    }
}

async fn findings_are_stored_once_across_handles_and_settle_once(db: TestDb) {
    let first = db.open().await;
    let second = db.open_second(&first).await;
    let s = "workos".to_string();
    let a = finding("workos:event_1", Direction::Revoke);
    let b = finding("workos:event_2", Direction::Grant);
    let new = first
        .crosscheck_record_findings(s.clone(), vec![a.clone()], at(2_000))
        .await
        .unwrap();
    assert_eq!(new, ["workos:event_1"]);
    // Another replica (or a restart) deciding the same finding: not new.
    let new = second
        .crosscheck_record_findings(s.clone(), vec![a.clone(), b.clone()], at(3_000))
        .await
        .unwrap();
    assert_eq!(new, ["workos:event_2"]);
    let all = first
        .crosscheck_findings(s.clone(), false, 10)
        .await
        .unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].finding, b);
    assert_eq!(all[1].finding, a);
    assert_eq!(all[1].found_at, at(2_000));
    assert!(first
        .crosscheck_finish_poll(
            s.clone(),
            None,
            PollEnd::Failure {
                error: "x".into(),
                refused: false
            }
        )
        .await
        .unwrap());
    assert!(first
        .crosscheck_settle_finding(s.clone(), a.key.clone(), true)
        .await
        .unwrap());
    assert!(!second
        .crosscheck_settle_finding(s.clone(), a.key.clone(), false)
        .await
        .unwrap());
    assert!(second
        .crosscheck_settle_finding(s.clone(), b.key.clone(), false)
        .await
        .unwrap());
    assert!(first
        .crosscheck_findings(s.clone(), true, 10)
        .await
        .unwrap()
        .is_empty());
    let row: CrosscheckRow = first.crosscheck_state(s.clone()).await.unwrap().unwrap();
    assert_eq!(row.healed, 1);
    first.close().await.unwrap();
    second.close().await.unwrap();
}

async fn the_join_sees_ids_received_on_the_webhook_channel_only_of_its_stream(db: TestDb) {
    let store = db.open().await;
    let mut webhook = event("workos", Some("event_1"), "dsync.user.deleted", 1_000);
    webhook.channel = "webhook";
    let mut elsewhere = event("other", Some("event_2"), "dsync.user.deleted", 1_000);
    elsewhere.channel = "webhook";
    let report = event("workos", Some("event_3"), "dsync.user.deleted", 1_000);
    store
        .record_events(vec![webhook, elsewhere, report])
        .await
        .unwrap();
    let seen = store
        .crosscheck_received(
            "workos".into(),
            vec![
                "event_1".into(),
                "event_2".into(),
                "event_3".into(),
                "event_4".into(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(seen, [true, false, false, false]);
    store.close().await.unwrap();
}

fn target(stream: &str) -> PageTarget {
    PageTarget {
        stream: stream.into(),
        provider: Provider::Workos,
        config_path: "/etc/hushwatch/hushwatch.toml".into(),
        notifiers: vec!["hook".into(), "pd".into()],
    }
}

/// The outbox rows of `kind`: (state, severity, reason).
async fn pages_of(store: &super::super::Store, kind: &str) -> Vec<(String, String, String)> {
    store
        .pending_outbox()
        .await
        .unwrap()
        .rows
        .into_iter()
        .filter(|r| r.alert_kind.as_str() == kind)
        .map(|r| {
            let state = match r.state {
                super::super::AlertState::Firing => "firing",
                super::super::AlertState::Ok => "resolved",
            };
            (state.to_owned(), r.severity, r.reason)
        })
        .collect()
}

async fn findings_are_paged_once_across_handles_and_their_page_resolves_when_all_are_settled(
    db: TestDb,
) {
    let first = db.open().await;
    let second = db.open_second(&first).await;
    let s = "workos".to_string();
    // Pages belong to a watched stream.
    first.watch_streams(vec![s.clone()], at(0)).await.unwrap();
    let (named, total) = first
        .crosscheck_page_missed(target(&s), at(1_000))
        .await
        .unwrap();
    assert!(
        named.is_empty() && total == 0,
        "nothing recorded, nothing paged"
    );
    let grant = finding("workos:event_1", Direction::Grant);
    let revoke = finding("workos:event_2", Direction::Revoke);
    first
        .crosscheck_record_findings(s.clone(), vec![grant.clone(), revoke.clone()], at(2_000))
        .await
        .unwrap();
    // One page for both, to each notifier; critical for the revocation,
    // which it names first.
    let (named, total) = second
        .crosscheck_page_missed(target(&s), at(3_000))
        .await
        .unwrap();
    assert_eq!(total, 2);
    assert_eq!(named, vec![revoke.clone(), grant.clone()]);
    let pages = pages_of(&first, "provider_missed").await;
    assert_eq!(pages.len(), 2, "{pages:?}");
    assert!(pages.iter().all(|p| p.0 == "firing" && p.1 == "critical"));
    assert!(
        pages[0].2.starts_with("2 changes on stream workos"),
        "{}",
        pages[0].2
    );
    // Another replica, or a later poll, pages nothing twice.
    let (_, total) = first
        .crosscheck_page_missed(target(&s), at(4_000))
        .await
        .unwrap();
    assert_eq!(total, 0);
    // A finding recorded later gets a page of its own, a warning.
    let later = finding("workos:event_3", Direction::Other);
    second
        .crosscheck_record_findings(s.clone(), vec![later.clone()], at(5_000))
        .await
        .unwrap();
    let (named, total) = second
        .crosscheck_page_missed(target(&s), at(5_000))
        .await
        .unwrap();
    assert_eq!((named, total), (vec![later.clone()], 1));
    assert_eq!(pages_of(&first, "provider_missed").await.len(), 4);
    assert!(pages_of(&first, "provider_missed").await[2].1 == "warning");

    // The first page resolves once both of its findings are settled: one
    // healed, one acknowledged with the stream.
    assert!(first
        .crosscheck_settle_finding(s.clone(), revoke.key.clone(), true)
        .await
        .unwrap());
    assert_eq!(
        first
            .crosscheck_resolve_settled(s.clone(), at(6_000))
            .await
            .unwrap(),
        0,
        "event_1 is still open"
    );
    // Acknowledging the stream (not firing) acknowledges both, audited
    // in the same transaction.
    let audited = first.audit_summary().await.unwrap().head_seq;
    assert_eq!(
        second
            .acknowledge(s.clone(), "carol".into(), "on it".into(), true)
            .await
            .unwrap(),
        crate::silences::AckOutcome::Findings(2)
    );
    assert_eq!(
        first.audit_summary().await.unwrap().head_seq,
        audited + 1,
        "the acknowledged findings are in the audit log"
    );
    let pages = pages_of(&first, "provider_missed").await;
    let resolved: Vec<_> = pages.iter().filter(|p| p.0 == "resolved").collect();
    assert_eq!(
        resolved.len(),
        4,
        "both pages, to both notifiers: {pages:?}"
    );
    assert!(resolved.iter().filter(|p| p.1 == "critical").count() == 2);
    assert_eq!(
        first
            .crosscheck_resolve_settled(s.clone(), at(7_000))
            .await
            .unwrap(),
        0,
        "resolved once"
    );
    assert_eq!(first.crosscheck_acknowledge(s.clone()).await.unwrap(), 0);
    first.close().await.unwrap();
    second.close().await.unwrap();
}

async fn the_failing_alert_pages_when_it_starts_or_changes_severity_and_resolves_once(db: TestDb) {
    let first = db.open().await;
    let second = db.open_second(&first).await;
    let s = "workos".to_string();
    first.watch_streams(vec![s.clone()], at(0)).await.unwrap();
    let warning = PollHealth::Failing {
        critical: false,
        reason: "3 polls of the WorkOS API failed in a row; the last: HTTP 502".into(),
    };
    let critical = PollHealth::Failing {
        critical: true,
        reason: "the WorkOS API refused the key: the API refused the key (HTTP 401)".into(),
    };
    assert!(!first
        .crosscheck_set_failing(target(&s), PollHealth::Ok, at(1_000))
        .await
        .unwrap());
    assert!(first
        .crosscheck_set_failing(target(&s), warning.clone(), at(2_000))
        .await
        .unwrap());
    assert!(!second
        .crosscheck_set_failing(target(&s), warning.clone(), at(3_000))
        .await
        .unwrap());
    assert!(second
        .crosscheck_set_failing(target(&s), critical, at(4_000))
        .await
        .unwrap());
    assert!(first
        .crosscheck_set_failing(target(&s), PollHealth::Ok, at(5_000))
        .await
        .unwrap());
    assert!(!second
        .crosscheck_set_failing(target(&s), PollHealth::Ok, at(6_000))
        .await
        .unwrap());
    let pages = pages_of(&first, "crosscheck_failing").await;
    let seen: Vec<(&str, &str)> = pages.iter().map(|p| (p.0.as_str(), p.1.as_str())).collect();
    assert_eq!(
        seen,
        [
            ("firing", "warning"),
            ("firing", "warning"),
            ("firing", "critical"),
            ("firing", "critical"),
            ("resolved", "critical"),
            ("resolved", "critical"),
        ]
    );
    assert!(pages[0].2.contains("HTTP 502") && pages[0].2.contains("What to do"));
    first.close().await.unwrap();
    second.close().await.unwrap();
}

/// An event-log finding is stored with its sealed body in one call; a
/// second recording keeps the first body; a settled finding is no longer
/// offered for a heal.
async fn a_logged_finding_keeps_its_first_body_until_it_is_settled(db: TestDb) {
    use super::super::seal::Sealed;
    let store = db.open().await;
    let s = "workos".to_string();
    let body = |b: &[u8], key: Option<&str>| Sealed {
        key_id: key.map(str::to_owned),
        bytes: b.to_vec(),
    };
    let a = finding("workos:event_1", Direction::Revoke);
    let b = finding("workos:event_2", Direction::Grant);
    let new = store
        .crosscheck_record_logged(
            s.clone(),
            vec![
                (a.clone(), body(b"first \x00\xff", Some("k1"))),
                (b.clone(), body(b"{}", None)),
            ],
            at(2_000),
        )
        .await
        .unwrap();
    assert_eq!(new, ["workos:event_1", "workos:event_2"]);
    let again = store
        .crosscheck_record_logged(
            s.clone(),
            vec![(a.clone(), body(b"second", None))],
            at(3_000),
        )
        .await
        .unwrap();
    assert!(again.is_empty());
    let open = store.crosscheck_open_logged(s.clone(), 10).await.unwrap();
    assert_eq!(
        open,
        [
            (a.clone(), body(b"first \x00\xff", Some("k1"))),
            (b.clone(), body(b"{}", None))
        ]
    );
    assert!(store
        .crosscheck_settle_finding(s.clone(), a.key.clone(), true)
        .await
        .unwrap());
    let open = store.crosscheck_open_logged(s.clone(), 10).await.unwrap();
    assert_eq!(open, [(b.clone(), body(b"{}", None))]);
    assert_eq!(store.crosscheck_open_logged(s, 0).await.unwrap(), []);
    store.close().await.unwrap();
}
