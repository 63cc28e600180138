//! Subject ids at rest (`[store] encryption_key`, issue #29): with a key
//! configured, every subject id hushwatch extracts is stored as a **veiled
//! token** instead of its plaintext, in every column and text that names it
//! (audit `subject_ids`, the revocation index, stale grants, forwards, page
//! text in the outbox, reconciliation drift).
//!
//! Why one reversible, deterministic token rather than a lookup hash in
//! some columns and an AEAD in others: subject ids flow from the ingest
//! transaction into text that both engines build inside their own
//! transactions (a stale grant's page, a forward failure page naming the
//! oldest event, a resolve copied from its firing row). A token that is
//! equal for equal subjects keeps every lookup an equality on the indexed
//! column (no schema change, no key inside either backend), and because it
//! opens again it can stand *inside* those texts and be revealed where a
//! person reads them (`Page::from_row`, `audit subject`, `audit export`), so
//! a page reads exactly as it would without a key.
//!
//! The construction is AES-SIV (RFC 5297, the RustCrypto `aes-siv` crate,
//! AES-256 with CMAC): a deterministic AEAD, so equal values give equal
//! tokens (the equality lookups need, and all an observer of the database
//! learns besides the length) and an altered or foreign token fails to open
//! instead of revealing anything. Its 64-byte key is derived from each
//! configured key by HKDF-SHA256 under a fixed label, so the body key
//! (`store::seal`) and this one never share a use.
//!
//! A token is `hws1.KEYID.BASE64URL.` (the key id of `store::seal`, so a
//! rotated key set still opens old tokens; the trailing dot ends it inside
//! text, as base64url has no dot). Lookups use [`Veil::forms`]: the
//! plaintext (rows written before a key was set) and the token under EVERY
//! configured key (rows written before a rotation). Without a key nothing
//! changes: values are stored as given and `forms` is the value alone.

use aes_siv::siv::Aes256Siv;
use aes_siv::KeyInit;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::hkdf;
use std::borrow::Cow;
use std::fmt;

/// What every token starts with.
const PREFIX: &str = "hws1.";
/// Length of a key id (`store::seal`: 6 bytes of SHA-256, hex).
const KEY_ID_LEN: usize = 12;
/// Associated data of every token: binds it to this one use.
const AD: &[u8] = b"hushwatch subject id";

#[derive(Clone)]
struct VeilKey {
    id: String,
    /// AES-SIV-CMAC-256 key: two AES-256 keys, 64 bytes.
    siv: [u8; 64],
}

impl VeilKey {
    fn cipher(&self) -> Aes256Siv {
        Aes256Siv::new(&self.siv.into())
    }
}

/// The veiling keys, derived from `[store] encryption_key` (newest first).
#[derive(Clone, Default)]
pub struct Veil {
    keys: Vec<VeilKey>,
}

impl fmt::Debug for Veil {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|k| k.id.as_str()).collect();
        write!(f, "Veil({ids:?}, <redacted>)")
    }
}

/// An HKDF output length (ring names lengths by a key type).
struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

