//! Microsoft Entra ID through Microsoft Graph's delta queries (issue #48):
//! a client-credentials token, then `/users/delta` and `/groups/delta`
//! page by page. What the changes mean is decided in
//! `domain::crosscheck_entra`; this module asks and parses.
//!
//! Shapes (Microsoft's docs; the Graph pages are the files of
//! `microsoftgraph/microsoft-graph-docs-contrib`):
//! - **Token** (learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow):
//!   `POST <token_url>` form `client_id`, `client_secret`,
//!   `scope=https://graph.microsoft.com/.default`,
//!   `grant_type=client_credentials`; the answer is `{"token_type":
//!   "Bearer", "expires_in": <seconds>, "access_token"}`; an error is
//!   `400`/`401` `{"error": "invalid_client", …}`. Asked, cached and
//!   classified by [`super::oauth`], the client Auth0 uses too.
//! - **Delta** (`api-reference/v1.0/api/user-delta.md`,
//!   `api-reference/v1.0/api/group-delta.md`,
//!   `concepts/delta-query-overview.md`): the first request of a round
//!   carries the `$select`; each answer is `{"value": [...]}` with either
//!   `@odata.nextLink` (more of this round) or `@odata.deltaLink` (the
//!   round is done: ask it next time). A deleted object comes as `{"id",
//!   "@removed": {"reason": "changed" | "deleted"}}`; a group's membership
//!   changes come in `members@delta: [{"@odata.type", "id", "@removed"?}]`
//!   (`concepts/delta-query-groups.md`).
//! - **Expiry**: a delta link of an identity resource lives 7 days; after
//!   that Graph answers `400` with error code `syncStateNotFound` ("The
//!   delta token is expired and data must be synchronized again",
//!   devblogs.microsoft.com/microsoft365dev/duration-of-change-tracking-tokens-for-identity-and-education-resources).
//! - **Throttling** (learn.microsoft.com/graph/throttling): `429` with
//!   `Retry-After` in seconds, honoured by `http::ApiClient`.
//!
//! The links Graph answers are followed only on the configured `api_url`
//! (same scheme, host, port and path prefix): a link elsewhere would carry
//! the bearer token to another host. The token and the client secret never
//! appear in an error.

use super::http::{Answer, ApiClient, Outgoing};
use super::oauth::ClientCredentials;
use super::{parse_json, DeltaAnswer, DeltaFeed, DeltaNext, DeltaPage, PollError};
use crate::config::crosscheck::CrosscheckConfig;
use crate::config::secret::SecretString;
use crate::domain::crosscheck_entra::DeltaChange;
use async_trait::async_trait;
use serde::de::IgnoredAny;
use serde::Deserialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The scope of an app-only Graph token.
pub const SCOPE: &str = "https://graph.microsoft.com/.default";
/// What `/users/delta` tracks: the ids and whether the account may sign in.
pub const USERS_SELECT: &str = "id,displayName,userPrincipalName,accountEnabled";
/// What `/groups/delta` tracks: the members.
pub const GROUPS_SELECT: &str = "id,displayName,members";
/// Objects one page may list (Graph's delta pages hold about 100–200).
pub const MAX_PAGE_OBJECTS: usize = 1_000;
/// Longest link kept (a skip or delta token is a few hundred characters).
pub const MAX_LINK: usize = 8 * 1024;
/// A token is renewed this long before Graph says it expires, so no
/// request goes out with a token about to lapse: a request may wait out
/// `http::MAX_THROTTLED` 429s of up to a minute each after taking its
/// token, and Entra's 60–90 minute tokens leave room for that margin.
pub const RENEW_BEFORE: Duration = Duration::from_secs(5 * 60);

pub struct Entra {
    client: ApiClient,
    api_url: String,
    /// The client-credentials token, cached for the process
    /// ([`super::oauth`]).
    credentials: ClientCredentials,
    /// Graph requests (token requests are counted by `credentials`).
    requests: AtomicUsize,
}

