//! The fallback ladder's decisions (issue #19): for a notifier's shared
//! count of consecutive failed attempts, which attempt pages its
//! `fallback` notifiers (a step of `fallback_after`, once per run of
//! failures), which delivery pages the recovery, and what those pages say.
//! The store (`store::ladder`) reads the count under the notifier row's
//! lock, calls [`decide`] and writes what it returns.

use chrono::{DateTime, SecondsFormat, Utc};

/// What an attempt means for its notifier's ladder.
#[derive(Debug, Clone, PartialEq)]
pub struct LadderUpdate {
    pub notifier: String,
    /// The failed attempt's reason; `None` when it was delivered.
    pub error: Option<String>,
    /// The ladder to climb, `None` for a page that never climbs one (a
    /// page *to* a fallback, or a notifier without `fallback`).
    pub rule: Option<LadderRule>,
    /// The page's stream and when it was queued (for the step's message).
    pub stream: String,
    pub page_created_at: DateTime<Utc>,
    /// Instant of the attempt; fallback pages are queued at it.
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LadderRule {
    /// `fallback_after`, ascending.
    pub steps: Vec<i64>,
    /// `fallback`: the notifiers paged.
    pub notify: Vec<String>,
}

/// What recording an attempt did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LadderOutcome {
    /// False when the claim had been taken over: nothing was written.
    pub settled: bool,
    /// The notifier's shared consecutive-failure count afterwards.
    pub failures: i64,
    /// The reason of the fallback page this attempt queued, if any.
    pub queued: Option<String>,
}

/// The ladder's decision for one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Page the fallbacks: the count reached this step.
    Step(i64),
    /// Page the recovery: delivered after a step was paged.
    Recover,
    Nothing,
}

/// `failures`/`paged` are the row before the attempt; returns the decision
/// and the row after it.
pub fn decide(
    rule: Option<&LadderRule>,
    failures: i64,
    paged: i64,
    failed: bool,
) -> (Decision, i64, i64) {
    if !failed {
        let decision = if paged > 0 && rule.is_some() {
            Decision::Recover
        } else {
            Decision::Nothing
        };
        return (decision, 0, 0);
    }
    let after = failures.saturating_add(1);
    match rule {
        Some(r) if after > paged && r.steps.contains(&after) => {
            (Decision::Step(after), after, after)
        }
        _ => (Decision::Nothing, after, paged),
    }
}

/// A fallback page to queue to the rule's `notify`: the step's firing or
/// the recovery's resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FallbackPage {
    pub firing: bool,
    pub reason: String,
}

/// The fallback page a decision queues, if any (none without a rule).
/// `waiting`/`since`: the notifier's pending pages and the oldest one's
/// queue time, read in the same transaction.
pub fn page(
    u: &LadderUpdate,
    decision: Decision,
    failures_before: i64,
    waiting: i64,
    since: Option<DateTime<Utc>>,
) -> Option<FallbackPage> {
    u.rule.as_ref()?;
    let (firing, reason) = match decision {
        Decision::Step(n) => {
            let since = since
                .unwrap_or(u.page_created_at)
                .to_rfc3339_opts(SecondsFormat::Secs, true);
            (
                true,
                format!(
                    "hushwatch cannot deliver to {}: {}, {} pages waiting since {since} ({n} failed attempts in a row)",
                    u.notifier,
                    u.error.as_deref().unwrap_or("failed"),
                    waiting.max(1),
                ),
            )
        }
        Decision::Recover => (
            false,
            format!(
                "hushwatch delivers to {} again (after {failures_before} failed attempts in a row)",
                u.notifier
            ),
        ),
        Decision::Nothing => return None,
    };
    Some(FallbackPage { firing, reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> LadderRule {
        LadderRule {
            steps: vec![1, 5, 20],
            notify: vec!["backup".into()],
        }
    }

    #[test]
    fn steps_are_paged_once_per_run_and_recovery_only_after_a_step() {
        let r = rule();
        assert_eq!(decide(Some(&r), 0, 0, true), (Decision::Step(1), 1, 1));
        assert_eq!(decide(Some(&r), 1, 1, true), (Decision::Nothing, 2, 1));
        assert_eq!(decide(Some(&r), 4, 1, true), (Decision::Step(5), 5, 5));
        // Another replica already paged step 5 of this run.
        assert_eq!(decide(Some(&r), 4, 5, true), (Decision::Nothing, 5, 5));
        assert_eq!(decide(Some(&r), 7, 5, false), (Decision::Recover, 0, 0));
        assert_eq!(decide(Some(&r), 0, 0, false), (Decision::Nothing, 0, 0));
        // No ladder: counted, never paged.
        assert_eq!(decide(None, 0, 0, true), (Decision::Nothing, 1, 0));
    }
}
