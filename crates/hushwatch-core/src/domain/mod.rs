//! Pure domain logic: calendars, business-time maths, silence evaluation and
//! the alert state machine. Nothing in here does I/O or reads a clock; every
//! instant is an argument. Adapters and the service depend on this module,
//! never the other way round. Domain types are deliberately not
//! `Serialize`: JSON shapes live at the edges (`commands::explain`,
//! `service::status`), so a wire format never constrains the model.

pub mod ack_link;
pub mod adaptive;
pub mod alert;
pub mod alert_kind;
pub mod calendar;
pub mod crosscheck;
pub mod crosscheck_entra;
pub mod duration;
pub mod event_filter;
pub mod fallback;
pub mod forward;
pub mod forward_ops;
pub mod gap_sketch;
pub mod holidays;
pub mod ics;
pub mod mute;
pub mod notify_cause;
pub mod reconcile;
pub mod silence;
pub mod subscription;
pub mod svix;
pub mod weekly;
