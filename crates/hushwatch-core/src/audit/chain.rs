//! Audit entries and their chain hash.
//!
//! The hash input is a canonical, length-prefixed encoding of every field
//! in a fixed order, so no two different entries can encode the same way
//! (no ambiguity from separators inside values).

use sha2::{Digest, Sha256};

/// The `prev_hash` of the first entry ever written.
pub const GENESIS: [u8; 32] = [0; 32];

/// Domain-separates this hash from any other SHA-256 use.
const DOMAIN: &[u8] = b"hushwatch-audit-v1";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub seq: i64,
    /// Milliseconds since the Unix epoch, UTC.
    pub received_at_ms: i64,
    /// The stream (or operational-webhook source) it was reported to.
    pub source: String,
    /// `webhook`, `report` or `svix`.
    pub channel: String,
    pub delivery_id: Option<String>,
    pub event_type: String,
    pub event_time_ms: Option<i64>,
    /// JSON object of subject ids found in the payload, e.g. `{"user_id":"user_1"}`.
    pub subject_ids: String,
    /// Hex SHA-256 of the raw body, when there was one.
    pub body_sha256: Option<String>,
    pub signature_verified: bool,
    pub prev_hash: [u8; 32],
}

fn put(hasher: &mut Sha256, field: Option<&[u8]>) {
    match field {
        Some(bytes) => {
            hasher.update((bytes.len() as u64).to_be_bytes());
            hasher.update(bytes);
        }
        // A length no real field can have marks "absent", distinct from "".
        None => hasher.update(u64::MAX.to_be_bytes()),
    }
}

impl Entry {
    pub fn hash(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(DOMAIN);
        put(&mut h, Some(&self.seq.to_be_bytes()));
        put(&mut h, Some(&self.received_at_ms.to_be_bytes()));
        put(&mut h, Some(self.source.as_bytes()));
        put(&mut h, Some(self.channel.as_bytes()));
        put(&mut h, self.delivery_id.as_deref().map(str::as_bytes));
        put(&mut h, Some(self.event_type.as_bytes()));
        put(
            &mut h,
            self.event_time_ms
                .map(i64::to_be_bytes)
                .as_ref()
                .map(|b| &b[..]),
        );
        put(&mut h, Some(self.subject_ids.as_bytes()));
        put(&mut h, self.body_sha256.as_deref().map(str::as_bytes));
        put(&mut h, Some(&[u8::from(self.signature_verified)]));
        put(&mut h, Some(&self.prev_hash));
        h.finalize().into()
    }
}

pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0x0f)] as char);
    }
    out
}

pub fn from_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
pub(crate) fn sample(seq: i64, prev: [u8; 32]) -> Entry {
    Entry {
        seq,
        received_at_ms: 1_800_000_000_000 + seq,
        source: "identity".into(),
        channel: "webhook".into(),
        delivery_id: Some(format!("msg_{seq}")),
        event_type: "user.deleted".into(),
        event_time_ms: Some(1_799_999_999_000),
        subject_ids: r#"{"user_id":"user_1"}"#.into(),
        body_sha256: Some("ab".repeat(32)),
        signature_verified: true,
        prev_hash: prev,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_changes_the_hash() {
        let base = sample(7, GENESIS);
        let h = base.hash();
        let variants: Vec<Entry> = vec![
            Entry {
                seq: 8,
                ..base.clone()
            },
            Entry {
                received_at_ms: 1,
                ..base.clone()
            },
            Entry {
                source: "other".into(),
                ..base.clone()
            },
            Entry {
                channel: "report".into(),
                ..base.clone()
            },
            Entry {
                delivery_id: None,
                ..base.clone()
            },
            Entry {
                delivery_id: Some(String::new()),
                ..base.clone()
            },
            Entry {
                event_type: "user.created".into(),
                ..base.clone()
            },
            Entry {
                event_time_ms: None,
                ..base.clone()
            },
            Entry {
                subject_ids: "{}".into(),
                ..base.clone()
            },
            Entry {
                body_sha256: None,
                ..base.clone()
            },
            Entry {
                signature_verified: false,
                ..base.clone()
            },
            Entry {
                prev_hash: [1; 32],
                ..base.clone()
            },
        ];
        for v in variants {
            assert_ne!(v.hash(), h, "{v:?}");
        }
        assert_eq!(base.hash(), h, "deterministic");
    }

    #[test]
    fn hex_round_trips() {
        let h = sample(1, GENESIS).hash();
        assert_eq!(from_hex(&to_hex(&h)), Some(h));
        assert_eq!(from_hex("zz"), None);
    }
}
