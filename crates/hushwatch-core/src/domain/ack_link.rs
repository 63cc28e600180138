//! Acknowledge links' decisions (issue #30): what a one-time code in a
//! firing page opens, and what confirming it does. A code is valid until
//! it expires and only while its firing episode is the stream's current
//! one; the first use acknowledges the episode and retires its other
//! codes, which then answer "already acknowledged". The store
//! (`store::ack_codes`) mints, finds, takes and retires the rows.

use chrono::{DateTime, TimeDelta, Utc};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Random bytes in a code: 128 bits, beyond guessing at any request rate.
pub const CODE_BYTES: usize = 16;
/// Characters of a code in a URL (base64url without padding).
pub const CODE_LEN: usize = 22;

/// The comment of an acknowledgement made through a link (the audit entry
/// and `GET /v1/silences` show it beside `created_by` = [`LINK_AUTHOR`]).
pub const LINK_COMMENT: &str = "acknowledged from the link in a page";
pub const LINK_AUTHOR: &str = "link";

/// True for text shaped like a code: anything else is unknown without a
/// store read (a bounded, cheap refusal for junk in the path).
pub fn well_formed(text: &str) -> bool {
    text.len() == CODE_LEN
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// What the store keeps of a code: SHA-256 of its text.
pub fn code_hash(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

/// What a code opens (`GET /ack/{code}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkState {
    /// Unknown, expired, used, or its episode ended: one answer for all.
    Unknown,
    /// The episode can be acknowledged with this code.
    Open {
        stream: String,
        started_at: DateTime<Utc>,
    },
    /// Another link (or the API) acknowledged the episode already.
    AlreadyAcknowledged {
        stream: String,
        started_at: DateTime<Utc>,
    },
}

/// What confirming a code did (`POST /ack/{code}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkUse {
    Unknown,
    Acknowledged {
        stream: String,
        started_at: DateTime<Utc>,
    },
    AlreadyAcknowledged {
        stream: String,
        started_at: DateTime<Utc>,
    },
}

/// A stored code row: hash (hex), stream, episode start, expiry, retired.
/// Instants are epoch milliseconds as stored, so a code's episode is the
/// stream's `firing_since` exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeRow {
    pub sha256: String,
    pub stream: String,
    pub started_at: i64,
    pub expires_at: i64,
    pub retired: bool,
}

/// The decision behind both routes, from the row found by hash, the start
/// of the stream's current firing episode (`None`: not firing) and whether
/// the episode is acknowledged. The stored hash is compared with the
/// presented one in constant time (the lookup by primary key already
/// matched it; this keeps the answer independent of how a hash index
/// compares).
pub fn decide(
    presented: &str,
    row: Option<&CodeRow>,
    now: DateTime<Utc>,
    firing_episode: Option<i64>,
    acknowledged: bool,
) -> LinkState {
    let Some(row) = row else {
        return LinkState::Unknown;
    };
    let same: bool = row.sha256.as_bytes().ct_eq(presented.as_bytes()).into();
    if !same || row.expires_at <= now.timestamp_millis() {
        return LinkState::Unknown;
    }
    // Valid only while its episode is the stream's current firing one.
    if firing_episode != Some(row.started_at) {
        return LinkState::Unknown;
    }
    let stream = row.stream.clone();
    let started_at = DateTime::from_timestamp_millis(row.started_at).unwrap_or_default();
    if row.retired || acknowledged {
        LinkState::AlreadyAcknowledged { stream, started_at }
    } else {
        LinkState::Open { stream, started_at }
    }
}

/// What confirming a code does with what it opens: `Ok` names the episode
/// to acknowledge (take the code, retire its siblings), `Err` is the
/// answer without writing anything.
pub fn to_confirm(state: LinkState) -> Result<(String, DateTime<Utc>), LinkUse> {
    match state {
        LinkState::Open { stream, started_at } => Ok((stream, started_at)),
        LinkState::AlreadyAcknowledged { stream, started_at } => {
            Err(LinkUse::AlreadyAcknowledged { stream, started_at })
        }
        // Unknown, or (PostgreSQL) deleted under us by a concurrent use of
        // this very code: to this request it is a used code, like a replay.
        LinkState::Unknown => Err(LinkUse::Unknown),
    }
}

