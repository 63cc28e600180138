//! Cross-checking a stream against its identity provider's own API: the
//! rules only, over values the poller read (`crosscheck`, the adapter) and
//! the store kept. No I/O and no clock: every instant is an argument.
//!
//! Two ways to ask a provider what it did (reference: provider-apis):
//! - **Event log join** (WorkOS): an event of a checked type in the
//!   provider's log whose id never arrived on the stream, `grace` after it
//!   was logged, is missed ([`join_event_log`]).
//! - **State diff** (Clerk): two listings an interval apart show what
//!   changed; a change no webhook explains, and that still holds on a later
//!   poll (listings lag), is missed ([`diff_sorted`], [`Pending::decide`]).
//!
//! A [`Finding`] has a stable [`Finding::key`] built only from what the
//! provider and the store said (never from this process's clock), so every
//! replica and every restart derive the same key and the store pages it
//! once.

use chrono::{DateTime, TimeDelta, Utc};
use std::cmp::Ordering;

/// A provider whose API the cross-check can read. Each one's requests and
/// answers live in its adapter (`crosscheck::clerk`, `crosscheck::workos`);
/// what follows from them is decided here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    Clerk,
    Workos,
    Okta,
    Entra,
    Auth0,
}

impl Provider {
    pub const ALL: [Provider; 5] = [
        Provider::Clerk,
        Provider::Workos,
        Provider::Okta,
        Provider::Entra,
        Provider::Auth0,
    ];

    /// The config value (`provider = "clerk"`).
    pub fn name(self) -> &'static str {
        match self {
            Provider::Clerk => "clerk",
            Provider::Workos => "workos",
            Provider::Okta => "okta",
            Provider::Entra => "entra",
            Provider::Auth0 => "auth0",
        }
    }

    pub fn parse(text: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.name() == text)
    }

    /// How pages name it.
    pub fn title(self) -> &'static str {
        match self {
            Provider::Clerk => "Clerk",
            Provider::Workos => "WorkOS",
            Provider::Okta => "Okta",
            Provider::Entra => "Entra ID",
            Provider::Auth0 => "Auth0",
        }
    }

    /// `api_url` when unset: Clerk's Backend API root (its OpenAPI
    /// `servers` entry, clerk/openapi-specs bapi/2025-11-10.yml) and
    /// WorkOS's API host (workos.com/docs/reference). Auth0 has none: each
    /// tenant has its own domain, so `api_url` is required (empty here).
    pub fn default_api_url(self) -> &'static str {
        match self {
            Provider::Clerk => "https://api.clerk.com/v1",
            Provider::Workos => "https://api.workos.com",
            // Every Okta org has its own host (`https://YOUR-ORG.okta.com`):
            // there is no default, `api_url` is required.
            Provider::Okta => "",
            // Microsoft Graph's v1.0 root (learn.microsoft.com/graph/use-the-api).
            Provider::Entra => "https://graph.microsoft.com/v1.0",
            Provider::Auth0 => "",
        }
    }
}

/// WorkOS event types checked when `types` is unset: the revocation and
/// grant types of WorkOS's catalogue (workos.com/docs/events; the same
/// types `audit::classify` files as grant or revoke for WorkOS).
pub const WORKOS_DEFAULT_TYPES: &[&str] = &[
    "dsync.user.deleted",
    "dsync.group.user_removed",
    "dsync.group.deleted",
    "dsync.deleted",
    "organization_membership.deleted",
    "connection.deactivated",
    "connection.deleted",
    "dsync.user.created",
    "dsync.group.user_added",
    "dsync.activated",
    "organization_membership.created",
    "connection.activated",
];

/// Okta System Log event types checked when `types` is unset: the
/// revocations of a user's access (deactivated, suspended, removed from an
/// app or a group) and their grant counterparts, as named in Okta's Event
/// Types catalogue (developer.okta.com/docs/reference/api/event-types/).
pub const OKTA_DEFAULT_TYPES: &[&str] = &[
    "user.lifecycle.deactivate",
    "user.lifecycle.suspend",
    "application.user_membership.remove",
    "group.user_membership.remove",
    "user.lifecycle.activate",
    "user.lifecycle.unsuspend",
    "application.user_membership.add",
    "group.user_membership.add",
];

/// Requests one Okta poll makes at most. Okta's smallest plan allows 20 a
/// minute on `/api/v1/logs`, shared with every other reader of the log (a
/// SIEM, say): ten leave half of it. A longer backlog (more than 10,000
/// events at 1,000 a page) is read over several polls from the kept link.
pub const OKTA_MAX_REQUESTS_PER_POLL: usize = 10;

/// Which way an Okta event type moves access, for the types this module
/// knows (the defaults above and the other lifecycle steps); `None` for
/// the rest, which the caller classifies as any other provider's.
pub fn okta_direction(event_type: &str) -> Option<Direction> {
    match event_type {
        "user.lifecycle.deactivate"
        | "user.lifecycle.suspend"
        | "user.lifecycle.delete.initiated"
        | "application.user_membership.remove"
        | "group.user_membership.remove" => Some(Direction::Revoke),
        "user.lifecycle.activate"
        | "user.lifecycle.reactivate"
        | "user.lifecycle.unsuspend"
        | "application.user_membership.add"
        | "group.user_membership.add" => Some(Direction::Grant),
        _ => None,
    }
}

/// Which way a missed change moved access: the `direction` label of
/// `hushwatch_crosscheck_missed_total` and the page's severity (a missed
/// revocation is critical).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    Revoke,
    Grant,
    Other,
}

impl Direction {
    pub const ALL: [Direction; 3] = [Direction::Revoke, Direction::Grant, Direction::Other];

    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Revoke => "revoke",
            Direction::Grant => "grant",
            Direction::Other => "other",
        }
    }
}

