//! Per-stream `event_types` filter: which event types feed the silence clock.
//! Patterns are exact names or use `*` for "any run of characters"
//! (`user.*`, `*.deleted`, `*`).

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    /// Empty means "every type feeds the clock".
    patterns: Vec<String>,
}

impl EventFilter {
    pub fn new(patterns: Vec<String>) -> EventFilter {
        EventFilter { patterns }
    }

    pub fn feeds_clock(&self, event_type: &str) -> bool {
        self.patterns.is_empty() || self.patterns.iter().any(|p| glob_match(p, event_type))
    }
}

/// Iterative wildcard match with single-star backtracking: linear-ish and
/// without recursion, so hostile event types cannot blow the stack.
fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        let f = EventFilter::new(vec![
            "user.*".into(),
            "*.revoked".into(),
            "organization.deleted".into(),
        ]);
        for yes in [
            "user.created",
            "user.",
            "session.revoked",
            "organization.deleted",
        ] {
            assert!(f.feeds_clock(yes), "{yes}");
        }
        for no in [
            "users.created",
            "session.created",
            "organization.deleted.x",
            "",
        ] {
            assert!(!f.feeds_clock(no), "{no}");
        }
        assert!(EventFilter::default().feeds_clock("anything"));
    }
}
