//! The "quieter than usual" rule (issue #18): once a stream's gaps between
//! arrivals are known well enough, it fires at `factor ×` its usual longest
//! gap instead of waiting for the configured threshold, and never later
//! than that threshold. Pure: the learned sketch and the day count are
//! arguments.

use super::calendar::Calendar;
use super::duration::format_duration;
use super::gap_sketch::GapSketch;
use chrono::{DateTime, NaiveDate, TimeDelta, Utc};

/// Days of gaps the learned distribution covers (older days are dropped).
pub const WINDOW_DAYS: i64 = 28;
/// Days since the first learned gap before the learned rule applies.
pub const MIN_DAYS: i64 = 14;
/// Gaps known before the learned rule applies.
pub const MIN_GAPS: u64 = 200;
/// The quantiles `hushwatch_usual_gap_seconds` exports.
pub const EXPORTED_QUANTILES: [(&str, f64); 4] =
    [("0.5", 0.5), ("0.9", 0.9), ("0.99", 0.99), ("0.999", 0.999)];

/// `[streams.X.adaptive]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptivePolicy {
    /// Which quantile of the gaps is "the usual longest gap", in (0, 1).
    pub quantile: f64,
    /// How many times that gap the stream may be silent, ≥ 1.
    pub factor: f64,
    /// Floor of the learned threshold (business time).
    pub min: TimeDelta,
}

impl Default for AdaptivePolicy {
    fn default() -> Self {
        AdaptivePolicy {
            quantile: 0.999,
            factor: 2.0,
            min: TimeDelta::minutes(30),
        }
    }
}

/// What was learned about one stream, as far as the rule needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Learned {
    /// The configured quantile of the gaps (business time).
    pub usual: TimeDelta,
    pub gaps: u64,
    /// Whole days from the first learned gap's day to today.
    pub days: i64,
}

/// Where the effective threshold came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Source {
    Configured,
    Learned {
        policy: AdaptivePolicy,
        learned: Learned,
    },
}

/// The threshold the silence evaluation uses, and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Effective {
    pub threshold: TimeDelta,
    pub configured: TimeDelta,
    pub source: Source,
}

impl Effective {
    pub fn configured(threshold: TimeDelta) -> Effective {
        Effective {
            threshold,
            configured: threshold,
            source: Source::Configured,
        }
    }

    /// `configured` or `learned`, for `/v1/status` and `explain`.
    pub fn source_name(&self) -> &'static str {
        match self.source {
            Source::Configured => "configured",
            Source::Learned { .. } => "learned",
        }
    }
}

/// The gap between two arrivals in the stream's business time, in
/// milliseconds; `None` when `next` is not after `prev` (an out-of-order
/// commit teaches nothing).
pub fn business_gap_ms(
    calendar: &Calendar,
    prev: DateTime<Utc>,
    next: DateTime<Utc>,
) -> Option<u64> {
    if next <= prev {
        return None;
    }
    u64::try_from(calendar.business_time(prev, next).num_milliseconds()).ok()
}

/// Days from `first` to `today` (0 when nothing was learned).
pub fn days_known(first: Option<NaiveDate>, today: NaiveDate) -> i64 {
    first.map_or(0, |f| (today - f).num_days().max(0))
}

/// `min(configured, max(min, factor × learned quantile))` once at least
/// `MIN_DAYS` and `MIN_GAPS` are known; the configured threshold until then
/// or without `[adaptive]`.
pub fn effective_threshold(
    configured: TimeDelta,
    policy: Option<&AdaptivePolicy>,
    sketch: &GapSketch,
    days: i64,
) -> Effective {
    let Some(policy) = policy else {
        return Effective::configured(configured);
    };
    let gaps = sketch.count();
    if days < MIN_DAYS || gaps < MIN_GAPS {
        return Effective::configured(configured);
    }
    let Some(usual_ms) = sketch.quantile(policy.quantile) else {
        return Effective::configured(configured);
    };
    let usual = TimeDelta::milliseconds(usual_ms.round() as i64);
    // Whole seconds: the threshold is shown and exported in seconds, and
    // the sketch is only 1% exact anyway.
    let scaled = TimeDelta::seconds((usual_ms * policy.factor / 1e3).round() as i64);
    let threshold = configured.min(policy.min.max(scaled));
    Effective {
        threshold,
        configured,
        source: Source::Learned {
            policy: *policy,
            learned: Learned { usual, gaps, days },
        },
    }
}

/// The page's line for a business-silence fire: which rule fired, e.g.
/// "silent for 3h10m of business time, 3× longer than this stream's usual
/// longest gap (learned 0.999 quantile 1h2m over 28 days, 1,204 gaps);
/// configured threshold 6h". `None` when the configured rule fired.
pub fn describe_learned_fire(effective: &Effective, silence: TimeDelta) -> Option<String> {
    let Source::Learned { policy, learned } = effective.source else {
        return None;
    };
    // The learned rule only fired if it was stricter than the configured one.
    if effective.threshold >= effective.configured {
        return None;
    }
    let ratio = if learned.usual > TimeDelta::zero() {
        silence.num_milliseconds() as f64 / learned.usual.num_milliseconds() as f64
    } else {
        f64::INFINITY
    };
    let times = if ratio.is_finite() {
        format!("{}×", trim_number(ratio))
    } else {
        "far".to_string()
    };
    Some(format!(
        "silent for {} of business time, {times} longer than this stream's usual longest gap \
         (learned {} quantile {} over {} days, {} gaps); configured threshold {}",
        format_duration(silence),
        policy.quantile,
        format_duration(learned.usual),
        learned.days,
        thousands(learned.gaps),
        format_duration(effective.configured),
    ))
}

