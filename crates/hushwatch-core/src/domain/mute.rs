//! Operator silences and acknowledgements (issue #17): what they hold and
//! when (not to be confused with `domain::silence`, the evaluation of a
//! quiet stream). The store reads the rows each decision names, calls it
//! inside the writer's transaction and writes what it returns
//! (`store::silences`), so replicas on a shared store decide alike.
//!
//! - A silence matches (stream, kind) at `t` when `starts_at <= t < ends_at`
//!   and both lists match (`*` matches any run of characters, [`glob`]);
//!   its kinds must each match a kind a page can carry ([`is_known_kind`]).
//! - A firing page under a silence is held, and queued once when the
//!   silence ends if the alert is still current, else dropped
//!   ([`on_transition`], [`release`]); a resolve is not paged when the
//!   receivers were never told the alert fired.
//! - Reminders and escalation steps stop while the episode is acknowledged
//!   or silenced, and never precede its firing page ([`extra_allowed`]).
//! - Adding is capped ([`has_room`]); expiring ends a silence now, never
//!   before its start ([`expiry`]); the configured maintenance windows are
//!   silences by [`CONFIG_AUTHOR`], kept in step by [`maintenance_plan`].
//! - Each operator action's audit entry is worded once ([`Note`]).

use super::alert::AlertStatus;
use chrono::{DateTime, Utc};

/// Every alert kind an operator silence can hold (the outbox `alert_kind`,
/// the notifiers' `kind`; `domain::alert_kind::AlertKind::silenceable`). A
/// silence's `kinds` patterns must each match one of them, so a typo is
/// refused instead of silently holding nothing. (`svix` on pre-v8 outbox
/// rows is not a kind new pages carry; pages about hushwatch itself cannot
/// be silenced.)
pub const PAGE_KINDS: &[&str] = &super::alert_kind::SILENCEABLE;

/// True when `pattern` matches at least one of [`PAGE_KINDS`].
pub fn is_known_kind(pattern: &str) -> bool {
    PAGE_KINDS.iter().any(|k| glob(pattern, k))
}

/// `*` matches any run of characters; everything else matches itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let Some((head, rest)) = pattern.split_once('*') else {
        return pattern == text;
    };
    let Some(mut tail) = text.strip_prefix(head) else {
        return false;
    };
    let parts: Vec<&str> = rest.split('*').collect();
    let (last, middle) = parts.split_last().unwrap_or((&"", &[]));
    for part in middle {
        match tail.find(part) {
            Some(i) => tail = &tail[i + part.len()..],
            None => return false,
        }
    }
    tail.len() >= last.len() && tail.ends_with(last)
}

/// A silence as requested (already validated by the caller).
#[derive(Debug, Clone, PartialEq)]
pub struct NewSilence {
    pub streams: Vec<String>,
    pub kinds: Vec<String>,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub comment: String,
    pub created_by: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SilenceRow {
    pub id: i64,
    pub streams: Vec<String>,
    pub kinds: Vec<String>,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub comment: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub expired_by: Option<String>,
}

impl SilenceRow {
    pub fn active_at(&self, t: DateTime<Utc>) -> bool {
        self.starts_at <= t && t < self.ends_at
    }

    pub fn matches(&self, stream: &str, kind: &str) -> bool {
        self.streams.iter().any(|p| glob(p, stream)) && self.kinds.iter().any(|p| glob(p, kind))
    }
}

/// True when one of `active` (the silences active at the moment asked
/// about) covers (stream, kind).
pub fn covers(active: &[SilenceRow], stream: &str, kind: &str) -> bool {
    active.iter().any(|s| s.matches(stream, kind))
}

/// What an alert transition does with its pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnTransition {
    /// Queue the pages.
    Page,
    /// A silence covers the firing: store it as the alert's held page
    /// (replacing an older one), queue nothing.
    Hold,
    /// Queue nothing: the resolve of a held page whose receivers were never
    /// told the alert fired.
    Drop,
}

/// The transition to `to`, given (read only where they matter):
/// - `silenced`: a silence of the page's kind covers the transition's time
///   (a firing);
/// - `held`: the alert had a held firing page, which the resolve took;
/// - `told_firing`: the receivers' last page of this alert said firing (a
///   stream's held page is its episode's first, so `false` for a stream).
pub fn on_transition(
    to: AlertStatus,
    silenced: bool,
    held: bool,
    told_firing: bool,
) -> OnTransition {
    match to {
        AlertStatus::Firing if silenced => OnTransition::Hold,
        AlertStatus::Ok if held && !told_firing => OnTransition::Drop,
        _ => OnTransition::Page,
    }
}

