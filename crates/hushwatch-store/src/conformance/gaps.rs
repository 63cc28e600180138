//! Conformance cases for the learned gaps (`store::gaps`), on every backend.

use super::super::gaps::GapCount;
use super::super::testdb::TestDb;
use chrono::NaiveDate;

backend_matrix!(
    gap_counts_add_up_across_handles_and_survive_reopen,
    pruning_drops_whole_days_before_the_cutoff,
);

fn day(s: &str) -> NaiveDate {
    NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
}

fn count(stream: &str, d: &str, bucket: i32, n: i64) -> GapCount {
    GapCount {
        stream: stream.into(),
        day: day(d),
        bucket,
        count: n,
    }
}

async fn gap_counts_add_up_across_handles_and_survive_reopen(db: TestDb) {
    let first = db.open().await;
    let second = db.open_second(&first).await;
    first
        .add_gap_counts(vec![
            count("a", "2026-12-01", 100, 3),
            count("a", "2026-12-01", i32::MIN, 1),
        ])
        .await
        .unwrap();
    // Another replica flushing the same key adds, never overwrites.
    second
        .add_gap_counts(vec![
            count("a", "2026-12-01", 100, 2),
            count("b", "2026-12-02", -5, 7),
        ])
        .await
        .unwrap();
    second.close().await.unwrap();
    first.close().await.unwrap();
    let store = db.open().await;
    let all = store.gap_counts(day("2026-11-01")).await.unwrap();
    assert_eq!(
        all,
        vec![
            count("a", "2026-12-01", i32::MIN, 1),
            count("a", "2026-12-01", 100, 5),
            count("b", "2026-12-02", -5, 7),
        ]
    );
    let recent = store.gap_counts(day("2026-12-02")).await.unwrap();
    assert_eq!(recent, vec![count("b", "2026-12-02", -5, 7)]);
    store.close().await.unwrap();
}

async fn pruning_drops_whole_days_before_the_cutoff(db: TestDb) {
    let store = db.open().await;
    store
        .add_gap_counts(vec![
            count("a", "2026-11-03", 1, 1),
            count("a", "2026-11-04", 2, 1),
            count("a", "2026-11-04", 3, 1),
            count("a", "2026-12-01", 4, 1),
        ])
        .await
        .unwrap();
    assert_eq!(store.prune_gap_counts(day("2026-11-05")).await.unwrap(), 3);
    assert_eq!(store.prune_gap_counts(day("2026-11-05")).await.unwrap(), 0);
    let left = store.gap_counts(day("2000-01-01")).await.unwrap();
    assert_eq!(left, vec![count("a", "2026-12-01", 4, 1)]);
    store.close().await.unwrap();
}
