//! Conformance cases for provider subscriptions (`store::subscriptions`):
//! what deliveries record about them and the warning alert's
//! compare-and-set, on every backend.

use super::super::subscriptions::{
    SubscriptionRow, SubscriptionTransition, SubscriptionUpdate, MAX_PER_STREAM,
};
use super::super::testdb::{at, event, names, TestDb};
use super::super::*;
use hushwatch_core::domain::alert_kind::AlertKind;
use hushwatch_core::ingest::providers::{LifecycleNotice, SubscriptionExpiry};

backend_matrix!(
    deliveries_record_subscription_expiries_forward_only,
    a_subscription_alert_moves_by_compare_and_set_and_resolves_under_its_kind,
    subscriptions_past_the_cap_drop_the_longest_unheard,
    a_stored_expiry_past_the_horizon_gives_way_to_the_next_plausible_one,
);

const HOUR: i64 = 3_600_000;

fn expiry(sub: &str, ms: i64) -> SubscriptionExpiry {
    SubscriptionExpiry {
        subscription: sub.into(),
        expires_at: at(ms),
    }
}

fn update(expiries: Vec<SubscriptionExpiry>, carried_events: bool) -> SubscriptionUpdate {
    SubscriptionUpdate {
        stream: "s".into(),
        expiries,
        lifecycle: Vec::new(),
        carried_events,
    }
}

async fn deliver(store: &Store, id: &str, u: SubscriptionUpdate, ms: i64) {
    let (outcomes, _) = store
        .record_delivery_rows(vec![event("s", Some(id), "x", ms)], Some(u), at(ms))
        .await
        .unwrap();
    assert_eq!(outcomes, [EventOutcome::Accepted]);
}

/// The expiry warning is computed from these rows: an expiry only moves
/// forward (deliveries arrive out of order), `seen_at` moves only with
/// change notifications, a lifecycle notice marks reauthorization.
async fn deliveries_record_subscription_expiries_forward_only(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["s"]), at(0)).await.unwrap();
    assert!(store.subscriptions().await.unwrap().is_empty());
    let t0 = 1_000;
    deliver(
        &store,
        "e1",
        update(
            vec![
                expiry("sub_b", t0 + 48 * HOUR),
                expiry("sub_a", t0 + 24 * HOUR),
            ],
            true,
        ),
        t0,
    )
    .await;
    let rows = store.subscriptions().await.unwrap();
    let got: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.subscription.as_str(),
                r.expires_at,
                r.seen_at,
                r.reauth_at,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("sub_a", at(t0 + 24 * HOUR), at(t0), None),
            ("sub_b", at(t0 + 48 * HOUR), at(t0), None),
        ],
        "ordered by stream and subscription"
    );
    assert!(rows
        .iter()
        .all(|r| r.stream == "s" && r.state == AlertState::Ok && r.concern.is_none()));

    // An older expiry arriving late, and a lifecycle notice with no
    // change notification: the expiry and seen_at stay.
    let t1 = t0 + HOUR;
    let mut late = update(vec![expiry("sub_a", t0 + 2 * HOUR)], false);
    late.lifecycle = vec![LifecycleNotice {
        subscription: "sub_a".into(),
        event: "reauthorizationRequired".into(),
    }];
    deliver(&store, "e2", late, t1).await;
    // A renewal moves sub_b forward; an expiry no provider could send is
    // not stored.
    let t2 = t0 + 2 * HOUR;
    let forged = t2 + 400 * 24 * HOUR;
    deliver(
        &store,
        "e3",
        update(
            vec![
                expiry("sub_b", t2 + 72 * HOUR),
                expiry("sub_forged", forged),
            ],
            true,
        ),
        t2,
    )
    .await;
    let rows = store.subscriptions().await.unwrap();
    let got: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.subscription.as_str(),
                r.expires_at,
                r.seen_at,
                r.reauth_at,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("sub_a", at(t0 + 24 * HOUR), at(t0), Some(at(t1))),
            ("sub_b", at(t2 + 72 * HOUR), at(t2), None),
        ]
    );
    store.close().await.unwrap();
}

fn alert(to: AlertState, kind: Option<AlertKind>, ms: i64) -> SubscriptionTransition {
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

/// A stored expiry further ahead than any provider allows from now (an
/// older version stored any value; here one plausible when stored, read
/// against an earlier delivery time) is replaced by the next plausible
/// expiry even though that one is earlier: the forward-only rule holds
/// among plausible values only.
async fn a_stored_expiry_past_the_horizon_gives_way_to_the_next_plausible_one(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["s"]), at(0)).await.unwrap();
    let day = 24 * HOUR;
    let t0 = 1_000;
    let late = t0 + 10 * day;
    let far = late + 25 * day;
    deliver(&store, "e1", update(vec![expiry("sub", far)], true), late).await;
    let expiries =
        |rows: Vec<SubscriptionRow>| -> Vec<_> { rows.into_iter().map(|r| r.expires_at).collect() };
    assert_eq!(expiries(store.subscriptions().await.unwrap()), [at(far)]);
    // Within the horizon, an earlier expiry does not move it back.
    deliver(&store, "e2", update(vec![expiry("sub", late)], true), late).await;
    assert_eq!(expiries(store.subscriptions().await.unwrap()), [at(far)]);
    // Seen from t0, `far` is past the horizon (29 days and the skew).
    deliver(
        &store,
        "e3",
        update(vec![expiry("sub", t0 + day)], true),
        t0,
    )
    .await;
    assert_eq!(
        expiries(store.subscriptions().await.unwrap()),
        [at(t0 + day)]
    );
    store.close().await.unwrap();
}

