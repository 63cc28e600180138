//! Silence alerts driven by a controllable clock: the alert flips exactly at
//! the threshold instant (business time), clears on the next event, and
//! every transition leaves a page in the outbox for the stream's notifiers.

use crate::common;

use common::*;
use std::time::Duration;

const FLIP: Duration = Duration::from_secs(5);

fn state(s: &InProcess) -> serde_json::Value {
    stream_status(s.addr, "identity")
}

/// The stream's status once the silence timer has decided everything due
/// by the clock's current time: its last recorded pass is shown, and its
/// next wake-up is after `now` (or only on an event). Reading the state
/// before that would pass even if the timer were about to fire wrongly.
fn settled_state(s: &InProcess) -> serde_json::Value {
    wait_for(FLIP, "the timer to evaluate up to now", || {
        let doc = get(s.addr, "/v1/status").json();
        let now = doc["now"].as_str()?;
        doc["evaluated_at"].as_str()?;
        let idle = match doc["next_evaluation_at"].as_str() {
            None => true,
            Some(next) => utc(next) > utc(now),
        };
        idle.then(|| state(s))
    })
}

fn wait_state(s: &InProcess, want: &str) -> serde_json::Value {
    wait_for(FLIP, &format!("state {want}"), || {
        let st = state(s);
        (st["state"] == want).then_some(st)
    })
}

