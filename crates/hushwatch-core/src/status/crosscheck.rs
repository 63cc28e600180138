//! A cross-checked stream's health (issue #45, "health tells the truth"):
//! the one decision, from the stored poll bookkeeping and open findings,
//! of whether the cross-check is OK, shared by `/v1/status`
//! (`streams[].crosscheck`), the status page (banner and the stream's row)
//! and `hushwatch status` (its line and exit code), so the three never
//! disagree. Whether the poll itself is failing is decided elsewhere, by
//! the same rule the `crosscheck_failing` page uses
//! (`domain::crosscheck::poll_health`), and handed in here.

use super::format::short;
use super::model::{CrosscheckFinding, CrosscheckStatus};
use crate::domain::crosscheck::{Finding, Provider, When};
use crate::domain::forward::shell_word;
use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;

/// Every `state`, worst first: the order decides which one `state` names
/// when several hold (all are in `problems`).
pub const STATES: [&str; 4] = ["unreadable", "failing", "findings", "ok"];

/// Open findings named in the block (the rest are counted).
pub const EXAMPLES: usize = 5;

/// The poll is failing by the `crosscheck_failing` rule: `critical` when
/// the provider refused the key, `reason` in words (never the key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    pub critical: bool,
    pub reason: String,
}

/// What the block is decided from: the stream's stored bookkeeping
/// (`store::crosscheck_view`; all empty before the first poll ends).
pub struct Facts<'a> {
    pub provider: Provider,
    pub last_poll_at: Option<DateTime<Utc>>,
    pub last_success_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub failures: i64,
    pub healed: i64,
    /// Open findings by direction.
    pub open_revoke: i64,
    pub open_grant: i64,
    pub open_other: i64,
    pub failing: Option<Failing>,
    /// `[streams.X.crosscheck] every`.
    pub every: TimeDelta,
    /// When the stream's watch started: the first poll is due from then.
    pub watch_started_at: DateTime<Utc>,
    /// The newest open findings (at most [`EXAMPLES`] are named), their
    /// subjects as people read them (revealed when the store veils them).
    pub examples: Vec<CrosscheckFinding>,
    /// The config file the commands name (the one the sidecar runs with).
    pub config_path: &'a str,
}

/// The `crosscheck` block of a stream.
pub fn assess(stream: &str, facts: &Facts<'_>, now: DateTime<Utc>) -> CrosscheckStatus {
    let (revoke, grant, other) = (facts.open_revoke, facts.open_grant, facts.open_other);
    let open = (revoke + grant + other).max(0) as u64;
    let mut problems = Vec::new();
    if facts.failing.is_some() {
        problems.push("failing");
    }
    if open > 0 {
        problems.push("findings");
    }
    let state = problems.first().copied().unwrap_or("ok");
    // The scheduler polls `every` after the last complete poll (the first
    // from the watch start); one overdue is due now.
    let next_poll = (facts.last_poll_at.unwrap_or(facts.watch_started_at) + facts.every).max(now);
    let examples: Vec<CrosscheckFinding> = facts.examples.iter().take(EXAMPLES).cloned().collect();
    let config = shell_word(facts.config_path);
    let s = shell_word(stream);
    let command = match state {
        // A checkpoint the provider no longer keeps fails every poll,
        // dry runs included, until it is restarted.
        "failing"
            if facts.failing.as_ref().is_some_and(|f| {
                f.reason
                    .starts_with(crate::domain::crosscheck::CHECKPOINT_LOST)
            }) =>
        {
            Some(format!(
                "hushwatch crosscheck --config {config} --stream {s} --restart"
            ))
        }
        "failing" => Some(format!(
            "hushwatch crosscheck --config {config} --stream {s} --dry-run"
        )),
        "findings" => {
            // The subject to look at first: a missed revocation if any.
            let first = examples
                .iter()
                .find(|f| f.direction == "revoke")
                .or(examples.first());
            Some(match first {
                Some(f) => format!(
                    "hushwatch audit subject --config {config} --format text {}",
                    shell_word(&f.subject)
                ),
                None => format!("hushwatch crosscheck --config {config} --stream {s} --dry-run"),
            })
        }
        _ => None,
    };
    CrosscheckStatus {
        provider: facts.provider.name().to_string(),
        state: state.to_string(),
        problems: problems.iter().map(|p| p.to_string()).collect(),
        critical: facts.failing.as_ref().is_some_and(|f| f.critical) || revoke > 0,
        reason: facts.failing.as_ref().map(|f| f.reason.clone()),
        last_success: facts.last_success_at,
        last_poll: facts.last_poll_at,
        last_error: facts.last_error.clone(),
        next_poll: Some(next_poll),
        failures: facts.failures.max(0) as u64,
        open_findings: open,
        open_revocations: revoke.max(0) as u64,
        open_grants: grant.max(0) as u64,
        open_other: other.max(0) as u64,
        healed: facts.healed.max(0) as u64,
        findings: examples,
        command,
    }
}

