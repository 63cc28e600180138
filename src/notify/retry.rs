//! When to try again: exponential backoff with deterministic jitter, and
//! the classification of HTTP answers (what is worth retrying is here too,
//! so every HTTP notifier agrees).

use super::{Cause, Outcome};
use crate::config::DeliveryPolicy;
use chrono::{DateTime, TimeDelta, Utc};
use sha2::{Digest, Sha256};
use std::time::Duration;

/// Delay before attempt `attempts + 1`, given `attempts` failed ones (>= 1).
///
/// The base doubles from `backoff_initial` up to `backoff_max`; the delay is
/// drawn from [base/2, base] ("equal jitter"), so replicas and pages that
/// failed together do not retry in lockstep. The draw is a hash of the page
/// key and attempt number: deterministic, hence testable, and still spread.
pub fn backoff(policy: &DeliveryPolicy, key: &str, attempts: u32) -> TimeDelta {
    let initial = policy.backoff_initial.num_milliseconds().max(1);
    let max = policy.backoff_max.num_milliseconds().max(initial);
    let exp = attempts.saturating_sub(1).min(40);
    let base = initial.saturating_mul(1i64 << exp.min(30)).min(max);
    let half = base / 2;
    let spread = u64::try_from(base - half).unwrap_or(0) + 1;
    let digest = Sha256::new()
        .chain_update(key.as_bytes())
        .chain_update(attempts.to_be_bytes())
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let draw = u64::from_be_bytes(first) % spread;
    TimeDelta::milliseconds(half + i64::try_from(draw).unwrap_or(0))
}

/// When to retry after a retryable outcome: never earlier than the
/// receiver's `Retry-After` (it knows its load best), and never earlier
/// than our own backoff either, so `Retry-After: 0` cannot make us spin.
pub fn next_attempt(
    policy: &DeliveryPolicy,
    key: &str,
    attempts: u32,
    retry_after: Option<Duration>,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    let ours = backoff(policy, key, attempts);
    let theirs = retry_after
        .and_then(|d| TimeDelta::from_std(d).ok())
        .unwrap_or(TimeDelta::zero());
    now + ours.max(theirs)
}

/// Classifies an HTTP status: 2xx delivered; 5xx, 408, 425 and 429
/// retryable (with `Retry-After` for 429/503); other statuses permanent.
pub fn classify_status(status: u16, retry_after: Option<&str>, what: &str) -> Outcome {
    match status {
        200..=299 => Outcome::Delivered,
        408 | 425 | 429 | 500..=599 => Outcome::Retry {
            cause: Cause::of_status(status),
            reason: format!("{what} answered HTTP {status}"),
            retry_after: if matches!(status, 429 | 503) {
                retry_after.and_then(parse_retry_after)
            } else {
                None
            },
            ambiguous: false,
        },
        _ => Outcome::Permanent {
            cause: Cause::of_status(status),
            reason: format!("{what} answered HTTP {status}; not retrying"),
        },
    }
}

/// `Retry-After` as delay-seconds (HTTP-dates are rare for webhooks and
/// fall back to our own backoff). Capped at one day.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let secs: u64 = value.trim().parse().ok()?;
    Some(Duration::from_secs(secs.min(86_400)))
}

/// Whether a retryable page has been retried long enough: measured from
/// its first attempt, so a page queued while hushwatch was down still gets
/// the full `give_up_after`.
pub fn gave_up(policy: &DeliveryPolicy, first_attempt: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    now - first_attempt >= policy.give_up_after
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> DeliveryPolicy {
        DeliveryPolicy {
            backoff_initial: TimeDelta::seconds(5),
            backoff_max: TimeDelta::minutes(10),
            give_up_after: TimeDelta::hours(72),
            timeout: TimeDelta::seconds(10),
        }
    }

    #[test]
    fn backoff_doubles_within_jitter_and_caps() {
        let p = policy();
        for attempts in 1..=20u32 {
            let base = (5_000i64 << (attempts - 1).min(20)).min(600_000);
            let d = backoff(&p, "hw-k", attempts).num_milliseconds();
            assert!(
                d >= base / 2 && d <= base,
                "attempt {attempts}: {d} vs {base}"
            );
        }
        // Deterministic per key and attempt, different across keys.
        assert_eq!(backoff(&p, "a", 3), backoff(&p, "a", 3));
        let spread: std::collections::BTreeSet<i64> = (0..20)
            .map(|i| backoff(&p, &format!("k{i}"), 5).num_milliseconds())
            .collect();
        assert!(spread.len() > 10);
    }

    #[test]
    fn statuses_are_classified_like_alertmanager() {
        assert_eq!(classify_status(202, None, "x"), Outcome::Delivered);
        for s in [500, 502, 503, 504, 429, 408] {
            assert!(
                matches!(classify_status(s, None, "x"), Outcome::Retry { .. }),
                "{s}"
            );
        }
        for s in [400, 401, 403, 404, 410, 413, 422, 301] {
            assert!(
                matches!(classify_status(s, None, "x"), Outcome::Permanent { .. }),
                "{s}"
            );
        }
        match classify_status(429, Some("7"), "x") {
            Outcome::Retry { retry_after, .. } => {
                assert_eq!(retry_after, Some(Duration::from_secs(7)))
            }
            other => panic!("{other:?}"),
        }
        match classify_status(500, Some("7"), "x") {
            Outcome::Retry { retry_after, .. } => assert_eq!(retry_after, None),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn retry_after_overrides_backoff() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let t = next_attempt(&policy(), "k", 1, Some(Duration::from_secs(42)), now);
        assert_eq!(t - now, TimeDelta::seconds(42));
        // Retry-After: 0 still backs off.
        let t = next_attempt(&policy(), "k", 1, Some(Duration::ZERO), now);
        assert!(t - now >= TimeDelta::milliseconds(2_500), "{}", t - now);
        assert!(gave_up(&policy(), now, now + TimeDelta::hours(72)));
        assert!(!gave_up(&policy(), now, now + TimeDelta::hours(71)));
    }
}
