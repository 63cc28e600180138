//! Relay mode's decisions (`[streams.X.forward]`, issue #29): when a failed
//! forward is tried again or given up, which consecutive failure pages,
//! and what those pages say. The store reads and writes the rows; every
//! choice it makes about them is one of these functions, so SQLite and
//! PostgreSQL cannot disagree.
//!
//! The retry ladder is AnyHook's (5 m, 30 m, 3 h, 18 h, then daily), far
//! longer than Svix's ~27.5 h, so an app that is down over a weekend still
//! gets every event (`../shared/guides/relay-anchors.md`).

use super::svix::Severity;
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};

/// The delay between attempts once the configured ladder is used up.
pub const AFTER_LADDER: TimeDelta = TimeDelta::hours(24);

/// How a stream's forwards are retried and when they page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ladder {
    /// Delay after the 1st, 2nd, … failed attempt (the first attempt is
    /// immediate); [`AFTER_LADDER`] after the last step.
    pub retry: Vec<TimeDelta>,
    /// Counted from arrival: an event not delivered by then is a dead letter.
    pub give_up_after: TimeDelta,
    /// Consecutive failures (across the stream's events) that page, ascending.
    pub alert_after: Vec<u32>,
}

impl Default for Ladder {
    fn default() -> Self {
        Ladder {
            retry: [5, 30, 180, 1080, 1440]
                .into_iter()
                .map(TimeDelta::minutes)
                .collect(),
            give_up_after: TimeDelta::days(7),
            alert_after: vec![1, 5, 20],
        }
    }
}

/// What happens to an event after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Try again at this instant.
    RetryAt(DateTime<Utc>),
    /// `give_up_after` has passed: keep it for replay and page.
    DeadLetter,
}

/// The next step for an event received at `received_at` whose
/// `attempts`-th attempt (1-based) failed at `now`. The last retry is
/// pulled in to the deadline, so an event always gets an attempt at
/// `give_up_after` before it is given up.
pub fn after_failure(
    ladder: &Ladder,
    received_at: DateTime<Utc>,
    attempts: u32,
    now: DateTime<Utc>,
) -> AfterFailure {
    let deadline = received_at + ladder.give_up_after;
    if now >= deadline {
        return AfterFailure::DeadLetter;
    }
    let step = usize::try_from(attempts.saturating_sub(1)).unwrap_or(usize::MAX);
    let delay = ladder.retry.get(step).copied().unwrap_or(AFTER_LADDER);
    AfterFailure::RetryAt((now + delay).min(deadline))
}

/// A consecutive-failure page to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureStep {
    /// The `alert_after` value reached.
    pub failures: u32,
    pub severity: Severity,
}

/// The page a stream's run of `failures` consecutive failures calls for,
/// given that steps up to `paged` were already paged in this run: each
/// step pages once per run, the last step is critical, the others
/// warnings (AnyHook's 1, 5, 20).
pub fn failure_step(alert_after: &[u32], failures: u32, paged: u32) -> Option<FailureStep> {
    if failures <= paged || !alert_after.contains(&failures) {
        return None;
    }
    let last = alert_after.iter().copied().max() == Some(failures);
    Some(FailureStep {
        failures,
        severity: if last {
            Severity::Critical
        } else {
            Severity::Warning
        },
    })
}

/// Whether a delivery after a run with `paged` steps paged resolves an
/// open `forward_failing` alert.
pub fn delivery_resolves(paged: u32) -> bool {
    paged > 0
}

/// The undelivered event a page names: the oldest one still pending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oldest {
    pub event_type: String,
    pub subject: Option<String>,
    pub delivery_id: String,
    pub received_at: DateTime<Utc>,
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn naming(o: &Oldest) -> String {
    let subject = o
        .subject
        .as_deref()
        .map(|s| format!(" {s}"))
        .unwrap_or_default();
    format!(
        "{}{subject} (delivery {}, received {})",
        o.event_type,
        o.delivery_id,
        rfc(o.received_at)
    )
}

/// What the stream's failing page says.
pub struct FailingPage<'a> {
    pub stream: &'a str,
    pub failures: u32,
    pub last_error: &'a str,
    pub failing_since: DateTime<Utc>,
    pub pending: u64,
    pub oldest: Option<&'a Oldest>,
    pub ordered: bool,
}

pub fn failing_summary(p: &FailingPage<'_>) -> String {
    // Pages put the stream's name in front of the summary already.
    let mut text = format!(
        "the app has refused or missed {} forward attempt(s) in a row since {} (last: {}). {} event(s) are not delivered",
        p.failures,
        rfc(p.failing_since),
        p.last_error,
        p.pending
    );
    if let Some(o) = p.oldest {
        text.push_str(&format!("; oldest: {}", naming(o)));
    }
    if p.ordered && p.pending > 1 {
        text.push_str(
            ". Delivery is ordered: the oldest event blocks the ones behind it until the app accepts it",
        );
    }
    text.push_str(". hushwatch keeps retrying; fix the app's webhook handler.");
    text
}

pub fn recovered_summary(failures: u32, at: DateTime<Utc>) -> String {
    format!(
        "the app accepts forwarded events again (delivered at {}, after {failures} failed attempt(s)).",
        rfc(at)
    )
}

