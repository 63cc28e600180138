//! Relay bodies at rest (`[store] encryption_key`, issue #29): each stored
//! body is sealed with AES-256-GCM (ring) under the first configured key,
//! and its key id is stored beside it, so keys rotate by putting the new
//! one first and keeping the old ones until their bodies are gone.
//!
//! - The nonce is 96 random bits per body (`SystemRandom`), stored in
//!   front of the ciphertext. A key would need about 2^32 bodies before a
//!   collision became a concern, far beyond a week of identity events.
//! - The associated data binds the row: a version tag, the stream, the
//!   delivery id and the key id, so a sealed body copied onto another row,
//!   or relabelled with another key id, does not open. Rows sealed before
//!   issue #44 bound only the stream and delivery id; they keep opening
//!   with that form only when their row says so (`aad_v1`, set by the
//!   migration for the rows it found), never as a fallback.
//! - A row that claims plaintext (`key_id` NULL) while a key is configured
//!   is refused ([`OpenError::Plaintext`]) unless it was stored before any
//!   key existed (`store::forward` keeps that mark): otherwise writing a
//!   plaintext body and NULL into a sealed row would get it forwarded.
//! - A key id is a truncated SHA-256 of the key: it identifies, it does not
//!   reveal (the key is 256 random bits). Keys never reach `Debug`, logs,
//!   errors or metrics.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};
use std::fmt;

/// One key, parsed from 32 bytes of base64.
#[derive(Clone)]
pub struct SealKey {
    id: String,
    bytes: [u8; 32],
}

impl fmt::Debug for SealKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SealKey({}, <redacted>)", self.id)
    }
}

impl SealKey {
    /// The parser `check` and runtime share. The error never echoes the value.
    pub fn parse(text: &str) -> Result<SealKey, String> {
        let bytes = STANDARD.decode(text.trim()).map_err(|_| {
            "is not base64 (generate one with `openssl rand -base64 32`)".to_string()
        })?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
            format!(
                "must be 32 bytes of base64, found {} bytes (`openssl rand -base64 32`)",
                b.len()
            )
        })?;
        let digest = Sha256::new()
            .chain_update(b"hushwatch seal key id\0")
            .chain_update(bytes)
            .finalize();
        let id = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        Ok(SealKey { id, bytes })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    fn aead(&self) -> LessSafeKey {
        // Cannot fail: AES-256 takes exactly these 32 bytes.
        LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &self.bytes).expect("32-byte key"))
    }
}

/// The configured keys, newest (sealing) first. Empty: bodies are stored
/// in plaintext (`check` warns).
#[derive(Debug, Clone, Default)]
pub struct Sealer {
    keys: Vec<SealKey>,
    /// The same keys' subject-id veil (`store::veil`), derived once.
    veil: super::veil::Veil,
}

/// A body as stored: `key_id` None means plaintext.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    pub key_id: Option<String>,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenError {
    /// Sealed under a key no longer configured.
    UnknownKey(String),
    /// The tag did not verify (tampered, or moved to another row).
    Corrupt,
    /// Plaintext on a row stored after a key was configured.
    Plaintext,
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::UnknownKey(id) => write!(
                f,
                "stored body is sealed with key {id}, which is not in [store] encryption_key any more"
            ),
            OpenError::Corrupt => f.write_str("stored body does not authenticate (altered or misplaced)"),
            OpenError::Plaintext => f.write_str(
                "stored body claims plaintext although it was stored after [store] encryption_key was set",
            ),
        }
    }
}

/// The associated data of a row: `legacy` is the form before issue #44
/// (stream and delivery id only).
fn aad(stream: &str, delivery_id: &str, key_id: &str, legacy: bool) -> Vec<u8> {
    let mut a = Vec::with_capacity(stream.len() + delivery_id.len() + key_id.len() + 24);
    if !legacy {
        a.extend_from_slice(b"hushwatch forward v2\0");
    }
    a.extend_from_slice(stream.as_bytes());
    a.push(0);
    a.extend_from_slice(delivery_id.as_bytes());
    if !legacy {
        a.push(0);
        a.extend_from_slice(key_id.as_bytes());
    }
    a
}

/// Where a stored body sits, as its row says: what its seal must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row<'a> {
    pub stream: &'a str,
    pub delivery_id: &'a str,
    /// Sealed before issue #44 (the migration marked it): the old form.
    pub legacy_aad: bool,
    /// Stored before any key was configured: plaintext is expected.
    pub before_any_key: bool,
}

impl Sealer {
    pub fn new(keys: Vec<SealKey>) -> Sealer {
        let veil = super::veil::Veil::from_keys(keys.iter().map(|k| (k.id.as_str(), &k.bytes)));
        Sealer { keys, veil }
    }

    /// How subject ids are stored under these keys (`store::veil`).
    pub fn veil(&self) -> &super::veil::Veil {
        &self.veil
    }

