//! Relay mode's decisions (`[streams.X.forward]`, issue #29): when a failed
//! forward is tried again or given up, which consecutive failure pages,
//! what those pages say, what a settle writes ([`plan_settle`]), which
//! rows a claim takes ([`plan_claim`]), when the dead-letter alert changes
//! and what a replay re-queues. The store (`store::forward`) reads and
//! writes the rows; every choice it makes about them is one of these
//! functions, so SQLite and PostgreSQL cannot disagree.
//!
//! The retry ladder is AnyHook's (5 m, 30 m, 3 h, 18 h, then daily), far
//! longer than Svix's ~27.5 h, so an app that is down over a weekend still
//! gets every event (`../shared/guides/relay-anchors.md`).

use super::svix::Severity;
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};

/// The delay between attempts once the configured ladder is used up.
pub const AFTER_LADDER: TimeDelta = TimeDelta::hours(24);

/// How a stream's forwards are retried and when they page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ladder {
    /// Delay after the 1st, 2nd, … failed attempt (the first attempt is
    /// immediate); [`AFTER_LADDER`] after the last step.
    pub retry: Vec<TimeDelta>,
    /// Counted from arrival: an event not delivered by then is a dead letter.
    pub give_up_after: TimeDelta,
    /// Consecutive failures (across the stream's events) that page, ascending.
    pub alert_after: Vec<u32>,
}

impl Default for Ladder {
    fn default() -> Self {
        Ladder {
            retry: [5, 30, 180, 1080, 1440]
                .into_iter()
                .map(TimeDelta::minutes)
                .collect(),
            give_up_after: TimeDelta::days(7),
            alert_after: vec![1, 5, 20],
        }
    }
}

/// What happens to an event after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Try again at this instant.
    RetryAt(DateTime<Utc>),
    /// `give_up_after` has passed: keep it for replay and page.
    DeadLetter,
}

/// The next step for an event received at `received_at` whose
/// `attempts`-th attempt (1-based) failed at `now`. The last retry is
/// pulled in to the deadline, so an event always gets an attempt at
/// `give_up_after` before it is given up.
pub fn after_failure(
    ladder: &Ladder,
    received_at: DateTime<Utc>,
    attempts: u32,
    now: DateTime<Utc>,
) -> AfterFailure {
    let deadline = received_at + ladder.give_up_after;
    if now >= deadline {
        return AfterFailure::DeadLetter;
    }
    let step = usize::try_from(attempts.saturating_sub(1)).unwrap_or(usize::MAX);
    let delay = ladder.retry.get(step).copied().unwrap_or(AFTER_LADDER);
    AfterFailure::RetryAt((now + delay).min(deadline))
}

/// A consecutive-failure page to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureStep {
    /// The `alert_after` value reached.
    pub failures: u32,
    pub severity: Severity,
}

/// The page a stream's run of `failures` consecutive failures calls for,
/// given that steps up to `paged` were already paged in this run: each
/// step pages once per run, the last step is critical, the others
/// warnings (AnyHook's 1, 5, 20).
pub fn failure_step(alert_after: &[u32], failures: u32, paged: u32) -> Option<FailureStep> {
    if failures <= paged || !alert_after.contains(&failures) {
        return None;
    }
    let last = alert_after.iter().copied().max() == Some(failures);
    Some(FailureStep {
        failures,
        severity: if last {
            Severity::Critical
        } else {
            Severity::Warning
        },
    })
}

/// Whether a delivery after a run with `paged` steps paged resolves an
/// open `forward_failing` alert.
pub fn delivery_resolves(paged: u32) -> bool {
    paged > 0
}

/// The undelivered event a page names: the oldest one still pending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oldest {
    pub event_type: String,
    pub subject: Option<String>,
    pub delivery_id: String,
    pub received_at: DateTime<Utc>,
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn naming(o: &Oldest) -> String {
    let subject = o
        .subject
        .as_deref()
        .map(|s| format!(" {s}"))
        .unwrap_or_default();
    format!(
        "{}{subject} (delivery {}, received {})",
        o.event_type,
        o.delivery_id,
        rfc(o.received_at)
    )
}

/// What the stream's failing page says.
pub struct FailingPage<'a> {
    pub stream: &'a str,
    pub failures: u32,
    pub last_error: &'a str,
    pub failing_since: DateTime<Utc>,
    pub pending: u64,
    pub oldest: Option<&'a Oldest>,
    pub ordered: bool,
}

