//! Conformance cases for what every engine reports about itself (name,
//! commits, queue depth: `/v1/status` and metrics) and for the stream
//! re-read the replica feed uses (`streams_changed`).

use super::super::testdb::{at, event, names, TestDb};
use super::super::*;

backend_matrix!(
    the_engine_names_itself_counts_commits_and_is_idle_when_nothing_waits,
    a_changed_stream_is_read_again_from_the_cursor,
);

/// `/v1/status` shows `engine()`; the `commits` counter and the queue-depth
/// gauge are metrics an operator alerts on.
async fn the_engine_names_itself_counts_commits_and_is_idle_when_nothing_waits(db: TestDb) {
    let store = db.open().await;
    let (name, concrete) = match &db {
        TestDb::Sqlite { .. } => (
            "sqlite",
            store
                .backend
                .as_any()
                .downcast_ref::<crate::sqlite::SqliteBackend>()
                .is_some(),
        ),
        TestDb::Postgres(_) => (
            "postgres",
            store
                .backend
                .as_any()
                .downcast_ref::<crate::pg::PgBackend>()
                .is_some(),
        ),
    };
    assert_eq!(store.engine(), name);
    assert!(concrete, "as_any is the {name} backend itself");
    let before = store.commits();
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    store
        .record_events(vec![event("a", Some("e1"), "x", 1_000)])
        .await
        .unwrap();
    store.probe().await.unwrap();
    // Group commit may fold writes into one transaction: at least one.
    assert!(
        store.commits() > before,
        "commits {} after {before}",
        store.commits()
    );
    // Every call above was answered, so nothing of it still waits.
    assert_eq!(store.queue_depth(), 0);
    store.close().await.unwrap();
}

/// The replica feed (`service::feed`) re-reads stream rows from its last
/// cursor: every row committed since (by this handle or another replica,
/// new or updated) comes back with its committed values. An engine may
/// also return unchanged rows (SQLite returns all of them, with no
/// cursor); it may never return a stale one.
async fn a_changed_stream_is_read_again_from_the_cursor(db: TestDb) {
    let store = db.open().await;
    let other = db.open_second(&store).await;
    store
        .watch_streams(names(&["a", "b", "c"]), at(0))
        .await
        .unwrap();
    let (all, cursor) = store.streams_changed(None).await.unwrap();
    let mut seen: Vec<&str> = all.iter().map(|r| r.name.as_str()).collect();
    seen.sort_unstable();
    assert_eq!(seen, ["a", "b", "c"], "no cursor: every row");

    other
        .record_events(vec![event("b", Some("e1"), "user.deleted", 2_000)])
        .await
        .unwrap();
    other.watch_streams(names(&["d"]), at(2_500)).await.unwrap();
    let (rows, cursor) = store.streams_changed(cursor).await.unwrap();
    let b = rows.iter().find(|r| r.name == "b").expect("b changed");
    assert_eq!(b.last_arrival_at, Some(at(2_000)));
    assert_eq!(b.last_event_type.as_deref(), Some("user.deleted"));
    let d = rows.iter().find(|r| r.name == "d").expect("d is new");
    assert_eq!(d.watch_started_at, at(2_500));
    assert_current(&store, &rows).await;

    store
        .record_transition(super::super::testdb::transition(
            AlertState::Firing,
            3_000,
            &["pager"],
        ))
        .await
        .unwrap();
    let (rows, _) = store.streams_changed(cursor).await.unwrap();
    let a = rows.iter().find(|r| r.name == "a").expect("a changed");
    assert_eq!(a.alert_state, AlertState::Firing);
    assert_eq!(a.firing_since, Some(at(3_000)));
    assert_current(&store, &rows).await;
    other.close().await.unwrap();
    store.close().await.unwrap();
}

/// Each row read from the cursor equals the stored row.
async fn assert_current(store: &Store, rows: &[StreamRow]) {
    let stored = store.streams().await.unwrap();
    for row in rows {
        let now = stored.iter().find(|s| s.name == row.name);
        assert_eq!(Some(row), now, "a stale row from the cursor");
    }
}
