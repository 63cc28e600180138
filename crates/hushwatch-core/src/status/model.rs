//! The `/v1/status` document as types: the status page renders it and
//! `hushwatch status` reads it over HTTP, so both show exactly what the
//! JSON says. Every field a newer or older server may lack has a default.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Deserialize)]
pub struct StatusDoc {
    pub now: DateTime<Utc>,
    #[serde(default = "yes")]
    pub storage_ok: bool,
    #[serde(default)]
    pub streams: Vec<StreamStatus>,
    #[serde(default)]
    pub notifications: Option<Notifications>,
    #[serde(default)]
    pub svix: Option<Svix>,
    #[serde(default)]
    pub audit: Option<Audit>,
    /// The replicas on the shared database and the housekeeping leader.
    #[serde(default)]
    pub replicas: Option<Replicas>,
    /// Operator silences (active or future) and acknowledgements; present
    /// only when there are some.
    #[serde(default)]
    pub operator: Option<Operator>,
    /// The watchdog's verdict (storage failing, a page failed for good, a
    /// reload failed, no leader): each reason also pages.
    #[serde(default)]
    pub degraded: bool,
    #[serde(default)]
    pub degraded_reasons: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Replicas {
    /// The replica that answered.
    #[serde(default, rename = "self")]
    pub this: String,
    /// False on SQLite: one process, always its own leader.
    #[serde(default)]
    pub shared: bool,
    #[serde(default)]
    pub replicas: Vec<Replica>,
    #[serde(default)]
    pub leader: Option<Leader>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Replica {
    pub id: String,
    #[serde(default)]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub last_seen: Option<DateTime<Utc>>,
    #[serde(default)]
    pub leader: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Leader {
    #[serde(default)]
    pub replica: Option<String>,
    #[serde(default)]
    pub term: i64,
    #[serde(default)]
    pub lease_until: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Operator {
    #[serde(default)]
    pub silences: Vec<OperatorSilence>,
    #[serde(default)]
    pub acknowledgements: Vec<Acknowledgement>,
    /// The store could not be read: nobody can tell who is on what.
    #[serde(default)]
    pub error: Option<String>,
}

/// A stream's `acknowledged` block: who took its current firing episode.
#[derive(Debug, Clone, Deserialize)]
pub struct StreamAck {
    pub by: String,
    pub at: DateTime<Utc>,
    #[serde(default)]
    pub comment: String,
}

/// A stream's `silenced` block: the active silence holding its pages.
#[derive(Debug, Clone, Deserialize)]
pub struct StreamSilence {
    pub id: i64,
    pub until: DateTime<Utc>,
    pub by: String,
    #[serde(default)]
    pub comment: String,
    #[serde(default)]
    pub kinds: Vec<String>,
    /// True when it holds the stream's "silent too long" page; false when
    /// only its other pages (Svix, reconciliation, …) are held.
    #[serde(default = "yes")]
    pub quiet_page: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct OperatorSilence {
    pub id: i64,
    pub streams: Vec<String>,
    /// Page kind patterns (`["*"]`: every kind).
    #[serde(default)]
    pub kinds: Vec<String>,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub comment: String,
    pub created_by: String,
    pub active: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Acknowledgement {
    pub stream: String,
    pub created_by: String,
    pub comment: String,
    pub created_at: DateTime<Utc>,
}

/// Longest author and comment a stream's row shows (the API takes up to
/// 1024 bytes of each; the operator section shows them whole).
pub const AUTHOR_CHARS: usize = 40;
pub const COMMENT_CHARS: usize = 120;

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
pub struct StreamStatus {
    pub name: String,
    pub calendar: String,
    #[serde(default)]
    pub timezone: Option<String>,
    pub last_event_at: Option<DateTime<Utc>>,
    pub last_event_type: Option<String>,
    #[serde(default)]
    pub newest_event_time: Option<DateTime<Utc>>,
    pub watching_since: Option<DateTime<Utc>>,
    pub business_silence_seconds: i64,
    pub threshold_seconds: i64,
    #[serde(default)]
    pub max_silence_seconds: Option<i64>,
    pub fires_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub reason: Option<String>,
    pub state: String,
    pub firing_since: Option<DateTime<Utc>>,
    #[serde(default)]
    pub fires_in_seconds: Option<i64>,
    #[serde(default = "yes")]
    pub in_business_hours: bool,
    #[serde(default)]
    pub clock_paused_until: Option<DateTime<Utc>>,
    /// `configured` or `learned` (issue #18); absent from older servers.
    #[serde(default)]
    pub threshold_source: Option<String>,
    #[serde(default)]
    pub configured_threshold_seconds: Option<i64>,
    #[serde(default)]
    pub learned: Option<LearnedThreshold>,
    /// Only for a stream with `[streams.X.reconcile]`.
    #[serde(default)]
    pub reconciliation: Option<ReconciliationStatus>,
    /// Who acknowledged the current firing episode (issue #27).
    #[serde(default)]
    pub acknowledged: Option<StreamAck>,
    /// The active operator silence over this stream's pages (issue #27).
    #[serde(default)]
    pub silenced: Option<StreamSilence>,
    /// Only for a stream with `[streams.X.forward]` (relay mode), or one
    /// whose `[forward]` was removed while relay rows are still stored.
    #[serde(default)]
    pub forward: Option<ForwardStatus>,
    /// The relay's health (issue #44), beside `forward`: whether it pages,
    /// why, and the command that acts on it (`status::relay`).
    #[serde(default)]
    pub relay: Option<RelayStatus>,
    /// Only for a stream with `[streams.X.crosscheck]` (issue #45): the
    /// poll's health and the open findings (`status::crosscheck`).
    #[serde(default)]
    pub crosscheck: Option<CrosscheckStatus>,
}

/// Instants in the `/v1/status` document's one format: RFC 3339 in UTC
/// with milliseconds (`2026-12-04T10:45:00.000Z`).
mod millis {
    use chrono::{DateTime, SecondsFormat, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Millis, true)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        Option::<DateTime<Utc>>::deserialize(d)
    }
}

/// A stream's `crosscheck` block: `state` is the worst of `problems`
/// (`status::crosscheck::STATES`); anything but `ok` makes the stream not
/// OK on the page, in the banner and in `hushwatch status`'s exit code.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CrosscheckStatus {
    /// `clerk` or `workos`.
    pub provider: String,
    pub state: String,
    pub problems: Vec<String>,
    /// A refused key or an open missed revocation: what pages critical.
    pub critical: bool,
    /// Why the poll reads as failing (the `crosscheck_failing` page's words).
    pub reason: Option<String>,
    #[serde(with = "millis")]
    pub last_success: Option<DateTime<Utc>>,
    /// The last failure's text (never the key), cleared by a success.
    pub last_error: Option<String>,
    /// When the next poll is due (now when one is overdue).
    #[serde(with = "millis")]
    pub next_poll: Option<DateTime<Utc>>,
    /// When the last complete poll finished.
    #[serde(with = "millis")]
    pub last_poll: Option<DateTime<Utc>>,
    /// Failed polls in a row.
    pub failures: u64,
    /// Findings neither healed nor acknowledged.
    pub open_findings: u64,
    pub open_revocations: u64,
    pub open_grants: u64,
    pub open_other: u64,
    /// Findings healed so far (`heal = true`).
    pub healed: u64,
    /// The newest open findings, at most `status::crosscheck::EXAMPLES`.
    pub findings: Vec<CrosscheckFinding>,
    /// What to run about the worst problem, exactly as printed.
    pub command: Option<String>,
}

/// One finding in a `crosscheck` block.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CrosscheckFinding {
    pub key: String,
    /// `revoke`, `grant` or `other`.
    pub direction: String,
    pub event_type: String,
    pub subject: String,
    pub organization: Option<String>,
    pub provider_id: Option<String>,
    /// WorkOS: when the provider logged it.
    #[serde(with = "millis")]
    pub at: Option<DateTime<Utc>>,
    /// Clerk: the listings it changed between.
    #[serde(with = "millis")]
    pub from: Option<DateTime<Utc>>,
    #[serde(with = "millis")]
    pub until: Option<DateTime<Utc>>,
    #[serde(with = "millis")]
    pub found_at: Option<DateTime<Utc>>,
    /// `open`, `healed` or `acknowledged`.
    pub state: String,
}

/// A stream's `relay` block: `state` is the worst of `problems`
/// (`status::relay::STATES`); anything but `ok` makes the stream not OK
/// on the page, in the banner and in `hushwatch status`'s exit code.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RelayStatus {
    pub state: String,
    pub problems: Vec<String>,
    /// What to run about the worst problem, exactly as printed.
    pub command: Option<String>,
    pub pending: u64,
    pub held: u64,
    pub dead_letters: u64,
    pub consecutive_failures: u64,
    pub failing_since: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    /// When the relay tries next without anyone acting.
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub oldest_pending: Option<OldestPending>,
    pub oldest_pending_at: Option<DateTime<Utc>>,
    /// The oldest revocation pending, held or dead: `critical_after` ages it.
    pub oldest_revocation_at: Option<DateTime<Utc>>,
    pub critical_after_seconds: i64,
    pub last_delivered_at: Option<DateTime<Utc>>,
}

/// The oldest event waiting for the app, named.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OldestPending {
    pub event_type: String,
    #[serde(default)]
    pub subject: Option<String>,
    #[serde(default)]
    pub delivery_id: String,
    pub received_at: DateTime<Utc>,
}

/// A stream's relay state, as `/v1/status` reports it.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ForwardStatus {
    /// False: the stream no longer has `[forward]` but still has stored
    /// relay rows (then `app`, `ordered` and `clock` are absent). Absent
    /// from older servers, which reported forwarding streams only.
    pub configured: bool,
    /// The app's handler as `scheme://host:port` (its path may hold a token).
    pub app: String,
    pub ordered: bool,
    /// `delivered` or `received`: what moves the silence clock.
    pub clock: String,
    pub pending: u64,
    pub oldest_pending_at: Option<DateTime<Utc>>,
    pub last_delivered_at: Option<DateTime<Utc>>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    pub consecutive_failures: u64,
    pub failing_since: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub dead_letters: u64,
    pub error: Option<String>,
}

