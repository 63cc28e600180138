//! Microsoft Graph change notifications (Entra ID users and groups).
//!
//! Wire facts (Microsoft Graph docs: "Set up notifications for changes in resource data",
//! the `changeNotification` and `changeNotificationCollection` resource types, and "Reduce
//! missing subscriptions and change notifications"):
//! - Creating or renewing a subscription first POSTs to the URL with `?validationToken=T`;
//!   the answer must be `200 text/plain` with the decoded `T` within 10 s. The lifecycle URL
//!   gets the same handshake.
//! - Notifications are `{value: [{id?, subscriptionId, subscriptionExpirationDateTime,
//!   clientState, changeType, resource, tenantId, resourceData: {id}}]}`; lifecycle
//!   notifications carry `lifecycleEvent` (`reauthorizationRequired`, …) instead of
//!   `changeType`.
//! - Nothing is signed: the only proof of origin for basic notifications is `clientState`,
//!   the secret given when subscribing (at most 128 characters). It sits inside the body,
//!   so this is the one provider whose body is parsed before it is authenticated; the HTTP
//!   layer's size and time bounds still apply first, and the parse builds only bounded
//!   typed shapes (never a `serde_json::Value`, see `lenient`).
//! - Graph sends no event time: arrival time is all there is.

use chrono::{DateTime, Utc};

use super::lenient::{lenient_record, List, Scalar};
use super::{bad_request, matches_any, push_subject, text};
use super::{Delivery, LifecycleNotice, ProviderEvent, Rejection, SubscriptionExpiry, MAX_BATCH};
use crate::ingest::verified::{HeadChecked, Unverified, Verified};

/// Longest `clientState` Graph accepts when subscribing.
pub const MAX_CLIENT_STATE_LEN: usize = 128;

/// The longest a Graph subscription to users or groups can live: 41,760 minutes (under 29
/// days; https://learn.microsoft.com/en-us/graph/api/resources/subscription, "Subscription
/// lifetime"). A `subscriptionExpirationDateTime` further ahead is forged or broken.
pub const MAX_SUBSCRIPTION_LIFETIME: chrono::TimeDelta = chrono::TimeDelta::minutes(41_760);

/// Longest validation token echoed back.
const MAX_VALIDATION_TOKEN_LEN: usize = 4096;

/// The decoded `validationToken` query parameter, when this request is Graph's handshake.
/// Decoding follows `application/x-www-form-urlencoded`, as Microsoft's own samples do.
pub fn validation_token(query: Option<&str>) -> Result<Option<String>, Rejection> {
    let Some(query) = query else {
        return Ok(None);
    };
    let Some((_, token)) =
        url::form_urlencoded::parse(query.as_bytes()).find(|(name, _)| name == "validationToken")
    else {
        return Ok(None);
    };
    if token.is_empty()
        || token.len() > MAX_VALIDATION_TOKEN_LEN
        || token.chars().any(|c| c.is_control() && c != ' ')
    {
        return Err(bad_request(
            "validationToken must be 1 to 4096 printable characters",
        ));
    }
    Ok(Some(token.into_owned()))
}

lenient_record!(Collection {
    "value" => value: List<Notification, MAX_BATCH>,
});

lenient_record!(Notification {
    "id" => id: Scalar,
    "subscriptionId" => subscription_id: Scalar,
    "subscriptionExpirationDateTime" => expires: Scalar,
    "clientState" => client_state: Scalar,
    "changeType" => change_type: Scalar,
    "lifecycleEvent" => lifecycle_event: Scalar,
    "resource" => resource: Scalar,
    "tenantId" => tenant_id: Scalar,
    "resourceData" => resource_data: ResourceData,
});

lenient_record!(ResourceData { "id" => id: Scalar });

/// Reads a notification collection, keeping only items whose `clientState` matches one of
/// `client_states`. No matching item at all is 401; a collection with some foreign items
/// (another app sharing the URL, or forgeries mixed in) keeps the matching ones.
///
/// The body is unauthenticated until a `clientState` matches, so it is read into the
/// bounded shapes above (at most [`MAX_BATCH`] notifications, a handful of strings each;
/// everything else is skipped without being built) and the credential is checked before
/// any field is judged. Until then every failure, including a body that is not JSON or
/// not a collection, is 401: the sender has not proved who it is, and a 400 would tell a
/// prober that its shape, not its credential, was wrong. That is why it takes an
/// [`Unverified`] body: it is the one reader that authenticates as it reads.
pub fn parse(
    body: Unverified<'_>,
    client_states: &[impl AsRef<str>],
) -> Result<Delivery, Rejection> {
    const UNPROVEN: Rejection =
        Rejection::Unauthorized("no notification carried the configured clientState");
    let root: Collection = serde_json::from_slice(body.0).map_err(|_| UNPROVEN)?;
    let matching: Vec<(usize, &Notification)> = root
        .value
        .items
        .iter()
        .enumerate()
        .filter(|(_, item)| matches_any(client_states, item.client_state.as_str().unwrap_or("")))
        .collect();
    if matching.is_empty() {
        return Err(UNPROVEN);
    }
    if root.value.overflow {
        // Refused whole so Graph redelivers: cutting the batch would drop changes silently.
        return Err(bad_request(format!(
            "field `value` has more than {MAX_BATCH} notifications"
        )));
    }
    let mut delivery = Delivery::default();
    for (i, item) in matching {
        read_item(item, i, &mut delivery)?;
    }
    Ok(delivery)
}