    /// The configured keys' ids, newest first.
    pub fn key_ids(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.id.clone()).collect()
    }

    pub fn is_on(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Seals under the first key (plaintext when none is configured).
    /// Err only when the system random source fails: the caller must then
    /// refuse the delivery (503) rather than store it unsealed.
    pub fn seal(&self, stream: &str, delivery_id: &str, body: &[u8]) -> Result<Sealed, String> {
        let Some(key) = self.keys.first() else {
            return Ok(Sealed {
                key_id: None,
                bytes: body.to_vec(),
            });
        };
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| "the system random source failed".to_string())?;
        let mut out = Vec::with_capacity(NONCE_LEN + body.len() + AES_256_GCM.tag_len());
        out.extend_from_slice(&nonce);
        let mut in_out = body.to_vec();
        key.aead()
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(stream, delivery_id, &key.id, false)),
                &mut in_out,
            )
            .map_err(|_| "sealing failed".to_string())?;
        out.extend_from_slice(&in_out);
        Ok(Sealed {
            key_id: Some(key.id.clone()),
            bytes: out,
        })
    }

    /// Opens a stored body on its row.
    pub fn open(&self, row: Row<'_>, sealed: &Sealed) -> Result<Vec<u8>, OpenError> {
        let Some(id) = &sealed.key_id else {
            if self.is_on() && !row.before_any_key {
                return Err(OpenError::Plaintext);
            }
            return Ok(sealed.bytes.clone());
        };
        let key = self
            .keys
            .iter()
            .find(|k| &k.id == id)
            .ok_or_else(|| OpenError::UnknownKey(id.clone()))?;
        if sealed.bytes.len() < NONCE_LEN {
            return Err(OpenError::Corrupt);
        }
        let (nonce, rest) = sealed.bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| OpenError::Corrupt)?;
        let mut in_out = rest.to_vec();
        let plain = key
            .aead()
            .open_in_place(
                nonce,
                Aad::from(aad(row.stream, row.delivery_id, id, row.legacy_aad)),
                &mut in_out,
            )
            .map_err(|_| OpenError::Corrupt)?;
        Ok(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    const K2: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

    fn row<'a>(stream: &'a str, delivery_id: &'a str) -> Row<'a> {
        Row {
            stream,
            delivery_id,
            legacy_aad: false,
            before_any_key: false,
        }
    }

    #[test]
    fn a_sealed_body_opens_only_on_its_row_and_after_rotation() {
        let old = Sealer::new(vec![SealKey::parse(K1).unwrap()]);
        let body = br#"{"type":"user.deleted","data":{"id":"user_123"}}"#;
        let sealed = old.seal("clerk", "msg_1", body).unwrap();
        assert!(!sealed.bytes.windows(8).any(|w| w == b"user_123"));
        assert_eq!(old.open(row("clerk", "msg_1"), &sealed).unwrap(), body);
        assert_eq!(
            old.open(row("clerk", "msg_2"), &sealed),
            Err(OpenError::Corrupt)
        );
        assert_eq!(
            old.open(row("other", "msg_1"), &sealed),
            Err(OpenError::Corrupt)
        );
        let rotated = Sealer::new(vec![
            SealKey::parse(K2).unwrap(),
            SealKey::parse(K1).unwrap(),
        ]);
        assert_eq!(rotated.open(row("clerk", "msg_1"), &sealed).unwrap(), body);
        assert_ne!(
            rotated.seal("clerk", "msg_1", body).unwrap().key_id,
            sealed.key_id
        );
        let dropped = Sealer::new(vec![SealKey::parse(K2).unwrap()]);
        assert!(matches!(
            dropped.open(row("clerk", "msg_1"), &sealed),
            Err(OpenError::UnknownKey(_))
        ));
        let plain = Sealer::default().seal("clerk", "msg_1", body).unwrap();
        assert_eq!(plain.key_id, None);
        assert_eq!(
            Sealer::default()
                .open(row("clerk", "msg_1"), &plain)
                .unwrap(),
            body
        );
    }

    #[test]
    fn a_relabelled_row_does_not_open() {
        let sealer = Sealer::new(vec![
            SealKey::parse(K2).unwrap(),
            SealKey::parse(K1).unwrap(),
        ]);
        let body = b"{}";
        let sealed = sealer.seal("clerk", "msg_1", body).unwrap();
        // The same bytes relabelled with the other configured key's id.
        let other = SealKey::parse(K1).unwrap().id().to_string();
        let relabelled = Sealed {
            key_id: Some(other),
            bytes: sealed.bytes.clone(),
        };
        assert_eq!(
            sealer.open(row("clerk", "msg_1"), &relabelled),
            Err(OpenError::Corrupt)
        );
        // Plaintext claimed on a row stored after a key existed.
        let plain = Sealed {
            key_id: None,
            bytes: body.to_vec(),
        };
        assert_eq!(
            sealer.open(row("clerk", "msg_1"), &plain),
            Err(OpenError::Plaintext)
        );
        let before = Row {
            before_any_key: true,
            ..row("clerk", "msg_1")
        };
        assert_eq!(sealer.open(before, &plain).unwrap(), body);
    }

    #[test]
    fn a_body_sealed_before_the_row_binding_opens_only_when_its_row_is_marked_legacy() {
        let key = SealKey::parse(K1).unwrap();
        let sealer = Sealer::new(vec![key.clone()]);
        let body = b"{\"a\":1}";
        // Sealed the way the release before issue #44 did.
        let nonce = [7u8; NONCE_LEN];
        let mut in_out = body.to_vec();
        key.aead()
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad("clerk", "msg_1", key.id(), true)),
                &mut in_out,
            )
            .unwrap();
        let old = Sealed {
            key_id: Some(key.id().to_string()),
            bytes: [nonce.as_slice(), &in_out].concat(),
        };
        assert_eq!(
            sealer.open(row("clerk", "msg_1"), &old),
            Err(OpenError::Corrupt)
        );
        let legacy = Row {
            legacy_aad: true,
            ..row("clerk", "msg_1")
        };
        assert_eq!(sealer.open(legacy, &old).unwrap(), body);
    }

    #[test]
    fn bad_keys_are_refused_without_echoing_them() {
        let e = SealKey::parse("c2hvcnQ=").unwrap_err();
        assert!(e.contains("found 5 bytes") && !e.contains("c2hvcnQ"), "{e}");
        assert!(SealKey::parse("not base64!").is_err());
        assert!(!format!("{:?}", SealKey::parse(K1).unwrap()).contains(K1));
    }
}
