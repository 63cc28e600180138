//! Every alert kind a page can carry (the outbox `alert_kind`), with what
//! each notifier needs to know about it: its Alertmanager `alertname`,
//! whether the shipped Prometheus rules have an alert of that name, and
//! whether an operator silence may name it. The matches are exhaustive, so
//! a new kind cannot be added without deciding each of these; a kind left
//! out used to reach Alertmanager as the catch-all `IdentityWebhookAlert`
//! (fallback-ladder pages did, issue #26).

/// One alert kind. The stored form is [`AlertKind::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AlertKind {
    /// A stream went quiet (`silence`).
    Silence,
    SvixEndpointDisabled,
    SvixMessagesExhausted,
    SvixEndpointFailing,
    SvixEndpointDeleted,
    SubscriptionExpiring,
    SubscriptionReauthorizationRequired,
    ReconciliationMissing,
    ReconciliationRevokeMissed,
    StaleGrant,
    /// Relay mode: the app refused or missed forwarded events 1, 5, 20
    /// times in a row (`store::forward`).
    ForwardFailing,
    /// Relay mode: events given up after `give_up_after`, kept for replay.
    ForwardDeadLetter,
    /// Relay mode: events hushwatch itself cannot send (a seal key no
    /// longer configured, a row altered at rest, no `[forward]`), held out
    /// of the delivery queue until the cause is fixed.
    ForwardHeld,
    /// Relay mode: a revocation not delivered to the app within the
    /// stream's `critical_after`.
    ForwardRevocationOverdue,
    /// Cross-check: the provider's own API shows changes no webhook
    /// reported (`service::crosscheck`).
    ProviderMissed,
    /// Cross-check: the provider's API cannot be read
    /// (`domain::crosscheck::poll_health`).
    CrosscheckFailing,
    /// A fallback-ladder page: hushwatch cannot deliver to a notifier
    /// (`service::fallback`, queued by `store::ops::fallback_alert`).
    Fallback,
    /// The direct emergency page about the store (`service::watchdog`),
    /// sent without the outbox.
    Storage,
    /// A Svix page queued before schema v8, which stored `svix` without
    /// saying which Svix alert: it still goes out (as Alertmanager's
    /// catch-all `IdentityWebhookAlert`), but no new page is of this kind,
    /// so it is not in [`AlertKind::ALL`] and no silence can name it.
    SvixUnrecorded,
}

impl AlertKind {
    /// Every kind, in the order docs/src/reference/alerts.md lists them.
    pub const ALL: [AlertKind; 18] = [
        AlertKind::Silence,
        AlertKind::SvixEndpointDisabled,
        AlertKind::SvixMessagesExhausted,
        AlertKind::SvixEndpointFailing,
        AlertKind::SvixEndpointDeleted,
        AlertKind::SubscriptionExpiring,
        AlertKind::SubscriptionReauthorizationRequired,
        AlertKind::ReconciliationMissing,
        AlertKind::ReconciliationRevokeMissed,
        AlertKind::StaleGrant,
        AlertKind::ForwardFailing,
        AlertKind::ForwardDeadLetter,
        AlertKind::ForwardHeld,
        AlertKind::ForwardRevocationOverdue,
        AlertKind::ProviderMissed,
        AlertKind::CrosscheckFailing,
        AlertKind::Fallback,
        AlertKind::Storage,
    ];

