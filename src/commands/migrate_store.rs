//! `hushwatch migrate-store --config FILE --to URL`: copies the SQLite state
//! of `FILE`'s `data_dir` into an empty PostgreSQL database (see
//! `store::pg::migrate`). Exit 0 after the copy committed, 1 when the
//! target is not empty or the copy failed (nothing written), 2 for a bad
//! config or URL. The URL may be `${VAR}` so the password stays out of the
//! command line; it is never printed.

use std::path::Path;
use std::process::ExitCode;

use super::load_or_exit;
use crate::exit::{EXIT_CONFIG, EXIT_FAILURE};
use crate::service::STATE_FILE;
use crate::store::pg::migrate::{copy_sqlite, MigrateError};

pub fn run(config_path: &Path, to: &str) -> ExitCode {
    let config = match load_or_exit(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let base = config_path.parent().unwrap_or(Path::new("."));
    let url = match crate::config::env::expand(to, &|name| std::env::var(name).ok()) {
        Ok(url) => url,
        Err(reason) => {
            eprintln!("--to: {reason}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let settings = match crate::store::pg::settings::parse(&url, base) {
        Ok(s) => s,
        Err(reason) => {
            eprintln!("--to: {reason}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let source = config.server.data_dir.join(STATE_FILE);
    let runtime = match super::runtime_or(EXIT_FAILURE) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match runtime.block_on(copy_sqlite(&source, &settings)) {
        Ok(report) => {
            println!("copied {} into {}:", source.display(), settings.redacted);
            for (table, rows) in report {
                println!("  {table}: {rows} rows");
            }
            println!("set [store] url to this database and start hushwatch on it");
            ExitCode::SUCCESS
        }
        Err(e @ MigrateError::NotEmpty(_)) => {
            eprintln!("migrate-store: {e}");
            ExitCode::from(EXIT_FAILURE)
        }
        Err(e) => {
            eprintln!("migrate-store failed, nothing was copied: {e}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}
