//! `[svix.NAME]`: Svix environments whose operational webhooks we take.

use super::reader::{join, Reader};
use super::secret::SecretString;
use crate::ingest::signature::{SecretKey, Verifier};
use chrono::TimeDelta;
use std::collections::BTreeMap;
use std::sync::Arc;
use toml::Table;

#[derive(Debug, Clone)]
pub struct SvixConfig {
    pub name: String,
    /// Verifies the operational endpoint's signatures (several for rotation).
    pub verifier: Arc<Verifier>,
    /// Streams these endpoints feed; the first files unmapped endpoints' pages.
    pub streams: Vec<String>,
    pub notify: Vec<String>,
    /// Endpoint id or uid → stream.
    pub endpoints: BTreeMap<String, String>,
    /// Bearer token for `POST /v1/svix/NAME/acknowledge`.
    pub admin_token: Option<SecretString>,
    /// Event types that also clear a disabled endpoint (`endpoint.updated`, `endpoint.deleted`).
    pub clear_on: Vec<String>,
    /// A burst of exhausted messages is grouped into one updated page per endpoint per window.
    pub group_window: TimeDelta,
    /// Which Svix sends the operational webhooks (`flavor`).
    pub flavor: SvixFlavor,
}

/// Svix Cloud and the open-source `svix-server` send different operational
/// webhooks. Seen running `svix-server` 1.100 end to end (issue 31): a
/// manual disable (PATCH `{"disabled": true}`) sends only `endpoint.updated`,
/// with no disabled flag; `endpoint.disabled` comes only from the automatic
/// path and has no `trigger` (Cloud's schema adds it); re-enabling sends only
/// `endpoint.updated`, never `endpoint.enabled`; `endpointUid` is absent from
/// `message.attempt.*` and `null` in `endpoint.disabled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SvixFlavor {
    /// Svix Cloud (the default): `endpoint.enabled` ends a disable.
    #[default]
    Cloud,
    /// The open-source server: only `endpoint.updated` can stand for a
    /// re-enable, so `clear_on = ["endpoint.updated"]` is meaningful here.
    Oss,
}

impl SvixFlavor {
    pub fn as_str(self) -> &'static str {
        match self {
            SvixFlavor::Cloud => "cloud",
            SvixFlavor::Oss => "oss",
        }
    }
}

/// Does a `[svix.NAME] endpoints` key look like an endpoint uid rather than
/// an id? Svix endpoint ids are `ep_` followed by a KSUID; uids are chosen
/// by whoever created the endpoint.
pub fn looks_like_uid(key: &str) -> bool {
    !key.starts_with("ep_")
}

impl SvixConfig {
    /// The stream an endpoint feeds: mapped by id or uid, else the first.
    pub fn stream_for(&self, endpoint_id: &str, endpoint_uid: Option<&str>) -> (String, bool) {
        let mapped = self
            .endpoints
            .get(endpoint_id)
            .or_else(|| endpoint_uid.and_then(|u| self.endpoints.get(u)));
        match mapped {
            Some(s) => (s.clone(), true),
            None => (self.streams.first().cloned().unwrap_or_default(), false),
        }
    }
}

