//! Cross-section checks, after every section is read: names a stream or a
//! Svix source refers to must exist, plus the warnings about settings that
//! are allowed but probably unintended.

use super::reader::{join, Reader};
use super::{Config, ALWAYS};

pub(super) struct Declared {
    pub calendars: Vec<String>,
    pub notifiers: Vec<String>,
}

pub(super) fn check_references(r: &mut Reader<'_>, config: &mut Config, declared: &Declared) {
    for stream in config.streams.values() {
        let path = join("streams", &stream.name);
        if stream.calendar != ALWAYS && !declared.calendars.contains(&stream.calendar) {
            let known: Vec<&str> = std::iter::once(ALWAYS)
                .chain(config.calendars.keys().map(String::as_str))
                .collect();
            r.error(
                &join(&path, "calendar"),
                format!(
                    "no calendar named {:?} (defined: {})",
                    stream.calendar,
                    known.join(", ")
                ),
            );
        }
        for (i, notifier) in stream.notify.iter().enumerate() {
            if !declared.notifiers.contains(notifier) {
                r.error(
                    &format!("{path}.notify[{i}]"),
                    format!("no notifier named {notifier:?} (define [notifiers.{notifier}])"),
                );
            }
        }
        for (i, step) in stream.escalate.iter().enumerate() {
            for (j, notifier) in step.notify.iter().enumerate() {
                if !declared.notifiers.contains(notifier) {
                    r.error(
                        &format!("{path}.escalate[{i}].notify[{j}]"),
                        format!("no notifier named {notifier:?} (define [notifiers.{notifier}])"),
                    );
                }
            }
        }
        if stream.notify.is_empty() {
            config.warnings.push(format!(
                "{path}: no notifiers; it will only show in metrics and /v1/status"
            ));
        }
        if stream.ingest.verifier.is_none()
            && stream.ingest.tokens.is_empty()
            && !stream.ingest.provider.has_credentials()
        {
            let credential = stream.ingest.provider.credential_key();
            config.warnings.push(format!(
                "{path}.ingest: no {credential} or token, so nothing can report to it and it will fire"
            ));
        }
    }
    for svix in config.svix.values() {
        let path = join("svix", &svix.name);
        let mut refs: Vec<(String, &String)> = svix
            .streams
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("{path}.streams[{i}]"), s))
            .collect();
        refs.extend(
            svix.endpoints
                .iter()
                .map(|(e, s)| (format!("{path}.endpoints.{e}"), s)),
        );
        for (key, stream) in refs {
            if !config.streams.contains_key(stream) {
                r.error(&key, format!("no stream named {stream:?}"));
            }
        }
        for (i, notifier) in svix.notify.iter().enumerate() {
            if !declared.notifiers.contains(notifier) {
                r.error(
                    &format!("{path}.notify[{i}]"),
                    format!("no notifier named {notifier:?} (define [notifiers.{notifier}])"),
                );
            }
        }
    }
    if config.streams.is_empty() && config.templates.is_empty() {
        config
            .warnings
            .push("no [streams.NAME] defined: nothing is watched".to_string());
    }
}