impl Entra {
    /// The feed for a `provider = "entra"` table (its `entra` credentials
    /// are there whenever the config parsed; without them every request is
    /// refused rather than sent unauthenticated).
    pub fn new(config: &CrosscheckConfig, timeout: Duration) -> Entra {
        let (token_url, client_id, client_secret) = match &config.entra {
            Some(c) => (
                c.token_url.clone(),
                c.client_id.clone(),
                c.client_secret.clone(),
            ),
            None => (
                String::new(),
                String::new(),
                SecretString::new(String::new()),
            ),
        };
        Entra {
            client: ApiClient::new("", timeout),
            api_url: config.api_url.clone(),
            credentials: ClientCredentials::new(
                token_url,
                client_id,
                client_secret,
                vec![("scope".into(), SCOPE.into())],
                RENEW_BEFORE,
            ),
            requests: AtomicUsize::new(0),
        }
    }

    /// One GET of `url` with the token; a `401` drops the cached token and
    /// tries once more with a new one (a token revoked early), then is
    /// refused.
    async fn get(&self, url: &str, what: &str) -> Result<Answer, PollError> {
        let mut retried = false;
        loop {
            let authorization = self.credentials.authorization(&self.client).await?;
            self.requests.fetch_add(1, Ordering::Relaxed);
            let answer = self
                .client
                .send(
                    &Outgoing {
                        url,
                        authorization: Some(&authorization),
                        form: None,
                        read_errors: &[400],
                    },
                    what,
                )
                .await;
            match answer {
                Err(PollError::Refused { status: 401 }) if !retried => {
                    retried = true;
                    self.credentials.forget().await;
                }
                other => return other,
            }
        }
    }

    fn first_url(&self, collection: &str) -> Result<String, PollError> {
        let select = match collection {
            "users" => USERS_SELECT,
            "groups" => GROUPS_SELECT,
            other => return Err(PollError::Failed(format!("no delta query for {other}"))),
        };
        Ok(format!(
            "{}/{collection}/delta?$select={select}",
            self.api_url
        ))
    }
}

#[async_trait]
impl DeltaFeed for Entra {
    fn collections(&self) -> &'static [&'static str] {
        &["users", "groups"]
    }

    async fn page(&self, collection: &str, link: Option<&str>) -> Result<DeltaAnswer, PollError> {
        let what = format!("GET /{collection}/delta");
        let url = match link {
            Some(link) => {
                on_api_url(&self.api_url, link, &what)?;
                link.to_owned()
            }
            None => self.first_url(collection)?,
        };
        match self.get(&url, &what).await? {
            Answer::Ok(body) => {
                parse_page(&body, collection, &self.api_url, &what).map(DeltaAnswer::Page)
            }
            Answer::Status { status, body } => {
                let code = graph_error_code(&body);
                if code.as_deref() == Some("syncStateNotFound") {
                    Ok(DeltaAnswer::Expired)
                } else {
                    Err(PollError::Failed(format!(
                        "{what} answered HTTP {status}{}",
                        code.map(|c| format!(" ({c})")).unwrap_or_default()
                    )))
                }
            }
        }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::Relaxed) + self.credentials.requests()
    }
}

// ---------------------------------------------------------------- parsing

/// Graph's error code (`{"error": {"code", "message"}}`), if the body has one.
fn graph_error_code(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Outer {
        error: Inner,
    }
    #[derive(Deserialize)]
    struct Inner {
        code: String,
    }
    serde_json::from_slice::<Outer>(body)
        .ok()
        .map(|o| short(&o.error.code))
}

/// Provider text put in an error: at most 64 printable characters.
fn short(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(64).collect()
}

#[derive(Deserialize)]
struct Page {
    value: Vec<Object>,
    #[serde(rename = "@odata.nextLink")]
    next_link: Option<String>,
    #[serde(rename = "@odata.deltaLink")]
    delta_link: Option<String>,
}

/// A user or a group as a delta page lists it; only what the rules read.
#[derive(Deserialize)]
struct Object {
    id: String,
    #[serde(rename = "@removed")]
    removed: Option<IgnoredAny>,
    #[serde(rename = "accountEnabled")]
    account_enabled: Option<bool>,
    #[serde(rename = "members@delta")]
    members: Option<Vec<Member>>,
}

#[derive(Deserialize)]
struct Member {
    id: String,
    #[serde(rename = "@removed")]
    removed: Option<IgnoredAny>,
}

