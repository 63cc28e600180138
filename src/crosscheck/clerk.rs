//! Clerk's Backend API: every user and every organization membership of
//! the instance, for the state diff in `domain::crosscheck`.
//!
//! Shapes, from Clerk's OpenAPI specification (public repository
//! `clerk/openapi-specs`, `bapi/2025-11-10.yml`):
//! - `GET /users` (`GetUserList`): a bare JSON array of `User` (`id`
//!   required); `limit` 1–500; paged with `starting_after` (the id of the
//!   last user of the previous page, under the default `created_at`
//!   ordering), stopping "when a page returns fewer than `limit` users".
//! - `GET /organization_memberships` (`InstanceGetOrganizationMemberships`):
//!   `{"data": [OrganizationMembership], "total_count": N}` (schema
//!   `OrganizationMemberships`, both required); `limit` 1–500 and `offset`;
//!   `order_by` `created_at` ascending so memberships added during a
//!   listing land after the pages already read. A membership has `id`,
//!   `organization` (an `Organization`, `id` required) and
//!   `public_user_data.user_id`.
//! - 1,000 requests per 10 s per production instance (100 for
//!   development), `429` with `Retry-After` (the same file, on each
//!   operation): requests are spaced [`MIN_SPACING`] apart, half the
//!   production limit, and 429s are waited out by `http::ApiClient`.

use super::http::ApiClient;
use super::{parse_json, url, Listed, ListingRun, PollError, StateListing, MAX_PAGES};
use crate::domain::crosscheck::Entry;
use async_trait::async_trait;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// Entries per request: the largest `limit` Clerk accepts.
pub const PAGE_SIZE: usize = 500;
/// Between two requests: 500 per 10 s at most.
pub const MIN_SPACING: Duration = Duration::from_millis(20);

pub struct Clerk {
    client: Arc<ApiClient>,
    api_url: String,
}

impl Clerk {
    pub fn new(client: ApiClient, api_url: String) -> Clerk {
        Clerk {
            client: Arc::new(client),
            api_url,
        }
    }
}

impl StateListing for Clerk {
    fn start(&self) -> Box<dyn ListingRun> {
        Box::new(Run {
            client: Arc::clone(&self.client),
            api_url: self.api_url.clone(),
            stage: Stage::Users { after: None },
            requests: 0,
            last_request: None,
        })
    }
}

/// A user of `GET /users`: only the id is read.
#[derive(Debug, Deserialize)]
struct User {
    id: String,
}

/// `OrganizationMemberships`.
#[derive(Debug, Deserialize)]
struct Memberships {
    data: Vec<Membership>,
    total_count: i64,
}

#[derive(Debug, Deserialize)]
struct Membership {
    id: String,
    organization: Organization,
    /// Optional in the schema; a membership without it names no user, so
    /// it cannot be checked and the poll fails rather than skip it.
    public_user_data: Option<PublicUserData>,
}

#[derive(Debug, Deserialize)]
struct Organization {
    id: String,
}

#[derive(Debug, Deserialize)]
struct PublicUserData {
    user_id: String,
}

enum Stage {
    Users { after: Option<String> },
    Memberships { offset: usize },
    Done,
}

struct Run {
    client: Arc<ApiClient>,
    api_url: String,
    stage: Stage,
    requests: usize,
    last_request: Option<tokio::time::Instant>,
}

impl Run {
    async fn get(
        &mut self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<bytes::Bytes, PollError> {
        if self.requests >= 2 * MAX_PAGES {
            return Err(PollError::Failed(format!(
                "GET {path}: more than {MAX_PAGES} pages in one listing (an endless cursor?)"
            )));
        }
        if let Some(last) = self.last_request {
            tokio::time::sleep_until(last + MIN_SPACING).await;
        }
        self.last_request = Some(tokio::time::Instant::now());
        self.requests += 1;
        let target = url(&self.api_url, path, query)?;
        self.client.get(&target, &format!("GET {path}")).await
    }
}

#[async_trait]
impl ListingRun for Run {
    async fn next_page(&mut self) -> Result<Option<Vec<Listed>>, PollError> {
        match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::Done => Ok(None),
            Stage::Users { after } => {
                let mut query = vec![("limit", PAGE_SIZE.to_string())];
                if let Some(after) = &after {
                    query.push(("starting_after", after.clone()));
                }
                let body = self.get("/users", &query).await?;
                let users: Vec<User> = parse_json(&body, "GET /users")?;
                let page = users_page(users, after.as_deref())?;
                self.stage = match (&page.last, page.full) {
                    (Some(last), true) => Stage::Users {
                        after: Some(last.clone()),
                    },
                    _ => Stage::Memberships { offset: 0 },
                };
                Ok(Some(page.listed))
            }
            Stage::Memberships { offset } => {
                let query = [
                    ("limit", PAGE_SIZE.to_string()),
                    ("offset", offset.to_string()),
                    ("order_by", "+created_at".to_owned()),
                ];
                let body = self.get("/organization_memberships", &query).await?;
                let page: Memberships = parse_json(&body, "GET /organization_memberships")?;
                let (listed, more) = memberships_page(page, offset)?;
                if more {
                    self.stage = Stage::Memberships {
                        offset: offset + PAGE_SIZE,
                    };
                }
                Ok(Some(listed))
            }
        }
    }

    fn requests(&self) -> usize {
        self.requests
    }
}

