//! When a provider subscription that must be renewed (a Microsoft Graph subscription, a
//! Google push channel) deserves a warning.
//!
//! Deliveries stop, silently, once such a subscription expires: that is exactly the failure
//! hushwatch exists for, and unlike most it can be seen coming. A subscription warns from
//! `expires_at - warning` on, and when the provider asked for reauthorization; either clears
//! when a delivery shows the subscription renewed (an expiry past the warning window,
//! recorded after the reauthorization request). Pure: every instant is an argument.

use chrono::{DateTime, TimeDelta, Utc};

/// Clock skew allowed between the provider and us when judging how far ahead an expiry
/// may be.
pub const EXPIRY_SKEW: TimeDelta = TimeDelta::minutes(10);

/// The longest any supported provider lets a subscription live (Entra's 41,760 minutes;
/// Google's channels live at most a week), plus skew. The store refuses to keep an expiry
/// further ahead than this whatever the provider, and replaces one it holds that is.
pub const MAX_LIFETIME: TimeDelta = TimeDelta::minutes(41_760)
    .checked_add(&EXPIRY_SKEW)
    .unwrap();

/// Whether a provider could genuinely have sent `expires_at` at `now` for a subscription
/// that lives at most `lifetime`. A value further ahead is forged or broken: kept, it
/// would hold the expiry warning off long after the real subscription lapsed.
pub fn is_plausible(expires_at: DateTime<Utc>, now: DateTime<Utc>, lifetime: TimeDelta) -> bool {
    now.checked_add_signed(lifetime + EXPIRY_SKEW)
        .is_some_and(|latest| expires_at <= latest)
}

/// What is known about one subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscriptionFacts {
    pub expires_at: DateTime<Utc>,
    /// When the expiry was last updated by a delivery.
    pub seen_at: DateTime<Utc>,
    /// When the provider last asked for reauthorization (Entra lifecycle notice).
    pub reauthorization_requested_at: Option<DateTime<Utc>>,
    pub warning: TimeDelta,
}

/// Why a subscription warns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concern {
    Expiring,
    ReauthorizationRequired,
}

impl SubscriptionFacts {
    /// The first instant the expiry warning applies.
    pub fn warn_from(&self) -> DateTime<Utc> {
        self.expires_at - self.warning
    }

    /// What is wrong at `now`, if anything. A reauthorization request counts until a
    /// later delivery updates the expiry (Graph renews by extending it).
    pub fn concern(&self, now: DateTime<Utc>) -> Option<Concern> {
        let reauth_pending = self
            .reauthorization_requested_at
            .is_some_and(|asked| asked >= self.seen_at);
        if reauth_pending {
            Some(Concern::ReauthorizationRequired)
        } else if now >= self.warn_from() {
            Some(Concern::Expiring)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    fn facts(expires: &str, seen: &str, reauth: Option<&str>) -> SubscriptionFacts {
        SubscriptionFacts {
            expires_at: at(expires),
            seen_at: at(seen),
            reauthorization_requested_at: reauth.map(at),
            warning: TimeDelta::hours(24),
        }
    }

    #[test]
    fn warns_exactly_from_expiry_minus_warning() {
        let f = facts("2026-12-20T12:00:00Z", "2026-12-01T00:00:00Z", None);
        assert_eq!(f.warn_from(), at("2026-12-19T12:00:00Z"));
        assert_eq!(f.concern(at("2026-12-19T11:59:59Z")), None);
        assert_eq!(
            f.concern(at("2026-12-19T12:00:00Z")),
            Some(Concern::Expiring)
        );
        assert_eq!(
            f.concern(at("2026-12-21T00:00:00Z")),
            Some(Concern::Expiring)
        );
    }

    #[test]
    fn expiries_further_ahead_than_a_lifetime_are_implausible() {
        let now = at("2026-12-01T00:00:00Z");
        let week = TimeDelta::days(7);
        assert!(is_plausible(at("2026-12-08T00:10:00Z"), now, week));
        assert!(is_plausible(at("2026-11-30T00:00:00Z"), now, week));
        assert!(!is_plausible(at("2026-12-08T00:10:01Z"), now, week));
        assert!(!is_plausible(at("9999-12-31T23:59:59Z"), now, MAX_LIFETIME));
    }

    #[test]
    fn reauthorization_request_warns_until_a_later_delivery() {
        let asked = facts(
            "2026-12-20T12:00:00Z",
            "2026-12-01T00:00:00Z",
            Some("2026-12-02T00:00:00Z"),
        );
        assert_eq!(
            asked.concern(at("2026-12-02T00:00:01Z")),
            Some(Concern::ReauthorizationRequired)
        );
        let renewed = facts(
            "2026-12-29T12:00:00Z",
            "2026-12-02T01:00:00Z",
            Some("2026-12-02T00:00:00Z"),
        );
        assert_eq!(renewed.concern(at("2026-12-02T01:00:01Z")), None);
    }
}
