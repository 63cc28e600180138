//! Checkpoints pin the chain head (sequence number and hash) at a moment.
//! With a `checkpoint_key` they are HMAC-signed, so someone who can edit
//! the database but does not hold the key cannot move them; without a key
//! they still catch accidental truncation, but not a deliberate rewrite.

use hmac::{Hmac, Mac};
use sha2::Sha256;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub seq: i64,
    pub hash: [u8; 32],
    pub created_at_ms: i64,
    /// HMAC-SHA256 over the fields, when a key was configured.
    pub mac: Option<[u8; 32]>,
}

fn message(seq: i64, hash: &[u8; 32], created_at_ms: i64) -> Vec<u8> {
    let mut m = b"hushwatch-checkpoint-v1".to_vec();
    m.extend_from_slice(&seq.to_be_bytes());
    m.extend_from_slice(hash);
    m.extend_from_slice(&created_at_ms.to_be_bytes());
    m
}

fn mac_for(key: &[u8]) -> Hmac<Sha256> {
    // HMAC accepts keys of any length, so this cannot fail.
    <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"))
}

impl Checkpoint {
    pub fn new(seq: i64, hash: [u8; 32], created_at_ms: i64, key: Option<&[u8]>) -> Checkpoint {
        let mac = key.map(|k| {
            let mut m = mac_for(k);
            m.update(&message(seq, &hash, created_at_ms));
            m.finalize().into_bytes().into()
        });
        Checkpoint {
            seq,
            hash,
            created_at_ms,
            mac,
        }
    }

    /// Checks the signature (constant time). Unsigned checkpoints pass only
    /// when no key is configured.
    pub fn signature_ok(&self, key: Option<&[u8]>) -> bool {
        match (key, &self.mac) {
            (Some(k), Some(mac)) => {
                let mut m = mac_for(k);
                m.update(&message(self.seq, &self.hash, self.created_at_ms));
                m.verify_slice(mac).is_ok()
            }
            (None, _) => true,
            (Some(_), None) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_checkpoints_detect_any_change() {
        let key = b"checkpoint-key";
        let c = Checkpoint::new(42, [7; 32], 1_800_000_000_000, Some(key));
        assert!(c.signature_ok(Some(key)));
        assert!(!c.signature_ok(Some(b"other-key")));
        for forged in [
            Checkpoint {
                seq: 41,
                ..c.clone()
            },
            Checkpoint {
                hash: [8; 32],
                ..c.clone()
            },
            Checkpoint {
                created_at_ms: 1,
                ..c.clone()
            },
            Checkpoint {
                mac: None,
                ..c.clone()
            },
        ] {
            assert!(!forged.signature_ok(Some(key)), "{forged:?}");
        }
    }
}