/// The block of a stream whose cross-check state could not be read: not
/// OK (nobody can tell whether revocations were missed), and says so.
pub fn unreadable(provider: Provider) -> CrosscheckStatus {
    CrosscheckStatus {
        provider: provider.name().to_string(),
        state: "unreadable".to_string(),
        problems: vec!["unreadable".to_string()],
        ..CrosscheckStatus::default()
    }
}

/// A stored finding as the block names it; `subject` and `organization`
/// as given (the caller reveals veiled ids first).
pub fn finding(f: &Finding, found_at: DateTime<Utc>, state: &str) -> CrosscheckFinding {
    let (at, from, until) = match f.when {
        When::At(t) => (Some(t), None, None),
        When::Between(a, b) => (None, Some(a), Some(b)),
    };
    CrosscheckFinding {
        key: f.key.clone(),
        direction: f.direction.as_str().to_string(),
        event_type: f.event_type.clone(),
        subject: f.subject.clone(),
        organization: f.organization.clone(),
        provider_id: f.provider_id.clone(),
        at,
        from,
        until,
        found_at: Some(found_at),
        state: state.to_string(),
    }
}

/// "Clerk", "WorkOS", or the name as sent by a newer server.
fn title(provider: &str) -> String {
    Provider::parse(provider).map_or_else(|| provider.to_string(), |p| p.title().to_string())
}

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

impl CrosscheckStatus {
    /// Nothing that pages: the poll works and no finding is open.
    pub fn ok(&self) -> bool {
        self.state == "ok" || self.state.is_empty()
    }

    /// The state in a few words, for the banner and the row's badge.
    pub fn state_words(&self) -> String {
        let p = title(&self.provider);
        match self.state.as_str() {
            "unreadable" => "cross-check state unreadable".to_string(),
            "failing" => format!("cross-check with {p} failing"),
            "findings" => format!("{} ({p})", self.missed_words()),
            _ => format!("cross-check with {p} ok"),
        }
    }

    /// "2 missed revocations, 1 missed grant".
    fn missed_words(&self) -> String {
        let mut parts = Vec::new();
        if self.open_revocations > 0 {
            parts.push(plural(
                self.open_revocations,
                "missed revocation",
                "missed revocations",
            ));
        }
        if self.open_grants > 0 {
            parts.push(plural(self.open_grants, "missed grant", "missed grants"));
        }
        if self.open_other > 0 {
            parts.push(plural(
                self.open_other,
                "other missed event",
                "other missed events",
            ));
        }
        if parts.is_empty() {
            parts.push(plural(self.open_findings, "open finding", "open findings"));
        }
        parts.join(", ")
    }

    /// What to do about the worst problem, in a sentence (the command is
    /// apart, in `command`).
    pub fn what_to_do(&self) -> Option<String> {
        let p = title(&self.provider);
        match self.state.as_str() {
            "failing" if self.reason.as_deref().is_some_and(|r| r.contains("refused the key")) => Some(format!(
                "give [crosscheck] api_key a {p} key that may read what the docs page \"Cross-check with the provider\" lists, then reload"
            )),
            "failing" => Some(format!(
                "run one poll by hand to see {p}'s answer; nothing is checked until a poll succeeds"
            )),
            "findings" => Some(
                "the app was probably never told: check each subject with the provider and the app; once the app is right, acknowledge the stream (hushwatch ack) to mark the findings handled"
                    .to_string(),
            ),
            "unreadable" => Some("check the store (hushwatch_store_* metrics, the log)".to_string()),
            _ => None,
        }
    }

