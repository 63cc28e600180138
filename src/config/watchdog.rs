//! Who watches the watcher (issue #19): `[heartbeat]` (the outbound ping
//! to an external dead-man's switch), `[server] store_alarm_after` and
//! `emergency_notify` (direct pages while the store cannot be written), and
//! each notifier's `fallback`/`fallback_after` ladder. URLs go through the
//! parser the HTTP client sends with (`notifiers::http_target`), so `check`
//! refuses what a ping would fail on.

use super::notifiers;
use super::reader::{join, Reader};
use chrono::TimeDelta;
use std::collections::BTreeMap;
use toml::{Table, Value};

/// How the heartbeat is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatMethod {
    Get,
    /// With a small JSON body of hushwatch's health.
    Post,
}

#[derive(Debug, Clone)]
pub struct HeartbeatConfig {
    /// Pinged while healthy. May carry a token: never logged or shown.
    pub url: String,
    /// Pinged while degraded; default `url` + `/fail` (the healthchecks.io
    /// convention, <https://healthchecks.io/docs/signaling_failures/>).
    pub fail_url: String,
    pub interval: TimeDelta,
    pub method: HeartbeatMethod,
}

/// A notifier's fallback ladder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fallback {
    pub notify: Vec<String>,
    /// Consecutive failed attempts at which the fallbacks are paged, ascending.
    pub after: Vec<u32>,
}

/// Everything issue #19 adds to the config.
#[derive(Debug, Clone)]
pub struct WatchdogConfig {
    pub heartbeat: Option<HeartbeatConfig>,
    /// `[server] store_alarm_after`: how long writes may fail before the
    /// emergency page.
    pub store_alarm_after: TimeDelta,
    /// `[server] emergency_notify`: notifiers paged directly (not through
    /// the outbox) when the store is broken.
    pub emergency_notify: Vec<String>,
    /// `[notifiers.X] fallback` by notifier name (only those that have one).
    pub fallbacks: BTreeMap<String, Fallback>,
}

impl Default for WatchdogConfig {
    fn default() -> Self {
        WatchdogConfig {
            heartbeat: None,
            store_alarm_after: DEFAULT_STORE_ALARM_AFTER,
            emergency_notify: Vec::new(),
            fallbacks: BTreeMap::new(),
        }
    }
}

pub const DEFAULT_HEARTBEAT_INTERVAL: TimeDelta = TimeDelta::minutes(1);
pub const DEFAULT_STORE_ALARM_AFTER: TimeDelta = TimeDelta::minutes(1);
pub const DEFAULT_FALLBACK_AFTER: [u32; 3] = [1, 5, 20];
/// Keys this module reads from `[server]` and from each `[notifiers.X]`.
pub const SERVER_KEYS: [&str; 2] = ["store_alarm_after", "emergency_notify"];
pub const NOTIFIER_KEYS: [&str; 2] = ["fallback", "fallback_after"];

/// Reads `[heartbeat]`, the two `[server]` keys and every notifier's
/// ladder. Names are checked against `notifiers` (the declared names).
pub(super) fn read(r: &mut Reader<'_>, root: &Table, notifiers: &[String]) -> WatchdogConfig {
    let empty = Table::new();
    let server = match root.get("server") {
        Some(Value::Table(t)) => t,
        _ => &empty,
    };
    let store_alarm_after = match r.opt_duration("server", server, "store_alarm_after") {
        Some(d) if d < TimeDelta::seconds(1) => {
            r.error("server.store_alarm_after", "must be at least 1s");
            DEFAULT_STORE_ALARM_AFTER
        }
        Some(d) => d,
        None => DEFAULT_STORE_ALARM_AFTER,
    };
    let emergency_notify = r.string_list("server", server, "emergency_notify", false);
    for (i, name) in emergency_notify.iter().enumerate() {
        if !notifiers.contains(name) {
            r.error(
                &format!("server.emergency_notify[{i}]"),
                format!("no notifier named {name:?}"),
            );
        }
    }
    let heartbeat = root
        .get("heartbeat")
        .and_then(|v| r.table("heartbeat", v))
        .and_then(|t| read_heartbeat(r, t));
    let mut fallbacks = BTreeMap::new();
    if let Some(Value::Table(all)) = root.get("notifiers") {
        for (name, value) in all {
            if let Value::Table(t) = value {
                if let Some(f) = read_fallback(r, &join("notifiers", name), name, t, notifiers) {
                    fallbacks.insert(name.clone(), f);
                }
            }
        }
    }
    WatchdogConfig {
        heartbeat,
        store_alarm_after,
        emergency_notify,
        fallbacks,
    }
}