pub fn failing_summary(p: &FailingPage<'_>) -> String {
    // Pages put the stream's name in front of the summary already.
    let mut text = format!(
        "the app has refused or missed {} forward attempt(s) in a row since {} (last: {}). {} event(s) are not delivered",
        p.failures,
        rfc(p.failing_since),
        p.last_error,
        p.pending
    );
    if let Some(o) = p.oldest {
        text.push_str(&format!("; oldest: {}", naming(o)));
    }
    if p.ordered && p.pending > 1 {
        text.push_str(
            ". Delivery is ordered: the oldest event blocks the ones behind it until the app accepts it",
        );
    }
    text.push_str(". hushwatch keeps retrying; fix the app's webhook handler.");
    text
}

pub fn recovered_summary(failures: u32, at: DateTime<Utc>) -> String {
    format!(
        "the app accepts forwarded events again (delivered at {}, after {failures} failed attempt(s)).",
        rfc(at)
    )
}

/// The dead-letter page: `count` events given up on this stream so far
/// (not yet replayed), `oldest` the oldest of them.
pub fn dead_letter_summary(stream: &str, count: u64, oldest: &Oldest) -> String {
    format!(
        "{count} event(s) for stream {stream} were never delivered to the app (oldest: {}). \
         They are kept: replay them with `hushwatch replay --stream {stream}` once the app is fixed.",
        naming(oldest)
    )
}

/// How a reconciliation's missed revocation reads once the relay knows
/// what happened to it (the three cases of issue #29).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevocationFate {
    /// Received, still pending: the app has failed since `failing_since`.
    NotYetDelivered {
        received_at: DateTime<Utc>,
        failing_since: Option<DateTime<Utc>>,
    },
    /// Delivered with a 2xx, yet the app reports access still active.
    Delivered {
        at: DateTime<Utc>,
        status: Option<u16>,
    },
    /// Given up after `give_up_after`.
    DeadLetter { received_at: DateTime<Utc> },
}

pub fn fate_words(f: &RevocationFate) -> String {
    match f {
        RevocationFate::NotYetDelivered {
            received_at,
            failing_since,
        } => format!(
            "received {}, not yet delivered: {}",
            rfc(*received_at),
            match failing_since {
                Some(t) => format!("the app has failed since {}", rfc(*t)),
                None => "it is queued behind earlier events".to_string(),
            }
        ),
        RevocationFate::Delivered { at, status } => format!(
            "delivered to the app at {}{} but access was still active",
            rfc(*at),
            status.map(|s| format!(" ({s})")).unwrap_or_default()
        ),
        RevocationFate::DeadLetter { received_at } => format!(
            "received {}, never delivered: it is a dead letter (replay it)",
            rfc(*received_at)
        ),
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ForwardAttempt {
    /// A 2xx.
    Delivered { status: u16 },
    /// Anything else: a non-2xx (`status`), a timeout or a connection error.
    Failed { error: String, status: Option<u16> },
}

/// The error an attempt records for a stream whose `[forward]` was removed
/// (`service::forward`); `store::forward::hurry` finds those rows by it.
pub const NO_FORWARD: &str =
    "the stream no longer has [forward] in the config; its stored events wait for it";

/// What the stream's config says about settling (from `[streams.X.forward]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardPolicy {
    pub ladder: Ladder,
    pub ordered: bool,
    pub retain: TimeDelta,
    pub dead_letter_retain: TimeDelta,
    /// The stream's notifiers, paged by the failure steps and dead letters.
    pub notifiers: Vec<String>,
    /// `[audit] enabled`: each outcome joins the chain.
    pub audit: bool,
}

/// A stream's run of consecutive failures, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Run {
    pub failures: u32,
    pub paged: u32,
    pub failing_since: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    pub last_delivered_at: Option<DateTime<Utc>>,
    pub last_status: Option<u16>,
    pub dead_paged: bool,
}

/// The row writes and page of one settle, decided from the run as read.
#[derive(Debug, Clone, PartialEq)]
pub struct SettlePlan {
    /// `state`, `next_attempt_at`, `settled_at`, `prune_at` of the row.
    pub state: &'static str,
    pub next_attempt_at: DateTime<Utc>,
    pub settled_at: Option<DateTime<Utc>>,
    pub prune_at: Option<DateTime<Utc>>,
    pub run: Run,
    /// The failure step to page (firing) or the resolve of the run.
    pub failing_page: Option<RunPage>,
    /// The audit chain's entry type (`delivered:200`, `gave_up`), if any.
    pub audit_type: Option<String>,
}

