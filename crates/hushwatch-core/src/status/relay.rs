//! A relay stream's health (issue #44, "health tells the truth"): the one
//! decision, from the store's `ForwardStatus`, of whether the relay is OK,
//! shared by `/v1/status` (`streams[].relay`), the status page (banner and
//! the stream's row) and `hushwatch status` (its line and exit code), so
//! the three never disagree. A relay that pages is never OK: a failing
//! run, an event hushwatch cannot send (held), a dead letter, or a
//! revocation undelivered for longer than `critical_after`.

use super::format::human_duration;
use super::model::{OldestPending, RelayStatus};
use crate::domain::forward::ForwardStatus;
use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;

/// Every `state` a relay can be in, worst first: the order decides which
/// one `state` names when several hold (all are in `problems`).
pub const STATES: [&str; 6] = [
    "unreadable",
    "overdue",
    "held",
    "failing",
    "dead_letters",
    "ok",
];

/// The relay block of a stream, with or without `[forward]` (one whose
/// `[forward]` was removed keeps its stored rows, judged the same: not OK
/// while any wait). `critical_after`: how long a revocation may stay
/// undelivered before the relay is `overdue`.
pub fn assess(
    stream: &str,
    f: &ForwardStatus,
    critical_after: TimeDelta,
    now: DateTime<Utc>,
) -> RelayStatus {
    let overdue = f
        .oldest_revocation_at
        .is_some_and(|t| now - t >= critical_after);
    // Failing while something waits: a run whose last event was given up
    // (a dead letter, its own state) or whose stream no longer forwards
    // has nothing left to end it, and must not read red for ever.
    let failing = f.consecutive_failures > 0 && f.pending > 0;
    let mut problems = Vec::new();
    if overdue {
        problems.push("overdue");
    }
    if f.held > 0 {
        problems.push("held");
    }
    if failing {
        problems.push("failing");
    }
    if f.dead_letters > 0 {
        problems.push("dead_letters");
    }
    let state = problems.first().copied().unwrap_or("ok");
    RelayStatus {
        state: state.to_string(),
        problems: problems.iter().map(|p| p.to_string()).collect(),
        command: command(stream, &problems, f),
        pending: f.pending,
        held: f.held,
        dead_letters: f.dead_letters,
        consecutive_failures: f.consecutive_failures,
        failing_since: f.failing_since.filter(|_| failing),
        last_error: f.last_error.clone().filter(|_| failing),
        next_attempt_at: f.next_attempt_at.filter(|_| f.pending > 0),
        oldest_pending: f.oldest_pending.as_ref().map(|o| OldestPending {
            event_type: o.event_type.clone(),
            subject: o.subject.clone(),
            delivery_id: o.delivery_id.clone(),
            received_at: o.received_at,
        }),
        oldest_pending_at: f.oldest_pending_at,
        oldest_revocation_at: f.oldest_revocation_at,
        critical_after_seconds: critical_after.num_seconds(),
        last_delivered_at: f.last_delivered_at,
    }
}

/// The block of a stream whose relay state could not be read: not OK
/// (nobody can tell whether revocations wait), and says so.
pub fn unreadable(critical_after: TimeDelta) -> RelayStatus {
    RelayStatus {
        state: "unreadable".to_string(),
        problems: vec!["unreadable".to_string()],
        critical_after_seconds: critical_after.num_seconds(),
        ..RelayStatus::default()
    }
}

/// `name` as one shell word: as is when it holds only characters a shell
/// leaves alone (config names are `[A-Za-z0-9_.-]`), else single-quoted.
pub fn shell_word(name: &str) -> String {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    {
        name.to_string()
    } else {
        format!("'{}'", name.replace('\'', "'\\''"))
    }
}

/// The command that acts on the worst problem, exactly as an operator
/// types it (the admin token from `$HUSHWATCH_ADMIN_TOKEN`; `--config` or
/// `--url` to reach another listener than the default). An overdue
/// revocation is acted on through what keeps it: held, failing, or given up.
fn command(stream: &str, problems: &[&str], f: &ForwardStatus) -> Option<String> {
    let s = shell_word(stream);
    let first = problems.iter().find(|p| **p != "overdue").copied();
    match (problems.first().copied(), first) {
        (None, _) => None,
        (_, Some("held")) => Some(format!("hushwatch forward list --stream {s} --state held")),
        (_, Some("failing")) => Some(format!("hushwatch forward retry --stream {s}")),
        (_, Some("dead_letters")) => Some(format!("hushwatch replay --stream {s} --dead-letters")),
        _ if f.pending > 0 => Some(format!("hushwatch forward retry --stream {s}")),
        _ => Some(format!("hushwatch forward list --stream {s}")),
    }
}

