//! Standard Webhooks / Svix signature verification (`v1` HMAC-SHA256 entries).
//!
//! A delivery carries three headers (`svix-*` from Clerk and Svix, `webhook-*` from other
//! Standard Webhooks senders). The sender signs `"{id}.{timestamp}.{raw body}"` with
//! HMAC-SHA256 and sends one or more space-separated `version,base64` entries. We accept the
//! request when the timestamp is within [`TOLERANCE_SECONDS`] of our clock and any `v1`
//! entry matches any configured key. `v1a` (ed25519) entries are skipped: we hold only
//! HMAC secrets, which is also what the Standard Webhooks reference verifiers do.

use std::fmt;

use base64::alphabet;
use base64::engine::general_purpose::STANDARD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::verified::Verified;

type HmacSha256 = Hmac<Sha256>;

/// Maximum distance, in either direction, between the signed timestamp and our clock.
/// Matches the Standard Webhooks and Svix libraries; exactly 300 s still passes.
pub const TOLERANCE_SECONDS: i64 = 300;

/// Prefix of symmetric Standard Webhooks secrets.
const SECRET_PREFIX: &str = "whsec_";

/// The only signature version an HMAC key can check.
const HMAC_VERSION: &str = "v1";

/// Length of an HMAC-SHA256 tag in bytes.
const MAC_LEN: usize = 32;

/// Length of a padded standard-base64 HMAC-SHA256 tag. Entries of any other length cannot
/// match, so they are dropped before decoding; this keeps long junk headers cheap.
const ENCODED_MAC_LEN: usize = 44;

/// The Standard Webhooks Python library adds missing `=` padding before decoding, so a
/// secret that works there must work here too: padding is optional when decoding secrets.
const SECRET_ENGINE: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// HMAC key from a `whsec_…` secret.
///
/// Holds the keyed HMAC state rather than the raw bytes, so each message only clones it.
/// `Debug` is written by hand and never shows key material.
#[derive(Clone)]
pub struct SecretKey {
    keyed_mac: HmacSha256,
}

impl SecretKey {
    /// Parses a Standard Webhooks secret: the `whsec_` prefix is optional, the rest is
    /// standard-alphabet base64 with or without `=` padding. Surrounding whitespace is
    /// ignored because secrets often arrive from files or environment variables with a
    /// trailing newline. No minimum length is enforced: Svix's own documentation uses an
    /// 18-byte key.
    pub fn parse(secret: &str) -> Result<SecretKey, SecretError> {
        let trimmed = secret.trim();
        let encoded = trimmed.strip_prefix(SECRET_PREFIX).unwrap_or(trimmed);
        if encoded.is_empty() {
            return Err(SecretError::Empty);
        }
        let key_bytes = SECRET_ENGINE
            .decode(encoded)
            .map_err(|_| SecretError::NotBase64)?;
        if key_bytes.is_empty() {
            return Err(SecretError::Empty);
        }
        // HMAC accepts keys of any length, so this error cannot happen; mapping it instead
        // of unwrapping keeps parsing panic-free.
        let keyed_mac =
            HmacSha256::new_from_slice(&key_bytes).map_err(|_| SecretError::NotBase64)?;
        Ok(SecretKey { keyed_mac })
    }

    /// HMAC-SHA256 over `"{msg_id}.{timestamp}.{body}"`, fed in parts so the body is not
    /// copied.
    fn mac_of(&self, msg_id: &str, timestamp: &str, body: &[u8]) -> [u8; MAC_LEN] {
        let mut mac = self.keyed_mac.clone();
        mac.update(msg_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        mac.finalize().into_bytes().into()
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(<redacted>)")
    }
}

/// Why a webhook secret could not be used. The messages never repeat the secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretError {
    Empty,
    NotBase64,
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretError::Empty => f.write_str(
                "webhook secret is empty; set it to the whsec_... value from the provider's endpoint settings",
            ),
            SecretError::NotBase64 => f.write_str(
                "webhook secret is not valid: expected whsec_ followed by standard base64 \
                 (whpk_/whsk_ ed25519 keys are not supported); copy it again from the provider's endpoint settings",
            ),
        }
    }
}

impl std::error::Error for SecretError {}

/// One signed header under its two accepted names.
struct HeaderNames {
    svix: &'static str,
    standard: &'static str,
    /// Used in [`VerifyError::MissingHeader`].
    label: &'static str,
}

