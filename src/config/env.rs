//! `${VAR}` substitution in configuration strings.
//!
//! `${VAR:-fallback}` gives a fallback for an unset variable; `$${` writes a
//! literal `${`. An unset variable without a fallback is an error, because a
//! silently empty webhook secret would be a security hole.

/// Expands references using `lookup`. The error names the variable, never
/// its value.
pub fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let end = after.find('}').ok_or_else(|| {
                "unterminated \"${\" (close it with \"}\", or write \"$${\" for a literal)"
                    .to_string()
            })?;
            out.push_str(&resolve(&after[..end], lookup)?);
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn resolve(reference: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let (name, fallback) = match reference.split_once(":-") {
        Some((name, fallback)) => (name, Some(fallback)),
        None => (reference, None),
    };
    let valid = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if !valid {
        return Err(format!("{name:?} is not an environment variable name"));
    }
    match (lookup(name), fallback) {
        (Some(value), _) => Ok(value),
        (None, Some(fallback)) => Ok(fallback.to_string()),
        (None, None) => Err(format!("environment variable {name} is not set")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "SET").then(|| "value".to_string())
    }

    #[test]
    fn expands_references() {
        assert_eq!(expand("a-${SET}-b", &env).unwrap(), "a-value-b");
        assert_eq!(expand("${UNSET:-dflt}", &env).unwrap(), "dflt");
        assert_eq!(expand("$${SET} costs $5", &env).unwrap(), "${SET} costs $5");
    }

    #[test]
    fn unset_and_malformed_are_errors() {
        assert_eq!(
            expand("${UNSET}", &env).unwrap_err(),
            "environment variable UNSET is not set"
        );
        assert!(expand("${SET", &env).unwrap_err().contains("unterminated"));
        assert!(expand("${1X}", &env)
            .unwrap_err()
            .contains("not an environment variable name"));
    }
}
