//! The webhook route for streams whose `provider` is not `standard`.
//!
//! Same order as the Standard Webhooks path: everything that can be judged from the head
//! (credentials, signed timestamp) is judged before a body byte is read; the body is read
//! under the shared size cap and deadline; it is parsed only once the sender is
//! authenticated (Entra excepted: its `clientState` is inside the body, see
//! `ingest::providers::entra`); 2xx only after the store committed.

use super::api::Api;
use super::body;
use super::guard::{reject, reject_body};
use super::record::{clip, store_delivery};
use super::reply::{self, Reply};
use crate::config::providers::ProviderConfig;
use crate::config::StreamConfig;
use crate::ingest::providers::{self, Delivery, Rejection, RequestHead};
use crate::store::subscriptions::SubscriptionUpdate;
use crate::store::NewEvent;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::http::request::Parts;
use hyper::{Request, StatusCode};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// `POST /v1/streams/{stream}/webhook` for a native provider. Every provider goes through
/// the same steps of `ingest::providers::Provider`, in the order its doc gives.
pub async fn webhook(
    app: &dyn Api,
    stream: &StreamConfig,
    provider: &ProviderConfig,
    req: Request<Incoming>,
    body_deadline: Instant,
) -> Reply {
    let (parts, incoming) = req.into_parts();
    if body::declared_too_large(&parts) {
        return reject_body(app, stream, body::BodyError::TooLarge);
    }
    let Some(intake) = provider.intake() else {
        return misrouted();
    };
    match intake.handshake(&Head(&parts)) {
        Ok(Some(token)) => {
            if let Err(e) = body::read(&parts, incoming, body_deadline).await {
                return reject_body(app, stream, e);
            }
            return validation_echo(token);
        }
        Ok(None) => {}
        Err(e) => return reject_rejection(app, stream, &e),
    }
    // Head-only authentication.
    let now = app.now();
    if !intake.has_credentials() {
        return not_configured(app, stream, intake.spec().credential_key);
    }
    let checked = match intake.check_head(&Head(&parts), now) {
        Ok(checked) => checked,
        Err(e) => return reject_rejection(app, stream, &e),
    };
    let body = match body::read(&parts, incoming, body_deadline).await {
        Ok(b) => b,
        Err(e) => return reject_body(app, stream, e),
    };
    let verified = match intake.check_body(checked, &Head(&parts), now, &body) {
        Ok(verified) => verified,
        Err(e) => return reject_rejection(app, stream, &e),
    };
    let mut delivery = match intake.parse(&Head(&parts), verified) {
        Ok(delivery) => delivery,
        // Okta and Auth0 batch many events per request, and a record that cannot be read
        // already becomes its own `unknown` event inside the parser. What is left here is
        // a body that cannot be split into records at all (not JSON, not a batch, more
        // than MAX_BATCH records): it is refused whole, never recorded as one anonymous
        // event, which would lose every revocation in it and accept a redelivery again.
        // (Entra checks its clientState again and Google reads its headers inside `parse`,
        // so any failure there is a refusal too.) What the sender then does:
        // - Auth0 log streams retry a failed delivery up to three times, then show the
        //   error in the stream's Health view and restart delivery of errored logs until
        //   the problem is resolved (https://auth0.com/docs/customize/log-streams,
        //   "Delivery attempts"). A 4xx counts as a failure like a 5xx.
        // - Okta event hooks wait 3 s and retry once on a timeout or an error response,
        //   and do not retry a 4xx (https://developer.okta.com/docs/concepts/event-hooks/,
        //   "Timeout and retry"); the failed delivery is in Okta's System Log. A body
        //   Okta cannot make readable by retrying is refused with 400 all the same: the
        //   refusal is counted (outcome "error") and logged here, where a silent 200
        //   would hide it.
        Err(e) if !intake.unreadable_is_one_event() => return reject_rejection(app, stream, &e),
        // One event per request, proved by an HMAC over the body (WorkOS): an unreadable
        // one is still that one arrival, recorded as `unknown`.
        Err(e) => {
            tracing::warn!(stream = %stream.name, provider = provider.name(), error = %super::log_field::Escaped(&e.to_string()), "authenticated body unreadable; recorded as an unknown event");
            Delivery {
                events: vec![providers::ProviderEvent {
                    delivery_id: None,
                    event_type: providers::UNKNOWN_TYPE.to_owned(),
                    event_time: None,
                    subject_ids: Vec::new(),
                    feeds_clock: true,
                }],
                ..Delivery::default()
            }
        }
    };
    // A subscription cannot expire further ahead than its provider lets it live; such a
    // value is forged or broken, and stored it would hold the expiry warning off.
    if let Some(lifetime) = intake.max_lifetime() {
        delivery.expiries.retain(|e| {
            let plausible = crate::domain::subscription::is_plausible(e.expires_at, now, lifetime);
            if !plausible {
                tracing::warn!(stream = %stream.name, provider = provider.name(), "subscription expiry further ahead than the provider allows; not recorded");
            }
            plausible
        });
    }
    let update = (!delivery.expiries.is_empty() || !delivery.lifecycle.is_empty()).then(|| {
        SubscriptionUpdate {
            stream: stream.name.clone(),
            expiries: delivery.expiries.clone(),
            lifecycle: delivery.lifecycle.clone(),
            carried_events: delivery.events.iter().any(|e| e.feeds_clock),
        }
    });
    let digest: [u8; 32] = Sha256::digest(&body).into();
    let config = app.config();
    let audit = config.audit.enabled;
    let signature_verified = intake.signature_verified();
    let mut events = Vec::with_capacity(delivery.events.len());
    // Relay mode (`check` allows it for WorkOS, one event per request, and
    // for Okta and Auth0, which batch): each event forwards its own body,
    // split from the batch by its provider, or the verified body as it came.
    // Should a split ever disagree with the parse, the whole body goes with
    // each event: sent more than once, never lost.
    let split = stream
        .forward
        .as_ref()
        .and_then(|_| intake.relay_bodies(verified))
        .filter(|bodies| {
            let agrees = bodies.len() == delivery.events.len();
            if !agrees {
                tracing::warn!(stream = %stream.name, provider = provider.name(), "relay split disagrees with the parsed batch; each event forwards the whole body");
            }
            agrees
        });
    for (i, e) in delivery.events.into_iter().enumerate() {
        let feeds_clock = e.feeds_clock && stream.event_filter.feeds_clock(&e.event_type);
        let own_body = split.as_ref().map_or(&body[..], |bodies| &bodies[i][..]);
        let forward = match super::ingest::relay_body(
            &config,
            stream,
            e.delivery_id.as_deref().unwrap_or_default(),
            &e.event_type,
            feeds_clock,
            own_body,
        ) {
            Ok(f) => f,
            Err(refused) => return *refused,
        };
        let clock_on_arrival = super::ingest::clock_on_arrival(stream);
        events.push(NewEvent {
            stream: stream.name.clone(),
            delivery_id: e.delivery_id,
            feeds_clock: feeds_clock && clock_on_arrival,
            event_type: clip(e.event_type),
            event_time: e.event_time,
            received_at: now,
            body_sha256: Some(digest),
            channel: "webhook",
            signature_verified,
            subject_ids: e.subject_ids,
            audit,
            access: None,
            forward,
        });
    }
    store_delivery(app, stream, events, update).await
}

