//! The docs name only what exists: every `hushwatch_*` metric named in README.md, a page
//! of the book (`docs/src/**/*.md`), ARCHITECTURE.md, SECURITY.md, the shipped Prometheus
//! rules or the Grafana dashboard is defined in the code, and
//! every `METHOD /path` route they name is routed by a running server (it may refuse the
//! request — 401, 400, 405 — but never answers "no such route").
//!
//! And the docs lead somewhere: every relative link and `#anchor` in README.md and the
//! book resolves to a file and a heading (`every_relative_link_in_the_docs_resolves`).
//! mdbook 0.4 checks none of this itself, so `mdbook build` alone would ship a 404.

use crate::common;

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

/// The prose docs: README.md and every page of the book, `docs/src/**/*.md` (drafts in
/// `docs/src/_incoming/` too: what they name must exist as well), repository-relative.
fn prose_docs() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = vec!["README.md".to_string()];
    book_pages(&root.join("docs/src"), root, &mut out);
    out
}

fn book_pages(dir: &Path, root: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            book_pages(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            let rel = path.strip_prefix(root).unwrap();
            out.push(rel.to_string_lossy().into_owned());
        }
    }
}

/// Every document this file checks names against: the fixed list plus the book.
fn all_docs() -> Vec<String> {
    let mut docs: Vec<String> = DOCS.iter().map(|d| d.to_string()).collect();
    docs.extend(prose_docs().into_iter().filter(|d| d != "README.md"));
    docs
}

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
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    all_source(&root.join("src"), &mut source);
    all_source(&root.join("crates"), &mut source);
    let mut missing = Vec::new();
    let docs = all_docs();
    assert!(
        docs.len() >= 20,
        "the book's pages were not found: {docs:?}"
    );
    for doc in &docs {
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
        "named in the docs, defined nowhere in src/ or crates/: {missing:#?}"
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
    let mut docs = prose_docs();
    docs.extend(["SECURITY.md".to_string(), "ARCHITECTURE.md".to_string()]);
    for doc in &docs {
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

/// The id mdbook 0.4 gives a heading (`mdbook::utils::normalize_id`): its text without
/// markup, lowercased, whitespace as `-`, anything but alphanumerics, `-` and `_` dropped.
/// GitHub's ids for the same headings agree (both keep `-` runs: "a — b" is `a--b`).
fn heading_id(heading: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in heading.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if in_tag => {}
            // Link markup: keep the link's text, drop its target.
            '`' | '*' | '[' => {}
            c => text.push(c),
        }
    }
    // `[text](target)` became `text](target)`: drop each `](target)`.
    while let Some(at) = text.find("](") {
        let end = text[at..].find(')').map_or(text.len(), |e| at + e + 1);
        text.replace_range(at..end, "");
    }
    text.trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_ascii_lowercase())
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// A document's text with mdbook's `{{#include FILE}}` / `{{#include FILE:ANCHOR}}`
/// expanded (the getting-started page includes README.md's quick start), so its headings
/// count as the page's own.
fn expanded(rel: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = read(rel);
    let dir = Path::new(rel).parent().unwrap_or(Path::new(""));
    let mut out = String::new();
    for line in text.lines() {
        let Some(spec) = line
            .trim()
            .strip_prefix("{{#include ")
            .and_then(|s| s.strip_suffix("}}"))
        else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let (file, anchor) = match spec.split_once(':') {
            Some((f, a)) => (f.trim(), Some(a.trim())),
            None => (spec.trim(), None),
        };
        let included = std::fs::read_to_string(root.join(dir).join(file))
            .unwrap_or_else(|e| panic!("{rel}: {{{{#include {file}}}}}: {e}"));
        match anchor {
            None => out.push_str(&included),
            Some(name) => {
                let start = format!("ANCHOR: {name}");
                let end = format!("ANCHOR_END: {name}");
                let body: Vec<&str> = included
                    .lines()
                    .skip_while(|l| !l.contains(&start))
                    .skip(1)
                    .take_while(|l| !l.contains(&end))
                    .collect();
                assert!(
                    !body.is_empty(),
                    "{rel}: {file} has no text between `{start}` and `{end}`"
                );
                out.push_str(&body.join("\n"));
            }
        }
        out.push('\n');
    }
    out
}

/// The ids of a document's headings (ATX `#` headings outside fenced blocks), with
/// mdbook's `-1`, `-2` suffixes for repeats.
fn heading_ids(text: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if fence || hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let id = heading_id(&line[hashes..]);
        let n = seen.entry(id.clone()).or_insert(0);
        ids.insert(if *n == 0 {
            id.clone()
        } else {
            format!("{id}-{n}")
        });
        *n += 1;
    }
    ids
}

/// The `[text](target)` link targets of a document, outside fenced blocks and code
/// spans, with the line each is on.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fence = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        // Code spans never hold links: drop them (odd-numbered pieces between backticks).
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        for rest in prose.split("](").skip(1) {
            if let Some(target) = rest.split(')').next() {
                let target = target.split_whitespace().next().unwrap_or("");
                out.push((n + 1, target.to_string()));
            }
        }
    }
    out
}