    /// The stored `alert_kind` (Alertmanager `kind` label, webhook
    /// `alert.kind`, silence `kinds`).
    pub const fn as_str(self) -> &'static str {
        match self {
            AlertKind::Silence => "silence",
            AlertKind::SvixEndpointDisabled => "svix_endpoint_disabled",
            AlertKind::SvixMessagesExhausted => "svix_messages_exhausted",
            AlertKind::SvixEndpointFailing => "svix_endpoint_failing",
            AlertKind::SvixEndpointDeleted => "svix_endpoint_deleted",
            AlertKind::SubscriptionExpiring => "subscription_expiring",
            AlertKind::SubscriptionReauthorizationRequired => {
                "subscription_reauthorization_required"
            }
            AlertKind::ReconciliationMissing => "reconciliation_missing",
            AlertKind::ReconciliationRevokeMissed => "reconciliation_revoke_missed",
            AlertKind::StaleGrant => "stale_grant",
            AlertKind::ForwardFailing => "forward_failing",
            AlertKind::ForwardDeadLetter => "forward_dead_letter",
            AlertKind::ForwardHeld => "forward_held",
            AlertKind::ForwardRevocationOverdue => "forward_revocation_overdue",
            AlertKind::ProviderMissed => "provider_missed",
            AlertKind::CrosscheckFailing => "crosscheck_failing",
            AlertKind::Fallback => "hushwatch_fallback",
            AlertKind::Storage => "hushwatch_storage",
            AlertKind::SvixUnrecorded => "svix",
        }
    }

    /// The kind stored as `s` (`svix`: a pre-v8 Svix page); `None` for
    /// anything else, which no hushwatch ever stored.
    pub fn parse(s: &str) -> Option<AlertKind> {
        AlertKind::ALL
            .into_iter()
            .chain([AlertKind::SvixUnrecorded])
            .find(|k| k.as_str() == s)
    }

    /// The Alertmanager `alertname`: the shipped rule's name where one
    /// watches the same condition (charts/hushwatch/rules/hushwatch.rules.yml),
    /// so hushwatch's own page and the rule's alert group, inhibit and are
    /// silenced together. See [`AlertKind::has_shipped_rule`] for the
    /// names only hushwatch's pages carry.
    pub const fn alertname(self) -> &'static str {
        match self {
            AlertKind::Silence => "IdentityEventsSilent",
            AlertKind::SvixEndpointDisabled => "IdentityWebhookEndpointDisabled",
            AlertKind::SvixMessagesExhausted => "IdentityWebhookMessagesExhausted",
            AlertKind::SvixEndpointFailing => "IdentityWebhookEndpointFailing",
            AlertKind::SvixEndpointDeleted => "IdentityWebhookEndpointDeleted",
            AlertKind::SubscriptionExpiring => "IdentitySubscriptionExpiring",
            AlertKind::SubscriptionReauthorizationRequired => {
                "IdentitySubscriptionReauthorizationRequired"
            }
            AlertKind::ReconciliationMissing => "IdentityReconciliationMissing",
            AlertKind::ReconciliationRevokeMissed => "IdentityReconciliationRevokeMissed",
            AlertKind::StaleGrant => "IdentityStaleGrant",
            AlertKind::ForwardFailing => "IdentityForwardFailing",
            AlertKind::ForwardDeadLetter => "IdentityForwardDeadLetters",
            AlertKind::ForwardHeld => "IdentityForwardHeld",
            AlertKind::ForwardRevocationOverdue => "IdentityForwardRevocationOverdue",
            // The rules watch the same things: findings counted in
            // `hushwatch_crosscheck_missed_total`, and a last success
            // older than three polls.
            AlertKind::ProviderMissed => "HushwatchProviderMissed",
            AlertKind::CrosscheckFailing => "HushwatchCrosscheckStale",
            // The rule watches the same thing: pages through a notifier
            // failing (it groups by the `notifier` label, which the
            // fallback page carries too).
            AlertKind::Fallback => "HushwatchNotificationsFailing",
            AlertKind::Storage => "HushwatchStoreDown",
            AlertKind::SvixUnrecorded => "IdentityWebhookAlert",
        }
    }

    /// Whether the shipped rules have an alert named [`alertname`]. The
    /// others are pages only hushwatch sends: Svix's "failing" and
    /// "deleted" operational events and Entra's reauthorization request
    /// leave no metric a rule could watch.
    ///
    /// [`alertname`]: AlertKind::alertname
    pub const fn has_shipped_rule(self) -> bool {
        match self {
            AlertKind::SvixEndpointFailing
            | AlertKind::SvixEndpointDeleted
            | AlertKind::SubscriptionReauthorizationRequired
            | AlertKind::ForwardHeld
            | AlertKind::ForwardRevocationOverdue
            | AlertKind::SvixUnrecorded => false,
            AlertKind::Silence
            | AlertKind::SvixEndpointDisabled
            | AlertKind::SvixMessagesExhausted
            | AlertKind::SubscriptionExpiring
            | AlertKind::ReconciliationMissing
            | AlertKind::ReconciliationRevokeMissed
            | AlertKind::StaleGrant
            | AlertKind::ForwardFailing
            | AlertKind::ForwardDeadLetter
            | AlertKind::ProviderMissed
            | AlertKind::CrosscheckFailing
            | AlertKind::Fallback
            | AlertKind::Storage => true,
        }
    }

    /// What a page's `endpoint_id` names, as the label text pages show
    /// before it (`None`: the kind has none worth showing). Svix pages also
    /// show their `source` (the `[svix.NAME]` table).
    pub const fn endpoint_label(self) -> Option<&'static str> {
        match self {
            AlertKind::SvixEndpointDisabled
            | AlertKind::SvixMessagesExhausted
            | AlertKind::SvixEndpointFailing
            | AlertKind::SvixEndpointDeleted
            | AlertKind::SvixUnrecorded => Some("Endpoint"),
            AlertKind::SubscriptionExpiring | AlertKind::SubscriptionReauthorizationRequired => {
                Some("Subscription")
            }
            AlertKind::ReconciliationRevokeMissed => Some("Report"),
            AlertKind::Fallback => Some("Notifier"),
            AlertKind::Silence
            | AlertKind::ReconciliationMissing
            | AlertKind::StaleGrant
            | AlertKind::ForwardFailing
            | AlertKind::ForwardDeadLetter
            | AlertKind::ForwardHeld
            | AlertKind::ForwardRevocationOverdue
            | AlertKind::ProviderMissed
            | AlertKind::CrosscheckFailing
            | AlertKind::Storage => None,
        }
    }

    /// Whether the page is about a Svix endpoint (its `source` is a
    /// `[svix.NAME]` table).
    pub const fn is_svix(self) -> bool {
        matches!(
            self,
            AlertKind::SvixEndpointDisabled
                | AlertKind::SvixMessagesExhausted
                | AlertKind::SvixEndpointFailing
                | AlertKind::SvixEndpointDeleted
                | AlertKind::SvixUnrecorded
        )
    }

    /// Whether an operator silence may name this kind
    /// (`domain::mute::PAGE_KINDS`). Pages about hushwatch itself
    /// cannot be silenced: they are how a broken notifier or store is
    /// noticed at all.
    pub const fn silenceable(self) -> bool {
        match self {
            // A pre-v8 Svix page: no silence can name `svix`.
            AlertKind::Fallback | AlertKind::Storage | AlertKind::SvixUnrecorded => false,
            AlertKind::Silence
            | AlertKind::SvixEndpointDisabled
            | AlertKind::SvixMessagesExhausted
            | AlertKind::SvixEndpointFailing
            | AlertKind::SvixEndpointDeleted
            | AlertKind::SubscriptionExpiring
            | AlertKind::SubscriptionReauthorizationRequired
            | AlertKind::ReconciliationMissing
            | AlertKind::ReconciliationRevokeMissed
            | AlertKind::StaleGrant
            | AlertKind::ForwardFailing
            | AlertKind::ForwardDeadLetter
            | AlertKind::ForwardHeld
            | AlertKind::ForwardRevocationOverdue
            | AlertKind::ProviderMissed
            | AlertKind::CrosscheckFailing => true,
        }
    }
}

