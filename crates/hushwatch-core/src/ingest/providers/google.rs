//! Google Workspace Admin SDK Reports push notifications (the Activities resource).
//!
//! Wire facts (Google Admin SDK docs, Reports API "Push notifications"): each message is a
//! POST whose meaning is in headers: `X-Goog-Channel-ID`, `X-Goog-Channel-Token` (the token
//! set when the channel was created, echoed on every message), `X-Goog-Channel-Expiration`
//! (an RFC 1123 date, when present), `X-Goog-Resource-State` (`sync` right after the channel
//! is created, otherwise the event name such as `CREATE_USER`) and
//! `X-Goog-Message-Number`. The body is an Activity resource
//! (`{kind, id: {time, uniqueQualifier, applicationName, customerId}, actor, events[]}`).
//! Channels live at most about six hours and must be re-created: their expiry is exactly
//! the silent failure worth warning about.

use chrono::{DateTime, TimeDelta, Utc};

use super::lenient::{lenient_record, Scalar};
use super::{bad_request, bounded, matches_any, parse_json};
use super::{Delivery, ProviderEvent, Rejection, SubscriptionExpiry};
use crate::ingest::verified::{HeadChecked, Verified};

/// The longest a channel can live, so the longest ahead an `X-Goog-Channel-Expiration`
/// can genuinely be. Google's push channels take a requested `expiration` that each API
/// caps: about six hours by default for the Admin SDK Reports channels
/// (https://developers.google.com/admin-sdk/reports/v1/guides/push), and at most one
/// week for any Google API (Drive's file channels, the longest: "604800 seconds",
/// https://developers.google.com/drive/api/guides/push). An expiry further ahead than
/// this is forged or broken and is not stored: it would pin the expiry warning off.
pub const MAX_CHANNEL_LIFETIME: TimeDelta = TimeDelta::days(7);

lenient_record!(Activity { "id" => id: ActivityId });
lenient_record!(ActivityId { "time" => time: Scalar });

/// The resource state sent once when a channel is created.
pub const SYNC_STATE: &str = "sync";

/// The push headers of one message, as the HTTP layer found them.
#[derive(Debug, Clone, Copy, Default)]
pub struct PushHeaders<'a> {
    pub channel_id: Option<&'a str>,
    pub channel_token: Option<&'a str>,
    pub channel_expiration: Option<&'a str>,
    pub resource_state: Option<&'a str>,
    pub message_number: Option<&'a str>,
}

/// Checks the channel token against the configured values; from the head alone.
pub fn authorize(expected: &[impl AsRef<str>], headers: &PushHeaders<'_>) -> Result<(), Rejection> {
    let got = headers.channel_token.ok_or(Rejection::Unauthorized(
        "missing X-Goog-Channel-Token header",
    ))?;
    if matches_any(expected, got) {
        Ok(())
    } else {
        Err(Rejection::Unauthorized(
            "X-Goog-Channel-Token does not match",
        ))
    }
}

/// Reads an authorized message. `sync` is recorded but does not feed the clock: it proves
/// the channel was made, not that identity events flow.
pub fn parse(headers: &PushHeaders<'_>, body: Verified<'_>) -> Result<Delivery, Rejection> {
    let body = body.bytes();
    let channel = headers
        .channel_id
        .and_then(bounded)
        .ok_or_else(|| bad_request("missing X-Goog-Channel-ID header"))?;
    let state = headers
        .resource_state
        .and_then(bounded)
        .ok_or_else(|| bad_request("missing X-Goog-Resource-State header"))?;
    // Parsed, not kept as text: `1`, `01` and `001` are the same message, and keying the
    // text would let each spelling pass deduplication as a new delivery.
    let number: u64 = headers
        .message_number
        .map(str::trim)
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| bad_request("X-Goog-Message-Number must be a decimal number"))?;
    let mut delivery = Delivery::default();
    if let Some(expiration) = headers.channel_expiration {
        let expires_at = DateTime::parse_from_rfc2822(expiration.trim())
            .map_err(|_| bad_request("X-Goog-Channel-Expiration is not an RFC 1123 date"))?
            .with_timezone(&Utc);
        delivery.expiries.push(SubscriptionExpiry {
            subscription: channel.clone(),
            expires_at,
        });
    }
    let is_sync = state == SYNC_STATE;
    // `sync` messages have no body; other messages carry the Activity, whose `id.time` is
    // the event's own time. A body that is not an Activity is still an authorized arrival.
    let activity: Option<Activity> = if is_sync || body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        Some(parse_json(body)?)
    };
    let event_time = activity
        .as_ref()
        .and_then(|a| a.id.time.as_str())
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc));
    delivery.events.push(ProviderEvent {
        // The message number is unique and increasing per channel, so the pair names one
        // message across retries.
        delivery_id: Some(format!("{channel}:{number}")),
        event_type: state,
        event_time,
        // Activities name users by e-mail address (personal data), so no subject is kept.
        subject_ids: Vec::new(),
        feeds_clock: !is_sync,
    });
    Ok(delivery)
}

/// `provider = "google"`: the channel token, and how early to warn of expiry.
pub const SPEC: super::Spec = super::Spec {
    name: "google",
    keys: &["channel_token", "expiry_warning"],
    credential_key: "channel_token",
    // Channels live at most about six hours, so an hour is proportionate.
    expiry_warning: Some(TimeDelta::hours(1)),
    intake: |channel_token| (std::sync::Arc::new(Google { channel_token }), Vec::new()),
};

