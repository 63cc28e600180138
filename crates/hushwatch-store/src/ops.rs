//! What the rest of the store shares besides its rows (`store::core`):
//! the ids and keys derived from the database's salt, the dedup hash, and
//! the keyed alerts of pages that are not about a stream's silence.

use chrono::{DateTime, Utc};
use hushwatch_core::domain::alert_kind::AlertKind;
use sha2::{Digest, Sha256};

use hushwatch_core::audit::chain::to_hex;

/// Times are INTEGER epoch milliseconds so SQL comparisons are exact.
pub(super) fn millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// A stored instant back; a value out of chrono's range (never written)
/// reads as the epoch rather than failing the read.
pub(super) fn time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// [`time`] of a nullable column; out of range reads as absent.
pub(super) fn opt_time(ms: Option<i64>) -> Option<DateTime<Utc>> {
    ms.and_then(DateTime::from_timestamp_millis)
}

pub(super) fn hex32(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    to_hex(&h.finalize()[..16])
}

/// UUID-shaped text from 32 hex digits.
pub(super) fn uuid_like(hex: &str) -> String {
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The idempotency key of one page: the same for every retry of it (it
/// depends only on the row id and the database's salt), and never reused
/// by another page, even in a recreated database (new salt).
pub(super) fn page_key_for(salt: &str, id: i64) -> String {
    format!(
        "hw-{}",
        uuid_like(&hex32(&[b"page", salt.as_bytes(), &id.to_be_bytes()]))
    )
}

/// The id of one alert episode, shared by its firing and resolved pages
/// (PagerDuty dedup_key, webhook alert.id, Alertmanager label).
pub(super) fn alert_id_for(salt: &str, stream: &str, started_at: DateTime<Utc>) -> String {
    uuid_like(&hex32(&[
        b"alert",
        salt.as_bytes(),
        stream.as_bytes(),
        &millis(started_at).to_be_bytes(),
    ]))
}

/// Dedup key. Each channel (`webhook`, `report`, `svix`) is its own
/// namespace, and inside it each stream (so each verified sender): an app
/// report's id can never shadow a signed webhook's delivery id, nor the
/// reverse. Only the hash is kept, never another party's raw id.
///
/// The input starts with a 0 byte and tags, so it can never equal a
/// [`legacy_delivery_hash`] input (those start with a stream name, which is
/// never empty and never contains NUL); channel and stream hold no NUL
/// either, so the fields cannot run into each other.
pub(super) fn delivery_hash(channel: &str, stream: &str, id: &str) -> String {
    let channel = dedup_channel(channel);
    let digest = Sha256::new()
        .chain_update(b"\0dedup-v2\0")
        .chain_update(channel)
        .chain_update([0u8])
        .chain_update(stream)
        .chain_update([0u8])
        .chain_update(id)
        .finalize();
    to_hex(&digest)
}

/// The channel whose ids an event's id is deduplicated among. A heal
/// (`crosscheck`) delivers what the provider's own webhook would have, under
/// its id: it shares the `webhook` channel's ids, so the webhook arriving
/// late, or the heal repeated, is a duplicate and reaches the app once.
pub(super) fn dedup_channel(channel: &str) -> &str {
    if channel == "crosscheck" {
        "webhook"
    } else {
        channel
    }
}

/// The key before v6: stream and id only, shared by all channels. Rows the
/// v6 migration could not attribute to a channel keep it (marked
/// `channel = 'legacy'`) until pruning removes them.
pub(super) fn legacy_delivery_hash(stream: &str, id: &str) -> String {
    let digest = Sha256::new()
        .chain_update(stream)
        .chain_update([0u8])
        .chain_update(id)
        .finalize();
    to_hex(&digest)
}

/// What a page that is not about a stream's silence (e.g. a Svix
/// endpoint alert) is about.
pub(super) struct KeyedAlert<'a> {
    /// What the page is about (stored as its `as_str`, e.g. `svix_endpoint_disabled`).
    pub kind: AlertKind,
    /// Where the alert comes from (`svix`): with `key`, what the alert id
    /// is derived from (unchanged since before `kind` was stored).
    pub family: &'a str,
    /// Names the alert, so its firing and resolved pages share one alert id
    /// (PagerDuty dedup_key, webhook `alert.id`) that never collides with
    /// a silence episode's.
    pub key: &'a str,
    pub severity: &'a str,
    pub source: &'a str,
    pub endpoint_id: &'a str,
}

/// The keyed alert of a fallback-ladder page about notifier `about`.
pub(super) fn fallback_alert(about: &str) -> KeyedAlert<'_> {
    KeyedAlert {
        kind: AlertKind::Fallback,
        family: "fallback",
        key: about,
        severity: "critical",
        source: "fallback",
        endpoint_id: about,
    }
}

/// A row count from the database, as a `usize`.
pub(super) fn count(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}
