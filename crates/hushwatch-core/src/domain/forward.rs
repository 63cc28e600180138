//! Relay mode's decisions (`[streams.X.forward]`, issue #29): when a failed
//! forward is tried again or given up, which consecutive failure pages,
//! what those pages say, what a settle writes ([`plan_settle`]), which
//! rows a claim takes ([`plan_claim`]), when the dead-letter alert changes
//! and what a replay re-queues. The store (`store::forward`) reads and
//! writes the rows; every choice it makes about them is one of these
//! functions, so SQLite and PostgreSQL cannot disagree.
//!
//! The default retry ladder (5 s, 30 s, 2 m, 10 m, 30 m, 1 h) starts fast,
//! so an app back after a short outage gets its backlog within seconds or
//! minutes; after its last step the last step repeats until
//! `give_up_after` (7 days), so an app down over a weekend still gets every
//! event, at most an hour after it is back (issue #44).
//!
//! Order ([`Order`]): by default events about one subject (a user, else an
//! organization, [`subject_of`]) go out one at a time in arrival order, and
//! an event the app refuses holds back only its own subject.

use super::svix::Severity;
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};

/// How a stream's forwards are retried and when they page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ladder {
    /// Delay after the 1st, 2nd, … failed attempt (the first attempt is
    /// immediate); the last step repeats until `give_up_after`.
    pub retry: Vec<TimeDelta>,
    /// Counted from arrival: an event not delivered by then is a dead letter.
    pub give_up_after: TimeDelta,
    /// Consecutive failures (across the stream's events) that page, ascending.
    pub alert_after: Vec<u32>,
}

impl Default for Ladder {
    fn default() -> Self {
        Ladder {
            retry: [5, 30, 120, 600, 1800, 3600]
                .into_iter()
                .map(TimeDelta::seconds)
                .collect(),
            give_up_after: TimeDelta::days(7),
            alert_after: vec![1, 5, 20],
        }
    }
}

/// `[streams.X.forward] ordered`: which events wait for which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Events about one subject ([`subject_of`]) go one at a time in
    /// arrival order; a stuck one holds back only its subject. Events
    /// without a subject share the stream's queue.
    #[default]
    Subject,
    /// One event in flight per stream (`true` before issue #44): the
    /// oldest pending event blocks every later one.
    Stream,
    /// No order (`false`): every event is tried on its own schedule.
    None,
}

impl Order {
    pub fn as_str(self) -> &'static str {
        match self {
            Order::Subject => "subject",
            Order::Stream => "stream",
            Order::None => "none",
        }
    }

    pub fn parse(text: &str) -> Option<Order> {
        [Order::Subject, Order::Stream, Order::None]
            .into_iter()
            .find(|o| o.as_str() == text)
    }

    /// `true` and `false` keep the meaning they had before the modes.
    pub fn from_bool(ordered: bool) -> Order {
        if ordered {
            Order::Stream
        } else {
            Order::None
        }
    }
}

/// Between the stream and the subject in a subject queue's name (a byte no
/// stream name or provider id contains).
pub const QUEUE_SEPARATOR: &str = "\u{1f}";

/// The queue a row of `stream` waits in: `None` claims it on its own.
pub fn queue_of(order: Order, stream: &str, subject: Option<&str>) -> Option<String> {
    match (order, subject) {
        (Order::None, _) => None,
        (Order::Subject, Some(s)) => Some(format!("{stream}{QUEUE_SEPARATOR}{s}")),
        (Order::Subject, None) | (Order::Stream, _) => Some(stream.to_string()),
    }
}

/// Who an event is about, from the `(kind, id)` pairs the payload yields
/// (`ingest::payload`), as `(subject, organization)`. The subject is the
/// **user** when the event names one, else the first id (an organization,
/// a session without a user): so a Clerk `organizationMembership.deleted`
/// (membership id, member's user id, organization id) is about the user
/// in that organization, ordered with that user's `user.deleted` and
/// `session.*`, and its pages name the user and the organization rather
/// than the membership. `organization.*` is about the organization;
/// WorkOS `dsync.user.*` and `organization_membership.*` about the user.
pub fn subject_of(ids: &[(String, String)]) -> (Option<String>, Option<String>) {
    let user = ids.iter().find(|(k, _)| k == "user_id");
    let subject = user.or_else(|| ids.first()).map(|(_, v)| v.clone());
    let organization = ids
        .iter()
        .find(|(k, v)| k == "organization_id" && Some(v) != subject.as_ref())
        .map(|(_, v)| v.clone());
    (subject, organization)
}

