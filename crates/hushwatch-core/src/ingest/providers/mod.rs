//! Native intake for identity providers that do not speak Standard Webhooks.
//!
//! Each provider authenticates its deliveries differently (an HMAC over a timestamped body,
//! a fixed header value, a shared `clientState`, a channel token) and packs events
//! differently (one per request, a batch, a notification without a body). Each submodule
//! turns one authenticated request into a [`Delivery`]: the events it carries, the
//! subscription expiries it reveals, and lifecycle notices that need a person. Nothing here
//! does I/O or reads a clock: the HTTP adapter passes the instant in.
//!
//! The order is always the same: authenticate from the head (and, for HMACs, the raw
//! body) first, parse second, so an unauthenticated body never reaches a JSON parser:
//! every parser takes a [`Verified`] body, which only the checks mint (see
//! `ingest::verified`). Entra's reader is the exception by design and by type: its
//! credential is inside the body, so it takes an [`Unverified`] one.
//!
//! Adding a provider touches its new module here (its [`Spec`] and its [`Provider`]) and
//! [`ALL`] in this file; `audit::classify` only if it brings event types not yet listed
//! there. The config reader, the webhook route and the subscription watcher go through the
//! spec and the trait and name no provider. Besides code: `config/example.toml` (a test
//! requires every key to be shown), its page under `docs/src/providers/`, and tests.

pub mod auth0;
pub mod entra;
pub mod google;
pub(crate) mod lenient;
pub mod okta;
pub mod workos;

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::ingest::verified::{HeadChecked, Unverified, Verified};

/// Every provider's description, in the order `check` lists them (after `standard`, which
/// is the Standard Webhooks path and lives in `ingest::signature`). A provider is one module
/// here: its [`Spec`] goes in this list, its credentials type implements [`Provider`]. This
/// list is the only place that names every provider: `config::providers` reads a stream's
/// keys, defaults and credentials through the specs, so adding a provider does not touch it.
pub const ALL: &[&Spec] = &[
    &workos::SPEC,
    &okta::SPEC,
    &auth0::SPEC,
    &entra::SPEC,
    &google::SPEC,
];

/// Everything the config reader needs to know about a provider: its keys, its defaults, and
/// how its intake is built from the configured credentials.
#[derive(Debug)]
pub struct Spec {
    /// The `provider = "…"` word, also used in logs and messages.
    pub name: &'static str,
    /// Keys of `[streams.X.ingest]` this provider reads besides `provider` (`webhook_secret`
    /// is always allowed there); a key of another provider is an error.
    pub keys: &'static [&'static str],
    /// The key holding the credential (a string or a list, for rotation), named when none is
    /// configured.
    pub credential_key: &'static str,
    /// For a provider whose subscriptions expire, how long before expiry to warn unless the
    /// stream sets `expiry_warning`; `None` otherwise. `Some` exactly when [`Spec::keys`]
    /// holds `expiry_warning` (a test keeps the two together).
    pub expiry_warning: Option<TimeDelta>,
    /// Builds the intake when the config is read.
    pub intake: BuildIntake,
}

/// The intake over a stream's credential values (each trimmed and not empty, in config
/// order), and every value the provider refuses, left out of the intake.
pub type BuildIntake = fn(Vec<String>) -> (Arc<dyn Provider>, Refused);

/// Credential values a provider refuses: each one's position in the values it was given, and
/// why (the reason never contains the value).
pub type Refused = Vec<(usize, String)>;

/// What a provider may look at before the body is read: header values and the query.
/// The HTTP adapter implements it on the request head.
pub trait RequestHead {
    /// The value of header `name` (lower case), when present and valid text.
    fn header(&self, name: &str) -> Option<&str>;
    /// The raw query string, when the URL has one.
    fn query(&self) -> Option<&str>;
}

/// One provider's intake, implemented in its module on a value holding the stream's
/// configured credentials (its [`Spec::intake`] builds it when the config is read). The
/// webhook route calls the steps in this order and only this order, so every provider gets
/// the same guarantees (see the module doc):
/// 1. [`handshake`](Provider::handshake): a subscription handshake answered without a
///    credential (Entra's `validationToken`), before anything else;
/// 2. [`has_credentials`](Provider::has_credentials), then
///    [`check_head`](Provider::check_head): the credential, before a body byte is read;
///    it returns the [`HeadChecked`] the next step needs;
/// 3. the body is read under the shared cap and deadline, then
///    [`check_body`](Provider::check_body) turns it into a [`Verified`] body (an HMAC over
///    the raw body, a credential inside it, or the head's proof);
/// 4. [`parse`](Provider::parse) and [`relay_bodies`](Provider::relay_bodies), which take
///    only that [`Verified`] body, so the order is the compiler's, not a convention.
pub trait Provider: Send + Sync {
    fn spec(&self) -> &'static Spec;