/// One thing the provider did that no webhook told the stream about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Stable identity (see the module comment): `workos:<event id>`, or
    /// for Clerk the change and the poll that first saw it.
    pub key: String,
    pub direction: Direction,
    /// The webhook type that should have arrived
    /// (`organizationMembership.deleted`, `dsync.user.deleted`).
    pub event_type: String,
    /// The user (or, when the provider names none, the object) concerned.
    pub subject: String,
    /// Clerk memberships: the organization.
    pub organization: Option<String>,
    /// The provider's own id: the WorkOS event id, the Clerk membership id.
    pub provider_id: Option<String>,
    /// When the provider did it: exactly (an event log), or between two
    /// polls (a state diff).
    pub when: When,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    At(DateTime<Utc>),
    Between(DateTime<Utc>, DateTime<Utc>),
}

// ---------------------------------------------------------------- WorkOS

/// One entry of the provider's event log, as the adapter parsed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedEvent {
    pub id: String,
    pub event_type: String,
    pub created_at: DateTime<Utc>,
    /// The user the event is about, or else the object (from the payload).
    pub subject: Option<String>,
    /// Okta: the group or app a membership event is about (`group
    /// Engineering (00g…)`), named on the page beside the user.
    pub organization: Option<String>,
}

/// What one pass over a page of the event log decided.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct JoinOutcome {
    pub findings: Vec<Finding>,
    /// The id of the last event decided: the cursor to keep. Events after
    /// it are read again on the next poll.
    pub decided_through: Option<String>,
    /// An event still inside its grace was reached: stop reading the log
    /// (it is ordered by creation time), and read it again next poll.
    pub reached_undecided: bool,
}

/// Joins one page of the event log (oldest first, as `order=asc` returns
/// it) with the ids the stream received. An event is decided once its
/// `grace` has passed: received (`received(id)`) or not of a checked type
/// → nothing; otherwise a finding. The first event still within its grace
/// stops the join, so the cursor never passes an event that was not
/// decided; an event logged in the future of `now` (clock skew) waits too.
pub fn join_event_log(
    page: &[LoggedEvent],
    types: &[String],
    grace: TimeDelta,
    now: DateTime<Utc>,
    received: &dyn Fn(&str) -> bool,
    direction_of: &dyn Fn(&str) -> Direction,
) -> JoinOutcome {
    join_provider_log(
        Provider::Workos,
        page,
        types,
        grace,
        now,
        received,
        direction_of,
    )
}

/// [`join_event_log`] for any provider with an event log: finding keys are
/// `<provider name>:<event id>` (`workos:event_…`, `okta:<uuid>`), so two
/// providers' ids never share a key.
pub fn join_provider_log(
    provider: Provider,
    page: &[LoggedEvent],
    types: &[String],
    grace: TimeDelta,
    now: DateTime<Utc>,
    received: &dyn Fn(&str) -> bool,
    direction_of: &dyn Fn(&str) -> Direction,
) -> JoinOutcome {
    let mut out = JoinOutcome::default();
    for event in page {
        if event.created_at + grace > now {
            out.reached_undecided = true;
            break;
        }
        if types.contains(&event.event_type) && !received(&event.id) {
            out.findings.push(Finding {
                key: format!("{}:{}", provider.name(), event.id),
                direction: direction_of(&event.event_type),
                event_type: event.event_type.clone(),
                subject: event.subject.clone().unwrap_or_else(|| event.id.clone()),
                organization: event.organization.clone(),
                provider_id: Some(event.id.clone()),
                when: When::At(event.created_at),
            });
        }
        out.decided_through = Some(event.id.clone());
    }
    out
}

// ----------------------------------------------------------------- Auth0

/// Auth0 log type codes checked when `types` is unset (Auth0, "Log Event
/// Type Codes", auth0.com/docs/deploy-monitor/logs/log-event-type-codes):
/// `sdu` "Success User Deletion" (and `du` "Deleted User", its older name),
/// `limit_wc` "Blocked Account", `sapi` "Success API Operation" (user
/// deletes, blocks and their undoing through the Management API; see
/// [`auth0_sapi_direction`]), and the grant counterpart `ss` "Success
/// Signup".
pub const AUTH0_DEFAULT_TYPES: &[&str] = &["sdu", "du", "limit_wc", "sapi", "ss"];

/// What a checked Auth0 code means, for the page text.
pub fn auth0_code_meaning(code: &str) -> &'static str {
    match code {
        "sdu" | "du" => "user deleted",
        "limit_wc" => "account blocked after too many failed logins",
        "sapi" => "Management API operation",
        "ss" => "user signed up",
        _ => "logged event",
    }
}

/// Which way an Auth0 log entry of a checked code moved access, when the
/// code alone tells: `None` for `sapi` (read its request with
/// [`auth0_sapi_direction`]) and for codes not listed here (the audit
/// classifier decides those, as for any provider).
pub fn auth0_direction(code: &str) -> Option<Direction> {
    match code {
        "sdu" | "du" | "limit_wc" => Some(Direction::Revoke),
        "ss" => Some(Direction::Grant),
        _ => None,
    }
}

/// The request a `sapi` entry logged ("Successful API Operation. Only
/// emitted by the Management API on POST, DELETE, PATCH, and PUT",
/// auth0.com/docs/tenant-logs/management-success/sapi): its method, its
/// path (`/api/v2/users/auth0|123`, percent-decoded) and, for a user
/// update, the `blocked` value it set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SapiRequest {
    pub method: String,
    pub path: String,
    pub blocked: Option<bool>,
}

