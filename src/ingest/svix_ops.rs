//! Svix operational webhooks: `{"type": …, "data": {…}}` bodies, parsed
//! after the signature verified. Unknown types are `Other` (recorded, never
//! rejected); `ingest.*` variants carry `sourceId` where the others carry
//! `appId` and map to the same events.

use super::payload::PayloadError;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

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

fn req_str(data: &Map<String, Value>, name: &str) -> Result<String, PayloadError> {
    match data.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) | None | Some(Value::Null) => Err(field("is required", name)),
        Some(_) => Err(field("must be a string", name)),
    }
}

fn opt_str(data: &Map<String, Value>, name: &str) -> Option<String> {
    data.get(name).and_then(Value::as_str).map(str::to_string)
}

fn opt_time(data: &Map<String, Value>, name: &str) -> Result<Option<DateTime<Utc>>, PayloadError> {
    match data.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => DateTime::parse_from_rfc3339(s)
            .map(|t| Some(t.with_timezone(&Utc)))
            .map_err(|_| field("must be an RFC 3339 time", name)),
        Some(_) => Err(field("must be an RFC 3339 time", name)),
    }
}

fn endpoint(data: &Map<String, Value>) -> Result<EndpointRef, PayloadError> {
    Ok(EndpointRef {
        app_id: opt_str(data, "appId").or_else(|| opt_str(data, "sourceId")),
        endpoint_id: req_str(data, "endpointId")?,
        endpoint_uid: opt_str(data, "endpointUid"),
    })
}

fn attempt(data: &Map<String, Value>) -> Result<AttemptRef, PayloadError> {
    let last = data.get("lastAttempt").and_then(Value::as_object);
    let status_code = last
        .and_then(|a| a.get("responseStatusCode"))
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .unwrap_or(0);
    let attempt_at = match last {
        Some(a) => opt_time(a, "timestamp")
            .map_err(|_| field("must be an RFC 3339 time", "lastAttempt.timestamp"))?,
        None => None,
    };
    Ok(AttemptRef {
        msg_id: req_str(data, "msgId")?,
        msg_event_id: opt_str(data, "msgEventId"),
        status_code,
        attempt_at,
    })
}

/// Parses a verified operational-webhook body. A known type with missing
/// required fields is an error (the caller records it as `Other` and logs).
pub fn parse_operational(body: &[u8]) -> Result<OpMessage, PayloadError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| PayloadError::NotJson(e.to_string()))?;
    let object = value.as_object().ok_or(PayloadError::NotObject)?;
    let event_type = match object.get("type") {
        Some(Value::String(t)) => t.clone(),
        _ => {
            return Err(PayloadError::Field {
                field: "type".into(),
                reason: "is required".into(),
            })
        }
    };
    let empty = Map::new();
    let data = object
        .get("data")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let base = event_type.strip_prefix("ingest.").unwrap_or(&event_type);
    let event = match base {
        "endpoint.created" => OpEvent::EndpointCreated(endpoint(data)?),
        "endpoint.updated" => OpEvent::EndpointUpdated(endpoint(data)?),
        "endpoint.deleted" => OpEvent::EndpointDeleted(endpoint(data)?),
        "endpoint.enabled" => OpEvent::EndpointEnabled(endpoint(data)?),
        "endpoint.disabled" => OpEvent::EndpointDisabled {
            endpoint: endpoint(data)?,
            fail_since: opt_time(data, "failSince")?,
            // Missing trigger: the open-source server's automatic disable.
            trigger: match data.get("trigger").and_then(Value::as_str) {
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
            task_id: req_str(data, "taskId")?,
            task: opt_str(data, "task").unwrap_or_default(),
            status: opt_str(data, "status").unwrap_or_default(),
        },
        _ => OpEvent::Other,
    };
    Ok(OpMessage { event_type, event })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> OpEvent {
        parse_operational(text.as_bytes()).unwrap().event
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
        assert!(parse_operational(br#"{"type":"endpoint.disabled","data":{}}"#).is_err());
        assert!(parse_operational(b"[]").is_err());
    }
}
