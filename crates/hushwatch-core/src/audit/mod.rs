//! The tamper-evident audit log: what were we told, and when?
//!
//! Every accepted event is appended, in the same transaction that records
//! it, as an [`Entry`] whose hash covers its own fields and the previous
//! entry's hash (a hash chain). Signed checkpoints pin the chain's head so
//! truncating the tail is detectable too. This module is pure: hashing,
//! checkpoint signatures, verification over an iterator of entries, export
//! formatting and the grant/revoke classification. SQL lives in
//! `store::audit`; commands in `commands::audit`.

pub mod chain;
pub mod checkpoint;
pub mod classify;
pub mod export;
pub mod verify;

pub use chain::{Entry, GENESIS};