/// The access a `sapi` request changed, and the user it changed it for:
/// `DELETE /api/v2/users/{id}` (a user deleted) and `PATCH` with
/// `"blocked": true` are revocations; `PATCH` with `"blocked": false` and
/// `POST /api/v2/users` (the user's id is not in the path then) are
/// grants; removing a user's roles or organization memberships
/// (`DELETE /api/v2/users/{id}/roles`, `DELETE
/// /api/v2/organizations/{org}/members`) revokes. Anything else (a client,
/// a connection, a user's metadata) is not about a user's access: `None`,
/// not checked.
pub fn auth0_sapi_direction(req: &SapiRequest) -> Option<(Direction, Option<String>)> {
    let method = req.method.to_ascii_uppercase();
    let path = req.path.split('?').next().unwrap_or_default();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let user = |i: usize| {
        parts
            .get(i)
            .filter(|u| !u.is_empty())
            .map(|u| (*u).to_owned())
    };
    match (method.as_str(), parts.as_slice()) {
        ("DELETE", ["api", "v2", "users", _]) => Some((Direction::Revoke, user(3))),
        ("PATCH", ["api", "v2", "users", _]) => match req.blocked {
            Some(true) => Some((Direction::Revoke, user(3))),
            Some(false) => Some((Direction::Grant, user(3))),
            None => None,
        },
        ("POST", ["api", "v2", "users"]) => Some((Direction::Grant, None)),
        ("DELETE", ["api", "v2", "users", _, "roles"]) => Some((Direction::Revoke, user(3))),
        ("POST", ["api", "v2", "users", _, "roles"]) => Some((Direction::Grant, user(3))),
        ("DELETE", ["api", "v2", "organizations", _, "members"]) => Some((Direction::Revoke, None)),
        ("POST", ["api", "v2", "organizations", _, "members"]) => Some((Direction::Grant, None)),
        _ => None,
    }
}

// ----------------------------------------------------------------- Clerk

/// One entry of a Clerk listing, ordered so that a snapshot can be kept and
/// compared as a sorted sequence (memberships of a user sort beside their
/// user only by accident; the order is by kind, then ids).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Entry {
    User { user: String },
    Membership { organization: String, user: String },
}

impl Entry {
    pub fn user(&self) -> &str {
        match self {
            Entry::User { user } | Entry::Membership { user, .. } => user,
        }
    }

    pub fn organization(&self) -> Option<&str> {
        match self {
            Entry::User { .. } => None,
            Entry::Membership { organization, .. } => Some(organization),
        }
    }
}

/// A change between two snapshots.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Change {
    Removed(Entry),
    Added(Entry),
}

impl Change {
    pub fn entry(&self) -> &Entry {
        match self {
            Change::Removed(e) | Change::Added(e) => e,
        }
    }

    pub fn direction(&self) -> Direction {
        match self {
            Change::Removed(_) => Direction::Revoke,
            Change::Added(_) => Direction::Grant,
        }
    }

    /// The Clerk webhook that reports this change (Clerk's webhook catalogue,
    /// clerk/openapi-specs webhooks/2025-04-15.yml).
    pub fn event_type(&self) -> &'static str {
        match self {
            Change::Removed(Entry::User { .. }) => "user.deleted",
            Change::Removed(Entry::Membership { .. }) => "organizationMembership.deleted",
            Change::Added(Entry::User { .. }) => "user.created",
            Change::Added(Entry::Membership { .. }) => "organizationMembership.created",
        }
    }

    /// Whether a received webhook of `event_type` about `user` (and
    /// `organization`) explains this change: the change's own event, or
    /// for a removal, the deletion of the user or of the organization.
    pub fn explained_by(&self, event_type: &str, user: Option<&str>, org: Option<&str>) -> bool {
        let entry = self.entry();
        let same_user = user == Some(entry.user());
        let same_org = org.is_some() && org == entry.organization();
        match (self, event_type) {
            (Change::Removed(_), "user.deleted") => same_user,
            (Change::Removed(Entry::Membership { .. }), "organization.deleted") => same_org,
            (Change::Removed(Entry::Membership { .. }), "organizationMembership.deleted")
            | (Change::Added(Entry::Membership { .. }), "organizationMembership.created") => {
                same_user && same_org
            }
            (Change::Added(Entry::User { .. }), "user.created") => same_user,
            _ => false,
        }
    }
}

/// Compares two snapshots given as ascending, duplicate-free sequences, in
/// one merge pass: memory is the changes, never a third copy of either
/// snapshot, so the store can stream both from disk. Out-of-order input is
/// a caller bug the debug build catches; duplicates are skipped.
pub fn diff_sorted<I, J>(previous: I, current: J) -> Vec<Change>
where
    I: IntoIterator<Item = Entry>,
    J: IntoIterator<Item = Entry>,
{
    let mut changes = Vec::new();
    let mut prev = previous.into_iter().peekable();
    let mut cur = current.into_iter().peekable();
    loop {
        let order = match (prev.peek(), cur.peek()) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some(p), Some(c)) => p.cmp(c),
        };
        match order {
            Ordering::Less => {
                let gone = prev.next().expect("peeked");
                skip_equal(&mut prev, &gone);
                changes.push(Change::Removed(gone));
            }
            Ordering::Greater => {
                let new = cur.next().expect("peeked");
                skip_equal(&mut cur, &new);
                changes.push(Change::Added(new));
            }
            Ordering::Equal => {
                let same = prev.next().expect("peeked");
                cur.next();
                skip_equal(&mut prev, &same);
                skip_equal(&mut cur, &same);
            }
        }
    }
    changes
}

fn skip_equal<I: Iterator<Item = Entry>>(it: &mut std::iter::Peekable<I>, last: &Entry) {
    while let Some(next) = it.peek() {
        debug_assert!(next >= last, "snapshot not sorted: {next:?} after {last:?}");
        if next != last {
            break;
        }
        it.next();
    }
}

