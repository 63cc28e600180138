//! Proof, in the type, that a body's sender was authenticated.
//!
//! Every reader of a request body ([`crate::ingest::payload::webhook_facts`],
//! [`crate::ingest::payload::app_reports`], [`crate::ingest::reconcile::parse`],
//! [`crate::ingest::svix_ops::parse_operational`], each provider's `parse` and
//! `relay_bodies`) takes a [`Verified`] rather than `&[u8]`, and a [`Verified`] is only
//! handed out by a check that passed:
//! - [`Verifier::verify`](crate::ingest::signature::Verifier::verify): a Standard Webhooks or
//!   Svix signature over the body;
//! - [`TokenChecked::vouch`](crate::ingest::bearer::TokenChecked::vouch) after
//!   [`bearer::check`](crate::ingest::bearer::check): the app's
//!   own reports ([`crate::ingest::payload::app_reports`], [`crate::ingest::reconcile::parse`]),
//!   whose bearer token is checked before their body is read;
//! - [`Provider::check_body`](crate::ingest::providers::Provider::check_body): an HMAC over
//!   the body (WorkOS), a `clientState` inside it (Entra), or, for providers that
//!   authenticate by a header alone (Okta's and Auth0's `Authorization`, Google's channel
//!   token), the [`HeadChecked`] that
//!   [`Provider::check_head`](crate::ingest::providers::Provider::check_head) returned;
//! - [`Verified::fetched_from_provider_api`]: a response the cross-check fetched from the
//!   provider's own API over TLS with its client credentials (the channel is the proof).
//!
//! The field is private and the webhook constructors are visible in `ingest` only, so code
//! outside it cannot mint one from bytes it read: calling a parser on an unverified body
//! does not compile.
//!
//! The way that compiles: the verifier's proof is what the parser takes.
//!
//! ```
//! use hushwatch_core::ingest::payload::webhook_facts;
//! use hushwatch_core::ingest::signature::{sign, SecretKey, SignedHeaders, Verifier};
//!
//! let key = SecretKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
//! let body: &[u8] = br#"{"type":"user.created"}"#;
//! let signature = sign(&key, "msg_1", 1_700_000_000, body);
//! let headers = SignedHeaders { id: "msg_1", timestamp: "1700000000", signature: &signature };
//! let verified = Verifier::new(vec![key]).verify(&headers, body, 1_700_000_000).unwrap();
//! assert_eq!(webhook_facts(verified).unwrap().event_type.as_deref(), Some("user.created"));
//! ```
//!
//! The same reader on the raw bytes does not (E0308: expected `Verified`, found `&[u8]`):
//!
//! ```compile_fail,E0308
//! use hushwatch_core::ingest::payload::webhook_facts;
//!
//! let body: &[u8] = br#"{"type":"user.created"}"#;
//! let _ = webhook_facts(body);
//! ```
//!
//! Nor can code outside `ingest` mint one (E0451: the field is private; E0624: so is the
//! constructor the checks use):
//!
//! ```compile_fail,E0451
//! use hushwatch_core::ingest::verified::Verified;
//!
//! let body: &[u8] = b"{}";
//! let _ = Verified { body };
//! ```
//!
//! ```compile_fail,E0624
//! use hushwatch_core::ingest::verified::Verified;
//!
//! let _ = Verified::proved(b"{}");
//! ```
//!
//! Entra is the one provider whose credential (`clientState`) sits inside the body, per
//! notification: its reader [`crate::ingest::providers::entra::parse`] takes an
//! [`Unverified`] body and authenticates as it reads (see that module); Entra's
//! `check_body` runs it once to mint the [`Verified`] the route then hands to `parse`.

/// A body whose sender was authenticated (see the module doc for who can make one).
#[derive(Clone, Copy)]
pub struct Verified<'a> {
    body: &'a [u8],
}

impl<'a> Verified<'a> {
    /// For the checks in `ingest` that just proved `body`'s sender (a signature or HMAC
    /// over these exact bytes).
    pub(in crate::ingest) fn proved(body: &'a [u8]) -> Verified<'a> {
        Verified { body }
    }

    /// For a provider that authenticates by a header alone: the body rides on the head's
    /// proof, which [`HeadChecked`] carries (consumed, so one check vouches for one body).
    pub(in crate::ingest) fn by_head(_checked: HeadChecked, body: &'a [u8]) -> Verified<'a> {
        Verified { body }
    }

    /// A response body fetched from the provider's own API (the cross-check's event and
    /// log listings) over TLS, with the stream's client credentials: authenticated by the
    /// channel rather than by a signature. Only `crosscheck` has such bodies; a webhook
    /// body must never come through here.
    pub fn fetched_from_provider_api(body: &'a [u8]) -> Verified<'a> {
        Verified { body }
    }

    /// The bytes, as received (for the digest, the sealed relay copy, and the readers).
    pub fn bytes(&self) -> &'a [u8] {
        self.body
    }
}

// By hand: a derived `Debug` would print the body into a panic message or a log line.
impl std::fmt::Debug for Verified<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Verified({} bytes)", self.body.len())
    }
}

/// What [`Provider::check_head`](crate::ingest::providers::Provider::check_head) returns
/// when the head's credential passed; [`Provider::check_body`](crate::ingest::providers::Provider::check_body)
/// takes it, so the body check cannot run without the head check before it.
#[derive(Debug)]
pub struct HeadChecked {
    _private: (),
}

impl HeadChecked {
    pub(in crate::ingest) fn passed() -> HeadChecked {
        HeadChecked { _private: () }
    }
}

/// A body read before (and in order to) authenticate its sender: accepted only by a
/// reader that checks a credential inside the body itself and builds nothing but bounded
/// shapes until it matches (Entra's `clientState`).
#[derive(Clone, Copy)]
pub struct Unverified<'a>(pub &'a [u8]);

impl std::fmt::Debug for Unverified<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Unverified({} bytes)", self.0.len())
    }
}
