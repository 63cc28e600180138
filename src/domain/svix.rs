//! Alerts from Svix operational webhooks, decided from an endpoint's
//! summary before and after an event. Deriving pages from state crossings
//! (rather than from event types) makes duplicates, out-of-order delivery
//! and replays after a crash harmless: the same crossing cannot happen
//! twice.

/// How an endpoint was disabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisableTrigger {
    Automatic,
    Manual,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Critical,
    Warning,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
        }
    }
}

/// What an endpoint looks like now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EndpointSummary {
    pub disabled: Option<DisableTrigger>,
    /// Messages whose latest news is `failing`.
    pub failing: u64,
    /// Exhausted messages not yet acknowledged.
    pub lost: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SvixAlert {
    /// Deliveries to the endpoint stopped; new messages are not even queued.
    EndpointDisabled,
    /// Messages used up every attempt: revocations may be lost right now.
    MessagesExhausted,
    /// Early warning: a message failed its 4th attempt.
    EndpointFailing,
    /// A mapped endpoint was deleted (one-shot notification).
    EndpointDeleted,
}

impl SvixAlert {
    /// The page's `alert_kind`.
    pub fn as_str(self) -> &'static str {
        use super::alert_kind::AlertKind;
        match self {
            SvixAlert::EndpointDisabled => AlertKind::SvixEndpointDisabled,
            SvixAlert::MessagesExhausted => AlertKind::SvixMessagesExhausted,
            SvixAlert::EndpointFailing => AlertKind::SvixEndpointFailing,
            SvixAlert::EndpointDeleted => AlertKind::SvixEndpointDeleted,
        }
        .as_str()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlertChange {
    pub alert: SvixAlert,
    pub firing: bool,
    pub severity: Severity,
}

/// The pages that `before → after` calls for, most urgent first.
pub fn alert_changes(before: &EndpointSummary, after: &EndpointSummary) -> Vec<AlertChange> {
    let mut out = Vec::new();
    match (before.disabled, after.disabled) {
        (None, Some(trigger)) => out.push(AlertChange {
            alert: SvixAlert::EndpointDisabled,
            firing: true,
            severity: match trigger {
                DisableTrigger::Automatic => Severity::Critical,
                DisableTrigger::Manual => Severity::Warning,
            },
        }),
        (Some(_), None) => out.push(AlertChange {
            alert: SvixAlert::EndpointDisabled,
            firing: false,
            severity: Severity::Critical,
        }),
        _ => {}
    }
    let crossed = |a: u64, b: u64| (a == 0) != (b == 0);
    if crossed(before.lost, after.lost) {
        out.push(AlertChange {
            alert: SvixAlert::MessagesExhausted,
            firing: after.lost > 0,
            severity: Severity::Critical,
        });
    }
    if crossed(before.failing, after.failing) {
        out.push(AlertChange {
            alert: SvixAlert::EndpointFailing,
            firing: after.failing > 0,
            severity: Severity::Warning,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(disabled: Option<DisableTrigger>, failing: u64, lost: u64) -> EndpointSummary {
        EndpointSummary {
            disabled,
            failing,
            lost,
        }
    }

    #[test]
    fn automatic_disable_is_critical_and_manual_is_a_warning() {
        let auto = alert_changes(&s(None, 0, 0), &s(Some(DisableTrigger::Automatic), 0, 0));
        assert_eq!(
            auto,
            [AlertChange {
                alert: SvixAlert::EndpointDisabled,
                firing: true,
                severity: Severity::Critical
            }]
        );
        let manual = alert_changes(&s(None, 0, 0), &s(Some(DisableTrigger::Manual), 0, 0));
        assert_eq!(manual[0].severity, Severity::Warning);
        let enabled = alert_changes(&s(Some(DisableTrigger::Manual), 0, 0), &s(None, 0, 0));
        assert!(!enabled[0].firing);
    }

    #[test]
    fn more_of_the_same_is_not_a_new_page() {
        assert!(alert_changes(&s(None, 3, 10), &s(None, 4, 11)).is_empty());
        let first = alert_changes(&s(None, 0, 0), &s(None, 1, 1));
        assert_eq!(first.len(), 2);
        assert_eq!(first[0].alert, SvixAlert::MessagesExhausted);
        let cleared = alert_changes(&s(None, 1, 5), &s(None, 0, 0));
        assert!(cleared.iter().all(|c| !c.firing));
    }
}