impl<'a> PushHeaders<'a> {
    /// The push headers of a request head.
    pub fn of(head: &'a dyn super::RequestHead) -> Self {
        PushHeaders {
            channel_id: head.header("x-goog-channel-id"),
            channel_token: head.header("x-goog-channel-token"),
            channel_expiration: head.header("x-goog-channel-expiration"),
            resource_state: head.header("x-goog-resource-state"),
            message_number: head.header("x-goog-message-number"),
        }
    }
}

/// A Google stream's configured channel tokens.
pub struct Google {
    pub channel_token: Vec<String>,
}

impl super::Provider for Google {
    fn spec(&self) -> &'static super::Spec {
        &SPEC
    }

    fn has_credentials(&self) -> bool {
        !self.channel_token.is_empty()
    }

    fn check_head(
        &self,
        head: &dyn super::RequestHead,
        _now: DateTime<Utc>,
    ) -> Result<HeadChecked, Rejection> {
        authorize(&self.channel_token, &PushHeaders::of(head)).map(|()| HeadChecked::passed())
    }

    /// Google signs nothing: the channel token checked on the head vouches for the body
    /// that came with it.
    fn check_body<'b>(
        &self,
        checked: HeadChecked,
        _head: &dyn super::RequestHead,
        _now: DateTime<Utc>,
        body: &'b [u8],
    ) -> Result<Verified<'b>, Rejection> {
        Ok(Verified::by_head(checked, body))
    }

    fn parse(
        &self,
        head: &dyn super::RequestHead,
        body: Verified<'_>,
    ) -> Result<Delivery, Rejection> {
        parse(&PushHeaders::of(head), body)
    }

    fn max_lifetime(&self) -> Option<TimeDelta> {
        Some(MAX_CHANNEL_LIFETIME)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reader over a body the tests vouch for (the token check has its own tests).
    fn parse(headers: &PushHeaders<'_>, body: &[u8]) -> Result<Delivery, Rejection> {
        super::parse(headers, Verified::proved(body))
    }

    fn headers<'a>(state: &'a str, number: &'a str) -> PushHeaders<'a> {
        PushHeaders {
            channel_id: Some("reportsApiId"),
            channel_token: Some("tok-1"),
            channel_expiration: Some("Tue, 01 Dec 2026 16:00:00 GMT"),
            resource_state: Some(state),
            message_number: Some(number),
        }
    }

    /// Shaped like the Activity resource in the Reports API reference (values invented).
    const ACTIVITY: &str = r#"{"kind":"admin#reports#activity",
      "id":{"time":"2026-12-01T10:00:00.000Z","uniqueQualifier":"-1234567890","applicationName":"admin","customerId":"C01abc"},
      "actor":{"callerType":"USER","email":"admin@example.com","profileId":"1234"},
      "events":[{"type":"USER_SETTINGS","name":"DELETE_USER","parameters":[{"name":"USER_EMAIL","value":"gone@example.com"}]}]}"#;

    #[test]
    fn event_messages_feed_the_clock_with_expiry() {
        let h = headers("DELETE_USER", "42");
        authorize(&["tok-1"], &h).unwrap();
        let delivery = parse(&h, ACTIVITY.as_bytes()).unwrap();
        let event = &delivery.events[0];
        assert_eq!(event.event_type, "DELETE_USER");
        assert_eq!(event.delivery_id.as_deref(), Some("reportsApiId:42"));
        assert!(event.feeds_clock);
        assert_eq!(
            event.event_time.unwrap().to_rfc3339(),
            "2026-12-01T10:00:00+00:00"
        );
        assert!(event.subject_ids.is_empty(), "no e-mail addresses kept");
        assert_eq!(
            delivery.expiries[0].expires_at.to_rfc3339(),
            "2026-12-01T16:00:00+00:00"
        );
    }

    #[test]
    fn message_numbers_are_keyed_by_value_not_spelling() {
        let ids: Vec<String> = ["1", "01", "001", " 1"]
            .iter()
            .map(|n| {
                parse(&headers("DELETE_USER", n), b"").unwrap().events[0]
                    .delivery_id
                    .clone()
                    .unwrap()
            })
            .collect();
        assert!(ids.iter().all(|id| id == "reportsApiId:1"), "{ids:?}");
    }

    #[test]
    fn sync_is_recorded_but_does_not_feed_the_clock() {
        let delivery = parse(&headers("sync", "1"), b"").unwrap();
        assert!(!delivery.events[0].feeds_clock);
        assert_eq!(delivery.events[0].event_type, "sync");
    }

    #[test]
    fn wrong_or_missing_token_is_unauthorized() {
        let mut h = headers("sync", "1");
        assert_eq!(authorize(&["other"], &h).unwrap_err().status(), 401);
        h.channel_token = None;
        assert_eq!(authorize(&["tok-1"], &h).unwrap_err().status(), 401);
    }

    #[test]
    fn malformed_headers_are_bad_requests() {
        let mut h = headers("DELETE_USER", "x1");
        assert_eq!(parse(&h, ACTIVITY.as_bytes()).unwrap_err().status(), 400);
        h.message_number = Some("99999999999999999999999");
        assert_eq!(parse(&h, ACTIVITY.as_bytes()).unwrap_err().status(), 400);
        h.message_number = Some("-1");
        assert_eq!(parse(&h, ACTIVITY.as_bytes()).unwrap_err().status(), 400);
        h.message_number = Some("7");
        h.channel_expiration = Some("soon");
        assert_eq!(parse(&h, ACTIVITY.as_bytes()).unwrap_err().status(), 400);
        h.channel_expiration = None;
        h.resource_state = None;
        assert_eq!(parse(&h, ACTIVITY.as_bytes()).unwrap_err().status(), 400);
    }
}