fn read_heartbeat(r: &mut Reader<'_>, t: &Table) -> Option<HeartbeatConfig> {
    r.reject_unknown("heartbeat", t, &["url", "interval", "fail_url", "method"]);
    let interval = match r.opt_duration("heartbeat", t, "interval") {
        Some(d) if d < TimeDelta::seconds(1) || d > TimeDelta::days(1) => {
            r.error("heartbeat.interval", "must be between 1s and 24h");
            DEFAULT_HEARTBEAT_INTERVAL
        }
        Some(d) => d,
        None => DEFAULT_HEARTBEAT_INTERVAL,
    };
    let method = match r.opt_string("heartbeat", t, "method").as_deref() {
        None | Some("POST") => HeartbeatMethod::Post,
        Some("GET") => HeartbeatMethod::Get,
        Some(other) => {
            r.error(
                "heartbeat.method",
                format!("{other:?} is not a method (use \"GET\" or \"POST\")"),
            );
            HeartbeatMethod::Post
        }
    };
    let url = r.req_string("heartbeat", t, "url");
    let url = checked_url(r, "heartbeat.url", url)?;
    let fail_url = match r.opt_string("heartbeat", t, "fail_url") {
        Some(f) => checked_url(r, "heartbeat.fail_url", Some(f))?,
        None => checked_url(r, "heartbeat.url", Some(default_fail_url(&url)))?,
    };
    Some(HeartbeatConfig {
        url,
        fail_url,
        interval,
        method,
    })
}

/// The error never echoes the URL: it may carry a token.
fn checked_url(r: &mut Reader<'_>, path: &str, url: Option<String>) -> Option<String> {
    let url = url?;
    match notifiers::http_target(&url) {
        Ok(_) => Some(url),
        Err(reason) => {
            r.error(path, reason);
            None
        }
    }
}

/// `url` with `/fail` appended to its path (query and fragment kept).
pub fn default_fail_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            let path = format!("{}/fail", u.path().trim_end_matches('/'));
            u.set_path(&path);
            u.into()
        }
        // Reported by the caller's check of the result.
        Err(_) => format!("{url}/fail"),
    }
}