pub(super) fn read_svix(
    r: &mut Reader<'_>,
    path: &str,
    name: &str,
    t: &Table,
) -> Option<SvixConfig> {
    r.reject_unknown(
        path,
        t,
        &[
            "secret",
            "streams",
            "notify",
            "endpoints",
            "admin_token",
            "clear_on",
            "group_window",
            "flavor",
        ],
    );
    let mut keys = Vec::new();
    let mut switched_off = false;
    for (i, secret) in r
        .string_list(path, t, "secret", true)
        .into_iter()
        .enumerate()
    {
        let secret = r.trim_secret(&format!("{path}.secret[{i}]"), secret);
        // As for ingest secrets: an empty value (`${VAR:-}` with VAR unset)
        // switches the route off; every delivery is refused with 401.
        if secret.is_empty() {
            r.warnings.push(format!(
                "{path}.secret[{i}] is empty; operational webhooks to this source are refused"
            ));
            switched_off = true;
            continue;
        }
        match SecretKey::parse(&secret) {
            Ok(k) => keys.push(k),
            Err(e) => r.error(&format!("{path}.secret[{i}]"), e.to_string()),
        }
    }
    if keys.is_empty()
        && !switched_off
        && !r
            .errors
            .iter()
            .any(|e| e.path.starts_with(&join(path, "secret")))
    {
        r.error(
            &join(path, "secret"),
            "is required: the operational endpoint's whsec_ secret",
        );
    }
    let streams = r.string_list(path, t, "streams", false);
    if streams.is_empty() {
        r.error(
            &join(path, "streams"),
            "needs at least one stream these endpoints feed",
        );
    }
    let mut endpoints = BTreeMap::new();
    if let Some(map) = r.sub_table(path, t, "endpoints") {
        let map_path = join(path, "endpoints");
        for (endpoint, value) in map {
            if let Some(stream) = r.string(&join(&map_path, endpoint), value) {
                endpoints.insert(endpoint.clone(), stream);
            }
        }
    }
    let flavor = match r.opt_string(path, t, "flavor").as_deref() {
        None | Some("cloud") => SvixFlavor::Cloud,
        Some("oss") => SvixFlavor::Oss,
        Some(other) => {
            r.error(
                &join(path, "flavor"),
                format!("{other:?} is not a Svix flavor (use \"cloud\" or \"oss\")"),
            );
            SvixFlavor::Cloud
        }
    };
    for key in endpoints.keys().filter(|k| looks_like_uid(k)) {
        let at = join(&join(path, "endpoints"), key);
        r.warnings.push(format!(
            "{at} is not an endpoint id (ep_…), so it maps by endpointUid: the open-source Svix server \
             leaves endpointUid out of message.attempt.* events and sends it null in endpoint.disabled, so those events map \
             only once an endpoint.created or endpoint.updated has shown the uid with its id (until then they are filed as \
             unmapped under the source's first stream); map by the endpoint id"
        ));
    }
    let mut clear_on = r.string_list(path, t, "clear_on", false);
    for (i, c) in clear_on.iter().enumerate() {
        if c != "endpoint.updated" && c != "endpoint.deleted" {
            r.error(&format!("{path}.clear_on[{i}]"), format!("{c:?} cannot clear a disabled endpoint (use \"endpoint.updated\" or \"endpoint.deleted\")"));
        }
    }
    // Svix Cloud also sends `endpoint.updated` for a rename, a URL change, a
    // secret rotation or a manual disable, and ends a disable with
    // `endpoint.enabled`: clearing on `endpoint.updated` there would resolve
    // a disabled alert while the endpoint is still disabled. Ignored (not an
    // error, so a config written before `flavor` existed still loads).
    if flavor == SvixFlavor::Cloud && clear_on.iter().any(|c| c == "endpoint.updated") {
        r.warnings.push(format!(
            "{path}.clear_on: \"endpoint.updated\" is ignored with flavor = \"cloud\" (the default): Svix Cloud sends \
             endpoint.enabled when an endpoint is enabled again, and endpoint.updated for any change (a rename, a URL, a \
             secret rotation, a manual disable); set flavor = \"oss\" if these are the open-source server's webhooks"
        ));
        clear_on.retain(|c| c != "endpoint.updated");
    }
    let group_window = r
        .opt_duration(path, t, "group_window")
        .unwrap_or(TimeDelta::seconds(30));
    Some(SvixConfig {
        name: name.to_string(),
        verifier: Arc::new(Verifier::new(keys)),
        streams,
        notify: r.string_list(path, t, "notify", false),
        endpoints,
        admin_token: r
            .opt_string(path, t, "admin_token")
            .map(|s| r.trim_secret(&join(path, "admin_token"), s))
            .filter(|s| !s.is_empty())
            .map(SecretString::new),
        clear_on,
        group_window,
        flavor,
    })
}