/// The evaluator calls `subscription_transition` on every round: only the
/// first call for a change pages (one warning per notifier), and the
/// resolve keeps the kind and alert id the alert fired with.
async fn a_subscription_alert_moves_by_compare_and_set_and_resolves_under_its_kind(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["s"]), at(0)).await.unwrap();
    deliver(
        &store,
        "e1",
        update(vec![expiry("sub_a", 24 * HOUR)], true),
        1_000,
    )
    .await;
    let reauth = Some(AlertKind::SubscriptionReauthorizationRequired);
    // Nothing to move: an unknown subscription, or already ok.
    let mut unknown = alert(AlertState::Firing, reauth, 2_000);
    unknown.subscription = "sub_unknown".into();
    assert!(!store.subscription_transition(unknown).await.unwrap());
    assert!(!store
        .subscription_transition(alert(AlertState::Ok, None, 2_000))
        .await
        .unwrap());
    assert!(store.pending_outbox().await.unwrap().rows.is_empty());

    assert!(store
        .subscription_transition(alert(AlertState::Firing, reauth, 3_000))
        .await
        .unwrap());
    assert!(
        !store
            .subscription_transition(alert(AlertState::Firing, reauth, 4_000))
            .await
            .unwrap(),
        "a repeated evaluation never pages twice"
    );
    let rows = store.subscriptions().await.unwrap();
    assert_eq!(rows[0].state, AlertState::Firing);
    assert_eq!(
        rows[0].concern.as_deref(),
        Some("subscription_reauthorization_required")
    );
    let fired = store.pending_outbox().await.unwrap().rows;
    let mut notifiers: Vec<&str> = fired.iter().map(|r| r.notifier.as_str()).collect();
    notifiers.sort_unstable();
    assert_eq!(notifiers, ["chat", "pager"]);
    for row in &fired {
        assert_eq!(row.state, AlertState::Firing);
        assert_eq!(
            row.alert_kind.as_str(),
            "subscription_reauthorization_required"
        );
        assert_eq!(row.severity, "warning");
        assert_eq!(row.endpoint_id.as_deref(), Some("sub_a"));
        assert_eq!((row.at, row.reason.as_str()), (at(3_000), "at 3000"));
        assert_eq!(
            row.alert_id, fired[0].alert_id,
            "one alert for both notifiers"
        );
    }

    // The resolve names no kind: it goes out under the kind it fired with.
    assert!(store
        .subscription_transition(alert(AlertState::Ok, None, 5_000))
        .await
        .unwrap());
    let rows = store.subscriptions().await.unwrap();
    assert_eq!(
        (rows[0].state.clone(), rows[0].concern.clone()),
        (AlertState::Ok, None)
    );
    let all = store.pending_outbox().await.unwrap().rows;
    let resolved: Vec<&OutboxRow> = all.iter().filter(|r| r.state == AlertState::Ok).collect();
    assert_eq!(resolved.len(), 2, "{all:?}");
    for row in resolved {
        assert_eq!(
            row.alert_kind.as_str(),
            "subscription_reauthorization_required"
        );
        assert_eq!(row.alert_id, fired[0].alert_id);
        assert_eq!(row.at, at(5_000));
    }
    assert!(!store
        .subscription_transition(alert(AlertState::Ok, None, 6_000))
        .await
        .unwrap());
    assert_eq!(store.pending_outbox().await.unwrap().rows.len(), 4);
    store.close().await.unwrap();
}

/// Ids come from deliveries, so the rows per stream are capped; past it the
/// subscription heard from longest ago goes first, so a channel that keeps
/// delivering is never evicted by ids seen once.
async fn subscriptions_past_the_cap_drop_the_longest_unheard(db: TestDb) {
    let store = db.open().await;
    store.watch_streams(names(&["s"]), at(0)).await.unwrap();
    let cap = MAX_PER_STREAM;
    for i in 0..cap {
        let ms = 1_000 + i * 10;
        let u = update(vec![expiry(&format!("sub_{i:02}"), ms + HOUR)], true);
        deliver(&store, &format!("e{i}"), u, ms).await;
    }
    // sub_00 keeps delivering; two new ids arrive.
    let late = 1_000 + cap * 10;
    deliver(
        &store,
        "renew",
        update(vec![expiry("sub_00", late + HOUR)], true),
        late,
    )
    .await;
    deliver(
        &store,
        "new",
        update(
            vec![
                expiry("sub_new1", late + HOUR),
                expiry("sub_new2", late + HOUR),
            ],
            true,
        ),
        late + 10,
    )
    .await;
    let kept: Vec<String> = store
        .subscriptions()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.subscription)
        .collect();
    assert_eq!(kept.len() as i64, cap, "{kept:?}");
    for gone in ["sub_01", "sub_02"] {
        assert!(!kept.iter().any(|s| s == gone), "{gone} evicted: {kept:?}");
    }
    for stays in ["sub_00", "sub_03", "sub_new1", "sub_new2"] {
        assert!(kept.iter().any(|s| s == stays), "{stays} kept: {kept:?}");
    }
    store.close().await.unwrap();
}
