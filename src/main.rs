use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    hushwatch::cli::run(hushwatch::cli::Cli::parse())
}