struct UsersPage {
    listed: Vec<Listed>,
    last: Option<String>,
    full: bool,
}

/// Checks a `GET /users` page: at most `limit` users, and a cursor that
/// moves (the last id differs from the one asked after).
fn users_page(users: Vec<User>, after: Option<&str>) -> Result<UsersPage, PollError> {
    if users.len() > PAGE_SIZE {
        return Err(PollError::Failed(format!(
            "GET /users: {} users in a page of at most {PAGE_SIZE}",
            users.len()
        )));
    }
    let full = users.len() == PAGE_SIZE;
    let last = users.last().map(|u| u.id.clone());
    if full && last.as_deref() == after {
        return Err(PollError::Failed(
            "GET /users: the cursor did not move (the same page again)".into(),
        ));
    }
    let mut listed = Vec::with_capacity(users.len());
    for u in users {
        listed.push(Listed {
            entry: Entry::User {
                user: nonempty(u.id, "GET /users", "id")?,
            },
            provider_id: None,
        });
    }
    Ok(UsersPage { listed, last, full })
}

/// Checks a `GET /organization_memberships` page and says whether another
/// follows: a full page below `total_count`.
fn memberships_page(page: Memberships, offset: usize) -> Result<(Vec<Listed>, bool), PollError> {
    const WHAT: &str = "GET /organization_memberships";
    if page.data.len() > PAGE_SIZE {
        return Err(PollError::Failed(format!(
            "{WHAT}: {} memberships in a page of at most {PAGE_SIZE}",
            page.data.len()
        )));
    }
    if page.total_count < 0 {
        return Err(PollError::Failed(format!("{WHAT}: a negative total_count")));
    }
    let more =
        page.data.len() == PAGE_SIZE && ((offset + PAGE_SIZE) as u64) < page.total_count as u64;
    let mut listed = Vec::with_capacity(page.data.len());
    for m in page.data {
        let Some(user) = m.public_user_data else {
            return Err(PollError::Failed(format!(
                "{WHAT}: membership {} has no public_user_data.user_id",
                m.id
            )));
        };
        listed.push(Listed {
            entry: Entry::Membership {
                organization: nonempty(m.organization.id, WHAT, "organization.id")?,
                user: nonempty(user.user_id, WHAT, "public_user_data.user_id")?,
            },
            provider_id: Some(m.id),
        });
    }
    Ok((listed, more))
}

fn nonempty(value: String, what: &str, field: &str) -> Result<String, PollError> {
    if value.is_empty() || value.len() > 256 {
        return Err(PollError::Failed(format!(
            "{what}: `{field}` must be a string of 1 to 256 characters"
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A membership as `OrganizationMembership` in bapi/2025-11-10.yml
    /// describes it (required fields plus public_user_data).
    const MEMBERSHIPS: &str = r#"{"data":[{"object":"organization_membership","id":"orgmem_1","role":"org:member","permissions":[],"public_metadata":{},"created_at":1,"updated_at":1,"organization":{"object":"organization","id":"org_9","name":"Nine","slug":"nine"},"public_user_data":{"user_id":"user_123","first_name":null,"last_name":null,"profile_image_url":"","image_url":"","has_image":false}}],"total_count":1}"#;

    #[test]
    fn a_documented_membership_page_parses_and_ends_the_listing() {
        let page: Memberships = parse_json(MEMBERSHIPS.as_bytes(), "x").unwrap();
        let (listed, more) = memberships_page(page, 0).unwrap();
        assert!(!more);
        assert_eq!(
            listed,
            [Listed {
                entry: Entry::Membership {
                    organization: "org_9".into(),
                    user: "user_123".into()
                },
                provider_id: Some("orgmem_1".into()),
            }]
        );
    }

    #[test]
    fn a_bare_user_array_parses_and_a_short_page_ends_it() {
        let users: Vec<User> =
            parse_json(br#"[{"id":"user_1","object":"user","extra":[1,2]}]"#, "x").unwrap();
        let page = users_page(users, None).unwrap();
        assert!(!page.full);
        assert_eq!(
            page.listed[0].entry,
            Entry::User {
                user: "user_1".into()
            }
        );
    }

    #[test]
    fn shapes_a_broken_api_sends_fail_the_poll_instead_of_reading_as_empty() {
        // An object where the array belongs, a missing field, garbage.
        for body in [
            &br#"{"data":[]}"#[..],
            br#"[{"object":"user"}]"#,
            b"<html>502</html>",
            br#"[{"id":"user_1"}"#,
        ] {
            assert!(parse_json::<Vec<User>>(body, "GET /users").is_err());
        }
        assert!(parse_json::<Memberships>(br#"{"data":[]}"#, "x").is_err());
        // A membership without a user.
        let page: Memberships = parse_json(
            br#"{"data":[{"id":"orgmem_1","organization":{"id":"org_9"}}],"total_count":1}"#,
            "x",
        )
        .unwrap();
        assert!(memberships_page(page, 0).is_err());
        // A page longer than asked for; a cursor that does not move.
        let many: Vec<User> = (0..=PAGE_SIZE)
            .map(|i| User {
                id: format!("u{i}"),
            })
            .collect();
        assert!(users_page(many, None).is_err());
        let same: Vec<User> = (0..PAGE_SIZE).map(|_| User { id: "u".into() }).collect();
        assert!(users_page(same, Some("u")).is_err());
    }
}
