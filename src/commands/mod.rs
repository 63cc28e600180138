//! One module per CLI command. Commands load config, call the domain or the
//! service, and turn results into output and exit codes.

pub mod audit;
pub mod audit_subject;
pub mod check;
pub mod crosscheck;
pub mod explain;
pub mod forward;
mod http_client;
pub mod migrate_store;
pub mod notify_test;
pub mod serve;
pub mod sign;
pub mod silence;
pub mod status;

use crate::config::{self, Config};
use crate::exit::EXIT_CONFIG;
use std::path::Path;
use std::process::ExitCode;

/// Loads config or prints every error to stderr and gives exit code 2.
pub fn load_or_exit(path: &Path) -> Result<Config, ExitCode> {
    config::load(path).map_err(|errors| {
        eprintln!("{}: invalid configuration:", path.display());
        for e in &errors.0 {
            eprintln!("  {e}");
        }
        ExitCode::from(EXIT_CONFIG)
    })
}

/// The one-thread runtime a command runs its I/O on. A failure is printed,
/// and answered with `code`.
pub fn runtime_or(code: u8) -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("cannot start the runtime: {e}");
            ExitCode::from(code)
        })
}

/// Parses an RFC 3339 command-line time.
pub fn parse_time(flag: &str, text: &str) -> Result<chrono::DateTime<chrono::Utc>, ExitCode> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|_| {
            eprintln!("{flag}: {text:?} is not an RFC 3339 time (e.g. 2026-12-04T15:00:00+09:00)");
            ExitCode::from(EXIT_CONFIG)
        })
}