fn read_fallback(
    r: &mut Reader<'_>,
    path: &str,
    name: &str,
    t: &Table,
    notifiers: &[String],
) -> Option<Fallback> {
    if !t.contains_key("fallback") {
        if t.contains_key("fallback_after") {
            r.error(&join(path, "fallback_after"), "needs fallback");
        }
        return None;
    }
    let notify = r.string_list(path, t, "fallback", true);
    let mut ok = true;
    for (i, other) in notify.iter().enumerate() {
        let at = format!("{path}.fallback[{i}]");
        if other == name {
            r.error(&at, "a notifier cannot be its own fallback");
            ok = false;
        } else if !notifiers.contains(other) {
            r.error(&at, format!("no notifier named {other:?}"));
            ok = false;
        }
    }
    let after = match t.get("fallback_after") {
        None => DEFAULT_FALLBACK_AFTER.to_vec(),
        Some(Value::Array(items)) => {
            let steps: Option<Vec<u32>> = items
                .iter()
                .map(|v| v.as_integer().and_then(|n| u32::try_from(n).ok()))
                .collect();
            match steps {
                Some(s) if !s.is_empty() && s[0] >= 1 && s.windows(2).all(|w| w[0] < w[1]) => s,
                _ => {
                    r.error(
                        &join(path, "fallback_after"),
                        "must be a non-empty ascending list of failure counts from 1 (e.g. [1, 5, 20])",
                    );
                    ok = false;
                    Vec::new()
                }
            }
        }
        Some(other) => {
            r.error(
                &join(path, "fallback_after"),
                format!("expected a list of integers, found {}", other.type_str()),
            );
            return None;
        }
    };
    ok.then_some(Fallback { notify, after })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use std::path::Path;

    const BASE: &str = r#"
[notifiers.ops]
kind = "log"
[notifiers.backup]
kind = "log"
"#;

    fn errors(extra: &str) -> Vec<String> {
        match parse(&format!("{BASE}{extra}"), Path::new("."), &|_| None) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    fn ok(extra: &str) -> WatchdogConfig {
        parse(&format!("{BASE}{extra}"), Path::new("."), &|_| None)
            .unwrap_or_else(|e| panic!("{e}"))
            .watchdog
    }

    #[test]
    fn heartbeat_defaults_follow_the_healthchecks_convention() {
        let w = ok("[heartbeat]\nurl = \"https://hc-ping.com/abc?x=1\"\n");
        let h = w.heartbeat.unwrap();
        assert_eq!(h.fail_url, "https://hc-ping.com/abc/fail?x=1");
        assert_eq!(h.interval, TimeDelta::minutes(1));
        assert_eq!(h.method, HeartbeatMethod::Post);
        assert_eq!(w.store_alarm_after, TimeDelta::minutes(1));
    }

    #[test]
    fn bad_heartbeat_keys_name_their_path_and_never_echo_the_url() {
        let e = errors("[heartbeat]\nurl = \"ftp://secret-token@x\"\nmethod = \"PUT\"\ninterval = \"0s\"\nfail_url = \"nope\"\n");
        let all = e.join("\n");
        assert!(all.contains("heartbeat.url: must start with http"), "{all}");
        assert!(all.contains("heartbeat.method"), "{all}");
        assert!(all.contains("heartbeat.interval"), "{all}");
        assert!(!all.contains("secret-token"), "{all}");
        let e = errors("[heartbeat]\ninterval = \"1m\"\n").join("\n");
        assert!(e.contains("heartbeat.url: is required"), "{e}");
    }

    #[test]
    fn fallbacks_must_name_other_existing_notifiers() {
        let e = errors("").join("\n");
        assert!(e.is_empty(), "{e}");
        let mut cfg = BASE.replace(
            "[notifiers.backup]",
            "fallback = [\"ops\", \"ghost\"]\n[notifiers.backup]",
        );
        cfg.push_str("[server]\nemergency_notify = [\"nobody\"]\n");
        let e = parse(&cfg, Path::new("."), &|_| None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("notifiers.ops.fallback[0]: a notifier cannot be its own fallback"),
            "{e}"
        );
        assert!(
            e.contains("notifiers.ops.fallback[1]: no notifier named \"ghost\""),
            "{e}"
        );
        assert!(
            e.contains("server.emergency_notify[0]: no notifier named \"nobody\""),
            "{e}"
        );
    }

    #[test]
    fn fallback_after_defaults_and_must_ascend() {
        let cfg = BASE.replace(
            "[notifiers.backup]",
            "fallback = \"backup\"\n[notifiers.backup]",
        );
        let w = parse(&cfg, Path::new("."), &|_| None).unwrap().watchdog;
        assert_eq!(w.fallbacks["ops"].after, vec![1, 5, 20]);
        assert_eq!(w.fallbacks["ops"].notify, vec!["backup".to_string()]);
        let bad = BASE.replace(
            "[notifiers.backup]",
            "fallback = \"backup\"\nfallback_after = [5, 1]\n[notifiers.backup]",
        );
        let e = parse(&bad, Path::new("."), &|_| None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("notifiers.ops.fallback_after"), "{e}");
    }
}
