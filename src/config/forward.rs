//! `[streams.X.forward]` (also in `[templates.NAME]`): relay mode. The
//! stream's identity provider sends to hushwatch alone; hushwatch stores
//! each verified delivery and forwards it to the app at `url`, signed with
//! `secret` in the provider's own scheme (Standard Webhooks for Clerk and
//! Svix, `WorkOS-Signature` for WorkOS, a fixed `Authorization` value for
//! Okta and Auth0), retrying on `retry` until `give_up_after`. `check`
//! reads this with the very parsers the forwarder uses: URLs through
//! `notifiers::http_target`, secrets through `SecretKey::parse`,
//! `WorkosKey::parse` or `HeaderValue::from_str` (what the HTTP client
//! sends a header with), durations through the one duration parser.

use super::providers::ProviderConfig;
use super::reader::{join, Reader};
use super::secret::SecretString;
use crate::domain::forward::{Ladder, Order};
use crate::ingest::providers::workos::WorkosKey;
use crate::ingest::signature::SecretKey;
use chrono::TimeDelta;
use toml::{Table, Value};

/// What moves the stream's silence clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardClock {
    /// The app's 2xx: silence counts what the app accepted.
    Delivered,
    /// The provider's delivery, as without relay.
    Received,
}

impl ForwardClock {
    pub fn as_str(self) -> &'static str {
        match self {
            ForwardClock::Delivered => "delivered",
            ForwardClock::Received => "received",
        }
    }
}

/// The forward secrets, in the scheme the app already verifies for its
/// provider, so an app that verified the provider's own deliveries swaps
/// only its secret.
#[derive(Debug, Clone)]
pub enum ForwardKeys {
    /// `webhook-signature` / `svix-signature` (`whsec_…` secrets).
    Standard(Vec<SecretKey>),
    /// `WorkOS-Signature` (plain-string secrets, as WorkOS issues them).
    Workos(Vec<WorkosKey>),
    /// `Authorization: <secret>` as Okta Event Hooks and Auth0 Log Streams
    /// send it: a fixed value the app compares, no signature.
    Authorization(Vec<SecretString>),
}