/// The stream's `forward_failing` page a settle calls for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RunPage {
    Fire(FailureStep),
    Resolve { failures: u32 },
}

/// Decides a settle: the row's next state and the stream's run, for the
/// attempt that ended at `at` after `attempts` earlier ones, of an event
/// whose `give_up_after` counts from `give_up_from`.
pub fn plan_settle(
    attempt: &ForwardAttempt,
    attempts: u32,
    give_up_from: DateTime<Utc>,
    at: DateTime<Utc>,
    policy: &ForwardPolicy,
    run: Run,
) -> SettlePlan {
    let attempts = attempts.saturating_add(1);
    match attempt {
        ForwardAttempt::Delivered { status } => SettlePlan {
            state: "delivered",
            next_attempt_at: at,
            settled_at: Some(at),
            prune_at: Some(at + policy.retain),
            failing_page: delivery_resolves(run.paged).then_some(RunPage::Resolve {
                failures: run.failures,
            }),
            run: Run {
                failures: 0,
                paged: 0,
                failing_since: None,
                last_error: None,
                last_attempt_at: Some(at),
                last_delivered_at: Some(at),
                last_status: Some(*status),
                dead_paged: run.dead_paged,
            },
            audit_type: Some(format!("delivered:{status}")),
        },
        ForwardAttempt::Failed { error, status } => {
            let failures = run.failures.saturating_add(1);
            let step = failure_step(&policy.ladder.alert_after, failures, run.paged);
            let (state, next_at, settled, prune, audit) =
                match after_failure(&policy.ladder, give_up_from, attempts, at) {
                    AfterFailure::RetryAt(t) => ("pending", t, None, None, None),
                    AfterFailure::DeadLetter => (
                        "dead",
                        at,
                        Some(at),
                        Some(at + policy.dead_letter_retain),
                        Some("gave_up".to_string()),
                    ),
                };
            SettlePlan {
                state,
                next_attempt_at: next_at,
                settled_at: settled,
                prune_at: prune,
                failing_page: step.map(RunPage::Fire),
                run: Run {
                    failures,
                    paged: step.map_or(run.paged, |s| s.failures),
                    failing_since: run.failing_since.or(Some(at)),
                    last_error: Some(error.clone()),
                    last_attempt_at: Some(at),
                    last_delivered_at: run.last_delivered_at,
                    last_status: *status,
                    dead_paged: run.dead_paged,
                },
                audit_type: audit,
            }
        }
    }
}

/// The failing page's text, from the settle's plan and the stream's
/// pending rows.
pub fn failing_reason(
    stream: &str,
    plan: &SettlePlan,
    at: DateTime<Utc>,
    pending: u64,
    oldest: Option<&Oldest>,
    ordered: bool,
) -> String {
    match plan.failing_page {
        Some(RunPage::Resolve { failures }) => recovered_summary(failures, at),
        _ => failing_summary(&FailingPage {
            stream,
            failures: plan.run.failures,
            last_error: plan.run.last_error.as_deref().unwrap_or("failed"),
            failing_since: plan.run.failing_since.unwrap_or(at),
            pending,
            oldest,
            ordered,
        }),
    }
}

/// Whether the dead-letter alert should change: fire when dead letters
/// exist and it was not paged, resolve when none are left and it was.
pub fn dead_letter_change(dead: u64, paged: bool) -> Option<bool> {
    match (dead > 0, paged) {
        (true, false) => Some(true),
        (false, true) => Some(false),
        _ => None,
    }
}

/// The dead-letter page's text: its firing names the oldest dead letter.
pub fn dead_letter_reason(
    stream: &str,
    firing: bool,
    dead: u64,
    oldest: Option<&Oldest>,
) -> String {
    match oldest {
        Some(oldest) if firing => dead_letter_summary(stream, dead, oldest),
        _ => format!("{stream}: no dead letters are left (replayed or expired)."),
    }
}

/// The oldest pending row of one ordered queue (instants in epoch
/// milliseconds, as stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub id: i64,
    pub next_attempt_at: i64,
    pub lease_until: Option<i64>,
}

