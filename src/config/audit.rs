//! `[audit]`: whether the tamper-evident log is on, its checkpoint key and
//! interval, retention, and the extra grant/revoke event types.

use super::reader::Reader;
use super::secret::SecretString;
use crate::audit::classify::{Access, Classifier};
use chrono::TimeDelta;
use toml::Table;

/// `[audit]`: the tamper-evident log is on with no configuration at all.
#[derive(Debug, Clone)]
pub struct AuditConfig {
    pub enabled: bool,
    /// HMAC key for checkpoints; without it checkpoints carry the hash only.
    pub checkpoint_key: Option<SecretString>,
    pub checkpoint_interval: TimeDelta,
    /// Entries older than this are pruned (whole prefixes, anchored).
    pub retain: Option<TimeDelta>,
    pub classifier: Classifier,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            enabled: true,
            checkpoint_key: None,
            checkpoint_interval: TimeDelta::minutes(5),
            retain: None,
            classifier: Classifier::default(),
        }
    }
}

pub(super) fn read_audit(r: &mut Reader<'_>, root: &Table) -> AuditConfig {
    let mut audit = AuditConfig::default();
    let Some(t) = r.sub_table("", root, "audit") else {
        return audit;
    };
    r.reject_unknown(
        "audit",
        t,
        &[
            "enabled",
            "checkpoint_key",
            "checkpoint_interval",
            "retain",
            "revoke_types",
            "grant_types",
        ],
    );
    audit.enabled = r.opt_bool("audit", t, "enabled").unwrap_or(true);
    audit.checkpoint_key = r
        .opt_string("audit", t, "checkpoint_key")
        .filter(|k| !k.is_empty())
        .map(SecretString::new);
    if let Some(every) = r.opt_duration("audit", t, "checkpoint_interval") {
        if every < TimeDelta::seconds(1) {
            r.error("audit.checkpoint_interval", "must be at least 1s");
        }
        audit.checkpoint_interval = every;
    }
    audit.retain = r.opt_duration("audit", t, "retain");
    if audit.retain.is_some_and(|d| d < TimeDelta::days(1)) {
        r.error(
            "audit.retain",
            "must be at least 1d (auditors ask about months, not hours)",
        );
    }
    let mut extra = Vec::new();
    for (key, access) in [
        ("revoke_types", Access::Revoke),
        ("grant_types", Access::Grant),
    ] {
        for t in r.string_list("audit", t, key, false) {
            extra.push((t, access));
        }
    }
    audit.classifier = Classifier::new(extra);
    if audit.checkpoint_key.is_none() && audit.enabled {
        r.warnings.push(
            "audit: no checkpoint_key, so checkpoints are unsigned (they catch accidental truncation, not a deliberate rewrite)"
                .to_string(),
        );
    }
    audit
}