/// Why hushwatch itself cannot send a stored event: it is **held**, out of
/// the delivery queue, until the cause is gone or an operator skips it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// Sealed under a key no longer in `[store] encryption_key`.
    UnknownKey(String),
    /// The sealed body does not open on its row (altered, moved, relabelled).
    Corrupt,
    /// Stored in plaintext after `encryption_key` was set: altered at rest.
    Plaintext,
    /// The stream has no `[forward]` (or is gone from the config).
    NoForward,
}

impl Hold {
    /// The stored `held_reason` code: what a reload checks to release.
    pub fn code(&self) -> &'static str {
        match self {
            Hold::UnknownKey(_) => "unknown_key",
            Hold::Corrupt => "corrupt",
            Hold::Plaintext => "plaintext",
            Hold::NoForward => "no_forward",
        }
    }

    pub fn words(&self) -> String {
        match self {
            Hold::UnknownKey(id) => format!(
                "its body is sealed with key {id}, which is not in [store] encryption_key any more"
            ),
            Hold::Corrupt => {
                "its stored body does not authenticate (altered or moved at rest)".to_string()
            }
            Hold::Plaintext => {
                "it claims a plaintext body although it was stored after [store] encryption_key was set (altered at rest)".to_string()
            }
            Hold::NoForward => "the stream has no [forward] in the config".to_string(),
        }
    }

    /// What releases it, as the page says.
    pub fn remedy(&self) -> &'static str {
        match self {
            Hold::UnknownKey(_) => {
                "put that key back in [store] encryption_key (after the new one) and reload"
            }
            Hold::Corrupt | Hold::Plaintext => {
                "hushwatch will not send it: check who altered the database, then skip it"
            }
            Hold::NoForward => "put [streams.X.forward] back and reload",
        }
    }
}

/// The stored reason code read back as words (the key id is not kept in
/// the code: the row's own `key_id` column names it).
pub fn hold_of(code: &str, key_id: Option<&str>) -> Hold {
    match code {
        "unknown_key" => Hold::UnknownKey(key_id.unwrap_or("?").to_string()),
        "plaintext" => Hold::Plaintext,
        "no_forward" => Hold::NoForward,
        _ => Hold::Corrupt,
    }
}

/// The config path a page's commands name, quoted for a POSIX shell when
/// it needs it, so each command runs as printed.
pub fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:=@%,".contains(c));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// The config path pages print when the sidecar was not started from a
/// file (tests through `service::start`), and for pages queued by
/// maintenance and replays, which do not carry it: the packaged path.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/hushwatch/hushwatch.toml";

/// The operator commands a relay page prints (`hushwatch forward …`,
/// `hushwatch replay … --dead-letters`), each for the config the sidecar
/// was started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commands {
    config: String,
    stream: String,
}

impl Commands {
    pub fn new(config_path: &str, stream: &str) -> Commands {
        Commands {
            config: shell_word(config_path),
            stream: shell_word(stream),
        }
    }

    pub fn retry(&self) -> String {
        format!(
            "hushwatch forward retry --config {} --stream {}",
            self.config, self.stream
        )
    }

    pub fn skip(&self, delivery_id: &str) -> String {
        format!(
            "hushwatch forward skip --config {} --stream {} --id {} --comment \"why it is skipped\"",
            self.config,
            self.stream,
            shell_word(delivery_id)
        )
    }

    pub fn replay_dead_letters(&self) -> String {
        format!(
            "hushwatch replay --config {} --stream {} --dead-letters",
            self.config, self.stream
        )
    }

    pub fn list(&self, state: &str) -> String {
        format!(
            "hushwatch forward list --config {} --stream {} --state {state}",
            self.config, self.stream
        )
    }
}

/// Held events a page names at most (the count is always exact).
pub const HELD_NAMED: usize = 5;

/// One held event as the held page names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldEvent {
    pub event: Oldest,
    pub hold: Hold,
}