impl ForwardKeys {
    pub fn len(&self) -> usize {
        match self {
            ForwardKeys::Standard(k) => k.len(),
            ForwardKeys::Workos(k) => k.len(),
            ForwardKeys::Authorization(k) => k.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which signing scheme a stream's provider uses for relay mode, or why it
/// cannot relay.
fn scheme(provider: &ProviderConfig) -> Result<Scheme, &'static str> {
    match provider.name() {
        "standard" => Ok(Scheme::Standard),
        "workos" => Ok(Scheme::Workos),
        // Okta and Auth0 sign nothing: the app checks the `Authorization`
        // value it configured with the provider, so hushwatch sends one of
        // its own. Their batches are forwarded one event per request
        // (`Provider::relay_bodies`).
        "okta" | "auth0" => Ok(Scheme::Authorization),
        // Google and Entra notifications are proved by values of
        // hushwatch's own subscriptions (Entra's `clientState`, Google's
        // channel token) that the app has no part in.
        _ => Err("relay mode forwards Standard Webhooks deliveries (Clerk, Svix), WorkOS, Okta and Auth0 deliveries: remove forward, or use one of those providers"),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Standard,
    Workos,
    Authorization,
}

#[derive(Debug, Clone)]
pub struct ForwardConfig {
    /// The app's webhook handler. May embed a token: never logged.
    pub url: SecretString,
    /// Every configured secret signs (space-separated `v1,` entries, as
    /// Svix does during a rotation, or one `v1=` each in `WorkOS-Signature`),
    /// so the app may verify with either.
    pub secrets: ForwardKeys,
    pub timeout: std::time::Duration,
    pub ladder: Ladder,
    /// `ordered`: which events wait for which (default per subject).
    pub order: Order,
    /// `order` is not [`Order::None`]: some events wait for earlier ones
    /// (what `/v1/status` has shown as `ordered` since issue #29).
    pub ordered: bool,
    /// A revocation undelivered this long pages critical.
    pub critical_after: TimeDelta,
    /// Deliveries to the app in flight at once (each ordered queue still
    /// has at most one).
    pub concurrency: usize,
    pub clock: ForwardClock,
    /// How long a delivered body is kept (for replay) after its 2xx.
    pub retain: TimeDelta,
    /// How long a dead letter is kept, unless replayed sooner.
    pub dead_letter_retain: TimeDelta,
}

/// `retain` when unset; also what a stream that stopped forwarding keeps.
pub const DEFAULT_RETAIN: TimeDelta = TimeDelta::days(7);
/// `dead_letter_retain` when unset.
pub const DEFAULT_DEAD_LETTER_RETAIN: TimeDelta = TimeDelta::days(30);
/// `critical_after` when unset.
pub const DEFAULT_CRITICAL_AFTER: TimeDelta = TimeDelta::hours(1);
/// `concurrency` when unset.
pub const DEFAULT_CONCURRENCY: usize = 16;
/// Largest `concurrency`: also the relay's in-flight cap across streams.
pub const MAX_CONCURRENCY: usize = 256;

/// The keys of the table (listed once: `reject_unknown` and the docs test).
pub const KEYS: &[&str] = &[
    "url",
    "secret",
    "timeout",
    "retry",
    "give_up_after",
    "ordered",
    "alert_after",
    "clock",
    "retain",
    "dead_letter_retain",
    "critical_after",
    "concurrency",
];

/// Longest `timeout`: a claim's lease must outlast the attempt.
pub const MAX_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

pub(super) fn read(
    r: &mut Reader<'_>,
    path: &str,
    t: &Table,
    provider: &ProviderConfig,
) -> Option<ForwardConfig> {
    let value = t.get("forward")?;
    let key_path = join(path, "forward");
    let table = r.table(&key_path, value)?;
    r.reject_unknown(&key_path, table, KEYS);
    let scheme = scheme(provider).unwrap_or_else(|reason| {
        r.error(&key_path, reason);
        Scheme::Standard
    });
    let url = match r.req_string(&key_path, table, "url") {
        Some(url) => {
            if let Err(reason) = super::notifiers::http_target(&url) {
                r.error(&join(&key_path, "url"), reason);
            }
            url
        }
        None => String::new(),
    };
    let mut standard = Vec::new();
    let mut workos = Vec::new();
    let mut authorization = Vec::new();
    for (i, secret) in r
        .string_list(&key_path, table, "secret", true)
        .into_iter()
        .enumerate()
    {
        let secret_path = format!("{key_path}.secret[{i}]");
        let secret = r.trim_secret(&secret_path, secret);
        // Empty (e.g. `${APP_WEBHOOK_SECRET:-}` unset): events are still
        // stored, and every forward fails without being sent, so the
        // failure pages say why; nothing is lost.
        if secret.trim().is_empty() {
            r.warnings.push(format!(
                "{secret_path} is empty; events are stored but not forwarded until it is set"
            ));
            continue;
        }
        // The error text never echoes the secret itself.
        match scheme {
            Scheme::Standard => match SecretKey::parse(&secret) {
                Ok(key) => standard.push(key),
                Err(e) => r.error(&secret_path, e.to_string()),
            },
            Scheme::Workos => match WorkosKey::parse(&secret) {
                Ok(key) => workos.push(key),
                Err(e) => r.error(&secret_path, e),
            },
            // The parser the HTTP client builds the header with, so a value
            // that passed `check` cannot fail every send.
            Scheme::Authorization => match hyper::header::HeaderValue::from_str(&secret) {
                Ok(_) => authorization.push(SecretString::new(secret)),
                Err(_) => r.error(
                    &secret_path,
                    "must be a valid HTTP header value (visible ASCII and spaces, no line breaks)",
                ),
            },
        }
    }
    // Okta and Auth0 send one `Authorization` value; a request carries one.
    if scheme == Scheme::Authorization && authorization.len() > 1 {
        r.error(
            &join(&key_path, "secret"),
            "takes one secret on an Okta or Auth0 stream: it is sent as the one Authorization header value",
        );
    }
    // Userinfo in `url` becomes `Authorization: Basic …` (see
    // `notifiers::http_target`), which would collide with the forwarded one.
    if scheme == Scheme::Authorization
        && super::notifiers::http_target(&url).is_ok_and(|t| t.basic_auth.is_some())
    {
        r.error(
            &join(&key_path, "url"),
            "must not carry a user name or password on an Okta or Auth0 stream: the Authorization header carries forward.secret",
        );
    }
    // WorkOS's SDKs read exactly one `v1=` (the Python SDK splits the
    // header on ", " into two parts), so a second signature would make
    // every forward fail verification.
    if scheme == Scheme::Workos && workos.len() > 1 {
        r.error(
            &join(&key_path, "secret"),
            "takes one secret on a WorkOS stream: WorkOS's SDKs verify a single v1= signature",
        );
    }
    let secrets = match scheme {
        Scheme::Standard => ForwardKeys::Standard(standard),
        Scheme::Workos => ForwardKeys::Workos(workos),
        Scheme::Authorization => ForwardKeys::Authorization(authorization),
    };
    if secrets.is_empty() && !table.contains_key("secret") {
        r.error(
            &join(&key_path, "secret"),
            match scheme {
                Scheme::Standard => "is required: the app verifies every forward with it (whsec_…)",
                Scheme::Workos => "is required: the app verifies every forward with it (the WorkOS-Signature secret, a plain string)",
                Scheme::Authorization => "is required: the app checks every forward's Authorization header against it (a plain string)",
            },
        );
    }
    let timeout = r
        .opt_duration(&key_path, table, "timeout")
        .unwrap_or(TimeDelta::seconds(10));
    let timeout = match timeout.to_std() {
        Ok(d) if d >= std::time::Duration::from_secs(1) && d <= MAX_TIMEOUT => d,
        _ => {
            r.error(
                &join(&key_path, "timeout"),
                format!("must be from 1s to {}s", MAX_TIMEOUT.as_secs()),
            );
            std::time::Duration::from_secs(10)
        }
    };
    let defaults = Ladder::default();
    let errors_before = r.errors.len();
    let retry = if table.contains_key("retry") {
        let mut steps = Vec::new();
        for (i, text) in r
            .string_list(&key_path, table, "retry", false)
            .into_iter()
            .enumerate()
        {
            match crate::domain::duration::parse_duration(&text) {
                Ok(d) if d >= TimeDelta::seconds(1) => steps.push(d),
                Ok(_) => r.error(&format!("{key_path}.retry[{i}]"), "must be at least 1s"),
                Err(e) => r.error(&format!("{key_path}.retry[{i}]"), e.to_string()),
            }
        }
        if steps.is_empty() && r.errors.len() == errors_before {
            r.error(
                &join(&key_path, "retry"),
                "needs at least one step (the last step repeats until give_up_after)",
            );
        }
        steps
    } else {
        defaults.retry
    };
    let give_up_after = r
        .opt_duration(&key_path, table, "give_up_after")
        .unwrap_or(defaults.give_up_after);
    if give_up_after < TimeDelta::seconds(1) {
        r.error(&join(&key_path, "give_up_after"), "must be at least 1s");
    }
    let alert_after = read_alert_after(r, &key_path, table).unwrap_or(defaults.alert_after);
    let order = read_order(r, &key_path, table);
    let critical_after = r
        .opt_duration(&key_path, table, "critical_after")
        .unwrap_or(DEFAULT_CRITICAL_AFTER);
    if critical_after < TimeDelta::seconds(1) {
        r.error(&join(&key_path, "critical_after"), "must be at least 1s");
    }
    let concurrency = read_concurrency(r, &key_path, table);
    let clock = match r.opt_string(&key_path, table, "clock").as_deref() {
        None | Some("delivered") => ForwardClock::Delivered,
        Some("received") => ForwardClock::Received,
        Some(_) => {
            r.error(
                &join(&key_path, "clock"),
                "must be \"delivered\" (the app's 2xx moves the clock) or \"received\"",
            );
            ForwardClock::Delivered
        }
    };
    let retain = r
        .opt_duration(&key_path, table, "retain")
        .unwrap_or(DEFAULT_RETAIN);
    let dead_letter_retain = r
        .opt_duration(&key_path, table, "dead_letter_retain")
        .unwrap_or(DEFAULT_DEAD_LETTER_RETAIN);
    if dead_letter_retain < TimeDelta::hours(1) {
        r.error(
            &join(&key_path, "dead_letter_retain"),
            "must be at least 1h: a dead letter is kept so it can be replayed",
        );
    }
    Some(ForwardConfig {
        url: SecretString::new(url),
        secrets,
        timeout,
        ladder: Ladder {
            retry,
            give_up_after,
            alert_after,
        },
        order,
        ordered: order != Order::None,
        critical_after,
        concurrency,
        clock,
        retain,
        dead_letter_retain,
    })
}

/// `concurrency = 1..=256`: an integer, not a string.
fn read_concurrency(r: &mut Reader<'_>, path: &str, t: &Table) -> usize {
    match t.get("concurrency") {
        None => DEFAULT_CONCURRENCY,
        Some(Value::Integer(n)) if (1..=MAX_CONCURRENCY as i64).contains(n) => {
            usize::try_from(*n).unwrap_or(DEFAULT_CONCURRENCY)
        }
        Some(_) => {
            r.error(
                &join(path, "concurrency"),
                format!("must be an integer from 1 to {MAX_CONCURRENCY}"),
            );
            DEFAULT_CONCURRENCY
        }
    }
}

/// `ordered = "subject" | "stream" | "none"`; `true` and `false` keep the
/// meaning they had before the modes ("stream", "none").
fn read_order(r: &mut Reader<'_>, path: &str, t: &Table) -> Order {
    match t.get("ordered") {
        None => Order::default(),
        Some(Value::Boolean(b)) => Order::from_bool(*b),
        Some(Value::String(s)) if Order::parse(s).is_some() => Order::parse(s).unwrap_or_default(),
        Some(_) => {
            r.error(
                &join(path, "ordered"),
                "must be \"subject\" (one event in flight per subject, the default), \"stream\" (one per stream; also true) or \"none\" (also false)",
            );
            Order::default()
        }
    }
}

/// Ascending whole numbers from 1, e.g. `[1, 5, 20]`; `[]` pages never.
fn read_alert_after(r: &mut Reader<'_>, path: &str, t: &Table) -> Option<Vec<u32>> {
    let value = t.get("alert_after")?;
    let key_path = join(path, "alert_after");
    let Value::Array(items) = value else {
        r.error(
            &key_path,
            "expected a list of failure counts, e.g. [1, 5, 20]",
        );
        return None;
    };
    let mut steps: Vec<u32> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item.as_integer().and_then(|n| u32::try_from(n).ok()) {
            Some(n) if n >= 1 && steps.last().is_none_or(|last| n > *last) => steps.push(n),
            _ => {
                r.error(
                    &format!("{key_path}[{i}]"),
                    "must be a whole number above the one before it (e.g. [1, 5, 20])",
                );
                return None;
            }
        }
    }
    Some(steps)
}

#[cfg(test)]
mod tests {
    use crate::config::{parse, Config, ConfigErrors};
    use std::path::Path;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn parse_str(text: &str) -> Result<Config, ConfigErrors> {
        parse(text, Path::new("."), &|_| None)
    }

    fn config(forward: &str) -> String {
        format!(
            "[streams.clerk]\ncalendar = \"always\"\nsilence_threshold = \"6h\"\n\
             [streams.clerk.ingest]\nwebhook_secret = \"{SECRET}\"\n\
             [streams.clerk.forward]\n{forward}\n"
        )
    }

    fn errors(text: &str) -> Vec<String> {
        match parse_str(text) {
            Ok(_) => Vec::new(),
            Err(ConfigErrors(e)) => e.iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn the_defaults_are_the_issue_s() {
        let c = parse_str(&config(&format!(
            "url = \"http://127.0.0.1:3000/webhooks/clerk\"\nsecret = \"{SECRET}\""
        )))
        .unwrap();
        let f = c.streams["clerk"].forward.as_ref().unwrap();
        assert_eq!(f.timeout, std::time::Duration::from_secs(10));
        assert_eq!(f.ladder, crate::domain::forward::Ladder::default());
        assert_eq!(f.order, super::Order::Subject);
        assert!(f.ordered);
        assert_eq!(f.critical_after, chrono::TimeDelta::hours(1));
        assert_eq!(f.concurrency, 16);
        assert_eq!(f.clock, super::ForwardClock::Delivered);
        assert_eq!(f.retain, chrono::TimeDelta::days(7));
        assert_eq!(f.secrets.len(), 1);
    }

    #[test]
    fn bad_values_name_the_key_path() {
        let e = errors(&config(
            "url = \"ftp://app\"\nsecret = [\"whsec_no!pe\"]\ntimeout = \"0s\"\nretry = [\"5m\", \"0s\"]\n\
             alert_after = [5, 1]\nclock = \"sent\"\nordred = true",
        ));
        for want in [
            "streams.clerk.forward.url: must start with http",
            "streams.clerk.forward.secret[0]: ",
            "streams.clerk.forward.timeout: must be from 1s",
            "streams.clerk.forward.retry[1]: must be at least 1s",
            "streams.clerk.forward.alert_after[1]: must be a whole number above",
            "streams.clerk.forward.clock: must be \"delivered\"",
            "streams.clerk.forward.ordred: unknown key",
        ] {
            assert!(e.iter().any(|e| e.starts_with(want)), "{want}: {e:?}");
        }
        assert!(e.iter().all(|e| !e.contains("no!pe")), "{e:?}");
        // An empty secret (an unset `${VAR:-}`) is a warning: stored, not sent.
        let c = parse_str(&config("url = \"http://app\"\nsecret = \"\"")).unwrap();
        assert!(c.streams["clerk"]
            .forward
            .as_ref()
            .unwrap()
            .secrets
            .is_empty());
        assert!(
            c.warnings
                .iter()
                .any(|w| w.contains("forward.secret[0] is empty")),
            "{:?}",
            c.warnings
        );
        let e = errors(&config("url = \"http://app\""));
        assert!(
            e.iter()
                .any(|e| e.starts_with("streams.clerk.forward.secret: is required")),
            "{e:?}"
        );
    }

    #[test]
    fn concurrency_is_an_integer_from_1_to_256() {
        let base = format!("url = \"http://app\"\nsecret = \"{SECRET}\"");
        for ok in ["1", "256"] {
            let c = parse_str(&config(&format!("{base}\nconcurrency = {ok}"))).unwrap();
            let f = c.streams["clerk"].forward.as_ref().unwrap();
            assert_eq!(f.concurrency.to_string(), ok);
        }
        for bad in ["0", "257", "-1", "\"16\"", "1.5"] {
            let e = errors(&config(&format!("{base}\nconcurrency = {bad}")));
            assert!(
                e.iter().any(|e| e.contains(
                    "streams.clerk.forward.concurrency: must be an integer from 1 to 256"
                )),
                "{bad}: {e:?}"
            );
        }
    }

    #[test]
    fn ordered_takes_a_mode_or_the_old_booleans() {
        let order = |v: &str| {
            parse_str(&config(&format!(
                "url = \"http://app\"\nsecret = \"{SECRET}\"\nordered = {v}"
            )))
            .unwrap()
            .streams["clerk"]
                .forward
                .as_ref()
                .unwrap()
                .order
        };
        assert_eq!(order("\"subject\""), super::Order::Subject);
        assert_eq!(order("\"stream\""), super::Order::Stream);
        assert_eq!(order("\"none\""), super::Order::None);
        assert_eq!(order("true"), super::Order::Stream);
        assert_eq!(order("false"), super::Order::None);
        let e = errors(&config(&format!(
            "url = \"http://app\"\nsecret = \"{SECRET}\"\nordered = \"user\"\ncritical_after = \"soon\"\nretry = []"
        )));
        for want in [
            "streams.clerk.forward.ordered: must be \"subject\"",
            "streams.clerk.forward.critical_after: ",
            "streams.clerk.forward.retry: needs at least one step",
        ] {
            assert!(e.iter().any(|e| e.starts_with(want)), "{want}: {e:?}");
        }
    }

    fn workos(forward: &str, provider: &str) -> String {
        format!(
            "[streams.workos]\ncalendar = \"always\"\nsilence_threshold = \"6h\"\n\
             [streams.workos.ingest]\nprovider = \"{provider}\"\nwebhook_secret = \"wk_provider\"\n\
             [streams.workos.forward]\n{forward}\n"
        )
    }

    #[test]
    fn a_workos_stream_relays_with_one_plain_string_secret_and_other_providers_do_not_relay() {
        let c = parse_str(&workos(
            "url = \"http://127.0.0.1:3000/webhooks/workos\"\nsecret = \"app_secret_not_base64!\"",
            "workos",
        ))
        .unwrap();
        let f = c.streams["workos"].forward.as_ref().unwrap();
        assert!(matches!(&f.secrets, super::ForwardKeys::Workos(k) if k.len() == 1));
        let e = errors(&workos(
            "url = \"http://app\"\nsecret = [\"one\", \"two\"]",
            "workos",
        ));
        assert!(
            e.iter()
                .any(|e| e.starts_with("streams.workos.forward.secret: takes one secret")),
            "{e:?}"
        );
        let e = errors(&workos("url = \"http://app\"", "workos"));
        assert!(
            e.iter().any(
                |e| e.starts_with("streams.workos.forward.secret: is required")
                    && e.contains("WorkOS-Signature")
            ),
            "{e:?}"
        );
        let e = errors(&workos("url = \"http://app\"\nsecret = \"s\"", "google"));
        assert!(
            e.iter()
                .any(|e| e.starts_with("streams.workos.forward: relay mode forwards")),
            "{e:?}"
        );
    }

    fn authorization(forward: &str, provider: &str) -> String {
        format!(
            "[streams.idp]\ncalendar = \"always\"\nsilence_threshold = \"6h\"\n\
             [streams.idp.ingest]\nprovider = \"{provider}\"\nauthorization = \"provider-value\"\n\
             [streams.idp.forward]\n{forward}\n"
        )
    }

    #[test]
    fn okta_and_auth0_streams_relay_with_one_authorization_value() {
        for provider in ["okta", "auth0"] {
            let c = parse_str(&authorization(
                "url = \"http://127.0.0.1:3000/hooks/idp\"\nsecret = \"Bearer app-side value\"",
                provider,
            ))
            .unwrap();
            let f = c.streams["idp"].forward.as_ref().unwrap();
            match &f.secrets {
                super::ForwardKeys::Authorization(k) => {
                    assert_eq!(k.len(), 1);
                    assert_eq!(k[0].expose(), "Bearer app-side value");
                }
                other => panic!("{provider}: {other:?}"),
            }
            let e = errors(&authorization(
                "url = \"http://app\"\nsecret = [\"one\", \"two\"]",
                provider,
            ));
            assert!(
                e.iter()
                    .any(|e| e.starts_with("streams.idp.forward.secret: takes one secret")),
                "{provider}: {e:?}"
            );
            let e = errors(&authorization("url = \"http://app\"", provider));
            assert!(
                e.iter()
                    .any(|e| e.starts_with("streams.idp.forward.secret: is required")
                        && e.contains("Authorization")),
                "{provider}: {e:?}"
            );
            // A value the HTTP client could not send fails `check`, not
            // every forward; the error never shows the value.
            let e = errors(&authorization(
                "url = \"http://app\"\nsecret = \"line\\u0001nope\"",
                provider,
            ));
            assert!(
                e.iter().any(|e| e.starts_with(
                    "streams.idp.forward.secret[0]: must be a valid HTTP header value"
                )),
                "{provider}: {e:?}"
            );
            assert!(e.iter().all(|e| !e.contains("nope")), "{e:?}");
            let e = errors(&authorization(
                "url = \"http://user:pw@app\"\nsecret = \"s\"",
                provider,
            ));
            assert!(
                e.iter().any(|e| e.starts_with(
                    "streams.idp.forward.url: must not carry a user name or password"
                )),
                "{provider}: {e:?}"
            );
        }
    }
}