/// Reads one delta page of `collection` (`users` or `groups`).
fn parse_page(
    body: &[u8],
    collection: &str,
    api_url: &str,
    what: &str,
) -> Result<DeltaPage, PollError> {
    let page: Page = parse_json(body, what)?;
    if page.value.len() > MAX_PAGE_OBJECTS {
        return Err(PollError::Failed(format!(
            "{what}: {} objects in one page (at most {MAX_PAGE_OBJECTS} expected)",
            page.value.len()
        )));
    }
    let next = match (page.next_link, page.delta_link) {
        (Some(link), None) => {
            on_api_url(api_url, &link, what)?;
            DeltaNext::More(link)
        }
        (None, Some(link)) => {
            on_api_url(api_url, &link, what)?;
            DeltaNext::Done(link)
        }
        _ => {
            return Err(PollError::Failed(format!(
                "{what}: a page must carry exactly one of @odata.nextLink and @odata.deltaLink"
            )))
        }
    };
    let listed = page.value.len();
    let (mut changes, mut restored) = (Vec::new(), Vec::new());
    for object in page.value {
        check_id(&object.id, what)?;
        match collection {
            "users" => {
                if object.removed.is_some() {
                    changes.push(DeltaChange::UserDeleted { user: object.id });
                } else if object.account_enabled == Some(false) {
                    changes.push(DeltaChange::UserDisabled { user: object.id });
                } else if object.account_enabled == Some(true) {
                    restored.push(DeltaChange::UserDisabled { user: object.id });
                }
            }
            _ => {
                for member in object.members.into_iter().flatten() {
                    check_id(&member.id, what)?;
                    let change = DeltaChange::MemberRemoved {
                        group: object.id.clone(),
                        user: member.id,
                    };
                    if member.removed.is_some() {
                        changes.push(change);
                    } else {
                        restored.push(change);
                    }
                }
            }
        }
    }
    Ok(DeltaPage {
        changes,
        restored,
        listed,
        next,
    })
}

fn check_id(id: &str, what: &str) -> Result<(), PollError> {
    if id.is_empty() || id.len() > 256 || id.chars().any(char::is_control) {
        return Err(PollError::Failed(format!(
            "{what}: an object id of {} characters",
            id.len()
        )));
    }
    Ok(())
}

