//! When a provider subscription that must be renewed (a Microsoft Graph subscription, a
//! Google push channel) deserves a warning.
//!
//! Deliveries stop, silently, once such a subscription expires: that is exactly the failure
//! hushwatch exists for, and unlike most it can be seen coming. A subscription warns from
//! `expires_at - warning` on, and when the provider asked for reauthorization; either clears
//! when a delivery shows the subscription renewed (an expiry past the warning window,
//! recorded after the reauthorization request). Also what the store keeps of them: which
//! expiries are plausible, which subscriptions the cap per stream evicts, and the kind of
//! a warning's pages. Pure: every instant is an argument.

use chrono::{DateTime, TimeDelta, Utc};

use super::alert_kind::AlertKind;

/// Subscriptions kept per stream. Ids come from authenticated deliveries, but a provider
/// re-creating channels every few hours (Google) would otherwise grow the table and the
/// metric's label sets without end. Past the cap, the rows whose last change notification
/// is oldest go first (ties: the earliest expiry): a genuine channel keeps delivering, so
/// ids invented once by a forger, whatever expiry they claimed, are evicted before it.
pub const MAX_PER_STREAM: i64 = 32;

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

/// The latest expiry a stored subscription may keep at `now`; one past it (stored by an
/// older version that took any value) is replaced by the next plausible one.
pub fn horizon(now: DateTime<Utc>) -> DateTime<Utc> {
    now.checked_add_signed(MAX_LIFETIME + EXPIRY_SKEW)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// The subscriptions of one stream that the cap evicts, given its rows as
/// (subscription, seen_at, expires_at), instants in epoch milliseconds: all but the `cap`
/// heard from most recently (ties: the latest expiry, then the id, so every engine
/// agrees).
pub fn over_cap(mut rows: Vec<(String, i64, i64)>, cap: i64) -> Vec<String> {
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0)));
    rows.into_iter()
        .skip(usize::try_from(cap).unwrap_or(0))
        .map(|(subscription, _, _)| subscription)
        .collect()
}

/// The alert kind of a subscription warning's pages: while firing, its own (`firing`);
/// on a resolve (`firing` None), the kind it fired with (`fired`, kept with the row),
/// else the expiring alert.
pub fn page_kind(firing: Option<AlertKind>, fired: Option<&str>) -> AlertKind {
    match (firing, fired.and_then(AlertKind::parse)) {
        (Some(kind), _) => kind,
        (None, Some(kind)) => kind,
        // No kind kept (a row from before kinds were kept): the expiring
        // alert, the one kind such a row could have fired with.
        (None, None) => AlertKind::SubscriptionExpiring,
    }
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

    #[test]
    fn the_cap_evicts_the_longest_unheard_then_the_earliest_expiry() {
        let row = |id: &str, seen: i64, expires: i64| (id.to_string(), seen, expires);
        let rows = vec![
            row("old", 1, 99),
            row("fresh", 9, 1),
            row("tie-late", 5, 8),
            row("tie-early", 5, 7),
        ];
        assert_eq!(over_cap(rows.clone(), 2), ["tie-early", "old"]);
        assert_eq!(over_cap(rows.clone(), 4), Vec::<String>::new());
        assert_eq!(over_cap(rows, 0).len(), 4);
        let same = vec![row("b", 1, 1), row("a", 1, 1)];
        assert_eq!(over_cap(same, 1), ["b"], "a full tie keeps the smaller id");
    }

    #[test]
    fn a_resolve_keeps_the_kind_it_fired_with() {
        let fired = Some("subscription_reauthorization_required");
        assert_eq!(
            page_kind(Some(AlertKind::SubscriptionExpiring), fired),
            AlertKind::SubscriptionExpiring
        );
        assert_eq!(
            page_kind(None, fired),
            AlertKind::SubscriptionReauthorizationRequired
        );
        assert_eq!(
            page_kind(None, None),
            AlertKind::SubscriptionExpiring,
            "kind not kept: the expiring alert"
        );
    }

    #[test]
    fn the_horizon_is_a_lifetime_and_the_skew_ahead() {
        let now = at("2026-12-01T00:00:00Z");
        assert_eq!(horizon(now), now + MAX_LIFETIME + EXPIRY_SKEW);
        assert_eq!(horizon(DateTime::<Utc>::MAX_UTC), DateTime::<Utc>::MAX_UTC);
    }
}
