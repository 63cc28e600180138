//! Microsoft Entra ID's cross-check rules (issue #48): what a Graph delta
//! round says was revoked, and when a change notification explains it. No
//! I/O and no clock; the adapter (`crosscheck::entra`) reads the rounds and
//! the service (`service::crosscheck_delta`) stores and pages.
//!
//! Graph keeps no event log for users and groups; its delta queries say
//! what changed since the last round (`microsoftgraph/microsoft-graph-docs-contrib`,
//! `concepts/delta-query-overview.md`). A revocation is:
//! - a user object `@removed` (deleted) from `/users/delta`, or present
//!   with `accountEnabled: false` (disabled);
//! - a member `@removed` from a group's `members@delta` in `/groups/delta`.
//!
//! Change notifications carry no event id and no event time
//! (`ingest::providers::entra`), so a change is explained by any
//! notification about the same resource (the user, or the group for a
//! membership; a user's deletion also explains its memberships going)
//! received between the previous poll minus `grace` and this poll plus
//! `grace`. A change none explains, once `grace` after the poll that saw it
//! has passed, is a missed revocation.
//!
//! A change waits in the engine's pending table as a
//! [`crate::domain::crosscheck::Pending`] (a removed user or membership);
//! which of the three it was is kept in its `provider_id`
//! ([`DeltaChange::to_pending`]), so Entra needs no table of its own.

use super::crosscheck::{Change, Direction, Entry, Finding, Pending, Verdict, When};
use chrono::{DateTime, TimeDelta, Utc};

/// One revocation a delta round reported.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeltaChange {
    /// A user `@removed` from `/users/delta` (soft- or hard-deleted).
    UserDeleted { user: String },
    /// A user listed with `accountEnabled: false`.
    UserDisabled { user: String },
    /// A member `@removed` from a group's `members@delta`.
    MemberRemoved { group: String, user: String },
}

/// `Pending::provider_id` markers (see the module comment).
const DELETED: &str = "entra:user-deleted";
const DISABLED: &str = "entra:user-disabled";
const MEMBER_REMOVED: &str = "entra:member-removed";

impl DeltaChange {
    pub fn user(&self) -> &str {
        match self {
            DeltaChange::UserDeleted { user }
            | DeltaChange::UserDisabled { user }
            | DeltaChange::MemberRemoved { user, .. } => user,
        }
    }

    pub fn group(&self) -> Option<&str> {
        match self {
            DeltaChange::MemberRemoved { group, .. } => Some(group),
            _ => None,
        }
    }

    /// The change notification that should have reported it, as
    /// `ingest::providers::entra` names notifications
    /// (`<resource kind>.<changeType>`).
    pub fn event_type(&self) -> &'static str {
        match self {
            DeltaChange::UserDeleted { .. } => "user.deleted",
            DeltaChange::UserDisabled { .. } => "user.updated",
            DeltaChange::MemberRemoved { .. } => "group.updated",
        }
    }

    /// The pending change stored for it, seen by the poll at `seen_at`
    /// whose previous poll was `since`.
    pub fn to_pending(&self, since: DateTime<Utc>, seen_at: DateTime<Utc>) -> Pending {
        let (entry, marker) = match self {
            DeltaChange::UserDeleted { user } => (Entry::User { user: user.clone() }, DELETED),
            DeltaChange::UserDisabled { user } => (Entry::User { user: user.clone() }, DISABLED),
            DeltaChange::MemberRemoved { group, user } => (
                Entry::Membership {
                    organization: group.clone(),
                    user: user.clone(),
                },
                MEMBER_REMOVED,
            ),
        };
        Pending {
            change: Change::Removed(entry),
            since,
            seen_at,
            provider_id: Some(marker.to_owned()),
        }
    }

    /// The change a stored pending row holds; `None` for a row this module
    /// did not write.
    pub fn of_pending(p: &Pending) -> Option<DeltaChange> {
        match (&p.change, p.provider_id.as_deref()) {
            (Change::Removed(Entry::User { user }), Some(DELETED)) => {
                Some(DeltaChange::UserDeleted { user: user.clone() })
            }
            (Change::Removed(Entry::User { user }), Some(DISABLED)) => {
                Some(DeltaChange::UserDisabled { user: user.clone() })
            }
            (Change::Removed(Entry::Membership { organization, user }), Some(MEMBER_REMOVED)) => {
                Some(DeltaChange::MemberRemoved {
                    group: organization.clone(),
                    user: user.clone(),
                })
            }
            _ => None,
        }
    }

    /// Stable across replicas and restarts: the change and the stored poll
    /// that saw it.
    pub fn key(&self, seen_at: DateTime<Utc>) -> String {
        let seen = seen_at.timestamp_millis();
        match self {
            DeltaChange::UserDeleted { user } => format!("entra:user-deleted:{user}@{seen}"),
            DeltaChange::UserDisabled { user } => format!("entra:user-disabled:{user}@{seen}"),
            DeltaChange::MemberRemoved { group, user } => {
                format!("entra:member-removed:{group}/{user}@{seen}")
            }
        }
    }
}

/// A change notification the stream received: the ids it named
/// (`resourceData.id` as `user_id` or `group_id`) and its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notified {
    pub event_type: String,
    pub user: Option<String>,
    pub group: Option<String>,
    pub received_at: DateTime<Utc>,
}

