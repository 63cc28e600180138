//! Conformance cases for Svix endpoint state (`store::svix`): the grouped
//! exhausted page as a burst of lost messages grows, acknowledgements, and
//! the `other` row that endpoints past the per-source cap share. Until
//! issue #28 only SQLite's side of these ran anywhere.

use super::super::svix::{SvixApply, SvixPage, GROUPED_ENDPOINT, MAX_ENDPOINTS_PER_SOURCE};
use super::super::testdb::{at, event, names, TestDb};
use super::super::*;
use hushwatch_core::domain::svix::{DisableTrigger, Severity, SvixAlert};
use hushwatch_core::ingest::svix_ops::{AttemptRef, EndpointRef, OpEvent, Trigger};

backend_matrix!(
    lost_messages_page_once_regroup_as_the_burst_grows_and_resolve_when_acknowledged,
    endpoints_past_the_cap_share_the_other_row_per_source,
    disable_failing_and_mapped_deletion_page_alike_and_late_news_is_ignored,
);

fn endpoint(id: &str) -> EndpointRef {
    EndpointRef {
        app_id: Some("app_1".into()),
        endpoint_id: id.into(),
        endpoint_uid: Some(format!("uid_{id}")),
    }
}

fn exhausted(endpoint_id: &str, msg: &str) -> OpEvent {
    OpEvent::AttemptExhausted {
        endpoint: endpoint(endpoint_id),
        attempt: AttemptRef {
            msg_id: msg.into(),
            msg_event_id: Some(format!("evt_{msg}")),
            status_code: 503,
            attempt_at: None,
        },
    }
}

fn apply(source: &str, event: OpEvent, ms: i64) -> SvixApply {
    SvixApply {
        source: source.into(),
        stream: "identity".into(),
        notifiers: vec!["pager".into()],
        event,
        clears_on: Vec::new(),
        event_type: "message.attempt.exhausted".into(),
        mapped: false,
        now: at(ms),
        endpoint_map: Default::default(),
        join_streams: vec!["identity".into()],
        audit: true,
    }
}

/// Records one operational webhook (delivery id `id`) and returns its pages.
async fn op(store: &Store, id: &str, a: SvixApply) -> Vec<SvixPage> {
    let mut e = event(&format!("svix:{}", a.source), Some(id), &a.event_type, 0);
    e.received_at = a.now;
    e.feeds_clock = false;
    let (outcome, pages) = store.record_svix(e, a).await.unwrap();
    assert_eq!(outcome, EventOutcome::Accepted);
    pages
}

fn kinds(pages: &[SvixPage]) -> Vec<(&str, SvixAlert, bool)> {
    pages
        .iter()
        .map(|p| (p.endpoint_id.as_str(), p.alert, p.firing))
        .collect()
}

/// The pending Svix pages to `pager`, oldest first.
async fn svix_outbox(store: &Store) -> Vec<OutboxRow> {
    let rows = store.pending_outbox().await.unwrap().rows;
    rows.into_iter()
        .filter(|r| r.alert_kind.as_str().starts_with("svix_"))
        .collect()
}

