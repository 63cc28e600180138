//! The docs name only what exists: every `hushwatch_*` metric named in README.md,
//! ARCHITECTURE.md, SECURITY.md, the shipped Prometheus rules or the Grafana dashboard is
//! defined in the code, and
//! every `METHOD /path` route they name is routed by a running server (it may refuse the
//! request — 401, 400, 405 — but never answers "no such route").

mod common;

use common::*;
use std::collections::BTreeSet;
use std::path::Path;

const DOCS: &[&str] = &[
    "README.md",
    "ARCHITECTURE.md",
    "SECURITY.md",
    "charts/hushwatch/rules/hushwatch.rules.yml",
    "charts/hushwatch/dashboards/hushwatch.json",
];

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

fn all_source(dir: &Path, out: &mut String) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            all_source(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
}

/// Words of the form `hushwatch_[a-z0-9_]+`, minus the histogram suffixes Prometheus adds.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("hushwatch_") {
        let start = i + at;
        let boundary =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let mut end = start + "hushwatch_".len();
        while end < bytes.len()
            && (bytes[end].is_ascii_lowercase()
                || bytes[end].is_ascii_digit()
                || bytes[end] == b'_')
        {
            end += 1;
        }
        let name = text[start..end].trim_end_matches('_');
        if boundary && name.len() > "hushwatch_".len() {
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name);
            names.insert(base.to_owned());
        }
        i = end;
    }
    names
}

#[test]
fn every_metric_the_docs_name_is_defined() {
    let mut source = String::new();
    all_source(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut source,
    );
    let mut missing = Vec::new();
    for doc in DOCS {
        for name in metric_names(&read(doc)) {
            // Config keys, crate and file names share the prefix; metric names are quoted.
            if name.starts_with("hushwatch_test") {
                continue;
            }
            if !source.contains(&format!("\"{name}")) {
                missing.push(format!("{doc}: {name}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "named in the docs, defined nowhere in src/: {missing:#?}"
    );
}

/// `METHOD /path` pairs in backticks, e.g. `POST /v1/streams/{stream}/webhook`.
fn routes(text: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for chunk in text.split('`').skip(1).step_by(2) {
        let mut words = chunk.split_whitespace();
        let (Some(method), Some(path), None) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        if ["GET", "POST", "PUT", "DELETE"].contains(&method) && path.starts_with('/') {
            out.insert((method.to_owned(), path.to_owned()));
        }
    }
    out
}

/// Placeholders in the docs' paths, filled with names the test config defines.
fn concrete(path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    let filled: Vec<String> = path
        .split('/')
        .enumerate()
        .map(|(i, seg)| {
            let svix = path.starts_with("/v1/svix/");
            match seg {
                "{stream}" | "{s}" | "X" | "{name}" if !svix => "identity".to_owned(),
                "{name}" | "{src}" if svix && i == 3 => "main".to_owned(),
                s => s.to_owned(),
            }
        })
        .collect();
    filled.join("/")
}

#[test]
fn every_route_the_docs_name_is_routed() {
    let config = format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"
admin_token = "doc-admin"

[templates.org]
calendar = "always"
silence_threshold = "1h"
[templates.org.ingest]
token = "{TOKEN}"
[streams."org:*"]
template = "org"

[streams.identity]
calendar = "always"
silence_threshold = "1h"
[streams.identity.ingest]
webhook_secret = "{SECRET}"
token = "{TOKEN}"

[svix.main]
secret = "{SECRET}"
streams = ["identity"]
admin_token = "doc-admin"
"#
    );
    let work = Workdir::new(&config);
    let server = Sidecar::start(&work.config_path());
    let mut checked = 0;
    let mut unrouted = Vec::new();
    for doc in ["README.md", "SECURITY.md", "ARCHITECTURE.md"] {
        for (method, path) in routes(&read(doc)) {
            let target = concrete(&path);
            let reply = request(server.addr, &method, &target, &[], b"");
            if reply.body.contains("no such route") {
                unrouted.push(format!("{doc}: {method} {path} -> {}", reply.status));
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 10,
        "the docs name at least the ten public routes ({checked})"
    );
    assert!(
        unrouted.is_empty(),
        "named in the docs, not routed: {unrouted:#?}"
    );
    server.stop();
}
