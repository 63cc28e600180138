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
    /// Print the status overview of a running hushwatch; exit 0 all ok, 1 firing, 2 unreachable.
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
    /// Relay mode: send a window of stored deliveries to the app again, in
    /// order, under their original webhook-ids (needs [server] admin_token).
    Replay {
        #[command(flatten)]
        target: AdminTarget,
        #[arg(long, value_name = "NAME")]
        stream: String,
        /// Start of the window, RFC 3339 (received at or after)
        #[arg(long, value_name = "TIME")]
        from: String,
        /// End of the window, RFC 3339 (received before)
        #[arg(long, value_name = "TIME")]
        to: String,
        /// Only these event types (repeatable)
        #[arg(long = "type", value_name = "TYPE")]
        types: Vec<String>,
        /// List what would be sent, send nothing
        #[arg(long)]
        dry_run: bool,
        /// Who replays (default: $USER)
        #[arg(long, value_name = "NAME")]
        created_by: Option<String>,
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
        } => commands::crosscheck::run(&config, &stream, &format),
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
            types,
            dry_run,
            created_by,
        } => commands::silence::replay(
            &target.target(),
            &commands::silence::ReplayArgs {
                stream: &stream,
                from: &from,
                to: &to,
                types: &types,
                dry_run,
                created_by: created_by.as_deref(),
            },
        ),
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