impl Default for ForwardStatus {
    fn default() -> Self {
        ForwardStatus {
            configured: true,
            app: String::new(),
            ordered: false,
            clock: String::new(),
            pending: 0,
            oldest_pending_at: None,
            last_delivered_at: None,
            last_attempt_at: None,
            consecutive_failures: 0,
            failing_since: None,
            last_error: None,
            dead_letters: 0,
            error: None,
        }
    }
}

impl ForwardStatus {
    /// Who the relay delivers to, for people: the app, or that nobody is
    /// configured any more.
    pub fn target(&self) -> String {
        if self.configured {
            format!("relay to {}", self.app)
        } else {
            "relay with no [forward] configured (stored events wait for it)".to_string()
        }
    }

    /// One line for people: "3 pending (oldest 10:02 UTC), 5 failures in a
    /// row since …: HTTP 502; 1 dead letter; last delivered …".
    pub fn words(&self, when: impl Fn(DateTime<Utc>) -> String) -> String {
        if let Some(e) = &self.error {
            return format!("{}: {e}", self.target());
        }
        let mut parts = vec![match (self.pending, self.oldest_pending_at) {
            (0, _) | (_, None) => "nothing pending".to_string(),
            (n, Some(t)) => format!("{n} pending (oldest received {})", when(t)),
        }];
        if self.consecutive_failures > 0 {
            parts.push(format!(
                "{} failed attempt(s) in a row{}{}",
                self.consecutive_failures,
                self.failing_since
                    .map(|t| format!(" since {}", when(t)))
                    .unwrap_or_default(),
                self.last_error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ));
        }
        if self.dead_letters > 0 {
            parts.push(format!(
                "{} dead letter(s) (replay them)",
                self.dead_letters
            ));
        }
        parts.push(match self.last_delivered_at {
            Some(t) => format!("last delivered {}", when(t)),
            None => "nothing delivered yet".to_string(),
        });
        format!("{}: {}", self.target(), parts.join("; "))
    }