/// One decimal, without a trailing ".0".
fn trim_number(x: f64) -> String {
    let text = format!("{x:.1}");
    text.strip_suffix(".0").unwrap_or(&text).to_string()
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` gaps of `minutes` each.
    fn sketch(n: u64, minutes: u64) -> GapSketch {
        let mut s = GapSketch::new();
        for _ in 0..n {
            s.add(minutes * 60_000);
        }
        s
    }

    fn close(a: TimeDelta, b: TimeDelta) -> bool {
        (a - b).num_milliseconds().abs() as f64 <= 0.011 * b.num_milliseconds() as f64
    }

    #[test]
    fn without_the_adaptive_table_the_configured_threshold_applies() {
        let e = effective_threshold(TimeDelta::hours(6), None, &sketch(1_000, 10), 28);
        assert_eq!(e, Effective::configured(TimeDelta::hours(6)));
        assert_eq!(e.source_name(), "configured");
    }

    #[test]
    fn before_fourteen_days_or_two_hundred_gaps_the_configured_threshold_applies() {
        let p = AdaptivePolicy::default();
        let six = TimeDelta::hours(6);
        assert_eq!(
            effective_threshold(six, Some(&p), &sketch(1_000, 10), 13).threshold,
            six
        );
        assert_eq!(
            effective_threshold(six, Some(&p), &sketch(199, 10), 28).threshold,
            six
        );
        let e = effective_threshold(six, Some(&p), &sketch(200, 60), 14);
        assert_eq!(e.source_name(), "learned");
        assert!(close(e.threshold, TimeDelta::hours(2)), "{:?}", e.threshold);
    }

    #[test]
    fn the_learned_threshold_is_factor_times_the_quantile_within_min_and_configured() {
        let p = AdaptivePolicy {
            quantile: 0.9,
            factor: 3.0,
            min: TimeDelta::minutes(30),
        };
        let six = TimeDelta::hours(6);
        // 90% of gaps are 20 minutes, the rest 5 minutes: 3 × 20m = 1h.
        let mut s = sketch(900, 20);
        s.merge(&sketch(100, 5));
        let e = effective_threshold(six, Some(&p), &s, 20);
        assert!(close(e.threshold, TimeDelta::hours(1)), "{:?}", e.threshold);
        // Tiny gaps: the floor `min` holds.
        let e = effective_threshold(six, Some(&p), &sketch(500, 1), 20);
        assert_eq!(e.threshold, TimeDelta::minutes(30));
        // Long gaps: never later than the configured threshold.
        let e = effective_threshold(six, Some(&p), &sketch(500, 300), 20);
        assert_eq!(e.threshold, six);
        assert_eq!(e.source_name(), "learned");
    }

    #[test]
    fn gaps_are_measured_in_business_time() {
        use crate::domain::holidays::Holidays;
        use crate::domain::weekly::WeeklyHours;
        let office = Calendar::new(
            chrono_tz::Asia::Tokyo,
            WeeklyHours::parse_lines(&["mon-fri 09:00-18:00"]).unwrap(),
            Holidays::default(),
        );
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        // Friday 17:00 to Monday 10:00 Tokyo: two business hours.
        let gap = business_gap_ms(
            &office,
            t("2026-12-04T17:00:00+09:00"),
            t("2026-12-07T10:00:00+09:00"),
        );
        assert_eq!(gap, Some(2 * 3_600_000));
        assert_eq!(
            business_gap_ms(
                &office,
                t("2026-12-07T10:00:00+09:00"),
                t("2026-12-07T10:00:00+09:00")
            ),
            None
        );
    }

    #[test]
    fn days_are_counted_from_the_first_learned_day() {
        let d = |s: &str| NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap();
        assert_eq!(days_known(None, d("2026-12-01")), 0);
        assert_eq!(days_known(Some(d("2026-11-17")), d("2026-12-01")), 14);
    }

    #[test]
    fn a_learned_fire_says_which_rule_fired() {
        let p = AdaptivePolicy::default();
        let mut s = sketch(1_203, 30);
        s.add(62 * 60_000);
        let e = Effective {
            threshold: TimeDelta::minutes(124),
            configured: TimeDelta::hours(6),
            source: Source::Learned {
                policy: p,
                learned: Learned {
                    usual: TimeDelta::minutes(62),
                    gaps: s.count(),
                    days: 28,
                },
            },
        };
        let text = describe_learned_fire(&e, TimeDelta::minutes(190)).unwrap();
        assert_eq!(
            text,
            "silent for 3h10m of business time, 3.1× longer than this stream's usual \
             longest gap (learned 0.999 quantile 1h2m over 28 days, 1,204 gaps); \
             configured threshold 6h"
        );
        assert_eq!(
            describe_learned_fire(
                &Effective::configured(TimeDelta::hours(6)),
                TimeDelta::hours(6)
            ),
            None
        );
    }
}
