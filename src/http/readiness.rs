//! `/readyz`: ready means the config loaded, the state database accepts a
//! write, and its folder has room for more. The probe is unauthenticated, so
//! its cost must not grow with the request rate: the answer is computed at
//! most once per [`CACHE_FOR`] and shared by every probe in between, and
//! computing it writes one tiny SQLite row (no scratch file).

use super::api::Api;
use std::path::Path;
use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// How long one computed answer is reused.
pub const CACHE_FOR: Duration = Duration::from_secs(1);
/// Longest a check may take before it counts as "not ready".
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Room the data folder must have for ingest to count as healthy. SQLite
/// can reuse WAL space for a tiny probe write even on a full disk, so the
/// write alone would say "ready" too often.
const HEADROOM: u64 = 256 * 1024;

/// Why the service is not ready; the text is for the log, not the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReady {
    Storage(String),
    Slow,
}

#[derive(Default)]
pub struct Readiness {
    /// The last answer and when it was computed. Held across the check, so
    /// concurrent probes wait for one computation instead of each running
    /// their own.
    last: Mutex<Option<(Instant, Result<(), NotReady>)>>,
}

impl Readiness {
    pub fn new() -> Readiness {
        Readiness::default()
    }

    /// The cached answer if fresh, else a new one (counted and logged once
    /// per computation when it fails).
    pub async fn check(&self, app: &dyn Api) -> Result<(), NotReady> {
        let mut last = self.last.lock().await;
        if let Some((at, answer)) = &*last {
            if at.elapsed() < CACHE_FOR {
                return answer.clone();
            }
        }
        let answer = compute(app).await;
        if let Err(e) = &answer {
            app.metrics().storage_errors.inc();
            match e {
                NotReady::Storage(reason) => {
                    tracing::error!(error = %reason, "readiness probe: storage is not writable; hushwatch cannot record events")
                }
                NotReady::Slow => {
                    tracing::error!("readiness probe: storage did not answer in time")
                }
            }
        }
        *last = Some((Instant::now(), answer.clone()));
        answer
    }
}

async fn compute(app: &dyn Api) -> Result<(), NotReady> {
    let dir = app.config().server.data_dir.clone();
    let checks = async {
        app.probe_storage()
            .await
            .map_err(|e| NotReady::Storage(e.to_string()))?;
        tokio::task::spawn_blocking(move || headroom(&dir))
            .await
            .map_err(|e| NotReady::Storage(e.to_string()))?
            .map_err(NotReady::Storage)
    };
    match tokio::time::timeout(PROBE_TIMEOUT, checks).await {
        Ok(answer) => answer,
        Err(_) => Err(NotReady::Slow),
    }
}

/// Free space for unprivileged writers, from statvfs: no bytes written.
fn headroom(dir: &Path) -> Result<(), String> {
    let stat = rustix::fs::statvfs(dir).map_err(|e| format!("data_dir: statvfs failed: {e}"))?;
    let free = stat.f_bavail.saturating_mul(stat.f_frsize);
    if free < HEADROOM {
        return Err(format!(
            "data_dir has {} KiB free; at least {} KiB are needed",
            free / 1024,
            HEADROOM / 1024
        ));
    }
    Ok(())
}