const ID_HEADER: HeaderNames = HeaderNames {
    svix: "svix-id",
    standard: "webhook-id",
    label: "svix-id or webhook-id",
};
const TIMESTAMP_HEADER: HeaderNames = HeaderNames {
    svix: "svix-timestamp",
    standard: "webhook-timestamp",
    label: "svix-timestamp or webhook-timestamp",
};
const SIGNATURE_HEADER: HeaderNames = HeaderNames {
    svix: "svix-signature",
    standard: "webhook-signature",
    label: "svix-signature or webhook-signature",
};

/// The three signed headers of one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignedHeaders<'a> {
    pub id: &'a str,
    pub timestamp: &'a str,
    pub signature: &'a str,
}

impl<'a> SignedHeaders<'a> {
    /// Finds the three headers. `lookup` is called with lowercase names and must match
    /// case-insensitively (as `http::HeaderMap` does). Each header is looked up as `svix-…`
    /// first and `webhook-…` second, the same per-header fallback as the Svix libraries;
    /// mixing is harmless because all three values are covered by the signature.
    pub fn find(
        lookup: impl Fn(&str) -> Option<&'a str>,
    ) -> Result<SignedHeaders<'a>, VerifyError> {
        let get = |names: &HeaderNames| {
            lookup(names.svix)
                .or_else(|| lookup(names.standard))
                .ok_or(VerifyError::MissingHeader(names.label))
        };
        Ok(SignedHeaders {
            id: get(&ID_HEADER)?,
            timestamp: get(&TIMESTAMP_HEADER)?,
            signature: get(&SIGNATURE_HEADER)?,
        })
    }
}

/// Checks deliveries against one or more keys. Several keys allow rotation: configure the
/// new key next to the old one until the sender has switched.
#[derive(Debug, Clone)]
pub struct Verifier {
    keys: Vec<SecretKey>,
}

impl Verifier {
    /// A verifier with no keys rejects every delivery with
    /// [`VerifyError::NoMatchingSignature`].
    pub fn new(keys: Vec<SecretKey>) -> Verifier {
        Verifier { keys }
    }

    /// Verifies one delivery. `body` must be the raw bytes as received: re-serialized JSON
    /// does not verify. The timestamp is checked before any MAC work so that replayed old
    /// deliveries are refused cheaply.
    pub fn verify<'b>(
        &self,
        headers: &SignedHeaders<'_>,
        body: &'b [u8],
        now_unix: i64,
    ) -> Result<Verified<'b>, VerifyError> {
        check_timestamp(headers, now_unix)?;

        // One MAC per key, however many entries the header holds.
        let expected: Vec<[u8; MAC_LEN]> = self
            .keys
            .iter()
            .map(|key| key.mac_of(headers.id, headers.timestamp, body))
            .collect();

        let matched = v1_entries(headers.signature)
            .filter_map(decode_mac)
            .any(|candidate| expected.iter().any(|mac| bool::from(mac.ct_eq(&candidate))));
        if matched {
            Ok(Verified::proved(body))
        } else {
            Err(VerifyError::NoMatchingSignature)
        }
    }
}

/// The part of [`Verifier::verify`] that needs no body: the timestamp parses and is within
/// [`TOLERANCE_SECONDS`] of `now_unix`. The HTTP layer calls it on the request head, so a
/// stale or malformed delivery is refused before a single body byte is read (the Standard
/// Webhooks reference verifiers check the timestamp first, too).
pub fn check_timestamp(headers: &SignedHeaders<'_>, now_unix: i64) -> Result<(), VerifyError> {
    let signed_at = parse_timestamp(headers.timestamp)?;
    check_tolerance(signed_at, now_unix)
}

/// Signature payloads of the `v1` entries in a signature header; other versions are
/// skipped because an HMAC key cannot check them.
fn v1_entries(signature_header: &str) -> impl Iterator<Item = &str> {
    // Entries are space-separated in the spec; Supabase joins them with ", ", which after
    // the split leaves a trailing comma on each entry but the last.
    signature_header
        .split_ascii_whitespace()
        .map(|entry| entry.strip_suffix(',').unwrap_or(entry))
        .filter_map(|entry| entry.split_once(','))
        .filter(|(version, _)| *version == HMAC_VERSION)
        .map(|(_, encoded)| encoded)
}

