//! Turning raw requests into trusted facts: signature verification (before
//! any parsing) and payload extraction. Pure: no I/O, no clock reads.

pub mod bearer;
pub mod payload;
pub mod providers;
pub mod reconcile;
pub mod signature;
pub mod svix_ops;
pub mod verified;

/// The readers over arbitrary bytes, for `fuzz/` and `tests/it/fuzz_seeds.rs` only: what
/// a reader does with hostile bytes is the property fuzzed, whoever vouched for them, so
/// these skip the credential checks on purpose. Nothing else may call them (a reviewer
/// greps for `ingest::fuzz`).
#[doc(hidden)]
pub mod fuzz {
    use super::payload::{PayloadError, WebhookFacts};
    use super::svix_ops::OpMessage;
    use super::verified::Verified;

    pub fn webhook_facts(data: &[u8]) -> Result<WebhookFacts, PayloadError> {
        super::payload::webhook_facts(Verified::proved(data))
    }

    pub fn parse_operational(data: &[u8]) -> Result<OpMessage, PayloadError> {
        super::svix_ops::parse_operational(Verified::proved(data))
    }

    pub fn app_reports(data: &[u8]) -> Result<Vec<super::payload::AppReport>, PayloadError> {
        super::payload::app_reports(Verified::proved(data))
    }
}
