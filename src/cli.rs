//! Command-line interface: argument parsing and dispatch only. Each command
//! lives in `commands/`.

use crate::commands;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

pub use crate::exit::{EXIT_CONFIG, EXIT_FAILURE};

#[derive(Debug, Parser)]
#[command(
    name = "hushwatch",
    version,
    about = "Pages people when identity events go quiet"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a config file; prints a summary, or every error with its key path.
    Check {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Show when a stream would fire after a given last event, as JSON.
    Explain {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        #[arg(long, value_name = "NAME")]
        stream: String,
        /// RFC 3339 instant of the last event, e.g. 2026-12-04T15:00:00+09:00
        #[arg(long, value_name = "TIME")]
        last_event: String,
        /// RFC 3339 instant to evaluate at (default: now)
        #[arg(long, value_name = "TIME")]
        now: Option<String>,
    },
    /// Send one clearly labelled test page through a notifier and report the result.
    NotifyTest {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        #[arg(long, value_name = "NAME")]
        notifier: String,
    },
    /// Cross-check one stream with its provider's API now: one poll, its findings printed.
    Crosscheck {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        #[arg(long, value_name = "NAME")]
        stream: String,
        /// text (a table) or json
        #[arg(long, value_name = "FORMAT", default_value = "text")]
        format: String,
        /// Poll and print the findings, but store and page nothing (no cursor
        /// moved, no snapshot kept, no finding recorded)
        #[arg(long)]
        dry_run: bool,
        /// Forget the event-log checkpoint first, then poll from the watch
        /// start (at most the provider's retention back): for a checkpoint
        /// the provider no longer keeps (Auth0)
        #[arg(long, conflicts_with = "dry_run")]
        restart: bool,
    },
    /// Run the sidecar.
    Serve {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Print the webhook-id, webhook-timestamp and webhook-signature headers
    /// (Standard Webhooks) for a body, to send a signed test webhook by hand.
    Sign {
        /// Environment variable holding the whsec_... secret (never passed as an argument)
        #[arg(long, value_name = "VAR")]
        secret_env: String,
        /// File with the exact body to send; - reads standard input
        #[arg(long, value_name = "FILE")]
        body: PathBuf,
        /// webhook-id to sign (default: derived from the body and timestamp)
        #[arg(long, value_name = "ID")]
        id: Option<String>,
        /// Unix seconds to sign (default: now; receivers accept ±300 s)
        #[arg(long, value_name = "SECONDS")]
        timestamp: Option<i64>,
    },
    /// Print the status overview of a running hushwatch. Exit 0: all is
    /// well; 1: a stream is firing, a relay stream is failing, holds events
    /// it cannot send, has dead letters or a revocation undelivered past
    /// critical_after, a cross-check is failing or has open findings, a
    /// Svix endpoint is disabled or has lost messages, or storage is
    /// failing; 2: invalid --config or
    /// arguments; 3: the server cannot be reached or gives no status
    /// document within 10 s.
    Status {
        /// Base URL of the server (default: from --config's admin_listen or listen, else http://127.0.0.1:9477)
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Copy the SQLite state of --config's data_dir into an empty PostgreSQL database.
    MigrateStore {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// postgres:// URL of the empty target database (${VAR} is expanded)
        #[arg(long, value_name = "URL")]
        to: String,
    },
    /// Operator silences over the admin API (needs [server] admin_token).
    Silence {
        #[command(subcommand)]
        command: SilenceCommand,
    },
    /// Acknowledge a stream's firing episode: stops its reminders and escalations.
    Ack {
        #[command(flatten)]
        target: AdminTarget,
        #[arg(long, value_name = "NAME")]
        stream: String,
        #[arg(long, value_name = "TEXT")]
        comment: String,
        /// Who acknowledges (default: $USER)
        #[arg(long, value_name = "NAME")]
        created_by: Option<String>,
    },
    /// Relay mode: send a window of stored deliveries (--from and --to), or
    /// every dead letter (--dead-letters), to the app again, in order, under
    /// their original webhook-ids (needs [server] admin_token).
    Replay {
        #[command(flatten)]
        target: AdminTarget,
        #[arg(long, value_name = "NAME")]
        stream: String,
        /// Start of the window, RFC 3339 (received at or after)
        #[arg(
            long,
            value_name = "TIME",
            requires = "to",
            required_unless_present = "dead_letters"
        )]
        from: Option<String>,
        /// End of the window, RFC 3339 (received before)
        #[arg(
            long,
            value_name = "TIME",
            requires = "from",
            required_unless_present = "dead_letters"
        )]
        to: Option<String>,
        /// Every dead letter of the stream, whenever it arrived (no window)
        #[arg(long, conflicts_with_all = ["from", "to"])]
        dead_letters: bool,
        /// Only these event types (repeatable)
        #[arg(long = "type", value_name = "TYPE")]
        types: Vec<String>,
        /// Count and list what would be sent; send nothing
        #[arg(long)]
        dry_run: bool,
        /// Who replays (default: $USER)
        #[arg(long, value_name = "NAME")]
        created_by: Option<String>,
        #[arg(long, value_name = "FORMAT", default_value = "table", value_parser = ["table", "json"])]
        format: String,
    },
    /// Relay mode: the events waiting to be delivered to the app, and what
    /// to do with one that is stuck (needs [server] admin_token).
    Forward {
        #[command(subcommand)]
        command: ForwardCommand,
    },
    /// The tamper-evident audit log of every accepted event.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
}