/// Decodes one entry's tag, or `None` if it cannot be a well-formed HMAC-SHA256 tag.
fn decode_mac(encoded: &str) -> Option<[u8; MAC_LEN]> {
    if encoded.len() != ENCODED_MAC_LEN {
        return None;
    }
    let decoded = STANDARD.decode(encoded).ok()?;
    decoded.try_into().ok()
}

/// The sender writes the timestamp as a plain decimal integer, and the signed string uses
/// the header text verbatim, so anything else (sign, fraction, spaces) is refused.
fn parse_timestamp(timestamp: &str) -> Result<i64, VerifyError> {
    if timestamp.is_empty() || !timestamp.bytes().all(|b| b.is_ascii_digit()) {
        return Err(VerifyError::BadTimestamp);
    }
    timestamp.parse().map_err(|_| VerifyError::BadTimestamp)
}

fn check_tolerance(signed_at: i64, now_unix: i64) -> Result<(), VerifyError> {
    let age = now_unix.saturating_sub(signed_at);
    if age > TOLERANCE_SECONDS {
        Err(VerifyError::StaleTimestamp { skew_seconds: age })
    } else if age < -TOLERANCE_SECONDS {
        Err(VerifyError::FutureTimestamp {
            skew_seconds: age.saturating_neg(),
        })
    } else {
        Ok(())
    }
}

/// Signs a message for our own outgoing webhooks; returns the `v1,<base64>` entry for the
/// `webhook-signature` header.
pub fn sign(key: &SecretKey, msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    let mac = key.mac_of(msg_id, &timestamp.to_string(), body);
    format!("{HMAC_VERSION},{}", STANDARD.encode(mac))
}

/// Why a delivery was refused. `Display` gives a one-line reason safe for the response body
/// and logs: it never includes a secret or the signature value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyError {
    /// Names the missing header, e.g. `"svix-id or webhook-id"`.
    MissingHeader(&'static str),
    BadTimestamp,
    /// The signed timestamp is `skew_seconds` older than our clock.
    StaleTimestamp {
        skew_seconds: i64,
    },
    /// The signed timestamp is `skew_seconds` ahead of our clock.
    FutureTimestamp {
        skew_seconds: i64,
    },
    NoMatchingSignature,
}

impl VerifyError {
    /// HTTP status for the ingest route: timestamp problems (missing, unparseable, outside
    /// the tolerance) are 400; a missing id or signature header, or no matching signature,
    /// is 401.
    pub fn status(&self) -> u16 {
        if self.is_timestamp_problem() {
            400
        } else {
            401
        }
    }

    /// Short label for metrics: `"stale"` for timestamp problems, `"bad_signature"` for the
    /// rest.
    pub fn outcome(&self) -> &'static str {
        if self.is_timestamp_problem() {
            "stale"
        } else {
            "bad_signature"
        }
    }

    fn is_timestamp_problem(&self) -> bool {
        match self {
            VerifyError::MissingHeader(label) => *label == TIMESTAMP_HEADER.label,
            VerifyError::BadTimestamp
            | VerifyError::StaleTimestamp { .. }
            | VerifyError::FutureTimestamp { .. } => true,
            VerifyError::NoMatchingSignature => false,
        }
    }
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyError::MissingHeader(label) => write!(f, "missing required header {label}"),
            VerifyError::BadTimestamp => {
                f.write_str("webhook timestamp header is not an integer Unix time in seconds")
            }
            VerifyError::StaleTimestamp { skew_seconds } => write!(
                f,
                "webhook timestamp is {skew_seconds} s old; at most {TOLERANCE_SECONDS} s is accepted"
            ),
            VerifyError::FutureTimestamp { skew_seconds } => write!(
                f,
                "webhook timestamp is {skew_seconds} s in the future; at most {TOLERANCE_SECONDS} s is accepted"
            ),
            VerifyError::NoMatchingSignature => {
                f.write_str("no v1 signature matches any configured webhook secret")
            }
        }
    }
}

impl std::error::Error for VerifyError {}

#[cfg(test)]
mod tests {
    use super::*;

    use serde::Deserialize;

    const VECTORS_JSON: &str =
        include_str!("../../../../tests/data/standard-webhooks-vectors.json");

