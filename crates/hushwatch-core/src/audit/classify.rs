//! Which event types grant access and which revoke it.
//!
//! The tables are data (provider, type, direction), taken from the
//! providers' published event catalogues; config can add more
//! (`[audit] revoke_types` / `grant_types`). Types that change access in a
//! direction only the payload can tell (e.g. `user.updated`) are `Change`.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Grant,
    Revoke,
    Change,
    Neutral,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Grant => "grant",
            Access::Revoke => "revoke",
            Access::Change => "change",
            Access::Neutral => "neutral",
        }
    }

    pub fn parse(text: &str) -> Option<Access> {
        [
            Access::Grant,
            Access::Revoke,
            Access::Change,
            Access::Neutral,
        ]
        .into_iter()
        .find(|a| a.as_str() == text)
    }
}

/// (event type, direction). Types shared by several providers appear once.
const BUILT_IN: &[(&str, Access)] = &[
    // Clerk
    ("user.created", Access::Grant),
    ("session.created", Access::Grant),
    ("organizationMembership.created", Access::Grant),
    ("organizationInvitation.accepted", Access::Grant),
    ("user.deleted", Access::Revoke),
    ("session.ended", Access::Revoke),
    ("session.removed", Access::Revoke),
    ("session.revoked", Access::Revoke),
    ("organizationMembership.deleted", Access::Revoke),
    ("organization.deleted", Access::Revoke),
    ("organizationInvitation.revoked", Access::Revoke),
    ("role.deleted", Access::Revoke),
    ("permission.deleted", Access::Revoke),
    ("user.updated", Access::Change),
    ("organizationMembership.updated", Access::Change),
    ("role.updated", Access::Change),
    ("permission.updated", Access::Change),
    // WorkOS
    ("organization_membership.created", Access::Grant),
    ("dsync.user.created", Access::Grant),
    ("dsync.group.user_added", Access::Grant),
    ("group.member_added", Access::Grant),
    ("invitation.accepted", Access::Grant),
    ("connection.activated", Access::Grant),
    ("dsync.activated", Access::Grant),
    ("api_key.created", Access::Grant),
    ("organization_membership.deleted", Access::Revoke),
    ("dsync.user.deleted", Access::Revoke),
    ("dsync.group.user_removed", Access::Revoke),
    ("dsync.group.deleted", Access::Revoke),
    ("dsync.deleted", Access::Revoke),
    ("group.member_removed", Access::Revoke),
    ("group.deleted", Access::Revoke),
    ("invitation.revoked", Access::Revoke),
    ("connection.deactivated", Access::Revoke),
    ("connection.deleted", Access::Revoke),
    ("organization_role.deleted", Access::Revoke),
    ("api_key.revoked", Access::Revoke),
    ("organization_membership.updated", Access::Change),
    ("dsync.user.updated", Access::Change),
    ("organization_role.updated", Access::Change),
    // Okta (event-hook-eligible types)
    ("user.lifecycle.create", Access::Grant),
    ("user.lifecycle.activate", Access::Grant),
    ("user.lifecycle.reactivate", Access::Grant),
    ("user.lifecycle.unsuspend", Access::Grant),
    ("group.user_membership.add", Access::Grant),
    ("application.user_membership.add", Access::Grant),
    ("user.session.start", Access::Grant),
    ("user.lifecycle.deactivate", Access::Revoke),
    ("user.lifecycle.suspend", Access::Revoke),
    ("user.lifecycle.delete.initiated", Access::Revoke),
    ("group.user_membership.remove", Access::Revoke),
    ("application.user_membership.remove", Access::Revoke),
    ("user.session.end", Access::Revoke),
    ("user.session.clear", Access::Revoke),
    ("user.authentication.universal_logout", Access::Revoke),
    ("user.account.lock", Access::Revoke),
    // Auth0 log type codes (Auth0 "Log event type codes"; `du` is the older name of `sdu`)
    ("s", Access::Grant),
    ("ss", Access::Grant),
    ("sdu", Access::Revoke),
    ("du", Access::Revoke),
    ("slo", Access::Revoke),
    ("limit_wc", Access::Revoke),
    // Microsoft Graph change notifications, read as `<resource kind>.<changeType>`
    // (`user.deleted` and `group.deleted` are already listed above)
    ("user.created", Access::Grant),
    ("group.updated", Access::Change),
    // Google Workspace Admin activity event names
    ("CREATE_USER", Access::Grant),
    ("UNSUSPEND_USER", Access::Grant),
    ("ADD_GROUP_MEMBER", Access::Grant),
    ("GRANT_ADMIN_PRIVILEGE", Access::Grant),
    ("DELETE_USER", Access::Revoke),
    ("SUSPEND_USER", Access::Revoke),
    ("REMOVE_GROUP_MEMBER", Access::Revoke),
    ("REVOKE_ADMIN_PRIVILEGE", Access::Revoke),
];

/// The built-in table plus config additions (which win on conflict).
#[derive(Debug, Clone, Default)]
pub struct Classifier {
    extra: Vec<(String, Access)>,
}

impl Classifier {
    pub fn new(extra: Vec<(String, Access)>) -> Classifier {
        Classifier { extra }
    }

    /// A delete, removal or revoke type: what relay mode's
    /// `critical_after` ages.
    pub fn revokes(&self, event_type: &str) -> bool {
        self.classify(event_type) == Access::Revoke
    }

    pub fn classify(&self, event_type: &str) -> Access {
        self.extra
            .iter()
            .find(|(t, _)| t == event_type)
            .map(|(_, a)| *a)
            .or_else(|| {
                BUILT_IN
                    .iter()
                    .find(|(t, _)| *t == event_type)
                    .map(|(_, a)| *a)
            })
            .unwrap_or(Access::Neutral)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn providers_revocations_are_revokes() {
        let c = Classifier::default();
        for t in [
            "user.deleted",
            "session.revoked",
            "organization_membership.deleted",
            "user.lifecycle.deactivate",
            "sdu",
            "DELETE_USER",
        ] {
            assert_eq!(c.classify(t), Access::Revoke, "{t}");
        }
        assert_eq!(c.classify("user.created"), Access::Grant);
        assert_eq!(c.classify("user.updated"), Access::Change);
        assert_eq!(c.classify("email.created"), Access::Neutral);
    }

    #[test]
    fn config_extends_and_overrides() {
        let c = Classifier::new(vec![
            ("sdu".into(), Access::Neutral),
            ("user.updated".into(), Access::Revoke),
        ]);
        assert_eq!(c.classify("sdu"), Access::Neutral);
        assert_eq!(c.classify("user.updated"), Access::Revoke);
    }

    #[test]
    fn table_has_no_contradictions() {
        for (i, (t, a)) in BUILT_IN.iter().enumerate() {
            for (u, b) in &BUILT_IN[i + 1..] {
                assert!(
                    t != u || a == b,
                    "{t} listed twice with different directions"
                );
            }
        }
    }
}
