//! WorkOS webhooks: one event per POST, signed with a hex HMAC over `"<t>.<body>"`.
//!
//! Wire facts (WorkOS "Webhooks" docs; `workos-node` `signature-provider.ts` and
//! `workos-python` `webhooks/_verification.py`): the header is
//! `WorkOS-Signature: t=<unix ms>, v1=<hex>`; the MAC is HMAC-SHA256 keyed with the secret's
//! UTF-8 bytes as given (no base64, no prefix); the signed string uses `t` exactly as sent;
//! the SDKs accept 180 s of age. The body is `{id, event, data, created_at}`.

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::lenient::{lenient_record, Scalar};
use super::{bad_request, optional_instant, parse_json, push_subject, text, Rejection};
use super::{Delivery, ProviderEvent};
use crate::ingest::verified::{HeadChecked, Verified};

type HmacSha256 = Hmac<Sha256>;

/// The header WorkOS signs with (matched case-insensitively by the HTTP layer).
pub const SIGNATURE_HEADER: &str = "workos-signature";

/// Oldest (and, as the Python SDK does, furthest-ahead) signed time accepted.
pub const TOLERANCE_SECONDS: i64 = 180;

/// A `t=` value has at most this many digits (ms until the year 2286 fit in 13).
const MAX_TIMESTAMP_DIGITS: usize = 15;

/// Hex length of an HMAC-SHA256 tag.
const HEX_MAC_LEN: usize = 64;

/// Most `v1=` entries in one header. The MAC is computed once per configured key, not per
/// entry, so an entry costs one 32-byte comparison per key; the bound only keeps a header
/// of junk from being a long list. WorkOS sends one entry; 64 leaves room for any number a
/// signer would send during a rotation. A header with more is refused whole (401), never
/// cut, so a genuine entry is never silently ignored.
pub const MAX_SIGNATURES: usize = 64;

/// The endpoint secret, held as keyed HMAC state. `Debug` never shows it.
#[derive(Clone)]
pub struct WorkosKey {
    keyed_mac: HmacSha256,
}

impl std::fmt::Debug for WorkosKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WorkosKey(<redacted>)")
    }
}

impl WorkosKey {
    /// Surrounding whitespace is dropped (secrets often come from files with a newline);
    /// an empty secret is refused.
    pub fn parse(secret: &str) -> Result<WorkosKey, &'static str> {
        let secret = secret.trim();
        if secret.is_empty() {
            return Err("the WorkOS webhook secret is empty");
        }
        let keyed_mac =
            HmacSha256::new_from_slice(secret.as_bytes()).map_err(|_| "unusable secret")?;
        Ok(WorkosKey { keyed_mac })
    }

    fn mac_of(&self, timestamp: &str, body: &[u8]) -> [u8; 32] {
        let mut mac = self.keyed_mac.clone();
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        mac.finalize().into_bytes().into()
    }
}

/// The parts of a `WorkOS-Signature` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureHeader<'a> {
    timestamp: &'a str,
    signed_at_ms: i64,
    signatures: Vec<&'a str>,
}

