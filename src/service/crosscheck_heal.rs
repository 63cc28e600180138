//! Heal (issue #45, `[streams.X.crosscheck] heal = true`, relay streams
//! only): what a cross-check found missed is delivered to the app through
//! the relay, so the app learns what the provider never told it.
//!
//! - **WorkOS**: the logged event is the webhook that never arrived. It is
//!   recorded as received on the stream under its own id, channel
//!   `crosscheck` (audit chain, revocation index, silence clock: the same
//!   ingest path as a webhook), and forwarded with the stored body bytes.
//!   Its id shares the webhook channel's dedup ids (`store::ops::
//!   dedup_channel`), so the real webhook arriving late, a second heal or a
//!   second replica's heal is a duplicate: the app sees the event once.
//! - **Okta**: the logged `LogEvent` (as the System Log returned it, byte
//!   for byte) is wrapped in an Event Hook envelope ([`okta_body`]), the
//!   body Okta would have posted, recorded under the event's own `uuid`
//!   (the id the hook would have carried, so a late hook is a duplicate),
//!   channel `crosscheck`, and forwarded with `Hushwatch-Origin:
//!   crosscheck` and the stream's `Authorization` value. The envelope is
//!   hushwatch's, not a hook Okta sent, so it does not move the silence
//!   clock: a stream whose hooks stopped stays silent.
//! - **Auth0** (issue #48): the logged entry as the Log Stream record
//!   `{"log_id", "data": {…}}`, under its `log_id` (the Log Stream's dedup
//!   id), forwarded with `Hushwatch-Origin: crosscheck` and the stream's
//!   `Authorization` value; like Okta's, it does not move the silence clock.
//! - **Clerk** keeps no event log, so a revocation is built from the
//!   finding ([`clerk_body`]): `organizationMembership.deleted` with the
//!   membership as `data`, or `user.deleted`. It carries a `webhook-id`
//!   derived from the stream and finding key ([`clerk_delivery_id`]), the
//!   same on every retry and replica, and reaches the app with
//!   `Hushwatch-Origin: crosscheck`. It never moves the silence clock (the
//!   provider sent nothing). A made-up event is only ever a revocation: a
//!   missed grant stays a page for a person.
//!
//! Each heal is one ingest commit (audit entry, forward row) followed by
//! marking the finding `healed`; a crash between the two heals again under
//! the same id, which the store answers as a duplicate, so the app sees
//! one event and the finding is marked on the retry.

use super::core::Core;
use crate::config::forward::{ForwardClock, ForwardConfig};
use crate::config::StreamConfig;
use crate::domain::crosscheck::{Direction, Finding, Provider, When};
use crate::ingest::providers::{auth0, okta, workos};
use crate::ingest::verified::Verified;
use crate::store::forward::ForwardBody;
use crate::store::{EventOutcome, NewEvent, StoreError};
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

/// The channel a healed event is recorded under (audit log, `audit
/// subject`), and the `Hushwatch-Origin` of an event hushwatch built.
pub const CHANNEL: &str = "crosscheck";

/// One finding to heal, with the logged event's body when the provider
/// keeps a log (WorkOS); `None` for Clerk.
#[derive(Debug, Clone)]
pub struct HealItem {
    pub finding: Finding,
    pub body: Option<Vec<u8>>,
}

/// The path a healed event takes into the store: the one every webhook
/// takes (`App::ingest`: stored, audited, its forward row queued, the
/// stream's clock moved), so the app receives it exactly as a delivery.
#[async_trait::async_trait]
pub trait Ingest: Send + Sync {
    async fn ingest(&self, events: Vec<NewEvent>) -> Result<Vec<EventOutcome>, StoreError>;
}