fn read_item(item: &Notification, i: usize, delivery: &mut Delivery) -> Result<(), Rejection> {
    let field = |name: &str| format!("value[{i}].{name}");
    let subscription = text(&item.subscription_id).ok_or_else(|| {
        bad_request(format!(
            "field `{}` must be a non-empty string",
            field("subscriptionId")
        ))
    })?;
    if !item.expires.is_unset() {
        let expires_at = item
            .expires
            .as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .ok_or_else(|| {
                bad_request(format!(
                    "field `{}` is not an RFC 3339 time",
                    field("subscriptionExpirationDateTime")
                ))
            })?
            .with_timezone(&Utc);
        if !delivery
            .expiries
            .iter()
            .any(|e| e.subscription == subscription)
        {
            delivery.expiries.push(SubscriptionExpiry {
                subscription: subscription.clone(),
                expires_at,
            });
        }
    }
    if let Some(event) = text(&item.lifecycle_event) {
        delivery.lifecycle.push(LifecycleNotice {
            subscription,
            event,
        });
        return Ok(());
    }
    let change = text(&item.change_type).ok_or_else(|| {
        bad_request(format!(
            "field `{}` must be a non-empty string",
            field("changeType")
        ))
    })?;
    let resource = item.resource.as_str().unwrap_or("");
    let mut subject_ids = Vec::new();
    let kind = resource_kind(resource);
    let subject_kind = match kind.as_str() {
        "user" => "user_id",
        "group" => "group_id",
        _ => "resource_id",
    };
    push_subject(&mut subject_ids, subject_kind, &item.resource_data.id);
    push_subject(&mut subject_ids, "tenant_id", &item.tenant_id);
    delivery.events.push(ProviderEvent {
        delivery_id: text(&item.id),
        event_type: format!("{kind}.{change}"),
        event_time: None,
        subject_ids,
        feeds_clock: true,
    });
    Ok(())
}

/// `Users/{id}` → `user`, `groups/{id}/members` → `group`: the collection named first,
/// lower-cased and made singular, so types read like other providers' (`user.deleted`).
fn resource_kind(resource: &str) -> String {
    let first = resource
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    let singular = first.strip_suffix('s').unwrap_or(&first);
    if singular.is_empty() || !singular.bytes().all(|b| b.is_ascii_alphanumeric()) {
        "resource".to_owned()
    } else {
        singular.to_owned()
    }
}

/// `provider = "entra"`: the subscription's `clientState`, and how early to warn of expiry.
pub const SPEC: super::Spec = super::Spec {
    name: "entra",
    keys: &["client_state", "expiry_warning"],
    credential_key: "client_state",
    // Subscriptions for users and groups live at most about 29 days; a day's warning leaves
    // time to renew during business hours.
    expiry_warning: Some(chrono::TimeDelta::hours(24)),
    intake: |values| {
        let (client_state, refused) = super::accept_each(values, |value| {
            if value.len() > MAX_CLIENT_STATE_LEN {
                Err(format!(
                    "is longer than {MAX_CLIENT_STATE_LEN} characters, which the provider refuses"
                ))
            } else {
                Ok(value)
            }
        });
        (std::sync::Arc::new(Entra { client_state }), refused)
    },
};

/// An Entra stream's configured `clientState` values.
pub struct Entra {
    pub client_state: Vec<String>,
}