/// A received webhook that may explain a change: what the store's delivery
/// rows say (type, subject user, organization, arrival).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub event_type: String,
    pub user: Option<String>,
    pub organization: Option<String>,
    pub received_at: DateTime<Utc>,
}

/// An unexplained change waiting to be confirmed: seen by the poll at
/// `seen_at`, whose previous poll was `since`. It becomes a finding on a
/// later poll once `grace` after `seen_at` has passed, if no webhook
/// received in (`since` − grace, `seen_at` + grace] explains it and the
/// listing still shows it (a lagging listing that comes back is no change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub change: Change,
    pub since: DateTime<Utc>,
    pub seen_at: DateTime<Utc>,
    /// The Clerk membership id, from the snapshot that had it.
    pub provider_id: Option<String>,
}

/// What becomes of a pending change at a poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A webhook explains it, or the listing shows the old state again.
    Settled,
    /// Not decidable yet: keep it pending.
    Wait,
    Missed(Finding),
}

impl Pending {
    /// The webhooks that may explain it arrived in this window.
    pub fn window(&self, grace: TimeDelta) -> (DateTime<Utc>, DateTime<Utc>) {
        (self.since - grace, self.seen_at + grace)
    }

    pub fn explained(&self, grace: TimeDelta, received: &[Received]) -> bool {
        let (from, until) = self.window(grace);
        received.iter().any(|r| {
            r.received_at > from
                && r.received_at <= until
                && self.change.explained_by(
                    &r.event_type,
                    r.user.as_deref(),
                    r.organization.as_deref(),
                )
        })
    }

    /// Decides at a poll at `now` whose listing shows the entry
    /// (`listed_now`) or not.
    pub fn decide(
        &self,
        now: DateTime<Utc>,
        grace: TimeDelta,
        listed_now: bool,
        received: &[Received],
    ) -> Verdict {
        let reverted = match self.change {
            Change::Removed(_) => listed_now,
            Change::Added(_) => !listed_now,
        };
        if reverted || self.explained(grace, received) {
            return Verdict::Settled;
        }
        if now <= self.seen_at || now < self.seen_at + grace {
            return Verdict::Wait;
        }
        let entry = self.change.entry();
        Verdict::Missed(Finding {
            key: self.key(),
            direction: self.change.direction(),
            event_type: self.change.event_type().to_owned(),
            subject: entry.user().to_owned(),
            organization: entry.organization().map(str::to_owned),
            provider_id: self.provider_id.clone(),
            when: When::Between(self.since, self.seen_at),
        })
    }

    /// Stable across replicas: the change and the stored poll that saw it.
    pub fn key(&self) -> String {
        let (verb, entry) = match &self.change {
            Change::Removed(e) => ("removed", e),
            Change::Added(e) => ("added", e),
        };
        let seen = self.seen_at.timestamp_millis();
        match entry {
            Entry::User { user } => format!("clerk:{verb}:user:{user}@{seen}"),
            Entry::Membership { organization, user } => {
                format!("clerk:{verb}:membership:{organization}/{user}@{seen}")
            }
        }
    }
}

// ---------------------------------------------------------------- health

/// Failed polls in a row after which `crosscheck_failing` pages (a single
/// failure is usually a provider hiccup the next poll gets past).
pub const FAILURES_BEFORE_PAGE: i64 = 3;
/// `crosscheck_failing` pages when the last success (or the watch start,
/// when no poll ever succeeded) is older than this many `every`.
pub const STALE_AFTER_POLLS: i32 = 3;

/// What the store says about a stream's recent polls (its
/// `crosscheck_state` row; the default when no poll ended yet).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PollFacts {
    pub last_success_at: Option<DateTime<Utc>>,
    /// Failed polls since the last success.
    pub failures: i64,
    /// The last failure's text (never the key).
    pub last_error: Option<String>,
    /// A poll since the last success failed because the provider refused
    /// the key (401/403); only a success clears it.
    pub last_refused: bool,
}

/// Whether the cross-check itself works: the `crosscheck_failing` page,
/// `/v1/status` and `hushwatch status` all read this one answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollHealth {
    Ok,
    Failing {
        /// A refused key pages critical at once: no later poll can succeed
        /// until someone changes the key, and until then nothing is checked.
        critical: bool,
        reason: String,
    },
}

impl PollHealth {
    pub fn is_failing(&self) -> bool {
        matches!(self, PollHealth::Failing { .. })
    }
}