/// Whether the held alert changes: fire when rows are held and it was not
/// paged, resolve when none are left and it was.
pub fn held_change(held: u64, paged: bool) -> Option<bool> {
    dead_letter_change(held, paged)
}

/// The `forward_held` page: which events (up to [`HELD_NAMED`]), why, and
/// the command that fixes each cause.
pub fn held_summary(stream: &str, held: u64, named: &[HeldEvent], cmd: &Commands) -> String {
    if held == 0 {
        return format!("{stream}: no events are held any more (released or skipped).");
    }
    let mut text = format!(
        "{held} event(s) of stream {stream} are held: hushwatch itself cannot send them, so they left the delivery queue (later events go on)."
    );
    for h in named.iter().take(HELD_NAMED) {
        text.push_str(&format!(
            " {}: {}; to fix: {}, or `{}`.",
            naming(&h.event),
            h.hold.words(),
            h.hold.remedy(),
            cmd.skip(&h.event.delivery_id)
        ));
    }
    if held > named.len().min(HELD_NAMED) as u64 {
        text.push_str(&format!(" All of them: `{}`.", cmd.list("held")));
    }
    text
}

/// Whether a revocation undelivered since `oldest` is past `critical_after`.
pub fn revocation_overdue(
    oldest: Option<DateTime<Utc>>,
    critical_after: TimeDelta,
    now: DateTime<Utc>,
) -> bool {
    oldest.is_some_and(|t| now - t >= critical_after)
}

/// Whether the `forward_revocation_overdue` alert changes (once per
/// episode: it fires when one is overdue and resolves when none is left
/// undelivered, not when a younger one is still waiting).
pub fn revocation_change(overdue: bool, any_left: bool, paged: bool) -> Option<bool> {
    match (overdue, any_left, paged) {
        (true, _, false) => Some(true),
        (_, false, true) => Some(false),
        _ => None,
    }
}

/// The critical page of a revocation undelivered past `critical_after`.
pub fn revocation_summary(
    stream: &str,
    oldest: Option<&Oldest>,
    critical_after: TimeDelta,
    cmd: &Commands,
) -> String {
    match oldest {
        None => format!("{stream}: every revocation has been delivered to the app (or skipped)."),
        Some(o) => format!(
            "a revocation for stream {stream} has not reached the app for more than {}: {}. \
             Access it revokes may still be active in the app. Check the app's webhook handler and \
             the relay's last error, then `{}`; to see what waits: `{}`.",
            crate::domain::duration::format_duration(critical_after),
            naming(o),
            cmd.retry(),
            cmd.list("pending"),
        ),
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
    // Past the ladder its last step repeats; an empty ladder (refused by
    // `check`) waits for the deadline.
    let delay = ladder
        .retry
        .get(step)
        .or(ladder.retry.last())
        .copied()
        .unwrap_or(ladder.give_up_after);
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
    pub order: Order,
    /// Queues (subjects, or the stream) whose head has failed.
    pub blocked: u64,
    pub commands: &'a Commands,
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
    match p.order {
        Order::Stream if p.pending > 1 => text.push_str(
            ". Delivery is ordered per stream: the oldest event blocks the ones behind it until the app accepts it",
        ),
        Order::Subject if p.blocked > 0 => text.push_str(&format!(
            ". {} subject(s) are blocked: each failing event holds back only later events about its own subject",
            p.blocked
        )),
        _ => {}
    }
    text.push_str(&format!(
        ". hushwatch keeps retrying; fix the app's webhook handler, then `{}` to try now",
        p.commands.retry()
    ));
    if let Some(o) = p.oldest {
        text.push_str(&format!(
            ", or set one event aside: `{}`",
            p.commands.skip(&o.delivery_id)
        ));
    }
    text.push('.');
    text
}

/// Whether a failing run ends without a delivery: nothing pending has
/// failed (the refused events became dead letters, were skipped or held)
/// and no revocation is held or dead.
pub fn run_ends_quietly(failures: u32, blocked: u64, stuck_revocations: u64) -> bool {
    failures > 0 && blocked == 0 && stuck_revocations == 0
}

/// The resolve of a run that ended without a delivery.
pub fn run_ended_summary(failures: u32) -> String {
    format!(
        "no forwarded event is failing any more after {failures} failed attempt(s): the refused ones were set aside (dead letters or skipped) and no revocation is held or dead."
    )
}

pub fn recovered_summary(failures: u32, at: DateTime<Utc>) -> String {
    format!(
        "the app accepts forwarded events again (delivered at {}, after {failures} failed attempt(s)).",
        rfc(at)
    )
}

/// The dead-letter page: `count` events given up on this stream so far
/// (not yet replayed), `oldest` the oldest of them.
pub fn dead_letter_summary(stream: &str, count: u64, oldest: &Oldest, cmd: &Commands) -> String {
    format!(
        "{count} event(s) for stream {stream} were never delivered to the app (oldest: {}). \
         They are kept: replay them with `{}` once the app is fixed.",
        naming(oldest),
        cmd.replay_dead_letters()
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
    /// Not sent: hushwatch itself cannot send it ([`Hold`]).
    Held(Hold),
}

/// What the stream's config says about settling (from `[streams.X.forward]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardPolicy {
    pub ladder: Ladder,
    pub order: Order,
    /// A revocation undelivered this long pages critical.
    pub critical_after: TimeDelta,
    /// The config file the sidecar was started with: pages print commands
    /// that name it.
    pub config_path: String,
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
    pub held_paged: bool,
    pub revocation_paged: bool,
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
    /// The audit chain's entry type (`delivered:200`, `gave_up`,
    /// `held:<reason>`), if any.
    pub audit_type: Option<String>,
    /// The claim counted an attempt that never reached the app (held):
    /// take it back.
    pub uncount: bool,
}

/// The stream's `forward_failing` page a settle calls for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RunPage {
    Fire(FailureStep),
    Resolve { failures: u32 },
}