    /// The app is failing, events were given up, or events wait for a
    /// `[forward]` that was removed. Once such a stream has nothing left
    /// (its failure run is kept in the store, with nothing to end it) it
    /// reads as settled rather than red for ever.
    pub fn alerting(&self) -> bool {
        if !self.configured {
            return self.pending > 0 || self.dead_letters > 0 || self.error.is_some();
        }
        self.consecutive_failures > 0 || self.dead_letters > 0 || self.error.is_some()
    }
}

/// What a `learned` threshold came from.
#[derive(Debug, Clone, Deserialize)]
pub struct LearnedThreshold {
    pub quantile: f64,
    pub factor: f64,
    pub usual_gap_seconds: f64,
    pub gaps: u64,
    pub days: i64,
}

/// A stream's reconciliation job, as `/v1/status` reports it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ReconciliationStatus {
    pub every_seconds: i64,
    pub grace_seconds: i64,
    /// `ok` or `missing`.
    pub state: String,
    pub last_report_id: Option<String>,
    pub last_finished_at: Option<DateTime<Utc>>,
    pub last_drift: Option<BTreeMap<String, u64>>,
    pub due_at: Option<DateTime<Utc>>,
    pub missing_since: Option<DateTime<Utc>>,
    pub error: Option<String>,
}

