//! Turning raw requests into trusted facts: signature verification (before
//! any parsing) and payload extraction. Pure: no I/O, no clock reads.

pub mod payload;
pub mod providers;
pub mod reconcile;
pub mod signature;
pub mod svix_ops;