/// The caller (`service::svix`'s grouping timer) pages once when an
/// endpoint's first message is lost, asks `svix_grown` which endpoints lost
/// more since, and queues one updated page per endpoint with
/// `svix_regroup`; `svix_acknowledge` marks lost messages handled and
/// resolves the alert under the same alert id when none remain.
async fn lost_messages_page_once_regroup_as_the_burst_grows_and_resolve_when_acknowledged(
    db: TestDb,
) {
    let store = db.open().await;
    store
        .watch_streams(names(&["identity"]), at(0))
        .await
        .unwrap();
    let first = op(
        &store,
        "o1",
        apply("main", exhausted("ep_1", "msg_1"), 1_000),
    )
    .await;
    assert_eq!(
        kinds(&first),
        [("ep_1", SvixAlert::MessagesExhausted, true)]
    );
    assert_eq!(first[0].severity, Severity::Critical);
    assert!(
        store.svix_grown("main".into()).await.unwrap().is_empty(),
        "the page already counts the one lost message"
    );
    // More of the burst: no page per message.
    for (n, msg) in ["msg_2", "msg_3"].iter().enumerate() {
        let ms = 2_000 + n as i64;
        let pages = op(&store, msg, apply("main", exhausted("ep_1", msg), ms)).await;
        assert!(pages.is_empty(), "{pages:?}");
    }
    assert_eq!(svix_outbox(&store).await.len(), 1);
    assert_eq!(
        store.svix_grown("main".into()).await.unwrap(),
        [("ep_1".to_owned(), Some("uid_ep_1".to_owned()))]
    );
    assert!(store
        .svix_grown("other-source".into())
        .await
        .unwrap()
        .is_empty());

    let rows = store.svix_endpoints().await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(
        (row.source.as_str(), row.endpoint_id.as_str()),
        ("main", "ep_1")
    );
    assert_eq!(row.app_id.as_deref(), Some("app_1"));
    assert_eq!(row.endpoint_uid.as_deref(), Some("uid_ep_1"));
    assert_eq!((row.exhausted_total, row.failing), (3, 0));
    assert_eq!((row.disabled, row.deleted), (None, false));
    let lost: Vec<(&str, Option<&str>, u16)> = row
        .lost
        .iter()
        .map(|m| (m.msg_id.as_str(), m.msg_event_id.as_deref(), m.status_code))
        .collect();
    assert_eq!(
        lost,
        [
            ("msg_1", Some("evt_msg_1"), 503),
            ("msg_2", Some("evt_msg_2"), 503),
            ("msg_3", Some("evt_msg_3"), 503),
        ],
        "oldest first"
    );

    // The timer's regroup: one updated page naming the whole burst.
    let regroup = |ms| apply("main", OpEvent::Other, ms);
    let pages = store
        .svix_regroup(regroup(5_000), "ep_1".into())
        .await
        .unwrap();
    assert_eq!(
        kinds(&pages),
        [("ep_1", SvixAlert::MessagesExhausted, true)]
    );
    assert!(
        pages[0].summary.contains("3 message(s)"),
        "{}",
        pages[0].summary
    );
    assert!(store.svix_grown("main".into()).await.unwrap().is_empty());
    // Not grown any more (or never known): nothing queued.
    for id in ["ep_1", "ep_unknown"] {
        let again = store.svix_regroup(regroup(6_000), id.into()).await.unwrap();
        assert!(again.is_empty(), "{id}: {again:?}");
    }
    let outbox = svix_outbox(&store).await;
    assert_eq!(outbox.len(), 2, "{outbox:?}");
    assert_eq!(outbox[1].alert_id, outbox[0].alert_id, "one alert, updated");
    assert_eq!(outbox[1].at, at(5_000));
    assert_eq!(outbox[1].endpoint_id.as_deref(), Some("ep_1"));
    assert_eq!(outbox[1].severity, "critical");

    // Acknowledging part of the burst changes no page.
    let ack = |msgs: &[&str]| {
        let store = store.clone();
        let msgs = names(msgs);
        async move {
            store
                .svix_acknowledge(regroup(7_000), "ep_1".into(), msgs)
                .await
                .unwrap()
        }
    };
    let (acked, left, pages) = ack(&["msg_1", "msg_2", "msg_unknown"]).await;
    assert_eq!((acked, left), (2, 1));
    assert!(pages.is_empty(), "{pages:?}");
    let (acked, left, pages) = ack(&["msg_1"]).await;
    assert_eq!((acked, left), (0, 1), "an acknowledged message counts once");
    assert!(pages.is_empty(), "{pages:?}");
    let (acked, left, pages) = ack(&["msg_3"]).await;
    assert_eq!((acked, left), (1, 0));
    assert_eq!(
        kinds(&pages),
        [("ep_1", SvixAlert::MessagesExhausted, false)]
    );
    let outbox = svix_outbox(&store).await;
    assert_eq!(outbox.len(), 3, "{outbox:?}");
    assert_eq!(outbox[2].state, AlertState::Ok);
    assert_eq!(outbox[2].alert_id, outbox[0].alert_id, "resolves the alert");
    let rows = store.svix_endpoints().await.unwrap();
    assert!(rows[0].lost.is_empty(), "{rows:?}");
    assert_eq!(rows[0].exhausted_total, 3, "a running total");
    assert!(store.svix_grown("main".into()).await.unwrap().is_empty());

    // The same message lost again is news again (a resend failed too).
    let pages = op(
        &store,
        "o4",
        apply("main", exhausted("ep_1", "msg_3"), 8_000),
    )
    .await;
    assert_eq!(
        kinds(&pages),
        [("ep_1", SvixAlert::MessagesExhausted, true)]
    );
    store.close().await.unwrap();
}

