//! Silence evaluation: given when a stream last heard anything, when does it
//! fire, and how much business silence has accrued now?

use super::calendar::Calendar;
use chrono::{DateTime, TimeDelta, Utc};

/// What a stream tolerates before it pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SilencePolicy {
    /// Business time of silence that fires the alert.
    pub threshold: TimeDelta,
    /// Optional wall-clock backstop: fires after this much real time even if
    /// the calendar has (almost) no business hours left.
    pub max_silence: Option<TimeDelta>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FireReason {
    BusinessSilence,
    MaxSilence,
}

impl FireReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FireReason::BusinessSilence => "business_silence",
            FireReason::MaxSilence => "max_silence",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evaluation {
    pub silent_since: DateTime<Utc>,
    /// Earliest of the business-threshold and the backstop instants; `None`
    /// only when neither can ever happen.
    pub fires_at: Option<DateTime<Utc>>,
    pub reason: Option<FireReason>,
    pub business_silence: TimeDelta,
    pub firing: bool,
}

/// Evaluates a stream that has been silent since `silent_since`.
pub fn evaluate(
    calendar: &Calendar,
    policy: &SilencePolicy,
    silent_since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Evaluation {
    let business = calendar
        .fires_at(silent_since, policy.threshold)
        .map(|t| (t, FireReason::BusinessSilence));
    let backstop = policy
        .max_silence
        .map(|m| (silent_since + m, FireReason::MaxSilence));
    // On a tie the business reason wins: it is the one users configured first.
    let first = match (business, backstop) {
        (Some(b), Some(m)) if m.0 < b.0 => Some(m),
        (Some(b), _) => Some(b),
        (None, m) => m,
    };
    Evaluation {
        silent_since,
        fires_at: first.map(|f| f.0),
        reason: first.map(|f| f.1),
        business_silence: calendar.business_time(silent_since, now),
        firing: first.is_some_and(|f| f.0 <= now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::holidays::Holidays;
    use crate::domain::weekly::WeeklyHours;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn office() -> Calendar {
        Calendar::new(
            chrono_tz::Asia::Tokyo,
            WeeklyHours::parse_lines(&["mon-fri 09:00-18:00"]).unwrap(),
            Holidays::default(),
        )
    }

    #[test]
    fn business_threshold_fires_first_on_a_weekday() {
        let policy = SilencePolicy {
            threshold: TimeDelta::hours(6),
            max_silence: Some(TimeDelta::hours(72)),
        };
        let since = utc("2026-11-30T09:00:00+09:00");
        let before = evaluate(&office(), &policy, since, utc("2026-11-30T14:59:59+09:00"));
        assert!(!before.firing);
        assert_eq!(before.fires_at, Some(utc("2026-11-30T15:00:00+09:00")));
        assert_eq!(before.reason, Some(FireReason::BusinessSilence));
        let at = evaluate(&office(), &policy, since, utc("2026-11-30T15:00:00+09:00"));
        assert!(at.firing);
        assert_eq!(at.business_silence, TimeDelta::hours(6));
    }

    #[test]
    fn backstop_wins_over_a_long_weekend() {
        let policy = SilencePolicy {
            threshold: TimeDelta::hours(40),
            max_silence: Some(TimeDelta::hours(24)),
        };
        let since = utc("2026-12-04T17:00:00+09:00");
        let e = evaluate(&office(), &policy, since, utc("2026-12-05T17:00:00+09:00"));
        assert_eq!(e.reason, Some(FireReason::MaxSilence));
        assert_eq!(e.fires_at, Some(utc("2026-12-05T17:00:00+09:00")));
        assert!(e.firing);
        assert_eq!(e.business_silence, TimeDelta::hours(1));
    }
}