impl RelayStatus {
    /// Nothing that pages: no failing run, nothing held, given up or
    /// overdue, and the state was readable.
    pub fn ok(&self) -> bool {
        self.state == "ok" || self.state.is_empty()
    }

    /// The state in a few words, for the banner and the row's head.
    pub fn state_words(&self) -> &'static str {
        match self.state.as_str() {
            "unreadable" => "relay state unreadable",
            "overdue" => "revocation undelivered too long",
            "held" => "relay holds events it cannot send",
            "failing" => "relay failing",
            "dead_letters" => "relay gave up events (dead letters)",
            _ => "relay ok",
        }
    }

    /// One line for a person, times on the stream's wall clock: "relay
    /// failing: 8 pending, oldest user.deleted user_3 since 22:46, next
    /// attempt 22:51:13 (`hushwatch forward retry --stream identity`)".
    pub fn line(&self, tz: Tz, now: DateTime<Utc>) -> String {
        if self.state == "unreadable" {
            return "relay state unreadable: whether events wait for the app is unknown".into();
        }
        let clock = |t: DateTime<Utc>, secs: bool| {
            let local = t.with_timezone(&tz);
            let time = if secs { "%H:%M:%S" } else { "%H:%M" };
            if local.date_naive() == now.with_timezone(&tz).date_naive() {
                local.format(time).to_string()
            } else {
                local.format(&format!("%a {time}")).to_string()
            }
        };
        let mut facts = Vec::new();
        if self.pending > 0 {
            let mut p = format!("{} pending", self.pending);
            match (&self.oldest_pending, self.oldest_pending_at) {
                (Some(o), _) => {
                    p.push_str(&format!(", oldest {}", o.event_type));
                    if let Some(s) = &o.subject {
                        p.push_str(&format!(" {s}"));
                    }
                    p.push_str(&format!(" since {}", clock(o.received_at, false)));
                }
                (None, Some(t)) => p.push_str(&format!(", oldest since {}", clock(t, false))),
                (None, None) => {}
            }
            facts.push(p);
        }
        if self.held > 0 {
            facts.push(format!("{} held (hushwatch cannot send them)", self.held));
        }
        if self.dead_letters > 0 {
            facts.push(format!("{} dead letter(s)", self.dead_letters));
        }
        if let Some(t) = self
            .oldest_revocation_at
            .filter(|_| self.problems.iter().any(|p| p == "overdue"))
        {
            facts.push(format!(
                "a revocation received {} undelivered for {} (critical after {})",
                clock(t, false),
                human_duration(now - t),
                human_duration(TimeDelta::seconds(self.critical_after_seconds))
            ));
        }
        if self.consecutive_failures > 0 && self.failing_since.is_some() {
            let mut f = format!("{} failed attempt(s) in a row", self.consecutive_failures);
            if let Some(e) = &self.last_error {
                f.push_str(&format!(": {}", super::format::short(e, 120)));
            }
            facts.push(f);
        }
        if let Some(t) = self.next_attempt_at {
            facts.push(format!("next attempt {}", clock(t, true)));
        }
        if facts.is_empty() {
            facts.push(match self.last_delivered_at {
                Some(t) => format!("nothing waiting, last delivered {}", clock(t, false)),
                None => "nothing waiting".to_string(),
            });
        }
        let mut line = format!("{}: {}", self.state_words(), facts.join(", "));
        if let Some(c) = &self.command {
            line.push_str(&format!(" (`{c}`)"));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::forward::Oldest;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn failing() -> ForwardStatus {
        ForwardStatus {
            stream: "identity".into(),
            pending: 8,
            oldest_pending_at: Some(t("2026-12-03T22:46:00Z")),
            consecutive_failures: 4,
            failing_since: Some(t("2026-12-03T22:46:01Z")),
            last_error: Some("http://127.0.0.1:3000 answered HTTP 400".into()),
            next_attempt_at: Some(t("2026-12-03T22:51:13Z")),
            oldest_pending: Some(Oldest {
                event_type: "user.deleted".into(),
                subject: Some("user_3".into()),
                delivery_id: "msg_1".into(),
                received_at: t("2026-12-03T22:46:00Z"),
            }),
            ..ForwardStatus::default()
        }
    }

    const HOUR: TimeDelta = TimeDelta::hours(1);

    #[test]
    fn a_failing_relay_is_not_ok_and_says_what_to_run() {
        let now = t("2026-12-03T22:50:00Z");
        let r = assess("identity", &failing(), HOUR, now);
        assert_eq!(r.state, "failing");
        assert!(!r.ok());
        assert_eq!(
            r.line(chrono_tz::UTC, now),
            "relay failing: 8 pending, oldest user.deleted user_3 since 22:46, \
             4 failed attempt(s) in a row: http://127.0.0.1:3000 answered HTTP 400, \
             next attempt 22:51:13 (`hushwatch forward retry --stream identity`)"
        );
    }

    #[test]
    fn each_problem_names_its_state_and_command_worst_first() {
        let now = t("2026-12-03T23:50:00Z");
        let quiet = ForwardStatus {
            stream: "identity".into(),
            last_delivered_at: Some(t("2026-12-03T20:00:00Z")),
            ..ForwardStatus::default()
        };
        let r = assess("identity", &quiet, HOUR, now);
        assert!(r.ok() && r.command.is_none(), "{r:?}");
        assert_eq!(
            r.line(chrono_tz::UTC, now),
            "relay ok: nothing waiting, last delivered 20:00"
        );

        let held = ForwardStatus {
            held: 2,
            ..quiet.clone()
        };
        let r = assess("identity", &held, HOUR, now);
        assert_eq!(
            (r.state.as_str(), r.command.as_deref()),
            (
                "held",
                Some("hushwatch forward list --stream identity --state held")
            )
        );

        let dead = ForwardStatus {
            dead_letters: 3,
            ..quiet.clone()
        };
        let r = assess("identity", &dead, HOUR, now);
        assert_eq!(
            (r.state.as_str(), r.command.as_deref()),
            (
                "dead_letters",
                Some("hushwatch replay --stream identity --dead-letters")
            )
        );

        // A revocation received 22:46, an hour and more ago: overdue first,
        // acted on through what keeps it (the failing run).
        let overdue = ForwardStatus {
            oldest_revocation_at: Some(t("2026-12-03T22:46:00Z")),
            ..failing()
        };
        let r = assess("identity", &overdue, HOUR, now);
        assert_eq!(r.state, "overdue");
        assert_eq!(r.problems, ["overdue", "failing"]);
        assert_eq!(
            r.command.as_deref(),
            Some("hushwatch forward retry --stream identity")
        );
        assert!(
            r.line(chrono_tz::UTC, now)
                .contains("a revocation received 22:46 undelivered for 1h04m (critical after 1h)"),
            "{}",
            r.line(chrono_tz::UTC, now)
        );
        // Younger than critical_after: only failing.
        let r = assess("identity", &overdue, TimeDelta::hours(2), now);
        assert_eq!(r.state, "failing");
    }

    #[test]
    fn a_failure_run_with_nothing_waiting_is_not_failing() {
        let now = t("2026-12-03T23:50:00Z");
        let gone = ForwardStatus {
            pending: 0,
            ..failing()
        };
        assert!(assess("identity", &gone, HOUR, now).ok());
        assert!(!assess("identity", &failing(), HOUR, now).ok());
        let given_up = ForwardStatus {
            pending: 0,
            dead_letters: 1,
            ..failing()
        };
        let r = assess("identity", &given_up, HOUR, now);
        assert_eq!(r.problems, ["dead_letters"], "{r:?}");
        assert!(!unreadable(HOUR).ok());
    }

    #[test]
    fn odd_stream_names_are_quoted_for_the_shell() {
        assert_eq!(shell_word("identity-1.x"), "identity-1.x");
        assert_eq!(shell_word("a b'c"), "'a b'\\''c'");
        let r = assess("a b", &failing(), HOUR, t("2026-12-03T22:50:00Z"));
        assert_eq!(
            r.command.as_deref(),
            Some("hushwatch forward retry --stream 'a b'")
        );
    }
}
