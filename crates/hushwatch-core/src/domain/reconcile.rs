//! Reconciliation and stale-grant decisions: whether a stream's "missing
//! reconciliation" alert moves, which of the revocations found for a
//! subject counts, and the stale grant page's wording. The store reads the
//! rows, calls these and writes what they return (`store::reconcile`,
//! `store::revocations`).

use super::alert::AlertStatus;
use chrono::{DateTime, Utc};

/// Compare-and-set on a stream's "missing reconciliation" alert, whose
/// state is `current` (None without a row: `ok`): whether it moves to
/// `to`. It does not when it is already there, so a repeated evaluation
/// never pages twice.
pub fn missing_alert_moves(current: Option<AlertStatus>, to: AlertStatus) -> bool {
    current.unwrap_or(AlertStatus::Ok) != to
}

/// A subject's newest recorded revocation on a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revocation {
    pub organization: Option<String>,
    pub event_time: Option<DateTime<Utc>>,
    pub received_at: DateTime<Utc>,
    pub delivery_id: Option<String>,
    pub event_type: String,
}

/// Of two revocations found under different stored forms of one subject
/// (before and after a key or a rotation), the later by `key`: the order
/// of the statement that found each (by event time for a grant's check,
/// by arrival for the latest one); on a tie, `a`.
pub fn newer_by<K: Ord>(
    a: Option<Revocation>,
    b: Option<Revocation>,
    key: impl Fn(&Revocation) -> K,
) -> Option<Revocation> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if key(&b) > key(&a) { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The stale grant page's wording; `stamp` writes an instant (in the
/// stream's calendar zone).
pub fn stale_reason(
    subject: &str,
    grant_delivery: &str,
    grant_time: DateTime<Utc>,
    revoke: &Revocation,
    stamp: impl Fn(DateTime<Utc>) -> String,
) -> String {
    format!(
        "a grant for {subject} arrived after its revocation, with an older event time: if your app applied it, the user may have access again (grant delivery {grant_delivery} at event time {}; revocation {} {} at event time {})",
        stamp(grant_time),
        revoke.event_type,
        revoke.delivery_id.as_deref().unwrap_or("without id"),
        revoke.event_time.map(stamp).unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_alert_moves_only_when_elsewhere_and_starts_ok() {
        use AlertStatus::{Firing, Ok};
        assert!(!missing_alert_moves(None, Ok), "no row is ok");
        assert!(!missing_alert_moves(Some(Firing), Firing));
        assert!(missing_alert_moves(None, Firing));
        assert!(missing_alert_moves(Some(Firing), Ok));
    }

    fn r(id: &str, event_ms: Option<i64>) -> Revocation {
        Revocation {
            organization: None,
            event_time: event_ms.and_then(DateTime::from_timestamp_millis),
            received_at: DateTime::from_timestamp_millis(0).unwrap(),
            delivery_id: Some(id.into()),
            event_type: "user.deleted".into(),
        }
    }

    #[test]
    fn of_revocations_found_under_several_forms_the_newer_event_wins() {
        let pick = |a, b| newer_by(a, b, |r| r.event_time).and_then(|r| r.delivery_id);
        assert_eq!(pick(None, None), None);
        assert_eq!(pick(Some(r("a", Some(1))), None).as_deref(), Some("a"));
        assert_eq!(pick(None, Some(r("b", Some(1)))).as_deref(), Some("b"));
        assert_eq!(
            pick(Some(r("a", Some(1))), Some(r("b", Some(2)))).as_deref(),
            Some("b")
        );
        assert_eq!(
            pick(Some(r("a", Some(2))), Some(r("b", Some(1)))).as_deref(),
            Some("a")
        );
    }

    #[test]
    fn the_stale_grant_page_names_both_deliveries_and_times() {
        let mut revoke = r("rev_1", Some(1_000));
        let stamp = |t: DateTime<Utc>| t.timestamp_millis().to_string();
        let reason = stale_reason(
            "u_1",
            "gr_1",
            DateTime::from_timestamp_millis(500).unwrap(),
            &revoke,
            stamp,
        );
        assert!(reason.starts_with("a grant for u_1 arrived after its revocation"));
        assert!(reason.ends_with(
            "(grant delivery gr_1 at event time 500; revocation user.deleted rev_1 at event time 1000)"
        ));
        revoke.delivery_id = None;
        let reason = stale_reason(
            "u_1",
            "gr_1",
            DateTime::from_timestamp_millis(500).unwrap(),
            &revoke,
            stamp,
        );
        assert!(reason.contains("revocation user.deleted without id at"));
    }
}