/// Heals `items` on `stream` when its `[crosscheck]` has `heal = true` and
/// it relays; returns the keys marked healed by this call. A finding that
/// cannot be healed (a Clerk grant, a WorkOS finding without its body, a
/// body that does not parse as the event named) is skipped and logged: it
/// stays open, so its page stays until a person acknowledges it. A storage
/// error stops the heal; what was healed before it stays healed, and the
/// rest stays open and is healed after the next poll (a WorkOS finding
/// from the logged body stored beside it).
pub async fn heal(
    core: &Core,
    intake: &dyn Ingest,
    stream: &str,
    items: &[HealItem],
) -> Result<Vec<String>, StoreError> {
    let config = core.config();
    let Some(settings) = config.streams.get(stream) else {
        return Ok(Vec::new());
    };
    let (Some(forward), Some(crosscheck)) = (&settings.forward, &settings.crosscheck) else {
        return Ok(Vec::new());
    };
    if !crosscheck.heal {
        return Ok(Vec::new());
    }
    let mut healed = Vec::new();
    for item in items {
        let event = match healing_event(
            &config,
            settings,
            forward,
            crosscheck.provider,
            item,
            core.clock.now(),
        ) {
            Ok(e) => e,
            Err(reason) => {
                // The finding's key names its subject; the log names the
                // event type and the provider's id only.
                tracing::warn!(stream = %stream, event_type = %item.finding.event_type, provider_id = ?item.finding.provider_id, reason, "crosscheck: finding not healed; it stays open");
                continue;
            }
        };
        // Accepted or a duplicate (healed before a crash, or the webhook
        // came after all): either way the app has it, or will, once.
        let delivery_id = event.delivery_id.clone().unwrap_or_default();
        intake.ingest(vec![event]).await?;
        if core
            .store
            .crosscheck_settle_finding(stream.to_owned(), item.finding.key.clone(), true)
            .await?
        {
            core.metrics
                .crosscheck
                .healed
                .with_label_values(&[stream])
                .inc();
            tracing::info!(stream = %stream, delivery_id = %delivery_id, event_type = %item.finding.event_type, "crosscheck: healed; the missed event goes to the app");
            healed.push(item.finding.key.clone());
        }
    }
    Ok(healed)
}