/// Refuses a link that is not on `api_url` (scheme, host, port, and under
/// its path), or too long to keep.
fn on_api_url(api_url: &str, link: &str, what: &str) -> Result<(), PollError> {
    let elsewhere = || {
        PollError::Failed(format!(
            "{what}: a next or delta link that is not on api_url; not followed"
        ))
    };
    if link.len() > MAX_LINK {
        return Err(PollError::Failed(format!(
            "{what}: a link of {} characters (at most {MAX_LINK})",
            link.len()
        )));
    }
    let (Ok(base), Ok(target)) = (url::Url::parse(api_url), url::Url::parse(link)) else {
        return Err(elsewhere());
    };
    let prefix = format!("{}/", base.path().trim_end_matches('/'));
    if target.scheme() != base.scheme()
        || target.host_str() != base.host_str()
        || target.port_or_known_default() != base.port_or_known_default()
        || !target.username().is_empty()
        || target.password().is_some()
        || !target.path().starts_with(&prefix)
    {
        return Err(elsewhere());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const API: &str = "https://graph.microsoft.com/v1.0";

    /// The shape of `api-reference/v1.0/api/user-delta.md`'s responses
    /// (ids from its examples): one active user, one disabled, one
    /// `@removed`.
    const USERS: &str = r#"{
      "@odata.context": "https://graph.microsoft.com/v1.0/$metadata#users(displayName,userPrincipalName,accountEnabled)",
      "@odata.nextLink": "https://graph.microsoft.com/v1.0/users/delta?$skiptoken=pqwSUjGYvb3jQpbwVAwEL7yuI3dU1LecfkkfLPtnIjsXoYQp_dpA3cNJWc",
      "value": [
        {"displayName": "Megan Bowen", "userPrincipalName": "MeganB@contoso.com", "accountEnabled": true,
         "id": "87d349ed-44d7-43e1-9a83-5f2406dee5bd"},
        {"displayName": "Lee Gu", "userPrincipalName": "LeeG@contoso.com", "accountEnabled": false,
         "id": "5bde3e51-d13b-4db1-9948-fe4b109d11a7"},
        {"id": "4782e723-f4f4-4af3-a76e-25e3bab0d896", "@removed": {"reason": "changed"}}
      ]
    }"#;

    /// `concepts/delta-query-groups.md`: a group whose `members@delta`
    /// lists one member added and one `@removed`, ending the round.
    const GROUPS: &str = r##"{
      "@odata.context": "https://graph.microsoft.com/v1.0/$metadata#groups",
      "@odata.deltaLink": "https://graph.microsoft.com/v1.0/groups/delta?$deltatoken=sZs8_3b2vCzsJ4CoWHLeeuRYyBm6V3IuOnF2CZ8qBJpKH1z9Mty1ml2JRd8tUJ09zSk",
      "value": [
        {"displayName": "TestGroup1", "id": "2e5ac2f4-2a89-4d35-a1b6-15bc29d7e6e1",
         "members@delta": [
           {"@odata.type": "#microsoft.graph.user", "id": "632cd5b8-ac9e-4cf8-b3d7-6a0e83e6fa12"},
           {"@odata.type": "#microsoft.graph.user", "id": "69d035a3-29c9-469f-809d-d21a4ae69e65", "@removed": {"reason": "deleted"}}
         ]}
      ]
    }"##;

    #[test]
    fn a_users_page_reports_deleted_and_disabled_users_and_its_next_link() {
        let page = parse_page(USERS.as_bytes(), "users", API, "GET /users/delta").unwrap();
        assert_eq!(page.listed, 3);
        assert_eq!(
            page.changes,
            [
                DeltaChange::UserDisabled {
                    user: "5bde3e51-d13b-4db1-9948-fe4b109d11a7".into()
                },
                DeltaChange::UserDeleted {
                    user: "4782e723-f4f4-4af3-a76e-25e3bab0d896".into()
                },
            ]
        );
        assert!(matches!(page.next, DeltaNext::More(ref l) if l.contains("$skiptoken=")));
        // Megan can sign in: any pending change about her is undone.
        assert_eq!(
            page.restored,
            [DeltaChange::UserDisabled {
                user: "87d349ed-44d7-43e1-9a83-5f2406dee5bd".into()
            }]
        );
    }

    #[test]
    fn a_groups_page_reports_removed_members_and_its_delta_link() {
        let page = parse_page(GROUPS.as_bytes(), "groups", API, "GET /groups/delta").unwrap();
        assert_eq!(
            page.changes,
            [DeltaChange::MemberRemoved {
                group: "2e5ac2f4-2a89-4d35-a1b6-15bc29d7e6e1".into(),
                user: "69d035a3-29c9-469f-809d-d21a4ae69e65".into()
            }]
        );
        assert!(matches!(page.next, DeltaNext::Done(ref l) if l.contains("$deltatoken=")));
    }

    #[test]
    fn broken_pages_and_links_off_api_url_fail_the_poll() {
        for broken in [
            r#"{"value": []}"#.to_owned(),
            r#"[]"#.to_owned(),
            r#"{"value": [{"displayName": "no id"}], "@odata.deltaLink": "https://graph.microsoft.com/v1.0/users/delta?$deltatoken=x"}"#.to_owned(),
            USERS.replace("https://graph.microsoft.com/v1.0/users", "https://evil.example/v1.0/users"),
            USERS.replace("https://graph.microsoft.com/v1.0/users", "http://graph.microsoft.com/v1.0/users"),
            USERS.replace("https://graph.microsoft.com/v1.0/users", "https://graph.microsoft.com/beta/users"),
            GROUPS.replace("\"@odata.context\"", "\"@odata.nextLink\": \"https://graph.microsoft.com/v1.0/groups/delta\", \"x\""),
        ] {
            assert!(
                parse_page(broken.as_bytes(), "users", API, "GET /users/delta").is_err(),
                "{broken}"
            );
        }
    }

    #[test]
    fn an_expired_delta_token_is_recognised_by_its_error_code() {
        let body = br#"{"error": {"code": "syncStateNotFound", "message": "The sync state generation is not found. The delta token is expired and data must be synchronized again."}}"#;
        assert_eq!(graph_error_code(body).as_deref(), Some("syncStateNotFound"));
        assert_eq!(graph_error_code(b"not json"), None);
    }
}