    /// Whether any credential is configured; without one every delivery is refused.
    fn has_credentials(&self) -> bool;

    /// `Some(text)` when the request is a handshake to be answered by echoing `text` as
    /// `text/plain` (after the body is drained), with no credential and no parsing.
    fn handshake(&self, _head: &dyn RequestHead) -> Result<Option<String>, Rejection> {
        Ok(None)
    }

    /// The answer to a `GET` on the webhook route (a one-time verification challenge, as a
    /// JSON body); `None` when the provider has none, so the route answers 405.
    fn verification(&self, _head: &dyn RequestHead) -> Option<Result<String, Rejection>> {
        None
    }

    /// The credential check that needs only the head.
    fn check_head(
        &self,
        head: &dyn RequestHead,
        now: DateTime<Utc>,
    ) -> Result<HeadChecked, Rejection>;

    /// The credential check over the raw body, after [`Provider::check_head`] passed with
    /// the same `head` and `now`: the body as [`Verified`], or why not. Every provider says
    /// how (no default), so a new one cannot inherit a pass it did not earn: an HMAC over
    /// the body (WorkOS), the `clientState` inside it (Entra), or, for providers that
    /// authenticate by a header alone (Okta, Auth0, Google), the head's proof.
    fn check_body<'b>(
        &self,
        checked: HeadChecked,
        head: &dyn RequestHead,
        now: DateTime<Utc>,
        body: &'b [u8],
    ) -> Result<Verified<'b>, Rejection>;

    /// Reads an authenticated delivery. An error is a refusal unless
    /// [`Provider::unreadable_is_one_event`] says otherwise.
    fn parse(&self, head: &dyn RequestHead, body: Verified<'_>) -> Result<Delivery, Rejection>;

    /// True when an authenticated body that cannot be read is still one arrival, recorded as
    /// one `unknown` event (a provider that sends one event per request and proved the body
    /// with an HMAC). False refuses it whole, so a batch is never collapsed into one event.
    fn unreadable_is_one_event(&self) -> bool {
        false
    }

    /// How far ahead a subscription expiry can genuinely be; later ones are not stored.
    /// `None` for providers without subscriptions.
    fn max_lifetime(&self) -> Option<TimeDelta> {
        None
    }

    /// Whether an accepted delivery was proved by a signature over its body (recorded with
    /// each event), rather than by a shared value.
    fn signature_verified(&self) -> bool {
        false
    }

    /// Relay mode: the body forwarded for each event of a parsed delivery, one per event in
    /// [`Provider::parse`]'s order, for providers that batch (Okta, Auth0), so a batch is
    /// not sent to the app once per event in it. `None`: every event forwards the body as
    /// it came (one event per request, or a batch of one).
    fn relay_bodies(&self, _body: Verified<'_>) -> Option<Vec<Vec<u8>>> {
        None
    }
}

/// Longest delivery id or event type we keep; real ones are well under this.
pub const MAX_FIELD_LEN: usize = 200;

/// Most events taken from one batched delivery (Okta, Auth0, Entra). A batch past this is
/// refused whole rather than cut, so the sender retries and nothing is silently dropped.
pub const MAX_BATCH: usize = 1000;

/// One event a provider told us about, ready for the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderEvent {
    /// The provider's own id for this event: the dedup key within the stream's webhook
    /// channel. `None` where the provider gives none (an Entra notification without `id`):
    /// such events are never deduplicated, because two real changes can look identical.
    pub delivery_id: Option<String>,
    pub event_type: String,
    /// When the event happened according to the provider, where it says.
    pub event_time: Option<DateTime<Utc>>,
    /// `(kind, id)` pairs for the audit log.
    pub subject_ids: Vec<(String, String)>,
    /// False for deliveries that prove the channel exists but report no identity event
    /// (Google's `sync`): they are recorded but must not reset the silence clock.
    pub feeds_clock: bool,
}

/// A subscription or channel the app must renew; deliveries stop after `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionExpiry {
    pub subscription: String,
    pub expires_at: DateTime<Utc>,
}

/// Something about the subscription itself that a person must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LifecycleNotice {
    pub subscription: String,
    /// The provider's name for it, e.g. `reauthorizationRequired`.
    pub event: String,
}