/// Decides [`PollHealth`] from the stored facts at `now`. `watch_started_at`
/// stands in for the last success when none ever happened, so a poll that
/// never succeeds (or never runs) still pages once `3 × every` has passed.
pub fn poll_health(
    facts: &PollFacts,
    provider: Provider,
    every: TimeDelta,
    watch_started_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> PollHealth {
    let error = || {
        facts
            .last_error
            .clone()
            .unwrap_or_else(|| "no poll has finished".to_owned())
    };
    // No later poll can succeed until someone acts: page at once.
    if let Some(error) = facts
        .last_error
        .as_deref()
        .filter(|e| facts.failures > 0 && e.starts_with(CHECKPOINT_LOST))
    {
        return PollHealth::Failing {
            critical: true,
            reason: error.to_owned(),
        };
    }
    if facts.failures > 0 && facts.last_refused {
        return PollHealth::Failing {
            critical: true,
            // Sticky until a success: a 5xx after the refusal says
            // nothing about whether the key works now.
            reason: format!(
                "the {} API refused the key and no poll has succeeded since; the last error: {}",
                provider.title(),
                error()
            ),
        };
    }
    if facts.failures >= FAILURES_BEFORE_PAGE {
        return PollHealth::Failing {
            critical: false,
            reason: format!(
                "{} polls of the {} API failed in a row; the last: {}",
                facts.failures,
                provider.title(),
                error()
            ),
        };
    }
    let since = facts.last_success_at.unwrap_or(watch_started_at);
    let stale_after = every * STALE_AFTER_POLLS;
    if now - since > stale_after {
        let last = match facts.last_success_at {
            Some(at) => format!(
                "the last success was at {}",
                at.format("%Y-%m-%d %H:%M:%S UTC")
            ),
            None => "no poll has succeeded since the watch started".to_owned(),
        };
        let tail = match &facts.last_error {
            Some(e) if facts.failures > 0 => format!("; the last error: {e}"),
            _ => String::new(),
        };
        return PollHealth::Failing {
            critical: false,
            reason: format!(
                "no successful poll of the {} API for more than {} ({last}){tail}",
                provider.title(),
                crate::domain::duration::format_duration(stale_after)
            ),
        };
    }
    PollHealth::Ok
}

// ----------------------------------------------------------------- pages

/// How many findings a page names; the rest are counted.
pub const PAGE_NAMES_AT_MOST: usize = 20;

/// A missed revocation is critical; anything else missed is a warning.
pub fn page_is_critical(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.direction == Direction::Revoke)
}

/// One finding in words, e.g. "Clerk no longer lists user_123 in org_9
/// (gone between 10:30 and 10:45 UTC); no webhook saying so reached
/// hushwatch, so the app was probably never told."
pub fn describe(provider: Provider, f: &Finding) -> String {
    let name = provider.title();
    let when = match f.when {
        When::At(at) => format!("at {}", at.format("%Y-%m-%d %H:%M:%S UTC")),
        When::Between(a, b) => format!(
            "between {} and {}",
            a.format("%Y-%m-%d %H:%M UTC"),
            b.format("%H:%M UTC")
        ),
    };
    let what = match (f.direction, f.organization.as_deref(), provider) {
        (Direction::Revoke, Some(org), Provider::Clerk) => format!(
            "{name} no longer lists {} in {org} (gone {when})",
            f.subject
        ),
        (Direction::Revoke, None, Provider::Clerk) => {
            format!("{name} no longer lists user {} (gone {when})", f.subject)
        }
        (Direction::Grant, Some(org), Provider::Clerk) => {
            format!("{name} now lists {} in {org} (added {when})", f.subject)
        }
        (_, _, Provider::Clerk) => {
            format!("{name} now lists user {} (added {when})", f.subject)
        }
        (_, Some(target), Provider::Okta) => format!(
            "{name} logged {} {} for user {} in {target} {when}",
            f.event_type,
            f.provider_id.as_deref().unwrap_or("(no id)"),
            f.subject
        ),
        (_, None, Provider::Okta) => format!(
            "{name} logged {} {} for {} {when}",
            f.event_type,
            f.provider_id.as_deref().unwrap_or("(no id)"),
            f.subject
        ),
        (_, _, Provider::Entra) => super::crosscheck_entra::describe_change(f, &when),
        (_, _, Provider::Workos) => format!(
            "{name} logged {} {} for {} {when}",
            f.event_type,
            f.provider_id.as_deref().unwrap_or("(no id)"),
            f.subject
        ),
        (_, _, Provider::Auth0) => format!(
            "{name} logged {} ({}) {} for user {} {when}",
            f.event_type,
            auth0_code_meaning(&f.event_type),
            f.provider_id.as_deref().unwrap_or("(no id)"),
            f.subject
        ),
    };
    format!(
        "{what}; no {} webhook saying so reached hushwatch, so the app was probably never told.",
        f.event_type
    )
}

/// The body of a `provider_missed` page: up to [`PAGE_NAMES_AT_MOST`] of
/// its findings named (`named`; more are ignored), `total` counted, and
/// what to do. `config_path`
/// is the sidecar's config file, so the printed command runs as printed.
pub fn page_text(
    provider: Provider,
    stream: &str,
    config_path: &str,
    named: &[Finding],
    total: usize,
) -> String {
    let findings = named;
    // One line: notifiers show a page's text as one paragraph.
    let mut text = format!(
        "{} {} on stream {stream} that no webhook reported:",
        total,
        if total == 1 { "change" } else { "changes" }
    );
    for (i, f) in findings.iter().take(PAGE_NAMES_AT_MOST).enumerate() {
        text.push_str(&format!(" ({}) {}", i + 1, describe(provider, f)));
    }
    let shown = findings.len().min(PAGE_NAMES_AT_MOST);
    if total > shown {
        text.push_str(&format!(" … and {} more.", total - shown));
    }
    text.push(' ');
    text.push_str(&format!(
        "What to do: make sure the app removed (or granted) this access, e.g. by running its reconciliation; then find why {}'s webhook did not arrive (its dashboard shows failed deliveries). To ask {} again now: `hushwatch crosscheck --config {} --stream {}`.",
        provider.title(),
        provider.title(),
        crate::domain::forward::shell_word(config_path),
        crate::domain::forward::shell_word(stream),
    ));
    text
}

/// How a poll's error starts when the provider no longer keeps the
/// event-log checkpoint (Auth0's retention dropped it): [`poll_health`]
/// pages it critical at once and [`failing_text`] says how to go on.
pub const CHECKPOINT_LOST: &str = "the checkpoint is gone: ";

