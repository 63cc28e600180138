//! `hushwatch audit verify` and `hushwatch audit export`.

use super::{load_or_exit, parse_time};
use crate::audit::chain::to_hex;
use crate::audit::classify::Access;
use crate::audit::export::{csv, jsonl, CSV_HEADER};
use crate::audit::verify::ChainWalker;
use crate::exit::{EXIT_CONFIG, EXIT_FAILURE};
use crate::service::STATE_FILE;
use crate::store::audit::{AuditReader, ExportFilter};
use chrono::{DateTime, SecondsFormat};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

pub(super) fn open(config_path: &Path) -> Result<(crate::config::Config, AuditReader), ExitCode> {
    let config = load_or_exit(config_path)?;
    let reader =
        AuditReader::open_configured(&config.store, &config.server.data_dir.join(STATE_FILE))
            .map_err(|e| {
                eprintln!("cannot read the audit log: {e}");
                ExitCode::from(EXIT_FAILURE)
            })?;
    Ok((config, reader))
}

fn time(ms: Option<i64>) -> String {
    ms.and_then(DateTime::from_timestamp_millis)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_else(|| "-".into())
}

/// Exit 0 with a summary when intact; 1 naming the first bad seq.
pub fn verify(config_path: &Path) -> ExitCode {
    let (config, reader) = match open(config_path) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let key = config
        .audit
        .checkpoint_key
        .as_ref()
        .map(|k| k.expose().as_bytes().to_vec());
    let walk = || -> Result<Result<_, _>, crate::store::StoreError> {
        let anchor = reader.anchor()?;
        let mut walker = match ChainWalker::new(anchor, &reader.checkpoints()?, key.as_deref()) {
            Ok(w) => w,
            Err(broken) => return Ok(Err(broken)),
        };
        let mut broken = None;
        reader.for_each(&ExportFilter::default(), |e| match walker.push(&e) {
            Ok(()) => true,
            Err(b) => {
                broken = Some(b);
                false
            }
        })?;
        Ok(match broken {
            Some(b) => Err(b),
            None => walker.finish().map(|s| (anchor, s)),
        })
    };
    let verdict = match walk() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("cannot read the audit log: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    match verdict {
        Ok((anchor, s)) => {
            println!("audit log intact: {} entries", s.entries);
            if let (Some(a), Some(b)) = (s.first_seq, s.last_seq) {
                println!(
                    "  seq {a}..{b}, received {} .. {}",
                    time(s.first_received_ms),
                    time(s.last_received_ms)
                );
            }
            if anchor.seq > 0 {
                println!(
                    "  pruned before seq {} (anchor {})",
                    anchor.seq + 1,
                    to_hex(&anchor.hash)
                );
            }
            println!("  head hash {}", to_hex(&s.head_hash));
            match &s.last_checkpoint {
                Some(c) => println!(
                    "  last checkpoint: seq {} at {} ({})",
                    c.seq,
                    time(Some(c.created_at_ms)),
                    if c.mac.is_some() {
                        "HMAC-signed"
                    } else {
                        "unsigned"
                    }
                ),
                None => println!("  no checkpoint yet"),
            }
            ExitCode::SUCCESS
        }
        Err(broken) => {
            eprintln!("{broken}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// `--kind reconciliation`: the entries of reconciliation reports (their
/// audit channel has the same name).
const RECONCILIATION_KIND: &str = "reconciliation";

pub struct ExportArgs<'a> {
    pub since: Option<&'a str>,
    pub until: Option<&'a str>,
    pub stream: Option<&'a str>,
    pub format: &'a str,
    pub kind: Option<&'a str>,
}

/// Streams matching entries to stdout, one per line.
pub fn export(config_path: &Path, args: &ExportArgs<'_>) -> ExitCode {
    let parse = |flag: &str, v: Option<&str>| {
        v.map(|t| parse_time(flag, t).map(|t| t.timestamp_millis()))
            .transpose()
    };
    let (since_ms, until_ms) = match (parse("--since", args.since), parse("--until", args.until)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    // `reconciliation` selects the reconciliation reports' entries (by
    // channel); the other kinds are access directions.
    let reconciliations = args.kind == Some(RECONCILIATION_KIND);
    let access_kind = args.kind.filter(|_| !reconciliations);
    let kind = match access_kind.map(|k| Access::parse(k).ok_or(k)).transpose() {
        Ok(k) => k,
        Err(bad) => {
            eprintln!(
                "--kind: {bad:?} is not one of revoke, grant, change, neutral, reconciliation"
            );
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let csv_format = match args.format {
        "jsonl" => false,
        "csv" => true,
        other => {
            eprintln!("--format: {other:?} is not jsonl or csv");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let (config, reader) = match open(config_path) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let classifier = &config.audit.classifier;
    let filter = ExportFilter {
        since_ms,
        until_ms,
        stream: args.stream.map(str::to_string),
    };
    let mut out = BufWriter::new(std::io::stdout().lock());
    if csv_format && writeln!(out, "{CSV_HEADER}").is_err() {
        return ExitCode::from(EXIT_FAILURE);
    }
    let mut write_failed = false;
    let result = reader.for_each(&filter, |stored| {
        let access = classifier.classify(&stored.entry.event_type);
        if kind.is_some_and(|k| k != access)
            || (reconciliations && stored.entry.channel != RECONCILIATION_KIND)
        {
            return true;
        }
        let line = if csv_format {
            csv(&stored.entry, &stored.stored_hash, access)
        } else {
            jsonl(&stored.entry, &stored.stored_hash, access)
        };
        // A closed pipe (e.g. `| head`) ends the export quietly.
        write_failed = writeln!(out, "{line}").is_err();
        !write_failed
    });
    let _ = out.flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("export failed: {e}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}
