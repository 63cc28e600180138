//! Stream templates: `[templates.NAME]` holds the keys of a stream, and
//! `[streams."PREFIX*"] template = "NAME"` says that any stream named
//! PREFIX + suffix is that template, created on its first verified event or
//! by `PUT /v1/streams/{name}` and removed by `DELETE`. `[server]
//! max_streams` caps how many such streams exist, which caps the series
//! they add to `/metrics`.

use super::reader::{join, valid_name, Reader};
use super::secret::SecretString;
use super::{StreamConfig, ALWAYS};
use std::collections::BTreeMap;
use toml::{Table, Value};

/// Default of `[server] max_streams`.
pub const DEFAULT_MAX_STREAMS: usize = 10_000;
/// Longest name of a templated stream (prefix included).
pub const MAX_NAME_LEN: usize = 128;

#[derive(Debug, Clone)]
pub struct Templates {
    /// `[templates.NAME]`, each read as a stream named NAME.
    pub templates: BTreeMap<String, StreamConfig>,
    /// `[streams."PREFIX*"]`, longest prefix first so it wins.
    pub patterns: Vec<Pattern>,
    /// `[server] max_streams`: templated streams that may exist at once.
    pub max_streams: usize,
    /// `[server] admin_token`: authorizes `PUT`/`DELETE /v1/streams/{name}`.
    pub admin_token: Option<SecretString>,
}

#[derive(Debug, Clone)]
pub struct Pattern {
    pub prefix: String,
    pub template: String,
}

impl Templates {
    /// The config of the templated stream `name`, if a pattern covers it
    /// and its suffix is a valid name. Only the length-bounded name is read.
    pub fn stream(&self, name: &str) -> Option<StreamConfig> {
        if name.len() > MAX_NAME_LEN {
            return None;
        }
        let pattern = self.patterns.iter().find(|p| {
            name.strip_prefix(p.prefix.as_str())
                .is_some_and(|suffix| !suffix.is_empty() && suffix_ok(suffix))
        })?;
        let mut stream = self.templates.get(&pattern.template)?.clone();
        stream.name = name.to_string();
        stream.templated = true;
        Some(stream)
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }
}

