//! A bearer token or other secret string from config.

use std::fmt;

/// Never printed: `Debug` shows `<redacted>`.
#[derive(Clone)]
pub struct SecretString(String);

impl SecretString {
    pub fn new(value: String) -> SecretString {
        SecretString(value)
    }

    /// Constant-time comparison. Both sides are hashed first so the time
    /// taken does not reveal the secret's length either.
    pub fn matches(&self, candidate: &str) -> bool {
        crate::ingest::bearer::same_secret(&self.0, candidate)
    }

    /// The raw value, for the adapters that must send it (e.g. a password).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretString(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_and_redacts() {
        let s = SecretString::new("hunter2".into());
        assert!(s.matches("hunter2"));
        assert!(!s.matches("hunter3"));
        assert!(!s.matches(""));
        assert!(!format!("{s:?}").contains("hunter2"));
    }
}
