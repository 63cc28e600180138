//! `[streams.X.adaptive]` (also in `[templates.NAME]`): the "quieter than
//! usual" threshold. Every key is optional; an empty table turns the rule
//! on with the defaults (`quantile = 0.999`, `factor = 2`, `min = "30m"`).

use super::reader::{join, Reader};
use crate::domain::adaptive::AdaptivePolicy;
use chrono::TimeDelta;
use toml::{Table, Value};

/// Reads the stream's `adaptive` table (absent: the configured threshold
/// always applies).
pub(super) fn read(r: &mut Reader<'_>, path: &str, t: &Table) -> Option<AdaptivePolicy> {
    let key_path = join(path, "adaptive");
    let value = t.get("adaptive")?;
    let table = r.table(&key_path, value)?;
    r.reject_unknown(&key_path, table, &["quantile", "factor", "min"]);
    let defaults = AdaptivePolicy::default();
    let quantile = number(r, &key_path, table, "quantile").unwrap_or(defaults.quantile);
    if !(quantile > 0.0 && quantile < 1.0) {
        r.error(
            &join(&key_path, "quantile"),
            "must be between 0 and 1 (exclusive), e.g. 0.999",
        );
    }
    let factor = number(r, &key_path, table, "factor").unwrap_or(defaults.factor);
    if !(factor >= 1.0 && factor.is_finite()) {
        r.error(&join(&key_path, "factor"), "must be at least 1");
    }
    let min = r
        .opt_duration(&key_path, table, "min")
        .unwrap_or(defaults.min);
    if min < TimeDelta::minutes(1) {
        r.error(&join(&key_path, "min"), "must be at least 1m");
    }
    Some(AdaptivePolicy {
        quantile,
        factor,
        min,
    })
}

/// An integer or a float (`factor = 2` and `factor = 2.5` both read).
fn number(r: &mut Reader<'_>, path: &str, t: &Table, key: &str) -> Option<f64> {
    match t.get(key)? {
        Value::Float(f) => Some(*f),
        Value::Integer(i) => Some(*i as f64),
        other => {
            r.error(
                &join(path, key),
                format!("expected a number, found {}", other.type_str()),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{parse, Config, ConfigErrors};
    use std::path::Path;

    fn parse_str(text: &str) -> Result<Config, ConfigErrors> {
        parse(text, Path::new("."), &|_| None)
    }

    fn config(adaptive: &str) -> String {
        format!(
            "[streams.identity]\ncalendar = \"always\"\nsilence_threshold = \"6h\"\n\
             [streams.identity.adaptive]\n{adaptive}\n\
             [templates.app]\ncalendar = \"always\"\nsilence_threshold = \"2h\"\n\
             [templates.app.adaptive]\nfactor = 3\n\
             [streams.\"app-*\"]\ntemplate = \"app\"\n"
        )
    }

    fn errors(text: &str) -> Vec<String> {
        match parse_str(text) {
            Ok(_) => Vec::new(),
            Err(ConfigErrors(e)) => e.iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn an_empty_table_turns_the_rule_on_with_the_defaults() {
        let c = parse_str(&config("")).unwrap();
        let a = c.streams["identity"].adaptive.unwrap();
        assert_eq!(a, crate::domain::adaptive::AdaptivePolicy::default());
        let templated = c.templates.stream("app-1").unwrap();
        assert_eq!(templated.adaptive.unwrap().factor, 3.0);
        let c = parse_str(&config("quantile = 0.99\nfactor = 2.5\nmin = \"1h\"")).unwrap();
        let a = c.streams["identity"].adaptive.unwrap();
        assert_eq!((a.quantile, a.factor), (0.99, 2.5));
        assert_eq!(a.min, chrono::TimeDelta::hours(1));
    }

    #[test]
    fn bad_values_name_the_key_path() {
        let e = errors(&config("quantile = 1\nfactor = 0.5\nmin = \"30s\""));
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(
            e[0].starts_with("streams.identity.adaptive.quantile: "),
            "{e:?}"
        );
        assert!(
            e[1].starts_with("streams.identity.adaptive.factor: must be at least 1"),
            "{e:?}"
        );
        assert!(
            e[2].starts_with("streams.identity.adaptive.min: must be at least 1m"),
            "{e:?}"
        );
        let e = errors(&config("factor = \"2\"\nquantil = 0.9"));
        assert!(
            e.iter()
                .any(|e| e.starts_with("streams.identity.adaptive.factor: expected a number")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|e| e.starts_with("streams.identity.adaptive.quantil: unknown key")),
            "{e:?}"
        );
    }
}