/// Pages `docs/src/SUMMARY.md` links: the only pages mdbook renders.
fn summary_pages() -> BTreeSet<String> {
    link_targets(&read("docs/src/SUMMARY.md"))
        .into_iter()
        .map(|(_, t)| format!("docs/src/{t}"))
        .collect()
}

/// Normalises `a/b/../c` to `a/c` (no filesystem access: the target may not exist).
fn normalize(path: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::CurDir => {}
            c => parts.push(c.as_os_str().to_string_lossy().into_owned()),
        }
    }
    parts.join("/")
}

/// Every problem with one link, or None when it resolves.
fn broken_link(doc: &str, target: &str, rendered: &BTreeSet<String>) -> Option<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        doc.to_string()
    } else {
        normalize(&Path::new(doc).parent().unwrap_or(Path::new("")).join(path))
    };
    let in_book = doc.starts_with("docs/src/");
    if in_book && !file.starts_with("docs/src/") {
        return Some("leaves docs/src/: mdbook does not copy it into the book".into());
    }
    // mdbook renders a README.md chapter as index.html but leaves links to it as
    // README.html (rust-lang/mdBook#984, open), so the book names its folder pages index.md.
    if in_book && file.ends_with("/README.md") {
        return Some("a link to README.md breaks in mdbook (name the page index.md)".into());
    }
    if !root.join(&file).exists() {
        return Some(format!("{file} does not exist"));
    }
    if in_book && file.ends_with(".md") && !rendered.contains(&file) {
        return Some(format!(
            "{file} is not in SUMMARY.md, so mdbook does not render it"
        ));
    }
    if let Some(anchor) = anchor {
        if !file.ends_with(".md") {
            return Some(format!("#{anchor} into {file}, which has no headings"));
        }
        let ids = heading_ids(&expanded(&file));
        if !ids.contains(anchor) {
            return Some(format!("{file} has no heading #{anchor} (it has {ids:?})"));
        }
    }
    None
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let rendered = summary_pages();
    let mut checked = 0;
    let mut broken = Vec::new();
    for doc in prose_docs() {
        // Drafts are not rendered; their links are checked once merged into a page.
        if doc.starts_with("docs/src/_incoming/") {
            continue;
        }
        for (line, target) in link_targets(&read(&doc)) {
            if let Some(why) = broken_link(&doc, &target, &rendered) {
                broken.push(format!("{doc}:{line}: ({target}): {why}"));
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 50,
        "only {checked} links found: extraction broke"
    );
    assert!(broken.is_empty(), "broken links: {broken:#?}");
}

#[test]
fn the_link_check_fails_on_what_would_404() {
    let rendered = summary_pages();
    let doc = "docs/src/providers/clerk.md";
    assert_eq!(broken_link(doc, "../notifiers.md", &rendered), None);
    assert_eq!(
        broken_link(doc, "index.md#providers-that-sign-nothing", &rendered),
        None
    );
    assert_eq!(broken_link(doc, "#with-the-helm-chart", &rendered), None);
    assert_eq!(
        broken_link(doc, "https://example.org/x.md", &rendered),
        None
    );
    // An anchor inside the README text the getting-started page includes.
    assert_eq!(
        broken_link(
            doc,
            "../getting-started.md#a-first-page-in-a-minute",
            &rendered
        ),
        None
    );
    for bad in [
        "../notifier.md",
        "index.md#no-such-heading",
        "#no-such-heading",
        "../../../ARCHITECTURE.md",
        "../_incoming/README.md",
    ] {
        assert!(
            broken_link(doc, bad, &rendered).is_some(),
            "{bad} should be reported"
        );
    }
    assert_eq!(
        heading_id("Status page and `hushwatch status`"),
        "status-page-and-hushwatch-status"
    );
    assert_eq!(
        heading_id("Quieter than usual (`[streams.X.adaptive]`)"),
        "quieter-than-usual-streamsxadaptive"
    );
    assert_eq!(
        heading_id("Relay mode — not yet available"),
        "relay-mode--not-yet-available"
    );
    let ids = heading_ids("# A\n```\n# not a heading\n```\n## A\n");
    assert_eq!(ids, BTreeSet::from(["a".to_string(), "a-1".to_string()]));
}

/// Issue #44: the getting-started page reads on its own as Markdown (on a
/// forge, in an editor), not only through mdbook: no `{{#include}}` or
/// other mdbook-only directive, and every link stays inside the book.
#[test]
fn the_getting_started_page_reads_on_its_own() {
    let text = read("docs/src/getting-started.md");
    assert!(
        !text.contains("{{#"),
        "an mdbook directive in getting-started.md"
    );
    assert!(text.contains("## A first page, in a minute"));
    assert!(text.contains("hushwatch serve --config config/first-page.toml &"));
}
