//! Many streams: the timer orders them by `fires_at` and evaluates only the
//! due ones, so each of 1,000 streams with its own deadline fires when the
//! clock reaches that deadline, and not a second before.

mod common;

use common::*;
use hushwatch::store::AlertState;
use std::time::Duration;

const STREAMS: usize = 1_000;
/// Streams fire this far apart.
const STAGGER_SECS: i64 = 7;

fn many_streams_config(n: usize) -> String {
    let mut text = String::from(
        "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = \"data\"\n\n[notifiers.stdout]\nkind = \"log\"\n",
    );
    for i in 0..n {
        // Thresholds of one hour plus a per-stream offset: deadlines in a
        // shuffled order relative to the names, so the order is the timer's.
        let offset = (i * 613) % n;
        text.push_str(&format!(
            "\n[streams.s{i:04}]\ncalendar = \"always\"\nsilence_threshold = \"{}s\"\nnotify = [\"stdout\"]\n[streams.s{i:04}.ingest]\ntoken = \"{TOKEN}\"\n",
            3600 + offset as i64 * STAGGER_SECS
        ));
    }
    text
}

/// Names of the streams the store has firing, with when each fired.
fn firing(s: &InProcess) -> Vec<(String, chrono::DateTime<chrono::Utc>)> {
    let rows = s.block_on(s.app().store.streams()).unwrap();
    rows.into_iter()
        .filter(|r| r.alert_state == AlertState::Firing)
        .map(|r| (r.name, r.firing_since.unwrap()))
        .collect()
}

#[test]
fn a_thousand_streams_each_fire_at_their_own_instant() {
    let start = utc("2026-12-01T00:00:00Z");
    let work = Workdir::new(&many_streams_config(STREAMS));
    let s = InProcess::start(&work, start);
    // Stream with offset k fires at start + 1h + 7k s.
    let mut by_offset = vec![String::new(); STREAMS];
    for i in 0..STREAMS {
        by_offset[(i * 613) % STREAMS] = format!("s{i:04}");
    }
    let wait = Duration::from_secs(10);
    for (k, name) in by_offset.iter().enumerate() {
        let due = start + chrono::TimeDelta::seconds(3600 + k as i64 * STAGGER_SECS);
        // One second before: everything earlier has fired, this one has not.
        s.set_time(due - chrono::TimeDelta::seconds(1));
        let before = wait_for(wait, &format!("{k} streams firing"), || {
            let f = firing(&s);
            (f.len() >= k).then_some(f)
        });
        assert_eq!(before.len(), k, "{name} or a later stream fired early");
        assert!(!before.iter().any(|(n, _)| n == name));
        // At its instant: this one fires, at exactly its fires_at.
        s.set_time(due);
        let after = wait_for(wait, &format!("{name} firing"), || {
            let f = firing(&s);
            (f.len() > k).then_some(f)
        });
        assert_eq!(after.len(), k + 1, "only {name} is due at {due}");
        let (_, since) = after.iter().find(|(n, _)| n == name).expect("fired");
        assert_eq!(*since, due);
    }
}
