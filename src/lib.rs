//! hushwatch: a sidecar that pages people when identity events go quiet.
//!
//! Every top-level module, in one line each (ARCHITECTURE.md has the layers,
//! which module may use which, and the invariants; each module's own `//!`
//! comment has its detail):
//! - `audit`: the tamper-evident audit log as pure functions: hash chain, checkpoints, verification, export.
//! - `cli`: argument parsing and dispatch to `commands`.
//! - `clock`: the one source of "now" (`SystemClock`; `ManualClock` in tests).
//! - `commands`: one module per subcommand: load config, call the service or store, print, exit code.
//! - `config`: reads and validates the TOML file into a `Config` (every error with its key path).
//! - `crosscheck`: the identity providers' own APIs (Clerk's listings, WorkOS's event log), read bounded and parsed typed for the cross-check.
//! - `domain`: pure calendars, business time, silence evaluation, alert states and kinds.
//! - `exit`: the process exit codes `commands` and `service` share.
//! - `heap`: hands freed heap back to the OS after start-up and reload (the one `unsafe`).
//! - `http`: the hyper server, bounded body reading and the routes, which reach the sidecar through `http::Api`.
//! - `ingest`: signature verification before parsing, and payload facts (pure).
//! - `metrics`: the Prometheus registry and names; per-stream families rendered at scrape time.
//! - `notify`: one module per notifier kind, payload builders, retry policy.
//! - `service`: the running sidecar; `service::start` is the one place that wires everything.
//! - `status`: the status document's types and its human renderings (page, terminal).
//! - `store`: all durable state, on SQLite or PostgreSQL; `Ok` only after commit.

pub mod audit;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod config;
pub mod crosscheck;
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