impl StreamStatus {
    /// "learned threshold 1h (2× the 0.999 quantile 30m of 1204 gaps over
    /// 28 days; configured 6h)", for a learned threshold only.
    pub fn learned_note(&self) -> Option<String> {
        use super::format::human_duration;
        use chrono::TimeDelta;
        let l = self.learned.as_ref()?;
        let configured = self.configured_threshold_seconds?;
        Some(format!(
            "learned threshold {} ({}× the {} quantile {} of {} gaps over {} days; configured {})",
            human_duration(TimeDelta::seconds(self.threshold_seconds)),
            l.factor,
            l.quantile,
            human_duration(TimeDelta::milliseconds((l.usual_gap_seconds * 1e3) as i64)),
            l.gaps,
            l.days,
            human_duration(TimeDelta::seconds(configured)),
        ))
    }

    pub fn firing(&self) -> bool {
        self.state == "firing"
    }

    /// The stream's reconciliation report is overdue (it pages
    /// `reconciliation_missing`), or its state cannot be read.
    pub fn reconciliation_missing(&self) -> bool {
        self.reconciliation
            .as_ref()
            .is_some_and(|r| r.missing_since.is_some() || r.error.is_some())
    }

    /// The stream is cross-checked and the cross-check is not OK: its poll
    /// is failing or findings are open (`status::crosscheck`).
    pub fn crosscheck_alerting(&self) -> bool {
        self.crosscheck.as_ref().is_some_and(|c| !c.ok())
    }

    /// The stream relays and its relay is not OK (`status::relay`).
    pub fn relay_alerting(&self) -> bool {
        self.relay.as_ref().is_some_and(|r| !r.ok())
    }

    /// The acknowledgement, only while the stream fires (an older server
    /// or a race may still send one for a resolved episode).
    pub fn ack(&self) -> Option<&StreamAck> {
        self.acknowledged.as_ref().filter(|_| self.firing())
    }

    /// "acknowledged by ana at Tue 13:10 Asia/Tokyo · 04:10 UTC" and
    /// "silenced until Tue 15:00 Asia/Tokyo · 06:00 UTC by bob", with the
    /// comment; request text as sent (renderers drop hidden characters).
    pub fn who_is_on_it(&self, now: DateTime<Utc>) -> Vec<String> {
        use super::format::{short, zoned_and_utc};
        let tz = self.tz();
        let quote = |c: &str| {
            let c = short(c.trim(), COMMENT_CHARS);
            if c.is_empty() {
                String::new()
            } else {
                format!(": \u{201c}{c}\u{201d}")
            }
        };
        let mut out = Vec::new();
        if let Some(a) = self.ack() {
            out.push(format!(
                "acknowledged by {} at {}{}",
                short(&a.by, AUTHOR_CHARS),
                zoned_and_utc(a.at, tz, now),
                quote(&a.comment)
            ));
        }
        if let Some(s) = &self.silenced {
            out.push(format!(
                "{} until {} by {}{}",
                s.what(),
                zoned_and_utc(s.until, tz, now),
                short(&s.by, AUTHOR_CHARS),
                quote(&s.comment)
            ));
        }
        out
    }

    /// The calendar's zone; UTC when the server did not say or named one
    /// this build does not know.
    pub fn tz(&self) -> chrono_tz::Tz {
        self.timezone
            .as_deref()
            .and_then(|z| z.parse().ok())
            .unwrap_or(chrono_tz::UTC)
    }

