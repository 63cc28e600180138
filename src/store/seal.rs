//! Relay bodies at rest (`[store] encryption_key`, issue #29): each stored
//! body is sealed with AES-256-GCM (ring) under the first configured key,
//! and its key id is stored beside it, so keys rotate by putting the new
//! one first and keeping the old ones until their bodies are gone.
//!
//! - The nonce is 96 random bits per body (`SystemRandom`), stored in
//!   front of the ciphertext. A key would need about 2^32 bodies before a
//!   collision became a concern, far beyond a week of identity events.
//! - The associated data is the stream and delivery id, so a sealed body
//!   copied onto another row does not open.
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
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::UnknownKey(id) => write!(
                f,
                "stored body is sealed with key {id}, which is not in [store] encryption_key any more"
            ),
            OpenError::Corrupt => f.write_str("stored body does not authenticate (altered or misplaced)"),
        }
    }
}

fn aad(stream: &str, delivery_id: &str) -> Vec<u8> {
    let mut a = Vec::with_capacity(stream.len() + delivery_id.len() + 1);
    a.extend_from_slice(stream.as_bytes());
    a.push(0);
    a.extend_from_slice(delivery_id.as_bytes());
    a
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
                Aad::from(aad(stream, delivery_id)),
                &mut in_out,
            )
            .map_err(|_| "sealing failed".to_string())?;
        out.extend_from_slice(&in_out);
        Ok(Sealed {
            key_id: Some(key.id.clone()),
            bytes: out,
        })
    }

    pub fn open(
        &self,
        stream: &str,
        delivery_id: &str,
        sealed: &Sealed,
    ) -> Result<Vec<u8>, OpenError> {
        let Some(id) = &sealed.key_id else {
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
            .open_in_place(nonce, Aad::from(aad(stream, delivery_id)), &mut in_out)
            .map_err(|_| OpenError::Corrupt)?;
        Ok(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    const K2: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

    #[test]
    fn a_sealed_body_opens_only_on_its_row_and_after_rotation() {
        let old = Sealer::new(vec![SealKey::parse(K1).unwrap()]);
        let body = br#"{"type":"user.deleted","data":{"id":"user_123"}}"#;
        let sealed = old.seal("clerk", "msg_1", body).unwrap();
        assert!(!sealed.bytes.windows(8).any(|w| w == b"user_123"));
        assert_eq!(old.open("clerk", "msg_1", &sealed).unwrap(), body);
        assert_eq!(old.open("clerk", "msg_2", &sealed), Err(OpenError::Corrupt));
        let rotated = Sealer::new(vec![
            SealKey::parse(K2).unwrap(),
            SealKey::parse(K1).unwrap(),
        ]);
        assert_eq!(rotated.open("clerk", "msg_1", &sealed).unwrap(), body);
        assert_ne!(
            rotated.seal("clerk", "msg_1", body).unwrap().key_id,
            sealed.key_id
        );
        let dropped = Sealer::new(vec![SealKey::parse(K2).unwrap()]);
        assert!(matches!(
            dropped.open("clerk", "msg_1", &sealed),
            Err(OpenError::UnknownKey(_))
        ));
        let plain = Sealer::default().seal("clerk", "msg_1", body).unwrap();
        assert_eq!(plain.key_id, None);
        assert_eq!(
            Sealer::default().open("clerk", "msg_1", &plain).unwrap(),
            body
        );
    }

    #[test]
    fn bad_keys_are_refused_without_echoing_them() {
        let e = SealKey::parse("c2hvcnQ=").unwrap_err();
        assert!(e.contains("found 5 bytes") && !e.contains("c2hvcnQ"), "{e}");
        assert!(SealKey::parse("not base64!").is_err());
        assert!(!format!("{:?}", SealKey::parse(K1).unwrap()).contains(K1));
    }
}