    /// One line for a person, times on the stream's wall clock:
    /// "cross-check: 2 missed revocations (Clerk): user_2 in org_9, user_7
    /// in org_9; last poll 10:45" or "cross-check failing: the Clerk API
    /// refused the key: HTTP 401; last success 09:15".
    pub fn line(&self, tz: Tz, now: DateTime<Utc>) -> String {
        let clock = |t: DateTime<Utc>| {
            let local = t.with_timezone(&tz);
            if local.date_naive() == now.with_timezone(&tz).date_naive() {
                local.format("%H:%M").to_string()
            } else {
                local.format("%a %H:%M").to_string()
            }
        };
        let p = title(&self.provider);
        let last_poll = match self.last_poll.or(self.last_success) {
            Some(t) => format!("last poll {}", clock(t)),
            None => "no poll has finished yet".to_string(),
        };
        let mut line = match self.state.as_str() {
            "unreadable" => {
                return "cross-check state unreadable: whether the provider removed anyone unseen is unknown".to_string()
            }
            "failing" => {
                let reason = self
                    .reason
                    .as_deref()
                    .or(self.last_error.as_deref())
                    .unwrap_or("the last polls failed");
                let since = match self.last_success {
                    Some(t) => format!("last success {}", clock(t)),
                    None => "no poll has succeeded yet".to_string(),
                };
                let mut l = format!("cross-check failing: {}; {since}", short(reason, 160));
                if self.open_findings > 0 {
                    l.push_str(&format!("; also {} open", self.missed_words()));
                }
                l
            }
            "findings" => {
                let named: Vec<String> = self
                    .findings
                    .iter()
                    .take(3)
                    .map(|f| match &f.organization {
                        Some(o) => format!("{} in {}", short(&f.subject, 40), short(o, 40)),
                        None => short(&f.subject, 40),
                    })
                    .collect();
                let mut l = format!("cross-check: {} ({p})", self.missed_words());
                if !named.is_empty() {
                    l.push_str(&format!(": {}", named.join(", ")));
                    if self.open_findings > named.len() as u64 {
                        l.push_str(&format!(" and {} more", self.open_findings - named.len() as u64));
                    }
                }
                l.push_str(&format!("; {last_poll}"));
                l
            }
            _ => {
                let mut l = format!("cross-check with {p}: nothing missed, {last_poll}");
                if let Some(t) = self.next_poll {
                    l.push_str(&format!(", next {}", clock(t)));
                }
                if self.healed > 0 {
                    l.push_str(&format!(", {} healed", self.healed));
                }
                l
            }
        };
        if let Some(c) = &self.command {
            line.push_str(&format!(" (`{c}`)"));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::crosscheck::Direction;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn found(user: &str, direction: Direction) -> CrosscheckFinding {
        let f = Finding {
            key: format!("clerk:{user}"),
            direction,
            event_type: "organizationMembership.deleted".into(),
            subject: user.into(),
            organization: Some("org_9".into()),
            provider_id: Some("orgmem_1".into()),
            when: When::Between(t("2026-12-04T10:30:00Z"), t("2026-12-04T10:45:00Z")),
        };
        finding(&f, t("2026-12-04T10:45:00Z"), "open")
    }

    fn facts(
        revoke: i64,
        failures: i64,
        failing: Option<Failing>,
        examples: Vec<CrosscheckFinding>,
    ) -> Facts<'static> {
        Facts {
            provider: Provider::Clerk,
            last_poll_at: Some(t("2026-12-04T10:45:00Z")),
            last_success_at: Some(t("2026-12-04T10:45:00Z")),
            last_error: None,
            failures,
            healed: 1,
            open_revoke: revoke,
            open_grant: 0,
            open_other: 0,
            failing,
            every: TimeDelta::minutes(15),
            watch_started_at: t("2026-12-01T00:00:00Z"),
            examples,
            config_path: "/etc/hushwatch/hushwatch.toml",
        }
    }

    #[test]
    fn open_missed_revocations_are_not_ok_and_name_the_subjects_and_what_to_run() {
        let now = t("2026-12-04T10:50:00Z");
        let ex = vec![
            found("user_2", Direction::Revoke),
            found("user_7", Direction::Revoke),
        ];
        let c = assess("identity", &facts(2, 0, None, ex), now);
        assert_eq!(
            (c.state.as_str(), c.critical, c.open_findings),
            ("findings", true, 2)
        );
        assert!(!c.ok());
        assert_eq!(c.next_poll, Some(t("2026-12-04T11:00:00Z")));
        assert_eq!(
            c.line(chrono_tz::UTC, now),
            "cross-check: 2 missed revocations (Clerk): user_2 in org_9, user_7 in org_9; last poll 10:45 \
             (`hushwatch audit subject --config /etc/hushwatch/hushwatch.toml --format text user_2`)"
        );
        assert_eq!(c.state_words(), "2 missed revocations (Clerk)");
    }

    #[test]
    fn a_refused_key_is_failing_critical_and_says_so_before_the_findings() {
        let now = t("2026-12-04T12:00:00Z");
        let failing = Failing {
            critical: true,
            reason: "the Clerk API refused the key: HTTP 401".into(),
        };
        let c = assess("identity", &facts(1, 1, Some(failing), Vec::new()), now);
        assert_eq!(c.state, "failing");
        assert_eq!(c.problems, ["failing", "findings"]);
        assert!(c.critical);
        // Overdue: due now.
        assert_eq!(c.next_poll, Some(now));
        assert_eq!(
            c.line(chrono_tz::UTC, now),
            "cross-check failing: the Clerk API refused the key: HTTP 401; last success 10:45; \
             also 1 missed revocation open \
             (`hushwatch crosscheck --config /etc/hushwatch/hushwatch.toml --stream identity --dry-run`)"
        );
        assert!(c.what_to_do().unwrap().contains("api_key"));
    }

    #[test]
    fn a_working_cross_check_with_nothing_open_is_ok_and_a_missing_row_waits_for_its_first_poll() {
        let now = t("2026-12-04T10:50:00Z");
        let c = assess("identity", &facts(0, 0, None, Vec::new()), now);
        assert!(c.ok() && c.command.is_none(), "{c:?}");
        assert_eq!(
            c.line(chrono_tz::UTC, now),
            "cross-check with Clerk: nothing missed, last poll 10:45, next 11:00, 1 healed"
        );
        let none = Facts {
            last_poll_at: None,
            last_success_at: None,
            healed: 0,
            ..facts(0, 0, None, Vec::new())
        };
        let c = assess("a b", &none, now);
        assert!(c.ok());
        assert_eq!(c.last_success, None);
        assert!(!unreadable(Provider::Workos).ok());
    }
}