/// Past `MAX_ENDPOINTS_PER_SOURCE` tracked endpoints, a new unmapped
/// endpoint's state goes to the shared `other` row (so metric series,
/// status rows and pages stay bounded); endpoints already tracked, mapped
/// ones and other sources keep their own rows, and an acknowledgement for
/// a grouped endpoint finds its messages in `other`.
async fn endpoints_past_the_cap_share_the_other_row_per_source(db: TestDb) {
    let store = db.open().await;
    store
        .watch_streams(names(&["identity"]), at(0))
        .await
        .unwrap();
    let cap = usize::try_from(MAX_ENDPOINTS_PER_SOURCE).unwrap();
    for i in 0..cap {
        let id = format!("ep_{i:03}");
        let created = OpEvent::EndpointCreated(endpoint(&id));
        let pages = op(&store, &format!("c{i}"), apply("main", created, 1_000)).await;
        assert!(pages.is_empty());
    }
    assert_eq!(store.svix_endpoints().await.unwrap().len(), cap);

    // A new endpoint past the cap: its lost message pages under `other`.
    let pages = op(
        &store,
        "x1",
        apply("main", exhausted("ep_new", "msg_a"), 2_000),
    )
    .await;
    assert_eq!(
        kinds(&pages),
        [(GROUPED_ENDPOINT, SvixAlert::MessagesExhausted, true)]
    );
    assert!(
        pages[0].summary.contains("this event: endpoint ep_new"),
        "the grouped page names the endpoint: {}",
        pages[0].summary
    );
    // A second one joins the same row and the same burst.
    let pages = op(
        &store,
        "x2",
        apply("main", exhausted("ep_new2", "msg_b"), 2_100),
    )
    .await;
    assert!(pages.is_empty(), "{pages:?}");
    assert_eq!(
        store.svix_grown("main".into()).await.unwrap(),
        [(GROUPED_ENDPOINT.to_owned(), None)]
    );
    let pages = store
        .svix_regroup(
            apply("main", OpEvent::Other, 2_500),
            GROUPED_ENDPOINT.into(),
        )
        .await
        .unwrap();
    assert_eq!(
        kinds(&pages),
        [(GROUPED_ENDPOINT, SvixAlert::MessagesExhausted, true)]
    );

    // Tracked, mapped and other-source endpoints keep rows of their own.
    let pages = op(
        &store,
        "x3",
        apply("main", exhausted("ep_007", "msg_c"), 3_000),
    )
    .await;
    assert_eq!(
        kinds(&pages),
        [("ep_007", SvixAlert::MessagesExhausted, true)]
    );
    let mut mapped = apply("main", exhausted("ep_mapped", "msg_d"), 3_000);
    mapped.mapped = true;
    let pages = op(&store, "x4", mapped).await;
    assert_eq!(
        kinds(&pages),
        [("ep_mapped", SvixAlert::MessagesExhausted, true)]
    );
    let pages = op(
        &store,
        "x5",
        apply("second", exhausted("ep_new", "msg_e"), 3_000),
    )
    .await;
    assert_eq!(
        kinds(&pages),
        [("ep_new", SvixAlert::MessagesExhausted, true)]
    );
    // A grouped endpoint's deletion does not mark the whole group deleted.
    let mut deleted = apply("main", OpEvent::EndpointDeleted(endpoint("ep_new3")), 3_500);
    deleted.event_type = "endpoint.deleted".into();
    let pages = op(&store, "x6", deleted).await;
    assert!(pages.is_empty(), "{pages:?}");

    let rows = store.svix_endpoints().await.unwrap();
    let main: Vec<&str> = rows
        .iter()
        .filter(|r| r.source == "main")
        .map(|r| r.endpoint_id.as_str())
        .collect();
    assert_eq!(main.len(), cap + 2, "the cap, `other` and the mapped one");
    assert!(main.contains(&"ep_mapped") && !main.contains(&"ep_new"));
    let other = rows
        .iter()
        .find(|r| r.source == "main" && r.endpoint_id == GROUPED_ENDPOINT)
        .expect("the grouped row");
    assert_eq!(
        (other.app_id.as_deref(), other.endpoint_uid.as_deref()),
        (None, None)
    );
    assert!(!other.deleted);
    assert_eq!(other.exhausted_total, 2);
    let lost: Vec<&str> = other.lost.iter().map(|m| m.msg_id.as_str()).collect();
    assert_eq!(lost, ["msg_a", "msg_b"]);
    let second: Vec<&str> = rows
        .iter()
        .filter(|r| r.source == "second")
        .map(|r| r.endpoint_id.as_str())
        .collect();
    assert_eq!(second, ["ep_new"]);

    // The operator acknowledges by the endpoint id the page named.
    let (acked, left, pages) = store
        .svix_acknowledge(
            apply("main", OpEvent::Other, 4_000),
            "ep_new".into(),
            names(&["msg_a", "msg_b"]),
        )
        .await
        .unwrap();
    assert_eq!((acked, left), (2, 0));
    assert_eq!(
        kinds(&pages),
        [(GROUPED_ENDPOINT, SvixAlert::MessagesExhausted, false)]
    );
    store.close().await.unwrap();
}