/// The event that heals `item`, or why it cannot be healed.
fn healing_event(
    config: &crate::config::Config,
    stream: &StreamConfig,
    forward: &ForwardConfig,
    provider: Provider,
    item: &HealItem,
    now: DateTime<Utc>,
) -> Result<NewEvent, &'static str> {
    let f = &item.finding;
    let veil = config.store.sealer.veil();
    let (delivery_id, event_type, event_time, subject_ids, body, feeds_clock, origin) =
        match provider {
            Provider::Workos => {
                let body = item
                    .body
                    .as_ref()
                    .ok_or("the logged event's body is not at hand")?;
                // The provider's own API listed this event (over TLS, with the
                // stream's credentials): that is what vouches for it here.
                let parsed = workos::parse(Verified::fetched_from_provider_api(body))
                    .map_err(|_| "the logged event does not read as a WorkOS event")?;
                let event = parsed
                    .events
                    .into_iter()
                    .next()
                    .ok_or("the logged event is empty")?;
                let id = event.delivery_id.clone().unwrap_or_default();
                if f.provider_id.as_deref() != Some(id.as_str()) {
                    return Err("the logged event's id is not the finding's");
                }
                let feeds = stream.event_filter.feeds_clock(&event.event_type);
                (
                    id,
                    event.event_type,
                    event.event_time,
                    event.subject_ids,
                    body.clone(),
                    feeds,
                    None,
                )
            }
            Provider::Okta => {
                let logged = item
                    .body
                    .as_ref()
                    .ok_or("the logged event's body is not at hand")?;
                let uuid = f
                    .provider_id
                    .as_deref()
                    .ok_or("the finding has no Okta uuid")?;
                let body = okta_body(&stream.name, uuid, logged)
                    .ok_or("the logged event is not a JSON object")?;
                // Okta's System Log API listed the event; hushwatch wrapped it.
                let parsed = okta::parse(Verified::fetched_from_provider_api(&body))
                    .map_err(|_| "the envelope does not read as an Okta event hook")?;
                let event = parsed
                    .events
                    .into_iter()
                    .next()
                    .ok_or("the envelope is empty")?;
                if event.delivery_id.as_deref() != Some(uuid) || event.event_type == "unknown" {
                    return Err("the logged event's uuid or type is not the finding's");
                }
                (
                    uuid.to_owned(),
                    event.event_type,
                    event.event_time,
                    event.subject_ids,
                    body,
                    false,
                    Some(CHANNEL.to_owned()),
                )
            }
            Provider::Entra => return Err("Entra streams do not relay; a finding stays a page"),
            Provider::Auth0 => {
                // The Log Stream record (`{"log_id", "data"}`) the stream
                // should have received, recorded under its own log_id so
                // the real record arriving late is a duplicate. hushwatch
                // wrapped it, so, as for Okta, it does not move the
                // silence clock: a paused Log Stream stays silent.
                let body = item
                    .body
                    .as_ref()
                    .ok_or("the logged event's body is not at hand")?;
                // Auth0's Management API listed the record.
                let parsed = auth0::parse(Verified::fetched_from_provider_api(body))
                    .map_err(|_| "the logged event does not read as an Auth0 log record")?;
                let event = parsed
                    .events
                    .into_iter()
                    .next()
                    .ok_or("the logged event is empty")?;
                let id = event.delivery_id.clone().unwrap_or_default();
                if f.provider_id.as_deref() != Some(id.as_str()) || event.event_type == "unknown" {
                    return Err("the logged event's id or type is not the finding's");
                }
                (
                    id,
                    event.event_type,
                    event.event_time,
                    event.subject_ids,
                    body.clone(),
                    false,
                    Some(CHANNEL.to_owned()),
                )
            }
            Provider::Clerk => {
                if f.direction != Direction::Revoke {
                    return Err("a missed grant is never made up; it stays a page");
                }
                let user = veil.reveal(&f.subject).into_owned();
                let organization = f
                    .organization
                    .as_deref()
                    .map(|o| veil.reveal(o).into_owned());
                let body = clerk_body(f, &user, organization.as_deref())
                    .ok_or("only a removed membership or user is healed")?;
                let mut ids = vec![("user_id".to_owned(), user)];
                if let Some(org) = organization {
                    ids.push(("organization_id".to_owned(), org));
                }
                (
                    clerk_delivery_id(&stream.name, &f.key),
                    f.event_type.clone(),
                    Some(latest(f.when)),
                    ids,
                    body,
                    // The provider sent nothing: the stream's silence is
                    // still the provider's.
                    false,
                    Some(CHANNEL.to_owned()),
                )
            }
        };
    let sealed = config
        .store
        .sealer
        .seal(&stream.name, &delivery_id, &body)
        .map_err(|_| "the body could not be sealed")?;
    let clock_on_arrival = forward.clock == ForwardClock::Received;
    Ok(NewEvent {
        stream: stream.name.clone(),
        delivery_id: Some(delivery_id),
        feeds_clock: feeds_clock && clock_on_arrival,
        event_type: event_type.clone(),
        event_time,
        received_at: now,
        body_sha256: Some(Sha256::digest(&body).into()),
        channel: CHANNEL,
        signature_verified: false,
        subject_ids,
        audit: config.audit.enabled,
        access: None,
        forward: Some(ForwardBody {
            sealed,
            order: forward.order,
            revocation: config.audit.classifier.revokes(&event_type),
            moves_clock: feeds_clock && forward.clock == ForwardClock::Delivered,
            origin,
            templated: stream.templated,
        }),
    })
}

/// The latest instant the change can have happened.
fn latest(when: When) -> DateTime<Utc> {
    match when {
        When::At(t) | When::Between(_, t) => t,
    }
}

/// The `webhook-id` of the revocation built for a Clerk finding: derived
/// from the stream and the finding's key only, so every retry, restart and
/// replica sends the same id and the app's dedup holds.
pub fn clerk_delivery_id(stream: &str, key: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"hushwatch-heal\0")
        .chain_update(stream)
        .chain_update([0u8])
        .chain_update(key)
        .finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("msg_crosscheck_{hex}")
}

