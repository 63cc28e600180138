//! The silence alert state machine: `ok` ⇄ `firing`.
//!
//! Transitions are derived from the stored state and a fresh evaluation, so
//! re-running the machine after a crash reproduces the same decision instead
//! of inventing a second one.

use super::silence::Evaluation;
use chrono::{DateTime, Utc};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertStatus {
    Ok,
    Firing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Silence passed the threshold at `at` (the exact threshold instant, even
    /// if hushwatch noticed later, e.g. after a restart).
    Fire { at: DateTime<Utc> },
    /// The stream spoke again; resolved when we noticed (`at`).
    Resolve { at: DateTime<Utc> },
}

/// Decides the transition, if any, for a stream in `status` given `eval`.
pub fn next_transition(
    status: AlertStatus,
    eval: &Evaluation,
    now: DateTime<Utc>,
) -> Option<Transition> {
    match (status, eval.firing) {
        (AlertStatus::Ok, true) => Some(Transition::Fire {
            at: eval.fires_at.unwrap_or(now),
        }),
        (AlertStatus::Firing, false) => Some(Transition::Resolve { at: now }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    fn eval(firing: bool, fires_at: DateTime<Utc>) -> Evaluation {
        Evaluation {
            silent_since: fires_at - TimeDelta::hours(6),
            fires_at: Some(fires_at),
            reason: None,
            business_silence: TimeDelta::zero(),
            firing,
        }
    }

    #[test]
    fn fires_once_and_resolves_once() {
        let t = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let now = t + TimeDelta::minutes(5);
        assert_eq!(
            next_transition(AlertStatus::Ok, &eval(true, t), now),
            Some(Transition::Fire { at: t })
        );
        assert_eq!(
            next_transition(AlertStatus::Firing, &eval(true, t), now),
            None
        );
        assert_eq!(
            next_transition(AlertStatus::Firing, &eval(false, t), now),
            Some(Transition::Resolve { at: now })
        );
        assert_eq!(next_transition(AlertStatus::Ok, &eval(false, t), now), None);
    }
}