impl super::Provider for Entra {
    fn spec(&self) -> &'static super::Spec {
        &SPEC
    }

    fn has_credentials(&self) -> bool {
        !self.client_state.is_empty()
    }

    /// Graph's subscription handshake carries no credential at all; echoing the token proves
    /// only that this URL answers, which is what Graph asks.
    fn handshake(&self, head: &dyn super::RequestHead) -> Result<Option<String>, Rejection> {
        validation_token(head.query())
    }

    /// Nothing in the head: the `clientState` is inside the body, checked by `check_body`.
    fn check_head(
        &self,
        _head: &dyn super::RequestHead,
        _now: DateTime<Utc>,
    ) -> Result<HeadChecked, Rejection> {
        Ok(HeadChecked::passed())
    }

    /// The body is its own credential: it is verified when [`parse`] finds a notification
    /// carrying a configured `clientState` (and refused, 401, when none does). `parse`
    /// reads it again afterwards, keeping only the matching notifications; the body is
    /// under the shared size cap, and a second read of a Graph batch is cheaper than a
    /// type that lets a reader skip the proof.
    fn check_body<'b>(
        &self,
        _checked: HeadChecked,
        _head: &dyn super::RequestHead,
        _now: DateTime<Utc>,
        body: &'b [u8],
    ) -> Result<Verified<'b>, Rejection> {
        parse(Unverified(body), &self.client_state)?;
        Ok(Verified::proved(body))
    }

    fn parse(
        &self,
        _head: &dyn super::RequestHead,
        body: Verified<'_>,
    ) -> Result<Delivery, Rejection> {
        parse(Unverified(body.bytes()), &self.client_state)
    }

    fn max_lifetime(&self) -> Option<chrono::TimeDelta> {
        Some(MAX_SUBSCRIPTION_LIFETIME)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &[u8], client_states: &[&str]) -> Result<Delivery, Rejection> {
        super::parse(Unverified(body), client_states)
    }

    /// Shaped like the basic notification examples in the Graph docs (ids invented).
    const NOTIFICATION: &str = r##"{"value":[
      {"subscriptionId":"7f105c7d-2dc5-4530-97cd-4e7ae6534c07",
       "subscriptionExpirationDateTime":"2026-12-20T18:23:45.9356913Z",
       "changeType":"deleted","resource":"Users/8bc8d3b4-6e1a-4d0b-9f3e-1c1a2b3c4d5e",
       "resourceData":{"@odata.type":"#Microsoft.Graph.User","@odata.id":"Users/8bc8d3b4-6e1a-4d0b-9f3e-1c1a2b3c4d5e","id":"8bc8d3b4-6e1a-4d0b-9f3e-1c1a2b3c4d5e"},
       "clientState":"secretClientValue","tenantId":"84bd8158-6d4d-4958-8b9f-9d6445542f95"},
      {"subscriptionId":"other","changeType":"updated","resource":"Groups/g1",
       "resourceData":{"id":"g1"},"clientState":"someone-else"}
    ]}"##;

    #[test]
    fn validation_token_is_form_decoded() {
        let token = validation_token(Some("validationToken=Validation%3A+Testing%20client+app"))
            .unwrap()
            .unwrap();
        assert_eq!(token, "Validation: Testing client app");
        assert_eq!(validation_token(Some("other=1")).unwrap(), None);
        assert_eq!(validation_token(None).unwrap(), None);
        assert!(validation_token(Some("validationToken=")).is_err());
    }

    #[test]
    fn matching_items_become_events_and_expiries() {
        let delivery = parse(NOTIFICATION.as_bytes(), &["secretClientValue"]).unwrap();
        assert_eq!(delivery.events.len(), 1, "the foreign item is dropped");
        let event = &delivery.events[0];
        assert_eq!(event.event_type, "user.deleted");
        assert_eq!(event.event_time, None);
        assert_eq!(event.delivery_id, None);
        assert_eq!(
            event.subject_ids[0],
            (
                "user_id".to_owned(),
                "8bc8d3b4-6e1a-4d0b-9f3e-1c1a2b3c4d5e".to_owned()
            )
        );
        assert_eq!(delivery.expiries.len(), 1);
        assert_eq!(
            delivery.expiries[0].expires_at.to_rfc3339(),
            "2026-12-20T18:23:45.935691300+00:00"
        );
    }

    #[test]
    fn no_matching_client_state_is_unauthorized() {
        let err = parse(NOTIFICATION.as_bytes(), &["wrong"]).unwrap_err();
        assert_eq!(err.status(), 401);
        assert!(!err.to_string().contains("secretClientValue"));
    }

    #[test]
    fn lifecycle_notices_are_not_identity_events() {
        let body = r#"{"value":[{"subscriptionId":"s1","subscriptionExpirationDateTime":"2026-12-02T00:00:00Z",
            "lifecycleEvent":"reauthorizationRequired","clientState":"cs","tenantId":"t"}]}"#;
        let delivery = parse(body.as_bytes(), &["cs"]).unwrap();
        assert!(delivery.events.is_empty());
        assert_eq!(
            delivery.lifecycle,
            vec![LifecycleNotice {
                subscription: "s1".to_owned(),
                event: "reauthorizationRequired".to_owned()
            }]
        );
        assert_eq!(delivery.expiries.len(), 1);
    }

    #[test]
    fn resource_kinds_read_like_event_types() {
        assert_eq!(resource_kind("Users/abc"), "user");
        assert_eq!(resource_kind("/groups/g1/members"), "group");
        assert_eq!(resource_kind(""), "resource");
        assert_eq!(resource_kind("we!rd/1"), "resource");
    }
}