/// Decides a settle: the row's next state and the stream's run, for
/// attempt number `attempt_no` (counted when it was claimed) that ended at
/// `at`, of an event whose `give_up_after` counts from `give_up_from`.
///
/// With per-subject order one subject can fail while others deliver, so a
/// delivery ends the stream's failing run (and resolves its page) only when
/// nothing else is `still_stuck`: no other pending event has failed and no
/// revocation is held or dead. Until then the run and its pages stay.
pub fn plan_settle(
    attempt: &ForwardAttempt,
    attempt_no: u32,
    give_up_from: DateTime<Utc>,
    at: DateTime<Utc>,
    policy: &ForwardPolicy,
    run: Run,
    still_stuck: bool,
) -> SettlePlan {
    match attempt {
        ForwardAttempt::Delivered { status } if still_stuck => SettlePlan {
            state: "delivered",
            next_attempt_at: at,
            settled_at: Some(at),
            prune_at: Some(at + policy.retain),
            failing_page: None,
            run: Run {
                last_attempt_at: Some(at),
                last_delivered_at: Some(at),
                last_status: Some(*status),
                ..run
            },
            audit_type: Some(format!("delivered:{status}")),
            uncount: false,
        },
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
                ..run
            },
            audit_type: Some(format!("delivered:{status}")),
            uncount: false,
        },
        // Not an attempt at the app: the run (the app's record) is untouched.
        ForwardAttempt::Held(hold) => SettlePlan {
            state: "held",
            next_attempt_at: at,
            settled_at: None,
            prune_at: None,
            failing_page: None,
            run,
            audit_type: Some(format!("held:{}", hold.code())),
            uncount: true,
        },
        ForwardAttempt::Failed { error, status } => {
            let failures = run.failures.saturating_add(1);
            let step = failure_step(&policy.ladder.alert_after, failures, run.paged);
            let (state, next_at, settled, prune, audit) =
                match after_failure(&policy.ladder, give_up_from, attempt_no.max(1), at) {
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
                    last_status: *status,
                    ..run
                },
                audit_type: audit,
                uncount: false,
            }
        }
    }
}

/// The failing page's text, from the settle's plan and the stream's
/// pending rows (`blocked`: queues whose head has failed).
pub fn failing_reason(
    stream: &str,
    plan: &SettlePlan,
    at: DateTime<Utc>,
    pending: u64,
    oldest: Option<&Oldest>,
    policy: &ForwardPolicy,
    blocked: u64,
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
            order: policy.order,
            blocked,
            commands: &Commands::new(&policy.config_path, stream),
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
    cmd: &Commands,
) -> String {
    match oldest {
        Some(oldest) if firing => dead_letter_summary(stream, dead, oldest, cmd),
        _ => format!("{stream}: no dead letters are left (replayed or expired)."),
    }
}