/// Checks the header's shape and age; cheap, so it runs before the body is read.
/// `None` header → 401; no `t`, a non-integer `t` or one outside the tolerance → 400.
pub fn check_header(
    header: Option<&str>,
    now: DateTime<Utc>,
) -> Result<SignatureHeader<'_>, Rejection> {
    let header = header.ok_or(Rejection::Unauthorized(
        "missing required header WorkOS-Signature",
    ))?;
    let mut timestamp = None;
    let mut signatures = Vec::new();
    // The Node SDK splits on "," and the Python SDK on ", ": trimming each part accepts both.
    for part in header.split(',') {
        let Some((key, value)) = part.trim().split_once('=') else {
            continue;
        };
        match key {
            "t" if timestamp.is_none() => timestamp = Some(value),
            "v1" => {
                if signatures.len() == MAX_SIGNATURES {
                    return Err(Rejection::Unauthorized(
                        "WorkOS-Signature has more v1= entries than are accepted",
                    ));
                }
                signatures.push(value);
            }
            _ => {}
        }
    }
    let timestamp = timestamp
        .ok_or_else(|| Rejection::Timestamp("WorkOS-Signature has no t= timestamp".to_owned()))?;
    if timestamp.is_empty()
        || timestamp.len() > MAX_TIMESTAMP_DIGITS
        || !timestamp.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(Rejection::Timestamp(
            "WorkOS-Signature t= is not an integer of Unix milliseconds".to_owned(),
        ));
    }
    let signed_at_ms: i64 = timestamp
        .parse()
        .map_err(|_| Rejection::Timestamp("WorkOS-Signature t= is out of range".to_owned()))?;
    // Judged in milliseconds: whole seconds (rounded toward zero) let 180.999 s pass, a
    // window of about ±181 s where the docs promise 180.
    let skew_ms = now.timestamp_millis().saturating_sub(signed_at_ms);
    let tolerance_ms = TOLERANCE_SECONDS * 1000;
    if skew_ms > tolerance_ms {
        return Err(Rejection::Timestamp(format!(
            "WorkOS timestamp is {} s old; at most {TOLERANCE_SECONDS} s is accepted",
            seconds(skew_ms)
        )));
    }
    if skew_ms < -tolerance_ms {
        return Err(Rejection::Timestamp(format!(
            "WorkOS timestamp is {} s in the future; at most {TOLERANCE_SECONDS} s is accepted",
            seconds(-skew_ms)
        )));
    }
    if signatures.is_empty() {
        return Err(Rejection::Unauthorized(
            "WorkOS-Signature has no v1= signature",
        ));
    }
    Ok(SignatureHeader {
        timestamp,
        signed_at_ms,
        signatures,
    })
}

/// Milliseconds as seconds with three decimals, so a refusal just past the window does
/// not read as if it were inside it ("180.001 s", not "180 s").
fn seconds(ms: i64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// Verifies the MAC over the raw body against any of the keys (several allow rotation).
pub fn verify<'b>(
    header: &SignatureHeader<'_>,
    keys: &[WorkosKey],
    body: &'b [u8],
) -> Result<Verified<'b>, Rejection> {
    let expected: Vec<[u8; 32]> = keys
        .iter()
        .map(|k| k.mac_of(header.timestamp, body))
        .collect();
    // Every entry against every key, with no early exit: the time taken does not tell
    // which key (during a rotation) or which entry matched.
    let mut matched = subtle::Choice::from(0);
    for candidate in header
        .signatures
        .iter()
        .filter_map(|hex| decode_hex_mac(hex))
    {
        for mac in &expected {
            matched |= mac.ct_eq(&candidate);
        }
    }
    if bool::from(matched) {
        Ok(Verified::proved(body))
    } else {
        Err(Rejection::Unauthorized("no WorkOS signature matched"))
    }
}

/// WorkOS sends lowercase hex; uppercase is accepted too since it is the same tag.
fn decode_hex_mac(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != HEX_MAC_LEN {
        return None;
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
        let text = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(text, 16).ok()?;
    }
    Some(out)
}

lenient_record!(Event {
    "id" => id: Scalar,
    "event" => event: Scalar,
    "created_at" => created_at: Scalar,
    "data" => data: EventData,
});
lenient_record!(EventData {
    "object" => object: Scalar,
    "id" => id: Scalar,
    "user_id" => user_id: Scalar,
    "organization_id" => organization_id: Scalar,
});

/// Reads a verified body: `id` → delivery id, `event` → type, `created_at` → event time.
pub fn parse(body: Verified<'_>) -> Result<Delivery, Rejection> {
    let root: Event = parse_json(body.bytes())?;
    if !root.is_object {
        return Err(bad_request("body must be a JSON object"));
    }
    let id = text(&root.id).ok_or_else(|| bad_request("field `id` must be a non-empty string"))?;
    let event_type =
        text(&root.event).ok_or_else(|| bad_request("field `event` must be a non-empty string"))?;
    let event_time = optional_instant(&root.created_at, "created_at")?;
    let mut subject_ids = Vec::new();
    let data = &root.data;
    // `data.id` is a user only when `data.object` says so; WorkOS also names the user and
    // organization of memberships and directory users explicitly.
    let id_kind = match data.object.as_str() {
        Some("user") => Some("user_id"),
        Some("organization") => Some("organization_id"),
        Some("organization_membership") => Some("organization_membership_id"),
        Some("directory_user") => Some("directory_user_id"),
        _ => None,
    };
    if let Some(kind) = id_kind {
        push_subject(&mut subject_ids, kind, &data.id);
    }
    push_subject(&mut subject_ids, "user_id", &data.user_id);
    push_subject(&mut subject_ids, "organization_id", &data.organization_id);
    Ok(Delivery {
        events: vec![ProviderEvent {
            delivery_id: Some(id),
            event_type,
            event_time,
            subject_ids,
            feeds_clock: true,
        }],
        ..Delivery::default()
    })
}