/// What one authenticated request contributes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivery {
    pub events: Vec<ProviderEvent>,
    pub expiries: Vec<SubscriptionExpiry>,
    pub lifecycle: Vec<LifecycleNotice>,
}

/// Why a request was refused. `Display` is safe for the response body and logs: it never
/// contains a secret, a token or a signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// Credentials missing or wrong (401).
    Unauthorized(&'static str),
    /// A signed timestamp that is unparseable or outside the tolerance (400).
    Timestamp(String),
    /// Authenticated, but the body or headers are not the provider's shape (400).
    BadRequest(String),
}

impl Rejection {
    pub fn status(&self) -> u16 {
        match self {
            Rejection::Unauthorized(_) => 401,
            Rejection::Timestamp(_) | Rejection::BadRequest(_) => 400,
        }
    }

    /// The same outcome labels the Standard Webhooks path uses, so dashboards need no
    /// per-provider cases.
    pub fn outcome(&self) -> &'static str {
        match self {
            Rejection::Unauthorized(_) => "bad_signature",
            Rejection::Timestamp(_) => "stale",
            Rejection::BadRequest(_) => "error",
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Unauthorized(reason) => f.write_str(reason),
            Rejection::Timestamp(reason) | Rejection::BadRequest(reason) => f.write_str(reason),
        }
    }
}

impl std::error::Error for Rejection {}

/// Compares a configured shared value with what arrived, in time independent of where they
/// differ and of their lengths: both sides are hashed first, so only equal-length digests
/// are compared.
pub fn same_secret(expected: &str, got: &str) -> bool {
    let a = Sha256::digest(expected.as_bytes());
    let b = Sha256::digest(got.as_bytes());
    bool::from(a.ct_eq(&b))
}

/// Whether `got` equals any of the configured values. Every value is compared, whatever
/// matched before it, so the time taken does not tell which one (if any) matched: the docs
/// promise all configured values are compared during a rotation.
pub fn matches_any(expected: &[impl AsRef<str>], got: &str) -> bool {
    let got = Sha256::digest(got.as_bytes());
    let mut matched = subtle::Choice::from(0);
    for value in expected {
        matched |= Sha256::digest(value.as_ref().as_bytes()).ct_eq(&got);
    }
    bool::from(matched)
}

/// Reads each configured credential value with `read`, for a [`Spec::intake`]: the values it
/// accepts, and each one it refuses with its position and why, so the config reports every
/// bad value at once rather than the first.
fn accept_each<T>(
    values: Vec<String>,
    read: impl Fn(String) -> Result<T, String>,
) -> (Vec<T>, Refused) {
    let mut accepted = Vec::new();
    let mut refused = Vec::new();
    for (i, value) in values.into_iter().enumerate() {
        match read(value) {
            Ok(value) => accepted.push(value),
            Err(reason) => refused.push((i, reason)),
        }
    }
    (accepted, refused)
}

/// Keeps a provider-supplied label short and single-line; `None` when empty after that.
fn bounded(text: &str) -> Option<String> {
    let text = text.trim();
    if text.is_empty() || text.len() > MAX_FIELD_LEN || text.chars().any(char::is_control) {
        return None;
    }
    Some(text.to_owned())
}

fn bad_request(reason: impl Into<String>) -> Rejection {
    Rejection::BadRequest(reason.into())
}

/// Reads a JSON body into typed, bounded shapes (see `lenient`): never into a
/// `serde_json::Value`, whose size can be two orders of magnitude above the body's.
fn parse_json<'a, T: serde::Deserialize<'a>>(body: &'a [u8]) -> Result<T, Rejection> {
    serde_json::from_slice(body).map_err(|e| {
        // The parser's message names a line and column, never the content.
        bad_request(format!("body is not valid JSON: {e}"))
    })
}

/// A bounded string field, or `None`.
fn text(value: &lenient::Scalar) -> Option<String> {
    value.as_str().and_then(bounded)
}

/// An RFC 3339 instant, or `None` when absent; wrong shape is an error naming the field.
fn optional_instant(
    value: &lenient::Scalar,
    field: &str,
) -> Result<Option<DateTime<Utc>>, Rejection> {
    match value {
        lenient::Scalar::Absent | lenient::Scalar::Null => Ok(None),
        lenient::Scalar::Str(text) => DateTime::parse_from_rfc3339(text)
            .map(|t| Some(t.with_timezone(&Utc)))
            .map_err(|_| bad_request(format!("field `{field}` is not an RFC 3339 time"))),
        _ => Err(bad_request(format!(
            "field `{field}` must be an RFC 3339 string"
        ))),
    }
}