/// Suffixes are label values and URL segments: a conservative alphabet.
fn suffix_ok(suffix: &str) -> bool {
    suffix
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Whether a `[streams]` key is a pattern (ends in `*`).
pub fn is_pattern(name: &str) -> bool {
    name.ends_with('*')
}

/// Takes the pattern entries out of `[streams]` (so the ordinary stream
/// reader never sees them) and returns them with their paths.
pub fn take_patterns(root: &mut Table) -> Vec<(String, Value)> {
    let Some(Value::Table(streams)) = root.get_mut("streams") else {
        return Vec::new();
    };
    let names: Vec<String> = streams.keys().filter(|k| is_pattern(k)).cloned().collect();
    names
        .into_iter()
        .filter_map(|n| streams.remove(&n).map(|v| (n, v)))
        .collect()
}

/// Reads `[templates]`, the patterns taken from `[streams]`, and the two
/// `[server]` keys. `calendars` and `notifiers` are the declared names.
pub fn read(
    r: &mut Reader<'_>,
    root: &Table,
    patterns: Vec<(String, Value)>,
    calendars: &[String],
    notifiers: &[String],
    read_stream: fn(&mut Reader<'_>, &str, &str, &Table) -> Option<StreamConfig>,
) -> Templates {
    let mut templates = BTreeMap::new();
    if let Some(entries) = r.sub_table("", root, "templates") {
        for (name, value) in entries {
            let path = join("templates", name);
            if !valid_name(name) {
                r.error(
                    &path,
                    "names may use letters, digits, '_', '-' and '.', up to 64 characters",
                );
                continue;
            }
            let Some(t) = r.table(&path, value) else {
                continue;
            };
            if let Some(stream) = read_stream(r, &path, name, t) {
                check_references(r, &path, &stream, calendars, notifiers);
                templates.insert(name.clone(), stream);
            }
        }
    }
    let mut out = Vec::new();
    for (name, value) in patterns {
        let path = format!("streams.{name:?}");
        let prefix = name.trim_end_matches('*');
        if prefix.is_empty() || prefix.contains('*') || prefix.len() >= MAX_NAME_LEN {
            r.error(
                &path,
                "a pattern is a non-empty prefix followed by one '*' (e.g. \"org:*\")",
            );
            continue;
        }
        let Some(t) = r.table(&path, &value) else {
            continue;
        };
        r.reject_unknown(&path, t, &["template"]);
        let Some(template) = r.req_string(&path, t, "template") else {
            continue;
        };
        if !templates.contains_key(&template) {
            r.error(
                &join(&path, "template"),
                format!("no template named {template:?} (define [templates.{template}])"),
            );
            continue;
        }
        out.push(Pattern {
            prefix: prefix.to_string(),
            template,
        });
    }
    out.sort_by_key(|p| std::cmp::Reverse(p.prefix.len()));
    let empty = Table::new();
    let server = root
        .get("server")
        .and_then(Value::as_table)
        .unwrap_or(&empty);
    let max_streams = match server.get("max_streams") {
        None => DEFAULT_MAX_STREAMS,
        Some(Value::Integer(n)) if *n >= 0 => *n as usize,
        Some(_) => {
            r.error("server.max_streams", "must be a whole number ≥ 0");
            DEFAULT_MAX_STREAMS
        }
    };
    let admin_token = r
        .opt_string("server", server, "admin_token")
        .map(|s| r.trim_secret("server.admin_token", s))
        .filter(|s| !s.is_empty())
        .map(SecretString::new);
    Templates {
        templates,
        patterns: out,
        max_streams,
        admin_token,
    }
}

fn check_references(
    r: &mut Reader<'_>,
    path: &str,
    stream: &StreamConfig,
    calendars: &[String],
    notifiers: &[String],
) {
    if stream.calendar != ALWAYS && !calendars.contains(&stream.calendar) {
        r.error(
            &join(path, "calendar"),
            format!("no calendar named {:?}", stream.calendar),
        );
    }
    let escalations = stream.escalate.iter().flat_map(|s| s.notify.iter());
    for notifier in stream.notify.iter().chain(escalations) {
        if !notifiers.contains(notifier) {
            r.error(
                &join(path, "notify"),
                format!("no notifier named {notifier:?} (define [notifiers.{notifier}])"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::parse;
    use std::path::Path;

    const BASE: &str = r#"
[notifiers.pager]
kind = "log"
[templates.org]
calendar = "always"
silence_threshold = "2h"
notify = ["pager"]
"#;

    fn errors(extra: &str) -> Vec<String> {
        match parse(&format!("{BASE}{extra}"), Path::new("."), &|_| None) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn a_pattern_names_its_stream_from_the_template() {
        let text = format!("{BASE}[streams.\"org:*\"]\ntemplate = \"org\"\n");
        let config = parse(&text, Path::new("."), &|_| None).unwrap();
        let t = &config.templates;
        assert_eq!(t.max_streams, 10_000);
        let s = t.stream("org:acme-1.eu").unwrap();
        assert_eq!(s.name, "org:acme-1.eu");
        assert_eq!(s.policy.threshold, chrono::TimeDelta::hours(2));
        assert!(t.stream("org:").is_none());
        assert!(t.stream("org:a b").is_none());
        assert!(t.stream("org:a/b").is_none());
        assert!(t.stream(&format!("org:{}", "a".repeat(200))).is_none());
        assert!(t.stream("team:acme").is_none());
        assert!(config.streams.is_empty());
    }

    #[test]
    fn bad_patterns_and_templates_name_their_key() {
        let e = errors("[streams.\"org:*\"]\ntemplate = \"nope\"\n");
        assert!(
            e.iter()
                .any(|e| e.starts_with("streams.\"org:*\".template: no template named \"nope\"")),
            "{e:?}"
        );
        let e = errors("[streams.\"*\"]\ntemplate = \"org\"\n");
        assert!(e.iter().any(|e| e.starts_with("streams.\"*\":")), "{e:?}");
        let e = errors("[templates.bad]\ncalendar = \"nowhere\"\nsilence_threshold = \"1h\"\n");
        assert!(
            e.iter().any(|e| e.starts_with("templates.bad.calendar:")),
            "{e:?}"
        );
        let e = errors("[server]\nmax_streams = -1\n");
        assert!(
            e.iter().any(|e| e.starts_with("server.max_streams:")),
            "{e:?}"
        );
    }
}