/// What happens to one held page when held pages are released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// A silence still covers it: it stays held.
    Keep,
    /// Its silence is over and the alert is still current: queue it once.
    Page,
    /// Its silence is over but the alert is not current any more (the
    /// episode resolved, the templated stream was removed): forget it.
    Drop,
}

/// `still_current` is read only once `silenced` is false.
pub fn release(silenced: bool, still_current: bool) -> Release {
    match (silenced, still_current) {
        (true, _) => Release::Keep,
        (false, true) => Release::Page,
        (false, false) => Release::Drop,
    }
}

/// Whether a reminder or escalation step due at `at_ms` may be queued: not
/// when the episode is acknowledged, not when it fell due under a silence,
/// and not before the episode's firing page was queued (a firing page held
/// by a silence goes out when it ends, without the steps that fell due in
/// the meantime: one page, not a burst). `first_firing_page`: when the
/// episode's first firing page was queued. With no firing page at all,
/// either it is still `held` (no extras yet) or the stream notifies nobody
/// directly (escalation-only streams).
pub fn extra_allowed(
    acknowledged: bool,
    silenced: bool,
    first_firing_page: Option<i64>,
    held: bool,
    at_ms: i64,
) -> bool {
    if acknowledged || silenced {
        return false;
    }
    match first_firing_page {
        Some(first) => at_ms >= first,
        None => !held,
    }
}

/// Whether a silence may be added while `live` silences have not ended.
pub fn has_room(live: i64, cap: usize) -> bool {
    usize::try_from(live).unwrap_or(usize::MAX) < cap
}

/// The end an expiry at `now` gives `row`: `None` when it has already
/// ended (nothing to do); never before its start, so an expired future
/// silence covers no instant.
pub fn expiry(row: &SilenceRow, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    (row.ends_at > now).then(|| row.starts_at.max(now))
}

/// Who planned maintenance windows are stored as created by.
pub const CONFIG_AUTHOR: &str = "config";

/// A planned maintenance window: (stream, from, until, comment).
pub type Window = (String, DateTime<Utc>, DateTime<Utc>, String);

/// What syncing the maintenance windows does.
#[derive(Debug, Clone, PartialEq)]
pub struct MaintenancePlan {
    /// Stored windows no longer configured: expire these silences now.
    pub expire: Vec<i64>,
    /// Configured windows not stored yet (and not over): add these.
    pub add: Vec<NewSilence>,
}

/// Compares the configured `windows` with `stored` (the silences ending
/// after `now`): only unexpired silences by [`CONFIG_AUTHOR`] are windows.
pub fn maintenance_plan(
    stored: &[SilenceRow],
    windows: &[Window],
    now: DateTime<Utc>,
) -> MaintenancePlan {
    let stored: Vec<&SilenceRow> = stored
        .iter()
        .filter(|s| s.created_by == CONFIG_AUTHOR && s.expired_by.is_none())
        .collect();
    let same = |s: &SilenceRow, w: &Window| {
        s.streams == [w.0.clone()] && s.starts_at == w.1 && s.ends_at == w.2
    };
    MaintenancePlan {
        expire: stored
            .iter()
            .filter(|s| !windows.iter().any(|w| same(s, w)))
            .map(|s| s.id)
            .collect(),
        add: windows
            .iter()
            .filter(|w| w.2 > now && !stored.iter().any(|s| same(s, w)))
            .map(|w| NewSilence {
                streams: vec![w.0.clone()],
                kinds: vec!["*".to_string()],
                starts_at: w.1,
                ends_at: w.2,
                comment: w.3.clone(),
                created_by: CONFIG_AUTHOR.to_string(),
            })
            .collect(),
    }
}

