//! Conformance cases for keyed alerts under an operator silence
//! (`domain::mute::on_transition` and `release`, via `suppress_keyed`
//! and `release_held_keyed`): a provider-subscription warning is held by a
//! silence of its kind, paged once when the silence ends, and dropped with
//! its resolve when nobody was told it fired.

use super::super::silences::NewSilence;
use super::super::subscriptions::{SubscriptionTransition, SubscriptionUpdate};
use super::super::testdb::{at, event, names, TestDb};
use super::super::*;
use super::manual;
use hushwatch_core::domain::alert_kind::AlertKind;
use hushwatch_core::ingest::providers::SubscriptionExpiry;

backend_matrix!(
    a_keyed_alert_is_held_by_a_silence_of_its_kind_and_paged_once_when_it_ends,
    the_resolve_of_a_held_keyed_alert_is_dropped,
    a_held_page_of_an_unknown_kind_stays_held_and_the_others_are_paged,
);

fn silence(kinds: &[&str], from_ms: i64, until_ms: i64) -> NewSilence {
    NewSilence {
        streams: names(&["s"]),
        kinds: names(kinds),
        starts_at: at(from_ms),
        ends_at: at(until_ms),
        comment: "provider maintenance".into(),
        created_by: "ops".into(),
    }
}

fn warning(to: AlertState, ms: i64) -> SubscriptionTransition {
    let kind = (to == AlertState::Firing).then_some(AlertKind::SubscriptionReauthorizationRequired);
    SubscriptionTransition {
        stream: "s".into(),
        subscription: "sub_a".into(),
        to,
        kind,
        reason: format!("at {ms}"),
        notifiers: names(&["pager", "chat"]),
        at: at(ms),
    }
}

/// A store with stream `s` whose subscription `sub_a` is known.
async fn open(db: &TestDb, clock_ms: i64) -> (Store, Arc<crate::clock::ManualClock>) {
    let clock = manual(clock_ms);
    let store = db.open_with_clock(clock.clone()).await;
    store.watch_streams(names(&["s"]), at(0)).await.unwrap();
    let update = SubscriptionUpdate {
        stream: "s".into(),
        expiries: vec![SubscriptionExpiry {
            subscription: "sub_a".into(),
            expires_at: at(3_600_000),
        }],
        lifecycle: Vec::new(),
        carried_events: true,
    };
    let (outcomes, _) = store
        .record_delivery_rows(
            vec![event("s", Some("e1"), "x", 500)],
            Some(update),
            at(500),
        )
        .await
        .unwrap();
    assert_eq!(outcomes, [EventOutcome::Accepted]);
    (store, clock)
}

async fn a_keyed_alert_is_held_by_a_silence_of_its_kind_and_paged_once_when_it_ends(db: TestDb) {
    let (store, clock) = open(&db, 1_000).await;
    // A silence of another kind holds nothing of this alert.
    let other = store.add_silence(silence(&["silence"], 0, 10_000), 10, false);
    assert!(other.await.unwrap().is_some());
    let held = store.add_silence(silence(&["subscription_*"], 0, 10_000), 10, false);
    assert!(held.await.unwrap().is_some());
    let fire = store.subscription_transition(warning(AlertState::Firing, 3_000));
    assert!(fire.await.unwrap(), "the alert's state moves");
    assert!(
        store.pending_outbox().await.unwrap().rows.is_empty(),
        "held"
    );

    clock.set(at(9_999));
    assert_eq!(
        store.release_held().await.unwrap().paged,
        0,
        "still silenced"
    );
    clock.set(at(10_000));
    assert_eq!(
        store.release_held().await.unwrap().paged,
        1,
        "one alert paged"
    );
    let pages = store.pending_outbox().await.unwrap().rows;
    let mut got: Vec<(&str, AlertState, DateTime<Utc>, &str)> = pages
        .iter()
        .map(|r| {
            (
                r.notifier.as_str(),
                r.state.clone(),
                r.at,
                r.alert_kind.as_str(),
            )
        })
        .collect();
    got.sort_unstable_by_key(|g| g.0);
    let kind = "subscription_reauthorization_required";
    assert_eq!(
        got,
        [
            ("chat", AlertState::Firing, at(10_000), kind),
            ("pager", AlertState::Firing, at(10_000), kind),
        ]
    );
    assert_eq!(
        store.release_held().await.unwrap().paged,
        0,
        "released once"
    );

    // Its receivers were told it fired: the resolve is paged.
    let resolve = store.subscription_transition(warning(AlertState::Ok, 11_000));
    assert!(resolve.await.unwrap());
    let pages = store.pending_outbox().await.unwrap().rows;
    assert_eq!(
        pages.iter().filter(|r| r.state == AlertState::Ok).count(),
        2
    );
    store.close().await.unwrap();
}

async fn the_resolve_of_a_held_keyed_alert_is_dropped(db: TestDb) {
    let (store, clock) = open(&db, 1_000).await;
    let held = store.add_silence(silence(&["*"], 0, 10_000), 10, false);
    assert!(held.await.unwrap().is_some());
    let fire = store.subscription_transition(warning(AlertState::Firing, 3_000));
    assert!(fire.await.unwrap());
    let resolve = store.subscription_transition(warning(AlertState::Ok, 4_000));
    assert!(resolve.await.unwrap(), "the alert's state moves");
    clock.set(at(20_000));
    assert_eq!(
        store.release_held().await.unwrap().paged,
        0,
        "nothing left held"
    );
    assert!(
        store.pending_outbox().await.unwrap().rows.is_empty(),
        "nobody was told it fired"
    );
    store.close().await.unwrap();
}

/// A held keyed page whose kind this binary does not know (queued by a
/// newer version, or altered at rest) stays held and is named; the
/// stream's own held page is paged when the silence ends, as usual.
async fn a_held_page_of_an_unknown_kind_stays_held_and_the_others_are_paged(db: TestDb) {
    let (store, clock) = open(&db, 1_000).await;
    let all = store.add_silence(silence(&["*"], 0, 10_000), 10, false);
    assert!(all.await.unwrap().is_some());
    let fire = store.subscription_transition(warning(AlertState::Firing, 3_000));
    assert!(fire.await.unwrap());
    let quiet = Transition {
        stream: "s".into(),
        to: AlertState::Firing,
        at: at(4_000),
        reason: "quiet".into(),
        notifiers: names(&["pager"]),
    };
    assert!(store.record_transition(quiet).await.unwrap());
    assert!(
        store.pending_outbox().await.unwrap().rows.is_empty(),
        "both held"
    );
    db.alter_at_rest("UPDATE silence_held_keyed SET kind = 'from_a_newer_version';")
        .await;

    clock.set(at(10_000));
    let released = store.release_held().await.unwrap();
    assert_eq!(released.paged, 1, "the stream's page");
    assert_eq!(released.unreadable.len(), 1);
    assert!(
        released.unreadable[0]
            .what
            .starts_with("held page of alert "),
        "{:?}",
        released.unreadable
    );
    assert_eq!(
        released.unreadable[0].why,
        "unknown alert_kind \"from_a_newer_version\""
    );
    let pages = store.pending_outbox().await.unwrap().rows;
    assert_eq!(pages.len(), 1);
    assert_eq!(pages[0].alert_kind, AlertKind::Silence);
    let again = store.release_held().await.unwrap();
    assert_eq!(
        (again.paged, again.unreadable.len()),
        (0, 1),
        "still held, still named"
    );
    store.close().await.unwrap();
}
