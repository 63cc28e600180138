//! Reading a request body under the limits every route shares: at most
//! [`MAX_BODY`] bytes, held in one contiguous buffer, and all of it within the
//! body deadline.
//!
//! Collecting hyper's frames as they come would keep every frame's `Bytes`
//! alive, and each one pins the connection read buffer it was split from: a
//! client sending one byte per TCP segment made the server hold ~4 KiB per
//! byte sent. Copying each frame into one buffer and dropping it at once
//! keeps memory at the bytes actually received plus a small constant.

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Body;
use hyper::header::CONTENT_LENGTH;
use hyper::http::request::Parts;
use tokio::time::Instant;

/// Largest accepted request body (webhooks are a few KiB).
pub const MAX_BODY: usize = 1024 * 1024;
/// The 413 answer's reason, the same on every route.
pub(super) const BODY_TOO_LARGE: &str = "request body is larger than 1 MiB";

/// First allocation when the length is declared: covers a typical webhook
/// (a few KiB) in one go without letting a large `Content-Length` alone
/// reserve memory the client never fills.
const FIRST_RESERVE: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// Declared or received more than [`MAX_BODY`].
    TooLarge,
    /// The body was not complete at the deadline.
    TimedOut,
    /// The connection broke or the framing was invalid.
    Broken,
}

/// The declared `Content-Length`, when present and numeric.
pub fn declared_length(parts: &Parts) -> Option<u64> {
    parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// True when a declared length alone already exceeds the cap, so the
/// request can be refused (413) before any credential check or body read.
pub fn declared_too_large(parts: &Parts) -> bool {
    declared_length(parts).is_some_and(|n| n > MAX_BODY as u64)
}

/// Reads the whole body into one buffer of at most [`MAX_BODY`] bytes,
/// giving up at `deadline`.
/// Generic over the body so that a route behind `idempotency::guard`
/// reads the bytes the guard already read through the same code.
pub async fn read<B>(parts: &Parts, body: B, deadline: Instant) -> Result<Vec<u8>, BodyError>
where
    B: Body<Data = Bytes> + Unpin,
{
    if declared_too_large(parts) {
        return Err(BodyError::TooLarge);
    }
    let declared = declared_length(parts).map(|n| usize::try_from(n).unwrap_or(MAX_BODY));
    match tokio::time::timeout_at(deadline, collect(body, declared)).await {
        Ok(result) => result,
        Err(_) => Err(BodyError::TimedOut),
    }
}

async fn collect<B>(mut body: B, declared: Option<usize>) -> Result<Vec<u8>, BodyError>
where
    B: Body<Data = Bytes> + Unpin,
{
    // Never more than the declared length (hyper enforces it) or the cap.
    let limit = declared.map_or(MAX_BODY, |n| n.min(MAX_BODY));
    let mut buf = Vec::with_capacity(limit.min(FIRST_RESERVE));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| BodyError::Broken)?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers carry nothing we use
        };
        let needed = buf.len() + data.len();
        if needed > MAX_BODY {
            return Err(BodyError::TooLarge);
        }
        if needed > buf.capacity() {
            // Doubling keeps copies amortised; capping at `limit` keeps the
            // buffer from outgrowing what may legitimately still arrive.
            let target = (buf.capacity() * 2).max(needed).min(limit.max(needed));
            buf.reserve_exact(target - buf.len());
        }
        buf.extend_from_slice(&data);
        // `data` (and the hyper buffer it points into) is released here.
    }
    Ok(buf)
}