    /// Business silence as a fraction of the threshold, 0..=1.
    pub fn fraction(&self) -> f64 {
        if self.threshold_seconds <= 0 {
            return 1.0;
        }
        (self.business_silence_seconds as f64 / self.threshold_seconds as f64).clamp(0.0, 1.0)
    }
}

impl StreamSilence {
    /// "silenced", "silenced (pages: silence)" or, when the quiet page
    /// still goes out, "other pages silenced (svix_*)".
    pub fn what(&self) -> String {
        let all = self.kinds.is_empty() || self.kinds.iter().any(|k| k == "*");
        match (self.quiet_page, all) {
            (true, true) => "silenced".to_string(),
            (true, false) => format!("silenced (pages: {})", self.kinds.join(", ")),
            (false, _) => format!("other pages silenced ({})", self.kinds.join(", ")),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Notifications {
    #[serde(default)]
    pub notifiers: BTreeMap<String, NotifierCounts>,
    #[serde(default)]
    pub failed_total: u64,
    #[serde(default)]
    pub recent_failures: Vec<FailedPage>,
    #[serde(default)]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct NotifierCounts {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub pending: u64,
    #[serde(default)]
    pub delivered: u64,
    #[serde(default)]
    pub failed: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FailedPage {
    #[serde(default)]
    pub stream: Option<String>,
    pub notifier: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub kind: String,
    pub at: DateTime<Utc>,
    #[serde(default)]
    pub attempts: i64,
    #[serde(default)]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Svix {
    #[serde(default)]
    pub endpoints: Vec<SvixEndpoint>,
    /// Sources past the per-source endpoint cap (their further endpoints
    /// share the `other` row).
    #[serde(default)]
    pub grouped_sources: Vec<String>,
    #[serde(default)]
    pub max_endpoints_per_source: u64,
    #[serde(default)]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SvixEndpoint {
    pub source: String,
    pub endpoint_id: String,
    #[serde(default)]
    pub endpoint_uid: Option<String>,
    #[serde(default)]
    pub stream: Option<String>,
    pub state: String,
    #[serde(default)]
    pub disabled: Option<SvixDisabled>,
    #[serde(default)]
    pub failing_messages: u64,
    #[serde(default)]
    pub lost_messages: Vec<LostMessage>,
    /// Lost messages whose svix-id was later accepted on a stream the
    /// endpoint feeds (issue 31).
    #[serde(default)]
    pub recovered_total: u64,
    /// Matched by neither id nor uid although the source maps endpoints.
    #[serde(default)]
    pub unmapped: bool,
}

impl SvixEndpoint {
    /// States that page someone (the endpoint stopped, or messages are lost).
    pub fn alerting(&self) -> bool {
        matches!(self.state.as_str(), "disabled" | "exhausted")
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct SvixDisabled {
    #[serde(default)]
    pub trigger: String,
    #[serde(default)]
    pub since: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct LostMessage {
    pub msg_id: String,
    #[serde(default)]
    pub status_code: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Audit {
    #[serde(default)]
    pub enabled: bool,
    #[serde(default)]
    pub head_seq: i64,
    #[serde(default)]
    pub head_hash: String,
    #[serde(default)]
    pub last_checkpoint: Option<Checkpoint>,
    #[serde(default)]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Checkpoint {
    pub seq: i64,
    pub at: DateTime<Utc>,
    pub signed: bool,
}

impl StatusDoc {
    /// What `hushwatch status` exits with: 0 all ok, 1 something that
    /// pages (a silent stream, a relay that is not OK, a cross-check that
    /// is failing or has open findings, a reconciliation
    /// report overdue, a disabled or exhausted Svix endpoint, hushwatch
    /// degraded) or storage failing.
    pub fn all_ok(&self) -> bool {
        self.storage_ok
            && !self.streams.iter().any(StreamStatus::firing)
            && !self.streams.iter().any(StreamStatus::relay_alerting)
            && !self.streams.iter().any(StreamStatus::crosscheck_alerting)
            && !self
                .streams
                .iter()
                .any(StreamStatus::reconciliation_missing)
            && !self.degraded
            && !self
                .svix
                .as_ref()
                .is_some_and(|s| s.endpoints.iter().any(SvixEndpoint::alerting))
    }
}
