//! Svix endpoints, from operational webhooks: which row holds an endpoint's
//! state (its own, or past a cap per source one shared row), the alerts an
//! endpoint's summary before and after an event calls for, and what their
//! pages say. Deriving pages from state crossings (rather than from event
//! types) makes duplicates, out-of-order delivery and replays after a crash
//! harmless: the same crossing cannot happen twice. The store reads the rows
//! these decisions take and writes what they return (`store::svix`).

use chrono::{DateTime, SecondsFormat, Utc};

/// Endpoints tracked one by one per Svix source, besides those mapped in
/// `[svix.NAME] endpoints` (bounded by the config, never grouped). Endpoint
/// ids come from signed operational webhooks, but a Svix environment you own
/// may have thousands of endpoints (one per customer of your outgoing
/// webhooks), and each one seen used to add five metric series, a status
/// row and its own pages: 3,000 ids made a 3.4 MB `/metrics`. Past the cap a
/// new endpoint is not dropped but folded into one shared row,
/// [`GROUPED_ENDPOINT`], so the series, status rows and alerts stay bounded
/// (like `domain::subscription::MAX_PER_STREAM` and `[server] max_streams`).
pub const MAX_ENDPOINTS_PER_SOURCE: i64 = 100;

/// The `endpoint_id` (row, metric label, alert key) that the endpoints past
/// [`MAX_ENDPOINTS_PER_SOURCE`] share. Not a Svix id (those are `ep_…`).
pub const GROUPED_ENDPOINT: &str = "other";

/// The `event_type` of the join of lost messages with their accepted
/// redelivery (its audit entry, and its pages' wording).
pub const REDELIVERED_EVENT: &str = "hushwatch.svix.redelivered";

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
    /// The page's kind.
    pub fn kind(self) -> super::alert_kind::AlertKind {
        use super::alert_kind::AlertKind;
        match self {
            SvixAlert::EndpointDisabled => AlertKind::SvixEndpointDisabled,
            SvixAlert::MessagesExhausted => AlertKind::SvixMessagesExhausted,
            SvixAlert::EndpointFailing => AlertKind::SvixEndpointFailing,
            SvixAlert::EndpointDeleted => AlertKind::SvixEndpointDeleted,
        }
    }

    /// The page's `alert_kind` as stored and shown.
    pub fn as_str(self) -> &'static str {
        self.kind().as_str()
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

/// The alerts an event calls for: the crossings of its summary, and a
/// one-shot notice when it deleted a mapped endpoint (`deleted_mapped`).
pub fn event_changes(
    before: &EndpointSummary,
    after: &EndpointSummary,
    deleted_mapped: bool,
) -> Vec<AlertChange> {
    let mut changes = alert_changes(before, after);
    if deleted_mapped {
        changes.push(AlertChange {
            alert: SvixAlert::EndpointDeleted,
            firing: true,
            severity: Severity::Warning,
        });
    }
    changes
}

/// The page queued again for an endpoint whose lost count grew since its
/// last page: the exhausted alert again, with the new count.
pub const REGROUPED: AlertChange = AlertChange {
    alert: SvixAlert::MessagesExhausted,
    firing: true,
    severity: Severity::Critical,
};

/// What placing an endpoint's state depends on: the rows its source has
/// (at most [`MAX_ENDPOINTS_PER_SOURCE`] besides its mapped endpoints and
/// the grouped one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceRows {
    /// The endpoint has a row of its own.
    pub own: bool,
    /// Rows of the source tracked one by one (all but the grouped row).
    pub tracked: i64,
    /// The grouped row exists.
    pub grouped: bool,
}

impl SourceRows {
    /// From the counts of the endpoint's own rows, the tracked rows and the
    /// grouped rows.
    pub fn of((own, tracked, grouped): (i64, i64, i64)) -> SourceRows {
        SourceRows {
            own: own > 0,
            tracked,
            grouped: grouped > 0,
        }
    }
}

/// Which row holds an endpoint's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Own,
    /// [`GROUPED_ENDPOINT`]; `first`: this event creates the grouped row.
    Grouped {
        first: bool,
    },
}

impl Place {
    /// The row's `endpoint_id`.
    pub fn id(self, endpoint_id: &str) -> &str {
        match self {
            Place::Own => endpoint_id,
            Place::Grouped { .. } => GROUPED_ENDPOINT,
        }
    }
}

