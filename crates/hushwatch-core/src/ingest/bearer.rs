//! The app's own reports (`POST /v1/events/{stream}`, reconciliation
//! reports) authenticate with `Authorization: Bearer <token>` rather than a
//! signature. The check is here, beside the signature checks, so that it
//! too hands back the proof their readers take: a [`TokenChecked`] that
//! vouches for the one body read after it ([`TokenChecked::vouch`]). It is
//! its own type, not a provider's `HeadChecked`: a provider whose body
//! carries its own proof (WorkOS's HMAC) must not have that check skipped
//! by vouching from the head.
//!
//! Tokens are compared as SHA-256 digests in constant time, each configured
//! token every time (no early exit), so neither the length nor the prefix
//! of a token, nor which one matched, shows in the timing.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::verified::Verified;

/// A request whose bearer token matched; consumed by [`TokenChecked::vouch`].
#[derive(Debug)]
pub struct TokenChecked {
    _private: (),
}

impl TokenChecked {
    /// The body read after the token matched: the app sent it.
    pub fn vouch(self, body: &[u8]) -> Verified<'_> {
        Verified::proved(body)
    }
}

/// Checks an `Authorization` header value against every configured token.
/// The refusal is a fixed sentence (never the token presented).
pub fn check<'t>(
    authorization: Option<&str>,
    tokens: impl IntoIterator<Item = &'t str>,
) -> Result<TokenChecked, &'static str> {
    let presented = authorization
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or("missing \"Authorization: Bearer <token>\" header")?;
    let presented = presented.trim();
    let matched = tokens
        .into_iter()
        .fold(false, |acc, token| same_secret(token, presented) | acc);
    if matched {
        Ok(TokenChecked { _private: () })
    } else {
        Err("token does not match")
    }
}

/// Whether `candidate` is the secret `ours`, in constant time: both are
/// hashed first, so neither the time nor a length shows how close it came.
/// (`config::secret::SecretString::matches` is this on a configured secret.)
pub fn same_secret(ours: &str, candidate: &str) -> bool {
    let ours = Sha256::digest(ours.as_bytes());
    let theirs = Sha256::digest(candidate.as_bytes());
    ours.ct_eq(&theirs).into()
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn any_configured_token_passes_and_nothing_else_does() {
        let tokens = ["first-token", "second-token"];
        assert!(check(Some("Bearer second-token"), tokens).is_ok());
        assert!(
            check(Some("Bearer second-token "), tokens).is_ok(),
            "trimmed"
        );
        assert_eq!(
            check(Some("Bearer second"), tokens).unwrap_err(),
            "token does not match"
        );
        assert!(check(Some("Basic second-token"), tokens).is_err());
        assert!(check(None, tokens).is_err());
        assert!(
            check(Some("Bearer first-token"), []).is_err(),
            "no token configured"
        );
    }
}
