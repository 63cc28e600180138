//! Why a notification attempt did not deliver, as a closed set: the
//! bounded `reason` label of `hushwatch_notifications_total`. The notifiers
//! (`notify`) classify each failed attempt into one; the metrics declare
//! every one up front. The free text of a failure never becomes a label.

/// Why an attempt did not deliver: the `reason` label of
/// `hushwatch_notifications_total`, a closed set so the label stays
/// bounded whatever a receiver answers (the free text is in `reason` of
/// the outcome, the logs and `/v1/status`, never in a label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// No answer within the notifier's `timeout` (the receiver may have
    /// the page: the retry reuses its key).
    Timeout,
    /// No connection (refused, unreachable, DNS, TLS handshake): nothing
    /// was sent.
    Connect,
    /// An HTTP 4xx answer (408, 425 and 429 are retried, the rest not).
    Status4xx,
    /// An HTTP 5xx answer.
    Status5xx,
    /// Refused without an HTTP status: an SMTP server's 4xx/5xx reply, a
    /// non-2xx status outside 4xx/5xx, or a page hushwatch could not send
    /// as configured (a URL or header it cannot use, stdout closed).
    Refused,
    /// The connection ended after the page was sent and before an answer:
    /// the receiver may have it.
    Ambiguous,
}

impl Cause {
    /// Every cause, in label order (pre-declared so `increase()` sees the
    /// first failure of each).
    pub const ALL: [Cause; 6] = [
        Cause::Timeout,
        Cause::Connect,
        Cause::Status4xx,
        Cause::Status5xx,
        Cause::Refused,
        Cause::Ambiguous,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Cause::Timeout => "timeout",
            Cause::Connect => "connect",
            Cause::Status4xx => "status_4xx",
            Cause::Status5xx => "status_5xx",
            Cause::Refused => "refused",
            Cause::Ambiguous => "ambiguous",
        }
    }

    /// The class of an HTTP status that is neither a success nor retried
    /// the same way everywhere.
    pub fn of_status(status: u16) -> Cause {
        match status {
            400..=499 => Cause::Status4xx,
            500..=599 => Cause::Status5xx,
            _ => Cause::Refused,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cause;

    #[test]
    fn statuses_fall_in_their_class_and_every_label_is_distinct() {
        assert_eq!(Cause::of_status(404), Cause::Status4xx);
        assert_eq!(Cause::of_status(429), Cause::Status4xx);
        assert_eq!(Cause::of_status(503), Cause::Status5xx);
        assert_eq!(Cause::of_status(301), Cause::Refused);
        let labels: std::collections::BTreeSet<_> = Cause::ALL.iter().map(|c| c.label()).collect();
        assert_eq!(labels.len(), Cause::ALL.len());
        assert!(labels.iter().all(|l| !l.is_empty()));
    }
}
