//! Process exit codes, shared by the commands and the running service (a
//! leaf module, so neither has to reach into `cli` for them).

/// Exit code for invalid configuration or arguments (clap uses 2 as well).
pub const EXIT_CONFIG: u8 = 2;
/// Exit code for a runtime failure.
pub const EXIT_FAILURE: u8 = 1;