/// Adds `(kind, id)` unless it is unusable or already there.
fn push_subject(pairs: &mut Vec<(String, String)>, kind: &str, id: &lenient::Scalar) {
    let Some(id) = text(id) else {
        return;
    };
    let pair = (kind.to_owned(), id);
    if pairs.len() < crate::ingest::payload::MAX_SUBJECT_IDS && !pairs.contains(&pair) {
        pairs.push(pair);
    }
}

/// The event recorded for one record of an authenticated batch that cannot be read as an
/// event: it keeps the record's own id when it has one (so a redelivery deduplicates) and
/// any subject it names, so the batch is recorded record by record and never collapsed.
fn unknown_record(
    delivery_id: Option<String>,
    subject_ids: Vec<(String, String)>,
) -> ProviderEvent {
    ProviderEvent {
        delivery_id,
        event_type: UNKNOWN_TYPE.to_owned(),
        event_time: None,
        subject_ids,
        feeds_clock: true,
    }
}

/// The type recorded for an authenticated record whose event cannot be read.
pub const UNKNOWN_TYPE: &str = "unknown";

/// The fuzzing property for every reader here, stated once for `fuzz/` and
/// `tests/it/fuzz_seeds.rs`: the first line of `data` is used as a header value, the rest as
/// the body; nothing may panic, and whatever is accepted respects the documented bounds.
#[doc(hidden)]
pub fn fuzz_one(data: &[u8]) {
    let split = data.iter().position(|b| *b == b'\n').unwrap_or(data.len());
    let header = std::str::from_utf8(&data[..split]).unwrap_or("");
    let body = data.get(split + 1..).unwrap_or_default();
    let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default();
    let check = |delivery: Delivery| {
        assert!(delivery.events.len() <= MAX_BATCH);
        for event in &delivery.events {
            assert!(event.event_type.len() <= MAX_FIELD_LEN);
            assert!(event
                .delivery_id
                .as_ref()
                .is_none_or(|id| id.len() <= MAX_FIELD_LEN + 32));
        }
    };
    if let Ok(key) = workos::WorkosKey::parse("example_workos_endpoint_secret") {
        if let Ok(parsed) = workos::check_header(Some(header), now) {
            let _ = workos::verify(&parsed, &[key], body);
        }
    }
    // The fuzzer reaches the readers past the credential checks on purpose: what they do
    // with hostile bytes is the property, whoever vouched for them.
    let body = Verified::proved(body);
    let _ = okta::challenge_response(header);
    let _ = entra::validation_token(Some(header));
    for parsed in [
        workos::parse(body),
        okta::parse(body),
        auth0::parse(body),
        entra::parse(Unverified(body.bytes()), &["secretClientValue", "cs"]),
        google::parse(
            &google::PushHeaders {
                channel_id: Some("c"),
                channel_token: Some("t"),
                channel_expiration: Some(header),
                resource_state: Some("CREATE_USER"),
                message_number: Some("1"),
            },
            body,
        ),
    ]
    .into_iter()
    .flatten()
    {
        check(parsed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_secret_compares_whole_values() {
        assert!(same_secret("Bearer abc", "Bearer abc"));
        assert!(!same_secret("Bearer abc", "Bearer abd"));
        assert!(!same_secret("Bearer abc", "Bearer abc "));
        assert!(!same_secret("Bearer abc", ""));
    }

    #[test]
    fn matches_any_finds_a_value_in_any_position() {
        let rotation = ["Bearer old", "Bearer new", "Bearer next"];
        for got in rotation {
            assert!(matches_any(&rotation, got));
        }
        assert!(!matches_any(&rotation, "Bearer other"));
        assert!(!matches_any(&[] as &[&str], "Bearer old"));
    }

    #[test]
    fn bounded_refuses_empty_long_and_control_text() {
        assert_eq!(bounded(" user.created "), Some("user.created".to_owned()));
        assert_eq!(bounded(""), None);
        assert_eq!(bounded("a\nb"), None);
        assert_eq!(bounded(&"x".repeat(MAX_FIELD_LEN + 1)), None);
    }

    #[test]
    fn rejections_map_to_documented_statuses() {
        assert_eq!(Rejection::Unauthorized("x").status(), 401);
        assert_eq!(Rejection::Timestamp("x".into()).status(), 400);
        assert_eq!(Rejection::BadRequest("x".into()).status(), 400);
        assert_eq!(Rejection::Timestamp("x".into()).outcome(), "stale");
    }
}