/// The stored form, as pages and logs show it.
impl std::fmt::Display for AlertKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kinds an operator silence may name, in [`AlertKind::ALL`] order
/// (`domain::mute::PAGE_KINDS`).
pub const SILENCEABLE: [&str; 16] = silenceable();

const fn silenceable() -> [&'static str; 16] {
    let mut out = [""; 16];
    let (mut i, mut n) = (0, 0);
    while i < AlertKind::ALL.len() {
        if AlertKind::ALL[i].silenceable() {
            out[n] = AlertKind::ALL[i].as_str();
            n += 1;
        }
        i += 1;
    }
    // A kind made (un)silenceable must change the array's length too.
    assert!(n == out.len());
    out
}

#[cfg(test)]
mod tests {
    use super::AlertKind;

    #[test]
    fn every_kind_round_trips() {
        for k in AlertKind::ALL {
            assert_eq!(AlertKind::parse(k.as_str()), Some(k));
        }
        // A pre-v8 Svix page reads back as such; nothing else unknown does.
        assert_eq!(AlertKind::parse("svix"), Some(AlertKind::SvixUnrecorded));
        assert!(!AlertKind::ALL.contains(&AlertKind::SvixUnrecorded));
        assert_eq!(AlertKind::parse("svix_endpoint"), None);
    }
}
