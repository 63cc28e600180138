//! hushwatch-core: the part of hushwatch that is pure. It reads no clock and
//! does no I/O; every instant and every byte is an argument, so everything
//! here is decided by its inputs and tested without a runtime. Its
//! dependency tree has no async runtime, HTTP, database or TLS (the crate
//! graph holds that, not a convention).
//!
//! - `audit`: the tamper-evident audit log as pure functions: hash chain, checkpoints, verification, export.
//! - `domain`: calendars, business time, silence evaluation, alert states and kinds.
//! - `exit`: the process exit codes the commands and the service share.
//! - `ingest`: signature verification before parsing, and payload facts.
//! - `status`: the status document's types and its human renderings (page, terminal).

pub mod audit;
pub mod domain;
pub mod exit;
pub mod ingest;
pub mod status;
