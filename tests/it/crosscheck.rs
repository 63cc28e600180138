//! Issue #45: `hushwatch crosscheck` through the real binary against a
//! local Clerk Backend API answering in the shapes of Clerk's OpenAPI
//! specification (clerk/openapi-specs, bapi/2025-11-10.yml: `GET /users` a
//! bare array, `GET /organization_memberships` `{"data", "total_count"}`).

use crate::common::Workdir;
use crate::support::{config, run_cli, Answer, Receiver};

const KEY: &str = "sk_test_it_crosscheck_never_printed";

fn users(ids: &[&str]) -> Answer {
    let page: Vec<serde_json::Value> = ids
        .iter()
        .map(|id| serde_json::json!({"id": id, "object": "user", "banned": false}))
        .collect();
    Answer::StatusBody(200, serde_json::Value::from(page).to_string())
}

fn memberships(pairs: &[(&str, &str)]) -> Answer {
    let data: Vec<serde_json::Value> = pairs
        .iter()
        .map(|(org, user)| {
            serde_json::json!({
                "object": "organization_membership", "id": format!("orgmem_{org}_{user}"),
                "role": "org:member", "permissions": [], "public_metadata": {},
                "created_at": 1, "updated_at": 1,
                "organization": {"object": "organization", "id": org},
                "public_user_data": {"user_id": user, "first_name": null, "last_name": null,
                                     "profile_image_url": "", "image_url": "", "has_image": false}
            })
        })
        .collect();
    Answer::StatusBody(
        200,
        serde_json::json!({"data": data, "total_count": pairs.len()}).to_string(),
    )
}

#[test]
fn a_membership_clerk_removed_without_a_webhook_is_reported_once_naming_user_and_org() {
    let both = [("org_9", "user_1"), ("org_9", "user_2")];
    let one = [("org_9", "user_1")];
    // Two requests per poll (users, then memberships), four polls.
    let api = Receiver::start(vec![
        users(&["user_1", "user_2"]),
        memberships(&both),
        users(&["user_1", "user_2"]),
        memberships(&one),
        users(&["user_1", "user_2"]),
        memberships(&one),
        users(&["user_1", "user_2"]),
        memberships(&one),
    ]);
    let extra = format!(
        "[streams.identity.crosscheck]\nprovider = \"clerk\"\napi_url = \"{}\"\napi_key = \"{KEY}\"\ngrace = \"0s\"\n",
        api.url("/v1")
    );
    let work = Workdir::new(&config(&[], &extra, ""));
    let poll = || {
        run_cli(
            &["crosscheck", "--stream", "identity", "--format", "json"],
            &work.config_path(),
        )
    };

    let (code, out, err) = poll();
    assert_eq!(code, 0, "baseline: {out}{err}");
    let baseline: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(baseline["baseline"], true);

    let (code, out, err) = poll();
    assert_eq!(code, 0, "the removal waits one poll: {out}{err}");
    let second: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(second["pending"], 1, "{second}");

    let (code, out, err) = poll();
    assert_eq!(code, 1, "{out}{err}");
    let third: serde_json::Value = serde_json::from_str(&out).unwrap();
    let findings = third["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{third}");
    let f = &findings[0];
    assert_eq!(f["direction"], "revoke");
    assert_eq!(f["event_type"], "organizationMembership.deleted");
    assert_eq!(f["subject"], "user_2");
    assert_eq!(f["organization"], "org_9");
    assert_eq!(f["provider_id"], "orgmem_org_9_user_2");
    assert_eq!(f["new"], true);

    let (code, out, err) = poll();
    assert_eq!(code, 0, "reported once: {out}{err}");

    let requests = api.received();
    assert!(requests.len() >= 8, "{requests:?}");
    assert_eq!(
        requests[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert!(
        requests[0].path.starts_with("/v1/users?limit=500"),
        "{}",
        requests[0].path
    );
    assert!(
        requests[1]
            .path
            .starts_with("/v1/organization_memberships?limit=500&offset=0"),
        "{}",
        requests[1].path
    );
}

#[test]
fn a_refused_key_fails_the_poll_without_printing_the_key() {
    let api = Receiver::start(vec![Answer::StatusBody(
        401,
        r#"{"errors":[{"message":"Invalid authentication"}]}"#.into(),
    )]);
    let extra = format!(
        "[streams.identity.crosscheck]\nprovider = \"clerk\"\napi_url = \"{}\"\napi_key = \"{KEY}\"\n",
        api.url("/v1")
    );
    let work = Workdir::new(&config(&[], &extra, ""));
    let (code, out, err) = run_cli(&["crosscheck", "--stream", "identity"], &work.config_path());
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("the Clerk API: the API refused the key (HTTP 401)"),
        "{err}"
    );
    assert!(!format!("{out}{err}").contains(KEY));
}