/// Which rows to try to claim, and when the next one falls due: each
/// queue's head when it is due and unleased (else its due time counts),
/// then unordered due rows, `limit` in all.
pub fn plan_claim(
    heads: &[Head],
    unordered: &[i64],
    unordered_next: Option<i64>,
    now: i64,
    limit: usize,
) -> (Vec<i64>, Option<i64>) {
    let mut ids = Vec::new();
    let mut next = unordered_next;
    for h in heads {
        let free_at = h
            .lease_until
            .map_or(h.next_attempt_at, |l| l.max(h.next_attempt_at));
        if free_at <= now {
            ids.push(h.id);
        } else {
            next = Some(next.map_or(free_at, |n| n.min(free_at)));
        }
    }
    ids.extend_from_slice(unordered);
    ids.truncate(limit);
    (ids, next)
}

/// `hushwatch replay` / `POST /v1/streams/X/replay`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayRequest {
    pub stream: String,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Empty: every type.
    pub types: Vec<String>,
    pub dry_run: bool,
    /// Who asked (audited), e.g. `api` or `cli`.
    pub by: String,
    pub now: DateTime<Utc>,
    pub audit: bool,
    pub notifiers: Vec<String>,
}

/// One stored delivery of a replay window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayItem {
    pub delivery_id: String,
    pub event_type: String,
    pub received_at: DateTime<Utc>,
    /// `delivered` or `dead` (as it was before the replay).
    pub state: String,
}

/// Items listed in a replay answer at most (the count is always exact).
pub const REPLAY_LISTED: usize = 1000;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplayOutcome {
    /// Deliveries re-queued (or, dry run, that would be).
    pub count: u64,
    /// Deliveries of the window still pending: not re-queued twice.
    pub already_pending: u64,
    /// The first [`REPLAY_LISTED`] of them, in order.
    pub items: Vec<ReplayItem>,
}

/// Decides what a replay touches: `(id, item)` of the window's stored
/// deliveries of the wanted types, and how many are still pending.
pub fn replay_selection(
    window: Vec<(i64, ReplayItem)>,
    types: &[String],
) -> (Vec<(i64, ReplayItem)>, u64) {
    let (pending, chosen): (Vec<_>, Vec<_>) = window
        .into_iter()
        .filter(|(_, i)| types.is_empty() || types.contains(&i.event_type))
        .partition(|(_, i)| i.state == "pending");
    (chosen, pending.len() as u64)
}

pub fn replay_outcome(chosen: Vec<(i64, ReplayItem)>, pending: u64) -> ReplayOutcome {
    ReplayOutcome {
        count: chosen.len() as u64,
        already_pending: pending,
        items: chosen
            .into_iter()
            .take(REPLAY_LISTED)
            .map(|(_, i)| i)
            .collect(),
    }
}

/// The audit entry type of a replay: who, which window, how many.
pub fn replay_summary(r: &ReplayRequest, count: u64) -> String {
    let types = if r.types.is_empty() {
        String::new()
    } else {
        format!(" types={}", r.types.join(","))
    };
    format!(
        "replay by {}: {count} from {} to {}{types}",
        r.by,
        rfc(r.from),
        rfc(r.to),
    )
}

/// A stream's relay state for `/v1/status`, the page, the CLI and metrics.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ForwardStatus {
    pub stream: String,
    pub pending: u64,
    pub oldest_pending_at: Option<DateTime<Utc>>,
    pub dead_letters: u64,
    pub consecutive_failures: u64,
    pub failing_since: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub last_delivered_at: Option<DateTime<Utc>>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    /// Rows hushwatch itself cannot send (unknown seal key, a row altered
    /// at rest, no `[forward]`): out of the delivery queue until fixed.
    pub held: u64,
    /// The earliest `next_attempt_at` among pending rows (when the relay
    /// tries next without anyone acting).
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The oldest pending row, named (type, subject, id, arrival).
    pub oldest_pending: Option<Oldest>,
    /// The arrival of the oldest revocation (a delete, removal or revoke
    /// type) that is pending, held or dead: what `critical_after` ages.
    pub oldest_revocation_at: Option<DateTime<Utc>>,
}

/// What became of a stored delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFate {
    pub state: String,
    pub received_at: DateTime<Utc>,
    pub settled_at: Option<DateTime<Utc>>,
    pub status: Option<u16>,
}

