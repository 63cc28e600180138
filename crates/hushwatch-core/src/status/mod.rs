//! The status document (`/v1/status`) as types, and the two ways a person
//! reads it: the HTML page at `GET /` and `hushwatch status` in a terminal.
//! Everything here is pure: document and timelines in, text out.

pub mod crosscheck;
pub mod format;
pub mod model;
pub mod page;
pub mod relay;
pub mod terminal;
pub mod timeline;