impl Notified {
    fn explains(&self, change: &DeltaChange) -> bool {
        let same_user = self.user.as_deref() == Some(change.user());
        match change {
            DeltaChange::UserDeleted { .. } | DeltaChange::UserDisabled { .. } => same_user,
            DeltaChange::MemberRemoved { group, .. } => {
                self.group.as_deref() == Some(group.as_str())
                    || (same_user && self.event_type == "user.deleted")
            }
        }
    }
}

/// Decides a pending Entra change at a poll at `now`: settled when a
/// notification received in (`since` − grace, `seen_at` + grace] explains
/// it, waiting until `grace` after `seen_at` has passed, missed after.
pub fn decide(p: &Pending, now: DateTime<Utc>, grace: TimeDelta, notified: &[Notified]) -> Verdict {
    let Some(change) = DeltaChange::of_pending(p) else {
        // Not an Entra row (a provider switched in the config): nothing
        // this rule can say about it.
        return Verdict::Settled;
    };
    let (from, until) = p.window(grace);
    if notified
        .iter()
        .any(|n| n.received_at > from && n.received_at <= until && n.explains(&change))
    {
        return Verdict::Settled;
    }
    if now <= p.seen_at || now < p.seen_at + grace {
        return Verdict::Wait;
    }
    Verdict::Missed(Finding {
        key: change.key(p.seen_at),
        direction: Direction::Revoke,
        event_type: change.event_type().to_owned(),
        subject: change.user().to_owned(),
        organization: change.group().map(str::to_owned),
        provider_id: None,
        when: When::Between(p.since, p.seen_at),
    })
}

/// One finding in words (`domain::crosscheck::describe` adds what follows).
pub fn describe_change(f: &Finding, when: &str) -> String {
    match (f.event_type.as_str(), f.organization.as_deref()) {
        ("group.updated", Some(group)) => format!(
            "Entra ID removed member {} from group {group} ({when})",
            f.subject
        ),
        ("user.deleted", _) => format!("Entra ID deleted user {} ({when})", f.subject),
        _ => format!(
            "Entra ID disabled user {} (accountEnabled: false, {when})",
            f.subject
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(min: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + min * 60, 0).unwrap()
    }

    fn notified(ty: &str, user: Option<&str>, group: Option<&str>, at: i64) -> Notified {
        Notified {
            event_type: ty.into(),
            user: user.map(Into::into),
            group: group.map(Into::into),
            received_at: t(at),
        }
    }

    #[test]
    fn each_change_round_trips_through_its_pending_row() {
        for c in [
            DeltaChange::UserDeleted { user: "u1".into() },
            DeltaChange::UserDisabled { user: "u1".into() },
            DeltaChange::MemberRemoved {
                group: "g1".into(),
                user: "u1".into(),
            },
        ] {
            let p = c.to_pending(t(0), t(15));
            assert_eq!(DeltaChange::of_pending(&p), Some(c));
        }
        let clerk = Pending {
            change: Change::Removed(Entry::User { user: "u".into() }),
            since: t(0),
            seen_at: t(1),
            provider_id: None,
        };
        assert_eq!(DeltaChange::of_pending(&clerk), None);
    }

    #[test]
    fn a_change_is_explained_by_a_notification_about_its_resource_in_the_window_else_missed_after_grace(
    ) {
        let grace = TimeDelta::minutes(10);
        let member = DeltaChange::MemberRemoved {
            group: "g1".into(),
            user: "u1".into(),
        }
        .to_pending(t(0), t(15));
        // No notification: waits through grace, then missed naming both.
        assert_eq!(decide(&member, t(20), grace, &[]), Verdict::Wait);
        let Verdict::Missed(f) = decide(&member, t(26), grace, &[]) else {
            panic!("missed");
        };
        assert_eq!(f.direction, Direction::Revoke);
        assert_eq!(
            (f.subject.as_str(), f.organization.as_deref()),
            ("u1", Some("g1"))
        );
        assert_eq!(f.event_type, "group.updated");
        assert_eq!(
            f.key,
            format!("entra:member-removed:g1/u1@{}", t(15).timestamp_millis())
        );
        assert!(describe_change(&f, "between a and b").contains("from group g1"));
        // The group's notification, or the user's deletion, explains it.
        for n in [
            notified("group.updated", None, Some("g1"), 5),
            notified("user.deleted", Some("u1"), None, 24),
        ] {
            assert_eq!(decide(&member, t(30), grace, &[n]), Verdict::Settled);
        }
        // Another group's, a user update, or one outside the window do not.
        for n in [
            notified("group.updated", None, Some("g2"), 5),
            notified("user.updated", Some("u1"), None, 5),
            notified("group.updated", None, Some("g1"), -11),
            notified("group.updated", None, Some("g1"), 26),
        ] {
            assert!(matches!(
                decide(&member, t(30), grace, &[n]),
                Verdict::Missed(_)
            ));
        }
        let disabled = DeltaChange::UserDisabled { user: "u1".into() }.to_pending(t(0), t(15));
        assert_eq!(
            decide(
                &disabled,
                t(30),
                grace,
                &[notified("user.updated", Some("u1"), None, 14)]
            ),
            Verdict::Settled
        );
        let Verdict::Missed(f) = decide(&disabled, t(30), grace, &[]) else {
            panic!("missed");
        };
        assert_eq!(f.event_type, "user.updated");
        assert!(describe_change(&f, "x").contains("disabled user u1"));
    }
}
