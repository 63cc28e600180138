//! `hushwatch serve`: run the sidecar.

use super::load_or_exit;
use std::path::Path;
use std::process::ExitCode;

pub fn run(config_path: &Path) -> ExitCode {
    let config = match load_or_exit(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    crate::service::run_blocking(config_path, config)
}