/// The dead-letter page: `count` events given up on this stream so far
/// (not yet replayed), `oldest` the oldest of them.
pub fn dead_letter_summary(stream: &str, count: u64, oldest: &Oldest) -> String {
    format!(
        "{count} event(s) for stream {stream} were never delivered to the app (oldest: {}). \
         They are kept: replay them with `hushwatch replay --stream {stream}` once the app is fixed.",
        naming(oldest)
    )
}

/// How a reconciliation's missed revocation reads once the relay knows
/// what happened to it (the three cases of issue #29).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevocationFate {
    /// Received, still pending: the app has failed since `failing_since`.
    NotYetDelivered {
        received_at: DateTime<Utc>,
        failing_since: Option<DateTime<Utc>>,
    },
    /// Delivered with a 2xx, yet the app reports access still active.
    Delivered {
        at: DateTime<Utc>,
        status: Option<u16>,
    },
    /// Given up after `give_up_after`.
    DeadLetter { received_at: DateTime<Utc> },
}

pub fn fate_words(f: &RevocationFate) -> String {
    match f {
        RevocationFate::NotYetDelivered {
            received_at,
            failing_since,
        } => format!(
            "received {}, not yet delivered: {}",
            rfc(*received_at),
            match failing_since {
                Some(t) => format!("the app has failed since {}", rfc(*t)),
                None => "it is queued behind earlier events".to_string(),
            }
        ),
        RevocationFate::Delivered { at, status } => format!(
            "delivered to the app at {}{} but access was still active",
            rfc(*at),
            status.map(|s| format!(" ({s})")).unwrap_or_default()
        ),
        RevocationFate::DeadLetter { received_at } => format!(
            "received {}, never delivered: it is a dead letter (replay it)",
            rfc(*received_at)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn the_ladder_climbs_then_repeats_daily_and_ends_at_give_up() {
        let l = Ladder::default();
        let r = t("2026-01-01T00:00:00Z");
        assert_eq!(
            after_failure(&l, r, 1, r),
            AfterFailure::RetryAt(r + TimeDelta::minutes(5))
        );
        let at = t("2026-01-01T01:00:00Z");
        assert_eq!(
            after_failure(&l, r, 4, at),
            AfterFailure::RetryAt(at + TimeDelta::hours(18))
        );
        assert_eq!(
            after_failure(&l, r, 9, at),
            AfterFailure::RetryAt(at + TimeDelta::hours(24))
        );
        // The last retry is pulled in to the deadline, then it is given up.
        let late = r + TimeDelta::days(7) - TimeDelta::hours(1);
        assert_eq!(
            after_failure(&l, r, 9, late),
            AfterFailure::RetryAt(r + TimeDelta::days(7))
        );
        assert_eq!(
            after_failure(&l, r, 10, r + TimeDelta::days(7)),
            AfterFailure::DeadLetter
        );
    }

    #[test]
    fn each_step_pages_once_per_run_and_the_last_is_critical() {
        let steps = [1, 5, 20];
        let one = failure_step(&steps, 1, 0).unwrap();
        assert_eq!(one.severity, Severity::Warning);
        assert_eq!(failure_step(&steps, 2, 1), None);
        assert_eq!(
            failure_step(&steps, 5, 1).unwrap().severity,
            Severity::Warning
        );
        assert_eq!(failure_step(&steps, 5, 5), None, "paged already");
        assert_eq!(
            failure_step(&steps, 20, 5).unwrap().severity,
            Severity::Critical
        );
        assert_eq!(failure_step(&steps, 21, 20), None);
        assert!(delivery_resolves(1) && !delivery_resolves(0));
    }

    #[test]
    fn a_missed_revocation_reads_as_one_of_three_fates() {
        let r = t("2026-01-01T00:00:00Z");
        let pending = fate_words(&RevocationFate::NotYetDelivered {
            received_at: r,
            failing_since: Some(t("2026-01-01T00:00:05Z")),
        });
        assert!(pending.starts_with("received 2026-01-01T00:00:00Z, not yet delivered: the app has failed since 2026-01-01T00:00:05Z"), "{pending}");
        let delivered = fate_words(&RevocationFate::Delivered {
            at: t("2026-01-01T00:00:01Z"),
            status: Some(200),
        });
        assert_eq!(
            delivered,
            "delivered to the app at 2026-01-01T00:00:01Z (200) but access was still active"
        );
        let dead = fate_words(&RevocationFate::DeadLetter { received_at: r });
        assert!(
            dead.contains("never delivered") && dead.contains("dead letter"),
            "{dead}"
        );
    }

    #[test]
    fn pages_name_the_oldest_event_and_the_blocking() {
        let oldest = Oldest {
            event_type: "user.deleted".into(),
            subject: Some("user_123".into()),
            delivery_id: "msg_1".into(),
            received_at: t("2026-01-01T00:00:00Z"),
        };
        let text = failing_summary(&FailingPage {
            stream: "clerk",
            failures: 5,
            last_error: "HTTP 502",
            failing_since: t("2026-01-01T00:00:01Z"),
            pending: 3,
            oldest: Some(&oldest),
            ordered: true,
        });
        assert!(text.contains("user.deleted user_123"), "{text}");
        assert!(
            text.contains("HTTP 502") && text.contains("blocks"),
            "{text}"
        );
        let dead = dead_letter_summary("clerk", 2, &oldest);
        assert!(
            dead.starts_with("2 event(s) for stream clerk were never delivered to the app (oldest: user.deleted user_123"),
            "{dead}"
        );
    }
}