/// `GET /v1/streams/{stream}/webhook`: a provider's one-time verification challenge (Okta's).
pub async fn verification(app: &dyn Api, stream: &StreamConfig, req: Request<Incoming>) -> Reply {
    let (parts, _) = req.into_parts();
    let answer = stream
        .ingest
        .provider
        .intake()
        .and_then(|intake| intake.verification(&Head(&parts)));
    match answer {
        None => reply::error(StatusCode::METHOD_NOT_ALLOWED, "use POST"),
        Some(Ok(body)) => reply::text(StatusCode::OK, "application/json", body),
        Some(Err(e)) => reject_rejection(app, stream, &e),
    }
}

/// What the providers see of a request before its body (a local type:
/// `RequestHead` is hushwatch-core's and `Parts` is hyper's).
struct Head<'a>(&'a Parts);

impl RequestHead for Head<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        self.0.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn query(&self) -> Option<&str> {
        self.0.uri.query()
    }
}

fn validation_echo(token: String) -> Reply {
    let mut response = reply::text(StatusCode::OK, "text/plain; charset=utf-8", token);
    // The token is attacker-chosen text: never let a browser sniff it into HTML.
    response.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    debug_assert!(response.headers().contains_key(CONTENT_TYPE));
    response
}

fn not_configured(app: &dyn Api, stream: &StreamConfig, key: &str) -> Reply {
    reject(
        app,
        stream,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        &format!(
            "{} webhooks are not configured for this stream (set ingest.{key})",
            stream.ingest.provider.name()
        ),
    )
}

fn reject_rejection(app: &dyn Api, stream: &StreamConfig, e: &Rejection) -> Reply {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
    reject(app, stream, status, e.outcome(), &e.to_string())
}

/// The standard provider never reaches this module (`ingest::webhook` keeps it); answering
/// 500 rather than panicking keeps a wiring mistake from taking the process down.
fn misrouted() -> Reply {
    reply::error(StatusCode::INTERNAL_SERVER_ERROR, "misrouted request")
}