/// The oldest pending row of one ordered queue (instants in epoch
/// milliseconds, as stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub id: i64,
    pub stream: String,
    pub next_attempt_at: i64,
    pub lease_until: Option<i64>,
}

/// How many more deliveries a claim may start: in all (the worker's free
/// slots) and per stream (its `concurrency` less what it has in flight).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRoom {
    pub total: usize,
    /// Streams not named here may start up to `otherwise` (a stream with
    /// nothing in flight, or one that lost its `[forward]`: its rows are
    /// claimed only to be held).
    pub per_stream: std::collections::BTreeMap<String, usize>,
    pub otherwise: usize,
}

impl ClaimRoom {
    /// The same room for every stream.
    pub fn uniform(n: usize) -> ClaimRoom {
        ClaimRoom {
            total: n,
            per_stream: std::collections::BTreeMap::new(),
            otherwise: n,
        }
    }

    fn of(&self, stream: &str) -> usize {
        self.per_stream
            .get(stream)
            .copied()
            .unwrap_or(self.otherwise)
    }

    /// The most rows of any one stream a claim can take (bounds the
    /// per-stream read of unordered rows).
    pub fn widest(&self) -> usize {
        self.per_stream
            .values()
            .copied()
            .chain([self.otherwise])
            .max()
            .unwrap_or(0)
            .min(self.total)
    }

    /// How many due unordered rows a claim reads: `total`, plus what the
    /// read may return that `plan_claim` then skips (each stream's rows
    /// beyond its own room, up to [`ClaimRoom::widest`]), at most 16 ×
    /// `total` so the read stays bounded with thousands of streams.
    pub fn unordered_read(&self) -> usize {
        let widest = self.widest();
        let skipped: usize = self
            .per_stream
            .values()
            .map(|room| widest.saturating_sub(*room))
            .sum();
        self.total
            .saturating_add(skipped)
            .min(self.total.saturating_mul(16))
    }
}