fn attempt(msg: &str, attempt_ms: i64) -> AttemptRef {
    AttemptRef {
        msg_id: msg.into(),
        msg_event_id: None,
        status_code: 0,
        attempt_at: Some(at(attempt_ms)),
    }
}

/// `record_svix` applies endpoint news the same way on every engine: a
/// disable pages (critical when automatic, a warning when manual) and an
/// enable resolves it; a failing message warns and its recovery resolves,
/// older news arriving late changes nothing, `failing` never un-loses an
/// exhausted message; a mapped endpoint's deletion notifies once, an
/// unmapped one's is only recorded; a configured `clear_on` event clears.
async fn disable_failing_and_mapped_deletion_page_alike_and_late_news_is_ignored(db: TestDb) {
    let store = db.open().await;
    store
        .watch_streams(names(&["identity"]), at(0))
        .await
        .unwrap();
    let disabled = |trigger| OpEvent::EndpointDisabled {
        endpoint: endpoint("ep_1"),
        fail_since: Some(at(500)),
        trigger,
    };
    let pages = op(
        &store,
        "d1",
        apply("main", disabled(Trigger::Automatic), 1_000),
    )
    .await;
    assert_eq!(kinds(&pages), [("ep_1", SvixAlert::EndpointDisabled, true)]);
    assert_eq!(pages[0].severity, Severity::Critical);
    let again = op(
        &store,
        "d2",
        apply("main", disabled(Trigger::Automatic), 1_100),
    )
    .await;
    assert!(again.is_empty(), "already disabled: {again:?}");
    let row = store.svix_endpoints().await.unwrap().remove(0);
    assert_eq!(row.disabled, Some(DisableTrigger::Automatic));
    assert_eq!(
        (row.fail_since, row.disabled_at),
        (Some(at(500)), Some(at(1_100)))
    );
    let enabled = OpEvent::EndpointEnabled(endpoint("ep_1"));
    let pages = op(&store, "d3", apply("main", enabled, 1_200)).await;
    assert_eq!(
        kinds(&pages),
        [("ep_1", SvixAlert::EndpointDisabled, false)]
    );
    let pages = op(
        &store,
        "d4",
        apply("main", disabled(Trigger::Manual), 1_300),
    )
    .await;
    assert_eq!(pages[0].severity, Severity::Warning, "{pages:?}");
    // A configured clear_on event type clears the disable too.
    let mut updated = apply("main", OpEvent::EndpointUpdated(endpoint("ep_1")), 1_400);
    updated.event_type = "endpoint.updated".into();
    updated.clears_on = names(&["endpoint.updated"]);
    let pages = op(&store, "d5", updated).await;
    assert_eq!(
        kinds(&pages),
        [("ep_1", SvixAlert::EndpointDisabled, false)]
    );

    let failing = |msg: &str, ms| OpEvent::AttemptFailing {
        endpoint: endpoint("ep_2"),
        attempt: attempt(msg, ms),
    };
    let recovered = |msg: &str, ms| OpEvent::AttemptRecovered {
        endpoint: endpoint("ep_2"),
        attempt: attempt(msg, ms),
    };
    let pages = op(&store, "f1", apply("main", failing("msg_f", 2_000), 2_000)).await;
    assert_eq!(kinds(&pages), [("ep_2", SvixAlert::EndpointFailing, true)]);
    assert_eq!(pages[0].severity, Severity::Warning);
    let late = op(
        &store,
        "f2",
        apply("main", recovered("msg_f", 1_900), 2_100),
    )
    .await;
    assert!(late.is_empty(), "older news is ignored: {late:?}");
    let pages = op(
        &store,
        "f3",
        apply("main", recovered("msg_f", 2_200), 2_200),
    )
    .await;
    assert_eq!(kinds(&pages), [("ep_2", SvixAlert::EndpointFailing, false)]);
    let lost = OpEvent::AttemptExhausted {
        endpoint: endpoint("ep_2"),
        attempt: attempt("msg_g", 2_300),
    };
    let pages = op(&store, "f4", apply("main", lost, 2_300)).await;
    assert_eq!(
        kinds(&pages),
        [("ep_2", SvixAlert::MessagesExhausted, true)]
    );
    let pages = op(&store, "f5", apply("main", failing("msg_g", 2_400), 2_400)).await;
    assert!(pages.is_empty(), "failing never un-loses: {pages:?}");
    let rows = store.svix_endpoints().await.unwrap();
    let ep2 = rows.iter().find(|r| r.endpoint_id == "ep_2").unwrap();
    assert_eq!((ep2.failing, ep2.lost.len()), (0, 1), "{ep2:?}");
    assert_eq!(ep2.lost[0].attempt_at, Some(at(2_300)));

    let deleted = |id: &str, mapped: bool, ms| {
        let mut a = apply("main", OpEvent::EndpointDeleted(endpoint(id)), ms);
        a.event_type = "endpoint.deleted".into();
        a.mapped = mapped;
        a
    };
    let pages = op(&store, "x1", deleted("ep_mapped", true, 3_000)).await;
    assert_eq!(
        kinds(&pages),
        [("ep_mapped", SvixAlert::EndpointDeleted, true)]
    );
    assert_eq!(pages[0].severity, Severity::Warning);
    let pages = op(&store, "x2", deleted("ep_loose", false, 3_000)).await;
    assert!(
        pages.is_empty(),
        "an unmapped deletion only records: {pages:?}"
    );
    let rows = store.svix_endpoints().await.unwrap();
    for id in ["ep_mapped", "ep_loose"] {
        let row = rows.iter().find(|r| r.endpoint_id == id).unwrap();
        assert!(row.deleted, "{row:?}");
    }
    let outbox = svix_outbox(&store).await;
    let kinds_queued: Vec<&str> = outbox.iter().map(|r| r.alert_kind.as_str()).collect();
    assert_eq!(
        kinds_queued,
        [
            "svix_endpoint_disabled",
            "svix_endpoint_disabled",
            "svix_endpoint_disabled",
            "svix_endpoint_disabled",
            "svix_endpoint_failing",
            "svix_endpoint_failing",
            "svix_messages_exhausted",
            "svix_endpoint_deleted",
        ]
    );
    store.close().await.unwrap();
}
