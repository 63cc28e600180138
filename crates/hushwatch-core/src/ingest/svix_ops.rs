//! Svix operational webhooks: `{"type": …, "data": {…}}` bodies, parsed
//! after the signature verified. Unknown types are `Other` (recorded, never
//! rejected); `ingest.*` variants carry `sourceId` where the others carry
//! `appId` and map to the same events.
//!
//! Read into typed shapes that keep only the fields below and skip the rest without
//! building it (`ingest::providers::lenient`), never into a `serde_json::Value`, whose
//! size can be two orders of magnitude above the body's.

use super::payload::PayloadError;
use super::verified::Verified;
use crate::ingest::providers::lenient::{lenient_record, Scalar};
use chrono::{DateTime, Utc};

lenient_record!(OpBody { "type" => kind: Scalar, "data" => data: OpData });
lenient_record!(OpData {
    "appId" => app_id: Scalar,
    "sourceId" => source_id: Scalar,
    "endpointId" => endpoint_id: Scalar,
    "endpointUid" => endpoint_uid: Scalar,
    "failSince" => fail_since: Scalar,
    "trigger" => trigger: Scalar,
    "msgId" => msg_id: Scalar,
    "msgEventId" => msg_event_id: Scalar,
    "taskId" => task_id: Scalar,
    "task" => task: Scalar,
    "status" => status: Scalar,
    "lastAttempt" => last_attempt: LastAttempt,
});
lenient_record!(LastAttempt {
    "responseStatusCode" => response_status_code: Scalar,
    "timestamp" => timestamp: Scalar,
});

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointRef {
    /// `appId`, or `sourceId` for Svix Ingest.
    pub app_id: Option<String>,
    pub endpoint_id: String,
    pub endpoint_uid: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRef {
    pub msg_id: String,
    pub msg_event_id: Option<String>,
    /// 0 means no HTTP response came back (timeout, refused).
    pub status_code: u16,
    pub attempt_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    Automatic,
    Manual,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpEvent {
    EndpointCreated(EndpointRef),
    EndpointUpdated(EndpointRef),
    EndpointDeleted(EndpointRef),
    EndpointEnabled(EndpointRef),
    EndpointDisabled {
        endpoint: EndpointRef,
        fail_since: Option<DateTime<Utc>>,
        trigger: Trigger,
    },
    AttemptFailing {
        endpoint: EndpointRef,
        attempt: AttemptRef,
    },
    AttemptExhausted {
        endpoint: EndpointRef,
        attempt: AttemptRef,
    },
    AttemptRecovered {
        endpoint: EndpointRef,
        attempt: AttemptRef,
    },
    BackgroundTaskFinished {
        task_id: String,
        task: String,
        status: String,
    },
    Other,
}

impl OpEvent {
    /// The endpoint the event is about, if any.
    pub fn endpoint(&self) -> Option<&EndpointRef> {
        match self {
            OpEvent::EndpointDisabled { endpoint, .. }
            | OpEvent::EndpointEnabled(endpoint)
            | OpEvent::EndpointUpdated(endpoint)
            | OpEvent::EndpointCreated(endpoint)
            | OpEvent::EndpointDeleted(endpoint)
            | OpEvent::AttemptFailing { endpoint, .. }
            | OpEvent::AttemptRecovered { endpoint, .. }
            | OpEvent::AttemptExhausted { endpoint, .. } => Some(endpoint),
            OpEvent::BackgroundTaskFinished { .. } | OpEvent::Other => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpMessage {
    pub event_type: String,
    pub event: OpEvent,
}

fn field(reason: &str, name: &str) -> PayloadError {
    PayloadError::Field {
        field: format!("data.{name}"),
        reason: reason.to_string(),
    }
}

fn req_str(value: &Scalar, name: &str) -> Result<String, PayloadError> {
    match value {
        Scalar::Str(s) if !s.is_empty() => Ok(s.clone()),
        Scalar::Str(_) | Scalar::Absent | Scalar::Null => Err(field("is required", name)),
        _ => Err(field("must be a string", name)),
    }
}

fn opt_str(value: &Scalar) -> Option<String> {
    value.as_str().map(str::to_string)
}

fn opt_time(value: &Scalar, name: &str) -> Result<Option<DateTime<Utc>>, PayloadError> {
    match value {
        Scalar::Absent | Scalar::Null => Ok(None),
        Scalar::Str(s) => DateTime::parse_from_rfc3339(s)
            .map(|t| Some(t.with_timezone(&Utc)))
            .map_err(|_| field("must be an RFC 3339 time", name)),
        _ => Err(field("must be an RFC 3339 time", name)),
    }
}

fn endpoint(data: &OpData) -> Result<EndpointRef, PayloadError> {
    Ok(EndpointRef {
        app_id: opt_str(&data.app_id).or_else(|| opt_str(&data.source_id)),
        endpoint_id: req_str(&data.endpoint_id, "endpointId")?,
        endpoint_uid: opt_str(&data.endpoint_uid),
    })
}

fn attempt(data: &OpData) -> Result<AttemptRef, PayloadError> {
    let last = &data.last_attempt;
    let status_code = match last.response_status_code {
        Scalar::Int(code) => u16::try_from(code).unwrap_or(0),
        _ => 0,
    };
    let attempt_at = opt_time(&last.timestamp, "lastAttempt.timestamp")?;
    Ok(AttemptRef {
        msg_id: req_str(&data.msg_id, "msgId")?,
        msg_event_id: opt_str(&data.msg_event_id),
        status_code,
        attempt_at,
    })
}

/// Parses a verified operational-webhook body. A known type with missing
/// required fields is an error (the caller records it as `Other` and logs).
pub fn parse_operational(body: Verified<'_>) -> Result<OpMessage, PayloadError> {
    let root: OpBody =
        serde_json::from_slice(body.bytes()).map_err(|e| PayloadError::NotJson(e.to_string()))?;
    if !root.is_object {
        return Err(PayloadError::NotObject);
    }
    let event_type = match &root.kind {
        Scalar::Str(t) => t.clone(),
        _ => {
            return Err(PayloadError::Field {
                field: "type".into(),
                reason: "is required".into(),
            })
        }
    };
    // A `data` that is not an object reads as an empty one, as before.
    let data = &root.data;
    let base = event_type.strip_prefix("ingest.").unwrap_or(&event_type);
    let event = match base {
        "endpoint.created" => OpEvent::EndpointCreated(endpoint(data)?),
        "endpoint.updated" => OpEvent::EndpointUpdated(endpoint(data)?),
        "endpoint.deleted" => OpEvent::EndpointDeleted(endpoint(data)?),
        "endpoint.enabled" => OpEvent::EndpointEnabled(endpoint(data)?),
        "endpoint.disabled" => OpEvent::EndpointDisabled {
            endpoint: endpoint(data)?,
            fail_since: opt_time(&data.fail_since, "failSince")?,
            // Missing trigger: the open-source server's automatic disable.
            trigger: match data.trigger.as_str() {
                Some("manual") => Trigger::Manual,
                _ => Trigger::Automatic,
            },
        },
        "message.attempt.failing" => OpEvent::AttemptFailing {
            endpoint: endpoint(data)?,
            attempt: attempt(data)?,
        },
        "message.attempt.exhausted" => OpEvent::AttemptExhausted {
            endpoint: endpoint(data)?,
            attempt: attempt(data)?,
        },
        "message.attempt.recovered" => OpEvent::AttemptRecovered {
            endpoint: endpoint(data)?,
            attempt: attempt(data)?,
        },
        "background_task.finished" => OpEvent::BackgroundTaskFinished {
            task_id: req_str(&data.task_id, "taskId")?,
            task: opt_str(&data.task).unwrap_or_default(),
            status: opt_str(&data.status).unwrap_or_default(),
        },
        _ => OpEvent::Other,
    };
    Ok(OpMessage { event_type, event })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> OpEvent {
        parse_operational(Verified::proved(text.as_bytes()))
            .unwrap()
            .event
    }

    #[test]
    fn disabled_defaults_to_automatic_and_reads_fail_since() {
        let e = parse(
            r#"{"type":"endpoint.disabled","data":{"appId":"app_1","endpointId":"ep_1","failSince":"2025-03-03T09:12:44Z"}}"#,
        );
        let OpEvent::EndpointDisabled {
            endpoint,
            fail_since,
            trigger,
        } = e
        else {
            panic!("{e:?}")
        };
        assert_eq!(endpoint.endpoint_id, "ep_1");
        assert_eq!(trigger, Trigger::Automatic);
        assert_eq!(
            fail_since.unwrap().to_rfc3339(),
            "2025-03-03T09:12:44+00:00"
        );
        let manual = parse(
            r#"{"type":"endpoint.disabled","data":{"appId":"a","endpointId":"ep_1","failSince":null,"trigger":"manual"}}"#,
        );
        assert!(matches!(
            manual,
            OpEvent::EndpointDisabled {
                trigger: Trigger::Manual,
                fail_since: None,
                ..
            }
        ));
    }

    #[test]
    fn ingest_variants_use_source_id() {
        let e = parse(
            r#"{"type":"ingest.message.attempt.exhausted","data":{"sourceId":"src_1","endpointId":"ep_2","msgId":"msg_1","lastAttempt":{"id":"atmpt_1","responseStatusCode":0,"timestamp":"2025-03-04T12:47:51Z"}}}"#,
        );
        let OpEvent::AttemptExhausted { endpoint, attempt } = e else {
            panic!("{e:?}")
        };
        assert_eq!(endpoint.app_id.as_deref(), Some("src_1"));
        assert_eq!(attempt.status_code, 0);
    }

    #[test]
    fn unknown_types_are_other_and_broken_known_types_are_errors() {
        assert_eq!(
            parse(r#"{"type":"message.attempt.log","data":[]}"#),
            OpEvent::Other
        );
        assert!(parse_operational(Verified::proved(
            br#"{"type":"endpoint.disabled","data":{}}"#
        ))
        .is_err());
        assert!(parse_operational(Verified::proved(b"[]")).is_err());
    }
}