/// Which rows to try to claim, and when the next one falls due: each
/// queue's head when it is due and unleased (else its due time counts),
/// the longest due first, then unordered due rows (`(id, stream)`,
/// oldest first), within `room` in all and per stream. A stream at its
/// `concurrency` is skipped, not waited on, so one slow app never holds
/// back another stream's deliveries.
pub fn plan_claim(
    heads: &[Head],
    unordered: &[(i64, String)],
    unordered_next: Option<i64>,
    now: i64,
    room: &ClaimRoom,
) -> (Vec<i64>, Option<i64>) {
    let mut due = Vec::new();
    let mut next = unordered_next;
    for h in heads {
        let free_at = h
            .lease_until
            .map_or(h.next_attempt_at, |l| l.max(h.next_attempt_at));
        if free_at <= now {
            due.push((h.next_attempt_at, h.id, h.stream.as_str()));
        } else {
            next = Some(next.map_or(free_at, |n| n.min(free_at)));
        }
    }
    // Longest-waiting first, so with more due queues than room (many
    // subjects) none is starved.
    due.sort_unstable();
    let mut taken: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    let mut ids = Vec::new();
    let candidates = due
        .into_iter()
        .map(|(_, id, stream)| (id, stream))
        .chain(unordered.iter().map(|(id, stream)| (*id, stream.as_str())));
    for (id, stream) in candidates {
        if ids.len() >= room.total {
            break;
        }
        let n = taken.entry(stream).or_insert(0);
        if *n < room.of(stream) {
            *n += 1;
            ids.push(id);
        }
    }
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
    /// The config file the sidecar runs from (pages' commands name it).
    pub config_path: String,
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
    fn the_ladder_climbs_then_repeats_its_last_step_and_ends_at_give_up() {
        let l = Ladder::default();
        let r = t("2026-01-01T00:00:00Z");
        assert_eq!(
            after_failure(&l, r, 1, r),
            AfterFailure::RetryAt(r + TimeDelta::seconds(5))
        );
        let at = t("2026-01-01T01:00:00Z");
        assert_eq!(
            after_failure(&l, r, 4, at),
            AfterFailure::RetryAt(at + TimeDelta::minutes(10))
        );
        assert_eq!(
            after_failure(&l, r, 9, at),
            AfterFailure::RetryAt(at + TimeDelta::hours(1)),
            "past the ladder the last step (1h) repeats"
        );
        // A short ladder repeats its own last step, not a day.
        let short = Ladder {
            retry: vec![TimeDelta::seconds(5), TimeDelta::seconds(10)],
            ..Ladder::default()
        };
        assert_eq!(
            after_failure(&short, r, 7, at),
            AfterFailure::RetryAt(at + TimeDelta::seconds(10))
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
        let cmd = Commands::new("/etc/hushwatch/hushwatch.toml", "clerk");
        let text = failing_summary(&FailingPage {
            stream: "clerk",
            failures: 5,
            last_error: "HTTP 502",
            failing_since: t("2026-01-01T00:00:01Z"),
            pending: 3,
            oldest: Some(&oldest),
            order: Order::Stream,
            blocked: 1,
            commands: &cmd,
        });
        assert!(text.contains("user.deleted user_123"), "{text}");
        assert!(
            text.contains("HTTP 502") && text.contains("blocks"),
            "{text}"
        );
        assert!(
            text.contains(
                "`hushwatch forward retry --config /etc/hushwatch/hushwatch.toml --stream clerk`"
            ),
            "{text}"
        );
        assert!(
            text.contains("`hushwatch forward skip --config /etc/hushwatch/hushwatch.toml --stream clerk --id msg_1 --comment \"why it is skipped\"`"),
            "{text}"
        );
        let per_subject = failing_summary(&FailingPage {
            order: Order::Subject,
            blocked: 2,
            ..FailingPage {
                stream: "clerk",
                failures: 5,
                last_error: "HTTP 400",
                failing_since: t("2026-01-01T00:00:01Z"),
                pending: 3,
                oldest: None,
                order: Order::Subject,
                blocked: 0,
                commands: &cmd,
            }
        });
        assert!(
            per_subject.contains("2 subject(s) are blocked")
                && !per_subject.contains("blocks the ones"),
            "{per_subject}"
        );
        let dead = dead_letter_summary("clerk", 2, &oldest, &cmd);
        assert!(
            dead.starts_with("2 event(s) for stream clerk were never delivered to the app (oldest: user.deleted user_123"),
            "{dead}"
        );
        assert!(
            dead.contains("`hushwatch replay --config /etc/hushwatch/hushwatch.toml --stream clerk --dead-letters`"),
            "{dead}"
        );
    }

    fn policy() -> ForwardPolicy {
        ForwardPolicy {
            ladder: Ladder::default(),
            order: Order::Subject,
            critical_after: TimeDelta::hours(1),
            config_path: "hushwatch.toml".into(),
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
        plan_settle(
            &attempt,
            attempts + 1,
            received,
            t(at),
            &policy(),
            run,
            false,
        )
    }

    fn failed() -> ForwardAttempt {
        ForwardAttempt::Failed {
            error: "HTTP 502".into(),
            status: Some(502),
        }
    }

    #[test]
    fn a_claim_takes_due_unleased_heads_then_unordered_rows_and_knows_the_next_due() {
        let head = |id, next_attempt_at, lease_until| Head {
            id,
            stream: "a".into(),
            next_attempt_at,
            lease_until,
        };
        let heads = [
            head(1, 100, None),
            head(5, 300, None),
            head(7, 50, Some(250)),
        ];
        let unordered = [(9, "a".to_string()), (10, "a".to_string())];
        let (ids, next) = plan_claim(&heads, &unordered, Some(400), 200, &ClaimRoom::uniform(10));
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
        let (ids, _) = plan_claim(&heads, &unordered, None, 200, &ClaimRoom::uniform(2));
        assert_eq!(ids, [1, 9]);
    }

    #[test]
    fn a_stream_at_its_concurrency_is_skipped_and_the_others_go_on() {
        let heads: Vec<Head> = (1..=4)
            .map(|id| Head {
                id,
                stream: "busy".into(),
                next_attempt_at: id,
                lease_until: None,
            })
            .collect();
        let unordered = [
            (10, "busy".to_string()),
            (11, "quiet".to_string()),
            (12, "quiet".to_string()),
        ];
        let room = ClaimRoom {
            total: 10,
            per_stream: [("busy".to_string(), 2)].into_iter().collect(),
            otherwise: 16,
        };
        let (ids, _) = plan_claim(&heads, &unordered, None, 100, &room);
        assert_eq!(ids, [1, 2, 11, 12]);
        assert_eq!(room.widest(), 10, "never more than the total");
        assert_eq!(room.unordered_read(), 10 + 8);
        let room = ClaimRoom { total: 3, ..room };
        assert_eq!(
            plan_claim(&heads, &unordered, None, 100, &room).0,
            [1, 2, 11]
        );
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
            t("2026-01-01T00:00:05Z"),
            "first retry after 5s"
        );
        let again = settle(failed(), 1, "2026-01-01T00:00:05Z", plan.run.clone());
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

    fn ids(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_subject_is_the_user_else_the_first_id_and_a_membership_names_its_organization() {
        // Clerk organizationMembership.deleted: membership, member, organization.
        let membership = ids(&[
            ("organization_membership_id", "orgmem_1"),
            ("user_id", "user_1"),
            ("organization_id", "org_1"),
        ]);
        assert_eq!(
            subject_of(&membership),
            (Some("user_1".into()), Some("org_1".into()))
        );
        // user.deleted: the user, no organization.
        assert_eq!(
            subject_of(&ids(&[("user_id", "user_1")])),
            (Some("user_1".into()), None)
        );
        // session.revoked: the session's user.
        assert_eq!(
            subject_of(&ids(&[("session_id", "sess_1"), ("user_id", "user_1")])).0,
            Some("user_1".into())
        );
        // organization.deleted: the organization itself, named once.
        assert_eq!(
            subject_of(&ids(&[("organization_id", "org_1")])),
            (Some("org_1".into()), None)
        );
        assert_eq!(subject_of(&[]), (None, None));
    }

    #[test]
    fn each_order_puts_a_row_in_its_queue() {
        assert_eq!(
            queue_of(Order::Subject, "clerk", Some("user_1")).as_deref(),
            Some("clerk\u{1f}user_1")
        );
        assert_eq!(
            queue_of(Order::Subject, "clerk", None).as_deref(),
            Some("clerk"),
            "no subject: the stream's queue"
        );
        assert_eq!(
            queue_of(Order::Stream, "clerk", Some("user_1")).as_deref(),
            Some("clerk")
        );
        assert_eq!(queue_of(Order::None, "clerk", Some("user_1")), None);
        assert_eq!(Order::from_bool(true), Order::Stream);
        assert_eq!(Order::from_bool(false), Order::None);
        assert_eq!(Order::default(), Order::Subject);
        for o in [Order::Subject, Order::Stream, Order::None] {
            assert_eq!(Order::parse(o.as_str()), Some(o));
        }
        assert_eq!(Order::parse("user"), None);
    }

    #[test]
    fn a_delivery_keeps_the_failing_run_while_another_subject_or_a_revocation_is_stuck() {
        let run = Run {
            failures: 3,
            paged: 1,
            failing_since: Some(t("2026-01-01T00:00:00Z")),
            last_error: Some("HTTP 400".into()),
            ..Default::default()
        };
        let received = t("2026-01-01T00:00:00Z");
        let at = t("2026-01-01T00:10:00Z");
        let delivered = ForwardAttempt::Delivered { status: 200 };
        let stuck = plan_settle(&delivered, 1, received, at, &policy(), run.clone(), true);
        assert_eq!(stuck.state, "delivered");
        assert_eq!(stuck.failing_page, None, "no resolve while one is stuck");
        assert_eq!((stuck.run.failures, stuck.run.paged), (3, 1));
        assert_eq!(stuck.run.last_delivered_at, Some(at));
        let clear = plan_settle(&delivered, 1, received, at, &policy(), run, false);
        assert_eq!(clear.failing_page, Some(RunPage::Resolve { failures: 3 }));
    }

    #[test]
    fn a_held_event_leaves_the_queue_without_touching_the_run_or_spending_an_attempt() {
        let run = Run {
            failures: 2,
            paged: 1,
            ..Default::default()
        };
        let plan = settle(
            ForwardAttempt::Held(Hold::UnknownKey("abc".into())),
            0,
            "2026-01-01T00:00:00Z",
            run.clone(),
        );
        assert_eq!(plan.state, "held");
        assert_eq!(plan.run, run);
        assert_eq!(plan.failing_page, None);
        assert!(plan.uncount);
        assert_eq!(plan.audit_type.as_deref(), Some("held:unknown_key"));
        assert_eq!(
            hold_of("unknown_key", Some("abc")),
            Hold::UnknownKey("abc".into())
        );
        for h in [Hold::Corrupt, Hold::Plaintext, Hold::NoForward] {
            assert_eq!(hold_of(h.code(), None), h);
        }
    }

    #[test]
    fn the_held_page_names_events_why_and_the_command() {
        let cmd = Commands::new("/etc/hush watch.toml", "clerk");
        let ev = |n: usize| HeldEvent {
            event: Oldest {
                event_type: "user.deleted".into(),
                subject: Some(format!("user_{n}")),
                delivery_id: format!("msg_{n}"),
                received_at: t("2026-01-01T00:00:00Z"),
            },
            hold: Hold::UnknownKey("0a1b2c".into()),
        };
        let named: Vec<HeldEvent> = (0..HELD_NAMED).map(ev).collect();
        let text = held_summary("clerk", 7, &named, &cmd);
        assert!(
            text.starts_with("7 event(s) of stream clerk are held"),
            "{text}"
        );
        assert!(
            text.contains("user.deleted user_0 (delivery msg_0"),
            "{text}"
        );
        assert!(text.contains("key 0a1b2c"), "{text}");
        assert!(
            text.contains("`hushwatch forward skip --config '/etc/hush watch.toml' --stream clerk --id msg_4 --comment \"why it is skipped\"`"),
            "{text}"
        );
        assert!(
            text.contains("`hushwatch forward list --config '/etc/hush watch.toml' --stream clerk --state held`"),
            "{text}"
        );
        assert!(held_summary("clerk", 0, &[], &cmd).contains("no events are held"));
        assert_eq!(held_change(1, false), Some(true));
        assert_eq!(held_change(0, true), Some(false));
        assert_eq!(held_change(3, true), None);
        assert_eq!(shell_word("it's"), "'it'\\''s'");
    }

    #[test]
    fn an_overdue_revocation_pages_once_per_episode() {
        let r = t("2026-01-01T00:00:00Z");
        let hour = TimeDelta::hours(1);
        assert!(!revocation_overdue(
            Some(r),
            hour,
            r + TimeDelta::minutes(59)
        ));
        assert!(revocation_overdue(Some(r), hour, r + hour));
        assert!(!revocation_overdue(None, hour, r + hour));
        assert_eq!(revocation_change(true, true, false), Some(true));
        assert_eq!(revocation_change(true, true, true), None, "once");
        assert_eq!(
            revocation_change(false, true, true),
            None,
            "a younger revocation still waits: the episode goes on"
        );
        assert_eq!(revocation_change(false, false, true), Some(false));
        assert_eq!(revocation_change(false, true, false), None);
        let cmd = Commands::new("h.toml", "clerk");
        let o = Oldest {
            event_type: "user.deleted".into(),
            subject: Some("user_1".into()),
            delivery_id: "msg_1".into(),
            received_at: r,
        };
        let text = revocation_summary("clerk", Some(&o), hour, &cmd);
        assert!(text.contains("for more than 1h"), "{text}");
        assert!(text.contains("user.deleted user_1"), "{text}");
        assert!(
            text.contains("`hushwatch forward retry --config h.toml --stream clerk`"),
            "{text}"
        );
    }

    #[test]
    fn a_failing_run_ends_without_a_delivery_only_when_nothing_is_stuck() {
        assert!(run_ends_quietly(3, 0, 0));
        assert!(!run_ends_quietly(0, 0, 0), "no run");
        assert!(!run_ends_quietly(3, 1, 0), "a subject still fails");
        assert!(!run_ends_quietly(3, 0, 1), "a revocation is held or dead");
        assert!(run_ended_summary(3).contains("after 3 failed attempt(s)"));
    }
}