    // Published vector A (standard-webhooks Python tests); reused by the hand-written tests.
    const SECRET_A: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SECRET_A_BASE64: &str = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SECRET_B: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const ID_A: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS_A: i64 = 1_614_265_330;
    const BODY_A: &[u8] = br#"{"test": 2432232314}"#;
    const SIG_A: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[derive(Deserialize)]
    struct VectorFile {
        tolerance_seconds: i64,
        vectors: Vec<Vector>,
    }

    #[derive(Deserialize)]
    struct Vector {
        name: String,
        secret: String,
        msg_id: String,
        timestamp: i64,
        payload: String,
        signature: String,
        verify_at: i64,
        expect_valid: bool,
    }

    /// Case-insensitive lookup over (name, value) pairs, standing in for an HTTP header map.
    fn lookup_in<'a>(pairs: &'a [(String, String)]) -> impl Fn(&str) -> Option<&'a str> {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.as_str())
        }
    }

    fn header_pairs(
        prefix: &str,
        id: &str,
        timestamp: &str,
        signature: &str,
    ) -> Vec<(String, String)> {
        vec![
            (format!("{prefix}-id"), id.to_owned()),
            (format!("{prefix}-timestamp"), timestamp.to_owned()),
            (format!("{prefix}-signature"), signature.to_owned()),
        ]
    }

    fn verifier_a() -> Verifier {
        Verifier::new(vec![SecretKey::parse(SECRET_A).unwrap()])
    }

    fn headers_a(signature: &str) -> SignedHeaders<'_> {
        SignedHeaders {
            id: ID_A,
            timestamp: "1614265330",
            signature,
        }
    }

    fn verify_with_family(
        verifier: &Verifier,
        prefix: &str,
        vector: &Vector,
    ) -> Result<(), VerifyError> {
        let pairs = header_pairs(
            prefix,
            &vector.msg_id,
            &vector.timestamp.to_string(),
            &vector.signature,
        );
        let headers = SignedHeaders::find(lookup_in(&pairs))?;
        verifier
            .verify(&headers, vector.payload.as_bytes(), vector.verify_at)
            .map(|_| ())
    }

    #[test]
    fn every_published_and_derived_vector() {
        let file: VectorFile = serde_json::from_str(VECTORS_JSON).unwrap();
        assert_eq!(file.tolerance_seconds, TOLERANCE_SECONDS);
        assert!(!file.vectors.is_empty());

        let mut checked = 0;
        let mut asymmetric = 0;
        for vector in &file.vectors {
            if let Some(public_key_base64) = vector.secret.strip_prefix("whpk_") {
                // ed25519 (`v1a`) vectors. Their `expect_valid` describes an asymmetric
                // verifier holding the whpk_ public key. Ours holds only whsec_ HMAC keys
                // and, like the Standard Webhooks reference verifiers, skips `v1a` entries,
                // so a header whose only entry is `v1a` must be rejected here whatever
                // `expect_valid` says. Accepting it would mean trusting a signature we
                // cannot check.
                asymmetric += 1;
                assert_eq!(
                    SecretKey::parse(&vector.secret).unwrap_err(),
                    SecretError::NotBase64,
                    "{}: a whpk_ key is not an HMAC secret",
                    vector.name
                );
                assert!(vector.signature.starts_with("v1a,"), "{}", vector.name);
                // Worst case: someone pastes the public key's bytes in as an HMAC secret,
                // or the HMAC key of the same message is configured. Neither may match.
                let misused_public_key = SecretKey::parse(public_key_base64).unwrap();
                let same_message_hmac_key = SecretKey::parse(SECRET_A).unwrap();
                let verifier = Verifier::new(vec![misused_public_key, same_message_hmac_key]);
                for prefix in ["svix", "webhook"] {
                    assert_eq!(
                        verify_with_family(&verifier, prefix, vector),
                        Err(VerifyError::NoMatchingSignature),
                        "{} via {prefix}- headers",
                        vector.name
                    );
                }
            } else {
                let verifier = Verifier::new(vec![SecretKey::parse(&vector.secret).unwrap()]);
                for prefix in ["svix", "webhook"] {
                    let result = verify_with_family(&verifier, prefix, vector);
                    assert_eq!(
                        result.is_ok(),
                        vector.expect_valid,
                        "{} via {prefix}- headers: got {result:?}",
                        vector.name
                    );
                }
            }
            checked += 1;
        }
        assert_eq!(checked, file.vectors.len());
        assert_eq!(
            asymmetric, 2,
            "expected the v1a vector and its tampered twin"
        );
    }

    #[test]
    fn sign_reproduces_published_vectors() {
        let cases = [
            (SECRET_A, ID_A, TS_A, BODY_A.to_vec(), SIG_A),
            (
                SECRET_B,
                "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
                1_649_367_553,
                br#"{"email":"test@example.com","username":"test_user"}"#.to_vec(),
                "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=",
            ),
            (
                "whsec_plJ3nmyCDGBKInavdOK15jsl",
                "msg_loFOjxBNrRLzqYUf",
                1_731_705_121,
                br#"{"event_type":"ping","data":{"success":true}}"#.to_vec(),
                "v1,rAvfW3dJ/X/qxhsaXPOyyCGmRKsaKWcsNccKXlIktD0=",
            ),
        ];
        for (secret, id, ts, body, expected) in cases {
            let key = SecretKey::parse(secret).unwrap();
            assert_eq!(sign(&key, id, ts, &body), expected);
        }
    }

    #[test]
    fn each_missing_header_is_named_with_its_status() {
        let full = header_pairs("svix", ID_A, "1614265330", SIG_A);
        let cases = [
            ("svix-id", "svix-id or webhook-id", 401),
            ("svix-timestamp", "svix-timestamp or webhook-timestamp", 400),
            ("svix-signature", "svix-signature or webhook-signature", 401),
        ];
        for (removed, label, status) in cases {
            let pairs: Vec<_> = full.iter().filter(|(k, _)| k != removed).cloned().collect();
            let err = SignedHeaders::find(lookup_in(&pairs)).unwrap_err();
            assert_eq!(err, VerifyError::MissingHeader(label));
            assert_eq!(err.status(), status);
            assert!(err.to_string().contains(label));
        }
    }

    #[test]
    fn both_header_families_verify() {
        for prefix in ["svix", "webhook"] {
            let pairs = header_pairs(prefix, ID_A, "1614265330", SIG_A);
            let headers = SignedHeaders::find(lookup_in(&pairs)).unwrap();
            assert_eq!(headers, headers_a(SIG_A));
            assert_eq!(
                verifier_a().verify(&headers, BODY_A, TS_A).map(|_| ()),
                Ok(())
            );
        }
    }

    #[test]
    fn svix_headers_take_precedence_over_webhook_headers() {
        let mut pairs = header_pairs("webhook", "other-id", "not-a-number", "v1,junk");
        pairs.extend(header_pairs("svix", ID_A, "1614265330", SIG_A));
        let headers = SignedHeaders::find(lookup_in(&pairs)).unwrap();
        assert_eq!(headers, headers_a(SIG_A));
    }

    #[test]
    fn header_names_match_case_insensitively() {
        let pairs = vec![
            ("Svix-Id".to_owned(), ID_A.to_owned()),
            ("SVIX-TIMESTAMP".to_owned(), "1614265330".to_owned()),
            ("WebHook-Signature".to_owned(), SIG_A.to_owned()),
        ];
        let headers = SignedHeaders::find(lookup_in(&pairs)).unwrap();
        assert_eq!(
            verifier_a().verify(&headers, BODY_A, TS_A).map(|_| ()),
            Ok(())
        );
    }

    #[test]
    fn rotation_accepts_a_match_on_the_second_key() {
        let verifier = Verifier::new(vec![
            SecretKey::parse(SECRET_B).unwrap(),
            SecretKey::parse(SECRET_A).unwrap(),
        ]);
        assert_eq!(
            verifier.verify(&headers_a(SIG_A), BODY_A, TS_A).map(|_| ()),
            Ok(())
        );

        // The sender signing with old and new keys side by side also passes.
        let new_key = SecretKey::parse(SECRET_B).unwrap();
        let both = format!("{} {SIG_A}", sign(&new_key, ID_A, TS_A, BODY_A));
        assert_eq!(
            verifier_a()
                .verify(&headers_a(&both), BODY_A, TS_A)
                .map(|_| ()),
            Ok(())
        );
    }

    #[test]
    fn verifier_without_keys_rejects() {
        let verifier = Verifier::new(Vec::new());
        assert_eq!(
            verifier.verify(&headers_a(SIG_A), BODY_A, TS_A).map(|_| ()),
            Err(VerifyError::NoMatchingSignature)
        );
    }

    #[test]
    fn tolerance_is_inclusive_at_300_seconds_both_ways() {
        let verifier = verifier_a();
        let headers = headers_a(SIG_A);
        assert_eq!(
            verifier.verify(&headers, BODY_A, TS_A + 300).map(|_| ()),
            Ok(())
        );
        assert_eq!(
            verifier.verify(&headers, BODY_A, TS_A - 300).map(|_| ()),
            Ok(())
        );
        assert_eq!(
            verifier.verify(&headers, BODY_A, TS_A + 301).map(|_| ()),
            Err(VerifyError::StaleTimestamp { skew_seconds: 301 })
        );
        assert_eq!(
            verifier.verify(&headers, BODY_A, TS_A - 301).map(|_| ()),
            Err(VerifyError::FutureTimestamp { skew_seconds: 301 })
        );
    }

    #[test]
    fn timestamp_is_checked_before_the_signature() {
        let headers = headers_a("v1,wrong");
        assert_eq!(
            verifier_a()
                .verify(&headers, BODY_A, TS_A + 1000)
                .map(|_| ()),
            Err(VerifyError::StaleTimestamp { skew_seconds: 1000 })
        );
    }

    #[test]
    fn extreme_clock_values_do_not_overflow() {
        let headers = SignedHeaders {
            id: ID_A,
            timestamp: "9223372036854775807",
            signature: SIG_A,
        };
        assert_eq!(
            verifier_a().verify(&headers, BODY_A, i64::MIN).map(|_| ()),
            Err(VerifyError::FutureTimestamp {
                skew_seconds: i64::MAX
            })
        );
    }

    #[test]
    fn non_integer_timestamps_are_rejected() {
        let key = SecretKey::parse(SECRET_A).unwrap();
        for timestamp in [
            "",
            "abc",
            "1614265330.0",
            "1614265330.5",
            " 1614265330",
            "1614265330 ",
            "+1614265330",
            "-1614265330",
            "1.6e9",
            "99999999999999999999",
        ] {
            // Sign over the exact header text so only the timestamp rule can reject it.
            let mut mac = key.keyed_mac.clone();
            mac.update(format!("{ID_A}.{timestamp}.").as_bytes());
            mac.update(BODY_A);
            let signature = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
            let headers = SignedHeaders {
                id: ID_A,
                timestamp,
                signature: &signature,
            };
            let err = verifier_a()
                .verify(&headers, BODY_A, TS_A)
                .map(|_| ())
                .unwrap_err();
            assert_eq!(err, VerifyError::BadTimestamp, "{timestamp:?}");
            assert_eq!(err.status(), 400);
        }
    }

    #[test]
    fn many_junk_entries_plus_one_good_entry() {
        let junk_kinds = [
            "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            "v1,!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!",
            "v1,",
            "v1",
            "v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg==",
            "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE",
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE==",
            "v1,ZZZZ",
        ];
        let junk: Vec<&str> = junk_kinds.iter().copied().cycle().take(10_000).collect();
        let junk_only = junk.join(" ");
        let with_good = format!("{junk_only} {SIG_A}");

        let verifier = verifier_a();
        assert_eq!(
            verifier
                .verify(&headers_a(&junk_only), BODY_A, TS_A)
                .map(|_| ()),
            Err(VerifyError::NoMatchingSignature)
        );
        assert_eq!(
            verifier
                .verify(&headers_a(&with_good), BODY_A, TS_A)
                .map(|_| ()),
            Ok(())
        );
    }

    #[test]
    fn comma_space_separated_lists_verify_as_supabase_sends_them() {
        let other = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
        for list in [format!("{SIG_A}, {other}"), format!("{other}, {SIG_A}")] {
            assert_eq!(
                verifier_a()
                    .verify(&headers_a(&list), BODY_A, TS_A)
                    .map(|_| ()),
                Ok(()),
                "{list}"
            );
        }
        // The comma ends an entry; it never joins two tags into one.
        let glued = format!("{SIG_A},{other}");
        assert_eq!(
            verifier_a()
                .verify(&headers_a(&glued), BODY_A, TS_A)
                .map(|_| ()),
            Err(VerifyError::NoMatchingSignature)
        );
    }

    #[test]
    fn malformed_entries_never_match() {
        for signature in [
            "",
            " ",
            "v1,",
            "v1, ",
            ",",
            "v1",
            // 44 characters that are not base64: reaches the decoder and must not panic.
            "v1,????????????????????????????????????????????",
            "v1,g0hM9SsE+OTPJTGt/",
            "v1,g0hM9SsE-OTPJTGt_tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            "V1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            "v1,,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        ] {
            assert_eq!(
                verifier_a()
                    .verify(&headers_a(signature), BODY_A, TS_A)
                    .map(|_| ()),
                Err(VerifyError::NoMatchingSignature),
                "{signature:?}"
            );
        }
    }

    #[test]
    fn status_and_outcome_mapping() {
        let cases = [
            (
                VerifyError::MissingHeader(ID_HEADER.label),
                401,
                "bad_signature",
            ),
            (
                VerifyError::MissingHeader(TIMESTAMP_HEADER.label),
                400,
                "stale",
            ),
            (
                VerifyError::MissingHeader(SIGNATURE_HEADER.label),
                401,
                "bad_signature",
            ),
            (VerifyError::BadTimestamp, 400, "stale"),
            (
                VerifyError::StaleTimestamp { skew_seconds: 301 },
                400,
                "stale",
            ),
            (
                VerifyError::FutureTimestamp { skew_seconds: 301 },
                400,
                "stale",
            ),
            (VerifyError::NoMatchingSignature, 401, "bad_signature"),
        ];
        for (err, status, outcome) in cases {
            assert_eq!(err.status(), status, "{err:?}");
            assert_eq!(err.outcome(), outcome, "{err:?}");
        }
    }

    #[test]
    fn error_messages_do_not_leak_signatures() {
        let err = verifier_a()
            .verify(
                &headers_a("v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="),
                BODY_A,
                TS_A,
            )
            .map(|_| ())
            .unwrap_err();
        let message = err.to_string();
        assert!(!message.contains("AAAA"), "{message}");
        assert!(!message.contains('\n'));
    }

    #[test]
    fn debug_output_is_redacted() {
        let key = SecretKey::parse(SECRET_A).unwrap();
        let shown = format!("{key:?} {key:#?} {:?}", Verifier::new(vec![key.clone()]));
        assert!(!shown.contains(SECRET_A_BASE64), "{shown}");
        assert_eq!(format!("{key:?}"), "SecretKey(<redacted>)");
    }

    #[test]
    fn secret_prefix_padding_and_whitespace_are_optional() {
        // This key's base64 ends in one `=`; the unpadded form must give the same key.
        let padded = "whsec_1SiA4o9hyqTCpIqC5V9HUakiiaeACeqfZTInDBbOir4=";
        let unpadded = "1SiA4o9hyqTCpIqC5V9HUakiiaeACeqfZTInDBbOir4";
        for (canonical, variant) in [
            (SECRET_A, SECRET_A_BASE64),
            (SECRET_A, " whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n"),
            (padded, unpadded),
        ] {
            let canonical_key = SecretKey::parse(canonical).unwrap();
            let variant_key = SecretKey::parse(variant).unwrap();
            assert_eq!(
                sign(&canonical_key, ID_A, TS_A, BODY_A),
                sign(&variant_key, ID_A, TS_A, BODY_A),
                "{variant:?}"
            );
        }
    }

    #[test]
    fn bad_secrets_are_rejected_without_echoing_them() {
        for (secret, expected) in [
            ("", SecretError::Empty),
            ("   ", SecretError::Empty),
            ("whsec_", SecretError::Empty),
            ("whsec_not base64 at all!", SecretError::NotBase64),
            ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLa-_", SecretError::NotBase64),
            ("whsec_====", SecretError::NotBase64),
            ("whsk_6Xb/dCcHpPea21PS1N9VY/NZW723CEc77N4rJCubMbfVKIDij2HKpMKkioLlX0dRqSKJp4AJ6p9lMicMFs6Kvg==", SecretError::NotBase64),
        ] {
            let err = SecretKey::parse(secret).unwrap_err();
            assert_eq!(err, expected, "{secret:?}");
            let message = err.to_string();
            if !secret.trim().is_empty() && secret != "whsec_" {
                assert!(!message.contains(secret.trim()), "{message}");
            }
        }
    }
}