/// The row an event updates: the endpoint's own when it has one, is
/// mapped in config or the source is under the cap; otherwise the grouped
/// row. (On PostgreSQL two replicas adding new endpoints at once may each
/// see room for one more, so the cap can be passed by at most the number
/// of concurrent writers; it still bounds the series.)
pub fn event_place(mapped: bool, rows: SourceRows) -> Place {
    if mapped || rows.own || rows.tracked < MAX_ENDPOINTS_PER_SOURCE {
        return Place::Own;
    }
    Place::Grouped {
        first: !rows.grouped,
    }
}

/// The row an acknowledgement applies to: the endpoint's own, or the
/// grouped row when it has none (its messages were folded there).
pub fn ack_place(mapped: bool, rows: SourceRows) -> Place {
    if mapped || rows.own || !rows.grouped {
        return Place::Own;
    }
    Place::Grouped { first: false }
}

/// A page caused by an operational event, for logs and the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SvixPage {
    pub endpoint_id: String,
    pub alert: SvixAlert,
    pub firing: bool,
    pub severity: Severity,
    pub summary: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostMessage {
    pub msg_id: String,
    pub msg_event_id: Option<String>,
    pub status_code: u16,
    pub attempt_at: Option<DateTime<Utc>>,
}

/// A lost message whose `svix-id` was later accepted on a stream the
/// endpoint feeds: no longer lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredMessage {
    pub msg_id: String,
    pub msg_event_id: Option<String>,
    /// When the join was made (the redelivery, or the exhausted event that
    /// came after it).
    pub recovered_at: Option<DateTime<Utc>>,
}

/// What is known about one endpoint (its row, or the grouped one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SvixEndpointRow {
    pub source: String,
    pub endpoint_id: String,
    pub app_id: Option<String>,
    pub endpoint_uid: Option<String>,
    pub disabled: Option<DisableTrigger>,
    pub fail_since: Option<DateTime<Utc>>,
    pub disabled_at: Option<DateTime<Utc>>,
    pub deleted: bool,
    pub exhausted_total: u64,
    pub failing: u64,
    pub lost: Vec<LostMessage>,
    /// The newest recovered by redelivery (`store::svix::RECOVERED_SHOWN`).
    pub recovered: Vec<RecoveredMessage>,
    pub recovered_total: u64,
}

/// What an event's pages say about the event itself (the endpoint's state
/// is its [`SvixEndpointRow`]).
#[derive(Debug, Clone, Copy)]
pub struct PageFacts<'a> {
    /// The `[svix.NAME]` block.
    pub source: &'a str,
    /// The stream the endpoint feeds.
    pub stream: &'a str,
    /// The operational event's type, or [`REDELIVERED_EVENT`].
    pub event_type: &'a str,
    /// The streams an accepted delivery on which ends a lost message (its
    /// `svix-id` is the lost `msgId`).
    pub join_streams: &'a [String],
    /// The endpoint the event named, and its app id.
    pub endpoint_id: Option<&'a str>,
    pub app_id: Option<&'a str>,
    /// The last attempt of a `message.attempt.failing` event: when, and
    /// its HTTP status.
    pub failing_attempt: Option<(Option<DateTime<Utc>>, u16)>,
}

/// One page an alert change queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagePlan {
    /// One alert id per endpoint and alert, shared by its firing and
    /// resolved pages (PagerDuty dedup_key). The key keeps the pre-v8
    /// form, so an alert that fired before an upgrade resolves under the
    /// same id.
    pub key: String,
    /// The lost count this page gave, kept with the row so that the
    /// endpoints that lost more since are paged again.
    pub lost_paged: Option<i64>,
    pub page: SvixPage,
}