/// An operator action's audit entry, the same on both engines: the stream
/// it is filed under, its delivery id, event type and subject ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub stream: String,
    pub id: String,
    pub event_type: &'static str,
    pub subject: Vec<(String, String)>,
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl Note {
    pub fn created(id: i64, s: &NewSilence) -> Note {
        Note {
            stream: s.streams.join(","),
            id: format!("silence-{id}"),
            event_type: "hushwatch.silence.created",
            subject: vec![
                ("created_by".into(), s.created_by.clone()),
                ("comment".into(), s.comment.clone()),
                ("silence_id".into(), id.to_string()),
                ("kinds".into(), s.kinds.join(",")),
                ("starts_at".into(), rfc(s.starts_at)),
                ("ends_at".into(), rfc(s.ends_at)),
            ],
        }
    }

    pub fn expired(row: &SilenceRow, by: &str, comment: Option<&str>) -> Note {
        let mut subject = vec![
            ("created_by".into(), by.to_string()),
            ("silence_id".into(), row.id.to_string()),
        ];
        if let Some(comment) = comment {
            subject.push(("comment".into(), comment.to_string()));
        }
        Note {
            stream: row.streams.join(","),
            id: format!("silence-{}-expired", row.id),
            event_type: "hushwatch.silence.expired",
            subject,
        }
    }

    /// `started`: the episode's start (ms), as stored.
    /// `n` open findings of the stream's `provider_missed` pages were
    /// acknowledged with the stream (issue #45).
    pub fn findings_acknowledged(stream: &str, n: usize, at: i64, by: &str, comment: &str) -> Note {
        Note {
            stream: stream.to_string(),
            id: format!("ack-findings-{stream}-{at}"),
            event_type: "hushwatch.crosscheck.acknowledged",
            subject: vec![
                ("created_by".into(), by.to_string()),
                ("comment".into(), comment.to_string()),
                ("findings".into(), n.to_string()),
            ],
        }
    }

    pub fn acknowledged(stream: &str, started: i64, by: &str, comment: &str) -> Note {
        let started_at = DateTime::from_timestamp_millis(started).unwrap_or_default();
        Note {
            stream: stream.to_string(),
            id: format!("ack-{stream}-{started}"),
            event_type: "hushwatch.stream.acknowledged",
            subject: vec![
                ("created_by".into(), by.to_string()),
                ("comment".into(), comment.to_string()),
                ("episode_started_at".into(), rfc(started_at)),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).unwrap()
    }

    fn row(id: i64, streams: &[&str], kinds: &[&str], from: i64, until: i64) -> SilenceRow {
        SilenceRow {
            id,
            streams: streams.iter().map(|s| s.to_string()).collect(),
            kinds: kinds.iter().map(|s| s.to_string()).collect(),
            starts_at: at(from),
            ends_at: at(until),
            comment: "c".into(),
            created_by: CONFIG_AUTHOR.into(),
            created_at: at(0),
            expired_by: None,
        }
    }

    #[test]
    fn covers_needs_a_silence_matching_stream_and_kind() {
        let active = [
            row(1, &["okta-*"], &["silence"], 0, 10),
            row(2, &["*"], &["svix_*"], 0, 10),
        ];
        assert!(covers(&active, "okta-prod", "silence"));
        assert!(covers(&active, "github", "svix_endpoint_disabled"));
        assert!(!covers(&active, "github", "silence"), "stream unmatched");
        assert!(
            !covers(&active, "okta-prod", "stale_grant"),
            "kind unmatched"
        );
        assert!(!covers(&[], "okta-prod", "silence"), "no active silence");
    }

    #[test]
    fn a_firing_is_held_only_under_a_silence() {
        use OnTransition::*;
        let firing = AlertStatus::Firing;
        assert_eq!(on_transition(firing, true, false, false), Hold);
        assert_eq!(on_transition(firing, false, false, false), Page);
        // A held page is only taken by a resolve; a firing ignores it.
        assert_eq!(on_transition(firing, false, true, true), Page);
    }

    #[test]
    fn a_resolve_is_dropped_only_when_nobody_was_told_it_fired() {
        use OnTransition::*;
        let ok = AlertStatus::Ok;
        assert_eq!(on_transition(ok, false, false, false), Page, "nothing held");
        assert_eq!(
            on_transition(ok, false, true, false),
            Drop,
            "held, never told"
        );
        // A keyed alert paged firing before a newer firing was held:
        // its receivers wait for this resolve.
        assert_eq!(on_transition(ok, false, true, true), Page);
        // A silence does not hold a resolve.
        assert_eq!(on_transition(ok, true, false, false), Page);
    }

    #[test]
    fn a_held_page_waits_for_its_silence_then_pages_only_if_current() {
        assert_eq!(release(true, true), Release::Keep);
        assert_eq!(release(true, false), Release::Keep);
        assert_eq!(release(false, true), Release::Page);
        assert_eq!(release(false, false), Release::Drop);
    }

    #[test]
    fn extras_wait_for_the_firing_page_and_stop_when_acked_or_silenced() {
        assert!(
            !extra_allowed(true, false, Some(1), false, 5),
            "acknowledged"
        );
        assert!(!extra_allowed(false, true, Some(1), false, 5), "silenced");
        assert!(
            extra_allowed(false, false, Some(5), false, 5),
            "due at the page"
        );
        assert!(
            !extra_allowed(false, false, Some(6), false, 5),
            "fell due before it"
        );
        assert!(
            !extra_allowed(false, false, None, true, 5),
            "page still held"
        );
        assert!(
            extra_allowed(false, false, None, false, 5),
            "escalation-only"
        );
    }

    #[test]
    fn the_cap_counts_live_silences() {
        assert!(has_room(2, 3));
        assert!(!has_room(3, 3));
        assert!(!has_room(4, 3));
        assert!(has_room(i64::MAX, usize::MAX) || usize::BITS < 64);
        assert!(
            !has_room(-1, 0),
            "a negative count is no room under a zero cap"
        );
    }

    #[test]
    fn expiry_ends_now_but_never_before_the_start() {
        let now = at(5_000);
        assert_eq!(expiry(&row(1, &["a"], &["*"], 0, 9_000), now), Some(now));
        assert_eq!(
            expiry(&row(1, &["a"], &["*"], 7_000, 9_000), now),
            Some(at(7_000)),
            "a future silence ends at its start"
        );
        assert_eq!(
            expiry(&row(1, &["a"], &["*"], 0, 5_000), now),
            None,
            "ended"
        );
    }

    #[test]
    fn maintenance_plan_expires_unconfigured_and_adds_new_windows() {
        let now = at(10_000);
        let w = |s: &str, from: i64, until: i64| (s.to_string(), at(from), at(until), "m".into());
        let mut by_hand = row(3, &["b"], &["*"], 0, 20_000);
        by_hand.created_by = "alice".into();
        let mut ended_by_operator = row(4, &["c"], &["*"], 0, 20_000);
        ended_by_operator.expired_by = Some("bob".into());
        let stored = [
            row(1, &["a"], &["*"], 0, 20_000),    // still configured
            row(2, &["gone"], &["*"], 0, 20_000), // no longer configured
            by_hand,                              // not a window
            ended_by_operator,                    // expired: not a window
            row(5, &["d"], &["*"], 0, 30_000),    // moved: until changed
        ];
        let windows = [
            w("a", 0, 20_000),
            w("d", 0, 40_000),
            w("c", 0, 20_000),
            w("past", 0, 10_000), // over at `now`: not added
        ];
        let plan = maintenance_plan(&stored, &windows, now);
        assert_eq!(plan.expire, vec![2, 5]);
        let added: Vec<_> = plan
            .add
            .iter()
            .map(|s| (s.streams[0].as_str(), s.ends_at))
            .collect();
        assert_eq!(added, vec![("d", at(40_000)), ("c", at(20_000))]);
        assert!(plan
            .add
            .iter()
            .all(|s| s.created_by == CONFIG_AUTHOR && s.kinds == ["*"]));
        assert_eq!(plan.add[0].starts_at, at(0));
        assert_eq!(plan.add[0].comment, "m");
    }

    #[test]
    fn notes_name_the_action_and_its_author() {
        let s = row(7, &["a", "b"], &["silence"], 0, 1_000);
        let new = NewSilence {
            streams: s.streams.clone(),
            kinds: s.kinds.clone(),
            starts_at: s.starts_at,
            ends_at: s.ends_at,
            comment: "deploy".into(),
            created_by: "alice".into(),
        };
        let n = Note::created(7, &new);
        assert_eq!((n.stream.as_str(), n.id.as_str()), ("a,b", "silence-7"));
        assert_eq!(n.event_type, "hushwatch.silence.created");
        let n = Note::expired(&s, "bob", None);
        assert_eq!(n.id, "silence-7-expired");
        assert!(!n.subject.iter().any(|(k, _)| k == "comment"));
        let n = Note::expired(&s, "bob", Some("done"));
        assert!(n.subject.contains(&("comment".into(), "done".into())));
        let n = Note::acknowledged("a", 5_000, "carol", "on it");
        assert_eq!(n.id, "ack-a-5000");
        assert_eq!(n.event_type, "hushwatch.stream.acknowledged");
    }

    #[test]
    fn kind_patterns_must_match_a_page_kind() {
        for ok in ["*", "silence", "svix_*", "*_disabled", "subscription_*"] {
            assert!(is_known_kind(ok), "{ok}");
        }
        for typo in ["silenced", "svix_exhausted", "svix", "subscriptions_*", ""] {
            assert!(!is_known_kind(typo), "{typo}");
        }
    }

    #[test]
    fn glob_matches_runs_of_characters() {
        assert!(glob("*", "silence"));
        assert!(glob("silence", "silence"));
        assert!(!glob("silence", "silences"));
        assert!(glob("svix_*", "svix_endpoint_disabled"));
        assert!(!glob("svix_*", "silence"));
        assert!(glob("*_disabled", "svix_endpoint_disabled"));
        assert!(glob("s*e*e", "silence"));
        assert!(!glob("s*x*e", "silence"));
        assert!(!glob("ab*ba", "aba"), "head and tail may not overlap");
    }
}
