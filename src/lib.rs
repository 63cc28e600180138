//! hushwatch: a sidecar that pages people when identity events go quiet.
//!
//! This root package wires the two lower crates of the workspace into the
//! running sidecar (ARCHITECTURE.md draws the crate graph):
//! `hushwatch-core` (pure: `audit`, `domain`, `exit`, `ingest`, `status`)
//! and `hushwatch-store` (`store` on SQLite or PostgreSQL, and `clock`),
//! re-exported below under the names every module here uses.
//!
//! Its own modules, in one line each (each module's `//!` comment has its detail):
//! - `cli`: argument parsing and dispatch to `commands`.
//! - `commands`: one module per subcommand: load config, call the service or store, print, exit code.
//! - `config`: reads and validates the TOML file into a `Config` (every error with its key path).
//! - `crosscheck`: the identity providers' own APIs (Clerk's listings, WorkOS's event log), read bounded and parsed typed for the cross-check.
//! - `heap`: hands freed heap back to the OS after start-up and reload (the one `unsafe`).
//! - `http`: the hyper server, bounded body reading and the routes, which reach the sidecar through `http::Api`.
//! - `metrics`: the Prometheus registry and names; per-stream families rendered at scrape time.
//! - `notify`: one module per notifier kind, payload builders, retry policy.
//! - `service`: the running sidecar; `service::start` is the one place that wires everything.

pub mod cli;
pub mod commands;
pub mod config;
pub mod crosscheck;
pub mod heap;
pub mod http;
pub mod metrics;
pub mod notify;
pub mod service;

// The two lower crates, under the names the rest of this crate (and the
// tests and benches) use: `crate::domain::…` reads the same as before the
// split, and which crate an item lives in is the workspace's business.
pub use hushwatch_core::{audit, domain, exit, ingest, status};
pub use hushwatch_store as store;
pub use hushwatch_store::clock;