impl Veil {
    /// `(key id, key bytes)` newest first, as `store::seal` holds them.
    pub(super) fn from_keys<'a>(keys: impl Iterator<Item = (&'a str, &'a [u8; 32])>) -> Veil {
        let salt = hkdf::Salt::new(hkdf::HKDF_SHA256, b"hushwatch subject veil v1");
        Veil {
            keys: keys
                .map(|(id, bytes)| {
                    let mut siv = [0u8; 64];
                    // Cannot fail: 64 bytes is far below HKDF-SHA256's
                    // 255 * 32 limit.
                    salt.extract(bytes)
                        .expand(&[b"subject siv".as_slice()], Len(siv.len()))
                        .and_then(|okm| okm.fill(&mut siv))
                        .expect("HKDF output of 64 bytes");
                    VeilKey {
                        id: id.to_owned(),
                        siv,
                    }
                })
                .collect(),
        }
    }

    pub fn is_on(&self) -> bool {
        !self.keys.is_empty()
    }

    fn token(key: &VeilKey, value: &str) -> String {
        let raw = key
            .cipher()
            .encrypt([AD], value.as_bytes())
            // aes-siv refuses only more than 126 associated-data headers.
            .expect("AES-SIV with one header");
        format!("{PREFIX}{}.{}.", key.id, URL_SAFE_NO_PAD.encode(raw))
    }

    /// What is stored for `value`: its token under the newest key, or the
    /// value itself without a key. Always a fresh token, even for a value
    /// that looks like one: a sender who learnt a token must not get its
    /// subject named in a page in place of the id it sent.
    pub fn hide(&self, value: &str) -> String {
        match self.keys.first() {
            Some(key) => Self::token(key, value),
            None => value.to_owned(),
        }
    }

    /// Every form `value` may be stored under, for lookups: the plaintext
    /// (written before a key was configured), then its token under each
    /// configured key (written before a rotation).
    pub fn forms(&self, value: &str) -> Vec<String> {
        let mut out = vec![value.to_owned()];
        out.extend(self.keys.iter().map(|k| Self::token(k, value)));
        out
    }

    /// Opens a token starting at byte `at` of `text`: the plaintext and the
    /// byte just past the token. None when it is not one, its key is gone,
    /// or it does not authenticate.
    fn open_at(&self, text: &str, at: usize) -> Option<(String, usize)> {
        let rest = text.get(at..)?.strip_prefix(PREFIX)?;
        let id = rest.get(..KEY_ID_LEN)?;
        let rest = rest.get(KEY_ID_LEN..)?.strip_prefix('.')?;
        let len = rest
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
            .count();
        if rest.as_bytes().get(len) != Some(&b'.') {
            return None;
        }
        let key = self.keys.iter().find(|k| k.id == id)?;
        let raw = URL_SAFE_NO_PAD.decode(&rest[..len]).ok()?;
        // Authenticated: an altered token, or one under another key with
        // the same id, fails here and is never revealed.
        let plain = key.cipher().decrypt([AD], &raw).ok()?;
        let end = at + PREFIX.len() + KEY_ID_LEN + 1 + len + 1;
        Some((String::from_utf8(plain).ok()?, end))
    }

    /// `text` with every token this veil opens replaced by its plaintext:
    /// what a person with the key reads. Tokens it cannot open (another
    /// key, altered) are left as they are; text without a token is
    /// returned unchanged.
    pub fn reveal<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if !self.is_on() || !text.contains(PREFIX) {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        while let Some(found) = text[i..].find(PREFIX) {
            let at = i + found;
            out.push_str(&text[i..at]);
            match self.open_at(text, at) {
                Some((plain, end)) => {
                    out.push_str(&plain);
                    i = end;
                }
                None => {
                    out.push_str(PREFIX);
                    i = at + PREFIX.len();
                }
            }
        }
        out.push_str(&text[i..]);
        Cow::Owned(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn veil(keys: &[(&str, u8)]) -> Veil {
        let bytes: Vec<(String, [u8; 32])> = keys
            .iter()
            .map(|(id, b)| (id.to_string(), [*b; 32]))
            .collect();
        Veil::from_keys(bytes.iter().map(|(id, b)| (id.as_str(), b)))
    }

    #[test]
    fn a_token_is_equal_for_equal_subjects_hides_them_and_reveals_inside_text() {
        let v = veil(&[("aaaaaaaaaaaa", 1)]);
        let t = v.hide("user_123");
        assert_eq!(t, v.hide("user_123"), "deterministic: lookups are equality");
        assert_ne!(t, v.hide("user_124"));
        assert!(!t.contains("user_123") && t.starts_with("hws1.aaaaaaaaaaaa."));
        assert_eq!(
            v.reveal(&v.hide(&t)),
            t,
            "a token sent as an id is veiled like any id"
        );
        let page = format!("oldest: user.deleted {t} (delivery msg_1).");
        assert_eq!(
            v.reveal(&page),
            "oldest: user.deleted user_123 (delivery msg_1)."
        );
        assert_eq!(v.reveal("no token here"), "no token here");
        // The closing dot delimits a token inside a longer word.
        assert_eq!(v.reveal(&format!("{t}4 and {t}")), "user_1234 and user_123");
        // Unicode and long values round-trip (CTR spans several AES blocks).
        let long = "ü".repeat(70);
        assert_eq!(v.reveal(&v.hide(&long)), long);
        assert_eq!(v.reveal(&format!("[{}]", v.hide(""))), "[]");
    }

    #[test]
    fn altered_or_foreign_tokens_stay_veiled_and_never_panic() {
        let v = veil(&[("aaaaaaaaaaaa", 1)]);
        let t = v.hide("user_123");
        let mut bytes = t.clone().into_bytes();
        let n = bytes.len() - 3;
        bytes[n] = if bytes[n] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(bytes).unwrap();
        assert_eq!(v.reveal(&altered), altered);
        let other = veil(&[("bbbbbbbbbbbb", 2)]);
        assert_eq!(other.reveal(&t), t, "another key does not open it");
        for junk in [
            "hws1.",
            "hws1.aaaaaaaaaaaa.",
            "hws1.aaaaaaaaaaaa.!!.",
            "xhws1.aaa",
        ] {
            assert_eq!(v.reveal(junk), junk);
        }
        // Without a key nothing is veiled.
        let off = Veil::default();
        assert_eq!(off.hide("user_123"), "user_123");
        assert_eq!(off.forms("user_123"), vec!["user_123".to_string()]);
        assert_eq!(off.reveal(&t), t);
    }

    #[test]
    fn after_a_rotation_lookups_find_every_form_and_old_tokens_still_reveal() {
        let old = veil(&[("aaaaaaaaaaaa", 1)]);
        let rotated = veil(&[("bbbbbbbbbbbb", 2), ("aaaaaaaaaaaa", 1)]);
        let before = old.hide("user_123");
        let after = rotated.hide("user_123");
        assert_ne!(before, after, "new rows use the newest key");
        let forms = rotated.forms("user_123");
        assert!(forms.contains(&before) && forms.contains(&after));
        assert!(
            forms.contains(&"user_123".to_string()),
            "rows from before any key"
        );
        assert_eq!(rotated.reveal(&before), "user_123");
        assert!(!format!("{rotated:?}").contains("user"));
    }
}