impl StoredFate {
    /// How it reads in a reconciliation page, with the stream's failing run.
    pub fn reading(&self, failing_since: Option<DateTime<Utc>>) -> RevocationFate {
        match self.state.as_str() {
            "delivered" => RevocationFate::Delivered {
                at: self.settled_at.unwrap_or(self.received_at),
                status: self.status,
            },
            "dead" => RevocationFate::DeadLetter {
                received_at: self.received_at,
            },
            _ => RevocationFate::NotYetDelivered {
                received_at: self.received_at,
                failing_since,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn the_ladder_climbs_then_repeats_daily_and_ends_at_give_up() {
        let l = Ladder::default();
        let r = t("2026-01-01T00:00:00Z");
        assert_eq!(
            after_failure(&l, r, 1, r),
            AfterFailure::RetryAt(r + TimeDelta::minutes(5))
        );
        let at = t("2026-01-01T01:00:00Z");
        assert_eq!(
            after_failure(&l, r, 4, at),
            AfterFailure::RetryAt(at + TimeDelta::hours(18))
        );
        assert_eq!(
            after_failure(&l, r, 9, at),
            AfterFailure::RetryAt(at + TimeDelta::hours(24))
        );
        // The last retry is pulled in to the deadline, then it is given up.
        let late = r + TimeDelta::days(7) - TimeDelta::hours(1);
        assert_eq!(
            after_failure(&l, r, 9, late),
            AfterFailure::RetryAt(r + TimeDelta::days(7))
        );
        assert_eq!(
            after_failure(&l, r, 10, r + TimeDelta::days(7)),
            AfterFailure::DeadLetter
        );
    }

    #[test]
    fn each_step_pages_once_per_run_and_the_last_is_critical() {
        let steps = [1, 5, 20];
        let one = failure_step(&steps, 1, 0).unwrap();
        assert_eq!(one.severity, Severity::Warning);
        assert_eq!(failure_step(&steps, 2, 1), None);
        assert_eq!(
            failure_step(&steps, 5, 1).unwrap().severity,
            Severity::Warning
        );
        assert_eq!(failure_step(&steps, 5, 5), None, "paged already");
        assert_eq!(
            failure_step(&steps, 20, 5).unwrap().severity,
            Severity::Critical
        );
        assert_eq!(failure_step(&steps, 21, 20), None);
        assert!(delivery_resolves(1) && !delivery_resolves(0));
    }

    #[test]
    fn a_missed_revocation_reads_as_one_of_three_fates() {
        let r = t("2026-01-01T00:00:00Z");
        let pending = fate_words(&RevocationFate::NotYetDelivered {
            received_at: r,
            failing_since: Some(t("2026-01-01T00:00:05Z")),
        });
        assert!(pending.starts_with("received 2026-01-01T00:00:00Z, not yet delivered: the app has failed since 2026-01-01T00:00:05Z"), "{pending}");
        let delivered = fate_words(&RevocationFate::Delivered {
            at: t("2026-01-01T00:00:01Z"),
            status: Some(200),
        });
        assert_eq!(
            delivered,
            "delivered to the app at 2026-01-01T00:00:01Z (200) but access was still active"
        );
        let dead = fate_words(&RevocationFate::DeadLetter { received_at: r });
        assert!(
            dead.contains("never delivered") && dead.contains("dead letter"),
            "{dead}"
        );
    }

    #[test]
    fn pages_name_the_oldest_event_and_the_blocking() {
        let oldest = Oldest {
            event_type: "user.deleted".into(),
            subject: Some("user_123".into()),
            delivery_id: "msg_1".into(),
            received_at: t("2026-01-01T00:00:00Z"),
        };
        let text = failing_summary(&FailingPage {
            stream: "clerk",
            failures: 5,
            last_error: "HTTP 502",
            failing_since: t("2026-01-01T00:00:01Z"),
            pending: 3,
            oldest: Some(&oldest),
            ordered: true,
        });
        assert!(text.contains("user.deleted user_123"), "{text}");
        assert!(
            text.contains("HTTP 502") && text.contains("blocks"),
            "{text}"
        );
        let dead = dead_letter_summary("clerk", 2, &oldest);
        assert!(
            dead.starts_with("2 event(s) for stream clerk were never delivered to the app (oldest: user.deleted user_123"),
            "{dead}"
        );
    }

    fn policy() -> ForwardPolicy {
        ForwardPolicy {
            ladder: Ladder::default(),
            ordered: true,
            retain: TimeDelta::days(7),
            dead_letter_retain: TimeDelta::days(30),
            notifiers: vec!["ops".into()],
            audit: true,
        }
    }

    /// The settle of an event received (and not replayed) at the start of
    /// 2026 whose attempt after `attempts` earlier ones ended at `at`.
    fn settle(attempt: ForwardAttempt, attempts: u32, at: &str, run: Run) -> SettlePlan {
        let received = t("2026-01-01T00:00:00Z");
        plan_settle(&attempt, attempts, received, t(at), &policy(), run)
    }

    fn failed() -> ForwardAttempt {
        ForwardAttempt::Failed {
            error: "HTTP 502".into(),
            status: Some(502),
        }
    }

    #[test]
    fn a_claim_takes_due_unleased_heads_then_unordered_rows_and_knows_the_next_due() {
        let heads = [
            Head {
                id: 1,
                next_attempt_at: 100,
                lease_until: None,
            },
            Head {
                id: 5,
                next_attempt_at: 300,
                lease_until: None,
            },
            Head {
                id: 7,
                next_attempt_at: 50,
                lease_until: Some(250),
            },
        ];
        let (ids, next) = plan_claim(&heads, &[9, 10], Some(400), 200, 10);
        assert_eq!(
            ids,
            [1, 9, 10],
            "a queue whose head is leased or not due waits"
        );
        assert_eq!(
            next,
            Some(250),
            "the earliest of a lease end and a due time"
        );
        let (ids, _) = plan_claim(&heads, &[9, 10], None, 200, 2);
        assert_eq!(ids, [1, 9]);
    }

    #[test]
    fn a_failure_counts_pages_its_step_and_schedules_the_ladder() {
        let plan = settle(failed(), 0, "2026-01-01T00:00:00Z", Run::default());
        assert_eq!(plan.state, "pending");
        assert_eq!(plan.run.failures, 1);
        assert_eq!(plan.run.paged, 1);
        assert!(matches!(plan.failing_page, Some(RunPage::Fire(_))));
        assert_eq!(
            plan.next_attempt_at,
            t("2026-01-01T00:05:00Z"),
            "first retry after 5m"
        );
        let again = settle(failed(), 1, "2026-01-01T00:05:00Z", plan.run.clone());
        assert_eq!((again.run.failures, again.run.paged), (2, 1));
        assert_eq!(again.failing_page, None);
        assert_eq!(again.run.failing_since, plan.run.failing_since);
    }

    #[test]
    fn a_delivery_resets_the_run_and_resolves_only_a_paged_one() {
        let run = Run {
            failures: 3,
            paged: 1,
            failing_since: Some(t("2026-01-01T00:00:00Z")),
            ..Default::default()
        };
        let delivered = |status| ForwardAttempt::Delivered { status };
        let plan = settle(delivered(204), 3, "2026-01-01T01:00:00Z", run);
        assert_eq!(plan.state, "delivered");
        assert_eq!(plan.run.failures, 0);
        assert_eq!(plan.failing_page, Some(RunPage::Resolve { failures: 3 }));
        assert_eq!(plan.audit_type.as_deref(), Some("delivered:204"));
        assert_eq!(plan.prune_at, Some(t("2026-01-08T01:00:00Z")));
        let quiet = settle(delivered(200), 0, "2026-01-01T01:00:00Z", Run::default());
        assert_eq!(quiet.failing_page, None);
    }

    #[test]
    fn past_give_up_after_it_is_a_dead_letter_kept_for_its_own_retention() {
        let plan = settle(failed(), 9, "2026-01-08T00:00:00Z", Run::default());
        assert_eq!(plan.state, "dead");
        assert_eq!(plan.audit_type.as_deref(), Some("gave_up"));
        assert_eq!(plan.prune_at, Some(t("2026-02-07T00:00:00Z")));
        assert_eq!(dead_letter_change(1, false), Some(true));
        assert_eq!(dead_letter_change(2, true), None);
        assert_eq!(dead_letter_change(0, true), Some(false));
    }

    #[test]
    fn a_replay_skips_what_is_still_pending_and_filters_types() {
        let item = |id: &str, ty: &str, state: &str| ReplayItem {
            delivery_id: id.into(),
            event_type: ty.into(),
            received_at: t("2026-01-01T00:00:00Z"),
            state: state.into(),
        };
        let window = vec![
            (1, item("a", "user.deleted", "delivered")),
            (2, item("b", "user.created", "dead")),
            (3, item("c", "user.deleted", "pending")),
        ];
        let (chosen, pending) = replay_selection(window.clone(), &[]);
        assert_eq!(chosen.len(), 2);
        assert_eq!(pending, 1);
        let (chosen, _) = replay_selection(window, &["user.deleted".into()]);
        assert_eq!(chosen.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [1]);
    }
}