/// The expiry of a code minted at `now`.
pub fn expiry(now: DateTime<Utc>, ttl: TimeDelta) -> DateTime<Utc> {
    now.checked_add_signed(ttl)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(retired: bool) -> CodeRow {
        CodeRow {
            sha256: "ab".repeat(32),
            stream: "s".into(),
            started_at: 5_000,
            expires_at: 10_000,
            retired,
        }
    }

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).unwrap()
    }

    const FIRING: Option<i64> = Some(5_000);

    #[test]
    fn a_code_opens_only_its_live_unexpired_current_episode() {
        let hash = "ab".repeat(32);
        let open = LinkState::Open {
            stream: "s".into(),
            started_at: at(5_000),
        };
        let acked = LinkState::AlreadyAcknowledged {
            stream: "s".into(),
            started_at: at(5_000),
        };
        assert_eq!(
            decide(&hash, Some(&row(false)), at(9_999), FIRING, false),
            open
        );
        assert_eq!(
            decide(&hash, None, at(1), FIRING, false),
            LinkState::Unknown
        );
        // Expired, or another hash (never returned by the lookup, but the
        // comparison decides, not the index).
        assert_eq!(
            decide(&hash, Some(&row(false)), at(10_000), FIRING, false),
            LinkState::Unknown
        );
        assert_eq!(
            decide(&"cd".repeat(32), Some(&row(false)), at(1), FIRING, false),
            LinkState::Unknown
        );
        // The episode resolved (or the stream is unknown), or a new one
        // started.
        for episode in [None, Some(6_000)] {
            assert_eq!(
                decide(&hash, Some(&row(false)), at(1), episode, false),
                LinkState::Unknown
            );
        }
        // Retired by a sibling's use, or acknowledged through the API.
        assert_eq!(decide(&hash, Some(&row(true)), at(1), FIRING, false), acked);
        assert_eq!(decide(&hash, Some(&row(false)), at(1), FIRING, true), acked);
        // An expired retired code is unknown like any other.
        assert_eq!(
            decide(&hash, Some(&row(true)), at(10_000), FIRING, false),
            LinkState::Unknown
        );
    }

    #[test]
    fn only_an_open_code_is_taken_the_rest_answer_without_writing() {
        let (stream, started_at) = ("s".to_string(), at(5_000));
        let open = LinkState::Open {
            stream: stream.clone(),
            started_at,
        };
        assert_eq!(to_confirm(open), Ok((stream.clone(), started_at)));
        let acked = LinkState::AlreadyAcknowledged {
            stream: stream.clone(),
            started_at,
        };
        let answer = LinkUse::AlreadyAcknowledged { stream, started_at };
        assert_eq!(to_confirm(acked), Err(answer));
        assert_eq!(to_confirm(LinkState::Unknown), Err(LinkUse::Unknown));
    }

    #[test]
    fn codes_are_well_formed_only_at_their_length_and_alphabet() {
        assert!(well_formed(&"a".repeat(CODE_LEN)));
        assert!(!well_formed("short"));
        assert!(!well_formed(&"a".repeat(CODE_LEN + 1)));
        assert!(!well_formed(&format!("{}=", "a".repeat(CODE_LEN - 1))));
        assert!(!well_formed(&format!("{}%", "a".repeat(CODE_LEN - 1))));
    }

    #[test]
    fn the_expiry_saturates() {
        assert_eq!(expiry(at(1_000), TimeDelta::seconds(1)), at(2_000));
        assert_eq!(
            expiry(DateTime::<Utc>::MAX_UTC, TimeDelta::seconds(1)),
            DateTime::<Utc>::MAX_UTC
        );
    }
}