/// Builds a header for tests and the `sign` helper: `t=<ms>, v1=<hex>`.
pub fn sign(key: &WorkosKey, signed_at_ms: i64, body: &[u8]) -> String {
    let t = signed_at_ms.to_string();
    let mac = key.mac_of(&t, body);
    let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
    format!("t={t}, v1={hex}")
}

impl SignatureHeader<'_> {
    /// When the sender signed, for logs and lag.
    pub fn signed_at(&self) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp_millis(self.signed_at_ms)
    }
}

/// `provider = "workos"`: the secret is read from `webhook_secret`, as a plain string (not
/// a `whsec_` key, so the standard provider's reading of that key does not apply).
pub const SPEC: super::Spec = super::Spec {
    name: "workos",
    keys: &[],
    credential_key: "webhook_secret",
    expiry_warning: None,
    intake: |secrets| {
        let (keys, refused) =
            super::accept_each(secrets, |s| WorkosKey::parse(&s).map_err(str::to_owned));
        (std::sync::Arc::new(Workos { keys }), refused)
    },
};

/// A WorkOS stream's configured keys.
pub struct Workos {
    pub keys: Vec<WorkosKey>,
}

impl super::Provider for Workos {
    fn spec(&self) -> &'static super::Spec {
        &SPEC
    }

    fn has_credentials(&self) -> bool {
        !self.keys.is_empty()
    }

    fn check_head(
        &self,
        head: &dyn super::RequestHead,
        now: DateTime<Utc>,
    ) -> Result<HeadChecked, Rejection> {
        check_header(head.header(SIGNATURE_HEADER), now).map(|_| HeadChecked::passed())
    }

    /// The HMAC over the body: the only proof that mints [`Verified`] here.
    fn check_body<'b>(
        &self,
        _checked: HeadChecked,
        head: &dyn super::RequestHead,
        now: DateTime<Utc>,
        body: &'b [u8],
    ) -> Result<Verified<'b>, Rejection> {
        // The header is read again rather than carried from `check_head`: the same text and
        // the same `now` give the same answer, and the trait stays one shape for every
        // provider.
        verify(
            &check_header(head.header(SIGNATURE_HEADER), now)?,
            &self.keys,
            body,
        )
    }

    fn parse(
        &self,
        _head: &dyn super::RequestHead,
        body: Verified<'_>,
    ) -> Result<Delivery, Rejection> {
        parse(body)
    }

    /// WorkOS sends one event per request and has proved it with an HMAC over the body: an
    /// unreadable one is still that one arrival, recorded as `unknown` rather than refused
    /// into the retry-then-disable cycle.
    fn unreadable_is_one_event(&self) -> bool {
        true
    }

    fn signature_verified(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reader over a body the tests vouch for (the credential checks have their own
    /// tests).
    fn parse(body: &[u8]) -> Result<Delivery, Rejection> {
        super::parse(Verified::proved(body))
    }

    /// The worked example in the project's wire-format reference, checked there against the
    /// WorkOS Python SDK's verification logic.
    const SECRET: &str = "example_workos_endpoint_secret";
    const BODY: &str = r#"{"id":"event_01EXAMPLE","event":"organization_membership.deleted","data":{"object":"organization_membership","id":"om_01EXAMPLE","user_id":"user_01EXAMPLE","organization_id":"org_01EXAMPLE","status":"inactive"},"created_at":"2023-11-14T22:13:20.000Z"}"#;
    const HEADER: &str =
        "t=1700000000000, v1=733fd0196f541b9ffff6dbc3c55978984644ec5c644ce7d90262e2d064f44e16";

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).unwrap()
    }

    fn keys() -> Vec<WorkosKey> {
        vec![WorkosKey::parse(SECRET).unwrap()]
    }

    #[test]
    fn reference_vector_verifies_within_tolerance() {
        let header = check_header(Some(HEADER), at(1_700_000_010_000)).unwrap();
        verify(&header, &keys(), BODY.as_bytes()).unwrap();
        assert_eq!(sign(&keys()[0], 1_700_000_000_000, BODY.as_bytes()), HEADER);
    }

    #[test]
    fn reference_vector_is_stale_after_180_seconds() {
        let err = check_header(Some(HEADER), at(1_700_000_181_000)).unwrap_err();
        assert_eq!(err.status(), 400);
        assert!(err.to_string().contains("181.000 s old"), "{err}");
        // Exactly 180 s still passes; one millisecond more does not, either way.
        check_header(Some(HEADER), at(1_700_000_180_000)).unwrap();
        check_header(Some(HEADER), at(1_699_999_820_000)).unwrap();
        let late = check_header(Some(HEADER), at(1_700_000_180_001)).unwrap_err();
        assert!(late.to_string().contains("180.001 s old"), "{late}");
        check_header(Some(HEADER), at(1_699_999_819_999)).unwrap_err();
        let ahead = check_header(Some(HEADER), at(1_699_999_819_000)).unwrap_err();
        assert!(ahead.to_string().contains("future"), "{ahead}");
    }

    #[test]
    fn tampered_body_wrong_secret_and_missing_parts_are_refused() {
        let header = check_header(Some(HEADER), at(1_700_000_000_000)).unwrap();
        let tampered = BODY.replace("deleted", "created");
        assert_eq!(
            verify(&header, &keys(), tampered.as_bytes())
                .unwrap_err()
                .status(),
            401
        );
        let other = vec![WorkosKey::parse("another_secret").unwrap()];
        assert_eq!(
            verify(&header, &other, BODY.as_bytes())
                .unwrap_err()
                .status(),
            401
        );
        assert_eq!(check_header(None, at(0)).unwrap_err().status(), 401);
        let no_t = check_header(Some("v1=00"), at(0)).unwrap_err();
        assert_eq!(no_t.status(), 400);
        let bad_t = check_header(Some("t=17e11, v1=00"), at(0)).unwrap_err();
        assert_eq!(bad_t.status(), 400);
        let no_sig = check_header(Some("t=1700000000000"), at(1_700_000_000_000)).unwrap_err();
        assert_eq!(no_sig.status(), 401);
    }

    #[test]
    fn comma_without_space_and_rotated_keys_verify() {
        let compact = HEADER.replace(", ", ",");
        let header = check_header(Some(&compact), at(1_700_000_000_000)).unwrap();
        let rotated = vec![WorkosKey::parse("old").unwrap(), keys().remove(0)];
        verify(&header, &rotated, BODY.as_bytes()).unwrap();
    }

    #[test]
    fn a_genuine_entry_after_eight_others_still_verifies() {
        let junk = format!("v1={}", "0".repeat(64));
        let mut parts = vec!["t=1700000000000".to_owned()];
        parts.extend(std::iter::repeat_n(junk.clone(), 8));
        parts.push(HEADER.split(", ").nth(1).unwrap().to_owned());
        let header_text = parts.join(", ");
        let header = check_header(Some(&header_text), at(1_700_000_000_000)).unwrap();
        verify(&header, &keys(), BODY.as_bytes()).unwrap();
        // Past the bound the header is refused, not cut.
        let mut long = vec!["t=1700000000000".to_owned()];
        long.extend(std::iter::repeat_n(junk, MAX_SIGNATURES + 1));
        let err = check_header(Some(&long.join(", ")), at(1_700_000_000_000)).unwrap_err();
        assert_eq!(err.status(), 401);
    }

    #[test]
    fn body_gives_id_type_time_and_subjects() {
        let delivery = parse(BODY.as_bytes()).unwrap();
        let event = &delivery.events[0];
        assert_eq!(event.delivery_id.as_deref(), Some("event_01EXAMPLE"));
        assert_eq!(event.event_type, "organization_membership.deleted");
        assert_eq!(event.event_time, Some(at(1_700_000_000_000)));
        assert!(event.feeds_clock);
        assert_eq!(
            event.subject_ids,
            vec![
                (
                    "organization_membership_id".to_owned(),
                    "om_01EXAMPLE".to_owned()
                ),
                ("user_id".to_owned(), "user_01EXAMPLE".to_owned()),
                ("organization_id".to_owned(), "org_01EXAMPLE".to_owned()),
            ]
        );
    }

    #[test]
    fn bodies_without_id_or_event_are_bad_requests() {
        for body in [r#"{"event":"user.created"}"#, r#"{"id":"e"}"#, "[]", "nope"] {
            assert_eq!(parse(body.as_bytes()).unwrap_err().status(), 400, "{body}");
        }
    }
}