#[test]
fn never_seen_stream_fires_on_business_time_and_clears_on_the_next_event() {
    // Watching starts Friday 17:00 in Tokyo; 2 business hours = 1h Friday +
    // 1h Monday, so the alert is due Monday 10:00 JST, not Friday 19:00.
    let work = Workdir::new(&basic_config(
        "calendar = \"tokyo\"\nsilence_threshold = \"2h\"",
    ));
    let s = InProcess::start(&work, utc("2026-12-04T17:00:00+09:00"));
    let st = state(&s);
    assert_eq!(st["fires_at"], "2026-12-07T01:00:00.000Z");
    assert_eq!(st["watching_since"], "2026-12-04T08:00:00.000Z");

    // Over the weekend nothing accrues and nothing fires.
    s.set_time(utc("2026-12-06T23:59:59+09:00"));
    let st = settled_state(&s);
    assert_eq!(st["state"], "ok");
    assert_eq!(st["business_silence_seconds"], 3600);

    // One second before the threshold: still ok.
    s.set_time(utc("2026-12-07T09:59:59+09:00"));
    let st = settled_state(&s);
    assert_eq!(st["business_silence_seconds"], 7199);
    assert_eq!(st["state"], "ok");

    // At the threshold instant the timer fires; firing_since is exact.
    s.set_time(utc("2026-12-07T10:00:00+09:00"));
    let st = wait_state(&s, "firing");
    assert_eq!(st["firing_since"], "2026-12-07T01:00:00.000Z");
    assert_eq!(
        metric(s.addr, r#"hushwatch_silence_alert{stream="identity"}"#),
        1.0
    );

    // The next accepted event clears it.
    s.set_time(utc("2026-12-07T10:30:00+09:00"));
    let reply = post_events(
        s.addr,
        "identity",
        TOKEN,
        r#"{"type":"user.deleted","id":"u1"}"#,
    );
    assert_eq!(reply.status, 200);
    let st = wait_state(&s, "ok");
    assert_eq!(st["last_event_at"], "2026-12-07T01:30:00.000Z");
    assert_eq!(st["fires_at"], "2026-12-07T03:30:00.000Z");
    assert_eq!(
        metric(s.addr, r#"hushwatch_silence_alert{stream="identity"}"#),
        0.0
    );
}

#[test]
fn max_silence_backstop_fires_outside_business_hours() {
    let work = Workdir::new(&basic_config(
        "calendar = \"tokyo\"\nsilence_threshold = \"6h\"\nmax_silence = \"24h\"",
    ));
    let s = InProcess::start(&work, utc("2026-12-04T17:30:00+09:00"));
    assert_eq!(state(&s)["reason"], "max_silence");
    s.set_time(utc("2026-12-05T17:29:59+09:00"));
    assert_eq!(settled_state(&s)["state"], "ok");
    s.set_time(utc("2026-12-05T17:30:00+09:00"));
    let st = wait_state(&s, "firing");
    assert_eq!(st["firing_since"], "2026-12-05T08:30:00.000Z");
}

#[test]
fn wall_clock_jumps_neither_page_early_nor_miss_the_page() {
    let work = Workdir::new(&basic_config(
        "calendar = \"always\"\nsilence_threshold = \"1h\"",
    ));
    let s = InProcess::start(&work, utc("2026-12-01T00:00:00Z"));
    // Back a day, then forward to just before the deadline: no page.
    s.set_time(utc("2026-11-30T00:00:00Z"));
    assert_eq!(state(&s)["business_silence_seconds"], 0);
    s.set_time(utc("2026-12-01T00:59:59Z"));
    let st = settled_state(&s);
    assert_eq!(st["state"], "ok");
    assert_eq!(st["fires_at"], "2026-12-01T01:00:00.000Z");
    // A jump far past the deadline pages once, dated at the deadline.
    s.set_time(utc("2026-12-03T00:00:00Z"));
    let st = wait_state(&s, "firing");
    assert_eq!(st["firing_since"], "2026-12-01T01:00:00.000Z");
}

/// `hushwatch explain` as a user runs it, against `work`'s config.
fn explain(work: &Workdir, last_event: &str, now: &str) -> serde_json::Value {
    let config = work.config_path();
    let out = cli(&["explain"])
        .config(&config)
        .args(&[
            "--stream",
            "identity",
            "--last-event",
            last_event,
            "--now",
            now,
        ])
        .output();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn an_edge_inside_a_dst_gap_is_the_jump_to_the_second() {
    // Issue #12's case: 02:23 never appears on New York's wall clock on
    // 2026-03-08; the window opens when the clock jumps (07:00:00Z) and is
    // the whole hour to 04:00 EDT.
    let config = basic_config("calendar = \"gap\"\nsilence_threshold = \"1m\"").replace(
        "[streams.identity]",
        "[calendars.gap]\ntimezone = \"America/New_York\"\nweekly = [\"sun 02:23-04:00\"]\n\n[streams.identity]",
    );
    let work = Workdir::new(&config);
    let last = "2026-03-06T17:00:00Z";
    let at = explain(&work, last, "2026-03-08T07:01:00Z");
    assert_eq!(at["fires_at"], "2026-03-08T07:01:00Z");
    assert_eq!(at["firing"], true);
    assert_eq!(at["business_silence_seconds"], 60);
    let before = explain(&work, last, "2026-03-08T07:00:59Z");
    assert_eq!(before["firing"], false);
    let whole = explain(&work, last, "2026-03-08T09:00:00Z");
    assert_eq!(whole["business_silence_seconds"], 3600);
}

/// The app without its timer or HTTP server, so a test decides exactly
/// when evaluation, recording and events happen.
struct Bare {
    rt: tokio::runtime::Runtime,
    clock: std::sync::Arc<hushwatch::clock::ManualClock>,
    app: hushwatch::service::app::App,
    _work: Workdir,
}

impl Bare {
    fn start(threshold: &str, now: chrono::DateTime<chrono::Utc>) -> Bare {
        let work = Workdir::new(&basic_config(&format!(
            "calendar = \"always\"\nsilence_threshold = \"{threshold}\""
        )));
        let config = hushwatch::config::load(&work.config_path()).unwrap();
        std::fs::create_dir_all(&config.server.data_dir).unwrap();
        let store = hushwatch::store::Store::open(
            &config.server.data_dir.join(hushwatch::service::STATE_FILE),
        )
        .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let clock = std::sync::Arc::new(hushwatch::clock::ManualClock::new(now));
        let app = rt
            .block_on(hushwatch::service::app::App::new(
                config,
                store,
                clock.clone(),
            ))
            .unwrap();
        Bare {
            rt,
            clock,
            app,
            _work: work,
        }
    }

    fn event(&self, id: &str) -> hushwatch::store::NewEvent {
        hushwatch::store::NewEvent {
            stream: "identity".into(),
            delivery_id: Some(id.into()),
            event_type: "user.updated".into(),
            event_time: None,
            received_at: hushwatch::clock::Clock::now(&*self.clock),
            feeds_clock: true,
            body_sha256: None,
            channel: "report",
            signature_verified: false,
            subject_ids: Vec::new(),
            audit: false,
            access: None,
            forward: None,
        }
    }

    /// An event through the app (store commit, then the in-memory row).
    fn ingest(&self, id: &str) {
        self.rt
            .block_on(self.app.ingest(vec![self.event(id)]))
            .unwrap();
    }

    /// Pages in the outbox, as (state, at).
    fn pages(&self) -> Vec<(String, chrono::DateTime<chrono::Utc>)> {
        let rows = self
            .rt
            .block_on(self.app.store().pending_outbox())
            .unwrap()
            .rows;
        rows.iter()
            .map(|r| (format!("{:?}", r.state), r.at))
            .collect()
    }

    fn stored_state(&self) -> hushwatch::store::AlertState {
        let rows = self.rt.block_on(self.app.store().streams()).unwrap();
        rows[0].alert_state.clone()
    }
}

#[test]
fn an_event_committed_between_evaluation_and_record_withdraws_the_fire() {
    let start = utc("2026-12-01T00:00:00Z");
    let b = Bare::start("1h", start);
    b.clock.set(utc("2026-12-01T02:00:00Z"));
    let plan = b.app.plan_transitions();
    assert_eq!(plan.transitions(), [("identity", true)]);

    // The forced interleaving: an event commits after the evaluation.
    b.ingest("late-1");
    let next = b.rt.block_on(b.app.record_planned(plan)).unwrap();
    assert_eq!(
        next,
        Some(utc("2026-12-01T02:00:00Z")),
        "re-evaluate at once"
    );
    assert_eq!(b.pages(), [], "no fire page");
    assert_eq!(b.stored_state(), hushwatch::store::AlertState::Ok);

    // The next pass sees the event: nothing to record, so no resolve page
    // either, and the stream now fires an hour after that event.
    let next = b.rt.block_on(b.app.evaluate_all()).unwrap();
    assert_eq!(next, Some(utc("2026-12-01T03:00:00Z")));
    assert_eq!(b.pages(), []);
    assert_eq!(stream_of(&b.app.status())["state"], "ok");

    b.clock.set(utc("2026-12-01T03:00:00Z"));
    b.rt.block_on(b.app.evaluate_all()).unwrap();
    assert_eq!(
        b.pages(),
        [("Firing".to_string(), utc("2026-12-01T03:00:00Z"))]
    );
}

#[test]
fn a_fire_is_withdrawn_even_before_the_in_memory_row_has_the_event() {
    // The event reaches the store by another path than this app's ingest
    // (as another replica's would): the store still refuses the fire and
    // hands back its row, so the app does not retry the same stale fire.
    let b = Bare::start("1h", utc("2026-12-01T00:00:00Z"));
    b.clock.set(utc("2026-12-01T01:30:00Z"));
    let plan = b.app.plan_transitions();
    assert_eq!(plan.transitions(), [("identity", true)]);
    b.rt.block_on(b.app.store().record_events(vec![b.event("other-path")]))
        .unwrap();
    b.rt.block_on(b.app.record_planned(plan)).unwrap();
    assert_eq!(b.pages(), []);
    assert_eq!(
        stream_of(&b.app.status())["last_event_at"],
        "2026-12-01T01:30:00.000Z"
    );
    let next = b.rt.block_on(b.app.evaluate_all()).unwrap();
    assert_eq!(next, Some(utc("2026-12-01T02:30:00Z")));
    assert_eq!(b.pages(), []);
}

#[test]
fn a_resolve_is_recorded_even_when_more_events_arrive_meanwhile() {
    let b = Bare::start("1h", utc("2026-12-01T00:00:00Z"));
    b.clock.set(utc("2026-12-01T01:00:00Z"));
    b.rt.block_on(b.app.evaluate_all()).unwrap();
    assert_eq!(b.stored_state(), hushwatch::store::AlertState::Firing);

    b.clock.set(utc("2026-12-01T01:10:00Z"));
    b.ingest("back-1");
    let plan = b.app.plan_transitions();
    assert_eq!(plan.transitions(), [("identity", false)]);
    b.clock.set(utc("2026-12-01T01:10:01Z"));
    b.ingest("back-2");
    b.rt.block_on(b.app.record_planned(plan)).unwrap();
    assert_eq!(b.stored_state(), hushwatch::store::AlertState::Ok);
    b.rt.block_on(b.app.evaluate_all()).unwrap();
    assert_eq!(
        b.pages(),
        [
            ("Firing".to_string(), utc("2026-12-01T01:00:00Z")),
            ("Ok".to_string(), utc("2026-12-01T01:10:00Z")),
        ]
    );
}

fn stream_of(status: &serde_json::Value) -> serde_json::Value {
    status["streams"][0].clone()
}