/// Where the admin API is and where its token comes from.
#[derive(Debug, clap::Args)]
pub struct AdminTarget {
    /// Base URL of the server (default: from --config's admin_listen or listen, else http://127.0.0.1:9477)
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Environment variable holding [server] admin_token (never passed as an argument)
    #[arg(long, value_name = "VAR", default_value = commands::silence::TOKEN_ENV)]
    token_env: String,
}

impl AdminTarget {
    fn target(&self) -> commands::silence::Target<'_> {
        commands::silence::Target {
            url: self.url.as_deref(),
            config: self.config.as_deref(),
            token_env: &self.token_env,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum SilenceCommand {
    /// Silence streams for a while: no pages, but evaluation and metrics go on.
    Add {
        #[command(flatten)]
        target: AdminTarget,
        /// Stream to silence (repeatable; "*" for all)
        #[arg(long, value_name = "NAME", required = true)]
        stream: Vec<String>,
        /// Alert kinds to silence (repeatable, '*' wildcards; default: all)
        #[arg(long, value_name = "KIND")]
        kind: Vec<String>,
        /// How long, e.g. 2h (from now)
        #[arg(long = "for", value_name = "DURATION", conflicts_with = "until")]
        for_: Option<String>,
        /// Until this RFC 3339 time
        #[arg(long, value_name = "TIME")]
        until: Option<String>,
        #[arg(long, value_name = "TEXT")]
        comment: String,
        /// Who silences (default: $USER)
        #[arg(long, value_name = "NAME")]
        created_by: Option<String>,
    },
    /// Active silences and those that ended in the last 7 days, as JSON.
    List {
        #[command(flatten)]
        target: AdminTarget,
    },
    /// End a silence now.
    Expire {
        #[command(flatten)]
        target: AdminTarget,
        id: i64,
        /// Who ends it (default: $USER)
        #[arg(long, value_name = "NAME")]
        created_by: Option<String>,
        /// Why it ends early (recorded in the audit log)
        #[arg(long, value_name = "TEXT")]
        comment: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ForwardCommand {
    /// The stream's undelivered events, oldest first: type, subject,
    /// received at, attempts, next attempt and last error.
    List {
        #[command(flatten)]
        target: AdminTarget,
        #[arg(long, value_name = "NAME")]
        stream: String,
        /// Only events in this state (default: all three)
        #[arg(long, value_name = "STATE", value_parser = ["pending", "held", "dead"])]
        state: Option<String>,
        /// Events shown at most, 1 to 500 (default 100); the rest are counted
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        #[arg(long, value_name = "FORMAT", default_value = "table", value_parser = ["table", "json"])]
        format: String,
    },
    /// Attempt now: one pending event (--id), or every pending event of the
    /// stream, and wake the forwarder. Held events stay held.
    Retry {
        #[command(flatten)]
        target: AdminTarget,
        #[arg(long, value_name = "NAME")]
        stream: String,
        /// The event's webhook-id (default: every pending event)
        #[arg(long, value_name = "WEBHOOK_ID")]
        id: Option<String>,
        /// Why (recorded in the audit log)
        #[arg(long, value_name = "TEXT")]
        comment: Option<String>,
        /// Who retries (default: $USER)
        #[arg(long, value_name = "NAME")]
        created_by: Option<String>,
    },
    /// Make one pending or held event a dead letter now, so the events
    /// waiting behind it go on; replay it later with --dead-letters.
    Skip {
        #[command(flatten)]
        target: AdminTarget,
        #[arg(long, value_name = "NAME")]
        stream: String,
        /// The event's webhook-id
        #[arg(long, value_name = "WEBHOOK_ID")]
        id: String,
        /// Why (recorded in the audit log)
        #[arg(long, value_name = "TEXT")]
        comment: String,
        /// Who skips (default: $USER)
        #[arg(long, value_name = "NAME")]
        created_by: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Walk the hash chain and checkpoints; exit 1 naming the first bad entry.
    Verify {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Every audit entry and reconciliation finding about one subject, in order.
    Subject {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// The subject id, e.g. user_123
        #[arg(value_name = "SUBJECT_ID")]
        subject: String,
        #[arg(long, value_name = "FORMAT", default_value = "jsonl")]
        format: String,
    },
    /// One record per line (JSON Lines or CSV), streamed.
    Export {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Only entries received at or after this RFC 3339 time
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
        /// Only entries received before this RFC 3339 time
        #[arg(long, value_name = "TIME")]
        until: Option<String>,
        #[arg(long, value_name = "NAME")]
        stream: Option<String>,
        #[arg(long, value_name = "FORMAT", default_value = "jsonl")]
        format: String,
        /// Only events of this access direction: revoke, grant, change, neutral;
        /// or `reconciliation`: only reconciliation reports
        #[arg(long, value_name = "KIND")]
        kind: Option<String>,
    },
}

pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Check { config } => commands::check::run(&config),
        Command::Explain {
            config,
            stream,
            last_event,
            now,
        } => commands::explain::run(&config, &stream, &last_event, now.as_deref()),
        Command::NotifyTest { config, notifier } => commands::notify_test::run(&config, &notifier),
        Command::Crosscheck {
            config,
            stream,
            format,
            dry_run,
            restart,
        } => commands::crosscheck::run(&config, &stream, &format, dry_run, restart),
        Command::Serve { config } => commands::serve::run(&config),
        Command::Sign {
            secret_env,
            body,
            id,
            timestamp,
        } => commands::sign::run(&commands::sign::SignArgs {
            secret_env: &secret_env,
            body: &body,
            id: id.as_deref(),
            timestamp,
        }),
        Command::Status { url, config } => commands::status::run(url.as_deref(), config.as_deref()),
        Command::MigrateStore { config, to } => commands::migrate_store::run(&config, &to),
        Command::Silence { command } => run_silence(command),
        Command::Ack {
            target,
            stream,
            comment,
            created_by,
        } => commands::silence::ack(&target.target(), &stream, &comment, created_by.as_deref()),
        Command::Replay {
            target,
            stream,
            from,
            to,
            dead_letters,
            types,
            dry_run,
            created_by,
            format,
        } => commands::silence::replay(
            &target.target(),
            &commands::silence::ReplayArgs {
                stream: &stream,
                from: from.as_deref(),
                to: to.as_deref(),
                dead_letters,
                types: &types,
                dry_run,
                created_by: created_by.as_deref(),
                json: format == "json",
            },
        ),
        Command::Forward { command } => run_forward(command),
        Command::Audit {
            command: AuditCommand::Verify { config },
        } => commands::audit::verify(&config),
        Command::Audit {
            command:
                AuditCommand::Subject {
                    config,
                    subject,
                    format,
                },
        } => commands::audit_subject::subject(&config, &subject, &format),
        Command::Audit {
            command:
                AuditCommand::Export {
                    config,
                    since,
                    until,
                    stream,
                    format,
                    kind,
                },
        } => commands::audit::export(
            &config,
            &commands::audit::ExportArgs {
                since: since.as_deref(),
                until: until.as_deref(),
                stream: stream.as_deref(),
                format: &format,
                kind: kind.as_deref(),
            },
        ),
    }
}

fn run_forward(command: ForwardCommand) -> ExitCode {
    match command {
        ForwardCommand::List {
            target,
            stream,
            state,
            limit,
            format,
        } => commands::forward::list(
            &target.target(),
            &commands::forward::ListArgs {
                stream: &stream,
                state: state.as_deref(),
                limit,
                json: format == "json",
            },
        ),
        ForwardCommand::Retry {
            target,
            stream,
            id,
            comment,
            created_by,
        } => commands::forward::retry(
            &target.target(),
            &stream,
            id.as_deref(),
            comment.as_deref(),
            created_by.as_deref(),
        ),
        ForwardCommand::Skip {
            target,
            stream,
            id,
            comment,
            created_by,
        } => commands::forward::skip(
            &target.target(),
            &stream,
            &id,
            &comment,
            created_by.as_deref(),
        ),
    }
}

fn run_silence(command: SilenceCommand) -> ExitCode {
    match command {
        SilenceCommand::Add {
            target,
            stream,
            kind,
            for_,
            until,
            comment,
            created_by,
        } => commands::silence::add(
            &target.target(),
            &commands::silence::AddArgs {
                streams: &stream,
                kinds: &kind,
                for_: for_.as_deref(),
                until: until.as_deref(),
                comment: &comment,
                created_by: created_by.as_deref(),
            },
        ),
        SilenceCommand::List { target } => commands::silence::list(&target.target()),
        SilenceCommand::Expire {
            target,
            id,
            created_by,
            comment,
        } => commands::silence::expire(
            &target.target(),
            id,
            created_by.as_deref(),
            comment.as_deref(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// `hushwatch status --help` says what each exit code means, as the
    /// exit-code reference does (issue #44: it said 2 for unreachable).
    #[test]
    fn status_help_gives_the_exit_codes_the_docs_give() {
        let mut cli = Cli::command();
        let help = cli
            .find_subcommand_mut("status")
            .expect("status")
            .render_long_help()
            .to_string();
        let docs = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/src/reference/exit-codes.md"
        ))
        .unwrap();
        let row = docs
            .lines()
            .find(|l| l.starts_with("| `hushwatch status"))
            .expect("the status row of exit-codes.md");
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        // | command | 0 | 1 | 2 | 3 |
        assert!(cells[2].starts_with("all is well") && help.contains("Exit 0: all is well"));
        assert!(cells[3].contains("a stream is firing") && help.contains("1: a stream is firing"));
        assert!(
            cells[3].contains("a cross-check is not `ok`")
                && help.contains("a cross-check is failing or has open findings")
        );
        assert!(cells[4].starts_with("invalid `--config`") && help.contains("2: invalid --config"));
        assert!(
            cells[5].starts_with("the server cannot be reached")
                && help.contains("3: the server cannot be reached")
        );
    }
}