/// The body of a `crosscheck_failing` page: why, and what to do.
pub fn failing_text(provider: Provider, stream: &str, config_path: &str, reason: &str) -> String {
    let credential = match provider {
        Provider::Entra => "client_id and client_secret",
        Provider::Auth0 => "api_key (or client_id and client_secret)",
        _ => "api_key",
    };
    if reason.starts_with(CHECKPOINT_LOST) {
        return format!(
            "The cross-check of stream {stream} cannot go on reading the {} log: {reason}. Until it does, nothing compares what {} did with the events that arrived. What to do: make sure the app removed every access revoked since the last successful poll (run its reconciliation); then start the log again from the oldest entry {} still keeps: `hushwatch crosscheck --config {} --stream {} --restart`. This resolves on the next successful poll.",
            provider.title(),
            provider.title(),
            provider.title(),
            crate::domain::forward::shell_word(config_path),
            crate::domain::forward::shell_word(stream),
        );
    }
    format!(
        "The cross-check of stream {stream} cannot read the {} API: {reason}. Until it can, nothing compares what {} did with the webhooks that arrived. What to do: check the {credential} in [streams.{stream}.crosscheck] (its value and scopes) and {}'s status page; then poll once by hand: `hushwatch crosscheck --config {} --stream {}`. This resolves on the next successful poll.",
        provider.title(),
        provider.title(),
        provider.title(),
        crate::domain::forward::shell_word(config_path),
        crate::domain::forward::shell_word(stream),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(min: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + min * 60, 0).unwrap()
    }

    fn m(org: &str, user: &str) -> Entry {
        Entry::Membership {
            organization: org.into(),
            user: user.into(),
        }
    }

    fn u(user: &str) -> Entry {
        Entry::User { user: user.into() }
    }

    fn sorted(mut v: Vec<Entry>) -> Vec<Entry> {
        v.sort();
        v
    }

    #[test]
    fn poll_health_is_critical_at_once_for_a_refused_key_and_a_warning_after_three_failures_or_three_intervals(
    ) {
        let every = TimeDelta::minutes(15);
        let start = t(0);
        let health = |f: &PollFacts, now| poll_health(f, Provider::Clerk, every, start, now);
        // Never polled: ok until 3 × every after the watch started.
        assert_eq!(health(&PollFacts::default(), t(45)), PollHealth::Ok);
        let PollHealth::Failing { critical, reason } = health(&PollFacts::default(), t(46)) else {
            panic!("never succeeded for 46 minutes");
        };
        assert!(!critical);
        assert!(reason.contains("no poll has succeeded"), "{reason}");

        let ok = PollFacts {
            last_success_at: Some(t(30)),
            ..PollFacts::default()
        };
        assert_eq!(health(&ok, t(75)), PollHealth::Ok);
        assert!(health(&ok, t(76)).is_failing());

        let refused = PollFacts {
            last_success_at: Some(t(30)),
            failures: 1,
            last_error: Some("the API refused the key (HTTP 401)".into()),
            last_refused: true,
        };
        let PollHealth::Failing { critical, reason } = health(&refused, t(31)) else {
            panic!("refused");
        };
        assert!(critical);
        assert!(
            reason.starts_with("the Clerk API refused the key"),
            "{reason}"
        );

        // A 5xx after the refusal: still critical (the key was never seen
        // working again).
        let then_5xx = PollFacts {
            failures: 2,
            last_error: Some("HTTP 503".into()),
            ..refused.clone()
        };
        let PollHealth::Failing { critical, reason } = health(&then_5xx, t(32)) else {
            panic!("still failing");
        };
        assert!(critical, "{reason}");
        assert!(reason.contains("refused the key") && reason.contains("HTTP 503"));

        let flaky = PollFacts {
            last_success_at: Some(t(30)),
            failures: 2,
            last_error: Some("HTTP 502".into()),
            last_refused: false,
        };
        assert_eq!(health(&flaky, t(40)), PollHealth::Ok);
        let three = PollFacts {
            failures: 3,
            ..flaky.clone()
        };
        let PollHealth::Failing { critical, reason } = health(&three, t(40)) else {
            panic!("three in a row");
        };
        assert!(!critical);
        assert!(
            reason.contains("3 polls") && reason.contains("HTTP 502"),
            "{reason}"
        );
        // A success clears the failures (the store's row): ok again.
        let healed = PollFacts {
            last_success_at: Some(t(50)),
            ..PollFacts::default()
        };
        assert_eq!(health(&healed, t(51)), PollHealth::Ok);
    }

    #[test]
    fn the_okta_join_keys_findings_by_uuid_and_directs_each_default_type() {
        // The first four revoke, the last four are their grant counterparts.
        for (i, ty) in OKTA_DEFAULT_TYPES.iter().enumerate() {
            let want = if i < 4 {
                Direction::Revoke
            } else {
                Direction::Grant
            };
            assert_eq!(okta_direction(ty), Some(want), "{ty}");
        }
        assert_eq!(okta_direction("user.session.start"), None);
        let mut e = logged("uuid-9", "group.user_membership.remove", t(0));
        e.subject = Some("00u9".into());
        e.organization = Some("group Engineering (00g1)".into());
        let types: Vec<String> = OKTA_DEFAULT_TYPES.iter().map(|s| (*s).to_owned()).collect();
        let out = join_provider_log(
            Provider::Okta,
            &[e],
            &types,
            TimeDelta::minutes(10),
            t(20),
            &|_| false,
            &|ty| okta_direction(ty).unwrap_or(Direction::Other),
        );
        assert_eq!(out.findings.len(), 1);
        let f = &out.findings[0];
        assert_eq!(f.key, "okta:uuid-9");
        assert_eq!(f.direction, Direction::Revoke);
        assert_eq!(f.organization.as_deref(), Some("group Engineering (00g1)"));
        let text = describe(Provider::Okta, f);
        assert!(
            text.starts_with("Okta logged group.user_membership.remove uuid-9 for user 00u9 in group Engineering (00g1) at "),
            "{text}"
        );
    }

    #[test]
    fn provider_names_round_trip() {
        for p in Provider::ALL {
            assert_eq!(Provider::parse(p.name()), Some(p));
        }
        assert_eq!(Provider::parse("google"), None);
    }

    #[test]
    fn the_diff_finds_removals_and_additions_in_one_pass() {
        let prev = sorted(vec![u("a"), u("b"), m("o1", "a"), m("o1", "b")]);
        let cur = sorted(vec![
            u("a"),
            u("c"),
            m("o1", "a"),
            m("o2", "c"),
            m("o2", "c"),
        ]);
        let changes = diff_sorted(prev, cur);
        assert_eq!(
            changes,
            vec![
                Change::Removed(u("b")),
                Change::Added(u("c")),
                Change::Removed(m("o1", "b")),
                Change::Added(m("o2", "c")),
            ]
        );
        assert!(diff_sorted(Vec::new(), Vec::new()).is_empty());
    }

    fn received(ty: &str, user: &str, org: Option<&str>, at: DateTime<Utc>) -> Received {
        Received {
            event_type: ty.into(),
            user: Some(user.into()),
            organization: org.map(Into::into),
            received_at: at,
        }
    }

    fn pending(change: Change) -> Pending {
        Pending {
            change,
            since: t(0),
            seen_at: t(15),
            provider_id: Some("orgmem_1".into()),
        }
    }

    #[test]
    fn a_removal_is_explained_by_its_own_webhook_or_the_deletion_of_user_or_org() {
        let p = pending(Change::Removed(m("org_9", "user_123")));
        let grace = TimeDelta::minutes(10);
        for (ty, user, org) in [
            ("organizationMembership.deleted", "user_123", Some("org_9")),
            ("user.deleted", "user_123", None),
            ("organization.deleted", "someone", Some("org_9")),
        ] {
            let r = [received(ty, user, org, t(5))];
            assert_eq!(p.decide(t(30), grace, false, &r), Verdict::Settled, "{ty}");
        }
        // Another org's membership, another user, or a grant: no.
        for (ty, user, org) in [
            ("organizationMembership.deleted", "user_123", Some("org_8")),
            ("organizationMembership.deleted", "user_124", Some("org_9")),
            ("organizationMembership.created", "user_123", Some("org_9")),
        ] {
            let r = [received(ty, user, org, t(5))];
            assert!(
                matches!(p.decide(t(30), grace, false, &r), Verdict::Missed(_)),
                "{ty} {user} {org:?}"
            );
        }
    }

    #[test]
    fn the_explaining_window_is_previous_poll_minus_grace_to_seen_plus_grace() {
        let p = pending(Change::Removed(m("org_9", "user_123")));
        let grace = TimeDelta::minutes(10);
        let at = |when| {
            [received(
                "organizationMembership.deleted",
                "user_123",
                Some("org_9"),
                when,
            )]
        };
        // since = 0, seen = 15: window (-10, 25].
        assert_eq!(p.decide(t(40), grace, false, &at(t(-9))), Verdict::Settled);
        assert_eq!(p.decide(t(40), grace, false, &at(t(25))), Verdict::Settled);
        assert!(matches!(
            p.decide(t(40), grace, false, &at(t(-10))),
            Verdict::Missed(_)
        ));
        assert!(matches!(
            p.decide(t(40), grace, false, &at(t(26))),
            Verdict::Missed(_)
        ));
    }

    #[test]
    fn an_unexplained_removal_waits_for_grace_and_a_later_poll_and_a_lagging_listing_settles() {
        let p = pending(Change::Removed(m("org_9", "user_123")));
        let grace = TimeDelta::minutes(10);
        // The poll that saw it, and one still within grace: wait.
        assert_eq!(p.decide(t(15), grace, false, &[]), Verdict::Wait);
        assert_eq!(p.decide(t(24), grace, false, &[]), Verdict::Wait);
        // Listed again: the earlier listing lagged.
        assert_eq!(p.decide(t(30), grace, true, &[]), Verdict::Settled);
        let Verdict::Missed(f) = p.decide(t(30), grace, false, &[]) else {
            panic!("missed");
        };
        assert_eq!(f.direction, Direction::Revoke);
        assert_eq!(f.event_type, "organizationMembership.deleted");
        assert_eq!(f.subject, "user_123");
        assert_eq!(f.organization.as_deref(), Some("org_9"));
        assert_eq!(f.when, When::Between(t(0), t(15)));
        // The key depends only on stored facts: the same on every replica.
        assert_eq!(
            f.key,
            pending(Change::Removed(m("org_9", "user_123"))).key()
        );
        assert_eq!(
            f.key,
            format!(
                "clerk:removed:membership:org_9/user_123@{}",
                t(15).timestamp_millis()
            )
        );
    }

    #[test]
    fn an_unexplained_new_user_is_a_missed_grant_unless_user_created_arrived() {
        let p = pending(Change::Added(u("user_7")));
        let grace = TimeDelta::minutes(10);
        let Verdict::Missed(f) = p.decide(t(30), grace, true, &[]) else {
            panic!("missed grant");
        };
        assert_eq!(f.direction, Direction::Grant);
        assert_eq!(f.event_type, "user.created");
        let r = [received("user.created", "user_7", None, t(14))];
        assert_eq!(p.decide(t(30), grace, true, &r), Verdict::Settled);
        // Gone again before it was confirmed: nothing to report.
        assert_eq!(p.decide(t(30), grace, false, &[]), Verdict::Settled);
    }

    fn logged(id: &str, ty: &str, at: DateTime<Utc>) -> LoggedEvent {
        LoggedEvent {
            organization: None,
            id: id.into(),
            event_type: ty.into(),
            created_at: at,
            subject: Some("directory_user_1".into()),
        }
    }

    #[test]
    fn the_workos_join_pages_checked_types_never_received_and_stops_at_the_grace_edge() {
        let page = [
            logged("event_1", "dsync.user.deleted", t(0)),
            logged("event_2", "dsync.user.deleted", t(1)),
            logged("event_3", "dsync.user.updated", t(2)),
            logged("event_4", "dsync.group.user_added", t(3)),
            logged("event_5", "dsync.user.deleted", t(20)),
            logged("event_6", "dsync.user.deleted", t(21)),
        ];
        let types: Vec<String> = WORKOS_DEFAULT_TYPES.iter().map(|s| (*s).into()).collect();
        let direction = |ty: &str| {
            if ty.ends_with("deleted") {
                Direction::Revoke
            } else {
                Direction::Grant
            }
        };
        let out = join_event_log(
            &page,
            &types,
            TimeDelta::minutes(10),
            t(25),
            &|id| id == "event_1",
            &direction,
        );
        let keys: Vec<&str> = out.findings.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(keys, ["workos:event_2", "workos:event_4"]);
        assert_eq!(out.findings[0].direction, Direction::Revoke);
        assert_eq!(out.findings[1].direction, Direction::Grant);
        assert_eq!(out.findings[0].when, When::At(t(1)));
        assert_eq!(out.decided_through.as_deref(), Some("event_4"));
        assert!(out.reached_undecided);
    }

    #[test]
    fn a_page_names_twenty_counts_the_rest_and_is_critical_only_for_revocations() {
        let f = |i: usize, direction| Finding {
            key: format!("k{i}"),
            direction,
            event_type: "organizationMembership.deleted".into(),
            subject: format!("user_{i}"),
            organization: Some("org_9".into()),
            provider_id: None,
            when: When::Between(t(0), t(15)),
        };
        let many: Vec<Finding> = (0..25).map(|i| f(i, Direction::Revoke)).collect();
        let text = page_text(
            Provider::Clerk,
            "identity",
            "/etc/hushwatch/hushwatch.toml",
            &many,
            25,
        );
        assert!(text.starts_with("25 changes on stream identity"), "{text}");
        assert!(text.contains("user_19 in org_9"));
        assert!(!text.contains("user_20 in org_9"));
        assert!(text.contains("and 5 more"));
        assert!(text.contains("What to do"));
        assert!(
            text.contains(
                "`hushwatch crosscheck --config /etc/hushwatch/hushwatch.toml --stream identity`"
            ),
            "{text}"
        );
        assert!(page_is_critical(&many));
        assert!(!page_is_critical(&[f(1, Direction::Grant)]));
        let one = describe(Provider::Clerk, &many[0]);
        assert_eq!(
            one,
            "Clerk no longer lists user_0 in org_9 (gone between 2027-01-15 08:00 UTC and 08:15 UTC); \
             no organizationMembership.deleted webhook saying so reached hushwatch, so the app was probably never told."
        );
    }

    #[test]
    fn a_lost_checkpoint_pages_critical_at_once_and_says_how_to_restart() {
        let every = TimeDelta::minutes(15);
        let reason = format!("{CHECKPOINT_LOST}Auth0 no longer keeps log 900123");
        let lost = PollFacts {
            last_success_at: Some(t(30)),
            failures: 1,
            last_error: Some(reason.clone()),
            last_refused: false,
        };
        assert_eq!(
            poll_health(&lost, Provider::Auth0, every, t(0), t(31)),
            PollHealth::Failing {
                critical: true,
                reason: reason.clone()
            }
        );
        let text = failing_text(Provider::Auth0, "login", "/etc/hw.toml", &reason);
        assert!(text.contains("no longer keeps log 900123"), "{text}");
        assert!(
            text.contains("`hushwatch crosscheck --config /etc/hw.toml --stream login --restart`"),
            "{text}"
        );
        assert!(!text.contains("api_key"), "{text}");
    }

    #[test]
    fn auth0_codes_and_sapi_requests_have_their_direction() {
        assert_eq!(auth0_direction("sdu"), Some(Direction::Revoke));
        assert_eq!(auth0_direction("limit_wc"), Some(Direction::Revoke));
        assert_eq!(auth0_direction("ss"), Some(Direction::Grant));
        assert_eq!(auth0_direction("sapi"), None);
        let req = |method: &str, path: &str, blocked| SapiRequest {
            method: method.into(),
            path: path.into(),
            blocked,
        };
        let u = Some("auth0|u1".to_owned());
        for (r, want) in [
            (
                req("delete", "/api/v2/users/auth0|u1", None),
                Some((Direction::Revoke, u.clone())),
            ),
            (
                req("patch", "/api/v2/users/auth0|u1", Some(true)),
                Some((Direction::Revoke, u.clone())),
            ),
            (
                req("PATCH", "/api/v2/users/auth0|u1", Some(false)),
                Some((Direction::Grant, u.clone())),
            ),
            (req("patch", "/api/v2/users/auth0|u1", None), None),
            (
                req("post", "/api/v2/users", None),
                Some((Direction::Grant, None)),
            ),
            (
                req("delete", "/api/v2/users/auth0|u1/roles", None),
                Some((Direction::Revoke, u.clone())),
            ),
            (
                req("delete", "/api/v2/organizations/org_1/members", None),
                Some((Direction::Revoke, None)),
            ),
            (req("patch", "/api/v2/clients/cli_1", None), None),
            (req("delete", "/api/v2/connections/con_1", None), None),
        ] {
            assert_eq!(auth0_sapi_direction(&r), want, "{r:?}");
        }
    }
}