/// The pages of `changes` for the row `endpoint_id` (read as `row` after
/// the event). The severity travels as its own field (every notifier
/// shows it).
pub fn page_plans(
    f: &PageFacts<'_>,
    endpoint_id: &str,
    changes: &[AlertChange],
    row: &SvixEndpointRow,
) -> Vec<PagePlan> {
    changes
        .iter()
        .map(|change| PagePlan {
            key: format!("{}/{}/{}", f.source, endpoint_id, change.alert.as_str()),
            lost_paged: (change.alert == SvixAlert::MessagesExhausted)
                .then(|| i64::try_from(row.lost.len()).unwrap_or(i64::MAX)),
            page: SvixPage {
                endpoint_id: endpoint_id.to_string(),
                alert: change.alert,
                firing: change.firing,
                severity: change.severity,
                summary: summary_text(f, endpoint_id, change, row),
            },
        })
        .collect()
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The retry schedule is configurable (`retry_schedule` in the open-source
/// server; a run had 6 attempts in 41 s), so pages word what the payload
/// said and give the default only as the Cloud default: immediately, 5 s,
/// 5 min, 30 min, 2 h, 5 h, 10 h, 10 h = 27 h 35 min 5 s
/// (https://docs.svix.com/retries). `message.attempt.failing` is "sent on
/// the fourth failure" (svix crate, `MessageAttemptFailingEvent`).
const SCHEDULE_NOTE: &str =
    "How long that took depends on the schedule (on Svix Cloud's default schedule, about 27.6 h).";
const SCHEDULE_NOTE_SHORT: &str = "on Svix Cloud's default schedule, about 27.6 h in all";

/// "at 2026-12-01T19:42:17Z (no HTTP response: status 0)" from the
/// payload's `lastAttempt`.
fn attempt_words(at: Option<DateTime<Utc>>, status: u16) -> String {
    let when = at.map(rfc).unwrap_or_else(|| "(time not reported)".into());
    if status == 0 {
        format!("at {when} (no HTTP response: status 0, a timeout or a refused connection)")
    } else {
        format!("at {when} (HTTP {status})")
    }
}

/// What resolved a disabled alert, for its page: on the open-source server
/// only `endpoint.updated` can stand for a re-enable, and it is sent for
/// any change, so the page says to check.
fn cleared_by(event_type: &str) -> String {
    match event_type.strip_prefix("ingest.").unwrap_or(event_type) {
        "endpoint.enabled" => "enabled again (endpoint.enabled).".to_string(),
        "endpoint.updated" => "disabled alert cleared by endpoint.updated (clear_on, flavor = \"oss\": the open-source \
            Svix server sends no endpoint.enabled). It sends endpoint.updated for any change too (a rename, a URL change, a \
            secret rotation, a manual disable), so check in Svix that the endpoint is enabled."
            .to_string(),
        "endpoint.deleted" => "disabled alert cleared by endpoint.deleted (clear_on).".to_string(),
        other => format!("disabled alert cleared by {other}."),
    }
}

/// What a person should do, per alert. Shown in every page.
fn summary_text(
    f: &PageFacts<'_>,
    endpoint_id: &str,
    change: &AlertChange,
    row: &SvixEndpointRow,
) -> String {
    // The grouped row stands for every endpoint past the cap: the page says
    // so, names the endpoint this event was about, and its instructions use
    // that endpoint's ids.
    let this = f.endpoint_id.filter(|id| *id != GROUPED_ENDPOINT);
    let grouped = endpoint_id == GROUPED_ENDPOINT;
    let name = if grouped {
        format!(
            "Svix endpoints past the first {MAX_ENDPOINTS_PER_SOURCE} of source {} (grouped as \"{GROUPED_ENDPOINT}\", feeds stream {}{})",
            f.source,
            f.stream,
            this.map(|id| format!("; this event: endpoint {id}"))
                .unwrap_or_default()
        )
    } else {
        format!(
            "Svix endpoint {endpoint_id} ({}, feeds stream {})",
            f.source, f.stream
        )
    };
    let caveat = if grouped {
        format!(
            " Endpoints past the cap share one state, so this may not be the only one affected: check them in Svix, \
             and map the endpoints that matter under [svix.{}] endpoints to track them one by one.",
            f.source
        )
    } else {
        String::new()
    };
    let text = summary_for(f, endpoint_id, change, row, &name, this);
    format!("{text}{caveat}")
}

fn summary_for(
    f: &PageFacts<'_>,
    endpoint_id: &str,
    change: &AlertChange,
    row: &SvixEndpointRow,
    name: &str,
    this: Option<&str>,
) -> String {
    // In the grouped row's instructions, the endpoint the event named.
    let endpoint_id = match this {
        _ if endpoint_id != GROUPED_ENDPOINT => endpoint_id,
        Some(id) => id,
        None => "{endpoint_id}",
    };
    if !change.firing {
        return match change.alert {
            SvixAlert::EndpointDisabled => {
                format!("{name}: {} Recover failed messages and replay missing ones since it failed.", cleared_by(f.event_type))
            }
            SvixAlert::MessagesExhausted => match f.event_type {
                REDELIVERED_EVENT => format!(
                    "{name}: every lost message has since arrived: its svix-id was accepted on stream {} \
                     (a recover or resend got through; Svix sends no event for that), so nothing is lost any more.",
                    f.join_streams.join(", ")
                ),
                "message.attempt.recovered" | "ingest.message.attempt.recovered" => format!(
                    "{name}: a later attempt delivered the last lost message (message.attempt.recovered)."
                ),
                _ => format!("{name}: every lost message was acknowledged."),
            },
            SvixAlert::EndpointFailing => format!("{name}: no message is failing any more."),
            SvixAlert::EndpointDeleted => format!("{name} deletion cleared."),
        };
    }
    let since = row
        .fail_since
        .map(rfc)
        .unwrap_or_else(|| "the first failure".into());
    let app = row
        .app_id
        .as_deref()
        .or(this.and(f.app_id))
        .unwrap_or("{app_id}");
    match change.alert {
        SvixAlert::EndpointDisabled => format!(
            "{name} was DISABLED ({} trigger), failing since {since}: deliveries stopped and new messages are not even queued, so revocations are being lost. \
             Fix the receiver, re-enable it (PATCH /api/v1/app/{app}/endpoint/{endpoint_id} {{\"disabled\": false}}), then recover failed messages \
             (POST /api/v1/app/{app}/endpoint/{endpoint_id}/recover {{\"since\": \"{since}\"}}) and replay missing ones \
             (POST …/replay-missing with the same since). Clerk: Dashboard → Webhooks → endpoint → Message Attempts → Replay (failed since / missing since).",
            match row.disabled {
                Some(DisableTrigger::Manual) => "manual",
                _ => "automatic",
            }
        ),
        SvixAlert::MessagesExhausted => format!(
            "{name}: {} message(s) used up every attempt of the endpoint's retry schedule and are lost for this endpoint unless recovered \
             (first: {}; last attempt {}). {SCHEDULE_NOTE} Fix the receiver, then POST /api/v1/app/{app}/endpoint/{endpoint_id}/recover \
             or resend each message: a lost message whose svix-id hushwatch then accepts on stream {} counts as recovered by itself; \
             acknowledge the others with POST /v1/svix/{}/acknowledge once handled.",
            row.lost.len(),
            row.lost.first().map(|m| m.msg_id.as_str()).unwrap_or("-"),
            row.lost
                .last()
                .map(|m| attempt_words(m.attempt_at, m.status_code))
                .unwrap_or_else(|| "not reported".into()),
            f.join_streams.join(", "),
            f.source
        ),
        SvixAlert::EndpointFailing => format!(
            "{name}: {} message(s) are failing (Svix reports a message's 4th failed attempt{}); Svix keeps retrying on the \
             endpoint's retry schedule ({SCHEDULE_NOTE_SHORT}). Check the receiver now.",
            row.failing,
            match f.failing_attempt {
                Some((at, status)) => format!("; last attempt {}", attempt_words(at, status)),
                None => String::new(),
            }
        ),
        SvixAlert::EndpointDeleted => format!("{name} was DELETED in Svix: nothing will be delivered to it."),
    }
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

    fn rows(own: bool, tracked: i64, grouped: bool) -> SourceRows {
        SourceRows {
            own,
            tracked,
            grouped,
        }
    }

    #[test]
    fn an_event_keeps_its_own_row_until_the_cap_then_shares_the_grouped_one() {
        let cap = MAX_ENDPOINTS_PER_SOURCE;
        assert_eq!(event_place(false, rows(false, cap - 1, false)), Place::Own);
        assert_eq!(event_place(false, rows(true, cap + 5, true)), Place::Own);
        assert_eq!(
            event_place(true, rows(false, cap + 5, true)),
            Place::Own,
            "mapped endpoints are bounded by the config, never grouped"
        );
        assert_eq!(
            event_place(false, rows(false, cap, false)),
            Place::Grouped { first: true }
        );
        assert_eq!(
            event_place(false, rows(false, cap, true)),
            Place::Grouped { first: false }
        );
        assert_eq!(Place::Own.id("ep_1"), "ep_1");
        assert_eq!(Place::Grouped { first: true }.id("ep_1"), GROUPED_ENDPOINT);
    }

    #[test]
    fn an_acknowledgement_goes_to_the_grouped_row_only_without_a_row_of_its_own() {
        assert_eq!(SourceRows::of((2, 7, 1)), rows(true, 7, true));
        assert_eq!(SourceRows::of((0, 7, 0)), rows(false, 7, false));
        assert_eq!(ack_place(false, rows(true, 200, true)), Place::Own);
        assert_eq!(ack_place(true, rows(false, 200, true)), Place::Own);
        assert_eq!(
            ack_place(false, rows(false, 200, false)),
            Place::Own,
            "no grouped row: nothing to find there"
        );
        assert_eq!(
            ack_place(false, rows(false, 0, true)),
            Place::Grouped { first: false }
        );
    }

    #[test]
    fn a_mapped_endpoints_deletion_notifies_once_besides_the_crossings() {
        let quiet = EndpointSummary::default();
        assert!(
            event_changes(&quiet, &quiet, false).is_empty(),
            "unmapped: recorded only"
        );
        assert_eq!(
            event_changes(&quiet, &quiet, true),
            [AlertChange {
                alert: SvixAlert::EndpointDeleted,
                firing: true,
                severity: Severity::Warning
            }]
        );
        let lost = EndpointSummary { lost: 1, ..quiet };
        assert_eq!(event_changes(&quiet, &lost, true).len(), 2);
    }

    fn facts<'a>(event_type: &'a str, join_streams: &'a [String]) -> PageFacts<'a> {
        PageFacts {
            source: "main",
            stream: "identity",
            event_type,
            join_streams,
            endpoint_id: Some("ep_7"),
            app_id: Some("app_7"),
            failing_attempt: None,
        }
    }

    fn row(endpoint_id: &str, lost: usize) -> SvixEndpointRow {
        let message = LostMessage {
            msg_id: "m1".into(),
            msg_event_id: None,
            status_code: 0,
            attempt_at: None,
        };
        SvixEndpointRow {
            source: "main".into(),
            endpoint_id: endpoint_id.into(),
            app_id: None,
            endpoint_uid: None,
            disabled: None,
            fail_since: None,
            disabled_at: None,
            deleted: false,
            exhausted_total: 0,
            failing: 0,
            lost: vec![message; lost],
            recovered: Vec::new(),
            recovered_total: 0,
        }
    }

    #[test]
    fn each_change_is_one_page_under_one_key_per_endpoint_and_alert() {
        let streams = ["identity".to_string()];
        let f = facts("message.attempt.exhausted", &streams);
        let resolved = AlertChange {
            alert: SvixAlert::EndpointFailing,
            firing: false,
            severity: Severity::Warning,
        };
        let plans = page_plans(&f, "ep_1", &[REGROUPED, resolved], &row("ep_1", 2));
        assert_eq!(plans.len(), 2);
        assert_eq!(plans[0].key, "main/ep_1/svix_messages_exhausted");
        assert_eq!(plans[0].lost_paged, Some(2), "the count this page gave");
        assert_eq!(
            (plans[0].page.severity, plans[0].page.firing),
            (Severity::Critical, true)
        );
        assert!(plans[0]
            .page
            .summary
            .starts_with("Svix endpoint ep_1 (main, feeds stream identity): 2 message(s)"));
        assert_eq!(plans[1].lost_paged, None);
        assert_eq!(plans[1].key, "main/ep_1/svix_endpoint_failing");
        assert!(!plans[1].page.firing);
    }

    #[test]
    fn the_grouped_rows_page_names_the_events_endpoint_and_its_ids() {
        let streams = ["identity".to_string()];
        let f = facts("message.attempt.exhausted", &streams);
        let text = summary_text(&f, GROUPED_ENDPOINT, &REGROUPED, &row(GROUPED_ENDPOINT, 1));
        assert!(text
            .contains("grouped as \"other\", feeds stream identity; this event: endpoint ep_7)"));
        assert!(text.contains("/api/v1/app/app_7/endpoint/ep_7/recover"));
        assert!(text.contains("no HTTP response: status 0"));
        assert!(text.ends_with("to track them one by one."));
        let unnamed = PageFacts {
            endpoint_id: None,
            app_id: None,
            ..f
        };
        let text = summary_text(
            &unnamed,
            GROUPED_ENDPOINT,
            &REGROUPED,
            &row(GROUPED_ENDPOINT, 1),
        );
        assert!(text.contains("/api/v1/app/{app_id}/endpoint/{endpoint_id}/recover"));
    }

    #[test]
    fn a_resolve_says_what_resolved_it() {
        let streams = ["identity".to_string(), "hr".to_string()];
        let resolve = |event_type: &str, alert: SvixAlert| {
            let change = AlertChange {
                alert,
                firing: false,
                severity: Severity::Critical,
            };
            summary_text(
                &facts(event_type, &streams),
                "ep_1",
                &change,
                &row("ep_1", 0),
            )
        };
        let exhausted = SvixAlert::MessagesExhausted;
        assert!(resolve(REDELIVERED_EVENT, exhausted).contains("accepted on stream identity, hr"));
        assert!(resolve("ingest.message.attempt.recovered", exhausted).contains("a later attempt"));
        assert!(resolve("x", exhausted).ends_with("every lost message was acknowledged."));
        let disabled = SvixAlert::EndpointDisabled;
        assert!(resolve("ingest.endpoint.enabled", disabled)
            .contains(": enabled again (endpoint.enabled)."));
        assert!(resolve("endpoint.updated", disabled)
            .contains("check in Svix that the endpoint is enabled"));
        assert!(resolve("custom.type", disabled).contains("cleared by custom.type."));
    }
}