/// The Event Hook Okta would have posted for one logged event: the
/// envelope of an Okta event hook delivery (developer.okta.com/docs/concepts/event-hooks/,
/// "Sample event delivery payload": `eventType: "com.okta.event_hook"`,
/// `eventTypeVersion`, `cloudEventsVersion`, `source`, `eventId`,
/// `eventTime`, `contentType`, `data.events[]`) around the `LogEvent`
/// bytes as the System Log returned them. `eventId` is derived from the
/// stream and the uuid and `eventTime` is the event's `published`, so a
/// heal built again (a restart, another replica) is the same body. `None`
/// when `logged` is not a JSON object.
pub fn okta_body(stream: &str, uuid: &str, logged: &[u8]) -> Option<Vec<u8>> {
    let raw: Box<serde_json::value::RawValue> = serde_json::from_slice(logged).ok()?;
    if !raw.get().trim_start().starts_with('{') {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Published {
        published: Option<String>,
    }
    let published = serde_json::from_str::<Published>(raw.get())
        .ok()
        .and_then(|p| p.published);
    let digest = Sha256::new()
        .chain_update(b"hushwatch-heal-okta\0")
        .chain_update(stream)
        .chain_update([0u8])
        .chain_update(uuid)
        .finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    // UUID-shaped, as Okta's own eventIds are.
    let event_id = format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    );
    let head = serde_json::json!({
        "eventType": "com.okta.event_hook",
        "eventTypeVersion": "1.0",
        "cloudEventsVersion": "0.1",
        "source": "hushwatch-crosscheck",
        "eventId": event_id,
        "eventTime": published,
        "contentType": "application/json",
    })
    .to_string();
    // `head` is an object serde_json wrote: splice `data` in before its `}`.
    let head = head.strip_suffix('}')?;
    Some(format!(r#"{head},"data":{{"events":[{}]}}}}"#, raw.get()).into_bytes())
}

/// A Clerk webhook body for a removal the listing showed: the shape of
/// Clerk's `organizationMembership.deleted` (`data`: an
/// `OrganizationMembership`) and `user.deleted` (`data`: a
/// `DeletedObject`), clerk/openapi-specs webhooks/2025-04-15.yml. Only what
/// the listing told is filled in: the membership id, its organization and
/// user; role, permissions, metadata and `instance_id` are not known to
/// hushwatch and are left out rather than made up (the app tells this
/// event apart by `Hushwatch-Origin`). `timestamp` is Unix milliseconds,
/// as Clerk sends it, at the poll that saw the removal.
pub fn clerk_body(f: &Finding, user: &str, organization: Option<&str>) -> Option<Vec<u8>> {
    let data = match (f.event_type.as_str(), organization) {
        ("organizationMembership.deleted", Some(org)) => {
            let mut m = serde_json::json!({
                "object": "organization_membership",
                "organization": {"object": "organization", "id": org},
                "public_user_data": {"user_id": user},
            });
            if let Some(id) = &f.provider_id {
                m["id"] = serde_json::Value::from(id.as_str());
            }
            m
        }
        ("user.deleted", None) => {
            serde_json::json!({"object": "user", "id": user, "deleted": true})
        }
        _ => return None,
    };
    let body = serde_json::json!({
        "object": "event",
        "type": f.event_type,
        "timestamp": latest(f.when).timestamp_millis(),
        "data": data,
    });
    Some(body.to_string().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::app::App;

    fn finding(event_type: &str, org: Option<&str>, direction: Direction) -> Finding {
        let t = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        Finding {
            key: "clerk:removed:membership:org_9:user_2:1".into(),
            direction,
            event_type: event_type.into(),
            subject: "user_2".into(),
            organization: org.map(str::to_owned),
            provider_id: org.map(|_| "orgmem_2".to_owned()),
            when: When::Between(t, t + chrono::TimeDelta::minutes(15)),
        }
    }

    #[test]
    fn an_okta_finding_is_wrapped_in_an_event_hook_envelope_keeping_the_log_event_as_logged() {
        // A LogEvent as the System Log returns it
        // (developer.okta.com/docs/reference/api/system-log/, "LogEvent object").
        let logged = br#"{"uuid": "uuid-7", "published": "2026-12-01T10:00:00.000Z", "eventType": "user.lifecycle.deactivate", "outcome": {"result": "SUCCESS"}, "target": [{"id": "00u7", "type": "User"}]}"#;
        let body = okta_body("identity", "uuid-7", logged).unwrap();
        assert_eq!(
            okta_body("identity", "uuid-7", logged).unwrap(),
            body,
            "stable"
        );
        let text = std::str::from_utf8(&body).unwrap();
        assert!(
            text.contains(std::str::from_utf8(logged).unwrap()),
            "{text}"
        );
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["eventType"], "com.okta.event_hook");
        assert_eq!(v["eventTypeVersion"], "1.0");
        assert_eq!(v["contentType"], "application/json");
        assert_eq!(v["eventTime"], "2026-12-01T10:00:00.000Z");
        assert_eq!(v["eventId"].as_str().unwrap().len(), 36);
        assert_ne!(
            okta_body("other", "uuid-7", logged).unwrap(),
            body,
            "the eventId is per stream"
        );
        // What the stream's own Okta parser reads from it: the one event.
        let delivery = okta::parse(Verified::fetched_from_provider_api(&body)).unwrap();
        assert_eq!(delivery.events.len(), 1);
        assert_eq!(delivery.events[0].delivery_id.as_deref(), Some("uuid-7"));
        assert_eq!(delivery.events[0].event_type, "user.lifecycle.deactivate");
        assert_eq!(
            delivery.events[0].subject_ids,
            vec![("user_id".to_owned(), "00u7".to_owned())]
        );
        assert_eq!(okta_body("identity", "uuid-7", b"[1]"), None);
        assert_eq!(okta_body("identity", "uuid-7", b"not json"), None);
    }

    #[test]
    fn a_clerk_membership_removal_becomes_an_organization_membership_deleted_in_clerk_s_shape() {
        let f = finding(
            "organizationMembership.deleted",
            Some("org_9"),
            Direction::Revoke,
        );
        let body: serde_json::Value =
            serde_json::from_slice(&clerk_body(&f, "user_2", Some("org_9")).unwrap()).unwrap();
        assert_eq!(body["type"], "organizationMembership.deleted");
        assert_eq!(body["object"], "event");
        assert_eq!(body["timestamp"], 1_800_000_900_000_i64);
        assert_eq!(body["data"]["object"], "organization_membership");
        assert_eq!(body["data"]["id"], "orgmem_2");
        assert_eq!(body["data"]["organization"]["id"], "org_9");
        assert_eq!(body["data"]["public_user_data"]["user_id"], "user_2");
        // What hushwatch reads of it is what it would read of Clerk's own.
        let text = body.to_string();
        let facts = crate::ingest::payload::webhook_facts(Verified::fetched_from_provider_api(
            text.as_bytes(),
        ))
        .unwrap();
        assert_eq!(
            facts.event_type.as_deref(),
            Some("organizationMembership.deleted")
        );
    }

    #[test]
    fn a_deleted_user_becomes_user_deleted_and_nothing_else_is_made_up() {
        let f = finding("user.deleted", None, Direction::Revoke);
        let body: serde_json::Value =
            serde_json::from_slice(&clerk_body(&f, "user_2", None).unwrap()).unwrap();
        assert_eq!(
            body["data"],
            serde_json::json!({"object": "user", "id": "user_2", "deleted": true})
        );
        assert!(clerk_body(
            &finding(
                "organizationMembership.created",
                Some("org_9"),
                Direction::Grant
            ),
            "user_2",
            Some("org_9")
        )
        .is_none());
        assert!(clerk_body(
            &finding("user.created", None, Direction::Grant),
            "user_2",
            None
        )
        .is_none());
    }

    #[test]
    fn the_webhook_id_is_stable_per_stream_and_finding() {
        let a = clerk_delivery_id("identity", "clerk:x");
        assert_eq!(a, clerk_delivery_id("identity", "clerk:x"));
        assert_ne!(a, clerk_delivery_id("identity", "clerk:y"));
        assert_ne!(a, clerk_delivery_id("other", "clerk:x"));
        assert!(
            a.starts_with("msg_crosscheck_") && a.len() == 15 + 32,
            "{a}"
        );
    }

    // ------------------------------------------------- through a real App

    use crate::clock::ManualClock;
    use crate::store::testdb::TestDb;
    use std::sync::Arc;

    const APP_SECRET: &str = "whsec_+zPUtq55XAYZ3Ur7mJIL5Mb+uBY8OctQ";

    fn config(provider: &str) -> crate::config::Config {
        config_with(provider, "")
    }

    fn config_with(provider: &str, extra: &str) -> crate::config::Config {
        let (ingest, forward_secret) = match provider {
            "clerk" => (
                "webhook_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"".to_owned(),
                APP_SECRET,
            ),
            _ => (
                "provider = \"workos\"\nwebhook_secret = \"workos_provider_secret\"".to_owned(),
                "app_workos_secret",
            ),
        };
        let text = format!(
            "[streams.identity]\ncalendar = \"always\"\nsilence_threshold = \"6h\"\n\
             [streams.identity.ingest]\n{ingest}\n\
             [streams.identity.forward]\nurl = \"http://127.0.0.1:9/hook\"\nsecret = \"{forward_secret}\"\n\
             [streams.identity.crosscheck]\nprovider = \"{provider}\"\napi_key = \"k\"\nheal = true\n{extra}"
        );
        crate::config::parse(&text, std::path::Path::new("."), &|_| None).unwrap()
    }

    async fn app(provider: &str) -> (App, TestDb) {
        app_with(config(provider)).await
    }

    async fn app_with(config: crate::config::Config) -> (App, TestDb) {
        let db = TestDb::sqlite();
        let clock = Arc::new(ManualClock::new(
            DateTime::from_timestamp(1_800_001_000, 0).unwrap(),
        ));
        let store = db.open_with_clock(clock.clone()).await;
        let app = App::new(config, store, clock).await.unwrap();
        (app, db)
    }

    async fn claims(app: &App) -> Vec<crate::store::forward::ForwardClaim> {
        let (claims, _) = app
            .store()
            .claim_forwards(
                "test".into(),
                app.store().now(),
                chrono::TimeDelta::minutes(1),
                crate::store::forward::ClaimRoom::uniform(10),
            )
            .await
            .unwrap();
        claims
    }

    #[tokio::test]
    async fn a_clerk_revocation_is_queued_once_with_its_origin_and_the_finding_is_healed_once() {
        let (app, _db) = app("clerk").await;
        // The stream's cross-check row, as a poll leaves it.
        app.store()
            .crosscheck_finish_poll(
                "identity".into(),
                None,
                crate::store::crosscheck::PollEnd::Failure {
                    error: "a poll".into(),
                    refused: false,
                },
            )
            .await
            .unwrap();
        let f = finding(
            "organizationMembership.deleted",
            Some("org_9"),
            Direction::Revoke,
        );
        let grant = Finding {
            key: "clerk:grant".into(),
            ..finding(
                "organizationMembership.created",
                Some("org_9"),
                Direction::Grant,
            )
        };
        app.store()
            .crosscheck_record_findings(
                "identity".into(),
                vec![f.clone(), grant.clone()],
                app.store().now(),
            )
            .await
            .unwrap();
        let items = [
            HealItem {
                finding: f.clone(),
                body: None,
            },
            HealItem {
                finding: grant.clone(),
                body: None,
            },
        ];
        assert_eq!(
            heal(&app, &app, "identity", &items).await.unwrap(),
            std::slice::from_ref(&f.key)
        );
        // Again (a crash before the settle, a second replica): the same id
        // is a duplicate, nothing more is queued or counted.
        assert!(heal(&app, &app, "identity", &items)
            .await
            .unwrap()
            .is_empty());
        let queued = claims(&app).await;
        assert_eq!(queued.len(), 1, "{queued:?}");
        let c = &queued[0];
        assert_eq!(c.delivery_id, clerk_delivery_id("identity", &f.key));
        assert_eq!(c.event_type, "organizationMembership.deleted");
        assert_eq!(c.origin.as_deref(), Some("crosscheck"));
        let open = app
            .store()
            .crosscheck_findings("identity".into(), true, 10)
            .await
            .unwrap();
        assert_eq!(open.len(), 1, "the grant stays open (paged, never made up)");
        assert_eq!(open[0].finding.key, grant.key);
        let row = app
            .store()
            .crosscheck_state("identity".into())
            .await
            .unwrap();
        assert_eq!(row.map(|r| r.healed), Some(1));
        assert_eq!(
            app.metrics
                .crosscheck
                .healed
                .with_label_values(&["identity"])
                .get(),
            1
        );
        // The heal is in the audit log under the subject, beside webhooks.
        let entries = app
            .store()
            .subject_entries("user_2".into(), None, 10)
            .await
            .unwrap();
        assert!(
            entries
                .iter()
                .any(|e| e.channel == "crosscheck"
                    && e.event_type == "organizationMembership.deleted"),
            "{entries:?}"
        );
    }

    #[tokio::test]
    async fn a_workos_event_is_recorded_and_queued_under_its_own_id_and_its_late_webhook_is_a_duplicate(
    ) {
        let (app, _db) = app("workos").await;
        let body = br#"{"object":"event","id":"event_01MISSED","event":"dsync.user.deleted","data":{"object":"directory_user","id":"directory_user_1","user_id":"user_7","state":"inactive"},"created_at":"2027-01-15T08:00:00.000Z"}"#;
        let t = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let f = Finding {
            key: "workos:event_01MISSED".into(),
            direction: Direction::Revoke,
            event_type: "dsync.user.deleted".into(),
            subject: "user_7".into(),
            organization: None,
            provider_id: Some("event_01MISSED".into()),
            when: When::At(t),
        };
        app.store()
            .crosscheck_record_findings("identity".into(), vec![f.clone()], t)
            .await
            .unwrap();
        let item = HealItem {
            finding: f.clone(),
            body: Some(body.to_vec()),
        };
        // Without its body, or with another event's, nothing is healed.
        let bodiless = HealItem {
            finding: f.clone(),
            body: None,
        };
        assert!(heal(&app, &app, "identity", &[bodiless])
            .await
            .unwrap()
            .is_empty());
        let other = HealItem {
            finding: Finding {
                provider_id: Some("event_other".into()),
                ..f.clone()
            },
            body: Some(body.to_vec()),
        };
        assert!(heal(&app, &app, "identity", &[other])
            .await
            .unwrap()
            .is_empty());
        assert_eq!(
            heal(&app, &app, "identity", &[item]).await.unwrap(),
            std::slice::from_ref(&f.key)
        );
        let queued = claims(&app).await;
        assert_eq!(queued.len(), 1);
        assert_eq!(queued[0].delivery_id, "event_01MISSED");
        assert_eq!(queued[0].origin, None, "the provider's own event");
        assert_eq!(queued[0].body.bytes, body.to_vec());
        // The webhook WorkOS retries later is the same event: a duplicate.
        let mut late = crate::store::testdb::event(
            "identity",
            Some("event_01MISSED"),
            "dsync.user.deleted",
            t.timestamp_millis(),
        );
        late.channel = "webhook";
        let outcomes = app.ingest(vec![late]).await.unwrap();
        assert_eq!(outcomes, [crate::store::EventOutcome::Duplicate]);
        assert_eq!(
            app.store()
                .crosscheck_received("identity".into(), vec!["event_01MISSED".into()])
                .await
                .unwrap(),
            [true]
        );
    }

    /// A WorkOS finding keeps its logged body in the store, so a heal that
    /// did not happen after its poll (a storage error, a crash) happens
    /// after the next one; a body that does not open is never sent.
    #[tokio::test]
    async fn a_workos_finding_left_unhealed_by_its_poll_is_healed_after_the_next_from_its_stored_body(
    ) {
        let (app, _db) = app("workos").await;
        let config = app.config();
        let cc = config.streams["identity"]
            .crosscheck
            .as_deref()
            .unwrap()
            .clone();
        let t = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let logged = |id: &str| {
            let body = format!(
                r#"{{"object":"event","id":"{id}","event":"dsync.user.deleted","data":{{"object":"directory_user","id":"directory_user_1","user_id":"user_7","state":"inactive"}},"created_at":"2027-01-15T08:00:00.000Z"}}"#
            );
            let f = Finding {
                key: format!("workos:{id}"),
                direction: Direction::Revoke,
                event_type: "dsync.user.deleted".into(),
                subject: "user_7".into(),
                organization: None,
                provider_id: Some(id.into()),
                when: When::At(t),
            };
            (f, body.into_bytes())
        };
        let (good, good_body) = logged("event_01KEPT");
        let (forged, _) = logged("event_01FORGED");
        let sealer = &config.store.sealer;
        let sealed = sealer.seal("identity", "event_01KEPT", &good_body).unwrap();
        // Another event's body stored under this finding does not heal it.
        let moved = sealer.seal("identity", "event_01KEPT", &good_body).unwrap();
        app.store()
            .crosscheck_record_logged("identity".into(), vec![(good.clone(), sealed)], t)
            .await
            .unwrap();
        app.store()
            .crosscheck_record_logged("identity".into(), vec![(forged.clone(), moved)], t)
            .await
            .unwrap();
        super::super::crosscheck::heal_after_poll(&app, &app, "identity", &cc)
            .await
            .unwrap();
        let queued = claims(&app).await;
        assert_eq!(queued.len(), 1);
        assert_eq!(queued[0].delivery_id, "event_01KEPT");
        let open = app
            .store()
            .crosscheck_findings("identity".into(), true, 10)
            .await
            .unwrap();
        assert_eq!(
            open.iter()
                .map(|s| s.finding.key.as_str())
                .collect::<Vec<_>>(),
            ["workos:event_01FORGED"],
            "healed once; the one whose body is not its own stays open"
        );
        super::super::crosscheck::heal_after_poll(&app, &app, "identity", &cc)
            .await
            .unwrap();
        assert!(claims(&app).await.is_empty(), "nothing healed twice");
    }

    #[tokio::test]
    async fn with_an_encryption_key_a_finding_stored_under_veiled_ids_heals_with_the_plain_ids() {
        let (app, _db) = app_with(config_with(
            "clerk",
            "[store]\nencryption_key = \"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\"\n",
        ))
        .await;
        let config = app.config();
        let veil = config.store.sealer.veil();
        let mut f = finding(
            "organizationMembership.deleted",
            Some("org_9"),
            Direction::Revoke,
        );
        // As the poll stores it under a key: subject and organization veiled.
        f.subject = veil.hide("user_2");
        f.organization = Some(veil.hide("org_9"));
        f.key = format!(
            "clerk:removed:membership:{}/{}@1",
            veil.hide("org_9"),
            f.subject
        );
        app.store()
            .crosscheck_record_findings("identity".into(), vec![f.clone()], app.store().now())
            .await
            .unwrap();
        let item = HealItem {
            finding: f.clone(),
            body: None,
        };
        assert_eq!(
            heal(&app, &app, "identity", &[item]).await.unwrap().len(),
            1
        );
        let queued = claims(&app).await;
        let body = config
            .store
            .sealer
            .open(queued[0].row(), &queued[0].body)
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["data"]["public_user_data"]["user_id"], "user_2");
        assert_eq!(body["data"]["organization"]["id"], "org_9");
    }
}
