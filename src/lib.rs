//! hushwatch: a sidecar that pages people when identity events go quiet.
//!
//! Layout (see ARCHITECTURE.md):
//! - `domain`: pure calendars, business time, silence evaluation, alert states.
//! - `ingest`: signature verification and payload facts (pure).
//! - `config`: reads and validates the TOML file into domain objects.
//! - `service`: the running sidecar, wiring adapters together.
//! - `status`: the status document's types and its human renderings (page, terminal).
//! - `commands`, `cli`: the command line; `exit`: the exit codes they and `service` share.

pub mod audit;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod config;
pub mod domain;
pub mod exit;
pub mod heap;
pub mod http;
pub mod ingest;
pub mod metrics;
pub mod notify;
pub mod service;
pub mod status;
pub mod store;
