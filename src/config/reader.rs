//! A small typed reader over a parsed TOML tree that remembers the key path
//! of every value, so each error can say exactly where it is
//! (`streams.identity.silence_threshold: …`) and all errors are collected in
//! one pass instead of stopping at the first.

use super::env::expand;
use super::ConfigError;
use crate::domain::duration::parse_duration;
use chrono::TimeDelta;
use toml::{Table, Value};

pub struct Reader<'e> {
    pub errors: Vec<ConfigError>,
    /// Allowed but probably unintended settings, shown by `check` and logged.
    pub warnings: Vec<String>,
    /// Each table checked with `reject_unknown`, with the allowed keys it
    /// set and did not set. `config/example.toml` is tested against this
    /// (every key the reader accepts is shown there), so the list of keys is
    /// the reader's own, never a second copy. `None` (the default) records
    /// nothing: at 10,000 streams the record was 60,000 small strings made
    /// and dropped between the config's own allocations, which left the
    /// heap fragmented (about 17 MB more resident after start-up).
    pub key_uses: Option<Vec<KeyUse>>,
    env: &'e dyn Fn(&str) -> Option<String>,
}

/// One table's allowed keys, split into those the text set and those it did
/// not (see `Reader::key_uses`).
pub struct KeyUse {
    pub path: String,
    pub set: Vec<String>,
    pub unset: Vec<String>,
}

pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl<'e> Reader<'e> {
    pub fn new(env: &'e dyn Fn(&str) -> Option<String>) -> Reader<'e> {
        Reader {
            errors: Vec::new(),
            warnings: Vec::new(),
            key_uses: None,
            env,
        }
    }

    pub fn error(&mut self, path: &str, reason: impl Into<String>) {
        self.errors.push(ConfigError {
            path: path.to_string(),
            reason: reason.into(),
        });
    }

    /// Reports keys that are not in `allowed`, with a spelling suggestion.
    pub fn reject_unknown(&mut self, path: &str, table: &Table, allowed: &[&str]) {
        if let Some(uses) = &mut self.key_uses {
            let (set, unset): (Vec<&str>, Vec<&str>) =
                allowed.iter().partition(|k| table.contains_key(**k));
            uses.push(KeyUse {
                path: path.to_string(),
                set: set.into_iter().map(str::to_string).collect(),
                unset: unset.into_iter().map(str::to_string).collect(),
            });
        }
        for key in table.keys() {
            if !allowed.contains(&key.as_str()) {
                let reason = match closest(key, allowed) {
                    Some(near) => format!("unknown key (did you mean {near:?}?)"),
                    None => format!("unknown key (expected one of: {})", allowed.join(", ")),
                };
                self.error(&join(path, key), reason);
            }
        }
    }

    pub fn table<'t>(&mut self, path: &str, value: &'t Value) -> Option<&'t Table> {
        match value {
            Value::Table(t) => Some(t),
            other => {
                self.error(
                    path,
                    format!("expected a table, found {}", other.type_str()),
                );
                None
            }
        }
    }

    /// An optional sub-table; a missing key gives an empty table.
    pub fn sub_table<'t>(&mut self, path: &str, parent: &'t Table, key: &str) -> Option<&'t Table> {
        parent
            .get(key)
            .and_then(|v| self.table(&join(path, key), v))
    }

    pub fn string(&mut self, path: &str, value: &Value) -> Option<String> {
        match value {
            Value::String(s) => match expand(s, self.env) {
                Ok(expanded) => Some(expanded),
                Err(reason) => {
                    self.error(path, reason);
                    None
                }
            },
            other => {
                self.error(
                    path,
                    format!("expected a string, found {}", other.type_str()),
                );
                None
            }
        }
    }

    pub fn opt_string(&mut self, path: &str, table: &Table, key: &str) -> Option<String> {
        table
            .get(key)
            .and_then(|v| self.string(&join(path, key), v))
    }

    pub fn req_string(&mut self, path: &str, table: &Table, key: &str) -> Option<String> {
        if !table.contains_key(key) {
            self.error(&join(path, key), "is required");
            return None;
        }
        self.opt_string(path, table, key)
    }

    /// A list of strings; a single string is accepted as a one-item list
    /// where `single_ok` (e.g. one webhook secret, or several for rotation).
    pub fn string_list(
        &mut self,
        path: &str,
        table: &Table,
        key: &str,
        single_ok: bool,
    ) -> Vec<String> {
        let path = join(path, key);
        match table.get(key) {
            None => Vec::new(),
            Some(Value::String(_)) if single_ok => {
                self.string(&path, &table[key]).into_iter().collect()
            }
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .filter_map(|(i, v)| self.string(&format!("{path}[{i}]"), v))
                .collect(),
            Some(other) => {
                let want = if single_ok {
                    "a string or a list of strings"
                } else {
                    "a list of strings"
                };
                self.error(
                    &path,
                    format!("expected {want}, found {}", other.type_str()),
                );
                Vec::new()
            }
        }
    }

    /// A secret or token without surrounding whitespace. Values pasted from
    /// files or `${VAR}`s often end in a newline that the sender never
    /// sends; it is dropped, and a notice names the key (never the value).
    pub fn trim_secret(&mut self, path: &str, value: String) -> String {
        let trimmed = value.trim();
        if trimmed.len() == value.len() {
            return value;
        }
        if !trimmed.is_empty() {
            self.warnings.push(format!(
                "{path} had surrounding whitespace (e.g. a trailing newline); it was removed"
            ));
        }
        trimmed.to_string()
    }

    pub fn opt_bool(&mut self, path: &str, table: &Table, key: &str) -> Option<bool> {
        match table.get(key)? {
            Value::Boolean(b) => Some(*b),
            other => {
                self.error(
                    &join(path, key),
                    format!("expected true or false, found {}", other.type_str()),
                );
                None
            }
        }
    }

    pub fn opt_duration(&mut self, path: &str, table: &Table, key: &str) -> Option<TimeDelta> {
        let text = self.opt_string(path, table, key)?;
        match parse_duration(&text) {
            Ok(d) => Some(d),
            Err(e) => {
                self.error(&join(path, key), e.to_string());
                None
            }
        }
    }
}

/// The allowed key closest to `key` by edit distance, if it is a likely typo.
fn closest<'a>(key: &str, allowed: &[&'a str]) -> Option<&'a str> {
    allowed
        .iter()
        .map(|a| (edit_distance(key, a), *a))
        .filter(|(d, a)| *d <= 2.max(a.len() / 4))
        .min()
        .map(|(_, a)| a)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Names used in URLs and metric labels.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}
