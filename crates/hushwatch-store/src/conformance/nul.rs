//! Issue #26: provider-signed text holding U+0000. PostgreSQL `text` refuses
//! NUL while SQLite stores it, so the ingest path encodes it once
//! (`store::nul`) before either backend sees it; both must then store,
//! show and deduplicate the same text.

use super::super::nul::nul_safe_event;
use super::super::testdb::{at, event, names, on_channel, stream, TestDb};
use super::super::EventOutcome;

backend_matrix!(provider_text_with_nul_is_stored_alike_and_deduplicated);

async fn provider_text_with_nul_is_stored_alike_and_deduplicated(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    let mut raw = on_channel(
        event("a", Some("msg_\0one"), "user.\0deleted", 1_000),
        "webhook",
    );
    raw.subject_ids = vec![("user_id".into(), "user_\0x".into())];
    let outcome = store
        .record_events(vec![nul_safe_event_owned(raw.clone())])
        .await
        .expect("NUL-bearing provider text is stored, not a storage error");
    assert_eq!(outcome, vec![EventOutcome::Accepted]);
    // The sender's retry carries the same bytes: a duplicate on every backend.
    let again = store
        .record_events(vec![nul_safe_event_owned(raw)])
        .await
        .unwrap();
    assert_eq!(again, vec![EventOutcome::Duplicate]);
    let row = stream(&store, "a").await;
    assert_eq!(row.last_event_type.as_deref(), Some("user.\u{FFFD}deleted"));
    assert_eq!(row.last_event_id.as_deref(), Some("msg_\u{FFFD}one"));
    assert_eq!(store.event_count("a".into()).await.unwrap(), 1);
    store.close().await.unwrap();
}

fn nul_safe_event_owned(mut e: crate::NewEvent) -> crate::NewEvent {
    nul_safe_event(&mut e);
    e
}
